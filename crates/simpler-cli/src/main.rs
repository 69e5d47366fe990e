//! # `simpler` — the command-line tool
//!
//! This file owns the command line (clap), dispatch to the subcommands, error printing and
//! exit codes. The work lives in the modules: [`build`] (compiling an example into a
//! bundle), [`run`] (matching a run's files against the callable's signature, executing,
//! checking), [`trace`] (summary, SVG swimlane and conversion of trace files) and [`bench`]
//! (runtime overhead, sim executor, scheduler balance, level-3 engine, tracing,
//! `host_build_graph` replay, decoder-layer workload and rayon peer figures); manifests, compiling, the kernel
//! cache, `.npy` files, scalars and comparison are [`simpler_toolchain`]'s.
//!
//! Exit codes: `0` success, `1` the run, an output write (the bundle of `build`, an
//! `--output` of `run`, the output of `trace svg|convert`, the stdout of `trace summary`) or a `--check` failed, `2` usage or input errors — bad flags,
//! manifest, sources, compile errors, bundle, a trace file that cannot be read or decoded or holds no traced run, code that does not load such as a missing
//! entry symbol, `.npy` files, argument mismatches, out-of-range scalars, an output path that
//! is a file the command reads or not a regular file, bad `PTO2_RING_*` values, and any run
//! the worker refuses for its configuration or arguments before running it (also in
//! `bench`). Every error is
//! printed to stderr as `error: <message>` followed by one `  caused by: <cause>` line per
//! underlying cause.

/// `print!` through [`stdout::print`]: a stdout that fails ends the printing, not the command.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdout::print(format_args!($($arg)*))
    };
}

