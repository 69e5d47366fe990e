//! The chip-wide idle map (`docs/chip-runtime.md`, schedulers): one byte per cluster, bit
//! `l` set while the core of lane `l` (0 AIC, 1 AIV0, 2 AIV1) has no dispatch running, as
//! the scheduler that owns it sees it. Each scheduler writes the bits of its own clusters
//! only and reads everyone's, to tell whether a ready task may wait in a busy core's
//! pending slot ([`preload_allowance`]): only when no core (for MIX, no cluster) that could
//! run it is idle anywhere on the chip, or when the ready blocks already queued outnumber
//! those idle places, so that every one of them gets work anyway. The map dispatches
//! nothing and touches no core.

use std::sync::atomic::{AtomicU8, Ordering};

use super::task::{Shape, LANE_BITS};

/// Lane bits of a cluster whose three cores are all idle.
const ALL_LANES: u8 = LANE_BITS[0] | LANE_BITS[1] | LANE_BITS[2];

/// Per-cluster idle lane bits of one run, shared by its schedulers.
pub(crate) struct IdleMap {
    clusters: Box<[AtomicU8]>,
    /// Scheduler threads of the run: cluster `c` belongs to scheduler `c % schedulers`.
    schedulers: usize,
}

/// True if a cluster whose idle lanes are `idle` has a free place for one block of a task
/// of `shape` on `lanes` (MIX: every lane of the task idle; AIC: the AIC core; AIV: either
/// AIV core). Dummy tasks never run on a core.
fn fits(idle: u8, shape: Shape, lanes: u8) -> bool {
    match shape {
        Shape::Aic => idle & LANE_BITS[0] != 0,
        Shape::Aiv => idle & (LANE_BITS[1] | LANE_BITS[2]) != 0,
        Shape::Mix => lanes != 0 && idle & lanes == lanes,
        Shape::Dummy => false,
    }
}

impl IdleMap {
    /// A map of `clusters` clusters, every core idle (as at the start of a run: a scheduler
    /// that has not started yet still owns idle cores, and will serve them).
    pub(crate) fn new(clusters: u32, schedulers: usize) -> IdleMap {
        IdleMap {
            clusters: (0..clusters).map(|_| AtomicU8::new(ALL_LANES)).collect(),
            schedulers: schedulers.max(1),
        }
    }

    /// Records whether the core of `lane` in `cluster` is idle. Called only by the
    /// cluster's owner, on every change of its running slot.
    pub(crate) fn set(&self, cluster: u32, lane: usize, idle: bool) {
        let bit = LANE_BITS[lane];
        let word = &self.clusters[cluster as usize];
        if idle {
            word.fetch_or(bit, Ordering::AcqRel);
        } else {
            word.fetch_and(!bit, Ordering::AcqRel);
        }
    }

    /// Idle places on the chip for a block of a task of `shape` on `lanes`: idle cores of
    /// its type, for MIX idle clusters with its lanes.
    pub(crate) fn count_fitting(&self, shape: Shape, lanes: u8) -> usize {
        let per_cluster = |idle: u8| match shape {
            Shape::Aic | Shape::Mix => usize::from(fits(idle, shape, lanes)),
            Shape::Aiv => (idle & (LANE_BITS[1] | LANE_BITS[2])).count_ones() as usize,
            Shape::Dummy => 0,
        };
        self.clusters
            .iter()
            .map(|w| per_cluster(w.load(Ordering::Acquire)))
            .sum()
    }

    /// Bit `i` set for every scheduler `i` that owns an idle place for a block of a task of
    /// `shape` on `lanes`.
    pub(crate) fn owners_fitting(&self, shape: Shape, lanes: u8) -> u64 {
        self.clusters
            .iter()
            .enumerate()
            .filter(|(_, w)| fits(w.load(Ordering::Acquire), shape, lanes))
            .fold(0, |acc, (c, _)| acc | 1 << (c % self.schedulers))
    }
}

