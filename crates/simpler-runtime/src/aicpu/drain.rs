//! The sync-start drain's shared words (`docs/chip-runtime.md`, scheduler): while a
//! `require_sync_start` task waits for enough idle cores, no scheduler dispatches anything
//! else; each publishes its idle capacity for the task's shape, and once the sum covers
//! every block, each claims as many blocks as it has idle cores and dispatches them at once.
//!
//! A scheduler's drain step may run late: it read the task word, was descheduled, and the
//! drain ended, its task ran to completion and its slot was reused by another task. So a
//! step never reads the task's slot to learn what it drains: the entering scheduler (which
//! holds the task, ready and unfinished) copies the shape, lanes and block count into
//! [`Drain`] under a fresh sequence number, and blocks are claimed from the drain's own
//! counter, tagged with that number. A claim of an ended drain fails; a claim that succeeds
//! leaves a block unrun, so the task cannot have completed and its slot is still its own.
//! This module owns those words; placing blocks is the scheduler's.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::task::{Shape, TaskId};

/// [`Drain::task`] when no drain is active.
pub(crate) const NO_DRAIN: u64 = u64::MAX;

/// Bits of a drain's sequence number (the high bits of [`Drain::params`] and
/// [`Drain::claim`]).
const SEQ_BITS: u32 = 24;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// What a drain step drains: its task as it entered, and the drain's sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DrainView {
    pub(crate) task: TaskId,
    pub(crate) seq: u64,
    pub(crate) shape: Shape,
    pub(crate) lanes: u8,
    pub(crate) block_num: u32,
}

/// The drain's words, shared by every scheduler of a run.
pub(crate) struct Drain {
    /// Task in drain, or [`NO_DRAIN`].
    pub(crate) task: AtomicU64,
    /// Idle capacity published per scheduler.
    pub(crate) idle: Box<[AtomicU32]>,
    /// The task whose blocks may be claimed (its published capacity covers them), or
    /// [`NO_DRAIN`]. A task id rather than a flag: a scheduler still inside an ended drain's
    /// step must neither claim for nor end the next task's drain.
    pub(crate) go: AtomicU64,
    /// `seq << 40 | block_num << 8 | shape << 4 | lanes` of the drain's task.
    params: AtomicU64,
    /// The task [`params`](Drain::params) describe, stored after them.
    params_task: AtomicU64,
    /// `seq << 32 | blocks claimed`.
    claim: AtomicU64,
}

fn shape_of(bits: u64) -> Shape {
    match bits {
        0 => Shape::Aic,
        1 => Shape::Aiv,
        2 => Shape::Mix,
        _ => Shape::Dummy,
    }
}

impl Drain {
    /// No drain, for `schedulers` schedulers.
    pub(crate) fn new(schedulers: usize) -> Drain {
        Drain {
            task: AtomicU64::new(NO_DRAIN),
            idle: (0..schedulers).map(|_| AtomicU32::new(0)).collect(),
            go: AtomicU64::new(NO_DRAIN),
            params: AtomicU64::new(0),
            params_task: AtomicU64::new(NO_DRAIN),
            claim: AtomicU64::new(0),
        }
    }

