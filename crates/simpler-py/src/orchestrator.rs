//! `simpler._native.Orchestrator`: the engine's [`Orchestrator`] handed to a Python
//! orchestration function, valid only while that function runs.
//!
//! The host worker ([`crate::host_worker`]) makes one per run, inside the engine's
//! orchestration closure, and invalidates it when the Python function returns: every call
//! after that raises `WorkerStateError` (and the engine refuses its own clone too). Each
//! call converts its Python arguments while attached — arrays become tensors against the
//! worker's shared memory ([`KnownMemory`]) — then detaches for the engine call, which may
//! block (an `alloc` waits for the heap ring), so other Python threads keep running. Every
//! check of the task (worker ids, handles, group shapes, memory a child cannot see) is the
//! engine's (`docs/l3-worker.md` §8); errors become exceptions in [`crate::error`].

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use simpler_abi::DataType;
use simpler_host::CallConfig;
use simpler_worker::{CommBufferSpec, CommDomain, Orchestrator, Tag, TaskArgs};

use crate::args::NativeHostTensor;
use crate::config::NativeCallConfig;
use crate::error;
use crate::error::detached;
use crate::host_callable::NativeHostCallable;
use crate::host_memory::{array_view, host_tensor, HostView, KnownMemory, NativeSharedMemory};
use crate::task_args::{worker_id, NativeChildTensor, NativeTaskArgs};

/// A dtype given by its wire value.
pub(crate) fn dtype(py: Python<'_>, wire: u32) -> PyResult<DataType> {
    DataType::from_raw(wire).ok_or_else(|| {
        error::argument_type(py, format!("{wire} is not a DataType wire value (0..=10)"))
    })
}

/// One run's orchestrator (see the module docs).
#[pyclass(module = "simpler._native", name = "Orchestrator", frozen)]
pub struct NativeOrchestrator {
    /// The engine's orchestrator while the orchestration function runs; `None` after.
    orch: Mutex<Option<Orchestrator>>,
    known: Arc<KnownMemory>,
}

impl NativeOrchestrator {
    /// Wraps `orch`, whose arrays are looked up in `known`.
    pub(crate) fn new(orch: Orchestrator, known: Arc<KnownMemory>) -> NativeOrchestrator {
        NativeOrchestrator {
            orch: Mutex::new(Some(orch)),
            known,
        }
    }

    /// Ends the orchestrator's life: every later call raises `WorkerStateError`.
    pub(crate) fn invalidate(&self) {
        self.orch.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn live(&self, py: Python<'_>) -> PyResult<Orchestrator> {
        self.orch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                error::Raise::new(
                    "WorkerStateError",
                    "the orchestrator is valid only inside its orchestration function; this \
                     one has returned",
                )
                .into_err(py)
            })
    }

    fn args_list(
        &self,
        py: Python<'_>,
        args_list: &[Bound<'_, NativeTaskArgs>],
    ) -> PyResult<Vec<TaskArgs>> {
        args_list
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.get()
                    .to_task_args(py, &self.known, &format!("args_list[{i}]"))
            })
            .collect()
    }
}

fn config(c: Option<&NativeCallConfig>) -> CallConfig {
    c.map(|c| c.config).unwrap_or_default()
}

