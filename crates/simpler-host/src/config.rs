//! Per-run options — [`CallConfig`] and its [`RuntimeEnv`] — and the rules for them (the
//! ring sizing is described in `docs/chip-runtime.md`, the Python `CallConfig` in
//! `docs/python.md`). Also the conversions every binding needs for worker options: seconds to
//! a [`Duration`] ([`seconds`]).
//!
//! Ring sizes resolve with the precedence CallConfig entry > `PTO2_RING_*` environment
//! variable > worker default, per ring. Each value is either one number for all four rings
//! or four numbers (ring 0..3). Rules: a task window is a power of two in 4..=2^24; a ring
//! heap is ≥ 1024 bytes and all four together fit in the worker's heap; a dependency pool is
//! in 4..=2^32-1. `aicpu_thread_num` is 0 (the worker's setting) or 2..=the chip's AICPU
//! threads. [`CallConfig::check_fields`] applies the rules that need no worker;
//! [`CallConfig::validate`] adds the worker's limits.

use std::time::Duration;

use simpler_runtime::aicpu::{DEFAULT_DEP_POOL, RING_COUNT};

use simpler_trace::TraceLevel;

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
    /// `host_build_graph`: the most ready tasks one ready queue (one per shape) holds,
    /// 1..=2^32-1 (`PTO2_READY_QUEUE`; default 8192). A graph with more ready at once fails
    /// with READY_QUEUE_OVERFLOW.
    pub ready_queue: Option<u64>,
}

/// Options of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallConfig {
    /// AICPU threads (1 orchestrator + schedulers): 0 = the worker's setting, else
    /// 2..=the chip's AICPU threads.
    pub aicpu_thread_num: u32,
    /// Ring sizing.
    pub runtime_env: RuntimeEnv,
    /// How much the run records (`docs/tracing.md`): [`TraceLevel::Off`] (the default)
    /// records nothing and allocates nothing; any other level fills
    /// [`RunReport::trace`](crate::RunReport::trace).
    pub trace_level: TraceLevel,
    /// Records per trace buffer (one buffer per AICore and per AICPU thread, 40 bytes a
    /// record); 0 = [`DEFAULT_TRACE_RECORDS`](crate::DEFAULT_TRACE_RECORDS). Events past a
    /// full buffer are dropped and counted. Ignored when `trace_level` is Off.
    pub trace_buffer_records: u32,
    /// The runtime variant of this run; `None` = the callable's, else the worker's
    /// (`docs/chip-runtime.md` §17).
    pub runtime: Option<crate::Runtime>,
}

/// What a run's descriptor gets from its [`CallConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunPlan {
    pub(crate) aicpu_threads: u32,
    pub(crate) windows: [u32; RING_COUNT],
    pub(crate) heaps: [u64; RING_COUNT],
    pub(crate) dep_pools: [u32; RING_COUNT],
    pub(crate) trace_level: TraceLevel,
    /// Records per trace buffer (resolved: never 0).
    pub(crate) trace_records: u32,
    /// The runtime variant (resolved with the callable's by [`RunPlan::for_callable`]).
    pub(crate) runtime: crate::Runtime,
    /// Whether the run's `ring_heap` was given (a `host_build_graph` run's one ring takes
    /// the whole heap otherwise).
    pub(crate) heap_given: bool,
    /// The run's `CallConfig::runtime`, kept for [`RunPlan::for_callable`].
    asked_runtime: Option<crate::Runtime>,
    /// Most ready tasks per ready queue (`PTO2_READY_QUEUE`; 0 = the runtime default).
    pub(crate) ready_queue: u32,
}

impl RunPlan {
    /// The plan with its runtime variant resolved: the run's, else the callable's
    /// (`callable`), else the worker's (already in the plan).
    pub(crate) fn for_callable(mut self, callable: Option<crate::Runtime>) -> RunPlan {
        if let Some(r) = self.asked_runtime.or(callable) {
            self.runtime = r;
        }
        self
    }
}

/// The largest ring task window.
const MAX_TASK_WINDOW: u64 = 1 << 24;

/// Checks one ring's value of `field` against its rule (the heap's fit in the worker's heap
/// is checked over all four rings, by [`CallConfig::validate`]).
fn check_ring(field: &str, ring: usize, v: u64) -> Result<(), HostError> {
    let why = match field {
        "ring_task_window" if v < 4 || !v.is_power_of_two() || v > MAX_TASK_WINDOW => {
            format!("must be a power of two in 4..={MAX_TASK_WINDOW}, got {v}")
        }
        "ring_heap" if v < 1024 => format!("must be at least 1024 bytes, got {v}"),
        "ring_dep_pool" if !(4..=u64::from(u32::MAX)).contains(&v) => {
            format!("must be in 4..={}, got {v}", u32::MAX)
        }
        _ => return Ok(()),
    };
    Err(HostError::InvalidConfig(format!(
        "runtime_env.{field}[{ring}]: {why}"
    )))
}

/// A ready-queue capacity (`field` names where it came from): 1..=2^32-1.
fn check_ready_queue(field: &str, n: u64) -> Result<u32, HostError> {
    u32::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| {
        HostError::InvalidConfig(format!("{field}: must be in 1..={}, got {n}", u32::MAX))
    })
}

