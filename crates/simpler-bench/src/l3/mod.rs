//! The level-3 overhead sweep (`simpler bench --l3`): the cost of `Worker::run` of a
//! level-3 [`Worker`](simpler_worker::Worker) on the sim platform, each run submitting k
//! independent no-op tasks, for k in [`K_SWEEP`]; per k the median and p90 µs per run,
//! then the least-squares line `run_us = fixed + per_task × k` through the medians, printed
//! beside its target. Targets are printed, never asserted.
//!
//! What each row measures (the time of one `Worker::run`, from the call to its return:
//! the orchestration function submitting k tasks, the engine dispatching them, every task
//! ending, the run's report):
//!
//! - **chip, thread** ([`RowKind::ChipThread`]): k no-op chip tasks spread round-robin over
//!   [`L3Params::chips`] chips, each a `ChipWorker` in this process. A no-op chip task is
//!   a chip run of [`callable::noop_chip_callable`], whose orchestration submits no task:
//!   its cost is the sim's empty-run floor plus the engine's. Target ≤ 10 µs fixed + ≤ 2 µs
//!   per task.
//! - **chip, process** ([`RowKind::ChipProcess`]): the same with each chip in its own
//!   child process (`docs/l3-worker.md` §5), the task crossing the child's mailbox. Target
//!   ≤ 30 µs fixed + ≤ 5 µs per task.
//! - **sub, thread** ([`RowKind::SubThread`]): k sub tasks of a Rust closure that returns
//!   at once, on [`L3Params::sub_workers`] sub worker threads: the engine alone, no chip
//!   under it. No target; reported beside the chip rows.
//! - **L2 floor** ([`L3Report::floor_us`]): `ChipWorker::run` of the same no-op callable
//!   on one chip of the same shape, without the engine; the fit at k = 1 minus this floor
//!   is the engine's share of a one-task run ([`RowFigures::engine_one_task_us`]), and so
//!   is the measured k = 1 median minus it ([`RowFigures::engine_k1_us`]).
//! - **upstream** ([`UPSTREAM`]): the upstream project's figure on its aarch64 hosts with
//!   no-op Python callables, for reference; not measured here.
//!
//! Beside each row's line: its slowest tail ([`Tail`], p90 ÷ median, target ≤
//! [`TAIL_TARGET`]); for the chip rows the per-task slope against half the floor plus
//! [`SLOPE_OVER_HALF_FLOOR_US`] ([`L3Report::slope_target_us`]), and chips in child
//! processes against chips in this process at k = 16 ([`process_over_thread`], target ≤
//! [`PROCESS_OVER_THREAD_TARGET`]).
//!
//! Runs per k: [`L3Params::runs`] for k ≤ 16, fewer for larger k ([`runs_for`]), so the
//! default sweep stays well under a minute on 2 CPUs.
//!
//! This module owns the workloads, their timing and their arithmetic; it drives the engine
//! through the public `simpler_worker` API and changes nothing in it.
//!
//! - [`callable`]: the no-op chip callable, compiled from C;
//! - [`rows`]: the timed loops and the floor;
//! - [`fit`]: median, p90 and the least-squares line.

pub mod callable;
pub mod fit;
pub mod rows;

use std::sync::Arc;

use serde::Serialize;
use simpler_host::{CallableSpec, HostError};
use simpler_toolchain::build::CompileError;
use simpler_worker::{ChildProgram, WorkerError};

pub use self::fit::{fit_line, Fit, Spread};

/// The ks of the full sweep: tasks per run.
pub const K_SWEEP: [u64; 7] = [1, 2, 4, 8, 16, 64, 256];

/// Default [`L3Params::runs`].
pub const DEFAULT_RUNS: u32 = 300;

/// Runs at every k, however large, when [`L3Params::runs`] is at least this.
pub const MIN_RUNS: u32 = 20;

/// Measured runs at `k` tasks for a base of `runs`: all of them up to k = 16, then
/// `runs × 16 / k` (equal time per k, roughly), but never fewer than `min(runs,`
/// [`MIN_RUNS`]`)`.
pub fn runs_for(runs: u32, k: u64) -> u32 {
    let scaled = u64::from(runs) * 16 / k.max(16);
    (scaled as u32).max(runs.min(MIN_RUNS))
}