    /// Enters the drain for `task` (ready and unfinished: the caller holds it); false when
    /// another drain is active.
    pub(crate) fn enter(&self, task: TaskId, shape: Shape, lanes: u8, block_num: u32) -> bool {
        if self
            .task
            .compare_exchange(NO_DRAIN, task, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        let seq = ((self.params.load(Ordering::Acquire) >> 40) + 1) & SEQ_MASK;
        self.claim.store(seq << 32, Ordering::Release);
        let params =
            seq << 40 | u64::from(block_num) << 8 | (shape as u64) << 4 | u64::from(lanes & 0xf);
        self.params.store(params, Ordering::Release);
        self.params_task.store(task, Ordering::Release);
        true
    }

    /// The active drain, if its entry is complete.
    pub(crate) fn view(&self) -> Option<DrainView> {
        let task = self.task.load(Ordering::Acquire);
        if task == NO_DRAIN || self.params_task.load(Ordering::Acquire) != task {
            return None;
        }
        let p = self.params.load(Ordering::Acquire);
        // The drain may have ended (and another begun) between the loads.
        if self.task.load(Ordering::Acquire) != task
            || self.params_task.load(Ordering::Acquire) != task
        {
            return None;
        }
        Some(DrainView {
            task,
            seq: p >> 40,
            shape: shape_of((p >> 4) & 0xf),
            lanes: (p & 0xf) as u8,
            block_num: (p >> 8) as u32,
        })
    }

    /// Blocks of `view`'s drain claimed so far; `None` once that drain is over.
    pub(crate) fn claimed(&self, view: &DrainView) -> Option<u32> {
        let c = self.claim.load(Ordering::Acquire);
        (c >> 32 == view.seq).then_some(c as u32)
    }

    /// Claims the next block of `view`'s drain; `None` when none is left or the drain is
    /// over.
    pub(crate) fn claim(&self, view: &DrainView) -> Option<u32> {
        let mut c = self.claim.load(Ordering::Acquire);
        loop {
            let block = c as u32;
            if c >> 32 != view.seq || block >= view.block_num {
                return None;
            }
            match self
                .claim
                .compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(block),
                Err(now) => c = now,
            }
        }
    }

    /// Ends `view`'s drain once every block is claimed, if this caller takes `go` back
    /// from its task: resets the published capacities before releasing the task word, so
    /// the next drain never sees a stale `go`. True if it ended the drain.
    pub(crate) fn end_if_claimed(&self, view: &DrainView) -> bool {
        let all = self.claimed(view).is_none_or(|n| n >= view.block_num);
        if !all
            || self
                .go
                .compare_exchange(view.task, NO_DRAIN, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return false;
        }
        for c in self.idle.iter() {
            c.store(0, Ordering::Release);
        }
        self.params_task.store(NO_DRAIN, Ordering::Release);
        self.task.store(NO_DRAIN, Ordering::Release);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_step_of_an_ended_drain_claims_nothing_of_the_next() {
        let d = Drain::new(2);
        assert!(d.view().is_none());
        assert!(d.enter(7, Shape::Aiv, 0b10, 2));
        assert!(!d.enter(8, Shape::Aic, 0b1, 1), "one drain at a time");
        // Scheduler A reads the drain, then is descheduled.
        let late = d.view().unwrap();
        assert_eq!(
            (late.task, late.shape, late.lanes, late.block_num),
            (7, Shape::Aiv, 0b10, 2)
        );
        // Scheduler B claims both blocks and ends the drain; task 7 may now finish and its
        // slot be reused; a drain of task 8 begins.
        d.go.store(7, Ordering::Release);
        assert_eq!(d.claim(&late), Some(0));
        assert_eq!(d.claim(&late), Some(1));
        assert_eq!(d.claim(&late), None);
        assert!(d.end_if_claimed(&late));
        assert!(d.view().is_none());
        assert!(d.enter(8, Shape::Aic, 0b1, 3));
        // A wakes up holding task 7's view: it claims nothing (not task 8's blocks), sees
        // its drain over, and cannot end task 8's drain.
        assert_eq!(d.claim(&late), None);
        assert_eq!(d.claimed(&late), None);
        assert!(!d.end_if_claimed(&late));
        let now = d.view().unwrap();
        assert_eq!((now.task, now.block_num, now.shape), (8, 3, Shape::Aic));
        assert_eq!(d.claimed(&now), Some(0), "task 8 lost no block");
        d.go.store(8, Ordering::Release);
        assert_eq!(d.claim(&now), Some(0));
    }

    #[test]
    fn claims_from_many_threads_hand_out_each_block_once() {
        let d = std::sync::Arc::new(Drain::new(4));
        assert!(d.enter(1, Shape::Mix, 0b111, 1000));
        let view = d.view().unwrap();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let d = d.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Some(b) = d.claim(&view) {
                        got.push(b);
                    }
                    got
                })
            })
            .collect();
        let mut all: Vec<u32> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..1000).collect::<Vec<_>>());
    }
}
