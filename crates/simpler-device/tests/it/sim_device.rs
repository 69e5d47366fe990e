//! Behaviour of the sim device as the host relies on it: stream order, reusable events,
//! stream-wait-event, kernel launch on every core, sticky fatal status seen only by a stream
//! synchronize, and device threads that are started once.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use simpler_device::sim::SimDevice;
use simpler_device::{
    AicoreContext, AicpuContext, Device, DeviceError, DevicePtr, EventId, EventStatus, StreamId,
    Topology,
};
use simpler_test_support::in_own_process;

const LONG: Duration = Duration::from_secs(20);

static CORE_HITS: AtomicU32 = AtomicU32::new(0);

fn count_core(_: &AicoreContext<'_>, _: DevicePtr) {
    CORE_HITS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn aicore_kernel_runs_once_on_every_core() {
    let dev = SimDevice::new(Topology {
        clusters: 3,
        aicpu_threads: 2,
    })
    .unwrap();
    let s = dev.create_stream().unwrap();
    let before = CORE_HITS.load(Ordering::SeqCst);
    // SAFETY: `count_core` ignores its argument.
    unsafe { dev.launch_aicore(s, count_core, DevicePtr::NULL) }.unwrap();
    dev.synchronize_stream(s, LONG).unwrap();
    assert_eq!(CORE_HITS.load(Ordering::SeqCst) - before, 9);
}

/// Writes its thread index + 1 into slot `thread_idx` of the u64 array at `arg`.
///
/// # Safety
/// `arg` must address a live allocation of at least `thread_num` u64 slots.
unsafe fn stamp_threads(ctx: &AicpuContext<'_>, arg: DevicePtr) -> i32 {
    let slot = (arg.addr() as *mut u64).wrapping_add(ctx.thread_idx as usize);
    // SAFETY: the caller's contract: slot `thread_idx` is inside the allocation, and each
    // thread writes only its own slot.
    unsafe { *slot = u64::from(ctx.thread_idx) + 1 };
    0
}

fn fail_on_thread_1(ctx: &AicpuContext<'_>, _: DevicePtr) -> i32 {
    if ctx.thread_idx == 1 {
        -507
    } else {
        0
    }
}

#[test]
fn aicpu_kernel_runs_on_the_requested_threads() {
    let dev = SimDevice::new(Topology::default()).unwrap();
    let buf = dev.malloc(64).unwrap();
    let s = dev.create_stream().unwrap();
    // SAFETY: `buf` holds 8 u64 slots (64 bytes) until the synchronize below.
    unsafe { dev.launch_aicpu(s, stamp_threads, buf, 3) }.unwrap();
    dev.synchronize_stream(s, LONG).unwrap();
    let mut out = [0u8; 64];
    dev.copy_from_device(&mut out, buf).unwrap();
    let words: Vec<u64> = out
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, vec![1, 2, 3, 0, 0, 0, 0, 0]);
    assert!(matches!(
        // SAFETY: refused before anything runs (the device has 4 threads).
        unsafe { dev.launch_aicpu(s, stamp_threads, buf, 5) },
        Err(DeviceError::InvalidLaunch(_))
    ));
}

#[test]
fn kernel_fault_is_seen_only_by_stream_synchronize_and_is_sticky() {
    let dev = SimDevice::new(Topology::default()).unwrap();
    let s = dev.create_stream().unwrap();
    let e = dev.create_event().unwrap();
    // SAFETY: `fail_on_thread_1` ignores its argument.
    unsafe { dev.launch_aicpu(s, fail_on_thread_1, DevicePtr::NULL, 2) }.unwrap();
    dev.record_event(e, s).unwrap();
    dev.synchronize_event(e, LONG).unwrap();
    assert_eq!(dev.query_event(e).unwrap(), EventStatus::Complete);
    assert!(dev.query_stream(s).unwrap());
    for _ in 0..2 {
        assert_eq!(
            dev.synchronize_stream(s, LONG),
            Err(DeviceError::KernelFault {
                stream: s,
                status: -507,
                panic: None,
            })
        );
    }
}

static GATE: AtomicU64 = AtomicU64::new(0);

fn wait_for_gate(_: &AicpuContext<'_>, _: DevicePtr) -> i32 {
    while GATE.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    0
}

