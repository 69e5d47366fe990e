//! The run lane's executor: prepare → launch → drain → finalize for every run of a worker,
//! pipelined up to the launch depth (design `run-completion-fences.txt`; spec `run-lane.md`
//! §1.2–§1.5, §2.4, §3).
//!
//! - **Prepare** stages the host tensors and publishes the slot's descriptor, arguments and
//!   func tables (the slot is idle: its previous run was retired).
//! - **Launch** is graded ([`crate::launch`]): arming prologue (fence events, join-proof
//!   events; a failure costs nothing), the zero result marker on the AICPU stream if the
//!   slot's region is not initialized yet, the crossed join behind a launched predecessor
//!   ([`crate::join`]), then the AICore kernel + `core_done`, then the AICPU kernel +
//!   `cpu_done`. NotStarted rolls back; Partial keeps every resource and poisons the lane
//!   (queued runs end with that error, admission waits for the drain to prove quiescence).
//! - **Drain** establishes completion from the run's own boundaries (a queued successor
//!   never delays it), reads the result record once, and acts on
//!   [`decide_run_drain`](crate::outcome::decide_run_drain): a recorded success touches
//!   neither stream; anything else — and an Unfenced run, and a boundary that failed — goes
//!   through a bounded synchronize of the stream pair, the only call that yields the device's
//!   verdict. When nothing proves quiescence the device is marked unusable and nothing is
//!   freed: staging is quarantined and the slot stays blocked until the forced reset of
//!   teardown.
//! - **Finalize** copies outputs back after a success, releases staging, discharges the
//!   successor's join references on this run's fence, retires the fence and frees the slot.
//!
//! Concurrency: one lane mutex. Device waits run with it released by a single *driver*
//! (`Lane::driving`); other waiters sleep on a condvar with their own deadline, and a poll
//! only ever try-locks. Only the driver, or a thread holding the lock while nobody drives,
//! changes device-visible state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;
use simpler_abi::{
    code_name, ChipTensor, OrchArgs, RunLaunchDesc, RunResult, RUN_LAUNCH_MAGIC, RUN_LAUNCH_VERSION,
};
use simpler_device::{AicoreKernel, AicpuKernel, Device, DeviceError, DevicePtr};

use crate::config::RunPlan;
use crate::fence::{Completion, FenceError};
use crate::handle::{OwnedArg, RunCell, RunHandle};
use crate::identity::{RunIdentity, StreamRole};
use crate::join::{self, JoinRefs};
use crate::lane::{Phase, RunQueue, LANE_CAPACITY};
use crate::launch::{launch_transaction, LaunchGrade, LaunchPermit};
use crate::outcome::{
    decide_run_drain, decide_run_execution, device_run_result_terminal, DrainAction, RecordRead,
    RecordReadLedger, RunExecution, RunOutcomeEvidence, Terminal,
};
use crate::pod::{bytes_of, from_bytes};
use crate::slot::{LaneResources, PipelineSlot};
use crate::worker::{Registered, Shared};
use crate::HostError;

