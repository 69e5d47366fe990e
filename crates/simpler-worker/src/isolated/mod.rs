//! [`IsolatedChip`]: one chip in a child process behind level 2's call shapes — register a
//! callable, run it on arguments in signature order, device memory by `malloc` — built on
//! the engine: a one-chip [`Worker`] with `chip_isolation = process` (`docs/l3-worker.md`
//! §9).
//!
//! A level-2 run is one engine run whose orchestration, for each host tensor, stages it
//! through persistent device memory of the chip ([`staging`]) as tasks: `copy_to` (for `in`
//! and `inout`) → the chip task over the device tensors → `copy_from` (for `out` and
//! `inout`). The copies are tasks like any other, so they run when the run is dispatched,
//! after the run before it is over: chained submits on the same arrays see each other's
//! results. A chip task that fails poisons its copies back, so a failed run leaves the host
//! arrays as they were. Host memory may be private to this process: copies carry bytes
//! through the child's mailbox, never a mapping. The engine run is submitted at the run's
//! `CallConfig::trace_level`, so a traced run's report holds the engine's merged trace, and
//! every report the chip run's task count as the child sent it back (`docs/tracing.md`).
//!
//! A child that dies fails its run with [`WorkerError::EndpointFailure`] carrying the crash
//! report; from then on [`IsolatedChip::health`] says why, and every run and device call is
//! refused with that report. This module owns the mapping of level-2 calls onto engine
//! runs; dispatch, ordering and the child are the engine's.

mod plan;
mod staging;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use simpler_abi::DataType;
use simpler_device::DevicePtr;
use simpler_host::{ArgDirection, CallConfig, CallableSpec, Signature, WorkerConfig};

pub use plan::IsolatedArg;

use crate::endpoint::{Callable, CallableKey};
use crate::memory::{HostMemory, VecMemory};
use crate::options::{ChipIsolation, WorkerOptions, MIN_HEAP_RING_SIZE};
use crate::process::ChildProgram;
use crate::registry::CallableHandle;
use crate::run::RunHandle;
use crate::tensor::{c_strides, Memory, Tag, TaskArgs, Tensor};
use crate::trace::RunConfig;
use crate::{Orchestrator, Worker, WorkerError};
use plan::{Allocations, Planned};
use staging::Staging;

/// Epochs of isolated runs: process-unique, non-zero.
static EPOCHS: AtomicU64 = AtomicU64::new(1);

/// How an [`IsolatedChip`] is made.
#[derive(Clone, Debug)]
pub struct IsolatedOptions {
    /// The chip's configuration (checked by the child when it starts).
    pub chip: WorkerConfig,
    /// The device id that labels the chip in messages (`chip 0 (device 3, pid 42)`).
    pub device_id: u32,
    /// The program the child runs; `None` is [`ChildProgram::for_rust`].
    pub program: Option<ChildProgram>,
    /// How long the child may take to bring its chip up (default 300 s).
    pub startup_timeout: Duration,
}

impl Default for IsolatedOptions {
    fn default() -> Self {
        IsolatedOptions {
            chip: WorkerConfig::default(),
            device_id: 0,
            program: None,
            startup_timeout: WorkerOptions::default().startup_timeout,
        }
    }
}

/// The health of an [`IsolatedChip`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChipHealth {
    /// The chip's process is alive and takes runs.
    Healthy,
    /// The chip's process died; every run and device call is refused.
    Dead {
        /// The endpoint (`chip 0 (device 0, pid 42)`).
        endpoint: String,
        /// Its crash report: how it ended (`was killed by signal SIGSEGV (11)`) and the end
        /// of its stderr.
        report: String,
    },
    /// [`IsolatedChip::close`] was called.
    Closed,
}

