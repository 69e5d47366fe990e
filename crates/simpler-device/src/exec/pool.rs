//! The process's pool of worker threads that run every sim device's fibers
//! (`docs/sim-device.md` §11): one run queue ([`RunQueue`]), `target` workers (default
//! `available_parallelism`, `SIMPLER_SIM_POOL_THREADS` to change it), the timers of timed
//! parks, and the replacement of workers that leave the pool for a blocking section.
//!
//! - **Workers** take the oldest runnable fiber (urgent ones first) and run it until it
//!   suspends — except the fiber their own running fiber woke last, kept in the worker's
//!   LIFO slot and run next without the shared queue's lock (at most
//!   [`super::protocol::LIFO_STREAK`] in a row); an idle one steals from the other
//!   workers' slots, then sleeps on the queue until a push, or until the earliest timer.
//!   Nothing wakes an idle pool: with no fiber runnable and no timer armed, every worker
//!   sleeps without a deadline.
//! - **Blocking sections** ([`crate::wait::blocking`]): the worker running such a fiber is
//!   counted out of the pool while the section lasts, and a spare thread (or a new one)
//!   takes its place, so that `target` workers keep serving the queue; a worker that finds
//!   the pool above `target` once its section ends retires as a spare (parked, without a
//!   deadline, until needed again).
//! - **The stall monitor** is the safety net for code that blocks a worker outside any
//!   device wait (a kernel spinning on a flag another core sets, or never returning):
//!   while runnable fibers wait and no worker sleeps, it looks every [`MONITOR_TICK`] for a
//!   worker whose slice has kept its thread busy or blocked in the OS for [`STALL_AFTER`],
//!   and counts it out of the pool as if it had entered a blocking section (a worker
//!   merely waiting for a CPU is left alone). It sleeps without a deadline while the
//!   pool keeps up.
//!
//! This module must not know what the fibers run.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::cpu::ThreadProbe;
use super::fiber::{SliceEnd, Suspend, Task};
use super::protocol::{AfterPark, Lifo, RunQueue, Search};
use super::sync::Flag;

/// How long a slice may keep its worker busy (its CPU time advances: a spin, a long
/// computation, page faults) or blocked in the OS (a sleep, a lock, a blocking call) while
/// runnable fibers wait before the monitor counts the worker out of the pool — long enough
/// that a run's ordinary slices on a loaded host never count — except within
/// [`COHORT_WINDOW`] of the last count-out, when [`COHORT_STALL_AFTER`] applies (a cohort of
/// waiting kernels is replaced a generation of workers at a time, and should not wait this
/// long per generation).
pub(crate) const STALL_AFTER: Duration = Duration::from_millis(10);
/// See [`STALL_AFTER`].
pub(crate) const COHORT_STALL_AFTER: Duration = Duration::from_millis(2);
/// See [`STALL_AFTER`].
pub(crate) const COHORT_WINDOW: Duration = Duration::from_millis(50);
/// The stall monitor's period while the pool is saturated.
pub(crate) const MONITOR_TICK: Duration = Duration::from_millis(1);
/// Slices a busy worker runs between two looks at the timers (see [`Pool::work`]).
const TIMER_LOOK_EVERY: u32 = 4;
/// Looks at the queue's length an idle worker takes, searching, before it sleeps (a push
/// meanwhile wakes no sleeper: the searcher takes the fiber), when the machine has a CPU
/// to spare beyond the workers and one host thread; at most half the workers (at least
/// one) search at once. Without a spare CPU a worker sleeps at once: on a 2-CPU host with
/// 2 workers, 64 looks cost ~5 % of the chain's throughput and 512 more, the searcher
/// taking the CPU the host thread needs (`docs/sim-device.md` §11).
const SEARCH_SPINS: u32 = 64;
/// Default stack of a fiber, bytes (the default of a Rust thread): mapped up front,
/// committed by the OS only as it is touched.
pub(crate) const DEFAULT_STACK_BYTES: usize = 2 << 20;

/// A timer heap entry: look at `task` at `at` (nanoseconds on the pool's clock) — wake it
/// if its timed park is due by then, re-arm it if the park now ends later.
struct Timer {
    at: u64,
    task: Arc<Task>,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timer {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        // BinaryHeap is a max-heap: the earliest deadline must compare greatest.
        other.at.cmp(&self.at)
    }
}

