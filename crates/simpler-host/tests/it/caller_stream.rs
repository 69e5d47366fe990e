//! Borrowed caller streams on the sim device (`docs/lane.md` §12): a run
//! launched on a caller's stream starts only after the caller's earlier work and finishes
//! before the caller's later work; three caller-order events per occupied slot, created
//! lazily and reused; the failure matrix (Partial from the first caller-edge attempt, the
//! bounded synchronize of the bound streams without a Tail, quarantine when that fails); a
//! borrowed worker never synchronizes or resets the whole device; and the execution-mode
//! latch as the worker applies it.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use parking_lot::Mutex;
use simpler_device::sim::{FaultAction, FaultPoint, FaultRule, SimDevice};
use simpler_device::{Device, DevicePtr, StreamId};
use simpler_host::lifecycle::enter_context;
use simpler_host::*;

fn borrowed(g: u64) -> (Arc<SimDevice>, ChipWorker, CallableId, NonZeroU64) {
    let dev = small_device();
    let g = NonZeroU64::new(g).unwrap();
    let _ctx = enter_context(g);
    let w = ChipWorker::borrowed(config(), dev.clone() as Arc<dyn Device>, g).unwrap();
    let id = w.register(&spec("inc")).unwrap();
    (dev, w, id, g)
}

fn buffers(w: &ChipWorker) -> (DevicePtr, DevicePtr) {
    let n = (N * 4) as u64;
    (w.malloc(n).unwrap(), w.malloc(n).unwrap())
}

