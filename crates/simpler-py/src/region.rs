//! `simpler._native.WorkerChipRegion` and `WorkerChipQueue`: the host side of an L3↔L2
//! region ([`WorkerChipRegion`], `docs/comm.md` §7) and message queue
//! ([`WorkerChipQueue`], §8) for Python. It converts arguments only; every
//! check and every wait is the engine's. A wait runs with the interpreter released, in
//! slices of 50 ms between which pending signals run (Ctrl-C ends it).

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use simpler_worker::{Compare, Notify, Opcode, WorkerChipQueue, WorkerChipRegion, WorkerError};

use crate::error::{self, detached};

/// One region (see the module docs).
#[pyclass(module = "simpler._native", name = "WorkerChipRegion", frozen)]
pub struct NativeWorkerChipRegion {
    region: WorkerChipRegion,
}

/// Runs `f` with the interpreter released in slices of at most 50 ms until it answers
/// something other than a timeout or `timeout_s` has passed; pending signals run between
/// slices (Ctrl-C ends the wait).
fn sliced<T: Send>(
    py: Python<'_>,
    timeout_s: f64,
    f: impl Fn(Duration) -> Result<T, WorkerError> + Sync,
) -> PyResult<T> {
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
        match py.detach(|| f(slice)) {
            Err(WorkerError::WaitTimeout(_)) => {
                if Instant::now() >= deadline {
                    return Err(error::worker_error(py, WorkerError::WaitTimeout(timeout)));
                }
                py.check_signals()?;
            }
            other => return other.map_err(|e| error::worker_error(py, e)),
        }
    }
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
        sliced(py, timeout_s, |slice| {
            self.region.wait(offset, value, cmp, slice)
        })
    }

    /// Ends the host's use of the region.
    fn free(&self) {
        self.region.free();
    }
}

/// One message queue (see the module docs).
#[pyclass(module = "simpler._native", name = "WorkerChipQueue", frozen)]
pub struct NativeWorkerChipQueue {
    queue: WorkerChipQueue,
}

impl NativeWorkerChipQueue {
    pub(crate) fn new(queue: WorkerChipQueue) -> NativeWorkerChipQueue {
        NativeWorkerChipQueue { queue }
    }
}

#[pymethods]
impl NativeWorkerChipQueue {
    /// The region it lives on.
    #[getter]
    fn region(&self) -> NativeWorkerChipRegion {
        NativeWorkerChipRegion::new(self.queue.region().clone())
    }

    /// Slots of each ring.
    #[getter]
    fn depth(&self) -> u32 {
        self.queue.depth()
    }

    /// `(input_arena_bytes, output_arena_bytes)`.
    #[getter]
    fn arena_bytes(&self) -> (u64, u64) {
        self.queue.arena_bytes()
    }

    /// Sends `data` with `opcode` (1 DATA, 2 STOP, 3 ERROR), waiting at most `timeout_s`.
    fn send(&self, py: Python<'_>, opcode: u32, data: Vec<u8>, timeout_s: f64) -> PyResult<()> {
        let op = match opcode {
            1 => Opcode::Data,
            2 => Opcode::Stop,
            3 => Opcode::Error,
            _ => {
                return Err(error::argument_type(
                    py,
                    format!("opcode: {opcode} is no input opcode (1 DATA, 2 STOP, 3 ERROR)"),
                ))
            }
        };
        sliced(py, timeout_s, |slice| self.queue.send_op(op, &data, slice))
    }

    /// Takes the next output message: `(opcode, bytes)`.
    fn recv<'py>(&self, py: Python<'py>, timeout_s: f64) -> PyResult<(u32, Bound<'py, PyBytes>)> {
        let m = sliced(py, timeout_s, |slice| self.queue.recv(slice))?;
        Ok((m.opcode as u32, PyBytes::new(py, &m.data)))
    }

    /// Gives the queue up (the chip side sees the host abort).
    fn free(&self) {
        self.queue.free();
    }
}
