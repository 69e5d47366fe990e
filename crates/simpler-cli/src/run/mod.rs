//! `simpler run`: running a callable once on `.npy` inputs. This module owns the run's data
//! types, loading the callable (built in memory from an example directory, or read from a
//! bundle file), executing it on a fresh worker and the command's flow. Its parts:
//! - `prepare`: turning the command line into a [`PreparedRun`] — one [`ArgValue`] per
//!   signature argument, every name, direction, dtype and shape checked against the
//!   signature before anything runs;
//! - `outputs`: where the outputs may go, checked before the run (never a file the run
//!   reads, never a directory, FIFO, socket, device or symbolic link);
//! - `config`: the worker configuration and ring sizing from the environment
//!   ([`RunConfig`]), checked before anything is built;
//! - `finish`: after the run, writing the outputs (atomically, only after a successful run,
//!   and before anything else that could fail) and comparing them with reference files
//!   ([`simpler_toolchain::compare`]);
//! - `trace_out`: `--trace` and `--deps` ([`TraceRequest`]): their paths checked before the
//!   run like an output's, the files written (atomically) after a successful run, after the
//!   outputs: a trace file that cannot be written fails the command (exit code 1) but never
//!   costs an output; after a failed run none is written, and one line on stderr says so;
//! - `error`: [`RunError`] and its exit codes.
//!
//! `.npy` files and scalars are read by [`simpler_toolchain`].
//!
//! Matching rules:
//! - every `in`/`inout` argument needs exactly one `--input NAME=FILE.npy`;
//! - an `out`/`inout` argument may have one `--output NAME=FILE.npy` and one
//!   `--check NAME=REFERENCE.npy`;
//! - every `scalar` argument needs exactly one `--scalar NAME=VALUE`;
//! - names must exist, suit the flag (an `out` argument given with `--input` is told to use
//!   `--output`/`--check`) and appear once per flag;
//! - a file's dtype and shape must equal the signature's (a signature without a shape accepts
//!   any rank 1..=5). A `bf16` argument takes a `uint16` file holding the raw bits;
//! - an `out` argument's shape is the signature's, else its `--check` reference's; with
//!   neither, the run is refused (the host must know what to allocate);
//! - an `--output` is refused when it is the same file (same path, or a hard or symbolic
//!   link to the same inode) as an `--input`, a `--check` reference, the bundle or manifest,
//!   or another `--output`, and when it exists and is not a regular file.
//!
//! The run uses the runtime variant `--runtime` names, else the callable's (the bundle's or
//! manifest's `runtime`), else `tensormap_and_ringbuffer`; the line printed after a
//! successful run names the one it used ([`ran_line`]).
//!
//! `--enable-sdma` starts the sim chip with its SDMA engine (`docs/sim-device.md` §12);
//! without it a kernel's SDMA copy fails the run, naming the missing engine.
//!
//! After a successful run whose orchestration submitted no task, a warning goes to stderr:
//! no kernel ran, so the results are what the run started with.
//!
//! Scalar values ([`simpler_toolchain::scalar::parse`]): integers in the argument's range
//! (signed ones are sign-extended to 64 bits), floats for `f32`/`f16`/`bf16` (rounded to
//! nearest even; the bits are zero-extended; a finite value that would round to infinity is
//! refused), or `0x…` raw bits that fit the type's width.

mod config;
mod error;
mod finish;
mod outputs;
mod prepare;
#[cfg(test)]
mod tests;
mod trace_out;

use std::path::{Path, PathBuf};
use std::time::Duration;

use simpler_host::{Bundle, CallableSpec, GraphReport, Runtime};
use simpler_toolchain::npy::NpyArray;

use crate::build;

pub use config::RunConfig;
pub use error::{refused_before_running, RunError};
pub use finish::{check, write_outputs};
pub use prepare::prepare;
#[cfg(test)]
use prepare::prepare_with;
pub use trace_out::TraceRequest;

/// What `simpler run` was asked to do, as parsed from the command line.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// A bundle file, or an example directory (or its `simpler.toml`).
    pub target: PathBuf,
    /// `--input NAME=FILE`.
    pub inputs: Vec<(String, PathBuf)>,
    /// `--output NAME=FILE`.
    pub outputs: Vec<(String, PathBuf)>,
    /// `--check NAME=FILE`.
    pub checks: Vec<(String, PathBuf)>,
    /// `--scalar NAME=VALUE`.
    pub scalars: Vec<(String, String)>,
    /// Relative tolerance of `--check`.
    pub rtol: f64,
    /// Absolute tolerance of `--check`.
    pub atol: f64,
    /// `--trace`, `--trace-level`, `--trace-format`, `--deps`.
    pub trace: TraceRequest,
    /// `--runtime`: the run's runtime variant, over the callable's (the bundle's or
    /// manifest's `runtime`); `None` = the callable's, else the worker's default.
    pub runtime: Option<Runtime>,
    /// `--enable-sdma`: start the sim chip with its SDMA engine
    /// ([`simpler_host::WorkerConfig::enable_sdma`]).
    pub enable_sdma: bool,
}

