//! How the sim runs its device threads — every AICore, AICPU thread and stream server of
//! every sim device — and how code on them waits (`docs/sim-device.md` §11).
//!
//! Two executors, chosen per device ([`ExecutorKind`]):
//! - [`ExecutorKind::Pool`] (the default): each device thread is a fiber (a coroutine with
//!   a stack of its own, [`fiber`]) run by the process's one pool of worker threads
//!   ([`pool`]), as many as the machine has CPUs; a fiber that waits is suspended, and
//!   making it runnable again costs a queue push, not an OS wake-up. Many devices share
//!   the one pool.
//! - [`ExecutorKind::ThreadPerCore`]: each device thread is an OS thread, as a chip's cores
//!   are on hardware; kept to measure the pool against.
//!
//! Every wait of device code goes through [`park`] (with a [`Waiter`] to wake it) or
//! [`Notify`], which suspend a fiber and block an OS thread, so one implementation of the
//! device threads serves both executors. [`protocol`] holds the pool's wake-up protocols
//! and their loom model.
//!
//! This module must not know what the device threads run.

mod cpu;
mod fiber;
mod fork;
mod pool;
pub(crate) mod protocol;
mod sync;

pub(crate) use self::sync::{Countdown, Inbox, Notify};

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use self::fiber::{Suspend, Task};

/// The text of a panic payload (`panic!` with a message carries a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// How a sim device runs its device threads (`docs/sim-device.md` §11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecutorKind {
    /// Fibers on the process's shared pool of `available_parallelism` worker threads
    /// (`SIMPLER_SIM_POOL_THREADS` overrides the count).
    #[default]
    Pool,
    /// One OS thread per AICore, AICPU thread and stream.
    ThreadPerCore,
}

impl ExecutorKind {
    /// The kind `SIMPLER_SIM_EXECUTOR` names (`pool` or `threads`), else
    /// [`ExecutorKind::Pool`]; a value naming neither warns on stderr and keeps the pool.
    pub fn from_env() -> ExecutorKind {
        match std::env::var("SIMPLER_SIM_EXECUTOR") {
            Err(_) => ExecutorKind::Pool,
            Ok(v) => v.parse().unwrap_or_else(|e| {
                eprintln!("simpler: warning: SIMPLER_SIM_EXECUTOR: {e}; using the pool");
                ExecutorKind::Pool
            }),
        }
    }

    /// The name [`FromStr`](std::str::FromStr) accepts: `pool` or `threads`.
    pub fn name(self) -> &'static str {
        match self {
            ExecutorKind::Pool => "pool",
            ExecutorKind::ThreadPerCore => "threads",
        }
    }
}

impl std::str::FromStr for ExecutorKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "pool" => Ok(ExecutorKind::Pool),
            "threads" => Ok(ExecutorKind::ThreadPerCore),
            other => Err(format!(
                "unknown sim executor {other:?}: expected \"pool\" or \"threads\""
            )),
        }
    }
}

/// Worker threads of the process's pool (its size when no worker is in a blocking
/// section), whether or not it has started.
pub fn pool_threads() -> usize {
    pool::pool().target()
}

/// OS threads the process's pool has started so far (workers, spares, its monitor).
pub fn pool_threads_started() -> usize {
    pool::pool().threads_started()
}

/// Whoever waits in [`park`]: a fiber or an OS thread. Waking it is a queue push or an
/// unpark; either leaves a token, so a wake between "decided to park" and "parked" makes
/// the park return at once.
#[derive(Clone)]
pub(crate) enum Waiter {
    Thread(Arc<Parker>),
    Fiber(Arc<Task>),
}

/// The parking place of one OS thread: a flag it polls briefly before it parks (a wake a
/// few microseconds away then costs no futex round trip) and the thread to unpark.
pub(crate) struct Parker {
    notified: std::sync::atomic::AtomicBool,
    thread: std::thread::Thread,
}

thread_local! {
    static PARKER: Arc<Parker> = Arc::new(Parker {
        notified: std::sync::atomic::AtomicBool::new(false),
        thread: std::thread::current(),
    });
}

/// Polls of a parking OS thread before it parks: spin hints, then OS yields.
const THREAD_POLLS: u32 = 48;

impl Parker {
    fn wake(&self) {
        if !self.notified.swap(true, Ordering::AcqRel) {
            self.thread.unpark();
        }
    }

    fn park(&self, deadline: Option<Instant>) {
        for i in 0..THREAD_POLLS {
            if self.notified.swap(false, Ordering::AcqRel) {
                return;
            }
            if i < THREAD_POLLS / 2 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        loop {
            if self.notified.swap(false, Ordering::AcqRel) {
                return;
            }
            match deadline {
                None => std::thread::park(),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return;
                    }
                    std::thread::park_timeout(left);
                }
            }
        }
    }
}

