//! The pool executor's wake-up protocols, written once and checked by the loom model at
//! the bottom of this file (`docs/sim-device.md` §11):
//!
//! - [`TaskState`]: the life of one fiber — queued, running, parked, done — and the one
//!   transition a waker may make on each state, so that a wake-up is never lost and a
//!   fiber never sits in the run queue twice or runs on two workers at once;
//! - [`RunQueue`]: the shared run queue and the workers that sleep on it, under one lock,
//!   so that a fiber made runnable always finds a worker awake or wakes one;
//! - [`Lifo`]: each worker's LIFO slot, the fiber its running fiber woke last, which the
//!   worker runs next without the shared lock ([`RunQueue::push_local`],
//!   [`RunQueue::next`]);
//! - the searching state: a worker that found the queue empty and looks again briefly
//!   before it sleeps; a push that sees one wakes no sleeper.
//!
//! **Who may sleep.** A fiber parks only itself, and only from inside its own slice (it
//! suspends with "park"); a worker sleeps only on the run queue, only once it is empty.
//! **Who must wake whom.** Whoever makes a parked fiber runnable calls [`TaskState::wake`],
//! and if that says so, pushes the fiber on the run queue ([`RunQueue::push`]), which wakes
//! a sleeping worker if there is one, or — on a worker, while none sleeps — puts it in the
//! worker's LIFO slot. **Why no wake-up is lost.** A fiber's state is one atomic changed
//! only by read-modify-writes: a wake that arrives while the fiber still runs (before its
//! worker has recorded the park) turns RUNNING into NOTIFIED, and the worker's own
//! compare-exchange RUNNING → PARKED then fails, so the worker queues the fiber again
//! instead of parking it; a wake that arrives after finds PARKED, and only the one waker
//! whose exchange moved it to QUEUED pushes it (to the queue or a slot: one place). Every
//! access of the state in that chain is a read-modify-write, so each reads the latest
//! state. The run queue's length and the count of sleeping workers live under one mutex,
//! and a worker re-checks the queue under that mutex before it waits on the condition
//! variable that every push notifies while a worker sleeps (and none searches). **Why no
//! fiber is stranded in a slot.** A worker about to sleep counts itself sleeping, then
//! takes each slot's lock and steals what it finds; a put into a slot reads the sleeping
//! count again under the slot's lock and, seeing a sleeper, moves the fiber to the queue.
//! A worker counted out of the pool closes its slot (the fiber in it goes to the queue).
//! **Why a searcher loses nothing.** A push reads the searching count under the queue's
//! lock; a searcher stops counting itself before it re-checks the queue under that lock,
//! so a push that saw it searching is seen by that re-check.
//!
//! Nothing here knows coroutines or threads: the pool calls these around them.

use crossbeam_utils::CachePadded;
#[cfg(all(test, feature = "loom"))]
use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::AcqRel;
use std::sync::atomic::Ordering::Acquire;
use std::sync::atomic::Ordering::Release;
#[cfg(not(all(test, feature = "loom")))]
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize};
use std::sync::Arc;

#[cfg(all(test, feature = "loom"))]
use loom::sync::{Condvar, Mutex};

/// Not running and not queued: waits for a wake-up.
const PARKED: u8 = 0;
/// In the run queue (exactly once).
const QUEUED: u8 = 1;
/// Running on a worker.
const RUNNING: u8 = 2;
/// Running, and woken since its slice began: queued again when the slice ends.
const NOTIFIED: u8 = 3;
/// Its body has returned; never runs again.
const DONE: u8 = 4;

/// The state of one fiber (see the module doc).
#[derive(Debug)]
pub(crate) struct TaskState(AtomicU8);

/// What a worker does with a fiber whose slice ended in a park.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AfterPark {
    /// It is parked; a later wake queues it.
    Parked,
    /// It was woken during its slice: queue it again now.
    Requeue,
}

impl TaskState {
    /// A new fiber, about to be queued for its first slice.
    pub(crate) fn new_queued() -> TaskState {
        TaskState(AtomicU8::new(QUEUED))
    }

    /// A worker took the fiber from the run queue and is about to resume it.
    pub(crate) fn begin_slice(&self) {
        let prev = self.0.swap(RUNNING, AcqRel);
        debug_assert_eq!(prev, QUEUED, "a fiber ran without being queued");
    }

