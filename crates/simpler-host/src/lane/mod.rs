//! The run lane: prepare → launch → drain → finalize for every run of a worker, pipelined up
//! to the launch depth (`docs/lane.md` §3–§11).
//!
//! - **Prepare** stages the host tensors and publishes the slot's descriptor, arguments and
//!   func tables (the slot is idle: its previous run was retired).
//! - **Launch** is graded ([`crate::launch`]): arming prologue (fence events, join-proof
//!   events; a failure costs nothing), the zero result marker on the AICPU stream if the
//!   slot's region is not initialized yet, the crossed join behind a launched predecessor
//!   ([`crate::join`]), then the AICore kernel + `core_done`, then the AICPU kernel +
//!   `cpu_done`. NotStarted rolls back; Partial keeps every resource and poisons the lane
//!   (queued runs end with that error; a submit is refused at once with
//!   [`HostError::LanePoisoned`] until the drain proves quiescence or gives the run up — the
//!   drain runs on a background thread the handle starts, never on a caller's submit).
//! - **Drain** establishes completion from the run's own boundaries (a queued successor
//!   never delays it), reads the result record once, and acts on
//!   [`decide_run_drain`](crate::outcome::decide_run_drain): a recorded success touches
//!   neither stream; anything else — and an Unfenced run, and a boundary that failed — goes
//!   through a bounded synchronize of the stream pair, the only call that yields the device's
//!   verdict. When nothing proves quiescence the device is marked unusable and nothing is
//!   freed: staging is quarantined and the slot stays blocked until the forced reset of
//!   teardown.
//! - **Finalize** discharges the caller order's and the successor's references on this
//!   run's fence, retires the fence, frees the slot, copies outputs back after a success and
//!   releases the staging.
//!
//! Wired in, each owned by its own module:
//! - **Health** ([`crate::health`]): the streams every launch records boundaries on are noted
//!   in the device generation's history; at finalize, after the verdict is decided, the fault
//!   notices of the process's monitor ([`crate::fault_monitor`]) are consumed; a suspect
//!   device refuses admission at submit, at prepare and in the launch prologue (NotStarted).
//!   Recovery (owned workers only) restores admission through a confirmed forced reset that
//!   retires the generation.
//! - **Caller streams** ([`crate::caller_stream`]): a run submitted with a caller stream is
//!   launched with the caller-order edges; its drain also waits for (or queries) Tail and
//!   discharges the run's two references before the fence retires; without a Tail the
//!   fallback synchronize covers the caller's stream too. A borrowed worker never resets the
//!   device: its failures poison the lane and leave recovery to the caller.
//! - **Lifecycle** ([`crate::lifecycle`]): a failed preparation whose rollback proved every
//!   release ends with `RunPreparationRefused` (matched by epoch); an unproven one keeps its
//!   staging and arguments and poisons admission. Close drains and tears down; dropping an
//!   unclosed worker detaches.
//!
//! By responsibility: this module holds [`LaneEngine`], the lane's state behind its one
//! lock; `handle` the [`LaneHandle`] the worker and every run handle hold (admission, poll,
//! wait, the driver loop); `queue` the FIFO's ordering rules; `run` what the lane keeps per
//! run; `slot` the device resources; `staging` the per-slot pools of staging buffers;
//! `prepare`, `launch`, `drain` and `finalize` the four steps of a run, the last two taken by
//! the `driver`; `teardown` close, drop and recovery; `alias` the ordering of runs that
//! share host buffers; `memory` the device allocations made through the worker's `malloc`,
//! which in-place device tensors are checked against and frees are refused for while a run
//! uses them.
//!
//! Concurrency: one lock around the [`LaneEngine`], whose `&mut self` methods never wait on
//! the device. Device waits are the *driver*'s (`driver::Driver`): one thread at a time
//! (`LaneEngine::driving`), which releases the lock around each wait; other waiters sleep on
//! the handle's condvar with their own deadline, and a poll only ever try-locks. Only the
//! driver, or a thread holding the lock while nobody drives, changes device-visible state.
//!
//! The lane must not touch the callable registry or the execution mode (the worker's): it
//! runs registered callables, it never registers one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use simpler_device::{AicoreKernel, AicpuKernel, Device, DevicePtr};

use crate::args::OwnedArg;
use crate::caller_stream::CallerOrder;
use crate::fault_monitor::{FaultMonitor, NoticeCursor};
use crate::fence::RunCompletionFence;
use crate::health::{consume_device_fault_notices, DeviceHealth, HealthReport};
use crate::join::JoinRefs;
use crate::lifecycle::{Ownership, ReleaseMarker, WorkerState};
use crate::loader::UnloadGate;
use crate::outcome::RecordReadLedger;
use crate::worker_config::WorkerConfig;
use crate::HostError;

