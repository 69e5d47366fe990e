//! Sim caller contexts for C callers without hardware (`docs/c-abi.md`
//! §12): `simpler_sim_context_create/destroy/make_current` and the streams a caller
//! lends (`simpler_sim_stream_*`). The live [`SimContext`]s are kept in a process-wide
//! table keyed by generation; the context itself, its generation and the thread's current
//! context are simpler-host's ([`simpler_host::sim_context`],
//! [`simpler_host::lifecycle::set_current_context`]).

use std::ffi::c_void;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use simpler_device::sim::SimOptions;
use simpler_device::{Device, DeviceError, StreamId, Topology};
use simpler_host::lifecycle::set_current_context;
use simpler_host::sim_context::SimContext;

use crate::ffi_guard;
use crate::handles::{HandleKind, ProcessTable};
use crate::raw::{ForeignCall, Out};
use crate::status::{Failure, Outcome, SimplerStatus};

/// The sim caller contexts of this process, by generation.
static SIMS: ProcessTable<SimContext> = ProcessTable::new(HandleKind::SimContext);

fn sim(generation: u64) -> Result<Arc<SimContext>, Failure> {
    SIMS.get().lookup_key(generation, || {
        Failure::invalid(
            "generation",
            format!("{generation} names no live sim caller context (simpler_sim_context_create)"),
        )
    })
}

fn device_failure(what: &str, e: DeviceError) -> Failure {
    let status = match e {
        DeviceError::Timeout(_) => SimplerStatus::Timeout,
        // A stream id the caller made up or already destroyed is a bad argument, as for
        // `simpler_launch_run_on_stream`'s `caller_stream`.
        DeviceError::UnknownStream(_) => return Failure::invalid("stream", format!("{what}: {e}")),
        _ => SimplerStatus::DeviceError,
    };
    Failure::new(status, format!("{what}: {e}"))
}

/// The stream id of a `SimplerStream`.
///
/// # Errors
/// `SIMPLER_STATUS_INVALID_ARGUMENT` naming `param` when the value is not a stream id.
pub fn stream_id(stream: u64, param: &str) -> Result<StreamId, Failure> {
    u32::try_from(stream)
        .map(StreamId::from_raw)
        .map_err(|_| Failure::invalid(param, format!("{stream} is not a stream of this library")))
}

/// `simpler_sim_context_create`: a sim device of `clusters` × `aicpu_threads` (0: the
/// defaults) under a fresh generation.
///
/// # Safety
/// `generation_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn simpler_sim_context_create(
    clusters: u32,
    aicpu_threads: u32,
    generation_out: *mut u64,
) -> i32 {
    ffi_guard::run("simpler_sim_context_create", || -> Outcome {
        // SAFETY: the header's contract for `generation_out`.
        let out = unsafe { Out::new(generation_out, 0, "generation_out") }?;
        let d = Topology::default();
        let topology = Topology {
            clusters: if clusters == 0 { d.clusters } else { clusters },
            aicpu_threads: if aicpu_threads == 0 {
                d.aicpu_threads
            } else {
                aicpu_threads
            },
        };
        let ctx = SimContext::create(topology, SimOptions::default())?;
        let generation = ctx.generation().get();
        SIMS.get().insert_key(generation, Arc::new(ctx));
        out.set(generation);
        Ok(())
    })
}

/// `simpler_sim_context_destroy`.
///
/// # Safety
/// None beyond the header's.
#[no_mangle]
pub unsafe extern "C" fn simpler_sim_context_destroy(generation: u64) -> i32 {
    ffi_guard::run("simpler_sim_context_destroy", || -> Outcome {
        let removed = SIMS.get().remove_key(generation, || {
            Failure::invalid(
                "generation",
                format!("{generation} names no live sim caller context"),
            )
        })?;
        drop(removed);
        Ok(())
    })
}

/// `simpler_sim_context_make_current`: `generation` (a live sim context) becomes the calling
/// thread's current context; 0 clears it.
///
/// # Safety
/// None beyond the header's.
#[no_mangle]
pub unsafe extern "C" fn simpler_sim_context_make_current(generation: u64) -> i32 {
    ffi_guard::run("simpler_sim_context_make_current", || -> Outcome {
        let current = match NonZeroU64::new(generation) {
            None => None,
            Some(g) => Some(sim(g.get())?.generation()),
        };
        set_current_context(current);
        Ok(())
    })
}

/// `simpler_sim_stream_create`.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn simpler_sim_stream_create(generation: u64, out: *mut u64) -> i32 {
    ffi_guard::run("simpler_sim_stream_create", || -> Outcome {
        // SAFETY: the header's contract for `out`.
        let out = unsafe { Out::new(out, u64::MAX, "out") }?;
        let s = sim(generation)?
            .device()
            .create_stream()
            .map_err(|e| device_failure("creating a caller stream", e))?;
        out.set(u64::from(s.raw()));
        Ok(())
    })
}

/// `simpler_sim_stream_destroy`: waits for the stream's work, then destroys it.
///
/// # Safety
/// None beyond the header's.
#[no_mangle]
pub unsafe extern "C" fn simpler_sim_stream_destroy(generation: u64, stream: u64) -> i32 {
    ffi_guard::run("simpler_sim_stream_destroy", || -> Outcome {
        let s = stream_id(stream, "stream")?;
        sim(generation)?
            .device()
            .destroy_stream(s)
            .map_err(|e| device_failure(&format!("destroying stream {stream}"), e))
    })
}

/// `simpler_sim_stream_launch_host_fn`: queues `f(user)` on the stream.
///
/// # Safety
/// `f` is NULL or a function that may be called once with `user` from another thread.
#[no_mangle]
pub unsafe extern "C" fn simpler_sim_stream_launch_host_fn(
    generation: u64,
    stream: u64,
    f: Option<extern "C" fn(*mut c_void)>,
    user: *mut c_void,
) -> i32 {
    ffi_guard::run("simpler_sim_stream_launch_host_fn", || -> Outcome {
        let f = f.ok_or_else(|| Failure::null("fn"))?;
        let s = stream_id(stream, "stream")?;
        let ctx = sim(generation)?;
        // SAFETY: the header's contract: `f` may be called with `user` on another thread.
        let call = unsafe { ForeignCall::new(f, user) };
        ctx.device()
            .launch_host_fn(s, move || call.invoke())
            .map_err(|e| device_failure(&format!("queueing a host function on stream {stream}"), e))
    })
}

/// `simpler_sim_stream_synchronize`: waits until the stream drains, at most `timeout_ms`.
///
/// # Safety
/// None beyond the header's.
#[no_mangle]
pub unsafe extern "C" fn simpler_sim_stream_synchronize(
    generation: u64,
    stream: u64,
    timeout_ms: u64,
) -> i32 {
    ffi_guard::run("simpler_sim_stream_synchronize", || -> Outcome {
        if timeout_ms == 0 {
            return Err(Failure::invalid("timeout_ms", "must be > 0"));
        }
        let s = stream_id(stream, "stream")?;
        sim(generation)?
            .device()
            .synchronize_stream(s, Duration::from_millis(timeout_ms))
            .map_err(|e| device_failure(&format!("synchronizing stream {stream}"), e))
    })
}