    /// The fiber's slice ended with a park; the worker must not touch the fiber after
    /// [`AfterPark::Parked`] (a waker may already have queued it again).
    pub(crate) fn end_slice_parked(&self) -> AfterPark {
        match self.0.compare_exchange(RUNNING, PARKED, AcqRel, Acquire) {
            Ok(_) => AfterPark::Parked,
            Err(_) => {
                // NOTIFIED: only the worker leaves it, so a plain swap is enough.
                self.0.swap(QUEUED, AcqRel);
                AfterPark::Requeue
            }
        }
    }

    /// The fiber's slice ended with a yield: it goes to the back of the run queue.
    pub(crate) fn end_slice_yielded(&self) {
        self.0.swap(QUEUED, AcqRel);
    }

    /// The fiber's body returned.
    pub(crate) fn end_slice_done(&self) {
        self.0.swap(DONE, AcqRel);
    }

    /// Wakes the fiber: true if the caller must now push it on the run queue (it was
    /// parked). A fiber that is queued or done is left alone; one that is running is
    /// marked so that its worker queues it again.
    pub(crate) fn wake(&self) -> bool {
        // A read-modify-write, not a load: it reads the latest state (a plain load may
        // return an older one, e.g. QUEUED after the fiber has parked, and the wake-up
        // would be lost — the loom model below finds that interleaving).
        let mut cur = self.0.fetch_or(0, AcqRel);
        loop {
            let next = match cur {
                PARKED => QUEUED,
                RUNNING => NOTIFIED,
                _ => return false,
            };
            match self.0.compare_exchange(cur, next, AcqRel, Acquire) {
                Ok(_) => return cur == PARKED,
                Err(seen) => cur = seen,
            }
        }
    }

    /// True once the body has returned.
    #[cfg(all(test, feature = "loom"))]
    pub(crate) fn is_done(&self) -> bool {
        self.0.load(Acquire) == DONE
    }
}

/// Consecutive fibers a worker may take from its LIFO slot before it takes the front of
/// the shared queue first (fairness: two fibers waking each other must not starve the
/// queue).
pub(crate) const LIFO_STREAK: u32 = 3;

/// How an idle worker searches before it sleeps ([`RunQueue::next`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Search {
    /// Looks at the queue's length (0: no search, sleep at once).
    pub(crate) spins: u32,
    /// At most this many workers search at once (more would only burn CPU: one searcher
    /// takes the next push).
    pub(crate) max_searchers: usize,
}

/// The run queue, the workers' LIFO slots and the workers that sleep on the queue.
pub(crate) struct RunQueue<T> {
    /// Read by every worker without the lock; kept off the lock's cache line.
    hints: CachePadded<Hints>,
    state: CachePadded<Lock<QueueState<T>>>,
    work: Cond,
}

/// The run queue's lock-free counters.
struct Hints {
    /// The queue's length as of the last change (a hint: the lock decides).
    len: AtomicUsize,
    /// The count of sleeping workers as of the last change, stored under the lock. The
    /// stall monitor reads it as a hint; [`RunQueue::push_local`] reads it under a LIFO
    /// slot's lock, where it decides (a worker about to sleep stores it before it looks
    /// into the slots).
    sleeping: AtomicUsize,
    /// Workers searching: they found the queue empty and look again briefly before they
    /// sleep. A push that sees one notifies no sleeper (the searcher re-checks the queue
    /// under the lock after it stops searching).
    searching: AtomicUsize,
}

/// One worker's LIFO slot: the fiber last woken by a fiber running on that worker, run by
/// it next. Only its worker's thread puts into it; its worker, a worker about to sleep
/// (a steal) and the stall monitor (a worker counted out) take from it.
pub(crate) struct Lifo<T> {
    slot: Lock<LifoSlot<T>>,
    /// True while a fiber sits in the slot (stored under its lock). Only the owner puts,
    /// so when the owner reads false the slot is empty, and the owner's look at an empty
    /// slot takes no lock.
    occupied: AtomicBool,
}