/// What a successful run reports.
#[derive(Clone, Copy, Debug)]
pub struct RunReport {
    /// The run's epoch (process-unique, non-zero).
    pub epoch: u64,
    /// From the launch of the first kernel to the proof of both boundaries.
    pub device_time: Duration,
    /// From submission to finalization, including staging and copy-back.
    pub total_time: Duration,
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

/// The launched part of a run.
struct Active {
    grade: LaunchGrade,
    /// The launch error of a Partial launch.
    error: Option<HostError>,
    started: Instant,
    /// References this run holds on its predecessor's fence.
    join: Option<JoinRefs>,
}

/// What the lane keeps per run.
pub(crate) struct RunState {
    cell: Arc<RunCell>,
    callable: Arc<Registered>,
    /// Resolved per-run options (threads, ring sizing).
    plan: RunPlan,
    args: Vec<OwnedArg>,
    identity: Option<RunIdentity>,
    staging: Vec<Option<DevicePtr>>,
    active: Option<Active>,
    /// Ended before launching (prepare failure, NotStarted launch); ends at the front.
    failed: Option<HostError>,
}

/// The lane: FIFO, slots, shared resources and device health.
pub(crate) struct Lane {
    queue: RunQueue<RunState>,
    pub(crate) slots: Vec<PipelineSlot>,
    pub(crate) res: LaneResources,
    ledger: RecordReadLedger,
    /// Set once the device cannot be trusted; refuses admission until a confirmed reset.
    pub(crate) unusable: Option<String>,
    /// Staging the device may still touch (unproven paths): freed only after a reset.
    quarantine: Vec<DevicePtr>,
    /// Join references of runs given up on: their counts stay on the predecessor's fence
    /// until a confirmed reset abandons it, then they are discarded as stale.
    stale_joins: Vec<JoinRefs>,
    next_dispatch: u64,
    generation: u64,
    driving: bool,
    closed: bool,
}

impl Lane {
    pub(crate) fn new(
        device: &Arc<dyn Device>,
        depth: u32,
        heap_size: u64,
    ) -> Result<Lane, HostError> {
        let mut res = LaneResources::new(device)?;
        if let Err(e) = res.heap(device, heap_size) {
            res.release(device);
            return Err(e);
        }
        let mut slots = Vec::new();
        for i in 0..depth {
            match PipelineSlot::new(device, i) {
                Ok(s) => slots.push(s),
                Err(e) => {
                    for mut s in slots {
                        s.release(device);
                    }
                    let mut res = res;
                    res.release(device);
                    return Err(e);
                }
            }
        }
        Ok(Lane {
            queue: RunQueue::default(),
            slots,
            res,
            ledger: RecordReadLedger::default(),
            unusable: None,
            quarantine: Vec::new(),
            stale_joins: Vec::new(),
            next_dispatch: 1,
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
            driving: false,
            closed: false,
        })
    }
}

type Guard<'a> = MutexGuard<'a, Lane>;

/// Admits a run (arguments already checked), prepares and launches it if a slot is free.
pub(crate) fn submit(
    shared: &Arc<Shared>,
    callable: Arc<Registered>,
    args: Vec<OwnedArg>,
    plan: RunPlan,
) -> Result<RunHandle, HostError> {
    let mut lane = shared.lane.lock();
    loop {
        if lane.closed {
            return Err(HostError::WorkerClosed);
        }
        if let Some(why) = &lane.unusable {
            return Err(HostError::DeviceUnusable(why.clone()));
        }
        if lane.queue.is_poisoned() && lane.queue.is_empty() {
            lane.queue.clear_poison();
        }
        if !lane.queue.is_poisoned() && lane.queue.len() < LANE_CAPACITY {
            break;
        }
        // Full, or a partial launch is waiting for its drain: drive the front.
        let _ = drive_once(shared, &mut lane, None);
    }
    let dispatch = lane.next_dispatch;
    lane.next_dispatch += 1;
    let cell = Arc::new(RunCell::new(
        EPOCHS.fetch_add(1, Ordering::Relaxed),
        dispatch,
    ));
    let state = RunState {
        cell: cell.clone(),
        callable,
        plan,
        args,
        identity: None,
        staging: Vec::new(),
        active: None,
        failed: None,
    };
    lane.queue
        .admit(dispatch, state)
        .expect("admission was checked under the lock");
    pump(shared, &mut lane);
    Ok(RunHandle {
        shared: shared.clone(),
        cell,
    })
}

/// Non-blocking progress for a poll: never waits, not even for the lane lock.
pub(crate) fn poll_progress(shared: &Arc<Shared>) {
    let Some(mut lane) = shared.lane.try_lock() else {
        return;
    };
    if lane.driving {
        return;
    }
    let mut changed = false;
    while finalize_front(shared, &mut lane, None, false) == Progress::Finalized {
        changed = true;
    }
    pump(shared, &mut lane);
    if changed {
        shared.cv.notify_all();
    }
}

/// Drives the lane until `cell` is terminal or `deadline` passes.
pub(crate) fn wait_for(
    shared: &Arc<Shared>,
    cell: &RunCell,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
) -> Result<(), HostError> {
    let mut lane = shared.lane.lock();
    while !cell.is_done() {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(HostError::WaitTimeout(timeout.unwrap_or_default()));
        }
        if drive_once(shared, &mut lane, deadline).is_err() && !cell.is_done() {
            return Err(HostError::WaitTimeout(timeout.unwrap_or_default()));
        }
    }
    Ok(())
}

