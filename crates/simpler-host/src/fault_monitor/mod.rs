//! The device fault monitor: the process's hold on the device's one exception-callback slot
//! and the lock-free ring the callback reports into (`docs/health.md` §2).
//!
//! By responsibility:
//! - [`FaultMonitor`] (here): the process's monitor, its fork check and its snapshot;
//! - `slot`: the [`ExceptionSlot`] and the reference-counted install/uninstall of the
//!   callback (the first [`acquire`](FaultMonitor::acquire) installs, the last
//!   [`release`](FaultMonitor::release) uninstalls, a confirmed reset reinstalls);
//! - `ring`: the [`NoticeRing`] of [`RING_SLOTS`] notices and the per-consumer
//!   [`NoticeCursor`];
//! - `atfork`: the `pthread_atfork` hooks that hold the monitor's lock across `fork()`.
//!
//! It owns no health decision: notices are read through a cursor, and what they mean for a
//! device is the health module's business.
//!
//! **Fork.** The monitor remembers the process id it belongs to. In a forked child the
//! parent's installation, references, ring and counters mean nothing (the child has none of
//! the parent's threads or callback registrations): the first monitor operation in the child
//! sees the new process id and resets all of them. The monitor's lock is held across
//! `fork()` by the atfork hooks, so the child never inherits it taken.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use simpler_device::FaultNotice;

mod atfork;
mod ring;
mod slot;

#[cfg(test)]
pub(crate) use atfork::in_forked_child;
use atfork::{ForkLock, Held};
pub use ring::{NoticeCursor, NoticeRead, NoticeRing, Reported, RING_SLOTS};
pub use slot::ExceptionSlot;

/// A snapshot of the monitor, for tests and diagnostics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonitorSnapshot {
    /// Holders of the installation.
    pub references: u32,
    /// Whether the callback is installed.
    pub installed: bool,
    /// Notices reported so far (stored or dropped).
    pub reported: u64,
    /// Reporters that lost their slot.
    pub dropped: u64,
}

/// The process's device fault monitor. Use [`FaultMonitor::global`]; separate instances exist
/// for tests.
pub struct FaultMonitor {
    lock: ForkLock,
    references: AtomicU32,
    installed: AtomicBool,
    ring: Arc<NoticeRing>,
    pid: AtomicU32,
    pid_source: fn() -> u32,
}

impl std::fmt::Debug for FaultMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultMonitor")
            .field("snapshot", &self.peek())
            .finish_non_exhaustive()
    }
}

impl Default for FaultMonitor {
    fn default() -> Self {
        FaultMonitor::new()
    }
}

impl FaultMonitor {
    /// A monitor for the current process, nothing installed.
    pub fn new() -> FaultMonitor {
        FaultMonitor::with_pid_source(std::process::id)
    }

    /// A monitor that asks `pid_source` for the process id (tests simulate a fork with it).
    pub fn with_pid_source(pid_source: fn() -> u32) -> FaultMonitor {
        FaultMonitor {
            lock: ForkLock::default(),
            references: AtomicU32::new(0),
            installed: AtomicBool::new(false),
            ring: Arc::default(),
            pid: AtomicU32::new(pid_source()),
            pid_source,
        }
    }