/// What a LIFO slot's lock protects.
struct LifoSlot<T> {
    /// The fiber, and whether it is urgent (it keeps its place if it goes to the queue).
    task: Option<(T, bool)>,
    /// Closed while its worker is counted out of the pool: wakes go to the shared queue.
    closed: bool,
}

impl<T> Default for Lifo<T> {
    fn default() -> Self {
        Lifo {
            slot: Lock::new(LifoSlot {
                task: None,
                closed: false,
            }),
            occupied: AtomicBool::new(false),
        }
    }
}

impl<T> Lifo<T> {
    #[cfg(not(all(test, feature = "loom")))]
    fn lock(&self) -> Guard<'_, LifoSlot<T>> {
        // A panic never holds this lock over a half-made change: the data stays usable.
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    #[cfg(all(test, feature = "loom"))]
    fn lock(&self) -> Guard<'_, LifoSlot<T>> {
        self.slot.lock().unwrap()
    }

    /// Takes the fiber in the slot, if any.
    fn take(&self) -> Option<(T, bool)> {
        let mut slot = self.lock();
        let t = slot.task.take();
        if t.is_some() {
            self.occupied.store(false, Release);
        }
        t
    }

    /// [`Lifo::take`] by the slot's owner: no lock while the slot is empty.
    fn take_own(&self) -> Option<(T, bool)> {
        if self.occupied.load(Acquire) {
            self.take()
        } else {
            None
        }
    }

    /// True if a fiber sits in the slot.
    pub(crate) fn is_occupied(&self) -> bool {
        self.lock().task.is_some()
    }
}

// std's futex-based primitives, not parking_lot's: a worker sleeps here most of its life,
// and parking_lot parks a sleeper in a process-wide table. A fork taken while a worker
// sleeps copies its entry into the child, where glibc hands the dead worker's stack (and
// the thread data the entry points to) to the child's next thread; that thread's first
// park then corrupts the table and hangs the child (`docs/sim-device.md` §11). A std
// sleeper is a futex word in the queue itself, which the child never uses.
#[cfg(not(all(test, feature = "loom")))]
type Lock<T> = std::sync::Mutex<T>;
#[cfg(not(all(test, feature = "loom")))]
type Guard<'a, T> = std::sync::MutexGuard<'a, T>;
#[cfg(not(all(test, feature = "loom")))]
type Cond = std::sync::Condvar;
#[cfg(all(test, feature = "loom"))]
type Lock<T> = Mutex<T>;
#[cfg(all(test, feature = "loom"))]
type Guard<'a, T> = loom::sync::MutexGuard<'a, T>;
#[cfg(all(test, feature = "loom"))]
type Cond = Condvar;

/// What the run queue's lock protects.
pub(crate) struct QueueState<T> {
    /// Runnable fibers, oldest first.
    pub(crate) queue: VecDeque<T>,
    /// Workers waiting on the condition variable.
    pub(crate) sleeping: usize,
    /// How many fibers at the front of `queue` were queued as urgent.
    pub(crate) urgent: usize,
    /// Sleeping workers notified and not yet awake: a push wakes another worker only if
    /// more sleep than are already being woken (a futex wake per push would cost more than
    /// the work it hands over).
    pub(crate) waking: usize,
    /// Every worker's LIFO slot, for a worker about to sleep to steal from.
    lifos: Vec<Arc<Lifo<T>>>,
}

impl<T> RunQueue<T> {
    pub(crate) fn new() -> RunQueue<T> {
        RunQueue {
            hints: CachePadded::new(Hints {
                len: AtomicUsize::new(0),
                sleeping: AtomicUsize::new(0),
                searching: AtomicUsize::new(0),
            }),
            state: Default::default(),
            work: Default::default(),
        }
    }

