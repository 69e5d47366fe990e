//! Fault notices of the sim device (`docs/health.md`, `docs/sim-device.md`): one
//! exception-callback slot per process, notices (device, stream, code) raised by kernel
//! faults — a kernel that panics on a device thread among them — and delivered promptly,
//! late or never; host functions in stream order; the memory fault points.
//!
//! The callback slot is process-wide, so everything that installs one runs in this binary's
//! single test, one row after another. A test binary of its own, not a module of `it`: the
//! other tests' kernel faults would raise notices into that slot too.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use simpler_device::sim::{
    fault_callback_installed, raise_foreign_notice, FaultAction, FaultPoint, FaultRule,
    NoticeDelivery, SimDevice, KERNEL_PANIC_STATUS,
};
use simpler_device::{
    AicoreContext, AicpuContext, Device, DeviceError, DevicePtr, FaultCallback, FaultNotice,
    StreamId, Topology,
};

const LONG: Duration = Duration::from_secs(20);

fn ok_kernel(_: &AicpuContext<'_>, _: DevicePtr) -> i32 {
    0
}

fn failing_kernel(_: &AicpuContext<'_>, _: DevicePtr) -> i32 {
    -507018
}

fn small() -> SimDevice {
    SimDevice::new(Topology {
        clusters: 1,
        aicpu_threads: 2,
    })
    .unwrap()
}

type Seen = Arc<Mutex<Vec<FaultNotice>>>;

