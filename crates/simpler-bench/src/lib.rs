//! # simpler-bench — overhead workloads
//!
//! No-op task graphs, built from in-process Rust kernels and orchestrations so that only the
//! runtime's own cost is measured:
//!
//! - **submit cost**: the orchestrator's time per submitted task, measured inside the
//!   orchestration around its submit loop, for independent no-op tasks;
//! - **independent throughput**: end-to-end tasks per second for independent no-op tasks;
//! - **chain throughput**: the same for a chain where each task depends on the previous one.
//!
//! Each workload runs on a chip topology given by the caller (24 or 72 simulated cores).
//! Numbers are reported, never asserted: [`measure`] returns them for `simpler bench` and
//! the criterion benches to print.
//!
//! [`executor`] measures the sim device's executors one at a time (round trips, short runs,
//! throughput, many chips in one process, an idle worker's cost, the record read with a
//! successor in flight, and the park/unpark floor) for `simpler bench --executor`.
//!
//! [`l3`] is the level-3 overhead sweep: `Worker::run` of k independent no-op tasks on a
//! level-3 worker (chips in this process or in child processes, sub worker threads), with a
//! least-squares line through the medians (`simpler bench --l3`).
//!
//! [`trace_cost`] is what tracing costs: the same no-op workloads untraced and at one trace
//! level, per run and per task, beside the level's target (`simpler bench --trace-level`).
//!
//! [`trace_write`] is what writing a trace file costs: a synthetic 100k-task trace written to
//! memory as Perfetto protobuf and as Chrome JSON, beside the 1 s target
//! (`simpler bench --trace-write`).
//!
//! [`replay`] is what `host_build_graph` and its recordings buy: a 1,000-task no-op graph and
//! `examples/gemm` under `tensormap_and_ringbuffer`, `host_build_graph` and a replayed
//! recording on one warm worker, end to end and on the host, beside the two targets
//! (`simpler bench --replay`).
//!
//! [`decoder`] is the decode step of `examples/decoder_layer` per (batch, context): its device
//! time, the same graph with empty kernels, the runtime's time per task and the share of a
//! step spent outside kernels, estimated from the empty step and from a traced step's critical
//! path (`simpler bench --workload decoder_layer`).
//!
//! [`peer`] puts the executor bench's independent and chain no-op shapes beside the same
//! shapes on rayon, in the same process, and reports ours as a fraction of rayon's
//! (`simpler bench --peer`).
//!
//! [`balance`] is the scheduler-balance workload: as many independent sleeping tasks as the
//! chip has cores, over a grid of scheduler and cluster counts (`simpler bench --balance`).

pub mod balance;
pub mod decoder;
pub mod executor;
pub mod l3;
pub mod peer;
pub mod replay;
pub mod trace_cost;
pub mod trace_write;

pub use trace_cost::{trace_cost, TraceCost};
pub use trace_write::{trace_write, TraceWrite};

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use simpler_abi::*;
use simpler_device::sim::ExecutorKind;
use simpler_device::Topology;
use simpler_host::{
    ArgDirection, ArgSpec, CallConfig, CallableId, CallableSpec, ChipWorker, CodeImage, HostArg,
    HostError, HostTensor, KernelSpec, RunReport, Signature, WorkerConfig,
};

/// Tasks per inner scope in the workloads (well under a ring's window).
const SCOPE_TASKS: u64 = 1024;

/// Which graph a workload submits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Graph {
    /// Independent no-op tasks.
    Independent,
    /// A chain: each no-op task depends on the previous one (INOUT on one tiny buffer).
    Chain,
}

/// One measurement.
#[derive(Clone, Debug, Serialize)]
pub struct Measurement {
    /// The graph.
    pub graph: Graph,
    /// AICore cores of the chip.
    pub cores: u32,
    /// AICPU threads (1 orchestrator + schedulers).
    pub aicpu_threads: u32,
    /// Tasks per run.
    pub tasks: u64,
    /// Runs measured (after one warm-up run).
    pub runs: u32,
    /// Median wall time of one run (host call to return), microseconds.
    pub run_us: f64,
    /// Median orchestrator time per submitted task, microseconds.
    pub submit_us_per_task: f64,
    /// Tasks per second, end to end (tasks / median run time).
    pub tasks_per_s: f64,
}

