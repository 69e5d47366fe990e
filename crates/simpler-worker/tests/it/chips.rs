//! Several chips of one level-3 worker (thread isolation, sim): blocks computed on four
//! chips and checked by a sub task; device memory filled and read back through copy tasks;
//! chip groups that start only once every target chip is idle and fail with any member.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use simpler_abi::DataType;
use simpler_host::CallConfig;
use simpler_worker::*;

#[test]
fn four_chips_compute_blocks_and_a_sub_task_checks_the_whole() {
    const B: u64 = 256;
    let w = Worker::new(options(4, 1)).unwrap();
    let chip = w.register(add_one_callable("add_one")).unwrap();
    let seen: Arc<Mutex<Option<Vec<f32>>>> = Arc::default();
    let seen2 = seen.clone();
    let check = w
        .register(closure(move |a| {
            *seen2.lock().unwrap() = Some(a.read_f32(0)?);
            Ok(())
        }))
        .unwrap();
    w.init().unwrap();
    let x_values: Vec<f32> = (0..4 * B).map(|i| i as f32 * 0.5).collect();
    let (_xr, x) = f32_buffer(&w, &x_values);
    let (yr, y) = f32_buffer(&w, &vec![0.0; 4 * B as usize]);
    // The blocks wait for a gate until the whole graph is built, so every edge is live.
    let gate = Gate::close();
    let handle = w
        .submit(|o| {
            for c in 0..4 {
                let (xc, yc) = (block(&x, c * B, B), block(&y, c * B, B));
                let args = add_args(&xc, &yc, gate.func().into());
                o.submit_next_level(&chip, args, &CallConfig::default(), c as usize)?;
            }
            o.submit_sub(&check, TaskArgs::new().tensor(y.clone(), Tag::Input))?;
            Ok(())
        })
        .unwrap();
    gate.open();
    let report = handle.result().unwrap();
    assert_eq!(report.tasks, 5);
    assert_eq!(
        report.edges, 4,
        "the check waits for each of the four blocks"
    );
    let expected: Vec<f32> = x_values.iter().map(|v| v + 1.0).collect();
    assert_eq!(seen.lock().unwrap().as_deref(), Some(&expected[..]));
    assert_eq!(
        read_f32(&*yr),
        expected,
        "the chips wrote the shared buffer in place"
    );
    w.close().unwrap();
}

#[test]
fn child_tensors_are_filled_run_on_and_read_back_through_copy_tasks() {
    const N: u64 = 128;
    let (w, chip) = worker(2, 0);
    let chip = chip.unwrap();
    let input: Vec<f32> = (0..N).map(|i| 3.0 * i as f32).collect();
    let (_hr, host_in) = f32_buffer(&w, &input);
    let (outr, host_out) = f32_buffer(&w, &vec![0.0; N as usize]);
    let persistent = w.alloc_child_tensor(1, &[N], DataType::Float32).unwrap();
    w.run(|o| {
        let dx = o.alloc_child_tensor(1, &[N], DataType::Float32)?;
        o.copy_to(&dx, &host_in)?;
        let args = add_args(&dx, &persistent, 0);
        o.submit_next_level(&chip, args, &CallConfig::default(), 1)?;
        o.copy_from(&host_out, &persistent)?;
        o.free(&dx)?;
        Ok(())
    })
    .unwrap();
    let expected: Vec<f32> = input.iter().map(|v| v + 1.0).collect();
    assert_eq!(read_f32(&*outr), expected);
    // The persistent tensor keeps its contents across runs.
    write_f32(&*outr, 0, &vec![0.0; N as usize]);
    w.run(|o| o.copy_from(&host_out, &persistent).map(|_| ()))
        .unwrap();
    assert_eq!(read_f32(&*outr), expected);
    w.free_child_tensor(&persistent).unwrap();
    let err = w.free_child_tensor(&persistent).unwrap_err();
    assert!(err.to_string().contains("not a live allocation"), "{err}");
    w.close().unwrap();
}

#[test]
fn a_group_starts_only_when_every_target_is_idle() {
    const N: u64 = 64;
    let (w, chip) = worker(2, 0);
    let chip = chip.unwrap();
    let (_xr, x) = f32_buffer(&w, &vec![1.0; 3 * N as usize]);
    let (yr, y) = f32_buffer(&w, &vec![0.0; 3 * N as usize]);
    let y0 = block(&y, 0, N);
    let (g0, g1) = (block(&y, N, N), block(&y, 2 * N, N));
    let gate = Gate::close();
    let handle = w
        .submit(|o| {
            let cfg = CallConfig::default();
            // Chip 0 is held by a gated task; the group needs chips 0 and 1.
            o.submit_next_level(
                &chip,
                add_args(&block(&x, 0, N), &y0, gate.func().into()),
                &cfg,
                0,
            )?;
            // Let the scheduler start it (the group queue is served first in each pass).
            std::thread::sleep(Duration::from_millis(100));
            let members = vec![
                add_args(&block(&x, N, N), &g0, 0),
                add_args(&block(&x, 2 * N, N), &g1, 0),
            ];
            let group = o.submit_next_level_group(&chip, members, &cfg, &[0, 1])?;
            assert_eq!(group, TaskId(1));
            Ok(())
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let now = read_f32(&*yr);
    assert!(
        now[2 * N as usize..].iter().all(|v| *v == 0.0),
        "chip 1 is idle, but the group's member on it must wait for chip 0"
    );
    assert!(!handle.done());
    gate.open();
    let report = handle.wait(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(
        report.edges, 0,
        "the group and the gated task touch disjoint blocks"
    );
    assert!(read_f32(&*yr).iter().all(|v| *v == 2.0));
    w.close().unwrap();
}

#[test]
fn one_failing_member_fails_the_group_and_names_its_chip() {
    const N: u64 = 32;
    let w = Worker::new(options(2, 1)).unwrap();
    let chip = w.register(add_one_callable("add_one")).unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let ran2 = ran.clone();
    let after = w
        .register(closure(move |_| {
            ran2.store(true, Ordering::SeqCst);
            Ok(())
        }))
        .unwrap();
    w.init().unwrap();
    let (_xr, x) = f32_buffer(&w, &vec![1.0; 2 * N as usize]);
    let (_yr, y) = f32_buffer(&w, &vec![0.0; 2 * N as usize]);
    let err = w
        .run(|o| {
            let members = vec![
                add_args(&block(&x, 0, N), &block(&y, 0, N), 0),
                add_args(&block(&x, N, N), &block(&y, N, N), FAIL),
            ];
            o.submit_next_level_group(&chip, members, &CallConfig::default(), &[0, 1])?;
            o.submit_sub(&after, TaskArgs::new().tensor(y.clone(), Tag::Input))?;
            Ok(())
        })
        .unwrap_err();
    let WorkerError::TaskFailed { task, worker, .. } = &err else {
        panic!("a task failure, got {err}")
    };
    assert_eq!(task, "#0 add_one");
    assert_eq!(worker, "chip 1 (device 1)");
    assert!(err.to_string().contains("42"), "the chip's cause: {err}");
    assert!(
        !ran.load(Ordering::SeqCst),
        "the group's consumer is poisoned"
    );
    // The chips are fine afterwards.
    w.run(|o| {
        let args = add_args(&block(&x, 0, N), &block(&y, 0, N), 0);
        o.submit_next_level(&chip, args, &CallConfig::default(), 1)
            .map(|_| ())
    })
    .unwrap();
    w.close().unwrap();
}
