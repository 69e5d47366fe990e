//! Per-core handshake registers and the idle-parking primitive.
//!
//! On hardware the AICPU writes a core's DATA_MAIN_BASE (DMB) register over MMIO and polls
//! its COND register; the AICore spins on DMB. Spinning is free there and ruinous here: the
//! sim runs 24–72 cores and 4–6 AICPU threads on as few as 2 CPUs. So every register write
//! also rings a [`Doorbell`] of whoever may be waiting for it, and waiters spin only briefly
//! before parking. The values written and their meaning (dispatch id, ACK, FIN, EXIT) belong
//! to the runtime; this module only stores, publishes and wakes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};

/// Iterations a waiter spins (with a CPU pause) before it parks.
const SPIN_ITERATIONS: u32 = 64;

/// Wakes one parked thread; token semantics, so a ring between "decided to park" and
/// "parked" is never lost.
///
/// Protocol for the owner: [`prepare_park`](Doorbell::prepare_park), re-check for work,
/// then [`park`](Doorbell::park) (or [`cancel_park`](Doorbell::cancel_park) if work
/// appeared). Protocol for a ringer: make the work visible, then [`ring`](Doorbell::ring).
/// Both sides use sequentially consistent operations on `sleeping`, so either the owner's
/// re-check sees the work or the ringer sees `sleeping` and wakes it.
#[derive(Debug, Default)]
pub struct Doorbell {
    sleeping: AtomicBool,
    rung: Mutex<bool>,
    cv: Condvar,
    /// The device's kill switch (sim reset), for doorbells of device threads.
    kill: Option<KillSwitch>,
}

/// A device-wide flag a forced reset raises to terminate the kernels that are running: a
/// device thread waiting on a register or doorbell unwinds out of its kernel when it is set
/// (on hardware, a reset stops the cores wherever they are).
pub(crate) type KillSwitch = Arc<AtomicBool>;

/// Unwind payload of a kernel terminated by a reset; caught by the device thread.
pub(crate) struct Killed;

/// Terminates the calling kernel if a reset is in progress.
fn check_kill(kill: &Option<KillSwitch>) {
    if kill.as_ref().is_some_and(|k| k.load(Ordering::Acquire)) {
        // `resume_unwind` does not run the panic hook: a reset is not a bug to report.
        std::panic::resume_unwind(Box::new(Killed));
    }
}

impl Doorbell {
    /// A new doorbell with no one asleep.
    pub fn new() -> Doorbell {
        Doorbell::default()
    }

    /// A doorbell of a device thread: parking on it ends the running kernel when the
    /// device's kill switch is raised.
    pub(crate) fn with_kill_switch(kill: KillSwitch) -> Doorbell {
        Doorbell {
            kill: Some(kill),
            ..Doorbell::default()
        }
    }

    /// Announces that the owner is about to park; re-check for work after this.
    pub fn prepare_park(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
    }

    /// Withdraws a [`prepare_park`](Doorbell::prepare_park) because work appeared.
    pub fn cancel_park(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }

    /// Blocks until rung or until `timeout` passes (spurious returns are allowed).
    pub fn park(&self, timeout: Duration) {
        let mut rung = self.rung.lock();
        if !*rung {
            self.cv.wait_for(&mut rung, timeout);
        }
        *rung = false;
        drop(rung);
        self.sleeping.store(false, Ordering::SeqCst);
        check_kill(&self.kill);
    }

    /// Wakes the owner whether or not it announced a park (used by a reset).
    pub(crate) fn force_ring(&self) {
        let mut rung = self.rung.lock();
        *rung = true;
        self.cv.notify_one();
    }

    /// Wakes the owner if it announced it would park. Cheap (one atomic swap) otherwise.
    pub fn ring(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            let mut rung = self.rung.lock();
            *rung = true;
            self.cv.notify_one();
        }
    }
}

/// The registers of one AICore as the runtime uses them, padded to its own cache lines.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct CoreRegs {
    dmb: AtomicU64,
    cond: AtomicU64,
    core_bell: Doorbell,
    owner_bell: RwLock<Option<Arc<Doorbell>>>,
}

impl CoreRegs {
    /// Registers of a core of a device whose resets raise `kill`.
    pub(crate) fn with_kill_switch(kill: KillSwitch) -> CoreRegs {
        CoreRegs {
            core_bell: Doorbell::with_kill_switch(kill),
            ..CoreRegs::default()
        }
    }

    /// Wakes the core if it is parked (used by a reset).
    pub(crate) fn wake_core(&self) {
        self.core_bell.force_ring();
    }

    /// Writes DATA_MAIN_BASE (release) and wakes the core if it is parked.
    pub fn write_dmb(&self, value: u64) {
        self.dmb.store(value, Ordering::Release);
        self.core_bell.ring();
    }

    /// Reads DATA_MAIN_BASE (acquire).
    pub fn read_dmb(&self) -> u64 {
        self.dmb.load(Ordering::Acquire)
    }

    /// Called by the core: waits until DMB holds something other than `last`, spinning
    /// briefly, then parking. Returns the new value.
    pub fn wait_dmb_change(&self, last: u64) -> u64 {
        loop {
            for _ in 0..SPIN_ITERATIONS {
                let v = self.read_dmb();
                if v != last {
                    return v;
                }
                std::hint::spin_loop();
            }
            self.core_bell.prepare_park();
            let v = self.read_dmb();
            if v != last {
                self.core_bell.cancel_park();
                return v;
            }
            self.core_bell.park(Duration::from_millis(100));
        }
    }

    /// Writes COND (release) and wakes the AICPU thread that owns this core, if any.
    pub fn write_cond(&self, value: u64) {
        self.cond.store(value, Ordering::Release);
        if let Some(bell) = self.owner_bell.read().as_ref() {
            bell.ring();
        }
    }

    /// Reads COND (acquire).
    pub fn read_cond(&self) -> u64 {
        self.cond.load(Ordering::Acquire)
    }

    /// Sets (or clears) the doorbell rung on every COND write: the owning scheduler's.
    pub fn set_owner(&self, bell: Option<Arc<Doorbell>>) {
        *self.owner_bell.write() = bell;
    }

    /// Resets both registers to zero, as a kernel launch does on hardware.
    pub fn reset(&self) {
        self.dmb.store(0, Ordering::Release);
        self.cond.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn ring_before_park_is_not_lost() {
        let bell = Doorbell::new();
        bell.prepare_park();
        bell.ring();
        let t = std::time::Instant::now();
        bell.park(Duration::from_secs(10));
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the early ring was lost"
        );
    }

    #[test]
    fn dmb_write_wakes_a_parked_core() {
        let regs = Arc::new(CoreRegs::default());
        let r = regs.clone();
        let waiter = std::thread::spawn(move || r.wait_dmb_change(0));
        std::thread::sleep(Duration::from_millis(20));
        regs.write_dmb(7);
        assert_eq!(waiter.join().unwrap(), 7);
    }

    #[test]
    fn cond_write_rings_the_owner() {
        let regs = CoreRegs::default();
        let bell = Arc::new(Doorbell::new());
        regs.set_owner(Some(bell.clone()));
        bell.prepare_park();
        regs.write_cond(3);
        let t = std::time::Instant::now();
        bell.park(Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(regs.read_cond(), 3);
    }
}
