//! `simpler._native.RunHandle`: a submitted run, seen from Python; `RunReport`, its report
//! (with a `host_build_graph` run's graph and recording, [`crate::graph`]); and
//! `TraceOwner`, the trace a level-2 or level-3 report carries with the calls that read it
//! (`docs/tracing.md`).
//!
//! # State
//!
//! `handle` holds the host's [`RunHandle`] behind an `Arc`, so a wait runs with no lock held
//! (any thread may poll or wait at the same time). Once the run is terminal, the first
//! thread that finds itself the handle's only holder *collects* it: [`RunHandle::result`]
//! (which consumes the handle) gives the report and releases the run's arguments — the numpy
//! arrays it borrowed — and `outcome` keeps the report or the error; `handle` is `None`
//! from then on. Every later wait answers that same outcome. Lock order: `handle`, then
//! `outcome`; collecting never blocks and never detaches, so no thread holds a lock while
//! it waits for the interpreter.
//!
//! A borrowed worker's handle checks the calling thread's context before anything else,
//! collected or not (`ExecutionContextRefused`; `poll` answers false there), as the host's
//! handle does. A refused wait collects nothing: the run and its arguments stay with the
//! handle, and a wait after the context is restored goes on as if none had been refused.
//!
//! # Waiting
//!
//! A wait detaches from the interpreter and waits in slices of at most [`SLICE`]; between
//! slices it re-attaches and checks for signals, so Ctrl-C raises `KeyboardInterrupt` within
//! a slice while the run goes on, and the handle (and its worker) stay usable. A timeout
//! is the caller's budget over all slices; running out of it raises `WaitTimeoutError`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use simpler_host::lifecycle::{EnvironmentIdentity, Ownership};
use simpler_host::{HostError, RunHandle};

use crate::error::{self, Raise};
use crate::graph::{NativeGraphReport, NativeRecordedRun, RecordingOrigin};
use crate::sync::{drop_detached, lock, take_last};

/// The longest a wait stays detached before checking for signals.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// What one slice of a [`wait_in_slices`] wait found.
pub(crate) enum Slice<T> {
    /// The wait is over: the run's outcome.
    Done(PyResult<T>),
    /// Not yet: check for signals and the deadline, then wait another slice.
    Pending,
}

/// The interruptible wait of the level-2 and level-3 handles (see the module docs): calls
/// `slice(d)` with slices `d` of at most [`SLICE`] until it answers [`Slice::Done`], running
/// the signal handlers between slices (so Ctrl-C raises `KeyboardInterrupt` while the run
/// goes on); `timeout` seconds (`None`: as long as it takes) is the budget over all slices,
/// and running out of it raises `timed_out()` (a `WaitTimeoutError`).
///
/// # Errors
/// `InvalidConfigError` for a `timeout` that is negative, not finite or above 1e9 s; the
/// run's error from `slice`; a signal handler's exception; `timed_out()`.
pub(crate) fn wait_in_slices<T>(
    py: Python<'_>,
    timeout: Option<f64>,
    mut slice: impl FnMut(Duration) -> Slice<T>,
    timed_out: impl FnOnce() -> Raise,
) -> PyResult<T> {
    let deadline = match timeout {
        None => None,
        Some(t) if t.is_finite() && (0.0..1e9).contains(&t) => {
            Some(Instant::now() + Duration::from_secs_f64(t))
        }
        Some(t) => {
            return Err(Raise::new(
                "InvalidConfigError",
                format!("timeout must be a finite number of seconds >= 0, got {t}"),
            )
            .into_err(py))
        }
    };
    loop {
        let d = match deadline {
            Some(d) => SLICE.min(d.saturating_duration_since(Instant::now())),
            None => SLICE,
        };
        if let Slice::Done(outcome) = slice(d) {
            return outcome;
        }
        py.check_signals()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(timed_out().into_err(py));
        }
    }
}

/// A report's trace, when its run was traced: what `has_trace`, `write_trace`,
/// `trace_summary` and `trace_json` of the level-2 and level-3 reports answer (one
/// implementation for both; `docs/tracing.md`). Cloning shares the trace.
#[derive(Clone, Default)]
pub(crate) struct TraceOwner(Option<Arc<simpler_host::CapturedTrace>>);

