//! `simpler._native.ChipWorker`: a thin wrapper of [`ChipWorker`] for the Python `Worker`.
//!
//! # State
//!
//! `worker` is `Some` from construction until [`close`](NativeWorker::close), then `None`
//! for good; every method takes a clone of the `Arc` under the lock and releases the lock
//! before doing any work, so a long run never blocks `close` or another thread's call.
//! Closing drops this wrapper's reference; the chip shuts down once the last in-flight
//! call holding a clone returns. The wrapper keeps no copy of the registry: the host owns
//! the callables and their signatures.
//!
//! # Arguments of a run
//!
//! `run` and `submit` take the callable's id and one item per signature entry. The host
//! answers the registered callable's name and [`Signature`](simpler_host::Signature)
//! ([`ChipWorker::registered_callable`]), checks the items against it
//! (`Signature::check_offers`, which decides how each array is lent — see [`crate::args`])
//! and checks the owned arguments again at submission against the occupancy it finds, so an
//! id re-registered in between cannot slip arguments past the host's own signature. The run
//! owns its arguments until it is collected ([`NativeRunHandle`]): every host array is lent
//! in place (kept alive by the run), read-only for an input and writable for an output; the
//! lane orders the run behind any unfinished one that writes the same memory, or reads what
//! it writes. `run` waits for it.
//!
//! Every call that may block — starting the chip, loading code, copies, runs — detaches
//! from the interpreter ([`Python::detach`]), so other Python threads run meanwhile.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use simpler_device::DevicePtr;
use simpler_host::{CallConfig, CallableId, ChipWorker, OwnedArg};

use crate::args;
use crate::array::ArrayMemory;
use crate::callable::NativeCallable;
use crate::config::{NativeCallConfig, NativeWorkerConfig};
use crate::error;
use crate::handle::{NativeRunHandle, NativeRunReport};
use crate::sync::lock;

/// One chip driven from Python.
#[pyclass(module = "simpler._native", name = "ChipWorker", frozen)]
pub struct NativeWorker {
    worker: Mutex<Option<Arc<ChipWorker>>>,
    /// The worker's effective configuration (kept after `close`).
    config: NativeWorkerConfig,
}

impl NativeWorker {
    /// The live worker, or `WorkerStateError` once closed.
    fn live(&self, py: Python<'_>) -> PyResult<Arc<ChipWorker>> {
        lock(&self.worker).clone().ok_or_else(|| error::closed(py))
    }

    /// The live worker, the run's options and its owned arguments for a run of callable
    /// `id` (see the module docs).
    fn prepare(
        &self,
        py: Python<'_>,
        id: CallableId,
        args: &Bound<'_, PyAny>,
        config: Option<&NativeCallConfig>,
    ) -> PyResult<(Arc<ChipWorker>, CallConfig, Vec<OwnedArg>)> {
        let worker = self.live(py)?;
        let callable = worker
            .registered_callable(id)
            .map_err(|e| error::host_error(py, e))?;
        let owned = args::owned_args(py, &callable.name, &callable.signature, args)?;
        Ok((worker, config.map(|c| c.config).unwrap_or_default(), owned))
    }
}

#[pymethods]
impl NativeWorker {
    /// Starts a sim chip with `config`; the host checks every option and raises
    /// `InvalidConfigError` naming the bad one.
    #[new]
    fn new(py: Python<'_>, config: &NativeWorkerConfig) -> PyResult<NativeWorker> {
        let host_config = config.config.clone();
        let worker = py
            .detach(|| ChipWorker::new(host_config))
            .map_err(|e| error::host_error(py, e))?;
        let effective = NativeWorkerConfig::of(worker.config().clone(), config.device_id);
        Ok(NativeWorker {
            worker: Mutex::new(Some(Arc::new(worker))),
            config: effective,
        })
    }

    /// Registers `callable` and returns its id.
    fn register(&self, py: Python<'_>, callable: &NativeCallable) -> PyResult<u32> {
        let worker = self.live(py)?;
        let spec = callable.bundle.clone().into_spec();
        let id = py
            .detach(|| worker.register(&spec))
            .map_err(|e| error::host_error(py, e))?;
        Ok(id.0)
    }

    /// Unregisters the callable `id`.
    fn unregister(&self, py: Python<'_>, id: u32) -> PyResult<()> {
        let worker = self.live(py)?;
        worker
            .unregister(CallableId(id))
            .map_err(|e| error::host_error(py, e))
    }

