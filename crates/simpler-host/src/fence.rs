//! `RunCompletionFence`: one per pipeline slot; the two boundary events of the run the slot
//! hosts and the facts about them (design `run-completion-fences.txt`, "The boundary",
//! "Ownership", "Submitted work with no boundary"; spec `run-lane.md` §2.1–§2.2).
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
//! Deviation from the spec, on purpose: a boundary wait that runs out of time is *not* stored
//! as the boundary's error. A timeout says the host stopped waiting, nothing about the
//! boundary; storing it would turn a caller's short `RunHandle::wait(timeout)` into a failed
//! run. The caller decides what an expired deadline means (the run's own timeout budget).
//!
//! The wait-reference protocol (tokens) lives in [`crate::wait_ref`]; the counters it moves
//! are kept here, and a fence holding any reservation or committed reference refuses
//! [`arm`](RunCompletionFence::arm), [`record`](RunCompletionFence::record),
//! [`retire`](RunCompletionFence::retire) and [`release`](RunCompletionFence::release).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use simpler_device::{Device, DeviceError, EventId, EventStatus, StreamId};

use crate::identity::{RunIdentity, StreamRole};
use crate::sync::{lock, Mutex, TryLockError};

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

/// Why a fence operation did nothing (the spec's INTERNAL), or the device error it met.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// The operation was refused by one of the fence's rules; nothing changed.
    #[error("completion fence refused: {0}")]
    Refused(&'static str),
    /// A device call failed (stored as the boundary's error where the spec says so).
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
    #[cfg_attr(any(not(test), loom), allow(dead_code))]
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
    #[cfg_attr(any(not(test), loom), allow(dead_code))] // spec API, exercised by the tests
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

    #[cfg_attr(any(not(test), loom), allow(dead_code))] // spec API, exercised by the tests
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
        let deadline = Instant::now() + timeout;
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
    #[cfg_attr(any(not(test), loom), allow(dead_code))] // spec API, exercised by the tests
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
    #[cfg_attr(any(not(test), loom), allow(dead_code))] // spec API, exercised by the tests
    pub(crate) fn references(&self) -> u32 {
        lock(&self.state).references()
    }
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    /// Scripted event operations: each event is Pending or Complete; any call can be failed.
    #[derive(Default)]
    pub(crate) struct FakeOps {
        pub(crate) next: RefCell<u32>,
        pub(crate) status: RefCell<HashMap<u32, EventStatus>>,
        pub(crate) fail_create: RefCell<bool>,
        pub(crate) fail_record: RefCell<bool>,
        pub(crate) fail_query: RefCell<bool>,
        pub(crate) fail_wait: RefCell<Option<DeviceError>>,
        pub(crate) fail_destroy: RefCell<bool>,
        pub(crate) log: RefCell<Vec<String>>,
    }

    impl FakeOps {
        pub(crate) fn complete_all(&self) {
            for v in self.status.borrow_mut().values_mut() {
                *v = EventStatus::Complete;
            }
        }
        pub(crate) fn set(&self, e: EventId, s: EventStatus) {
            self.status.borrow_mut().insert(e.raw(), s);
        }
    }

    fn injected(what: &'static str) -> DeviceError {
        DeviceError::Injected(what)
    }

    impl EventOps for FakeOps {
        fn create(&self) -> Result<EventId, DeviceError> {
            if *self.fail_create.borrow() {
                return Err(injected("create"));
            }
            let mut n = self.next.borrow_mut();
            *n += 1;
            self.status.borrow_mut().insert(*n, EventStatus::Complete);
            Ok(EventId::from_raw(*n))
        }
        fn record(&self, event: EventId, _: StreamId) -> Result<(), DeviceError> {
            if *self.fail_record.borrow() {
                return Err(injected("record"));
            }
            self.log
                .borrow_mut()
                .push(format!("record {}", event.raw()));
            self.set(event, EventStatus::Pending);
            Ok(())
        }
        fn query(&self, event: EventId) -> Result<EventStatus, DeviceError> {
            if *self.fail_query.borrow() {
                return Err(injected("query"));
            }
            Ok(self.status.borrow()[&event.raw()])
        }
        fn wait(&self, event: EventId, timeout: Duration) -> Result<(), DeviceError> {
            self.log.borrow_mut().push(format!("wait {}", event.raw()));
            if let Some(e) = self.fail_wait.borrow().clone() {
                return Err(e);
            }
            match self.status.borrow()[&event.raw()] {
                EventStatus::Complete => Ok(()),
                EventStatus::Pending => Err(DeviceError::Timeout(timeout)),
            }
        }
        fn destroy(&self, event: EventId) -> Result<(), DeviceError> {
            if *self.fail_destroy.borrow() {
                return Err(injected("destroy"));
            }
            self.status.borrow_mut().remove(&event.raw());
            Ok(())
        }
    }

    pub(crate) fn ident(epoch: u64) -> RunIdentity {
        RunIdentity {
            epoch,
            generation: 1,
            dispatch_id: epoch,
            slot: 0,
        }
    }

    pub(crate) const S: Option<StreamId> = Some(StreamId::from_raw(7));

    /// Arms and launches both kernels with both boundaries recorded.
    pub(crate) fn fenced_run(ops: &FakeOps, f: &RunCompletionFence, id: RunIdentity) {
        f.arm(ops, id).unwrap();
        for r in StreamRole::BOTH {
            f.note_kernel_submitted(&id, r);
            f.record(ops, &id, r, S).unwrap();
        }
    }

    fn ev(f: &RunCompletionFence, r: StreamRole) -> EventId {
        lock(&f.state).boundaries[r.index()].event.unwrap()
    }

    const T: Duration = Duration::from_millis(5);

    #[test]
    fn one_boundary_is_not_completion_and_completion_is_sticky() {
        let ops = FakeOps::default();
        let f = RunCompletionFence::new();
        let id = ident(1);
        fenced_run(&ops, &f, id);
        assert_eq!(f.poll(&ops, &id), Completion::Pending);
        ops.set(ev(&f, StreamRole::Aicpu), EventStatus::Complete);
        assert_eq!(
            f.poll(&ops, &id),
            Completion::Pending,
            "cpu_done alone proves nothing"
        );
        ops.set(ev(&f, StreamRole::Aicore), EventStatus::Complete);
        assert_eq!(f.poll(&ops, &id), Completion::Complete);
        // Sticky: a later re-record of the event (by anyone) does not undo the cached fact.
        ops.set(ev(&f, StreamRole::Aicore), EventStatus::Pending);
        *ops.fail_query.borrow_mut() = true;
        assert_eq!(f.poll(&ops, &id), Completion::Complete);
    }

    #[test]
    fn wait_order_timeout_and_kept_error() {
        let ops = FakeOps::default();
        let f = RunCompletionFence::new();
        let id = ident(1);
        fenced_run(&ops, &f, id);
        let (core, cpu) = (ev(&f, StreamRole::Aicore), ev(&f, StreamRole::Aicpu));
        ops.log.borrow_mut().clear();
        assert_eq!(f.wait(&ops, &id, T), Err(FenceError::TimedOut(T)));
        assert_eq!(*ops.log.borrow(), vec![format!("wait {}", cpu.raw())]);
        // A timeout is not stored: the run is still pending, not failed.
        assert_eq!(f.poll(&ops, &id), Completion::Pending);
        ops.complete_all();
        ops.log.borrow_mut().clear();
        f.wait(&ops, &id, T).unwrap();
        assert_eq!(
            *ops.log.borrow(),
            vec![
                format!("wait {}", cpu.raw()),
                format!("wait {}", core.raw())
            ],
            "AICPU first, then AICore"
        );
        // A device error is stored and kept for the arming.
        let f = RunCompletionFence::new();
        fenced_run(&ops, &f, id);
        *ops.fail_wait.borrow_mut() = Some(DeviceError::Injected("wait"));
        assert_eq!(
            f.wait(&ops, &id, T),
            Err(FenceError::Device(DeviceError::Injected("wait")))
        );
        *ops.fail_wait.borrow_mut() = None;
        ops.complete_all();
        assert_eq!(f.poll(&ops, &id), Completion::Error);
        assert_eq!(
            f.wait(&ops, &id, T),
            Err(FenceError::Device(DeviceError::Injected("wait")))
        );
    }

    #[test]
    fn query_create_and_record_failures() {
        let ops = FakeOps::default();
        let id = ident(1);
        // Create failure: unarmed, nothing recorded.
        let f = RunCompletionFence::new();
        *ops.fail_create.borrow_mut() = true;
        assert!(matches!(f.arm(&ops, id), Err(FenceError::Device(_))));
        assert!(lock(&f.state).identity.is_none());
        assert_eq!(
            f.record(&ops, &id, StreamRole::Aicore, S),
            Err(FenceError::Refused(why::NOT_OWNER))
        );
        *ops.fail_create.borrow_mut() = false;
        // Query failure: stored, Error.
        let f = RunCompletionFence::new();
        fenced_run(&ops, &f, id);
        *ops.fail_query.borrow_mut() = true;
        assert_eq!(f.poll(&ops, &id), Completion::Error);
        *ops.fail_query.borrow_mut() = false;
        assert_eq!(f.poll(&ops, &id), Completion::Error, "the error is kept");
        // Record failure after the kernel was accepted: Unfenced, and unwaitable.
        let f = RunCompletionFence::new();
        f.arm(&ops, id).unwrap();
        f.note_kernel_submitted(&id, StreamRole::Aicore);
        *ops.fail_record.borrow_mut() = true;
        assert!(matches!(
            f.record(&ops, &id, StreamRole::Aicore, S),
            Err(FenceError::Device(_))
        ));
        *ops.fail_record.borrow_mut() = false;
        assert_eq!(f.poll(&ops, &id), Completion::Unfenced);
        assert!(!f.fenced(&id));
        ops.log.borrow_mut().clear();
        assert_eq!(
            f.wait(&ops, &id, T),
            Err(FenceError::Refused(why::NOT_FENCED))
        );
        assert!(
            ops.log.borrow().is_empty(),
            "no device wait on an unfenced run"
        );
        assert!(f.has_device_references(&id));
        assert!(f.first_error(&id).is_some());
    }

    #[test]
    fn partial_launch_with_one_kernel_is_unfenced() {
        let ops = FakeOps::default();
        let f = RunCompletionFence::new();
        let id = ident(3);
        f.arm(&ops, id).unwrap();
        f.note_kernel_submitted(&id, StreamRole::Aicore);
        f.record(&ops, &id, StreamRole::Aicore, S).unwrap();
        // The AICPU kernel never went out: one recorded boundary is not a fence.
        assert_eq!(f.poll(&ops, &id), Completion::Unfenced);
        assert_eq!(
            f.wait(&ops, &id, T),
            Err(FenceError::Refused(why::NOT_FENCED))
        );
        // Nothing submitted at all: no device references, and nothing to decide.
        let g = RunCompletionFence::new();
        g.arm(&ops, id).unwrap();
        assert!(!g.has_device_references(&id));
        assert_eq!(g.poll(&ops, &id), Completion::Error);
    }

    #[test]
    fn foreign_identity_reads_nothing_and_slot_reuse_drops_facts() {
        let ops = FakeOps::default();
        let f = RunCompletionFence::new();
        let (a, b) = (ident(1), ident(2));
        fenced_run(&ops, &f, a);
        ops.complete_all();
        assert_eq!(f.poll(&ops, &a), Completion::Complete);
        assert_eq!(f.poll(&ops, &b), Completion::Error);
        assert_eq!(
            f.wait(&ops, &b, T),
            Err(FenceError::Refused(why::NOT_OWNER))
        );
        assert_eq!(
            f.query_boundary(&ops, &b, StreamRole::Aicpu),
            Err(FenceError::Refused(why::NOT_OWNER))
        );
        f.note_kernel_submitted(&b, StreamRole::Aicpu); // no-op
        f.retire(&b).unwrap(); // a non-owner's retire does nothing
        assert_eq!(f.poll(&ops, &a), Completion::Complete);
        let before = (ev(&f, StreamRole::Aicore), ev(&f, StreamRole::Aicpu));
        f.retire(&a).unwrap();
        f.retire(&a).unwrap(); // idempotent
                               // Slot reuse: same handles, fresh facts, the old identity is refused.
        fenced_run(&ops, &f, b);
        assert_eq!(
            before,
            (ev(&f, StreamRole::Aicore), ev(&f, StreamRole::Aicpu))
        );
        assert_eq!(f.poll(&ops, &b), Completion::Pending);
        assert_eq!(f.poll(&ops, &a), Completion::Error);
    }

    #[test]
    fn a_queued_successor_does_not_delay_the_predecessor() {
        // Two slots; the successor's boundaries stay pending while the predecessor's
        // complete: the predecessor's fence answers Complete on its own events.
        let ops = FakeOps::default();
        let (f0, f1) = (RunCompletionFence::new(), RunCompletionFence::new());
        let (a, b) = (ident(1), ident(2));
        fenced_run(&ops, &f0, a);
        fenced_run(&ops, &f1, b);
        for r in StreamRole::BOTH {
            ops.set(ev(&f0, r), EventStatus::Complete);
        }
        assert_eq!(f0.poll(&ops, &a), Completion::Complete);
        f0.wait(&ops, &a, T).unwrap();
        assert_eq!(f1.poll(&ops, &b), Completion::Pending);
    }

    #[test]
    fn poll_does_not_block_behind_a_wait() {
        let ops = FakeOps::default();
        let f = RunCompletionFence::new();
        let id = ident(1);
        fenced_run(&ops, &f, id);
        ops.complete_all();
        let _held = lock(&f.state); // what a wait in progress holds
        assert_eq!(f.poll(&ops, &id), Completion::Pending);
    }

    #[test]
    fn query_boundary_needs_a_recorded_boundary_and_caches_nothing() {
        let ops = FakeOps::default();
        let f = RunCompletionFence::new();
        let id = ident(1);
        f.arm(&ops, id).unwrap();
        assert_eq!(
            f.query_boundary(&ops, &id, StreamRole::Aicpu),
            Err(FenceError::Refused(why::NOT_RECORDED))
        );
        fenced_run(&ops, &f, id);
        let cpu = ev(&f, StreamRole::Aicpu);
        ops.set(cpu, EventStatus::Complete);
        assert_eq!(
            f.query_boundary(&ops, &id, StreamRole::Aicpu),
            Ok(EventStatus::Complete)
        );
        ops.set(cpu, EventStatus::Pending);
        assert_eq!(
            f.query_boundary(&ops, &id, StreamRole::Aicpu),
            Ok(EventStatus::Pending)
        );
        assert_eq!(
            f.record(&ops, &id, StreamRole::Aicpu, None),
            Err(FenceError::Refused(why::NO_STREAM))
        );
    }

    #[test]
    fn release_is_repeatable_and_keeps_handles_whose_destroy_failed() {
        let ops = FakeOps::default();
        let f = RunCompletionFence::new();
        let id = ident(1);
        fenced_run(&ops, &f, id);
        *ops.fail_destroy.borrow_mut() = true;
        assert!(matches!(f.release(&ops), Err(FenceError::Device(_))));
        assert!(lock(&f.state).boundaries.iter().all(|b| b.event.is_some()));
        *ops.fail_destroy.borrow_mut() = false;
        f.release(&ops).unwrap();
        assert!(lock(&f.state).boundaries.iter().all(|b| b.event.is_none()));
        f.release(&ops).unwrap();
        // Released fences re-create their events at the next arm.
        fenced_run(&ops, &f, ident(2));
        assert!(lock(&f.state).boundaries.iter().all(|b| b.event.is_some()));
    }

    #[test]
    fn abandon_forgets_handles_and_facts_without_destroying() {
        let ops = FakeOps::default();
        let f = RunCompletionFence::new();
        let id = ident(1);
        fenced_run(&ops, &f, id);
        let live = ops.status.borrow().len();
        f.abandon();
        assert_eq!(ops.status.borrow().len(), live, "nothing destroyed");
        assert!(lock(&f.state).boundaries.iter().all(|b| b.event.is_none()));
        assert_eq!(f.poll(&ops, &id), Completion::Error);
    }
}

