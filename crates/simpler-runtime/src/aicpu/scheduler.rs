//! A scheduler thread (`docs/chip-runtime.md`, scheduler): owns the clusters `c ≡ index (mod
//! schedulers)`; each of their cores has a running slot and a pending slot (the next task is
//! pre-loaded into the core's other payload buffer while the current one runs). Each pass
//! handles every finished dispatch, then fills free slots from the ready queues — AIC and AIV
//! tasks one core per block, MIX tasks one whole cluster per block, never partially; SPMD
//! blocks are handed out in waves, and a `require_sync_start` task drains the chip until all
//! its blocks can start on idle cores at once.
//!
//! Placement is balanced across schedulers: a block goes to an idle core of this scheduler,
//! else it is left in the queue for another scheduler that has an idle place for it (the
//! chip-wide idle map says which), and it waits in a busy core's pending slot only when no
//! place that could run it is idle anywhere, or when more blocks are ready than the idle
//! places can take (every idle place gets one of the others).
//!
//! A dispatch whose kernel deferred its completion on an async engine (`scheduler_deferred`,
//! `docs/chip-runtime.md` §18) is counted only once its conditions hold.
//!
//! Idle schedulers park on their doorbell (rung by cores on every COND write and by whoever
//! makes a task ready, and by the SDMA engine at each landing; timed parks while a dispatch
//! waits for a counter). The run's two clocks ([`watchdog`](super::watchdog)) end it instead
//! of letting it hang: the no-progress clock fails it with SCHEDULER_TIMEOUT and a stall
//! class; a dispatch that overruns the op-execute clock fails it with OP_EXECUTE_TIMEOUT,
//! and its core is abandoned — the scheduler stops waiting for it and leaves without it
//! (the kernel may still be running; the run state it reads is then never freed). After
//! any error the orchestrator gets one scheduler timeout to return; then the schedulers
//! leave without it too, and the last one out publishes the result.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use simpler_abi::*;
use simpler_device::AicpuContext;

use super::deferred::Waiting;
use super::drain::NO_DRAIN;
use super::idle::preload_allowance;
use super::state::RunShared;
use super::task::{Shape, TaskId, LANE_BITS};
use super::watchdog::{self, RunningDispatch};
use crate::handshake::{
    ack, dispatch_state, next_dispatch_id, ready, DispatchState, EXITED, EXIT_SIGNAL,
};
use crate::trace::{self, Tracer, NONE32, NONE64};

#[path = "scheduler_deferred.rs"]
mod scheduler_deferred;
#[path = "scheduler_trace.rs"]
mod scheduler_trace;

/// How long one park lasts before the thread looks around anyway.
const PARK_SLICE: Duration = Duration::from_millis(20);
/// Passes with no progress that yield the CPU before the thread parks: a completion is
/// usually microseconds away while cores are busy, and parking costs a futex round trip.
const IDLE_YIELDS: u32 = 100;
/// The same on a pool fiber while a core of this scheduler is busy: a yield is one queue
/// push and lets the cores queued before it run, so the next pass collects their ends
/// together, where a park costs a wake-up per COND write.
const POOL_IDLE_YIELDS: u32 = 4;
/// The first timed park while dispatches wait for COUNTER conditions (nobody rings for a
/// counter); each park that finds nothing doubles it, up to [`DEFERRED_SLICE_MAX`].
const DEFERRED_SLICE_MIN: Duration = Duration::from_micros(20);
/// The longest of those timed parks.
const DEFERRED_SLICE_MAX: Duration = Duration::from_millis(1);

/// One dispatch in flight on a core.
#[derive(Clone, Copy)]
struct Sub {
    task: TaskId,
    id: u32,
    /// Lane of the task's kernel this dispatch runs (0 AIC, 1 AIV0, 2 AIV1).
    lane: u8,
    /// The SPMD block it runs.
    block: u32,
    /// When it became the core's running dispatch (the start of its op-execute clock).
    started: Instant,
    /// Its ACK was recorded (level dispatch).
    acked: bool,
}

