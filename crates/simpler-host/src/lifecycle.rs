//! The worker lifecycle: the environment identity every lane operation is checked against,
//! the current borrowed context of a thread, fork refusal, the release marker behind
//! [`HostError::RunPreparationRefused`], and the open → closed state machine
//! (`docs/health.md` §7; `RunPreparationRefused`: `docs/lane.md` §4; caller launches:
//! `docs/lane.md` §12).
//!
//! **Owns:**
//! - [`EnvironmentIdentity`] {process, incarnation, context generation, device,
//!   owned/borrowed}, fixed when the worker is created. [`EnvironmentIdentity::check`] runs
//!   first in every worker and handle operation, *before any lock is taken*:
//!   - another process id means the worker was inherited by a forked child: every operation
//!     refuses with [`HostError::ExecutionContextRefused`] (never restorable), touches
//!     nothing, and dropping the worker in the child does no device cleanup;
//!   - a borrowed worker also needs its context generation to be the calling thread's
//!     current context ([`enter_context`]); otherwise the operation refuses with
//!     `ExecutionContextRefused`, keeps every reference, and succeeds when retried after the
//!     context is restored (the same handle can be waited again).
//! - The thread's current borrowed context ([`current_context`], [`set_current_context`]):
//!   the stand-in for the RTS context a framework makes current on its threads.
//! - [`ReleaseMarker`]: a preparation rollback that *proved* the release of everything the run
//!   took publishes its epoch; the lane consumes exactly that epoch and reports
//!   `RunPreparationRefused` (the arguments are handed back). A rollback that could not prove
//!   it publishes nothing: the run ends with its original error, its arguments and staging
//!   are kept, and admission is poisoned.
//! - [`WorkerState`]: OPEN until `close()` is accepted; CLOSED is terminal. A close is
//!   validated (identity, context) before CLOSED is claimed, so a refused close leaves the
//!   worker as it was; an accepted close that cannot prove everything free stays CLOSED with
//!   retryable cleanup debt ([`HostError::CleanupIncomplete`]; calling `close()` again
//!   retries). Dropping a worker that was never closed detaches its handles with
//!   [`HostError::Detached`] and keeps whatever it cannot prove free.
//!
//! The close and drop procedures themselves drive the lane and live with it (the lane's
//! teardown); this module holds their rules.

use std::cell::Cell;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::HostError;

/// Whether the worker created its device context or borrows the caller's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ownership {
    /// The worker owns its context: its failures may drain and force-reset the device.
    Owned,
    /// The caller owns the context and the device: the worker never synchronizes or resets
    /// the whole device, and refuses to run unless the caller's context is current.
    Borrowed,
}

/// Source of incarnations (non-repeating in the process).
static INCARNATIONS: AtomicU64 = AtomicU64::new(1);
/// Source of owned context generations.
static OWNED_CONTEXTS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static CURRENT: Cell<Option<NonZeroU64>> = const { Cell::new(None) };
}

/// The calling thread's current borrowed context generation.
pub fn current_context() -> Option<NonZeroU64> {
    CURRENT.with(Cell::get)
}

/// Makes `generation` the calling thread's current context; returns the previous one.
pub fn set_current_context(generation: Option<NonZeroU64>) -> Option<NonZeroU64> {
    CURRENT.with(|c| c.replace(generation))
}

/// Makes `generation` current on this thread until the guard is dropped (which restores the
/// previous context).
pub fn enter_context(generation: NonZeroU64) -> ContextGuard {
    ContextGuard {
        previous: set_current_context(Some(generation)),
    }
}

/// Restores the thread's previous context when dropped.
#[derive(Debug)]
#[must_use = "the context is current only while the guard lives"]
pub struct ContextGuard {
    previous: Option<NonZeroU64>,
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        set_current_context(self.previous);
    }
}

/// Who a worker is, fixed at creation and kept until its teardown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvironmentIdentity {
    /// The process that created the worker.
    pub process: u32,
    /// Non-repeating in the process: one per worker created.
    pub incarnation: u64,
    /// The context generation: minted for an owned worker, the caller's for a borrowed one.
    pub context_generation: NonZeroU64,
    /// The device's logical id.
    pub device: u32,
    /// Owned or borrowed.
    pub ownership: Ownership,
}

