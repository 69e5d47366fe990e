//! `simpler._native.HostRunHandle`: a submitted level-3 run, seen from Python, and
//! `HostRunReport`, its report (with the run's merged trace: `crate::handle::TraceOwner`).
//!
//! The engine's [`RunHandle`] answers every wait with the same outcome, so this wrapper keeps
//! no state of its own. A wait detaches from the interpreter and waits in slices of at most
//! [`SLICE`](crate::handle::SLICE); between slices it re-attaches and checks for signals, so
//! Ctrl-C raises `KeyboardInterrupt` within a slice while the run goes on — the level-2
//! handle's loop, `crate::handle::wait_in_slices`. A timeout is the caller's budget over all
//! slices; running out of it raises `WaitTimeoutError`.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use simpler_worker::{RunHandle, RunReport, WorkerError};

use crate::error::{self, Raise};
use crate::handle::{wait_in_slices, Slice, TraceOwner};

/// What a successful level-3 run reports, with its merged trace when the run was traced
/// (`docs/tracing.md`, Level 3).
#[pyclass(module = "simpler._native", name = "HostRunReport", frozen)]
#[derive(Clone)]
pub struct NativeHostRunReport {
    run: u64,
    tasks: usize,
    total_time_s: f64,
    trace: TraceOwner,
}

impl From<RunReport> for NativeHostRunReport {
    fn from(r: RunReport) -> NativeHostRunReport {
        NativeHostRunReport {
            run: r.run,
            tasks: r.tasks,
            total_time_s: r.total_time.as_secs_f64(),
            trace: TraceOwner::new(r.trace),
        }
    }
}

#[pymethods]
impl NativeHostRunReport {
    /// The run's id.
    #[getter]
    fn run(&self) -> u64 {
        self.run
    }

    /// Tasks the run executed.
    #[getter]
    fn tasks(&self) -> usize {
        self.tasks
    }

    /// Seconds from the submission to the run's end.
    #[getter]
    fn total_time_s(&self) -> f64 {
        self.total_time_s
    }

    /// Whether the run brought a trace back (it ran at a trace level other than off).
    #[getter]
    fn has_trace(&self) -> bool {
        self.trace.has()
    }

    /// Writes the run's merged trace to `path` atomically: `format` "perfetto" or "chrome",
    /// default from the extension (`.json` Chrome). Raises `ValueError` for an untraced run
    /// or an unknown format, `OSError` naming the path when the write fails.
    #[pyo3(signature = (path, format=None))]
    fn write_trace(&self, path: std::path::PathBuf, format: Option<&str>) -> PyResult<()> {
        self.trace.write(&path, format)
    }

    /// The timing breakdown of each chip run in the trace, as `simpler trace summary` prints
    /// it; `ValueError` for an untraced run.
    fn trace_summary(&self) -> PyResult<String> {
        self.trace.summary()
    }

    /// The run's merged trace as the model's JSON (`simpler_trace::Trace`); `ValueError` for
    /// an untraced run.
    fn trace_json(&self) -> PyResult<String> {
        self.trace.json()
    }

    fn __repr__(&self) -> String {
        format!(
            "HostRunReport(run={}, tasks={}, total_time_s={:?})",
            self.run, self.tasks, self.total_time_s
        )
    }
}

/// A submitted level-3 run.
#[pyclass(module = "simpler._native", name = "HostRunHandle", frozen)]
pub struct NativeHostRunHandle {
    handle: Arc<RunHandle>,
}

impl NativeHostRunHandle {
    pub(crate) fn new(handle: RunHandle) -> NativeHostRunHandle {
        NativeHostRunHandle {
            handle: Arc::new(handle),
        }
    }
}

/// Waits for `handle` (`timeout` seconds at most; `None`: as long as it takes) in slices,
/// checking for signals between them (`crate::handle::wait_in_slices`, see the module docs).
pub(crate) fn wait_sliced(
    py: Python<'_>,
    handle: &RunHandle,
    timeout: Option<f64>,
) -> PyResult<NativeHostRunReport> {
    let slice = |d: Duration| match py.detach(|| handle.wait(Some(d))) {
        Ok(report) => Slice::Done(Ok(NativeHostRunReport::from(report))),
        Err(WorkerError::WaitTimeout(_)) => Slice::Pending,
        Err(e) => Slice::Done(Err(error::worker_error(py, e))),
    };
    wait_in_slices(py, timeout, slice, || {
        Raise::new(
            "WaitTimeoutError",
            format!(
                "run {} was not finished within {} s; it is still in flight",
                handle.id(),
                timeout.unwrap_or_default()
            ),
        )
        .float("timeout_s", timeout.unwrap_or_default())
    })
}

#[pymethods]
impl NativeHostRunHandle {
    /// The run's id.
    #[getter]
    fn run(&self) -> u64 {
        self.handle.id()
    }

    /// True once the run is terminal; never blocks.
    fn poll(&self, py: Python<'_>) -> bool {
        let handle = &self.handle;
        py.detach(|| handle.done())
    }

    /// Waits for the run (`timeout` seconds at most; `None`: as long as it takes) and returns
    /// its report. Raises `WaitTimeoutError` when the time is up, the run's error when it
    /// failed, and `KeyboardInterrupt` (or any signal handler's exception) between slices.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<NativeHostRunReport> {
        wait_sliced(py, &self.handle, timeout)
    }
}
