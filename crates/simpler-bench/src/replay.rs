//! What building the graph on the host and replaying a recording buy (`simpler bench
//! --replay`, `docs/chip-runtime.md` §17): each workload on one warm worker under three
//! variants, interleaved run by run so drift of the host affects all three —
//!
//! - **tmr**: `tensormap_and_ringbuffer`, the orchestration running on the device;
//! - **hbg**: `host_build_graph`, the host running the orchestration and uploading the graph
//!   on every run;
//! - **hbg replay**: one [`RecordedRun`] made before the timed runs, replayed on every run
//!   (no orchestration, no upload).
//!
//! Per variant: the median end-to-end time of a run (the host call to its return: submit to
//! result), the host's cost per run, the orchestration's time per task on the host and the
//! upload, from the untraced pass; and from a second pass traced at level tasks, the run's
//! `stage` and `launch` host spans (`docs/tracing.md`). `stage` is the host's work from the
//! submit to the launch call — staging the arguments, building (hbg) or binding (replay) the
//! graph, publishing the descriptor; `launch` is the launch call itself, which on the sim
//! includes the device threads the launch wakes taking the host's CPUs (on a 2-CPU host it
//! swings between tens of µs and a millisecond), so it is shown apart and not counted as host
//! cost. The **graph host cost** is what the host spends on the graph itself, beyond the
//! staging every variant pays alike: `build_time + upload_time` of the run's
//! [`GraphReport`] for hbg; for hbg replay, how much its `stage` span exceeds tmr's (the
//! check of its arguments against the recording and the binding of the image; 0 when it
//! does not); 0 for tmr, whose orchestration runs on the device.
//!
//! Two targets are printed beside the figures ([`Targets`]): a replay's host cost at most
//! 10 % of an hbg build's, and a replay's end-to-end time below tmr's. Reported, never
//! asserted. Every variant's outputs of the last timed run must equal tmr's, bit for bit:
//! a mismatch is an error, not a figure.
//!
//! Workloads: [`Workload::noop`] (the suite's no-op callable, [`crate::noop_callable`], with
//! N independent tasks, 1,000 by default) and [`Workload::gemm`] (`examples/gemm`: 512
//! chained tile tasks on the inputs of `simpler-examples`). This module drives the worker
//! through its public API and changes nothing in it.

use std::time::{Duration, Instant};

use serde::Serialize;
use simpler_abi::DataType;
use simpler_device::sim::ExecutorKind;
use simpler_host::trace_model::TraceLevel;
use simpler_host::{
    CallConfig, CallableId, CallableSpec, ChipWorker, GraphReport, HostArg, HostError, HostTensor,
    RecordedRun, RunReport, Runtime,
};
use simpler_toolchain::build::{build_example, repository_examples_dir, BuildError, Compiler};

use crate::median;

/// Default runs per variant (after one warm-up run each).
pub const DEFAULT_RUNS: u32 = 20;
/// Default tasks of the no-op graph.
pub const DEFAULT_NOOP_TASKS: u64 = 1_000;
/// The replay-host-cost target: at most this share of an hbg build's host cost.
pub const REPLAY_HOST_SHARE_TARGET: f64 = 0.10;
/// Clusters of the worker's chip (24 cores), as the suite's small chip.
const CLUSTERS: u32 = 8;
/// AICPU threads of the worker's chip.
const AICPU_THREADS: u32 = 4;

/// Why the replay bench failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayBenchError {
    /// The worker, a registration or a run failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// An example could not be built into a callable.
    #[error("cannot build `examples/{example}`")]
    Build {
        /// The example.
        example: String,
        /// Why.
        #[source]
        source: Box<BuildError>,
    },
    /// `simpler-examples` has no inputs for the example.
    #[error("`simpler-examples` has no inputs for `{example}`")]
    NoInputs {
        /// The example.
        example: String,
    },
    /// A variant's outputs differ from tmr's.
    #[error("{workload}: the outputs of {variant} differ from tensormap_and_ringbuffer's")]
    Mismatch {
        /// The workload.
        workload: String,
        /// The variant whose outputs differ.
        variant: Variant,
    },
}

