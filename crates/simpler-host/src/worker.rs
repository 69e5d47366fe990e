//! [`ChipWorker`]: one chip driven from the host — device bring-up, the callable registry,
//! device memory, and runs through the run lane.
//!
//! A run is submitted ([`ChipWorker::submit`], arguments checked synchronously) and handed
//! to the lane: up to [`WorkerConfig::launch_depth`] runs are on the device at once, each in
//! its own pipeline slot, a successor launched behind its predecessor by the cross-run join;
//! completion is each run's own two boundaries, the verdict its own epoch-stamped result
//! record. [`ChipWorker::run`] is submit + wait for borrowed buffers. The worker owns the
//! callable registry, the execution mode and its identity; the lane (a handle every
//! [`RunHandle`] holds too) owns the device's runs and never calls back into the worker.
//!
//! Every operation starts with the environment check of [`crate::lifecycle`] (a forked
//! child, or a borrowed worker outside its context, is refused before any lock), and the
//! launching ones claim the execution mode ([`crate::mode`]): `submit`/`run` PROGRAM,
//! `submit_on_stream` KERNEL. Registration goes through [`crate::registry`] and is
//! serialized with `close()` on the worker's context lock; it is refused while a run is
//! outstanding, or (the `_timeout` forms) waits a bounded time for none to be. The worker holds a reference on the process's fault monitor
//! ([`crate::fault_monitor`]) from creation to teardown, so its lane can read the device's
//! fault notices into its health ([`crate::health`]).
//!
//! Locks, in acquisition order: context → lane → callable table (the table is only ever
//! held briefly, alone or last).

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use simpler_device::sim::SimDevice;
use simpler_device::{Device, DevicePtr, StreamId};

use crate::args::{HostArg, OwnedArg};
use crate::borrowed::{AbortUnlessTerminal, BorrowedBytes};
use crate::config::CallConfig;
use crate::handle::RunHandle;
use crate::health::HealthReport;
use crate::lane::graph::{self, GraphPlan};
use crate::lane::{IdleLane, LaneHandle, RecordedRun, RunReport, StagingReport};
use crate::lifecycle::{EnvironmentIdentity, WorkerState};
use crate::mode::{ExecutionMode, ExecutionModeLatch};
use crate::registry::{
    self, CallableId, CallableInfo, CallableTable, ImageCache, ImageCacheStats, Registered,
};
use crate::worker_config::WorkerConfig;
use crate::{CallableSpec, HostError};

/// What the context lock guards: the image cache and the occupancy generations.
pub(crate) struct RegistryContext {
    cache: ImageCache,
    next_generation: u64,
}

/// What the worker owns besides its lane.
struct Shared {
    /// Who this worker is; checked first by every operation.
    identity: EnvironmentIdentity,
    /// PROGRAM or KERNEL, claimed once.
    mode: ExecutionModeLatch,
    /// Serializes register, unregister and close.
    context: Mutex<RegistryContext>,
    /// The callable slots (brief locking only).
    table: Mutex<CallableTable>,
    /// The run lane (shared with every run handle).
    lane: LaneHandle,
}

/// One chip, its runtime and its callables.
///
/// Thread-safe. [`close`](ChipWorker::close) drains the runs in flight (queued runs end with
/// [`HostError::WorkerClosed`]) and frees every device allocation it made — after a forced
/// device reset if an owned device was marked unusable, and never while the device may still
/// touch the memory. Dropping a worker that was not closed detaches its handles instead
/// ([`HostError::Detached`] for runs still on the device, whose resources are kept).
pub struct ChipWorker {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ChipWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChipWorker")
            .field("config", self.shared.lane.config())
            .field("identity", &self.shared.identity)
            .finish_non_exhaustive()
    }
}

impl ChipWorker {
    /// Starts a sim device with `config` and prepares the lane (streams and slots). The worker
    /// owns its context; its execution mode is claimed by its first launch.
    ///
    /// # Errors
    /// [`HostError::InvalidConfig`] naming the bad field, or a device error.
    pub fn new(config: WorkerConfig) -> Result<ChipWorker, HostError> {
        config.validate()?;
        let device: Arc<dyn Device> = Arc::new(
            SimDevice::with_options(
                config.topology,
                simpler_device::sim::SimOptions {
                    memcheck: config.sim_memcheck,
                    executor: config.sim_executor,
                    sdma: config.enable_sdma,
                },
            )
            .map_err(HostError::device("starting the sim device"))?,
        );
        ChipWorker::with_device(config, device)
    }

    /// A worker on an existing device (for example a [`SimDevice`] whose faults a test
    /// injects), owning its context. `config.topology` is ignored: the device's own topology
    /// is used.
    ///
    /// # Errors
    /// [`HostError::InvalidConfig`] naming the bad field, or a device error.
    pub fn with_device(
        config: WorkerConfig,
        device: Arc<dyn Device>,
    ) -> Result<ChipWorker, HostError> {
        ChipWorker::init(config, device, None)
    }

