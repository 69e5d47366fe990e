//! `simpler bench`: runs the overhead workloads of `simpler-bench` (no-op task graphs on 24
//! and 72 simulated cores) and prints their medians as a table or as JSON; with `--balance`,
//! the scheduler-balance sweep (makespan ÷ task time per scheduler and cluster count). It
//! reports numbers; it never judges them. With `--executor`, [`executor`] measures the sim
//! executors instead; with `--l3`, [`l3`] the level-3 engine's overhead sweep; with
//! `--trace-level L`, what tracing at level L costs per run and per task ([`trace_cost`]);
//! with `--trace-write`, how long writing a trace file takes in each format ([`trace_write`]);
//! with `--replay`, [`replay`] what `host_build_graph` and its recordings buy; with
//! `--workload decoder_layer [--batch B...] [--context C...] [--steps N] [--example DIR]`,
//! [`decoder`] the decode step of `examples/decoder_layer` (device time, the same graph with
//! empty kernels, the runtime's time per task and the share outside kernels, from the empty
//! step and from a traced step's critical path); with `--peer`, [`peer`] the executor bench's
//! independent and chain no-op shapes beside the same shapes on rayon.

pub(crate) mod decoder;
pub(crate) mod executor;
pub(crate) mod l3;
pub(crate) mod peer;
pub(crate) mod replay;

pub(crate) use executor::ExecutorChoice;

use std::time::Duration;

use serde::Serialize;
use simpler_bench::balance::{
    sweep, BalancePoint, FULL_CLUSTERS, FULL_SCHEDULERS, QUICK_CLUSTERS, QUICK_SCHEDULERS,
};
use simpler_bench::{empty_run_us, suite, Measurement};

#[derive(Serialize)]
struct Report {
    tasks: u64,
    runs: u32,
    host_cpus: usize,
    measurements: Vec<Measurement>,
    /// Median round trip of an empty run on 24 cores, microseconds.
    empty_run_us: f64,
    /// 72-core tasks/s divided by 24-core tasks/s, per graph.
    scaling_72_over_24: Vec<(String, f64)>,
}

/// Refuses `--tasks 0` and `--runs 0`, which every measurement here does.
fn at_least_one(tasks: u64, runs: u32) -> Result<(), Box<dyn std::error::Error>> {
    if tasks == 0 || runs == 0 {
        return Err("--tasks and --runs must be at least 1".into());
    }
    Ok(())
}

/// Runs the suite and prints it.
pub(crate) fn command(tasks: u64, runs: u32, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    at_least_one(tasks, runs)?;
    let measurements = suite(tasks, runs)?;
    let empty = empty_run_us(runs.max(20))?;
    let scaling = measurements
        .iter()
        .filter(|m| m.cores == 24)
        .filter_map(|small| {
            let big = measurements
                .iter()
                .find(|m| m.cores == 72 && m.graph == small.graph)?;
            Some((
                format!("{:?}", small.graph).to_lowercase(),
                big.tasks_per_s / small.tasks_per_s,
            ))
        })
        .collect();
    let report = Report {
        tasks,
        runs,
        host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        measurements,
        empty_run_us: empty,
        scaling_72_over_24: scaling,
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    outln!(
        "simpler bench: {} no-op tasks per run, median of {} runs, {} host CPUs",
        report.tasks,
        report.runs,
        report.host_cpus
    );
    outln!(
        "{:<12} {:>6} {:>6} {:>12} {:>16} {:>14}",
        "graph",
        "cores",
        "aicpu",
        "run (ms)",
        "submit (us/task)",
        "tasks/s"
    );
    for m in &report.measurements {
        outln!(
            "{:<12} {:>6} {:>6} {:>12.3} {:>16.3} {:>14.0}",
            format!("{:?}", m.graph).to_lowercase(),
            m.cores,
            m.aicpu_threads,
            m.run_us / 1e3,
            m.submit_us_per_task,
            m.tasks_per_s
        );
    }
    outln!(
        "empty run round trip (24 cores): {:.1} us",
        report.empty_run_us
    );
    for (graph, ratio) in &report.scaling_72_over_24 {
        outln!(
            "72-core / 24-core throughput, {graph}: {:.0}%",
            ratio * 100.0
        );
    }
    Ok(())
}

/// `simpler bench --trace-level LEVEL`: the cost of tracing at `level` beside its target.
pub(crate) fn trace_cost(
    level: simpler_host::trace_model::TraceLevel,
    tasks: u64,
    runs: u32,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    at_least_one(tasks, runs)?;
    let costs = simpler_bench::trace_cost(level, tasks, runs)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&costs)?);
        return Ok(());
    }
    outln!(
        "simpler bench --trace-level {level}: {tasks} no-op tasks per run, median of {runs} interleaved runs each"
    );
    outln!(
        "{:<12} {:>6} {:>11} {:>12} {:>14} {:>15} {:>12} {:>17} {:>16} {:>9}",
        "graph",
        "cores",
        "off (ms)",
        "traced (ms)",
        "cost/run (us)",
        "cost/task (us)",
        "target (us)",
        "capture/task (us)",
        "decode/task (us)",
        "events"
    );
    for c in &costs {
        outln!(
            "{:<12} {:>6} {:>11.3} {:>12.3} {:>14.1} {:>15.3} {:>12} {:>17.3} {:>16.3} {:>9}",
            format!("{:?}", c.graph).to_lowercase(),
            c.cores,
            c.untraced_run_us / 1e3,
            c.traced_run_us / 1e3,
            c.cost_us_per_run,
            c.cost_us_per_task,
            c.target_us_per_task
                .map_or("-".to_string(), |t| format!("<= {t}")),
            c.capture_us_per_task,
            c.decode_us_per_task,
            c.records,
        );
    }
    outln!(
        "cost: the traced run's wall time less the untraced one's (medians); capture: copying the \
         records back at the run's end (part of cost); decode: building the model on first use \
         (paid by whoever reads the trace, not by the run)"
    );
    Ok(())
}

