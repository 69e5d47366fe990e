//! `RunCompletionFence`: one per pipeline slot; the two boundary events of the run the slot
//! hosts and the facts about them (`docs/lane.md` §6).
//!
//! The events are created once (at the first arming) and re-recorded by every run the slot
//! hosts; the *facts* — kernel submitted, boundary recorded, boundary complete, first error —
//! belong to one arming and are keyed on the run's [`RunIdentity`]: a stale poller, or a
//! later run in the same slot, is refused instead of observing a boundary that is not its own.
//! A run is complete only when both boundaries are; one boundary proves nothing, because the
//! two kernels handshake.
//!
//! A run whose kernel was submitted but whose boundary record failed is `Unfenced`: its own
//! events cannot decide it, and only a bounded stream synchronize can (the caller's job).
//!
//! Deviation from the upstream design, on purpose: a boundary wait that runs out of time is *not* stored
//! as the boundary's error. A timeout says the host stopped waiting, nothing about the
//! boundary; storing it would turn a caller's short `RunHandle::wait(timeout)` into a failed
//! run. The caller decides what an expired deadline means (the run's own timeout budget).
//!
//! The wait-reference protocol (tokens) lives in [`wait_ref`]; the counters it moves
//! are kept here, and a fence holding any reservation or committed reference refuses
//! [`arm`](RunCompletionFence::arm), [`record`](RunCompletionFence::record),
//! [`retire`](RunCompletionFence::retire) and [`release`](RunCompletionFence::release).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use simpler_device::{Device, DeviceError, EventId, EventStatus, StreamId};

use crate::identity::{RunIdentity, StreamRole};
use crate::sync::{lock, Mutex, TryLockError};

pub(crate) mod wait_ref;

pub(crate) use wait_ref::{RefState, WaitReference};

/// The event operations a fence uses (`make_acl_event_ops`): injected so the fence can be
/// checked without a device and under loom.
pub(crate) trait EventOps {
    /// Creates a re-recordable, completion-only event.
    fn create(&self) -> Result<EventId, DeviceError>;
    /// Enqueues a record of `event` on `stream`.
    fn record(&self, event: EventId, stream: StreamId) -> Result<(), DeviceError>;
    /// Non-blocking status of the latest record.
    fn query(&self, event: EventId) -> Result<EventStatus, DeviceError>;
    /// Bounded wait for the latest record.
    fn wait(&self, event: EventId, timeout: Duration) -> Result<(), DeviceError>;
    /// Destroys the event.
    fn destroy(&self, event: EventId) -> Result<(), DeviceError>;
}

impl<D: Device + ?Sized> EventOps for D {
    fn create(&self) -> Result<EventId, DeviceError> {
        self.create_event()
    }
    fn record(&self, event: EventId, stream: StreamId) -> Result<(), DeviceError> {
        self.record_event(event, stream)
    }
    fn query(&self, event: EventId) -> Result<EventStatus, DeviceError> {
        self.query_event(event)
    }
    fn wait(&self, event: EventId, timeout: Duration) -> Result<(), DeviceError> {
        self.synchronize_event(event, timeout)
    }
    fn destroy(&self, event: EventId) -> Result<(), DeviceError> {
        self.destroy_event(event)
    }
}

/// What a fence says about a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// At least one boundary has not been reached (or the fence was busy: poll never blocks).
    Pending,
    /// Both boundaries were reached: both kernels exited.
    Complete,
    /// A boundary query or wait failed, or the caller does not own the fence's arming.
    Error,
    /// A kernel was submitted without a recorded boundary behind it: the fence cannot decide.
    Unfenced,
}

impl Completion {
    /// Name for messages and tables.
    pub fn name(self) -> &'static str {
        match self {
            Completion::Pending => "Pending",
            Completion::Complete => "Complete",
            Completion::Error => "Error",
            Completion::Unfenced => "Unfenced",
        }
    }
}

/// Why a fence operation did nothing (upstream's INTERNAL), or the device error it met.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// The operation was refused by one of the fence's rules; nothing changed.
    #[error("completion fence refused: {0}")]
    Refused(&'static str),
    /// A device call failed (stored as the boundary's error where the upstream design does).
    #[error("completion fence device call failed: {0}")]
    Device(DeviceError),
    /// A bounded wait ran out of time (not stored; see the module doc).
    #[error("completion fence wait timed out after {0:?}")]
    TimedOut(Duration),
}

