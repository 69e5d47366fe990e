//! `simpler bench --replay`: the figures of `simpler_bench::replay` — a no-op graph and
//! `examples/gemm` under `tensormap_and_ringbuffer`, `host_build_graph` and a replayed
//! recording on one warm worker — as a table per workload with the two targets beside it
//! (met or MISSED), or the whole report as JSON. It reports figures; the targets are
//! printed, never enforced.

use simpler_bench::replay::{
    replay_bench, ReplayBenchError, ReplayParams, ReplayReport, Target, VariantFigures, Workload,
};
use simpler_toolchain::build::repository_examples_dir;

use super::executor::num;

fn met(t: &Target) -> &'static str {
    if t.met {
        "met"
    } else {
        "MISSED"
    }
}

fn optional(v: Option<f64>) -> String {
    v.map_or("-".into(), num)
}

/// One variant's row of the table.
fn row(v: &VariantFigures) -> String {
    format!(
        "{:<11} {:>13} {:>18} {:>11} {:>12} {:>15} {:>12}",
        v.variant.label(),
        num(v.e2e_us),
        num(v.host_cost_us),
        num(v.stage_us),
        num(v.launch_us),
        optional(v.orch_us_per_task),
        optional(v.upload_us)
    )
}

fn print_table(r: &ReplayReport) {
    outln!(
        "simpler bench --replay: one warm worker ({} cores, {} AICPU threads), median of {} runs \
         per variant after a warm-up, the variants interleaved; {} host CPUs",
        r.cores,
        r.aicpu_threads,
        r.params.runs,
        r.host_cpus
    );
    for w in &r.workloads {
        outln!();
        outln!(
            "{}: {} (graph of {} tasks, image {} bytes)",
            w.workload,
            w.what,
            w.tasks,
            w.image_bytes
        );
        outln!(
            "{:<11} {:>13} {:>18} {:>11} {:>12} {:>15} {:>12}",
            "variant",
            "e2e (us/run)",
            "graph host (us/run)",
            "stage (us)",
            "launch (us)",
            "orch (us/task)",
            "upload (us)"
        );
        for v in &w.variants {
            outln!("{}", row(v));
        }
        outln!(
            "replay speedup (hbg e2e / hbg replay e2e): {}x",
            num(w.replay_speedup)
        );
        let share = &w.targets.replay_host_share;
        let (hbg, replay) = (&w.variants[1], &w.variants[2]);
        outln!(
            "target: {}: {}% ({} us vs {} us) {}",
            share.what,
            num(share.value * 100.0),
            num(replay.host_cost_us),
            num(hbg.host_cost_us),
            met(share)
        );
        let beats = &w.targets.replay_beats_tmr;
        outln!(
            "target: {}: {} us vs {} us {}",
            beats.what,
            num(beats.value),
            num(beats.bound),
            met(beats)
        );
    }
    outln!();
    outln!(
        "e2e: the host call to its return (submit to result), untraced. stage, launch: the \
         run's host spans from submit to the launch call (staging, the graph's build or binding, \
         publishing) and of the launch call, from a second pass traced at level tasks; on the \
         sim the launch call includes the woken device threads taking the host's CPUs, so it \
         is not host cost. graph host: the host's work on the graph beyond the staging every \
         variant pays (stage of tmr): hbg = build_time + upload_time; hbg replay = its stage \
         minus tmr's (checking the arguments, binding the image; 0 if not more); tmr = 0 (it \
         orchestrates on the device). orch: build_time / tasks (the orchestration on the host)."
    );
}

/// Builds `examples/gemm`, runs the bench with the no-op graph of `tasks` tasks and gemm,
/// `runs` timed runs per variant, and prints the report.
///
/// # Errors
/// The compiler's or the build's error; a worker's or a run's
/// [`simpler_host::HostError`] as itself (so a refused configuration keeps its exit code);
/// a variant whose outputs differ from tmr's.
pub(crate) fn command(tasks: u64, runs: u32, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    super::at_least_one(tasks, runs)?;
    let (compiler, _) = crate::build::compiler_for(&repository_examples_dir())?;
    let workloads = [Workload::noop(tasks), Workload::gemm(&compiler)?];
    let report = replay_bench(ReplayParams { runs }, &workloads).map_err(
        |e| -> Box<dyn std::error::Error> {
            match e {
                ReplayBenchError::Host(h) => Box::new(h),
                other => Box::new(other),
            }
        },
    )?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}
