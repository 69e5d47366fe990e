//! The state one run shares among its AICPU threads: the task rings, the ready queues, the
//! chip-wide idle map, the progress counters and the no-progress clock, the doorbells, the sync-start drain, the
//! latched error words and what the threads leaving the run must know (who has left, whether
//! the result is published, whether a core was abandoned).
//!
//! Two clocks bound a run (`docs/chip-runtime.md` §11): the no-progress clock
//! ([`RunShared::stalled_for_ms`]) runs only while nothing is running, and each running
//! dispatch has its own op-execute clock, kept by the scheduler that owns its core.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crossbeam_queue::SegQueue;
use parking_lot::Mutex;
use simpler_abi::RunLaunchDesc;
use simpler_device::Doorbell;

use super::drain::Drain;
use super::idle::IdleMap;
use super::ring::{TaskRing, RING_COUNT};
use super::task::{local_of, ring_of, Shape, Task, TaskId};
use crate::devmem::RunMemory;

/// Default no-progress watchdog, milliseconds (`SIMPLER_SCHEDULER_TIMEOUT_MS` default).
pub const DEFAULT_SCHEDULER_TIMEOUT_MS: u32 = 10_000;
/// Default op-execute timeout, milliseconds: the longest one kernel dispatch may run
/// (`SIMPLER_OP_EXECUTE_TIMEOUT_US` default, 45 s).
pub const DEFAULT_OP_EXECUTE_TIMEOUT_MS: u32 = 45_000;
/// Default `get/set_tensor_data` timeout, milliseconds.
pub const DEFAULT_TENSOR_WAIT_TIMEOUT_MS: u32 = 15_000;
/// Default dependency-pool entries per ring.
pub const DEFAULT_DEP_POOL: u32 = 16_384;

/// First-writer-wins error words (`docs/chip-runtime.md`, error codes) plus the first message.
#[derive(Default)]
pub(crate) struct ErrorWords {
    pub(crate) orch: AtomicI32,
    pub(crate) sched: AtomicI32,
    message: Mutex<String>,
}

impl ErrorWords {
    /// Latches an orchestrator error; returns `code`.
    pub(crate) fn orch_fail(&self, code: i32, message: impl FnOnce() -> String) -> i32 {
        if self
            .orch
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.note(message());
        }
        code
    }

    /// Latches a scheduler error.
    pub(crate) fn sched_fail(&self, code: i32, message: impl FnOnce() -> String) {
        if self
            .sched
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.note(message());
        }
    }

    fn note(&self, message: String) {
        let mut m = self.message.lock();
        if m.is_empty() {
            *m = message;
        }
    }

    /// True once any error is latched.
    pub(crate) fn is_fatal(&self) -> bool {
        self.orch.load(Ordering::Acquire) != 0 || self.sched.load(Ordering::Acquire) != 0
    }

    /// The first latched code (orchestrator first), if any.
    pub(crate) fn code(&self) -> Option<i32> {
        let orch = self.orch.load(Ordering::Acquire);
        let code = if orch != 0 {
            orch
        } else {
            self.sched.load(Ordering::Acquire)
        };
        (code != 0).then_some(code)
    }

    /// The orchestrator error if any, else the scheduler error, with the first message.
    pub(crate) fn verdict(&self) -> Option<(i32, String)> {
        self.code().map(|c| (c, self.message.lock().clone()))
    }
}

