//! `simpler._native.ChipWorker`: a thin wrapper of [`ChipWorker`] for the Python `Worker`.
//!
//! # State
//!
//! `worker` is `Some` from construction until [`close`](NativeWorker::close), then `None`
//! for good; every method takes a clone of the `Arc` under the lock and releases the lock
//! before doing any work, so a long run never blocks `close` or another thread's call.
//! Closing drops this wrapper's reference; the chip shuts down once the last in-flight
//! call holding a clone returns. `signatures` mirrors the worker's registry (id →
//! signature): argument conversion needs each argument's direction to decide what may be
//! borrowed, copied or written, and takes it from here, not from the caller.
//!
//! # Arguments of a run
//!
//! Python passes one tuple per signature entry, in signature order:
//! `("host", ndarray)`, `("device", address, nbytes, shape)` or `("scalar", bits)`.
//! Host arrays are borrowed without copying ([`ArrayMemory`]), except a read-only or
//! aliased array the run only reads, which is copied; an array the run writes must be
//! writable and must not share memory with any other argument. Device tensors (memory from
//! `malloc`) are passed to the run in place. Every check happens before the device is
//! touched.
//!
//! `run` and `submit` take the same tuples: the run owns its arguments until it is collected
//! ([`NativeRunHandle`]), so writable arrays are lent to it in place ([`ArrayBuffer`],
//! keeping each array alive) and the others copied; `run` waits for it.
//!
//! Every call that may block — starting the chip, loading code, copies, runs — detaches
//! from the interpreter ([`Python::detach`]), so other Python threads run meanwhile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use simpler_device::{DevicePtr, Topology};
use simpler_host::{
    ArgDirection, CallConfig, CallableId, ChipWorker, HostError, OwnedArg, RingValue, RunReport,
    RuntimeEnv, Signature, WorkerConfig,
};

use crate::array::ArrayMemory;
use crate::callable::NativeCallable;
use crate::error::{self, Raise};
use crate::handle::{ArrayBuffer, NativeRunHandle};

/// One chip driven from Python.
#[pyclass(module = "simpler._native", name = "ChipWorker", frozen)]
pub struct NativeWorker {
    worker: Mutex<Option<Arc<ChipWorker>>>,
    signatures: Mutex<HashMap<u32, Registered>>,
    config: WorkerConfig,
}

/// What the wrapper remembers of a registered callable.
#[derive(Clone)]
struct Registered {
    name: String,
    signature: Signature,
}

/// Locks `m`, ignoring poisoning: every critical section here only swaps or clones values.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One argument after conversion, before the run.
enum Staged {
    /// A host array used in place.
    Borrowed(ArrayMemory),
    /// A host array's bytes, copied (read-only or aliased, and only read by the run).
    Copied(Vec<u8>, Vec<u64>),
    /// A device tensor (memory from `malloc`), passed to the run in place.
    Device { ptr: DevicePtr, shape: Vec<u64> },
    /// A scalar's raw bits.
    Scalar(u64),
}

impl NativeWorker {
    /// The live worker, or `WorkerStateError` once closed.
    fn live(&self, py: Python<'_>) -> PyResult<Arc<ChipWorker>> {
        lock(&self.worker).clone().ok_or_else(|| error::closed(py))
    }

    fn registered(&self, py: Python<'_>, id: u32) -> PyResult<Registered> {
        lock(&self.signatures)
            .get(&id)
            .cloned()
            .ok_or_else(|| error::host_error(py, HostError::UnknownCallable(id)))
    }
}