/// The three ways a run is executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// `tensormap_and_ringbuffer`: the orchestration runs on the device.
    Tmr,
    /// `host_build_graph`, the graph built and uploaded on every run.
    Hbg,
    /// `host_build_graph`, one recording replayed on every run.
    HbgReplay,
}

impl Variant {
    /// Every variant, in the order they are run and printed.
    pub const ALL: [Variant; 3] = [Variant::Tmr, Variant::Hbg, Variant::HbgReplay];

    /// "tmr", "hbg" or "hbg replay".
    pub fn label(self) -> &'static str {
        match self {
            Variant::Tmr => "tmr",
            Variant::Hbg => "hbg",
            Variant::HbgReplay => "hbg replay",
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// One argument's value, positional with the signature, owned by the bench.
#[derive(Clone, Debug, PartialEq)]
pub enum BenchArg {
    /// A tensor's bytes, shape and dtype (outputs start zeroed).
    Tensor {
        /// Its bytes (row-major).
        bytes: Vec<u8>,
        /// Its shape.
        shape: Vec<u64>,
        /// Its dtype.
        dtype: DataType,
    },
    /// A scalar's 64 raw bits.
    Scalar(u64),
}

/// A callable and the arguments every run of it gets.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Its name in the report: "noop" or "gemm".
    pub name: String,
    /// What its graph is, for the report ("1000 independent no-op tasks").
    pub what: String,
    /// The callable.
    pub spec: CallableSpec,
    /// Its arguments.
    pub args: Vec<BenchArg>,
}

impl Workload {
    /// [`crate::noop_callable`] submitting `tasks` independent no-op tasks.
    pub fn noop(tasks: u64) -> Workload {
        Workload {
            name: "noop".into(),
            what: format!("{tasks} independent no-op tasks"),
            spec: crate::noop_callable(),
            args: vec![
                BenchArg::Tensor {
                    bytes: vec![0; 4],
                    shape: vec![1],
                    dtype: DataType::Uint32,
                },
                BenchArg::Scalar(tasks),
                BenchArg::Scalar(0),
            ],
        }
    }

    /// `examples/gemm` compiled with `compiler`, on the inputs of `simpler-examples` (a
    /// zeroed `C`).
    ///
    /// # Errors
    /// [`ReplayBenchError::Build`] when the example does not build;
    /// [`ReplayBenchError::NoInputs`] when `simpler-examples` lacks it.
    pub fn gemm(compiler: &Compiler) -> Result<Workload, ReplayBenchError> {
        let example = "gemm";
        let built = build_example(&repository_examples_dir().join(example), compiler).map_err(
            |source| ReplayBenchError::Build {
                example: example.into(),
                source: Box::new(source),
            },
        )?;
        let inputs =
            simpler_examples::inputs(example).ok_or_else(|| ReplayBenchError::NoInputs {
                example: example.into(),
            })?;
        let f32_tensor = |shape: Vec<u64>, data: &[f32]| BenchArg::Tensor {
            bytes: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            shape,
            dtype: DataType::Float32,
        };
        let mut args: Vec<BenchArg> = inputs
            .iter()
            .map(|a| f32_tensor(a.shape.clone(), &a.data))
            .collect();
        let c_shape = vec![inputs[0].shape[0], inputs[1].shape[1]];
        let c_len = c_shape.iter().product::<u64>() as usize;
        args.push(f32_tensor(c_shape, &vec![0.0; c_len]));
        Ok(Workload {
            name: example.into(),
            what: "examples/gemm, 512 chained tile tasks".into(),
            spec: built.bundle.into_spec(),
            args,
        })
    }
}

/// What the bench runs.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ReplayParams {
    /// Timed runs per variant and pass (after one warm-up run each); 0 counts as 1.
    pub runs: u32,
}