/// One core as its scheduler sees it.
struct CoreExec {
    id: u32,
    ty: CoreType,
    /// Its cluster (chip-wide index) and lane there (0 AIC, 1 AIV0, 2 AIV1): its place in
    /// the idle map.
    cluster: u32,
    lane: usize,
    running: Option<Sub>,
    pending: Option<Sub>,
    last_dispatch: u32,
    /// Pass number of the core's last completion: recently finished cores are still polling
    /// (not parked), so dispatching to them first is cheaper.
    warm: u64,
    /// Its running dispatch overran the op-execute clock: the core is left to it and
    /// neither collected nor waited for again in this run.
    abandoned: bool,
}

impl CoreExec {
    fn idle(&self) -> bool {
        self.running.is_none()
    }

    /// Has a dispatch this scheduler still waits for.
    fn busy(&self) -> bool {
        self.running.is_some() && !self.abandoned
    }
}

struct Scheduler<'a, 'c> {
    ctx: &'a AicpuContext<'c>,
    /// Passes of the main loop so far.
    pass: u64,
    /// Scratch list of placements (kept to avoid allocating per pass).
    places: Vec<usize>,
    shared: &'a RunShared,
    index: usize,
    cores: Vec<CoreExec>,
    /// Owned clusters as indices into `cores`: [AIC, AIV0, AIV1].
    clusters: Vec<[usize; 3]>,
    /// When this scheduler first saw the run failed (the start of the orchestrator's grace).
    failed_at: Option<Instant>,
    /// This thread's trace recorder (`None`: the run records nothing).
    tracer: Option<Tracer>,
    /// Finished dispatches waiting for their deferred-completion conditions.
    waiting: Vec<Waiting>,
    /// The chip's SDMA engine, if it has one.
    sdma: Option<&'a simpler_device::sdma::SdmaEngine>,
    /// The clock as read once at the start of the current pass
    /// ([`RunShared::tick`]): dispatch stamps and the op-execute clock use it.
    now: Instant,
}

/// Runs scheduler `index` of `schedulers` until the run is over.
pub(crate) fn run(ctx: &AicpuContext<'_>, shared: &RunShared, index: u32, schedulers: u32) {
    let topo = ctx.topology;
    let mut s = Scheduler {
        ctx,
        pass: 0,
        places: Vec::with_capacity(72),
        shared,
        index: index as usize,
        cores: Vec::new(),
        clusters: Vec::new(),
        failed_at: None,
        tracer: Tracer::for_aicpu(&shared.mem, ctx.thread_idx),
        waiting: Vec::new(),
        sdma: ctx.sdma,
        now: shared.tick(),
    };
    for c in (0..topo.clusters).filter(|c| c % schedulers == index) {
        let base = s.cores.len();
        for (lane, id) in topo.cluster_cores(c).into_iter().enumerate() {
            s.cores.push(CoreExec {
                id,
                ty: topo.core_type(id),
                cluster: c,
                lane,
                running: None,
                pending: None,
                last_dispatch: 0,
                warm: 0,
                abandoned: false,
            });
        }
        s.clusters.push([base, base + 1, base + 2]);
    }
    for c in &s.cores {
        ctx.cores[c.id as usize].set_owner(Some(ctx.doorbell.clone()));
        shared.mem.mailbox(c.id).link_sdma(ctx.sdma);
    }
    let _ = shared.bells[s.index].set(ctx.doorbell.clone());
    s.wait_ready();
    s.serve();
    s.shutdown();
}

impl Scheduler<'_, '_> {
    fn regs(&self, core: usize) -> &simpler_device::CoreRegs {
        &self.ctx.cores[self.cores[core].id as usize]
    }

    /// Waits until every owned core has reported READY for this run.
    fn wait_ready(&self) {
        let want = ready(self.shared.desc.epoch);
        for i in 0..self.cores.len() {
            while self.regs(i).read_cond() != want {
                self.ctx.doorbell.prepare_park();
                if self.regs(i).read_cond() == want {
                    self.ctx.doorbell.cancel_park();
                    break;
                }
                self.ctx.park(PARK_SLICE);
            }
        }
    }

