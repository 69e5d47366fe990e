//! The runtime beside a well-known CPU task runtime (`simpler bench --peer`,
//! `docs/sim-performance.md` §8): the two no-op shapes of the executor bench — independent
//! tasks and a dependency chain — on our sim (24 cores, 4 AICPU threads, the pool executor,
//! [`crate::noop_worker`] and [`crate::run_noop`] as `simpler bench --executor` runs them) and
//! on rayon in the same process, interleaved round by round after one warm-up of each, as
//! medians of the rounds, and ours as a fraction of rayon's.
//!
//! - rayon independent: `rayon::scope` spawning n no-op tasks, on a pool of
//!   `available_parallelism` threads; tasks/s = n ÷ the scope's time;
//! - rayon chain: n no-op tasks inside one scope, each spawned by its predecessor (task i
//!   spawns task i + 1); tasks/s = n ÷ the scope's time;
//! - ours: tasks/s = n ÷ the run's round trip (submit to result).
//!
//! The independent ratio has a target ([`INDEPENDENT_RATIO_TARGET`]), printed beside it and
//! never asserted; the chain has none.

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde::Serialize;
use simpler_device::sim::ExecutorKind;
use simpler_host::{CallConfig, HostError};

use crate::executor::Stats;
use crate::{noop_worker, run_noop, Graph};

/// Default tasks per run (as `simpler bench --executor`).
pub const DEFAULT_TASKS: u64 = 4096;
/// Default timed rounds.
pub const DEFAULT_RUNS: u32 = 5;
/// The target of ours ÷ rayon, independent tasks: at least this share.
pub const INDEPENDENT_RATIO_TARGET: f64 = 0.25;
/// Clusters of our chip (24 cores).
const CLUSTERS: u32 = 8;
/// AICPU threads of our chip.
const AICPU_THREADS: u32 = 4;

/// Why the peer bench failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerBenchError {
    /// Our worker or a run failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// rayon's pool could not be built.
    #[error("cannot build rayon's thread pool")]
    Pool(#[source] rayon::ThreadPoolBuildError),
    /// A parameter out of range (`name` is the [`PeerParams`] field).
    #[error("bench parameter `{name}` must be at least 1")]
    InvalidParam {
        /// The field.
        name: &'static str,
    },
}

/// What the bench runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PeerParams {
    /// Tasks per run, at least 1.
    pub tasks: u64,
    /// Timed rounds, at least 1 (each runs all four measurements once).
    pub runs: u32,
}

impl Default for PeerParams {
    /// 4,096 tasks, 5 rounds.
    fn default() -> Self {
        PeerParams {
            tasks: DEFAULT_TASKS,
            runs: DEFAULT_RUNS,
        }
    }
}

/// Our figures.
#[derive(Clone, Debug, Serialize)]
pub struct OursFigures {
    /// Median independent tasks per second.
    pub independent_tasks_per_s: f64,
    /// Median chained tasks per second.
    pub chain_tasks_per_s: f64,
    /// Independent tasks per second, median and slow tail.
    pub independent: Stats,
    /// Chained tasks per second, median and slow tail.
    pub chain: Stats,
    /// Tasks per run.
    pub tasks_per_run: u64,
    /// AICore cores of the chip.
    pub cores: u32,
    /// AICPU threads of the chip.
    pub aicpu_threads: u32,
    /// The sim executor ("pool").
    pub executor: &'static str,
    /// Worker threads of the process's pool.
    pub pool_threads: usize,
}

/// rayon's figures.
#[derive(Clone, Debug, Serialize)]
pub struct RayonFigures {
    /// Median independent tasks per second.
    pub independent_tasks_per_s: f64,
    /// Median chained tasks per second.
    pub chain_tasks_per_s: f64,
    /// Independent tasks per second, median and slow tail.
    pub independent: Stats,
    /// Chained tasks per second, median and slow tail.
    pub chain: Stats,
    /// Tasks per run.
    pub tasks_per_run: u64,
    /// Threads of rayon's pool.
    pub threads: usize,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct PeerReport {
    /// Ours ÷ rayon, independent tasks (medians).
    pub independent_ratio: f64,
    /// Ours ÷ rayon, the chain (medians).
    pub chain_ratio: f64,
    /// Our figures.
    pub ours: OursFigures,
    /// rayon's figures.
    pub rayon: RayonFigures,
}

/// `n` independent no-op tasks in one `rayon::scope` on `pool`: the scope's time.
pub fn rayon_independent(pool: &rayon::ThreadPool, n: u64) -> Duration {
    pool.install(|| {
        let start = Instant::now();
        rayon::scope(|s| {
            for _ in 0..n {
                s.spawn(|_| black_box(()));
            }
        });
        start.elapsed()
    })
}

/// One link of the chain: a no-op that spawns the next while `left` > 1.
fn link<'s>(s: &rayon::Scope<'s>, left: u64) {
    black_box(());
    if left > 1 {
        s.spawn(move |s| link(s, left - 1));
    }
}

