//! The sim executors measured one at a time (`simpler bench --executor`): for one
//! [`ExecutorKind`], every figure of [`ExecutorFigures`], each as a median and a p99
//! ([`Stats`]), and once per process the park/unpark floor the round trips are compared
//! with. [`TARGETS`] holds the figures' targets; they are printed beside the figures and
//! never asserted. `docs/sim-performance.md` §4 says what each figure measures.
//!
//! This module owns the workloads and their timing; it measures through the public
//! `ChipWorker` API and `/proc`, and changes nothing in the runtime or the device.
//!
//! - [`lane`]: round trips, short runs at launch depth 1 and 2, the record read;
//! - [`chips`]: many chips in one process, an idle worker;
//! - [`floor`]: the park/unpark round trip of two bare threads;
//! - [`process`]: OS threads, context switches and CPU time of the process;
//! - [`stats`]: median and p99.

pub mod chips;
pub mod floor;
pub mod lane;
pub mod process;
pub(crate) mod stats;
mod targets;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use simpler_device::sim::ExecutorKind;
use simpler_host::HostError;

pub use self::chips::{ChipsFigures, IdleFigures};
pub use self::stats::Stats;
pub use self::targets::{Bound, Target, Targets, TARGETS};
use crate::{measure_samples, Graph};

