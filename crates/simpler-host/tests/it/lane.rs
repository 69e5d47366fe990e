//! The run lane end to end on the sim device: pipelined runs at depth 2 and 1, per-run
//! completion (a queued successor never delays its predecessor, and a recorded success
//! never synchronizes a stream), handles (poll, bounded wait, re-wait, result), the
//! fault-injection matrix of `docs/lane.md` §5 and §11 (one row
//! per shape — what was injected → the run's verdict, whether its device resources were
//! released or retained, and whether the worker admits runs afterwards), the alias ordering
//! of runs that share host buffers, and the per-slot staging pools.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use simpler_abi::*;
use simpler_device::sim::{FaultAction, FaultPoint, FaultRule, KernelKind, SimDevice};
use simpler_device::{Device, Topology};
use simpler_host::*;

const N: usize = 4096;

static GATE: AtomicBool = AtomicBool::new(true);
/// The matrix's own gate (tests run in parallel).
static MATRIX_GATE: AtomicBool = AtomicBool::new(true);

/// Holds its core until [`GATE`] opens, then y = x + 1.
unsafe extern "C-unwind" fn gated_kernel(args: *mut i64) {
    while !GATE.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: same arguments as `add_one`.
    unsafe { add_one(args) }
}

/// Holds its core until [`MATRIX_GATE`] opens, then y = x + 1.
unsafe extern "C-unwind" fn matrix_gated_kernel(args: *mut i64) {
    while !MATRIX_GATE.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: same arguments as `add_one`.
    unsafe { add_one(args) }
}

fn spec() -> CallableSpec {
    let arg = |name: &str, direction| ArgSpec {
        name: name.into(),
        direction,
        dtype: DataType::Float32,
        shape: None,
    };
    CallableSpec {
        name: "inc".into(),
        signature: Signature::new(vec![
            arg("x", ArgDirection::In),
            arg("y", ArgDirection::Out),
            ArgSpec {
                name: "gated".into(),
                direction: ArgDirection::Scalar,
                dtype: DataType::Uint64,
                shape: None,
            },
        ])
        .unwrap(),
        orchestration: CodeImage::Orchestration(inc_orch),
        kernels: vec![
            KernelSpec {
                func_id: 0,
                core_type: CoreType::Aiv,
                image: CodeImage::Kernel(add_one),
                name: None,
            },
            KernelSpec {
                func_id: 1,
                core_type: CoreType::Aiv,
                image: CodeImage::Kernel(gated_kernel),
                name: None,
            },
            KernelSpec {
                func_id: 2,
                core_type: CoreType::Aiv,
                image: CodeImage::Kernel(matrix_gated_kernel),
                name: None,
            },
        ],
        runtime: None,
    }
}

fn args(seed: f32, gated: bool) -> Vec<OwnedArg> {
    args_with(seed, gated as u64)
}

/// `func`: 0 plain, 1 gated by [`GATE`], 2 gated by [`MATRIX_GATE`].
fn args_with(seed: f32, func: u64) -> Vec<OwnedArg> {
    let x: Vec<f32> = (0..N).map(|i| seed + i as f32).collect();
    vec![
        OwnedArg::Tensor {
            buffer: Box::new(f32_bytes(&x)),
            shape: vec![N as u64],
            dtype: DataType::Float32,
        },
        OwnedArg::Tensor {
            buffer: Box::new(vec![0u8; N * 4]),
            shape: vec![N as u64],
            dtype: DataType::Float32,
        },
        OwnedArg::Scalar(func),
    ]
}

fn worker(depth: u32, run_timeout: Duration) -> (Arc<SimDevice>, ChipWorker, CallableId) {
    let dev = Arc::new(SimDevice::new(Topology::default()).unwrap());
    let cfg = WorkerConfig {
        launch_depth: depth,
        run_timeout,
        heap_size: 1 << 20,
        ..WorkerConfig::default()
    };
    let w = ChipWorker::with_device(cfg, dev.clone() as Arc<dyn Device>).unwrap();
    let id = w.register(&spec()).unwrap();
    (dev, w, id)
}

