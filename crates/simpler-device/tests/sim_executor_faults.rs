//! The pool executor under faults (`docs/sim-device.md` §11): kernels that panic, a forced
//! reset of cores parked in register waits and AICPU threads parked on their doorbells,
//! nested and panicking blocking sections and device waits inside them, a kernel that never
//! returns (the stall monitor replaces its worker, so other devices of the process still
//! run), devices created and dropped in a loop (fibers and their stacks do not pile up), and
//! many host threads launching onto many streams of one device.
//!
//! The tests of this file run one at a time (they share the process's pool and measure its
//! threads and address space). A test binary of its own, not a module of `it`: the other
//! tests' devices would change both meanwhile.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use simpler_device::sim::{ExecutorKind, SimDevice, SimOptions, KERNEL_PANIC_STATUS};
use simpler_device::{AicoreContext, AicpuContext, Device, DeviceError, DevicePtr, Topology};

const LONG: Duration = Duration::from_secs(60);

/// Serializes the tests of this file.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn pool_device(clusters: u32, aicpu_threads: u32) -> SimDevice {
    let dev = SimDevice::with_options(
        Topology {
            clusters,
            aicpu_threads,
        },
        SimOptions {
            executor: ExecutorKind::Pool,
            ..SimOptions::default()
        },
    )
    .unwrap();
    assert_eq!(dev.executor(), ExecutorKind::Pool);
    dev
}

static HITS: AtomicU64 = AtomicU64::new(0);

fn count(_: &AicoreContext<'_>, _: DevicePtr) {
    HITS.fetch_add(1, Ordering::SeqCst);
}

fn count_aicpu(_: &AicpuContext<'_>, _: DevicePtr) -> i32 {
    HITS.fetch_add(1, Ordering::SeqCst);
    0
}

/// Launches [`count`] on `s` and checks that every core of `dev` ran it.
fn launch_counts(dev: &SimDevice, s: simpler_device::StreamId) {
    let before = HITS.load(Ordering::SeqCst);
    // SAFETY: `count` ignores its argument.
    unsafe { dev.launch_aicore(s, count, DevicePtr::NULL) }.unwrap();
    dev.synchronize_stream(s, LONG).unwrap();
    assert_eq!(
        HITS.load(Ordering::SeqCst) - before,
        u64::from(dev.topology().core_count())
    );
}

fn panic_on_even_cores(ctx: &AicoreContext<'_>, _: DevicePtr) {
    if ctx.core_id.is_multiple_of(2) {
        panic!("boom on core {}", ctx.core_id);
    }
}

#[test]
fn a_kernel_panicking_on_some_cores_is_a_kernel_fault_and_the_device_stays_usable() {
    let _one = one_at_a_time();
    let dev = pool_device(2, 2);
    let s = dev.create_stream().unwrap();
    // SAFETY: the kernel ignores its argument.
    unsafe { dev.launch_aicore(s, panic_on_even_cores, DevicePtr::NULL) }.unwrap();
    match dev.synchronize_stream(s, LONG) {
        Err(DeviceError::KernelFault {
            stream,
            status,
            panic: Some(message),
        }) => {
            assert_eq!(stream, s);
            assert_eq!(status, KERNEL_PANIC_STATUS);
            assert!(message.contains("boom on core"), "{message}");
        }
        other => panic!("expected a kernel fault with the panic, got {other:?}"),
    }
    // Another stream is not faulted and runs every core, the panicked ones included.
    let t = dev.create_stream().unwrap();
    launch_counts(&dev, t);
    // A reset clears the sticky fault; the faulted stream then runs again.
    dev.reset(LONG).unwrap();
    launch_counts(&dev, s);
}

static PARKED: AtomicU32 = AtomicU32::new(0);
static ENDED: AtomicU32 = AtomicU32::new(0);

/// Waits in the register wait for a DMB write that never comes.
fn park_in_dmb_wait(ctx: &AicoreContext<'_>, _: DevicePtr) {
    PARKED.fetch_add(1, Ordering::SeqCst);
    struct Ended;
    impl Drop for Ended {
        fn drop(&mut self) {
            ENDED.fetch_add(1, Ordering::SeqCst);
        }
    }
    let _e = Ended;
    loop {
        ctx.regs.wait_dmb_change(0);
    }
}

