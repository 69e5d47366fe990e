//! [`LaneHandle`]: the lane's lock, its progress condvar and the operations the worker and
//! every run handle call — admission, non-blocking poll, bounded wait (the driver loop), and
//! the read-only views (state, admission, health).
//!
//! The handle checks nothing about the environment itself: callers run the identity check
//! of [`crate::lifecycle`] first (before any lock), with the identity the lane keeps for
//! them ([`LaneHandle::identity`]).

use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use simpler_device::{Device, DevicePtr, StreamId};

use super::memory::DeviceRange;
use crate::args::OwnedArg;
use crate::config::RunPlan;
use crate::fault_monitor::FaultMonitor;
use crate::health::HealthReport;
use crate::lifecycle::{EnvironmentIdentity, WorkerState};
use crate::loader::UnloadGate;
use crate::registry::Registered;
use crate::worker_config::WorkerConfig;
use crate::HostError;

use super::alias;
use super::driver::Driver;
use super::queue::{Phase, LANE_CAPACITY};
use super::run::{RunCell, RunRequest, RunState, Stage};
use super::{Guard, LaneEngine, Progress, StagingReport, EPOCHS};

struct LaneShared {
    device: Arc<dyn Device>,
    config: WorkerConfig,
    /// The worker's identity, for the checks its run handles make before any lock.
    identity: EnvironmentIdentity,
    /// The lane's own stream pair (fixed for its life): never a caller's stream.
    streams: crate::identity::StreamPair,
    engine: Mutex<LaneEngine>,
    /// Signalled whenever the lane makes progress (runs end, a driver finishes).
    progress: Condvar,
    /// Set once the lane left OPEN (closed or detached): device-memory calls refuse too.
    closed: AtomicBool,
    /// The engine's count of give-ups, for the worker's image cache.
    unload_gate: Arc<UnloadGate>,
}

/// A shared handle on one worker's lane. Cloning is cheap; every clone drives the same lane.
#[derive(Clone)]
pub(crate) struct LaneHandle {
    shared: Arc<LaneShared>,
}

/// The lane, locked while no run is outstanding and the worker is open: holding it keeps
/// every submit out (the registry's commit point).
pub(crate) struct IdleLane<'a> {
    _engine: Guard<'a>,
}

impl LaneHandle {
    /// Brings up the lane on `device` (streams, heap, slots) and takes a reference on the
    /// process's fault monitor so the lane reads the device's fault notices; a monitor that
    /// cannot be installed only warns (the lane then reads no notice).
    ///
    /// # Errors
    /// The device error of the lane's resource allocation.
    pub(crate) fn open(
        device: Arc<dyn Device>,
        config: WorkerConfig,
        identity: EnvironmentIdentity,
    ) -> Result<LaneHandle, HostError> {
        let mut engine = LaneEngine::new(device.clone(), config.clone(), identity.ownership)?;
        let monitor = FaultMonitor::global();
        match monitor.acquire(&*device) {
            Ok(()) => engine.watch_notices(monitor.cursor_from_now()),
            // Not fatal: the worker runs without notices (silence is not health).
            Err(e) => tracing::warn!(error = %e, "cannot install the fault callback"),
        }
        let streams = engine.resources.streams;
        let unload_gate = engine.unload_gate.clone();
        Ok(LaneHandle {
            shared: Arc::new(LaneShared {
                device,
                config,
                identity,
                streams,
                engine: Mutex::new(engine),
                progress: Condvar::new(),
                closed: AtomicBool::new(false),
                unload_gate,
            }),
        })
    }

    /// The worker's identity, checked first by every worker and handle operation.
    pub(crate) fn identity(&self) -> &EnvironmentIdentity {
        &self.shared.identity
    }

    /// True if `stream` is one of the lane's own two run streams (which a caller cannot
    /// lend: its runs are already ordered on them).
    pub(crate) fn owns_stream(&self, stream: simpler_device::StreamId) -> bool {
        let s = self.shared.streams;
        stream == s.aicore || stream == s.aicpu
    }