/// How many blocks of a task of `shape` a scheduler with no idle place of its own for them
/// may pre-load into its pending slots now, given `idle` places for them elsewhere on the
/// chip and `waiting` ready blocks of the shape in all (the task's unclaimed blocks plus at
/// least one per queued task), with `schedulers` scheduler threads deciding at once.
///
/// With no idle place anywhere: any number. Otherwise only the blocks the idle places
/// cannot take — `waiting` less one per idle place, less one per scheduler as a margin for
/// placements decided at the same moment — so no idle core goes without work while a
/// block waits behind a busy one. MIX tasks differ in their lanes, so queued ones are not
/// counted against an idle cluster: a MIX block is never pre-loaded while one fits.
pub(crate) fn preload_allowance(
    shape: Shape,
    idle: usize,
    waiting: usize,
    schedulers: usize,
) -> usize {
    if idle == 0 {
        usize::MAX
    } else if shape == Shape::Mix {
        0
    } else {
        waiting.saturating_sub(idle + schedulers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AIC: u8 = LANE_BITS[0];
    const AIV0: u8 = LANE_BITS[1];
    const AIV1: u8 = LANE_BITS[2];

    fn any_fits(m: &IdleMap, shape: Shape, lanes: u8) -> bool {
        m.count_fitting(shape, lanes) > 0
    }

    #[test]
    fn a_fresh_map_has_every_core_idle() {
        let m = IdleMap::new(3, 2);
        assert!(any_fits(&m, Shape::Aic, AIC));
        assert!(any_fits(&m, Shape::Aiv, AIV0));
        assert!(any_fits(&m, Shape::Mix, ALL_LANES));
        assert_eq!(m.owners_fitting(Shape::Mix, ALL_LANES), 0b11);
        assert!(!any_fits(&m, Shape::Dummy, 0));
    }

    #[test]
    fn a_shape_fits_only_where_its_cores_are_idle() {
        let m = IdleMap::new(2, 2);
        for c in 0..2 {
            for lane in 0..3 {
                m.set(c, lane, false);
            }
        }
        assert!(!any_fits(&m, Shape::Aic, AIC));
        assert!(!any_fits(&m, Shape::Aiv, AIV0));
        assert_eq!(m.owners_fitting(Shape::Aiv, AIV0), 0);

        // Cluster 1's AIV1 core goes idle: an AIV task (on either AIV lane) fits there, an
        // AIC task does not, a MIX task fits only if it uses no other lane.
        m.set(1, 2, true);
        assert!(any_fits(&m, Shape::Aiv, AIV0));
        assert_eq!(m.owners_fitting(Shape::Aiv, AIV0), 0b10);
        assert!(!any_fits(&m, Shape::Aic, AIC));
        assert!(any_fits(&m, Shape::Mix, AIV1));
        assert!(!any_fits(&m, Shape::Mix, AIV0 | AIV1));
        assert!(!any_fits(&m, Shape::Mix, AIC | AIV1));

        m.set(1, 1, true);
        assert!(any_fits(&m, Shape::Mix, AIV0 | AIV1));
        assert!(!any_fits(&m, Shape::Mix, ALL_LANES));
        m.set(1, 0, true);
        assert!(any_fits(&m, Shape::Mix, ALL_LANES));

        // Busy again.
        m.set(1, 0, false);
        assert!(!any_fits(&m, Shape::Aic, AIC));
        assert!(!any_fits(&m, Shape::Mix, ALL_LANES));
    }

    #[test]
    fn idle_places_are_counted_per_core_or_per_cluster() {
        let m = IdleMap::new(4, 2);
        assert_eq!(m.count_fitting(Shape::Aic, AIC), 4);
        assert_eq!(m.count_fitting(Shape::Aiv, AIV0), 8);
        assert_eq!(m.count_fitting(Shape::Mix, ALL_LANES), 4);
        m.set(0, 1, false);
        m.set(1, 0, false);
        assert_eq!(m.count_fitting(Shape::Aic, AIC), 3);
        assert_eq!(m.count_fitting(Shape::Aiv, AIV0), 7);
        assert_eq!(m.count_fitting(Shape::Mix, ALL_LANES), 2);
        assert_eq!(m.count_fitting(Shape::Mix, AIV0 | AIV1), 3);
        assert_eq!(m.count_fitting(Shape::Mix, AIC | AIV1), 3);
    }

    #[test]
    fn pre_loading_leaves_a_block_for_every_idle_place() {
        // Nothing idle anywhere: pre-load freely.
        assert_eq!(preload_allowance(Shape::Aiv, 0, 1, 3), usize::MAX);
        assert_eq!(preload_allowance(Shape::Mix, 0, 1, 3), usize::MAX);
        // Idle places and no more ready blocks than they (plus the margin) take: none.
        assert_eq!(preload_allowance(Shape::Aiv, 4, 1, 3), 0);
        assert_eq!(preload_allowance(Shape::Aic, 4, 7, 3), 0);
        // A backlog beyond them: only the surplus.
        assert_eq!(preload_allowance(Shape::Aic, 4, 8, 3), 1);
        assert_eq!(preload_allowance(Shape::Aiv, 2, 100, 3), 95);
        // MIX: never while a cluster fits.
        assert_eq!(preload_allowance(Shape::Mix, 1, 1000, 1), 0);
    }

    #[test]
    fn owners_follow_the_cluster_to_scheduler_rule() {
        // 5 clusters, 3 schedulers: clusters 0, 3 → 0; 1, 4 → 1; 2 → 2.
        let m = IdleMap::new(5, 3);
        for c in [0, 1, 2, 3] {
            m.set(c, 0, false);
        }
        assert_eq!(m.owners_fitting(Shape::Aic, AIC), 0b010);
        m.set(4, 0, false);
        m.set(3, 0, true);
        assert_eq!(m.owners_fitting(Shape::Aic, AIC), 0b001);
    }
}
