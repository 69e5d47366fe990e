//! Runs: `simpler_prepare_run` → `simpler_launch_run` / `simpler_launch_run_joined` /
//! `simpler_launch_run_on_stream` → `simpler_poll_run` / `simpler_wait_run` →
//! `simpler_finalize_run` (`docs/c-abi.md` §5; the lane's rules:
//! `docs/lane.md` §3, §8, §12).
//!
//! Prepare checks the arguments against the callable's signature
//! ([`simpler_host::Signature::check_offers`]) and records them; nothing touches the device.
//! A launch builds the run's owned arguments from that record (host tensors lent in place,
//! [`CallerMemory`]) and calls the worker (`submit_with`, or `submit_on_stream` for a
//! caller stream), which claims the execution mode and orders the run behind the context's
//! previous one (the lane's cross-run join). A refused launch leaves the run prepared.
//! This module keeps the run table and each context's latest launched run; it never
//! re-implements a lane rule.

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use simpler_abi::DataType;
use simpler_host::{
    ArgOffer, CallConfig, CallableId, CallableInfo, HostError, HostMemory, OwnedArg, Passing,
    RingValue, RunHandle, RuntimeEnv, ScalarValue,
};

use crate::context_table::{check_open, context, Context};
use crate::ffi_guard;
use crate::handles::{HandleKind, ProcessTable};
use crate::host_buffer::CallerMemory;
use crate::raw::{self, Out};
use crate::sim::stream_id;
use crate::status::{Failure, Outcome, SimplerStatus};
use crate::types::{
    arg_kind, SimplerArg, SimplerContext, SimplerRun, SimplerRunConfig, MAX_DIMS, WAIT_FOREVER,
};

/// The runs of this process.
pub static RUNS: ProcessTable<Run> = ProcessTable::new(HandleKind::Run);

/// One argument as prepared: what a launch turns into an [`OwnedArg`].
#[derive(Debug)]
pub(crate) enum Prepared {
    /// Host memory at an address (kept as an integer: the run table is shared by threads),
    /// lent read-only or writable.
    Host {
        addr: usize,
        len: usize,
        writable: bool,
        shape: Vec<u64>,
        dtype: DataType,
    },
    Device {
        ptr: u64,
        shape: Vec<u64>,
        dtype: DataType,
    },
    Scalar(u64),
}

enum RunState {
    Prepared,
    Launched(Arc<RunHandle>),
}

/// A run made by `simpler_prepare_run`.
pub struct Run {
    /// The context handle the run belongs to.
    ctx: u64,
    callable: CallableId,
    args: Vec<Prepared>,
    config: CallConfig,
    state: Mutex<RunState>,
}

impl Run {
    /// The owned arguments of one launch.
    fn owned_args(&self) -> Vec<OwnedArg> {
        owned_args(&self.args)
    }

    fn handle(&self, what: &str) -> Result<Arc<RunHandle>, Failure> {
        match &*self.state.lock() {
            RunState::Launched(h) => Ok(h.clone()),
            RunState::Prepared => Err(Failure::new(
                SimplerStatus::InvalidState,
                format!("`{what}` was not launched (simpler_launch_run*)"),
            )),
        }
    }
}

/// The owned arguments of one submit of `args`.
pub(crate) fn owned_args(args: &[Prepared]) -> Vec<OwnedArg> {
    args.iter()
        .map(|a| match a {
            Prepared::Host {
                addr,
                len,
                writable,
                shape,
                dtype,
            } => {
                let ptr = NonNull::new(*addr as *mut u8).unwrap_or(NonNull::dangling());
                // SAFETY: `simpler_prepare_run`'s contract: the caller keeps the `len`
                // bytes at `addr` alive and untouched from the launch until the run is
                // finalized (a zero-length tensor is never dereferenced).
                let memory = unsafe { CallerMemory::new(ptr, *len) };
                if *writable {
                    OwnedArg::Tensor {
                        buffer: Box::new(memory),
                        shape: shape.clone(),
                        dtype: *dtype,
                    }
                } else {
                    OwnedArg::Input {
                        buffer: Box::new(memory),
                        shape: shape.clone(),
                        dtype: *dtype,
                    }
                }
            }
            Prepared::Device { ptr, shape, dtype } => OwnedArg::Device {
                ptr: simpler_device::DevicePtr::from_raw(*ptr),
                shape: shape.clone(),
                dtype: *dtype,
            },
            Prepared::Scalar(bits) => OwnedArg::Scalar(*bits),
        })
        .collect()
}

