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
//! # Recordings
//!
//! `submit_record` is a run under `host_build_graph` that keeps its graph: its report
//! carries a [`RecordedRun`](crate::graph::NativeRecordedRun), which remembers the
//! callable's name and signature as registered then. `submit_replay` converts a replay's
//! arguments by that signature and hands them to the host, which refuses a stale recording
//! (`StaleRecordingError`) or arguments that differ from the recorded ones
//! (`ReplayMismatchError`); a recording of another worker is refused here
//! (`InvalidArgumentError` naming `recording`). `docs/chip-runtime.md` §17.
//!
//! # Borrowed workers
//!
//! A worker made with `borrowed_context_generation` runs in a caller's context
//! (`simpler.sim.Context`, [`crate::sim_context`]) and launches on the caller's streams
//! (`submit(..., caller_stream=s)`); the host refuses every call of it from a thread where
//! the context is not current, and this wrapper's `close` refuses then too, keeping the
//! worker, so the call can be retried (`docs/health.md` §7).
//!
//! Every call that may block — starting the chip, loading code, copies, runs — detaches
//! from the interpreter ([`Python::detach`]), so other Python threads run meanwhile.

use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use simpler_device::DevicePtr;
use simpler_host::{CallConfig, CallableId, CallableInfo, ChipWorker, OwnedArg};

use crate::args;
use crate::array::ArrayMemory;
use crate::callable::NativeCallable;
use crate::config::{NativeCallConfig, NativeWorkerConfig};
use crate::error::{self, Raise};
use crate::graph::{NativeRecordedRun, RecordingOrigin};
use crate::handle::{NativeRunHandle, NativeRunReport};
use crate::sim_context::stream_arg;
use crate::sync::{drop_detached, lock, take_last};

/// One chip driven from Python.
#[pyclass(module = "simpler._native", name = "ChipWorker", frozen)]
pub struct NativeWorker {
    worker: Mutex<Option<Arc<ChipWorker>>>,
    /// The worker's effective configuration (kept after `close`).
    config: NativeWorkerConfig,
    /// The caller context a borrowed worker runs in.
    borrowed_context_generation: Option<u64>,
}

impl NativeWorker {
    /// The live worker, or `WorkerStateError` once closed.
    fn live(&self, py: Python<'_>) -> PyResult<Arc<ChipWorker>> {
        lock(&self.worker).clone().ok_or_else(|| error::closed(py))
    }

    /// The live worker, the run's options and its owned arguments for a run of callable
    /// `id` (see the module docs), and the callable as registered.
    fn prepare(
        &self,
        py: Python<'_>,
        id: CallableId,
        args: &Bound<'_, PyAny>,
        config: Option<&NativeCallConfig>,
    ) -> PyResult<(Arc<ChipWorker>, CallConfig, Vec<OwnedArg>, CallableInfo)> {
        let worker = self.live(py)?;
        let callable = worker
            .registered_callable(id)
            .map_err(|e| error::host_error(py, e))?;
        let owned = args::owned_args(py, &callable.name, &callable.signature, args)?;
        let config = config.map(|c| c.config).unwrap_or_default();
        Ok((worker, config, owned, callable))
    }
}

#[pymethods]
impl NativeWorker {
    /// Starts a sim chip with `config`; the host checks every option and raises
    /// `InvalidConfigError` naming the bad one.
    ///
    /// With `borrowed_context_generation` (a nonzero int), attaches instead to the live sim
    /// caller context of that generation ([`ChipWorker::borrowed_sim_context`]), which must
    /// be current on the calling thread: the worker runs on the context's device (its
    /// topology, not `config`'s), claims the KERNEL execution mode, and refuses every call
    /// from a thread where the context is not current (`ExecutionContextRefused`). 0 is an
    /// `InvalidConfigError` naming `borrowed_context_generation`; an unknown or not-current
    /// generation is an `ExecutionContextRefused`.
    #[new]
    #[pyo3(signature = (config, borrowed_context_generation=None))]
    fn new(
        py: Python<'_>,
        config: &NativeWorkerConfig,
        borrowed_context_generation: Option<u64>,
    ) -> PyResult<NativeWorker> {
        let host_config = config.config.clone();
        let borrowed = match borrowed_context_generation {
            None => None,
            Some(g) => Some(NonZeroU64::new(g).ok_or_else(|| {
                Raise::new(
                    "InvalidConfigError",
                    "borrowed_context_generation must be a nonzero context generation, got 0",
                )
                .into_err(py)
            })?),
        };
        // Detaching keeps the thread: its current context is what the host checks.
        let worker = py
            .detach(|| match borrowed {
                None => ChipWorker::new(host_config),
                Some(g) => ChipWorker::borrowed_sim_context(host_config, g),
            })
            .map_err(|e| error::host_error(py, e))?;
        let effective = NativeWorkerConfig::of(worker.config().clone(), config.device_id);
        Ok(NativeWorker {
            worker: Mutex::new(Some(Arc::new(worker))),
            config: effective,
            borrowed_context_generation: borrowed.map(NonZeroU64::get),
        })
    }

