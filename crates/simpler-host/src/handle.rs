//! What a caller holds for a submitted run (spec `run-lane.md` §1.5, `RunHandle`): the run's
//! owned arguments ([`OwnedArg`] over any [`HostBuffer`]), and a [`RunHandle`] to poll,
//! wait (bounded or not) and collect the [`RunOutput`].
//!
//! A handle drives the lane itself — there is no background thread: `poll` makes whatever
//! progress needs no blocking (it never blocks, not even behind another thread's wait), and
//! `wait` finalizes runs front-first until its own is terminal. The terminal state is cached
//! in the handle's cell, so re-waiting is free and answers the same error each time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use simpler_abi::DataType;

use crate::exec::{self, RunReport};
use crate::worker::Shared;
use crate::HostError;

/// A host buffer the run owns until it is finalized (Python passes numpy-backed buffers).
pub trait HostBuffer: Send + 'static {
    /// The buffer's bytes: read to stage inputs, written to copy outputs back.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl HostBuffer for Vec<u8> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

/// One argument of a submitted run, owned by the run until it is finalized.
pub enum OwnedArg {
    /// A tensor: C-order bytes of `shape` × `dtype`.
    Tensor {
        /// The bytes.
        buffer: Box<dyn HostBuffer>,
        /// Shape in elements (1..=5 dims).
        shape: Vec<u64>,
        /// Element type.
        dtype: DataType,
    },
    /// A scalar's raw 64 bits.
    Scalar(u64),
    /// A tensor already in device memory (from [`ChipWorker::malloc`](crate::ChipWorker::malloc)),
    /// passed in place: neither staged nor copied back. With a caller stream, the caller
    /// orders its writes before the launch and its reads after Tail.
    Device {
        /// The tensor's first byte.
        ptr: simpler_device::DevicePtr,
        /// Shape in elements (1..=5 dims), C order.
        shape: Vec<u64>,
        /// Element type.
        dtype: DataType,
    },
}

impl std::fmt::Debug for OwnedArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OwnedArg::Tensor { shape, dtype, .. } => f
                .debug_struct("Tensor")
                .field("shape", shape)
                .field("dtype", dtype)
                .finish_non_exhaustive(),
            OwnedArg::Scalar(v) => f.debug_tuple("Scalar").field(v).finish(),
            OwnedArg::Device { ptr, shape, dtype } => f
                .debug_struct("Device")
                .field("ptr", ptr)
                .field("shape", shape)
                .field("dtype", dtype)
                .finish(),
        }
    }
}

/// What a finished run gives back.
#[derive(Debug)]
pub struct RunOutput {
    /// Timings and identity.
    pub report: RunReport,
    /// The arguments, outputs copied back.
    pub args: Vec<OwnedArg>,
}

/// The terminal state of a run, once decided.
pub(crate) struct Terminal {
    pub(crate) result: Result<RunReport, HostError>,
    pub(crate) args: Option<Vec<OwnedArg>>,
}

/// State shared by a run's handle and the lane.
pub(crate) struct RunCell {
    pub(crate) epoch: u64,
    pub(crate) dispatch_id: u64,
    pub(crate) submitted: Instant,
    done: AtomicBool,
    terminal: Mutex<Option<Terminal>>,
}

impl RunCell {
    pub(crate) fn new(epoch: u64, dispatch_id: u64) -> RunCell {
        RunCell {
            epoch,
            dispatch_id,
            submitted: Instant::now(),
            done: AtomicBool::new(false),
            terminal: Mutex::new(None),
        }
    }

    /// Ends the run (once).
    pub(crate) fn finish(&self, result: Result<RunReport, HostError>, args: Vec<OwnedArg>) {
        let mut t = self.terminal.lock();
        debug_assert!(t.is_none(), "a run ends once");
        *t = Some(Terminal {
            result,
            args: Some(args),
        });
        self.done.store(true, Ordering::Release);
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    pub(crate) fn outcome(&self) -> Result<RunReport, HostError> {
        self.terminal
            .lock()
            .as_ref()
            .expect("a done run has a terminal state")
            .result
            .clone()
    }

    fn take_args(&self) -> Vec<OwnedArg> {
        self.terminal
            .lock()
            .as_mut()
            .and_then(|t| t.args.take())
            .unwrap_or_default()
    }
}

/// A submitted run. `Send + Sync`; any thread may poll or wait on it.
pub struct RunHandle {
    pub(crate) shared: Arc<Shared>,
    pub(crate) cell: Arc<RunCell>,
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
        self.shared.identity.check()?;
        if self.cell.is_done() {
            return Ok(true);
        }
        exec::poll_progress(&self.shared);
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
        self.shared.identity.check()?;
        let deadline = timeout.map(|t| Instant::now() + t);
        if !self.cell.is_done() {
            exec::wait_for(&self.shared, &self.cell, deadline, timeout)?;
        }
        self.cell.outcome().map(|_| ())
    }

    /// Waits for the run and returns its report and arguments (outputs copied back on
    /// success).
    ///
    /// # Errors
    /// The run's error; the arguments are dropped then.
    pub fn result(self) -> Result<RunOutput, HostError> {
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