/// The run behind `run`, which must belong to context `ctx`.
fn run_of(ctx: u64, run: *mut SimplerRun, what: &str) -> Result<(u64, Arc<Run>), Failure> {
    if run.is_null() {
        return Err(Failure::null(what));
    }
    let handle = run as usize as u64;
    let r = RUNS.get().lookup(handle, what)?;
    if r.ctx != ctx {
        return Err(Failure::invalid(what, "belongs to another context"));
    }
    Ok((handle, r))
}

/// The offer and the shape/dtype of one C argument (the signature check comes after).
fn offer_of(i: usize, a: &SimplerArg) -> Result<ArgOffer, Failure> {
    let param = format!("args[{i}]");
    if a.reserved != 0 {
        return Err(Failure::invalid(&format!("{param}.reserved"), "must be 0"));
    }
    let tensor = |a: &SimplerArg| -> Result<(Vec<u64>, DataType), Failure> {
        let dtype = DataType::from_raw(a.dtype).ok_or_else(|| {
            Failure::invalid(
                &format!("{param}.dtype"),
                format!("{} is not a SimplerDataType", a.dtype),
            )
        })?;
        let n = a.ndims as usize;
        if !(1..=MAX_DIMS).contains(&n) {
            return Err(Failure::invalid(
                &format!("{param}.ndims"),
                format!("{n} dimensions; a tensor has 1..={MAX_DIMS}"),
            ));
        }
        Ok((a.shape[..n].to_vec(), dtype))
    };
    match a.kind {
        arg_kind::HOST_TENSOR => {
            let (shape, dtype) = tensor(a)?;
            let len = usize::try_from(a.nbytes).map_err(|_| {
                Failure::invalid(
                    &format!("{param}.nbytes"),
                    format!("{} bytes do not fit", a.nbytes),
                )
            })?;
            let ptr_param = format!("{param}.host_ptr");
            if a.host_ptr.is_null() && len != 0 {
                return Err(Failure::null(&ptr_param));
            }
            if len != 0 {
                // The range check of the copy entries, so a range that wraps is refused
                // here rather than faulting at the launch.
                raw::check_extent(a.host_ptr.cast_const(), len, &ptr_param)?;
                // Kernels read a tensor's elements in place as their type: the data must
                // start on an element boundary.
                let align = dtype.size_bytes();
                if !(a.host_ptr as usize).is_multiple_of(align) {
                    return Err(Failure::invalid(
                        &ptr_param,
                        format!(
                            "{:p} is not aligned to the {align}-byte elements of {dtype}",
                            a.host_ptr
                        ),
                    ));
                }
            }
            Ok(ArgOffer::Host(HostMemory {
                addr: a.host_ptr as usize,
                len,
                writable: true,
                shape,
                dtype,
            }))
        }
        arg_kind::DEVICE_TENSOR => {
            let (shape, dtype) = tensor(a)?;
            Ok(ArgOffer::Device { shape, dtype })
        }
        arg_kind::SCALAR => Ok(ArgOffer::Scalar(ScalarValue::Bits(a.scalar_bits))),
        other => Err(Failure::invalid(
            &format!("{param}.kind"),
            format!("{other} is not a SimplerArgKind (1 host tensor, 2 device tensor, 3 scalar)"),
        )),
    }
}

fn call_config(cfg: Option<SimplerRunConfig>) -> Result<CallConfig, Failure> {
    let Some(c) = cfg else {
        return Ok(CallConfig::default());
    };
    if c.reserved != 0 {
        return Err(Failure::invalid("cfg->reserved", "must be 0"));
    }
    if c.reserved2 != 0 {
        return Err(Failure::invalid("cfg->reserved2", "must be 0"));
    }
    let runtime = crate::context::runtime_field(c.runtime, "cfg->runtime")?;
    let ring = |v: u64| (v != 0).then_some(RingValue::All(v));
    Ok(CallConfig {
        aicpu_thread_num: c.aicpu_thread_num,
        runtime_env: RuntimeEnv {
            ring_task_window: ring(c.ring_task_window),
            ring_heap: ring(c.ring_heap),
            ring_dep_pool: ring(c.ring_dep_pool),
            ready_queue: None,
        },
        runtime,
        ..CallConfig::default()
    })
}