/// Everything the AICPU threads of one run share.
pub(crate) struct RunShared {
    /// The launch descriptor's values.
    pub(crate) desc: RunLaunchDesc,
    /// The run's device memory, as the descriptor names it.
    pub(crate) mem: RunMemory,
    pub(crate) rings: [TaskRing; RING_COUNT],
    /// Tasks published by the orchestrator / completed.
    pub(crate) submitted: AtomicU64,
    pub(crate) completed: AtomicU64,
    /// Set once the orchestration has returned.
    pub(crate) orch_done: AtomicBool,
    /// Ready tasks per shape (AIC, AIV, MIX).
    pub(crate) ready: [SegQueue<TaskId>; 3],
    /// Which cores are idle, chip-wide: a task waits in a pending slot only when none that
    /// could run it is.
    pub(crate) idle: IdleMap,
    /// Subtasks dispatched and not yet seen finished.
    pub(crate) running: AtomicU32,
    /// Finished dispatches waiting for their deferred-completion conditions
    /// (`docs/chip-runtime.md` §18), over all schedulers.
    pub(crate) deferred: AtomicU32,
    /// The task of the dispatch that last started to wait (named by the no-progress clock).
    pub(crate) deferred_task: AtomicU64,
    /// Doorbells of the scheduler threads, registered as they start.
    pub(crate) bells: Box<[OnceLock<Arc<Doorbell>>]>,
    /// Doorbell of the orchestrator thread (back-pressure and tensor-data waits).
    pub(crate) orch_bell: OnceLock<Arc<Doorbell>>,
    pub(crate) drain: Drain,
    pub(crate) errors: ErrorWords,
    /// AICPU threads that have finished with this state.
    pub(crate) exited: AtomicU32,
    /// Set when a thread's part of the run unwound (a panic, or a reset ending the kernel).
    pub(crate) unwound: AtomicBool,
    /// func id → kernel entry address (0 = none).
    pub(crate) func_addrs: Vec<u64>,
    /// func id → core type + 1 (0 = none).
    pub(crate) func_types: Vec<u32>,
    started: Instant,
    /// Milliseconds since `started` of the last progress (submit, dispatch, completion).
    last_progress_ms: AtomicU64,
    /// The coarse clock: milliseconds since `started` as of the latest [`tick`](Self::tick)
    /// (every scheduler pass), never ahead of [`now_ms`](Self::now_ms). The hot paths note
    /// progress by it instead of reading the clock per task.
    clock_ms: AtomicU64,
    pub(crate) scheduler_timeout_ms: u64,
    /// The longest one kernel dispatch may run, milliseconds.
    pub(crate) op_execute_timeout_ms: u64,
    /// Scheduler threads that have left the run.
    pub(crate) schedulers_exited: AtomicU32,
    /// Set once the result record is published (it is published once).
    pub(crate) published: AtomicBool,
    /// Cores abandoned with a kernel still running past the op-execute timeout: such a
    /// kernel may still read its task's arguments, which live in this state, so the state is
    /// never freed.
    pub(crate) abandoned_cores: AtomicU32,
    /// The device clock's origin when the run records level dispatch or more (tasks are
    /// stamped with the time they became ready), else `None`.
    pub(crate) trace_ready_origin: Option<u64>,
    /// Set while the host builds a `host_build_graph` image (`hbg`): nothing is queued
    /// (the device finds the ready tasks in the image) and nothing is reclaimed.
    pub(crate) build: bool,
    /// `host_build_graph` on the device: each task's wake list, from the image; completions
    /// release these instead of fanout lists.
    pub(crate) wakes: Option<WakeLists>,
    /// Most tasks a ready queue may hold (`host_build_graph`); 0 = unbounded.
    pub(crate) ready_cap: u32,
}

/// Every task's wake list: the tasks its completion releases.
pub(crate) struct WakeLists {
    /// `(first, count)` into `list`, per task.
    spans: Vec<(u32, u32)>,
    list: Vec<u32>,
}

impl WakeLists {
    /// The wake lists of a graph image: task `i`'s is `list[first..first + count]` for
    /// `(first, count) = spans[i]`.
    pub(crate) fn new(spans: Vec<(u32, u32)>, list: Vec<u32>) -> WakeLists {
        WakeLists { spans, list }
    }

    /// The tasks waiting for task `local`.
    pub(crate) fn of(&self, local: u32) -> &[u32] {
        match self.spans.get(local as usize) {
            Some(&(first, count)) => &self.list[first as usize..(first + count) as usize],
            None => &[],
        }
    }
}

impl RunShared {
    /// The state of a run on a chip of `clusters` clusters served by `schedulers` scheduler
    /// threads, with per-ring task windows and dependency pools.
    pub(crate) fn new(
        mem: RunMemory,
        clusters: u32,
        schedulers: usize,
        windows: [u32; RING_COUNT],
        dep_pools: [u32; RING_COUNT],
    ) -> RunShared {
        let desc = *mem.desc();
        let timeout = match desc.scheduler_timeout_ms {
            0 => DEFAULT_SCHEDULER_TIMEOUT_MS,
            t => t,
        };
        let op_execute = match desc.op_execute_timeout_ms {
            0 => DEFAULT_OP_EXECUTE_TIMEOUT_MS,
            t => t,
        };
        RunShared {
            desc,
            mem,
            rings: std::array::from_fn(|r| TaskRing::new(windows[r], dep_pools[r])),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            orch_done: AtomicBool::new(false),
            ready: [SegQueue::new(), SegQueue::new(), SegQueue::new()],
            idle: IdleMap::new(clusters, schedulers),
            running: AtomicU32::new(0),
            deferred: AtomicU32::new(0),
            deferred_task: AtomicU64::new(u64::MAX),
            bells: (0..schedulers).map(|_| OnceLock::new()).collect(),
            orch_bell: OnceLock::new(),
            drain: Drain::new(schedulers),
            errors: ErrorWords::default(),
            exited: AtomicU32::new(0),
            unwound: AtomicBool::new(false),
            func_addrs: mem.func_addrs(),
            func_types: mem.func_types(),
            started: Instant::now(),
            last_progress_ms: AtomicU64::new(0),
            clock_ms: AtomicU64::new(0),
            scheduler_timeout_ms: u64::from(timeout),
            op_execute_timeout_ms: u64::from(op_execute),
            schedulers_exited: AtomicU32::new(0),
            published: AtomicBool::new(false),
            abandoned_cores: AtomicU32::new(0),
            trace_ready_origin: mem
                .trace_control()
                .filter(|c| c.level >= simpler_abi::TRACE_LEVEL_DISPATCH)
                .map(|c| c.clock_origin_ns),
            build: false,
            wakes: None,
            ready_cap: 0,
        }
    }

