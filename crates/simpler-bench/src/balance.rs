//! The balance workload: N independent sleeping tasks on a chip of N cores (one AIC task
//! per AIC core, one AIV task per AIV core), for a given number of scheduler threads. With
//! balanced schedulers every task gets its own core and the run's makespan — first kernel
//! start to last kernel end, timed by the kernels themselves — is about one task time; a
//! task parked behind another in a pending slot doubles it. [`sweep`] measures a grid of
//! scheduler and cluster counts and reports makespan ÷ task time; nothing is asserted.
//!
//! This module owns only its callable and its timing; it measures through the public
//! `ChipWorker` API and changes nothing in the runtime.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use simpler_abi::*;
use simpler_device::Topology;
use simpler_host::{
    ArgDirection, ArgSpec, CallConfig, CallableId, CallableSpec, ChipWorker, CodeImage, HostArg,
    HostError, KernelSpec, Signature, WorkerConfig,
};

/// Scheduler counts of the full sweep (1 to 6 scheduler threads).
pub const FULL_SCHEDULERS: [u32; 6] = [1, 2, 3, 4, 5, 6];
/// Cluster counts of the full sweep (1 to 24 clusters, 3 to 72 cores).
pub const FULL_CLUSTERS: [u32; 24] = {
    let mut c = [0; 24];
    let mut i = 0;
    while i < 24 {
        c[i] = i as u32 + 1;
        i += 1;
    }
    c
};
/// Scheduler counts of the default (short) sweep.
pub const QUICK_SCHEDULERS: [u32; 3] = [1, 3, 6];
/// Cluster counts of the default (short) sweep.
pub const QUICK_CLUSTERS: [u32; 4] = [1, 5, 8, 24];

/// The kernel-side clock of one run: the earliest kernel start and the latest kernel end,
/// nanoseconds after `base`.
struct Span {
    base: Instant,
    first_start: AtomicU64,
    last_end: AtomicU64,
}

/// Sleeps `scalars[1]` microseconds, noting its start and end in the [`Span`] at
/// `scalars[0]` (the task has no tensors, so its scalars are its first argument slots).
unsafe extern "C-unwind" fn sleep_kernel(args: *mut i64) {
    // SAFETY: slot 0 holds the address of a Span that outlives the run, slot 1 the sleep.
    let (span, us) = unsafe { (&*(*args as *const Span), *args.add(1) as u64) };
    let start = span.base.elapsed().as_nanos() as u64;
    std::thread::sleep(Duration::from_micros(us));
    let end = span.base.elapsed().as_nanos() as u64;
    span.first_start.fetch_min(start, Ordering::AcqRel);
    span.last_end.fetch_max(end, Ordering::AcqRel);
}

/// Submits one sleeping task per core of a chip of `scalars[2]` clusters (AIV, AIV, AIC
/// per cluster), passing on the span address and the sleep (`scalars[0]`, `scalars[1]`).
unsafe extern "C-unwind" fn balance_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid tables and arguments.
    let (ops, a) = unsafe { (&*ops, &*args) };
    for _ in 0..a.scalars[2] {
        for lane in [LANE_AIV0, LANE_AIV0, LANE_AIC] {
            // SAFETY: TaskDesc is plain data; all-zero is a valid starting point.
            let mut d: Box<TaskDesc> = Box::new(unsafe { std::mem::zeroed() });
            d.size = std::mem::size_of::<TaskDesc>() as u32;
            d.kernel_ids = [NO_KERNEL; 3];
            d.kernel_ids[lane] = if lane == LANE_AIC { 0 } else { 1 };
            d.block_num = 1;
            d.scalars[..2].copy_from_slice(&a.scalars[..2]);
            d.scalar_count = 2;
            // SAFETY: the runtime's table with its own handle.
            let rc = unsafe { (ops.submit_task)(ops.runtime, &*d, std::ptr::null_mut()) };
            if rc != 0 {
                return rc;
            }
        }
    }
    0
}

/// The callable of the workload: the sleeping kernel on AIC (func 0) and AIV (func 1), and
/// three scalars (span address, sleep in microseconds, clusters).
fn callable() -> CallableSpec {
    let scalar = |name: &str| ArgSpec {
        name: name.into(),
        direction: ArgDirection::Scalar,
        dtype: DataType::Uint64,
        shape: None,
    };
    let kernel = |func_id, core_type| KernelSpec {
        func_id,
        core_type,
        image: CodeImage::Kernel(sleep_kernel),
        name: None,
    };
    CallableSpec {
        name: "balance".into(),
        signature: Signature::new(vec![scalar("span"), scalar("sleep_us"), scalar("clusters")])
            .expect("a valid signature"),
        orchestration: CodeImage::Orchestration(balance_orch),
        kernels: vec![kernel(0, CoreType::Aic), kernel(1, CoreType::Aiv)],
        runtime: None,
    }
}

