//! The in-process fixtures of the level-3 tests: a chip callable `y = x + 1` over f32
//! tensors whose kernel is chosen per task by its scalar (`0` runs at once, a gate's
//! [`Gate::func`] waits for that gate to open, [`FAIL`] reports fatal code 42), small chip
//! configurations, worker builders and f32 views of host memory.

use std::sync::Arc;
use std::time::Duration;

use simpler_abi::*;
use simpler_device::Topology;
use simpler_host::{
    ArgDirection, ArgSpec, CallableSpec, CodeImage, KernelSpec, Signature, WorkerConfig,
};
pub use simpler_test_support::eventually;
pub use simpler_test_support::gate::Gate;
use simpler_test_support::gate::{add_one_kernels, GATES};
use simpler_test_support::kernel::fatal_42;
use simpler_worker::*;

/// The scalar that selects the failing kernel (after the gated ones).
pub const FAIL: u64 = 1 + GATES as u64;

/// One AIV task over the whole tensors, kernel `scalars[0]`.
unsafe extern "C-unwind" fn orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args and its own table.
    unsafe {
        let a = &*args;
        // SAFETY: TaskDesc is plain data; all-zero is a valid start.
        let mut d: Box<TaskDesc> = Box::new(std::mem::zeroed());
        d.size = std::mem::size_of::<TaskDesc>() as u32;
        d.kernel_ids = [NO_KERNEL; 3];
        d.block_num = 1;
        d.kernel_ids[LANE_AIV0] = a.scalars[0] as i32;
        for (i, tag) in [
            (0, TensorArgType::Input),
            (1, TensorArgType::OutputExisting),
        ] {
            d.tensors[d.tensor_count as usize] = a.tensors[i];
            d.tags[d.tensor_count as usize] = tag as u32;
            d.tensor_count += 1;
        }
        ((*ops).submit_task)((*ops).runtime, &*d, std::ptr::null_mut())
    }
}

/// The chip callable `name`: `y = x + 1` (x In, y Out, f32; a u64 scalar picks the
/// kernel).
pub fn add_one_callable(name: &str) -> Callable {
    let arg = |name: &str, direction| ArgSpec {
        name: name.into(),
        direction,
        dtype: DataType::Float32,
        shape: None,
    };
    let failing = std::iter::once((FAIL as u32, fatal_42 as KernelEntry));
    Callable::Chip(Arc::new(CallableSpec {
        name: name.into(),
        signature: Signature::new(vec![
            arg("x", ArgDirection::In),
            arg("y", ArgDirection::Out),
            ArgSpec {
                name: "func".into(),
                direction: ArgDirection::Scalar,
                dtype: DataType::Uint64,
                shape: None,
            },
        ])
        .unwrap(),
        orchestration: CodeImage::Orchestration(orch),
        kernels: add_one_kernels()
            .chain(failing)
            .map(|(func_id, f)| KernelSpec {
                func_id,
                core_type: CoreType::Aiv,
                image: CodeImage::Kernel(f),
                name: None,
            })
            .collect(),
        runtime: None,
    }))
}

/// A small sim chip.
pub fn chip_config() -> WorkerConfig {
    WorkerConfig {
        topology: Topology {
            clusters: 1,
            aicpu_threads: 3,
        },
        heap_size: 1 << 20,
        run_timeout: Duration::from_secs(30),
        ..WorkerConfig::default()
    }
}

/// Options for `chips` small chips and `subs` sub worker threads.
pub fn options(chips: usize, subs: usize) -> WorkerOptions {
    WorkerOptions {
        chips: vec![chip_config(); chips],
        sub_workers: if subs == 0 {
            SubWorkers::None
        } else {
            SubWorkers::Threads(subs)
        },
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    }
}

/// A closure sub callable.
pub fn closure(f: impl Fn(&SubArgs<'_>) -> Result<(), String> + Send + Sync + 'static) -> Callable {
    Callable::SubClosure(Arc::new(f))
}

/// An initialized worker with the chip callable `add_one` registered (when it has chips).
pub fn worker(chips: usize, subs: usize) -> (Worker, Option<CallableHandle>) {
    let w = Worker::new(options(chips, subs)).unwrap();
    let h = (chips > 0).then(|| w.register(add_one_callable("add_one")).unwrap());
    w.init().unwrap();
    (w, h)
}

/// A shared buffer holding `values`, and a 1-D f32 tensor over all of it.
pub fn f32_buffer(w: &Worker, values: &[f32]) -> (Arc<SharedRegion>, Tensor) {
    let region = w.create_buffer(values.len() as u64 * 4).unwrap();
    write_f32(&*region, 0, values);
    let memory: Arc<dyn HostMemory> = region.clone();
    let t = Tensor::new(
        Memory::Host(memory),
        &[values.len() as u64],
        DataType::Float32,
    )
    .unwrap();
    (region, t)
}

/// A 1-D f32 view of `len` elements at element `at` of `t`'s memory.
pub fn block(t: &Tensor, at: u64, len: u64) -> Tensor {
    Tensor::view(t.memory().clone(), at * 4, &[len], &[1], DataType::Float32).unwrap()
}

/// Writes `values` at element `at` of host memory `m`.
pub fn write_f32(m: &dyn HostMemory, at: usize, values: &[f32]) {
    assert!((at + values.len()) * 4 <= m.len());
    // SAFETY: in bounds (checked); no task touches the memory while a test writes it.
    let dst =
        unsafe { std::slice::from_raw_parts_mut(m.as_ptr().cast::<f32>().add(at), values.len()) };
    dst.copy_from_slice(values);
}

/// The f32 elements of host memory `m`.
pub fn read_f32(m: &dyn HostMemory) -> Vec<f32> {
    // SAFETY: `m` maps `len()` bytes; reads race only with tasks a test waits for.
    unsafe { std::slice::from_raw_parts(m.as_ptr().cast::<f32>(), m.len() / 4) }.to_vec()
}

/// The f32 elements of tensor `t` (contiguous, host).
pub fn tensor_f32(t: &Tensor) -> Vec<f32> {
    let Memory::Host(m) = t.memory() else {
        panic!("a host tensor")
    };
    let all = read_f32(&**m);
    let at = t.byte_offset() as usize / 4;
    all[at..at + t.numel() as usize].to_vec()
}

/// Task arguments of `add_one`: x (INPUT), y (OUTPUT), kernel `func`.
pub fn add_args(x: &Tensor, y: &Tensor, func: u64) -> TaskArgs {
    TaskArgs::new()
        .tensor(x.clone(), Tag::Input)
        .tensor(y.clone(), Tag::Output)
        .scalar(func)
}