#[test]
fn pipelined_runs_are_correct_at_both_depths() {
    for depth in [1, 2] {
        let (dev, w, id) = worker(depth, Duration::from_secs(30));
        let mut handles = std::collections::VecDeque::new();
        for r in 0..40 {
            if handles.len() == 2 {
                let (seed, h): (f32, RunHandle) = handles.pop_front().unwrap();
                check_output(h.result().unwrap(), seed);
            }
            handles.push_back((r as f32, w.submit(id, args(r as f32, false)).unwrap()));
        }
        for (seed, h) in handles {
            check_output(h.result().unwrap(), seed);
        }
        // A recorded success never falls back to the stream synchronize.
        assert_eq!(dev.calls(FaultPoint::SynchronizeStream), 0, "depth {depth}");
    }
}

#[test]
fn a_queued_successor_never_delays_its_predecessor() {
    GATE.store(false, Ordering::Release);
    let (dev, w, id) = worker(2, Duration::from_secs(30));
    let a = w.submit(id, args(1.0, false)).unwrap();
    let b = w.submit(id, args(2.0, true)).unwrap(); // held on the device by the gate
    a.wait(None).unwrap();
    assert!(!b.poll(), "the successor is still running");
    let r = b.wait(Some(Duration::from_millis(20)));
    assert!(matches!(r, Err(HostError::WaitTimeout(_))), "{r:?}");
    assert!(matches!(
        b.wait(Some(Duration::from_millis(1))),
        Err(HostError::WaitTimeout(_))
    ));
    assert_eq!(dev.calls(FaultPoint::SynchronizeStream), 0);
    let t = Instant::now();
    assert!(!b.poll());
    assert!(t.elapsed() < Duration::from_millis(50), "poll never blocks");
    GATE.store(true, Ordering::Release);
    b.wait(None).unwrap();
    b.wait(None).unwrap();
    assert!(b.poll());
    check_output(b.result().unwrap(), 2.0);
    check_output(a.result().unwrap(), 1.0);
}

#[test]
fn handles_are_send_and_sync_and_another_thread_can_wait() {
    let (_dev, w, id) = worker(2, Duration::from_secs(30));
    let h = w.submit(id, args(3.0, false)).unwrap();
    let out = std::thread::scope(|s| s.spawn(|| h.result()).join().unwrap()).unwrap();
    check_output(out, 3.0);
    // Bad arguments are refused synchronously.
    let mut bad = args(0.0, false);
    bad.pop();
    assert!(matches!(
        w.submit(id, bad),
        Err(HostError::ArgumentCount { .. })
    ));
}

// ---------------------------------------------------------------------------------------
// The fault-injection matrix.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Ok,
    /// A device error while launching (the launch's own error is the run's outcome).
    LaunchError,
    RunUndecided,
    DeviceFault,
    RecordUnreadable,
    Timeout,
}

