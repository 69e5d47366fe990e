//! What a caller holds for a submitted run (`docs/lane.md` §3): a
//! [`RunHandle`] to poll, wait (bounded or not) and collect the [`RunOutput`].
//!
//! A handle drives the lane itself — there is no background thread: `poll` makes whatever
//! progress needs no blocking (it never blocks, not even behind another thread's wait), and
//! `wait` finalizes runs front-first until its own is terminal. The terminal state is cached
//! in the run's cell, so re-waiting is free and answers the same error each time. The
//! handle holds the lane, never the worker.

use std::sync::Arc;
use std::time::Duration;

use crate::args::OwnedArg;
use crate::lane::{LaneHandle, RunCell, RunReport};
use crate::HostError;

/// What a finished run gives back.
#[derive(Debug)]
pub struct RunOutput {
    /// Timings and identity.
    pub report: RunReport,
    /// The arguments, outputs copied back.
    pub args: Vec<OwnedArg>,
}

/// A submitted run. `Send + Sync`; any thread may poll or wait on it.
pub struct RunHandle {
    lane: LaneHandle,
    cell: Arc<RunCell>,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("epoch", &self.cell.epoch)
            .field("dispatch_id", &self.cell.dispatch_id)
            .field("done", &self.cell.is_done())
            .finish()
    }
}

impl RunHandle {
    /// The handle of the run `cell` in `lane`.
    pub(crate) fn new(lane: LaneHandle, cell: Arc<RunCell>) -> RunHandle {
        RunHandle { lane, cell }
    }

    /// True once the run is terminal (succeeded or failed). Never blocks: it makes the
    /// progress that needs no waiting, and answers false when another thread holds the lane
    /// — or when the handle is used from the wrong execution context (see
    /// [`try_poll`](RunHandle::try_poll)).
    pub fn poll(&self) -> bool {
        self.try_poll().unwrap_or(false)
    }

    /// [`poll`](RunHandle::poll), telling a refused context apart.
    ///
    /// # Errors
    /// [`HostError::ExecutionContextRefused`] in a forked child (before any lock is taken),
    /// or on a thread whose current borrowed context is not the worker's (retry after
    /// restoring it).
    pub fn try_poll(&self) -> Result<bool, HostError> {
        self.lane.identity().check()?;
        if self.cell.is_done() {
            return Ok(true);
        }
        self.lane.poll_progress();
        Ok(self.cell.is_done())
    }

    /// Waits until the run is terminal, at most `timeout` (`None`: as long as it takes,
    /// bounded by the worker's run timeout on the device side), and returns its outcome.
    /// Re-waiting is fine and returns the same outcome.
    ///
    /// # Errors
    /// [`HostError::WaitTimeout`] if the run is not terminal in time (it goes on),
    /// [`HostError::ExecutionContextRefused`] from the wrong execution context (nothing is
    /// touched; a borrowed context can be restored and the wait retried), or the run's own
    /// error.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<(), HostError> {
        self.lane.identity().check()?;
        let deadline = timeout.map(simpler_device::deadline::deadline);
        if !self.cell.is_done() {
            self.lane.wait_for(&self.cell, deadline, timeout)?;
        }
        self.cell.outcome().map(|_| ())
    }

    /// Waits for the run and returns its report and arguments (outputs copied back on
    /// success).
    ///
    /// # Errors
    /// The run's error; the arguments are dropped then.
    pub fn result(self) -> Result<RunOutput, HostError> {
        self.take_output()
    }

    /// [`result`](RunHandle::result) without giving the handle up, for a caller that must
    /// choose where the handle is dropped (the last handle of a closed worker frees its
    /// device, which joins the device's threads). Waits for the run; the arguments are
    /// handed over once: a later call answers the same report with none.
    ///
    /// # Errors
    /// As [`result`](RunHandle::result).
    pub fn take_output(&self) -> Result<RunOutput, HostError> {
        self.wait(None)?;
        let report = self.cell.outcome()?;
        Ok(RunOutput {
            report,
            args: self.cell.take_args(),
        })
    }

    /// The run's epoch (process-unique, non-zero).
    pub fn epoch(&self) -> u64 {
        self.cell.epoch
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<RunHandle>();
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use crate::worker::tests::{empty_spec, one_arg, small_worker};

    #[test]
    fn take_output_hands_the_arguments_over_once_and_keeps_the_handle() {
        let w = small_worker();
        let id = w.register(&empty_spec()).unwrap();
        let handle = w.submit(id, one_arg()).unwrap();
        let first = handle.take_output().unwrap();
        assert_eq!(first.args.len(), 1);
        let again = handle.take_output().unwrap();
        assert_eq!(again.report.epoch, first.report.epoch);
        assert!(
            again.args.is_empty(),
            "the arguments were handed over already"
        );
        // The handle outlives the worker: dropping it last is the caller's choice.
        drop(w);
        assert!(handle.poll());
        drop(handle);
    }
}
