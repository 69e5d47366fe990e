//! `simpler._native.HostWorker`: the level-3 engine ([`simpler_worker::Worker`]) for the
//! Python `Worker(level=3, ...)`, and `HostCallable`, the handle of a callable registered on
//! it.
//!
//! # State
//!
//! `worker` is `Some` from construction until a successful [`close`](NativeHostWorker::close),
//! then `None` for good; every method takes a clone of the `Arc` and releases the lock before
//! calling the engine, detached from the interpreter, so a long call never blocks another
//! thread's. The engine refuses `close` from inside an orchestration and from a thread other
//! than `init`'s; the wrapper stays open then.
//!
//! # Runs
//!
//! [`submit`](NativeHostWorker::submit) takes the Python orchestration body (a function of
//! one `Orchestrator`) and runs it on the caller's thread inside the engine's orchestration
//! closure: detached for the engine's own waits (another thread's orchestration, two runs in
//! flight), re-attached for the body. Those waits, and a registration waiting behind a busy
//! endpoint, run the signal handlers every 50 ms: Ctrl-C raises `KeyboardInterrupt` and
//! nothing is submitted or registered. An exception raised by the body is kept aside and re-raised as it is once the engine
//! has failed the run (after its dispatched tasks are over), rather than its text. A
//! `trace_level` other than off is the run's [`RunConfig`]: its report carries the merged
//! trace (`crate::host_handle`).
//!
//! # Memory
//!
//! `create_buffer` regions and `orch.alloc` tensors are recorded in the worker's
//! [`KnownMemory`], so numpy views of them passed as task arguments reach child processes as
//! shared memory ([`crate::host_memory`]).

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use simpler_host::trace_model::TraceLevel;
use simpler_worker::{
    Callable, ChildProgram, ChipIsolation, HostMemory, RunConfig, SubWorkers, Worker, WorkerError,
    WorkerOptions,
};

use crate::callable::NativeCallable;
use crate::config::{parse_trace_level, NativeWorkerConfig};
use crate::error::detached;
use crate::error::{self, Raise};
use crate::host_callable::NativeHostCallable;
use crate::host_handle::{wait_sliced, NativeHostRunHandle};
use crate::host_memory::{HostView, KnownMemory, NativeSharedMemory};
use crate::orchestrator::{dtype, NativeOrchestrator};
use crate::sync::{drop_detached, lock, take_last};
use crate::task_args::{worker_id, NativeChildTensor};

/// The level-3 engine driven from Python (see the module docs).
#[pyclass(module = "simpler._native", name = "HostWorker", frozen)]
pub struct NativeHostWorker {
    worker: Mutex<Option<Arc<Worker>>>,
    known: Arc<KnownMemory>,
    level: u32,
    chip_count: usize,
    sub_worker_count: usize,
}

/// An `InvalidConfigError` with `message`.
fn invalid_config(py: Python<'_>, message: String) -> PyErr {
    Raise::new("InvalidConfigError", message).into_err(py)
}

impl NativeHostWorker {
    fn live(&self, py: Python<'_>) -> PyResult<Arc<Worker>> {
        lock(&self.worker).clone().ok_or_else(|| error::closed(py))
    }

    /// Registers a callable a binding serialized (`register_sub`, `register_next`).
    fn register_serialized(
        &self,
        py: Python<'_>,
        callable: Callable,
    ) -> PyResult<NativeHostCallable> {
        let worker = self.live(py)?;
        register(py, &worker, callable)
    }
}

/// A wait check for the engine's interruptible calls: it attaches, runs the signal
/// handlers, and on an exception (Ctrl-C's `KeyboardInterrupt`) keeps it in `raised` and
/// ends the engine's wait.
fn signals_check(raised: &Mutex<Option<PyErr>>) -> impl FnMut() -> Result<(), WorkerError> + '_ {
    move || {
        Python::attach(|py| py.check_signals()).map_err(|e| {
            *lock(raised) = Some(e);
            WorkerError::InvalidState("interrupted by a signal".into())
        })
    }
}