/// One argument's value, positional with the signature.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgValue {
    /// A tensor: for `in`/`inout` the input file's data, for `out` zeroes of the output's
    /// shape. Its dtype is the signature's. After the run, `out`/`inout` hold the results.
    Tensor(NpyArray),
    /// A scalar's 64 raw bits.
    Scalar(u64),
}

/// A run ready to execute: everything checked, every file read.
#[derive(Debug)]
pub struct PreparedRun {
    /// The callable.
    pub spec: CallableSpec,
    /// One value per signature argument, in signature order.
    pub args: Vec<ArgValue>,
    /// Argument index and file of every `--output`.
    pub outputs: Vec<(usize, PathBuf)>,
    /// Argument index, file and loaded reference of every `--check`.
    pub checks: Vec<(usize, PathBuf, NpyArray)>,
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// The trace outputs asked for.
    pub trace: TraceRequest,
}

/// What the execution reports.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// From the call to the return, staging and copy-back included.
    pub total_time: Duration,
    /// From the launch of the first kernel to the proof that both finished.
    pub device_time: Duration,
    /// Tasks the orchestration submitted.
    pub tasks: u64,
    /// The run's trace, when it ran at a trace level other than off.
    pub trace: Option<std::sync::Arc<simpler_host::CapturedTrace>>,
    /// The host's build and upload of the graph when the run used `host_build_graph`;
    /// `None` under `tensormap_and_ringbuffer`.
    pub graph: Option<GraphReport>,
}

impl RunReport {
    /// The runtime variant the run used: `host_build_graph` exactly when it reports a graph.
    pub fn runtime(&self) -> Runtime {
        if self.graph.is_some() {
            Runtime::HostBuildGraph
        } else {
            Runtime::TensormapAndRingbuffer
        }
    }
}

/// Loads the callable named by `target`: an example directory (or manifest) is built in
/// memory, a file is read as a bundle.
///
/// # Errors
/// [`RunError::NoTarget`], [`RunError::Build`] or [`RunError::Bundle`].
pub fn load_callable(target: &Path) -> Result<CallableSpec, RunError> {
    let is_manifest = target.is_file() && target.extension().is_some_and(|e| e == "toml");
    if target.is_dir() || is_manifest {
        let built = build::build(target).map_err(|source| RunError::Build {
            path: target.to_path_buf(),
            source: Box::new(source),
        })?;
        build::print_diagnostics(&built);
        let b = built.built;
        eprintln!(
            "built `{}` from {} in memory ({} sources)",
            b.bundle.name,
            b.manifest.path.display(),
            b.units.len()
        );
        Ok(b.bundle.into_spec())
    } else if target.is_file() {
        let bundle = Bundle::read(target).map_err(|source| RunError::Bundle {
            path: target.to_path_buf(),
            source,
        })?;
        Ok(bundle.into_spec())
    } else {
        Err(RunError::NoTarget {
            path: target.to_path_buf(),
        })
    }
}

