//! Sub tasks over f64 tensors: a sub callable reads an f64 input and writes an f64 output
//! through `SubArgs::read_f64` / `write_f64`, with the engine ordering a second sub task
//! after it by the output's tag; the f64 accessors refuse a tensor of another dtype,
//! naming the argument.

use std::sync::Arc;

use simpler_abi::DataType;
use simpler_worker::*;

fn f64_buffer(w: &Worker, values: &[f64]) -> (Arc<SharedRegion>, Tensor) {
    let region = w.create_buffer(values.len() as u64 * 8).unwrap();
    // SAFETY: the region maps `len()` bytes, page aligned; no task runs on it yet.
    unsafe {
        std::slice::from_raw_parts_mut(region.as_ptr().cast::<f64>(), values.len())
            .copy_from_slice(values)
    };
    let memory: Arc<dyn HostMemory> = region.clone();
    let t = Tensor::new(
        Memory::Host(memory),
        &[values.len() as u64],
        DataType::Float64,
    )
    .unwrap();
    (region, t)
}

fn read(region: &SharedRegion) -> Vec<f64> {
    // SAFETY: as in `f64_buffer`; the run that wrote it is over.
    unsafe { std::slice::from_raw_parts(region.as_ptr().cast::<f64>(), region.len() / 8) }.to_vec()
}

fn worker() -> Worker {
    Worker::new(WorkerOptions {
        sub_workers: SubWorkers::Threads(2),
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    })
    .unwrap()
}

#[test]
fn a_sub_task_reads_and_writes_f64_tensors() {
    let w = worker();
    // y = x * 3 + 1e-300 (a value no f32 holds), then z = y - x.
    let affine = w
        .register(Callable::SubClosure(Arc::new(|a: &SubArgs<'_>| {
            let x = a.read_f64(0)?;
            a.write_f64(1, &x.iter().map(|v| v * 3.0 + 1e-300).collect::<Vec<_>>())
        })))
        .unwrap();
    let diff = w
        .register(Callable::SubClosure(Arc::new(|a: &SubArgs<'_>| {
            let (x, y) = (a.read_f64(0)?, a.read_f64(1)?);
            a.write_f64(2, &y.iter().zip(&x).map(|(y, x)| y - x).collect::<Vec<_>>())
        })))
        .unwrap();
    w.init().unwrap();
    let xs = [1.0f64 / 3.0, -2.5e200, 0.1, 7.0];
    let (_x, x) = f64_buffer(&w, &xs);
    let (y_mem, y) = f64_buffer(&w, &[0.0; 4]);
    let (z_mem, z) = f64_buffer(&w, &[0.0; 4]);
    w.run(|o| {
        o.submit_sub(
            &affine,
            TaskArgs::new()
                .tensor(x.clone(), Tag::Input)
                .tensor(y.clone(), Tag::OutputExisting),
        )?;
        o.submit_sub(
            &diff,
            TaskArgs::new()
                .tensor(x.clone(), Tag::Input)
                .tensor(y.clone(), Tag::Input)
                .tensor(z.clone(), Tag::OutputExisting),
        )?;
        Ok(())
    })
    .unwrap();
    let want_y: Vec<f64> = xs.iter().map(|v| v * 3.0 + 1e-300).collect();
    assert_eq!(read(&y_mem), want_y);
    let want_z: Vec<f64> = want_y.iter().zip(&xs).map(|(y, x)| y - x).collect();
    assert_eq!(read(&z_mem), want_z);
    assert_eq!(DataType::from_name("f64"), Some(DataType::Float64));
    assert_eq!(DataType::Float64.size_bytes(), 8);
    w.close().unwrap();
}

#[test]
fn the_f64_accessors_refuse_another_dtype_naming_the_argument() {
    let w = worker();
    let h = w
        .register(Callable::SubClosure(Arc::new(|a: &SubArgs<'_>| {
            a.read_f64(0).map(|_| ())
        })))
        .unwrap();
    w.init().unwrap();
    let region = w.create_buffer(16).unwrap();
    let memory: Arc<dyn HostMemory> = region.clone();
    let f32s = Tensor::new(Memory::Host(memory), &[4], DataType::Float32).unwrap();
    let e = w
        .run(|o| {
            o.submit_sub(&h, TaskArgs::new().tensor(f32s.clone(), Tag::Input))?;
            Ok(())
        })
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("argument 0 holds f32, not f64"), "{text}");
    w.close().unwrap();
}