/// `println!` through [`stdout::print`]: a stdout that fails ends the printing, not the
/// command.
macro_rules! outln {
    () => {
        $crate::stdout::print(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod bench;
mod build;
mod files;
mod run;
mod stdout;
mod trace;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use simpler_host::Runtime;

/// Exit code of a failed run, output write or check.
const EXIT_FAILURE: u8 = 1;
/// Exit code of a usage or input error.
const EXIT_USAGE: u8 = 2;
/// `simpler bench --runs` when not given (but with --l3).
const DEFAULT_BENCH_RUNS: u32 = 5;

/// The environment variables, shown after `simpler --help` (kept in step with README.md).
const ENVIRONMENT: &str = "\
Environment:
  SIMPLER_INCLUDE_DIR             directory holding simpler/kernel.h for `simpler build`; default:
                                  <simpler binary>/../../include, else the nearest include/ above
                                  the example, else the repository's include/ at compile time
  CC                              C compiler for `simpler build` (default cc; may be several words)
  SIMPLER_CACHE_DIR               kernel cache of `simpler build`; default:
                                  $XDG_CACHE_HOME/simpler/kernels, else ~/.cache/simpler/kernels
  SIMPLER_ORCH_LOG                set (to anything) to print the orchestration's info/debug log
                                  lines to stderr (errors and warnings always print)
  SIMPLER_SCHEDULER_TIMEOUT_MS    no-progress watchdog: how long nothing may run and nothing
                                  progress before the run fails (default 10000)
  SIMPLER_STREAM_SYNC_TIMEOUT_MS  longest wait for a run to complete (default 50000)
  SIMPLER_TENSOR_DATA_TIMEOUT_MS  orchestration get/set_tensor_data wait (default 15000)
  SIMPLER_OP_EXECUTE_TIMEOUT_US   longest one kernel may run, in microseconds (default 45000000);
                                  past it the run fails with OP_EXECUTE_TIMEOUT
  PTO2_RING_TASK_WINDOW           tasks in flight per ring: a power of two >= 4 (default 16384)
  PTO2_RING_HEAP                  output-heap bytes per ring, >= 1024 (default: the 256 MiB heap / 4)
  PTO2_RING_DEP_POOL              dependency-pool entries per ring, >= 4 (default 16384)
  PTO2_READY_QUEUE                host_build_graph: ready tasks per ready queue, >= 1 (default 8192)
  SIMPLER_SIM_MEMCHECK            1 (or after): every device allocation ends at a guard page, so a
                                  kernel writing past a tensor faults and the crash report names it;
                                  before: guards the start; 0: off (default)
  SIMPLER_CRASH_REPORT            0: print no crash report for a kernel that crashes (default: print)
The PTO2_RING_* variables take one value for all 4 rings or 4 comma-separated values (ring 0..3);
a task's runtime-allocated outputs come from ring min(scope depth, 3), the outermost scope being 0.
See README.md, \"Reference\".";

#[derive(Parser, Debug)]
#[command(
    name = "simpler",
    version,
    about = "Build and run simpler task-graph callables on the (simulated) NPU",
    propagate_version = true,
    after_help = ENVIRONMENT
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Compile an example directory (simpler.toml + C sources) into a .simpler bundle.
    Build {
        /// The example directory (or its simpler.toml).
        example_dir: PathBuf,
        /// Output file (or directory); default `<example-dir>/<name>.simpler`.
        #[arg(short = 'o', long = "output", value_name = "OUT")]
        output: Option<PathBuf>,
        /// Stamp the bundle with this runtime variant (over the manifest's `runtime`): its
        /// runs use it unless `simpler run --runtime` names another.
        #[arg(long, value_name = "RUNTIME", value_parser = runtime_parser())]
        runtime: Option<Runtime>,
    },
    /// Run a callable once on .npy inputs; write and/or check its outputs.
    Run(RunArgs),
    /// Measure runtime overhead with no-op task graphs and print the figures.
    Bench {
        /// Tasks per run, at least 1 [default: 16384; with --executor, 4096 per throughput
        /// run; with --l3, the largest k of the sweep, at least 2, default 256; with
        /// --trace-write, the synthetic trace's tasks, default 100000; with --replay, the
        /// no-op graph's tasks, default 1000; with --peer, 4096 per run].
        #[arg(
            long,
            value_parser = clap::value_parser!(u64).range(1..),
            conflicts_with = "balance"
        )]
        tasks: Option<u64>,
        /// Measured runs per configuration, at least 1 (the median is reported) [default: 5;
        /// with --l3, 300; with --replay, 20; with --peer, the rounds, 5]; with --executor, the base sample count of every figure; with
        /// --l3, the runs per k up to 16 (fewer for larger k, at least 20).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        runs: Option<u32>,
        /// Measure the sim executors instead (fibers on a shared pool, or one OS thread per
        /// core; `both`: one after the other in this process, side by side with the pool's
        /// gain), each figure as median / p99 beside its target.
        ///
        /// Figures: empty-run and 1-task-run round trips (40 x runs samples); short runs of
        /// 4 tasks kept two in flight at launch depth 1 and 2 (runs batches of 16 runs);
        /// independent and chained no-op tasks on 24 and 72 cores and the submit cost per
        /// task (runs runs of --tasks tasks); 8 chips in one process (start time, OS threads
        /// added per chip, empty runs on all at once: 20 x runs each); an idle worker's CPU
        /// time and context switches over --idle-secs; the predecessor's record read with a
        /// successor of 1, 64, 512, 2048 tasks in flight (20 x runs each). Round trips are
        /// also shown as a multiple of the floor, a park/unpark round trip of two bare
        /// threads (100 x runs samples).
        #[arg(long, value_enum, value_name = "EXECUTOR", conflicts_with = "balance")]
        executor: Option<bench::ExecutorChoice>,
        /// With --executor: the idle worker's window, seconds (0 leaves the figure out).
        #[arg(
            long,
            default_value_t = 10,
            requires = "executor",
            conflicts_with = "l3"
        )]
        idle_secs: u64,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// Measure the level-3 engine instead: `Worker::run` of k independent no-op tasks
        /// for k = 1, 2, 4, 8, 16, 64, 256, per k the median / p90 us per run, then the
        /// least-squares line fixed + per_task x k beside its target.
        ///
        /// Rows: no-op chip tasks (a chip run whose orchestration submits nothing) on 4 sim
        /// chips in this process, round-robin (target <= 10 us + 2 us/task); the same with
        /// each chip in a child process (target <= 30 us + 5 us/task); no-op Rust closures
        /// on 2 sub worker threads (no target). Printed beside them: the L2 empty-run floor
        /// (ChipWorker::run of the same callable, without the engine), the fit at k = 1
        /// minus that floor, and upstream's figure (43.3 us + 8.08 us/task). Needs a C
        /// compiler ($CC or cc) for the no-op orchestration.
        #[arg(long, conflicts_with_all = ["balance", "executor"])]
        l3: bool,
        /// Measure what tracing costs instead: the no-op graphs on 24 cores untraced and at
        /// trace level LEVEL (off, tasks, dispatch, scheduler, orchestrator or 0..4),
        /// interleaved run by run; prints the cost per run and per task beside the level's
        /// target (tasks <= 0.3 us/task, orchestrator <= 1 us/task; docs/tracing.md).
        #[arg(
            long,
            value_name = "LEVEL",
            conflicts_with_all = ["balance", "executor", "l3"]
        )]
        trace_level: Option<simpler_host::trace_model::TraceLevel>,
        /// Measure how long writing a trace file takes instead: a synthetic trace of --tasks
        /// tasks [default: 100000] on 72 cores written to memory as Perfetto protobuf and as
        /// Chrome JSON, median of --runs writes each; prints ms per format, us per task, the
        /// size in MiB and the target beside them (<= 1 s for 100k tasks; docs/tracing.md).
        #[arg(
            long,
            conflicts_with_all = ["balance", "executor", "l3", "trace_level"]
        )]
        trace_write: bool,
        /// Measure what host_build_graph and its recordings buy instead: a no-op graph of
        /// --tasks independent tasks [default: 1000] and examples/gemm (512 tasks) on one warm
        /// worker under tensormap_and_ringbuffer (tmr), host_build_graph building every run
        /// (hbg) and one recording replayed (hbg replay), interleaved, median of --runs
        /// [default: 20] after a warm-up. Prints per variant the end-to-end us per run, the
        /// host's cost and submit->launch time, the host orchestration per task and the
        /// upload, the replay speedup, and the targets beside them (replay host cost <= 10% of
        /// an HBG build's; HBG replay end-to-end < TMR end-to-end). Needs a C compiler ($CC or
        /// cc) for gemm.
        #[arg(
            long,
            conflicts_with_all = ["balance", "executor", "l3", "trace_level", "trace_write"]
        )]
        replay: bool,
        /// Measure a real workload instead: `decoder_layer`, one decode step of
        /// examples/decoder_layer (the example's default model: embed 256, 8/2 heads, head_dim
        /// 32, ffn 512, block 16; inputs of seed 0) per --batch x --context row on one warm
        /// 24-core worker. Per row: the median device time of a real step and of the same graph
        /// with every kernel empty (bench/empty_kernel.c), --steps each after a warm-up,
        /// interleaved; the tasks per step; runtime us/task = empty step / tasks (target <=
        /// 1.0); outside kernels = empty / step (target <= 25%); and from one more real step
        /// traced at level tasks, (step - critical-path kernel time) / step (target <= 25%).
        /// Needs a C compiler ($CC or cc).
        #[arg(
            long,
            value_enum,
            value_name = "WORKLOAD",
            conflicts_with_all = ["balance", "executor", "l3", "trace_level", "trace_write", "replay", "tasks", "runs"]
        )]
        workload: Option<bench::decoder::Workload>,
        /// With --workload: the batch sizes, at least 1 each [default: 8 32].
        #[arg(long, num_args = 1.., value_name = "B", requires = "workload",
              value_parser = clap::value_parser!(u64).range(1..))]
        batch: Vec<u64>,
        /// With --workload: the context lengths (longest sequence, tokens), at least 1 each
        /// [default: 4096].
        #[arg(long, num_args = 1.., value_name = "C", requires = "workload",
              value_parser = clap::value_parser!(u64).range(1..))]
        context: Vec<u64>,
        /// With --workload: timed steps per row and callable, at least 1 [default: 3].
        #[arg(long, value_name = "N", requires = "workload",
              value_parser = clap::value_parser!(u32).range(1..))]
        steps: Option<u32>,
        /// With --workload: ragged sequences, lengths uniform in 1..=context (the last one
        /// context long), as simpler_examples::decoder_layer::inputs makes them [default: every
        /// sequence context tokens long, as examples/decoder_layer/bench.py runs it].
        #[arg(long, requires = "workload")]
        ragged: bool,
        /// With --workload: the example folder [default: examples/decoder_layer under the
        /// current directory, else the one of the repository simpler was built from].
        #[arg(long, value_name = "DIR", requires = "workload")]
        example: Option<PathBuf>,
        /// Compare with a peer instead: the --executor bench's independent and chain no-op
        /// shapes (--tasks [default: 4096] per run, 24 cores, pool executor) and the same shapes
        /// on rayon in this process (a scope spawning every task; a chain of tasks each spawned
        /// by its predecessor), interleaved, median of --runs [default: 5] rounds; prints
        /// tasks/s of both and ours / rayon (target: independent >= 25%; chain: none).
        #[arg(
            long,
            conflicts_with_all = ["balance", "executor", "l3", "trace_level", "trace_write", "replay", "workload"]
        )]
        peer: bool,
        /// Measure scheduler balance instead: one sleeping task per core, makespan ÷ task
        /// time for 1, 3, 6 schedulers × 1, 5, 8, 24 clusters.
        #[arg(long)]
        balance: bool,
        /// With --balance: the full sweep, 1–6 schedulers × 1–24 clusters.
        #[arg(long, requires = "balance")]
        full: bool,
        /// With --balance: each task's sleep, milliseconds.
        #[arg(long, default_value_t = 50, requires = "balance",
              value_parser = clap::value_parser!(u64).range(1..))]
        task_ms: u64,
    },
    /// Read a trace file `simpler run --trace` wrote (Perfetto protobuf or Chrome JSON).
    #[command(subcommand)]
    Trace(TraceCommand),
    /// Serve one chip of a level-3 worker's parent process (`simpler bench --l3` starts its
    /// chip children so); not for use by hand.
    #[command(name = "chip-child", hide = true)]
    ChipChild,
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
    /// Print the timing breakdown (Host / Device / Orch / Sched / Effective), per-kernel
    /// count, mean, p50, p99, per-core utilisation, critical path vs makespan and scheduler
    /// overhead share of every run in FILE (definitions: docs/tracing.md).
    Summary {
        /// The trace file.
        file: PathBuf,
    },
    /// Draw a static SVG swimlane of FILE: one lane per core and AICPU thread, boxes coloured
    /// by kernel, a time axis and a legend.
    Svg {
        /// The trace file.
        file: PathBuf,
        /// The SVG file to write.
        #[arg(short = 'o', long = "output", value_name = "OUT.svg")]
        output: PathBuf,
    },
    /// Rewrite FILE in another format.
    Convert {
        /// The trace file.
        file: PathBuf,
        /// The file to write.
        #[arg(short = 'o', long = "output", value_name = "OUT")]
        output: PathBuf,
        /// perfetto or chrome [default: chrome for a .json OUT, else perfetto].
        #[arg(long, value_name = "FORMAT")]
        format: Option<simpler_trace::Format>,
    },
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// A .simpler bundle, or an example directory (built in memory first).
    target: PathBuf,
    /// Input tensor for an `in`/`inout` argument (repeatable).
    #[arg(long = "input", value_name = "NAME=FILE.npy", value_parser = parse_named_path)]
    inputs: Vec<(String, PathBuf)>,
    /// Where to write an `out`/`inout` argument after the run (repeatable).
    #[arg(long = "output", value_name = "NAME=FILE.npy", value_parser = parse_named_path)]
    outputs: Vec<(String, PathBuf)>,
    /// Reference to compare an `out`/`inout` argument with, allclose-style (repeatable).
    #[arg(long = "check", value_name = "NAME=REFERENCE.npy", value_parser = parse_named_path)]
    checks: Vec<(String, PathBuf)>,
    /// Value of a scalar argument: a number, or 0x-prefixed raw bits (repeatable).
    #[arg(long = "scalar", value_name = "NAME=VALUE", value_parser = parse_named_value)]
    scalars: Vec<(String, String)>,
    /// Relative tolerance of --check: |actual - expected| <= atol + rtol * |expected|.
    /// A negative value in any float form is taken as a value (`--rtol -1`, `-1e-3`,
    /// `-.5`), and refused as a tolerance.
    #[arg(long, default_value_t = 1e-5, allow_hyphen_values = true)]
    rtol: f64,
    /// Absolute tolerance of --check.
    #[arg(long, default_value_t = 1e-5, allow_hyphen_values = true)]
    atol: f64,
    /// Record the run and write its trace to FILE (Perfetto protobuf, or Chrome JSON for a
    /// .json FILE); read it with `simpler trace` or load it in Perfetto.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// How much --trace/--deps record: off, tasks, dispatch, scheduler, orchestrator or 0..4
    /// [default: tasks].
    #[arg(long, value_name = "L")]
    trace_level: Option<simpler_trace::TraceLevel>,
    /// The format of --trace: perfetto or chrome [default: from FILE's extension].
    #[arg(long, value_name = "FORMAT", requires = "trace")]
    trace_format: Option<simpler_trace::Format>,
    /// Write the run's task graph to FILE: Graphviz dot, or JSON for a .json FILE.
    #[arg(long, value_name = "FILE")]
    deps: Option<PathBuf>,
    /// The runtime variant of this run, over the callable's (the bundle's or manifest's
    /// `runtime`) [default: the callable's, else tensormap_and_ringbuffer].
    #[arg(long, value_name = "RUNTIME", value_parser = runtime_parser())]
    runtime: Option<Runtime>,
    /// Provision the sim chip's SDMA engine, so kernels may start asynchronous copies
    /// (`simpler_sdma_copy`); without it such a run fails naming the missing engine.
    #[arg(long)]
    enable_sdma: bool,
}

