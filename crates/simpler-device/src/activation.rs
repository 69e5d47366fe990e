//! Lazy activation of one core for one AICore launch (`docs/sim-device.md` §13): the
//! launch *arms* the core with how to start its kernel, and the core's kernel is started
//! only by the first DMB write after that, so a core that is never dispatched to takes no
//! slice. Whoever ends the launch's use of the core (the AICPU side, or a reset) *disarms*
//! it: a core still armed is then counted as ended without ever running.
//!
//! One atomic state per core, changed only by compare-exchange, so exactly one of "the
//! first DMB write" and "disarm" takes the armed start:
//! IDLE → ARMED (arm) → STARTED (first DMB write) → IDLE (the kernel returned), or
//! ARMED → IDLE (disarm). This module knows nothing of what the kernel runs or of the
//! values in the registers.

use std::sync::atomic::{AtomicU8, Ordering};

use parking_lot::Mutex;

/// No lazy launch holds the core (an eager launch may be running it).
const IDLE: u8 = 0;
/// Armed: the next DMB write starts the kernel.
const ARMED: u8 = 1;
/// The armed kernel was started and has not returned yet.
const STARTED: u8 = 2;

/// How an armed launch starts the core's kernel (`true`) or counts the core as ended
/// without running it (`false`).
pub(crate) type Start = Box<dyn FnOnce(bool) + Send>;

/// The lazy-activation state of one core.
#[derive(Default)]
pub(crate) struct Activation {
    state: AtomicU8,
    start: Mutex<Option<Start>>,
}

impl std::fmt::Debug for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activation")
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Activation {
    /// Arms the core with `start`. The core's previous launch must be over (a device runs
    /// one AICore launch at a time); an armed core that was never disarmed is a violated
    /// invariant.
    pub(crate) fn arm(&self, start: Start) {
        *self.start.lock() = Some(start);
        let prev = self.state.swap(ARMED, Ordering::AcqRel);
        debug_assert_eq!(
            prev, IDLE,
            "a core armed while its last launch was not over"
        );
    }

    /// Called after every DMB write: the first one after [`arm`](Self::arm) starts the
    /// kernel. One load when the core is not armed.
    pub(crate) fn on_dmb_write(&self) {
        if self.state.load(Ordering::Acquire) == ARMED
            && self
                .state
                .compare_exchange(ARMED, STARTED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            if let Some(start) = self.start.lock().take() {
                start(true);
            }
        }
    }

    /// Ends the armed launch's hold on a core that was never started: true if it was armed
    /// (it is now counted as ended and will not run), false if its kernel was started (or
    /// no lazy launch holds it).
    pub(crate) fn disarm(&self) -> bool {
        if self
            .state
            .compare_exchange(ARMED, IDLE, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        if let Some(start) = self.start.lock().take() {
            start(false);
        }
        true
    }

    /// The started kernel returned: the core may be armed again.
    pub(crate) fn finished(&self) {
        let _ = self
            .state
            .compare_exchange(STARTED, IDLE, Ordering::AcqRel, Ordering::Acquire);
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    fn counting(runs: &Arc<AtomicU32>, skips: &Arc<AtomicU32>) -> Start {
        let (r, s) = (runs.clone(), skips.clone());
        Box::new(move |run| {
            if run {
                r.fetch_add(1, Ordering::AcqRel);
            } else {
                s.fetch_add(1, Ordering::AcqRel);
            }
        })
    }

    #[test]
    fn the_first_write_starts_once_and_disarm_then_fails() {
        let a = Activation::default();
        let (runs, skips) = (Arc::default(), Arc::default());
        a.on_dmb_write();
        a.arm(counting(&runs, &skips));
        a.on_dmb_write();
        a.on_dmb_write();
        assert!(!a.disarm(), "a started core cannot be disarmed");
        assert_eq!(runs.load(Ordering::Acquire), 1);
        assert_eq!(skips.load(Ordering::Acquire), 0);
        a.finished();
        a.arm(counting(&runs, &skips));
        assert!(a.disarm());
        a.on_dmb_write();
        assert_eq!(
            runs.load(Ordering::Acquire),
            1,
            "a disarmed core never starts"
        );
        assert_eq!(skips.load(Ordering::Acquire), 1);
    }

    #[test]
    fn a_racing_write_and_disarm_take_the_start_exactly_once() {
        for _ in 0..200 {
            let a = Arc::new(Activation::default());
            let (runs, skips) = (Arc::default(), Arc::default());
            a.arm(counting(&runs, &skips));
            let w = {
                let a = a.clone();
                std::thread::spawn(move || a.on_dmb_write())
            };
            let disarmed = a.disarm();
            w.join().unwrap();
            let (r, s) = (runs.load(Ordering::Acquire), skips.load(Ordering::Acquire));
            assert_eq!(r + s, 1);
            assert_eq!(disarmed, s == 1);
        }
    }
}
