//! The lane's FIFO as a state machine (`docs/lane.md` §3): at most
//! [`LANE_CAPACITY`] runs, ordered by dispatch id, each going QUEUED → PREPARED → LAUNCHED →
//! TERMINAL. Progress is front-first: a run is finalized (made TERMINAL) only at the front,
//! and nothing is finalized ahead of it. A failure that poisons the lane ends every run that
//! has not launched with that error (launched runs keep their own fate: they are on the
//! device and must be drained).
//!
//! This module holds only the ordering rules; what each transition does on the device is
//! the rest of the lane's. Every refusal is a [`LaneError`] naming the rule.

use std::collections::VecDeque;

/// Most runs a lane holds (`PTO_PIPELINE_MAX_DEPTH`).
pub const LANE_CAPACITY: usize = 2;

/// Phase of a run in the lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Admitted; not prepared (no slot yet).
    Queued,
    /// Staged into a slot; not launched.
    Prepared,
    /// On the device (fully or partially).
    Launched,
    /// Finalized or ended without launching.
    Terminal,
}

/// A refused lane transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LaneError {
    /// The lane already holds [`LANE_CAPACITY`] runs.
    #[error("the lane is full")]
    Full,
    /// Dispatch ids must increase (a duplicate or an older id).
    #[error("dispatch id {0} is not newer than the lane's newest run")]
    StaleDispatch(u64),
    /// No run with this id is in the lane.
    #[error("no run {0} in the lane")]
    Unknown(u64),
    /// The transition skips or reverses a phase.
    #[error("run {0} cannot go from {1:?} to {2:?}")]
    Illegal(u64, Phase, Phase),
    /// Only the front may be finalized (or launched, when its predecessor is not launched).
    #[error("run {0} is not at the front")]
    NotFront(u64),
    /// The lane is poisoned: new runs are refused.
    #[error("the lane is poisoned")]
    Poisoned,
}

#[derive(Debug)]
struct Entry<T> {
    id: u64,
    phase: Phase,
    item: T,
}

/// The FIFO; `T` is what the executor keeps per run.
#[derive(Debug)]
pub struct RunQueue<T> {
    entries: VecDeque<Entry<T>>,
    newest: u64,
    poisoned: bool,
}

impl<T> Default for RunQueue<T> {
    fn default() -> Self {
        RunQueue {
            entries: VecDeque::with_capacity(LANE_CAPACITY),
            newest: 0,
            poisoned: false,
        }
    }
}

impl<T> RunQueue<T> {
    /// Admits run `id` as QUEUED. Refused when full, poisoned, or `id` not newer than every
    /// id admitted before.
    pub fn admit(&mut self, id: u64, item: T) -> Result<(), LaneError> {
        if self.poisoned {
            return Err(LaneError::Poisoned);
        }
        if id <= self.newest {
            return Err(LaneError::StaleDispatch(id));
        }
        if self.entries.len() >= LANE_CAPACITY {
            return Err(LaneError::Full);
        }
        self.newest = id;
        self.entries.push_back(Entry {
            id,
            phase: Phase::Queued,
            item,
        });
        Ok(())
    }

    fn position(&self, id: u64) -> Result<usize, LaneError> {
        self.entries
            .iter()
            .position(|e| e.id == id)
            .ok_or(LaneError::Unknown(id))
    }

    /// Moves run `id` one phase forward. PREPARED and LAUNCHED need every older run to be
    /// LAUNCHED at least (runs go out in dispatch order); TERMINAL needs the front.
    pub fn advance(&mut self, id: u64, to: Phase) -> Result<(), LaneError> {
        let pos = self.position(id)?;
        let from = self.entries[pos].phase;
        let legal = matches!(
            (from, to),
            (Phase::Queued, Phase::Prepared)
                | (Phase::Prepared, Phase::Launched)
                | (Phase::Launched, Phase::Terminal)
                | (Phase::Queued, Phase::Terminal)
                | (Phase::Prepared, Phase::Terminal)
        );
        if !legal {
            return Err(LaneError::Illegal(id, from, to));
        }
        if to == Phase::Terminal {
            if pos != 0 {
                return Err(LaneError::NotFront(id));
            }
        } else if self
            .entries
            .iter()
            .take(pos)
            .any(|e| e.phase < Phase::Launched)
        {
            return Err(LaneError::NotFront(id));
        }
        self.entries[pos].phase = to;
        Ok(())
    }

    /// Removes the front if it is TERMINAL.
    pub fn pop_terminal_front(&mut self) -> Option<(u64, T)> {
        if self.entries.front()?.phase != Phase::Terminal {
            return None;
        }
        self.entries.pop_front().map(|e| (e.id, e.item))
    }

    /// Poisons the lane: new runs are refused, and every run not yet launched becomes
    /// TERMINAL; their ids and items are handed back (to end them with the poison's error).
    /// They leave the queue at once when no launched run is ahead of them.
    pub fn poison(&mut self) -> Vec<(u64, T)> {
        self.poisoned = true;
        let keep = self
            .entries
            .iter()
            .position(|e| e.phase < Phase::Launched)
            .unwrap_or(self.entries.len());
        self.entries.drain(keep..).map(|e| (e.id, e.item)).collect()
    }

    /// Lifts the poison (after a confirmed recovery).
    pub fn clear_poison(&mut self) {
        self.poisoned = false;
    }