    #[cfg(not(all(test, feature = "loom")))]
    fn lock(&self) -> Guard<'_, QueueState<T>> {
        // As for `Lifo::lock`.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    #[cfg(all(test, feature = "loom"))]
    fn lock(&self) -> Guard<'_, QueueState<T>> {
        self.state.lock().unwrap()
    }

    /// Waits on the condition variable until notified or `deadline`; true on timeout.
    /// Under the loom model the wait is untimed, so a lost wake-up is a deadlock loom
    /// reports.
    #[cfg(not(all(test, feature = "loom")))]
    fn wait<'a>(
        &self,
        st: Guard<'a, QueueState<T>>,
        deadline: Option<std::time::Instant>,
    ) -> (Guard<'a, QueueState<T>>, bool) {
        use std::sync::PoisonError;
        match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(std::time::Instant::now());
                let (st, r) = self
                    .work
                    .wait_timeout(st, left)
                    .unwrap_or_else(PoisonError::into_inner);
                (st, r.timed_out())
            }
            None => (
                self.work.wait(st).unwrap_or_else(PoisonError::into_inner),
                false,
            ),
        }
    }

    /// See the non-loom version.
    #[cfg(all(test, feature = "loom"))]
    fn wait<'a>(
        &self,
        st: Guard<'a, QueueState<T>>,
        _deadline: Option<std::time::Instant>,
    ) -> (Guard<'a, QueueState<T>>, bool) {
        (self.work.wait(st).unwrap(), false)
    }

    fn note_len(&self, st: &QueueState<T>) {
        self.hints.len.store(st.queue.len(), Release);
    }

    fn note_sleeping(&self, st: &QueueState<T>) {
        self.hints.sleeping.store(st.sleeping, Release);
    }

    /// Adds a worker's LIFO slot to those a worker about to sleep steals from.
    pub(crate) fn register(&self, lifo: Arc<Lifo<T>>) {
        self.lock().lifos.push(lifo);
    }

    /// Queues a fiber made runnable by a fiber running on the worker that owns `lifo`: into
    /// that slot (true), to run when the current fiber suspends, unless a worker sleeps or
    /// the slot is closed (then on the shared queue, which wakes a sleeper: false). A fiber
    /// the new one displaces from the slot goes to the shared queue.
    ///
    /// No fiber is stranded in the slot: the sleeping count is read again under the slot's
    /// lock after the put, and a worker about to sleep stores its count before it takes
    /// each slot's lock to steal, so either that worker finds the fiber or this call sees
    /// the sleeper and moves the fiber to the shared queue.
    pub(crate) fn push_local(&self, lifo: &Lifo<T>, task: T, urgent: bool) -> bool {
        if self.hints.sleeping.load(Acquire) > 0 {
            self.push_as(task, urgent);
            return false;
        }
        let mut slot = lifo.lock();
        if slot.closed {
            drop(slot);
            self.push_as(task, urgent);
            return false;
        }
        let displaced = slot.task.replace((task, urgent));
        let mine = if self.hints.sleeping.load(Acquire) > 0 {
            slot.task.take()
        } else {
            None
        };
        lifo.occupied.store(slot.task.is_some(), Release);
        drop(slot);
        if let Some((d, u)) = displaced {
            self.push_as(d, u);
        }
        match mine {
            Some((t, u)) => {
                self.push_as(t, u);
                false
            }
            None => true,
        }
    }

    /// Closes `lifo` (its worker is counted out of the pool: its current fiber may not
    /// suspend for long) and moves the fiber in it, if any, to the shared queue.
    pub(crate) fn close_lifo(&self, lifo: &Lifo<T>) {
        let t = {
            let mut slot = lifo.lock();
            slot.closed = true;
            lifo.occupied.store(false, Release);
            slot.task.take()
        };
        if let Some((t, u)) = t {
            self.push_as(t, u);
        }
    }

    /// Opens `lifo` again (its worker is counted back in).
    pub(crate) fn open_lifo(&self, lifo: &Lifo<T>) {
        lifo.lock().closed = false;
    }

    /// Moves the fiber in `lifo`, if any, to the shared queue (its worker leaves).
    pub(crate) fn drain_lifo(&self, lifo: &Lifo<T>) {
        if let Some((t, u)) = lifo.take() {
            self.push_as(t, u);
        }
    }

    /// True if a fiber sits in some worker's LIFO slot (takes the locks: for the stall
    /// monitor).
    pub(crate) fn any_lifo_occupied(&self) -> bool {
        let lifos: Vec<Arc<Lifo<T>>> = self.lock().lifos.clone();
        lifos.iter().any(|l| l.is_occupied())
    }

    /// The next fiber for the worker that owns `lifo`: its LIFO slot first, unless it took
    /// [`LIFO_STREAK`] fibers from it in a row (`streak` counts them; the front of the
    /// shared queue then goes first), then the shared queue; with both empty it searches
    /// (`search`: looks at the queue's length, lock-free) and then sleeps as
    /// [`RunQueue::pop_or_sleep`] does, stealing from the other workers' slots first.
    pub(crate) fn next(
        &self,
        lifo: &Lifo<T>,
        streak: &mut u32,
        search: Search,
        deadline: impl Fn() -> Option<std::time::Instant>,
        stay: impl FnMut(&mut QueueState<T>) -> bool,
    ) -> Option<T> {
        if *streak >= LIFO_STREAK {
            *streak = 0;
            if let Some(t) = self.try_pop_busy() {
                return Some(t);
            }
        }
        if let Some((t, _)) = lifo.take_own() {
            *streak += 1;
            return Some(t);
        }
        *streak = 0;
        if let Some(t) = self.try_pop_busy() {
            return Some(t);
        }
        let searched = self.search(search);
        self.pop_or_sleep_searched(deadline, stay, searched)
    }

    /// [`RunQueue::try_pop`], skipped (None) while the queue looks empty: the caller
    /// re-checks under the lock before it sleeps.
    fn try_pop_busy(&self) -> Option<T> {
        if self.looks_busy() {
            self.try_pop()
        } else {
            None
        }
    }

    /// Counts the caller as searching while it looks at the queue's length up to
    /// `search.spins` times (stopping once it looks non-empty); pushes meanwhile notify no
    /// sleeper. False (no search) when `search.max_searchers` already search (read without
    /// the lock: the cap may be passed by one or two, which costs only CPU).
    fn search(&self, search: Search) -> bool {
        if search.spins == 0 || self.hints.searching.load(Acquire) >= search.max_searchers {
            return false;
        }
        self.hints.searching.fetch_add(1, AcqRel);
        for _ in 0..search.spins {
            if self.looks_busy() {
                break;
            }
            // (Under loom each look is a branch point already; a yield there would make
            // loom run the other threads first and hide the race the model is for.)
            std::hint::spin_loop();
        }
        // Stopped searching: from here, a push notifies a sleeper again, and the caller
        // re-checks the queue under the lock before it sleeps.
        self.hints.searching.fetch_sub(1, AcqRel);
        true
    }

    /// Queues a runnable fiber and wakes a sleeping worker, if any.
    pub(crate) fn push(&self, task: T) {
        self.push_as(task, false);
    }

    /// Queues a runnable fiber, ahead of every ordinary one when `urgent` (still behind
    /// urgent ones queued earlier), and wakes a sleeping worker, if any.
    pub(crate) fn push_as(&self, task: T, urgent: bool) {
        let mut st = self.lock();
        if urgent {
            let at = st.urgent;
            st.queue.insert(at, task);
            st.urgent += 1;
        } else {
            st.queue.push_back(task);
        }
        self.note_len(&st);
        // A searching worker re-checks the queue under the lock once it stops searching,
        // so it will see this fiber: no futex wake needed.
        if st.sleeping > st.waking && self.hints.searching.load(Acquire) == 0 {
            st.waking += 1;
            self.work.notify_one();
        }
    }

    /// Takes the front fiber without waiting.
    pub(crate) fn try_pop(&self) -> Option<T> {
        let mut st = self.lock();
        let t = st.pop();
        self.note_len(&st);
        t
    }

    /// True if the queue looked non-empty at its last change (no lock taken).
    pub(crate) fn looks_busy(&self) -> bool {
        self.hints.len.load(Acquire) > 0
    }

    /// True if no worker sleeps on the queue (no lock taken; a hint).
    pub(crate) fn none_sleeping(&self) -> bool {
        self.hints.sleeping.load(Acquire) == 0
    }

    /// Takes the front fiber, sleeping while there is none, at most until `deadline()`
    /// (None: no limit), which is read under the lock: a timer armed earlier than it after
    /// that read wakes the sleepers ([`RunQueue::wake_all`], which takes the lock), so it
    /// is never slept past. None when the deadline passed with the queue empty. `stay` is
    /// asked under the lock before each sleep: false makes the worker leave (it is
    /// surplus) with None. Before each sleep it steals the fiber of any worker's LIFO
    /// slot. (The pool calls it through [`RunQueue::next`]; the loom model calls it
    /// directly.)
    #[cfg(all(test, feature = "loom"))]
    pub(crate) fn pop_or_sleep(
        &self,
        deadline: impl Fn() -> Option<std::time::Instant>,
        stay: impl FnMut(&mut QueueState<T>) -> bool,
    ) -> Option<T> {
        self.pop_or_sleep_searched(deadline, stay, false)
    }

    /// [`RunQueue::pop_or_sleep`]; `searched`: the caller has just searched, so pushes may
    /// have skipped waking a sleeper on its account. A worker that has searched or slept
    /// and takes a fiber while more wait wakes a sleeper for them (if none is searching or
    /// being woken already).
    fn pop_or_sleep_searched(
        &self,
        deadline: impl Fn() -> Option<std::time::Instant>,
        mut stay: impl FnMut(&mut QueueState<T>) -> bool,
        mut searched: bool,
    ) -> Option<T> {
        let mut st = self.lock();
        loop {
            if let Some(t) = st.pop() {
                self.note_len(&st);
                if searched
                    && !st.queue.is_empty()
                    && st.sleeping > st.waking
                    && self.hints.searching.load(Acquire) == 0
                {
                    st.waking += 1;
                    self.work.notify_one();
                }
                return Some(t);
            }
            if !stay(&mut st) {
                return None;
            }
            st.sleeping += 1;
            self.note_sleeping(&st);
            // Counted as sleeping before looking into the slots: a fiber put into a slot
            // after this look sees the count and goes to the queue instead.
            if let Some(t) = st.lifos.iter().find_map(|l| l.take()) {
                st.sleeping -= 1;
                self.note_sleeping(&st);
                return Some(t.0);
            }
            let d = deadline();
            let (back, timed_out) = self.wait(st, d);
            st = back;
            st.sleeping -= 1;
            // Awake, whatever woke it: one fewer to wake. (A worker that woke by its
            // deadline while another was notified makes the count low, so a later push
            // wakes one worker too many: harmless. It is never high.)
            st.waking = st.waking.saturating_sub(1);
            self.note_sleeping(&st);
            searched = true;
            if timed_out {
                let t = st.pop();
                self.note_len(&st);
                return t;
            }
        }
    }

    /// Wakes every sleeping worker (a timer was armed earlier than they sleep).
    pub(crate) fn wake_all(&self) {
        let mut st = self.lock();
        if st.sleeping > 0 {
            st.waking = st.sleeping;
            self.work.notify_all();
        }
    }
}