/// `value` seconds as a [`Duration`]; `field` names the option in the error.
///
/// # Errors
/// [`HostError::InvalidConfig`] naming `field` when `value` is negative, NaN, infinite or
/// too large for a `Duration`.
pub fn seconds(field: &str, value: f64) -> Result<Duration, HostError> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        HostError::InvalidConfig(format!(
            "{field} must be a finite number of seconds >= 0, got {value}"
        ))
    })
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
    /// Checks the fields against the rules that need no worker: `aicpu_thread_num` is 0 or at
    /// least 2, and each ring value given obeys its rule (see the module docs).
    ///
    /// # Errors
    /// [`HostError::InvalidConfig`] naming the field and the ring.
    pub fn check_fields(&self) -> Result<(), HostError> {
        if self.aicpu_thread_num == 1 {
            return Err(HostError::InvalidConfig(
                "aicpu_thread_num must be 0 (the worker's setting) or at least 2 (1 orchestrator \
                 + schedulers), got 1"
                    .into(),
            ));
        }
        let env = &self.runtime_env;
        for (field, value) in [
            ("ring_task_window", env.ring_task_window),
            ("ring_heap", env.ring_heap),
            ("ring_dep_pool", env.ring_dep_pool),
        ] {
            if let Some(v) = value {
                for (ring, &n) in v.per_ring().iter().enumerate() {
                    check_ring(field, ring, n)?;
                }
            }
        }
        Ok(())
    }

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
        let ready_queue = match self.runtime_env.ready_queue {
            Some(n) => check_ready_queue("runtime_env.ready_queue", n)?,
            None => match std::env::var("PTO2_READY_QUEUE") {
                Ok(text) => {
                    let field = "environment variable PTO2_READY_QUEUE";
                    let n = text.trim().parse::<u64>().map_err(|e| {
                        HostError::InvalidConfig(format!("{field}: `{text}` is not a number ({e})"))
                    })?;
                    check_ready_queue(field, n)?
                }
                Err(_) => 0,
            },
        };
        let max_threads = worker.topology.aicpu_threads;
        let aicpu_threads = match self.aicpu_thread_num {
            0 => worker.effective_aicpu_threads(),
            n if (2..=max_threads).contains(&n) => n,
            n => {
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
        let heap_given = env.ring_heap.or(env_heap).is_some();
        let heaps = env
            .ring_heap
            .or(env_heap)
            .map_or([default_heap; RING_COUNT], RingValue::per_ring);
        let pools = env.ring_dep_pool.or(env_pool).map_or(
            [u64::from(DEFAULT_DEP_POOL); RING_COUNT],
            RingValue::per_ring,
        );
        for r in 0..RING_COUNT {
            check_ring("ring_task_window", r, windows[r])?;
            check_ring("ring_heap", r, heaps[r])?;
            check_ring("ring_dep_pool", r, pools[r])?;
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
            trace_level: self.trace_level,
            trace_records: match self.trace_buffer_records {
                0 => crate::DEFAULT_TRACE_RECORDS,
                n => n,
            },
            runtime: worker.runtime,
            heap_given,
            asked_runtime: self.runtime,
            ready_queue,
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
                ready_queue: None,
            },
            ..CallConfig::default()
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
                ready_queue: None,
            },
            ..CallConfig::default()
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

    #[test]
    fn field_rules_need_no_worker_and_leave_worker_limits_to_validate() {
        let ok = CallConfig {
            aicpu_thread_num: 9,
            runtime_env: RuntimeEnv {
                ring_heap: Some(RingValue::All(1 << 40)),
                ..RuntimeEnv::default()
            },
            ..CallConfig::default()
        };
        ok.check_fields().unwrap();
        assert!(
            ok.validate(&worker()).is_err(),
            "9 threads and 4 TiB exceed the worker"
        );
        let cases: Vec<(CallConfig, &str)> = vec![
            (
                CallConfig {
                    aicpu_thread_num: 1,
                    ..CallConfig::default()
                },
                "aicpu_thread_num must be 0 (the worker's setting) or at least 2",
            ),
            (
                CallConfig {
                    runtime_env: RuntimeEnv {
                        ring_task_window: Some(RingValue::PerRing([64, 64, 48, 64])),
                        ..RuntimeEnv::default()
                    },
                    ..CallConfig::default()
                },
                "runtime_env.ring_task_window[2]: must be a power of two",
            ),
            (
                CallConfig {
                    runtime_env: RuntimeEnv {
                        ring_heap: Some(RingValue::All(100)),
                        ..RuntimeEnv::default()
                    },
                    ..CallConfig::default()
                },
                "runtime_env.ring_heap[0]: must be at least 1024 bytes, got 100",
            ),
            (
                CallConfig {
                    runtime_env: RuntimeEnv {
                        ring_dep_pool: Some(RingValue::All(1 << 32)),
                        ..RuntimeEnv::default()
                    },
                    ..CallConfig::default()
                },
                "runtime_env.ring_dep_pool[0]",
            ),
        ];
        for (cfg, want) in cases {
            let err = cfg.check_fields().unwrap_err().to_string();
            assert!(err.contains(want), "{err} should contain {want}");
        }
    }

    #[test]
    fn seconds_convert_or_name_the_field() {
        assert_eq!(seconds("t", 1.5).unwrap(), Duration::from_millis(1500));
        assert_eq!(seconds("t", 0.0).unwrap(), Duration::ZERO);
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1e30] {
            let err = seconds("run_timeout_s", bad).unwrap_err().to_string();
            assert!(
                err.contains("run_timeout_s must be a finite number of seconds"),
                "{err}"
            );
        }
    }

    #[test]
    fn effective_threads_default_to_the_whole_chip() {
        let mut w = worker();
        assert_eq!(w.effective_aicpu_threads(), w.topology.aicpu_threads);
        w.aicpu_thread_num = 3;
        assert_eq!(w.effective_aicpu_threads(), 3);
    }
}
