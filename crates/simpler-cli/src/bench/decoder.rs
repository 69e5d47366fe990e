//! `simpler bench --workload decoder_layer`: finds the example folder, builds the layer and
//! its empty-kernel twin with the command's compiler, runs `simpler_bench::decoder` and
//! prints one line per (batch, context) with each figure beside its target (met or MISSED),
//! or the whole report as JSON. It reports figures; the targets are printed, never enforced.

use std::path::{Path, PathBuf};

use simpler_bench::decoder::{
    decoder_bench_in, DecoderBenchError, DecoderParams, DecoderReport, DecoderRow, Lengths,
};

use super::executor::num;

/// The workloads `--workload` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Workload {
    /// One decode step of examples/decoder_layer.
    #[value(name = "decoder_layer")]
    DecoderLayer,
}

/// Where the example lives inside a repository.
const EXAMPLE: &str = "examples/decoder_layer";

/// The example folder: `given`, else `examples/decoder_layer` under `cwd` when it is there,
/// else the one of the repository this binary was built in.
pub(crate) fn example_dir(given: Option<&Path>, cwd: &Path) -> PathBuf {
    if let Some(dir) = given {
        return dir.to_path_buf();
    }
    let here = cwd.join(EXAMPLE);
    if here.is_dir() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(EXAMPLE)
}

/// "met" or "MISSED" for `value` against the upper bound `bound`.
fn mark(value: f64, bound: f64) -> &'static str {
    if value <= bound {
        "met"
    } else {
        "MISSED"
    }
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// `r`'s line; `lanes` = the kernels that can run at once (the chip's cores or the host's
/// CPUs, the fewer).
fn row(r: &DecoderRow, t: &simpler_bench::decoder::DecoderTargets, lanes: usize) -> String {
    format!(
        "{:>5} {:>7} {:>7} {:>9} {:>10} {:>9} {:>15} {:>7} {:>16} {:>7} {:>11} {:>7} {:>9} {:>13}",
        r.batch,
        r.context,
        r.tasks,
        format!("{:.2}", r.step_us / 1e3),
        format!("{:.2}", r.empty_step_us / 1e3),
        format!("{:.2}", r.wall_us / 1e3),
        format!("{:.2}", r.runtime_us_per_task),
        mark(r.runtime_us_per_task, t.runtime_us_per_task),
        pct(r.outside_kernels),
        mark(r.outside_kernels, t.outside_kernels),
        pct(r.outside_kernels_from_trace),
        mark(r.outside_kernels_from_trace, t.outside_kernels_from_trace),
        format!("{:.2}", r.critical_path_us / 1e3),
        format!("{:.2}", r.trace_kernel_us / 1e3 / lanes.max(1) as f64),
    )
}