/// `--runtime`: one of [`Runtime::ALL`] by name; any other is a usage error listing them.
fn runtime_parser() -> impl clap::builder::TypedValueParser<Value = Runtime> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Runtime::ALL.map(Runtime::name)).map(|name| {
        name.parse::<Runtime>()
            .expect("a possible value is a runtime's name")
    })
}

fn parse_named_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() && !value.is_empty() => {
            Ok((name.to_string(), value.to_string()))
        }
        _ => Err(format!("expected NAME=VALUE, got `{s}`")),
    }
}

fn parse_named_path(s: &str) -> Result<(String, PathBuf), String> {
    parse_named_value(s).map(|(n, v)| (n, PathBuf::from(v)))
}

/// The exit code of a failed `simpler bench`: 2 when the worker refused its configuration
/// (a bad `PTO2_RING_*` value), else 1.
fn bench_exit_code(e: &(dyn std::error::Error + 'static)) -> u8 {
    match e.downcast_ref::<simpler_host::HostError>() {
        Some(h) if run::refused_before_running(h) => EXIT_USAGE,
        _ => EXIT_FAILURE,
    }
}

/// `error: <message>` followed by one `  caused by: <cause>` line per source.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = format!("error: {e}");
    let mut last = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        // Some errors repeat their source in their own message; print each text once.
        if !last.ends_with(&text) {
            out.push_str(&format!("\n  caused by: {text}"));
        }
        last = text;
        cause = c.source();
    }
    out
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<(), (u8, Box<dyn std::error::Error>)> = match cli.command {
        Command::Build {
            example_dir,
            output,
            runtime,
        } => build::command(&example_dir, output.as_deref(), runtime)
            .map(|_| ())
            .map_err(|e| (e.exit_code(), e.into())),
        Command::Trace(t) => match t {
            TraceCommand::Summary { file } => trace::summary(&file),
            TraceCommand::Svg { file, output } => trace::svg(&file, &output),
            TraceCommand::Convert {
                file,
                output,
                format,
            } => trace::convert(&file, &output, format),
        }
        .map_err(|e| (e.exit_code(), e.into())),
        Command::ChipChild => return simpler_worker::process::serve_chip_child(),
        Command::Bench {
            balance: true,
            runs,
            json,
            full,
            task_ms,
            ..
        } => bench::balance(full, task_ms, runs.unwrap_or(DEFAULT_BENCH_RUNS), json)
            .map_err(|e| (bench_exit_code(e.as_ref()), e)),
        Command::Bench {
            l3: true,
            tasks,
            runs,
            json,
            ..
        } => bench::l3::command(
            runs.unwrap_or(simpler_bench::l3::DEFAULT_RUNS),
            tasks.unwrap_or(256),
            json,
        )
        .map_err(|e| (bench_exit_code(e.as_ref()), e)),
        Command::Bench {
            executor: Some(choice),
            tasks,
            runs,
            json,
            idle_secs,
            ..
        } => bench::executor::command(
            choice,
            runs.unwrap_or(DEFAULT_BENCH_RUNS),
            tasks.unwrap_or(simpler_bench::executor::ExecutorParams::default().tasks),
            idle_secs,
            json,
        )
        .map_err(|e| (bench_exit_code(e.as_ref()), e)),
        Command::Bench {
            trace_level: Some(level),
            tasks,
            runs,
            json,
            ..
        } => bench::trace_cost(
            level,
            tasks.unwrap_or(16_384),
            runs.unwrap_or(DEFAULT_BENCH_RUNS),
            json,
        )
        .map_err(|e| (bench_exit_code(e.as_ref()), e)),
        Command::Bench {
            trace_write: true,
            tasks,
            runs,
            json,
            ..
        } => bench::trace_write(
            tasks.unwrap_or(simpler_bench::trace_write::TARGET_TASKS),
            runs.unwrap_or(DEFAULT_BENCH_RUNS),
            json,
        )
        .map_err(|e| (EXIT_FAILURE, e)),
        Command::Bench {
            replay: true,
            tasks,
            runs,
            json,
            ..
        } => bench::replay::command(
            tasks.unwrap_or(simpler_bench::replay::DEFAULT_NOOP_TASKS),
            runs.unwrap_or(simpler_bench::replay::DEFAULT_RUNS),
            json,
        )
        .map_err(|e| (bench_exit_code(e.as_ref()), e)),
        Command::Bench {
            workload: Some(bench::decoder::Workload::DecoderLayer),
            batch,
            context,
            steps,
            example,
            ragged,
            json,
            ..
        } => {
            let mut params = simpler_bench::decoder::DecoderParams::default();
            if ragged {
                params.lengths = simpler_bench::decoder::Lengths::Ragged;
            }
            if !batch.is_empty() {
                params.batches = batch.iter().map(|&b| b as usize).collect();
            }
            if !context.is_empty() {
                params.contexts = context.iter().map(|&c| c as usize).collect();
            }
            params.steps = steps.unwrap_or(params.steps);
            bench::decoder::command(example.as_deref(), &params, json).map_err(|e| {
                let code = bench::decoder::input_error_code(e.as_ref())
                    .unwrap_or_else(|| bench_exit_code(e.as_ref()));
                (code, e)
            })
        }
        Command::Bench {
            peer: true,
            tasks,
            runs,
            json,
            ..
        } => bench::peer::command(
            tasks.unwrap_or(simpler_bench::peer::DEFAULT_TASKS),
            runs.unwrap_or(simpler_bench::peer::DEFAULT_RUNS),
            json,
        )
        .map_err(|e| (bench_exit_code(e.as_ref()), e)),
        Command::Bench {
            tasks, runs, json, ..
        } => bench::command(
            tasks.unwrap_or(16_384),
            runs.unwrap_or(DEFAULT_BENCH_RUNS),
            json,
        )
        .map_err(|e| (bench_exit_code(e.as_ref()), e)),
        Command::Run(a) => {
            let req = run::RunRequest {
                target: a.target,
                inputs: a.inputs,
                outputs: a.outputs,
                checks: a.checks,
                scalars: a.scalars,
                rtol: a.rtol,
                atol: a.atol,
                trace: run::TraceRequest {
                    trace: a.trace,
                    level: a.trace_level,
                    format: a.trace_format,
                    deps: a.deps,
                },
                runtime: a.runtime,
                enable_sdma: a.enable_sdma,
            };
            run::command(&req).map_err(|e| (e.exit_code(), e.into()))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, e)) => {
            // Not `eprintln!`: a stderr that fails (closed, a full disk) must not turn the
            // command's exit code into a panic's.
            let _ = writeln!(std::io::stderr(), "{}", error_chain(e.as_ref()));
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_negative_tolerance_parses_as_a_value_so_the_run_can_refuse_it() {
        let cli = Cli::try_parse_from(["simpler", "run", "ex", "--rtol", "-1", "--atol", "-2.5"])
            .expect("a negative number is a value, not a flag");
        let Command::Run(a) = cli.command else {
            panic!("a run")
        };
        assert_eq!((a.rtol, a.atol), (-1.0, -2.5));
        // Clap's negative-number rule knows no exponent and no leading point.
        let cli = Cli::try_parse_from(["simpler", "run", "ex", "--rtol", "-1e-3", "--atol", "-.5"])
            .expect("an exponent or a leading point is still a value");
        let Command::Run(a) = cli.command else {
            panic!("a run")
        };
        assert_eq!((a.rtol, a.atol), (-1e-3, -0.5));
        // A flag where the value should be is not a number: still a parse error.
        for argv in [
            &["simpler", "run", "ex", "--rtol", "--atol", "1"][..],
            &["simpler", "run", "ex", "--rtol", "--atol"][..],
        ] {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?}");
        }
    }

    #[test]
    fn named_values() {
        assert_eq!(parse_named_value("A=1"), Ok(("A".into(), "1".into())));
        assert_eq!(parse_named_value("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert!(parse_named_value("A").is_err());
        assert!(parse_named_value("=x").is_err());
        assert!(parse_named_value("A=").is_err());
    }

    #[test]
    fn help_lists_the_environment_variables() {
        let help = Cli::command().render_help().to_string();
        for var in [
            "SIMPLER_INCLUDE_DIR",
            "SIMPLER_CACHE_DIR",
            "SIMPLER_ORCH_LOG",
            "SIMPLER_SCHEDULER_TIMEOUT_MS",
            "SIMPLER_STREAM_SYNC_TIMEOUT_MS",
            "SIMPLER_TENSOR_DATA_TIMEOUT_MS",
            "SIMPLER_OP_EXECUTE_TIMEOUT_US",
            "PTO2_RING_TASK_WINDOW",
            "PTO2_RING_HEAP",
            "PTO2_RING_DEP_POOL",
            "PTO2_READY_QUEUE",
        ] {
            assert!(help.contains(var), "{var} missing from --help:\n{help}");
        }
    }

    #[test]
    fn bench_help_documents_the_executor_flags() {
        let mut cli = Cli::command();
        let help = cli
            .find_subcommand_mut("bench")
            .expect("a bench subcommand")
            .render_long_help()
            .to_string();
        for text in [
            "--executor",
            "--idle-secs",
            "pool",
            "threads",
            "both",
            "floor",
            "--l3",
            "L2 empty-run floor",
            "--workload",
            "decoder_layer",
            "--batch",
            "--context",
            "--steps",
            "--example",
            "--ragged",
            "--peer",
            "rayon",
        ] {
            assert!(
                help.contains(text),
                "{text} missing from bench --help:\n{help}"
            );
        }
    }

    #[test]
    fn exit_codes_tell_bad_input_from_failures() {
        use simpler_toolchain::build::BuildError;
        let write =
            build::BuildCommandError::Build(BuildError::Write(simpler_host::BundleError::Io {
                op: "write",
                path: "b.simpler".into(),
                source: std::io::Error::other("disk full"),
            }));
        assert_eq!(write.exit_code(), EXIT_FAILURE);
        let refused = build::BuildCommandError::OutputDir {
            path: "d/b.simpler".into(),
            dir: "d".into(),
        };
        assert_eq!(refused.exit_code(), EXIT_USAGE);
        let config = simpler_host::HostError::InvalidConfig("ring".into());
        assert_eq!(bench_exit_code(&config), EXIT_USAGE);
        assert_eq!(
            bench_exit_code(&simpler_host::HostError::WorkerClosed),
            EXIT_FAILURE
        );
    }

    #[test]
    fn error_chain_skips_a_cause_its_parent_already_printed() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer: {source}")]
        struct Outer {
            source: std::io::Error,
        }
        let e = Outer {
            source: std::io::Error::other("inner"),
        };
        assert_eq!(error_chain(&e), "error: outer: inner");
    }

    #[test]
    fn error_chain_prints_every_cause() {
        let e = run::RunError::Build {
            path: "ex".into(),
            source: Box::new(simpler_toolchain::build::BuildError::MissingSource {
                path: "ex/k.c".into(),
                field: "kernels[0].source".into(),
                manifest: "ex/simpler.toml".into(),
            }),
        };
        assert_eq!(
            error_chain(&e),
            "error: cannot build `ex`\n  caused by: source file `ex/k.c` does not exist \
             (named by `kernels[0].source` in `ex/simpler.toml`)"
        );
    }
}
