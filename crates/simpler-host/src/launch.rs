//! Launch-transaction grading (`docs/lane.md` §5).
//!
//! A launch is two submit callbacks, AICore first, then AICPU; each submits its kernel and
//! then records its boundary, so each has a step that can fail *after* the device accepted
//! work. The callbacks therefore mark a [`LaunchProgress`] sink the instant the device
//! accepts anything (a kernel, a wait, an asynchronous copy attempt), and the transaction
//! grades the launch from the sink, never from a return code alone:
//!
//! | AICore callback | sink marked | AICPU callback | grade |
//! |---|---|---|---|
//! | error | no | not called | NotStarted: nothing device-visible, roll back |
//! | error or panic | yes / any | not called | Partial |
//! | ok | — | error or panic | Partial |
//! | ok | — | ok | Complete |
//!
//! The permit is one-shot and consumed against the run's identity: a mismatch is refused
//! before anything is submitted. Partial means resources stay retained until an independent
//! proof (a bounded stream synchronize) or a forced reset: an exception or a missing receipt
//! is never a no-submission proof.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::identity::RunIdentity;

/// How far a launch got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchGrade {
    /// Nothing reached the device.
    NotStarted,
    /// Something reached the device, and the launch did not complete.
    Partial,
    /// Both callbacks succeeded.
    Complete,
}

/// The progress sink: marked the instant the device accepts work for the run.
#[derive(Debug, Default)]
pub(crate) struct LaunchProgress {
    submitted: Cell<bool>,
}

impl LaunchProgress {
    /// The device accepted (or may have accepted) work.
    pub(crate) fn mark_submitted(&self) {
        self.submitted.set(true);
    }

    /// Whether anything was accepted.
    pub(crate) fn submitted(&self) -> bool {
        self.submitted.get()
    }
}

/// A one-shot permission to launch one run.
#[derive(Debug)]
pub(crate) struct LaunchPermit {
    identity: RunIdentity,
}

impl LaunchPermit {
    /// The permit for `identity` (issued by the lane when it admits the launch).
    pub(crate) fn new(identity: RunIdentity) -> LaunchPermit {
        LaunchPermit { identity }
    }
}

/// Proof that both callbacks succeeded for exactly this run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaunchReceipt {
    pub(crate) identity: RunIdentity,
}

/// The graded result of a launch: the grade, the first error, and the receipt iff Complete.
#[derive(Debug)]
pub(crate) struct LaunchOutcome<E> {
    pub(crate) grade: LaunchGrade,
    pub(crate) error: Option<E>,
    pub(crate) receipt: Option<LaunchReceipt>,
}

/// Runs the launch transaction for `identity`. `panicked` turns a callback's panic into an
/// error value; a panic always grades Partial (it proves nothing about submission).
pub(crate) fn launch_transaction<E>(
    permit: LaunchPermit,
    identity: &RunIdentity,
    mismatch: impl FnOnce() -> E,
    panicked: impl Fn(&'static str) -> E,
    aicore: impl FnOnce(&LaunchProgress) -> Result<(), E>,
    aicpu: impl FnOnce(&LaunchProgress) -> Result<(), E>,
) -> LaunchOutcome<E> {
    if permit.identity != *identity {
        return LaunchOutcome {
            grade: LaunchGrade::NotStarted,
            error: Some(mismatch()),
            receipt: None,
        };
    }
    let sink = LaunchProgress::default();
    let partial = |e| LaunchOutcome {
        grade: LaunchGrade::Partial,
        error: Some(e),
        receipt: None,
    };
    match catch_unwind(AssertUnwindSafe(|| aicore(&sink))) {
        Err(_) => return partial(panicked("the AICore submit callback panicked")),
        Ok(Err(e)) => {
            return if sink.submitted() {
                partial(e)
            } else {
                LaunchOutcome {
                    grade: LaunchGrade::NotStarted,
                    error: Some(e),
                    receipt: None,
                }
            }
        }
        Ok(Ok(())) => {}
    }
    match catch_unwind(AssertUnwindSafe(|| aicpu(&sink))) {
        Err(_) => partial(panicked("the AICPU submit callback panicked")),
        Ok(Err(e)) => partial(e),
        Ok(Ok(())) => LaunchOutcome {
            grade: LaunchGrade::Complete,
            error: None,
            receipt: Some(LaunchReceipt {
                identity: *identity,
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(epoch: u64) -> RunIdentity {
        RunIdentity {
            epoch,
            generation: 1,
            dispatch_id: 1,
            slot: 0,
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Cb {
        Ok,
        /// Fails before the device accepted anything.
        FailUnmarked,
        /// The device accepted work, then a later step failed.
        FailMarked,
        Panic,
    }

    fn run(cb: Cb, sink: &LaunchProgress, calls: &Cell<u32>) -> Result<(), String> {
        calls.set(calls.get() + 1);
        match cb {
            Cb::Ok => {
                sink.mark_submitted();
                Ok(())
            }
            Cb::FailUnmarked => Err("refused".into()),
            Cb::FailMarked => {
                sink.mark_submitted();
                Err("record failed".into())
            }
            Cb::Panic => panic!("callback panic"),
        }
    }

    #[test]
    fn every_grading_shape() {
        use Cb::*;
        use LaunchGrade::*;
        // (aicore, aicpu, grade, aicpu called)
        let rows = [
            (FailUnmarked, Ok, NotStarted, false),
            (FailMarked, Ok, Partial, false),
            (Panic, Ok, Partial, false),
            (Ok, FailUnmarked, Partial, true),
            (Ok, FailMarked, Partial, true),
            (Ok, Panic, Partial, true),
            (Ok, Ok, Complete, true),
        ];
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        for (core, cpu, grade, cpu_called) in rows {
            let (c1, c2) = (Cell::new(0), Cell::new(0));
            let out = launch_transaction(
                LaunchPermit::new(id(1)),
                &id(1),
                || "mismatch".to_string(),
                |w| w.to_string(),
                |s| run(core, s, &c1),
                |s| run(cpu, s, &c2),
            );
            assert_eq!(out.grade, grade, "{core:?}/{cpu:?}");
            assert_eq!(c2.get() == 1, cpu_called, "{core:?}/{cpu:?}");
            assert_eq!(out.receipt.is_some(), grade == Complete);
            assert_eq!(out.error.is_none(), grade == Complete);
            if let Some(r) = out.receipt {
                assert_eq!(r.identity, id(1), "the receipt names the run");
            }
        }
        std::panic::set_hook(hook);
    }

    #[test]
    fn a_permit_for_another_run_submits_nothing() {
        let called = Cell::new(false);
        let out = launch_transaction(
            LaunchPermit::new(id(1)),
            &id(2),
            || "permit mismatch",
            |w| w,
            |_| {
                called.set(true);
                Ok(())
            },
            |_| Ok(()),
        );
        assert_eq!(out.grade, LaunchGrade::NotStarted);
        assert_eq!(out.error, Some("permit mismatch"));
        assert!(!called.get());
    }
}
