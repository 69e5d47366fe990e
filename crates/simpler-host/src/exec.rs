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
//! Issue 6 additions, each owned by its own module and wired in here:
//! - **Health** ([`crate::health`]): the streams every launch records boundaries on are noted
//!   in the device generation's history; at finalize, after the verdict is decided, the fault
//!   notices of the process's monitor ([`crate::fault_monitor`]) are consumed; a suspect
//!   device refuses admission at submit, at prepare and in the launch prologue (NotStarted).
//!   [`recover_device`] (owned workers only) restores admission through a confirmed forced
//!   reset that retires the generation.
//! - **Caller streams** ([`crate::caller_stream`]): a run submitted with a caller stream is
//!   launched with the caller-order edges; its drain also waits for (or queries) Tail and
//!   discharges the run's two references before the fence retires; without a Tail the
//!   fallback synchronize covers the caller's stream too. A borrowed worker never resets the
//!   device: its failures poison the lane and leave recovery to the caller.
//! - **Lifecycle** ([`crate::lifecycle`]): a failed preparation whose rollback proved every
//!   release ends with `RunPreparationRefused` (matched by epoch); an unproven one keeps its
//!   staging and arguments and poisons admission. [`close_lane`] is `close()`,
//!   [`detach_lane`] the drop of an unclosed worker.
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
use simpler_device::{AicoreKernel, AicpuKernel, Device, DeviceError, DevicePtr, StreamId};

use crate::caller_stream::{self, CallerOrder, TailStatus};
use crate::config::RunPlan;
use crate::fault_monitor::{FaultMonitor, NoticeCursor};
use crate::fence::{Completion, FenceError, RunCompletionFence};
use crate::handle::{OwnedArg, RunCell, RunHandle};
use crate::health::{consume_device_fault_notices, DeviceHealth};
use crate::identity::{RunIdentity, StreamRole};
use crate::join::{self, JoinRefs};
use crate::lane::{Phase, RunQueue, LANE_CAPACITY};
use crate::launch::{launch_transaction, LaunchGrade, LaunchPermit};
use crate::lifecycle::{
    close_step, end_of_failed_preparation, CloseStep, Ownership, PreparationEnd, ReleaseMarker,
    WorkerState,
};
use crate::outcome::{
    decide_run_drain, decide_run_execution, device_run_result_terminal, DrainAction, RecordRead,
    RecordReadLedger, RunExecution, RunOutcomeEvidence, Terminal,
};
use crate::pod::{bytes_of, from_bytes};
use crate::registry::Registered;
use crate::slot::{LaneResources, PipelineSlot};
use crate::worker::Shared;
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
    /// The caller ordering of a run launched on a caller's stream.
    order: Option<CallerOrder>,
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
    /// A preparation failure whose rollback could not be proven: the arguments are kept.
    keep_args: bool,
    /// The caller's stream to launch on (a borrowed caller launch).
    caller: Option<StreamId>,
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
    /// Caller orders of runs given up on (their references stay on their own fence).
    stale_orders: Vec<(Arc<RunCompletionFence>, CallerOrder)>,
    /// Arguments of runs whose release could not be proven (kept until teardown).
    retained_args: Vec<Vec<OwnedArg>>,
    /// The release marker of the last proven preparation rollback.
    release_marker: ReleaseMarker,
    /// Health of the device generation.
    pub(crate) health: DeviceHealth,
    /// This lane's position in the fault monitor's ring (`None`: the monitor could not be
    /// installed, so no notice is ever read; silence is not health).
    cursor: Option<NoticeCursor>,
    /// Owned or borrowed context.
    ownership: Ownership,
    next_dispatch: u64,
    generation: u64,
    driving: bool,
    pub(crate) state: WorkerState,
}