#[test]
fn the_run_is_ordered_inside_the_callers_stream() {
    let (dev, w, id, g) = borrowed(11);
    let _ctx = enter_context(g);
    let (x, y) = buffers(&w);
    let caller = dev.create_stream().unwrap();
    // The caller's earlier work: held by a gate, then writes the input on the stream.
    let gate = Arc::new(AtomicBool::new(false));
    let (gt, d) = (gate.clone(), dev.clone());
    dev.launch_host_fn(caller, move || {
        while !gt.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        d.copy_to_device(x, &f32_bytes(&input(7.0))).unwrap();
    })
    .unwrap();
    let h = w
        .submit_on_stream(id, device_args(x, y, 0), &CallConfig::default(), caller)
        .unwrap();
    // The caller's later work, queued right after the launch returned: reads the output.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (s, d) = (seen.clone(), dev.clone());
    dev.launch_host_fn(caller, move || {
        let mut out = vec![0u8; N * 4];
        d.copy_from_device(&mut out, y).unwrap();
        *s.lock() = out;
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !h.poll(),
        "the run waits for the caller's earlier work (Start)"
    );
    gate.store(true, Ordering::Release);
    h.wait(None).unwrap();
    dev.synchronize_stream(caller, Duration::from_secs(20))
        .unwrap();
    // The run read the input the caller wrote before Start...
    let mut out = vec![0u8; N * 4];
    w.copy_from(&mut out, y).unwrap();
    check_bytes(&out, 7.0);
    // ...and the caller's later work ran after the run (Tail).
    check_bytes(&seen.lock(), 7.0);
    w.close().unwrap();
    assert_eq!(dev.calls(FaultPoint::Reset), 0);
}

#[test]
fn three_events_per_occupied_slot_allocated_lazily_and_reused() {
    // A program launch borrows nothing: only the fence's two events.
    let (dev, w, id) = worker();
    check_output(w.submit(id, args(1.0, 0)).unwrap().result().unwrap(), 1.0);
    assert_eq!(dev.calls(FaultPoint::CreateEvent), 2);
    w.close().unwrap();

    let (dev, w, id, g) = borrowed(12);
    let _ctx = enter_context(g);
    let (x, y) = buffers(&w);
    w.copy_to(x, &f32_bytes(&input(1.0))).unwrap();
    let caller = dev.create_stream().unwrap();
    let launch = |func| {
        w.submit_on_stream(id, device_args(x, y, func), &CallConfig::default(), caller)
            .unwrap()
    };
    // (what happens, CreateEvent calls so far)
    launch(0).wait(None).unwrap();
    assert_eq!(
        dev.calls(FaultPoint::CreateEvent),
        2 + 3,
        "slot 0: fence + Start/Fork/Tail"
    );
    launch(0).wait(None).unwrap();
    assert_eq!(
        dev.calls(FaultPoint::CreateEvent),
        5,
        "slot 0 again: reused"
    );
    // Two at once: the second occupies slot 1 (and joins the first).
    let gate = Gate::close();
    let a = launch(gate.func().into());
    let b = launch(0);
    assert_eq!(
        dev.calls(FaultPoint::CreateEvent),
        5 + 2 + 2 + 3,
        "slot 1: fence + join proofs + its own three"
    );
    gate.open();
    a.wait(None).unwrap();
    b.wait(None).unwrap();
    let mut out = vec![0u8; N * 4];
    w.copy_from(&mut out, y).unwrap();
    check_bytes(&out, 1.0);
    w.close().unwrap();
    assert_eq!(dev.calls(FaultPoint::Reset), 0);
    assert_eq!(
        dev.calls(FaultPoint::SynchronizeStream),
        0,
        "success never synchronizes"
    );
}

/// What the failure matrix expects of the launch and the worker.
struct Row {
    name: &'static str,
    inject: &'static [FaultRule],
    /// `submit_on_stream` returns the launch error.
    launch_fails: bool,
    /// Streams synchronized by the drain (the fallback proof), at least.
    synchronized: u64,
    /// The worker admits a new caller launch afterwards.
    admits_after: bool,
}

use FaultAction::*;
use FaultPoint::*;

// Record calls of a caller launch, in order: Start (1), Fork (2), CoreDone (3), CpuDone (4),
// Tail (5). Stream waits: AICPU on Start (1), AICore on Fork (2), AICPU on CoreDone (3),
// caller on CpuDone (4).
const MATRIX: &[Row] = &[
    Row {
        name: "clean",
        inject: &[],
        launch_fails: false,
        synchronized: 0,
        admits_after: true,
    },
    Row {
        name: "Start refused: Partial from the first caller-edge attempt; no Tail, so the \
               bound streams (pair + caller) are synchronized",
        inject: &[next(RecordEvent, Refuse)],
        launch_fails: true,
        synchronized: 3,
        admits_after: true,
    },
    Row {
        name: "Start enqueued but reported failed",
        inject: &[next(RecordEvent, EnqueueThenFail)],
        launch_fails: true,
        synchronized: 3,
        admits_after: true,
    },
    Row {
        name: "the AICore stream's wait on Fork fails after being enqueued",
        inject: &[nth(StreamWaitEvent, 2, EnqueueThenFail)],
        launch_fails: true,
        synchronized: 3,
        admits_after: true,
    },
    Row {
        name: "the caller's wait on CpuDone fails: no Tail",
        inject: &[nth(StreamWaitEvent, 4, Refuse)],
        launch_fails: true,
        synchronized: 3,
        admits_after: true,
    },
    Row {
        name: "Tail record refused: the fallback covers the caller's stream",
        inject: &[nth(RecordEvent, 5, Refuse)],
        launch_fails: true,
        synchronized: 3,
        admits_after: true,
    },
    Row {
        name: "no Tail and the fallback synchronize times out: quarantined, poisoned, no reset",
        inject: &[
            next(RecordEvent, Refuse),
            always(SynchronizeStream, TimeOut),
        ],
        launch_fails: true,
        synchronized: 1,
        admits_after: false,
    },
];

#[test]
fn caller_launch_failure_matrix() {
    for (i, row) in MATRIX.iter().enumerate() {
        let (dev, w, id, g) = borrowed(100 + i as u64);
        let _ctx = enter_context(g);
        let (x, y) = buffers(&w);
        w.copy_to(x, &f32_bytes(&input(3.0))).unwrap();
        let caller = dev.create_stream().unwrap();
        // A warm launch so the slot's events exist and the result region is initialized.
        w.submit_on_stream(id, device_args(x, y, 0), &CallConfig::default(), caller)
            .unwrap()
            .wait(None)
            .unwrap();
        let baseline = dev.live_allocations();
        let syncs = dev.calls(SynchronizeStream);
        for r in row.inject {
            dev.inject(*r);
        }
        let r = w.submit_on_stream(id, device_args(x, y, 0), &CallConfig::default(), caller);
        assert_eq!(r.is_err(), row.launch_fails, "{}: {r:?}", row.name);
        if let Ok(h) = r {
            h.wait(None).unwrap();
        }
        // A failed launch is drained in the background: until the drain has decided, the
        // next launch is refused at once (LanePoisoned); then it is admitted, or refused
        // for good (DeviceUnusable).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let next = loop {
            match w.submit_on_stream(id, device_args(x, y, 0), &CallConfig::default(), caller) {
                Err(HostError::LanePoisoned(_)) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                other => break other,
            }
        };
        dev.clear_faults();
        assert!(
            dev.calls(SynchronizeStream) - syncs >= row.synchronized,
            "{}: {} synchronizes",
            row.name,
            dev.calls(SynchronizeStream) - syncs
        );
        match (row.admits_after, next) {
            (true, Ok(h)) => h.wait(None).unwrap(),
            (false, Err(HostError::DeviceUnusable(_))) => {}
            (want, got) => panic!("{}: admission {want}, got {got:?}", row.name),
        }
        assert_eq!(
            w.unusable_reason().is_none(),
            row.admits_after,
            "{}",
            row.name
        );
        if row.admits_after {
            assert_eq!(
                dev.live_allocations(),
                baseline,
                "{}: nothing kept",
                row.name
            );
            let mut out = vec![0u8; N * 4];
            w.copy_from(&mut out, y).unwrap();
            check_bytes(&out, 3.0);
            w.close().unwrap();
        } else {
            // Poisoned: close can prove the bound streams quiescent now (the faults are
            // cleared); a borrowed worker never resets the device.
            w.close().unwrap();
        }
        assert_eq!(
            dev.calls(Reset),
            0,
            "{}: a borrowed worker never resets",
            row.name
        );
        w.free(x).unwrap_err(); // closed: refused
    }
}