fn collector() -> (FaultCallback, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    (Arc::new(move |n| s.lock().push(n)), seen)
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + LONG;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// How a row makes its device raise a notice.
#[derive(Clone, Copy, Debug)]
enum Cause {
    /// An AICPU kernel returns a fatal status.
    KernelReturn,
    /// An injected fatal status (the kernel does not run).
    InjectedFatal,
    /// An injected notice on a kernel that ends cleanly.
    InjectedNotice,
}

struct Row {
    name: &'static str,
    cause: Cause,
    /// Extra rule on the notice's delivery.
    delivery: Option<FaultAction>,
    /// The notice is in the callback before the kernel's stream reaches its next record.
    before_next_op: bool,
    /// The notice arrives at all.
    arrives: bool,
    /// A stream synchronize reports a fault (sticky).
    sticky: bool,
    code: i32,
}

const ROWS: &[Row] = &[
    Row {
        name: "an AICPU kernel's fatal return raises a prompt notice",
        cause: Cause::KernelReturn,
        delivery: None,
        before_next_op: true,
        arrives: true,
        sticky: true,
        code: -507018,
    },
    Row {
        name: "an injected fatal status raises a prompt notice",
        cause: Cause::InjectedFatal,
        delivery: None,
        before_next_op: true,
        arrives: true,
        sticky: true,
        code: -9,
    },
    Row {
        name: "an injected notice on a clean kernel: no sticky fault",
        cause: Cause::InjectedNotice,
        delivery: None,
        before_next_op: true,
        arrives: true,
        sticky: false,
        code: 77,
    },
    Row {
        name: "a late notice arrives after the stream moved on",
        cause: Cause::InjectedNotice,
        delivery: Some(FaultAction::DelayNotice(Duration::from_millis(300))),
        before_next_op: false,
        arrives: true,
        sticky: false,
        code: 78,
    },
    Row {
        name: "a lost notice never arrives",
        cause: Cause::InjectedFatal,
        delivery: Some(FaultAction::LoseNotice),
        before_next_op: false,
        arrives: false,
        sticky: true,
        code: -10,
    },
];

fn notice_rows() {
    for row in ROWS {
        let dev = small();
        let (cb, seen) = collector();
        dev.set_fault_callback(Some(cb)).unwrap();
        let s = dev.create_stream().unwrap();
        let ev = dev.create_event().unwrap();
        if let Some(a) = row.delivery {
            dev.inject(FaultRule::next(FaultPoint::Notice, a));
        }
        let kernel = match row.cause {
            Cause::KernelReturn => failing_kernel,
            Cause::InjectedFatal => {
                dev.inject(FaultRule::next(
                    FaultPoint::AicpuKernel,
                    FaultAction::KernelFatal {
                        status: row.code,
                        run: false,
                    },
                ));
                ok_kernel
            }
            Cause::InjectedNotice => {
                dev.inject(FaultRule::next(
                    FaultPoint::AicpuKernel,
                    FaultAction::RaiseNotice { code: row.code },
                ));
                ok_kernel
            }
        };
        // SAFETY: both kernels ignore their argument.
        unsafe { dev.launch_aicpu(s, kernel, DevicePtr::NULL, 2) }.unwrap();
        dev.record_event(ev, s).unwrap();
        dev.synchronize_event(ev, LONG).unwrap();
        let want = FaultNotice {
            device: dev.device_id(),
            stream: Some(s),
            code: row.code,
        };
        let at_record = seen.lock().clone();
        assert_eq!(
            at_record == vec![want],
            row.before_next_op,
            "{}: {at_record:?}",
            row.name
        );
        if row.arrives {
            wait_until(row.name, || !seen.lock().is_empty());
            assert_eq!(*seen.lock(), vec![want], "{}", row.name);
        } else {
            std::thread::sleep(Duration::from_millis(100));
            assert!(seen.lock().is_empty(), "{}", row.name);
        }
        let stats = dev.notice_stats();
        assert_eq!(stats.raised, 1, "{}", row.name);
        assert_eq!(stats.delivered, u64::from(row.arrives), "{}", row.name);
        assert_eq!(stats.lost, u64::from(!row.arrives), "{}", row.name);
        assert_eq!(
            dev.synchronize_stream(s, LONG).is_err(),
            row.sticky,
            "{}",
            row.name
        );
        dev.set_fault_callback(None).unwrap();
    }
}

fn one_slot_per_process() {
    let (a, b) = (small(), small());
    assert_ne!(a.device_id(), b.device_id(), "each device has its own id");
    let (cb1, seen1) = collector();
    let (cb2, seen2) = collector();
    a.set_fault_callback(Some(cb1)).unwrap();
    b.raise_notice(None, 5, NoticeDelivery::Prompt);
    assert_eq!(
        seen1.lock().len(),
        1,
        "b's notice reaches the callback installed via a"
    );
    // Installing through b replaces the process's one callback.
    b.set_fault_callback(Some(cb2)).unwrap();
    a.raise_notice(Some(StreamId::from_raw(42)), 6, NoticeDelivery::Prompt);
    assert_eq!(seen1.lock().len(), 1);
    assert_eq!(
        *seen2.lock(),
        vec![FaultNotice {
            device: a.device_id(),
            stream: Some(StreamId::from_raw(42)),
            code: 6
        }]
    );
    raise_foreign_notice(
        FaultNotice {
            device: 999,
            stream: None,
            code: 1,
        },
        NoticeDelivery::Prompt,
    );
    assert_eq!(seen2.lock().len(), 2);
    // Removing it through a silences every device; their notices are lost.
    a.set_fault_callback(None).unwrap();
    assert!(!fault_callback_installed());
    b.raise_notice(None, 7, NoticeDelivery::Prompt);
    assert_eq!(seen2.lock().len(), 2);
    assert_eq!(b.notice_stats().lost, 1);
}

fn host_functions_run_in_stream_order() {
    let dev = small();
    let s = dev.create_stream().unwrap();
    let gate = Arc::new(AtomicBool::new(false));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (g, o) = (gate.clone(), order.clone());
    dev.launch_host_fn(s, move || {
        while !g.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        o.lock().push(1);
    })
    .unwrap();
    let o = order.clone();
    dev.launch_host_fn(s, move || o.lock().push(2)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(order.lock().is_empty(), "the gate holds the stream");
    assert!(!dev.query_stream(s).unwrap());
    gate.store(true, Ordering::Release);
    dev.synchronize_stream(s, LONG).unwrap();
    assert_eq!(*order.lock(), vec![1, 2]);
}

fn memory_fault_points() {
    let dev = small();
    dev.inject(FaultRule::next(FaultPoint::Malloc, FaultAction::Refuse));
    assert_eq!(dev.malloc(64), Err(DeviceError::Injected("malloc")));
    let p = dev.malloc(64).unwrap();
    dev.inject(FaultRule::next(
        FaultPoint::CopyToDevice,
        FaultAction::Refuse,
    ));
    assert_eq!(
        dev.copy_to_device(p, &[1, 2]),
        Err(DeviceError::Injected("copy_to_device"))
    );
    dev.inject(FaultRule::next(FaultPoint::Free, FaultAction::Refuse));
    assert_eq!(dev.free(p), Err(DeviceError::Injected("free")));
    assert_eq!(dev.live_allocations(), 1, "a refused free frees nothing");
    dev.free(p).unwrap();
    assert_eq!(dev.live_allocations(), 0);
}

/// AICPU threads that ran the counting kernel.
static AICPU_RUNS: AtomicU32 = AtomicU32::new(0);
/// AICore cores that ran the counting kernel.
static AICORE_RUNS: AtomicU32 = AtomicU32::new(0);

fn count_aicpu(_: &AicpuContext<'_>, _: DevicePtr) -> i32 {
    AICPU_RUNS.fetch_add(1, Ordering::SeqCst);
    0
}

fn count_aicore(_: &AicoreContext<'_>, _: DevicePtr) {
    AICORE_RUNS.fetch_add(1, Ordering::SeqCst);
}

fn panic_on_aicpu_thread_1(ctx: &AicpuContext<'_>, _: DevicePtr) -> i32 {
    if ctx.thread_idx == 1 {
        panic!("scheduler invariant broken on thread {}", ctx.thread_idx);
    }
    0
}

fn panic_on_core_2(ctx: &AicoreContext<'_>, _: DevicePtr) {
    if ctx.core_id == 2 {
        panic!("core kernel bug");
    }
}

/// A kernel (or host function) that panics on a device thread is a kernel fault of its
/// launch: sticky on the stream with the message, a notice with the panic status naming the
/// stream before the stream moves on, and the threads serve the next launch.
fn panics_are_kernel_faults() {
    let dev = small();
    let (cb, seen) = collector();
    dev.set_fault_callback(Some(cb)).unwrap();
    let cores = dev.topology().core_count();
    let threads = dev.topology().aicpu_threads;
    // Each case: launches its panic on a fresh stream, says what the message must name.
    type Launch = fn(&SimDevice, StreamId);
    let cases: [(&str, Launch, &[&str]); 3] = [
        (
            "AICPU kernel",
            |dev, s| {
                // SAFETY: the kernel ignores its argument.
                unsafe { dev.launch_aicpu(s, panic_on_aicpu_thread_1, DevicePtr::NULL, 2) }.unwrap()
            },
            &["AICPU thread 1", "scheduler invariant broken on thread 1"],
        ),
        (
            "AICore kernel",
            |dev, s| {
                // SAFETY: the kernel ignores its argument.
                unsafe { dev.launch_aicore(s, panic_on_core_2, DevicePtr::NULL) }.unwrap()
            },
            &["AICore 2", "core kernel bug"],
        ),
        (
            "host function",
            |dev, s| {
                dev.launch_host_fn(s, || panic!("host work failed"))
                    .unwrap()
            },
            &["host function", "host work failed"],
        ),
    ];
    for (what, launch, names) in cases {
        seen.lock().clear();
        let raised = dev.notice_stats().raised;
        let s = dev.create_stream().unwrap();
        let ev = dev.create_event().unwrap();
        launch(&dev, s);
        dev.record_event(ev, s).unwrap();
        dev.synchronize_event(ev, LONG).unwrap();
        assert_eq!(
            *seen.lock(),
            vec![FaultNotice {
                device: dev.device_id(),
                stream: Some(s),
                code: KERNEL_PANIC_STATUS,
            }],
            "{what}: the notice is in the callback before the stream's next record"
        );
        assert_eq!(dev.notice_stats().raised, raised + 1, "{what}");
        assert!(dev.query_stream(s).unwrap(), "{what}: the stream drained");
        for _ in 0..2 {
            match dev.synchronize_stream(s, LONG) {
                Err(DeviceError::KernelFault {
                    stream,
                    status,
                    panic: Some(message),
                }) => {
                    assert_eq!((stream, status), (s, KERNEL_PANIC_STATUS), "{what}");
                    for name in names {
                        assert!(message.contains(name), "{what}: {message:?} names {name:?}");
                    }
                    let shown = dev.synchronize_stream(s, LONG).unwrap_err().to_string();
                    assert!(shown.contains(names[1]), "{what}: {shown}");
                }
                other => panic!("{what}: synchronize reported {other:?}"),
            }
        }
        // The stream keeps running later work; its fault stays latched.
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        dev.launch_host_fn(s, move || r.store(true, Ordering::SeqCst))
            .unwrap();
        assert!(dev.synchronize_stream(s, LONG).is_err());
        assert!(
            ran.load(Ordering::SeqCst),
            "{what}: the stream thread survived"
        );
        // Every device thread serves the next launch, on a fresh stream.
        let fresh = dev.create_stream().unwrap();
        let (cpu0, core0) = (
            AICPU_RUNS.load(Ordering::SeqCst),
            AICORE_RUNS.load(Ordering::SeqCst),
        );
        // SAFETY: both kernels ignore their argument.
        unsafe {
            dev.launch_aicpu(fresh, count_aicpu, DevicePtr::NULL, threads)
                .unwrap();
            dev.launch_aicore(fresh, count_aicore, DevicePtr::NULL)
                .unwrap();
        }
        dev.synchronize_stream(fresh, LONG).unwrap();
        assert_eq!(AICPU_RUNS.load(Ordering::SeqCst) - cpu0, threads, "{what}");
        assert_eq!(AICORE_RUNS.load(Ordering::SeqCst) - core0, cores, "{what}");
        // A reset clears the latched fault.
        dev.reset(LONG).unwrap();
        dev.synchronize_stream(s, LONG).unwrap();
    }
    dev.set_fault_callback(None).unwrap();
}

#[test]
fn sim_fault_notices() {
    notice_rows();
    one_slot_per_process();
    host_functions_run_in_stream_order();
    memory_fault_points();
    panics_are_kernel_faults();
}