fn print_table(dir: &Path, report: &DecoderReport) {
    let m = &report.model;
    outln!(
        "simpler bench --workload decoder_layer: {} (embed {}, heads {}/{} kv, head_dim {}, ffn \
         {}, block {}, seed {}, {}) on {} cores, {} AICPU threads; median of {} steps after a \
         warm-up, real and empty steps interleaved; {} host CPUs",
        dir.display(),
        m.embed,
        m.heads,
        m.kv_heads,
        m.head_dim,
        m.ffn,
        m.block_size,
        report.seed,
        match report.lengths {
            Lengths::Full => "every sequence context tokens long",
            Lengths::Ragged => "ragged lengths up to context",
        },
        report.cores,
        report.aicpu_threads,
        report.steps,
        report.host_cpus
    );
    outln!(
        "{:>5} {:>7} {:>7} {:>9} {:>10} {:>9} {:>15} {:>7} {:>16} {:>7} {:>11} {:>7} {:>9} {:>13}",
        "batch",
        "context",
        "tasks",
        "step ms",
        "empty ms",
        "wall ms",
        "runtime us/task",
        "",
        "outside kernels",
        "",
        "from trace",
        "",
        "cp ms",
        "kernels/cpu ms"
    );
    let t = &report.targets;
    let lanes = (report.cores as usize).min(report.host_cpus);
    for r in &report.rows {
        outln!("{}", row(r, t, lanes));
    }
    outln!(
        "{:<21} {:>9} {:>10} {:>9} {:>15} {:>7} {:>16} {:>7} {:>11}",
        "target",
        "",
        "",
        "",
        format!("<= {}", num(t.runtime_us_per_task)),
        "",
        format!("<= {:.0}%", t.outside_kernels * 100.0),
        "",
        format!("<= {:.0}%", t.outside_kernels_from_trace * 100.0),
    );
    outln!(
        "step: median device time of a real step (launch of the first kernel to the proof of \
         both boundaries); empty: the same graph with every kernel empty \
         (bench/empty_kernel.c); wall: the real step's run call, staging and copy-back \
         included; runtime us/task = empty / tasks; outside kernels = empty / step (at most \
         100%); from trace: one more real step traced at level tasks, (its step - cp) / its \
         step, cp = the kernel time of the longest path through its dependency edges (each \
         task its longest block's kernel time); kernels/cpu: the traced step's kernel time \
         summed over every subtask, divided by the kernels that can run at once (the chip's \
         cores or the host's CPUs, the fewer): the shortest step the kernels alone allow."
    );
}

/// The exit code of a failed `--workload` that is the input's fault: 2 (usage or input
/// error) for a missing folder or empty kernel, a folder that does not build and a bad
/// parameter; `None` for any other error.
pub(crate) fn input_error_code(e: &(dyn std::error::Error + 'static)) -> Option<u8> {
    match e.downcast_ref::<DecoderBenchError>()? {
        DecoderBenchError::MissingExample { .. }
        | DecoderBenchError::MissingEmptyKernel { .. }
        | DecoderBenchError::Build { .. }
        | DecoderBenchError::InvalidParam { .. } => Some(crate::EXIT_USAGE),
        _ => None,
    }
}

/// Runs the bench on the folder `example` (or the default one) and prints it.
///
/// # Errors
/// A missing folder or empty kernel, the compiler's or the build's error, a bad parameter; a
/// worker's or a step's [`simpler_host::HostError`] as itself (so a refused configuration
/// keeps its exit code).
pub(crate) fn command(
    example: Option<&Path>,
    params: &DecoderParams,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let cwd = std::env::current_dir()?;
    let dir = example_dir(example, &cwd);
    let manifest = simpler_toolchain::manifest::manifest_path(&dir);
    if !manifest.is_file() {
        return Err(Box::new(DecoderBenchError::MissingExample {
            path: manifest,
        }));
    }
    let dir = dir.canonicalize().unwrap_or(dir);
    let (compiler, _) = crate::build::compiler_for(&dir)?;
    let report =
        decoder_bench_in(&dir, &compiler, params).map_err(|e| -> Box<dyn std::error::Error> {
            match e {
                DecoderBenchError::Host(h) => Box::new(h),
                other => Box::new(other),
            }
        })?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&dir, &report);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_folder_is_the_given_one_then_the_current_one_then_the_repository_one() {
        let dir = tempfile::tempdir().unwrap();
        let given = dir.path().join("mine");
        assert_eq!(example_dir(Some(&given), dir.path()), given);
        let repo = example_dir(None, dir.path());
        assert!(repo.ends_with(EXAMPLE), "{}", repo.display());
        assert!(repo.join("simpler.toml").is_file(), "{}", repo.display());
        std::fs::create_dir_all(dir.path().join(EXAMPLE)).unwrap();
        assert_eq!(example_dir(None, dir.path()), dir.path().join(EXAMPLE));
    }

    #[test]
    fn a_figure_is_met_at_its_bound_and_missed_past_it() {
        assert_eq!(mark(0.25, 0.25), "met");
        assert_eq!(mark(0.26, 0.25), "MISSED");
    }
}