    /// The main loop: returns once the run is over and this scheduler's cores are idle (or
    /// abandoned).
    fn serve(&mut self) {
        let mut idle_passes = 0u32;
        // Level scheduler: the start of the current run of idle passes.
        let mut idle_since: Option<u64> = None;
        let mut deferred_slice = DEFERRED_SLICE_MIN;
        loop {
            self.pass += 1;
            self.now = self.shared.tick();
            let t0 = trace::start(&self.tracer, TRACE_LEVEL_SCHEDULER);
            let mut progress = self.collect();
            progress |= self.settle_deferred();
            if let (Some(t), Some(t0), true) = (self.tracer.as_mut(), t0, progress) {
                t.phase(TRACE_PHASE_SCHED_COLLECT, NONE64, NONE32, t0);
            }
            let busy = self.cores.iter().any(CoreExec::busy);
            let fatal = self.shared.errors.is_fatal();
            if !busy && (self.shared.all_done() || (fatal && self.orchestrator_finished())) {
                // A failed run's waiting dispatches never complete; copies still in flight
                // land before this thread leaves (their memory is the run's).
                self.drop_waiting();
                self.wait_for_copies();
                return;
            }
            if !fatal {
                let t0 = trace::start(&self.tracer, TRACE_LEVEL_SCHEDULER);
                let placed = self.dispatch();
                if let (Some(t0), true) = (t0, placed) {
                    self.record_place(t0);
                }
                progress |= placed;
            }
            if progress {
                idle_passes = 0;
                deferred_slice = DEFERRED_SLICE_MIN;
                self.end_idle(&mut idle_since);
                continue;
            }
            // Nothing moved this pass: look at the clocks. After either fires the run is
            // failed: nothing more is dispatched, and the loop ends once this scheduler's
            // cores are idle or abandoned. A core is never left earlier: a kernel still
            // running reads its task's arguments, which live in the run state.
            if self.op_execute_clock() {
                continue;
            }
            if !self.shared.errors.is_fatal() && watchdog::no_progress(self.shared) {
                continue;
            }
            let yields = if simpler_device::wait::polling_pays() {
                IDLE_YIELDS
            } else if self.cores.iter().any(CoreExec::busy) {
                POOL_IDLE_YIELDS
            } else {
                0
            };
            if idle_passes < yields {
                idle_passes += 1;
                if idle_since.is_none() {
                    idle_since = trace::start(&self.tracer, TRACE_LEVEL_SCHEDULER);
                }
                simpler_device::wait::yield_now();
                continue;
            }
            self.end_idle(&mut idle_since);
            let bell = self.ctx.doorbell;
            bell.prepare_park();
            if self.has_work() {
                bell.cancel_park();
            } else {
                let t0 = trace::start(&self.tracer, TRACE_LEVEL_SCHEDULER);
                // Counters ring no doorbell: while dispatches wait for one, parks are short.
                let slice = if self.waiting.is_empty() {
                    PARK_SLICE
                } else {
                    let s = deferred_slice;
                    deferred_slice = (deferred_slice * 2).min(DEFERRED_SLICE_MAX);
                    s
                };
                bell.park(slice);
                if let (Some(t), Some(t0)) = (self.tracer.as_mut(), t0) {
                    t.phase(TRACE_PHASE_SCHED_PARK, NONE64, NONE32, t0);
                }
            }
        }
    }

    /// After an error: whether the orchestrator is done, or has had one scheduler timeout
    /// since this scheduler saw the error and is left behind (its thread may be looping in
    /// the orchestration; it holds its own reference to the run state).
    fn orchestrator_finished(&mut self) -> bool {
        if self.shared.orch_done.load(Ordering::Acquire) {
            return true;
        }
        let failed_at = *self.failed_at.get_or_insert_with(Instant::now);
        failed_at.elapsed().as_millis() as u64 > self.shared.scheduler_timeout_ms
    }