fn verdict(r: &Result<(), HostError>) -> Verdict {
    match r {
        Ok(()) => Verdict::Ok,
        Err(HostError::Device { context, .. }) if context.contains("result record") => {
            Verdict::RecordUnreadable
        }
        Err(HostError::Device { .. }) => Verdict::LaunchError,
        Err(HostError::RunUndecided(_)) => Verdict::RunUndecided,
        Err(HostError::DeviceFault(_)) => Verdict::DeviceFault,
        Err(HostError::Timeout(_)) => Verdict::Timeout,
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resources {
    Released,
    Retained,
}

struct Row {
    name: &'static str,
    /// Table of the design document this row covers.
    shape: &'static str,
    /// Submit a predecessor first (the fault then hits the joined successor).
    with_predecessor: bool,
    /// Runs on the slot before the faulted one (0: the fault hits the slot's first run).
    warm_runs: usize,
    inject: &'static [FaultRule],
    /// The faulted run is held on the device for a while (its boundaries read Pending).
    gated: bool,
    /// The forced reset at teardown fails.
    reset_fails: bool,
    verdict: Verdict,
    resources: Resources,
    admits_after: bool,
    /// Memory freed at teardown (false: a forced reset could not be confirmed).
    freed_at_teardown: bool,
}

use FaultAction::*;
use FaultPoint::*;

const ROWS: &[Row] = &[
    Row {
        name: "event creation fails in the arming prologue",
        shape: "no kernel, no queued wait",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[next(CreateEvent, Refuse)],
        gated: false,
        reset_fails: false,
        verdict: Verdict::LaunchError,
        resources: Resources::Released,
        admits_after: true,
        freed_at_teardown: true,
    },
    Row {
        name: "AICore submit refused before the device accepted it (warm slot)",
        shape: "no kernel, no queued wait",
        with_predecessor: false,
        warm_runs: 2,
        inject: &[next(LaunchAicore, Refuse)],
        gated: false,
        reset_fails: false,
        verdict: Verdict::LaunchError,
        resources: Resources::Released,
        admits_after: true,
        freed_at_teardown: true,
    },
    Row {
        name: "clean run",
        shape: "kernel submitted, boundary recorded",
        with_predecessor: true,
        warm_runs: 0,
        inject: &[],
        gated: false,
        reset_fails: false,
        verdict: Verdict::Ok,
        resources: Resources::Released,
        admits_after: true,
        freed_at_teardown: true,
    },
    Row {
        name: "boundary query fails",
        shape: "kernel submitted, boundary recorded",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[FaultRule {
            point: QueryEvent,
            skip: 0,
            times: u64::MAX,
            action: Refuse,
        }],
        gated: false,
        reset_fails: false,
        verdict: Verdict::RunUndecided,
        resources: Resources::Released,
        admits_after: true,
        freed_at_teardown: true,
    },
    Row {
        name: "boundary wait fails",
        shape: "kernel submitted, boundary recorded",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[next(SynchronizeEvent, Refuse)],
        gated: true,
        reset_fails: false,
        verdict: Verdict::RunUndecided,
        resources: Resources::Released,
        admits_after: true,
        freed_at_teardown: true,
    },
    Row {
        name: "boundary query fails and the fallback synchronize times out",
        shape: "kernel submitted, boundary recorded",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[
            FaultRule {
                point: QueryEvent,
                skip: 0,
                times: u64::MAX,
                action: Refuse,
            },
            FaultRule {
                point: SynchronizeEvent,
                skip: 0,
                times: u64::MAX,
                action: Refuse,
            },
            next(SynchronizeStream, TimeOut),
        ],
        gated: false,
        reset_fails: false,
        verdict: Verdict::Timeout,
        resources: Resources::Retained,
        admits_after: false,
        freed_at_teardown: true,
    },
    Row {
        name: "AICPU boundary record fails after its kernel was accepted",
        shape: "kernel submitted, boundary missing",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[nth(RecordEvent, 2, EnqueueThenFail)],
        gated: false,
        reset_fails: false,
        verdict: Verdict::LaunchError,
        resources: Resources::Released,
        admits_after: true,
        freed_at_teardown: true,
    },
    Row {
        name: "AICPU submit fails after the device accepted it",
        shape: "kernel submitted, boundary missing",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[next(LaunchAicpu, EnqueueThenFail)],
        gated: false,
        reset_fails: false,
        verdict: Verdict::LaunchError,
        resources: Resources::Released,
        admits_after: true,
        freed_at_teardown: true,
    },
    Row {
        name: "AICore boundary record refused: the AICPU kernel never goes out",
        shape: "kernel submitted, boundary missing",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[next(RecordEvent, Refuse)],
        gated: false,
        reset_fails: false,
        verdict: Verdict::LaunchError,
        resources: Resources::Retained,
        admits_after: false,
        freed_at_teardown: true,
    },
    Row {
        name: "AICPU submit refused after the AICore kernel went out",
        shape: "kernel submitted, boundary missing",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[next(LaunchAicpu, Refuse)],
        gated: false,
        reset_fails: false,
        verdict: Verdict::LaunchError,
        resources: Resources::Retained,
        admits_after: false,
        freed_at_teardown: true,
    },
    Row {
        name: "as above, and the teardown reset cannot be confirmed",
        shape: "kernel submitted, boundary missing",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[next(LaunchAicpu, Refuse)],
        reset_fails: true,
        gated: false,
        verdict: Verdict::LaunchError,
        resources: Resources::Retained,
        admits_after: false,
        freed_at_teardown: false,
    },
    Row {
        name: "zero result marker publication fails",
        shape: "no kernel, no queued wait (an async copy attempt is device-visible)",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[next(CopyToDeviceAsync, Refuse)],
        gated: false,
        reset_fails: false,
        verdict: Verdict::LaunchError,
        resources: Resources::Released,
        admits_after: true,
        freed_at_teardown: true,
    },
    Row {
        name: "successor's cross-run wait fails after being enqueued",
        shape: "no kernel, but a committed wait exists",
        with_predecessor: true,
        warm_runs: 0,
        inject: &[next(StreamWaitEvent, EnqueueThenFail)],
        gated: false,
        reset_fails: false,
        verdict: Verdict::LaunchError,
        resources: Resources::Released,
        admits_after: true,
        freed_at_teardown: true,
    },
    Row {
        name: "successor's join proof record fails",
        shape: "no kernel, but a committed wait exists",
        with_predecessor: true,
        warm_runs: 0,
        inject: &[next(RecordEvent, Refuse)],
        gated: false,
        reset_fails: false,
        verdict: Verdict::LaunchError,
        resources: Resources::Released,
        admits_after: true,
        freed_at_teardown: true,
    },
    Row {
        name: "both kernels end with a fatal status, nothing published",
        shape: "kernel submitted, boundary recorded (events clean, synchronize reports it)",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[
            next(
                AicoreKernel,
                KernelFatal {
                    status: -507018,
                    run: false,
                },
            ),
            next(
                AicpuKernel,
                KernelFatal {
                    status: -507018,
                    run: false,
                },
            ),
        ],
        gated: false,
        reset_fails: false,
        verdict: Verdict::DeviceFault,
        resources: Resources::Released,
        admits_after: false,
        freed_at_teardown: true,
    },
    Row {
        // The run's own record decides it (a notice never decides a run), but the fault's
        // notice names this worker's AICPU stream: the device is suspect and refuses new runs
        // (device health).
        name: "AICPU fatal status latched after a published success",
        shape: "kernel submitted, boundary recorded (the record's success is the verdict)",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[next(
            AicpuKernel,
            KernelFatal {
                status: -507018,
                run: true,
            },
        )],
        gated: false,
        reset_fails: false,
        verdict: Verdict::Ok,
        resources: Resources::Released,
        admits_after: false,
        freed_at_teardown: true,
    },
    Row {
        name: "result record transfer fails",
        shape: "kernel submitted, boundary recorded",
        with_predecessor: false,
        warm_runs: 0,
        inject: &[next(CopyFromDevice, Refuse)],
        gated: false,
        reset_fails: false,
        verdict: Verdict::RecordUnreadable,
        resources: Resources::Released,
        admits_after: true,
        freed_at_teardown: true,
    },
];

#[test]
fn fault_injection_matrix() {
    for row in ROWS {
        let (dev, w, id) = worker(2, Duration::from_millis(1500));
        for r in 0..row.warm_runs {
            check_output(
                w.submit(id, args(r as f32, false))
                    .unwrap()
                    .result()
                    .unwrap(),
                r as f32,
            );
        }
        let pred = row
            .with_predecessor
            .then(|| w.submit(id, args(10.0, false)).unwrap());
        // Every device allocation made from here on is the faulted run's staging (pooled
        // after the run, or quarantined), or the predecessor's (pooled after it).
        let baseline = dev.live_allocations() - if row.with_predecessor { 2 } else { 0 };
        let pooled_before = w.staging_report().unwrap().pooled_buffers;
        for rule in row.inject {
            dev.inject(*rule);
        }
        if row.gated {
            MATRIX_GATE.store(false, Ordering::Release);
        }
        let h = w
            .submit(id, args_with(20.0, if row.gated { 2 } else { 0 }))
            .unwrap();
        let opener = row.gated.then(|| {
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                MATRIX_GATE.store(true, Ordering::Release);
            })
        });
        if let Some(p) = pred {
            let r = p.wait(None);
            assert!(
                r.is_ok() || !row.admits_after,
                "{}: the predecessor keeps its own outcome: {r:?}",
                row.name
            );
        }
        let r = h.wait(None);
        if let Some(t) = opener {
            t.join().unwrap();
        }
        assert_eq!(
            verdict(&r),
            row.verdict,
            "{} ({}): {r:?}",
            row.name,
            row.shape
        );
        dev.clear_faults();
        if row.reset_fails {
            dev.inject(next(Reset, Refuse));
        }
        let held = dev.live_allocations() - baseline;
        let want = match row.resources {
            Resources::Released => 0,
            Resources::Retained => 2,
        };
        let staging = w.staging_report().unwrap();
        assert_eq!(
            staging.quarantined_buffers, want,
            "{}: staging buffers held (quarantined) after the run",
            row.name
        );
        assert_eq!(
            held,
            staging.pooled_buffers - pooled_before + want,
            "{}: every other staging buffer went back to its slot's pool",
            row.name
        );
        let next = w.submit(id, args(30.0, false));
        match (row.admits_after, next) {
            (true, Ok(h)) => check_output(h.result().unwrap(), 30.0),
            (false, Err(HostError::DeviceUnusable(_))) => {}
            (want, got) => panic!("{}: admission {want} but got {got:?}", row.name),
        }
        assert_eq!(
            w.unusable_reason().is_none(),
            row.admits_after,
            "{}",
            row.name
        );
        drop(w);
        assert_eq!(
            dev.live_allocations() == 0,
            row.freed_at_teardown,
            "{}: teardown",
            row.name
        );
    }
}

