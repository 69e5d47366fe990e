//! What tracing costs (`docs/tracing.md`, costs): each no-op workload of the suite, run
//! untraced and at one trace level on the same worker configuration, interleaved run by run
//! so drift of the host affects both; the difference of the medians per run and per task,
//! beside the level's target. Reported, never asserted.

use serde::Serialize;
use simpler_device::sim::ExecutorKind;
use simpler_host::trace_model::TraceLevel;
use simpler_host::{CallConfig, HostError};

use crate::{measure_samples_with, median, Graph};

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
/// threads) for the independent and the chain graph of `tasks` tasks, `runs` runs each.
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
    let mut out = Vec::new();
    for graph in [Graph::Independent, Graph::Chain] {
        let (mut off, mut on) = (Vec::new(), Vec::new());
        // Interleaved in rounds of one run each (after each round's warm-up).
        for _ in 0..runs {
            let one = |config: &CallConfig| {
                measure_samples_with(
                    ExecutorKind::from_env(),
                    graph,
                    tasks,
                    1,
                    clusters,
                    threads,
                    config,
                )
            };
            off.extend(one(&CallConfig::default())?.run_us);
            on.extend(one(&traced)?.run_us);
        }
        let (untraced, traced_us) = (median(off), median(on));
        let cost = traced_us - untraced;
        out.push(TraceCost {
            level,
            graph,
            cores: clusters * 3,
            tasks,
            untraced_run_us: untraced,
            traced_run_us: traced_us,
            cost_us_per_run: cost,
            cost_us_per_task: if tasks == 0 { 0.0 } else { cost / tasks as f64 },
            target_us_per_task: target_us_per_task(level),
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