    /// The op-execute clock of every running dispatch: one that has run past the timeout
    /// fails the run (the first error wins) and its core is abandoned. True if one fired.
    fn op_execute_clock(&mut self) -> bool {
        let limit = self.shared.op_execute_timeout_ms;
        let mut fired = false;
        for i in 0..self.cores.len() {
            let c = &self.cores[i];
            let Some(run) = c.running.filter(|_| !c.abandoned) else {
                continue;
            };
            let ran_ms = self.now.saturating_duration_since(run.started).as_millis() as u64;
            if ran_ms <= limit {
                continue;
            }
            let topo = self.ctx.topology;
            watchdog::op_execute_overrun(
                self.shared,
                &RunningDispatch {
                    task: run.task,
                    lane: run.lane,
                    block: run.block,
                    core: c.id,
                    core_type: c.ty,
                    cluster: topo.cluster_of(c.id),
                    ran_ms,
                },
            );
            self.cores[i].abandoned = true;
            self.shared.abandoned_cores.fetch_add(1, Ordering::AcqRel);
            fired = true;
        }
        if fired {
            // Parked peers re-check at once: the run is failed.
            self.shared.ring_schedulers();
            self.shared.ring_orchestrator();
        }
        fired
    }

    /// Handles every finished dispatch; true if any.
    ///
    /// With a pending dispatch behind the running one, COND may already speak of the pending
    /// one: its ACK or FIN implies the running one finished normally; its FIN_SKIPPED means
    /// the running one failed and the pending one never ran.
    fn collect(&mut self) -> bool {
        let mut any = false;
        for i in 0..self.cores.len() {
            let Some(run) = self.cores[i].running.filter(|_| !self.cores[i].abandoned) else {
                continue;
            };
            let cond = self.regs(i).read_cond();
            if self.tracer.is_some() && !run.acked && cond == ack(run.id) {
                self.instant(TRACE_PHASE_ACK, i, run.task);
                if let Some(r) = self.cores[i].running.as_mut() {
                    r.acked = true;
                }
            }
            if let Some(p) = self.cores[i].pending {
                let both = match dispatch_state(cond, p.id) {
                    DispatchState::Running if cond == ack(p.id) => {
                        if self.tracer.is_some() {
                            self.instant(TRACE_PHASE_ACK, i, p.task);
                            if let Some(q) = self.cores[i].pending.as_mut() {
                                q.acked = true;
                            }
                        }
                        self.finish(i, run, false);
                        self.advance(i);
                        any = true;
                        continue;
                    }
                    DispatchState::Running => None,
                    DispatchState::Finished => Some((false, false)),
                    DispatchState::Failed => Some((false, true)),
                    DispatchState::Skipped => Some((true, false)),
                };
                if let Some((run_failed, pending_failed)) = both {
                    self.finish(i, run, run_failed);
                    self.finish(i, p, pending_failed);
                    self.cores[i].pending = None;
                    self.advance(i);
                    any = true;
                    continue;
                }
            }
            let state = dispatch_state(cond, run.id);
            if state != DispatchState::Running {
                // A skipped dispatch's cause was an earlier dispatch, already reported.
                self.finish(i, run, state == DispatchState::Failed);
                self.advance(i);
                any = true;
            }
        }
        any
    }

    /// Core `i`'s running dispatch is over: its pending one (if any) becomes the running
    /// one, and a core left with none is marked idle in the chip-wide map.
    fn advance(&mut self, i: usize) {
        let c = &mut self.cores[i];
        // The op-execute clock of the promoted dispatch starts now, when it starts to run.
        let now = self.now;
        c.running = c.pending.take().map(|sub| Sub {
            started: now,
            ..sub
        });
        if c.running.is_none() {
            self.shared.idle.set(c.cluster, c.lane, true);
        }
    }