    /// Runs callable `id` on `args` (see the module docs) with the options `config`
    /// (default: `CallConfig()`), and waits for it.
    #[pyo3(signature = (id, args, config=None))]
    fn run(
        &self,
        py: Python<'_>,
        id: u32,
        args: &Bound<'_, PyAny>,
        config: Option<&NativeCallConfig>,
    ) -> PyResult<NativeRunReport> {
        let (worker, config, owned) = self.prepare(py, CallableId(id), args, config)?;
        let report = py
            .detach(|| {
                worker
                    .submit_with(CallableId(id), owned, &config)?
                    .result()
                    .map(|out| out.report)
            })
            .map_err(|e| error::host_error(py, e))?;
        Ok(NativeRunReport::from(&report))
    }

    /// Submits a run of callable `id` on `args` and returns its handle at once. The run
    /// borrows every host array in place (kept alive by the handle: read-only for inputs,
    /// writable for outputs) and passes device tensors in place; it is staged only after
    /// every unfinished run that writes memory it uses, or uses memory it writes.
    #[pyo3(signature = (id, args, config=None))]
    fn submit(
        &self,
        py: Python<'_>,
        id: u32,
        args: &Bound<'_, PyAny>,
        config: Option<&NativeCallConfig>,
    ) -> PyResult<NativeRunHandle> {
        let (worker, config, owned) = self.prepare(py, CallableId(id), args, config)?;
        let handle = py
            .detach(|| worker.submit_with(CallableId(id), owned, &config))
            .map_err(|e| error::host_error(py, e))?;
        Ok(NativeRunHandle::new(handle))
    }

    /// Allocates `size` bytes of zeroed device memory; returns its address.
    fn malloc(&self, py: Python<'_>, size: u64) -> PyResult<u64> {
        let worker = self.live(py)?;
        py.detach(|| worker.malloc(size))
            .map(|p| p.addr())
            .map_err(|e| error::host_error(py, e))
    }

    /// Frees device memory from `malloc`.
    fn free(&self, py: Python<'_>, addr: u64) -> PyResult<()> {
        let worker = self.live(py)?;
        py.detach(|| worker.free(DevicePtr::from_raw(addr)))
            .map_err(|e| error::host_error(py, e))
    }

    /// Copies the bytes of `src` (a C-contiguous ndarray) to device address `addr`.
    fn copy_to(&self, py: Python<'_>, addr: u64, src: &Bound<'_, PyAny>) -> PyResult<()> {
        let worker = self.live(py)?;
        let memory = ArrayMemory::borrow(src, "src")?;
        if memory.len() == 0 {
            return Err(error::invalid_argument(
                py,
                "src",
                "the array has no elements",
            ));
        }
        let bytes = memory.bytes();
        py.detach(|| worker.copy_to(DevicePtr::from_raw(addr), bytes))
            .map_err(|e| error::host_error(py, e))
    }

    /// Copies device memory at `addr` into `dst` (a writable, C-contiguous ndarray), as many
    /// bytes as `dst` holds.
    fn copy_from(&self, py: Python<'_>, dst: &Bound<'_, PyAny>, addr: u64) -> PyResult<()> {
        let worker = self.live(py)?;
        let memory = ArrayMemory::borrow(dst, "dst")?;
        if memory.len() == 0 {
            return Err(error::invalid_argument(
                py,
                "dst",
                "the array has no elements",
            ));
        }
        let Some(mut memory) = memory.into_writable() else {
            return Err(error::invalid_argument(
                py,
                "dst",
                "the destination array is read-only",
            ));
        };
        let bytes = memory.bytes_mut();
        py.detach(|| worker.copy_from(bytes, DevicePtr::from_raw(addr)))
            .map_err(|e| error::host_error(py, e))
    }

    /// Shuts the chip down: closes the native worker (queued runs end, launched runs are
    /// drained, resources freed), then drops this wrapper's reference. Idempotent.
    fn close(&self, py: Python<'_>) {
        let worker = lock(&self.worker).take();
        // Closing drains runs and dropping the last reference joins the device threads: do
        // both detached. An incomplete cleanup is kept by the native worker (it frees what it
        // can prove free when the last reference goes).
        py.detach(move || {
            if let Some(w) = &worker {
                if let Err(e) = w.close() {
                    eprintln!("simpler: warning: closing the worker: {e}");
                }
            }
            drop(worker)
        });
    }

    /// True once `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.worker).is_none()
    }

    /// The worker's configuration, with the chip's own topology.
    #[getter]
    fn config(&self) -> NativeWorkerConfig {
        self.config.clone()
    }
}