#[test]
fn a_borrowed_close_that_cannot_prove_quiescence_keeps_everything_and_retries() {
    let (dev, w, id, g) = borrowed(200);
    let _ctx = enter_context(g);
    let (x, y) = buffers(&w);
    let caller = dev.create_stream().unwrap();
    dev.inject(next(RecordEvent, Refuse));
    dev.inject(always(SynchronizeStream, TimeOut));
    assert!(w
        .submit_on_stream(id, device_args(x, y, 0), &CallConfig::default(), caller)
        .is_err());
    let held = dev.live_allocations();
    let r = w.close();
    assert!(matches!(r, Err(HostError::CleanupIncomplete(_))), "{r:?}");
    assert_eq!(w.state().unwrap(), WorkerState::Closed { debt: true });
    assert_eq!(
        dev.live_allocations(),
        held,
        "nothing freed without a proof"
    );
    assert_eq!(dev.calls(Reset), 0);
    dev.clear_faults();
    w.close().unwrap();
    assert_eq!(w.state().unwrap(), WorkerState::Closed { debt: false });
    assert!(dev.live_allocations() < held);
    assert_eq!(dev.calls(Reset), 0);
}

#[test]
fn an_unknown_caller_stream_is_refused_before_admission() {
    let (dev, w, id, g) = borrowed(300);
    let _ctx = enter_context(g);
    let (x, y) = buffers(&w);
    let r = w.submit_on_stream(
        id,
        device_args(x, y, 0),
        &CallConfig::default(),
        StreamId::from_raw(999_999),
    );
    assert!(
        matches!(&r, Err(HostError::InvalidArgument { arg, .. }) if arg == "caller_stream"),
        "{r:?}"
    );
    assert_eq!(dev.calls(LaunchAicore), 0);
}

