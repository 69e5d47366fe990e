//! Crash reports of device threads, each case in a child process: this test binary runs
//! itself with `SIMPLER_CRASH_CASE` naming the case, the child crashes, and the parent checks
//! the child's stderr and the signal it died of. The kernels here stand in for the runtime:
//! they record their run and call with `simpler_device::crash` the way `simpler-runtime`
//! does, then fault.

use std::os::unix::process::ExitStatusExt;
use std::process::Output;
use std::time::Duration;

use simpler_device::crash::{self, KernelCall};
use simpler_device::sim::{Memcheck, SimDevice};
use simpler_device::{AicoreContext, AicpuContext, Device, DevicePtr, Topology};
use simpler_test_support::{child, test_name};

const CASE: &str = "SIMPLER_CRASH_CASE";
const LONG: Duration = Duration::from_secs(20);

/// Runs test `name` (a libtest name) of this binary alone in a child with
/// `SIMPLER_CRASH_CASE=name`.
fn case_in_child(name: &str, env: &[(&str, &str)]) -> (Output, String) {
    let mut c = child::command(name);
    c.env(CASE, name)
        .env_remove("SIMPLER_SIM_MEMCHECK")
        .env_remove("SIMPLER_CRASH_REPORT");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, err)
}

fn in_child() -> bool {
    std::env::var_os(CASE).is_some()
}

fn topology() -> Topology {
    Topology {
        clusters: 1,
        aicpu_threads: 2,
    }
}

/// Records run 7 and a call of `entry` for task 0x200000003, block 1 of 2, on the calling
/// core, named `name`.
fn pretend_kernel(entry: u64, name: &str) -> (crash::CallGuard, crash::CodeName) {
    crash::set_run(7, 0, 0);
    let named = crash::name_code(entry, name);
    let call = crash::enter_kernel(KernelCall {
        entry,
        args: 0,
        task: 2 << 32 | 3,
        block_idx: 1,
        block_num: 2,
    });
    (call, named)
}

/// Core 1 writes a u32 at address 8 (nothing is mapped there).
fn write_near_null(ctx: &AicoreContext<'_>, _: DevicePtr) {
    if ctx.core_id != 1 {
        return;
    }
    let _k = pretend_kernel(write_near_null as *const () as u64, "near-null writer");
    // SAFETY: none: the write faults on purpose (page 0 is never mapped).
    unsafe { (8 as *mut u32).write_volatile(1) };
}

/// Core 0 writes the u32 just past the 16-byte allocation at `arg`.
///
/// # Safety
/// None: the write is past the allocation on purpose; it faults under memcheck `after` and
/// lands in the heap block's own padding otherwise.
unsafe fn write_past_end(ctx: &AicoreContext<'_>, arg: DevicePtr) {
    if ctx.core_id != 0 {
        return;
    }
    let _k = pretend_kernel(write_past_end as *const () as u64, "past-the-end writer");
    // SAFETY: none: see the function's doc.
    unsafe { (arg.addr() as *mut u32).add(4).write_volatile(0x5a5a) };
}

/// Core 0 writes the u32 just before the allocation at `arg`.
///
/// # Safety
/// None: the write is before the allocation on purpose; it faults under memcheck `before`.
unsafe fn write_before_start(ctx: &AicoreContext<'_>, arg: DevicePtr) {
    if ctx.core_id != 0 {
        return;
    }
    let _k = pretend_kernel(write_before_start as *const () as u64, "underrun writer");
    // SAFETY: none: see the function's doc.
    unsafe { (arg.addr() as *mut u32).sub(1).write_volatile(0x5a5a) };
}

fn abort_on_aicpu(ctx: &AicpuContext<'_>, _: DevicePtr) -> i32 {
    if ctx.thread_idx == 1 {
        crash::set_run(9, 0, 0);
        let _o = crash::enter_orchestration(abort_on_aicpu as *const () as u64);
        std::process::abort();
    }
    0
}

fn launch_aicore(dev: &SimDevice, kernel: simpler_device::AicoreKernel, arg: DevicePtr) {
    let s = dev.create_stream().unwrap();
    // SAFETY: the kernels above need nothing of `arg` but that it is what they were given.
    unsafe { dev.launch_aicore(s, kernel, arg) }.unwrap();
    dev.synchronize_stream(s, LONG).unwrap();
}

#[test]
fn a_fault_on_a_core_prints_the_report_and_ends_by_sigsegv() {
    if in_child() {
        let dev = SimDevice::new(topology()).unwrap();
        launch_aicore(&dev, write_near_null, DevicePtr::NULL);
        unreachable!("the kernel faults");
    }
    let (out, err) = case_in_child(
        &test_name!(a_fault_on_a_core_prints_the_report_and_ends_by_sigsegv),
        &[],
    );
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    for want in [
        "simpler: crash: SIGSEGV (invalid memory access, address not mapped) on a device thread",
        ", AICore 1 (aiv), run epoch 7",
        "kernel:  near-null writer; task 0x200000003 (ring 2, submit #3); block 1 of 2",
        "address: 0x8, not in any live device allocation",
        "The process now ends by SIGSEGV (exit status 139)",
    ] {
        assert!(err.contains(want), "{want:?} not in:\n{err}");
    }
}