impl Lane {
    pub(crate) fn new(
        device: &Arc<dyn Device>,
        depth: u32,
        heap_size: u64,
        ownership: Ownership,
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
            stale_orders: Vec::new(),
            retained_args: Vec::new(),
            release_marker: ReleaseMarker::default(),
            health: DeviceHealth::default(),
            cursor: None,
            ownership,
            next_dispatch: 1,
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
            driving: false,
            state: WorkerState::Open,
        })
    }

    /// Starts reading fault notices (the monitor was acquired for this lane's device).
    pub(crate) fn watch_notices(&mut self, cursor: NoticeCursor) {
        self.cursor = Some(cursor);
    }

    /// Whether this lane reads fault notices.
    pub(crate) fn watches_notices(&self) -> bool {
        self.cursor.is_some()
    }

    /// Why new runs are refused: the lane could not prove a run finished (quarantine), or
    /// the device is suspect (health).
    pub(crate) fn admission_refusal(&self) -> Option<String> {
        if let Some(why) = &self.unusable {
            return Some(why.clone());
        }
        self.health.refusal()
    }

    /// Runs held (queued, prepared or launched).
    pub(crate) fn outstanding(&self) -> usize {
        self.queue.len()
    }

    fn is_closed(&self) -> bool {
        self.state != WorkerState::Open
    }
}

type Guard<'a> = MutexGuard<'a, Lane>;