/// What a successful level-2 run reports.
#[derive(Clone, Debug, PartialEq)]
pub struct IsolatedReport {
    /// The run's epoch: process-unique among isolated runs, non-zero, increasing in
    /// submission order.
    pub epoch: u64,
    /// The wall time of the chip task, measured around its request to the child (it
    /// includes the request's trip through the mailbox, not the copies).
    pub device_time: Duration,
    /// From the submission to the run's end, copies included.
    pub total_time: Duration,
    /// Tasks of the engine run: the copies and the chip task.
    pub tasks: usize,
    /// Tasks the chip run's orchestration submitted (`simpler_host::RunReport::tasks`, as
    /// the child reports it): what a level-2 run in this process reports as its tasks.
    pub chip_tasks: u64,
    /// The run's trace when its `CallConfig::trace_level` is not Off: the engine's merged
    /// trace (`docs/tracing.md`, Level 3) — the "L3 host" process with the staging copies
    /// and the chip task's call, then the chip's process with its run.
    pub trace: Option<Box<simpler_host::trace_model::Trace>>,
}

/// A submitted level-2 run. `Clone + Send + Sync`; waiting again answers the same.
#[derive(Clone, Debug)]
pub struct IsolatedRunHandle {
    run: RunHandle,
    epoch: u64,
}

impl IsolatedRunHandle {
    /// The run's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// True once the run is over (never blocks).
    pub fn done(&self) -> bool {
        self.run.done()
    }

    /// Waits for the run, at most `timeout` (`None`: as long as it takes).
    ///
    /// # Errors
    /// [`WorkerError::WaitTimeout`] when it is not over in time (it goes on); the run's
    /// error: [`WorkerError::TaskFailed`] naming the task (`#2 <callable>`, `#4 copy_from`)
    /// and the chip, whose root cause is the chip's own error or
    /// [`WorkerError::EndpointFailure`] with the crash report.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<IsolatedReport, WorkerError> {
        let report = self.run.wait(timeout)?;
        Ok(IsolatedReport {
            epoch: self.epoch,
            device_time: report.chip_time,
            total_time: report.total_time,
            tasks: report.tasks,
            chip_tasks: report.chip_tasks,
            trace: report.trace,
        })
    }

    /// Waits for the run and returns its report.
    ///
    /// # Errors
    /// As [`wait`](IsolatedRunHandle::wait).
    pub fn result(self) -> Result<IsolatedReport, WorkerError> {
        self.wait(None)
    }
}

/// One chip in a child process, driven with level 2's calls (see the module docs). `Send +
/// Sync`: any thread may submit, wait, and close.
pub struct IsolatedChip {
    worker: Worker,
    callables: Mutex<HashMap<CallableKey, (CallableHandle, Arc<CallableSpec>)>>,
    /// `malloc` allocations, by first byte, with the tensors the engine knows them by.
    allocations: Mutex<(Allocations, HashMap<u64, Tensor>)>,
    /// Held while a run is prepared and submitted (runs are submitted one at a time).
    staging: Mutex<Staging>,
    /// The last run submitted (runs end in submission order).
    last: Mutex<Option<RunHandle>>,
    closed: AtomicBool,
}

impl std::fmt::Debug for IsolatedChip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IsolatedChip")
            .field("endpoint", &self.endpoint())
            .field("health", &self.health())
            .finish_non_exhaustive()
    }
}

fn bad(arg: &str, reason: String) -> WorkerError {
    WorkerError::InvalidArgument {
        arg: arg.into(),
        reason,
    }
}

impl IsolatedChip {
    /// Starts the chip's child process and waits until its chip is up.
    ///
    /// # Errors
    /// [`WorkerError::Startup`] naming the chip and why (its configuration refused, the
    /// program missing, the child died or was late); [`WorkerError::InvalidConfig`] for a
    /// zero startup timeout or no child program found. Nothing is left running.
    pub fn start(options: IsolatedOptions) -> Result<IsolatedChip, WorkerError> {
        let worker = Worker::new(WorkerOptions {
            chips: vec![options.chip],
            device_ids: vec![options.device_id],
            chip_isolation: ChipIsolation::Process,
            chip_program: options.program,
            heap_ring_size: MIN_HEAP_RING_SIZE,
            startup_timeout: options.startup_timeout,
            ..WorkerOptions::default()
        })?;
        worker.init()?;
        Ok(IsolatedChip {
            worker,
            callables: Mutex::new(HashMap::new()),
            allocations: Mutex::new((Allocations::new(), HashMap::new())),
            staging: Mutex::new(Staging::default()),
            last: Mutex::new(None),
            closed: AtomicBool::new(false),
        })
    }