/// Shuts the lane: unlaunched runs end with [`HostError::WorkerClosed`], launched runs are
/// drained; then the resources are released — after a forced reset if the device is
/// unusable, and not at all if the reset cannot be confirmed.
pub(crate) fn close(shared: &Arc<Shared>) {
    let mut lane = shared.lane.lock();
    lane.closed = true;
    loop {
        while lane.driving {
            shared.cv.wait(&mut lane);
        }
        let unlaunched = lane.queue.poison();
        for (_, st) in unlaunched {
            end_unlaunched(shared, &mut lane, st, HostError::WorkerClosed);
        }
        if lane.queue.is_empty() {
            break;
        }
        let _ = drive_once(shared, &mut lane, None);
    }
    let dev = &shared.device;
    let lane = &mut *lane;
    if lane.unusable.is_some() {
        // Forced-reset teardown: the only thing that invalidates the device's references.
        match dev.reset(shared.config.run_timeout) {
            Ok(()) => {
                for s in &lane.slots {
                    s.fence.abandon();
                }
                for mut j in lane.stale_joins.drain(..) {
                    for r in j.refs.iter_mut().filter(|r| !r.is_empty()) {
                        let _ = j.pred_fence.discard_stale_wait_reference(r);
                    }
                }
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "the forced reset was not confirmed; device memory is left allocated"
                );
                return;
            }
        }
    }
    for p in lane.quarantine.drain(..) {
        let _ = dev.free(p);
    }
    for s in lane.slots.iter_mut() {
        s.release(dev);
    }
    lane.res.release(dev);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    /// The front run was made terminal.
    Finalized,
    /// Nothing to do without blocking (or nothing to do at all).
    WouldBlock,
    /// The caller's deadline passed first.
    UserTimeout,
}

/// One turn of the driver: finalizes the front (blocking), or sleeps while another thread
/// drives. `Err` only when `deadline` passed.
fn drive_once(
    shared: &Arc<Shared>,
    lane: &mut Guard<'_>,
    deadline: Option<Instant>,
) -> Result<(), ()> {
    if lane.driving {
        match deadline {
            Some(d) => {
                if shared.cv.wait_until(lane, d).timed_out() {
                    return Err(());
                }
            }
            None => shared.cv.wait(lane),
        }
        return Ok(());
    }
    lane.driving = true;
    let p = finalize_front(shared, lane, deadline, true);
    lane.driving = false;
    pump(shared, lane);
    shared.cv.notify_all();
    match p {
        Progress::UserTimeout => Err(()),
        _ => Ok(()),
    }
}

/// Launches whatever can go: ends a failed unlaunched front, then prepares and launches
/// queued runs in dispatch order while a slot is free.
fn pump(shared: &Arc<Shared>, lane: &mut Guard<'_>) {
    if lane.driving {
        return;
    }
    loop {
        // A front that ended before launching leaves at once.
        if let Some(front) = lane.queue.front() {
            let failed = lane
                .queue
                .get_mut(front)
                .is_some_and(|st| st.failed.is_some() && st.active.is_none());
            if failed {
                lane.queue.advance(front, Phase::Terminal).expect("front");
                let (_, st) = lane.queue.pop_terminal_front().expect("terminal front");
                let err = st.failed.clone().expect("failed");
                release_staging(&shared.device, &st.staging);
                st.cell.finish(Err(err), st.args);
                shared.cv.notify_all();
                continue;
            }
        }
        if lane.closed {
            return;
        }
        let next = lane
            .queue
            .phases()
            .into_iter()
            .find(|&(_, p)| p == Phase::Queued)
            .map(|(id, _)| id);
        let Some(id) = next else { return };
        if lane.queue.get_mut(id).is_some_and(|st| st.failed.is_some()) {
            return; // waits to reach the front
        }
        if let Some(why) = lane.unusable.clone() {
            // Unlaunched runs end; launched ones are drained by their waiters.
            for (_, st) in lane.queue.poison() {
                end_unlaunched(shared, lane, st, HostError::DeviceUnusable(why.clone()));
            }
            return;
        }
        let Some(slot) = lane
            .slots
            .iter()
            .position(|s| s.occupant.is_none() && !s.quarantined)
        else {
            return;
        };
        if lane.queue.advance(id, Phase::Prepared).is_err() {
            return; // an older run has not launched yet
        }
        match prepare(shared, lane, id, slot) {
            Ok(()) => {
                lane.queue.advance(id, Phase::Launched).expect("prepared");
                launch(shared, lane, id, slot);
            }
            Err(e) => {
                if let Some(st) = lane.queue.get_mut(id) {
                    st.failed = Some(e);
                }
            }
        }
    }
}

fn end_unlaunched(shared: &Arc<Shared>, lane: &mut Lane, st: RunState, err: HostError) {
    release_staging(&shared.device, &st.staging);
    if let Some(id) = st.identity {
        if let Some(s) = lane.slots.get_mut(id.slot as usize) {
            if s.occupant == Some(st.cell.dispatch_id) {
                s.occupant = None;
            }
        }
    }
    st.cell.finish(Err(err), st.args);
    shared.cv.notify_all();
}