impl TraceOwner {
    /// Owns a model `trace` (moved, not copied).
    pub(crate) fn new(trace: Option<Box<simpler_trace::Trace>>) -> TraceOwner {
        TraceOwner(trace.map(|t| Arc::new(simpler_host::CapturedTrace::from(*t))))
    }

    /// Shares a level-2 run's trace, whose records are decoded when first used.
    pub(crate) fn captured(trace: Option<Arc<simpler_host::CapturedTrace>>) -> TraceOwner {
        TraceOwner(trace)
    }

    /// Whether the run brought a trace back.
    pub(crate) fn has(&self) -> bool {
        self.0.is_some()
    }

    fn traced(&self) -> PyResult<&simpler_trace::Trace> {
        self.0.as_deref().map(|t| t.model()).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(
                "the run was not traced (its trace level was off)",
            )
        })
    }

    /// Writes the trace to `path` atomically: `format` "perfetto" or "chrome", default from
    /// the extension (`.json` Chrome). `ValueError` for an untraced run or an unknown
    /// format, `TraceWriteError` (an `OSError`) naming `path` when the write fails (nothing
    /// is left).
    pub(crate) fn write(&self, path: &std::path::Path, format: Option<&str>) -> PyResult<()> {
        let trace = self.traced()?;
        let format = match format {
            Some(f) => f.parse().map_err(pyo3::exceptions::PyValueError::new_err)?,
            None => simpler_trace::Format::of_path(path),
        };
        let mut bytes = Vec::new();
        simpler_trace::write(trace, format, &mut bytes)
            .and_then(|_| simpler_host::fsio::write_atomic(path, &bytes))
            .map_err(|e| error::trace_write_error(path, &e))
    }

    /// The timing breakdown as `simpler trace summary` prints it; `ValueError` for an
    /// untraced run.
    pub(crate) fn summary(&self) -> PyResult<String> {
        Ok(simpler_trace::summary::Summary::of(self.traced()?).to_string())
    }

    /// The trace as the model's JSON (`simpler_trace::Trace`); `ValueError` for an untraced
    /// run.
    pub(crate) fn json(&self) -> PyResult<String> {
        serde_json::to_string(self.traced()?)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
    }
}

/// What a successful run reports: the host's [`simpler_host::RunReport`] in seconds, its
/// trace when the run was traced, a `host_build_graph` run's graph, and the recording a
/// recording run made.
#[pyclass(module = "simpler._native", name = "RunReport", frozen)]
#[derive(Clone)]
pub struct NativeRunReport {
    epoch: u64,
    device_time_s: f64,
    total_time_s: f64,
    tasks: Option<u64>,
    trace: TraceOwner,
    graph: Option<NativeGraphReport>,
    recording: Option<NativeRecordedRun>,
}

impl From<simpler_host::RunReport> for NativeRunReport {
    fn from(r: simpler_host::RunReport) -> NativeRunReport {
        NativeRunReport::of(r, None)
    }
}

impl NativeRunReport {
    /// The report of a run whose recording (if it made one) is of `origin`'s callable.
    pub(crate) fn of(
        r: simpler_host::RunReport,
        origin: Option<&RecordingOrigin>,
    ) -> NativeRunReport {
        let recording = match (r.recording, origin) {
            (Some(recording), Some(origin)) => Some(origin.recorded(recording)),
            _ => None,
        };
        NativeRunReport {
            epoch: r.epoch,
            device_time_s: r.device_time.as_secs_f64(),
            total_time_s: r.total_time.as_secs_f64(),
            tasks: Some(r.tasks),
            trace: TraceOwner::captured(r.trace),
            graph: r.graph.map(NativeGraphReport::from),
            recording,
        }
    }
}

impl From<simpler_worker::IsolatedReport> for NativeRunReport {
    /// A run of a chip in a child process: its tasks are the chip run's, as the child
    /// reported them, and its trace the engine's merged one.
    fn from(r: simpler_worker::IsolatedReport) -> NativeRunReport {
        NativeRunReport {
            epoch: r.epoch,
            device_time_s: r.device_time.as_secs_f64(),
            total_time_s: r.total_time.as_secs_f64(),
            tasks: Some(r.chip_tasks),
            trace: TraceOwner::new(r.trace),
            graph: None,
            recording: None,
        }
    }
}

