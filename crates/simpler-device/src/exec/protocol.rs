//! The pool executor's two wake-up protocols, written once and checked by the loom model
//! at the bottom of this file (`docs/sim-device.md` §11):
//!
//! - [`TaskState`]: the life of one fiber — queued, running, parked, done — and the one
//!   transition a waker may make on each state, so that a wake-up is never lost and a
//!   fiber never sits in the run queue twice or runs on two workers at once;
//! - [`RunQueue`]: the run queue and the workers that sleep on it, under one lock, so that
//!   a fiber made runnable always finds a worker awake or wakes one.
//!
//! **Who may sleep.** A fiber parks only itself, and only from inside its own slice (it
//! suspends with "park"); a worker sleeps only on the run queue, only once it is empty.
//! **Who must wake whom.** Whoever makes a parked fiber runnable calls [`TaskState::wake`],
//! and if that says so, pushes the fiber on the run queue ([`RunQueue::push`]), which wakes
//! a sleeping worker if there is one. **Why no wake-up is lost.** A fiber's state is one
//! atomic changed only by read-modify-writes: a wake that arrives while the fiber still
//! runs (before its worker has recorded the park) turns RUNNING into NOTIFIED, and the
//! worker's own compare-exchange RUNNING → PARKED then fails, so the worker queues the
//! fiber again instead of parking it; a wake that arrives after finds PARKED, and only the
//! one waker whose exchange moved it to QUEUED pushes it. Every access of the state in
//! that chain is a read-modify-write, so each reads the latest state. The run queue's length and the
//! count of sleeping workers live under one mutex, and a worker re-checks the queue under
//! that mutex before it waits on the condition variable that every push notifies while a
//! worker sleeps.
//!
//! Nothing here knows coroutines or threads: the pool calls these around them.

#[cfg(all(test, feature = "loom"))]
use loom::sync::atomic::AtomicU8;
use std::collections::VecDeque;
#[cfg(not(all(test, feature = "loom")))]
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::AcqRel;
use std::sync::atomic::Ordering::Acquire;

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

/// The run queue and its sleeping workers.
pub(crate) struct RunQueue<T> {
    /// The queue's length as of the last change, read without the lock (a hint: the lock
    /// decides).
    len_hint: std::sync::atomic::AtomicUsize,
    /// The count of sleeping workers as of the last change (a hint for the stall monitor).
    sleeping_hint: std::sync::atomic::AtomicUsize,
    state: Lock<QueueState<T>>,
    work: Cond,
}

#[cfg(not(all(test, feature = "loom")))]
type Lock<T> = parking_lot::Mutex<T>;
#[cfg(not(all(test, feature = "loom")))]
type Guard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(not(all(test, feature = "loom")))]
type Cond = parking_lot::Condvar;
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
}

impl<T> RunQueue<T> {
    pub(crate) fn new() -> RunQueue<T> {
        RunQueue {
            len_hint: std::sync::atomic::AtomicUsize::new(0),
            sleeping_hint: std::sync::atomic::AtomicUsize::new(0),
            state: Default::default(),
            work: Default::default(),
        }
    }

    #[cfg(not(all(test, feature = "loom")))]
    fn lock(&self) -> Guard<'_, QueueState<T>> {
        self.state.lock()
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
        mut st: Guard<'a, QueueState<T>>,
        deadline: Option<std::time::Instant>,
    ) -> (Guard<'a, QueueState<T>>, bool) {
        let timed_out = match deadline {
            Some(d) => self.work.wait_until(&mut st, d).timed_out(),
            None => {
                self.work.wait(&mut st);
                false
            }
        };
        (st, timed_out)
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
        self.len_hint
            .store(st.queue.len(), std::sync::atomic::Ordering::Release);
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
        if st.sleeping > st.waking {
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
        self.len_hint.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// True if no worker sleeps on the queue (no lock taken; a hint).
    pub(crate) fn none_sleeping(&self) -> bool {
        self.sleeping_hint
            .load(std::sync::atomic::Ordering::Acquire)
            == 0
    }

    /// Takes the front fiber, sleeping while there is none, at most until `deadline()`
    /// (None: no limit), which is read under the lock: a timer armed earlier than it after
    /// that read wakes the sleepers ([`RunQueue::wake_all`], which takes the lock), so it
    /// is never slept past. None when the deadline passed with the queue empty. `stay` is
    /// asked under the lock before each sleep: false makes the worker leave (it is
    /// surplus) with None.
    pub(crate) fn pop_or_sleep(
        &self,
        deadline: impl Fn() -> Option<std::time::Instant>,
        mut stay: impl FnMut(&mut QueueState<T>) -> bool,
    ) -> Option<T> {
        let mut st = self.lock();
        loop {
            if let Some(t) = st.pop() {
                self.note_len(&st);
                return Some(t);
            }
            if !stay(&mut st) {
                return None;
            }
            st.sleeping += 1;
            self.sleeping_hint
                .store(st.sleeping, std::sync::atomic::Ordering::Release);
            let d = deadline();
            let (back, timed_out) = self.wait(st, d);
            st = back;
            st.sleeping -= 1;
            // Awake, whatever woke it: one fewer to wake. (A worker that woke by its
            // deadline while another was notified makes the count low, so a later push
            // wakes one worker too many: harmless. It is never high.)
            st.waking = st.waking.saturating_sub(1);
            self.sleeping_hint
                .store(st.sleeping, std::sync::atomic::Ordering::Release);
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
    use loom::sync::atomic::AtomicU32;
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
}