/// `n` dependent no-op tasks in one `rayon::scope` on `pool`, each spawned by its
/// predecessor: the scope's time.
pub fn rayon_chain(pool: &rayon::ThreadPool, n: u64) -> Duration {
    pool.install(|| {
        let start = Instant::now();
        rayon::scope(|s| {
            if n > 0 {
                s.spawn(move |s| link(s, n));
            }
        });
        start.elapsed()
    })
}

/// Runs the four measurements round by round and reports them.
///
/// # Errors
/// [`PeerBenchError::InvalidParam`] for a zero field; our worker's or a run's
/// [`HostError`]; rayon's pool failing to start.
pub fn peer_bench(params: PeerParams) -> Result<PeerReport, PeerBenchError> {
    if params.tasks == 0 {
        return Err(PeerBenchError::InvalidParam { name: "tasks" });
    }
    if params.runs == 0 {
        return Err(PeerBenchError::InvalidParam { name: "runs" });
    }
    let n = params.tasks;
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("rayon peer {i}"))
        .build()
        .map_err(PeerBenchError::Pool)?;
    let (worker, id) = noop_worker(ExecutorKind::Pool, CLUSTERS, AICPU_THREADS)?;
    let config = CallConfig::default();
    let ours = |graph| -> Result<f64, HostError> {
        Ok(run_noop(&worker, id, graph, n, &config)?.0.as_secs_f64())
    };
    let mut secs: [Vec<f64>; 4] = Default::default();
    for round in 0..=params.runs {
        let sample = [
            ours(Graph::Independent)?,
            rayon_independent(&pool, n).as_secs_f64(),
            ours(Graph::Chain)?,
            rayon_chain(&pool, n).as_secs_f64(),
        ];
        if round > 0 {
            for (s, v) in secs.iter_mut().zip(sample) {
                s.push(v);
            }
        }
    }
    worker.close()?;
    let rate = |s: &[f64]| Stats::of_rate(n as f64, s);
    let (oi, ri, oc, rc) = (
        rate(&secs[0]),
        rate(&secs[1]),
        rate(&secs[2]),
        rate(&secs[3]),
    );
    Ok(PeerReport {
        independent_ratio: oi.median / ri.median,
        chain_ratio: oc.median / rc.median,
        ours: OursFigures {
            independent_tasks_per_s: oi.median,
            chain_tasks_per_s: oc.median,
            independent: oi,
            chain: oc,
            tasks_per_run: n,
            cores: CLUSTERS * 3,
            aicpu_threads: AICPU_THREADS,
            executor: ExecutorKind::Pool.name(),
            pool_threads: simpler_device::sim::pool_threads(),
        },
        rayon: RayonFigures {
            independent_tasks_per_s: ri.median,
            chain_tasks_per_s: rc.median,
            independent: ri,
            chain: rc,
            tasks_per_run: n,
            threads: pool.current_num_threads(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn pool() -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap()
    }

    #[test]
    fn the_rayon_chain_runs_every_link_one_after_another() {
        static DONE: AtomicU64 = AtomicU64::new(0);
        fn counted<'s>(s: &rayon::Scope<'s>, left: u64, seen: u64) {
            // Each link sees every earlier link done: a chain, not a fan.
            assert_eq!(DONE.load(Ordering::SeqCst), seen);
            DONE.fetch_add(1, Ordering::SeqCst);
            if left > 1 {
                s.spawn(move |s| counted(s, left - 1, seen + 1));
            }
        }
        pool().install(|| rayon::scope(|s| s.spawn(|s| counted(s, 100, 0))));
        assert_eq!(DONE.load(Ordering::SeqCst), 100);
        // The timed chain ends only when its last link has run.
        assert!(rayon_chain(&pool(), 1000) > Duration::ZERO);
        assert!(rayon_independent(&pool(), 1000) > Duration::ZERO);
    }

    #[test]
    fn zero_tasks_or_runs_are_refused_by_name() {
        for (params, name) in [
            (PeerParams { tasks: 0, runs: 1 }, "tasks"),
            (PeerParams { tasks: 1, runs: 0 }, "runs"),
        ] {
            match peer_bench(params) {
                Err(PeerBenchError::InvalidParam { name: n }) => assert_eq!(n, name),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_tiny_bench_reports_both_sides_and_their_ratios() {
        let r = peer_bench(PeerParams { tasks: 16, runs: 1 }).unwrap();
        for v in [
            r.independent_ratio,
            r.chain_ratio,
            r.ours.independent_tasks_per_s,
            r.ours.chain_tasks_per_s,
            r.rayon.independent_tasks_per_s,
            r.rayon.chain_tasks_per_s,
        ] {
            assert!(v.is_finite() && v > 0.0, "{r:?}");
        }
        assert_eq!(
            r.independent_ratio,
            r.ours.independent_tasks_per_s / r.rayon.independent_tasks_per_s
        );
        assert_eq!(r.ours.independent.samples, 1);
        assert_eq!((r.ours.cores, r.ours.executor), (24, "pool"));
        let json = serde_json::to_value(&r).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["chain_ratio", "independent_ratio", "ours", "rayon"]);
    }
}