/// A row of the sweep: what its tasks are and where they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// No-op chip tasks on chips in this process.
    ChipThread,
    /// No-op chip tasks on chips in child processes.
    ChipProcess,
    /// No-op Rust closures on sub worker threads.
    SubThread,
}

impl RowKind {
    /// Every row, in the order the sweep measures and prints them.
    pub const ALL: [RowKind; 3] = [
        RowKind::ChipThread,
        RowKind::ChipProcess,
        RowKind::SubThread,
    ];

    /// The row's key (`chip_thread`, `chip_process`, `sub_thread`).
    pub fn name(self) -> &'static str {
        match self {
            RowKind::ChipThread => "chip_thread",
            RowKind::ChipProcess => "chip_process",
            RowKind::SubThread => "sub_thread",
        }
    }

    /// The row's target, if it has one.
    pub fn target(self) -> Option<LineTarget> {
        match self {
            RowKind::ChipThread => Some(CHIP_THREAD_TARGET),
            RowKind::ChipProcess => Some(CHIP_PROCESS_TARGET),
            RowKind::SubThread => None,
        }
    }

    fn runs_chips(self) -> bool {
        matches!(self, RowKind::ChipThread | RowKind::ChipProcess)
    }
}

/// A target line: the fit's fixed cost and per-task cost should each be at most these.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LineTarget {
    /// Most fixed cost per run, µs.
    pub fixed_us: f64,
    /// Most cost per task, µs.
    pub per_task_us: f64,
}

/// Which parts of a [`LineTarget`] a fit meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Met {
    /// The fixed cost is at most the target's and not negative (a negative intercept means
    /// the medians grow faster than linearly in k: the line does not describe them, and
    /// meets nothing).
    pub fixed: bool,
    /// The per-task cost is at most the target's.
    pub per_task: bool,
}

impl LineTarget {
    /// Which parts `fit` meets.
    pub fn met_by(&self, fit: &Fit) -> Met {
        Met {
            fixed: (0.0..=self.fixed_us).contains(&fit.fixed_us),
            per_task: fit.per_task_us <= self.per_task_us,
        }
    }
}

/// Target of [`RowKind::ChipThread`].
pub const CHIP_THREAD_TARGET: LineTarget = LineTarget {
    fixed_us: 10.0,
    per_task_us: 2.0,
};

/// Target of [`RowKind::ChipProcess`].
pub const CHIP_PROCESS_TARGET: LineTarget = LineTarget {
    fixed_us: 30.0,
    per_task_us: 5.0,
};

/// Most a point's p90 may be over its median ([`Tail`]): a run's slow tail within a small
/// multiple of its typical time.
pub const TAIL_TARGET: f64 = 3.0;

/// Most [`RowKind::ChipProcess`]'s median may be over [`RowKind::ChipThread`]'s at the
/// same k ([`L3Report::process_over_thread`]).
pub const PROCESS_OVER_THREAD_TARGET: f64 = 1.5;

/// The k at which [`L3Report::process_over_thread`] is read when the sweep has it (else
/// the largest k below it both rows have).
pub const PROCESS_OVER_THREAD_K: u64 = 16;

/// A chip row's per-task slope target relative to the chip's own cost: at most half the
/// L2 empty run (the floor's median: the chips run two at a time on 2 CPUs) plus this.
pub const SLOPE_OVER_HALF_FLOOR_US: f64 = 5.0;

/// A row's slowest tail: the point whose p90 is the largest multiple of its median.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Tail {
    /// The point's k.
    pub k: u64,
    /// Its p90 ÷ its median.
    pub ratio: f64,
}

impl Tail {
    /// The slowest tail among `points`; `None` for no points.
    pub fn worst(points: &[Point]) -> Option<Tail> {
        points
            .iter()
            .map(|p| Tail {
                k: p.k,
                ratio: p.run_us.p90 / p.run_us.median,
            })
            .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
    }
}

/// Two rows' medians at one k, one over the other.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RowRatio {
    /// The k.
    pub k: u64,
    /// The first row's median ÷ the second's.
    pub ratio: f64,
}

