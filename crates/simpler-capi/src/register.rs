//! Callable registration from bundle bytes or a bundle file (`docs/c-abi.md` §4;
//! the registry's rules: `docs/health.md` §5). A bundle is parsed and turned into a
//! callable spec here; the id, the 64 slots, the out-parameter's −1 and the refusal while
//! a run is outstanding are the worker's (`ChipWorker::register_v2`,
//! `register_with_id`, `unregister`).

use std::ffi::c_char;

use simpler_host::{Bundle, CallableId, CallableSpec};

use crate::context_table::{check_open, context};
use crate::ffi_guard;
use crate::raw::{self, Out};
use crate::status::{Failure, Outcome, SimplerStatus};
use crate::types::SimplerContext;

fn spec_of(bytes: &[u8], what: &str) -> Result<CallableSpec, Failure> {
    Bundle::from_bytes(bytes)
        .map(Bundle::into_spec)
        .map_err(|e| Failure::new(SimplerStatus::InvalidCallable, format!("{what}: {e}")))
}

fn register_auto(
    ctx: *mut SimplerContext,
    spec: impl FnOnce() -> Result<CallableSpec, Failure>,
    out: &Out<i32>,
) -> Outcome {
    let (_, c) = context(ctx)?;
    check_open(&c)?;
    let spec = spec()?;
    let mut id = -1;
    let r = c.worker.register_v2(&spec, &mut id);
    out.set(id);
    r.map_err(Failure::from)
}

/// `simpler_register_callable_v2`: the lowest free id into `*out_id`, −1 on any failure.
///
/// # Safety
/// `bundle` is NULL or points to `len` readable bytes; `out_id` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn simpler_register_callable_v2(
    ctx: *mut SimplerContext,
    bundle: *const u8,
    len: usize,
    out_id: *mut i32,
) -> i32 {
    ffi_guard::run("simpler_register_callable_v2", || -> Outcome {
        // SAFETY: the header's contract for `out_id`.
        let out = unsafe { Out::new(out_id, -1, "out_id") }?;
        register_auto(
            ctx,
            || {
                // SAFETY: the header's contract for `bundle`.
                let bytes = unsafe { raw::bytes(bundle, len, "bundle") }?;
                spec_of(bytes, "bundle")
            },
            &out,
        )
    })
}

/// `simpler_register_callable_file`: [`simpler_register_callable_v2`] from a file.
///
/// # Safety
/// `path` is NULL or NUL-terminated; `out_id` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn simpler_register_callable_file(
    ctx: *mut SimplerContext,
    path: *const c_char,
    out_id: *mut i32,
) -> i32 {
    ffi_guard::run("simpler_register_callable_file", || -> Outcome {
        // SAFETY: the header's contract for `out_id`.
        let out = unsafe { Out::new(out_id, -1, "out_id") }?;
        let spec = || {
            // SAFETY: the header's contract for `path`.
            let path = unsafe { raw::c_str(path, "path") }?;
            // A FIFO, device or directory is refused at open (without blocking), and no more
            // than the bundle limit is read.
            let bytes = simpler_host::fsio::read_regular(
                std::path::Path::new(path),
                simpler_host::bundle::MAX_BUNDLE_BYTES,
                "a bundle",
            )
            .map_err(|e| Failure::invalid("path", e.to_string()))?;
            spec_of(&bytes, &format!("bundle file `{path}`"))
        };
        register_auto(ctx, spec, &out)
    })
}

/// `simpler_register_callable`: under the explicit id `id`.
///
/// # Safety
/// `bundle` is NULL or points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn simpler_register_callable(
    ctx: *mut SimplerContext,
    id: u32,
    bundle: *const u8,
    len: usize,
) -> i32 {
    ffi_guard::run("simpler_register_callable", || -> Outcome {
        let (_, c) = context(ctx)?;
        check_open(&c)?;
        // SAFETY: the header's contract for `bundle`.
        let bytes = unsafe { raw::bytes(bundle, len, "bundle") }?;
        c.worker.register_with_id(id, &spec_of(bytes, "bundle")?)?;
        Ok(())
    })
}

/// `simpler_unregister_callable`.
///
/// # Safety
/// None beyond the header's.
#[no_mangle]
pub unsafe extern "C" fn simpler_unregister_callable(ctx: *mut SimplerContext, id: u32) -> i32 {
    ffi_guard::run("simpler_unregister_callable", || -> Outcome {
        let (_, c) = context(ctx)?;
        check_open(&c)?;
        c.worker.unregister(CallableId(id))?;
        Ok(())
    })
}