    /// Registers `callable` and returns its id. `timeout` (seconds) `None` refuses at once
    /// (`WorkerStateError`) while a run is outstanding; a number waits up to that long for
    /// no run to be outstanding (`ChipWorker::register_timeout`), then raises
    /// `RegistryBusyError` naming how many were.
    #[pyo3(signature = (callable, timeout=None))]
    fn register(
        &self,
        py: Python<'_>,
        callable: &NativeCallable,
        timeout: Option<f64>,
    ) -> PyResult<u32> {
        let timeout = registry_timeout(py, timeout)?;
        let worker = self.live(py)?;
        let spec = callable.bundle.clone().into_spec();
        let id = py
            .detach(|| match timeout {
                None => worker.register(&spec),
                Some(t) => worker.register_timeout(&spec, t),
            })
            .map_err(|e| error::host_error(py, e))?;
        Ok(id.0)
    }

    /// Unregisters the callable `id` (detached: it waits for the worker's context lock,
    /// which a `close` draining runs holds); `timeout` as for `register`.
    #[pyo3(signature = (id, timeout=None))]
    fn unregister(&self, py: Python<'_>, id: u32, timeout: Option<f64>) -> PyResult<()> {
        let timeout = registry_timeout(py, timeout)?;
        let worker = self.live(py)?;
        py.detach(|| match timeout {
            None => worker.unregister(CallableId(id)),
            Some(t) => worker.unregister_timeout(CallableId(id), t),
        })
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
        let (worker, config, owned, _) = self.prepare(py, CallableId(id), args, config)?;
        let report = py
            .detach(|| {
                worker
                    .submit_with(CallableId(id), owned, &config)?
                    .result()
                    .map(|out| out.report)
            })
            .map_err(|e| error::host_error(py, e))?;
        Ok(NativeRunReport::from(report))
    }