/// The median of [`RowKind::ChipProcess`] over that of [`RowKind::ChipThread`] at
/// [`PROCESS_OVER_THREAD_K`], or at the largest k below it both have; `None` without both
/// rows or such a k.
pub fn process_over_thread(rows: &[RowFigures]) -> Option<RowRatio> {
    let row = |kind| rows.iter().find(|r| r.row == kind);
    let (process, thread) = (row(RowKind::ChipProcess)?, row(RowKind::ChipThread)?);
    process
        .points
        .iter()
        .filter(|p| p.k <= PROCESS_OVER_THREAD_K)
        .filter_map(|p| {
            let t = thread.points.iter().find(|t| t.k == p.k)?;
            Some(RowRatio {
                k: p.k,
                ratio: p.run_us.median / t.run_us.median,
            })
        })
        .max_by_key(|r| r.k)
}

/// A figure measured elsewhere, printed for reference.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Reference {
    /// What it measured, and where.
    pub what: &'static str,
    /// Its line.
    pub fit: Fit,
}

/// The upstream project's level-3 figure.
pub const UPSTREAM: Reference = Reference {
    what: "upstream, its aarch64 hosts, no-op Python callables",
    fit: Fit {
        fixed_us: 43.3,
        per_task_us: 8.08,
    },
};