/// Converts Python's argument tuples for a callable with `sig` (see the module docs).
fn stage(py: Python<'_>, callable: &Registered, args: &Bound<'_, PyAny>) -> PyResult<Vec<Staged>> {
    let sig = &callable.signature;
    let items: Vec<Bound<'_, PyTuple>> = args.extract()?;
    if items.len() != sig.args.len() {
        return Err(error::host_error(
            py,
            HostError::ArgumentCount {
                callable: callable.name.clone(),
                expected: sig.args.len(),
                got: items.len(),
            },
        ));
    }
    let mut staged = Vec::with_capacity(items.len());
    for (spec, item) in sig.args.iter().zip(&items) {
        let kind: String = item.get_item(0)?.extract()?;
        let what = format!("argument `{}`", spec.name);
        let s = match (kind.as_str(), spec.direction) {
            ("scalar", ArgDirection::Scalar) => Staged::Scalar(item.get_item(1)?.extract()?),
            ("host", d) if d.is_tensor() => {
                let memory = ArrayMemory::borrow_typed(&item.get_item(1)?, spec.dtype, &what)?;
                if memory.readonly {
                    if d.copies_back() {
                        return Err(error::invalid_argument(
                            py,
                            &spec.name,
                            format!(
                                "the array is read-only but the run writes it ({})",
                                d.name()
                            ),
                        ));
                    }
                    Staged::Copied(memory.bytes().to_vec(), memory.shape.clone())
                } else {
                    Staged::Borrowed(memory)
                }
            }
            ("device", d) if d.is_tensor() => {
                let (_, addr, nbytes, shape): (String, u64, u64, Vec<u64>) = item.extract()?;
                let numel = shape.iter().try_fold(1u64, |a, &s| a.checked_mul(s));
                let want = numel.and_then(|n| n.checked_mul(spec.dtype.size_bytes() as u64));
                if want != Some(nbytes) || nbytes == 0 {
                    return Err(error::invalid_argument(
                        py,
                        &spec.name,
                        format!(
                            "a device tensor of shape {shape:?} and dtype {} needs {} bytes, got {nbytes}",
                            spec.dtype,
                            want.map_or("more than 2^64".to_string(), |b| b.to_string())
                        ),
                    ));
                }
                Staged::Device {
                    ptr: DevicePtr::from_raw(addr),
                    shape,
                }
            }
            (_, d) => {
                let declared = if d.is_tensor() {
                    format!("an {} tensor", d.name())
                } else {
                    "a scalar".to_string()
                };
                return Err(error::host_error(
                    py,
                    HostError::InvalidArgument {
                        arg: spec.name.clone(),
                        reason: format!("the signature declares {declared}, got a {kind} argument"),
                    },
                ));
            }
        };
        staged.push(s);
    }
    unalias(py, sig, &mut staged)?;
    Ok(staged)
}

/// Rejects written arrays that share memory with another argument, and copies read-only
/// aliases, so that no two mutable views of one byte exist during the run.
fn unalias(py: Python<'_>, sig: &Signature, staged: &mut [Staged]) -> PyResult<()> {
    for j in 0..staged.len() {
        for i in 0..j {
            let (Staged::Borrowed(a), Staged::Borrowed(b)) = (&staged[i], &staged[j]) else {
                continue;
            };
            let (ra, rb) = (a.range(), b.range());
            if ra.start >= rb.end || rb.start >= ra.end {
                continue;
            }
            let (si, sj) = (&sig.args[i], &sig.args[j]);
            if si.direction.copies_back() || sj.direction.copies_back() {
                let written = if sj.direction.copies_back() { sj } else { si };
                let other = if written.name == sj.name { si } else { sj };
                return Err(error::invalid_argument(
                    py,
                    &written.name,
                    format!(
                        "the run writes it ({}) and it shares memory with argument `{}`; pass \
                         separate arrays",
                        written.direction.name(),
                        other.name
                    ),
                ));
            }
            let copy = Staged::Copied(b.bytes().to_vec(), b.shape.clone());
            staged[j] = copy;
        }
    }
    Ok(())
}

/// Runs `id` on `staged` with the interpreter detached: device tensors are copied out, the
/// run executes, and written device tensors are copied back.
/// A run's options as Python passes them: `(aicpu_thread_num, ring_task_window, ring_heap,
/// ring_dep_pool)`, each ring value `None`, one number or four.
type NativeConfig = (u32, Option<Vec<u64>>, Option<Vec<u64>>, Option<Vec<u64>>);