/// Admission closes at once: after a launch graded Partial (the AICore kernel went out, the
/// AICPU kernel was refused, so nothing will ever end the AICore kernel but a reset), the
/// next submit is refused immediately with a typed error — it never sits through the failed
/// run's bounded drain, which the failed run's own wait performs.
#[test]
fn a_partial_launch_refuses_the_next_submit_at_once() {
    let run_timeout = Duration::from_millis(1500);
    let (dev, w, id) = worker(2, run_timeout);
    dev.inject(next(LaunchAicpu, Refuse));
    let partial = w.submit(id, args(1.0, false)).unwrap();
    for attempt in 0..3 {
        let t = Instant::now();
        let r = w.submit(id, args(2.0, false));
        assert!(
            matches!(&r, Err(HostError::LanePoisoned(why)) if why.contains("admission is closed")),
            "attempt {attempt}: {:?}",
            r.map(|_| ())
        );
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "attempt {attempt}: refused after {:?} (the run timeout is {run_timeout:?})",
            t.elapsed()
        );
    }
    // The failed run's own wait drains it: bounded, its launch error, and the device is
    // left unusable (nothing proved the AICore kernel ended).
    let r = partial.wait(None);
    assert!(
        matches!(&r, Err(HostError::Device { context, .. }) if context.contains("AICPU")),
        "{r:?}"
    );
    assert!(matches!(
        w.submit(id, args(3.0, false)),
        Err(HostError::DeviceUnusable(_))
    ));
    w.recover_device().unwrap();
    check_output(
        w.submit(id, args(4.0, false)).unwrap().result().unwrap(),
        4.0,
    );
    w.close().unwrap();
}