impl EnvironmentIdentity {
    /// The identity of a worker created now on `device`; `borrowed` is the caller's context
    /// generation for a borrowed worker.
    pub fn new(device: u32, borrowed: Option<NonZeroU64>) -> EnvironmentIdentity {
        let (context_generation, ownership) = match borrowed {
            Some(g) => (g, Ownership::Borrowed),
            None => (
                NonZeroU64::new(OWNED_CONTEXTS.fetch_add(1, Ordering::Relaxed))
                    .expect("the counter starts at 1"),
                Ownership::Owned,
            ),
        };
        EnvironmentIdentity {
            process: std::process::id(),
            incarnation: INCARNATIONS.fetch_add(1, Ordering::Relaxed),
            context_generation,
            device,
            ownership,
        }
    }

    /// True when called from the process that created the worker.
    pub fn in_creating_process(&self) -> bool {
        std::process::id() == self.process
    }

    /// Refuses a forked child (no lock taken, nothing touched).
    ///
    /// # Errors
    /// [`HostError::ExecutionContextRefused`].
    pub fn check_process(&self) -> Result<(), HostError> {
        let now = std::process::id();
        if now == self.process {
            return Ok(());
        }
        Err(HostError::ExecutionContextRefused(format!(
            "this worker was created by process {} and is used from process {now} (a forked \
             child); it refuses every operation there",
            self.process
        )))
    }

    /// The check every worker and handle operation starts with: the creating process, and for
    /// a borrowed worker the thread's current context.
    ///
    /// # Errors
    /// [`HostError::ExecutionContextRefused`].
    pub fn check(&self) -> Result<(), HostError> {
        self.check_process()?;
        if self.ownership == Ownership::Borrowed {
            let current = current_context();
            if current != Some(self.context_generation) {
                return Err(HostError::ExecutionContextRefused(format!(
                    "this worker runs in borrowed context generation {}, but the calling \
                     thread's current context is {}; make it current and retry",
                    self.context_generation,
                    current.map_or_else(|| "none".to_string(), |g| g.to_string())
                )));
            }
        }
        Ok(())
    }
}

/// The release marker of a proven preparation rollback: carries the run's epoch.
#[derive(Debug, Default)]
pub(crate) struct ReleaseMarker {
    published: Option<u64>,
}

impl ReleaseMarker {
    /// A rollback proved the release of everything run `epoch` took.
    pub(crate) fn publish(&mut self, epoch: u64) {
        self.published = Some(epoch);
    }

    /// Consumes the marker if it carries exactly `epoch`; a marker for another epoch is
    /// stale and stays unconsumed (it proves nothing about this run).
    pub(crate) fn consume(&mut self, epoch: u64) -> bool {
        if self.published == Some(epoch) {
            self.published = None;
            true
        } else {
            false
        }
    }
}

/// How a failed preparation ends its run (pure: the lane acts on it).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PreparationEnd {
    /// Proven rollback matched by epoch: `RunPreparationRefused`, arguments handed back.
    Refused,
    /// Unproven (or a marker for another epoch): the original error, arguments and staging
    /// kept, admission poisoned.
    Unproven,
}

/// Decides how a failed preparation of run `epoch` ends: only the marker of that exact epoch
/// proves the rollback.
pub(crate) fn end_of_failed_preparation(marker: &mut ReleaseMarker, epoch: u64) -> PreparationEnd {
    if marker.consume(epoch) {
        PreparationEnd::Refused
    } else {
        PreparationEnd::Unproven
    }
}

/// The worker's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerState {
    /// Accepting work.
    Open,
    /// Closed for good; `debt` when its cleanup could not prove everything free yet (a later
    /// `close()` retries it).
    Closed {
        /// Cleanup still owed.
        debt: bool,
    },
    /// Dropped without `close()`: handles detached, unprovable resources kept.
    Detached,
}

/// What `close()` does in a given state (pure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CloseStep {
    /// Claim CLOSED, drain the lane, clean up.
    CloseAndCleanUp,
    /// Already closed with debt: retry the cleanup.
    RetryCleanup,
    /// Already closed, nothing owed: succeed, do nothing.
    Nothing,
}