/// Parks on its doorbell, forever (nobody rings it).
fn park_on_doorbell(ctx: &AicpuContext<'_>, _: DevicePtr) -> i32 {
    PARKED.fetch_add(1, Ordering::SeqCst);
    struct Ended;
    impl Drop for Ended {
        fn drop(&mut self) {
            ENDED.fetch_add(1, Ordering::SeqCst);
        }
    }
    let _e = Ended;
    loop {
        ctx.doorbell.prepare_park();
        ctx.park(Duration::from_millis(100));
    }
}

/// The same two waits, inside a blocking section.
fn park_in_dmb_wait_blocking(ctx: &AicoreContext<'_>, arg: DevicePtr) {
    simpler_device::wait::blocking(|| park_in_dmb_wait(ctx, arg));
}

fn park_on_doorbell_blocking(ctx: &AicpuContext<'_>, arg: DevicePtr) -> i32 {
    simpler_device::wait::blocking(|| park_on_doorbell(ctx, arg))
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LONG;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn reset_ends_parked_kernels(
    core: simpler_device::AicoreKernel,
    aicpu: simpler_device::AicpuKernel,
) {
    let dev = pool_device(2, 3);
    let cores = dev.topology().core_count();
    let a = dev.create_stream().unwrap();
    let b = dev.create_stream().unwrap();
    PARKED.store(0, Ordering::SeqCst);
    ENDED.store(0, Ordering::SeqCst);
    // SAFETY: both kernels ignore their argument.
    unsafe { dev.launch_aicore(a, core, DevicePtr::NULL) }.unwrap();
    // SAFETY: as above.
    unsafe { dev.launch_aicpu(b, aicpu, DevicePtr::NULL, 3) }.unwrap();
    wait_until("every core and AICPU thread to park", || {
        PARKED.load(Ordering::SeqCst) == cores + 3
    });
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(dev.query_stream(a), Ok(false));
    let t = Instant::now();
    dev.reset(Duration::from_secs(10)).unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(
        ENDED.load(Ordering::SeqCst),
        cores + 3,
        "every kernel ended"
    );
    assert_eq!(dev.query_stream(a), Ok(true));
    assert_eq!(dev.query_stream(b), Ok(true));
    dev.synchronize_stream(a, LONG).unwrap();
    dev.synchronize_stream(b, LONG).unwrap();
    launch_counts(&dev, a);
    let before = HITS.load(Ordering::SeqCst);
    // SAFETY: the kernel ignores its argument.
    unsafe { dev.launch_aicpu(b, count_aicpu, DevicePtr::NULL, 3) }.unwrap();
    dev.synchronize_stream(b, LONG).unwrap();
    assert_eq!(HITS.load(Ordering::SeqCst) - before, 3);
}

#[test]
fn a_reset_ends_cores_parked_in_register_waits_and_aicpu_threads_on_doorbells() {
    let _one = one_at_a_time();
    reset_ends_parked_kernels(park_in_dmb_wait, park_on_doorbell);
}

#[test]
fn a_reset_ends_the_same_waits_inside_blocking_sections() {
    let _one = one_at_a_time();
    reset_ends_parked_kernels(park_in_dmb_wait_blocking, park_on_doorbell_blocking);
}

/// Per-core results of the blocking-section probe, one u32 per core: bit 0 the nested
/// section returned its value, bit 1 polling pays inside the inner and (after it) the outer
/// section, bit 2 polling does not pay after the outer section, bit 3 a panic out of a
/// section was caught and the fiber then slept through the device, bit 4 a device sleep
/// inside a section lasted its length, bit 5 the core was woken from a register wait inside
/// a section.
///
/// # Safety
/// `arg` must address a live allocation of at least 4 bytes per core.
unsafe fn blocking_probe(ctx: &AicoreContext<'_>, arg: DevicePtr) {
    use simpler_device::wait::{blocking, polling_pays, sleep};
    let mut bits = 0u32;
    let (v, inner_polls, outer_polls) = blocking(|| {
        let (v, inner) = blocking(|| (7u32, polling_pays()));
        (v, inner, polling_pays())
    });
    if v == 7 {
        bits |= 1;
    }
    if inner_polls && outer_polls {
        bits |= 2;
    }
    if !polling_pays() {
        bits |= 4;
    }
    let caught = catch_unwind(AssertUnwindSafe(|| {
        blocking(|| panic!("a blocking section panicked on core {}", ctx.core_id))
    }));
    if caught.is_err() && !polling_pays() {
        sleep(Duration::from_millis(1));
        bits |= 8;
    }
    let t = Instant::now();
    blocking(|| sleep(Duration::from_millis(5)));
    if t.elapsed() >= Duration::from_millis(5) {
        bits |= 16;
    }
    if blocking(|| ctx.regs.wait_dmb_change(0)) == 1 {
        bits |= 32;
    }
    let slot = (arg.addr() as *mut u32).wrapping_add(ctx.core_id as usize);
    // SAFETY: the caller's contract: slot `core_id` is inside the allocation, each core
    // writes only its own.
    unsafe { slot.write_volatile(bits) };
}

/// Sleeps through the device for a while (the cores meanwhile reach, or pass, their
/// register wait), then writes DMB = 1 on every core: a core that waits later sees it too.
fn release_cores(ctx: &AicpuContext<'_>, _: DevicePtr) -> i32 {
    simpler_device::wait::sleep(Duration::from_millis(50));
    for core in ctx.cores {
        core.write_dmb(1);
    }
    0
}

#[test]
fn nested_and_panicking_blocking_sections_and_waits_inside_them() {
    let _one = one_at_a_time();
    let dev = pool_device(2, 2);
    let cores = dev.topology().core_count() as usize;
    let mem = dev.malloc(4 * cores as u64).unwrap();
    let a = dev.create_stream().unwrap();
    let b = dev.create_stream().unwrap();
    // SAFETY: `mem` holds a u32 per core until the synchronize below.
    unsafe { dev.launch_aicore(a, blocking_probe, mem) }.unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: `release_cores` ignores its argument.
    unsafe { dev.launch_aicpu(b, release_cores, DevicePtr::NULL, 1) }.unwrap();
    dev.synchronize_stream(b, LONG).unwrap();
    dev.synchronize_stream(a, LONG).unwrap();
    let mut out = vec![0u8; 4 * cores];
    dev.copy_from_device(&mut out, mem).unwrap();
    let bits: Vec<u32> = out
        .chunks(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(bits, vec![63; cores], "per-core probe bits");
    // The pool serves the next launch.
    launch_counts(&dev, a);
}

#[test]
fn a_blocking_section_that_panics_is_a_kernel_fault() {
    let _one = one_at_a_time();
    fn panics_in_section(ctx: &AicoreContext<'_>, _: DevicePtr) {
        simpler_device::wait::blocking(|| {
            if ctx.core_id == 1 {
                panic!("section panic on core 1");
            }
        });
    }
    let dev = pool_device(1, 2);
    let s = dev.create_stream().unwrap();
    // SAFETY: the kernel ignores its argument.
    unsafe { dev.launch_aicore(s, panics_in_section, DevicePtr::NULL) }.unwrap();
    match dev.synchronize_stream(s, LONG) {
        Err(DeviceError::KernelFault {
            panic: Some(message),
            ..
        }) => assert!(message.contains("section panic on core 1"), "{message}"),
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    let t = dev.create_stream().unwrap();
    launch_counts(&dev, t);
    // The core that panicked inside its section runs device waits as a fiber again.
    fn sleeps(_: &AicoreContext<'_>, _: DevicePtr) {
        assert!(!simpler_device::wait::polling_pays(), "still in a section");
        simpler_device::wait::sleep(Duration::from_millis(1));
    }
    // SAFETY: the kernel ignores its argument.
    unsafe { dev.launch_aicore(t, sleeps, DevicePtr::NULL) }.unwrap();
    dev.synchronize_stream(t, LONG).unwrap();
}

static SPIN_RELEASE: AtomicBool = AtomicBool::new(false);
static SPINNING: AtomicU32 = AtomicU32::new(0);

/// Spins outside every device wait until [`SPIN_RELEASE`] (for the device: forever).
fn spin_forever(_: &AicoreContext<'_>, _: DevicePtr) {
    SPINNING.fetch_add(1, Ordering::SeqCst);
    while !SPIN_RELEASE.load(Ordering::Acquire) {
        std::hint::spin_loop();
    }
}

fn threads_now() -> usize {
    proc_status("Threads:") as usize
}

/// A `/proc/self/status` field's number (kB for the sizes).
fn proc_status(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    line[field.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_kernel_that_never_returns_leaves_other_devices_running() {
    let _one = one_at_a_time();
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            SPIN_RELEASE.store(true, Ordering::Release);
        }
    }
    let _release = Release;
    // More spinning cores than the pool has workers: every worker is taken by a spinner
    // unless the stall monitor replaces them.
    let stuck = pool_device(2, 2);
    let cores = stuck.topology().core_count();
    let s = stuck.create_stream().unwrap();
    // SAFETY: the kernel ignores its argument.
    unsafe { stuck.launch_aicore(s, spin_forever, DevicePtr::NULL) }.unwrap();
    wait_until("every core to spin", || {
        SPINNING.load(Ordering::SeqCst) == cores
    });
    let t = Instant::now();
    let reset = stuck.reset(Duration::from_millis(300));
    assert!(
        matches!(reset, Err(DeviceError::ResetUnconfirmed(_))),
        "{reset:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // Another device, alive before the drop, runs.
    let other = pool_device(1, 2);
    let o = other.create_stream().unwrap();
    let t = Instant::now();
    launch_counts(&other, o);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "{:?} for a launch beside the stuck device",
        t.elapsed()
    );
    let t = Instant::now();
    drop(stuck);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "dropping the stuck device took {:?}",
        t.elapsed()
    );
    // Devices made after the drop run too, repeatedly, with the spinners still on their
    // workers.
    for _ in 0..5 {
        let fresh = pool_device(2, 2);
        let f = fresh.create_stream().unwrap();
        let t = Instant::now();
        launch_counts(&fresh, f);
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        launch_counts(&other, o);
    }
    assert!(!SPIN_RELEASE.load(Ordering::SeqCst));
}

#[test]
fn devices_created_and_dropped_in_a_loop_do_not_pile_up_threads_or_stacks() {
    let _one = one_at_a_time();
    let cycle = || {
        let dev = pool_device(4, 4);
        let s = dev.create_stream().unwrap();
        let t = dev.create_stream().unwrap();
        launch_counts(&dev, s);
        let before = HITS.load(Ordering::SeqCst);
        // SAFETY: the kernel ignores its argument.
        unsafe { dev.launch_aicpu(t, count_aicpu, DevicePtr::NULL, 4) }.unwrap();
        dev.synchronize_stream(t, LONG).unwrap();
        assert_eq!(HITS.load(Ordering::SeqCst) - before, 4);
    };
    for _ in 0..5 {
        cycle();
    }
    let threads = threads_now();
    let vm_kb = proc_status("VmSize:");
    for _ in 0..50 {
        cycle();
    }
    let threads_after = threads_now();
    let vm_after_kb = proc_status("VmSize:");
    // One device has 12 cores, 4 AICPU threads and 2 streams: 18 fibers of 2 MiB stacks,
    // 36 MiB; 50 leaked devices would be 1.8 GiB.
    assert!(
        threads_after <= threads + 2,
        "threads {threads} -> {threads_after}"
    );
    assert!(
        vm_after_kb < vm_kb + 128 * 1024,
        "VmSize {vm_kb} kB -> {vm_after_kb} kB"
    );
}

#[test]
fn many_host_threads_launch_onto_many_streams_of_one_device() {
    let _one = one_at_a_time();
    let dev = Arc::new(pool_device(2, 4));
    let cores = u64::from(dev.topology().core_count());
    const HOSTS: u64 = 8;
    const LAUNCHES: u64 = 20;
    let before = HITS.load(Ordering::SeqCst);
    let hosts: Vec<_> = (0..HOSTS)
        .map(|h| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                let s = dev.create_stream().unwrap();
                let e = dev.create_event().unwrap();
                for i in 0..LAUNCHES {
                    if (h + i) % 2 == 0 {
                        // SAFETY: `count` ignores its argument.
                        unsafe { dev.launch_aicore(s, count, DevicePtr::NULL) }.unwrap();
                    } else {
                        // SAFETY: `count_aicpu` ignores its argument.
                        unsafe { dev.launch_aicpu(s, count_aicpu, DevicePtr::NULL, 4) }.unwrap();
                    }
                    dev.record_event(e, s).unwrap();
                    if i % 5 == 4 {
                        dev.synchronize_event(e, LONG).unwrap();
                    }
                }
                dev.synchronize_stream(s, LONG).unwrap();
                dev.destroy_stream(s).unwrap();
            })
        })
        .collect();
    for h in hosts {
        h.join().unwrap();
    }
    // Half the launches of each host are AICore (every core), half AICPU (4 threads).
    let expected = HOSTS * LAUNCHES / 2 * (cores + 4);
    assert_eq!(HITS.load(Ordering::SeqCst) - before, expected);
}