/// A bounded wait is bounded by its own timeout in every state, a Partial launch included:
/// the drain's synchronize (the only proof left there) ends by the caller's deadline, the
/// wait says WaitTimeout, and the run stays waitable until its own timeout decides it.
#[test]
fn a_bounded_wait_on_a_partial_launch_returns_by_its_own_timeout() {
    let run_timeout = Duration::from_secs(6);
    let (dev, w, id) = worker(2, run_timeout);
    dev.inject(next(LaunchAicpu, Refuse));
    let partial = w.submit(id, args(1.0, false)).unwrap();
    for _ in 0..2 {
        let t = Instant::now();
        let r = partial.wait(Some(Duration::from_millis(300)));
        let took = t.elapsed();
        assert!(matches!(r, Err(HostError::WaitTimeout(_))), "{r:?}");
        assert!(
            took < run_timeout / 2,
            "a 300 ms wait took {took:?} (the run timeout is {run_timeout:?})"
        );
    }
    let r = partial.wait(None);
    assert!(
        matches!(&r, Err(HostError::Device { context, .. }) if context.contains("AICPU")),
        "{r:?}"
    );
    w.recover_device().unwrap();
    w.close().unwrap();
}

#[test]
fn a_successor_starts_each_kernel_only_after_its_predecessor_finished_the_other() {
    let (dev, w, id) = worker(2, Duration::from_secs(30));
    dev.trace_kernels(true);
    // The predecessor's AICPU kernel lingers 300 ms after its work: without the crossed
    // join (successor AICore waits on the predecessor's AICPU boundary, successor AICPU on
    // its AICore boundary) the successor's AICore kernel would start inside that window.
    dev.inject(FaultRule {
        point: FaultPoint::AicpuKernel,
        skip: 0,
        times: 1,
        action: FaultAction::SlowFinish(Duration::from_millis(300)),
    });
    let a = w.submit(id, args(1.0, false)).unwrap();
    let b = w.submit(id, args(2.0, false)).unwrap();
    check_output(a.result().unwrap(), 1.0);
    check_output(b.result().unwrap(), 2.0);
    let spans = dev.kernel_trace();
    assert_eq!(spans.len(), 4, "{spans:?}");
    let slow = spans
        .iter()
        .find(|s| s.end - s.start >= Duration::from_millis(300))
        .expect("the predecessor's slow AICPU kernel");
    let find = |pred: bool, kind: KernelKind| {
        spans
            .iter()
            .find(|s| (s.arg == slow.arg) == pred && s.kind == kind)
            .copied()
            .unwrap_or_else(|| panic!("no {kind:?} span (predecessor: {pred}) in {spans:?}"))
    };
    let (a_core, a_cpu) = (
        find(true, KernelKind::Aicore),
        find(true, KernelKind::Aicpu),
    );
    let (b_core, b_cpu) = (
        find(false, KernelKind::Aicore),
        find(false, KernelKind::Aicpu),
    );
    assert!(
        b_core.start >= a_cpu.end,
        "the successor's AICore kernel started before the predecessor's AICPU kernel finished"
    );
    assert!(
        b_cpu.start >= a_core.end,
        "the successor's AICPU kernel started before the predecessor's AICore kernel finished"
    );
}