/// Refusal reasons, shared with the tests.
pub(crate) mod why {
    pub const REFERENCES_OUTSTANDING: &str = "wait references are outstanding";
    pub const NOT_OWNER: &str = "the caller does not own the fence's arming";
    pub const NO_STREAM: &str = "no stream to record on";
    pub const NO_EVENT: &str = "the boundary has no event";
    pub const NOT_FENCED: &str = "the run is not fenced (a boundary is missing)";
    #[cfg_attr(any(not(test), feature = "loom"), allow(dead_code))]
    pub const NOT_RECORDED: &str = "the boundary is not recorded";
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Boundary {
    pub(crate) event: Option<EventId>,
    pub(crate) kernel_submitted: bool,
    pub(crate) recorded: bool,
    pub(crate) complete: bool,
    /// First query or wait error (sticky for the arming).
    pub(crate) error: Option<DeviceError>,
    /// First record error: the boundary is missing, the run is Unfenced.
    pub(crate) record_error: Option<DeviceError>,
    /// Reserved, not yet committed or revoked, references to this boundary's event.
    pub(crate) pending: u32,
    /// Committed references by waiter stream ([`crate::identity::Waiter`]).
    pub(crate) committed: [u32; 3],
}

impl Boundary {
    #[cfg_attr(any(not(test), feature = "loom"), allow(dead_code))] // spec API, exercised by the tests
    pub(crate) fn references(&self) -> u32 {
        self.pending + self.committed.iter().sum::<u32>()
    }

    fn reset_facts(&mut self) {
        self.kernel_submitted = false;
        self.recorded = false;
        self.complete = false;
        self.error = None;
        self.record_error = None;
    }
}

#[derive(Debug, Default)]
pub(crate) struct FenceState {
    /// The run the facts belong to; `None` when unarmed.
    pub(crate) identity: Option<RunIdentity>,
    /// Bumped by every arm and abandon: tokens minted against an older arming are stale.
    pub(crate) arming: u64,
    pub(crate) boundaries: [Boundary; 2],
}

impl FenceState {
    pub(crate) fn owns(&self, id: &RunIdentity) -> bool {
        self.identity.as_ref() == Some(id)
    }

    #[cfg_attr(any(not(test), feature = "loom"), allow(dead_code))] // spec API, exercised by the tests
    pub(crate) fn references(&self) -> u32 {
        self.boundaries.iter().map(Boundary::references).sum()
    }

    fn fenced(&self) -> bool {
        self.boundaries
            .iter()
            .all(|b| b.kernel_submitted && b.recorded)
    }
}

static FENCE_IDS: AtomicU64 = AtomicU64::new(1);

/// The completion fence of one pipeline slot.
#[derive(Debug)]
pub(crate) struct RunCompletionFence {
    /// Process-unique id: tokens remember which fence minted them.
    pub(crate) id: u64,
    pub(crate) state: Mutex<FenceState>,
}

impl Default for RunCompletionFence {
    fn default() -> Self {
        RunCompletionFence::new()
    }
}

impl RunCompletionFence {
    /// An unarmed fence with no events yet.
    pub(crate) fn new() -> RunCompletionFence {
        RunCompletionFence {
            id: FENCE_IDS.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(FenceState::default()),
        }
    }

    /// Arms the fence for run `id`, creating missing events first. Called in the launch
    /// prologue, before anything device-visible: a creation failure costs the run nothing.
    /// The previous run's facts are dropped; its handles are kept.
    pub(crate) fn arm<O: EventOps + ?Sized>(
        &self,
        ops: &O,
        id: RunIdentity,
    ) -> Result<(), FenceError> {
        let mut st = lock(&self.state);
        if st.references() > 0 {
            return Err(FenceError::Refused(why::REFERENCES_OUTSTANDING));
        }
        for b in st.boundaries.iter_mut() {
            if b.event.is_none() {
                // A create error leaves the fence unarmed and keeps the handles made so far.
                b.event = Some(ops.create().map_err(FenceError::Device)?);
            }
        }
        for b in st.boundaries.iter_mut() {
            b.reset_facts();
        }
        st.identity = Some(id);
        st.arming += 1;
        Ok(())
    }

