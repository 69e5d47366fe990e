//! What tracing costs (`docs/tracing.md` §4, Costs): each no-op workload run untraced and
//! at one trace level on one warm worker, interleaved run by run so drift of the host
//! affects both; the difference of the medians per run and per task, beside the level's
//! target. Beside it, two figures measured directly: the end-of-run capture (the "trace read"
//! host span: copying the records back) and the decoding of the records into the model on
//! first use, which a run that is never looked at does not pay. Reported, never asserted.

use std::time::Instant;

use serde::Serialize;
use simpler_device::sim::ExecutorKind;
use simpler_host::trace_model::TraceLevel;
use simpler_host::{CallConfig, HostError};

use crate::{median, noop_worker, run_noop, Graph};

/// The cost of one level on one workload.
#[derive(Clone, Debug, Serialize)]
pub struct TraceCost {
    /// The level measured.
    pub level: TraceLevel,
    /// The graph.
    pub graph: Graph,
    /// AICore cores of the chip.
    pub cores: u32,
    /// Tasks per run.
    pub tasks: u64,
    /// Median run wall time untraced, microseconds.
    pub untraced_run_us: f64,
    /// Median run wall time at `level`, microseconds.
    pub traced_run_us: f64,
    /// (traced − untraced) per run, microseconds.
    pub cost_us_per_run: f64,
    /// (traced − untraced) per task, microseconds.
    pub cost_us_per_task: f64,
    /// The level's target per task, microseconds (`None`: no target for it).
    pub target_us_per_task: Option<f64>,
    /// Median end-of-run capture (the "trace read" span) per task, microseconds: part of
    /// `cost_us_per_task`.
    pub capture_us_per_task: f64,
    /// Median decoding of the records into the model on first use, per task,
    /// microseconds: paid by whoever reads the trace, not by the run.
    pub decode_us_per_task: f64,
    /// Median events decoded per traced run (tasks, subtasks, edges, AICPU spans, counter
    /// samples).
    pub records: u64,
}

/// The per-task target of `level`: 0.3 µs for tasks, 1 µs for orchestrator, none between
/// (off: 0, "within noise").
pub fn target_us_per_task(level: TraceLevel) -> Option<f64> {
    match level {
        TraceLevel::Off => Some(0.0),
        TraceLevel::Tasks => Some(0.3),
        TraceLevel::Orchestrator => Some(1.0),
        TraceLevel::Dispatch | TraceLevel::Scheduler => None,
    }
}

/// Trace buffer records for a run of `tasks` tasks: room for every event of the
/// orchestrator's buffer at the highest level (about 8 per task), so the figure is the cost
/// of recording, not of dropping; at most 2^20 records (40 MiB) a buffer.
fn records_for(tasks: u64) -> u32 {
    (tasks.saturating_mul(8).saturating_add(1024)).min(1 << 20) as u32
}

/// Measures `level` against untraced runs on the suite's 24-core chip (8 clusters, 4 AICPU
/// threads) for the independent and the chain graph of `tasks` tasks, `runs` runs each, on
/// one worker per graph warmed up at both settings first (both pipeline slots hold their
/// trace area before anything is measured).
///
/// # Errors
/// The first [`HostError`].
pub fn trace_cost(level: TraceLevel, tasks: u64, runs: u32) -> Result<Vec<TraceCost>, HostError> {
    let (clusters, threads) = (8, 4);
    let traced = CallConfig {
        trace_level: level,
        trace_buffer_records: records_for(tasks),
        ..CallConfig::default()
    };
    let untraced = CallConfig::default();
    let per_task = |us: f64| if tasks == 0 { 0.0 } else { us / tasks as f64 };
    let mut out = Vec::new();
    for graph in [Graph::Independent, Graph::Chain] {
        let (worker, id) = noop_worker(ExecutorKind::from_env(), clusters, threads)?;
        for _ in 0..2 {
            run_noop(&worker, id, graph, tasks, &untraced)?;
            run_noop(&worker, id, graph, tasks, &traced)?;
        }
        let (mut off, mut on) = (Vec::new(), Vec::new());
        let (mut capture, mut decode, mut records) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            off.push(
                run_noop(&worker, id, graph, tasks, &untraced)?
                    .0
                    .as_secs_f64()
                    * 1e6,
            );
            let (wall, report) = run_noop(&worker, id, graph, tasks, &traced)?;
            on.push(wall.as_secs_f64() * 1e6);
            if let Some(trace) = report.trace {
                let started = Instant::now();
                let model = trace.model();
                decode.push(started.elapsed().as_secs_f64() * 1e6);
                let p = &model.processes[0];
                let read = p.host_spans.iter().find(|s| s.name == "trace read");
                capture.push(read.map_or(0.0, |s| (s.end_ns - s.start_ns) as f64 / 1e3));
                let events = p.runs.iter().map(|r| {
                    r.tasks.len()
                        + r.subtasks.len()
                        + r.edges.len()
                        + r.aicpu.len()
                        + r.counters.len()
                });
                records.push(events.sum::<usize>() as f64);
            }
        }
        let (untraced_us, traced_us) = (median(off), median(on));
        let cost = traced_us - untraced_us;
        let or_zero = |v: Vec<f64>| if v.is_empty() { 0.0 } else { median(v) };
        out.push(TraceCost {
            level,
            graph,
            cores: clusters * 3,
            tasks,
            untraced_run_us: untraced_us,
            traced_run_us: traced_us,
            cost_us_per_run: cost,
            cost_us_per_task: per_task(cost),
            target_us_per_task: target_us_per_task(level),
            capture_us_per_task: per_task(or_zero(capture)),
            decode_us_per_task: per_task(or_zero(decode)),
            records: or_zero(records) as u64,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_buffer_sizes() {
        assert_eq!(target_us_per_task(TraceLevel::Tasks), Some(0.3));
        assert_eq!(target_us_per_task(TraceLevel::Orchestrator), Some(1.0));
        assert_eq!(target_us_per_task(TraceLevel::Dispatch), None);
        assert_eq!(records_for(100), 1824);
        assert_eq!(records_for(u64::MAX), 1 << 20);
    }
}
