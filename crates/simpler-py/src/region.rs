//! `simpler._native.WorkerChipRegion`: the host side of an L3↔L2 region
//! ([`WorkerChipRegion`], `docs/comm.md` §7) for Python. It converts arguments only; every
//! check and every wait is the engine's. A wait runs with the interpreter released, in
//! slices of 50 ms between which pending signals run (Ctrl-C ends it).

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use simpler_worker::{Compare, Notify, WorkerChipRegion, WorkerError};

use crate::error::{self, detached};

/// One region (see the module docs).
#[pyclass(module = "simpler._native", name = "WorkerChipRegion", frozen)]
pub struct NativeWorkerChipRegion {
    region: WorkerChipRegion,
}

impl NativeWorkerChipRegion {
    pub(crate) fn new(region: WorkerChipRegion) -> NativeWorkerChipRegion {
        NativeWorkerChipRegion { region }
    }
}

fn compare(py: Python<'_>, cmp: u32) -> PyResult<Compare> {
    Ok(match cmp {
        0 => Compare::Eq,
        1 => Compare::Ne,
        2 => Compare::Gt,
        3 => Compare::Ge,
        4 => Compare::Lt,
        5 => Compare::Le,
        _ => {
            return Err(error::argument_type(
                py,
                format!("cmp: {cmp} is no comparison (0 EQ .. 5 LE)"),
            ))
        }
    })
}

#[pymethods]
impl NativeWorkerChipRegion {
    /// The chip's worker id.
    #[getter]
    fn worker(&self) -> usize {
        self.region.worker()
    }

    /// The six descriptor words, in order.
    #[getter]
    fn descriptor(&self) -> Vec<u64> {
        self.region.descriptor().words().to_vec()
    }

    /// True until freed or the end of its orchestration.
    #[getter]
    fn is_open(&self) -> bool {
        self.region.is_open()
    }

    /// Writes `data` (bytes-like) at payload byte `offset`.
    fn payload_write(&self, py: Python<'_>, offset: u64, data: Vec<u8>) -> PyResult<()> {
        detached(py, || self.region.payload_write(offset, &data))
    }

    /// Reads `nbytes` payload bytes at `offset`.
    fn payload_read<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        nbytes: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = vec![0u8; nbytes];
        detached(py, || self.region.payload_read(offset, &mut out))?;
        Ok(PyBytes::new(py, &out))
    }

    /// Counter at byte `offset`: set (`op` 0) or add (`op` 1) `value`.
    fn notify(&self, py: Python<'_>, offset: u64, value: u32, op: u32) -> PyResult<()> {
        let op = match op {
            0 => Notify::Set,
            1 => Notify::Add,
            _ => {
                return Err(error::argument_type(
                    py,
                    format!("op: {op} is no notify op (0 SET, 1 ADD)"),
                ))
            }
        };
        detached(py, || self.region.notify(offset, value, op))
    }

    /// The counter at byte `offset` now.
    fn test(&self, py: Python<'_>, offset: u64) -> PyResult<u32> {
        detached(py, || self.region.test(offset))
    }

    /// Waits until counter `offset` CMP `value`, at most `timeout_s` seconds.
    fn wait(
        &self,
        py: Python<'_>,
        offset: u64,
        value: u32,
        cmp: u32,
        timeout_s: f64,
    ) -> PyResult<u32> {
        let cmp = compare(py, cmp)?;
        let timeout = Duration::try_from_secs_f64(timeout_s)
            .ok()
            .filter(|t| !t.is_zero());
        let Some(timeout) = timeout else {
            return Err(error::worker_error(
                py,
                WorkerError::InvalidArgument {
                    arg: "timeout".into(),
                    reason: format!(
                        "{timeout_s} s: a wait needs a finite, positive timeout (use test() to \
                         look once)"
                    ),
                },
            ));
        };
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let slice = left
                .min(Duration::from_millis(50))
                .max(Duration::from_micros(1));
            match detached(py, || self.region.wait(offset, value, cmp, slice)) {
                Err(e) if e.is_instance_of::<pyo3::exceptions::PyTimeoutError>(py) => {
                    if Instant::now() >= deadline {
                        return Err(error::worker_error(py, WorkerError::WaitTimeout(timeout)));
                    }
                    py.check_signals()?;
                }
                other => return other,
            }
        }
    }

    /// Ends the host's use of the region.
    fn free(&self) {
        self.region.free();
    }
}