    fn finish(&mut self, core: usize, sub: Sub, failed: bool) {
        if self.tracer.is_some() {
            self.instant(TRACE_PHASE_FIN, core, sub.task);
        }
        self.cores[core].warm = self.pass;
        let shared = self.shared;
        // Progress first: whoever then sees nothing running sees this progress too.
        shared.progress_coarse();
        shared.running.fetch_sub(1, Ordering::AcqRel);
        if failed {
            let core_id = self.cores[core].id;
            let mailbox = shared.mem.mailbox(core_id);
            let code = mailbox.fatal_code();
            let func = shared.task(sub.task).body().func_ids[usize::from(sub.lane)];
            if code == simpler_abi::KERNEL_PANIC_FATAL_CODE {
                let text = mailbox.take_panic().unwrap_or_default();
                shared.errors.sched_fail(SCHED_KERNEL_FATAL, || {
                    format!(
                        "kernel func {func} (task {:#x}) on core {core_id} panicked: {text}",
                        sub.task
                    )
                });
            }
            shared.errors.sched_fail(SCHED_KERNEL_FATAL, || {
                // A comm code is named (`docs/comm.md` §3).
                let name = simpler_abi::comm::code_name(code)
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default();
                format!(
                    "kernel func {func} (task {:#x}) on core {core_id} reported fatal code \
                     {code}{name}",
                    sub.task
                )
            });
        }
        if !failed && self.defer(core, sub) {
            return;
        }
        self.count_subtask(sub.task);
    }

    /// One more subtask of `task` is over; the last one completes the task.
    pub(super) fn count_subtask(&self, id: TaskId) {
        let shared = self.shared;
        let task = shared.task(id);
        // Read the count before adding ours: once the last subtask is counted the task may
        // complete, be consumed and its slot be reused by another thread.
        let needed = task.body().subtasks();
        if task.done_subtasks.fetch_add(1, Ordering::AcqRel) + 1 == needed {
            shared.complete_and_route(id);
        }
    }

    /// Fills free slots from the ready queues; true if anything was dispatched.
    fn dispatch(&mut self) -> bool {
        if self.shared.drain.task.load(Ordering::Acquire) != NO_DRAIN {
            return self.drain();
        }
        if self.cores.is_empty() {
            // More schedulers than clusters: this one has nowhere to place a task.
            return false;
        }
        let mut any = false;
        for shape in [Shape::Mix, Shape::Aic, Shape::Aiv] {
            any |= self.dispatch_shape(shape);
        }
        any
    }

    /// True when core `i` can take a dispatch now: it is idle, or (unless `only_idle`) its
    /// pending slot is free and it has picked up its running dispatch. DMB holds one value:
    /// writing a pending id before the core has read the running one would lose the latter.
    fn free_slot(&self, i: usize, only_idle: bool) -> bool {
        let c = &self.cores[i];
        if c.abandoned {
            return false;
        }
        match (c.running, c.pending) {
            (None, _) => true,
            (Some(r), None) if !only_idle => {
                let cond = self.regs(i).read_cond();
                cond == ack(r.id) || dispatch_state(cond, r.id) != DispatchState::Running
            }
            _ => false,
        }
    }

    /// Free placements for one block of `shape`, into `out`: cluster indices for MIX, core
    /// indices otherwise, idle cores first and, among those, the most recently finished.
    fn placements(&self, shape: Shape, lanes: u8, only_idle: bool, out: &mut Vec<usize>) {
        out.clear();
        let free = |i: usize| self.free_slot(i, only_idle);
        match shape {
            Shape::Mix => out.extend((0..self.clusters.len()).filter(|&k| {
                (0..3).all(|l| lanes & LANE_BITS[l] == 0 || free(self.clusters[k][l]))
            })),
            _ => {
                let ty = if shape == Shape::Aic {
                    CoreType::Aic
                } else {
                    CoreType::Aiv
                };
                out.extend((0..self.cores.len()).filter(|&i| self.cores[i].ty == ty && free(i)));
                out.sort_unstable_by_key(|&i| {
                    (!self.cores[i].idle(), std::cmp::Reverse(self.cores[i].warm))
                });
            }
        }
    }