/// Nanoseconds the orchestration of the last run spent in its submit loop.
static SUBMIT_NS: AtomicU64 = AtomicU64::new(0);

unsafe extern "C-unwind" fn noop_kernel(_args: *mut i64) {}

fn desc() -> Box<TaskDesc> {
    // SAFETY: TaskDesc is plain data; all-zero is a valid starting point.
    let mut d: Box<TaskDesc> = Box::new(unsafe { std::mem::zeroed() });
    d.size = std::mem::size_of::<TaskDesc>() as u32;
    d.kernel_ids = [NO_KERNEL, 0, NO_KERNEL];
    d.block_num = 1;
    d
}

/// Submits `scalars[0]` no-op tasks; with `scalars[1] == 1` each is INOUT on tensor 0, which
/// chains them. Times the submit loop into `SUBMIT_NS`.
unsafe extern "C-unwind" fn noop_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid tables and arguments.
    let (ops, args) = unsafe { (&*ops, &*args) };
    let (tasks, chain) = (args.scalars[0], args.scalars[1] == 1);
    let mut d = desc();
    if chain {
        d.tensor_count = 1;
        d.tensors[0] = args.tensors[0];
        d.tags[0] = TensorArgType::Inout as u32;
    }
    let start = Instant::now();
    let mut submitted = 0;
    while submitted < tasks {
        // SAFETY: calls through the runtime's table with its own handle.
        unsafe {
            let rc = (ops.scope_begin)(ops.runtime, SCOPE_AUTO);
            if rc != 0 {
                return rc;
            }
            for _ in 0..SCOPE_TASKS.min(tasks - submitted) {
                let rc = (ops.submit_task)(ops.runtime, &*d, std::ptr::null_mut());
                if rc != 0 {
                    return rc;
                }
                submitted += 1;
            }
            let rc = (ops.scope_end)(ops.runtime);
            if rc != 0 {
                return rc;
            }
        }
    }
    SUBMIT_NS.store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    0
}

