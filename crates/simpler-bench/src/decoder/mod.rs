//! The decode step of `examples/decoder_layer` on the sim (`simpler bench --workload
//! decoder_layer`, `docs/sim-performance.md` §7): per (batch, context) row, the median
//! device time of a real step, of the same graph with empty kernels, and two estimates of
//! the share of a step spent outside kernels, beside their targets ([`TARGETS`]; printed,
//! never asserted).
//!
//! - **step**: [`RunReport::device_time`] (the launch of the first kernel to the proof of
//!   both boundaries) of a real step, median of `steps` after one warm-up step; the run
//!   call's wall time is reported beside it;
//! - **empty step**: the same with every kernel empty ([`callables`]), real and empty steps
//!   interleaved so drift of the host affects both;
//! - **runtime per task** = empty step ÷ tasks;
//! - **outside kernels** = empty step ÷ step, at most 1 (an estimate: with real kernels part
//!   of the runtime's work overlaps them);
//! - **outside kernels from the trace**: one more real step traced at level tasks (each
//!   subtask's kernel start and end, every dependency edge), then (step − critical-path
//!   kernel time) ÷ step over that traced step's own device time, where the critical path is
//!   the longest path through the traced DAG weighted by each task's kernel time
//!   ([`critical`]). Its trace buffers are sized from the step's task count and doubled until
//!   nothing is dropped.
//!
//! Inputs: [`StepArgs`] from the generators of `simpler-examples`, every sequence `context`
//! tokens long by default as `examples/decoder_layer/bench.py` runs it (65,721 tasks at
//! batch 32, context 4096), or [`Lengths::Ragged`], the lengths of
//! `simpler_examples::decoder_layer::inputs` (uniform in `1..=context`).
//!
//! This module owns the workload and its timing; it drives the worker through its public
//! API and changes nothing in it.

pub mod callables;
pub mod critical;
mod error;
mod params;
mod report;

use std::path::Path;
use std::time::{Duration, Instant};

use simpler_device::Topology;
use simpler_host::trace_model::TraceLevel;
use simpler_host::{CallConfig, CallableId, ChipWorker, HostError, RunReport, WorkerConfig};
use simpler_toolchain::build::Compiler;

pub use self::callables::{layer_callables, LayerCallables, Lengths, StepArgs, EMPTY_KERNEL};
pub use self::critical::{critical_path, task_kernel_ns, CriticalPath, CycleError};
pub use self::error::DecoderBenchError;
pub use self::params::{DecoderParams, DEFAULT_BATCHES, DEFAULT_CONTEXTS, DEFAULT_STEPS};
pub use self::report::{DecoderReport, DecoderRow, DecoderTargets, ModelSizes, TARGETS};
use crate::median;

/// Clusters of the worker's chip (24 cores), the sim's default chip.
const CLUSTERS: u32 = 8;
/// AICPU threads of the worker's chip.
const AICPU_THREADS: u32 = 4;
/// Trace records per buffer of the first traced step: this many per task, plus
/// [`TRACE_RECORDS_SLACK`]. The orchestrator's buffer, the fullest, takes one record per task
/// and one per edge at level tasks.
const TRACE_RECORDS_PER_TASK: u64 = 4;
/// Trace records per buffer added to the per-task figure.
const TRACE_RECORDS_SLACK: u64 = 4096;
/// Traced steps tried, the buffers doubled after each that dropped events.
const TRACE_TRIES: u32 = 4;

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A step: (wall time of the run call, report).
fn step(
    worker: &ChipWorker,
    id: CallableId,
    args: &mut StepArgs,
    config: &CallConfig,
) -> Result<(Duration, RunReport), HostError> {
    let mut host = args.host_args();
    let start = Instant::now();
    let report = worker.run_with(id, &mut host, config)?;
    Ok((start.elapsed(), report))
}

/// Trace records per buffer for a step of `tasks` tasks, before any doubling.
pub fn trace_records_for(tasks: u64) -> u32 {
    let want = tasks
        .saturating_mul(TRACE_RECORDS_PER_TASK)
        .saturating_add(TRACE_RECORDS_SLACK);
    u32::try_from(want).unwrap_or(u32::MAX)
}

/// What the traced step gave.
struct Traced {
    step_us: f64,
    path: CriticalPath,
    kernel_ns: u64,
    subtasks: usize,
    edges: usize,
    records: u32,
}