    /// Dispatches ready tasks of `shape`; true if anything was dispatched.
    ///
    /// Blocks go to this scheduler's idle places first. With none left, blocks take free
    /// pending slots here only as far as [`preload_allowance`] allows; a task with none
    /// allowed goes back to the queue and the schedulers owning an idle place for it are
    /// rung.
    fn dispatch_shape(&mut self, shape: Shape) -> bool {
        let queue = &self.shared.ready[shape as usize];
        let mut any = false;
        let mut current: Option<TaskId> = None;
        loop {
            let fresh = current.is_none();
            let task = match current.take().or_else(|| queue.pop()) {
                Some(t) => t,
                None => return any,
            };
            let body = self.shared.task(task).body();
            if body.sync_start && fresh {
                // Enter the drain; if another is active, retry later.
                if !self
                    .shared
                    .drain
                    .enter(task, body.shape, body.lanes, body.block_num)
                {
                    queue.push(task);
                    return any;
                }
                self.shared.ring_schedulers();
                return self.drain() || any;
            }
            let mut places = std::mem::take(&mut self.places);
            self.placements(shape, body.lanes, true, &mut places);
            let idle = !places.is_empty();
            if !idle {
                let unclaimed = body
                    .block_num
                    .saturating_sub(self.shared.task(task).next_block.load(Ordering::Acquire));
                let mut allowance =
                    self.allowance(shape, body.lanes, queue.len() + unclaimed as usize);
                if allowance == 0 {
                    let owners =
                        self.shared.idle.owners_fitting(shape, body.lanes) & !(1 << self.index);
                    if owners != 0 {
                        // Another scheduler can start it on an idle core now: never park
                        // it behind a busy core here.
                        self.places = places;
                        queue.push(task);
                        self.shared.ring_owners(owners);
                        return any;
                    }
                    // The idle places were taken meanwhile: nothing left to wait for.
                    allowance = usize::MAX;
                }
                self.placements(shape, body.lanes, false, &mut places);
                places.truncate(allowance);
            }
            if places.is_empty() {
                self.places = places;
                queue.push(task);
                return any;
            }
            current = Some(task);
            for &place in &places {
                match self.claim_and_place(task, shape, place) {
                    None => {
                        current = None;
                        break;
                    }
                    Some(more) => {
                        any = true;
                        if !more {
                            current = None;
                            break;
                        }
                    }
                }
            }
            self.places = places;
            if !idle {
                if let Some(t) = current.take() {
                    // Blocks remain but this scheduler is full: let others take them.
                    queue.push(t);
                    return any;
                }
            }
            // Blocks left after the idle places: the next turn places them elsewhere.
        }
    }

    /// [`preload_allowance`] for this run, with `waiting` ready blocks of `shape`.
    fn allowance(&self, shape: Shape, lanes: u8, waiting: usize) -> usize {
        let idle = self.shared.idle.count_fitting(shape, lanes);
        preload_allowance(shape, idle, waiting, self.shared.bells.len())
    }

    /// Claims the next block of `task` and dispatches it at `place`: `None` when no block was
    /// left, else whether more blocks remain.
    fn claim_and_place(&mut self, task: TaskId, shape: Shape, place: usize) -> Option<bool> {
        let slot = self.shared.task(task);
        let block_num = slot.body().block_num;
        let block = slot.next_block.fetch_add(1, Ordering::AcqRel);
        if block >= block_num {
            return None;
        }
        self.place_block(task, shape, place, block);
        Some(block + 1 < block_num)
    }