/// The figures of one variant on one workload (medians over the timed runs).
#[derive(Clone, Debug, Serialize)]
pub struct VariantFigures {
    /// The variant.
    pub variant: Variant,
    /// End to end per run (the host call to its return: submit to result), microseconds.
    pub e2e_us: f64,
    /// The host's cost per run for the graph itself, microseconds: `build_time +
    /// upload_time` for hbg, the excess of the `stage` span over tmr's for hbg replay, 0 for
    /// tmr (module doc).
    pub host_cost_us: f64,
    /// The run's `stage` host span (submit to the launch call), from the traced pass,
    /// microseconds.
    pub stage_us: f64,
    /// The run's `launch` host span (the launch call), from the traced pass, microseconds.
    pub launch_us: f64,
    /// The orchestration on the host per task ([`GraphReport::build_time`] ÷ tasks),
    /// microseconds; `None` for tmr (it orchestrates on the device), 0 for a replay.
    pub orch_us_per_task: Option<f64>,
    /// [`GraphReport::upload_time`] per run, microseconds; `None` for tmr, 0 for a replay.
    pub upload_us: Option<f64>,
}

/// One target and whether it was met.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    /// What the target says.
    pub what: String,
    /// The measured value (a share for the host-cost target, microseconds for the other).
    pub value: f64,
    /// The bound it is compared with.
    pub bound: f64,
    /// Whether `value` is within the bound.
    pub met: bool,
}

/// The two targets printed beside a workload's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Targets {
    /// hbg replay's host cost ÷ hbg's, at most [`REPLAY_HOST_SHARE_TARGET`].
    pub replay_host_share: Target,
    /// hbg replay's end-to-end time, below tmr's (`bound`).
    pub replay_beats_tmr: Target,
}

/// The figures of one workload.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadReport {
    /// The workload's name ("noop", "gemm").
    pub workload: String,
    /// What its graph is.
    pub what: String,
    /// Tasks per run (the hbg run's graph).
    pub tasks: u64,
    /// Bytes of the graph image.
    pub image_bytes: u64,
    /// One entry per [`Variant::ALL`], in that order.
    pub variants: Vec<VariantFigures>,
    /// hbg e2e ÷ hbg replay e2e.
    pub replay_speedup: f64,
    /// The targets.
    pub targets: Targets,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    /// What was run.
    pub params: ReplayParams,
    /// AICore cores of the worker's chip.
    pub cores: u32,
    /// Its AICPU threads.
    pub aicpu_threads: u32,
    /// Host CPUs.
    pub host_cpus: usize,
    /// One per workload, in the order given.
    pub workloads: Vec<WorkloadReport>,
}

/// Borrowed run arguments over `values`.
pub(crate) fn host_args(values: &mut [BenchArg]) -> Vec<HostArg<'_>> {
    values
        .iter_mut()
        .map(|a| match a {
            BenchArg::Tensor {
                bytes,
                shape,
                dtype,
            } => HostArg::Tensor(HostTensor {
                bytes,
                shape: shape.clone(),
                dtype: *dtype,
            }),
            BenchArg::Scalar(v) => HostArg::Scalar(*v),
        })
        .collect()
}

/// A registered workload and its recording.
struct Registered<'w> {
    worker: &'w ChipWorker,
    id: CallableId,
    recording: RecordedRun,
}

impl Registered<'_> {
    /// One run of `variant` on `args` under `config` (its runtime is set here): the wall
    /// time of the call and its report.
    fn run(
        &self,
        variant: Variant,
        args: &mut [BenchArg],
        config: &CallConfig,
    ) -> Result<(Duration, RunReport), HostError> {
        let runtime = match variant {
            Variant::Tmr => Runtime::TensormapAndRingbuffer,
            Variant::Hbg | Variant::HbgReplay => Runtime::HostBuildGraph,
        };
        let config = CallConfig {
            runtime: Some(runtime),
            ..*config
        };
        let mut args = host_args(args);
        let start = Instant::now();
        let report = match variant {
            Variant::HbgReplay => self.worker.replay(&self.recording, &mut args, &config)?,
            _ => self.worker.run_with(self.id, &mut args, &config)?,
        };
        Ok((start.elapsed(), report))
    }
}

