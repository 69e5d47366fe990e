//! The waits the sim's device threads share, built on [`park`](super::park): a condition
//! variable ([`Notify`]), a job inbox ([`Inbox`]) and a countdown ([`Countdown`]). Each
//! suspends a pool fiber and blocks an OS thread, so the same device-thread code runs on
//! either executor.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};

use super::{park, Waiter};

/// A condition variable for device code: waits suspend a fiber or block a thread.
#[derive(Default)]
pub(crate) struct Notify {
    waiters: Mutex<Vec<Waiter>>,
    /// `waiters.len()`, read without the lock by notifiers (see [`Notify::notify_all`]).
    count: AtomicUsize,
}

impl Notify {
    /// Releases `guard`'s lock, waits until notified or `deadline`, and locks it again.
    /// Spurious returns are allowed: callers re-check their condition. No notification is
    /// lost: the waiter is registered before the lock is released, and notifiers change the
    /// condition under that lock.
    pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>, deadline: Option<Instant>) {
        let me = Waiter::current();
        {
            let mut w = self.waiters.lock();
            w.push(me.clone());
            self.count.store(w.len(), Ordering::Release);
        }
        MutexGuard::unlocked(guard, || park(deadline));
        let mut w = self.waiters.lock();
        w.retain(|x| !x.same(&me));
        self.count.store(w.len(), Ordering::Release);
    }

    /// Wakes every waiter. Call it after changing the waited-for condition under the lock
    /// the waiters hold: a waiter registers before it releases that lock, so a notifier
    /// that took the lock after it sees the registration, and the count read without the
    /// waiters' lock is then never a stale zero.
    pub(crate) fn notify_all(&self) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        // Take every waiter registered now in one step. Popping them one at a time would
        // let a woken waiter that re-checks, finds nothing and waits again be popped and
        // woken again by the same call, over and over: a wake-up livelock of milliseconds.
        let woken = {
            let mut w = self.waiters.lock();
            self.count.store(0, Ordering::Release);
            std::mem::take(&mut *w)
        };
        for w in woken {
            w.wake();
        }
    }
}

/// A queue of jobs for one device thread; [`Inbox::recv`] waits for the next.
pub(crate) struct Inbox<T> {
    state: Mutex<(VecDeque<T>, bool)>,
    notify: Notify,
}

impl<T> Default for Inbox<T> {
    fn default() -> Self {
        Inbox {
            state: Mutex::new((VecDeque::new(), false)),
            notify: Notify::default(),
        }
    }
}

impl<T> Inbox<T> {
    /// Queues a job (dropped if the inbox is closed).
    pub(crate) fn send(&self, job: T) {
        let mut st = self.state.lock();
        if !st.1 {
            st.0.push_back(job);
        }
        drop(st);
        self.notify.notify_all();
    }

    /// The next job; None once the inbox is closed and empty.
    pub(crate) fn recv(&self) -> Option<T> {
        let mut st = self.state.lock();
        loop {
            if let Some(j) = st.0.pop_front() {
                return Some(j);
            }
            if st.1 {
                return None;
            }
            self.notify.wait(&mut st, None);
        }
    }

    /// Closes the inbox: queued jobs are still received, then `recv` returns None.
    pub(crate) fn close(&self) {
        self.state.lock().1 = true;
        self.notify.notify_all();
    }
}

/// Counts down to zero once; [`Countdown::wait`] returns at zero.
pub(crate) struct Countdown {
    left: Mutex<usize>,
    notify: Notify,
}

impl Countdown {
    pub(crate) fn new(n: usize) -> Countdown {
        Countdown {
            left: Mutex::new(n),
            notify: Notify::default(),
        }
    }

    /// One part is done.
    pub(crate) fn count_down(&self) {
        let mut left = self.left.lock();
        *left = left.saturating_sub(1);
        let zero = *left == 0;
        drop(left);
        if zero {
            self.notify.notify_all();
        }
    }

    /// Waits until every part is done.
    pub(crate) fn wait(&self) {
        let mut left = self.left.lock();
        while *left > 0 {
            self.notify.wait(&mut left, None);
        }
    }
}

/// A flag an OS thread sleeps on until another raises it (a retired worker's go, the stall
/// monitor's arming). On std's futex-based primitives, not parking_lot's: a thread asleep
/// in parking_lot's process-wide table at a fork corrupts the child's table (see the run
/// queue's lock in `protocol`).
#[derive(Default)]
pub(crate) struct Flag {
    set: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Flag {
    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        // Nothing panics under this lock; a poisoned flag is still a flag.
        self.set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Raises the flag and wakes its sleeper, running `also` under the flag's lock when it
    /// was lowered (a hint kept in step with the flag).
    pub(crate) fn raise(&self, also: impl FnOnce()) {
        let mut set = self.lock();
        if !std::mem::replace(&mut *set, true) {
            also();
            self.cv.notify_one();
        }
    }

    /// Lowers the flag, running `also` under its lock.
    pub(crate) fn lower(&self, also: impl FnOnce()) {
        *self.lock() = false;
        also();
    }

    /// Sleeps until the flag is raised (returns at once if it is).
    pub(crate) fn wait_raised(&self) {
        let mut set = self.lock();
        while !*set {
            set = self
                .cv
                .wait(set)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}