    /// Whether the lane is poisoned.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Phase of run `id`.
    pub fn phase(&self, id: u64) -> Option<Phase> {
        self.entries.iter().find(|e| e.id == id).map(|e| e.phase)
    }

    /// Id of the front run.
    pub fn front(&self) -> Option<u64> {
        self.entries.front().map(|e| e.id)
    }

    /// Number of runs held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no run is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The item of run `id`.
    pub fn get(&self, id: u64) -> Option<&T> {
        self.entries.iter().find(|e| e.id == id).map(|e| &e.item)
    }

    /// The item of run `id`, mutably.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.entries
            .iter_mut()
            .find(|e| e.id == id)
            .map(|e| &mut e.item)
    }

    /// Ids and phases, front first.
    pub fn phases(&self) -> Vec<(u64, Phase)> {
        self.entries.iter().map(|e| (e.id, e.phase)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Phase::*;

    #[test]
    fn admission_rules() {
        let mut q = RunQueue::default();
        q.admit(1, ()).unwrap();
        assert_eq!(
            q.admit(1, ()),
            Err(LaneError::StaleDispatch(1)),
            "duplicate"
        );
        q.admit(3, ()).unwrap();
        assert_eq!(q.admit(2, ()), Err(LaneError::StaleDispatch(2)), "older");
        assert_eq!(q.admit(4, ()), Err(LaneError::Full));
        assert_eq!(q.len(), LANE_CAPACITY);
    }

    /// Transition table: (setup phases of runs 1 and 2, run, target, expected).
    #[test]
    #[allow(clippy::type_complexity)]
    fn transition_table() {
        let rows: Vec<(&str, [Phase; 2], u64, Phase, Result<(), LaneError>)> = vec![
            ("prepare the front", [Queued, Queued], 1, Prepared, Ok(())),
            ("launch the front", [Prepared, Queued], 1, Launched, Ok(())),
            (
                "finalize the front",
                [Launched, Queued],
                1,
                Terminal,
                Ok(()),
            ),
            (
                "skip preparation",
                [Queued, Queued],
                1,
                Launched,
                Err(LaneError::Illegal(1, Queued, Launched)),
            ),
            (
                "go back",
                [Launched, Queued],
                1,
                Prepared,
                Err(LaneError::Illegal(1, Launched, Prepared)),
            ),
            (
                "prepare behind an unlaunched front",
                [Prepared, Queued],
                2,
                Prepared,
                Err(LaneError::NotFront(2)),
            ),
            (
                "prepare behind a launched front",
                [Launched, Queued],
                2,
                Prepared,
                Ok(()),
            ),
            (
                "launch behind a launched front",
                [Launched, Prepared],
                2,
                Launched,
                Ok(()),
            ),
            (
                "finalize ahead of the front",
                [Launched, Launched],
                2,
                Terminal,
                Err(LaneError::NotFront(2)),
            ),
            (
                "end an unlaunched front",
                [Prepared, Queued],
                1,
                Terminal,
                Ok(()),
            ),
            (
                "finalize twice",
                [Terminal, Queued],
                1,
                Terminal,
                Err(LaneError::Illegal(1, Terminal, Terminal)),
            ),
            (
                "unknown run",
                [Queued, Queued],
                9,
                Prepared,
                Err(LaneError::Unknown(9)),
            ),
        ];
        for (name, setup, id, to, want) in rows {
            let mut q = RunQueue::default();
            q.admit(1, ()).unwrap();
            q.admit(2, ()).unwrap();
            for (run, target) in [(1, setup[0]), (2, setup[1])] {
                for p in [Prepared, Launched, Terminal] {
                    if p <= target {
                        q.advance(run, p).unwrap();
                    }
                }
            }
            assert_eq!(q.advance(id, to), want, "{name}");
        }
    }

    #[test]
    fn only_a_terminal_front_leaves_and_order_is_kept() {
        let mut q = RunQueue::default();
        q.admit(1, "a").unwrap();
        q.admit(2, "b").unwrap();
        for (id, p) in [(1, Prepared), (1, Launched), (2, Prepared), (2, Launched)] {
            q.advance(id, p).unwrap();
        }
        assert_eq!(q.pop_terminal_front(), None);
        q.advance(1, Terminal).unwrap();
        assert_eq!(q.pop_terminal_front(), Some((1, "a")));
        assert_eq!(q.front(), Some(2));
        q.admit(3, "c").unwrap();
        assert_eq!(q.phases(), vec![(2, Launched), (3, Queued)]);
    }

    #[test]
    fn poison_ends_unlaunched_runs_and_refuses_admission() {
        let mut q = RunQueue::default();
        q.admit(1, "launched").unwrap();
        q.advance(1, Prepared).unwrap();
        q.advance(1, Launched).unwrap();
        q.admit(2, "queued").unwrap();
        let ended = q.poison();
        assert_eq!(ended, vec![(2, "queued")]);
        assert_eq!(
            q.phases(),
            vec![(1, Launched)],
            "a launched run must still be drained"
        );
        assert_eq!(q.admit(3, "x"), Err(LaneError::Poisoned));
        q.advance(1, Terminal).unwrap();
        assert!(q.pop_terminal_front().is_some());
        q.clear_poison();
        q.admit(3, "x").unwrap();
    }
}
