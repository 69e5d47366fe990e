//! `simpler bench --l3`: the level-3 overhead sweep of `simpler_bench::l3` — per k the
//! median / p90 µs of one `Worker::run`, then each row's least-squares line beside its
//! target, the L2 empty-run floor and the upstream figure; or the whole report as JSON. It
//! reports figures; the targets are printed, never enforced.
//!
//! The chip children of the process row run this same executable (`simpler chip-child`,
//! a hidden subcommand), so the sweep needs no other program installed.

use std::ffi::OsString;

use simpler_bench::l3::{
    callable::noop_chip_callable, measure_l3, runs_for, L3BenchError, L3Params, L3Report,
    LineTarget, Met, RowKind, K_SWEEP, PROCESS_OVER_THREAD_TARGET, SLOPE_OVER_HALF_FLOOR_US,
    TAIL_TARGET,
};
use simpler_worker::{ChildProgram, WorkerError};

use super::executor::num;

/// The hidden subcommand chip children run.
pub(crate) const CHIP_CHILD_COMMAND: &str = "chip-child";

/// This executable serving chips (`simpler chip-child`); `None` (the engine's own search
/// for `simpler-child`) when the executable cannot be named.
fn chip_program() -> Option<ChildProgram> {
    let exe = std::env::current_exe().ok()?;
    Some(ChildProgram {
        program: exe,
        args: vec![OsString::from(CHIP_CHILD_COMMAND)],
        env: Vec::new(),
    })
}

/// The sweep's ks up to `max_k`.
fn ks_up_to(max_k: u64) -> Vec<u64> {
    K_SWEEP.into_iter().filter(|&k| k <= max_k).collect()
}

fn row_label(row: RowKind) -> &'static str {
    match row {
        RowKind::ChipThread => "chip, thread",
        RowKind::ChipProcess => "chip, process",
        RowKind::SubThread => "sub, thread",
    }
}

fn target_text(t: &LineTarget) -> String {
    format!("<= {} us + {} us/task", num(t.fixed_us), num(t.per_task_us))
}

fn met_text(m: &Met) -> String {
    let yes = |b: bool| if b { "yes" } else { "no" };
    format!("{}, {}", yes(m.fixed), yes(m.per_task))
}

