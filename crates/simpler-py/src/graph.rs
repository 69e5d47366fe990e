//! `simpler._native.GraphReport` and `RecordedRun`: what a `host_build_graph` run reports
//! about its graph, and a recorded graph to replay (`docs/chip-runtime.md` §17,
//! `docs/python.md` §13).
//!
//! Both wrap the host's values ([`GraphReport`], [`RecordedRun`]) and decide nothing: the
//! host records, checks a replay's arguments and refuses stale recordings. A recording
//! also keeps what the bindings need to convert a replay's Python arguments — the recorded
//! callable's name and signature, as registered when it was recorded (the host refuses a
//! replay on another worker). This module touches no worker.

use pyo3::prelude::*;
use std::sync::Arc;

use simpler_host::{GraphReport, RecordedRun, Signature};

use crate::sync::drop_detached;

/// What the host did for a `host_build_graph` run's graph: its build and upload, or that
/// it replayed a recording.
#[pyclass(module = "simpler._native", name = "GraphReport", frozen)]
#[derive(Clone, Copy)]
pub struct NativeGraphReport {
    report: GraphReport,
}

impl From<GraphReport> for NativeGraphReport {
    fn from(report: GraphReport) -> NativeGraphReport {
        NativeGraphReport { report }
    }
}

#[pymethods]
impl NativeGraphReport {
    /// Seconds the host spent running the orchestration and writing the image (0 for a
    /// replay).
    #[getter]
    fn build_time_s(&self) -> f64 {
        self.report.build_time.as_secs_f64()
    }

    /// Seconds spent allocating the image on the device and copying it there (0 for a
    /// replay).
    #[getter]
    fn upload_time_s(&self) -> f64 {
        self.report.upload_time.as_secs_f64()
    }

    /// Tasks in the graph.
    #[getter]
    fn tasks(&self) -> u32 {
        self.report.tasks
    }

    /// Bytes of the graph image.
    #[getter]
    fn image_bytes(&self) -> u64 {
        self.report.image_bytes
    }

    /// Whether the run replayed a recording.
    #[getter]
    fn replayed(&self) -> bool {
        self.report.replayed
    }

    fn __repr__(&self) -> String {
        let r = &self.report;
        format!(
            "GraphReport(tasks={}, image_bytes={}, build_time_s={:?}, upload_time_s={:?}, \
             replayed={})",
            r.tasks,
            r.image_bytes,
            r.build_time.as_secs_f64(),
            r.upload_time.as_secs_f64(),
            if r.replayed { "True" } else { "False" }
        )
    }
}

/// Whose recording a recording run makes: the callable's name and signature as registered
/// when the run was submitted (a replay's arguments convert by them).
#[derive(Clone)]
pub(crate) struct RecordingOrigin {
    pub(crate) name: String,
    pub(crate) signature: Arc<Signature>,
}

impl RecordingOrigin {
    /// The Python recording of the host's `recording`, made by a run of this origin.
    pub(crate) fn recorded(&self, recording: RecordedRun) -> NativeRecordedRun {
        NativeRecordedRun {
            recording: Some(recording),
            origin: self.clone(),
        }
    }
}

/// A recorded `host_build_graph` graph ([`RecordedRun`]), replayed with
/// `ChipWorker.submit_replay` on new arguments of the same shapes, dtypes and scalars.
/// Holding it keeps the graph image on the device.
#[pyclass(module = "simpler._native", name = "RecordedRun", frozen)]
#[derive(Clone)]
pub struct NativeRecordedRun {
    /// `Some` until the drop (which takes it out to drop it detached).
    recording: Option<RecordedRun>,
    pub(crate) origin: RecordingOrigin,
}

impl NativeRecordedRun {
    /// The host's recording.
    pub(crate) fn recording(&self) -> &RecordedRun {
        self.recording
            .as_ref()
            .expect("a recording is taken out only by its drop")
    }
}

impl Drop for NativeRecordedRun {
    /// The graph image holds the device: the last holder of a closed worker's device frees
    /// it, which joins the device's threads. So the recording goes detached.
    fn drop(&mut self) {
        drop_detached(self.recording.take());
    }
}

#[pymethods]
impl NativeRecordedRun {
    /// The recorded callable's id on its worker.
    #[getter]
    fn callable_id(&self) -> u32 {
        self.recording().callable().0
    }

    /// The recorded callable's name.
    #[getter]
    fn callable_name(&self) -> &str {
        &self.origin.name
    }

    /// The callable's registration generation it was recorded under (a callable registered
    /// again has another, and the recording is refused as stale).
    #[getter]
    fn generation(&self) -> u64 {
        self.recording().generation()
    }

    /// Tasks in the graph.
    #[getter]
    fn tasks(&self) -> u32 {
        self.recording().tasks()
    }

    /// Bytes of the uploaded graph image.
    #[getter]
    fn image_bytes(&self) -> u64 {
        self.recording().image_bytes()
    }

    /// Seconds the recording run's host build took.
    #[getter]
    fn build_time_s(&self) -> f64 {
        self.recording().build().build_time.as_secs_f64()
    }

    /// Seconds the recording run's upload took.
    #[getter]
    fn upload_time_s(&self) -> f64 {
        self.recording().build().upload_time.as_secs_f64()
    }

    fn __repr__(&self) -> String {
        format!(
            "RecordedRun(callable='{}', generation={}, tasks={}, image_bytes={})",
            self.origin.name,
            self.recording().generation(),
            self.recording().tasks(),
            self.recording().image_bytes()
        )
    }
}