/// Checks the C arguments `args` (`nargs` of them) against the signature of `info` and the
/// run config `cfg` (`NULL`: the defaults) as `simpler_prepare_run` does, and gives them
/// as prepared with the run's call config. The count is checked before `args` is read.
///
/// # Errors
/// The signature's refusal naming the argument, or a config field's.
///
/// # Safety
/// `args` is NULL or points to `nargs` `SimplerArg`s; `cfg` is NULL or a valid
/// `SimplerRunConfig`.
pub(crate) unsafe fn prepare_args(
    c: &Context,
    info: &CallableInfo,
    args: *const SimplerArg,
    nargs: usize,
    cfg: *const SimplerRunConfig,
) -> Result<(Vec<Prepared>, CallConfig), Failure> {
    // A count the signature does not take is refused before `nargs` elements are read.
    if nargs != info.signature.args.len() {
        return Err(HostError::ArgumentCount {
            callable: info.name.clone(),
            expected: info.signature.args.len(),
            got: nargs,
        }
        .into());
    }
    // SAFETY: the caller's contract for `args` and `cfg`.
    let args = unsafe { raw::array(args, nargs, "args") }?;
    // SAFETY: as above.
    let config = call_config(unsafe { raw::read_versioned(cfg, "cfg") }?)?;
    // Out-of-range fields are refused here, not first at the launch.
    config.validate(c.worker.config())?;
    let offers = args
        .iter()
        .enumerate()
        .map(|(i, a)| offer_of(i, a))
        .collect::<Result<Vec<_>, _>>()?;
    let passing = info
        .signature
        .check_offers(&info.name, &offers)
        .map_err(HostError::from)?;
    let prepared: Vec<Prepared> = offers
        .into_iter()
        .zip(passing)
        .zip(args)
        .map(|((offer, p), a)| match offer {
            ArgOffer::Host(m) => Prepared::Host {
                addr: m.addr,
                len: m.len,
                writable: p == Passing::LendWritable,
                shape: m.shape,
                dtype: m.dtype,
            },
            ArgOffer::Device { shape, dtype } => Prepared::Device {
                ptr: a.device_ptr,
                shape,
                dtype,
            },
            ArgOffer::Scalar(_) => match p {
                Passing::Scalar(bits) => Prepared::Scalar(bits),
                other => unreachable!("a scalar offer passes as a scalar, not {other:?}"),
            },
        })
        .collect();
    Ok((prepared, config))
}

/// The registered callable `callable_id` names, and `args` prepared against its signature
/// with the run's call config ([`prepare_args`]): what `simpler_prepare_run` and
/// `simpler_record_run` both start from.
///
/// # Errors
/// A negative or unknown `callable_id`, or [`prepare_args`]' refusals.
///
/// # Safety
/// As [`prepare_args`].
pub(crate) unsafe fn prepare_call(
    c: &Context,
    callable_id: i32,
    args: *const SimplerArg,
    nargs: usize,
    cfg: *const SimplerRunConfig,
) -> Result<(CallableId, CallableInfo, Vec<Prepared>, CallConfig), Failure> {
    let id = u32::try_from(callable_id)
        .map(CallableId)
        .map_err(|_| Failure::invalid("callable_id", format!("{callable_id} is negative")))?;
    let info = c.worker.registered_callable(id)?;
    // SAFETY: the caller's contract for `args` and `cfg`.
    let (prepared, config) = unsafe { prepare_args(c, &info, args, nargs, cfg) }?;
    Ok((id, info, prepared, config))
}