/// Executes the prepared run on a fresh [`ChipWorker`](simpler_host::ChipWorker) made
/// with `config` (the sim device), leaving the results in the `out`/`inout` tensors of
/// `prepared.args`.
///
/// # Errors
/// [`RunError::Load`] when the callable's code does not load or the callable is malformed
/// (exit code 2: the bundle or manifest is at fault, nothing ran), [`RunError::Refused`]
/// when the worker refuses the run's configuration or arguments before running it (exit
/// code 2, see [`refused_before_running`]), [`RunError::Execute`] for whatever else the
/// worker reports
/// (bring-up, the run).
pub fn execute(prepared: &mut PreparedRun, config: &RunConfig) -> Result<RunReport, RunError> {
    use simpler_host::{ChipWorker, HostArg, HostError, HostTensor};
    let callable = prepared.spec.name.clone();
    let failed = |source: HostError| {
        if refused_before_running(&source) {
            RunError::Refused {
                callable: callable.clone(),
                source: source.into(),
            }
        } else {
            RunError::Execute {
                callable: callable.clone(),
                source: source.into(),
            }
        }
    };
    let worker = ChipWorker::new(config.worker.clone()).map_err(failed)?;
    let id = worker
        .register(&prepared.spec)
        .map_err(|source| match source {
            HostError::Load(_) | HostError::InvalidCallable { .. } | HostError::Signature(_) => {
                RunError::Load {
                    callable: callable.clone(),
                    source: source.into(),
                }
            }
            other => failed(other),
        })?;
    let mut args: Vec<HostArg<'_>> = prepared
        .args
        .iter_mut()
        .map(|a| match a {
            ArgValue::Tensor(t) => HostArg::Tensor(HostTensor {
                bytes: &mut t.bytes,
                shape: t.shape.clone(),
                dtype: t.dtype,
            }),
            ArgValue::Scalar(v) => HostArg::Scalar(*v),
        })
        .collect();
    let report = worker
        .run_with(id, &mut args, &config.call)
        .map_err(failed)?;
    Ok(RunReport {
        total_time: report.total_time,
        device_time: report.device_time,
        tasks: report.tasks,
        trace: report.trace,
        graph: report.graph,
    })
}

/// `simpler run`: prepare, execute, write outputs, check.
///
/// # Errors
/// [`RunError`]; see [`RunError::exit_code`].
pub fn command(req: &RunRequest) -> Result<(), RunError> {
    let mut config = RunConfig::from_env()?;
    let mut prepared = prepare(req)?;
    config.call.trace_level = prepared.trace.level();
    config.call.runtime = req.runtime;
    config.worker.enable_sdma = req.enable_sdma;
    let report = execute(&mut prepared, &config).inspect_err(|e| {
        let nothing_ran = !matches!(e, RunError::Execute { .. });
        if let Some(note) = trace_out::not_written_note(&prepared.trace, nothing_ran) {
            eprintln!("{note}");
        }
    })?;
    // The outputs first: nothing after this (printing, the trace files, the checks) can
    // lose them.
    let (written, output_failed) = write_outputs(&prepared);
    if let Some(warning) = no_task_warning(&prepared, report.tasks) {
        eprintln!("{warning}");
    }
    outln!("{}", ran_line(&prepared.spec.name, &report));
    if let Some(note) = unused_result_note(&prepared) {
        outln!("{note}");
    }
    for line in written {
        outln!("{line}");
    }
    let traced = trace_out::write(&prepared.trace, report.trace.as_deref().map(|t| t.model()));
    let checked = check(&prepared);
    // The first failure is the command's: an output, then a trace file, then a check.
    match (output_failed, traced) {
        (Some(e), traced) => {
            if let Err(t) = traced {
                eprintln!("{}", crate::error_chain(&t));
            }
            Err(e)
        }
        (None, Err(t)) => Err(t),
        (None, Ok(())) => checked,
    }
}

/// The line printed after a successful run: its times and the runtime variant it used, with
/// the host's graph build and upload under `host_build_graph`.
pub fn ran_line(callable: &str, report: &RunReport) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut line = format!(
        "ran `{callable}` in {:.3} ms ({:.3} ms on the device) under {}",
        ms(report.total_time),
        ms(report.device_time),
        report.runtime()
    );
    if let Some(g) = &report.graph {
        line.push_str(&format!(
            " (graph of {} tasks built on the host in {:.3} ms, uploaded in {:.3} ms)",
            g.tasks,
            ms(g.build_time),
            ms(g.upload_time)
        ));
    }
    line
}

/// The note printed when the callable has results but the run neither writes nor checks
/// any of them (the work was done and thrown away).
pub fn unused_result_note(prepared: &PreparedRun) -> Option<&'static str> {
    let has_results = prepared
        .spec
        .signature
        .args
        .iter()
        .any(|a| a.direction.copies_back());
    (has_results && prepared.outputs.is_empty() && prepared.checks.is_empty())
        .then_some("(no --output or --check given: the result was not saved or checked)")
}

/// The warning printed when a run succeeded but its orchestration submitted no task: no
/// kernel ran, so every result is what the run started with.
pub fn no_task_warning(prepared: &PreparedRun, tasks: u64) -> Option<String> {
    (tasks == 0).then(|| {
        format!(
            "warning: the orchestration of `{}` submitted no task, so no kernel ran: its \
             results are what the run started with (`out` arguments zero, `inout` ones \
             their inputs)",
            prepared.spec.name
        )
    })
}
