//! The primitives under [`Doorbell`](crate::Doorbell), switched to loom's model-checked
//! versions in this crate's own test build under `cfg(loom)` (`cfg(all(test, loom))`: a
//! crate that depends on this one and runs its own loom models gets the real primitives),
//! so that the loom model in `regs` checks the doorbell's real protocol code. Outside the
//! model a [`Signal`]'s wait goes through the sim executor's waits (`sim::exec`), so a
//! doorbell suspends a pool fiber and blocks an OS thread alike.

#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic::AtomicBool;
#[cfg(not(all(test, loom)))]
pub(crate) use std::sync::atomic::AtomicBool;

use std::time::Duration;

/// A flag under a lock plus a condition variable: the sleeping half of a doorbell. One
/// thread waits on it; any thread may raise it.
#[derive(Default)]
pub(crate) struct Signal {
    #[cfg(not(all(test, loom)))]
    flag: parking_lot::Mutex<bool>,
    #[cfg(not(all(test, loom)))]
    cv: crate::sim::exec::Notify,
    #[cfg(all(test, loom))]
    flag: loom::sync::Mutex<bool>,
    #[cfg(all(test, loom))]
    cv: loom::sync::Condvar,
}

impl std::fmt::Debug for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signal").finish_non_exhaustive()
    }
}

impl Signal {
    /// Sets the flag and wakes the waiter, if it waits.
    pub(crate) fn raise(&self) {
        #[cfg(not(all(test, loom)))]
        {
            *self.flag.lock() = true;
            self.cv.notify_all();
        }
        #[cfg(all(test, loom))]
        {
            let mut flag = self.flag.lock().unwrap();
            *flag = true;
            self.cv.notify_one();
        }
    }

    /// Waits (once) unless the flag is set, until raised or `timeout` passes; then clears
    /// the flag. Spurious returns are allowed. Under the loom model the wait is untimed, so a raise
    /// that never comes shows as a deadlock.
    #[cfg(not(all(test, loom)))]
    pub(crate) fn wait_take(&self, timeout: Duration) {
        let mut flag = self.flag.lock();
        if !*flag {
            self.cv
                .wait(&mut flag, Some(crate::deadline::deadline(timeout)));
        }
        *flag = false;
    }

    /// See the non-loom version.
    #[cfg(all(test, loom))]
    pub(crate) fn wait_take(&self, _timeout: Duration) {
        let mut flag = self.flag.lock().unwrap();
        if !*flag {
            flag = self.cv.wait(flag).unwrap();
        }
        *flag = false;
    }
}