    /// A worker in a context the caller owns (`borrowed_context_generation`), on the caller's
    /// device. It claims the KERNEL execution mode at once: its runs are launched on caller
    /// streams ([`submit_on_stream`](ChipWorker::submit_on_stream)) and program launch is
    /// refused. Every operation needs the generation to be the calling thread's current
    /// context ([`crate::lifecycle::enter_context`]); the worker never synchronizes or resets
    /// the whole device — its failures poison it and the caller owns recovery.
    ///
    /// # Errors
    /// [`HostError::ExecutionContextRefused`] when the generation is not current on this
    /// thread, [`HostError::InvalidConfig`], or a device error.
    pub fn borrowed(
        config: WorkerConfig,
        device: Arc<dyn Device>,
        borrowed_context_generation: NonZeroU64,
    ) -> Result<ChipWorker, HostError> {
        let w = ChipWorker::init(config, device, Some(borrowed_context_generation))?;
        w.shared.mode.latch(ExecutionMode::Kernel)?;
        Ok(w)
    }

    fn init(
        config: WorkerConfig,
        device: Arc<dyn Device>,
        borrowed: Option<NonZeroU64>,
    ) -> Result<ChipWorker, HostError> {
        let identity = EnvironmentIdentity::new(device.device_id(), borrowed);
        identity.check()?;
        let config = WorkerConfig {
            topology: *device.topology(),
            ..config
        };
        config.validate()?;
        let lane = LaneHandle::open(device, config, identity)?;
        Ok(ChipWorker {
            shared: Arc::new(Shared {
                identity,
                mode: ExecutionModeLatch::new(),
                context: Mutex::new(RegistryContext {
                    cache: ImageCache::for_device(lane.unload_gate().clone()),
                    next_generation: 1,
                }),
                table: Mutex::new(CallableTable::default()),
                lane,
            }),
        })
    }

    /// The device this worker drives.
    pub fn device(&self) -> &Arc<dyn Device> {
        self.shared.lane.device()
    }

    /// The worker's configuration (with the device's topology).
    pub fn config(&self) -> &WorkerConfig {
        self.shared.lane.config()
    }

    /// Who this worker is (process, incarnation, context generation, device, ownership).
    pub fn identity(&self) -> &EnvironmentIdentity {
        &self.shared.identity
    }

    /// The execution mode claimed so far; `None` while unclaimed.
    pub fn latched_mode(&self) -> Option<ExecutionMode> {
        self.shared.mode.latched_mode()
    }

    /// Open, closed (with or without cleanup debt), or detached.
    ///
    /// # Errors
    /// [`HostError::ExecutionContextRefused`] from the wrong context.
    pub fn state(&self) -> Result<WorkerState, HostError> {
        self.shared.identity.check()?;
        Ok(self.shared.lane.state())
    }

    /// Why the device refuses new runs, if it does: a run the lane could not prove finished,
    /// or a suspect device (a fault notice named one of this worker's streams). Admission
    /// returns only through a confirmed forced reset ([`recover_device`](Self::recover_device),
    /// or teardown). In a forked child this answers without taking a lock.
    pub fn unusable_reason(&self) -> Option<String> {
        if let Err(e) = self.shared.identity.check_process() {
            return Some(e.to_string());
        }
        self.shared.lane.admission_refusal()
    }

    /// The device health of this worker: generation, suspicion, first fault code, counters.
    ///
    /// # Errors
    /// [`HostError::ExecutionContextRefused`] from the wrong context.
    pub fn health(&self) -> Result<HealthReport, HostError> {
        self.shared.identity.check()?;
        Ok(self.shared.lane.health())
    }

    /// The staging memory the worker holds between runs: the buffers its pipeline slots pool
    /// for reuse (freed at close), and the quarantined ones of runs it gave up on.
    ///
    /// # Errors
    /// [`HostError::ExecutionContextRefused`] from the wrong context.
    pub fn staging_report(&self) -> Result<StagingReport, HostError> {
        self.shared.identity.check()?;
        Ok(self.shared.lane.staging_report())
    }

    /// Whether the worker reads the device's fault notices (its fault-callback install
    /// succeeded).
    pub fn watches_fault_notices(&self) -> bool {
        self.shared.lane.watches_notices()
    }

    /// Restores admission through a confirmed forced reset of the device: retires the device
    /// generation (suspicion, stream history), abandons every fence, frees what the lane had
    /// to keep, and reinstalls the fault callback. Owned workers only, with no run
    /// outstanding. An unconfirmed reset leaves admission closed.
    ///
    /// # Errors
    /// [`HostError::InvalidState`] for a borrowed worker (the caller owns recovery) or with
    /// runs outstanding, a device error when the reset is not confirmed,
    /// [`HostError::WorkerClosed`], [`HostError::ExecutionContextRefused`].
    pub fn recover_device(&self) -> Result<(), HostError> {
        self.shared.identity.check()?;
        self.shared.lane.recover_device()
    }

    /// Loads a callable's code (sharing equal images already loaded) and registers it under
    /// the lowest free id.
    ///
    /// # Errors
    /// [`HostError::InvalidCallable`] (duplicate or out-of-range func ids, no kernels),
    /// [`HostError::Signature`], [`HostError::Load`] naming the image and symbol,
    /// [`HostError::RegistryFull`] (invalid-state), [`HostError::InvalidState`] while a run
    /// is outstanding, [`HostError::WorkerClosed`], [`HostError::ExecutionContextRefused`].
    pub fn register(&self, spec: &CallableSpec) -> Result<CallableId, HostError> {
        self.register_as(None, spec, None)
    }