/// One worker, as the monitor sees it.
#[derive(Default)]
struct WorkerSlot {
    /// Slices begun, odd while one runs: unchanged and odd across the monitor's ticks means
    /// one slice has lasted that long.
    slices: AtomicU64,
    /// The monitor's last reading of `slices`, and how many ticks in a row it was the same.
    seen: AtomicU64,
    same_ticks: AtomicU64,
    /// The worker's CPU time when the monitor first saw the current slice, nanoseconds.
    cpu_at_first_sight: AtomicU64,
    /// The worker's voluntary context switches then (u64::MAX: unreadable).
    switches_at_first_sight: AtomicU64,
    /// Set by the worker when it starts.
    probe: std::sync::OnceLock<ThreadProbe>,
    /// Counted out of the pool (blocking section, or stalled as the monitor saw it).
    counted_out: AtomicBool,
    /// The worker's LIFO slot: the fiber its running fiber woke last, run next.
    lifo: Arc<Lifo<Arc<Task>>>,
}

thread_local! {
    /// The LIFO slot of the pool worker running on this thread (None on other threads).
    static LOCAL_LIFO: std::cell::RefCell<Option<Arc<Lifo<Arc<Task>>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Worker bookkeeping (changes only when a worker starts, retires or is counted out).
#[derive(Default)]
struct Workers {
    /// Threads serving the queue or counted out of it (spares excluded).
    live: usize,
    /// Of those, counted out (in a blocking section, or stalled).
    out: usize,
    /// Retired threads, each parked on its own slot until reused.
    spares: Vec<Arc<Spare>>,
    /// Every thread's slot, for the monitor.
    slots: Vec<Arc<WorkerSlot>>,
    /// Threads started in all (names).
    started: usize,
}

/// A retired worker's parking place.
#[derive(Default)]
struct Spare {
    go: Flag,
}

/// The pool (one per process).
pub(crate) struct Pool {
    queue: RunQueue<Arc<Task>>,
    target: usize,
    workers: Mutex<Workers>,
    timers: Mutex<BinaryHeap<Timer>>,
    /// Deadline of the earliest timer, nanoseconds since `epoch` (u64::MAX: none).
    next_timer: AtomicU64,
    epoch: Instant,
    monitor: Monitor,
    /// Stack size of new fibers.
    pub(crate) stack_bytes: usize,
    /// Workers serving the queue (`live - out`), read without the lock on every slice.
    serving: std::sync::atomic::AtomicUsize,
    /// The machine's CPUs (`available_parallelism`).
    cpus: usize,
    /// When the monitor last counted out a stalled worker (pool clock, 0: never).
    last_count_out: AtomicU64,
    /// How an idle worker searches before it sleeps (see [`SEARCH_SPINS`]).
    search: Search,
}

#[derive(Default)]
struct Monitor {
    /// Watching (raised) or asleep without a deadline.
    armed: Flag,
    /// A lock-free copy of `armed`, read on every slice.
    armed_hint: AtomicBool,
    /// The monitor thread has been started.
    started: AtomicBool,
}

/// The process's pool (null until first use, and again in a forked child: the child has
/// none of the parent's workers, so its first use starts a pool of its own).
static POOL: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());

/// The process's pool, started on first use.
pub(crate) fn pool() -> &'static Pool {
    let p = POOL.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: a non-null `POOL` points at a leaked `Pool`, never freed.
        return unsafe { &*p };
    }
    let fresh: *mut Pool = Box::into_raw(Box::new(new_pool()));
    match POOL.compare_exchange(
        std::ptr::null_mut(),
        fresh,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => {
            super::fork::forget_pool_in_children(|| {
                POOL.store(std::ptr::null_mut(), Ordering::Release)
            });
            // SAFETY: `fresh` was just leaked into `POOL`, and is never freed.
            unsafe { &*fresh }
        }
        Err(winner) => {
            // SAFETY: `fresh` came from `Box::into_raw` above and was never shared (its
            // pool started nothing: workers start on the first spawn).
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as for `p` above.
            unsafe { &*winner }
        }
    }
}

