//! The chip-wide idle map (`docs/chip-runtime.md`, schedulers): one byte per cluster, bit
//! `l` set while the core of lane `l` (0 AIC, 1 AIV0, 2 AIV1) has no dispatch running, as
//! the scheduler that owns it sees it. Each scheduler writes the bits of its own clusters
//! only and reads everyone's, to tell whether a ready task may wait in a busy core's
//! pending slot: only when no core (for MIX, no cluster) that could run it is idle anywhere
//! on the chip. The map dispatches nothing and touches no core.

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

    /// True if a block of a task of `shape` on `lanes` could start on an idle core (an idle
    /// cluster for MIX) anywhere on the chip.
    pub(crate) fn any_fits(&self, shape: Shape, lanes: u8) -> bool {
        self.clusters
            .iter()
            .any(|w| fits(w.load(Ordering::Acquire), shape, lanes))
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

#[cfg(test)]
mod tests {
    use super::*;

    const AIC: u8 = LANE_BITS[0];
    const AIV0: u8 = LANE_BITS[1];
    const AIV1: u8 = LANE_BITS[2];

    #[test]
    fn a_fresh_map_has_every_core_idle() {
        let m = IdleMap::new(3, 2);
        assert!(m.any_fits(Shape::Aic, AIC));
        assert!(m.any_fits(Shape::Aiv, AIV0));
        assert!(m.any_fits(Shape::Mix, ALL_LANES));
        assert_eq!(m.owners_fitting(Shape::Mix, ALL_LANES), 0b11);
        assert!(!m.any_fits(Shape::Dummy, 0));
    }

    #[test]
    fn a_shape_fits_only_where_its_cores_are_idle() {
        let m = IdleMap::new(2, 2);
        for c in 0..2 {
            for lane in 0..3 {
                m.set(c, lane, false);
            }
        }
        assert!(!m.any_fits(Shape::Aic, AIC));
        assert!(!m.any_fits(Shape::Aiv, AIV0));
        assert_eq!(m.owners_fitting(Shape::Aiv, AIV0), 0);

        // Cluster 1's AIV1 core goes idle: an AIV task (on either AIV lane) fits there, an
        // AIC task does not, a MIX task fits only if it uses no other lane.
        m.set(1, 2, true);
        assert!(m.any_fits(Shape::Aiv, AIV0));
        assert_eq!(m.owners_fitting(Shape::Aiv, AIV0), 0b10);
        assert!(!m.any_fits(Shape::Aic, AIC));
        assert!(m.any_fits(Shape::Mix, AIV1));
        assert!(!m.any_fits(Shape::Mix, AIV0 | AIV1));
        assert!(!m.any_fits(Shape::Mix, AIC | AIV1));

        m.set(1, 1, true);
        assert!(m.any_fits(Shape::Mix, AIV0 | AIV1));
        assert!(!m.any_fits(Shape::Mix, ALL_LANES));
        m.set(1, 0, true);
        assert!(m.any_fits(Shape::Mix, ALL_LANES));

        // Busy again.
        m.set(1, 0, false);
        assert!(!m.any_fits(Shape::Aic, AIC));
        assert!(!m.any_fits(Shape::Mix, ALL_LANES));
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