/// Why a measurement of the executor bench failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorBenchError {
    /// A worker or a run failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A reading of the process's cost failed (`what` names the file or the call).
    #[error("cannot read {what}")]
    Os {
        /// The `/proc` file or the system call.
        what: String,
        /// The OS's error.
        #[source]
        source: std::io::Error,
    },
    /// A host thread of the bench could not be started.
    #[error("cannot start a host thread of the bench")]
    Spawn(#[source] std::io::Error),
    /// A parameter out of range (`name` is the [`ExecutorParams`] field).
    #[error("bench parameter `{name}` {reason}")]
    InvalidParam {
        /// The field.
        name: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// How much to measure. Each figure's sample count follows from `runs`:
///
/// | figure | samples |
/// | --- | --- |
/// | empty-run and 1-task round trips | [`ROUND_TRIPS_PER_RUN`] × runs |
/// | short runs, per launch depth | runs batches of [`SHORT_BATCH`] runs |
/// | throughput, per graph and chip | runs runs of `tasks` tasks |
/// | many chips at once | [`CHIP_ROUND_TRIPS_PER_RUN`] × runs round trips per chip |
/// | record read, per successor size | [`RECORD_READS_PER_RUN`] × runs |
/// | park/unpark floor | [`FLOOR_SAMPLES_PER_RUN`] × runs |
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ExecutorParams {
    /// The base sample count, at least 1.
    pub runs: u32,
    /// Tasks per run of the throughput figures, at least 1.
    pub tasks: u64,
    /// The idle worker's window (serialized as seconds); zero leaves the idle figure out.
    #[serde(rename = "idle_secs", serialize_with = "as_secs")]
    pub idle: Duration,
    /// Chips of the many-chips figure, at least 1.
    pub chips: u32,
}

fn as_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for ExecutorParams {
    /// 5 runs, 4,096 tasks, a 10 s idle window, 8 chips.
    fn default() -> Self {
        ExecutorParams {
            runs: 5,
            tasks: 4096,
            idle: Duration::from_secs(10),
            chips: 8,
        }
    }
}

impl ExecutorParams {
    fn check(&self) -> Result<(), ExecutorBenchError> {
        let bad = |name, reason| Err(ExecutorBenchError::InvalidParam { name, reason });
        match () {
            _ if self.runs == 0 => bad("runs", "must be at least 1"),
            _ if self.tasks == 0 => bad("tasks", "must be at least 1"),
            _ if self.chips == 0 => bad("chips", "must be at least 1"),
            _ => Ok(()),
        }
    }
}

/// Empty-run and 1-task round trips per run of [`ExecutorParams::runs`].
pub const ROUND_TRIPS_PER_RUN: usize = 40;
/// Concurrent round trips of each of the many chips per run.
pub const CHIP_ROUND_TRIPS_PER_RUN: usize = 20;
/// Record reads per successor size per run.
pub const RECORD_READS_PER_RUN: usize = 20;
/// Park/unpark round trips of the floor per run.
pub const FLOOR_SAMPLES_PER_RUN: usize = 100;
/// Runs per batch of the short-runs figure.
pub const SHORT_BATCH: usize = 16;
/// Tasks per short run.
pub const SHORT_RUN_TASKS: u64 = 4;
/// Successor sizes of the record-read figure, tasks.
pub const RECORD_READ_SUCCESSORS: [u64; 4] = [1, 64, 512, 2048];

/// Short runs kept two in flight, at launch depth 1 and 2.
#[derive(Clone, Debug, Serialize)]
pub struct ShortRunsFigures {
    /// Tasks per run.
    pub tasks_per_run: u64,
    /// Runs per timed batch.
    pub runs_per_batch: usize,
    /// Runs per second at launch depth 1.
    pub depth1_runs_per_s: Stats,
    /// Runs per second at launch depth 2.
    pub depth2_runs_per_s: Stats,
    /// Median depth-2 rate ÷ median depth-1 rate.
    pub depth2_over_depth1: f64,
}

/// No-op task throughput on 24 cores (4 AICPU threads) and 72 cores (6 AICPU threads).
#[derive(Clone, Debug, Serialize)]
pub struct ThroughputFigures {
    /// Tasks per run.
    pub tasks_per_run: u64,
    /// Independent tasks on 24 cores, tasks/s.
    pub independent_24_tasks_per_s: Stats,
    /// Independent tasks on 72 cores, tasks/s.
    pub independent_72_tasks_per_s: Stats,
    /// Median 72-core ÷ median 24-core rate, independent tasks.
    pub independent_72_over_24: f64,
    /// A dependency chain on 24 cores, tasks/s.
    pub chain_24_tasks_per_s: Stats,
    /// A dependency chain on 72 cores, tasks/s.
    pub chain_72_tasks_per_s: Stats,
    /// Median 72-core ÷ median 24-core rate, chain.
    pub chain_72_over_24: f64,
    /// The orchestrator's submit time per task (independent tasks, 24 cores), µs.
    pub submit_us_per_task: Stats,
}

/// One successor size of the record-read figure.
#[derive(Clone, Debug, Serialize)]
pub struct RecordReadPoint {
    /// Tasks of the successor queued behind the 1-task predecessor.
    pub successor_tasks: u64,
    /// The predecessor's wait, µs.
    pub us: Stats,
}

/// The predecessor's outcome read with successors of [`RECORD_READ_SUCCESSORS`] tasks.
#[derive(Clone, Debug, Serialize)]
pub struct RecordReadFigures {
    /// One point per successor size, smallest first.
    pub points: Vec<RecordReadPoint>,
    /// Median with the largest successor ÷ median with the smallest.
    pub largest_over_smallest: f64,
}

/// Every figure of one executor.
#[derive(Clone, Debug, Serialize)]
pub struct ExecutorFigures {
    /// The executor ([`ExecutorKind::name`]: `pool` or `threads`).
    pub executor: &'static str,
    /// Round trip of an empty run (the orchestration submits nothing), µs.
    pub empty_run_us: Stats,
    /// Round trip of a run of one no-op AIV task, µs.
    pub one_task_run_us: Stats,
    /// Short runs kept two in flight.
    pub short_runs: ShortRunsFigures,
    /// Task throughput and submit cost.
    pub throughput: ThroughputFigures,
    /// Many chips in one process.
    pub chips: ChipsFigures,
    /// Median concurrent round trip of the many chips ÷ median one-chip empty run.
    pub chips_over_one_chip: f64,
    /// The idle worker (absent when the idle window is zero).
    pub idle: Option<IdleFigures>,
    /// The record read with a successor in flight.
    pub record_read: RecordReadFigures,
    /// OS threads the process's pool had started once this executor was measured.
    pub pool_threads_started: usize,
}

/// Measures every figure of `executor` with `params`: lane round trips and short runs,
/// throughput, the record read, many chips, then the idle worker. Takes about
/// `params.idle` plus some seconds per run of `params.runs`.
///
/// # Errors
/// [`ExecutorBenchError::InvalidParam`] naming a bad field; else the first error of a
/// measurement.
pub fn measure_executor(
    executor: ExecutorKind,
    params: &ExecutorParams,
) -> Result<ExecutorFigures, ExecutorBenchError> {
    params.check()?;
    let runs = params.runs as usize;

    let (worker, id) = lane::noops_worker(executor, 2)?;
    let empty_run_us = Stats::of_times(&lane::round_trip_us(
        &worker,
        id,
        0,
        ROUND_TRIPS_PER_RUN * runs,
    )?);
    let one_task_run_us = Stats::of_times(&lane::round_trip_us(
        &worker,
        id,
        1,
        ROUND_TRIPS_PER_RUN * runs,
    )?);
    let record_read = record_read(&worker, id, RECORD_READS_PER_RUN * runs)?;
    // Closed and dropped: a ThreadPerCore device's threads end with the device.
    worker.close()?;
    drop(worker);

    let short_runs = short_runs(executor, runs)?;
    let throughput = throughput(executor, params.tasks, params.runs)?;
    let chips = chips::many_chips(
        executor,
        params.chips,
        CHIP_ROUND_TRIPS_PER_RUN as u32 * params.runs,
    )?;
    let chips_over_one_chip = chips.concurrent_empty_run_us.median / empty_run_us.median;
    let idle = if params.idle.is_zero() {
        None
    } else {
        Some(chips::idle_worker(executor, params.idle)?)
    };
    Ok(ExecutorFigures {
        executor: executor.name(),
        empty_run_us,
        one_task_run_us,
        short_runs,
        throughput,
        chips,
        chips_over_one_chip,
        idle,
        record_read,
        pool_threads_started: simpler_device::sim::pool_threads_started(),
    })
}

fn record_read(
    worker: &simpler_host::ChipWorker,
    id: simpler_host::CallableId,
    samples: usize,
) -> Result<RecordReadFigures, HostError> {
    let points = RECORD_READ_SUCCESSORS
        .iter()
        .map(|&n| {
            Ok(RecordReadPoint {
                successor_tasks: n,
                us: lane::record_read_us(worker, id, n, samples)?,
            })
        })
        .collect::<Result<Vec<_>, HostError>>()?;
    let (first, last) = (&points[0], &points[points.len() - 1]);
    let largest_over_smallest = last.us.median / first.us.median;
    Ok(RecordReadFigures {
        points,
        largest_over_smallest,
    })
}

fn short_runs(executor: ExecutorKind, runs: usize) -> Result<ShortRunsFigures, HostError> {
    let rate = |depth| -> Result<Stats, HostError> {
        let (worker, id) = lane::noops_worker(executor, depth)?;
        let s = lane::short_runs_per_s(&worker, id, SHORT_RUN_TASKS, SHORT_BATCH, runs)?;
        worker.close()?;
        Ok(s)
    };
    let (depth1, depth2) = (rate(1)?, rate(2)?);
    Ok(ShortRunsFigures {
        tasks_per_run: SHORT_RUN_TASKS,
        runs_per_batch: SHORT_BATCH,
        depth1_runs_per_s: depth1,
        depth2_runs_per_s: depth2,
        depth2_over_depth1: depth2.median / depth1.median,
    })
}

fn throughput(
    executor: ExecutorKind,
    tasks: u64,
    runs: u32,
) -> Result<ThroughputFigures, HostError> {
    let run = |graph, clusters, aicpu_threads| {
        measure_samples(executor, graph, tasks, runs, clusters, aicpu_threads)
    };
    let rate = |s: &crate::Samples| {
        let secs: Vec<f64> = s.run_us.iter().map(|us| us / 1e6).collect();
        Stats::of_rate(tasks as f64, &secs)
    };
    let independent_24 = run(Graph::Independent, 8, 4)?;
    let independent_72 = run(Graph::Independent, 24, 6)?;
    let chain_24 = run(Graph::Chain, 8, 4)?;
    let chain_72 = run(Graph::Chain, 24, 6)?;
    let (i24, i72, c24, c72) = (
        rate(&independent_24),
        rate(&independent_72),
        rate(&chain_24),
        rate(&chain_72),
    );
    Ok(ThroughputFigures {
        tasks_per_run: tasks,
        independent_24_tasks_per_s: i24,
        independent_72_tasks_per_s: i72,
        independent_72_over_24: i72.median / i24.median,
        chain_24_tasks_per_s: c24,
        chain_72_tasks_per_s: c72,
        chain_72_over_24: c72.median / c24.median,
        submit_us_per_task: Stats::of_times(&independent_24.submit_us_per_task),
    })
}

/// The executors' figures side by side, with the floor and the targets.
#[derive(Clone, Debug, Serialize)]
pub struct ExecutorReport {
    /// CPUs of the host (`available_parallelism`).
    pub host_cpus: usize,
    /// Worker threads of the process's pool ([`simpler_device::sim::pool_threads`]).
    pub pool_threads: usize,
    /// What was measured.
    pub params: ExecutorParams,
    /// The park/unpark round trip of two bare threads, µs.
    pub floor_us: Stats,
    /// The targets of the figures.
    pub targets: Targets,
    /// Each executor's figures, by name (`pool`, `threads`).
    pub executors: BTreeMap<&'static str, ExecutorFigures>,
}

/// Measures the floor, then each of `executors` in turn (in the order given) with
/// `params`.
///
/// The pool's threads, once started, stay for the life of the process: measuring
/// [`ExecutorKind::ThreadPerCore`] before [`ExecutorKind::Pool`] keeps the former's thread
/// counts and idle cost free of the pool's.
///
/// # Errors
/// As [`measure_executor`].
pub fn measure_report(
    executors: &[ExecutorKind],
    params: &ExecutorParams,
) -> Result<ExecutorReport, ExecutorBenchError> {
    params.check()?;
    let floor_us = floor::park_round_trip_us(FLOOR_SAMPLES_PER_RUN * params.runs as usize)?;
    let mut figures = BTreeMap::new();
    for &kind in executors {
        figures.insert(kind.name(), measure_executor(kind, params)?);
    }
    Ok(ExecutorReport {
        host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        pool_threads: simpler_device::sim::pool_threads(),
        params: *params,
        floor_us,
        targets: TARGETS,
        executors: figures,
    })
}