    /// Submits a run of callable `id` on `args` and returns its handle at once. The run
    /// borrows every host array in place (kept alive by the handle: read-only for inputs,
    /// writable for outputs) and passes device tensors in place; it is staged only after
    /// every unfinished run that writes memory it uses, or uses memory it writes.
    ///
    /// With `caller_stream` (a stream handle of the worker's device, an int), the run is
    /// launched on the caller's stream ([`ChipWorker::submit_on_stream`], `docs/lane.md`
    /// §12): ordered after the work queued on it before this call and before the work queued
    /// after it returns. A successful return means the run is enqueued; launch errors raise
    /// here. It claims the KERNEL execution mode (a PROGRAM worker refuses it with
    /// `WorkerStateError`); an unknown stream is an `InvalidArgumentError` naming
    /// `caller_stream`.
    #[pyo3(signature = (id, args, config=None, *, caller_stream=None))]
    fn submit(
        &self,
        py: Python<'_>,
        id: u32,
        args: &Bound<'_, PyAny>,
        config: Option<&NativeCallConfig>,
        caller_stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeRunHandle> {
        let caller = caller_stream
            .map(|s| stream_arg(s, "caller_stream"))
            .transpose()?;
        let (worker, config, owned, _) = self.prepare(py, CallableId(id), args, config)?;
        let handle = py
            .detach(|| match caller {
                None => worker.submit_with(CallableId(id), owned, &config),
                Some(s) => worker.submit_on_stream(CallableId(id), owned, &config, s),
            })
            .map_err(|e| error::host_error(py, e))?;
        Ok(NativeRunHandle::new(handle, worker.identity()))
    }

    /// Submits a run of callable `id` on `args` under `host_build_graph` that records its
    /// graph, and returns its handle at once (arguments as [`submit`](Self::submit)). The
    /// run executes as any other and fills its outputs; its report's `recording` is the
    /// [`RecordedRun`](NativeRecordedRun) to replay. An orchestration that calls
    /// `get/set_tensor_data` fails the run with `InvalidArgumentError` (`record`).
    #[pyo3(signature = (id, args, config=None))]
    fn submit_record(
        &self,
        py: Python<'_>,
        id: u32,
        args: &Bound<'_, PyAny>,
        config: Option<&NativeCallConfig>,
    ) -> PyResult<NativeRunHandle> {
        let (worker, config, owned, callable) = self.prepare(py, CallableId(id), args, config)?;
        let origin = RecordingOrigin {
            name: callable.name,
            signature: callable.signature,
        };
        let handle = py
            .detach(|| worker.submit_record(CallableId(id), owned, &config))
            .map_err(|e| error::host_error(py, e))?;
        Ok(NativeRunHandle::recording(
            handle,
            worker.identity(),
            origin,
        ))
    }

    /// Replays `recording` on `args` (signature order, converted by the recorded callable's
    /// signature) and returns the run's handle at once: the recorded graph runs again with
    /// only the arguments' addresses rebound; the orchestration does not run. `config` gives
    /// the run's other options (trace level, threads).
    ///
    /// Raises `StaleRecordingError` when the callable was unregistered or registered again,
    /// `ReplayMismatchError` naming the argument whose count, kind, shape, dtype, scalar or
    /// writability the recording cannot take, whichever check (the recording's or the
    /// signature's) refuses it first (and `StaleRecordingError` for another worker's
    /// recording).
    #[pyo3(signature = (recording, args, config=None))]
    fn submit_replay(
        &self,
        py: Python<'_>,
        recording: &NativeRecordedRun,
        args: &Bound<'_, PyAny>,
        config: Option<&NativeCallConfig>,
    ) -> PyResult<NativeRunHandle> {
        let worker = self.live(py)?;
        let origin = &recording.origin;
        let owned = args::replay_args(py, &origin.name, &origin.signature, args)?;
        let config = config.map(|c| c.config).unwrap_or_default();
        let handle = py
            .detach(|| worker.submit_replay(recording.recording(), owned, &config))
            .map_err(|e| error::host_error(py, e))?;
        Ok(NativeRunHandle::new(handle, worker.identity()))
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
    /// drained, resources freed), then drops this wrapper's reference. Idempotent. A
    /// borrowed worker closed from a thread where its context is not current refuses with
    /// `ExecutionContextRefused` and stays as it was (retry with the context current); its
    /// close never touches the context itself, which stays usable.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut slot = lock(&self.worker);
        if let Some(w) = slot.as_ref() {
            let identity = w.identity();
            // A forked child goes on to drop its reference (no device cleanup there).
            if identity.check_process().is_ok() {
                identity.check().map_err(|e| error::host_error(py, e))?;
            }
        }
        let worker = slot.take();
        drop(slot);
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
        Ok(())
    }

    /// The caller context generation a borrowed worker runs in; `None` for a worker that
    /// owns its chip.
    #[getter]
    fn borrowed_context_generation(&self) -> Option<u64> {
        self.borrowed_context_generation
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

impl Drop for NativeWorker {
    /// A worker Python drops without `close`: its last reference detaches the lane (runs in
    /// flight are finalized first) and frees the device, which joins its threads; a
    /// borrowed worker's lane may wait on the caller's streams, whose host functions need
    /// the interpreter. So the reference goes detached.
    fn drop(&mut self) {
        drop_detached(take_last(&mut self.worker));
    }
}

/// A registry call's `timeout` in seconds as a duration; `InvalidArgumentError` naming
/// `timeout` for a negative, NaN or unrepresentable value.
fn registry_timeout(py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Duration>> {
    timeout
        .map(|t| {
            Duration::try_from_secs_f64(t).map_err(|_| {
                error::invalid_argument(
                    py,
                    "timeout",
                    format!("must be a finite number of seconds >= 0, got {t}"),
                )
            })
        })
        .transpose()
}