/// The runs-per-k line: each distinct count with the ks it applies to.
fn runs_line(p: &L3Params) -> String {
    let mut groups: Vec<(u32, Vec<u64>)> = Vec::new();
    for &k in &p.ks {
        let n = runs_for(p.runs, k);
        match groups.last_mut() {
            Some((m, ks)) if *m == n => ks.push(k),
            _ => groups.push((n, vec![k])),
        }
    }
    groups
        .iter()
        .map(|(n, ks)| {
            let ks: Vec<String> = ks.iter().map(u64::to_string).collect();
            format!("{n} (k = {})", ks.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn print_table(r: &L3Report) {
    let p = &r.params;
    outln!(
        "simpler bench --l3: Worker::run of k independent no-op tasks on the sim, µs per run \
         (median / p90); {} host CPUs",
        r.host_cpus
    );
    outln!(
        "chips: {} sim chips of {} cluster(s) and {} AICPU threads, tasks round-robin; sub \
         workers: {} threads; runs per k: {}",
        p.chips,
        r.chip_clusters,
        r.chip_aicpu_threads,
        p.sub_workers,
        runs_line(p)
    );
    if let Some(f) = r.floor_us {
        outln!(
            "L2 empty-run floor (ChipWorker::run of the same no-op callable): {} / {} us",
            num(f.median),
            num(f.p90)
        );
    }
    let cells: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| {
            row.points
                .iter()
                .map(|pt| format!("{} / {}", num(pt.run_us.median), num(pt.run_us.p90)))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = r
        .rows
        .iter()
        .zip(&cells)
        .map(|(row, c)| {
            c.iter()
                .map(|s| s.chars().count())
                .chain([row_label(row.row).len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut header = format!("{:>5}", "k");
    for (row, w) in r.rows.iter().zip(&widths) {
        header.push_str(&format!("  {:<w$}", row_label(row.row)));
    }
    outln!("{}", header.trim_end());
    for (i, k) in p.ks.iter().enumerate() {
        let mut line = format!("{k:>5}");
        for (c, w) in cells.iter().zip(&widths) {
            line.push_str(&format!("  {:<w$}", c[i]));
        }
        outln!("{}", line.trim_end());
    }
    outln!("fit: run_us = fixed + per_task x k, least squares through the medians");
    outln!(
        "{:<14} {:>10} {:>14}  {:<26} {:<17} {:>15} {:>15}",
        "row",
        "fixed (us)",
        "per task (us)",
        "target",
        "met (fixed, task)",
        "fit(1) - floor",
        "k=1 - floor"
    );
    let us = |v: Option<f64>| v.map_or(String::new(), |e| format!("{} us", num(e)));
    for row in &r.rows {
        let line = format!(
            "{:<14} {:>10} {:>14}  {:<26} {:<17} {:>15} {:>15}",
            row_label(row.row),
            num(row.fit.fixed_us),
            num(row.fit.per_task_us),
            row.target.as_ref().map_or("-".into(), target_text),
            row.met.as_ref().map_or(String::new(), met_text),
            us(row.engine_one_task_us),
            us(row.engine_k1_us)
        );
        outln!("{}", line.trim_end());
    }
    outln!(
        "{:<14} {:>10} {:>14}  ({})",
        "upstream",
        num(r.upstream.fit.fixed_us),
        num(r.upstream.fit.per_task_us),
        r.upstream.what
    );
    let tails: Vec<String> = r
        .rows
        .iter()
        .filter_map(|row| {
            let t = row.worst_tail?;
            Some(format!(
                "{} {}x (k = {})",
                row_label(row.row),
                num(t.ratio),
                t.k
            ))
        })
        .collect();
    outln!(
        "slowest tail, p90 / median (target <= {}x): {}",
        num(TAIL_TARGET),
        tails.join("; ")
    );
    if let Some(target) = r.slope_target_us {
        let slopes: Vec<String> = r
            .rows
            .iter()
            .filter(|row| row.target.is_some())
            .map(|row| {
                let yes = if row.fit.per_task_us <= target {
                    "yes"
                } else {
                    "no"
                };
                format!(
                    "{} {} us ({yes})",
                    row_label(row.row),
                    num(row.fit.per_task_us)
                )
            })
            .collect();
        outln!(
            "per-task slope vs half the floor + {} us = {} us: {}",
            num(SLOPE_OVER_HALF_FLOOR_US),
            num(target),
            slopes.join("; ")
        );
    }
    if let Some(p) = r.process_over_thread {
        outln!(
            "chip, process / chip, thread at k = {}: {}x (target <= {}x)",
            p.k,
            num(p.ratio),
            num(PROCESS_OVER_THREAD_TARGET)
        );
    }
    if r.rows.iter().any(|row| row.fit.fixed_us < 0.0) {
        outln!(
            "a negative fixed cost: those medians grow faster than linearly in k, the line \
             does not describe them (read the points above and k=1 - floor)"
        );
    }
}

/// Compiles the no-op callable, runs the sweep (`runs` per k up to 16, ks of the sweep up
/// to `max_k`) and prints the report.
///
/// # Errors
/// `max_k` below 2 (the fit needs two ks); the compiler's error; a worker's or a chip's
/// [`simpler_host::HostError`] as itself (so a refused configuration keeps its exit code);
/// any other failure of the sweep as an [`L3BenchError`].
pub(crate) fn command(runs: u32, max_k: u64, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    if max_k < 2 {
        return Err("--tasks with --l3 must be at least 2: the fit needs two ks".into());
    }
    let here = std::env::current_dir()?;
    let (compiler, _) = crate::build::compiler_for(&here)?;
    let spec = noop_chip_callable(&compiler)?;
    let params = L3Params {
        runs,
        ks: ks_up_to(max_k),
        chip_program: chip_program(),
        ..L3Params::default()
    };
    let report = measure_l3(&params, spec).map_err(|e| -> Box<dyn std::error::Error> {
        match e {
            L3BenchError::Host(h) | L3BenchError::Worker(WorkerError::Host(h)) => Box::new(h),
            other => Box::new(other),
        }
    })?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ks_stop_at_the_largest_asked_for() {
        assert_eq!(ks_up_to(2), [1, 2]);
        assert_eq!(ks_up_to(100), [1, 2, 4, 8, 16, 64]);
        assert_eq!(ks_up_to(u64::MAX), K_SWEEP);
    }

    #[test]
    fn the_runs_line_groups_ks_by_count() {
        let p = L3Params::default();
        assert_eq!(
            runs_line(&p),
            "300 (k = 1, 2, 4, 8, 16); 75 (k = 64); 20 (k = 256)"
        );
    }

    #[test]
    fn targets_and_met_read_as_printed() {
        let t = simpler_bench::l3::CHIP_THREAD_TARGET;
        assert_eq!(target_text(&t), "<= 10.0 us + 2.00 us/task");
        assert_eq!(
            met_text(&Met {
                fixed: true,
                per_task: false
            }),
            "yes, no"
        );
    }
}