/// Builds the host's [`CallConfig`]; the host validates the values.
fn call_config(config: Option<NativeConfig>) -> Result<CallConfig, HostError> {
    let Some((threads, window, heap, pool)) = config else {
        return Ok(CallConfig::default());
    };
    let ring = |name: &str, v: Option<Vec<u64>>| -> Result<Option<RingValue>, HostError> {
        match v.as_deref() {
            None => Ok(None),
            Some([one]) => Ok(Some(RingValue::All(*one))),
            Some([a, b, c, d]) => Ok(Some(RingValue::PerRing([*a, *b, *c, *d]))),
            Some(other) => Err(HostError::InvalidConfig(format!(
                "runtime_env.{name} takes 1 or 4 values, got {}",
                other.len()
            ))),
        }
    };
    Ok(CallConfig {
        aicpu_thread_num: threads,
        runtime_env: RuntimeEnv {
            ring_task_window: ring("ring_task_window", window)?,
            ring_heap: ring("ring_heap", heap)?,
            ring_dep_pool: ring("ring_dep_pool", pool)?,
        },
    })
}

/// The run's owned arguments: writable host arrays lent in place (kept alive by the run),
/// read-only or aliased ones copied, device tensors passed in place, scalars as bits.
fn owned_args(staged: Vec<Staged>, sig: &Signature) -> Vec<OwnedArg> {
    staged
        .into_iter()
        .zip(&sig.args)
        .map(|(s, spec)| match s {
            Staged::Borrowed(memory) => OwnedArg::Tensor {
                shape: memory.shape.clone(),
                buffer: Box::new(ArrayBuffer(memory)),
                dtype: spec.dtype,
            },
            Staged::Copied(bytes, shape) => OwnedArg::Tensor {
                buffer: Box::new(bytes),
                shape,
                dtype: spec.dtype,
            },
            Staged::Device { ptr, shape } => OwnedArg::Device {
                ptr,
                shape,
                dtype: spec.dtype,
            },
            Staged::Scalar(bits) => OwnedArg::Scalar(bits),
        })
        .collect()
}

/// `(epoch, device_time_s, total_time_s)` of a run.
fn report_tuple(r: &RunReport) -> (u64, f64, f64) {
    (
        r.epoch,
        r.device_time.as_secs_f64(),
        r.total_time.as_secs_f64(),
    )
}