#[test]
fn events_rerecord_without_reset_and_order_other_streams() {
    let dev = SimDevice::new(Topology::default()).unwrap();
    let a = dev.create_stream().unwrap();
    let b = dev.create_stream().unwrap();
    let e = dev.create_event().unwrap();
    assert_eq!(
        dev.query_event(e).unwrap(),
        EventStatus::Complete,
        "never recorded reads complete"
    );
    dev.record_event(e, a).unwrap();
    dev.synchronize_event(e, LONG).unwrap();

    // Re-record behind a blocked kernel: the event goes back to pending.
    // SAFETY: `wait_for_gate` ignores its argument.
    unsafe { dev.launch_aicpu(a, wait_for_gate, DevicePtr::NULL, 2) }.unwrap();
    dev.record_event(e, a).unwrap();
    assert_eq!(dev.query_event(e).unwrap(), EventStatus::Pending);
    assert_eq!(
        dev.synchronize_event(e, Duration::from_millis(30)),
        Err(DeviceError::Timeout(Duration::from_millis(30)))
    );

    // Stream b waits on the event: its copy must not land before the gate opens.
    let buf = dev.malloc(8).unwrap();
    dev.stream_wait_event(b, e).unwrap();
    dev.copy_to_device_async(b, buf, vec![9; 8]).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let mut out = [0u8; 8];
    dev.copy_from_device(&mut out, buf).unwrap();
    assert_eq!(out, [0; 8], "stream b ran ahead of the event it waits on");
    assert!(!dev.query_stream(b).unwrap());

    GATE.store(1, Ordering::SeqCst);
    dev.synchronize_stream(b, LONG).unwrap();
    dev.copy_from_device(&mut out, buf).unwrap();
    assert_eq!(out, [9; 8]);
    assert_eq!(dev.query_event(e).unwrap(), EventStatus::Complete);
}

#[test]
fn bad_handles_and_zero_timeouts_are_refused() {
    let dev = SimDevice::new(Topology::default()).unwrap();
    let s = dev.create_stream().unwrap();
    let e = dev.create_event().unwrap();
    dev.destroy_event(e).unwrap();
    assert_eq!(dev.query_event(e), Err(DeviceError::UnknownEvent(e)));
    assert_eq!(
        dev.synchronize_stream(s, Duration::ZERO),
        Err(DeviceError::ZeroTimeout)
    );
    dev.destroy_stream(s).unwrap();
    assert_eq!(dev.query_stream(s), Err(DeviceError::UnknownStream(s)));
    assert!(dev
        .copy_to_device_async(s, DevicePtr::from_raw(16), vec![1])
        .is_err());
    assert!(SimDevice::new(Topology {
        clusters: 0,
        aicpu_threads: 4
    })
    .is_err());
}