fn release_staging(dev: &Arc<dyn Device>, staging: &[Option<DevicePtr>]) {
    for p in staging.iter().flatten() {
        let _ = dev.free(*p);
    }
}

/// Stages the run's tensors and publishes the slot's descriptor, arguments and tables.
fn prepare(
    shared: &Arc<Shared>,
    lane: &mut Lane,
    id: u64,
    slot_idx: usize,
) -> Result<(), HostError> {
    let dev = &shared.device;
    let cfg = &shared.config;
    let heap = lane.res.heap(dev, cfg.heap_size)?;
    let generation = lane.generation;
    let slot = &mut lane.slots[slot_idx];
    let st = lane.queue.get_mut(id).expect("queued run");
    let identity = RunIdentity {
        epoch: st.cell.epoch,
        generation,
        dispatch_id: id,
        slot: slot.index,
    };
    let callable = st.callable.clone();
    let mut staging = Vec::with_capacity(st.args.len());
    let mut orch_args = OrchArgs::empty();
    let staged = (|| -> Result<(), HostError> {
        for (spec, arg) in callable.signature.args.iter().zip(st.args.iter_mut()) {
            match arg {
                OwnedArg::Tensor {
                    buffer,
                    shape,
                    dtype,
                } => {
                    let bytes = buffer.bytes_mut();
                    let p = dev
                        .malloc(bytes.len() as u64)
                        .map_err(HostError::device(format!(
                            "staging argument `{}`",
                            spec.name
                        )))?;
                    staging.push(Some(p));
                    if spec.direction.copies_in() {
                        dev.copy_to_device(p, bytes)
                            .map_err(HostError::device(format!(
                                "copying argument `{}` to the device",
                                spec.name
                            )))?;
                    }
                    orch_args.tensors[orch_args.tensor_count as usize] =
                        ChipTensor::contiguous(p.0, shape, *dtype);
                    orch_args.tensor_count += 1;
                }
                OwnedArg::Scalar(v) => {
                    staging.push(None);
                    orch_args.scalars[orch_args.scalar_count as usize] = *v;
                    orch_args.scalar_count += 1;
                }
            }
        }
        let plan = st.plan;
        let desc = RunLaunchDesc {
            magic: RUN_LAUNCH_MAGIC,
            version: RUN_LAUNCH_VERSION,
            epoch: identity.epoch,
            result_addr: slot.result.0,
            orch_entry: callable.orchestration.addr,
            orch_args_addr: slot.orch_args.0,
            func_table_addr: slot.func_table.0,
            func_core_types_addr: slot.func_types.0,
            func_count: callable.func_addrs.len() as u32,
            aicpu_thread_num: plan.aicpu_threads,
            heap_addr: heap.0,
            heap_size: cfg.heap_size,
            task_window: cfg.task_window,
            scheduler_timeout_ms: cfg.scheduler_timeout.as_millis() as u32,
            core_mailbox_addr: slot.mailboxes.0,
            runtime_state_addr: slot.state_word.0,
            ring_task_window: plan.windows,
            ring_heap: plan.heaps,
            ring_dep_pool: plan.dep_pools,
            tensor_wait_timeout_ms: cfg.tensor_data_timeout.as_millis() as u32,
            reserved: 0,
        };
        let publish = |what: &str, dst: DevicePtr, bytes: &[u8]| {
            if bytes.is_empty() {
                return Ok(());
            }
            dev.copy_to_device(dst, bytes)
                .map_err(HostError::device(format!("publishing the {what}")))
        };
        publish(
            "orchestration arguments",
            slot.orch_args,
            bytes_of(&*orch_args),
        )?;
        publish("kernel table", slot.func_table, &callable.func_table_bytes)?;
        publish(
            "kernel core-type table",
            slot.func_types,
            &callable.func_type_bytes,
        )?;
        publish("launch descriptor", slot.desc, bytes_of(&desc))
    })();
    if let Err(e) = staged {
        release_staging(dev, &staging);
        return Err(e);
    }
    st.staging = staging;
    st.identity = Some(identity);
    slot.occupant = Some(id);
    Ok(())
}

