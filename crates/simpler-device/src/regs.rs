//! Per-core handshake registers and the idle-parking primitive.
//!
//! On hardware the AICPU writes a core's DATA_MAIN_BASE (DMB) register over MMIO and polls
//! its COND register; the AICore spins on DMB. Spinning is free there and ruinous here: the
//! sim runs 24–72 cores and 4–6 AICPU threads on as few as 2 CPUs. So every register write
//! also rings a [`Doorbell`] of whoever may be waiting for it, and waiters spin only briefly
//! before parking (`docs/sim-device.md`). The values written and their
//! meaning (dispatch id, ACK, FIN, EXIT) belong to the runtime; this module only stores,
//! publishes and wakes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::sync::{AtomicBool, Signal};

/// Iterations a waiter spins (with a CPU pause) before it parks.
const SPIN_ITERATIONS: u32 = 64;

/// Wakes one parked thread; token semantics, so a ring between "decided to park" and
/// "parked" is never lost.
///
/// # Protocol
///
/// - **Who may sleep.** Only the doorbell's owner: the one thread that parks on it (a core's
///   thread on its core bell, an AICPU thread on its own bell). Nobody else calls
///   [`prepare_park`](Doorbell::prepare_park), [`park`](Doorbell::park) or
///   [`cancel_park`](Doorbell::cancel_park).
/// - **Who must wake whom.** Whoever makes work visible to the owner publishes it first (a
///   release store or stronger), then calls [`ring`](Doorbell::ring). [`CoreRegs`] does so
///   for every register write: a DMB write rings the core, a COND write rings the AICPU
///   thread that owns the core.
/// - **The owner** calls `prepare_park`, re-checks for work (an acquire load or stronger),
///   then `cancel_park` if it found some or `park` if not, and re-checks after `park`
///   returns (rung, timed out, or spuriously).
/// - **Why no wake-up is lost.** Every write of the `sleeping` flag is a swap
///   (acquire-release): `prepare_park` sets it; `cancel_park`, the end of `park` and `ring`
///   clear it. Each swap reads the one before it, so the flag's modification order is a
///   chain of synchronizes-with edges. Take a ring and the owner's last `prepare_park`
///   before it parks for good. If the ring's swap comes first in the chain, the ringer's
///   publication happens before the owner's re-check, which sees the work. If the prepare
///   comes first, the next swap is a ring (the owner swaps again only once it stops
///   parking), which reads `true` and raises the signal under its lock: the owner's `park`
///   finds the token or is notified. No step needs sequential consistency or `park`'s
///   timeout. A plain store in the chain would break it (a swap that reads a store does not
///   synchronize with the swaps before it); the loom model below, whose waits are untimed
///   so that a lost wake-up is a deadlock, finds the wake-up such a store loses.
/// - A ring that finds no one preparing to park costs one atomic swap. A ring between
///   `prepare_park` and `cancel_park` leaves a stale token, so the next `park` returns at
///   once: a spurious return, which the owner's re-check absorbs.
#[derive(Debug, Default)]
pub struct Doorbell {
    sleeping: AtomicBool,
    signal: Signal,
    /// The device's kill switch (sim reset), for doorbells of device threads.
    kill: Option<KillSwitch>,
}

/// A device-wide flag a forced reset raises to terminate the kernels that are running: a
/// device thread waiting on a register or doorbell unwinds out of its kernel when it is set
/// (on hardware, a reset stops the cores wherever they are).
pub(crate) type KillSwitch = Arc<std::sync::atomic::AtomicBool>;

/// Unwind payload of a kernel terminated by a reset; caught by the device thread.
pub(crate) struct Killed;