/// One point of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct BalancePoint {
    /// Scheduler threads (AICPU threads − 1).
    pub schedulers: u32,
    /// Clusters of the chip.
    pub clusters: u32,
    /// Tasks per run = cores of the chip (3 × clusters).
    pub tasks: u32,
    /// Each task's sleep, milliseconds.
    pub task_ms: f64,
    /// Runs measured (after one warm-up run).
    pub runs: u32,
    /// Median makespan (first kernel start to last kernel end), milliseconds.
    pub median_makespan_ms: f64,
    /// Longest makespan of the runs, milliseconds.
    pub worst_makespan_ms: f64,
    /// Median makespan ÷ task time (1.0 is perfect balance, 2.0 a task parked behind
    /// another).
    pub median_ratio: f64,
    /// Longest makespan ÷ task time.
    pub worst_ratio: f64,
}

/// A worker for `clusters` clusters and up to `max_schedulers` schedulers, with the
/// workload's callable registered.
fn open_worker(clusters: u32, max_schedulers: u32) -> Result<(ChipWorker, CallableId), HostError> {
    let worker = ChipWorker::new(WorkerConfig {
        topology: Topology {
            clusters,
            aicpu_threads: max_schedulers + 1,
        },
        heap_size: 1 << 20,
        ..WorkerConfig::default()
    })?;
    let id = worker.register(&callable())?;
    Ok((worker, id))
}

/// One run's makespan, milliseconds.
fn makespan_ms(
    worker: &ChipWorker,
    id: CallableId,
    clusters: u32,
    schedulers: u32,
    task: Duration,
) -> Result<f64, HostError> {
    let span = Span {
        base: Instant::now(),
        first_start: AtomicU64::new(u64::MAX),
        last_end: AtomicU64::new(0),
    };
    let mut args = [
        HostArg::Scalar(&span as *const Span as u64),
        HostArg::Scalar(task.as_micros() as u64),
        HostArg::Scalar(u64::from(clusters)),
    ];
    let config = CallConfig {
        aicpu_thread_num: schedulers + 1,
        ..CallConfig::default()
    };
    worker.run_with(id, &mut args, &config)?;
    let (start, end) = (
        span.first_start.load(Ordering::Acquire),
        span.last_end.load(Ordering::Acquire),
    );
    Ok(end.saturating_sub(start) as f64 / 1e6)
}

/// Measures every pair of `schedulers` × `clusters` (scheduler counts 1..=7, cluster
/// counts 1..=24): `runs` runs each after one warm-up, tasks sleeping `task` each.
///
/// # Errors
/// The first [`HostError`] of a worker or a run (a scheduler or cluster count out of range
/// is reported by the worker as [`HostError::InvalidConfig`]).
pub fn sweep(
    schedulers: &[u32],
    clusters: &[u32],
    task: Duration,
    runs: u32,
) -> Result<Vec<BalancePoint>, HostError> {
    let max_schedulers = schedulers.iter().copied().max().unwrap_or(1);
    let task_ms = task.as_secs_f64() * 1e3;
    let mut out = Vec::new();
    for &c in clusters {
        let (worker, id) = open_worker(c, max_schedulers)?;
        for &s in schedulers {
            let mut spans = Vec::with_capacity(runs as usize);
            for i in 0..=runs {
                let ms = makespan_ms(&worker, id, c, s, task)?;
                if i > 0 {
                    spans.push(ms);
                }
            }
            spans.sort_by(f64::total_cmp);
            let (median, worst) = match spans.as_slice() {
                [] => (0.0, 0.0),
                v => (v[v.len() / 2], v[v.len() - 1]),
            };
            out.push(BalancePoint {
                schedulers: s,
                clusters: c,
                tasks: 3 * c,
                task_ms,
                runs,
                median_makespan_ms: median,
                worst_makespan_ms: worst,
                median_ratio: median / task_ms,
                worst_ratio: worst / task_ms,
            });
        }
    }
    Ok(out)
}
