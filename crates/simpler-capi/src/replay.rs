//! Record and replay: `simpler_record_run`, `simpler_replay_run` and
//! `simpler_recording_destroy` (`docs/c-abi.md` §5; the graphs: `docs/chip-runtime.md`
//! §17). A recording run is a `host_build_graph` run whose graph the host keeps
//! ([`simpler_host::ChipWorker::submit_record`]); a replay runs that graph again on new
//! arguments ([`simpler_host::ChipWorker::submit_replay`]), which the host checks against
//! the recording (shapes, dtypes, scalars) and refuses naming the argument. Both entries
//! check the C arguments as `simpler_prepare_run` does ([`crate::run::prepare_args`]) and
//! wait for their run. This module keeps the recordings' table; the rules are the host's.

use std::sync::Arc;

use simpler_host::{CallConfig, CallableInfo, HostError, RecordedRun, Runtime};

use crate::context_table::{check_open, context, Context};
use crate::ffi_guard;
use crate::handles::{HandleKind, ProcessTable};
use crate::raw::Out;
use crate::run::{owned_args, prepare_args, prepare_call};
use crate::status::{Failure, Outcome, SimplerStatus};
use crate::types::{SimplerArg, SimplerContext, SimplerRecording, SimplerRunConfig};

/// The recordings of this process.
pub static RECORDINGS: ProcessTable<Recording> = ProcessTable::new(HandleKind::Recording);

/// A recording made by `simpler_record_run`.
pub struct Recording {
    /// The context handle it belongs to.
    ctx: u64,
    /// The recorded callable as registered when it was recorded: a replay's C arguments are
    /// checked against its signature (the host then checks them against the recording).
    info: CallableInfo,
    recorded: RecordedRun,
}

/// Refuses a run config that names a runtime other than `host_build_graph` (the only one
/// that records a graph).
fn graph_runtime(config: &CallConfig) -> Outcome {
    match config.runtime {
        None | Some(Runtime::HostBuildGraph) => Ok(()),
        Some(other) => Err(Failure::new(
            SimplerStatus::InvalidConfig,
            format!(
                "`cfg->runtime`: names {other}, but recorded graphs run under host_build_graph \
                 (use 0 or SIMPLER_RUNTIME_HOST_BUILD_GRAPH)"
            ),
        )),
    }
}

/// The recording behind `recording`, which must belong to context `ctx`.
fn recording_of(
    ctx: u64,
    recording: *mut SimplerRecording,
) -> Result<(u64, Arc<Recording>), Failure> {
    if recording.is_null() {
        return Err(Failure::null("recording"));
    }
    let handle = recording as usize as u64;
    let r = RECORDINGS.get().lookup(handle, "recording")?;
    if r.ctx != ctx {
        return Err(Failure::invalid("recording", "belongs to another context"));
    }
    Ok((handle, r))
}

/// Submits under the context's launch lock (so its latest-run record stays exact) and
/// waits for the run; gives the recording a recording run made.
fn submit_and_wait(
    c: &Context,
    submit: impl FnOnce() -> Result<simpler_host::RunHandle, HostError>,
) -> Result<Option<RecordedRun>, Failure> {
    let handle = {
        let _launching = c.launching.lock();
        submit()?
    };
    let output = handle.take_output()?;
    Ok(output.report.recording)
}

/// `simpler_record_run`: runs a callable under `host_build_graph`, waits, and keeps its
/// graph as a recording.
///
/// # Safety
/// As `simpler_prepare_run` for `args` and `cfg`; `out` is NULL or writable. Host tensors
/// are used in place until the entry returns.
#[no_mangle]
pub unsafe extern "C" fn simpler_record_run(
    ctx: *mut SimplerContext,
    callable_id: i32,
    args: *const SimplerArg,
    nargs: usize,
    cfg: *const SimplerRunConfig,
    out: *mut *mut SimplerRecording,
) -> i32 {
    ffi_guard::run("simpler_record_run", || -> Outcome {
        // SAFETY: the header's contract for `out`.
        let out = unsafe { Out::new(out, std::ptr::null_mut(), "out") }?;
        let (ch, c) = context(ctx)?;
        check_open(&c)?;
        // SAFETY: the header's contract for `args` and `cfg`.
        let (id, info, prepared, config) =
            unsafe { prepare_call(&c, callable_id, args, nargs, cfg) }?;
        graph_runtime(&config)?;
        let recorded = submit_and_wait(&c, || {
            c.worker.submit_record(id, owned_args(&prepared), &config)
        })?
        .ok_or_else(|| {
            Failure::new(
                SimplerStatus::Internal,
                "the recording run succeeded without a recording",
            )
        })?;
        let handle = RECORDINGS.get().insert(Arc::new(Recording {
            ctx: ch,
            info,
            recorded,
        }));
        c.book.lock().recordings.insert(handle);
        out.set(handle as usize as *mut SimplerRecording);
        Ok(())
    })
}

/// `simpler_replay_run`: runs a recording again on new arguments and waits.
///
/// # Safety
/// As `simpler_prepare_run` for `args` and `cfg`. Host tensors are used in place until the
/// entry returns.
#[no_mangle]
pub unsafe extern "C" fn simpler_replay_run(
    ctx: *mut SimplerContext,
    recording: *mut SimplerRecording,
    args: *const SimplerArg,
    nargs: usize,
    cfg: *const SimplerRunConfig,
) -> i32 {
    ffi_guard::run("simpler_replay_run", || -> Outcome {
        let (ch, c) = context(ctx)?;
        check_open(&c)?;
        let (_, r) = recording_of(ch, recording)?;
        // SAFETY: the header's contract for `args` and `cfg`.
        let (prepared, config) = unsafe { prepare_args(&c, &r.info, args, nargs, cfg) }
            .map_err(|f| as_replay(f, &r.info))?;
        graph_runtime(&config)?;
        submit_and_wait(&c, || {
            c.worker
                .submit_replay(&r.recorded, owned_args(&prepared), &config)
        })?;
        Ok(())
    })
}

/// A refusal of a replay's C arguments by the recorded signature, said as a replay's (the
/// host's [`HostError::ReplayMismatch`] wording): the status stays.
fn as_replay(f: Failure, info: &CallableInfo) -> Failure {
    if f.status == SimplerStatus::InvalidArgument {
        Failure::new(
            f.status,
            format!(
                "the recording of `{}` cannot take these arguments: {}",
                info.name, f.message
            ),
        )
    } else {
        f
    }
}

/// `simpler_recording_destroy`: frees a recording.
///
/// # Safety
/// None beyond the header's: `ctx` and `recording` are any values.
#[no_mangle]
pub unsafe extern "C" fn simpler_recording_destroy(
    ctx: *mut SimplerContext,
    recording: *mut SimplerRecording,
) -> i32 {
    ffi_guard::run("simpler_recording_destroy", || -> Outcome {
        let (ch, c) = context(ctx)?;
        let (handle, _) = recording_of(ch, recording)?;
        c.book.lock().recordings.remove(&handle);
        RECORDINGS.get().remove(handle, "recording")?;
        Ok(())
    })
}