/// The launch transaction of run `id` in `slot_idx`, graded; see the module doc.
fn launch(shared: &Arc<Shared>, lane: &mut Lane, id: u64, slot_idx: usize) {
    let dev = &shared.device;
    let kernels = shared.kernels;
    let threads = lane
        .queue
        .get_mut(id)
        .map_or(dev.topology().aicpu_threads, |st| st.plan.aicpu_threads);
    // The predecessor to join: the launched run ahead of this one, if its fence is armed.
    let pred = lane
        .queue
        .phases()
        .into_iter()
        .take_while(|&(d, _)| d != id)
        .last()
        .and_then(|(d, _)| lane.queue.get_mut(d))
        .and_then(|p| p.identity);
    let pred = pred.map(|p| (p, lane.slots[p.slot as usize].fence.clone()));
    let identity = lane
        .queue
        .get_mut(id)
        .and_then(|s| s.identity)
        .expect("a prepared run has an identity");
    let Lane { slots, res, .. } = lane;
    let slot = &mut slots[slot_idx];
    let fence = slot.fence.clone();
    let (desc, result_addr, initialized) = (slot.desc, slot.result, slot.result_initialized);
    let mut join: Option<JoinRefs> = None;
    let mut marker_published = false;
    let started = Instant::now();
    let outcome = launch_transaction(
        LaunchPermit::new(identity),
        &identity,
        || HostError::RunUndecided("launch permit for another run".into()),
        |what| HostError::DeviceUnusable(what.into()),
        |sink| {
            // Arming prologue: nothing device-visible yet, a failure costs nothing.
            fence
                .arm(&**dev, identity)
                .map_err(fence_err("arming the completion fence"))?;
            let proofs = match &pred {
                Some(_) => Some(slot.ensure_proofs(dev)?),
                None => None,
            };
            if !initialized {
                // An attempted asynchronous copy is device-visible even if the call fails.
                sink.mark_submitted();
                let zero = vec![0u8; std::mem::size_of::<RunResult>()];
                dev.copy_to_device_async(res.aicpu_stream, result_addr, zero)
                    .map_err(HostError::device("publishing the zero result marker"))?;
                marker_published = true;
            }
            if let (Some((pid, pfence)), Some(proofs)) = (&pred, proofs) {
                let (refs, r) = join::queue_crossed_join(&**dev, res, pfence, *pid, proofs, sink);
                join = Some(refs);
                r.map_err(|e| match e {
                    join::JoinError::Fence(f) => fence_err("joining the predecessor")(f),
                    join::JoinError::Device(what, e) => HostError::device(what)(e),
                })?;
            }
            dev.launch_aicore(res.aicore_stream, kernels.aicore, desc)
                .map_err(HostError::device("launching the AICore kernel"))?;
            sink.mark_submitted();
            fence.note_kernel_submitted(&identity, StreamRole::Aicore);
            fence
                .record(
                    &**dev,
                    &identity,
                    StreamRole::Aicore,
                    Some(res.aicore_stream),
                )
                .map_err(fence_err("recording the AICore boundary"))
        },
        |sink| {
            dev.launch_aicpu(res.aicpu_stream, kernels.aicpu, desc, threads)
                .map_err(HostError::device("launching the AICPU kernel"))?;
            sink.mark_submitted();
            fence.note_kernel_submitted(&identity, StreamRole::Aicpu);
            fence
                .record(&**dev, &identity, StreamRole::Aicpu, Some(res.aicpu_stream))
                .map_err(fence_err("recording the AICPU boundary"))
        },
    );
    if marker_published {
        slot.result_initialized = true;
    }
    match outcome.grade {
        LaunchGrade::NotStarted => {
            // Nothing reached the device: roll back. A reservation never attempted is revoked.
            if let Some(j) = join.as_mut() {
                for r in j.refs.iter_mut() {
                    let _ = j.pred_fence.revoke_wait_reference(r);
                }
            }
            let _ = fence.retire(&identity);
            slot.occupant = None;
            let st = lane.queue.get_mut(id).expect("launched run");
            release_staging(dev, &st.staging);
            st.staging.clear();
            st.failed = outcome.error;
        }
        grade => {
            debug_assert!(
                grade != LaunchGrade::Complete
                    || outcome.receipt.map(|r| r.identity) == Some(identity),
                "a complete launch carries this run's receipt"
            );
            let st = lane.queue.get_mut(id).expect("launched run");
            st.active = Some(Active {
                grade,
                error: outcome.error.clone(),
                started,
                join,
            });
            if grade == LaunchGrade::Partial {
                // Close admission: queued runs end with the launch error; the drain decides
                // whether the device recovers.
                let why = outcome
                    .error
                    .map_or_else(|| "a launch was partial".to_string(), |e| e.to_string());
                for (_, st) in lane.queue.poison() {
                    end_unlaunched(
                        shared,
                        lane,
                        st,
                        HostError::LanePoisoned(format!("an earlier run's launch failed: {why}")),
                    );
                }
            }
        }
    }
}