#[test]
fn execution_mode_latch_on_the_worker() {
    // An owned worker starts unlatched; its first launch claims the mode.
    let (dev, w, id) = worker();
    assert_eq!(w.latched_mode(), None);
    let (x, y) = buffers(&w);
    // A launch refused for its stream claims nothing.
    let refused = w.submit_on_stream(
        id,
        device_args(x, y, 0),
        &CallConfig::default(),
        StreamId::from_raw(999_999),
    );
    assert!(refused.is_err());
    assert_eq!(w.latched_mode(), None);
    let caller = dev.create_stream().unwrap();
    w.copy_to(x, &f32_bytes(&input(0.0))).unwrap();
    w.submit_on_stream(id, device_args(x, y, 0), &CallConfig::default(), caller)
        .unwrap()
        .wait(None)
        .unwrap();
    assert_eq!(w.latched_mode(), Some(ExecutionMode::Kernel));
    let r = w.submit(id, args(0.0, 0));
    assert!(
        matches!(&r, Err(HostError::InvalidState(m)) if m.contains("KERNEL context refuses program launch")),
        "{r:?}"
    );
    let mut a = vec![0u8; N * 4];
    let mut b = vec![0u8; N * 4];
    let mut host = host_args(&mut a, &mut b);
    assert!(matches!(
        w.run(id, &mut host),
        Err(HostError::InvalidState(_))
    ));
    // Registration neither needs nor claims a mode.
    w.register(&spec("again")).unwrap();
    assert_eq!(w.latched_mode(), Some(ExecutionMode::Kernel));
    w.close().unwrap();

    // PROGRAM first: caller streams are refused.
    let (dev, w, id) = worker();
    check_output(w.submit(id, args(0.0, 0)).unwrap().result().unwrap(), 0.0);
    assert_eq!(w.latched_mode(), Some(ExecutionMode::Program));
    let (x, y) = buffers(&w);
    let caller = dev.create_stream().unwrap();
    assert!(matches!(
        w.submit_on_stream(id, device_args(x, y, 0), &CallConfig::default(), caller),
        Err(HostError::InvalidState(_))
    ));
    assert_eq!(
        w.latched_mode(),
        Some(ExecutionMode::Program),
        "never undone"
    );
    w.close().unwrap();

    // A borrowed worker is KERNEL from init.
    let (_dev, w, id, g) = borrowed(400);
    let _ctx = enter_context(g);
    assert_eq!(w.latched_mode(), Some(ExecutionMode::Kernel));
    assert!(matches!(
        w.submit(id, args(0.0, 0)),
        Err(HostError::InvalidState(_))
    ));
    w.close().unwrap();
}

/// A worker's own run streams are not a caller's to lend: a launch on one is refused
/// before anything is enqueued, naming `caller_stream`.
#[test]
fn the_workers_own_run_streams_are_refused_as_caller_streams() {
    let dev = small_device();
    // Streams are numbered from one counter: the worker's lie between these two.
    let before = dev.create_stream().unwrap();
    let g = NonZeroU64::new(31).unwrap();
    let _ctx = enter_context(g);
    let w = ChipWorker::borrowed(config(), dev.clone() as Arc<dyn Device>, g).unwrap();
    let id = w.register(&spec("inc")).unwrap();
    let after = dev.create_stream().unwrap();
    let (x, y) = buffers(&w);
    let own: Vec<StreamId> = (before.raw() + 1..after.raw())
        .map(StreamId::from_raw)
        .filter(|&s| dev.query_stream(s).is_ok())
        .collect();
    assert!(own.len() >= 2, "the lane's two streams: {own:?}");
    for s in own {
        let e = w
            .submit_on_stream(id, device_args(x, y, 0), &CallConfig::default(), s)
            .unwrap_err();
        assert!(
            matches!(&e, HostError::InvalidArgument { arg, .. } if arg == "caller_stream"),
            "{e}"
        );
    }
    // A stream the caller created is still accepted.
    let h = w
        .submit_on_stream(id, device_args(x, y, 0), &CallConfig::default(), after)
        .unwrap();
    h.wait(None).unwrap();
    w.close().unwrap();
}