// ---------------------------------------------------------------------------------------
// Alias ordering: runs that share host buffers.

/// Host bytes several runs may hold at once, as numpy views are lent to the lane: each
/// [`Window`] (writable) and [`ReadView`] (read-only) lends the same allocation.
struct SharedBytes(std::cell::UnsafeCell<Vec<u8>>);

// SAFETY: the lane touches a run's host buffer only under its lock (staging in at prepare,
// copying back at finalize) and holds no slice of it between, so two views on these bytes
// are never used at once; the test reads them only after every run holding one finished.
unsafe impl Sync for SharedBytes {}

struct Window(Arc<SharedBytes>);

impl HostBuffer for Window {
    fn bytes(&self) -> &[u8] {
        // SAFETY: see `SharedBytes`: no two uses overlap in time.
        unsafe { (*self.0 .0.get()).as_slice() }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: see `SharedBytes`: no two uses overlap in time.
        unsafe { (*self.0 .0.get()).as_mut_slice() }
    }
}

/// A read-only view of shared bytes, lent as [`OwnedArg::Input`].
struct ReadView(Arc<SharedBytes>);

impl HostInput for ReadView {
    fn bytes(&self) -> &[u8] {
        // SAFETY: see `SharedBytes`: no two uses overlap in time.
        unsafe { (*self.0 .0.get()).as_slice() }
    }
}

fn shared(bytes: Vec<u8>) -> Arc<SharedBytes> {
    Arc::new(SharedBytes(std::cell::UnsafeCell::new(bytes)))
}

fn tensor(buffer: impl HostBuffer) -> OwnedArg {
    OwnedArg::Tensor {
        buffer: Box::new(buffer),
        shape: vec![N as u64],
        dtype: DataType::Float32,
    }
}

/// A worker whose next run's AICPU kernel lingers, so that run is unfinished for a while.
fn lingering_worker() -> (Arc<SimDevice>, ChipWorker, CallableId) {
    let (dev, w, id) = worker(2, Duration::from_secs(30));
    dev.inject(FaultRule {
        point: FaultPoint::AicpuKernel,
        skip: 0,
        times: 1,
        action: FaultAction::SlowFinish(Duration::from_millis(300)),
    });
    (dev, w, id)
}