impl<T> QueueState<T> {
    /// Takes the front fiber.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let t = self.queue.pop_front()?;
        self.urgent = self.urgent.saturating_sub(1);
        Some(t)
    }
}

impl<T> Default for QueueState<T> {
    fn default() -> Self {
        QueueState {
            queue: VecDeque::new(),
            sleeping: 0,
            urgent: 0,
            waking: 0,
            lifos: Vec::new(),
        }
    }
}

/// The loom model of both protocols: a fiber that parks while a waker wakes it, run by a
/// worker that sleeps on the run queue. Loom explores every interleaving; a lost wake-up
/// leaves the worker asleep forever, which loom reports as a deadlock, and a fiber run
/// twice or never trips an assertion. Run with
/// `cargo test -p simpler-device --lib --features loom --profile ci loom`.
#[cfg(all(test, feature = "loom"))]
mod loom_model {
    use super::*;
    use loom::sync::atomic::{AtomicBool, AtomicU32};
    use loom::sync::Arc;
    use std::sync::atomic::Ordering::{Acquire, Release};

    struct Fiber {
        state: TaskState,
        /// Work published by the waker, seen by the fiber when it runs.
        work: AtomicU32,
        /// Slices the fiber ran.
        slices: AtomicU32,
    }

    /// One worker: runs the fiber's slices until it has seen `want` units of work. A slice
    /// that sees too little parks (the fiber's own check, then the worker's transition).
    fn worker(q: &RunQueue<Arc<Fiber>>, want: u32) {
        loop {
            let f = q
                .pop_or_sleep(|| None, |_| true)
                .expect("an untimed sleep returns a fiber");
            f.state.begin_slice();
            f.slices.fetch_add(1, Release);
            if f.work.load(Acquire) >= want {
                f.state.end_slice_done();
                return;
            }
            if f.state.end_slice_parked() == AfterPark::Requeue {
                q.push(f);
            }
        }
    }