/// `simpler_prepare_run`: checks `args` against the callable's signature and makes a run.
///
/// # Safety
/// `args` is NULL or points to `nargs` `SimplerArg`s; `cfg` is NULL or a valid
/// `SimplerRunConfig`; `out` is NULL or writable. Host tensors stay valid as
/// `docs/c-abi.md` §10 says.
#[no_mangle]
pub unsafe extern "C" fn simpler_prepare_run(
    ctx: *mut SimplerContext,
    callable_id: i32,
    args: *const SimplerArg,
    nargs: usize,
    cfg: *const SimplerRunConfig,
    out: *mut *mut SimplerRun,
) -> i32 {
    ffi_guard::run("simpler_prepare_run", || -> Outcome {
        // SAFETY: the header's contract for `out`.
        let out = unsafe { Out::new(out, std::ptr::null_mut(), "out") }?;
        let (ch, c) = context(ctx)?;
        check_open(&c)?;
        // SAFETY: the header's contract for `args` and `cfg`.
        let (id, _, prepared, config) = unsafe { prepare_call(&c, callable_id, args, nargs, cfg) }?;
        let run = Arc::new(Run {
            ctx: ch,
            callable: id,
            args: prepared,
            config,
            state: Mutex::new(RunState::Prepared),
        });
        let handle = RUNS.get().insert(run);
        c.book.lock().runs.insert(handle);
        out.set(handle as usize as *mut SimplerRun);
        Ok(())
    })
}

/// How a run is launched.
enum Launch {
    Program,
    Stream(u64),
}

fn launch(
    ctx: *mut SimplerContext,
    run: *mut SimplerRun,
    how: Launch,
    predecessor: Option<*mut SimplerRun>,
) -> Outcome {
    let (ch, c) = context(ctx)?;
    check_open(&c)?;
    let (rh, r) = run_of(ch, run, "run")?;
    let predecessor = match predecessor {
        None => None,
        Some(p) => Some(run_of(ch, p, "predecessor")?.0),
    };
    // One launch at a time per context, so the latest-run record stays exact. Locks, in
    // order: the context's launch lock, the run's state, the book (only ever briefly).
    let _launching = c.launching.lock();
    let mut state = r.state.lock();
    {
        let book = c.book.lock();
        if !book.runs.contains(&rh) {
            return Err(Failure::new(
                SimplerStatus::InvalidHandle,
                "`run` was finalized while it was being launched",
            ));
        }
        if let Some(p) = predecessor {
            if book.latest != Some(p) {
                return Err(Failure::invalid(
                    "predecessor",
                    match book.latest {
                        None => "the context has no launched run that is not finalized".to_string(),
                        Some(l) => format!(
                            "is not the context's latest launched run that is not finalized \
                             (that is {l:#x})"
                        ),
                    },
                ));
            }
        }
    }
    if let RunState::Launched(_) = &*state {
        return Err(Failure::new(
            SimplerStatus::InvalidState,
            "`run` was already launched; prepare a new run",
        ));
    }
    // The book is not held here: the launch may wait for a predecessor's drain, and a host
    // function on a caller stream may meanwhile call entries that need it.
    let handle = submit(&c, &r, how)?;
    *state = RunState::Launched(Arc::new(handle));
    c.book.lock().latest = Some(rh);
    Ok(())
}

fn submit(c: &Context, r: &Run, how: Launch) -> Result<RunHandle, Failure> {
    Ok(match how {
        Launch::Program => c
            .worker
            .submit_with(r.callable, r.owned_args(), &r.config)?,
        Launch::Stream(s) => {
            let caller = stream_id(s, "caller")?;
            c.worker
                .submit_on_stream(r.callable, r.owned_args(), &r.config, caller)?
        }
    })
}

/// `simpler_launch_run`: program launch on the context's own streams.
///
/// # Safety
/// None beyond the header's.
#[no_mangle]
pub unsafe extern "C" fn simpler_launch_run(ctx: *mut SimplerContext, run: *mut SimplerRun) -> i32 {
    ffi_guard::run("simpler_launch_run", || {
        launch(ctx, run, Launch::Program, None)
    })
}

/// `simpler_launch_run_joined`: program launch behind `predecessor`, which must be the
/// context's latest launched run not yet finalized.
///
/// # Safety
/// None beyond the header's.
#[no_mangle]
pub unsafe extern "C" fn simpler_launch_run_joined(
    ctx: *mut SimplerContext,
    run: *mut SimplerRun,
    predecessor: *mut SimplerRun,
) -> i32 {
    ffi_guard::run("simpler_launch_run_joined", || {
        if predecessor.is_null() {
            return Err(Failure::null("predecessor"));
        }
        launch(ctx, run, Launch::Program, Some(predecessor))
    })
}

