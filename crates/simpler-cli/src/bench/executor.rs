//! `simpler bench --executor <pool|threads|both>`: measures the sim executors with
//! `simpler_bench::executor` and prints every figure (median / p99, round trips also as a
//! multiple of the park/unpark floor) beside its target, the two executors side by side with
//! the pool's gain over the old one; or the whole report as JSON. It reports figures; the
//! targets are printed, never enforced.

use std::time::Duration;

use simpler_bench::executor::{
    measure_report, ExecutorBenchError, ExecutorFigures, ExecutorParams, ExecutorReport, Stats,
    Target, TARGETS,
};
use simpler_device::sim::ExecutorKind;

/// Which executors `--executor` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExecutorChoice {
    /// Fibers on the process's shared pool of worker threads.
    Pool,
    /// One OS thread per simulated core and AICPU thread.
    Threads,
    /// Both, one after the other in the same process (threads first), side by side.
    Both,
}

impl ExecutorChoice {
    fn kinds(self) -> &'static [ExecutorKind] {
        match self {
            ExecutorChoice::Pool => &[ExecutorKind::Pool],
            ExecutorChoice::Threads => &[ExecutorKind::ThreadPerCore],
            ExecutorChoice::Both => &[ExecutorKind::ThreadPerCore, ExecutorKind::Pool],
        }
    }
}

/// Which way a figure is better.
#[derive(Clone, Copy)]
enum Better {
    Lower,
    Higher,
}

/// One figure of one executor, as printed.
enum Value {
    Stats(Stats),
    Single(f64),
    Text(String),
    Missing,
}

impl Value {
    fn median(&self) -> Option<f64> {
        match self {
            Value::Stats(s) => Some(s.median),
            Value::Single(v) => Some(*v),
            Value::Text(_) | Value::Missing => None,
        }
    }
}

/// One line of the table.
struct Row {
    label: String,
    unit: &'static str,
    /// Printed value = figure × scale (100 for a ratio shown in percent).
    scale: f64,
    better: Better,
    target: Option<Target>,
    /// A round trip: printed also as a multiple of the floor.
    round_trip: bool,
    value: Box<dyn Fn(&ExecutorFigures) -> Value>,
}

fn row(
    label: &str,
    unit: &'static str,
    better: Better,
    target: Option<Target>,
    value: impl Fn(&ExecutorFigures) -> Value + 'static,
) -> Row {
    Row {
        label: label.into(),
        unit,
        scale: 1.0,
        better,
        target,
        round_trip: false,
        value: Box::new(value),
    }
}