/// Admits a run (arguments already checked), prepares and launches it if a slot is free.
pub(crate) fn submit(
    shared: &Arc<Shared>,
    callable: Arc<Registered>,
    args: Vec<OwnedArg>,
    plan: RunPlan,
    caller: Option<StreamId>,
) -> Result<RunHandle, HostError> {
    let mut lane = shared.lane.lock();
    loop {
        if lane.is_closed() {
            return Err(HostError::WorkerClosed);
        }
        if let Some(why) = lane.admission_refusal() {
            return Err(HostError::DeviceUnusable(why));
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
        keep_args: false,
        caller,
    };
    lane.queue
        .admit(dispatch, state)
        .expect("admission was checked under the lock");
    pump(shared, &mut lane);
    if caller.is_some() {
        // A caller launch returns only once the run is actually enqueued (or with its launch
        // error): drain predecessors until a slot frees up.
        while let Some(Phase::Queued | Phase::Prepared) = lane.queue.phase(dispatch) {
            if lane.is_closed() {
                break; // a concurrent close ends the run
            }
            let _ = drive_once(shared, &mut lane, None);
        }
        let launch_error = lane.queue.get_mut(dispatch).and_then(|st| {
            st.failed.clone().or_else(|| {
                st.active
                    .as_ref()
                    .filter(|a| a.grade != LaunchGrade::Complete)
                    .and_then(|a| a.error.clone())
            })
        });
        if let Some(e) = launch_error {
            pump(shared, &mut lane);
            return Err(e);
        }
        if cell.is_done() {
            cell.outcome()?;
        }
    }
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

/// `close()` (the caller checked identity and context first): claims CLOSED, drains the lane
/// — unlaunched runs end with [`HostError::WorkerClosed`], launched runs are drained — and
/// cleans up. A cleanup that cannot prove everything free keeps what it could not free and
/// stays owed; the next `close()` retries it.
pub(crate) fn close_lane(shared: &Arc<Shared>) -> Result<(), HostError> {
    let mut lane = shared.lane.lock();
    match close_step(lane.state) {
        CloseStep::Nothing => return Ok(()),
        CloseStep::CloseAndCleanUp => {
            lane.state = WorkerState::Closed { debt: true };
            shared
                .closed
                .store(true, std::sync::atomic::Ordering::Release);
            drain_for_close(shared, &mut lane);
        }
        CloseStep::RetryCleanup => {}
    }
    let r = teardown(shared, &mut lane);
    release_monitor(shared, &mut lane);
    lane.state = WorkerState::Closed { debt: r.is_err() };
    if let Err(why) = &r {
        tracing::error!(why = %why, "close(): cleanup incomplete; close() again retries it");
    }
    r.map_err(HostError::CleanupIncomplete)
}

fn drain_for_close(shared: &Arc<Shared>, lane: &mut Guard<'_>) {
    loop {
        while lane.driving {
            shared.cv.wait(lane);
        }
        let unlaunched = lane.queue.poison();
        for (_, st) in unlaunched {
            end_unlaunched(shared, lane, st, HostError::WorkerClosed);
        }
        if lane.queue.is_empty() {
            break;
        }
        let _ = drive_once(shared, lane, None);
    }
}

/// Dropping a worker that was not closed: what can be finalized without waiting is; runs not
/// launched end with [`HostError::Detached`]; runs still on the device are detached — their
/// handles end with `Detached` and everything they may still touch (staging, slot, events,
/// streams) is kept. Only when nothing was detached is the lane torn down (after a forced
/// reset when an owned device is unusable). A worker closed with cleanup debt retries it.
pub(crate) fn detach_lane(shared: &Arc<Shared>) {
    let mut lane = shared.lane.lock();
    match lane.state {
        WorkerState::Closed { debt: true } => {
            if teardown(shared, &mut lane).is_ok() {
                lane.state = WorkerState::Closed { debt: false };
            }
            return;
        }
        WorkerState::Closed { debt: false } | WorkerState::Detached => return,
        WorkerState::Open => {}
    }
    lane.state = WorkerState::Detached;
    shared
        .closed
        .store(true, std::sync::atomic::Ordering::Release);
    while lane.driving {
        shared.cv.wait(&mut lane);
    }
    while finalize_front(shared, &mut lane, None, false) == Progress::Finalized {}
    for (_, st) in lane.queue.poison() {
        end_unlaunched(
            shared,
            &mut lane,
            st,
            HostError::Detached(
                "the worker was dropped without close() before the run launched".into(),
            ),
        );
    }
    let mut detached = 0usize;
    while let Some(front) = lane.queue.front() {
        lane.queue.advance(front, Phase::Terminal).expect("front");
        let (_, mut st) = lane.queue.pop_terminal_front().expect("terminal front");
        retain_run(&mut lane, &mut st);
        st.cell.finish(
            Err(HostError::Detached(
                "the worker was dropped without close() while the run was on the device; \
                 its device resources are kept"
                    .into(),
            )),
            std::mem::take(&mut st.args),
        );
        detached += 1;
    }
    shared.cv.notify_all();
    if detached > 0 {
        tracing::warn!(
            detached,
            "a worker was dropped without close() with runs on the device; their resources are kept"
        );
        lane.unusable
            .get_or_insert_with(|| "runs were detached when the worker was dropped".into());
    } else if let Err(why) = teardown(shared, &mut lane) {
        tracing::error!(why = %why, "dropping the worker: cleanup incomplete; resources kept");
    }
    release_monitor(shared, &mut lane);
}

/// Keeps everything a run given up on may still have the device touch: its staging, its
/// slot, its join and caller-order references.
fn retain_run(lane: &mut Lane, st: &mut RunState) {
    lane.quarantine.extend(st.staging.iter().flatten());
    st.staging.clear();
    if let Some(id) = st.identity {
        lane.slots[id.slot as usize].quarantined = true;
        if let Some(o) = st.active.as_mut().and_then(|a| a.order.take()) {
            let fence = lane.slots[id.slot as usize].fence.clone();
            lane.stale_orders.push((fence, o));
        }
    }
    if let Some(j) = st.active.as_mut().and_then(|a| a.join.take()) {
        lane.stale_joins.push(j);
    }
}

fn release_monitor(shared: &Arc<Shared>, lane: &mut Lane) {
    if lane.cursor.take().is_some() {
        if let Err(e) = FaultMonitor::global().release(&*shared.device) {
            tracing::warn!(error = %e, "uninstalling the fault callback failed");
        }
    }
}

/// Frees every lane resource that is provably free; keeps the rest and names it. An
/// unusable lane first needs its proof: a confirmed forced reset (owned), or a bounded
/// synchronize of every bound stream (borrowed: never a device-wide reset).
fn teardown(shared: &Arc<Shared>, lane: &mut Lane) -> Result<(), String> {
    let dev = &shared.device;
    if lane.unusable.is_some() {
        match lane.ownership {
            Ownership::Owned => match dev.reset(shared.config.run_timeout) {
                Ok(()) => after_confirmed_reset(shared, lane),
                Err(e) => {
                    return Err(format!(
                        "the forced reset was not confirmed ({e}); device memory is left allocated"
                    ))
                }
            },
            Ownership::Borrowed => {
                if !prove_bound_streams_quiescent(shared, lane) {
                    return Err("the borrowed device's bound streams could not be proven \
                                quiescent; the caller owns device recovery"
                        .into());
                }
            }
        }
    }
    let mut kept = Vec::new();
    lane.quarantine.retain(|p| dev.free(*p).is_err());
    if !lane.quarantine.is_empty() {
        kept.push(format!("{} staging buffers", lane.quarantine.len()));
    }
    for s in lane.slots.iter_mut() {
        if !s.release(dev) {
            kept.push(format!("slot {} resources", s.index));
        }
    }
    if !lane.res.release(dev) {
        kept.push("the stream pair or the output heap".into());
    }
    lane.retained_args.clear();
    if kept.is_empty() {
        Ok(())
    } else {
        Err(format!("could not free {}", kept.join(", ")))
    }
}

/// After a confirmed forced reset: the device holds no reference any more. Fences are
/// abandoned and their stale tokens discarded, slots and admission reopen, the record
/// ledger forgets, and the health generation is retired — first, unconditionally — before
/// the fault callback is reinstalled and the notice cursor skipped to now.
fn after_confirmed_reset(shared: &Arc<Shared>, lane: &mut Lane) {
    lane.health.retire_after_confirmed_reset();
    for s in lane.slots.iter_mut() {
        s.fence.abandon();
        s.quarantined = false;
        s.occupant = None;
    }
    for mut j in lane.stale_joins.drain(..) {
        for r in j.refs.iter_mut().filter(|r| !r.is_empty()) {
            let _ = j.pred_fence.discard_stale_wait_reference(r);
        }
    }
    for (fence, mut o) in lane.stale_orders.drain(..) {
        for r in [&mut o.own_wait, &mut o.caller_wait] {
            if !r.is_empty() {
                let _ = fence.discard_stale_wait_reference(r);
            }
        }
    }
    lane.unusable = None;
    lane.queue.clear_poison();
    lane.ledger.reset();
    if let Some(c) = lane.cursor.as_mut() {
        let m = FaultMonitor::global();
        if let Err(e) = m.reinstall_after_device_reset(&*shared.device) {
            tracing::warn!(error = %e, "reinstalling the fault callback after a reset failed");
        }
        c.skip_to_current(m.ring());
    }
}

/// Borrowed teardown: a bounded synchronize of the private pair and of every caller stream a
/// kept run was bound to. Success releases the kept references on quiescence and reopens the
/// slots; failure keeps everything.
fn prove_bound_streams_quiescent(shared: &Arc<Shared>, lane: &mut Lane) -> bool {
    let mut streams = vec![lane.res.aicpu_stream, lane.res.aicore_stream];
    streams.extend(lane.stale_orders.iter().map(|(_, o)| o.caller));
    let ps = sync_streams(&*shared.device, &streams, shared.config.run_timeout);
    if !ps.quiescent {
        return false;
    }
    for j in lane.stale_joins.iter_mut() {
        join::discharge_on_quiescence(j);
    }
    lane.stale_joins.clear();
    for (fence, o) in lane.stale_orders.iter_mut() {
        caller_stream::discharge_on_quiescence(fence, o);
    }
    lane.stale_orders.clear();
    for s in lane.slots.iter_mut() {
        if s.quarantined && s.fence.references() == 0 {
            s.fence.abandon();
            s.quarantined = false;
            s.occupant = None;
        }
    }
    lane.unusable = None;
    true
}

/// Restores admission through a confirmed forced reset (owned workers, no run outstanding).
pub(crate) fn recover_device(shared: &Arc<Shared>) -> Result<(), HostError> {
    let mut lane = shared.lane.lock();
    if lane.is_closed() {
        return Err(HostError::WorkerClosed);
    }
    if lane.ownership == Ownership::Borrowed {
        return Err(HostError::InvalidState(
            "a borrowed worker never resets the device: the caller owns device recovery".into(),
        ));
    }
    while lane.driving {
        shared.cv.wait(&mut lane);
    }
    if lane.outstanding() > 0 {
        return Err(HostError::InvalidState(format!(
            "{} run(s) are outstanding; finish them before recovering the device",
            lane.outstanding()
        )));
    }
    shared
        .device
        .reset(shared.config.run_timeout)
        .map_err(HostError::device(
            "the forced device reset (admission stays closed)",
        ))?;
    after_confirmed_reset(shared, &mut lane);
    let dev = shared.device.clone();
    lane.quarantine.retain(|p| dev.free(*p).is_err());
    lane.retained_args.clear();
    Ok(())
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
                end_unlaunched(shared, lane, st, err);
                continue;
            }
        }
        if lane.is_closed() {
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
        if let Some(why) = lane.admission_refusal() {
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
            Err((e, retained)) => {
                let epoch = lane.queue.get_mut(id).map_or(0, |st| st.cell.epoch);
                if retained.is_empty() {
                    // Every binding and buffer the preparation took is proven released.
                    lane.release_marker.publish(epoch);
                } else {
                    lane.quarantine.extend(retained);
                    lane.unusable.get_or_insert_with(|| {
                        format!("a failed preparation could not release its staging: {e}")
                    });
                }
                let end = end_of_failed_preparation(&mut lane.release_marker, epoch);
                if let Some(st) = lane.queue.get_mut(id) {
                    st.keep_args = end == PreparationEnd::Unproven;
                    st.failed = Some(match end {
                        PreparationEnd::Refused => HostError::RunPreparationRefused {
                            epoch,
                            cause: Box::new(e),
                        },
                        PreparationEnd::Unproven => e,
                    });
                }
            }
        }
    }
}

