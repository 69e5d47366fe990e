//! `simpler._native.HostCallable`: the handle of a callable registered on a level-3 worker
//! (a chip callable or a sub callable), as the host worker hands it out and the
//! orchestrator takes it back. It only wraps the engine's handle.

use pyo3::prelude::*;
use simpler_worker::{CallableHandle, EndpointKind};

/// A callable registered on a host worker.
#[pyclass(module = "simpler._native", name = "HostCallable", frozen)]
pub struct NativeHostCallable {
    pub(crate) handle: CallableHandle,
}

#[pymethods]
impl NativeHostCallable {
    /// The callable's name (a chip callable's, a function's qualified name).
    #[getter]
    fn name(&self) -> String {
        self.handle.name().to_string()
    }

    /// `"chip"` (run by chips) or `"sub"` (run by sub workers).
    #[getter]
    fn kind(&self) -> &'static str {
        match self.handle.kind() {
            EndpointKind::Chip => "chip",
            EndpointKind::Sub => "sub",
        }
    }

    fn __repr__(&self) -> String {
        format!("HostCallable({}, {})", self.kind(), self.handle.name())
    }
}