fn rows(chips: u32) -> Vec<Row> {
    use Better::{Higher, Lower};
    let t = &TARGETS;
    let pct = |mut r: Row| {
        r.scale = 100.0;
        r
    };
    let rt = |mut r: Row| {
        r.round_trip = true;
        r
    };
    let mut v = vec![
        rt(row(
            "empty-run round trip",
            "us",
            Lower,
            Some(t.empty_run_us),
            |f| Value::Stats(f.empty_run_us),
        )),
        rt(row(
            "1-task run round trip",
            "us",
            Lower,
            Some(t.one_task_run_us),
            |f| Value::Stats(f.one_task_run_us),
        )),
        row("short runs, depth 1", "runs/s", Higher, None, |f| {
            Value::Stats(f.short_runs.depth1_runs_per_s)
        }),
        row("short runs, depth 2", "runs/s", Higher, None, |f| {
            Value::Stats(f.short_runs.depth2_runs_per_s)
        }),
        row(
            "short runs, depth 2 / depth 1",
            "x",
            Higher,
            Some(t.depth2_over_depth1),
            |f| Value::Single(f.short_runs.depth2_over_depth1),
        ),
        row(
            "independent, 24 cores",
            "tasks/s",
            Higher,
            Some(t.independent_24_tasks_per_s),
            |f| Value::Stats(f.throughput.independent_24_tasks_per_s),
        ),
        row("independent, 72 cores", "tasks/s", Higher, None, |f| {
            Value::Stats(f.throughput.independent_72_tasks_per_s)
        }),
        pct(row(
            "independent, 72 / 24 cores",
            "%",
            Higher,
            Some(t.scaling_72_over_24),
            |f| Value::Single(f.throughput.independent_72_over_24),
        )),
        row(
            "chain, 24 cores",
            "tasks/s",
            Higher,
            Some(t.chain_24_tasks_per_s),
            |f| Value::Stats(f.throughput.chain_24_tasks_per_s),
        ),
        row("chain, 72 cores", "tasks/s", Higher, None, |f| {
            Value::Stats(f.throughput.chain_72_tasks_per_s)
        }),
        pct(row(
            "chain, 72 / 24 cores",
            "%",
            Higher,
            Some(t.scaling_72_over_24),
            |f| Value::Single(f.throughput.chain_72_over_24),
        )),
        row(
            "submit cost",
            "us/task",
            Lower,
            Some(t.submit_us_per_task),
            |f| Value::Stats(f.throughput.submit_us_per_task),
        ),
        row(
            &format!("{chips} chips: start, each"),
            "ms",
            Lower,
            None,
            |f| Value::Stats(f.chips.start_ms),
        ),
        row(
            &format!("{chips} chips: OS threads"),
            "before>after",
            Lower,
            None,
            |f| {
                Value::Text(format!(
                    "{} > {}",
                    f.chips.threads_before, f.chips.threads_after
                ))
            },
        ),
        row(
            &format!("{chips} chips: threads added"),
            "per chip",
            Lower,
            None,
            |f| Value::Single(f.chips.threads_per_chip),
        ),
        rt(row(
            &format!("{chips} chips at once: round trip"),
            "us",
            Lower,
            None,
            |f| Value::Stats(f.chips.concurrent_empty_run_us),
        )),
        row(
            &format!("{chips} chips at once / one chip"),
            "x",
            Lower,
            Some(t.chips_over_one_chip),
            |f| Value::Single(f.chips_over_one_chip),
        ),
        row(
            "idle worker: CPU time",
            "ms",
            Lower,
            Some(t.idle_cpu_ms),
            |f| {
                f.idle
                    .as_ref()
                    .map_or(Value::Missing, |i| Value::Single(i.cpu_ms))
            },
        ),
        row("idle worker: context switches", "/s", Lower, None, |f| {
            f.idle
                .as_ref()
                .map_or(Value::Missing, |i| Value::Single(i.context_switches_per_s))
        }),
    ];
    for (i, n) in simpler_bench::executor::RECORD_READ_SUCCESSORS
        .into_iter()
        .enumerate()
    {
        let label = format!(
            "record read, successor {n} task{}",
            if n == 1 { "" } else { "s" }
        );
        v.push(rt(row(&label, "us", Lower, None, move |f| {
            f.record_read
                .points
                .get(i)
                .map_or(Value::Missing, |p| Value::Stats(p.us))
        })));
    }
    v.push(row(
        "record read, largest / smallest",
        "x",
        Lower,
        Some(t.record_read_largest_over_smallest),
        |f| Value::Single(f.record_read.largest_over_smallest),
    ));
    v
}

/// A figure in 3–4 significant digits, with k/M for large ones; `-` for none.
pub(crate) fn num(v: f64) -> String {
    let a = v.abs();
    match () {
        _ if !v.is_finite() => "-".into(),
        _ if a >= 1e6 => format!("{:.2}M", v / 1e6),
        _ if a >= 1e4 => format!("{:.1}k", v / 1e3),
        _ if a >= 100.0 => format!("{v:.0}"),
        _ if a >= 10.0 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    }
}

fn cell(r: &Row, v: &Value, floor_us: f64) -> String {
    let floor = |x: f64| {
        if r.round_trip {
            format!(" ({}x)", num(x / floor_us))
        } else {
            String::new()
        }
    };
    match v {
        Value::Stats(s) => format!(
            "{} / {}{}",
            num(s.median * r.scale),
            num(s.p99 * r.scale),
            floor(s.median)
        ),
        Value::Single(x) => format!("{}{}", num(x * r.scale), floor(*x)),
        Value::Text(t) => t.clone(),
        Value::Missing => "-".into(),
    }
}

/// The pool's gain over the old executor: threads ÷ pool where lower is better, pool ÷
/// threads where higher is.
fn gain(r: &Row, threads: &Value, pool: &Value) -> String {
    match (threads.median(), pool.median()) {
        (Some(t), Some(p)) => {
            let g = match r.better {
                Better::Lower => t / p,
                Better::Higher => p / t,
            };
            if g.is_finite() {
                format!("{}x", num(g))
            } else {
                "-".into()
            }
        }
        _ => "-".into(),
    }
}

fn met(r: &Row, v: &Value) -> &'static str {
    match (r.target, v.median()) {
        (Some(t), Some(m)) if t.met_by(m) => "yes",
        (Some(_), Some(_)) => "no",
        _ => "",
    }
}