fn fence_err(what: &'static str) -> impl Fn(FenceError) -> HostError {
    move |e| match e {
        FenceError::Device(d) => HostError::device(what)(d),
        other => HostError::RunUndecided(format!("{what}: {other}")),
    }
}

/// Runs `f` with the lane lock released when `blocking` (a driver), or in place when not (a
/// poll holds a try-locked guard and must never block re-acquiring it).
fn outside_lock<R>(lane: &mut Guard<'_>, blocking: bool, f: impl FnOnce() -> R) -> R {
    if blocking {
        MutexGuard::unlocked(lane, f)
    } else {
        f()
    }
}

/// Result of a bounded synchronize of the stream pair.
struct PairSync {
    /// Both streams drained (a kernel fault is reported only after its stream drained).
    quiescent: bool,
    /// The first error (a sticky kernel fault, a timeout, a failed call).
    error: Option<DeviceError>,
}

fn sync_pair(
    dev: &dyn Device,
    res: (simpler_device::StreamId, simpler_device::StreamId),
    timeout: Duration,
) -> PairSync {
    let mut error = None;
    for s in [res.0, res.1] {
        match dev.synchronize_stream(s, timeout) {
            Ok(()) => {}
            Err(e @ DeviceError::KernelFault { .. }) => {
                error.get_or_insert(e);
            }
            Err(e) => {
                return PairSync {
                    quiescent: false,
                    error: Some(error.unwrap_or(e)),
                }
            }
        }
    }
    PairSync {
        quiescent: true,
        error,
    }
}

fn streams_idle(dev: &dyn Device, lane: &Lane) -> bool {
    [lane.res.aicpu_stream, lane.res.aicore_stream]
        .iter()
        .all(|&s| dev.query_stream(s) == Ok(true))
}