    /// The count of runs given up on, which the worker's image cache reads (`loader`).
    pub(crate) fn unload_gate(&self) -> &Arc<UnloadGate> {
        &self.shared.unload_gate
    }

    /// The device the lane drives.
    pub(crate) fn device(&self) -> &Arc<dyn Device> {
        &self.shared.device
    }

    /// The worker's configuration (with the device's topology).
    pub(crate) fn config(&self) -> &WorkerConfig {
        &self.shared.config
    }

    /// Whether the lane left OPEN (closed or detached); never blocks.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.closed.load(AtomicOrdering::Acquire)
    }

    pub(super) fn set_closed(&self) {
        self.shared.closed.store(true, AtomicOrdering::Release);
    }

    pub(super) fn lock(&self) -> Guard<'_> {
        self.shared.engine.lock()
    }

    pub(super) fn notify_progress(&self) {
        self.shared.progress.notify_all();
    }

    /// Sleeps until a driver signals progress.
    pub(super) fn wait_for_progress(&self, lane: &mut Guard<'_>) {
        self.shared.progress.wait(lane);
    }

    /// Open, closed (with or without cleanup debt), or detached.
    pub(crate) fn state(&self) -> WorkerState {
        self.lock().state
    }

    /// Why new runs are refused, if they are.
    pub(crate) fn admission_refusal(&self) -> Option<String> {
        self.lock().admission_refusal()
    }

    /// The device health of this generation.
    pub(crate) fn health(&self) -> HealthReport {
        self.lock().health_report()
    }

    /// The lane's generation: unique in the process, one per worker (a recording is bound
    /// to the lane that made it).
    pub(crate) fn lane_generation(&self) -> u64 {
        self.lock().generation
    }

    /// The staging memory the lane holds between runs.
    pub(crate) fn staging_report(&self) -> StagingReport {
        self.lock().staging_report()
    }

    /// Whether the lane reads the device's fault notices.
    pub(crate) fn watches_notices(&self) -> bool {
        self.lock().cursor.is_some()
    }

    /// The lane, locked, provided the worker is open and no run is outstanding (finished
    /// runs are finalized first, without blocking).
    ///
    /// # Errors
    /// [`HostError::WorkerClosed`], or [`HostError::InvalidState`] with the number of runs
    /// outstanding.
    pub(crate) fn lock_idle(&self) -> Result<IdleLane<'_>, HostError> {
        self.poll_progress();
        let lane = self.lock();
        if lane.is_closed() {
            return Err(HostError::WorkerClosed);
        }
        match lane.outstanding() {
            0 => Ok(IdleLane { _engine: lane }),
            n => Err(HostError::InvalidState(format!(
                "{n} run(s) are outstanding; the callable registry is not mutated while a run \
                 is outstanding"
            ))),
        }
    }

    /// [`lock_idle`](Self::lock_idle), waiting until `deadline` for a moment with no run
    /// outstanding: this thread drives the lane's runs meanwhile, and new submits wait
    /// behind it (at most until `deadline`) so the lane drains even while other threads keep
    /// running.
    ///
    /// # Errors
    /// [`HostError::WorkerClosed`]; [`HostError::RegistryBusy`] naming how many runs were
    /// still outstanding at `deadline` (`timeout`, how long it waited).
    pub(crate) fn lock_idle_within(
        &self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<IdleLane<'_>, HostError> {
        self.poll_progress();
        let mut lane = self.lock();
        lane.registry_waiters += 1;
        let result = loop {
            if lane.is_closed() {
                break Err(HostError::WorkerClosed);
            }
            match lane.outstanding() {
                0 => break Ok(()),
                n if Instant::now() >= deadline => {
                    break Err(HostError::RegistryBusy {
                        outstanding: n,
                        waited: timeout,
                    })
                }
                _ => {
                    let _ = self.drive_once(&mut lane, Some(deadline));
                }
            }
        };
        lane.registry_waiters -= 1;
        // Submits held behind this registration go on.
        self.notify_progress();
        result.map(|()| IdleLane { _engine: lane })
    }

    /// Admits a run (arguments already checked against the signature; device tensors are
    /// checked here against the worker's allocations) and prepares and
    /// launches it if a slot is free and it shares no written host buffer with a run still
    /// in the lane (`alias`); a full lane is driven first. A caller launch
    /// (`caller`) returns only once the run is enqueued, with its launch error if it has one.
    ///
    /// # Errors
    /// [`HostError::WorkerClosed`], [`HostError::InvalidDevicePointer`] naming the device
    /// tensor outside the worker's allocations, [`HostError::DeviceUnusable`] when admission
    /// is closed, [`HostError::LanePoisoned`] at once while a partial launch awaits its drain
    /// (what finalizes without waiting is finalized first), and for a caller launch the
    /// launch's own error.
    pub(crate) fn submit(
        &self,
        callable: Arc<Registered>,
        args: Vec<OwnedArg>,
        plan: RunPlan,
        caller: Option<StreamId>,
        graph: super::graph::GraphPlan,
    ) -> Result<Arc<RunCell>, HostError> {
        let host_ranges = alias::host_ranges(&callable.signature, &args);
        let mut lane = self.lock();
        if lane.is_closed() {
            return Err(HostError::WorkerClosed);
        }
        let device_ranges = lane.memory.check_device_args(&callable.signature, &args)?;
        // A registration waiting for the lane to drain goes first (it waits a bounded time).
        while lane.registry_waiters > 0 && !lane.is_closed() {
            self.wait_for_progress(&mut lane);
        }
        loop {
            if lane.is_closed() {
                return Err(HostError::WorkerClosed);
            }
            if lane.queue.is_poisoned() && !lane.queue.is_empty() && !lane.driving {
                // A launch that left unproven work closed admission. Only what finalizes
                // without waiting is done here: the failed run's bounded drain is never this
                // caller's to sit through (its own handle's wait, or close, drives it).
                while Driver::new(&mut lane, false).finalize_front(None) == Progress::Finalized {}
                self.pump(&mut lane);
                self.notify_progress();
            }
            if let Some(why) = lane.admission_refusal() {
                return Err(HostError::DeviceUnusable(why));
            }
            if lane.queue.is_poisoned() && lane.queue.is_empty() {
                lane.queue.clear_poison();
            }
            if lane.queue.is_poisoned() {
                return Err(HostError::LanePoisoned(
                    "admission is closed: an earlier run's launch left work on the device that \
                     its drain has not proven finished yet (wait for that run, or close the \
                     worker)"
                        .into(),
                ));
            }
            if lane.queue.len() < LANE_CAPACITY {
                break;
            }
            // Full: drive the front (back-pressure).
            let _ = self.drive_once(&mut lane, None);
        }
        let dispatch = lane.next_dispatch;
        lane.next_dispatch += 1;
        let cell = Arc::new(RunCell::new(
            EPOCHS.fetch_add(1, AtomicOrdering::Relaxed),
            dispatch,
        ));
        let run = RunState::queued(RunRequest {
            cell: cell.clone(),
            callable,
            plan,
            args,
            caller,
            host_ranges,
            device_ranges,
            capture: crate::trace::RunCapture::new(plan.trace_level),
            graph,
            graph_image: None,
        });
        lane.queue
            .admit(dispatch, run)
            .expect("admission was checked under the lock");
        self.pump(&mut lane);
        if caller.is_some() {
            // A caller launch returns only once the run is actually enqueued (or with its
            // launch error): drain predecessors until a slot frees up.
            while let Some(Phase::Queued | Phase::Prepared) = lane.queue.phase(dispatch) {
                if lane.is_closed() {
                    break; // a concurrent close ends the run
                }
                let _ = self.drive_once(&mut lane, None);
            }
            let launch_error = lane
                .queue
                .get_mut(dispatch)
                .and_then(|run| match &run.stage {
                    Stage::Failed(f) => Some(f.error.clone()),
                    Stage::Launched(l) => l.launch.error().cloned(),
                    Stage::Queued | Stage::Prepared(_) => None,
                });
            if let Some(e) = launch_error {
                self.pump(&mut lane);
                self.notify_progress();
                return Err(e);
            }
            if cell.is_done() {
                cell.outcome()?;
            }
        }
        self.notify_progress();
        Ok(cell)
    }

    /// Allocates `size` bytes of device memory and records the allocation (device tensors
    /// are checked against it).
    ///
    /// # Errors
    /// The device's allocation error.
    pub(crate) fn malloc(&self, size: u64) -> Result<DevicePtr, HostError> {
        let ptr = self
            .device()
            .malloc(size)
            .map_err(HostError::device(format!("allocating {size} bytes")))?;
        self.lock().memory.record(ptr, size);
        Ok(ptr)
    }

    /// Records `size` bytes at `ptr`, memory the caller mapped, as an imported comm window:
    /// device tensors of later runs may lie inside it (`docs/comm.md` §2).
    ///
    /// # Errors
    /// [`HostError::InvalidArgument`] (`window`) for an empty range or one overlapping a live
    /// allocation or window.
    pub(crate) fn import_window(&self, ptr: DevicePtr, size: u64) -> Result<(), HostError> {
        let mut lane = self.lock();
        let end = ptr.addr().checked_add(size).filter(|_| size > 0);
        let Some(end) = end else {
            return Err(HostError::InvalidArgument {
                arg: "window".into(),
                reason: format!("{size} bytes at {:#x} is no usable range", ptr.addr()),
            });
        };
        let range = DeviceRange {
            start: ptr.addr(),
            end,
        };
        if lane.memory.overlapping(&range) {
            return Err(HostError::InvalidArgument {
                arg: "window".into(),
                reason: format!(
                    "{size} bytes at {:#x} overlap memory this chip already knows",
                    ptr.addr()
                ),
            });
        }
        lane.memory.record_window(ptr, size);
        Ok(())
    }

    /// Forgets the imported window at `ptr`, unless a run still in the lane (or one given up
    /// on) uses it; finished runs are finalized first.
    ///
    /// # Errors
    /// [`HostError::DeviceMemoryInUse`] while a run uses it; [`HostError::InvalidArgument`]
    /// (`window`) when `ptr` is no imported window.
    pub(crate) fn release_window(&self, ptr: DevicePtr) -> Result<(), HostError> {
        self.poll_progress();
        let mut lane = self.lock();
        let window = lane
            .memory
            .allocation(ptr)
            .filter(|_| lane.memory.is_window(ptr));
        let Some(window) = window else {
            return Err(HostError::InvalidArgument {
                arg: "window".into(),
                reason: format!("{:#x} is no imported window of this chip", ptr.addr()),
            });
        };
        let runs = lane.runs_using(&window);
        if runs > 0 {
            return Err(HostError::DeviceMemoryInUse {
                ptr: ptr.addr(),
                runs,
            });
        }
        lane.memory.forget(ptr);
        Ok(())
    }

    /// True when `[ptr, ptr + len)` lies inside an imported window.
    pub(crate) fn in_window(&self, ptr: DevicePtr, len: u64) -> bool {
        self.lock().memory.window_holding(ptr, len).is_some()
    }

    /// Frees device memory, unless a run still in the lane (or one given up on) uses the
    /// allocation; finished runs are finalized first, without blocking.
    ///
    /// # Errors
    /// [`HostError::DeviceMemoryInUse`] with the number of runs using it (nothing is freed),
    /// or the device's error (unknown pointer, double free).
    pub(crate) fn free(&self, ptr: DevicePtr) -> Result<(), HostError> {
        self.poll_progress();
        let mut lane = self.lock();
        if lane.memory.is_window(ptr) {
            return Err(HostError::InvalidArgument {
                arg: "ptr".into(),
                reason: format!(
                    "{:#x} is an imported comm window, not an allocation of malloc; it is \
                     released with its domain",
                    ptr.addr()
                ),
            });
        }
        if let Some(allocation) = lane.memory.allocation(ptr) {
            let runs = lane.runs_using(&allocation);
            if runs > 0 {
                return Err(HostError::DeviceMemoryInUse {
                    ptr: ptr.addr(),
                    runs,
                });
            }
        }
        lane.device
            .free(ptr)
            .map_err(HostError::device("freeing device memory"))?;
        lane.memory.forget(ptr);
        Ok(())
    }

    /// Non-blocking progress for a poll: never waits, not even for the lane lock.
    pub(crate) fn poll_progress(&self) {
        let Some(mut lane) = self.shared.engine.try_lock() else {
            return;
        };
        if lane.driving {
            return;
        }
        let mut changed = false;
        while Driver::new(&mut lane, false).finalize_front(None) == Progress::Finalized {
            changed = true;
        }
        self.pump(&mut lane);
        if changed {
            self.notify_progress();
        }
    }

    /// Drives the lane until `cell` is terminal or `deadline` passes.
    ///
    /// # Errors
    /// [`HostError::WaitTimeout`] (with `timeout`) when the deadline passed first.
    pub(crate) fn wait_for(
        &self,
        cell: &RunCell,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Result<(), HostError> {
        let mut lane = self.lock();
        while !cell.is_done() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(HostError::WaitTimeout(timeout.unwrap_or_default()));
            }
            if self.drive_once(&mut lane, deadline).is_err() && !cell.is_done() {
                return Err(HostError::WaitTimeout(timeout.unwrap_or_default()));
            }
        }
        Ok(())
    }

    /// Drives the lane until `cell` is terminal, however long that takes (the worker's run
    /// timeout bounds it on the device side).
    pub(crate) fn wait_until_terminal(&self, cell: &RunCell) {
        while !cell.is_done() {
            // Without a deadline the only early return is the rare wake-up of a fence wait
            // that ran out just short of the run timeout: wait again.
            let _ = self.wait_for(cell, None, None);
        }
    }

    /// One turn of the driver: finalizes the front (blocking), or sleeps while another
    /// thread drives. `Err` only when `deadline` passed.
    pub(super) fn drive_once(
        &self,
        lane: &mut Guard<'_>,
        deadline: Option<Instant>,
    ) -> Result<(), ()> {
        if lane.driving {
            match deadline {
                Some(d) => {
                    if self.shared.progress.wait_until(lane, d).timed_out() {
                        return Err(());
                    }
                }
                None => self.shared.progress.wait(lane),
            }
            return Ok(());
        }
        lane.driving = true;
        let progress = Driver::new(lane, true).finalize_front(deadline);
        lane.driving = false;
        self.pump(lane);
        self.notify_progress();
        match progress {
            Progress::UserTimeout => Err(()),
            Progress::Finalized | Progress::WouldBlock => Ok(()),
        }
    }

    /// Launches whatever can go ([`LaneEngine::pump`]), then starts the background drain of
    /// every run whose launch just left unproven work behind (graded Partial): admission
    /// stays closed until that drain proves the device quiet or gives the run up, and no
    /// caller's submit ever sits through it. A drain thread that cannot be started leaves
    /// the drain to the failed run's own wait, or to close.
    pub(super) fn pump(&self, lane: &mut Guard<'_>) {
        lane.pump();
        for cell in lane.background_drains.drain(..) {
            let handle = self.clone();
            let started = std::thread::Builder::new()
                .name("simpler-lane-drain".into())
                .spawn(move || handle.wait_until_terminal(&cell));
            if let Err(e) = started {
                tracing::warn!(error = %e, "cannot start the background drain of a failed launch");
            }
        }
    }

    /// The host byte ranges (`[start, end)`) the runs in the lane hold, front first.
    #[cfg(all(test, not(feature = "loom")))]
    pub(crate) fn host_ranges_in_flight(&self) -> Vec<(usize, usize)> {
        let lane = self.lock();
        lane.queue
            .phases()
            .into_iter()
            .filter_map(|(d, _)| lane.queue.get(d))
            .flat_map(|run| run.request.host_ranges.iter().map(|r| (r.start, r.end)))
            .collect()
    }

    /// The engine, locked (tests hold it to race other operations against it).
    #[cfg(all(test, not(feature = "loom")))]
    pub(crate) fn lock_for_tests(&self) -> Guard<'_> {
        self.lock()
    }
}
