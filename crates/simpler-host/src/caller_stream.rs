//! Borrowed caller streams: launching a prepared run on a stream the caller lends, ordered
//! inside the caller's own work (`docs/lane.md` §12).
//!
//! **Owns:** the three reusable events of a pipeline slot ([`CallerEvents`]: Start, Fork,
//! Tail; created lazily, in the launch's arming prologue, the first time the slot hosts a
//! caller launch), the per-run [`CallerOrder`] with its two wait references, and the edges:
//!
//! ```text
//! caller:  prior work -> record Start ------------------------ wait CpuDone -> record Tail -> later work
//! AICPU:                wait Start -> [result marker H2D] -> record Fork -> kernel -> wait CoreDone -> record CpuDone
//! AICore:                                          wait Fork -> kernel -> record CoreDone
//! ```
//!
//! - Fork precedes the AICPU kernel, which handshakes with the AICore cores: a fork after
//!   it would deadlock. The AICPU stream's own wait on `core_done` makes `cpu_done` the
//!   whole-operator boundary the caller joins on.
//! - The run holds a reference on its own `core_done` (waiter: the AICPU stream) and one on
//!   its `cpu_done` (waiter: the caller) — tokens of [`crate::fence::wait_ref`]. The first is
//!   released by the run's completed `cpu_done` (a proof on the AICPU stream, behind the
//!   wait), the second only when Tail proves the caller consumed its wait; the lane's poll
//!   therefore also queries Tail, and its drain discharges both before the fence retires.
//! - The launch is Partial from the first caller-edge attempt (an edge call may enqueue even
//!   when it reports an error), and keeps its resources. Without a recorded Tail, the proof
//!   is a bounded synchronize of the bound streams — the two private streams and the
//!   caller's; if that fails, the references stay quarantined. Nothing here synchronizes or
//!   resets the whole device.
//! - An ordinary program launch borrows no caller stream and queues none of these edges.
//!
//! The caller's duties: order its input writes before the launch, serialize its submissions,
//! keep its stream and buffers alive until the run is finalized, and consume outputs only
//! behind Tail — never merely because the launch returned an error.

use simpler_device::{Device, DeviceError, DevicePtr, EventId, EventStatus, StreamId};

use crate::fence::{FenceError, RunCompletionFence};
use crate::fence::{RefState, WaitReference};
use crate::identity::{RunIdentity, StreamPair, StreamRole, Waiter};
use crate::launch::LaunchProgress;
use crate::HostError;

/// The three caller-order events of one slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallerEventIds {
    pub(crate) start: EventId,
    pub(crate) fork: EventId,
    pub(crate) tail: EventId,
}

/// A slot's caller-order events, created on first use and re-recorded by every caller launch
/// the slot hosts (re-recordable events need no reset).
#[derive(Debug, Default)]
pub(crate) struct CallerEvents {
    events: [Option<EventId>; 3],
}

impl CallerEvents {
    /// Creates the missing events (launch prologue: nothing device-visible yet). A creation
    /// failure keeps the events already made.
    pub(crate) fn ensure(&mut self, device: &dyn Device) -> Result<CallerEventIds, HostError> {
        for e in self.events.iter_mut().filter(|e| e.is_none()) {
            *e = Some(
                device
                    .create_event()
                    .map_err(HostError::device("creating a caller-order event"))?,
            );
        }
        let [start, fork, tail] = self.events.map(|e| e.expect("created"));
        Ok(CallerEventIds { start, fork, tail })
    }

    /// Events allocated so far.
    pub(crate) fn allocated(&self) -> usize {
        self.events.iter().flatten().count()
    }

    /// Destroys the events (teardown, slot proven quiescent); true when none is left.
    pub(crate) fn release(&mut self, device: &dyn Device) -> bool {
        for e in self.events.iter_mut() {
            if let Some(ev) = *e {
                if device.destroy_event(ev).is_ok() {
                    *e = None;
                }
            }
        }
        self.allocated() == 0
    }
}

/// One run's caller ordering: the borrowed stream, the slot's events, and the run's two
/// references.
#[derive(Debug)]
pub(crate) struct CallerOrder {
    pub(crate) caller: StreamId,
    pub(crate) events: CallerEventIds,
    /// The AICPU stream's wait on this run's `core_done`.
    pub(crate) own_wait: WaitReference,
    /// The caller stream's wait on this run's `cpu_done`.
    pub(crate) caller_wait: WaitReference,
    /// Tail went out: the caller's consumption of `cpu_done` can be proven by it.
    pub(crate) tail_recorded: bool,
}