    /// The process's monitor (created on first use, with its atfork hooks).
    pub fn global() -> &'static FaultMonitor {
        static GLOBAL: OnceLock<FaultMonitor> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            atfork::register_global_monitor_hooks();
            FaultMonitor::new()
        })
    }

    /// The ring the callback reports into.
    pub fn ring(&self) -> &NoticeRing {
        &self.ring
    }

    fn held(&self) -> Held<'_> {
        self.lock.acquire();
        let held = Held(&self.lock);
        let now = (self.pid_source)();
        if self.pid.load(Ordering::Acquire) != now {
            // A forked child: the parent's installation, references and notices are not ours.
            self.references.store(0, Ordering::Release);
            self.installed.store(false, Ordering::Release);
            self.ring.reset();
            self.pid.store(now, Ordering::Release);
        }
        held
    }

    /// Reads the next generation for `cursor` (after the fork check).
    pub fn read(&self, cursor: &mut NoticeCursor) -> NoticeRead {
        drop(self.held());
        cursor.read(&self.ring)
    }

    /// A cursor that sees only notices reported from now on.
    pub fn cursor_from_now(&self) -> NoticeCursor {
        drop(self.held());
        let mut c = NoticeCursor::default();
        c.skip_to_current(&self.ring);
        c
    }

    /// Reports a notice (what the installed callback does).
    pub fn report(&self, notice: FaultNotice) -> Reported {
        self.ring.report(notice)
    }

    /// The monitor's state (after the fork check).
    pub fn snapshot(&self) -> MonitorSnapshot {
        drop(self.held());
        self.peek()
    }

    fn peek(&self) -> MonitorSnapshot {
        MonitorSnapshot {
            references: self.references.load(Ordering::Acquire),
            installed: self.installed.load(Ordering::Acquire),
            reported: self.ring.sequence(),
            dropped: self.ring.dropped(),
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
pub(crate) mod tests {
    use super::*;
    use crate::fault_monitor::slot::tests::FakeSlot;
    use simpler_device::StreamId;

    /// The notice a test reports as number `k` (every field derived from `k`).
    pub(crate) fn notice(k: u32) -> FaultNotice {
        FaultNotice {
            device: k,
            stream: Some(StreamId::from_raw(k.wrapping_mul(3))),
            code: (k as i32).wrapping_mul(7),
        }
    }

    static FAKE_PID: AtomicU32 = AtomicU32::new(100);

    fn fake_pid() -> u32 {
        FAKE_PID.load(Ordering::SeqCst)
    }

    #[test]
    fn a_simulated_fork_resets_references_ring_and_counters() {
        let m = FaultMonitor::with_pid_source(fake_pid);
        let slot = FakeSlot::default();
        m.acquire(&slot).unwrap();
        m.acquire(&slot).unwrap();
        let mut c = m.cursor_from_now();
        for k in 1..=3 {
            m.report(notice(k));
        }
        m.ring.hold_writing(4);
        m.ring.sequence_bump_for_tests();
        m.report(notice(20)); // generation 5
        assert_eq!(m.snapshot().references, 2);
        FAKE_PID.fetch_add(1, Ordering::SeqCst);
        let s = m.snapshot();
        assert_eq!(
            s,
            MonitorSnapshot {
                references: 0,
                installed: false,
                reported: 0,
                dropped: 0
            }
        );
        assert_eq!(
            m.read(&mut c),
            NoticeRead::End,
            "the parent's notices are gone"
        );
        // The child installs its own callback on first acquire.
        m.acquire(&slot).unwrap();
        assert_eq!(slot.installs.get(), 2);
        m.report(notice(7));
        assert_eq!(m.read(&mut c), NoticeRead::Notice(notice(7)));
    }

    #[test]
    fn a_real_fork_resets_the_monitor_in_the_child_and_the_parent_keeps_it() {
        let m = FaultMonitor::new();
        let slot = FakeSlot::default();
        m.acquire(&slot).unwrap();
        for k in 1..=3 {
            m.report(notice(k));
        }
        let before = m.snapshot();
        let child_ok = crate::fault_monitor::in_forked_child(|| {
            let mut c = NoticeCursor::default();
            m.snapshot()
                == MonitorSnapshot {
                    references: 0,
                    installed: false,
                    reported: 0,
                    dropped: 0,
                }
                && m.read(&mut c) == NoticeRead::End
        });
        assert!(child_ok, "the child saw the parent's monitor state");
        assert_eq!(m.snapshot(), before, "the parent is untouched");
        let mut c = NoticeCursor::default();
        assert_eq!(m.read(&mut c), NoticeRead::Notice(notice(1)));
    }

    #[test]
    fn the_global_monitor_survives_a_fork_with_its_lock_released() {
        let g = FaultMonitor::global();
        let before = g.snapshot();
        // The child can take the lock (the atfork hooks released it) and sees a fresh monitor.
        assert!(crate::fault_monitor::in_forked_child(|| {
            let s = g.snapshot();
            s.references == 0 && !s.installed && s.reported == 0
        }));
        // The parent's copy of the lock was released too: this would spin forever otherwise.
        let _ = g.snapshot();
        let _ = before;
    }
}
