//! `simpler._native.SimContext`: a caller-owned device context on the sim platform
//! ([`SimContext`], `docs/lane.md` §12) for the Python `simpler.sim.Context` — the context a
//! framework would own on hardware, so a borrowed worker (`Worker.init(
//! borrowed_context_generation=...)`) has something to borrow. Also the thread's current
//! context (`current_context`, `set_current_context`: [`simpler_host::lifecycle`]).
//!
//! # State
//!
//! `context` is `Some` from construction until [`close`](NativeSimContext::close), then
//! `None` for good; the generation stays in the host's table as long as it is `Some`. A
//! borrowed worker already attached keeps the device alive after `close`. Every call takes
//! a clone of the `Arc` under the lock and releases the lock before working.
//!
//! # Host functions
//!
//! `launch_host_fn(stream, fn)` enqueues the Python callable `fn` on the stream: the
//! stream's thread attaches to the interpreter (takes the GIL) and calls it once everything
//! queued before it has finished; the stream's later work waits for it. An exception it
//! raises is kept, tagged with its stream, and raised by the next successful
//! `synchronize(stream)`; when several were kept for the stream, the first is raised and
//! the others go to `sys.unraisablehook`, as do the ones still kept when their stream is
//! destroyed or the context closed. Because a host function needs the interpreter, every
//! call here that may wait for a stream (synchronize, destroy, close, dropping the last
//! reference) detaches first.
//!
//! # Forked children
//!
//! A context inherited by a forked child refuses every call there with
//! `ExecutionContextRefused` (its device threads do not exist in the child), and dropping it
//! there does nothing.
//!
//! This module never drives a worker's lane; it only reaches the device's streams and memory.

use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBool;
use simpler_device::sim::SimOptions;
use simpler_device::{Device, DeviceError, DevicePtr, StreamId, Topology};
use simpler_host::lifecycle;
use simpler_host::sim_context::SimContext;
use simpler_host::{HostError, WorkerConfig};

use crate::array::ArrayMemory;
use crate::config::{executor, memcheck, uint32};
use crate::error::{self, Raise};
use crate::handle::{wait_in_slices, Slice};
use crate::sync::{drop_detached, lock, take_last};

/// Exceptions raised by host functions, with the raw id of the stream each ran on.
type Kept = Arc<Mutex<Vec<(u32, PyErr)>>>;

/// A stream handle from Python: an int (a `simpler.sim.Stream`) in `0..=u32::MAX`, not a
/// bool; anything else is an `InvalidArgumentError` naming `arg`.
pub(crate) fn stream_arg(value: &Bound<'_, PyAny>, arg: &str) -> PyResult<StreamId> {
    let py = value.py();
    let bad = || {
        error::invalid_argument(
            py,
            arg,
            format!(
                "a stream handle is an int in 0..={} (simpler.sim.Stream), got {}",
                u32::MAX,
                value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
            ),
        )
    };
    if value.is_instance_of::<PyBool>() {
        return Err(bad());
    }
    let raw: i128 = value.extract().map_err(|_| bad())?;
    u32::try_from(raw)
        .map(StreamId::from_raw)
        .map_err(|_| bad())
}

/// The exception of a failed device call on stream `arg`: an unknown stream is an
/// `InvalidArgumentError` naming `arg`; anything else a `DeviceError` saying what was done.
fn device_error(py: Python<'_>, e: DeviceError, arg: &str, context: &str) -> PyErr {
    match e {
        DeviceError::UnknownStream(s) => error::invalid_argument(
            py,
            arg,
            format!("stream {} is not a live stream of this context", s.raw()),
        ),
        e => Raise::new("DeviceError", format!("{context}: {e}"))
            .cause(Some(e.to_string()))
            .detail("context", context)
            .into_err(py),
    }
}

/// Hands each exception in `errors` to `sys.unraisablehook`, saying what lost it.
fn report_unraisable(py: Python<'_>, errors: Vec<(u32, PyErr)>, why: &str) {
    for (stream, e) in errors {
        let note = format!("a host function on stream {stream} raised; {why}");
        e.write_unraisable(py, Some(&pyo3::types::PyString::new(py, &note)));
    }
}

/// A caller-owned sim device context (see the module docs).
#[pyclass(module = "simpler._native", name = "SimContext", frozen)]
pub struct NativeSimContext {
    context: Mutex<Option<Arc<SimContext>>>,
    generation: u64,
    /// The process that created the context.
    process: u32,
    kept: Kept,
}

impl NativeSimContext {
    /// The live context, or `ExecutionContextRefused` in a forked child, or
    /// `WorkerStateError` once closed.
    fn live(&self, py: Python<'_>) -> PyResult<Arc<SimContext>> {
        let now = std::process::id();
        if now != self.process {
            return Err(Raise::new(
                "ExecutionContextRefused",
                format!(
                    "sim context generation {} was created by process {} and is used from \
                     process {now} (a forked child); it refuses every operation there",
                    self.generation, self.process
                ),
            )
            .into_err(py));
        }
        lock(&self.context).clone().ok_or_else(|| {
            Raise::new(
                "WorkerStateError",
                format!("sim context generation {} is closed", self.generation),
            )
            .detail("code_name", "CLOSED")
            .into_err(py)
        })
    }