    /// Dispatches block `block` of `task` (claimed by the caller: the task cannot finish
    /// before it runs) at `place`.
    fn place_block(&mut self, task: TaskId, shape: Shape, place: usize, block: u32) {
        let slot = self.shared.task(task);
        let lanes = slot.body().lanes;
        if block == 0 {
            if let Some(t) = trace::at(&mut self.tracer, TRACE_LEVEL_DISPATCH) {
                let ready = slot.ready_ns.load(Ordering::Relaxed);
                t.phase(TRACE_PHASE_READY_WAIT, task, NONE32, ready);
            }
        }
        match shape {
            Shape::Mix => {
                for (lane, &bit) in LANE_BITS.iter().enumerate() {
                    if lanes & bit != 0 {
                        let core = self.clusters[place][lane];
                        self.place(core, task, lane, block);
                    }
                }
            }
            _ => {
                let lane = if shape == Shape::Aic { 0 } else { 1 };
                self.place(place, task, lane, block);
            }
        }
    }

    /// Writes one subtask into the core's next payload buffer and publishes its id.
    fn place(&mut self, core: usize, task: TaskId, lane: usize, block: u32) {
        let t0 = trace::start(&self.tracer, TRACE_LEVEL_DISPATCH);
        let body = self.shared.task(task).body();
        let c = &mut self.cores[core];
        let id = next_dispatch_id(c.last_dispatch);
        c.last_dispatch = id;
        let local = simpler_abi::LocalContext {
            block_idx: block as i32,
            block_num: body.block_num as i32,
        };
        // Buffer `id & 1` is free: the core reads a buffer only after its id is in DMB, and
        // the dispatch that last used it has finished (a core holds at most one other).
        let flags = if body.sync_start {
            simpler_abi::DISPATCH_FLAG_MAY_WAIT
        } else {
            0
        };
        self.shared.mem.mailbox(c.id).write_dispatch(
            id,
            body.kernels[lane],
            task,
            local,
            flags,
            &body.args,
        );
        let sub = Some(Sub {
            task,
            id,
            lane: lane as u8,
            block,
            started: self.now,
            acked: false,
        });
        if c.running.is_none() {
            c.running = sub;
            self.shared.idle.set(c.cluster, c.lane, false);
        } else {
            c.pending = sub;
        }
        self.shared.running.fetch_add(1, Ordering::AcqRel);
        self.shared.progress_coarse();
        let core_id = c.id;
        self.ctx.cores[core_id as usize].write_dmb(u64::from(id));
        if let (Some(t), Some(t0)) = (self.tracer.as_mut(), t0) {
            t.phase(TRACE_PHASE_DISPATCH, task, core_id, t0);
        }
    }

    /// Sync-start drain step; true if this scheduler dispatched blocks.
    ///
    /// The task stays in the drain until all its blocks are claimed; the scheduler that then
    /// takes `go` back from this task ends the drain (resetting the published capacities
    /// before releasing the task word, so the next drain never sees a stale `go`). `go`
    /// names its task, so a scheduler whose step still holds an ended drain's task can
    /// neither claim for the next drain nor end it (which would lose the next task).
    fn drain(&mut self) -> bool {
        let drain = &self.shared.drain;
        // What the drain drains, from the drain's own words: never the task's slot, which a
        // late step (the drain ended and the slot was reused) must not read.
        let Some(view) = drain.view() else {
            return false;
        };
        let mut places = std::mem::take(&mut self.places);
        self.placements(view.shape, view.lanes, true, &mut places);
        drain.idle[self.index].store(places.len() as u32, Ordering::Release);
        let Some(claimed) = drain.claimed(&view) else {
            self.places = places;
            return false;
        };
        let remaining = view.block_num.saturating_sub(claimed);
        if drain.go.load(Ordering::Acquire) != view.task {
            let total: u32 = drain.idle.iter().map(|c| c.load(Ordering::Acquire)).sum();
            // Only from "no drain is go": a step of an ended drain (its task word read
            // before the next drain began) never starts anything.
            if total < remaining
                || remaining == 0
                || drain
                    .go
                    .compare_exchange(NO_DRAIN, view.task, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                self.places = places;
                return false;
            }
            self.shared.ring_schedulers();
        }
        let mut any = false;
        for &place in &places {
            // A claimed block is unrun: the task cannot have finished, its slot is its own.
            let Some(block) = drain.claim(&view) else {
                break;
            };
            self.place_block(view.task, view.shape, place, block);
            any = true;
        }
        self.places = places;
        if drain.end_if_claimed(&view) {
            self.shared.ring_schedulers();
        }
        any
    }