/// Registers `callable` on `worker`, detached; Ctrl-C (any signal handler's exception) ends
/// a registration waiting behind a busy endpoint, and nothing stays registered then.
fn register(py: Python<'_>, worker: &Worker, callable: Callable) -> PyResult<NativeHostCallable> {
    let interrupted: Mutex<Option<PyErr>> = Mutex::new(None);
    let registered =
        py.detach(|| worker.register_interruptible(callable, signals_check(&interrupted)));
    if let Some(e) = lock(&interrupted).take() {
        return Err(e);
    }
    registered
        .map(|handle| NativeHostCallable { handle })
        .map_err(|e| error::worker_error(py, e))
}

#[pymethods]
impl NativeHostWorker {
    /// A level-`level` worker of the chips `chips` (chip `i` is worker id `i`) — or, at
    /// level 4 and above, of the next-level children `next_level` (Python objects of the
    /// protocol `simpler.next_level.NextLevelChild`, `crate::next_level`) — and
    /// `num_sub_workers` sub worker processes. Children (chips with `chip_isolation =
    /// "process"`, sub workers) run `child_program` with `child_args` and `child_env` set in
    /// their environment (the engine passes them the rest in their environment too). The engine checks the configuration now and starts
    /// nothing before `init`.
    #[new]
    #[pyo3(signature = (level, chips, *, chip_isolation="thread", num_sub_workers=0,
                        heap_ring_size=None, startup_timeout_s=None, close_timeout_s=None,
                        child_program=None, child_args=Vec::new(), child_env=Vec::new(),
                        next_level=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        level: u32,
        chips: Vec<PyRef<'_, NativeWorkerConfig>>,
        chip_isolation: &str,
        num_sub_workers: usize,
        heap_ring_size: Option<u64>,
        startup_timeout_s: Option<f64>,
        close_timeout_s: Option<f64>,
        child_program: Option<String>,
        child_args: Vec<String>,
        child_env: Vec<(String, String)>,
        next_level: Vec<Py<PyAny>>,
    ) -> PyResult<NativeHostWorker> {
        let defaults = WorkerOptions::default();
        let chip_isolation = match chip_isolation {
            "thread" => ChipIsolation::Thread,
            "process" => ChipIsolation::Process,
            other => {
                return Err(invalid_config(
                    py,
                    format!("chip_isolation must be \"thread\" or \"process\", got {other:?}"),
                ))
            }
        };
        let program = child_program.map(|program| ChildProgram {
            program: program.into(),
            args: child_args.into_iter().map(OsString::from).collect(),
            env: child_env
                .into_iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect(),
        });
        let sub_workers = match (num_sub_workers, &program) {
            (0, _) => SubWorkers::None,
            (count, Some(program)) => SubWorkers::Processes {
                count,
                program: program.clone(),
            },
            (_, None) => {
                return Err(invalid_config(
                    py,
                    "num_sub_workers: sub worker processes need a child program".into(),
                ))
            }
        };
        let seconds = |name: &str, value: Option<f64>, default: Duration| match value {
            None => Ok(default),
            Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
            Some(s) => Err(invalid_config(
                py,
                format!("{name} must be positive and finite, got {s}"),
            )),
        };
        let startup_timeout = seconds(
            "startup_timeout_s",
            startup_timeout_s,
            defaults.startup_timeout,
        )?;
        let close_timeout = seconds("close_timeout_s", close_timeout_s, defaults.close_timeout)?;
        let next_level = crate::next_level::children(py, next_level)?;
        let chip_count = chips.len() + next_level.len();
        let options = WorkerOptions {
            level,
            chips: chips.iter().map(|c| c.config.clone()).collect(),
            next_level,
            device_ids: chips.iter().map(|c| c.device_id).collect(),
            chip_isolation,
            chip_program: program,
            sub_workers,
            heap_ring_size: heap_ring_size.unwrap_or(defaults.heap_ring_size),
            startup_timeout,
            close_timeout,
            ..defaults
        };
        let worker = Worker::new(options).map_err(|e| error::worker_error(py, e))?;
        Ok(NativeHostWorker {
            worker: Mutex::new(Some(Arc::new(worker))),
            known: Arc::new(KnownMemory::default()),
            level,
            chip_count,
            sub_worker_count: num_sub_workers,
        })
    }

    /// Registers a chip callable (before or after `init`).
    fn register_chip(
        &self,
        py: Python<'_>,
        callable: &NativeCallable,
    ) -> PyResult<NativeHostCallable> {
        let worker = self.live(py)?;
        let spec = Arc::new(callable.bundle.clone().into_spec());
        register(py, &worker, Callable::Chip(spec))
    }

    /// Registers a serialized sub callable: `payload` (cloudpickle bytes, loaded by the sub
    /// worker processes), `name` its qualified name (before or after `init`).
    fn register_sub(
        &self,
        py: Python<'_>,
        name: String,
        payload: Vec<u8>,
    ) -> PyResult<NativeHostCallable> {
        let payload = payload.into();
        self.register_serialized(py, Callable::SubSerialized { name, payload })
    }

    /// Registers a callable for the next-level children of a level-4 worker: `payload` is
    /// what `simpler.next_level.decode_payload` reads on each child, `name` labels it
    /// (before or after `init`).
    fn register_next(
        &self,
        py: Python<'_>,
        name: String,
        payload: Vec<u8>,
    ) -> PyResult<NativeHostCallable> {
        let payload = payload.into();
        self.register_serialized(py, Callable::NextLevel { name, payload })
    }

    /// Removes a registered callable everywhere.
    fn unregister(&self, py: Python<'_>, handle: &NativeHostCallable) -> PyResult<()> {
        let worker = self.live(py)?;
        let h = &handle.handle;
        detached(py, || worker.unregister(h))
    }

    /// Starts the endpoints (chips, child processes), lanes and scheduler, once; rolls back
    /// on failure.
    fn init(&self, py: Python<'_>) -> PyResult<()> {
        let worker = self.live(py)?;
        detached(py, || worker.init())
    }

    /// Runs `body(orchestrator)` as a run's orchestration and returns the run's handle (see
    /// the module docs). `trace_level` (a level name or number; `None`: off) traces the run:
    /// every chip task runs at that level at least, and the report holds the merged trace
    /// (`docs/tracing.md`, Level 3); a bad one is an `InvalidConfigError`.
    #[pyo3(signature = (body, trace_level=None))]
    fn submit(
        &self,
        py: Python<'_>,
        body: Py<PyAny>,
        trace_level: Option<&str>,
    ) -> PyResult<NativeHostRunHandle> {
        let config = RunConfig {
            trace_level: match trace_level {
                Some(t) => parse_trace_level(py, t)?,
                None => TraceLevel::Off,
            },
        };
        let worker = self.live(py)?;
        let known = self.known.clone();
        let raised: Mutex<Option<PyErr>> = Mutex::new(None);
        let keep = |e: PyErr| -> WorkerError {
            let text = Python::attach(|py| {
                let kind = e.get_type(py).name().map(|n| n.to_string());
                let message = e.value(py).str().map(|s| s.to_string());
                format!(
                    "the orchestration function raised {}: {}",
                    kind.as_deref().unwrap_or("an exception"),
                    message.as_deref().unwrap_or("?")
                )
            });
            *lock(&raised) = Some(e);
            WorkerError::Orchestration(text)
        };
        let interrupted: Mutex<Option<PyErr>> = Mutex::new(None);
        let submitted = py.detach(|| {
            let orchestration = |orch: &simpler_worker::Orchestrator| {
                Python::attach(|py| {
                    let native =
                        Py::new(py, NativeOrchestrator::new(orch.clone(), known)).map_err(&keep)?;
                    let outcome = body.call1(py, (native.clone_ref(py),));
                    native.get().invalidate();
                    outcome.map(drop).map_err(&keep)
                })
            };
            worker.submit_interruptible_with(orchestration, signals_check(&interrupted), &config)
        });
        if let Some(e) = lock(&interrupted).take() {
            return Err(e); // nothing was submitted
        }
        let pending = lock(&raised).take();
        match (submitted, pending) {
            (Ok(handle), None) => Ok(NativeHostRunHandle::new(handle)),
            (Ok(handle), Some(e)) => {
                // The run failed with the orchestration; let its dispatched tasks end first.
                let _ = wait_sliced(py, &handle, None);
                Err(e)
            }
            (Err(_), Some(e)) => Err(e),
            (Err(e), None) => Err(error::worker_error(py, e)),
        }
    }

    /// `nbytes` of zero-filled shared memory every child of the worker maps.
    fn create_buffer(&self, py: Python<'_>, nbytes: u64) -> PyResult<NativeSharedMemory> {
        let worker = self.live(py)?;
        let region = detached(py, || worker.create_buffer(nbytes))?;
        let memory: Arc<dyn HostMemory> = region;
        Ok(NativeSharedMemory::new(
            HostView::whole(memory),
            &self.known,
        ))
    }

    /// Persistent device memory on chip `worker`: `shape` × dtype (wire value).
    fn alloc_child_tensor(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        shape: Vec<u64>,
        dtype: u32,
    ) -> PyResult<NativeChildTensor> {
        let w = self.live(py)?;
        let id = worker_id(worker, "worker")?;
        let dtype = self::dtype(py, dtype)?;
        let tensor = detached(py, || w.alloc_child_tensor(id, &shape, dtype))?;
        Ok(NativeChildTensor { tensor })
    }

    /// Frees memory from `alloc_child_tensor`.
    fn free_child_tensor(&self, py: Python<'_>, tensor: &NativeChildTensor) -> PyResult<()> {
        let worker = self.live(py)?;
        let t = &tensor.tensor;
        detached(py, || worker.free_child_tensor(t))
    }

    /// The worker's child processes: endpoint name to pid.
    fn child_pids(&self, py: Python<'_>) -> PyResult<HashMap<String, u32>> {
        let worker = self.live(py)?;
        Ok(py.detach(|| worker.child_pids()).into_iter().collect())
    }

    /// Waits for the runs in flight (killing the child processes still busy after
    /// `close_timeout_s`), stops every endpoint and child, joins the threads. Idempotent;
    /// refused (`WorkerStateError`) from inside an orchestration or from a thread other than
    /// the one that called `init`, and the worker stays open then. An error of the shutdown
    /// itself (a child that had died) is raised once the worker is closed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let Some(worker) = lock(&self.worker).clone() else {
            return Ok(());
        };
        let outcome = py.detach(|| worker.close());
        if !worker.is_closed() {
            return outcome.map_err(|e| error::worker_error(py, e));
        }
        let last = lock(&self.worker).take();
        // The last reference joins the engine's threads: drop it detached.
        py.detach(move || drop((worker, last)));
        outcome.map_err(|e| error::worker_error(py, e))
    }

    /// The level (a label in messages).
    #[getter]
    fn level(&self) -> u32 {
        self.level
    }

    /// Chips (worker ids `0..chip_count`).
    #[getter]
    fn chip_count(&self) -> usize {
        self.chip_count
    }

    /// Sub workers.
    #[getter]
    fn sub_worker_count(&self) -> usize {
        self.sub_worker_count
    }

    /// True once `close` succeeded.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.worker).is_none()
    }

    fn __repr__(&self) -> String {
        format!(
            "HostWorker(level={}, chips={}, sub_workers={}, closed={})",
            self.level,
            self.chip_count,
            self.sub_worker_count,
            self.closed()
        )
    }
}

impl Drop for NativeHostWorker {
    /// An engine Python drops without `close`: dropping it closes it — runs in flight are
    /// waited for, children stopped, threads joined — and a level-4 child's lane calls
    /// Python to shut its child down. So the reference goes detached.
    fn drop(&mut self) {
        drop_detached(take_last(&mut self.worker));
    }
}