    /// [`register`](Self::register), waiting up to `timeout` for a moment with no run
    /// outstanding instead of being refused at once: the code is loaded first, then this
    /// thread drives the worker's runs to completion while new submits wait behind it (at
    /// most `timeout`), and the callable is registered as soon as the lane is empty
    /// (`docs/python.md`, registration). The worker's context lock is held meanwhile, so a
    /// concurrent `close()` waits for it too.
    ///
    /// # Errors
    /// As `register`, except that a run outstanding is [`HostError::RegistryBusy`] (naming
    /// how many) once `timeout` has passed; nothing is registered then.
    pub fn register_timeout(
        &self,
        spec: &CallableSpec,
        timeout: Duration,
    ) -> Result<CallableId, HostError> {
        self.register_as(None, spec, Some(timeout))
    }

    /// Registers a callable under the explicit id `id` (same namespace as automatic ids).
    ///
    /// # Errors
    /// As [`register`](Self::register), plus [`HostError::InvalidArgument`] (argument
    /// `callable_id`) when `id` is out of range or taken.
    pub fn register_with_id(&self, id: u32, spec: &CallableSpec) -> Result<CallableId, HostError> {
        self.register_as(Some(id), spec, None)
    }

    /// The out-parameter form (`simpler_register_callable_v2`): registers under the lowest
    /// free id and writes it to `out_id`, or −1 on any failure.
    ///
    /// # Errors
    /// As [`register`](Self::register).
    pub fn register_v2(&self, spec: &CallableSpec, out_id: &mut i32) -> Result<(), HostError> {
        registry::register_into(out_id, || self.register(spec))
    }

    fn register_as(
        &self,
        explicit: Option<u32>,
        spec: &CallableSpec,
        wait: Option<Duration>,
    ) -> Result<CallableId, HostError> {
        self.shared.identity.check()?;
        let wait = wait.map(|t| (t, deadline_after(t)));
        let mut ctx = self.shared.context.lock();
        // Fail fast, before loading anything (a waiting registration waits at the commit).
        if wait.is_none() {
            self.check_mutable()?;
        } else if self.shared.lane.is_closed() {
            return Err(HostError::WorkerClosed);
        }
        if let Some(id) = explicit {
            registry::check_explicit(&self.shared.table.lock(), id)?;
        } else {
            self.shared.table.lock().lowest_free()?;
        }
        let generation = ctx.next_generation;
        let registered = Arc::new(registry::build(&mut ctx.cache, spec, generation)?);
        // The commit point: no run outstanding, under the lane lock.
        let lane = self.lock_mutable_lane(wait)?;
        let mut table = self.shared.table.lock();
        let id = match explicit {
            Some(id) => table.insert_explicit(id, registered)?,
            None => table.insert_auto(registered)?,
        };
        ctx.next_generation += 1;
        drop(lane);
        Ok(id)
    }

    /// Removes a callable; its code leaves the image cache once no callable and no run uses
    /// it, and its libraries are unmapped then, unless a run since their load was given up
    /// on (a device thread may still run them: `loader` module doc).
    ///
    /// # Errors
    /// [`HostError::UnknownCallable`], [`HostError::InvalidState`] while a run is
    /// outstanding, [`HostError::WorkerClosed`], [`HostError::ExecutionContextRefused`].
    pub fn unregister(&self, id: CallableId) -> Result<(), HostError> {
        self.unregister_within(id, None)
    }

    /// [`unregister`](Self::unregister), waiting up to `timeout` for a moment with no run
    /// outstanding, as [`register_timeout`](Self::register_timeout) does.
    ///
    /// # Errors
    /// As `unregister`, except that a run outstanding is [`HostError::RegistryBusy`] (naming
    /// how many) once `timeout` has passed; nothing is removed then.
    pub fn unregister_timeout(&self, id: CallableId, timeout: Duration) -> Result<(), HostError> {
        self.unregister_within(id, Some(timeout))
    }

    fn unregister_within(&self, id: CallableId, wait: Option<Duration>) -> Result<(), HostError> {
        self.shared.identity.check()?;
        let wait = wait.map(|t| (t, deadline_after(t)));
        let _ctx = self.shared.context.lock();
        let lane = self.lock_mutable_lane(wait)?;
        let removed = self.shared.table.lock().remove(id)?;
        drop(lane);
        drop(removed);
        Ok(())
    }

    /// What slot `id` holds (name, occupancy generation and signature), if anything.
    pub fn callable_info(&self, id: CallableId) -> Option<CallableInfo> {
        self.shared.table.lock().info(id)
    }

    /// The callable registered under `id` — its name, occupancy generation and signature —
    /// for a binding that checks its arguments against the signature before it submits
    /// ([`Signature::check_offers`](crate::Signature::check_offers)). The submit checks the
    /// owned arguments again against the occupancy it finds, so an id re-registered in
    /// between cannot slip arguments past the host's check.
    ///
    /// # Errors
    /// [`HostError::UnknownCallable`] for an empty slot, [`HostError::ExecutionContextRefused`]
    /// (checked before any lock is taken).
    pub fn registered_callable(&self, id: CallableId) -> Result<CallableInfo, HostError> {
        self.shared.identity.check()?;
        self.shared
            .table
            .lock()
            .info(id)
            .ok_or(HostError::UnknownCallable(id.0))
    }