    /// True if a pass would make progress or end the loop.
    fn has_work(&self) -> bool {
        for (i, c) in self.cores.iter().enumerate() {
            if let Some(r) = c.running.filter(|_| !c.abandoned) {
                let cond = self.regs(i).read_cond();
                if dispatch_state(cond, r.id) != DispatchState::Running
                    || c.pending.is_some_and(|p| {
                        cond == ack(p.id) || dispatch_state(cond, p.id) != DispatchState::Running
                    })
                {
                    return true;
                }
            }
        }
        if self.waiting.iter().any(|w| w.ready(self.sdma)) {
            return true;
        }
        let fatal = self.shared.errors.is_fatal();
        let busy = self.cores.iter().any(CoreExec::busy);
        if !busy
            && (self.shared.all_done() || (fatal && self.shared.orch_done.load(Ordering::Acquire)))
        {
            return true;
        }
        if fatal {
            // Parks are bounded: the orchestrator's grace and the clocks are looked at on
            // every wake-up.
            return false;
        }
        if self.shared.drain.task.load(Ordering::Acquire) != NO_DRAIN {
            return true;
        }
        [Shape::Mix, Shape::Aic, Shape::Aiv]
            .into_iter()
            .any(|shape| !self.shared.ready[shape as usize].is_empty() && self.could_take(shape))
    }

    /// True if this scheduler could place a block of a ready task of `shape` now, as
    /// [`dispatch_shape`](Self::dispatch_shape) decides: on an idle core of its own, or in
    /// a free pending slot as far as [`preload_allowance`] allows (each queued task
    /// counted as one block). The queue's head is not visible, so a MIX task is judged as
    /// if it used every lane (the answer errs towards work: a pass that finds none only
    /// costs a pass).
    fn could_take(&self, shape: Shape) -> bool {
        let (lanes, serves): (u8, fn(CoreType) -> bool) = match shape {
            Shape::Aic => (LANE_BITS[0], |t| t == CoreType::Aic),
            Shape::Aiv => (LANE_BITS[1], |t| t == CoreType::Aiv),
            _ => (LANE_BITS[0] | LANE_BITS[1] | LANE_BITS[2], |_| true),
        };
        let mine = || (0..self.cores.len()).filter(|&i| serves(self.cores[i].ty));
        let waiting = self.shared.ready[shape as usize].len();
        mine().any(|i| self.cores[i].idle())
            || (mine().any(|i| self.free_slot(i, false))
                && self.allowance(shape, lanes, waiting) > 0)
    }

    /// Tells every owned core to exit and waits until each has (its cores are idle), except
    /// the abandoned ones: their kernel has not returned; the exit signal waits in DMB for
    /// whenever it does.
    ///
    /// A core that a lazy launch armed and this run never dispatched to is disarmed instead
    /// (`docs/sim-device.md` §13): its kernel never ran, and the launch counts it as ended.
    fn shutdown(&self) {
        let mut started = vec![true; self.cores.len()];
        for (i, started) in started.iter_mut().enumerate() {
            let regs = self.regs(i);
            if self.cores[i].last_dispatch == 0 && regs.disarm() {
                *started = false;
                continue;
            }
            regs.write_dmb(EXIT_SIGNAL);
        }
        for (i, &started) in started.iter().enumerate() {
            let regs = self.regs(i);
            if self.cores[i].abandoned || !started {
                regs.set_owner(None);
                continue;
            }
            while regs.read_cond() != EXITED {
                self.ctx.doorbell.prepare_park();
                if regs.read_cond() == EXITED {
                    self.ctx.doorbell.cancel_park();
                    break;
                }
                self.ctx.park(PARK_SLICE);
            }
            regs.set_owner(None);
        }
    }
}
