//! The cross-run join: how a successor is ordered behind its predecessor on the shared
//! stream pair (`docs/lane.md` §8).
//!
//! **Form chosen: crossed waits, each with a proof event.**
//!
//! ```text
//! successor AICore stream:  wait pred cpu_done  -> record proof[AICore] -> AICore kernel -> core_done
//! successor AICPU  stream:  wait pred core_done -> record proof[AICPU]  -> AICPU kernel  -> cpu_done
//! ```
//!
//! Crossed, because each stream already orders itself: together the two edges put *both*
//! predecessor kernels ahead of *either* successor kernel. That is what two back-to-back runs
//! on one chip need: the AICore kernel of run N+1 resets and re-arms the very cores the
//! AICPU schedulers of run N are still handshaking with (waiting for their EXITED), so it must
//! not start before run N's AICPU kernel has exited; and run N+1's AICPU kernel must not
//! start dispatching before run N's cores have left. A run without a successor queues
//! nothing (unlike upstream's own-wait form, which adds a wait to every joinable run).
//!
//! The proof events are this implementation's addition to the two waits: each
//! wait's reference on the predecessor's fence can only be released by a proof covering the
//! stream that holds it, and the successor's own boundaries come only after its kernels —
//! waiting for them would keep the predecessor's slot blocked for the successor's whole
//! execution and collapse the pipeline to depth one. A proof recorded right behind the wait
//! completes as soon as the wait is passed. Predecessor records are always submitted before a
//! wait on them is queued (a successor is launched only after its predecessor's launch
//! completed), and no wait ever points at a successor.
//!
//! Discharge ladder, run when the predecessor retires: (1) a completed proof releases its
//! reference (`release_wait_reference(ref, waiter)`); the proof may be waited on, bounded,
//! because the predecessor's boundaries are complete by then; (2) otherwise a bounded
//! synchronize of the pair that succeeds releases on quiescence; (3) otherwise nothing is
//! released, the device is marked unusable and the slot stays blocked.

use std::sync::Arc;
use std::time::Duration;

use simpler_device::{Device, DeviceError, EventId, EventStatus};

use crate::fence::{FenceError, RunCompletionFence};
use crate::fence::{RefState, WaitReference};
use crate::identity::{RunIdentity, StreamPair, StreamRole};
use crate::launch::LaunchProgress;

/// A successor's references on its predecessor's fence, by waiter stream.
#[derive(Debug)]
pub(crate) struct JoinRefs {
    /// The predecessor's identity.
    pub(crate) pred: RunIdentity,
    /// The predecessor's fence.
    pub(crate) pred_fence: Arc<RunCompletionFence>,
    /// References indexed by the stream holding the wait.
    pub(crate) refs: [WaitReference; 2],
    /// The proof event recorded behind each wait (successor's slot), if its record went out.
    pub(crate) proofs: [Option<EventId>; 2],
}

impl JoinRefs {
    /// True when no reference is live.
    pub(crate) fn is_discharged(&self) -> bool {
        self.refs.iter().all(WaitReference::is_empty)
    }
}

/// Why queueing the join failed: a fence refusal (nothing device-visible for that wait) or
/// a device error (the wait or proof may be on the device).
#[derive(Debug)]
pub(crate) enum JoinError {
    /// The predecessor's fence refused (before any device call for that wait).
    Fence(FenceError),
    /// A device call failed.
    Device(&'static str, DeviceError),
}

/// Queues the crossed waits and their proofs. Marks the sink before each wait attempt (an
/// attempted wait may be enqueued even when its call fails) and commits the reference
/// whether the call failed or not; the returned refs must be kept either way.
pub(crate) fn queue_crossed_join(
    device: &dyn Device,
    streams: StreamPair,
    pred_fence: &Arc<RunCompletionFence>,
    pred: RunIdentity,
    proof_events: [EventId; 2],
    sink: &LaunchProgress,
) -> (JoinRefs, Result<(), JoinError>) {
    let mut join = JoinRefs {
        pred,
        pred_fence: pred_fence.clone(),
        refs: [WaitReference::empty(), WaitReference::empty()],
        proofs: [None, None],
    };
    for waiter in StreamRole::BOTH {
        let boundary = waiter.other();
        let r = &mut join.refs[waiter.index()];
        if let Err(e) = pred_fence.reserve_wait_reference(&pred, boundary, waiter, r) {
            return (join, Err(JoinError::Fence(e)));
        }
        let Some(event) = pred_fence.boundary_event(&pred, boundary) else {
            let _ = pred_fence.revoke_wait_reference(r);
            return (
                join,
                Err(JoinError::Fence(FenceError::Refused(
                    crate::fence::wait_ref::why::NOT_RECORDED,
                ))),
            );
        };
        sink.mark_submitted();
        let queued = device.stream_wait_event(streams.stream(waiter), event);
        pred_fence
            .commit_wait_reference(r)
            .expect("a fresh reservation commits");
        if let Err(e) = queued {
            return (join, Err(JoinError::Device("queueing a cross-run wait", e)));
        }
        let proof = proof_events[waiter.index()];
        if let Err(e) = device.record_event(proof, streams.stream(waiter)) {
            return (join, Err(JoinError::Device("recording a join proof", e)));
        }
        join.proofs[waiter.index()] = Some(proof);
    }
    (join, Ok(()))
}

/// Rung 1 of the ladder: releases every reference whose proof has completed. With
/// `wait_for` set, waits (bounded) for a pending proof first. Returns true when every
/// reference is released.
pub(crate) fn discharge_by_proofs(
    device: &dyn Device,
    join: &mut JoinRefs,
    wait_for: Option<Duration>,
) -> bool {
    for waiter in StreamRole::BOTH {
        let i = waiter.index();
        if join.refs[i].state() != RefState::Committed {
            continue;
        }
        let Some(proof) = join.proofs[i] else {
            continue;
        };
        let done = match device.query_event(proof) {
            Ok(EventStatus::Complete) => true,
            Ok(EventStatus::Pending) => match wait_for {
                Some(t) => device.synchronize_event(proof, t).is_ok(),
                None => false,
            },
            Err(_) => false,
        };
        if done {
            let _ = join
                .pred_fence
                .release_wait_reference(&mut join.refs[i], waiter);
        }
    }
    join.is_discharged()
}

/// Rung 2: both streams were proven quiescent; releases every committed reference.
pub(crate) fn discharge_on_quiescence(join: &mut JoinRefs) {
    for r in join.refs.iter_mut() {
        if r.state() == RefState::Committed {
            let _ = join.pred_fence.release_wait_reference_on_quiescence(r);
        }
    }
}

/// Whether every live proof has completed (non-blocking look, for a poll).
pub(crate) fn proofs_complete(device: &dyn Device, join: &JoinRefs) -> bool {
    StreamRole::BOTH.iter().all(|w| {
        let i = w.index();
        join.refs[i].state() != RefState::Committed
            || join.proofs[i].is_some_and(|p| device.query_event(p) == Ok(EventStatus::Complete))
    })
}