    /// How messages name the chip: `chip 0 (device 3, pid 42)`.
    pub fn endpoint(&self) -> String {
        self.worker
            .child_pids()
            .into_iter()
            .next()
            .map_or_else(|| "chip 0".into(), |(name, _)| name)
    }

    /// The child's process id (`None` once closed).
    pub fn pid(&self) -> Option<u32> {
        self.worker.child_pids().first().map(|(_, p)| *p)
    }

    /// Whether the chip's process is alive (see [`ChipHealth`]).
    pub fn health(&self) -> ChipHealth {
        if self.closed.load(Ordering::Acquire) {
            return ChipHealth::Closed;
        }
        match self.worker.endpoint_failures().into_iter().next() {
            Some((endpoint, report)) => ChipHealth::Dead { endpoint, report },
            None => ChipHealth::Healthy,
        }
    }

    /// Refuses work once the chip died or the worker closed.
    fn refuse_unhealthy(&self) -> Result<(), WorkerError> {
        match self.health() {
            ChipHealth::Healthy => Ok(()),
            ChipHealth::Closed => Err(WorkerError::Closed),
            ChipHealth::Dead { endpoint, report } => Err(WorkerError::EndpointFailure {
                endpoint,
                report: format!(
                    "{report} (the chip's process is gone, so this worker refuses runs and \
                     device calls; close it and make a new one)"
                ),
            }),
        }
    }

    /// Registers `spec` (a callable of shared-library images) and returns its key.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`callable`) for a callable of in-process functions
    /// (it cannot cross to the child); the chip's refusal; [`WorkerError::Closed`].
    pub fn register(&self, spec: Arc<CallableSpec>) -> Result<CallableKey, WorkerError> {
        let handle = self.worker.register(Callable::Chip(spec.clone()))?;
        let key = handle.key();
        self.callables.lock().insert(key, (handle, spec));
        Ok(key)
    }

    /// The name and signature of registered callable `key`.
    ///
    /// # Errors
    /// [`WorkerError::UnknownCallable`].
    pub fn signature(&self, key: CallableKey) -> Result<(String, Signature), WorkerError> {
        let (_, spec) = self.callable(key)?;
        Ok((spec.name.clone(), spec.signature.clone()))
    }

    fn callable(
        &self,
        key: CallableKey,
    ) -> Result<(CallableHandle, Arc<CallableSpec>), WorkerError> {
        self.callables
            .lock()
            .get(&key)
            .cloned()
            .ok_or_else(|| WorkerError::UnknownCallable(format!("key {key}")))
    }

    /// Forgets callable `key`, once the runs in flight are over.
    ///
    /// # Errors
    /// [`WorkerError::UnknownCallable`]; the chip's error.
    pub fn unregister(&self, key: CallableKey) -> Result<(), WorkerError> {
        let (handle, _) = self.callable(key)?;
        self.wait_idle();
        self.worker.unregister(&handle)?;
        self.callables.lock().remove(&key);
        Ok(())
    }

    /// Waits for the last run submitted (and so for every run: they end in order).
    fn wait_idle(&self) {
        let last = self.last.lock().clone();
        if let Some(run) = last {
            let _ = run.wait(None);
        }
    }

    /// Submits a run of `key` on `args` (signature order) with `config`, and returns its
    /// handle once it is in the engine (see the module docs).
    ///
    /// # Errors
    /// Before anything runs: [`WorkerError::UnknownCallable`]; the host's argument errors
    /// ([`WorkerError::Host`]: count, kind, dtype, shape, writability, aliasing, scalar
    /// range), [`WorkerError::InvalidArgument`] naming the argument (a host tensor not
    /// contiguous, device memory outside this worker's allocations); the chip's error when
    /// staging memory cannot be allocated; [`WorkerError::EndpointFailure`] once the chip's
    /// process died; [`WorkerError::Closed`].
    pub fn submit(
        &self,
        key: CallableKey,
        args: Vec<IsolatedArg>,
        config: &CallConfig,
    ) -> Result<IsolatedRunHandle, WorkerError> {
        self.refuse_unhealthy()?;
        let (handle, spec) = self.callable(key)?;
        let planned = plan::plan(&spec, args, &self.allocations.lock().0)?;
        let mut staging = self.staging.lock();
        let run = staging.begin();
        let mut staged = Vec::new();
        for p in &planned {
            if let Planned::Host { tensor, .. } = p {
                let slot = staging.take(run, tensor.nbytes(), |n| {
                    self.worker.alloc_child_tensor(0, &[n], DataType::Uint8)
                })?;
                let device = Tensor::view(
                    slot.memory().clone(),
                    0,
                    tensor.shape(),
                    &c_strides(tensor.shape()),
                    tensor.dtype(),
                )?;
                staged.push(device);
            }
        }
        let evicted = staging.evict(run);
        let epoch = EPOCHS.fetch_add(1, Ordering::Relaxed);
        let traced = RunConfig {
            trace_level: config.trace_level,
        };
        let handle = self.submit_engine_run(&traced, |o| {
            for slot in &evicted {
                o.free(slot)?;
            }
            stage(o, &handle, &planned, &staged, config)
        })?;
        drop(staging);
        Ok(IsolatedRunHandle { run: handle, epoch })
    }