    /// Takes the exceptions kept for `stream`, in the order they were raised.
    fn take_kept(&self, stream: u32) -> Vec<(u32, PyErr)> {
        let mut kept = lock(&self.kept);
        let (mine, others) = kept.drain(..).partition(|(s, _)| *s == stream);
        *kept = others;
        mine
    }
}

#[pymethods]
impl NativeSimContext {
    /// Starts a sim device of `clusters` × `aicpu_threads` (the host's `WorkerConfig`
    /// defaults when left out), built as `sim_memcheck` and `sim_executor` say (as the
    /// `WorkerConfig` options), and registers it under a fresh nonzero generation.
    /// `InvalidConfigError` names a bad option (a topology the sim cannot build included).
    #[new]
    #[pyo3(signature = (*, clusters=None, aicpu_threads=None, sim_memcheck=None, sim_executor=None))]
    fn new(
        py: Python<'_>,
        clusters: Option<Bound<'_, PyAny>>,
        aicpu_threads: Option<Bound<'_, PyAny>>,
        sim_memcheck: Option<Bound<'_, PyAny>>,
        sim_executor: Option<Bound<'_, PyAny>>,
    ) -> PyResult<NativeSimContext> {
        let d = WorkerConfig::default();
        let topology = Topology {
            clusters: match &clusters {
                Some(v) => uint32(py, "clusters", v)?,
                None => d.topology.clusters,
            },
            aicpu_threads: match &aicpu_threads {
                Some(v) => uint32(py, "aicpu_threads", v)?,
                None => d.topology.aicpu_threads,
            },
        };
        let options = SimOptions {
            memcheck: match &sim_memcheck {
                Some(v) => memcheck(py, v)?,
                None => d.sim_memcheck,
            },
            executor: match &sim_executor {
                Some(v) => executor(py, v)?,
                None => d.sim_executor,
            },
            sdma: d.enable_sdma,
        };
        let context = py
            .detach(|| SimContext::create(topology, options))
            .map_err(|e| match e {
                // A topology the sim cannot build is the caller's option, named in the text.
                HostError::Device {
                    source: DeviceError::InvalidLaunch(why),
                    ..
                } => Raise::new("InvalidConfigError", why).into_err(py),
                e => error::host_error(py, e),
            })?;
        Ok(NativeSimContext {
            generation: context.generation().get(),
            context: Mutex::new(Some(Arc::new(context))),
            process: std::process::id(),
            kept: Arc::default(),
        })
    }

    /// The context's generation (nonzero, never reused in this process): what
    /// `borrowed_context_generation` names.
    #[getter]
    fn generation(&self) -> u64 {
        self.generation
    }