    /// Notes that `role`'s kernel was accepted by the device (no-op for a non-owner).
    pub(crate) fn note_kernel_submitted(&self, id: &RunIdentity, role: StreamRole) {
        let mut st = lock(&self.state);
        if st.owns(id) {
            st.boundaries[role.index()].kernel_submitted = true;
        }
    }

    /// Records `role`'s boundary on `stream`, right behind its kernel.
    pub(crate) fn record<O: EventOps + ?Sized>(
        &self,
        ops: &O,
        id: &RunIdentity,
        role: StreamRole,
        stream: Option<StreamId>,
    ) -> Result<(), FenceError> {
        let mut st = lock(&self.state);
        if !st.owns(id) {
            return Err(FenceError::Refused(why::NOT_OWNER));
        }
        let stream = stream.ok_or(FenceError::Refused(why::NO_STREAM))?;
        let b = &mut st.boundaries[role.index()];
        let event = b.event.ok_or(FenceError::Refused(why::NO_EVENT))?;
        if b.references() > 0 {
            return Err(FenceError::Refused(why::REFERENCES_OUTSTANDING));
        }
        match ops.record(event, stream) {
            Ok(()) => {
                b.recorded = true;
                b.complete = false;
                Ok(())
            }
            Err(e) => {
                b.record_error.get_or_insert(e.clone());
                Err(FenceError::Device(e))
            }
        }
    }

    /// Both boundaries submitted and recorded.
    pub(crate) fn fenced(&self, id: &RunIdentity) -> bool {
        let st = lock(&self.state);
        st.owns(id) && st.fenced()
    }

    /// A submitted kernel or a committed wait: the device may hold references for this run.
    pub(crate) fn has_device_references(&self, id: &RunIdentity) -> bool {
        let st = lock(&self.state);
        st.owns(id)
            && st
                .boundaries
                .iter()
                .any(|b| b.kernel_submitted || b.committed.iter().any(|&c| c > 0))
    }

    /// Non-blocking completion. Contention on the fence (a wait in progress) reads Pending.
    pub(crate) fn poll<O: EventOps + ?Sized>(&self, ops: &O, id: &RunIdentity) -> Completion {
        let mut st = match self.state.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => return Completion::Pending,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        if !st.owns(id) {
            return Completion::Error;
        }
        if !st.fenced() {
            return if st.boundaries.iter().any(|b| b.kernel_submitted) {
                Completion::Unfenced
            } else {
                Completion::Error
            };
        }
        if st.boundaries.iter().any(|b| b.error.is_some()) {
            return Completion::Error;
        }
        for b in st.boundaries.iter_mut().filter(|b| !b.complete) {
            let event = b.event.expect("a recorded boundary has an event");
            match ops.query(event) {
                Ok(EventStatus::Complete) => b.complete = true,
                Ok(EventStatus::Pending) => {}
                Err(e) => {
                    b.error = Some(e);
                    return Completion::Error;
                }
            }
        }
        if st.boundaries.iter().all(|b| b.complete) {
            Completion::Complete
        } else {
            Completion::Pending
        }
    }