    /// Counters of the image cache (live images, loads, loads avoided by sharing).
    pub fn image_cache_stats(&self) -> ImageCacheStats {
        self.shared.context.lock().cache.stats()
    }

    fn check_mutable(&self) -> Result<(), HostError> {
        drop(self.lock_mutable_lane(None)?);
        Ok(())
    }

    /// The lane, locked, provided the registry may be mutated: the worker is open and no
    /// run is outstanding (finished runs are finalized first, without blocking). With
    /// `wait` (the timeout and its deadline), waits for that moment until the deadline.
    fn lock_mutable_lane(
        &self,
        wait: Option<(Duration, Instant)>,
    ) -> Result<IdleLane<'_>, HostError> {
        match wait {
            None => self.shared.lane.lock_idle(),
            Some((timeout, deadline)) => self.shared.lane.lock_idle_within(deadline, timeout),
        }
    }

    /// The identity and context check, then: not closed.
    fn open(&self) -> Result<(), HostError> {
        self.shared.identity.check()?;
        if self.shared.lane.is_closed() {
            return Err(HostError::WorkerClosed);
        }
        Ok(())
    }

    /// Submits a checked run to the lane and wraps its handle.
    fn submit_checked(
        &self,
        callable: Arc<Registered>,
        args: Vec<OwnedArg>,
        plan: crate::config::RunPlan,
        caller: Option<StreamId>,
    ) -> Result<RunHandle, HostError> {
        let (plan, graph) = graph_plan(plan, &callable);
        let cell = self
            .shared
            .lane
            .submit(callable, args, plan, caller, graph)?;
        Ok(RunHandle::new(self.shared.lane.clone(), cell))
    }

    /// Submits `args` (checked) under `graph`, on the lane, as a handle.
    fn submit_graph(
        &self,
        callable: Arc<Registered>,
        args: Vec<OwnedArg>,
        plan: crate::config::RunPlan,
        graph: GraphPlan,
    ) -> Result<RunHandle, HostError> {
        let cell = self.shared.lane.submit(callable, args, plan, None, graph)?;
        Ok(RunHandle::new(self.shared.lane.clone(), cell))
    }

    /// [`submit_with`](Self::submit_with) under `host_build_graph`, keeping the graph: the
    /// run's report carries a [`RecordedRun`] ([`RunReport::recording`]) that
    /// [`replay`](Self::replay) runs again on new arguments of the same shapes, dtypes and
    /// scalars without running the orchestration (`docs/chip-runtime.md` §17). The run
    /// itself executes as any other and fills its outputs.
    ///
    /// # Errors
    /// As `submit_with`; the run fails with [`HostError::InvalidArgument`] (`record`) when
    /// the orchestration calls `get/set_tensor_data` (a replay could not repeat it).
    pub fn submit_record(
        &self,
        id: CallableId,
        args: Vec<OwnedArg>,
        config: &CallConfig,
    ) -> Result<RunHandle, HostError> {
        let (callable, plan) = self.checked_record(id, &args, config)?;
        self.submit_graph(callable, args, plan, GraphPlan::Record(id))
    }

    /// [`run_with`](Self::run_with) under `host_build_graph`, keeping the graph: returns
    /// the [`RecordedRun`] with the run's report (see [`submit_record`](Self::submit_record)).
    ///
    /// # Errors
    /// As `run_with` and `submit_record`.
    pub fn record(
        &self,
        id: CallableId,
        args: &mut [HostArg<'_>],
        config: &CallConfig,
    ) -> Result<(RecordedRun, RunReport), HostError> {
        let plan = self.program_plan(config)?;
        let callable = self.callable(id)?;
        crate::args::check(&callable.name, &callable.signature, args)?;
        let mut report = self.run_lent(callable, args, plan, GraphPlan::Record(id))?;
        let recording = report
            .recording
            .take()
            .expect("a recording run's report carries its recording");
        Ok((recording, report))
    }

    /// The identity and context check, the PROGRAM execution mode, and `config`'s plan.
    fn program_plan(&self, config: &CallConfig) -> Result<crate::config::RunPlan, HostError> {
        self.shared.identity.check()?;
        self.shared.mode.latch(ExecutionMode::Program)?;
        config.plan(self.shared.lane.config())
    }

    fn checked_record(
        &self,
        id: CallableId,
        args: &[OwnedArg],
        config: &CallConfig,
    ) -> Result<(Arc<Registered>, crate::config::RunPlan), HostError> {
        let plan = self.program_plan(config)?;
        let callable = self.callable(id)?;
        crate::args::check_owned(&callable.name, &callable.signature, args)?;
        Ok((callable, plan))
    }

    /// Runs `recording` again on owned `args` (signature order) and returns at once with
    /// the run's handle: the recorded graph image is reused and only the arguments'
    /// addresses are rebound; the orchestration does not run (`docs/chip-runtime.md` §17).
    /// `config` gives the run's other options (trace level, threads).
    ///
    /// # Errors
    /// [`HostError::StaleRecording`] when the recorded callable was unregistered or
    /// registered again; [`HostError::ReplayMismatch`] naming the argument whose shape,
    /// dtype or scalar value differs from the recording's (or when the device tensors
    /// overlap differently); else as [`submit_with`](Self::submit_with).
    pub fn submit_replay(
        &self,
        recording: &RecordedRun,
        args: Vec<OwnedArg>,
        config: &CallConfig,
    ) -> Result<RunHandle, HostError> {
        let (callable, plan) = self.checked_replay(recording, &args, config)?;
        self.submit_graph(
            callable,
            args,
            plan,
            GraphPlan::Replay(recording.image.clone()),
        )
    }

    /// [`submit_replay`](Self::submit_replay) on borrowed `args`, waiting for the run (as
    /// [`run_with`](Self::run_with) does).
    ///
    /// # Errors
    /// As `submit_replay` and `run_with`.
    pub fn replay(
        &self,
        recording: &RecordedRun,
        args: &mut [HostArg<'_>],
        config: &CallConfig,
    ) -> Result<RunReport, HostError> {
        let plan = self.program_plan(config)?;
        let callable = self.recorded_callable(recording)?;
        graph::check_host_args(recording, &callable, args)?;
        crate::args::check(&callable.name, &callable.signature, args)
            .map_err(HostError::for_replay)?;
        let graph = GraphPlan::Replay(recording.image.clone());
        self.run_lent(callable, args, plan, graph)
    }

    /// The callable `recording` was made of, if this worker made it and the callable is
    /// still registered as it was.
    fn recorded_callable(&self, recording: &RecordedRun) -> Result<Arc<Registered>, HostError> {
        let current = self.shared.table.lock().get(recording.callable()).ok();
        let lane = self.shared.lane.lane_generation();
        graph::check_stale(recording, lane, current.as_ref()).cloned()
    }

    fn checked_replay(
        &self,
        recording: &RecordedRun,
        args: &[OwnedArg],
        config: &CallConfig,
    ) -> Result<(Arc<Registered>, crate::config::RunPlan), HostError> {
        let plan = self.program_plan(config)?;
        let callable = self.recorded_callable(recording)?;
        graph::check_args(recording, &callable, args)?;
        crate::args::check_owned(&callable.name, &callable.signature, args)
            .map_err(HostError::for_replay)?;
        Ok((callable, plan))
    }

    fn callable(&self, id: CallableId) -> Result<Arc<Registered>, HostError> {
        self.shared.table.lock().get(id)
    }

    /// Submits a run of a registered callable on owned `args` (signature order) to the lane
    /// and returns at once with its handle; the run is prepared and launched now when a
    /// pipeline slot is free. When the lane already holds two runs, this call first drives
    /// the oldest to completion. A run whose host buffers overlap those of a run still in
    /// the lane (by address range), one of the two writing them (`Out`/`InOut`), is staged
    /// only once that run is finalized, its outputs copied back: chained submits on shared
    /// buffers give the sequential result. Claims the PROGRAM execution mode.
    ///
    /// # Errors
    /// Argument errors (synchronously, before anything touches the device; a device tensor
    /// outside this worker's allocations is [`HostError::InvalidDevicePointer`]),
    /// [`HostError::UnknownCallable`], [`HostError::DeviceUnusable`] when admission is
    /// closed, [`HostError::LanePoisoned`] at once (never after a wait) while an earlier
    /// run's partial launch awaits its drain, [`HostError::InvalidState`] in a KERNEL
    /// context, [`HostError::WorkerClosed`], [`HostError::ExecutionContextRefused`].
    /// Failures of the run itself are the handle's.
    pub fn submit(&self, id: CallableId, args: Vec<OwnedArg>) -> Result<RunHandle, HostError> {
        self.submit_with(id, args, &CallConfig::default())
    }

    /// [`submit`](ChipWorker::submit) with per-run options (ring sizing, AICPU threads).
    ///
    /// # Errors
    /// As `submit`, plus [`HostError::InvalidConfig`] naming the bad option.
    pub fn submit_with(
        &self,
        id: CallableId,
        args: Vec<OwnedArg>,
        config: &CallConfig,
    ) -> Result<RunHandle, HostError> {
        let plan = self.program_plan(config)?;
        let callable = self.callable(id)?;
        crate::args::check_owned(&callable.name, &callable.signature, &args)?;
        self.submit_checked(callable, args, plan, None)
    }

    /// Launches a run on the caller's stream `caller` (`simpler_launch_run_on_stream`):
    /// ordered after the work the caller queued on it before this call, and before the work
    /// it queues after this call returns (design: caller → Start → the run's two kernels →
    /// the caller waits the run's whole-operator boundary → Tail). A successful return means
    /// the run is actually enqueued (predecessors are drained first when no slot is free);
    /// launch errors are returned here, not deferred to the handle. `wait`/`result` still
    /// give the run's verdict. Claims the KERNEL execution mode.
    ///
    /// The caller orders its input writes before this call, serializes its submissions, keeps
    /// the stream and the buffers alive until the run is finalized, and consumes outputs only
    /// behind the Tail (work queued on `caller` after this call) — never merely because this
    /// call failed. [`OwnedArg::Device`] passes device tensors in place.
    ///
    /// # Errors
    /// As [`submit_with`](Self::submit_with) (with [`HostError::InvalidState`] in a PROGRAM
    /// context), [`HostError::InvalidArgument`] (`caller_stream`) for an unknown stream, and
    /// the launch's own error.
    pub fn submit_on_stream(
        &self,
        id: CallableId,
        args: Vec<OwnedArg>,
        config: &CallConfig,
        caller: StreamId,
    ) -> Result<RunHandle, HostError> {
        self.shared.identity.check()?;
        if self.shared.mode.latched_mode() == Some(ExecutionMode::Program) {
            // The latch's own refusal, before anything else is looked at.
            self.shared.mode.latch(ExecutionMode::Kernel)?;
        }
        let plan = config.plan(self.shared.lane.config())?;
        let callable = self.callable(id)?;
        crate::args::check_owned(&callable.name, &callable.signature, &args)?;
        if let Err(e) = self.device().query_stream(caller) {
            return Err(HostError::InvalidArgument {
                arg: "caller_stream".into(),
                reason: format!("not a usable stream of this device: {e}"),
            });
        }
        if self.shared.lane.owns_stream(caller) {
            return Err(HostError::InvalidArgument {
                arg: "caller_stream".into(),
                reason: "is one of this worker's own run streams; lend a stream the caller \
                         created"
                    .into(),
            });
        }
        // Claimed only by a launch that passed every check, so a refused one leaves an
        // unlatched worker unlatched.
        self.shared.mode.latch(ExecutionMode::Kernel)?;
        self.submit_checked(callable, args, plan, Some(caller))
    }

    /// Runs a registered callable on `args` (signature order) and waits for it.
    ///
    /// The run borrows the caller's buffers: `In` and `InOut` tensors are staged to the
    /// device straight from `args`, and after a successful run `Out` and `InOut` tensors are
    /// copied straight back into them (one copy each way). A run that fails leaves every host
    /// buffer untouched — except that a copy back failing part-way leaves the outputs copied
    /// before it written. The worker stays usable unless the device's state could not be
    /// proven.
    ///
    /// # Errors
    /// Argument errors (before anything touches the device), [`HostError::RunFailed`] with
    /// the runtime's code and message, [`HostError::Timeout`], [`HostError::DeviceFault`],
    /// [`HostError::DeviceUnusable`], [`HostError::RunUndecided`],
    /// [`HostError::RunPreparationRefused`], and the refusals of `submit`.
    pub fn run(&self, id: CallableId, args: &mut [HostArg<'_>]) -> Result<RunReport, HostError> {
        self.run_with(id, args, &CallConfig::default())
    }

    /// [`run`](ChipWorker::run) with per-run options (ring sizing, AICPU threads).
    ///
    /// # Errors
    /// As `run`, plus [`HostError::InvalidConfig`] naming the bad option.
    pub fn run_with(
        &self,
        id: CallableId,
        args: &mut [HostArg<'_>],
        config: &CallConfig,
    ) -> Result<RunReport, HostError> {
        let plan = self.program_plan(config)?;
        let callable = self.callable(id)?;
        crate::args::check(&callable.name, &callable.signature, args)?;
        let (plan, graph) = graph_plan(plan, &callable);
        self.run_lent(callable, args, plan, graph)
    }

    /// Runs checked borrowed `args` under `graph` and waits for the run.
    fn run_lent(
        &self,
        callable: Arc<Registered>,
        args: &mut [HostArg<'_>],
        plan: crate::config::RunPlan,
        graph: GraphPlan,
    ) -> Result<RunReport, HostError> {
        let lent: Vec<OwnedArg> = args
            .iter_mut()
            .map(|a| match a {
                HostArg::Tensor(t) => OwnedArg::Tensor {
                    // SAFETY: `t.bytes` stays borrowed for this whole call, and the call
                    // returns (or unwinds) only once the run is terminal: a refused submit
                    // never admits the run, and an admitted one is waited for below under
                    // `AbortUnlessTerminal`.
                    buffer: Box::new(unsafe { BorrowedBytes::new(t.bytes) }),
                    shape: t.shape.clone(),
                    dtype: t.dtype,
                },
                HostArg::Scalar(v) => OwnedArg::Scalar(*v),
            })
            .collect();
        let lane = &self.shared.lane;
        let cell = lane.submit(callable, lent, plan, None, graph)?;
        let _terminal = AbortUnlessTerminal(|| cell.is_done());
        lane.wait_until_terminal(&cell);
        cell.outcome()
    }

    /// Allocates `size` bytes of zeroed device memory. The allocation is recorded: runs
    /// take device tensors ([`OwnedArg::Device`]) only inside allocations made here.
    ///
    /// # Errors
    /// A device error (zero or huge size, out of memory), a refused context, or
    /// [`HostError::WorkerClosed`].
    pub fn malloc(&self, size: u64) -> Result<DevicePtr, HostError> {
        self.open()?;
        self.shared.lane.malloc(size)
    }

    /// Frees device memory from [`malloc`](ChipWorker::malloc). Runs that have finished are
    /// finalized first; memory a queued or running run still uses is not freed.
    ///
    /// # Errors
    /// [`HostError::DeviceMemoryInUse`] while a run uses the allocation (wait for the run,
    /// then free), a device error (unknown pointer, double free), or a refused context.
    pub fn free(&self, ptr: DevicePtr) -> Result<(), HostError> {
        self.open()?;
        self.shared.lane.free(ptr)
    }

    /// Makes `len` bytes at `ptr`, memory mapped by the caller (a comm domain's shared
    /// window region, `docs/comm.md` §2), usable as device memory of this chip: runs take
    /// device tensors ([`OwnedArg::Device`]) inside it in place, and
    /// [`copy_to`](ChipWorker::copy_to) / [`copy_from`](ChipWorker::copy_from) reach it. The
    /// chip never frees it; [`release_window`](ChipWorker::release_window) forgets it.
    ///
    /// # Safety
    /// The `len` bytes at `ptr` are mapped, readable and writable, and stay so until
    /// `release_window(ptr)` has returned `Ok`; on the sim a device address is a host address
    /// of this process.
    ///
    /// # Errors
    /// [`HostError::InvalidArgument`] (`window`) for an empty range or one overlapping memory
    /// this chip knows; a refused context; [`HostError::WorkerClosed`].
    pub unsafe fn import_window(&self, ptr: *mut u8, len: u64) -> Result<DevicePtr, HostError> {
        self.open()?;
        let ptr = DevicePtr::from_raw(ptr as u64);
        self.shared.lane.import_window(ptr, len)?;
        Ok(ptr)
    }

    /// Forgets the window [`import_window`](ChipWorker::import_window) made at `ptr`: no later
    /// run may name it. Finished runs are finalized first.
    ///
    /// # Errors
    /// [`HostError::DeviceMemoryInUse`] while a queued or running run uses it (nothing is
    /// forgotten); [`HostError::InvalidArgument`] (`window`) for no imported window.
    pub fn release_window(&self, ptr: DevicePtr) -> Result<(), HostError> {
        self.open()?;
        self.shared.lane.release_window(ptr)
    }

    /// Copies host bytes to device memory.
    ///
    /// # Errors
    /// A device error when the range is not inside one live allocation, or a refused
    /// context.
    pub fn copy_to(&self, dst: DevicePtr, src: &[u8]) -> Result<(), HostError> {
        self.open()?;
        if self.shared.lane.in_window(dst, src.len() as u64) {
            // SAFETY: `in_window` found the range inside an imported window, which its
            // importer keeps mapped and writable until it is released (`import_window`).
            unsafe { std::ptr::copy(src.as_ptr(), dst.addr() as *mut u8, src.len()) };
            return Ok(());
        }
        self.device()
            .copy_to_device(dst, src)
            .map_err(HostError::device("copying to the device"))
    }

    /// Copies device memory to host bytes.
    ///
    /// # Errors
    /// A device error when the range is not inside one live allocation, or a refused
    /// context.
    pub fn copy_from(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), HostError> {
        self.open()?;
        if self.shared.lane.in_window(src, dst.len() as u64) {
            // SAFETY: as in `copy_to`: the range lies inside a mapped imported window.
            unsafe { std::ptr::copy(src.addr() as *const u8, dst.as_mut_ptr(), dst.len()) };
            return Ok(());
        }
        self.device()
            .copy_from_device(dst, src)
            .map_err(HostError::device("copying from the device"))
    }

    /// Closes the worker: validated first (a refused close changes nothing), then CLOSED for
    /// good — queued runs end with [`HostError::WorkerClosed`], launched runs are drained,
    /// and every resource is freed (after a forced reset if an owned device is unusable; a
    /// borrowed device is only synchronized on its bound streams). Closing again is a no-op,
    /// or retries a cleanup that was incomplete.
    ///
    /// # Errors
    /// [`HostError::ExecutionContextRefused`] (the worker stays as it was),
    /// [`HostError::CleanupIncomplete`] (the worker is closed; what could not be freed is
    /// kept; call `close()` again to retry).
    pub fn close(&self) -> Result<(), HostError> {
        self.shared.identity.check()?;
        let _ctx = self.shared.context.lock();
        self.shared.lane.close()
    }
}

impl Drop for ChipWorker {
    fn drop(&mut self) {
        // A forked child does no device cleanup and takes no lock.
        if !self.shared.identity.in_creating_process() {
            return;
        }
        self.shared.lane.detach();
    }
}

#[cfg(all(test, not(feature = "loom")))]
pub(crate) mod tests {
    use super::*;
    use crate::{ArgDirection, ArgSpec, CodeImage, KernelSpec, Signature};
    use simpler_abi::{CoreType, DataType, OrchArgs, OrchOps};
    use simpler_device::Topology;
    use std::time::Duration;

    unsafe extern "C-unwind" fn empty_orch(_: *const OrchOps, _: *const OrchArgs) -> i32 {
        0
    }
    unsafe extern "C-unwind" fn no_kernel(_: *mut i64) {}

    pub(crate) fn empty_spec() -> CallableSpec {
        CallableSpec {
            name: "empty".into(),
            signature: Signature::new(vec![ArgSpec {
                name: "x".into(),
                direction: ArgDirection::InOut,
                dtype: DataType::Float32,
                shape: None,
            }])
            .unwrap(),
            orchestration: CodeImage::Orchestration(empty_orch),
            kernels: vec![KernelSpec {
                func_id: 0,
                core_type: CoreType::Aiv,
                image: CodeImage::Kernel(no_kernel),
                name: None,
            }],
            runtime: None,
        }
    }

    pub(crate) fn small_worker() -> ChipWorker {
        ChipWorker::new(WorkerConfig {
            topology: Topology {
                clusters: 1,
                aicpu_threads: 2,
            },
            heap_size: 1 << 16,
            run_timeout: Duration::from_secs(30),
            ..WorkerConfig::default()
        })
        .unwrap()
    }

    pub(crate) fn one_arg() -> Vec<OwnedArg> {
        vec![OwnedArg::Tensor {
            buffer: Box::new(vec![0u8; 64]),
            shape: vec![16],
            dtype: DataType::Float32,
        }]
    }

    /// The synchronous run lends the caller's slices to the lane — staged from them, copied
    /// back into them, no owned copy in between: the run in flight holds exactly the
    /// caller's byte range.
    #[test]
    fn the_synchronous_run_stages_from_and_copies_back_into_the_callers_slices() {
        use simpler_device::sim::{FaultAction, FaultPoint, FaultRule};
        let dev = Arc::new(
            SimDevice::new(Topology {
                clusters: 1,
                aicpu_threads: 2,
            })
            .unwrap(),
        );
        // The run's AICPU kernel lingers, so the run stays in the lane for a while.
        dev.inject(FaultRule {
            point: FaultPoint::AicpuKernel,
            skip: 0,
            times: 1,
            action: FaultAction::SlowFinish(Duration::from_millis(300)),
        });
        let config = WorkerConfig {
            heap_size: 1 << 16,
            run_timeout: Duration::from_secs(30),
            ..WorkerConfig::default()
        };
        let w = ChipWorker::with_device(config, dev).unwrap();
        let id = w.register(&empty_spec()).unwrap();
        let mut x = vec![7u8; 64];
        let caller_range = (x.as_ptr() as usize, x.as_ptr() as usize + x.len());
        let seen = std::thread::scope(|s| {
            let runner = s.spawn(|| {
                let mut args = [HostArg::Tensor(crate::HostTensor {
                    bytes: &mut x,
                    shape: vec![16],
                    dtype: DataType::Float32,
                })];
                w.run(id, &mut args).map(drop)
            });
            let seen = loop {
                let held = w.shared.lane.host_ranges_in_flight();
                if !held.is_empty() || runner.is_finished() {
                    break held;
                }
                std::thread::yield_now();
            };
            runner.join().unwrap().unwrap();
            seen
        });
        assert_eq!(seen, vec![caller_range]);
        assert_eq!(x, vec![7u8; 64], "the InOut tensor came back unchanged");
        w.close().unwrap();
    }

    /// A real `fork()` while another thread holds every worker lock: in the child, every
    /// handle and worker operation refuses without taking a lock (a lock taken would hang
    /// the child: its holder does not exist there); the parent continues.
    #[test]
    fn a_forked_child_refuses_everything_before_any_lock_and_the_parent_continues() {
        let w = small_worker();
        let id = w.register(&empty_spec()).unwrap();
        let done = w.submit(id, one_arg()).unwrap();
        done.wait(None).unwrap();
        let ptr = w.malloc(64).unwrap();
        let shared = w.shared.clone();
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _ctx = shared.context.lock();
            let _lane = shared.lane.lock_for_tests();
            let _table = shared.table.lock();
            locked_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        locked_rx.recv().unwrap();
        let child_ok = crate::fault_monitor::in_forked_child(|| {
            let refused =
                |r: Result<(), HostError>| matches!(r, Err(HostError::ExecutionContextRefused(_)));
            let mut buf = [0u8; 4];
            let mut out = -7;
            let checks = [
                refused(w.submit(id, one_arg()).map(drop)),
                refused(w.register(&empty_spec()).map(drop)),
                refused(w.register_v2(&empty_spec(), &mut out)),
                out == -1,
                refused(w.unregister(id)),
                refused(w.registered_callable(id).map(drop)),
                refused(w.malloc(64).map(drop)),
                refused(w.free(ptr)),
                refused(w.copy_to(ptr, &buf)),
                refused(w.copy_from(&mut buf, ptr)),
                refused(w.close()),
                refused(w.recover_device()),
                refused(w.state().map(drop)),
                refused(w.health().map(drop)),
                // Inherited handles refuse too, cached status included.
                refused(done.wait(None)),
                refused(done.try_poll().map(drop)),
                !done.poll(),
                w.unusable_reason()
                    .is_some_and(|m| m.contains("forked child")),
            ];
            let ok = checks.iter().all(|&c| c);
            // The child never drops the parent's worker (Drop is a no-op there anyway).
            std::mem::forget(done);
            ok
        });
        release_tx.send(()).unwrap();
        holder.join().unwrap();
        assert!(child_ok, "the child did not refuse every operation");
        // The parent continues.
        w.submit(id, one_arg()).unwrap().wait(None).unwrap();
        w.free(ptr).unwrap();
        w.close().unwrap();
    }
}

/// The run's runtime variant resolved against its callable's, and how it gets its graph.
fn graph_plan(
    plan: crate::config::RunPlan,
    callable: &Registered,
) -> (crate::config::RunPlan, GraphPlan) {
    let plan = plan.for_callable(callable.runtime);
    let graph = match plan.runtime {
        crate::Runtime::TensormapAndRingbuffer => GraphPlan::Device,
        crate::Runtime::HostBuildGraph => GraphPlan::Build,
    };
    (plan, graph)
}

/// `timeout` from now; a timeout too long to represent waits (practically) forever.
fn deadline_after(timeout: Duration) -> Instant {
    simpler_device::deadline::deadline_from(Instant::now(), timeout)
}