/// `simpler_launch_run_on_stream`: launch on the caller's stream; `predecessor` may be NULL.
///
/// # Safety
/// None beyond the header's.
#[no_mangle]
pub unsafe extern "C" fn simpler_launch_run_on_stream(
    ctx: *mut SimplerContext,
    run: *mut SimplerRun,
    caller: u64,
    predecessor: *mut SimplerRun,
) -> i32 {
    ffi_guard::run("simpler_launch_run_on_stream", || {
        let p = (!predecessor.is_null()).then_some(predecessor);
        launch(ctx, run, Launch::Stream(caller), p)
    })
}

/// `simpler_poll_run`: `*done = 1` once the run is terminal; never blocks.
///
/// # Safety
/// `done` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn simpler_poll_run(
    ctx: *mut SimplerContext,
    run: *mut SimplerRun,
    done: *mut std::ffi::c_int,
) -> i32 {
    ffi_guard::run("simpler_poll_run", || -> Outcome {
        // SAFETY: the header's contract for `done`.
        let out = unsafe { Out::new(done, 0, "done") }?;
        let (ch, _c) = context(ctx)?;
        let (_, r) = run_of(ch, run, "run")?;
        // A run whose state is locked is being launched by another thread: not done, and
        // poll does not wait for that launch.
        let Some(state) = r.state.try_lock() else {
            return Ok(());
        };
        let handle = match &*state {
            RunState::Launched(h) => h.clone(),
            RunState::Prepared => {
                return Err(Failure::new(
                    SimplerStatus::InvalidState,
                    "`run` was not launched (simpler_launch_run*)",
                ))
            }
        };
        drop(state);
        out.set(std::ffi::c_int::from(handle.try_poll()?));
        Ok(())
    })
}

/// `simpler_wait_run`: the run's verdict, waiting at most `timeout_ms`
/// (`SIMPLER_WAIT_FOREVER`: unbounded).
///
/// # Safety
/// None beyond the header's.
#[no_mangle]
pub unsafe extern "C" fn simpler_wait_run(
    ctx: *mut SimplerContext,
    run: *mut SimplerRun,
    timeout_ms: u64,
) -> i32 {
    ffi_guard::run("simpler_wait_run", || -> Outcome {
        let (ch, _c) = context(ctx)?;
        let (_, r) = run_of(ch, run, "run")?;
        let timeout = (timeout_ms != WAIT_FOREVER).then(|| Duration::from_millis(timeout_ms));
        r.handle("run")?.wait(timeout)?;
        Ok(())
    })
}

/// `simpler_finalize_run`: waits, frees the run, returns its verdict.
///
/// # Safety
/// None beyond the header's.
#[no_mangle]
pub unsafe extern "C" fn simpler_finalize_run(
    ctx: *mut SimplerContext,
    run: *mut SimplerRun,
) -> i32 {
    ffi_guard::run("simpler_finalize_run", || -> Outcome {
        let (ch, c) = context(ctx)?;
        let (rh, r) = run_of(ch, run, "run")?;
        let forget = |c: &Context| {
            let mut book = c.book.lock();
            book.runs.remove(&rh);
            if book.latest == Some(rh) {
                book.latest = None;
            }
        };
        let launched = {
            let state = r.state.lock();
            match &*state {
                RunState::Launched(h) => h.clone(),
                RunState::Prepared => {
                    // Never launched: freed under its state lock, so no launch can start
                    // on it any more.
                    forget(&c);
                    RUNS.get().remove(rh, "run")?;
                    return Ok(());
                }
            }
        };
        let verdict = match launched.wait(None) {
            // Nothing was touched: the run stays, to be finalized from its context.
            Err(e @ HostError::ExecutionContextRefused(_)) => return Err(e.into()),
            v => v,
        };
        forget(&c);
        RUNS.get().remove(rh, "run")?;
        verdict.map_err(Failure::from)
    })
}