    /// [`submit`](IsolatedChip::submit), then waits for the run.
    ///
    /// # Errors
    /// `submit`'s, then the run's.
    pub fn run(
        &self,
        key: CallableKey,
        args: Vec<IsolatedArg>,
        config: &CallConfig,
    ) -> Result<IsolatedReport, WorkerError> {
        self.submit(key, args, config)?.result()
    }

    /// Submits one engine run built by `build`, with `config` (its trace level); an error
    /// `build` returns is the caller's (typed), once the run's dispatched tasks are over.
    fn submit_engine_run(
        &self,
        config: &RunConfig,
        build: impl FnOnce(&Orchestrator) -> Result<(), WorkerError>,
    ) -> Result<RunHandle, WorkerError> {
        let mut refused = None;
        let handle = self.worker.submit_with(
            |o| build(o).inspect_err(|e| refused = Some(e.clone())),
            config,
        )?;
        if let Some(e) = refused {
            let _ = handle.wait(None);
            return Err(e);
        }
        *self.last.lock() = Some(handle.clone());
        Ok(handle)
    }

    /// Allocates `nbytes` of zeroed device memory on the chip; returns its first byte (in
    /// the child's address space: only this worker's calls and runs take it).
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`nbytes`) for 0; the chip's error (out of device
    /// memory); [`WorkerError::EndpointFailure`] once the chip died; [`WorkerError::Closed`].
    pub fn malloc(&self, nbytes: u64) -> Result<DevicePtr, WorkerError> {
        self.refuse_unhealthy()?;
        if nbytes == 0 {
            return Err(bad("nbytes", "malloc takes a positive size".into()));
        }
        let tensor = self
            .worker
            .alloc_child_tensor(0, &[nbytes], DataType::Uint8)?;
        let Memory::Child(alloc) = *tensor.memory() else {
            unreachable!("alloc_child_tensor gives device memory")
        };
        let mut a = self.allocations.lock();
        a.0.insert(alloc.ptr.addr(), alloc);
        a.1.insert(alloc.ptr.addr(), tensor);
        Ok(alloc.ptr)
    }

    /// Frees an allocation of [`malloc`](IsolatedChip::malloc), given its first byte.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`ptr`) for an address that is no allocation's
    /// first byte; [`WorkerError::InvalidState`] while a run in flight uses it; the chip's
    /// error.
    pub fn free(&self, ptr: DevicePtr) -> Result<(), WorkerError> {
        let tensor = self.allocations.lock().1.get(&ptr.addr()).cloned();
        let Some(tensor) = tensor else {
            return Err(bad(
                "ptr",
                format!(
                    "device address {:#x} is not the first byte of a live malloc allocation of \
                     this worker",
                    ptr.addr()
                ),
            ));
        };
        self.worker.free_child_tensor(&tensor)?;
        let mut a = self.allocations.lock();
        a.0.remove(&ptr.addr());
        a.1.remove(&ptr.addr());
        Ok(())
    }

    /// A `u8` view of `nbytes` of device memory from `ptr` (inside one allocation).
    fn device_bytes(&self, arg: &str, ptr: DevicePtr, nbytes: u64) -> Result<Tensor, WorkerError> {
        let (alloc, offset) = plan::device_span(&self.allocations.lock().0, arg, ptr, nbytes)?;
        Tensor::view(
            Memory::Child(alloc),
            offset,
            &[nbytes],
            &[1],
            DataType::Uint8,
        )
    }

    /// Copies `src` into device memory at `dst` (inside one `malloc` allocation), as a run
    /// of its own: after the runs submitted before it.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`dst`) outside this worker's allocations; the
    /// copy's failure; [`WorkerError::EndpointFailure`] once the chip died.
    pub fn copy_to(&self, dst: DevicePtr, src: &[u8]) -> Result<(), WorkerError> {
        self.refuse_unhealthy()?;
        if src.is_empty() {
            return Ok(());
        }
        let n = src.len() as u64;
        let device = self.device_bytes("dst", dst, n)?;
        let memory: Arc<dyn HostMemory> = Arc::new(VecMemory::new(src.to_vec()));
        let host = Tensor::new(Memory::Host(memory), &[n], DataType::Uint8)?;
        let serial = self.staging.lock();
        let run = self.submit_engine_run(&RunConfig::default(), |o| {
            o.copy_to(&device, &host).map(drop)
        })?;
        drop(serial);
        run.wait(None).map(drop)
    }

    /// Copies device memory at `src` (inside one `malloc` allocation) into `dst`, as many
    /// bytes as `dst` holds, as a run of its own: after the runs submitted before it.
    ///
    /// # Errors
    /// As [`copy_to`](IsolatedChip::copy_to), naming `src`.
    pub fn copy_from(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), WorkerError> {
        self.refuse_unhealthy()?;
        if dst.is_empty() {
            return Ok(());
        }
        let n = dst.len() as u64;
        let device = self.device_bytes("src", src, n)?;
        let memory = Arc::new(VecMemory::new(vec![0; dst.len()]));
        let shared: Arc<dyn HostMemory> = memory.clone();
        let host = Tensor::new(Memory::Host(shared), &[n], DataType::Uint8)?;
        let serial = self.staging.lock();
        let run = self.submit_engine_run(&RunConfig::default(), |o| {
            o.copy_from(&host, &device).map(drop)
        })?;
        drop(serial);
        run.wait(None)?;
        dst.copy_from_slice(&memory.to_vec());
        Ok(())
    }

    /// Device memory held for staging: (allocations, bytes).
    pub fn staging_held(&self) -> (usize, u64) {
        let s = self.staging.lock();
        (s.len(), s.bytes())
    }

    /// Closes: waits for the runs in flight, frees the device memory, stops the child and
    /// reaps it. From any thread; closing again does nothing.
    ///
    /// # Errors
    /// The first error of the shutdown (the worker is closed anyway).
    pub fn close(&self) -> Result<(), WorkerError> {
        self.closed.store(true, Ordering::Release);
        self.worker.close_any_thread()
    }
}