#[pymethods]
impl NativeOrchestrator {
    /// True while the orchestration function runs.
    #[getter]
    fn valid(&self) -> bool {
        self.orch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Adds a task running the chip callable `handle` on chip `worker`; returns its id.
    #[pyo3(signature = (handle, args, config, worker))]
    fn submit_next_level(
        &self,
        py: Python<'_>,
        handle: &NativeHostCallable,
        args: &NativeTaskArgs,
        config: Option<&NativeCallConfig>,
        worker: &Bound<'_, PyAny>,
    ) -> PyResult<u32> {
        let orch = self.live(py)?;
        let worker = worker_id(worker, "worker")?;
        let args = args.to_task_args(py, &self.known, "args")?;
        let cfg = self::config(config);
        let h = &handle.handle;
        detached(py, || orch.submit_next_level(h, args, &cfg, worker)).map(|t| t.0)
    }

    /// Adds one task of the chips `workers`, member `i` running `handle` on `args_list[i]`.
    #[pyo3(signature = (handle, args_list, config, workers))]
    fn submit_next_level_group(
        &self,
        py: Python<'_>,
        handle: &NativeHostCallable,
        args_list: Vec<Bound<'_, NativeTaskArgs>>,
        config: Option<&NativeCallConfig>,
        workers: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<u32> {
        let orch = self.live(py)?;
        let workers = workers
            .iter()
            .enumerate()
            .map(|(i, w)| worker_id(w, &format!("workers[{i}]")))
            .collect::<PyResult<Vec<_>>>()?;
        let args = self.args_list(py, &args_list)?;
        let cfg = self::config(config);
        let h = &handle.handle;
        detached(py, || orch.submit_next_level_group(h, args, &cfg, &workers)).map(|t| t.0)
    }

    /// Adds a task running the sub callable `handle` on an idle sub worker.
    fn submit_sub(
        &self,
        py: Python<'_>,
        handle: &NativeHostCallable,
        args: &NativeTaskArgs,
    ) -> PyResult<u32> {
        let orch = self.live(py)?;
        let args = args.to_task_args(py, &self.known, "args")?;
        let h = &handle.handle;
        detached(py, || orch.submit_sub(h, args)).map(|t| t.0)
    }

    /// Adds one task of `len(args_list)` members on distinct sub workers.
    fn submit_sub_group(
        &self,
        py: Python<'_>,
        handle: &NativeHostCallable,
        args_list: Vec<Bound<'_, NativeTaskArgs>>,
    ) -> PyResult<u32> {
        let orch = self.live(py)?;
        let args = self.args_list(py, &args_list)?;
        let h = &handle.handle;
        detached(py, || orch.submit_sub_group(h, args)).map(|t| t.0)
    }

    /// Opens a scope (allocations inside are reclaimed after its end).
    fn scope_begin(&self, py: Python<'_>) -> PyResult<()> {
        let orch = self.live(py)?;
        detached(py, || orch.scope_begin())
    }

    /// Closes the innermost scope.
    fn scope_end(&self, py: Python<'_>) -> PyResult<()> {
        let orch = self.live(py)?;
        detached(py, || orch.scope_end())
    }

    /// A tensor of `shape` × dtype (wire value) from the heap ring, as shared memory.
    fn alloc(&self, py: Python<'_>, shape: Vec<u64>, dtype: u32) -> PyResult<NativeSharedMemory> {
        let orch = self.live(py)?;
        let dtype = self::dtype(py, dtype)?;
        let tensor = detached(py, || orch.alloc(&shape, dtype))?;
        let view = HostView::of_alloc(tensor).ok_or_else(|| {
            error::Raise::new("WorkerStateError", "orch.alloc answered chip memory").into_err(py)
        })?;
        Ok(NativeSharedMemory::new(view, &self.known))
    }

    /// Releases an `alloc` tensor (a `HostTensor` over the whole of it) or frees a
    /// `ChildTensor`.
    fn free(&self, py: Python<'_>, tensor: &Bound<'_, PyAny>) -> PyResult<()> {
        let orch = self.live(py)?;
        let target = if let Ok(child) = tensor.cast::<NativeChildTensor>() {
            child.get().tensor.clone()
        } else if let Ok(host) = tensor.cast::<NativeHostTensor>() {
            let host = host.get();
            let view = array_view(host.array.bind(py), host.dtype.size_bytes(), "tensor")?;
            self.known.alloc_at(view.addr, view.span).ok_or_else(|| {
                error::invalid_argument(
                    py,
                    "tensor",
                    "the array is not (the whole of) a tensor from orch.alloc",
                )
            })?
        } else {
            return Err(error::argument_type(
                py,
                format!(
                    "free takes a HostTensor or a ChildTensor, got {}",
                    tensor.get_type().name()?
                ),
            ));
        };
        detached(py, || orch.free(&target))
    }

    /// Persistent device memory on chip `worker`: `shape` × dtype (wire value).
    fn alloc_child_tensor(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        shape: Vec<u64>,
        dtype: u32,
    ) -> PyResult<NativeChildTensor> {
        let orch = self.live(py)?;
        let worker = worker_id(worker, "worker")?;
        let dtype = self::dtype(py, dtype)?;
        let tensor = detached(py, || orch.alloc_child_tensor(worker, &shape, dtype))?;
        Ok(NativeChildTensor { tensor })
    }

    /// A comm domain of chips `workers` (`docs/comm.md`): `buffers` are `(name, dtype wire
    /// value, count)` triples. Checked by the engine before anything is made.
    fn allocate_domain(
        &self,
        py: Python<'_>,
        name: String,
        workers: Vec<Bound<'_, PyAny>>,
        window_size: u64,
        buffers: Vec<(String, u32, u64)>,
    ) -> PyResult<NativeCommDomain> {
        let orch = self.live(py)?;
        let workers = workers
            .iter()
            .enumerate()
            .map(|(i, w)| worker_id(w, &format!("workers[{i}]")))
            .collect::<PyResult<Vec<_>>>()?;
        let specs = buffers
            .into_iter()
            .map(|(name, dt, count)| {
                Ok(CommBufferSpec {
                    name,
                    dtype: self::dtype(py, dt)?,
                    count,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let domain = detached(py, || {
            orch.allocate_domain(&name, &workers, window_size, &specs)
        })?;
        Ok(NativeCommDomain { domain })
    }

    /// An L3↔L2 region with chip `worker` (`docs/comm.md` §7).
    fn create_worker_chip_region(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        payload_bytes: u64,
        counter_bytes: u64,
    ) -> PyResult<crate::region::NativeWorkerChipRegion> {
        let orch = self.live(py)?;
        let worker = worker_id(worker, "worker_id")?;
        let region = detached(py, || {
            orch.create_worker_chip_region(worker, payload_bytes, counter_bytes)
        })?;
        Ok(crate::region::NativeWorkerChipRegion::new(region))
    }

    /// An L3↔L2 message queue with chip `worker` (`docs/comm.md` §8).
    fn create_worker_chip_queue(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        depth: u64,
        input_arena_bytes: u64,
        output_arena_bytes: u64,
    ) -> PyResult<crate::region::NativeWorkerChipQueue> {
        let orch = self.live(py)?;
        let worker = worker_id(worker, "worker_id")?;
        let queue = detached(py, || {
            orch.create_worker_chip_queue(worker, depth, input_arena_bytes, output_arena_bytes)
        })?;
        Ok(crate::region::NativeWorkerChipQueue::new(queue))
    }

    /// Releases `domain`: later tasks may not name its buffers.
    fn release_domain(&self, py: Python<'_>, domain: &NativeCommDomain) -> PyResult<()> {
        let orch = self.live(py)?;
        detached(py, || orch.release_domain(&domain.domain))
    }

    /// Adds a task copying host memory `src` into chip memory `dst`.
    fn copy_to(
        &self,
        py: Python<'_>,
        dst: &NativeChildTensor,
        src: &NativeHostTensor,
    ) -> PyResult<u32> {
        let orch = self.live(py)?;
        let src = host_tensor(
            src.array.bind(py),
            src.dtype,
            Tag::Input,
            &self.known,
            "src",
        )?;
        let dst = &dst.tensor;
        detached(py, || orch.copy_to(dst, &src)).map(|t| t.0)
    }

    /// Adds a task copying chip memory `src` into host memory `dst`.
    fn copy_from(
        &self,
        py: Python<'_>,
        dst: &NativeHostTensor,
        src: &NativeChildTensor,
    ) -> PyResult<u32> {
        let orch = self.live(py)?;
        let dst = host_tensor(
            dst.array.bind(py),
            dst.dtype,
            Tag::Output,
            &self.known,
            "dst",
        )?;
        let src = &src.tensor;
        detached(py, || orch.copy_from(&dst, src)).map(|t| t.0)
    }
}

/// `simpler._native.CommDomain`: a domain `allocate_domain` made; the Python
/// `CommDomainHandle` wraps it (`docs/comm.md`).
#[pyclass(module = "simpler._native", name = "CommDomain", frozen)]
pub struct NativeCommDomain {
    domain: CommDomain,
}

#[pymethods]
impl NativeCommDomain {
    /// Its name.
    #[getter]
    fn name(&self) -> String {
        self.domain.name.clone()
    }

    /// The member chips, in rank order.
    #[getter]
    fn workers(&self) -> Vec<usize> {
        self.domain.workers.clone()
    }

    /// Per rank, in rank order: `(worker, domain_rank, domain_size, device_ctx,
    /// local_window_base, actual_window_size, [(buffer name, ChildTensor)])`.
    #[allow(clippy::type_complexity)]
    fn ranks(
        &self,
    ) -> Vec<(
        usize,
        u32,
        u32,
        u64,
        u64,
        u64,
        Vec<(String, NativeChildTensor)>,
    )> {
        self.domain
            .ranks
            .iter()
            .map(|r| {
                let buffers = r
                    .buffers
                    .iter()
                    .map(|(n, t)| (n.clone(), NativeChildTensor { tensor: t.clone() }))
                    .collect();
                (
                    r.worker,
                    r.domain_rank,
                    r.domain_size,
                    r.device_ctx,
                    r.local_window_base,
                    r.actual_window_size,
                    buffers,
                )
            })
            .collect()
    }
}