/// One real step traced at level tasks, its buffers sized from `tasks` and doubled until
/// nothing is dropped.
fn traced_step(
    worker: &ChipWorker,
    id: CallableId,
    args: &mut StepArgs,
    tasks: u64,
    (batch, context): (usize, usize),
) -> Result<Traced, DecoderBenchError> {
    let mut records = trace_records_for(tasks);
    let mut tries = 0;
    loop {
        tries += 1;
        let config = CallConfig {
            trace_level: TraceLevel::Tasks,
            trace_buffer_records: records,
            ..CallConfig::default()
        };
        let (_, report) = step(worker, id, args, &config)?;
        let trace = report
            .trace
            .as_ref()
            .ok_or(DecoderBenchError::NoTrace { batch, context })?;
        let run = trace
            .model()
            .runs()
            .map(|(_, r)| r)
            .find(|r| r.epoch == report.epoch)
            .ok_or(DecoderBenchError::NoTrace { batch, context })?;
        let dropped: u64 = run.dropped.iter().map(|d| d.count).sum();
        if dropped > 0 {
            if tries >= TRACE_TRIES || records == u32::MAX {
                return Err(DecoderBenchError::TraceDropped {
                    batch,
                    context,
                    dropped,
                    records,
                });
            }
            records = records.saturating_mul(2);
            continue;
        }
        let path = critical_path(&run.subtasks, &run.edges).map_err(|source| {
            DecoderBenchError::Cycle {
                batch,
                context,
                source,
            }
        })?;
        return Ok(Traced {
            step_us: us(report.device_time),
            path,
            kernel_ns: run.subtasks.iter().map(|s| s.duration_ns()).sum(),
            subtasks: run.subtasks.len(),
            edges: run.edges.len(),
            records,
        });
    }
}

/// Measures one (batch, context) row with both callables registered on `worker`.
fn measure_row(
    worker: &ChipWorker,
    (real, empty): (CallableId, CallableId),
    params: &DecoderParams,
    (batch, context): (usize, usize),
) -> Result<DecoderRow, DecoderBenchError> {
    let mut args = StepArgs::new(
        params.model,
        batch,
        context,
        params.block_size,
        params.seed,
        params.lengths,
    );
    let untraced = CallConfig::default();
    let (mut device, mut wall, mut empty_device, mut empty_wall) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut tasks, mut empty_tasks) = (0, 0);
    for i in 0..=params.steps {
        let (w, r) = step(worker, real, &mut args, &untraced)?;
        let (ew, er) = step(worker, empty, &mut args, &untraced)?;
        tasks = r.tasks;
        empty_tasks = er.tasks;
        if i > 0 {
            device.push(us(r.device_time));
            wall.push(us(w));
            empty_device.push(us(er.device_time));
            empty_wall.push(us(ew));
        }
    }
    if tasks != empty_tasks {
        return Err(DecoderBenchError::TaskMismatch {
            batch,
            context,
            real: tasks,
            empty: empty_tasks,
        });
    }
    let traced = traced_step(worker, real, &mut args, tasks, (batch, context))?;
    let (step_us, empty_step_us) = (median(device), median(empty_device));
    let cp_us = traced.path.kernel_ns as f64 / 1e3;
    Ok(DecoderRow {
        batch,
        context,
        tasks,
        step_us,
        empty_step_us,
        runtime_us_per_task: if tasks == 0 {
            0.0
        } else {
            empty_step_us / tasks as f64
        },
        outside_kernels: (empty_step_us / step_us).min(1.0),
        outside_kernels_from_trace: ((traced.step_us - cp_us) / traced.step_us).clamp(0.0, 1.0),
        wall_us: median(wall),
        empty_wall_us: median(empty_wall),
        traced_step_us: traced.step_us,
        critical_path_us: cp_us,
        critical_path_tasks: traced.path.tasks,
        trace_kernel_us: traced.kernel_ns as f64 / 1e3,
        trace_subtasks: traced.subtasks,
        trace_edges: traced.edges,
        trace_buffer_records: traced.records,
    })
}