/// Why the sweep failed.
#[derive(Debug, thiserror::Error)]
pub enum L3BenchError {
    /// A level-3 worker refused its options, failed to start, or a run failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The L2 floor's chip refused its configuration, or a run failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The no-op orchestration did not compile.
    #[error("cannot compile the no-op orchestration of the level-3 sweep")]
    Compile(#[from] CompileError),
    /// A file of the no-op orchestration could not be written (`what` names it).
    #[error("cannot write {what}")]
    Io {
        /// The file or directory.
        what: String,
        /// The OS's error.
        #[source]
        source: std::io::Error,
    },
    /// A parameter out of range (`name` is the [`L3Params`] field).
    #[error("level-3 bench parameter `{name}` {reason}")]
    InvalidParam {
        /// The field.
        name: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A run reported another task count than the sweep submitted.
    #[error("row {row}: a run of {k} tasks reported {tasks} tasks")]
    Miscounted {
        /// The row's key.
        row: &'static str,
        /// Tasks submitted.
        k: u64,
        /// Tasks the run reported.
        tasks: usize,
    },
}

/// How much and what to measure.
#[derive(Clone, Debug, Serialize)]
pub struct L3Params {
    /// Measured runs per k for k ≤ 16, at least 1 (fewer for larger k: [`runs_for`]); also
    /// the floor's sample count.
    pub runs: u32,
    /// Tasks per run, each at least 1, at least two distinct (for the fit).
    pub ks: Vec<u64>,
    /// Chips of the chip rows, at least 1.
    pub chips: usize,
    /// Sub worker threads of the sub row, at least 1.
    pub sub_workers: usize,
    /// The rows to measure, in order.
    pub rows: Vec<RowKind>,
    /// The program of the chip children; `None` is [`ChildProgram::for_rust`].
    #[serde(skip)]
    pub chip_program: Option<ChildProgram>,
}

impl Default for L3Params {
    /// [`DEFAULT_RUNS`], [`K_SWEEP`], 4 chips, 2 sub workers, every row, `simpler-child`.
    fn default() -> Self {
        L3Params {
            runs: DEFAULT_RUNS,
            ks: K_SWEEP.to_vec(),
            chips: 4,
            sub_workers: 2,
            rows: RowKind::ALL.to_vec(),
            chip_program: None,
        }
    }
}

impl L3Params {
    fn check(&self) -> Result<(), L3BenchError> {
        let bad = |name, reason| Err(L3BenchError::InvalidParam { name, reason });
        let distinct = self.ks.iter().any(|&k| k != self.ks[0]);
        match () {
            _ if self.runs == 0 => bad("runs", "must be at least 1"),
            _ if self.ks.contains(&0) => bad("ks", "must all be at least 1"),
            _ if self.ks.is_empty() || !distinct => bad("ks", "needs two distinct values"),
            _ if self.chips == 0 => bad("chips", "must be at least 1"),
            _ if self.sub_workers == 0 => bad("sub_workers", "must be at least 1"),
            _ if self.rows.is_empty() => bad("rows", "must name at least one row"),
            _ => Ok(()),
        }
    }
}

/// One k of one row.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// Tasks per run.
    pub k: u64,
    /// Runs measured.
    pub runs: u32,
    /// Time of one `Worker::run`, µs.
    pub run_us: Spread,
}

/// One row's figures.
#[derive(Clone, Debug, Serialize)]
pub struct RowFigures {
    /// The row.
    pub row: RowKind,
    /// One point per k, in the order of [`L3Params::ks`].
    pub points: Vec<Point>,
    /// The least-squares line through the points' medians.
    pub fit: Fit,
    /// The row's target, if it has one.
    pub target: Option<LineTarget>,
    /// Which parts of the target the fit meets.
    pub met: Option<Met>,
    /// Chip rows: the fit at k = 1 minus the floor's median, µs — what the engine adds to
    /// one chip run, by the line.
    pub engine_one_task_us: Option<f64>,
    /// Chip rows with k = 1 in the sweep: the measured median at k = 1 minus the floor's
    /// median, µs — the same share read off the point itself (robust where the line bends).
    pub engine_k1_us: Option<f64>,
    /// The row's slowest tail (target: at most [`TAIL_TARGET`]).
    pub worst_tail: Option<Tail>,
}

/// The whole sweep.
#[derive(Clone, Debug, Serialize)]
pub struct L3Report {
    /// CPUs of the host (`available_parallelism`).
    pub host_cpus: usize,
    /// What was measured.
    pub params: L3Params,
    /// AICore clusters of each chip.
    pub chip_clusters: u32,
    /// AICPU threads of each chip.
    pub chip_aicpu_threads: u32,
    /// The L2 empty-run floor, µs (measured when a chip row is).
    pub floor_us: Option<Spread>,
    /// One entry per measured row, in [`L3Params::rows`] order.
    pub rows: Vec<RowFigures>,
    /// The chip rows' per-task slope target: half the floor's median plus
    /// [`SLOPE_OVER_HALF_FLOOR_US`], µs (when the floor was measured).
    pub slope_target_us: Option<f64>,
    /// Chips in child processes against chips in this process ([`process_over_thread`];
    /// target: at most [`PROCESS_OVER_THREAD_TARGET`]).
    pub process_over_thread: Option<RowRatio>,
    /// The upstream figure, for reference.
    pub upstream: Reference,
}

/// Measures the floor (when a chip row is asked for), then each row of `params` in turn,
/// with `spec` (normally [`callable::noop_chip_callable`]) as the no-op chip callable.
/// With the defaults and every row it takes 15–30 s on 2 CPUs (more on a loaded machine),
/// most of it in the k = 64 and k = 256 points of the chip rows.
///
/// # Errors
/// [`L3BenchError::InvalidParam`] naming a bad field; else the first error of a worker, a
/// chip or a run.
pub fn measure_l3(params: &L3Params, spec: CallableSpec) -> Result<L3Report, L3BenchError> {
    params.check()?;
    let spec = Arc::new(spec);
    let floor_us = if params.rows.iter().any(|r| r.runs_chips()) {
        Some(Spread::of(&rows::floor_samples(&spec, params.runs)?))
    } else {
        None
    };
    let mut figures = Vec::with_capacity(params.rows.len());
    for &row in &params.rows {
        let points = rows::measure_row(row, params, &spec)?;
        let medians: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (p.k as f64, p.run_us.median))
            .collect();
        let fit = fit_line(&medians).expect("checked: two distinct ks");
        let target = row.target();
        figures.push(RowFigures {
            row,
            fit,
            target,
            met: target.map(|t| t.met_by(&fit)),
            engine_one_task_us: floor_us
                .filter(|_| row.runs_chips())
                .map(|f| fit.at(1.0) - f.median),
            engine_k1_us: floor_us.filter(|_| row.runs_chips()).and_then(|f| {
                let one = points.iter().find(|p| p.k == 1)?;
                Some(one.run_us.median - f.median)
            }),
            worst_tail: Tail::worst(&points),
            points,
        });
    }
    Ok(L3Report {
        host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        params: params.clone(),
        chip_clusters: rows::CHIP_CLUSTERS,
        chip_aicpu_threads: rows::CHIP_AICPU_THREADS,
        floor_us,
        slope_target_us: floor_us.map(|f| f.median / 2.0 + SLOPE_OVER_HALF_FLOOR_US),
        process_over_thread: process_over_thread(&figures),
        rows: figures,
        upstream: UPSTREAM,
    })
}

#[cfg(test)]
mod tests;
