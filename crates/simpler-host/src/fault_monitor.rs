//! The device fault monitor: the process's hold on the device's one exception-callback slot
//! and the lock-free ring the callback reports into (design `run-completion-fences.txt`,
//! "Device fault monitor"; spec `run-lane.md` §5, "Monitor" and "Ring").
//!
//! **Owns:** the install/uninstall of the exception callback (reference-counted: the first
//! [`acquire`](FaultMonitor::acquire) installs, and a failed install takes no reference; the
//! last [`release`](FaultMonitor::release) uninstalls, and the reference is dropped even when
//! the uninstall fails), the [`NoticeRing`] of [`RING_SLOTS`] notices, and the reset of both
//! in a forked child. It owns no health decision: notices are read through a per-consumer
//! [`NoticeCursor`], and what they mean for a device is [`crate::health`]'s business.
//!
//! **Ring protocol.** Each slot has one atomic state word: `(gen << 1) | 1` while notice
//! `gen` is being written, `gen << 1` once it is complete. A reporter takes `gen` from a
//! global sequence and claims slot `gen % 16` by a compare-and-swap from any *complete* state
//! of an older generation; if the slot is being written, or already holds a newer
//! generation, the reporter *loses*: it marks the slot abandoned for `gen`, counts a drop and
//! writes nothing. A reader copies the fields and re-checks the state word (a seqlock), so it
//! never returns a torn notice: a notice overwritten while being copied reads as lost. A
//! cursor reads generations in order and stops at the first one still being written
//! (Pending, not consumed); it classifies every other generation exactly once, as a notice,
//! lost (overwritten before it was read) or dropped (its reporter lost). Once reporters are
//! quiet, notices + lost + dropped equals the number reported; a reader racing a reporter
//! that is about to lose may classify a notice written right after its look as dropped.
//!
//! **Fork.** The monitor remembers the process id it belongs to. In a forked child the
//! parent's installation, references, ring and counters mean nothing (the child has none of
//! the parent's threads or callback registrations): the first monitor operation in the child
//! sees the new process id and resets all of them. The monitor's lock is held across
//! `fork()` by `pthread_atfork` hooks ([`crate::atfork`]), so the child never inherits it
//! taken.

use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, OnceLock};

// The ring's atomics are loom's under `cfg(loom)` (the model below); the monitor's own
// bookkeeping stays on std atomics.
use crate::sync::atomic::{fence, AtomicU32 as RingU32, AtomicU64, Ordering};

use simpler_device::{Device, DeviceError, FaultCallback, FaultNotice, StreamId};

/// Slots of the notice ring (2 under the loom model, to keep its state space small).
pub const RING_SLOTS: usize = if cfg!(loom) { 2 } else { 16 };

const WRITING: u64 = 1;
const NO_STREAM: u64 = u64::MAX;

/// The exception-callback slot the monitor installs into (`aclrtSetExceptionInfoCallback`):
/// any [`Device`], or a scripted one in tests.
pub trait ExceptionSlot {
    /// Installs `callback` in the process's slot.
    fn install(&self, callback: FaultCallback) -> Result<(), DeviceError>;
    /// Empties the process's slot.
    fn uninstall(&self) -> Result<(), DeviceError>;
}

impl<D: Device + ?Sized> ExceptionSlot for D {
    fn install(&self, callback: FaultCallback) -> Result<(), DeviceError> {
        self.set_fault_callback(Some(callback))
    }
    fn uninstall(&self) -> Result<(), DeviceError> {
        self.set_fault_callback(None)
    }
}

struct Cell {
    state: AtomicU64,
    /// The latest generation that lost this slot.
    abandoned: AtomicU64,
    device: RingU32,
    stream: AtomicU64,
    code: RingU32,
}

impl Cell {
    fn new() -> Cell {
        Cell {
            state: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            device: RingU32::new(0),
            stream: AtomicU64::new(NO_STREAM),
            code: RingU32::new(0),
        }
    }
}

/// What [`NoticeRing::report`] did with a notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reported {
    /// Stored as generation `gen`.
    Stored(u64),
    /// The reporter lost its slot and wrote nothing; counted as dropped.
    Dropped(u64),
}