#[pymethods]
impl NativeRunReport {
    /// The run's epoch (process-unique, non-zero).
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Seconds from the launch of the first kernel to the proof of completion.
    #[getter]
    fn device_time_s(&self) -> f64 {
        self.device_time_s
    }

    /// Seconds from the submission to the outcome, including staging and copy-back.
    #[getter]
    fn total_time_s(&self) -> f64 {
        self.total_time_s
    }

    /// Tasks the orchestration submitted (allocation-only and other kernel-less tasks
    /// included), for a chip in a child process as the child reported them.
    #[getter]
    fn tasks(&self) -> Option<u64> {
        self.tasks
    }

    /// Whether the run brought a trace back (it ran at a trace level other than off).
    #[getter]
    fn has_trace(&self) -> bool {
        self.trace.has()
    }

    /// What the host did for a `host_build_graph` run's graph; `None` under
    /// `tensormap_and_ringbuffer` (and for a chip in a child process).
    #[getter]
    fn graph(&self) -> Option<NativeGraphReport> {
        self.graph
    }

    /// The recording a `ChipWorker.submit_record` run made; `None` for other runs.
    #[getter]
    fn recording(&self) -> Option<NativeRecordedRun> {
        self.recording.clone()
    }

    /// Writes the run's trace to `path` atomically (see [`TraceOwner::write`]).
    #[pyo3(signature = (path, format=None))]
    fn write_trace(&self, path: std::path::PathBuf, format: Option<&str>) -> PyResult<()> {
        self.trace.write(&path, format)
    }

    /// The run's timing breakdown as `simpler trace summary` prints it; `ValueError` for an
    /// untraced run.
    fn trace_summary(&self) -> PyResult<String> {
        self.trace.summary()
    }

    /// The run's trace as the model's JSON (`simpler_trace::Trace`); `ValueError` for an
    /// untraced run.
    fn trace_json(&self) -> PyResult<String> {
        self.trace.json()
    }

    fn __repr__(&self) -> String {
        format!(
            "RunReport(epoch={}, device_time_s={:?}, total_time_s={:?}, tasks={:?})",
            self.epoch, self.device_time_s, self.total_time_s, self.tasks
        )
    }
}

/// A submitted run.
#[pyclass(module = "simpler._native", name = "RunHandle", frozen)]
pub struct NativeRunHandle {
    /// The host's handle until its output is collected.
    handle: Mutex<Option<Arc<RunHandle>>>,
    /// The collected outcome.
    outcome: Mutex<Option<Result<NativeRunReport, HostError>>>,
    epoch: u64,
    /// The identity of a borrowed worker's run: checked before a wait answers, so a
    /// collected outcome is refused from the wrong context too, as the host's handle is.
    borrowed: Option<EnvironmentIdentity>,
    /// A recording run's callable, which its report's recording is of.
    origin: Option<RecordingOrigin>,
}

impl NativeRunHandle {
    /// The handle of a run of the worker `identity` names.
    pub(crate) fn new(handle: RunHandle, identity: &EnvironmentIdentity) -> NativeRunHandle {
        NativeRunHandle::of(handle, identity, None)
    }

    /// The handle of a recording run of `origin`'s callable: its report carries the
    /// recording.
    pub(crate) fn recording(
        handle: RunHandle,
        identity: &EnvironmentIdentity,
        origin: RecordingOrigin,
    ) -> NativeRunHandle {
        NativeRunHandle::of(handle, identity, Some(origin))
    }

    fn of(
        handle: RunHandle,
        identity: &EnvironmentIdentity,
        origin: Option<RecordingOrigin>,
    ) -> NativeRunHandle {
        NativeRunHandle {
            epoch: handle.epoch(),
            handle: Mutex::new(Some(Arc::new(handle))),
            outcome: Mutex::new(None),
            borrowed: (identity.ownership == Ownership::Borrowed).then_some(*identity),
            origin,
        }
    }

    /// A borrowed worker's context check (`ExecutionContextRefused`); nothing for others.
    fn check_context(&self, py: Python<'_>) -> PyResult<()> {
        match &self.borrowed {
            Some(identity) => identity.check().map_err(|e| error::host_error(py, e)),
            None => Ok(()),
        }
    }