/// The run's host span `name`, microseconds (0 for an untraced run, or one without it).
fn span_us(report: &RunReport, name: &str) -> f64 {
    let Some(trace) = &report.trace else {
        return 0.0;
    };
    let spans = trace.model().processes.iter().flat_map(|p| &p.host_spans);
    spans
        .filter(|s| s.epoch == Some(report.epoch) && s.name == name)
        .map(|s| (s.end_ns - s.start_ns) as f64 / 1e3)
        .sum()
}

/// The samples of one variant.
#[derive(Default)]
struct Samples {
    e2e_us: Vec<f64>,
    stage_us: Vec<f64>,
    launch_us: Vec<f64>,
    build_us: Vec<f64>,
    upload_us: Vec<f64>,
    graph: Option<GraphReport>,
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Measures `workload` on `worker`: records it, warms every variant up, then `runs` timed
/// runs of each variant interleaved (untraced), then as many traced at level tasks for the
/// host spans.
fn measure_workload(
    worker: &ChipWorker,
    workload: &Workload,
    runs: u32,
) -> Result<WorkloadReport, ReplayBenchError> {
    let id = worker.register(&workload.spec)?;
    let mut recorded_args = workload.args.clone();
    let (recording, _) = worker.record(
        id,
        &mut host_args(&mut recorded_args),
        &CallConfig::default(),
    )?;
    let reg = Registered {
        worker,
        id,
        recording,
    };
    let traced = CallConfig {
        trace_level: TraceLevel::Tasks,
        ..CallConfig::default()
    };
    let mut samples: Vec<Samples> = Variant::ALL.iter().map(|_| Samples::default()).collect();
    let mut last_outputs: Vec<Vec<BenchArg>> = Vec::new();
    for (pass, config) in [CallConfig::default(), traced].iter().enumerate() {
        for i in 0..=runs {
            for (v, s) in Variant::ALL.into_iter().zip(samples.iter_mut()) {
                let mut args = workload.args.clone();
                let (wall, report) = reg.run(v, &mut args, config)?;
                if i == 0 {
                    continue;
                }
                if pass == 0 {
                    s.e2e_us.push(us(wall));
                    if let Some(g) = &report.graph {
                        s.build_us.push(us(g.build_time));
                        s.upload_us.push(us(g.upload_time));
                        s.graph = Some(*g);
                    }
                    if i == runs {
                        last_outputs.push(args);
                    }
                } else {
                    s.stage_us.push(span_us(&report, "stage"));
                    s.launch_us.push(span_us(&report, "launch"));
                }
            }
        }
    }
    worker.unregister(id)?;
    for (v, out) in Variant::ALL.into_iter().zip(&last_outputs).skip(1) {
        if *out != last_outputs[0] {
            return Err(ReplayBenchError::Mismatch {
                workload: workload.name.clone(),
                variant: v,
            });
        }
    }
    let hbg_graph = samples[1].graph;
    let tasks = hbg_graph.map_or(0, |g| u64::from(g.tasks));
    let mut figures: Vec<VariantFigures> = Variant::ALL
        .into_iter()
        .zip(samples)
        .map(|(variant, s)| {
            let has_graph = s.graph.is_some();
            let build = has_graph.then(|| median(s.build_us));
            let upload = has_graph.then(|| median(s.upload_us));
            let stage = median(s.stage_us);
            let host_cost = match variant {
                Variant::Hbg => build.unwrap_or(0.0) + upload.unwrap_or(0.0),
                // Set below from tmr's stage.
                Variant::HbgReplay | Variant::Tmr => 0.0,
            };
            VariantFigures {
                variant,
                e2e_us: median(s.e2e_us),
                host_cost_us: host_cost,
                stage_us: stage,
                launch_us: median(s.launch_us),
                orch_us_per_task: build.map(|b| if tasks == 0 { 0.0 } else { b / tasks as f64 }),
                upload_us: upload,
            }
        })
        .collect();
    // A replay's graph work: what its stage span adds over tmr's.
    figures[2].host_cost_us = (figures[2].stage_us - figures[0].stage_us).max(0.0);
    let (tmr, hbg, replay) = (&figures[0], &figures[1], &figures[2]);
    let share = if hbg.host_cost_us > 0.0 {
        replay.host_cost_us / hbg.host_cost_us
    } else {
        f64::INFINITY
    };
    let targets = Targets {
        replay_host_share: Target {
            what: "replay host cost <= 10% of an HBG build's".into(),
            value: share,
            bound: REPLAY_HOST_SHARE_TARGET,
            met: share <= REPLAY_HOST_SHARE_TARGET,
        },
        replay_beats_tmr: Target {
            what: "HBG replay end-to-end < TMR end-to-end".into(),
            value: replay.e2e_us,
            bound: tmr.e2e_us,
            met: replay.e2e_us < tmr.e2e_us,
        },
    };
    Ok(WorkloadReport {
        workload: workload.name.clone(),
        what: workload.what.clone(),
        tasks,
        image_bytes: hbg_graph.map_or(0, |g| g.image_bytes),
        replay_speedup: hbg.e2e_us / replay.e2e_us,
        variants: figures,
        targets,
    })
}

/// Runs every workload on one warm worker (8 clusters, 24 cores, 4 AICPU threads, the
/// executor `SIMPLER_SIM_EXECUTOR` names) under each [`Variant`], and reports the figures.
///
/// # Errors
/// [`ReplayBenchError::Host`] for the worker's or a run's error,
/// [`ReplayBenchError::Mismatch`] when a variant's outputs differ from tmr's.
pub fn replay_bench(
    params: ReplayParams,
    workloads: &[Workload],
) -> Result<ReplayReport, ReplayBenchError> {
    let runs = params.runs.max(1);
    let (worker, noop_id) = crate::noop_worker(ExecutorKind::from_env(), CLUSTERS, AICPU_THREADS)?;
    // The worker's own no-op registration is not a workload's.
    worker.unregister(noop_id)?;
    let reports = workloads
        .iter()
        .map(|w| measure_workload(&worker, w, runs))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ReplayReport {
        params: ReplayParams { runs },
        cores: CLUSTERS * 3,
        aicpu_threads: AICPU_THREADS,
        host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        workloads: reports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tiny_noop_graph_reports_every_variant() {
        let report = replay_bench(ReplayParams { runs: 1 }, &[Workload::noop(8)]).unwrap();
        assert_eq!(report.params.runs, 1);
        let w = &report.workloads[0];
        assert_eq!((w.workload.as_str(), w.tasks), ("noop", 8));
        assert!(w.image_bytes > 0, "{w:?}");
        let variants: Vec<Variant> = w.variants.iter().map(|v| v.variant).collect();
        assert_eq!(variants, Variant::ALL);
        let (tmr, hbg, replay) = (&w.variants[0], &w.variants[1], &w.variants[2]);
        assert!(tmr.orch_us_per_task.is_none() && tmr.upload_us.is_none());
        assert!(hbg.orch_us_per_task.unwrap() > 0.0, "{hbg:?}");
        assert_eq!(replay.orch_us_per_task, Some(0.0));
        assert_eq!(replay.upload_us, Some(0.0));
        for v in &w.variants {
            assert!(
                v.e2e_us > 0.0 && v.stage_us > 0.0 && v.launch_us > 0.0,
                "{v:?}"
            );
        }
        assert_eq!(tmr.host_cost_us, 0.0);
        assert_eq!(
            replay.host_cost_us,
            (replay.stage_us - tmr.stage_us).max(0.0)
        );
        // An hbg run's stage span holds its build and upload.
        let build_and_upload = hbg.orch_us_per_task.unwrap() * 8.0 + hbg.upload_us.unwrap();
        assert!(
            (hbg.host_cost_us - build_and_upload).abs() < 1e-6,
            "{hbg:?}"
        );
        assert_eq!(w.targets.replay_host_share.bound, 0.10);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["workloads"][0]["variants"][2]["variant"], "hbg_replay");
    }
}