#[test]
fn memcheck_after_faults_at_the_first_byte_past_an_allocation() {
    if in_child() {
        let dev = SimDevice::with_memcheck(topology(), Memcheck::After).unwrap();
        let buf = dev.malloc(16).unwrap();
        launch_aicore(&dev, write_past_end, buf);
        unreachable!("the kernel faults");
    }
    let (out, err) = case_in_child(
        &test_name!(memcheck_after_faults_at_the_first_byte_past_an_allocation),
        &[],
    );
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    assert!(err.contains("page protected against this access"), "{err}");
    assert!(err.contains("AICore 0 (aic)"), "{err}");
    assert!(err.contains("kernel:  past-the-end writer"), "{err}");
    assert!(
        err.contains("0 bytes past the end of device allocation #1 of device ")
            && err.contains("(16 bytes at 0x")
            && err.contains("; offset 16), in its guard page (memcheck)"),
        "{err}"
    );
}

#[test]
fn memcheck_before_faults_at_the_first_byte_before_an_allocation() {
    if in_child() {
        let dev = SimDevice::with_memcheck(topology(), Memcheck::Before).unwrap();
        let buf = dev.malloc(100).unwrap();
        launch_aicore(&dev, write_before_start, buf);
        unreachable!("the kernel faults");
    }
    let (out, err) = case_in_child(
        &test_name!(memcheck_before_faults_at_the_first_byte_before_an_allocation),
        &[],
    );
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    assert!(err.contains("kernel:  underrun writer"), "{err}");
    assert!(
        err.contains("4 bytes before the start of device allocation #1 of device ")
            && err.contains("(100 bytes at 0x")
            && err.contains("; offset -4), in its guard page (memcheck)"),
        "{err}"
    );
}

#[test]
fn without_memcheck_the_same_write_lands_in_the_padding_as_before() {
    if in_child() {
        let dev = SimDevice::new(topology()).unwrap();
        assert_eq!(dev.memcheck(), Memcheck::Off);
        let buf = dev.malloc(16).unwrap();
        launch_aicore(&dev, write_past_end, buf);
        println!("survived");
        return;
    }
    let (out, err) = case_in_child(
        &test_name!(without_memcheck_the_same_write_lands_in_the_padding_as_before),
        &[],
    );
    assert!(out.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("survived"));
    assert!(!err.contains("simpler: crash"), "{err}");
}

#[test]
fn abort_on_an_aicpu_thread_is_reported_and_ends_by_sigabrt() {
    if in_child() {
        let dev = SimDevice::new(topology()).unwrap();
        let s = dev.create_stream().unwrap();
        // SAFETY: the kernel ignores its argument.
        unsafe { dev.launch_aicpu(s, abort_on_aicpu, DevicePtr::NULL, 2) }.unwrap();
        dev.synchronize_stream(s, LONG).unwrap();
        unreachable!("the kernel aborts");
    }
    let (out, err) = case_in_child(
        &test_name!(abort_on_an_aicpu_thread_is_reported_and_ends_by_sigabrt),
        &[],
    );
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{err}");
    for want in [
        "simpler: crash: SIGABRT (abort) on a device thread",
        ", AICPU thread 1, run epoch 9",
        "orchestration: unnamed code at 0x",
        "address: none: the signal was sent",
        "(exit status 134)",
    ] {
        assert!(err.contains(want), "{want:?} not in:\n{err}");
    }
}

#[test]
fn a_fault_on_another_thread_is_left_to_the_previous_handler() {
    if in_child() {
        let _dev = SimDevice::new(topology()).unwrap();
        // SAFETY: none: the write faults on purpose, on the test's own (non-device) thread.
        unsafe { (8 as *mut u32).write_volatile(1) };
        unreachable!("the write faults");
    }
    let (out, err) = case_in_child(
        &test_name!(a_fault_on_another_thread_is_left_to_the_previous_handler),
        &[],
    );
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    assert!(!err.contains("simpler: crash"), "{err}");
}

#[test]
fn simpler_crash_report_0_leaves_the_handlers_alone() {
    if in_child() {
        let dev = SimDevice::new(topology()).unwrap();
        launch_aicore(&dev, write_near_null, DevicePtr::NULL);
        unreachable!("the kernel faults");
    }
    let (out, err) = case_in_child(
        &test_name!(simpler_crash_report_0_leaves_the_handlers_alone),
        &[("SIMPLER_CRASH_REPORT", "0")],
    );
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    assert!(!err.contains("simpler: crash"), "{err}");
}