mod alias;
mod drain;
mod driver;
mod finalize;
pub(crate) mod graph;
mod handle;
mod launch;
mod memory;
mod prepare;
mod queue;
mod run;
mod slot;
mod staging;
mod teardown;
mod trace;

pub use graph::{GraphReport, RecordedRun};
pub(crate) use handle::{IdleLane, LaneHandle};
pub(crate) use run::RunCell;
pub use staging::StagingReport;

use memory::{DeviceMemory, DeviceRange};
use queue::RunQueue;
use run::RunState;
use slot::{LaneResources, PipelineSlot};

/// What a successful run reports.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The run's epoch (process-unique, non-zero).
    pub epoch: u64,
    /// From the launch of the first kernel to the proof of both boundaries.
    pub device_time: Duration,
    /// From submission to finalization, including staging and copy-back.
    pub total_time: Duration,
    /// Tasks the orchestration submitted (kernel-less ones included), from the run's result
    /// record; 0 for an orchestration that submitted none.
    pub tasks: u64,
    /// The run's trace when its [`CallConfig::trace_level`](crate::CallConfig::trace_level)
    /// is not Off: one process (the chip) holding this run's device records and its host
    /// spans (`docs/tracing.md`), its records decoded into the model on first use (it
    /// dereferences to [`simpler_trace::Trace`]); shared, so a clone of the report is cheap.
    /// `None` for an untraced run.
    pub trace: Option<std::sync::Arc<crate::trace::CapturedTrace>>,
    /// What the host did for a `host_build_graph` run's graph (its build and upload, or
    /// that it replayed a recording); `None` under `tensormap_and_ringbuffer`.
    pub graph: Option<GraphReport>,
    /// The recording a [`ChipWorker::submit_record`](crate::ChipWorker::submit_record) run
    /// made, to replay with [`ChipWorker::replay`](crate::ChipWorker::replay); `None`
    /// otherwise.
    pub recording: Option<RecordedRun>,
}

/// The two device kernels a run launches.
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    pub(crate) aicore: AicoreKernel,
    pub(crate) aicpu: AicpuKernel,
}

impl Default for Kernels {
    fn default() -> Self {
        Kernels {
            aicore: simpler_runtime::aicore_kernel,
            aicpu: simpler_runtime::aicpu_kernel,
        }
    }
}

/// Source of process-unique, non-zero run epochs shared by every worker.
static EPOCHS: AtomicU64 = AtomicU64::new(1);
/// Source of lane generations (non-zero, one per worker).
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

/// What one finalize attempt of the front run achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    /// The front run was made terminal.
    Finalized,
    /// Nothing to do without blocking (or nothing to do at all).
    WouldBlock,
    /// The caller's deadline passed first.
    UserTimeout,
}

/// The engine, locked.
type Guard<'a> = parking_lot::MutexGuard<'a, LaneEngine>;

/// The lane's state: FIFO, slots, shared resources, device health and what it had to keep.
/// Lives behind the [`LaneHandle`]'s lock; no method waits on the device.
pub(crate) struct LaneEngine {
    device: Arc<dyn Device>,
    config: WorkerConfig,
    kernels: Kernels,
    queue: RunQueue<RunState>,
    slots: Vec<PipelineSlot>,
    resources: LaneResources,
    ledger: RecordReadLedger,
    /// Set once the device cannot be trusted; refuses admission until a confirmed reset.
    unusable: Option<String>,
    /// Counts every marking unusable: code loaded before one stays mapped (`loader`).
    unload_gate: Arc<UnloadGate>,
    /// A run was given up on with a kernel (or its orchestrator) still running on a device
    /// thread: a forced reset waits only briefly for it (the sim cannot stop code that never
    /// reaches a register wait), until a confirmed reset.
    kernels_left_running: bool,
    /// Staging the device may still touch (unproven paths): freed only after a reset.
    quarantine: Vec<DevicePtr>,
    /// Join references of runs given up on: their counts stay on the predecessor's fence
    /// until a confirmed reset abandons it, then they are discarded as stale.
    stale_joins: Vec<JoinRefs>,
    /// Caller orders of runs given up on (their references stay on their own fence).
    stale_orders: Vec<(Arc<RunCompletionFence>, CallerOrder)>,
    /// Arguments of runs whose release could not be proven (kept until teardown).
    retained_args: Vec<Vec<OwnedArg>>,
    /// Graph images of runs given up on (the device may still read them; kept until
    /// teardown).
    retained_graphs: Vec<Arc<graph::GraphImage>>,
    /// The device memory the worker's `malloc` handed out.
    memory: DeviceMemory,
    /// The device ranges of runs given up on (the device may still touch them), one entry
    /// per run, until a confirmed reset or a proof of quiescence.
    retained_device_ranges: Vec<Vec<DeviceRange>>,
    /// The release marker of the last proven preparation rollback.
    release_marker: ReleaseMarker,
    /// Health of the device generation.
    health: DeviceHealth,
    /// This lane's position in the fault monitor's ring (`None`: the monitor could not be
    /// installed, so no notice is ever read; silence is not health).
    cursor: Option<NoticeCursor>,
    /// Owned or borrowed context.
    ownership: Ownership,
    next_dispatch: u64,
    generation: u64,
    /// A driver is waiting on the device with the lock released.
    driving: bool,
    /// Registry mutations waiting for a moment with no run outstanding
    /// ([`LaneHandle::lock_idle_within`]): while any waits, new submits wait for it, so the
    /// lane drains.
    registry_waiters: usize,
    /// Origin of this device's clock for traces (host `CLOCK_MONOTONIC` ns, taken when the
    /// lane opened; `docs/tracing.md`, clocks).
    trace_origin_ns: u64,
    /// Runs whose launch was graded Partial, whose drain the handle starts in the
    /// background.
    background_drains: Vec<Arc<RunCell>>,
    state: WorkerState,
}