impl CallerOrder {
    pub(crate) fn new(caller: StreamId, events: CallerEventIds) -> CallerOrder {
        CallerOrder {
            caller,
            events,
            own_wait: WaitReference::empty(),
            caller_wait: WaitReference::empty(),
            tail_recorded: false,
        }
    }

    /// No reference is live.
    pub(crate) fn is_discharged(&self) -> bool {
        self.own_wait.is_empty() && self.caller_wait.is_empty()
    }
}

fn edge(what: &'static str) -> impl FnOnce(DeviceError) -> HostError {
    HostError::device(what)
}

/// The entry edges, in the AICore submit callback after the arming prologue: caller records
/// Start; the AICPU stream waits Start, publishes `marker` (the result region's zero marker,
/// when the slot's region is not initialized yet) and records Fork; the AICore stream waits
/// Fork. The sink is marked before the first attempt. Returns whether the marker copy was
/// accepted.
pub(crate) fn queue_entry(
    device: &dyn Device,
    streams: StreamPair,
    order: &CallerOrder,
    marker: Option<(DevicePtr, Vec<u8>)>,
    sink: &LaunchProgress,
) -> Result<bool, HostError> {
    let ev = order.events;
    sink.mark_submitted();
    device
        .record_event(ev.start, order.caller)
        .map_err(edge("recording Start on the caller's stream"))?;
    device
        .stream_wait_event(streams.aicpu, ev.start)
        .map_err(edge("queueing the AICPU stream's wait on Start"))?;
    let mut published = false;
    if let Some((dst, bytes)) = marker {
        device
            .copy_to_device_async(streams.aicpu, dst, bytes)
            .map_err(edge("publishing the zero result marker"))?;
        published = true;
    }
    device
        .record_event(ev.fork, streams.aicpu)
        .map_err(edge("recording Fork on the AICPU stream"))?;
    device
        .stream_wait_event(streams.aicore, ev.fork)
        .map_err(edge("queueing the AICore stream's wait on Fork"))?;
    Ok(published)
}

fn fence_refused(what: &'static str) -> impl FnOnce(FenceError) -> HostError {
    move |e| HostError::RunUndecided(format!("{what}: {e}"))
}

/// One counted wait: which boundary, which stream holds the wait, and what it is called.
struct CountedWait {
    boundary: StreamRole,
    waiter: Waiter,
    stream: StreamId,
    what: &'static str,
}

/// Queues the wait `w` on run `id`'s boundary, counted by `token`: reserve, queue, then
/// commit whether the call failed or not (it may have enqueued).
fn queue_counted_wait(
    device: &dyn Device,
    fence: &RunCompletionFence,
    id: &RunIdentity,
    w: CountedWait,
    token: &mut WaitReference,
) -> Result<(), HostError> {
    fence
        .reserve_wait_reference(id, w.boundary, w.waiter, token)
        .map_err(fence_refused(w.what))?;
    let Some(event) = fence.boundary_event(id, w.boundary) else {
        let _ = fence.revoke_wait_reference(token);
        return Err(HostError::RunUndecided(format!(
            "{}: the boundary is not recorded",
            w.what
        )));
    };
    let queued = device.stream_wait_event(w.stream, event);
    fence
        .commit_wait_reference(token)
        .expect("a fresh reservation commits");
    queued.map_err(edge(w.what))
}

/// After the AICPU kernel, before `cpu_done` is recorded: the AICPU stream waits on the
/// run's own `core_done`, so that `cpu_done` covers the whole operator.
pub(crate) fn queue_own_wait(
    device: &dyn Device,
    streams: StreamPair,
    fence: &RunCompletionFence,
    id: &RunIdentity,
    order: &mut CallerOrder,
) -> Result<(), HostError> {
    queue_counted_wait(
        device,
        fence,
        id,
        CountedWait {
            boundary: StreamRole::Aicore,
            waiter: Waiter::Aicpu,
            stream: streams.aicpu,
            what: "queueing the AICPU stream's wait on CoreDone",
        },
        &mut order.own_wait,
    )
}

/// After `cpu_done` is recorded: the caller waits on it and records Tail.
pub(crate) fn queue_exit(
    device: &dyn Device,
    fence: &RunCompletionFence,
    id: &RunIdentity,
    order: &mut CallerOrder,
) -> Result<(), HostError> {
    queue_counted_wait(
        device,
        fence,
        id,
        CountedWait {
            boundary: StreamRole::Aicpu,
            waiter: Waiter::Caller,
            stream: order.caller,
            what: "queueing the caller's wait on CpuDone",
        },
        &mut order.caller_wait,
    )?;
    device
        .record_event(order.events.tail, order.caller)
        .map_err(edge("recording Tail on the caller's stream"))?;
    order.tail_recorded = true;
    Ok(())
}