#[pymethods]
impl NativeWorker {
    /// Starts a sim chip. `run_timeout_s` bounds each run's completion (default 50 s).
    #[new]
    #[pyo3(signature = (*, clusters=8, aicpu_threads=4, aicpu_thread_num=0, heap_size=256 << 20,
                        task_window=None, run_timeout_s=50.0, launch_depth=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        clusters: u32,
        aicpu_threads: u32,
        aicpu_thread_num: u32,
        heap_size: u64,
        task_window: Option<u32>,
        run_timeout_s: f64,
        launch_depth: Option<u32>,
    ) -> PyResult<NativeWorker> {
        if !(run_timeout_s.is_finite() && run_timeout_s > 0.0 && run_timeout_s < 1e9) {
            return Err(Raise::new(
                "InvalidConfigError",
                format!("run_timeout_s must be a positive, finite number of seconds, got {run_timeout_s}"),
            )
            .into_err(py));
        }
        let defaults = WorkerConfig::default();
        let config = WorkerConfig {
            topology: Topology {
                clusters,
                aicpu_threads,
            },
            aicpu_thread_num,
            heap_size,
            task_window: task_window.unwrap_or(defaults.task_window),
            run_timeout: Duration::from_secs_f64(run_timeout_s),
            launch_depth: launch_depth.unwrap_or(defaults.launch_depth),
            ..defaults
        };
        let worker = py
            .detach(|| ChipWorker::new(config.clone()))
            .map_err(|e| error::host_error(py, e))?;
        Ok(NativeWorker {
            worker: Mutex::new(Some(Arc::new(worker))),
            signatures: Mutex::new(HashMap::new()),
            config,
        })
    }

    /// Registers `callable` and returns its id.
    fn register(&self, py: Python<'_>, callable: &NativeCallable) -> PyResult<u32> {
        let worker = self.live(py)?;
        let spec = callable.bundle.clone().into_spec();
        let id = py
            .detach(|| worker.register(&spec))
            .map_err(|e| error::host_error(py, e))?;
        let registered = Registered {
            name: spec.name,
            signature: spec.signature,
        };
        lock(&self.signatures).insert(id.0, registered);
        Ok(id.0)
    }

    /// Unregisters the callable `id`.
    fn unregister(&self, py: Python<'_>, id: u32) -> PyResult<()> {
        let worker = self.live(py)?;
        worker
            .unregister(CallableId(id))
            .map_err(|e| error::host_error(py, e))?;
        lock(&self.signatures).remove(&id);
        Ok(())
    }

    /// Runs callable `id` on `args` (see the module docs) and waits for it; returns
    /// `(epoch, device_time_s, total_time_s)`.
    #[pyo3(signature = (id, args, config=None))]
    fn run(
        &self,
        py: Python<'_>,
        id: u32,
        args: &Bound<'_, PyAny>,
        config: Option<NativeConfig>,
    ) -> PyResult<(u64, f64, f64)> {
        let config = call_config(config).map_err(|e| error::host_error(py, e))?;
        let worker = self.live(py)?;
        let callable = self.registered(py, id)?;
        let owned = owned_args(stage(py, &callable, args)?, &callable.signature);
        let report = py
            .detach(|| {
                worker
                    .submit_with(CallableId(id), owned, &config)?
                    .result()
                    .map(|out| out.report)
            })
            .map_err(|e| error::host_error(py, e))?;
        Ok(report_tuple(&report))
    }

    /// Submits a run of callable `id` on `args` and returns its handle at once. The run
    /// borrows the writable arrays (kept alive by the handle), copies read-only or aliased
    /// inputs and passes device tensors in place.
    #[pyo3(signature = (id, args, config=None))]
    fn submit(
        &self,
        py: Python<'_>,
        id: u32,
        args: &Bound<'_, PyAny>,
        config: Option<NativeConfig>,
    ) -> PyResult<NativeRunHandle> {
        let config = call_config(config).map_err(|e| error::host_error(py, e))?;
        let worker = self.live(py)?;
        let callable = self.registered(py, id)?;
        let owned = owned_args(stage(py, &callable, args)?, &callable.signature);
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
        let memory = ArrayMemory::borrow(src, "the source")?;
        let bytes = memory.bytes();
        py.detach(|| worker.copy_to(DevicePtr::from_raw(addr), bytes))
            .map_err(|e| error::host_error(py, e))
    }

    /// Copies device memory at `addr` into `dst` (a writable, C-contiguous ndarray), as many
    /// bytes as `dst` holds.
    fn copy_from(&self, py: Python<'_>, dst: &Bound<'_, PyAny>, addr: u64) -> PyResult<()> {
        let worker = self.live(py)?;
        let mut memory = ArrayMemory::borrow(dst, "the destination")?;
        let Some(bytes) = memory.bytes_mut() else {
            return Err(error::invalid_argument(
                py,
                "dst",
                "the destination array is read-only",
            ));
        };
        py.detach(|| worker.copy_from(bytes, DevicePtr::from_raw(addr)))
            .map_err(|e| error::host_error(py, e))
    }

    /// Shuts the chip down: closes the native worker (queued runs end, launched runs are
    /// drained, resources freed), then drops this wrapper's reference. Idempotent.
    fn close(&self, py: Python<'_>) {
        let worker = lock(&self.worker).take();
        lock(&self.signatures).clear();
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

    /// `(clusters, aicpu_threads, aicpu_thread_num, heap_size, task_window, run_timeout_s,
    /// launch_depth)`.
    #[getter]
    fn config(&self) -> (u32, u32, u32, u64, u32, f64, u32) {
        let c = &self.config;
        (
            c.topology.clusters,
            c.topology.aicpu_threads,
            c.aicpu_thread_num,
            c.heap_size,
            c.task_window,
            c.run_timeout.as_secs_f64(),
            c.launch_depth,
        )
    }
}
