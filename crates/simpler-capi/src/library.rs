//! What the library says about itself: `simpler_last_error`, `simpler_status_name`,
//! `simpler_capabilities`, and the closed compatibility entry `simpler_kernel_mode_launch`
//! (`docs/c-abi.md` §8, §13). It owns no state beyond the last-error
//! buffer of [`crate::ffi_guard`].

use std::ffi::c_char;

use crate::ffi_guard;
use crate::raw::Out;
use crate::status::{Failure, Outcome, SimplerStatus};
use crate::types::{capability, SimplerArg, SimplerContext};

/// `simpler_last_error`: this thread's last failure text ("" after a success), valid until
/// this thread's next entry call. Never NULL.
#[no_mangle]
pub extern "C" fn simpler_last_error() -> *const c_char {
    ffi_guard::last_error_ptr()
}

/// `simpler_status_name`: `SIMPLER_STATUS_<NAME>`, or `SIMPLER_STATUS_<unknown>`. A static
/// string; does not touch the last error.
#[no_mangle]
pub extern "C" fn simpler_status_name(status: i32) -> *const c_char {
    SimplerStatus::from_code(status)
        .map_or("SIMPLER_STATUS_<unknown>\0", SimplerStatus::name_nul)
        .as_ptr()
        .cast()
}

/// `simpler_capabilities`: the `SIMPLER_CAP_*` bits; kernel-mode launch is never reported.
///
/// # Safety
/// `bits` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn simpler_capabilities(bits: *mut u64) -> i32 {
    ffi_guard::run("simpler_capabilities", || -> Outcome {
        // SAFETY: the header's contract for `bits`.
        let out = unsafe { Out::new(bits, 0, "bits") }?;
        out.set(capability::PROGRAM_LAUNCH | capability::CALLER_STREAM | capability::SIM_CONTEXT);
        Ok(())
    })
}

/// `simpler_kernel_mode_launch`: closed. Always `SIMPLER_STATUS_UNSUPPORTED`; nothing is
/// read or touched.
#[no_mangle]
pub extern "C" fn simpler_kernel_mode_launch(
    _ctx: *mut SimplerContext,
    _callable_id: i32,
    _args: *const SimplerArg,
    _nargs: usize,
    _stream: u64,
) -> i32 {
    ffi_guard::run("simpler_kernel_mode_launch", || {
        Err(Failure::new(
            SimplerStatus::Unsupported,
            "the kernel-mode launch entry is closed: launch a prepared run on a caller stream \
             with simpler_launch_run_on_stream instead (simpler_capabilities reports \
             SIMPLER_CAP_KERNEL_MODE_LAUNCH as 0)",
        ))
    })
}
