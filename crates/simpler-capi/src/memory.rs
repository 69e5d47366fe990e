//! Device memory of a context: `simpler_malloc`, `simpler_free`, `simpler_copy_to_device`,
//! `simpler_copy_from_device` (`docs/c-abi.md` §6), each a conversion around
//! the worker's own call, which checks allocations, ranges and the context.

use std::ffi::c_void;

use simpler_device::DevicePtr;

use crate::context_table::context;
use crate::ffi_guard;
use crate::raw::{self, Out};
use crate::status::{Failure, Outcome};
use crate::types::SimplerContext;

fn len(size: u64) -> Result<usize, Failure> {
    usize::try_from(size).map_err(|_| Failure::invalid("size", format!("{size} bytes do not fit")))
}

/// `simpler_malloc`: `size` bytes of zeroed device memory at `*dev_ptr` (0 on failure).
///
/// # Safety
/// `dev_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn simpler_malloc(
    ctx: *mut SimplerContext,
    size: u64,
    dev_ptr: *mut u64,
) -> i32 {
    ffi_guard::run("simpler_malloc", || -> Outcome {
        // SAFETY: the header's contract for `dev_ptr`.
        let out = unsafe { Out::new(dev_ptr, 0, "dev_ptr") }?;
        let (_, c) = context(ctx)?;
        out.set(c.worker.malloc(size)?.addr());
        Ok(())
    })
}

/// `simpler_free`.
///
/// # Safety
/// None beyond the header's.
#[no_mangle]
pub unsafe extern "C" fn simpler_free(ctx: *mut SimplerContext, dev_ptr: u64) -> i32 {
    ffi_guard::run("simpler_free", || -> Outcome {
        let (_, c) = context(ctx)?;
        c.worker.free(DevicePtr::from_raw(dev_ptr))?;
        Ok(())
    })
}

/// `simpler_copy_to_device`: `size` bytes from `src` to device memory at `dst`.
///
/// # Safety
/// `src` is NULL or points to `size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn simpler_copy_to_device(
    ctx: *mut SimplerContext,
    dst: u64,
    src: *const c_void,
    size: u64,
) -> i32 {
    ffi_guard::run("simpler_copy_to_device", || -> Outcome {
        let (_, c) = context(ctx)?;
        // SAFETY: the header's contract for `src`.
        let bytes = unsafe { raw::bytes(src.cast(), len(size)?, "src") }?;
        c.worker.copy_to(DevicePtr::from_raw(dst), bytes)?;
        Ok(())
    })
}

/// `simpler_copy_from_device`: `size` bytes of device memory at `src` into `dst`.
///
/// # Safety
/// `dst` is NULL or points to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn simpler_copy_from_device(
    ctx: *mut SimplerContext,
    dst: *mut c_void,
    src: u64,
    size: u64,
) -> i32 {
    ffi_guard::run("simpler_copy_from_device", || -> Outcome {
        let (_, c) = context(ctx)?;
        // SAFETY: the header's contract for `dst`.
        let bytes = unsafe { raw::bytes_mut(dst.cast(), len(size)?, "dst") }?;
        c.worker.copy_from(bytes, DevicePtr::from_raw(src))?;
        Ok(())
    })
}
