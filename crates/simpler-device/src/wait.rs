//! How code on a device thread waits for something other than a register or a doorbell:
//! yields, sleeps, and blocking sections. On the sim's pool executor (`docs/sim-device.md`
//! §11) a device thread is a fiber, and a wait that blocked its OS thread would stop every
//! fiber queued behind it; these suspend the fiber instead. On any other thread (the
//! thread-per-core executor, a host thread) they are the plain OS operations.
//!
//! The rule for device code: wait only through these, [`Doorbell`](crate::Doorbell) and
//! [`CoreRegs`](crate::CoreRegs); run code that may block for long outside them — a kernel
//! that waits for another core (a `require_sync_start` cohort that rendezvouses), a host
//! function — inside [`blocking`]. A worker stuck outside both for longer than the pool's
//! stall limit (100 ms) while other fibers wait is replaced all the same, so nothing
//! deadlocks; it only costs that delay.

use std::time::Duration;

use crate::exec;

/// Lets other device threads run (a fiber goes to the back of the run queue; an OS thread
/// yields its CPU).
pub fn yield_now() {
    exec::yield_now();
}

/// False on a pool fiber: there a poll loop costs more than parking at once (a park is a
/// switch, the wake a queue push), so callers that poll before they park should skip the
/// polling. True on any OS thread.
pub fn polling_pays() -> bool {
    exec::polling_pays()
}

/// Sleeps for `d` (a fiber parks on a timer; its worker runs other fibers meanwhile).
pub fn sleep(d: Duration) {
    exec::sleep(d);
}

/// Runs `f` as a blocking section: on a pool fiber, the worker thread leaves the pool for
/// the section's length (another thread serves the pool meanwhile), so `f` may block or
/// spin on another device thread without stalling the pool. Elsewhere `f` just runs.
/// Returns what `f` returns; a panic of `f` propagates.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    exec::blocking(f)
}