#[test]
fn handles_of_another_device_or_forged_ones_are_refused() {
    let a = SimDevice::new(Topology::default()).unwrap();
    let b = SimDevice::new(Topology::default()).unwrap();
    let (sa, ea, pa) = (
        a.create_stream().unwrap(),
        a.create_event().unwrap(),
        a.malloc(64).unwrap(),
    );
    let (sb, eb) = (b.create_stream().unwrap(), b.create_event().unwrap());
    assert_eq!(b.query_stream(sa), Err(DeviceError::UnknownStream(sa)));
    assert_eq!(
        b.synchronize_stream(sa, LONG),
        Err(DeviceError::UnknownStream(sa))
    );
    assert_eq!(b.query_event(ea), Err(DeviceError::UnknownEvent(ea)));
    assert_eq!(b.record_event(ea, sb), Err(DeviceError::UnknownEvent(ea)));
    assert_eq!(b.record_event(eb, sa), Err(DeviceError::UnknownStream(sa)));
    assert_eq!(
        b.stream_wait_event(sb, ea),
        Err(DeviceError::UnknownEvent(ea))
    );
    assert_eq!(b.destroy_stream(sa), Err(DeviceError::UnknownStream(sa)));
    assert_eq!(b.destroy_event(ea), Err(DeviceError::UnknownEvent(ea)));
    assert_eq!(
        b.copy_to_device(pa, &[1]),
        Err(DeviceError::UnknownPointer(pa.addr()))
    );
    assert_eq!(b.free(pa), Err(DeviceError::UnknownPointer(pa.addr())));
    assert!(matches!(
        b.copy_to_device_async(sb, pa, vec![1]),
        Err(DeviceError::UnknownPointer(_))
    ));
    // SAFETY: refused before anything runs (the stream is not b's).
    let launch = unsafe { b.launch_aicore(sa, count_core, DevicePtr::NULL) };
    assert_eq!(launch, Err(DeviceError::UnknownStream(sa)));
    // Forged values are refused the same way; a's handles still work on a.
    let forged = StreamId::from_raw(u32::MAX);
    assert_eq!(
        a.query_stream(forged),
        Err(DeviceError::UnknownStream(forged))
    );
    let forged = EventId::from_raw(0);
    assert_eq!(
        a.query_event(forged),
        Err(DeviceError::UnknownEvent(forged))
    );
    assert!(a.query_stream(sa).unwrap());
    assert_eq!(a.query_event(ea).unwrap(), EventStatus::Complete);
    a.free(pa).unwrap();
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn launches_reuse_the_device_threads() {
    // It counts the process's threads, which the other tests of this binary start on their
    // own threads: it runs in a child process that runs it alone.
    in_own_process!(launches_reuse_the_device_threads);
    let dev = SimDevice::new(Topology::default()).unwrap();
    let s = dev.create_stream().unwrap();
    // SAFETY: `count_core` ignores its argument.
    unsafe { dev.launch_aicore(s, count_core, DevicePtr::NULL) }.unwrap();
    dev.synchronize_stream(s, LONG).unwrap();
    let threads = thread_count();
    for _ in 0..50 {
        // SAFETY: both kernels ignore their argument.
        unsafe {
            dev.launch_aicore(s, count_core, DevicePtr::NULL).unwrap();
            dev.launch_aicpu(s, stamp_threads_noop, DevicePtr::NULL, 4)
                .unwrap();
        }
    }
    dev.synchronize_stream(s, LONG).unwrap();
    assert!(thread_count() <= threads, "launches started new threads");
}

fn stamp_threads_noop(_: &AicpuContext<'_>, _: DevicePtr) -> i32 {
    0
}

/// Waits on its core's DMB until a reset terminates it.
fn wait_until_reset(ctx: &AicoreContext<'_>, _: DevicePtr) {
    loop {
        ctx.regs.wait_dmb_change(ctx.regs.read_dmb());
    }
}

static AFTER_RESET_HITS: AtomicU32 = AtomicU32::new(0);

fn count_after_reset(_: &AicoreContext<'_>, _: DevicePtr) {
    AFTER_RESET_HITS.fetch_add(1, Ordering::SeqCst);
}

fn never_dispatched(_: &AicoreContext<'_>, _: DevicePtr) {
    panic!("no DMB write reaches a core of this launch");
}

/// A lazy AICore launch whose stream took it just before a reset, and that arms its cores
/// only after the reset's wake-up (it waited for the AICore launch in front of it, which
/// the reset ends), still ends: the reset is confirmed and the device runs launches again.
#[test]
fn a_lazy_launch_armed_after_a_reset_began_ends_with_the_reset() {
    let dev = SimDevice::new(Topology {
        clusters: 1,
        aicpu_threads: 2,
    })
    .unwrap();
    let (a, b) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
    // SAFETY: neither kernel reads its argument.
    unsafe { dev.launch_aicore(a, wait_until_reset, DevicePtr::NULL) }.unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: as above.
    unsafe { dev.launch_aicore_lazy(b, never_dispatched, DevicePtr::NULL, 1) }.unwrap();
    // Stream b has taken its launch and waits behind stream a's.
    std::thread::sleep(Duration::from_millis(200));
    dev.reset(Duration::from_secs(5))
        .expect("the reset ends both launches");
    // SAFETY: `count_after_reset` ignores its argument.
    unsafe { dev.launch_aicore(b, count_after_reset, DevicePtr::NULL) }.unwrap();
    dev.synchronize_stream(b, LONG).unwrap();
    assert_eq!(AFTER_RESET_HITS.load(Ordering::SeqCst), 3);
}