/// Finalizes the front run if it can be. `blocking` allows device waits (with the lane lock
/// released); without it, any step that would wait answers WouldBlock before anything is
/// mutated (the fence's cached completion and the record ledger are idempotent).
fn finalize_front(
    shared: &Arc<Shared>,
    lane: &mut Guard<'_>,
    user_deadline: Option<Instant>,
    blocking: bool,
) -> Progress {
    let dev = shared.device.clone();
    let cfg = &shared.config;
    let Some(front) = lane.queue.front() else {
        return Progress::WouldBlock;
    };
    let (identity, started, grade) = {
        let st = lane.queue.get_mut(front).expect("front");
        match (&st.active, st.identity) {
            (Some(a), Some(id)) => (id, a.started, a.grade),
            _ => return Progress::WouldBlock, // unlaunched: pump's business
        }
    };
    let slot_idx = identity.slot as usize;
    let fence = lane.slots[slot_idx].fence.clone();
    let run_deadline = started + cfg.run_timeout;

    // 1. Completion: the run's own boundaries.
    let mut boundaries = if fence.fenced(&identity) {
        fence.poll(&*dev, &identity)
    } else {
        // A partial launch: a kernel without its boundary, or only a marker copy or a
        // committed join wait. Either way device-visible work no boundary covers.
        debug_assert!(grade == LaunchGrade::Partial || fence.has_device_references(&identity));
        Completion::Unfenced
    };
    if boundaries == Completion::Pending {
        if !blocking {
            return Progress::WouldBlock;
        }
        let until = user_deadline.map_or(run_deadline, |u| u.min(run_deadline));
        let left = until.saturating_duration_since(Instant::now());
        let r = MutexGuard::unlocked(lane, || {
            fence.wait(&*dev, &identity, left.max(Duration::from_micros(1)))
        });
        boundaries = match r {
            Ok(()) => Completion::Complete,
            Err(FenceError::TimedOut(_)) => {
                if Instant::now() < run_deadline {
                    return Progress::UserTimeout;
                }
                return give_up(
                    shared,
                    lane,
                    HostError::Timeout(cfg.run_timeout),
                    "a run did not complete within the run timeout",
                );
            }
            Err(_) => Completion::Error,
        };
    }

    // The successor's join references on this run's fence (discharged before retiring it).
    let succ = lane.queue.phases().get(1).map(|&(d, _)| d).filter(|&d| {
        lane.queue.get_mut(d).is_some_and(|s| {
            s.active
                .as_ref()
                .and_then(|a| a.join.as_ref())
                .is_some_and(|j| j.pred == identity)
        })
    });

    // 2. Non-blocking pre-checks: everything below must complete without waiting.
    let always_sync = cfg.always_synchronize;
    if !blocking {
        let needs_sync = boundaries != Completion::Complete || always_sync;
        if needs_sync && !streams_idle(&*dev, lane) {
            return Progress::WouldBlock;
        }
        if let Some(s) = succ {
            let j = lane
                .queue
                .get_mut(s)
                .and_then(|s| s.active.as_ref())
                .and_then(|a| a.join.as_ref());
            if !j.is_some_and(|j| join::proofs_complete(&*dev, j)) && !streams_idle(&*dev, lane) {
                return Progress::WouldBlock;
            }
        }
    }
    let pair = (lane.res.aicpu_stream, lane.res.aicore_stream);
    let timeout = cfg.run_timeout;
    let mut pre_sync: Option<PairSync> = None;
    if always_sync || boundaries != Completion::Complete {
        // Measurement knob, or no completion proof: only the synchronize can answer.
        pre_sync = Some(outside_lock(lane, blocking, || {
            sync_pair(&*dev, pair, timeout)
        }));
    }
    if let Some(ps) = &pre_sync {
        if !ps.quiescent {
            let why = ps.error.clone().map_or_else(String::new, |e| e.to_string());
            let err = active_error(lane, front).unwrap_or_else(|| match &ps.error {
                Some(DeviceError::Timeout(t)) => HostError::Timeout(*t),
                Some(e) => HostError::DeviceFault(e.clone()),
                None => HostError::DeviceUnusable(why.clone()),
            });
            return give_up(
                shared,
                lane,
                err,
                &format!("the stream pair could not be proven quiescent ({why})"),
            );
        }
    }

    // 3. The verdict: one record read, then the decision.
    let slot = &lane.slots[slot_idx];
    let (trusted, result_addr) = (slot.result_initialized, slot.result);
    let (read, record, read_err) =
        lane.ledger
            .read_with_status(identity.slot, identity.epoch, trusted, || {
                let mut raw = vec![0u8; std::mem::size_of::<RunResult>()];
                dev.copy_from_device(&mut raw, result_addr)?;
                from_bytes::<RunResult>(&raw).ok_or(DeviceError::InvalidSize(raw.len() as u64))
            });
    let terminal = record.map_or_else(Terminal::default, |r| {
        device_run_result_terminal(&r, identity.epoch)
    });
    let ev = RunOutcomeEvidence {
        boundaries,
        record_read: read,
        terminal,
    };
    let decision = decide_run_execution(&ev);
    let action = decide_run_drain(read == RecordRead::Failed, &ev);
    let post_sync = match (action, &pre_sync) {
        (DrainAction::AcceptRecordedSuccess, _) | (_, Some(_)) => None,
        _ => {
            if !blocking && !streams_idle(&*dev, lane) {
                return Progress::WouldBlock;
            }
            Some(outside_lock(lane, blocking, || {
                sync_pair(&*dev, pair, timeout)
            }))
        }
    };
    let sync = post_sync.as_ref().or(pre_sync.as_ref());
    if let Some(ps) = sync {
        if let Some(e) = &ps.error {
            // A sticky fault (or an unconverged pair) stays on the streams: refuse new work.
            lane.unusable.get_or_insert_with(|| {
                format!("the stream pair reported {e} while draining a run")
            });
        }
    }
    let mut result: Result<(), HostError> = match (action, decision.outcome) {
        (DrainAction::ReportTransferError, _) => {
            Err(HostError::device("reading the run's result record")(
                read_err.expect("a failed read has an error"),
            ))
        }
        (_, RunExecution::Succeeded) => Ok(()),
        (_, RunExecution::Failed { code, .. }) => {
            let message = record.map(|r| r.message()).unwrap_or_default();
            Err(HostError::RunFailed {
                code,
                name: code_name(code),
                message,
            })
        }
        _ => Err(active_error(lane, front).unwrap_or_else(|| {
            match sync.and_then(|s| s.error.clone()) {
                Some(e) => HostError::DeviceFault(e),
                None => {
                    let mut why = decision
                        .reason
                        .unwrap_or("record decided nothing")
                        .to_string();
                    if let Some(e) = fence.first_error(&identity) {
                        why = format!("{why}: {e}");
                    }
                    HostError::RunUndecided(why)
                }
            }
        })),
    };
    let device_time = started.elapsed();

    // 4. Discharge the successor's references on this fence, then retire it.
    if let Some(s) = succ {
        let wait = blocking.then_some(timeout);
        let mut need_quiescence = false;
        {
            let st = lane.queue.get_mut(s).expect("successor");
            let j = st
                .active
                .as_mut()
                .and_then(|a| a.join.as_mut())
                .expect("join");
            if !join::discharge_by_proofs(&*dev, j, None) {
                need_quiescence = true;
            }
        }
        if need_quiescence && wait.is_some() {
            // Proofs follow this run's (complete) boundaries closely: wait for them, bounded.
            let mut j = lane
                .queue
                .get_mut(s)
                .and_then(|st| st.active.as_mut())
                .and_then(|a| a.join.take())
                .expect("join");
            let done =
                MutexGuard::unlocked(lane, || join::discharge_by_proofs(&*dev, &mut j, wait));
            need_quiescence = !done;
            if let Some(a) = lane.queue.get_mut(s).and_then(|st| st.active.as_mut()) {
                a.join = Some(j);
            }
        }
        if need_quiescence {
            let ps = outside_lock(lane, blocking, || sync_pair(&*dev, pair, timeout));
            let j = lane
                .queue
                .get_mut(s)
                .and_then(|st| st.active.as_mut())
                .and_then(|a| a.join.as_mut())
                .expect("join");
            if ps.quiescent {
                join::discharge_on_quiescence(j);
            } else {
                return give_up(
                    shared,
                    lane,
                    HostError::DeviceUnusable("a successor's join could not be discharged".into()),
                    "a successor's wait references could not be proven released",
                );
            }
        }
    }
    if fence.retire(&identity).is_err() {
        return give_up(
            shared,
            lane,
            HostError::DeviceUnusable("the completion fence could not be retired".into()),
            "references on a retiring fence",
        );
    }
    lane.ledger.forget(identity.slot, identity.epoch);
    lane.slots[slot_idx].occupant = None;

    // 5. Copy back after a success, release the staging, end the run.
    lane.queue.advance(front, Phase::Terminal).expect("front");
    let (_, mut st) = lane.queue.pop_terminal_front().expect("terminal front");
    if result.is_ok() {
        let sig = &st.callable.signature;
        for ((spec, arg), buf) in sig.args.iter().zip(st.args.iter_mut()).zip(&st.staging) {
            if let (OwnedArg::Tensor { buffer, .. }, Some(p)) = (arg, buf) {
                if spec.direction.copies_back() {
                    if let Err(e) = dev.copy_from_device(buffer.bytes_mut(), *p) {
                        result = Err(HostError::device(format!(
                            "copying argument `{}` back",
                            spec.name
                        ))(e));
                        break;
                    }
                }
            }
        }
    }
    release_staging(&dev, &st.staging);
    if let Some(j) = st.active.as_mut().and_then(|a| a.join.take()) {
        if !j.is_discharged() {
            lane.stale_joins.push(j);
        }
    }
    let report = result.map(|()| RunReport {
        epoch: identity.epoch,
        device_time,
        total_time: st.cell.submitted.elapsed(),
    });
    st.cell.finish(report, std::mem::take(&mut st.args));
    if lane.queue.is_poisoned() && lane.unusable.is_none() && lane.queue.is_empty() {
        // The partial launch that closed admission was drained with a proof: reopen.
        lane.queue.clear_poison();
    }
    Progress::Finalized
}

