//! One fiber: a device thread of the pool executor, with a stack of its own
//! ([`corosensei`] coroutine), its [`TaskState`], and the crash-report slot it carries from
//! worker to worker. This module holds the executor's only `unsafe` code: the coroutine is
//! sent between workers, and a fiber suspends through a pointer to its own yielder.
//!
//! **The rule for code on a fiber** (`docs/sim-device.md` §11): it may suspend only inside
//! the device's waits (doorbell and register waits, [`crate::wait`]), and across such a
//! wait it must hold nothing tied to one OS thread — no lock guard, no reference into a
//! thread-local. The runtime's kernels keep it; a user kernel never waits on the device at
//! all, and an orchestration function calls the submit API, which may wait, so it must not
//! keep a thread-local's address across a submit.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};
use parking_lot::Mutex;

use super::protocol::TaskState;
use crate::crash;

/// What a fiber asks of its worker when it suspends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Suspend {
    /// Park until woken, or until the deadline (if any) passes.
    Park(Option<Instant>),
    /// Stay runnable: go to the back of the run queue.
    Yield,
    /// Run the rest of the slice as a blocking section: the worker hands its place in the
    /// pool to another thread first, and resumes the fiber at once.
    Blocking,
}

/// How a slice ended.
pub(crate) enum SliceEnd {
    Suspended(Suspend),
    Done,
}

type Co = Coroutine<(), Suspend, (), DefaultStack>;

/// The coroutine and what a switch must carry with it.
struct Body {
    co: Co,
    /// The crash-report slot the fiber registered (`crash::DeviceThread`), detached from
    /// the worker thread while the fiber is suspended.
    crash: Option<crash::FiberSlot>,
}

// SAFETY: a `Body` is resumed by one worker at a time (its `Task::body` lock, and the
// `TaskState` protocol that queues a fiber once), so the coroutine's stack is only ever
// touched by one thread at a time, and it moves between threads only while suspended.
// Everything on a suspended fiber's stack was put there by sim device code — the device
// threads' loops and the kernels they call — which suspends only inside the device's waits
// and keeps the module's rule: nothing tied to one OS thread (lock guards, thread-local
// references) is held across them. The crash slot is `&'static` data of atomics.
unsafe impl Send for Body {}

/// A fiber, shared by the run queue, its wakers and its worker.
pub(crate) struct Task {
    pub(crate) state: TaskState,
    body: Mutex<Option<Body>>,
    /// Address of the coroutine's `Yielder`, set when the body starts (0 before).
    yielder: AtomicUsize,
    /// Deadline of the fiber's current timed park, nanoseconds on the pool's clock (0:
    /// none), and the due time of the fiber's live entry in the pool's timer heap (0:
    /// none; other entries of the fiber there are stale), re-armed when it comes due
    /// early and replaced when a park ends earlier (`pool::Pool::arm_timer`).
    pub(crate) deadline_ns: AtomicU64,
    pub(crate) timer_at: AtomicU64,
    /// Set while the fiber runs a blocking section: its waits block the worker thread
    /// it runs on instead of suspending the fiber.
    pub(crate) blocking: std::sync::atomic::AtomicBool,
    /// Queued ahead of ordinary fibers when woken (AICPU threads and streams: the cores
    /// wait for them).
    pub(crate) urgent: bool,
    /// The fiber's name (diagnostics).
    pub(crate) name: String,
}

thread_local! {
    /// The fiber the calling worker is running (None on every other thread, and on a
    /// worker between slices).
    static CURRENT: RefCell<Option<Arc<Task>>> = const { RefCell::new(None) };
}

/// The fiber running on this thread. Never inlined, so that code on a fiber that migrated
/// to another worker reads the new worker's thread-local, not a cached address.
#[inline(never)]
pub(crate) fn current() -> Option<Arc<Task>> {
    CURRENT.with(|c| c.borrow().clone())
}

impl Task {
    /// A fiber that will run `body` on a stack of `stack_bytes`, queued-state (push it).
    pub(crate) fn new(
        name: String,
        urgent: bool,
        stack_bytes: usize,
        body: Box<dyn FnOnce() + Send>,
    ) -> std::io::Result<Arc<Task>> {
        let stack = DefaultStack::new(stack_bytes)?;
        let task = Arc::new(Task {
            state: TaskState::new_queued(),
            body: Mutex::new(None),
            yielder: AtomicUsize::new(0),
            deadline_ns: AtomicU64::new(0),
            timer_at: AtomicU64::new(0),
            blocking: std::sync::atomic::AtomicBool::new(false),
            urgent,
            name,
        });
        let me = Arc::downgrade(&task);
        let co = Co::with_stack(stack, move |yielder: &Yielder<(), Suspend>, ()| {
            let name = me.upgrade().map(|t| {
                t.yielder.store(
                    yielder as *const Yielder<(), Suspend> as usize,
                    Ordering::Release,
                );
                t.name.clone()
            });
            // A device thread's loop catches its kernels' panics itself; one escaping the
            // loop must still not unwind into the worker.
            if let Err(p) = catch_unwind(AssertUnwindSafe(body)) {
                eprintln!(
                    "simpler: sim device thread {} ended with a panic: {}",
                    name.unwrap_or_default(),
                    super::panic_message(&*p)
                );
            }
        });
        *task.body.lock() = Some(Body { co, crash: None });
        Ok(task)
    }

    /// Runs one slice of the fiber on the calling worker.
    pub(crate) fn run_slice(self: &Arc<Task>) -> SliceEnd {
        let mut guard = self.body.lock();
        let Some(body) = guard.as_mut() else {
            return SliceEnd::Done;
        };
        CURRENT.with(|c| *c.borrow_mut() = Some(self.clone()));
        crash::fiber_switch_in(body.crash.take());
        let r = body.co.resume(());
        body.crash = crash::fiber_switch_out();
        CURRENT.with(|c| *c.borrow_mut() = None);
        match r {
            CoroutineResult::Yield(s) => SliceEnd::Suspended(s),
            CoroutineResult::Return(()) => {
                // The stack is unmapped with the coroutine.
                *guard = None;
                SliceEnd::Done
            }
        }
    }

    /// Suspends the calling fiber (which must be `self`, running on this thread).
    pub(crate) fn suspend(&self, how: Suspend) {
        let y = self.yielder.load(Ordering::Acquire);
        assert!(y != 0, "a fiber suspended before its body started");
        // SAFETY: `y` is the address of this coroutine's own `Yielder`, which lives on the
        // coroutine's stack for as long as the body runs; `self` is the fiber running on
        // this thread (the callers take it from `current()`), so this call is made from
        // inside that coroutine, the only place its yielder may be used.
        let yielder = unsafe { &*(y as *const Yielder<(), Suspend>) };
        yielder.suspend(how);
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // A fiber dropped while suspended (a device left behind with a hung kernel) is
        // leaked, not unwound: unwinding it would run its kernel's code from the dropping
        // thread.
        if let Some(body) = self.body.get_mut().take() {
            if body.co.started() && !body.co.done() {
                std::mem::forget(body);
            }
        }
    }
}