    /// The collected outcome, once there is one.
    fn collected(&self) -> Option<Result<NativeRunReport, HostError>> {
        lock(&self.outcome).clone()
    }

    /// Collects the outcome of a terminal run: takes its report and drops its arguments (the
    /// numpy arrays it borrowed) while attached. Returns false while another thread still
    /// holds the handle (it is inside a wait that is about to return). Under the locks it
    /// never blocks, so it runs attached there: no thread can wait for the interpreter while
    /// holding them. The host's handle is dropped after, detached: the last handle of a
    /// closed worker frees its device, which joins the device's threads.
    fn collect(&self, py: Python<'_>) -> bool {
        let handle = {
            let mut slot = lock(&self.handle);
            let Some(shared) = slot.take() else {
                return true;
            };
            let handle = match Arc::try_unwrap(shared) {
                Ok(handle) => handle,
                Err(shared) => {
                    *slot = Some(shared);
                    return false;
                }
            };
            // The run is terminal: this only takes the cached outcome and the arguments.
            let outcome = handle
                .take_output()
                .map(|output| NativeRunReport::of(output.report, self.origin.as_ref()));
            *lock(&self.outcome) = Some(outcome);
            handle
        };
        py.detach(move || drop(handle));
        true
    }
}

#[pymethods]
impl NativeRunHandle {
    /// The run's epoch.
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// True once the run is terminal; never blocks.
    fn poll(&self, py: Python<'_>) -> bool {
        if self.check_context(py).is_err() {
            return false;
        }
        match lock(&self.handle).clone() {
            Some(handle) => py.detach(|| handle.poll()),
            None => true,
        }
    }

    /// Waits for the run (`timeout` seconds at most; `None`: as long as it takes). Raises
    /// `WaitTimeoutError` when the time is up, the run's error when it failed, and
    /// `KeyboardInterrupt` (or any signal handler's exception) between slices.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        self.check_context(py)?;
        let slice = |d: Duration| {
            if let Some(outcome) = self.collected() {
                return Slice::Done(outcome.map(|_| ()).map_err(|e| error::host_error(py, e)));
            }
            let Some(handle) = lock(&self.handle).clone() else {
                // Collected in between: the outcome is there now.
                return match self.collected() {
                    Some(outcome) => {
                        Slice::Done(outcome.map(|_| ()).map_err(|e| error::host_error(py, e)))
                    }
                    None => Slice::Pending,
                };
            };
            let waited = py.detach(|| handle.wait(Some(d)));
            drop(handle);
            match waited {
                Ok(()) => {
                    self.collect(py);
                    Slice::Done(Ok(()))
                }
                Err(HostError::WaitTimeout(_)) => Slice::Pending,
                // The wrong context refused the wait, not the run: nothing is collected, so
                // the same handle can be waited again once the context is current.
                Err(e @ HostError::ExecutionContextRefused(_)) => {
                    Slice::Done(Err(error::host_error(py, e)))
                }
                Err(e) => {
                    self.collect(py);
                    Slice::Done(Err(error::host_error(py, e)))
                }
            }
        };
        wait_in_slices(py, timeout, slice, || {
            Raise::new(
                "WaitTimeoutError",
                format!(
                    "the run (epoch {}) was not finished within {} s; it is still in flight",
                    self.epoch,
                    timeout.unwrap_or_default()
                ),
            )
        })
    }

    /// The report of the finished run (waiting as long as it takes); the run's error if it
    /// failed.
    fn result(&self, py: Python<'_>) -> PyResult<NativeRunReport> {
        self.wait(py, None)?;
        loop {
            if let Some(outcome) = self.collected() {
                return outcome.map_err(|e| error::host_error(py, e));
            }
            if !self.collect(py) {
                // Another thread's wait still holds the handle; it lets go at once.
                py.detach(|| std::thread::sleep(Duration::from_millis(1)));
            }
        }
    }
}

impl Drop for NativeRunHandle {
    /// A handle Python drops uncollected may be the last of a closed worker's: dropping it
    /// frees the device, which joins its threads. So it goes detached.
    fn drop(&mut self) {
        drop_detached(take_last(&mut self.handle));
    }
}