/// `simpler bench --trace-write`: the time to write the synthetic trace of `tasks` tasks in
/// each format (median of `runs`), per task, the file size, and the target beside them.
pub(crate) fn trace_write(
    tasks: u64,
    runs: u32,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    at_least_one(tasks, runs)?;
    let figures = simpler_bench::trace_write(tasks, runs)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&figures)?);
        return Ok(());
    }
    let subtasks = figures.first().map_or(0, |f| f.subtasks);
    outln!(
        "simpler bench --trace-write: synthetic trace of {tasks} tasks ({subtasks} subtasks, 72 cores) written to memory, median of {runs} writes"
    );
    outln!(
        "{:<10} {:>12} {:>14} {:>10} {:>14}",
        "format",
        "write (ms)",
        "per task (us)",
        "size (MiB)",
        "target (ms)"
    );
    for f in &figures {
        outln!(
            "{:<10} {:>12.1} {:>14.3} {:>10.1} {:>14}",
            f.format,
            f.median_ms,
            f.us_per_task,
            f.mib,
            format!("<= {:.0}", f.target_ms),
        );
    }
    Ok(())
}

#[derive(Serialize)]
struct BalanceReport {
    task_ms: u64,
    runs: u32,
    host_cpus: usize,
    points: Vec<BalancePoint>,
}

/// Runs the balance sweep (the full one with `full`) and prints it: one line per point,
/// then the worst makespan ÷ task time as a schedulers × clusters grid.
pub(crate) fn balance(
    full: bool,
    task_ms: u64,
    runs: u32,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    if task_ms == 0 || runs == 0 {
        return Err("--task-ms and --runs must be at least 1".into());
    }
    let (schedulers, clusters): (&[u32], &[u32]) = if full {
        (&FULL_SCHEDULERS, &FULL_CLUSTERS)
    } else {
        (&QUICK_SCHEDULERS, &QUICK_CLUSTERS)
    };
    let points = sweep(schedulers, clusters, Duration::from_millis(task_ms), runs)?;
    let report = BalanceReport {
        task_ms,
        runs,
        host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        points,
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    outln!(
        "simpler bench --balance: one {task_ms} ms task per core, {runs} runs per point, {} host CPUs",
        report.host_cpus
    );
    outln!("makespan = first kernel start to last kernel end; ratio = makespan / task time (target <= 1.1)");
    outln!(
        "{:>10} {:>8} {:>6} {:>16} {:>15} {:>12} {:>11}",
        "schedulers",
        "clusters",
        "tasks",
        "median span (ms)",
        "worst span (ms)",
        "median ratio",
        "worst ratio"
    );
    for p in &report.points {
        outln!(
            "{:>10} {:>8} {:>6} {:>16.1} {:>15.1} {:>12.3} {:>11.3}",
            p.schedulers,
            p.clusters,
            p.tasks,
            p.median_makespan_ms,
            p.worst_makespan_ms,
            p.median_ratio,
            p.worst_ratio
        );
    }
    outln!("worst ratio, schedulers (rows) x clusters (columns):");
    out!("{:>4}", "");
    for c in clusters {
        out!(" {c:>5}");
    }
    outln!();
    for &s in schedulers {
        out!("{s:>4}");
        for &c in clusters {
            match report
                .points
                .iter()
                .find(|p| p.schedulers == s && p.clusters == c)
            {
                Some(p) => out!(" {:>5.2}", p.worst_ratio),
                None => out!(" {:>5}", "-"),
            }
        }
        outln!();
    }
    if let Some(worst) = report
        .points
        .iter()
        .max_by(|a, b| a.worst_ratio.total_cmp(&b.worst_ratio))
    {
        outln!(
            "worst of the sweep: {:.3} ({} schedulers, {} clusters)",
            worst.worst_ratio,
            worst.schedulers,
            worst.clusters
        );
    }
    Ok(())
}
