//! A kernel that writes one element past its output tensor, run by a `ChipWorker` in a child
//! process (this test binary runs itself with `SIMPLER_CRASH_CASE` naming the case): with
//! `WorkerConfig::sim_memcheck` the write faults at once and the crash report names the
//! kernel, its task and the allocation it overran; with memcheck off (the default) the run
//! behaves as it always did. Work a kernel hands to the runtime is reported the same way: an
//! SDMA copy past the output (on the engine's thread) and a deferred-completion counter at a
//! wild address (on a scheduler thread) are named as that copy and that task's counter, and
//! a kernel that calls `exit(3)` is named before the process ends with status 3.

use std::os::unix::process::ExitStatusExt;
use std::process::Output;

use crate::common::{host_f32, push, submit, task, tensor};
use simpler_abi::*;
use simpler_device::sim::Memcheck;
use simpler_device::Topology;
use simpler_host::*;
use simpler_test_support::{child, test_name};

const CASE: &str = "SIMPLER_CRASH_CASE";
const LEN: usize = 1000;

/// `y[i] = 2 x[i]` for every element, then one more write at `y[len]`, past its end.
unsafe extern "C-unwind" fn overrun_kernel(args: *mut i64) {
    let (x, y) = (tensor(args, 0), tensor(args, 1));
    let n = y.shapes[0] as usize;
    let (xp, yp) = (x.buffer_addr as *const f32, y.buffer_addr as *mut f32);
    // SAFETY: both are contiguous 1-D f32 tensors of `n` elements; the last write, one past
    // the end, is the bug this test is about (under memcheck it faults; without, it lands in
    // the allocation's padding, as it always did).
    unsafe {
        for i in 0..n {
            *yp.add(i) = 2.0 * *xp.add(i);
        }
        yp.add(n).write_volatile(-1.0);
    }
}

/// One AIV task: x in, y out (existing).
unsafe extern "C-unwind" fn one_task(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args and its own table.
    unsafe {
        let a = &*args;
        let mut d = task(0, LANE_AIV0);
        push(&mut d, a.tensors[0], TensorArgType::Input);
        push(&mut d, a.tensors[1], TensorArgType::OutputExisting);
        submit(ops, &d)
    }
}

/// `y = x` by one SDMA copy one element too long (its last 4 bytes land past y's end).
unsafe extern "C-unwind" fn sdma_overrun_kernel(args: *mut i64) {
    let (x, y) = (tensor(args, 0), tensor(args, 1));
    let bytes = (y.shapes[0] + 1) * 4;
    // SAFETY: the copy past the end is the bug this test is about.
    unsafe {
        simpler_abi::deferred::sdma_copy(
            args,
            y.buffer_addr as *mut u8,
            x.buffer_addr as *const u8,
            bytes,
        );
    }
}

/// Defers completion on a counter at address 8 (a wild pointer).
unsafe extern "C-unwind" fn wild_counter_kernel(args: *mut i64) {
    // SAFETY: the wild address is the bug this test is about.
    unsafe { simpler_abi::deferred::wait_counter(args, std::ptr::dangling::<u64>(), 1) };
}

/// Ends the process with `exit(3)` from inside the kernel.
unsafe extern "C-unwind" fn exiting_kernel(_args: *mut i64) {
    // SAFETY: ending the process from a kernel is the bug this test is about.
    unsafe { libc::exit(3) };
}

fn spec_with(kernel: KernelEntry) -> CallableSpec {
    let arg = |name: &str, direction| ArgSpec {
        name: name.into(),
        direction,
        dtype: DataType::Float32,
        shape: None,
    };
    CallableSpec {
        name: "overrun".into(),
        signature: Signature::new(vec![
            arg("x", ArgDirection::In),
            arg("y", ArgDirection::Out),
        ])
        .unwrap(),
        orchestration: CodeImage::Orchestration(one_task),
        kernels: vec![KernelSpec {
            func_id: 0,
            core_type: CoreType::Aiv,
            image: CodeImage::Kernel(kernel),
            name: Some("tile_writer".into()),
        }],
        runtime: None,
    }
}

/// Runs the overrunning kernel on a worker with `memcheck`; returns y.
fn run_overrun(memcheck: Memcheck) -> Vec<f32> {
    run_kernel(overrun_kernel, memcheck, false)
}

/// Runs `kernel` on a worker with `memcheck` and, with `sdma`, an SDMA engine; returns y.
fn run_kernel(kernel: KernelEntry, memcheck: Memcheck, sdma: bool) -> Vec<f32> {
    let w = ChipWorker::new(WorkerConfig {
        topology: Topology {
            clusters: 1,
            aicpu_threads: 2,
        },
        heap_size: 1 << 20,
        sim_memcheck: memcheck,
        enable_sdma: sdma,
        ..WorkerConfig::default()
    })
    .unwrap();
    let id = w.register(&spec_with(kernel)).unwrap();
    let mut x: Vec<f32> = (0..LEN).map(|i| i as f32).collect();
    let mut y = vec![0f32; LEN];
    w.run(id, &mut [host_f32(&mut x), host_f32(&mut y)])
        .unwrap();
    w.close().unwrap();
    y
}

