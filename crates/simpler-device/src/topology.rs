//! The chip's shape: clusters of 1 AIC + 2 AIV cores, and AICPU threads.

use simpler_abi::CoreType;

/// Number of clusters and AICPU threads of a (simulated) chip.
///
/// Core ids: `0..clusters` are the AIC cores; `clusters..3*clusters` the AIV cores.
/// Cluster `c` is cores `{c, clusters + 2c, clusters + 2c + 1}` (`docs/chip-runtime.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Clusters (1 AIC + 2 AIV each), 1..=24.
    pub clusters: u32,
    /// AICPU threads available to a kernel (1 orchestrator + schedulers), 2..=8.
    pub aicpu_threads: u32,
}

impl Default for Topology {
    /// The sim default: 8 clusters (8 AIC + 16 AIV) and 4 AICPU threads.
    fn default() -> Self {
        Topology {
            clusters: 8,
            aicpu_threads: 4,
        }
    }
}

/// Most clusters a topology may have (72 cores, `RUNTIME_MAX_WORKER`).
pub const MAX_CLUSTERS: u32 = 24;
/// Most AICPU threads a topology may have.
pub const MAX_AICPU_THREADS: u32 = 8;

impl Topology {
    /// Checks the ranges; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.clusters == 0 || self.clusters > MAX_CLUSTERS {
            return Err(format!(
                "clusters must be in 1..={MAX_CLUSTERS}, got {}",
                self.clusters
            ));
        }
        if self.aicpu_threads < 2 || self.aicpu_threads > MAX_AICPU_THREADS {
            return Err(format!(
                "aicpu_threads must be in 2..={MAX_AICPU_THREADS} (1 orchestrator + schedulers), got {}",
                self.aicpu_threads
            ));
        }
        Ok(())
    }
    /// Total AICore cores.
    pub fn core_count(&self) -> u32 {
        self.clusters * 3
    }
    /// Number of AIV cores.
    pub fn aiv_count(&self) -> u32 {
        self.clusters * 2
    }
    /// Type of core `id`.
    pub fn core_type(&self, id: u32) -> CoreType {
        if id < self.clusters {
            CoreType::Aic
        } else {
            CoreType::Aiv
        }
    }
    /// Cluster of core `id`.
    pub fn cluster_of(&self, id: u32) -> u32 {
        if id < self.clusters {
            id
        } else {
            (id - self.clusters) / 2
        }
    }
    /// Lane of core `id` among the cores of its type in its cluster.
    pub fn sub_block_of(&self, id: u32) -> u32 {
        if id < self.clusters {
            0
        } else {
            (id - self.clusters) % 2
        }
    }
    /// The three cores of cluster `c`: AIC, AIV0, AIV1.
    pub fn cluster_cores(&self, c: u32) -> [u32; 3] {
        [c, self.clusters + 2 * c, self.clusters + 2 * c + 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_numbering_matches_the_spec() {
        let t = Topology::default();
        assert_eq!(t.core_count(), 24);
        assert_eq!(t.cluster_cores(3), [3, 14, 15]);
        for c in 0..t.clusters {
            for (lane, id) in t.cluster_cores(c).into_iter().enumerate() {
                assert_eq!(t.cluster_of(id), c);
                assert_eq!(t.sub_block_of(id), lane.saturating_sub(1) as u32);
            }
        }
        assert_eq!(t.core_type(7), CoreType::Aic);
        assert_eq!(t.core_type(8), CoreType::Aiv);
    }

    #[test]
    fn validate_names_the_bad_field() {
        let bad = Topology {
            clusters: 0,
            aicpu_threads: 4,
        };
        assert!(bad.validate().unwrap_err().contains("clusters"));
        let bad = Topology {
            clusters: 8,
            aicpu_threads: 1,
        };
        assert!(bad.validate().unwrap_err().contains("aicpu_threads"));
        assert!(Topology {
            clusters: 24,
            aicpu_threads: 6
        }
        .validate()
        .is_ok());
    }
}