/// Where Tail stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TailStatus {
    /// Tail never went out: only quiescence of the bound streams can prove the caller's wait
    /// consumed.
    NotRecorded,
    /// Recorded, not reached.
    Pending,
    /// Reached: the caller consumed its wait on `cpu_done`.
    Complete,
    /// The query failed.
    Error,
}

/// Queries Tail (non-blocking).
pub(crate) fn tail_status(device: &dyn Device, order: &CallerOrder) -> TailStatus {
    if !order.tail_recorded {
        return TailStatus::NotRecorded;
    }
    match device.query_event(order.events.tail) {
        Ok(EventStatus::Complete) => TailStatus::Complete,
        Ok(EventStatus::Pending) => TailStatus::Pending,
        Err(_) => TailStatus::Error,
    }
}

/// Releases what the proofs cover: the own wait once `cpu_done` completed, the caller's wait
/// once Tail completed. True when nothing is left.
pub(crate) fn discharge_by_proofs(
    fence: &RunCompletionFence,
    order: &mut CallerOrder,
    cpu_done_complete: bool,
    tail_complete: bool,
) -> bool {
    if cpu_done_complete && order.own_wait.state() == RefState::Committed {
        let _ = fence.release_wait_reference(&mut order.own_wait, Waiter::Aicpu);
    }
    if tail_complete && order.caller_wait.state() == RefState::Committed {
        let _ = fence.release_wait_reference(&mut order.caller_wait, Waiter::Caller);
    }
    order.is_discharged()
}

/// The bound streams (both private ones and the caller's) were proven drained: releases
/// every reference.
pub(crate) fn discharge_on_quiescence(fence: &RunCompletionFence, order: &mut CallerOrder) {
    for r in [&mut order.own_wait, &mut order.caller_wait] {
        if r.state() == RefState::Committed {
            let _ = fence.release_wait_reference_on_quiescence(r);
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::fence::tests::{fenced_run, ident, FakeOps};

    fn order() -> CallerOrder {
        CallerOrder::new(
            StreamId::from_raw(99),
            CallerEventIds {
                start: EventId::from_raw(1),
                fork: EventId::from_raw(2),
                tail: EventId::from_raw(3),
            },
        )
    }

    fn committed(f: &RunCompletionFence, id: &RunIdentity, o: &mut CallerOrder) {
        for (b, w, t) in [
            (StreamRole::Aicore, Waiter::Aicpu, &mut o.own_wait),
            (StreamRole::Aicpu, Waiter::Caller, &mut o.caller_wait),
        ] {
            f.reserve_wait_reference(id, b, w, t).unwrap();
            f.commit_wait_reference(t).unwrap();
        }
    }

    #[test]
    fn the_two_references_are_released_only_by_their_own_proofs() {
        // (cpu_done complete, Tail complete, own released, caller released)
        let rows = [
            (false, false, false, false),
            (true, false, true, false),
            (false, true, false, true),
            (true, true, true, true),
        ];
        for (cpu_done, tail, own_released, caller_released) in rows {
            let ops = FakeOps::default();
            let f = RunCompletionFence::new();
            let id = ident(1);
            fenced_run(&ops, &f, id);
            let mut o = order();
            committed(&f, &id, &mut o);
            let all = discharge_by_proofs(&f, &mut o, cpu_done, tail);
            assert_eq!(o.own_wait.is_empty(), own_released, "{cpu_done}/{tail}");
            assert_eq!(
                o.caller_wait.is_empty(),
                caller_released,
                "{cpu_done}/{tail}"
            );
            assert_eq!(all, own_released && caller_released);
            // The fence stays blocked while a reference lives.
            assert_eq!(f.retire(&id).is_ok(), all, "{cpu_done}/{tail}");
            if !all {
                discharge_on_quiescence(&f, &mut o);
                assert!(o.is_discharged());
                f.retire(&id).unwrap();
            }
        }
    }

    #[test]
    fn a_caller_proof_never_releases_the_aicpu_wait() {
        let ops = FakeOps::default();
        let f = RunCompletionFence::new();
        let id = ident(1);
        fenced_run(&ops, &f, id);
        let mut o = order();
        committed(&f, &id, &mut o);
        // A proof about the caller's stream offered for the AICPU stream's wait is refused.
        assert!(f
            .release_wait_reference(&mut o.own_wait, Waiter::Caller)
            .is_err());
        assert!(f
            .release_wait_reference(&mut o.caller_wait, Waiter::Aicpu)
            .is_err());
        assert_eq!(f.references(), 2);
        discharge_on_quiescence(&f, &mut o);
        assert_eq!(f.references(), 0);
    }
}