/// Runs test `name` (a libtest name) of this binary alone in a child with `CASE` set.
fn case_in_child(name: &str) -> (Output, String) {
    let out = child::command(name)
        .env(CASE, name)
        .env_remove("SIMPLER_SIM_MEMCHECK")
        .env_remove("SIMPLER_CRASH_REPORT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, err)
}

#[test]
fn with_sim_memcheck_an_overrun_faults_and_the_report_names_kernel_task_and_allocation() {
    if std::env::var_os(CASE).is_some() {
        run_overrun(Memcheck::After);
        unreachable!("the kernel faults");
    }
    let (out, err) = case_in_child(&test_name!(
        with_sim_memcheck_an_overrun_faults_and_the_report_names_kernel_task_and_allocation
    ));
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    for want in [
        "simpler: crash: SIGSEGV (invalid memory access, page protected against this access) on a device thread",
        "(aiv), run epoch ",
        // The kernel's name, then its func id.
        "kernel:  `overrun` kernel `tile_writer` (func 0); func id 0; task 0x0 (ring 0, submit #0); block 0 of 1",
        "0 bytes past the end of device allocation #",
        "(4000 bytes at 0x",
        "; offset 4000), in its guard page (memcheck)\n  tensor:  the allocation is the buffer of the kernel's tensor argument 1\n",
    ] {
        assert!(err.contains(want), "{want:?} not in:\n{err}");
    }
}

#[test]
fn memcheck_is_off_by_default_and_the_same_run_completes_as_before() {
    if std::env::var_os(CASE).is_some() {
        assert_eq!(WorkerConfig::default().sim_memcheck, Memcheck::Off);
        let y = run_overrun(WorkerConfig::default().sim_memcheck);
        assert!((0..LEN).all(|i| y[i] == 2.0 * i as f32));
        println!("completed");
        return;
    }
    let (out, err) = case_in_child(&test_name!(
        memcheck_is_off_by_default_and_the_same_run_completes_as_before
    ));
    assert!(out.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("completed"));
    assert!(!err.contains("simpler: crash"), "{err}");
}

#[test]
fn an_sdma_copy_past_its_output_is_reported_as_that_copy() {
    if std::env::var_os(CASE).is_some() {
        run_kernel(sdma_overrun_kernel, Memcheck::After, true);
        unreachable!("the copy faults");
    }
    let (out, err) = case_in_child(&test_name!(
        an_sdma_copy_past_its_output_is_reported_as_that_copy
    ));
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    for want in [
        "on a device thread\n  device:  ",
        ", SDMA engine, no run",
        "copy:    an SDMA copy a kernel submitted (simpler_sdma_copy): 4004 bytes from 0x",
        "past the end of device allocation #",
    ] {
        assert!(err.contains(want), "{want:?} not in:\n{err}");
    }
}

#[test]
fn a_wild_counter_address_is_reported_as_that_tasks_counter() {
    if std::env::var_os(CASE).is_some() {
        run_kernel(wild_counter_kernel, Memcheck::Off, false);
        unreachable!("reading the counter faults");
    }
    let (out, err) = case_in_child(&test_name!(
        a_wild_counter_address_is_reported_as_that_tasks_counter
    ));
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    for want in [
        ", AICPU thread ",
        "counter: the runtime reading the deferred-completion counter at 0x8 that task 0x0 \
         (ring 0, submit #0) registered",
    ] {
        assert!(err.contains(want), "{want:?} not in:\n{err}");
    }
}

#[test]
fn a_kernel_that_calls_exit_is_named_and_the_status_kept() {
    if std::env::var_os(CASE).is_some() {
        run_kernel(exiting_kernel, Memcheck::Off, false);
        unreachable!("the kernel exits");
    }
    let (out, err) = case_in_child(&test_name!(
        a_kernel_that_calls_exit_is_named_and_the_status_kept
    ));
    assert_eq!(out.status.code(), Some(3), "{err}");
    for want in [
        "simpler: crash: exit(3) called on a device thread\n  device:  ",
        "(aiv), run epoch ",
        "kernel:  `overrun` kernel `tile_writer` (func 0); func id 0; task 0x0",
        "never by exit()",
        "The process now ends (exit status 3). On the sim",
    ] {
        assert!(err.contains(want), "{want:?} not in:\n{err}");
    }
}