/// The loom model: concurrent poll, wait and token counting on one fence. Run with
/// `RUSTFLAGS="--cfg loom" cargo test -p simpler-host --lib loom --release`.
#[cfg(all(test, loom))]
mod loom_model {
    use super::*;
    use crate::wait_ref::WaitReference;
    use loom::sync::atomic::{AtomicBool, AtomicU32};
    use loom::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;

    struct Ops {
        complete: AtomicBool,
        next: AtomicU32,
    }

    impl EventOps for Ops {
        fn create(&self) -> Result<EventId, DeviceError> {
            Ok(EventId::from_raw(self.next.fetch_add(1, SeqCst)))
        }
        fn record(&self, _: EventId, _: StreamId) -> Result<(), DeviceError> {
            Ok(())
        }
        fn query(&self, _: EventId) -> Result<EventStatus, DeviceError> {
            Ok(if self.complete.load(SeqCst) {
                EventStatus::Complete
            } else {
                EventStatus::Pending
            })
        }
        fn wait(&self, _: EventId, t: Duration) -> Result<(), DeviceError> {
            if self.complete.load(SeqCst) {
                Ok(())
            } else {
                Err(DeviceError::Timeout(t))
            }
        }
        fn destroy(&self, _: EventId) -> Result<(), DeviceError> {
            Ok(())
        }
    }