/// Ends a run that never launched: with its own failure when it has one, else with `err`.
/// A run whose preparation rollback was not proven keeps its arguments in the lane.
fn end_unlaunched(shared: &Arc<Shared>, lane: &mut Lane, mut st: RunState, err: HostError) {
    release_staging(&shared.device, &st.staging);
    if let Some(id) = st.identity {
        if let Some(s) = lane.slots.get_mut(id.slot as usize) {
            if s.occupant == Some(st.cell.dispatch_id) {
                s.occupant = None;
            }
        }
    }
    let err = st.failed.take().unwrap_or(err);
    let args = std::mem::take(&mut st.args);
    if st.keep_args {
        lane.retained_args.push(args);
        st.cell.finish(Err(err), Vec::new());
    } else {
        st.cell.finish(Err(err), args);
    }
    shared.cv.notify_all();
}

fn release_staging(dev: &Arc<dyn Device>, staging: &[Option<DevicePtr>]) {
    for p in staging.iter().flatten() {
        let _ = dev.free(*p);
    }
}

/// Stages the run's tensors and publishes the slot's descriptor, arguments and tables. On
/// failure, rolls back and returns the error with the staging it could not free.
fn prepare(
    shared: &Arc<Shared>,
    lane: &mut Lane,
    id: u64,
    slot_idx: usize,
) -> Result<(), (HostError, Vec<DevicePtr>)> {
    let dev = &shared.device;
    let cfg = &shared.config;
    let heap = lane
        .res
        .heap(dev, cfg.heap_size)
        .map_err(|e| (e, Vec::new()))?;
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
                        ChipTensor::contiguous(p.addr(), shape, *dtype);
                    orch_args.tensor_count += 1;
                }
                OwnedArg::Scalar(v) => {
                    staging.push(None);
                    orch_args.scalars[orch_args.scalar_count as usize] = *v;
                    orch_args.scalar_count += 1;
                }
                OwnedArg::Device { ptr, shape, dtype } => {
                    // In place: the caller owns the buffer and its ordering.
                    staging.push(None);
                    orch_args.tensors[orch_args.tensor_count as usize] =
                        ChipTensor::contiguous(ptr.addr(), shape, *dtype);
                    orch_args.tensor_count += 1;
                }
            }
        }
        let plan = st.plan;
        let desc = RunLaunchDesc {
            magic: RUN_LAUNCH_MAGIC,
            version: RUN_LAUNCH_VERSION,
            epoch: identity.epoch,
            result_addr: slot.result.addr(),
            orch_entry: callable.orchestration.addr,
            orch_args_addr: slot.orch_args.addr(),
            func_table_addr: slot.func_table.addr(),
            func_core_types_addr: slot.func_types.addr(),
            func_count: callable.func_addrs.len() as u32,
            aicpu_thread_num: plan.aicpu_threads,
            heap_addr: heap.addr(),
            heap_size: cfg.heap_size,
            task_window: cfg.task_window,
            scheduler_timeout_ms: cfg.scheduler_timeout.as_millis() as u32,
            core_mailbox_addr: slot.mailboxes.addr(),
            runtime_state_addr: slot.state_word.addr(),
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
        // The rollback: a staging buffer whose free fails is not proven released.
        let retained = staging
            .iter()
            .flatten()
            .copied()
            .filter(|p| dev.free(*p).is_err())
            .collect();
        return Err((e, retained));
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
    let caller = lane.queue.get_mut(id).and_then(|st| st.caller);
    // The streams this run's boundaries are recorded on belong to the generation's history.
    lane.health.note_stream(Some(lane.res.aicore_stream));
    lane.health.note_stream(Some(lane.res.aicpu_stream));
    if let Some(c) = caller {
        lane.health.note_stream(Some(c));
    }
    // Admission is re-checked around the launch claim: a device that turned suspect (or a
    // lane that turned unusable) since preparation refuses before anything is submitted.
    let refusal = lane.admission_refusal();
    let Lane { slots, res, .. } = lane;
    let slot = &mut slots[slot_idx];
    let fence = slot.fence.clone();
    let (desc, result_addr, initialized) = (slot.desc, slot.result, slot.result_initialized);
    let mut join: Option<JoinRefs> = None;
    let mut marker_published = false;
    let order: std::cell::RefCell<Option<CallerOrder>> = std::cell::RefCell::new(None);
    let started = Instant::now();
    let outcome = launch_transaction(
        LaunchPermit::new(identity),
        &identity,
        || HostError::RunUndecided("launch permit for another run".into()),
        |what| HostError::DeviceUnusable(what.into()),
        |sink| {
            if let Some(why) = refusal {
                return Err(HostError::DeviceUnusable(why));
            }
            // Arming prologue: nothing device-visible yet, a failure costs nothing.
            fence
                .arm(&**dev, identity)
                .map_err(fence_err("arming the completion fence"))?;
            let proofs = match &pred {
                Some(_) => Some(slot.ensure_proofs(dev)?),
                None => None,
            };
            let zero = (!initialized).then(|| vec![0u8; std::mem::size_of::<RunResult>()]);
            if let Some(c) = caller {
                let events = slot.caller_events.ensure(&**dev)?;
                let mut o = order.borrow_mut();
                let o = o.insert(CallerOrder::new(c, events));
                // Partial from the first caller-edge attempt (the sink is marked inside).
                marker_published = caller_stream::queue_entry(
                    &**dev,
                    res,
                    o,
                    zero.map(|z| (result_addr, z)),
                    sink,
                )?;
            } else if let Some(zero) = zero {
                // An attempted asynchronous copy is device-visible even if the call fails.
                sink.mark_submitted();
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
            // SAFETY: `desc` is this run's launch descriptor; the lane keeps it and the slot
            // regions it names allocated until the run's boundaries are proven (docs/run-lane.md).
            unsafe { dev.launch_aicore(res.aicore_stream, kernels.aicore, desc) }
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
            // SAFETY: as for the AICore kernel above.
            unsafe { dev.launch_aicpu(res.aicpu_stream, kernels.aicpu, desc, threads) }
                .map_err(HostError::device("launching the AICPU kernel"))?;
            sink.mark_submitted();
            fence.note_kernel_submitted(&identity, StreamRole::Aicpu);
            let mut order = order.borrow_mut();
            if let Some(o) = order.as_mut() {
                caller_stream::queue_own_wait(&**dev, res, &fence, &identity, o)?;
            }
            fence
                .record(&**dev, &identity, StreamRole::Aicpu, Some(res.aicpu_stream))
                .map_err(fence_err("recording the AICPU boundary"))?;
            if let Some(o) = order.as_mut() {
                caller_stream::queue_exit(&**dev, &fence, &identity, o)?;
            }
            Ok(())
        },
    );
    let order = order.into_inner();
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
                order,
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
    /// Every stream drained (a kernel fault is reported only after its stream drained).
    quiescent: bool,
    /// The first error (a sticky kernel fault, a timeout, a failed call).
    error: Option<DeviceError>,
}

/// Bounded synchronize of the given streams (the bound streams of a run: never the whole
/// device).
fn sync_streams(dev: &dyn Device, streams: &[StreamId], timeout: Duration) -> PairSync {
    let mut error = None;
    for &s in streams {
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

fn streams_idle(dev: &dyn Device, streams: &[StreamId]) -> bool {
    streams.iter().all(|&s| dev.query_stream(s) == Ok(true))
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

    // The streams this run is bound to: the private pair, plus the caller's stream of a
    // caller launch whose Tail never went out (then only its synchronize can prove the
    // caller's wait consumed). With a Tail, the caller's stream is proven by the Tail alone.
    let pair = [lane.res.aicpu_stream, lane.res.aicore_stream];
    let (tail_recorded, caller) = lane
        .queue
        .get_mut(front)
        .and_then(|st| st.active.as_ref())
        .and_then(|a| a.order.as_ref())
        .map_or((None, None), |o| (Some(o.tail_recorded), Some(o.caller)));
    let mut bound = pair.to_vec();
    let mut all_bound = pair.to_vec();
    if let Some(c) = caller {
        all_bound.push(c);
        if tail_recorded == Some(false) {
            bound.push(c);
        }
    }

    // 2. Non-blocking pre-checks: everything below must complete without waiting.
    let always_sync = cfg.always_synchronize;
    if !blocking {
        let needs_sync = boundaries != Completion::Complete || always_sync;
        if needs_sync && !streams_idle(&*dev, &bound) {
            return Progress::WouldBlock;
        }
        if let Some(s) = succ {
            let j = lane
                .queue
                .get_mut(s)
                .and_then(|s| s.active.as_ref())
                .and_then(|a| a.join.as_ref());
            if !j.is_some_and(|j| join::proofs_complete(&*dev, j)) && !streams_idle(&*dev, &pair) {
                return Progress::WouldBlock;
            }
        }
        if tail_recorded == Some(true) {
            // Poll also queries Tail: the run is not finalized before the caller consumed it.
            let o = lane
                .queue
                .get_mut(front)
                .and_then(|st| st.active.as_ref())
                .and_then(|a| a.order.as_ref())
                .expect("a caller order");
            if caller_stream::tail_status(&*dev, o) != TailStatus::Complete
                && !streams_idle(&*dev, &all_bound)
            {
                return Progress::WouldBlock;
            }
        }
    }
    let timeout = cfg.run_timeout;
    let mut pre_sync: Option<PairSync> = None;
    if always_sync || boundaries != Completion::Complete {
        // Measurement knob, or no completion proof: only the synchronize can answer.
        pre_sync = Some(outside_lock(lane, blocking, || {
            sync_streams(&*dev, &bound, timeout)
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
            if !blocking && !streams_idle(&*dev, &bound) {
                return Progress::WouldBlock;
            }
            Some(outside_lock(lane, blocking, || {
                sync_streams(&*dev, &bound, timeout)
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
    // Health: the notices delivered so far are consumed now, after the verdict (a notice
    // never decides a run).
    consume_notices(shared, lane);

    // 4a. The caller order's references on this run's fence: the AICPU stream's own wait is
    // proven by the completed cpu_done, the caller's wait by Tail (waited for, bounded);
    // otherwise only quiescence of every bound stream releases them.
    let taken = lane
        .queue
        .get_mut(front)
        .and_then(|st| st.active.as_mut())
        .and_then(|a| a.order.take());
    if let Some(mut o) = taken {
        let synced_all = sync.is_some_and(|s| s.quiescent) && !o.tail_recorded;
        let cpu_done = boundaries == Completion::Complete || sync.is_some_and(|s| s.quiescent);
        let mut tail = caller_stream::tail_status(&*dev, &o);
        if tail == TailStatus::Pending && blocking {
            let left = run_deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            let ev = o.events.tail;
            if MutexGuard::unlocked(lane, || dev.synchronize_event(ev, left).is_ok()) {
                tail = TailStatus::Complete;
            }
        }
        if synced_all {
            caller_stream::discharge_on_quiescence(&fence, &mut o);
        }
        if !caller_stream::discharge_by_proofs(
            &fence,
            &mut o,
            cpu_done,
            tail == TailStatus::Complete,
        ) {
            let ps = outside_lock(lane, blocking, || sync_streams(&*dev, &all_bound, timeout));
            if ps.quiescent {
                caller_stream::discharge_on_quiescence(&fence, &mut o);
            } else {
                if let Some(a) = lane.queue.get_mut(front).and_then(|st| st.active.as_mut()) {
                    a.order = Some(o);
                }
                return give_up(
                    shared,
                    lane,
                    HostError::DeviceUnusable(
                        "the caller's stream could not be proven past the run's Tail".into(),
                    ),
                    "a caller launch's references could not be proven released",
                );
            }
        }
    }

    // 4b. Discharge the successor's references on this fence, then retire it.
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
            let ps = outside_lock(lane, blocking, || sync_streams(&*dev, &pair, timeout));
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
    consume_notices(shared, lane);
    let front = lane.queue.front().expect("a front to give up on");
    lane.queue.advance(front, Phase::Terminal).expect("front");
    let (_, mut st) = lane.queue.pop_terminal_front().expect("terminal front");
    retain_run(lane, &mut st);
    st.cell.finish(Err(err), std::mem::take(&mut st.args));
    shared.cv.notify_all();
    Progress::Finalized
}

/// Reads the fault notices delivered so far into the device health (after a verdict).
fn consume_notices(shared: &Arc<Shared>, lane: &mut Lane) {
    let device = shared.device.device_id();
    let Lane { cursor, health, .. } = lane;
    if let Some(c) = cursor.as_mut() {
        consume_device_fault_notices(FaultMonitor::global(), c, health, device);
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<RunHandle>();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::worker::tests::{empty_spec, one_arg, small_worker};
    use crate::CallConfig;

    /// Admission is checked at prepare and again around the launch claim: a device that
    /// turns suspect between the two refuses in the launch prologue (NotStarted: nothing
    /// submitted, the preparation rolled back).
    #[test]
    fn admission_is_rechecked_at_launch() {
        // (device turns suspect between prepare and launch, launched)
        for (suspect_between, launched) in [(false, true), (true, false)] {
            let w = small_worker();
            let id = w.register(&empty_spec()).unwrap();
            let shared = w.shared().clone();
            let callable = shared.table.lock().get(id).unwrap();
            let plan = CallConfig::default().plan(&shared.config).unwrap();
            let mut lane = shared.lane.lock();
            let dispatch = lane.next_dispatch;
            lane.next_dispatch += 1;
            let cell = Arc::new(RunCell::new(
                EPOCHS.fetch_add(1, Ordering::Relaxed),
                dispatch,
            ));
            let st = RunState {
                cell: cell.clone(),
                callable,
                plan,
                args: one_arg(),
                identity: None,
                staging: Vec::new(),
                active: None,
                failed: None,
                keep_args: false,
                caller: None,
            };
            lane.queue.admit(dispatch, st).unwrap();
            lane.queue.advance(dispatch, Phase::Prepared).unwrap();
            assert!(lane.admission_refusal().is_none(), "admitted at prepare");
            prepare(&shared, &mut lane, dispatch, 0)
                .map_err(|(e, _)| e)
                .unwrap();
            lane.queue.advance(dispatch, Phase::Launched).unwrap();
            if suspect_between {
                lane.health.note_own_device_fault(-1, None);
            }
            launch(&shared, &mut lane, dispatch, 0);
            let identity = {
                let st = lane.queue.get_mut(dispatch).unwrap();
                assert_eq!(st.active.is_some(), launched, "{suspect_between}");
                if !launched {
                    assert!(
                        matches!(&st.failed, Some(HostError::DeviceUnusable(m)) if m.contains("suspect")),
                        "{:?}",
                        st.failed
                    );
                    assert!(st.staging.is_empty(), "the preparation was rolled back");
                }
                st.identity.unwrap()
            };
            assert_eq!(
                lane.slots[0].fence.fenced(&identity),
                launched,
                "nothing was submitted when refused"
            );
            assert_eq!(lane.slots[0].occupant.is_some(), launched);
            pump(&shared, &mut lane);
            drop(lane);
            let r = RunHandle {
                shared: shared.clone(),
                cell,
            }
            .wait(None);
            assert_eq!(r.is_ok(), launched, "{r:?}");
            drop(w);
        }
    }
}