#[test]
fn chained_submits_on_a_shared_buffer_give_the_sequential_result() {
    // b = a + 1, then c = b + 1, b shared: the second run is staged only after the first
    // copied b back.
    let (dev, w, id) = lingering_worker();
    let a: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let b = shared(vec![0u8; N * 4]);
    let first = w
        .submit(
            id,
            vec![
                tensor(f32_bytes(&a)),
                tensor(Window(b.clone())),
                OwnedArg::Scalar(0),
            ],
        )
        .unwrap();
    let second = w
        .submit(
            id,
            vec![
                tensor(Window(b.clone())),
                tensor(vec![0u8; N * 4]),
                OwnedArg::Scalar(0),
            ],
        )
        .unwrap();
    assert_eq!(
        dev.calls(FaultPoint::LaunchAicore),
        1,
        "the second run waits for the first to finalize"
    );
    first.result().unwrap();
    let out = second.result().unwrap();
    let OwnedArg::Tensor { mut buffer, .. } = out.args.into_iter().nth(1).unwrap() else {
        panic!("c is a tensor")
    };
    for (i, v) in buffer.bytes_mut().chunks(4).enumerate() {
        let v = f32::from_ne_bytes(v.try_into().unwrap());
        assert_eq!(v, i as f32 + 2.0, "c = a + 2 at element {i}");
    }
}

#[test]
fn a_read_only_input_that_an_earlier_run_writes_is_staged_after_that_run() {
    // b = a + 1 written through a window, then c = b + 1 reading b through a read-only
    // view of the same bytes: the second run is staged only after b is copied back.
    let (dev, w, id) = lingering_worker();
    let a: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let b = shared(vec![0u8; N * 4]);
    let first = w
        .submit(
            id,
            vec![
                tensor(f32_bytes(&a)),
                tensor(Window(b.clone())),
                OwnedArg::Scalar(0),
            ],
        )
        .unwrap();
    let second = w
        .submit(
            id,
            vec![
                OwnedArg::Input {
                    buffer: Box::new(ReadView(b.clone())),
                    shape: vec![N as u64],
                    dtype: DataType::Float32,
                },
                tensor(vec![0u8; N * 4]),
                OwnedArg::Scalar(0),
            ],
        )
        .unwrap();
    assert_eq!(
        dev.calls(FaultPoint::LaunchAicore),
        1,
        "the read-only input waits for the run writing it"
    );
    first.result().unwrap();
    let out = second.result().unwrap();
    let c = out.args[1].host_bytes().expect("c is a host tensor");
    for (i, v) in c.chunks(4).enumerate() {
        let v = f32::from_ne_bytes(v.try_into().unwrap());
        assert_eq!(v, i as f32 + 2.0, "c = a + 2 at element {i}");
    }
}

#[test]
fn a_read_only_input_for_an_argument_the_run_writes_is_refused_at_submit() {
    let (_dev, w, id) = worker(2, Duration::from_secs(30));
    let shared: Arc<[u8]> = vec![0u8; N * 4].into();
    let e = w
        .submit(
            id,
            vec![
                tensor(vec![0u8; N * 4]),
                OwnedArg::Input {
                    buffer: Box::new(shared),
                    shape: vec![N as u64],
                    dtype: DataType::Float32,
                },
                OwnedArg::Scalar(0),
            ],
        )
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e}");
    assert!(
        e.to_string()
            .contains("read-only but the run writes it (out)"),
        "{e}"
    );
    // The worker stays usable.
    check_output(
        w.submit(id, args(1.0, false)).unwrap().result().unwrap(),
        1.0,
    );
}

#[test]
fn runs_that_only_read_a_shared_buffer_still_pipeline() {
    let (dev, w, id) = lingering_worker();
    let x: Vec<f32> = (0..N).map(|i| 5.0 + i as f32).collect();
    let x = shared(f32_bytes(&x));
    let runs: Vec<RunHandle> = (0..2)
        .map(|_| {
            w.submit(
                id,
                vec![
                    tensor(Window(x.clone())),
                    tensor(vec![0u8; N * 4]),
                    OwnedArg::Scalar(0),
                ],
            )
            .unwrap()
        })
        .collect();
    assert_eq!(
        dev.calls(FaultPoint::LaunchAicore),
        2,
        "the second run launched behind the first without waiting for it"
    );
    for h in runs {
        check_output(h.result().unwrap(), 5.0);
    }
}