/// What a cursor found at its next generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeRead {
    /// A whole notice; consumed.
    Notice(FaultNotice),
    /// Overwritten before it was read; consumed and counted lost.
    Lost,
    /// Its reporter lost the slot and wrote nothing; consumed and counted dropped.
    Dropped,
    /// Being written (or claimed and not yet written); not consumed: read again later.
    Pending,
    /// Nothing newer has been reported.
    End,
}

/// The lock-free ring of [`RING_SLOTS`] notices the exception callback reports into.
pub struct NoticeRing {
    cells: [Cell; RING_SLOTS],
    /// The last generation handed out (generations start at 1).
    sequence: AtomicU64,
    /// Reporters that lost their slot.
    dropped: AtomicU64,
    /// Bumped by every reset: cursors from before it start over.
    resets: AtomicU64,
}

impl Default for NoticeRing {
    fn default() -> Self {
        NoticeRing {
            cells: std::array::from_fn(|_| Cell::new()),
            sequence: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            resets: AtomicU64::new(0),
        }
    }
}

impl NoticeRing {
    /// Stores `notice`, lock-free; a reporter that loses its slot writes nothing.
    pub fn report(&self, notice: FaultNotice) -> Reported {
        let gen = self.sequence.fetch_add(1, Ordering::AcqRel) + 1;
        let cell = &self.cells[(gen % RING_SLOTS as u64) as usize];
        let mut cur = cell.state.load(Ordering::Acquire);
        loop {
            if cur & WRITING != 0 || (cur >> 1) >= gen {
                cell.abandoned.fetch_max(gen, Ordering::AcqRel);
                self.dropped.fetch_add(1, Ordering::AcqRel);
                return Reported::Dropped(gen);
            }
            match cell.state.compare_exchange_weak(
                cur,
                (gen << 1) | WRITING,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        // The claim must be visible before any field store (the reader's re-check).
        fence(Ordering::Release);
        self.write_fields(cell, notice);
        cell.state.store(gen << 1, Ordering::Release);
        Reported::Stored(gen)
    }

    fn write_fields(&self, cell: &Cell, notice: FaultNotice) {
        cell.device.store(notice.device, Ordering::Relaxed);
        cell.stream.store(
            notice.stream.map_or(NO_STREAM, |s| u64::from(s.raw())),
            Ordering::Relaxed,
        );
        cell.code.store(notice.code as u32, Ordering::Relaxed);
    }

    /// What generation `gen` holds now (no cursor state changes).
    pub fn read(&self, gen: u64) -> NoticeRead {
        let cell = &self.cells[(gen % RING_SLOTS as u64) as usize];
        let s1 = cell.state.load(Ordering::Acquire);
        let held = s1 >> 1;
        if held == gen {
            if s1 & WRITING != 0 {
                return NoticeRead::Pending;
            }
            let device = cell.device.load(Ordering::Relaxed);
            let stream = cell.stream.load(Ordering::Relaxed);
            let code = cell.code.load(Ordering::Relaxed) as i32;
            fence(Ordering::Acquire);
            if cell.state.load(Ordering::Relaxed) != s1 {
                return NoticeRead::Lost;
            }
            return NoticeRead::Notice(FaultNotice {
                device,
                stream: (stream != NO_STREAM).then_some(StreamId::from_raw(stream as u32)),
                code,
            });
        }
        let abandoned = cell.abandoned.load(Ordering::Acquire);
        if held > gen {
            return if abandoned == gen {
                NoticeRead::Dropped
            } else {
                NoticeRead::Lost
            };
        }
        if gen > self.sequence.load(Ordering::Acquire) {
            return NoticeRead::End;
        }
        if abandoned >= gen {
            NoticeRead::Dropped
        } else {
            NoticeRead::Pending
        }
    }

    /// The last generation handed out.
    pub fn sequence(&self) -> u64 {
        self.sequence.load(Ordering::Acquire)
    }

    /// Reporters that lost their slot.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Acquire)
    }

    /// Forgets everything (a forked child). Only sound while nobody reports: the child has
    /// no device threads.
    fn reset(&self) {
        for c in &self.cells {
            c.state.store(0, Ordering::Relaxed);
            c.abandoned.store(0, Ordering::Relaxed);
        }
        self.sequence.store(0, Ordering::Relaxed);
        self.dropped.store(0, Ordering::Relaxed);
        self.resets.fetch_add(1, Ordering::AcqRel);
    }

    #[cfg(test)]
    /// Test hook: hands out one generation without reporting (its reporter is preempted).
    pub(crate) fn sequence_bump_for_tests(&self) {
        self.sequence.fetch_add(1, Ordering::AcqRel);
    }

    #[cfg(test)]
    /// Test hook: leaves slot `gen % 16` in the writing state of generation `gen`, as a
    /// reporter preempted mid-write would.
    pub(crate) fn hold_writing(&self, gen: u64) {
        self.cells[(gen % RING_SLOTS as u64) as usize]
            .state
            .store((gen << 1) | WRITING, Ordering::Release);
    }
}

/// One consumer's position in the ring, with what it has seen so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NoticeCursor {
    /// Next generation to read.
    next: u64,
    /// The ring reset this cursor belongs to.
    resets: u64,
    /// Whole notices read.
    pub delivered: u64,
    /// Notices overwritten before this cursor read them.
    pub lost: u64,
    /// Notices whose reporter lost its slot.
    pub dropped: u64,
}