/// The fiber running on this thread, unless it is in a blocking section: the one whose
/// waits suspend it (None: waits block the OS thread).
fn suspendable_fiber() -> Option<Arc<Task>> {
    fiber::current().filter(|t| !t.blocking.load(Ordering::Acquire))
}

impl Waiter {
    /// The calling fiber (outside a blocking section) or thread.
    pub(crate) fn current() -> Waiter {
        match suspendable_fiber() {
            Some(t) => Waiter::Fiber(t),
            None => Waiter::Thread(PARKER.with(Arc::clone)),
        }
    }

    /// Makes the waiter's next (or current) [`park`] return.
    pub(crate) fn wake(&self) {
        match self {
            Waiter::Thread(p) => p.wake(),
            Waiter::Fiber(t) => pool::pool().wake(t),
        }
    }

    fn same(&self, other: &Waiter) -> bool {
        match (self, other) {
            (Waiter::Thread(a), Waiter::Thread(b)) => Arc::ptr_eq(a, b),
            (Waiter::Fiber(a), Waiter::Fiber(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// Parks the caller until woken (through the [`Waiter`] it got from [`Waiter::current`])
/// or until `deadline`. Spurious returns are allowed: callers re-check.
pub(crate) fn park(deadline: Option<Instant>) {
    match suspendable_fiber() {
        Some(t) => t.suspend(Suspend::Park(deadline)),
        None => PARKER.with(|p| p.park(deadline)),
    }
}

/// False on a pool fiber (outside a blocking section): there, polling for a value a few
/// microseconds away costs more than parking (a park is a switch, a wake a queue push).
pub(crate) fn polling_pays() -> bool {
    suspendable_fiber().is_none()
}

/// Lets other device threads run: a fiber goes to the back of the run queue, a thread
/// yields its CPU.
pub(crate) fn yield_now() {
    match suspendable_fiber() {
        Some(t) => t.suspend(Suspend::Yield),
        None => std::thread::yield_now(),
    }
}

/// Sleeps the caller for `d` (a fiber parks on a timer).
pub(crate) fn sleep(d: Duration) {
    let until = crate::deadline::deadline(d);
    while Instant::now() < until {
        match suspendable_fiber() {
            Some(t) => t.suspend(Suspend::Park(Some(until))),
            None => std::thread::sleep(until.saturating_duration_since(Instant::now())),
        }
    }
}

/// Runs `f` as a blocking section: on a pool fiber, the worker it runs on leaves the pool
/// for the section (another thread takes its place) and the fiber's waits inside `f`
/// block that thread; elsewhere `f` just runs.
pub(crate) fn blocking<R>(f: impl FnOnce() -> R) -> R {
    let Some(t) = fiber::current() else {
        return f();
    };
    if t.blocking.swap(true, Ordering::AcqRel) {
        return f();
    }
    t.suspend(Suspend::Blocking);
    // The section ends here, also when `f` unwinds; the worker counts itself back into the
    // pool when the fiber next suspends. (Never suspend here: an unwinding fiber must not
    // move to another thread, whose panic count would not match.)
    struct End(Arc<Task>);
    impl Drop for End {
        fn drop(&mut self) {
            self.0.blocking.store(false, Ordering::Release);
        }
    }
    let _end = End(t);
    f()
}

/// A device thread, as its device holds it.
pub(crate) enum DeviceThread {
    Thread(JoinHandle<()>),
    Fiber(Arc<Countdown>),
}

impl DeviceThread {
    /// Starts `body` as a device thread named `name`, the way `kind` says; on the pool, an
    /// `urgent` one is queued ahead of ordinary fibers whenever it is woken (the threads
    /// others wait for: AICPU threads, streams).
    ///
    /// # Errors
    /// The OS's, when no thread (or fiber stack) can be had.
    pub(crate) fn spawn(
        kind: ExecutorKind,
        name: String,
        urgent: bool,
        body: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<DeviceThread> {
        match kind {
            ExecutorKind::ThreadPerCore => std::thread::Builder::new()
                .name(name)
                .spawn(body)
                .map(DeviceThread::Thread),
            ExecutorKind::Pool => {
                let done = Arc::new(Countdown::new(1));
                let d = done.clone();
                let pool = pool::pool();
                let task = Task::new(
                    name,
                    urgent,
                    pool.stack_bytes,
                    Box::new(move || {
                        body();
                        d.count_down();
                    }),
                )?;
                pool.spawn(task)?;
                Ok(DeviceThread::Fiber(done))
            }
        }
    }

    /// Waits until the device thread's body has returned.
    pub(crate) fn join(self) {
        match self {
            DeviceThread::Thread(h) => {
                let _ = h.join();
            }
            DeviceThread::Fiber(done) => done.wait(),
        }
    }
}