/// The callable the workloads run: one no-op AIV kernel, a 1-element u32 tensor and two
/// scalars (task count, chain flag).
pub fn noop_callable() -> CallableSpec {
    let arg = |name: &str, direction, shape| ArgSpec {
        name: name.into(),
        direction,
        dtype: DataType::Uint32,
        shape,
    };
    CallableSpec {
        name: "noop".into(),
        signature: Signature::new(vec![
            arg("token", ArgDirection::InOut, Some(vec![1])),
            arg("tasks", ArgDirection::Scalar, None),
            arg("chain", ArgDirection::Scalar, None),
        ])
        .expect("a valid signature"),
        orchestration: CodeImage::Orchestration(noop_orch),
        kernels: vec![KernelSpec {
            func_id: 0,
            core_type: CoreType::Aiv,
            image: CodeImage::Kernel(noop_kernel),
            name: None,
        }],
        runtime: None,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The raw samples of one workload: per measured run (after one warm-up run), its wall time
/// and the orchestrator's submit time per task.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    /// Wall time of each run (host call to return), microseconds.
    pub run_us: Vec<f64>,
    /// Orchestrator time per submitted task of each run, microseconds (0 for empty runs).
    pub submit_us_per_task: Vec<f64>,
}

/// Runs `graph` with `tasks` tasks `runs` times (after a warm-up) on a chip of `clusters`
/// clusters and `aicpu_threads` AICPU threads whose sim device runs its cores on
/// `executor`, and returns every run's figures.
///
/// # Errors
/// Any [`HostError`] of the worker or of a run.
pub fn measure_samples(
    executor: ExecutorKind,
    graph: Graph,
    tasks: u64,
    runs: u32,
    clusters: u32,
    aicpu_threads: u32,
) -> Result<Samples, HostError> {
    measure_samples_with(
        executor,
        graph,
        tasks,
        runs,
        clusters,
        aicpu_threads,
        &CallConfig::default(),
    )
}

/// [`measure_samples`] with every run under `config` (its trace level, for
/// [`trace_cost`]).
///
/// # Errors
/// Any [`HostError`] of the worker or of a run.
pub fn measure_samples_with(
    executor: ExecutorKind,
    graph: Graph,
    tasks: u64,
    runs: u32,
    clusters: u32,
    aicpu_threads: u32,
    config: &CallConfig,
) -> Result<Samples, HostError> {
    let (worker, id) = noop_worker(executor, clusters, aicpu_threads)?;
    let mut out = Samples::default();
    for i in 0..=runs {
        let (wall, _) = run_noop(&worker, id, graph, tasks, config)?;
        if i > 0 {
            out.run_us.push(wall.as_secs_f64() * 1e6);
            let submit_ns = SUBMIT_NS.load(Ordering::Relaxed) as f64;
            out.submit_us_per_task.push(if tasks == 0 {
                0.0
            } else {
                submit_ns / 1e3 / tasks as f64
            });
        }
    }
    Ok(out)
}

/// A worker of `clusters` clusters and `aicpu_threads` AICPU threads on `executor`, with
/// [`noop_callable`] registered.
///
/// # Errors
/// The worker's or the registration's [`HostError`].
pub fn noop_worker(
    executor: ExecutorKind,
    clusters: u32,
    aicpu_threads: u32,
) -> Result<(ChipWorker, CallableId), HostError> {
    let worker = ChipWorker::new(WorkerConfig {
        topology: Topology {
            clusters,
            aicpu_threads,
        },
        sim_executor: executor,
        ..WorkerConfig::default()
    })?;
    let id = worker.register(&noop_callable())?;
    Ok((worker, id))
}

/// One run of `graph` with `tasks` tasks under `config` on a [`noop_worker`]: its wall
/// time (host call to return) and report.
///
/// # Errors
/// The run's [`HostError`].
pub fn run_noop(
    worker: &ChipWorker,
    id: CallableId,
    graph: Graph,
    tasks: u64,
    config: &CallConfig,
) -> Result<(Duration, RunReport), HostError> {
    let mut token = [0u8; 4];
    let mut args = [
        HostArg::Tensor(HostTensor {
            bytes: &mut token,
            shape: vec![1],
            dtype: DataType::Uint32,
        }),
        HostArg::Scalar(tasks),
        HostArg::Scalar(u64::from(graph == Graph::Chain)),
    ];
    let start = Instant::now();
    let report = worker.run_with(id, &mut args, config)?;
    Ok((start.elapsed(), report))
}

/// Runs `graph` with `tasks` tasks `runs` times (after a warm-up) on a chip of `clusters`
/// clusters and `aicpu_threads` AICPU threads (the executor `SIMPLER_SIM_EXECUTOR` names),
/// and returns the medians.
///
/// # Errors
/// Any [`HostError`] of the worker or of a run.
pub fn measure(
    graph: Graph,
    tasks: u64,
    runs: u32,
    clusters: u32,
    aicpu_threads: u32,
) -> Result<Measurement, HostError> {
    let samples = measure_samples(
        ExecutorKind::from_env(),
        graph,
        tasks,
        runs,
        clusters,
        aicpu_threads,
    )?;
    let run = median(samples.run_us);
    Ok(Measurement {
        graph,
        cores: clusters * 3,
        aicpu_threads,
        tasks,
        runs,
        run_us: run,
        submit_us_per_task: if tasks == 0 {
            0.0
        } else {
            median(samples.submit_us_per_task)
        },
        tasks_per_s: tasks as f64 / (run / 1e6),
    })
}

/// Median round trip of an empty run (an orchestration that submits nothing) on the default
/// chip, microseconds: the fixed cost of one run through the lane and the device.
///
/// # Errors
/// Any [`HostError`].
pub fn empty_run_us(runs: u32) -> Result<f64, HostError> {
    Ok(measure(Graph::Independent, 0, runs, 8, 4)?.run_us)
}

/// The standard suite: independent and chain graphs of `tasks` tasks on 24 cores (4 AICPU
/// threads) and 72 cores (6 AICPU threads).
///
/// # Errors
/// The first [`HostError`].
pub fn suite(tasks: u64, runs: u32) -> Result<Vec<Measurement>, HostError> {
    let mut out = Vec::new();
    for (clusters, threads) in [(8, 4), (24, 6)] {
        for graph in [Graph::Independent, Graph::Chain] {
            out.push(measure(graph, tasks, runs, clusters, threads)?);
        }
    }
    Ok(out)
}