impl NoticeCursor {
    /// Reads the next generation; consumes it unless it is Pending (or End).
    pub fn read(&mut self, ring: &NoticeRing) -> NoticeRead {
        let resets = ring.resets.load(Ordering::Acquire);
        if resets != self.resets || self.next == 0 {
            self.resets = resets;
            self.next = 1;
        }
        let r = ring.read(self.next);
        match r {
            NoticeRead::Notice(_) => self.delivered += 1,
            NoticeRead::Lost => self.lost += 1,
            NoticeRead::Dropped => self.dropped += 1,
            NoticeRead::Pending | NoticeRead::End => return r,
        }
        self.next += 1;
        r
    }

    /// Skips everything reported so far: the next read sees only newer notices.
    pub fn skip_to_current(&mut self, ring: &NoticeRing) {
        self.resets = ring.resets.load(Ordering::Acquire);
        self.next = ring.sequence() + 1;
    }
}

/// A lock with no data, held across `fork()` by the atfork hooks (a spin lock: it is held
/// only around a callback install or a reset, and a child must be able to release a lock its
/// parent's thread took).
#[derive(Debug, Default)]
pub(crate) struct ForkLock(AtomicBool);

impl ForkLock {
    pub(crate) fn acquire(&self) {
        while self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
    }

    pub(crate) fn release(&self) {
        self.0.store(false, Ordering::Release);
    }
}