/// The launch error of a Partial run, which is its outcome whatever the drain finds.
fn active_error(lane: &mut Lane, front: u64) -> Option<HostError> {
    lane.queue
        .get_mut(front)
        .and_then(|s| s.active.as_ref())
        .and_then(|a| a.error.clone())
}

/// Nothing proves the front quiescent: mark the device unusable, retain everything it may
/// touch (staging to quarantine, the slot blocked, references kept), end the front with
/// `err` and every unlaunched run with the device's state.
fn give_up(shared: &Arc<Shared>, lane: &mut Guard<'_>, err: HostError, why: &str) -> Progress {
    tracing::error!(error = %err, "{why}; the device is marked unusable");
    lane.unusable.get_or_insert_with(|| format!("{why}: {err}"));
    let front = lane.queue.front().expect("a front to give up on");
    lane.queue.advance(front, Phase::Terminal).expect("front");
    let (_, mut st) = lane.queue.pop_terminal_front().expect("terminal front");
    lane.quarantine.extend(st.staging.iter().flatten());
    if let Some(id) = st.identity {
        lane.slots[id.slot as usize].quarantined = true;
    }
    if let Some(j) = st.active.as_mut().and_then(|a| a.join.take()) {
        lane.stale_joins.push(j);
    }
    st.cell.finish(Err(err), std::mem::take(&mut st.args));
    shared.cv.notify_all();
    Progress::Finalized
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<RunHandle>();
}