fn new_pool() -> Pool {
    {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let target = std::env::var("SIMPLER_SIM_POOL_THREADS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or(cpus);
        Pool {
            queue: RunQueue::new(),
            target,
            workers: Mutex::new(Workers::default()),
            timers: Mutex::new(BinaryHeap::new()),
            next_timer: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            monitor: Monitor::default(),
            stack_bytes: DEFAULT_STACK_BYTES,
            serving: std::sync::atomic::AtomicUsize::new(0),
            last_count_out: AtomicU64::new(0),
            cpus,
            search: Search {
                spins: if cpus > target + 1 { SEARCH_SPINS } else { 0 },
                max_searchers: (target / 2).max(1),
            },
        }
    }
}

impl Pool {
    /// Workers that serve the queue when none is counted out.
    pub(crate) fn target(&self) -> usize {
        self.target
    }

    /// OS threads the pool has started so far (workers, spares, the monitor).
    pub(crate) fn threads_started(&self) -> usize {
        self.workers.lock().started + usize::from(self.monitor.started.load(Ordering::Relaxed))
    }

    fn nanos(&self, t: Instant) -> u64 {
        (t.saturating_duration_since(self.epoch).as_nanos() as u64).max(1)
    }

    /// Queues a new fiber (started lazily: the first spawn starts the workers).
    pub(crate) fn spawn(&'static self, task: Arc<Task>) -> std::io::Result<()> {
        self.ensure_workers()?;
        let urgent = task.urgent;
        self.queue.push_as(task, urgent);
        self.arm_monitor_if_saturated();
        Ok(())
    }

    /// Makes a parked fiber runnable (a no-op if it is queued, done, or already woken).
    /// A push from outside the workers (a host thread, a fiber of a blocking section) arms
    /// the stall monitor when every worker is busy: the workers that would arm it may all
    /// be held by kernels that never suspend.
    ///
    /// A wake from a fiber running on a worker (or from the worker itself) puts the fiber
    /// in that worker's LIFO slot while no worker sleeps ([`RunQueue::push_local`]); the
    /// monitor is then armed, since the waking fiber may keep its worker.
    pub(crate) fn wake(&'static self, task: &Arc<Task>) {
        if task.state.wake() {
            let local = LOCAL_LIFO.with(|l| {
                l.borrow()
                    .as_ref()
                    .map(|lifo| self.queue.push_local(lifo, task.clone(), task.urgent))
            });
            match local {
                Some(true) => self.arm_monitor_if_waiting(),
                Some(false) => self.arm_monitor_if_saturated(),
                None => {
                    self.queue.push_as(task.clone(), task.urgent);
                    self.arm_monitor_if_saturated();
                }
            }
        }
    }

    /// Starts (or brings back from the spares) workers until `target` serve the queue.
    fn ensure_workers(&'static self) -> std::io::Result<()> {
        if !self.monitor.started.swap(true, Ordering::AcqRel) {
            let r = std::thread::Builder::new()
                .name("sim-pool-monitor".into())
                .spawn(move || self.watch());
            if let Err(e) = r {
                self.monitor.started.store(false, Ordering::Release);
                return Err(e);
            }
        }
        let mut w = self.workers.lock();
        while w.live - w.out < self.target {
            if let Some(spare) = w.spares.pop() {
                w.live += 1;
                self.serving.store(w.live - w.out, Ordering::Release);
                spare.go.raise(|| {});
                continue;
            }
            let slot = Arc::new(WorkerSlot::default());
            self.queue.register(slot.lifo.clone());
            let idx = w.started;
            let s = slot.clone();
            std::thread::Builder::new()
                .name(format!("sim-pool-{idx}"))
                .spawn(move || self.work(&s))?;
            w.started += 1;
            w.live += 1;
            w.slots.push(slot);
        }
        self.serving.store(w.live - w.out, Ordering::Release);
        Ok(())
    }

    /// Counts the calling worker out of the pool and makes sure another takes its place.
    /// Its LIFO slot closes, and a fiber in it goes to the shared queue.
    fn count_out(&'static self, slot: &WorkerSlot) {
        if !slot.counted_out.swap(true, Ordering::AcqRel) {
            self.queue.close_lifo(&slot.lifo);
            {
                let mut w = self.workers.lock();
                w.out += 1;
                self.serving.store(w.live - w.out, Ordering::Release);
            }
            if let Err(e) = self.ensure_workers() {
                eprintln!("simpler: warning: the sim pool cannot start a worker: {e}");
            }
        }
    }

    /// Counts a worker back in (its blocking section or stall ended).
    fn count_in(&self, slot: &WorkerSlot) {
        if slot.counted_out.swap(false, Ordering::AcqRel) {
            self.queue.open_lifo(&slot.lifo);
            let mut w = self.workers.lock();
            w.out -= 1;
            self.serving.store(w.live - w.out, Ordering::Release);
        }
    }

    /// True (and the worker leaves the live count) when the pool has more than `target`
    /// workers serving the queue.
    fn retire_if_surplus(&self) -> Option<Arc<Spare>> {
        if self.serving.load(Ordering::Acquire) <= self.target {
            return None;
        }
        let mut w = self.workers.lock();
        if w.live - w.out > self.target {
            w.live -= 1;
            self.serving.store(w.live - w.out, Ordering::Release);
            let spare = Arc::new(Spare::default());
            w.spares.push(spare.clone());
            return Some(spare);
        }
        None
    }

    /// Records that `task` parks until `at` (None: untimed). The fiber's live heap entry
    /// (`Task::timer_at`) is kept when it is due by the new deadline (it re-arms itself
    /// when it comes due early); a new entry is pushed when there is none or it is due
    /// later than the new deadline, and the later one goes stale (dropped when it comes
    /// due). Keeping a later entry would sleep the park past its deadline: a 50 µs sleep
    /// after a 20 ms doorbell park that was rung early would last until the 20 ms entry.
    fn arm_timer(&self, at: Option<Instant>, task: &Arc<Task>) {
        let Some(at) = at else {
            task.deadline_ns.store(0, Ordering::SeqCst);
            return;
        };
        let ns = self.nanos(at);
        // SeqCst with `fire_timers`' clear of `timer_at` and read of the deadline: either
        // this read sees the clear (and arms below) or that read sees this deadline.
        task.deadline_ns.store(ns, Ordering::SeqCst);
        let live = task.timer_at.load(Ordering::SeqCst);
        if live != 0 && live <= ns {
            return;
        }
        self.push_timer_if_later(ns, task);
    }

    /// Pushes an entry for `task` at `ns` unless its live entry is due by then.
    fn push_timer_if_later(&self, ns: u64, task: &Arc<Task>) {
        {
            let mut heap = self.timers.lock();
            let live = task.timer_at.load(Ordering::SeqCst);
            if live != 0 && live <= ns {
                return;
            }
            task.timer_at.store(ns, Ordering::SeqCst);
            heap.push(Timer {
                at: ns,
                task: task.clone(),
            });
        }
        if ns < self.next_timer.fetch_min(ns, Ordering::AcqRel) {
            // Sleeping workers may sleep past it.
            self.queue.wake_all();
        }
    }

    /// Wakes the fibers whose timed parks are due.
    fn fire_timers(&'static self) {
        let next = self.next_timer.load(Ordering::Acquire);
        if next == u64::MAX {
            return;
        }
        let now = self.nanos(Instant::now());
        if now < next {
            return;
        }
        let mut due = Vec::new();
        {
            let mut heap = self.timers.lock();
            while heap.peek().is_some_and(|t| t.at <= now) {
                let Some(t) = heap.pop() else { break };
                // Only the fiber's live entry counts; one replaced by an earlier is stale.
                if t.task.timer_at.load(Ordering::SeqCst) == t.at {
                    t.task.timer_at.store(0, Ordering::SeqCst);
                    due.push(t);
                }
            }
            let n = heap.peek().map_or(u64::MAX, |t| t.at);
            self.next_timer.store(n, Ordering::Release);
        }
        for t in due {
            let d = t.task.deadline_ns.load(Ordering::SeqCst);
            if d != 0 && d > now {
                // Parked again since, until later: look again then.
                self.push_timer_if_later(d, &t.task);
                continue;
            }
            if d != 0 {
                self.wake(&t.task);
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        // A deadline in the past would make a sleeping worker spin.
        match self.next_timer.load(Ordering::Acquire) {
            u64::MAX => None,
            ns => Some(self.epoch + Duration::from_nanos(ns)),
        }
    }

    /// The next fiber to run ([`RunQueue::next`]: the worker's LIFO slot, the shared
    /// queue, a brief search, other workers' slots), sleeping while there is none; None to
    /// re-check timers and surplus. An idle worker does not poll for long: on a 2-CPU host
    /// a polling worker takes the CPU that the host thread (or the other worker) needs, and
    /// measured slower at the median and with millisecond tails
    /// (`docs/sim-performance.md`).
    fn next_task(&self, slot: &WorkerSlot, streak: &mut u32) -> Option<Arc<Task>> {
        self.queue.next(
            &slot.lifo,
            streak,
            self.search,
            || self.next_deadline(),
            |_| self.serving.load(Ordering::Acquire) <= self.target,
        )
    }

    /// A worker thread's loop.
    fn work(&'static self, slot: &WorkerSlot) {
        let _alt = crate::crash::WorkerThread::enter();
        if let Some(p) = ThreadProbe::current() {
            let _ = slot.probe.set(p);
        }
        LOCAL_LIFO.with(|l| *l.borrow_mut() = Some(slot.lifo.clone()));
        // Fibers taken from the LIFO slot in a row (see `RunQueue::next`).
        let mut streak = 0;
        // Slices run since the timers were last looked at: a look reads the clock, so a
        // worker busy with short slices looks every TIMER_LOOK_EVERY slices (a due timer
        // then waits a few microseconds longer), and always after waking from a sleep.
        let mut since_look = TIMER_LOOK_EVERY;
        loop {
            if since_look >= TIMER_LOOK_EVERY {
                since_look = 0;
                self.fire_timers();
            }
            since_look += 1;
            if let Some(spare) = self.retire_if_surplus() {
                // Only this thread puts into its slot: empty now, it stays empty.
                self.queue.drain_lifo(&slot.lifo);
                spare.go.wait_raised();
                continue;
            }
            let Some(task) = self.next_task(slot, &mut streak) else {
                since_look = TIMER_LOOK_EVERY;
                continue;
            };
            self.arm_monitor_if_saturated();
            self.run(slot, task);
        }
    }

    /// Runs slices of `task` until it parks, yields or returns.
    fn run(&'static self, slot: &WorkerSlot, task: Arc<Task>) {
        task.state.begin_slice();
        loop {
            slot.slices.fetch_add(1, Ordering::AcqRel);
            let end = task.run_slice();
            slot.slices.fetch_add(1, Ordering::AcqRel);
            match end {
                SliceEnd::Suspended(Suspend::Blocking) => {
                    // The fiber continues at once on this thread; the pool goes on without
                    // this worker until the section ends.
                    self.count_out(slot);
                    continue;
                }
                SliceEnd::Suspended(Suspend::Park(deadline)) => {
                    self.count_in(slot);
                    self.arm_timer(deadline, &task);
                    if task.state.end_slice_parked() == AfterPark::Requeue {
                        let urgent = task.urgent;
                        self.queue.push_as(task, urgent);
                    }
                }
                SliceEnd::Suspended(Suspend::Yield) => {
                    self.count_in(slot);
                    task.state.end_slice_yielded();
                    self.queue.push(task);
                }
                SliceEnd::Done => {
                    self.count_in(slot);
                    task.state.end_slice_done();
                }
            }
            return;
        }
    }

    /// Wakes the stall monitor if fibers wait while no worker sleeps (it then watches until
    /// the pool keeps up again).
    fn arm_monitor_if_saturated(&'static self) {
        if self.monitor.armed_hint.load(Ordering::Acquire) {
            return;
        }
        if !(self.queue.looks_busy() && self.queue.none_sleeping()) {
            return;
        }
        self.arm_monitor();
    }

    /// Wakes the stall monitor if no worker sleeps: a fiber was just put in a LIFO slot,
    /// and the fiber that woke it may keep its worker.
    fn arm_monitor_if_waiting(&'static self) {
        if self.monitor.armed_hint.load(Ordering::Acquire) || !self.queue.none_sleeping() {
            return;
        }
        self.arm_monitor();
    }

    fn arm_monitor(&'static self) {
        let hint = &self.monitor.armed_hint;
        self.monitor
            .armed
            .raise(|| hint.store(true, Ordering::Release));
    }

    /// One tick's look at one worker: counts it out once one slice has lasted
    /// `stall_ticks` ticks (`cohort_ticks` within [`COHORT_WINDOW`] of the last count-out)
    /// with its thread busy or blocked in the OS, not merely waiting for a CPU (the window
    /// then starts again).
    fn look_at(&'static self, s: &WorkerSlot, stall_ticks: u64, cohort_ticks: u64) {
        let now = s.slices.load(Ordering::Acquire);
        let cpu = || s.probe.get().and_then(ThreadProbe::cpu_ns).unwrap_or(0);
        let switches = || s.probe.get().and_then(ThreadProbe::voluntary_switches);
        if s.seen.swap(now, Ordering::AcqRel) != now || now.is_multiple_of(2) {
            s.same_ticks.store(0, Ordering::Release);
            return;
        }
        let same = s.same_ticks.fetch_add(1, Ordering::AcqRel) + 1;
        if same == 1 {
            s.cpu_at_first_sight.store(cpu(), Ordering::Release);
            s.switches_at_first_sight
                .store(switches().unwrap_or(u64::MAX), Ordering::Release);
        }
        if same < cohort_ticks || s.counted_out.load(Ordering::Acquire) {
            return;
        }
        let clock = self.nanos(Instant::now());
        let last = self.last_count_out.load(Ordering::Acquire);
        let in_cohort = last != 0 && clock.saturating_sub(last) < COHORT_WINDOW.as_nanos() as u64;
        if same < stall_ticks && !in_cohort {
            return;
        }
        // CPU time was first read at the first tick of the window.
        let window = (same - 1).max(1) * MONITOR_TICK.as_nanos() as u64;
        let used = cpu().saturating_sub(s.cpu_at_first_sight.load(Ordering::Acquire));
        // Busy: at least half the CPU share a thread gets when the pool's live workers and
        // one host thread share the machine's CPUs (a spinner among more spinners than CPUs
        // gets less than half a CPU, and must still count).
        let live = self.workers.lock().live + 1;
        let share = (self.cpus as u64 * window / live as u64).min(window);
        let busy = used >= share / 2;
        // Blocked: the slice has waited in the OS during the window (a kernel polling
        // through short sleeps is runnable at many looks on a loaded host, which its own
        // wake-ups load, so a look at its state alone would keep missing it).
        let before = s.switches_at_first_sight.load(Ordering::Acquire);
        let blocked = before != u64::MAX && switches().is_some_and(|now| now > before);
        if busy || blocked || s.probe.get().is_none_or(ThreadProbe::asleep) {
            self.last_count_out.store(clock, Ordering::Release);
            self.count_out(s);
        } else {
            // Runnable, not running: the host is loaded. Start the window again.
            s.same_ticks.store(0, Ordering::Release);
        }
    }

    /// The stall monitor's loop.
    fn watch(&'static self) {
        let ticks = |d: Duration| (d.as_nanos() / MONITOR_TICK.as_nanos()).max(1) as u64;
        let (stall_ticks, cohort_ticks) = (ticks(STALL_AFTER), ticks(COHORT_STALL_AFTER));
        loop {
            self.monitor.armed.wait_raised();
            std::thread::sleep(MONITOR_TICK);
            let saturated = (self.queue.looks_busy() || self.queue.any_lifo_occupied())
                && self.queue.none_sleeping();
            if !saturated {
                let hint = &self.monitor.armed_hint;
                self.monitor
                    .armed
                    .lower(|| hint.store(false, Ordering::Release));
                continue;
            }
            let slots: Vec<Arc<WorkerSlot>> = self.workers.lock().slots.clone();
            for s in slots {
                self.look_at(&s, stall_ticks, cohort_ticks);
            }
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    use crate::exec::{park, DeviceThread, ExecutorKind, Waiter};

    /// A fiber woken early from a long timed park (a doorbell park of 20 ms rung at once)
    /// then sleeps briefly: the sleep ends at its own deadline, not at the long park's.
    #[test]
    fn a_short_timed_park_after_a_long_one_woken_early_ends_on_time() {
        let (tx, rx) = mpsc::channel();
        let t = DeviceThread::spawn(ExecutorKind::Pool, "timer-test".into(), false, move || {
            let woken = Arc::new(AtomicBool::new(false));
            let (w, flag) = (Waiter::current(), woken.clone());
            let waker = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(5));
                flag.store(true, Ordering::Release);
                w.wake();
            });
            let long = Instant::now() + Duration::from_secs(5);
            while !woken.load(Ordering::Acquire) && Instant::now() < long {
                park(Some(long));
            }
            let early = Instant::now() < long;
            waker.join().unwrap();
            let start = Instant::now();
            crate::exec::sleep(Duration::from_millis(1));
            tx.send((early, start.elapsed())).unwrap();
        })
        .unwrap();
        let (early, slept) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        t.join();
        assert!(early, "the long park was not woken early");
        assert!(
            slept < Duration::from_secs(1),
            "a 1 ms sleep lasted {slept:?}: it waited for the earlier park's timer"
        );
    }
}