    #[test]
    fn loom_concurrent_poll_wait_and_token_counting() {
        loom::model(|| {
            let ops = Arc::new(Ops {
                complete: AtomicBool::new(false),
                next: AtomicU32::new(1),
            });
            let f = Arc::new(RunCompletionFence::new());
            let id = RunIdentity {
                epoch: 1,
                generation: 1,
                dispatch_id: 1,
                slot: 0,
            };
            f.arm(&*ops, id).unwrap();
            for r in StreamRole::BOTH {
                f.note_kernel_submitted(&id, r);
                f.record(&*ops, &id, r, Some(StreamId::from_raw(1)))
                    .unwrap();
            }
            let (f1, o1) = (f.clone(), ops.clone());
            let poller = loom::thread::spawn(move || {
                // Never blocks and never reports a failure: Pending or Complete only.
                let c = f1.poll(&*o1, &id);
                assert!(
                    matches!(c, Completion::Pending | Completion::Complete),
                    "{c:?}"
                );
            });
            let (f2, o2) = (f.clone(), ops.clone());
            let waiter = loom::thread::spawn(move || {
                o2.complete.store(true, SeqCst);
                f2.wait(&*o2, &id, Duration::from_secs(1)).unwrap();
            });
            let f3 = f.clone();
            let tokens = loom::thread::spawn(move || {
                let mut r = WaitReference::empty();
                f3.reserve_wait_reference(&id, StreamRole::Aicpu, StreamRole::Aicore, &mut r)
                    .unwrap();
                f3.commit_wait_reference(&mut r).unwrap();
                f3.release_wait_reference(&mut r, StreamRole::Aicore)
                    .unwrap();
            });
            poller.join().unwrap();
            waiter.join().unwrap();
            tokens.join().unwrap();
            assert_eq!(f.references(), 0, "every count came back");
            assert_eq!(f.poll(&*ops, &id), Completion::Complete);
            f.retire(&id).unwrap();
        });
    }
}