/// The close transition (after the identity and context checks passed).
pub(crate) fn close_step(state: WorkerState) -> CloseStep {
    match state {
        WorkerState::Open => CloseStep::CloseAndCleanUp,
        WorkerState::Closed { debt: true } => CloseStep::RetryCleanup,
        WorkerState::Closed { debt: false } | WorkerState::Detached => CloseStep::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(g: u64) -> NonZeroU64 {
        NonZeroU64::new(g).unwrap()
    }

    #[test]
    fn identities_are_distinct_and_name_their_process() {
        let a = EnvironmentIdentity::new(3, None);
        let b = EnvironmentIdentity::new(3, None);
        assert_ne!(a.incarnation, b.incarnation);
        assert_ne!(a.context_generation, b.context_generation);
        assert_eq!(a.process, std::process::id());
        assert_eq!(a.ownership, Ownership::Owned);
        let c = EnvironmentIdentity::new(3, Some(gen(77)));
        assert_eq!(
            (c.ownership, c.context_generation),
            (Ownership::Borrowed, gen(77))
        );
    }

    #[test]
    fn context_check_table() {
        // (ownership's borrowed generation, thread's current context, passes)
        let rows: &[(Option<u64>, Option<u64>, bool)] = &[
            (None, None, true),
            (None, Some(5), true),
            (Some(5), Some(5), true),
            (Some(5), None, false),
            (Some(5), Some(6), false),
        ];
        for &(borrowed, current, ok) in rows {
            let id = EnvironmentIdentity::new(0, borrowed.map(gen));
            let previous = set_current_context(current.map(gen));
            let r = id.check();
            set_current_context(previous);
            assert_eq!(r.is_ok(), ok, "{borrowed:?} / {current:?}");
            if let Err(e) = r {
                assert!(matches!(e, HostError::ExecutionContextRefused(_)), "{e}");
            }
        }
    }

    #[test]
    fn a_refused_context_can_be_restored_and_retried() {
        let id = EnvironmentIdentity::new(0, Some(gen(9)));
        assert!(id.check().is_err());
        {
            let _g = enter_context(gen(9));
            assert!(id.check().is_ok());
            {
                let _inner = enter_context(gen(10));
                assert!(id.check().is_err(), "another context is current");
            }
            assert!(
                id.check().is_ok(),
                "the guard restored the previous context"
            );
        }
        assert_eq!(current_context(), None);
    }

    #[test]
    fn a_forked_child_refuses_and_the_parent_does_not() {
        let id = EnvironmentIdentity::new(0, None);
        assert!(id.check().is_ok());
        assert!(crate::fault_monitor::in_forked_child(|| {
            matches!(id.check(), Err(HostError::ExecutionContextRefused(_)))
                && !id.in_creating_process()
        }));
        assert!(id.check().is_ok(), "the parent continues");
    }

    #[test]
    fn release_marker_matches_by_epoch() {
        // (published epoch, run epoch, end)
        let rows = [
            (Some(5u64), 5u64, PreparationEnd::Refused),
            (Some(5), 6, PreparationEnd::Unproven),
            (None, 5, PreparationEnd::Unproven),
        ];
        for (published, epoch, end) in rows {
            let mut m = ReleaseMarker::default();
            if let Some(p) = published {
                m.publish(p);
            }
            assert_eq!(
                end_of_failed_preparation(&mut m, epoch),
                end,
                "{published:?}/{epoch}"
            );
        }
        let mut m = ReleaseMarker::default();
        m.publish(5);
        assert!(m.consume(5));
        assert!(!m.consume(5), "a marker is consumed once");
    }

    #[test]
    fn close_transitions() {
        let rows = [
            (WorkerState::Open, CloseStep::CloseAndCleanUp),
            (WorkerState::Closed { debt: true }, CloseStep::RetryCleanup),
            (WorkerState::Closed { debt: false }, CloseStep::Nothing),
            (WorkerState::Detached, CloseStep::Nothing),
        ];
        for (state, step) in rows {
            assert_eq!(close_step(state), step, "{state:?}");
        }
    }
}