fn print_table(report: &ExecutorReport, kinds: &[ExecutorKind]) {
    let p = &report.params;
    outln!(
        "simpler bench --executor: runs {}, {} tasks per throughput run, {} chips, idle {} s; \
         {} host CPUs, a pool of {} worker threads",
        p.runs,
        p.tasks,
        p.chips,
        p.idle.as_secs_f64(),
        report.host_cpus,
        report.pool_threads
    );
    outln!(
        "floor (park/unpark round trip of two bare threads): {} / {} us (median / p99); \
         round trips show (multiple of the floor)",
        num(report.floor_us.median),
        num(report.floor_us.p99)
    );
    let figures: Vec<&ExecutorFigures> =
        kinds.iter().map(|k| &report.executors[k.name()]).collect();
    let side_by_side = figures.len() == 2;
    if side_by_side {
        outln!("pool gain: threads / pool for times and counts, pool / threads for rates (above 1: the pool is better)");
    }
    let rows = rows(p.chips);
    let values: Vec<Vec<Value>> = rows
        .iter()
        .map(|r| figures.iter().map(|f| (r.value)(f)).collect())
        .collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .zip(&values)
        .map(|(r, vs)| {
            vs.iter()
                .map(|v| cell(r, v, report.floor_us.median))
                .collect()
        })
        .collect();
    let label_w = rows
        .iter()
        .map(|r| r.label.chars().count())
        .max()
        .unwrap_or(0);
    let unit_w = rows.iter().map(|r| r.unit.len()).max().unwrap_or(0).max(4);
    let col_w: Vec<usize> = (0..figures.len())
        .map(|i| {
            cells
                .iter()
                .map(|c| c[i].chars().count())
                .max()
                .unwrap_or(0)
                .max(figures[i].executor.len() + 16)
        })
        .collect();
    let mut header = format!("{:<label_w$}  {:<unit_w$}", "figure", "unit");
    for (f, w) in figures.iter().zip(&col_w) {
        header.push_str(&format!("  {:<w$}", format!("{} median / p99", f.executor)));
    }
    if side_by_side {
        header.push_str(&format!("  {:>9}", "pool gain"));
    }
    header.push_str(&format!("  {:<10}  met", "target"));
    if side_by_side {
        header.push_str(" (threads, pool)");
    }
    outln!("{header}");
    for ((r, vs), cs) in rows.iter().zip(&values).zip(&cells) {
        let mut line = format!("{:<label_w$}  {:<unit_w$}", r.label, r.unit);
        for (c, w) in cs.iter().zip(&col_w) {
            line.push_str(&format!("  {c:<w$}"));
        }
        if side_by_side {
            line.push_str(&format!("  {:>9}", gain(r, &vs[0], &vs[1])));
        }
        if let Some(t) = r.target {
            let mets: Vec<&str> = vs.iter().map(|v| met(r, v)).collect();
            line.push_str(&format!("  {:<10}  {}", t.text, mets.join(", ")));
        }
        outln!("{}", line.trim_end());
    }
}

/// Measures `choice` and prints the report.
///
/// # Errors
/// A worker's or a run's [`simpler_host::HostError`] as itself (so a refused configuration
/// keeps its exit code), any other failure of the bench as an [`ExecutorBenchError`].
pub(crate) fn command(
    choice: ExecutorChoice,
    runs: u32,
    tasks: u64,
    idle_secs: u64,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let params = ExecutorParams {
        runs,
        tasks,
        idle: Duration::from_secs(idle_secs),
        ..ExecutorParams::default()
    };
    let kinds = choice.kinds();
    let report = measure_report(kinds, &params).map_err(|e| -> Box<dyn std::error::Error> {
        match e {
            ExecutorBenchError::Host(h) => Box::new(h),
            other => Box::new(other),
        }
    })?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report, kinds);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_three_or_four_digits() {
        assert_eq!(num(1_234_567.0), "1.23M");
        assert_eq!(num(45_678.0), "45.7k");
        assert_eq!(num(530.2), "530");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(0.123), "0.12");
        assert_eq!(num(f64::INFINITY), "-");
    }

    #[test]
    fn the_gain_reads_the_way_the_figure_is_better() {
        let rs = rows(8);
        let time = rs
            .iter()
            .find(|r| r.label == "empty-run round trip")
            .unwrap();
        let rate = rs.iter().find(|r| r.label == "chain, 24 cores").unwrap();
        let (slow, fast) = (Value::Single(40.0), Value::Single(10.0));
        assert_eq!(gain(time, &slow, &fast), "4.00x");
        assert_eq!(gain(rate, &fast, &slow), "4.00x");
        assert_eq!(gain(time, &Value::Missing, &fast), "-");
        assert_eq!(gain(time, &slow, &Value::Single(0.0)), "-");
        assert!(time.round_trip && !rate.round_trip);
        assert!(rs
            .iter()
            .filter(|r| r.label.starts_with("record read, successor"))
            .all(|r| r.round_trip));
        assert_eq!(met(time, &fast), "yes");
        assert_eq!(met(time, &slow), "no");
        let untargeted = rs.iter().find(|r| r.label == "chain, 72 cores").unwrap();
        assert_eq!(met(untargeted, &slow), "");
        assert_eq!(met(rate, &slow), "no");
        let ratio = rs
            .iter()
            .find(|r| r.label == "record read, largest / smallest")
            .unwrap();
        assert!(!ratio.round_trip);
    }
}
