//! The notice ring: the lock-free ring of [`RING_SLOTS`] fault notices the exception
//! callback reports into, and the per-consumer [`NoticeCursor`] that reads it (`docs/health.md`
//! §2).
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
//! Owns only the ring's memory protocol; installing the callback that reports into it is
//! the monitor's (`super`), and what a notice means for a device is the health module's.

// The ring's atomics are loom's with the `loom` feature (the model below).
use crate::sync::atomic::{fence, AtomicU32 as RingU32, AtomicU64, Ordering};

use simpler_device::{FaultNotice, StreamId};

/// Slots of the notice ring (2 under the loom model, to keep its state space small).
pub const RING_SLOTS: usize = if cfg!(feature = "loom") { 2 } else { 16 };

const WRITING: u64 = 1;
const NO_STREAM: u64 = u64::MAX;

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
    pub(super) fn reset(&self) {
        for c in &self.cells {
            c.state.store(0, Ordering::Relaxed);
            c.abandoned.store(0, Ordering::Relaxed);
        }
        self.sequence.store(0, Ordering::Relaxed);
        self.dropped.store(0, Ordering::Relaxed);
        self.resets.fetch_add(1, Ordering::AcqRel);
    }

    #[cfg(all(test, not(feature = "loom")))]
    /// Test hook: hands out one generation without reporting (its reporter is preempted).
    pub(crate) fn sequence_bump_for_tests(&self) {
        self.sequence.fetch_add(1, Ordering::AcqRel);
    }

    #[cfg(all(test, not(feature = "loom")))]
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

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::fault_monitor::tests::notice;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

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
}

/// The loom model of the ring: reporters racing each other (one laps the ring) and a reader
/// racing them. A notice read is never torn, and once the reporters are done every
/// generation is classified exactly once. Run with
/// `cargo test -p simpler-host --lib --features loom --profile ci loom`.
#[cfg(all(test, feature = "loom"))]
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