    /// Bounded wait for both boundaries, AICPU first. Refused (no device wait at all) for a
    /// non-owner or a run that is not fenced. The first device error is stored and returned;
    /// a timeout is returned and not stored.
    pub(crate) fn wait<O: EventOps + ?Sized>(
        &self,
        ops: &O,
        id: &RunIdentity,
        timeout: Duration,
    ) -> Result<(), FenceError> {
        let deadline = simpler_device::deadline::deadline(timeout);
        let mut st = lock(&self.state);
        if !st.owns(id) {
            return Err(FenceError::Refused(why::NOT_OWNER));
        }
        if !st.fenced() {
            return Err(FenceError::Refused(why::NOT_FENCED));
        }
        if let Some(e) = st.boundaries.iter().find_map(|b| b.error.clone()) {
            return Err(FenceError::Device(e));
        }
        for role in [StreamRole::Aicpu, StreamRole::Aicore] {
            let b = &mut st.boundaries[role.index()];
            if b.complete {
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let event = b.event.expect("a recorded boundary has an event");
            let r = if left.is_zero() {
                // Out of budget: one non-blocking look instead of a zero-timeout wait.
                match ops.query(event) {
                    Ok(EventStatus::Complete) => Ok(()),
                    Ok(EventStatus::Pending) => Err(DeviceError::Timeout(timeout)),
                    Err(e) => Err(e),
                }
            } else {
                ops.wait(event, left)
            };
            match r {
                Ok(()) => b.complete = true,
                Err(DeviceError::Timeout(_)) => return Err(FenceError::TimedOut(timeout)),
                Err(e) => {
                    b.error = Some(e.clone());
                    return Err(FenceError::Device(e));
                }
            }
        }
        Ok(())
    }

    /// Status of one recorded boundary, for a successor's proof; caches nothing.
    #[cfg_attr(any(not(test), feature = "loom"), allow(dead_code))] // spec API, exercised by the tests
    pub(crate) fn query_boundary<O: EventOps + ?Sized>(
        &self,
        ops: &O,
        id: &RunIdentity,
        role: StreamRole,
    ) -> Result<EventStatus, FenceError> {
        let st = lock(&self.state);
        if !st.owns(id) {
            return Err(FenceError::Refused(why::NOT_OWNER));
        }
        let b = &st.boundaries[role.index()];
        if !b.recorded {
            return Err(FenceError::Refused(why::NOT_RECORDED));
        }
        let event = b.event.ok_or(FenceError::Refused(why::NO_EVENT))?;
        ops.query(event).map_err(FenceError::Device)
    }

    /// The first stored error of the arming (record, query or wait), for messages.
    pub(crate) fn first_error(&self, id: &RunIdentity) -> Option<DeviceError> {
        let st = lock(&self.state);
        if !st.owns(id) {
            return None;
        }
        st.boundaries
            .iter()
            .find_map(|b| b.error.clone().or_else(|| b.record_error.clone()))
    }

    /// Ends the run's arming. Idempotent (a non-owner gets `Ok`); refused while references
    /// exist, which keeps the slot blocked.
    pub(crate) fn retire(&self, id: &RunIdentity) -> Result<(), FenceError> {
        let mut st = lock(&self.state);
        if !st.owns(id) {
            return Ok(());
        }
        if st.references() > 0 {
            return Err(FenceError::Refused(why::REFERENCES_OUTSTANDING));
        }
        st.identity = None;
        for b in st.boundaries.iter_mut() {
            b.reset_facts();
        }
        Ok(())
    }

    /// Destroys the events (runner teardown). Refused while references exist; a handle whose
    /// destroy failed is kept; the first error is returned. Repeatable.
    pub(crate) fn release<O: EventOps + ?Sized>(&self, ops: &O) -> Result<(), FenceError> {
        let mut st = lock(&self.state);
        if st.references() > 0 {
            return Err(FenceError::Refused(why::REFERENCES_OUTSTANDING));
        }
        let mut first = None;
        for b in st.boundaries.iter_mut() {
            if let Some(e) = b.event {
                match ops.destroy(e) {
                    Ok(()) => b.event = None,
                    Err(err) => {
                        first.get_or_insert(FenceError::Device(err));
                    }
                }
            }
        }
        st.identity = None;
        first.map_or(Ok(()), Err)
    }

    /// After a verified reset: forgets handles, facts and counts without destroying anything;
    /// every token minted before is stale from now on.
    pub(crate) fn abandon(&self) {
        let mut st = lock(&self.state);
        st.identity = None;
        st.arming += 1;
        st.boundaries = Default::default();
    }

    /// Outstanding references (reserved + committed) on both boundaries.
    #[cfg_attr(any(not(test), feature = "loom"), allow(dead_code))] // spec API, exercised by the tests
    pub(crate) fn references(&self) -> u32 {
        lock(&self.state).references()
    }
}

#[cfg(all(test, not(feature = "loom")))]
pub(crate) mod tests;

#[cfg(all(test, feature = "loom"))]
mod loom_model;