struct Held<'a>(&'a ForkLock);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

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
    pub(crate) lock: ForkLock,
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
            crate::atfork::register_global_monitor_hooks();
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

    fn callback(&self) -> FaultCallback {
        let ring = self.ring.clone();
        Arc::new(move |n| {
            ring.report(n);
        })
    }

    /// Takes a reference; the first one installs the callback. A failed install takes no
    /// reference and returns the error.
    ///
    /// # Errors
    /// The slot's install error.
    pub fn acquire<S: ExceptionSlot + ?Sized>(&self, slot: &S) -> Result<(), DeviceError> {
        let _held = self.held();
        if !self.installed.load(Ordering::Acquire) {
            slot.install(self.callback())?;
            self.installed.store(true, Ordering::Release);
        }
        self.references.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Drops a reference; the last one uninstalls. The reference is dropped even when the
    /// uninstall fails (the error is returned). Releasing with no reference is a no-op.
    ///
    /// # Errors
    /// The slot's uninstall error.
    pub fn release<S: ExceptionSlot + ?Sized>(&self, slot: &S) -> Result<(), DeviceError> {
        let _held = self.held();
        let refs = self.references.load(Ordering::Acquire);
        if refs == 0 {
            return Ok(());
        }
        self.references.store(refs - 1, Ordering::Release);
        if refs == 1 && self.installed.load(Ordering::Acquire) {
            self.installed.store(false, Ordering::Release);
            return slot.uninstall();
        }
        Ok(())
    }

    /// After a confirmed device reset (which may have cleared the device's registrations):
    /// re-installs the callback if references are held, else records it as not installed.
    ///
    /// # Errors
    /// The slot's install error (the callback is then recorded as not installed).
    pub fn reinstall_after_device_reset<S: ExceptionSlot + ?Sized>(
        &self,
        slot: &S,
    ) -> Result<(), DeviceError> {
        let _held = self.held();
        if self.references.load(Ordering::Acquire) == 0 {
            self.installed.store(false, Ordering::Release);
            return Ok(());
        }
        match slot.install(self.callback()) {
            Ok(()) => {
                self.installed.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                self.installed.store(false, Ordering::Release);
                Err(e)
            }
        }
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

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::*;
    use std::cell::Cell as StdCell;

    /// A scripted exception slot: counts calls, fails on request, keeps the callback.
    #[derive(Default)]
    pub(crate) struct FakeSlot {
        pub(crate) installs: StdCell<u32>,
        pub(crate) uninstalls: StdCell<u32>,
        pub(crate) fail_install: StdCell<bool>,
        pub(crate) fail_uninstall: StdCell<bool>,
        pub(crate) callback: std::cell::RefCell<Option<FaultCallback>>,
    }

    impl ExceptionSlot for FakeSlot {
        fn install(&self, callback: FaultCallback) -> Result<(), DeviceError> {
            self.installs.set(self.installs.get() + 1);
            if self.fail_install.get() {
                return Err(DeviceError::Injected("install"));
            }
            *self.callback.borrow_mut() = Some(callback);
            Ok(())
        }
        fn uninstall(&self) -> Result<(), DeviceError> {
            self.uninstalls.set(self.uninstalls.get() + 1);
            *self.callback.borrow_mut() = None;
            if self.fail_uninstall.get() {
                return Err(DeviceError::Injected("uninstall"));
            }
            Ok(())
        }
    }

    pub(crate) fn notice(k: u32) -> FaultNotice {
        FaultNotice {
            device: k,
            stream: Some(StreamId::from_raw(k.wrapping_mul(3))),
            code: (k as i32).wrapping_mul(7),
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Op {
        Acquire,
        AcquireFailing,
        Release,
        ReleaseFailing,
    }

    #[test]
    fn reference_counted_install_and_uninstall() {
        use Op::*;
        // (steps, references, installed, install calls, uninstall calls, errors)
        type Row<'a> = (&'a [Op], u32, bool, u32, u32, usize);
        let rows: &[Row<'_>] = &[
            (&[Acquire], 1, true, 1, 0, 0),
            (&[Acquire, Acquire], 2, true, 1, 0, 0),
            (&[Acquire, Acquire, Release], 1, true, 1, 0, 0),
            (&[Acquire, Acquire, Release, Release], 0, false, 1, 1, 0),
            // A failed install takes no reference; the next acquire installs.
            (&[AcquireFailing], 0, false, 1, 0, 1),
            (&[AcquireFailing, Acquire], 1, true, 2, 0, 1),
            // The last release drops its reference even when the uninstall fails.
            (&[Acquire, ReleaseFailing], 0, false, 1, 1, 1),
            (&[Acquire, ReleaseFailing, Acquire], 1, true, 2, 1, 1),
            // Releasing with nothing held does nothing.
            (&[Release], 0, false, 0, 0, 0),
        ];
        for (steps, refs, installed, installs, uninstalls, errors) in rows {
            let m = FaultMonitor::new();
            let slot = FakeSlot::default();
            let mut errs = 0;
            for op in *steps {
                slot.fail_install.set(matches!(op, AcquireFailing));
                slot.fail_uninstall.set(matches!(op, ReleaseFailing));
                let r = match op {
                    Acquire | AcquireFailing => m.acquire(&slot),
                    Release | ReleaseFailing => m.release(&slot),
                };
                errs += usize::from(r.is_err());
            }
            let s = m.snapshot();
            let got = (
                s.references,
                s.installed,
                slot.installs.get(),
                slot.uninstalls.get(),
                errs,
            );
            assert_eq!(
                got,
                (*refs, *installed, *installs, *uninstalls, *errors),
                "{steps:?}"
            );
        }
    }

    #[test]
    fn reinstall_after_a_confirmed_reset() {
        // (references held, install fails, installed after, install calls, error)
        let rows = [
            (2u32, false, true, 2u32, false),
            (1, true, false, 2, true),
            (0, false, false, 0, false),
        ];
        for (refs, fails, installed, installs, error) in rows {
            let m = FaultMonitor::new();
            let slot = FakeSlot::default();
            for _ in 0..refs {
                m.acquire(&slot).unwrap();
            }
            slot.fail_install.set(fails);
            let r = m.reinstall_after_device_reset(&slot);
            assert_eq!(r.is_err(), error, "refs {refs}");
            let s = m.snapshot();
            assert_eq!((s.installed, slot.installs.get()), (installed, installs));
            assert_eq!(
                s.references, refs,
                "a reinstall never changes the references"
            );
        }
    }

    #[test]
    fn the_installed_callback_reports_into_the_ring_and_a_cursor_reads_each_once() {
        let m = FaultMonitor::new();
        let slot = FakeSlot::default();
        m.acquire(&slot).unwrap();
        let mut c = m.cursor_from_now();
        let cb = slot.callback.borrow().clone().unwrap();
        for k in 1..=3 {
            cb(notice(k));
        }
        for k in 1..=3 {
            assert_eq!(m.read(&mut c), NoticeRead::Notice(notice(k)));
        }
        assert_eq!(m.read(&mut c), NoticeRead::End);
        assert_eq!(
            m.read(&mut c),
            NoticeRead::End,
            "nothing is delivered twice"
        );
        assert_eq!((c.delivered, c.lost, c.dropped), (3, 0, 0));
        // A cursor started later sees only what comes after it.
        let mut late = m.cursor_from_now();
        cb(notice(9));
        assert_eq!(m.read(&mut late), NoticeRead::Notice(notice(9)));
        assert_eq!(m.read(&mut c), NoticeRead::Notice(notice(9)));
    }

    #[test]
    fn ring_states_table() {
        // Each row: what happens to the ring, then what a cursor from the start reads.
        type Setup = fn(&NoticeRing);
        type Row<'a> = (&'a str, Setup, &'a [NoticeRead], (u64, u64, u64));
        let rows: &[Row<'_>] = &[
            ("empty", |_| {}, &[NoticeRead::End], (0, 0, 0)),
            (
                "overwritten before being read: the oldest are lost",
                |r| {
                    for k in 1..=(RING_SLOTS as u32 + 2) {
                        r.report(notice(k));
                    }
                },
                &[
                    NoticeRead::Lost,
                    NoticeRead::Lost,
                    NoticeRead::Notice(notice(3)),
                ],
                (1, 2, 0),
            ),
            (
                "a reporter finding its slot mid-write loses and writes nothing",
                |r| {
                    r.report(notice(1));
                    // Generation 2's slot looks taken by a preempted writer of generation 2.
                    r.hold_writing(2);
                    // Generation 2 itself is then "being written": Pending.
                },
                &[NoticeRead::Notice(notice(1)), NoticeRead::Pending],
                (1, 0, 0),
            ),
            (
                "a lapped writer still writing makes the next lap's reporter lose",
                |r| {
                    // Generation 1 claimed its slot and is preempted mid-write...
                    r.sequence.store(1, Ordering::Release);
                    r.hold_writing(1);
                    // ...15 more notices fill the other slots, the 16th+1 laps slot 1.
                    for k in 2..=(RING_SLOTS as u32 + 1) {
                        r.report(notice(k));
                    }
                },
                // Generation 1 is still being written: Pending, not consumed.
                &[NoticeRead::Pending, NoticeRead::Pending],
                (0, 0, 0),
            ),
        ];
        for (name, setup, reads, (delivered, lost, dropped)) in rows {
            let ring = NoticeRing::default();
            setup(&ring);
            let mut c = NoticeCursor::default();
            for want in *reads {
                assert_eq!(c.read(&ring), *want, "{name}");
            }
            assert_eq!(
                (c.delivered, c.lost, c.dropped),
                (*delivered, *lost, *dropped),
                "{name}"
            );
        }
    }

    #[test]
    fn a_losing_reporter_stores_nothing_and_is_counted() {
        let ring = NoticeRing::default();
        ring.report(notice(1));
        // Slot of generation 17 (= slot 1) is held mid-write by generation 1's lap.
        ring.hold_writing(1);
        for k in 2..=16 {
            assert!(matches!(ring.report(notice(k)), Reported::Stored(_)));
        }
        assert_eq!(ring.report(notice(17)), Reported::Dropped(17));
        assert_eq!(ring.dropped(), 1);
        // The slot still holds generation 1's claim, untouched by the loser.
        assert_eq!(ring.read(1), NoticeRead::Pending);
        // Generation 1's writer finishes; generation 17 reads as dropped, never as notice 1.
        ring.cells[1].state.store(1 << 1, Ordering::Release);
        let mut c = NoticeCursor::default();
        assert_eq!(c.read(&ring), NoticeRead::Notice(notice(1)));
        for k in 2..=16 {
            assert_eq!(c.read(&ring), NoticeRead::Notice(notice(k)));
        }
        assert_eq!(c.read(&ring), NoticeRead::Dropped);
        assert_eq!(c.read(&ring), NoticeRead::End);
        assert_eq!((c.delivered, c.lost, c.dropped), (16, 0, 1));
    }

    #[test]
    fn a_reader_never_sees_a_torn_notice() {
        const REPORTERS: u32 = 4;
        const EACH: u32 = 4000;
        let ring = Arc::new(NoticeRing::default());
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (ring, done) = (ring.clone(), done.clone());
            std::thread::spawn(move || {
                let mut c = NoticeCursor::default();
                loop {
                    let finished = done.load(Ordering::Acquire);
                    match c.read(&ring) {
                        NoticeRead::Notice(n) => assert_eq!(n, notice(n.device), "torn: {n:?}"),
                        NoticeRead::Pending => std::thread::yield_now(),
                        NoticeRead::End if finished => break c,
                        NoticeRead::End => std::thread::yield_now(),
                        NoticeRead::Lost | NoticeRead::Dropped => {}
                    }
                }
            })
        };
        let reporters: Vec<_> = (0..REPORTERS)
            .map(|t| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        ring.report(notice(t * EACH + i + 1));
                    }
                })
            })
            .collect();
        for r in reporters {
            r.join().unwrap();
        }
        done.store(true, Ordering::Release);
        let c = reader.join().unwrap();
        let total = u64::from(REPORTERS * EACH);
        assert_eq!(ring.sequence(), total);
        assert_eq!(
            c.delivered + c.lost + c.dropped,
            total,
            "every generation classified exactly once: {c:?}"
        );
        assert!(c.dropped <= ring.dropped() + 16);
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
        m.ring.sequence.store(4, Ordering::Release);
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
        let child_ok = crate::atfork::in_forked_child(|| {
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
        assert!(crate::atfork::in_forked_child(|| {
            let s = g.snapshot();
            s.references == 0 && !s.installed && s.reported == 0
        }));
        // The parent's copy of the lock was released too: this would spin forever otherwise.
        let _ = g.snapshot();
        let _ = before;
    }
}