    fn waker(q: &RunQueue<Arc<Fiber>>, f: &Arc<Fiber>) {
        f.work.fetch_add(1, Release);
        if f.state.wake() {
            q.push(f.clone());
        }
    }

    #[test]
    fn loom_pool_a_fiber_woken_while_it_parks_is_never_lost() {
        loom::model(|| {
            let q = Arc::new(RunQueue::new());
            let f = Arc::new(Fiber {
                state: TaskState::new_queued(),
                work: AtomicU32::new(0),
                slices: AtomicU32::new(0),
            });
            q.push(f.clone());
            let w = {
                let (q, f) = (q.clone(), f.clone());
                loom::thread::spawn(move || waker(&q, &f))
            };
            worker(&q, 1);
            w.join().unwrap();
            assert!(f.state.is_done());
            assert!(q.try_pop().is_none(), "the fiber was queued twice");
        });
    }

    #[test]
    fn loom_pool_two_wakers_queue_the_fiber_once() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let q = Arc::new(RunQueue::new());
            let f = Arc::new(Fiber {
                state: TaskState::new_queued(),
                work: AtomicU32::new(0),
                slices: AtomicU32::new(0),
            });
            q.push(f.clone());
            let wakers: Vec<_> = (0..2)
                .map(|_| {
                    let (q, f) = (q.clone(), f.clone());
                    loom::thread::spawn(move || waker(&q, &f))
                })
                .collect();
            worker(&q, 2);
            for w in wakers {
                w.join().unwrap();
            }
            assert!(f.state.is_done());
            assert!(f.slices.load(Acquire) <= 3);
            assert!(q.try_pop().is_none(), "the fiber was queued twice");
        });
    }

    /// What a pool worker of the model takes: the fiber, or the order to stop (pushed by
    /// the worker that finished the fiber, for the other).
    enum Item {
        Fiber(Arc<PoolFiber>),
        Stop,
    }

    struct PoolFiber {
        state: TaskState,
        work: AtomicU32,
        slices: AtomicU32,
        /// Set while a worker runs a slice of it.
        running: AtomicBool,
    }

    fn parked_fiber() -> Arc<PoolFiber> {
        let f = Arc::new(PoolFiber {
            state: TaskState::new_queued(),
            work: AtomicU32::new(0),
            slices: AtomicU32::new(0),
            running: AtomicBool::new(false),
        });
        f.state.begin_slice();
        assert_eq!(f.state.end_slice_parked(), AfterPark::Parked);
        f
    }

    /// A pool worker as the pool runs one ([`RunQueue::next`]: its LIFO slot, the queue, a
    /// search of `spins` looks, a steal, a sleep), until the fiber has seen `want` wakes.
    fn pool_worker(q: &RunQueue<Item>, lifo: &Lifo<Item>, want: u32, spins: u32) {
        let mut streak = 0;
        loop {
            let item = q
                .next(
                    lifo,
                    &mut streak,
                    Search {
                        spins,
                        max_searchers: 2,
                    },
                    || None,
                    |_| true,
                )
                .expect("an untimed sleep returns a fiber");
            let f = match item {
                Item::Stop => return,
                Item::Fiber(f) => f,
            };
            f.state.begin_slice();
            assert!(
                !f.running.swap(true, AcqRel),
                "the fiber ran on two workers at once"
            );
            f.slices.fetch_add(1, Release);
            let done = f.work.load(Acquire) >= want;
            f.running.store(false, Release);
            if done {
                f.state.end_slice_done();
                q.push(Item::Stop);
                return;
            }
            if f.state.end_slice_parked() == AfterPark::Requeue {
                q.push(Item::Fiber(f));
            }
        }
    }

    /// A fiber running on the worker that owns `lifo` wakes `f`.
    fn local_waker(q: &RunQueue<Item>, lifo: &Lifo<Item>, f: &Arc<PoolFiber>) {
        f.work.fetch_add(1, Release);
        if f.state.wake() {
            q.push_local(lifo, Item::Fiber(f.clone()), false);
        }
    }

    /// A wake from a thread outside the pool: the shared queue.
    fn remote_waker(q: &RunQueue<Item>, f: &Arc<PoolFiber>) {
        f.work.fetch_add(1, Release);
        if f.state.wake() {
            q.push(Item::Fiber(f.clone()));
        }
    }

    /// A fiber on worker 1 wakes F into worker 1's LIFO slot and keeps the worker until F
    /// has run, while worker 2, finding the queue empty, searches and steals before it
    /// sleeps, and a host thread wakes F a second time: F runs until it has seen both wakes, never on two workers at once,
    /// never queued twice, and no worker sleeps forever (a lost wake is a loom deadlock).
    #[test]
    fn loom_pool_a_wake_into_a_lifo_slot_races_a_steal_and_a_second_wake() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(2);
        model.check(|| {
            let q = Arc::new(RunQueue::new());
            let (l1, l2) = (
                std::sync::Arc::new(Lifo::default()),
                std::sync::Arc::new(Lifo::default()),
            );
            q.register(l1.clone());
            q.register(l2.clone());
            let f = parked_fiber();
            let w1 = {
                let (q, l1, f) = (q.clone(), l1.clone(), f.clone());
                loom::thread::spawn(move || {
                    local_waker(&q, &l1, &f);
                    // The waking fiber keeps worker 1 until F has run: F must be stolen
                    // from the slot, or have gone to the queue, for worker 2 to run it.
                    while f.slices.load(Acquire) == 0 {
                        loom::thread::yield_now();
                    }
                    pool_worker(&q, &l1, 2, 1);
                })
            };
            let host = {
                let (q, f) = (q.clone(), f.clone());
                loom::thread::spawn(move || remote_waker(&q, &f))
            };
            pool_worker(&q, &l2, 2, 1);
            w1.join().unwrap();
            host.join().unwrap();
            assert!(f.state.is_done());
            assert!(f.slices.load(Acquire) <= 3);
            assert!(!l1.is_occupied() && !l2.is_occupied());
            assert!(q.try_pop().is_none(), "the fiber was queued twice");
        });
    }

    /// The stall monitor closes worker 1's slot (counts it out) while a fiber on it wakes
    /// F into the slot: F ends on the shared queue or is stolen, and sleeping worker 2
    /// runs it; the closed slot stays empty.
    #[test]
    fn loom_pool_a_slot_closed_while_a_fiber_is_put_in_it_strands_nothing() {
        loom::model(|| {
            let q = Arc::new(RunQueue::new());
            let (l1, l2) = (
                std::sync::Arc::new(Lifo::default()),
                std::sync::Arc::new(Lifo::default()),
            );
            q.register(l1.clone());
            q.register(l2.clone());
            let f = parked_fiber();
            let waker = {
                let (q, l1, f) = (q.clone(), l1.clone(), f.clone());
                loom::thread::spawn(move || local_waker(&q, &l1, &f))
            };
            let monitor = {
                let (q, l1) = (q.clone(), l1.clone());
                loom::thread::spawn(move || q.close_lifo(&l1))
            };
            pool_worker(&q, &l2, 1, 0);
            waker.join().unwrap();
            monitor.join().unwrap();
            assert!(f.state.is_done());
            assert!(!l1.is_occupied());
            assert!(matches!(q.try_pop(), Some(Item::Stop)));
            assert!(q.try_pop().is_none(), "the fiber was queued twice");
        });
    }

    /// A worker searches (finds the queue empty and looks again) while a host thread
    /// wakes the fiber: the push sees the searcher and wakes nobody, so the searcher must
    /// find the fiber when it re-checks under the lock before it sleeps.
    #[test]
    fn loom_pool_a_push_seen_by_a_searcher_is_not_lost() {
        loom::model(|| {
            let q = Arc::new(RunQueue::new());
            let l = std::sync::Arc::new(Lifo::default());
            q.register(l.clone());
            let f = parked_fiber();
            let host = {
                let (q, f) = (q.clone(), f.clone());
                loom::thread::spawn(move || remote_waker(&q, &f))
            };
            pool_worker(&q, &l, 1, 2);
            host.join().unwrap();
            assert!(f.state.is_done());
        });
    }
}
