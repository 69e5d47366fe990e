//! The `pthread_atfork` hooks of the process's fault monitor and the lock they hold (`docs/health.md`
//! §2, §7: the hooks hold the lock across the fork). Before `fork()`
//! the forking thread takes the monitor's lock; after it, parent and child each release their
//! copy. A child therefore never inherits the lock held by a thread it does not have, and
//! finds the monitor in a consistent state, which its first operation then resets (a new
//! process id).
//!
//! This module holds the host's only `unsafe` code for process hooks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use super::FaultMonitor;

/// A lock with no data, held across `fork()` by the atfork hooks (a spin lock: it is held
/// only around a callback install or a reset, and a child must be able to release a lock its
/// parent's thread took).
#[derive(Debug, Default)]
pub(super) struct ForkLock(AtomicBool);

impl ForkLock {
    pub(super) fn acquire(&self) {
        while self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
    }

    pub(super) fn release(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The lock, held until dropped.
pub(super) struct Held<'a>(pub(super) &'a ForkLock);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

extern "C" fn prepare() {
    FaultMonitor::global().lock.acquire();
}

extern "C" fn after() {
    FaultMonitor::global().lock.release();
}

/// Registers the hooks once per process. Called when the global monitor is created, so the
/// hooks never run before it exists.
pub(super) fn register_global_monitor_hooks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the three hooks are `extern "C"` functions with the signature
        // `pthread_atfork` expects, live for the whole process (they are plain functions),
        // and only touch the global monitor's atomic lock word. `FaultMonitor::global()` is
        // initialised before any fork can run them: they are registered from inside its
        // initialiser, and a fork concurrent with that initialiser blocks on the `OnceLock`
        // in `prepare` until it finishes.
        let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(after), Some(after)) };
        if rc != 0 {
            tracing::warn!(
                rc,
                "pthread_atfork failed; a fork may inherit the fault monitor's lock"
            );
        }
    });
}

/// Runs `child` in a forked child process and returns its verdict (false also when the child
/// panicked, died, or did not finish within 20 s — a child blocked on a lock it inherited
/// taken is killed, and fails the test instead of hanging it). The child never returns into
/// the test harness: it leaves with `_exit`, running no destructor and no atexit handler of
/// the parent's.
#[cfg(test)]
pub(crate) fn in_forked_child(child: impl FnOnce() -> bool) -> bool {
    // SAFETY: `fork` is async-signal-safe; the child only runs `child` (which must not take
    // locks another parent thread may hold; glibc's malloc is fork-safe) and then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(false);
        // SAFETY: `_exit` ends the child at once, without unwinding into the parent's stack.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    assert!(pid > 0, "fork failed");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        }
        assert_eq!(r, 0, "waitpid");
        if std::time::Instant::now() > deadline {
            // SAFETY: `pid` is our own, still unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