    /// The slot of task `id`.
    pub(crate) fn task(&self, id: TaskId) -> &Task {
        self.rings[ring_of(id)].slot(local_of(id))
    }

    /// The slot currently holding `id`, if `id` names a task that was issued and still
    /// occupies its slot (not reclaimed and replaced).
    pub(crate) fn live_task(&self, id: TaskId) -> Option<&Task> {
        let ring = self.rings.get(ring_of(id))?;
        if !ring.issued(local_of(id)) {
            return None;
        }
        let slot = ring.try_slot(local_of(id))?;
        (slot.id.load(Ordering::Acquire) == id && !slot.consumed.load(Ordering::Acquire))
            .then_some(slot)
    }

    /// Milliseconds since the run's state was created.
    pub(crate) fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Notes progress for the watchdog. Whoever ends a dispatch notes progress *before* it
    /// decrements `running` (release), so a reader that sees nothing running (acquire) also
    /// sees the progress that ended the last dispatch.
    pub(crate) fn progress(&self) {
        self.last_progress_ms
            .store(self.now_ms(), Ordering::Relaxed);
    }

    /// [`progress`](Self::progress) at the coarse clock's time: no clock read. The time
    /// noted is at most one scheduler pass old, so a stall may be seen that much early
    /// (a pass is microseconds; the timeouts are seconds).
    pub(crate) fn progress_coarse(&self) {
        self.last_progress_ms
            .store(self.clock_ms.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Reads the clock once for a scheduler pass and advances the coarse clock to it.
    pub(crate) fn tick(&self) -> Instant {
        let now = Instant::now();
        let ms = now.saturating_duration_since(self.started).as_millis() as u64;
        self.clock_ms.fetch_max(ms, Ordering::Relaxed);
        now
    }

    /// The no-progress clock: milliseconds since the last progress, counted only while no
    /// subtask is running (0 while any is: a running kernel is bounded by its op-execute
    /// clock instead, so a long healthy kernel never trips the no-progress watchdog).
    pub(crate) fn stalled_for_ms(&self) -> u64 {
        if self.running.load(Ordering::Acquire) > 0 {
            return 0;
        }
        self.now_ms()
            .saturating_sub(self.last_progress_ms.load(Ordering::Relaxed))
    }

    /// Scheduler threads of the run.
    pub(crate) fn schedulers(&self) -> u32 {
        self.bells.len() as u32
    }

    /// Claims the one publication of the result record; true for the caller that got it.
    pub(crate) fn claim_publication(&self) -> bool {
        self.published
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Wakes every parked scheduler.
    pub(crate) fn ring_schedulers(&self) {
        for bell in self.bells.iter().filter_map(|b| b.get()) {
            bell.ring();
        }
    }

    /// Wakes the orchestrator if it is parked.
    pub(crate) fn ring_orchestrator(&self) {
        if let Some(b) = self.orch_bell.get() {
            b.ring();
        }
    }

    /// True when the run has nothing left to do.
    pub(crate) fn all_done(&self) -> bool {
        self.orch_done.load(Ordering::Acquire)
            && self.completed.load(Ordering::Acquire) == self.submitted.load(Ordering::Acquire)
    }

    /// Makes `id` ready; a dummy task completes at once (and may make others ready).
    pub(crate) fn make_ready(&self, id: TaskId) {
        if !self.enqueue_unless_dummy(id) {
            self.complete_and_route(id);
        }
    }

    /// Queues `id` for its shape and wakes the schedulers; false (nothing done) for a dummy.
    fn enqueue_unless_dummy(&self, id: TaskId) -> bool {
        let shape = self.task(id).body().shape;
        if shape == Shape::Dummy {
            return false;
        }
        if self.build {
            return true;
        }
        let queue = &self.ready[shape as usize];
        if self.ready_cap != 0 && queue.len() >= self.ready_cap as usize {
            let cap = self.ready_cap;
            self.errors
                .sched_fail(simpler_abi::SCHED_READY_QUEUE_OVERFLOW, || {
                    format!(
                        "the {shape:?} ready queue is full ({cap} tasks): raise PTO2_READY_QUEUE"
                    )
                });
            self.ring_schedulers();
            return true;
        }
        if let Some(origin) = self.trace_ready_origin {
            self.task(id)
                .ready_ns
                .store(simpler_device::clock::device_ns(origin), Ordering::Relaxed);
        }
        queue.push(id);
        let body = self.task(id).body();
        self.ring_for(shape, body.lanes, body.block_num, id);
        true
    }

    /// Wakes the schedulers that can start a block of a ready task of `shape` on `lanes` on
    /// an idle place now — one of them for a one-block task, chosen by `id` so that wakes
    /// spread — and none when no place for it is idle. That loses no task: the idle map's
    /// bits of a scheduler's clusters are written by that scheduler alone, so one that
    /// parks while its map says "idle" looked at the queues after its last placement (and a
    /// push between that look and its park finds it parking and rings it); and with no
    /// place idle, every scheduler that could run the task has a core busy, whose next
    /// COND write wakes it to look at the queues again. Waking every scheduler per ready
    /// task would wake a herd of fibers to start one dispatch.
    fn ring_for(&self, shape: Shape, lanes: u8, block_num: u32, id: TaskId) {
        let owners = self.idle.owners_fitting(shape, lanes);
        if owners == 0 {
            return;
        }
        let pick = if block_num > 1 {
            owners
        } else {
            // The first owner at or after `id mod schedulers`, wrapping around.
            let start = (id % self.bells.len().max(1) as u64) as u32;
            let at_or_after = owners >> start;
            let first = if at_or_after != 0 {
                start + at_or_after.trailing_zeros()
            } else {
                owners.trailing_zeros()
            };
            1u64 << first
        };
        self.ring_owners(pick);
    }

    /// Rings the doorbells of the schedulers whose bits are set in `owners`.
    pub(crate) fn ring_owners(&self, owners: u64) {
        for (i, bell) in self.bells.iter().enumerate() {
            if owners & (1 << i) != 0 {
                if let Some(b) = bell.get() {
                    b.ring();
                }
            }
        }
    }

    /// Drops one pin of `id`; when it was the last, the orchestrator may reclaim the slot.
    pub(crate) fn unpin(&self, id: TaskId) {
        if self.task(id).unpin() {
            self.ring_orchestrator();
        }
    }

    /// Completes task `id`: releases its consumers (those now ready are queued, except
    /// dummies, which are pushed to `dummies` for the caller to complete), its retained
    /// producers, its dependency-pool entries and its own not-completed pin.
    fn complete(&self, id: TaskId, dummies: &mut Vec<TaskId>) {
        let task = self.task(id);
        if let Some(wakes) = &self.wakes {
            // host_build_graph: no wiring races a completion; the image says who waits.
            task.completed.store(true, Ordering::Release);
            for &c in wakes.of(local_of(id)) {
                let c = TaskId::from(c);
                if self.task(c).fanin.fetch_sub(1, Ordering::AcqRel) == 1
                    && !self.enqueue_unless_dummy(c)
                {
                    dummies.push(c);
                }
            }
        } else {
            let mut f = task.fanout.lock();
            f.completed = true;
            task.completed.store(true, Ordering::Release);
            for &c in &f.consumers {
                if self.task(c).fanin.fetch_sub(1, Ordering::AcqRel) == 1
                    && !self.enqueue_unless_dummy(c)
                {
                    dummies.push(c);
                }
            }
            f.consumers.clear();
        }
        let body = task.body();
        for &p in &body.retained {
            self.unpin(p);
        }
        if body.edges > 0 {
            self.rings[ring_of(id)]
                .edges_live
                .fetch_sub(body.edges, Ordering::AcqRel);
        }
        self.completed.fetch_add(1, Ordering::AcqRel);
        self.progress_coarse();
        self.unpin(id);
        self.ring_orchestrator();
        if self.all_done() {
            self.ring_schedulers();
        }
    }

    /// Completes `id` (from a scheduler) and routes every task that became ready.
    pub(crate) fn complete_and_route(&self, id: TaskId) {
        // Only dummy consumers land here (no allocation on the common path), completed with
        // an explicit work list rather than recursion.
        let mut dummies = Vec::new();
        self.complete(id, &mut dummies);
        while let Some(t) = dummies.pop() {
            self.complete(t, &mut dummies);
        }
    }
}