/// The loom model of the ring: reporters racing each other (one laps the ring) and a reader
/// racing them. A notice read is never torn, and once the reporters are done every
/// generation is classified exactly once. Run with
/// `RUSTFLAGS="--cfg loom" cargo test -p simpler-host --lib loom --release`.
#[cfg(all(test, loom))]
mod loom_model {
    use super::*;

    fn notice(k: u32) -> FaultNotice {
        FaultNotice {
            device: k,
            stream: Some(StreamId::from_raw(k + 100)),
            code: k as i32 + 1000,
        }
    }

    #[test]
    fn loom_ring_reporters_and_a_reader() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let ring = std::sync::Arc::new(NoticeRing::default());
            let reporters: Vec<_> = [(1u32, 2u32), (10, 1)]
                .into_iter()
                .map(|(first, count)| {
                    let ring = ring.clone();
                    loom::thread::spawn(move || {
                        for k in first..first + count {
                            ring.report(notice(k));
                        }
                    })
                })
                .collect();
            let mut c = NoticeCursor::default();
            // Racing reads: whatever comes back whole is a real notice.
            for _ in 0..2 {
                if let NoticeRead::Notice(n) = c.read(&ring) {
                    assert_eq!(n, notice(n.device), "torn");
                }
            }
            for r in reporters {
                r.join().unwrap();
            }
            loop {
                match c.read(&ring) {
                    NoticeRead::Notice(n) => assert_eq!(n, notice(n.device), "torn"),
                    NoticeRead::End => break,
                    NoticeRead::Pending => panic!("nothing is pending once reporters are done"),
                    NoticeRead::Lost | NoticeRead::Dropped => {}
                }
            }
            assert_eq!(c.delivered + c.lost + c.dropped, 3);
        });
    }
}
