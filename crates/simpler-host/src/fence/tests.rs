//! Unit tests of the completion fence: a scripted [`EventOps`] and one test per rule.

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