    /// True once `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.context).is_none()
    }

    /// Creates a stream on the context's device; returns its raw handle.
    fn create_stream(&self, py: Python<'_>) -> PyResult<u32> {
        let ctx = self.live(py)?;
        py.detach(|| ctx.device().create_stream())
            .map(StreamId::raw)
            .map_err(|e| device_error(py, e, "stream", "creating a stream"))
    }

    /// Destroys `stream` after the work queued on it (its thread finishes it first);
    /// exceptions still kept for it go to `sys.unraisablehook`.
    fn destroy_stream(&self, py: Python<'_>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let ctx = self.live(py)?;
        let id = stream_arg(stream, "stream")?;
        py.detach(|| ctx.device().destroy_stream(id))
            .map_err(|e| device_error(py, e, "stream", "destroying a stream"))?;
        report_unraisable(py, self.take_kept(id.raw()), "its stream was destroyed");
        Ok(())
    }

    /// Enqueues the Python callable `fn` on `stream` (see the module docs): it is called
    /// with no arguments on the stream's thread, holding the GIL, after the work queued on
    /// the stream before it; the stream's later work waits for it.
    #[pyo3(name = "launch_host_fn")]
    fn launch_host_fn(
        &self,
        py: Python<'_>,
        stream: &Bound<'_, PyAny>,
        r#fn: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let ctx = self.live(py)?;
        let id = stream_arg(stream, "stream")?;
        if !r#fn.is_callable() {
            return Err(error::argument_type(
                py,
                format!(
                    "launch_host_fn: fn must be callable, got {}",
                    r#fn.get_type().name()?
                ),
            ));
        }
        let f = r#fn.unbind();
        let kept = self.kept.clone();
        ctx.device()
            .launch_host_fn(id, move || {
                Python::attach(move |py| {
                    if let Err(e) = f.call0(py) {
                        lock(&kept).push((id.raw(), e));
                    }
                    drop(f);
                })
            })
            .map_err(|e| device_error(py, e, "stream", "enqueueing a host function"))
    }

    /// Waits until everything queued on `stream` has finished (`timeout` seconds at most;
    /// `None`: as long as it takes), in slices that check for signals. Then raises the
    /// first exception a host function on the stream raised since the last synchronize,
    /// if any. `WaitTimeoutError` when the time is up (the work goes on), `DeviceError` when
    /// a kernel on the stream faulted, `InvalidArgumentError` naming `stream` for an
    /// unknown stream.
    #[pyo3(signature = (stream, timeout=None))]
    fn synchronize(
        &self,
        py: Python<'_>,
        stream: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        let ctx = self.live(py)?;
        let id = stream_arg(stream, "stream")?;
        let device = ctx.device().clone();
        let slice = |d: Duration| {
            // The device refuses a zero timeout; the deadline is checked between slices.
            match py.detach(|| device.synchronize_stream(id, d.max(Duration::from_millis(1)))) {
                Ok(()) => Slice::Done(Ok(())),
                Err(DeviceError::Timeout(_)) => Slice::Pending,
                Err(e) => Slice::Done(Err(device_error(py, e, "stream", "synchronizing a stream"))),
            }
        };
        wait_in_slices(py, timeout, slice, || {
            Raise::new(
                "WaitTimeoutError",
                format!(
                    "stream {} was not idle within {} s; its work goes on",
                    id.raw(),
                    timeout.unwrap_or_default()
                ),
            )
            .float("timeout_s", timeout.unwrap_or_default())
        })?;
        let mut kept = self.take_kept(id.raw()).into_iter();
        match kept.next() {
            None => Ok(()),
            Some((_, first)) => {
                report_unraisable(
                    py,
                    kept.collect(),
                    "an earlier host function on the same stream raised first",
                );
                Err(first)
            }
        }
    }

    /// Copies the bytes of `src` (a C-contiguous ndarray) to device address `addr` — device
    /// memory of a worker attached to this context (`Worker.malloc`). Needs no current
    /// context, so a host function can write a run's inputs.
    fn copy_to(&self, py: Python<'_>, addr: u64, src: &Bound<'_, PyAny>) -> PyResult<()> {
        let ctx = self.live(py)?;
        let memory = ArrayMemory::borrow(src, "src")?;
        let bytes = memory.bytes();
        py.detach(|| {
            ctx.device()
                .copy_to_device(DevicePtr::from_raw(addr), bytes)
        })
        .map_err(|e| device_error(py, e, "addr", "copying to the device"))
    }

    /// Copies device memory at `addr` into `dst` (a writable, C-contiguous ndarray), as many
    /// bytes as `dst` holds. Needs no current context, so a host function can read a run's
    /// outputs.
    fn copy_from(&self, py: Python<'_>, dst: &Bound<'_, PyAny>, addr: u64) -> PyResult<()> {
        let ctx = self.live(py)?;
        let Some(mut memory) = ArrayMemory::borrow(dst, "dst")?.into_writable() else {
            return Err(error::invalid_argument(
                py,
                "dst",
                "the destination array is read-only",
            ));
        };
        let bytes = memory.bytes_mut();
        py.detach(|| {
            ctx.device()
                .copy_from_device(bytes, DevicePtr::from_raw(addr))
        })
        .map_err(|e| device_error(py, e, "addr", "copying from the device"))
    }

    /// Removes the generation from the host's table (no worker can attach to it any more)
    /// and drops this wrapper's reference to the device; a worker already attached keeps the
    /// device alive. Exceptions still kept go to `sys.unraisablehook`. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if std::process::id() != self.process {
            return self.live(py).map(drop);
        }
        let context = lock(&self.context).take();
        py.detach(move || drop(context));
        let kept = std::mem::take(&mut *lock(&self.kept));
        report_unraisable(py, kept, "its context was closed before a synchronize");
        Ok(())
    }
}

impl Drop for NativeSimContext {
    fn drop(&mut self) {
        let Some(context) = take_last(&mut self.context) else {
            return;
        };
        if std::process::id() != self.process {
            // A forked child: the device's threads do not exist here; touch nothing.
            std::mem::forget(context);
            return;
        }
        // Dropping the device joins its stream threads, and a host function on one of them
        // needs the interpreter: drop detached.
        drop_detached(Some(context));
    }
}

/// The calling thread's current context generation, or `None`.
#[pyfunction]
pub fn current_context() -> Option<u64> {
    lifecycle::current_context().map(NonZeroU64::get)
}

/// Makes `generation` (a nonzero int, or `None`: no context) the calling thread's current
/// context and returns the previous one. `InvalidArgumentError` naming `generation` for 0.
#[pyfunction]
pub fn set_current_context(py: Python<'_>, generation: Option<u64>) -> PyResult<Option<u64>> {
    let generation = match generation {
        None => None,
        Some(g) => Some(NonZeroU64::new(g).ok_or_else(|| {
            error::invalid_argument(py, "generation", "a context generation is nonzero")
        })?),
    };
    Ok(lifecycle::set_current_context(generation).map(NonZeroU64::get))
}