// ---------------------------------------------------------------------------------------
// Staging pools.

fn sized_args(seed: f32, n: usize) -> Vec<OwnedArg> {
    let x: Vec<f32> = (0..n).map(|i| seed + i as f32).collect();
    vec![
        tensor_of(f32_bytes(&x), n),
        tensor_of(vec![0u8; n * 4], n),
        OwnedArg::Scalar(0),
    ]
}

fn tensor_of(bytes: Vec<u8>, n: usize) -> OwnedArg {
    OwnedArg::Tensor {
        buffer: Box::new(bytes),
        shape: vec![n as u64],
        dtype: DataType::Float32,
    }
}

#[test]
fn staging_is_pooled_per_slot_grows_when_it_does_not_fit_and_is_freed_at_teardown() {
    let (dev, w, id) = worker(2, Duration::from_secs(30));
    let before = dev.live_allocations();
    check_output(
        w.submit(id, sized_args(0.0, N)).unwrap().result().unwrap(),
        0.0,
    );
    let pooled = w.staging_report().unwrap();
    assert_eq!(
        (
            pooled.pooled_buffers,
            pooled.pooled_bytes,
            pooled.quarantined_buffers
        ),
        (2, 2 * (N * 4) as u64, 0),
        "the run's two staging buffers stay with its slot"
    );
    assert_eq!(dev.live_allocations(), before + 2);
    // Runs that fit reuse the pool: no staging allocation per run, pipelined or not.
    let mallocs = dev.calls(FaultPoint::Malloc);
    for r in 1..6 {
        check_output(
            w.submit(id, sized_args(r as f32, N))
                .unwrap()
                .result()
                .unwrap(),
            r as f32,
        );
    }
    let (a, b) = (
        w.submit(id, sized_args(7.0, N)).unwrap(),
        w.submit(id, sized_args(8.0, N)).unwrap(),
    );
    check_output(a.result().unwrap(), 7.0);
    check_output(b.result().unwrap(), 8.0);
    assert_eq!(
        dev.calls(FaultPoint::Malloc) - mallocs,
        2,
        "only the second slot's first run allocated"
    );
    assert_eq!(w.staging_report().unwrap().pooled_buffers, 4);
    // A larger run grows its slot's pool: each too-small buffer is replaced, none added.
    let mallocs = dev.calls(FaultPoint::Malloc);
    let live = dev.live_allocations();
    check_output(
        w.submit(id, sized_args(9.0, 2 * N))
            .unwrap()
            .result()
            .unwrap(),
        9.0,
    );
    assert_eq!(dev.calls(FaultPoint::Malloc) - mallocs, 2);
    assert_eq!(dev.live_allocations(), live, "two freed, two allocated");
    let grown = w.staging_report().unwrap();
    assert_eq!(grown.pooled_buffers, 4);
    assert_eq!(
        grown.pooled_bytes,
        2 * (N * 4) as u64 + 2 * (2 * N * 4) as u64
    );
    // A smaller run fits the larger buffers.
    check_output(
        w.submit(id, sized_args(1.0, N / 2))
            .unwrap()
            .result()
            .unwrap(),
        1.0,
    );
    w.close().unwrap();
    assert_eq!(dev.live_allocations(), 0, "close frees the pools");
}

#[test]
fn timeouts_too_long_for_the_clock_wait_without_end_instead_of_panicking() {
    let (_dev, w, id) = worker(2, Duration::MAX);
    let h = w.submit(id, args(3.0, false)).unwrap();
    h.wait(Some(Duration::MAX)).unwrap();
    check_output(h.result().unwrap(), 3.0);
    // `result` waits with the worker's run timeout, which is `Duration::MAX` too.
    check_output(
        w.submit(id, args(4.0, false)).unwrap().result().unwrap(),
        4.0,
    );
}
