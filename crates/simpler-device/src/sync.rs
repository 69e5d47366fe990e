//! The primitives under [`Doorbell`](crate::Doorbell), switched to loom's model-checked
//! versions in this crate's own test build when its `loom` feature is on
//! (`cfg(all(test, feature = "loom"))`: a crate that depends on this one gets the real
//! primitives whatever its features),
//! so that the loom model in `regs` checks the doorbell's real protocol code. Outside the
//! model a [`Signal`]'s wait goes through the sim executor's waits (`exec`), so a
//! doorbell suspends a pool fiber and blocks an OS thread alike.

#[cfg(all(test, feature = "loom"))]
pub(crate) use loom::sync::atomic::AtomicBool;
#[cfg(not(all(test, feature = "loom")))]
pub(crate) use std::sync::atomic::AtomicBool;

use std::time::Duration;

/// A flag under a lock plus a condition variable: the sleeping half of a doorbell. One
/// thread waits on it; any thread may raise it.
#[derive(Default)]
pub(crate) struct Signal {
    /// The flag and, while the owner waits, how to wake it (a signal has one waiter: its
    /// doorbell's owner).
    #[cfg(not(all(test, feature = "loom")))]
    state: parking_lot::Mutex<(bool, Option<crate::exec::Waiter>)>,
    #[cfg(all(test, feature = "loom"))]
    flag: loom::sync::Mutex<bool>,
    #[cfg(all(test, feature = "loom"))]
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
        #[cfg(not(all(test, feature = "loom")))]
        {
            let waiter = {
                let mut st = self.state.lock();
                st.0 = true;
                st.1.take()
            };
            if let Some(w) = waiter {
                w.wake();
            }
        }
        #[cfg(all(test, feature = "loom"))]
        {
            let mut flag = self.flag.lock().unwrap();
            *flag = true;
            self.cv.notify_one();
        }
    }

    /// Waits (once) unless the flag is set, until raised or `timeout` passes; then clears
    /// the flag. Spurious returns are allowed. Under the loom model the wait is untimed, so a raise
    /// that never comes shows as a deadlock.
    #[cfg(not(all(test, feature = "loom")))]
    pub(crate) fn wait_take(&self, timeout: Duration) {
        {
            let mut st = self.state.lock();
            if st.0 {
                st.0 = false;
                return;
            }
            // Registered under the lock: a raise after this sees it and wakes it (the
            // waiter's token makes a wake before the park below return it at once).
            st.1 = Some(crate::exec::Waiter::current());
        }
        crate::exec::park(Some(crate::deadline::deadline(timeout)));
        let mut st = self.state.lock();
        st.0 = false;
        st.1 = None;
    }

    /// See the non-loom version.
    #[cfg(all(test, feature = "loom"))]
    pub(crate) fn wait_take(&self, _timeout: Duration) {
        let mut flag = self.flag.lock().unwrap();
        if !*flag {
            flag = self.cv.wait(flag).unwrap();
        }
        *flag = false;
    }
}