/// Runs every (batch, context) row of `params` on one warm worker (8 clusters, 24 cores,
/// 4 AICPU threads, the executor `SIMPLER_SIM_EXECUTOR` names) with the `callables` of the
/// layer, and reports the figures.
///
/// # Errors
/// [`DecoderBenchError::InvalidParam`] for a bad parameter; the worker's or a step's
/// [`HostError`]; [`DecoderBenchError::TaskMismatch`], [`DecoderBenchError::NoTrace`],
/// [`DecoderBenchError::TraceDropped`] or [`DecoderBenchError::Cycle`] for a row whose
/// steps or trace do not add up.
pub fn decoder_bench(
    callables: &LayerCallables,
    params: &DecoderParams,
) -> Result<DecoderReport, DecoderBenchError> {
    params.check()?;
    let worker = ChipWorker::new(WorkerConfig {
        topology: Topology {
            clusters: CLUSTERS,
            aicpu_threads: AICPU_THREADS,
        },
        ..WorkerConfig::default()
    })?;
    let ids = (
        worker.register(&callables.real)?,
        worker.register(&callables.empty)?,
    );
    let mut rows = Vec::with_capacity(params.batches.len() * params.contexts.len());
    for &batch in &params.batches {
        for &context in &params.contexts {
            rows.push(measure_row(&worker, ids, params, (batch, context))?);
        }
    }
    worker.close()?;
    let m = params.model;
    Ok(DecoderReport {
        rows,
        targets: TARGETS,
        model: ModelSizes {
            embed: m.embed,
            heads: m.heads,
            kv_heads: m.kv_heads,
            head_dim: m.head_dim,
            ffn: m.ffn,
            block_size: params.block_size,
        },
        steps: params.steps,
        seed: params.seed,
        lengths: params.lengths,
        timed: "device_time",
        cores: CLUSTERS * 3,
        aicpu_threads: AICPU_THREADS,
        host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
}

/// [`layer_callables`] of the folder `dir`, then [`decoder_bench`].
///
/// # Errors
/// As both.
pub fn decoder_bench_in(
    dir: &Path,
    compiler: &Compiler,
    params: &DecoderParams,
) -> Result<DecoderReport, DecoderBenchError> {
    params.check()?;
    decoder_bench(&layer_callables(dir, compiler)?, params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_buffers_grow_with_the_task_count() {
        assert_eq!(trace_records_for(0), 4096);
        assert_eq!(trace_records_for(65_721), 65_721 * 4 + 4096);
        assert_eq!(trace_records_for(u64::MAX), u32::MAX);
    }

    #[test]
    fn a_missing_example_folder_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let compiler = Compiler::new(
            vec!["cc".into()],
            vec![],
            simpler_toolchain::cache::KernelCache::new(dir.path().join("cache")),
        )
        .unwrap();
        let missing = dir.path().join("nowhere");
        let err = layer_callables(&missing, &compiler).unwrap_err();
        assert!(
            matches!(err, DecoderBenchError::MissingExample { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("nowhere"), "{err}");
        // A folder with a manifest but no empty kernel.
        std::fs::write(dir.path().join("simpler.toml"), "name = \"x\"\n").unwrap();
        let err = layer_callables(dir.path(), &compiler).unwrap_err();
        assert!(
            matches!(err, DecoderBenchError::MissingEmptyKernel { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains(EMPTY_KERNEL), "{err}");
    }

    /// The example's folder and a compiler for it (the repository's headers, `$CC` or cc).
    fn repository_layer(cache: &Path) -> LayerCallables {
        use simpler_toolchain::build::{
            compiler_words, repository_examples_dir, repository_include_dir,
        };
        let cc = compiler_words(std::env::var_os("CC")).unwrap();
        let compiler = Compiler::new(
            cc,
            vec![repository_include_dir()],
            simpler_toolchain::cache::KernelCache::new(cache),
        )
        .unwrap();
        layer_callables(&repository_examples_dir().join("decoder_layer"), &compiler).unwrap()
    }

    #[test]
    fn a_tiny_row_reports_every_figure_from_both_callables_and_the_trace() {
        let cache = tempfile::tempdir().unwrap();
        let layer = repository_layer(cache.path());
        assert_eq!(layer.empty.name, "decoder_layer_empty");
        let funcs = |s: &simpler_host::CallableSpec| -> Vec<_> {
            s.kernels.iter().map(|k| (k.func_id, k.core_type)).collect()
        };
        assert_eq!(funcs(&layer.real), funcs(&layer.empty));
        let params = DecoderParams {
            batches: vec![1],
            contexts: vec![20],
            steps: 1,
            ..DecoderParams::default()
        };
        let report = decoder_bench(&layer, &params).unwrap();
        assert_eq!(report.rows.len(), 1);
        let r = &report.rows[0];
        assert_eq!((r.batch, r.context), (1, 20));
        assert!(r.tasks > 1, "{r:?}");
        for v in [
            r.step_us,
            r.empty_step_us,
            r.runtime_us_per_task,
            r.traced_step_us,
            r.critical_path_us,
        ] {
            assert!(v.is_finite() && v > 0.0, "{r:?}");
        }
        for share in [r.outside_kernels, r.outside_kernels_from_trace] {
            assert!(share > 0.0 && share <= 1.0, "{r:?}");
        }
        assert_eq!(r.runtime_us_per_task, r.empty_step_us / r.tasks as f64);
        // Every task with a kernel ran one subtask at least, and the graph has edges.
        assert!(r.trace_subtasks as u64 >= r.tasks - 1, "{r:?}");
        assert!(r.trace_edges > 0 && r.critical_path_tasks > 1, "{r:?}");
        assert!(r.critical_path_us < r.traced_step_us, "{r:?}");
        assert!(r.trace_kernel_us >= r.critical_path_us, "{r:?}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["targets"]["outside_kernels"], 0.25);
        assert_eq!(json["model"]["embed"], 256);
    }
}