/// True when `payload` is the unwind of a kernel terminated by a reset (which its device
/// thread catches), not a panic of the kernel's own: a runtime that catches a kernel's
/// panics passes this one on.
pub fn is_reset_unwind(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<Killed>()
}

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

    /// Announces that the owner is about to park; re-check for work after this. A
    /// read-modify-write, like every write of the flag (see the protocol).
    pub fn prepare_park(&self) {
        self.sleeping.swap(true, Ordering::AcqRel);
    }

    /// Withdraws a [`prepare_park`](Doorbell::prepare_park) because work appeared.
    pub fn cancel_park(&self) {
        self.sleeping.swap(false, Ordering::AcqRel);
    }

    /// Blocks until rung or until `timeout` passes (spurious returns are allowed). On a
    /// device thread, unwinds out of the running kernel if a reset is in progress.
    pub fn park(&self, timeout: Duration) {
        self.signal.wait_take(timeout);
        self.sleeping.swap(false, Ordering::AcqRel);
        check_kill(&self.kill);
    }

    /// Wakes the owner whether or not it announced a park (used by a reset).
    pub(crate) fn force_ring(&self) {
        self.signal.raise();
    }

    /// Wakes the owner if it announced it would park. Cheap (one atomic swap) otherwise.
    pub fn ring(&self) {
        if self.sleeping.swap(false, Ordering::AcqRel) {
            self.signal.raise();
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
    /// Lazy activation by a [`launch_aicore_lazy`](crate::Device::launch_aicore_lazy).
    pub(crate) activation: crate::activation::Activation,
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
        // A core armed by a lazy launch starts its kernel on its first DMB write.
        self.activation.on_dmb_write();
        self.core_bell.ring();
    }

    /// Ends a lazy launch's hold on this core if its kernel was never started (no DMB write
    /// since the launch armed it): true if so — the launch counts the core as ended and its
    /// kernel will not run for that launch, so nothing more may be written to DMB for it —
    /// false if the kernel was started (it must then be told to leave as the kernel's
    /// protocol says) or the core was not armed lazily (an eager launch runs it; a backend
    /// without lazy activation always answers false).
    pub fn disarm(&self) -> bool {
        self.activation.disarm()
    }

    /// Reads DATA_MAIN_BASE (acquire).
    pub fn read_dmb(&self) -> u64 {
        self.dmb.load(Ordering::Acquire)
    }

    /// Called by the core: waits until DMB holds something other than `last`, spinning
    /// briefly, then parking. Returns the new value.
    pub fn wait_dmb_change(&self, last: u64) -> u64 {
        let spin = if crate::wait::polling_pays() {
            SPIN_ITERATIONS
        } else {
            0
        };
        loop {
            for _ in 0..spin {
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

#[cfg(all(test, not(feature = "loom")))]
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

/// The loom model of the [`Doorbell`] protocol: an owner's prepare_park → re-check →
/// park/cancel_park against ringers' publish → ring. The doorbell's waits are untimed under
/// loom, so a lost wake-up would leave the owner parked forever, which loom reports as a
/// deadlock. Run with
/// `cargo test -p simpler-device --lib --features loom --profile ci loom`.
#[cfg(all(test, feature = "loom"))]
mod loom_model {
    use super::Doorbell;
    use loom::sync::atomic::AtomicU32;
    use loom::sync::Arc;
    use std::sync::atomic::Ordering::{Acquire, Release};
    use std::time::Duration;

    /// The owner's side, as the runtime writes it: waits until `work` reaches `want`.
    fn wait_for(bell: &Doorbell, work: &AtomicU32, want: u32) {
        while work.load(Acquire) < want {
            bell.prepare_park();
            if work.load(Acquire) >= want {
                bell.cancel_park();
                break;
            }
            bell.park(Duration::from_secs(1));
        }
        assert!(work.load(Acquire) >= want);
    }

    /// A ringer's side: publishes one unit of work (release), then rings.
    fn publish(bell: &Doorbell, work: &AtomicU32) {
        work.fetch_add(1, Release);
        bell.ring();
    }

    #[test]
    fn loom_doorbell_one_ringer_never_loses_the_wake_up() {
        loom::model(|| {
            let bell = Arc::new(Doorbell::new());
            let work = Arc::new(AtomicU32::new(0));
            let ringer = {
                let (bell, work) = (bell.clone(), work.clone());
                loom::thread::spawn(move || publish(&bell, &work))
            };
            wait_for(&bell, &work, 1);
            ringer.join().unwrap();
        });
    }

    #[test]
    fn loom_doorbell_two_ringers_and_a_stale_token_never_lose_a_wake_up() {
        // Bounded preemptions keep the search to seconds; the lost wake-up a plain store in
        // the flag's chain causes needs fewer.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let bell = Arc::new(Doorbell::new());
            let work = Arc::new(AtomicU32::new(0));
            let ringers: Vec<_> = (0..2)
                .map(|_| {
                    let (bell, work) = (bell.clone(), work.clone());
                    loom::thread::spawn(move || publish(&bell, &work))
                })
                .collect();
            // Two waits in a row: a ring caught between the first wait's prepare_park and
            // cancel_park leaves a stale token for the second.
            wait_for(&bell, &work, 1);
            wait_for(&bell, &work, 2);
            for r in ringers {
                r.join().unwrap();
            }
        });
    }
}
