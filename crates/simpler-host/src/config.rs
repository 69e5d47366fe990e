//! Per-run options: [`CallConfig`] and its [`RuntimeEnv`] (`docs/python.md` §2.6,
//! `docs/chip-runtime.md` §2.6 "Runtime overrides").
//!
//! Ring sizes resolve with the precedence CallConfig entry > `PTO2_RING_*` environment
//! variable > worker default, per ring. Each value is either one number for all four rings
//! or four numbers (ring 0..3). Rules: a task window is a power of two ≥ 4; a ring heap is
//! ≥ 1024 bytes and all four together fit in the worker's heap; a dependency pool is ≥ 4.

use simpler_runtime::aicpu::{DEFAULT_DEP_POOL, RING_COUNT};

use crate::{HostError, WorkerConfig};

/// One number for every ring, or one per ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingValue {
    /// The same value for all four rings.
    All(u64),
    /// Ring 0, 1, 2 and 3.
    PerRing([u64; RING_COUNT]),
}

impl RingValue {
    fn per_ring(self) -> [u64; RING_COUNT] {
        match self {
            RingValue::All(v) => [v; RING_COUNT],
            RingValue::PerRing(v) => v,
        }
    }

    /// Parses `"N"` or `"a,b,c,d"` (decimal).
    ///
    /// # Errors
    /// A message saying what is wrong with `text`.
    pub fn parse(text: &str) -> Result<RingValue, String> {
        let nums: Result<Vec<u64>, _> = text.split(',').map(|t| t.trim().parse::<u64>()).collect();
        match nums
            .map_err(|e| format!("`{text}` is not a number or a list of 4 numbers ({e})"))?
            .as_slice()
        {
            [v] => Ok(RingValue::All(*v)),
            [a, b, c, d] => Ok(RingValue::PerRing([*a, *b, *c, *d])),
            other => Err(format!(
                "`{text}` has {} values; give 1 or {RING_COUNT}",
                other.len()
            )),
        }
    }
}

/// Ring sizing of a run. `None` fields fall back to the `PTO2_RING_*` variable, then to the
/// worker's defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeEnv {
    /// Task window per ring (`PTO2_RING_TASK_WINDOW`).
    pub ring_task_window: Option<RingValue>,
    /// Output-heap bytes per ring (`PTO2_RING_HEAP`).
    pub ring_heap: Option<RingValue>,
    /// Dependency-pool entries per ring (`PTO2_RING_DEP_POOL`).
    pub ring_dep_pool: Option<RingValue>,
}

/// Options of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallConfig {
    /// AICPU threads (1 orchestrator + schedulers): 0 = the worker's setting, else
    /// 2..=the chip's AICPU threads.
    pub aicpu_thread_num: u32,
    /// Ring sizing.
    pub runtime_env: RuntimeEnv,
}

/// What a run's descriptor gets from its [`CallConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunPlan {
    pub(crate) aicpu_threads: u32,
    pub(crate) windows: [u32; RING_COUNT],
    pub(crate) heaps: [u64; RING_COUNT],
    pub(crate) dep_pools: [u32; RING_COUNT],
}

fn env_value(var: &str) -> Result<Option<RingValue>, HostError> {
    match std::env::var(var) {
        Ok(text) => RingValue::parse(&text)
            .map(Some)
            .map_err(|e| HostError::InvalidConfig(format!("environment variable {var}: {e}"))),
        Err(_) => Ok(None),
    }
}

impl CallConfig {
    /// Checks every field against the rules and `worker`'s limits (without consulting the
    /// environment).
    ///
    /// # Errors
    /// [`HostError::InvalidConfig`] naming the field and the ring.
    pub fn validate(&self, worker: &WorkerConfig) -> Result<(), HostError> {
        self.plan_with(worker, None, None, None).map(|_| ())
    }

    /// Resolves this configuration (with the environment fallbacks) into a plan.
    pub(crate) fn plan(&self, worker: &WorkerConfig) -> Result<RunPlan, HostError> {
        self.plan_with(
            worker,
            env_value("PTO2_RING_TASK_WINDOW")?,
            env_value("PTO2_RING_HEAP")?,
            env_value("PTO2_RING_DEP_POOL")?,
        )
    }