impl LaneEngine {
    /// Creates the lane's streams, output heap and `config.launch_depth` pipeline slots on
    /// `device`; on failure, frees what it made.
    ///
    /// # Errors
    /// The device error of the stream, heap or slot allocation that failed.
    fn new(
        device: Arc<dyn Device>,
        config: WorkerConfig,
        ownership: Ownership,
    ) -> Result<LaneEngine, HostError> {
        let mut resources = LaneResources::new(&device)?;
        if let Err(e) = resources.heap(&device, config.heap_size) {
            resources.release(&device);
            return Err(e);
        }
        let mut slots = Vec::new();
        for i in 0..config.launch_depth {
            match PipelineSlot::new(&device, i) {
                Ok(s) => slots.push(s),
                Err(e) => {
                    for mut s in slots {
                        s.release(&device);
                    }
                    resources.release(&device);
                    return Err(e);
                }
            }
        }
        Ok(LaneEngine {
            device,
            config,
            kernels: Kernels::default(),
            queue: RunQueue::default(),
            slots,
            resources,
            ledger: RecordReadLedger::default(),
            unusable: None,
            unload_gate: UnloadGate::new(),
            kernels_left_running: false,
            quarantine: Vec::new(),
            stale_joins: Vec::new(),
            stale_orders: Vec::new(),
            retained_args: Vec::new(),
            retained_graphs: Vec::new(),
            memory: DeviceMemory::default(),
            retained_device_ranges: Vec::new(),
            release_marker: ReleaseMarker::default(),
            health: DeviceHealth::default(),
            cursor: None,
            ownership,
            next_dispatch: 1,
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
            driving: false,
            registry_waiters: 0,
            trace_origin_ns: simpler_device::clock::monotonic_ns(),
            background_drains: Vec::new(),
            state: WorkerState::Open,
        })
    }

    /// Starts reading fault notices (the monitor was acquired for this lane's device).
    fn watch_notices(&mut self, cursor: NoticeCursor) {
        self.cursor = Some(cursor);
    }

    /// Why new runs are refused: the lane could not prove a run finished (quarantine), or
    /// the device is suspect (health).
    fn admission_refusal(&self) -> Option<String> {
        if let Some(why) = &self.unusable {
            return Some(why.clone());
        }
        self.health.refusal()
    }

    /// Runs held (queued, prepared or launched).
    fn outstanding(&self) -> usize {
        self.queue.len()
    }

    fn is_closed(&self) -> bool {
        self.state != WorkerState::Open
    }

    /// The device health report of this generation.
    fn health_report(&self) -> HealthReport {
        self.health.report()
    }

    /// The staging memory held between runs.
    fn staging_report(&self) -> StagingReport {
        StagingReport {
            pooled_buffers: self.slots.iter().map(|s| s.staging.len()).sum(),
            pooled_bytes: self.slots.iter().map(|s| s.staging.bytes()).sum(),
            quarantined_buffers: self.quarantine.len(),
        }
    }

    /// Marks the device unusable for `why` unless it already is (the first reason stays).
    fn mark_unusable(&mut self, why: impl FnOnce() -> String) {
        // Before anything else can drop code: a thread may still be inside it.
        self.unload_gate.give_up();
        self.unusable.get_or_insert_with(why);
    }

    /// Reads the fault notices delivered so far into the device health (after a verdict).
    fn consume_notices(&mut self) {
        let device = self.device.device_id();
        let LaneEngine { cursor, health, .. } = self;
        if let Some(c) = cursor.as_mut() {
            consume_device_fault_notices(FaultMonitor::global(), c, health, device);
        }
    }
}