/// The tag of a chip task's tensor of `direction`.
fn tag(direction: ArgDirection) -> Tag {
    match direction {
        ArgDirection::In => Tag::Input,
        ArgDirection::Out => Tag::Output,
        ArgDirection::InOut | ArgDirection::Scalar => Tag::InOut,
    }
}

/// The orchestration of one level-2 run: each host tensor copied to its staging tensor
/// (`staged`, in argument order) when it is read, the chip task, and each written one
/// copied back.
fn stage(
    o: &Orchestrator,
    handle: &CallableHandle,
    planned: &[Planned],
    staged: &[Tensor],
    config: &CallConfig,
) -> Result<(), WorkerError> {
    let mut args = TaskArgs::new();
    let mut back = Vec::new();
    let mut staged = staged.iter();
    for p in planned {
        match p {
            Planned::Host { tensor, direction } => {
                let device = staged.next().expect("one staging tensor per host tensor");
                if direction.copies_in() {
                    o.copy_to(device, tensor)?;
                }
                if direction.copies_back() {
                    back.push((tensor, device));
                }
                args.add_tensor(device.clone(), tag(*direction));
            }
            Planned::Device { tensor, direction } => {
                args.add_tensor(tensor.clone(), tag(*direction));
            }
            Planned::Scalar(bits) => {
                args.add_scalar(*bits);
            }
        }
    }
    o.submit_next_level(handle, args, config, 0)?;
    for (host, device) in back {
        o.copy_from(host, device)?;
    }
    Ok(())
}