    fn plan_with(
        &self,
        worker: &WorkerConfig,
        env_window: Option<RingValue>,
        env_heap: Option<RingValue>,
        env_pool: Option<RingValue>,
    ) -> Result<RunPlan, HostError> {
        let bad = |field: &str, ring: usize, why: String| {
            HostError::InvalidConfig(format!("runtime_env.{field}[{ring}]: {why}"))
        };
        let max_threads = worker.topology.aicpu_threads;
        let aicpu_threads = match (self.aicpu_thread_num, worker.aicpu_thread_num) {
            (0, 0) => max_threads,
            (0, n) => n,
            (n, _) if (2..=max_threads).contains(&n) => n,
            (n, _) => {
                return Err(HostError::InvalidConfig(format!(
                    "aicpu_thread_num must be 0 (auto) or in 2..={max_threads}, got {n}"
                )))
            }
        };
        let env = &self.runtime_env;
        let windows = env.ring_task_window.or(env_window).map_or(
            [u64::from(worker.task_window); RING_COUNT],
            RingValue::per_ring,
        );
        let default_heap = worker.heap_size / RING_COUNT as u64;
        let heaps = env
            .ring_heap
            .or(env_heap)
            .map_or([default_heap; RING_COUNT], RingValue::per_ring);
        let pools = env.ring_dep_pool.or(env_pool).map_or(
            [u64::from(DEFAULT_DEP_POOL); RING_COUNT],
            RingValue::per_ring,
        );
        for r in 0..RING_COUNT {
            let w = windows[r];
            if w < 4 || !w.is_power_of_two() || w > 1 << 24 {
                return Err(bad(
                    "ring_task_window",
                    r,
                    format!("must be a power of two in 4..=16777216, got {w}"),
                ));
            }
            if heaps[r] < 1024 {
                return Err(bad(
                    "ring_heap",
                    r,
                    format!("must be at least 1024 bytes, got {}", heaps[r]),
                ));
            }
            if pools[r] < 4 || pools[r] > u64::from(u32::MAX) {
                return Err(bad(
                    "ring_dep_pool",
                    r,
                    format!("must be in 4..=4294967295, got {}", pools[r]),
                ));
            }
        }
        let total: u64 = heaps.iter().fold(0u64, |a, &h| a.saturating_add(h));
        if total > worker.heap_size {
            return Err(HostError::InvalidConfig(format!(
                "runtime_env.ring_heap needs {total} bytes for the four rings; the worker's heap is {} bytes (WorkerConfig::heap_size)",
                worker.heap_size
            )));
        }
        Ok(RunPlan {
            aicpu_threads,
            windows: windows.map(|w| w as u32),
            heaps,
            dep_pools: pools.map(|p| p as u32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker() -> WorkerConfig {
        WorkerConfig {
            heap_size: 1 << 20,
            ..WorkerConfig::default()
        }
    }

    #[test]
    fn ring_values_parse_one_or_four_numbers() {
        assert_eq!(RingValue::parse("64"), Ok(RingValue::All(64)));
        assert_eq!(
            RingValue::parse("4, 8,16,32"),
            Ok(RingValue::PerRing([4, 8, 16, 32]))
        );
        assert!(RingValue::parse("1,2").unwrap_err().contains("2 values"));
        assert!(RingValue::parse("x").unwrap_err().contains("not a number"));
        assert!(RingValue::parse("").is_err());
    }

    #[test]
    fn each_rule_is_enforced_and_named() {
        let env = |w, h, p| CallConfig {
            aicpu_thread_num: 0,
            runtime_env: RuntimeEnv {
                ring_task_window: w,
                ring_heap: h,
                ring_dep_pool: p,
            },
        };
        let cases: Vec<(CallConfig, &str)> = vec![
            (
                env(Some(RingValue::All(48)), None, None),
                "ring_task_window[0]: must be a power of two",
            ),
            (
                env(Some(RingValue::PerRing([64, 64, 2, 64])), None, None),
                "ring_task_window[2]",
            ),
            (
                env(
                    None,
                    Some(RingValue::PerRing([4096, 512, 4096, 4096])),
                    None,
                ),
                "ring_heap[1]: must be at least 1024",
            ),
            (
                env(None, Some(RingValue::All(1 << 19)), None),
                "needs 2097152 bytes",
            ),
            (env(None, None, Some(RingValue::All(3))), "ring_dep_pool[0]"),
            (
                CallConfig {
                    aicpu_thread_num: 1,
                    ..CallConfig::default()
                },
                "aicpu_thread_num",
            ),
            (
                CallConfig {
                    aicpu_thread_num: 9,
                    ..CallConfig::default()
                },
                "aicpu_thread_num",
            ),
        ];
        for (cfg, want) in cases {
            let err = cfg.validate(&worker()).unwrap_err().to_string();
            assert!(err.contains(want), "{err} should contain {want}");
        }
    }

    #[test]
    fn config_beats_defaults_per_ring() {
        let cfg = CallConfig {
            aicpu_thread_num: 3,
            runtime_env: RuntimeEnv {
                ring_task_window: Some(RingValue::PerRing([4, 8, 16, 32])),
                ring_heap: Some(RingValue::All(2048)),
                ring_dep_pool: None,
            },
        };
        let plan = cfg
            .plan_with(
                &worker(),
                Some(RingValue::All(1024)),
                None,
                Some(RingValue::All(99)),
            )
            .unwrap();
        assert_eq!(
            plan.windows,
            [4, 8, 16, 32],
            "the call's value wins over the environment"
        );
        assert_eq!(plan.heaps, [2048; 4]);
        assert_eq!(
            plan.dep_pools, [99; 4],
            "the environment wins over the default"
        );
        assert_eq!(plan.aicpu_threads, 3);
        let plain = CallConfig::default()
            .plan_with(&worker(), None, None, None)
            .unwrap();
        assert_eq!(plain.heaps, [1 << 18; 4]);
        assert_eq!(plain.windows, [16384; 4]);
    }
}
