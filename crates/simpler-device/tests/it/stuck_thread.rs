//! A device thread stuck in a kernel that never reaches a register wait (user code that does
//! not return): a forced reset cannot stop it and says so within its timeout, the device's
//! streams stay answerable, and dropping the device returns promptly — the thread is left
//! behind, never joined, and the memory it may touch is never freed.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use simpler_device::sim::SimDevice;
use simpler_device::{AicoreContext, Device, DeviceError, DevicePtr, Topology};

static RELEASE: AtomicBool = AtomicBool::new(false);
static STUCK: AtomicU32 = AtomicU32::new(0);
static RETURNED: AtomicU32 = AtomicU32::new(0);

/// Core 0 stays in "user code" until [`RELEASE`], then writes to the allocation at `arg`;
/// the other cores return at once.
///
/// # Safety
/// `arg` must address a live allocation of at least 4 bytes for as long as core 0 runs.
unsafe fn stuck_on_core_0(ctx: &AicoreContext<'_>, arg: DevicePtr) {
    if ctx.core_id != 0 {
        return;
    }
    STUCK.fetch_add(1, Ordering::SeqCst);
    while !RELEASE.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: the caller keeps the allocation alive while this core runs.
    unsafe { std::ptr::write_volatile(arg.addr() as *mut u32, 7) };
    RETURNED.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_stuck_device_thread_leaves_reset_unconfirmed_and_drop_prompt() {
    let dev = SimDevice::new(Topology {
        clusters: 1,
        aicpu_threads: 2,
    })
    .unwrap();
    let mem = dev.malloc(64).unwrap();
    let s = dev.create_stream().unwrap();
    // SAFETY: `mem` is never freed: the device is dropped with the kernel stuck, and a device
    // dropped so leaves its memory allocated.
    unsafe { dev.launch_aicore(s, stuck_on_core_0, mem) }.unwrap();
    while STUCK.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = Instant::now();
    let reset = dev.reset(Duration::from_millis(200));
    assert!(
        matches!(reset, Err(DeviceError::ResetUnconfirmed(_))),
        "{reset:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(
        dev.query_stream(s),
        Ok(false),
        "the kernel is still running"
    );
    assert!(matches!(
        dev.synchronize_stream(s, Duration::from_millis(20)),
        Err(DeviceError::Timeout(_))
    ));
    let t = Instant::now();
    drop(dev);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "dropping the device took {:?}",
        t.elapsed()
    );
    // The thread was left behind, still in the kernel; once it returns it writes memory the
    // dropped device never freed.
    assert_eq!(RETURNED.load(Ordering::SeqCst), 0);
    RELEASE.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(20);
    while RETURNED.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the released kernel never returned"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: the allocation was left behind by the drop, never freed.
    let written = unsafe { std::ptr::read_volatile(mem.addr() as *const u32) };
    assert_eq!(written, 7);
}
