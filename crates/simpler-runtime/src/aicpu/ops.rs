//! The C boundary of the orchestration: the call of the user's orchestration entry and the
//! [`OrchOps`] table it calls back through. This is where pointers handed over by C code
//! become Rust references and where a `u64` from the launch descriptor becomes the entry
//! function, each with its justification; the work itself is the orchestrator's
//! ([`Orchestrator`]), which sees only references and values. It must not touch device
//! memory other than through `devmem`.
//!
//! The orchestration keeps the [`OrchEntry`] contract (`simpler_abi`): it calls the table
//! only on the thread that called it, only during the entry call, with valid pointers (or
//! null where a pointer may be null), NUL-terminated strings and buffers of the sizes it
//! states.

use std::ffi::{c_char, c_void, CStr};

use simpler_abi::*;

use super::orchestrator::{Orchestrator, Scope, MAX_SCOPE_DEPTH};
use crate::devmem;

/// Calls the orchestration entry at `entry_addr` with a table whose callbacks serve `o`;
/// returns the entry's return code.
pub(crate) fn call_entry(o: &mut Orchestrator<'_>, entry_addr: u64) -> i32 {
    let args = o.shared.mem.orch_args();
    let ops = OrchOps {
        size: std::mem::size_of::<OrchOps>() as u32,
        version: ORCH_OPS_VERSION,
        runtime: o as *mut Orchestrator<'_> as *mut c_void,
        submit_task: op_submit_task,
        scope_begin: op_scope_begin,
        scope_end: op_scope_end,
        report_fatal: op_report_fatal,
        is_fatal: op_is_fatal,
        log: op_log,
        cluster_count: op_cluster_count,
        aiv_count: op_aiv_count,
        get_tensor_data: op_get_tensor_data,
        set_tensor_data: op_set_tensor_data,
    };
    let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `orch_entry` is the resolved entry of the registered orchestration, an
        // `OrchEntry` keeping its contract (the launch argument contract); `ops` and the run's
        // `OrchArgs` at `args` outlive the call, and `o` is used only through the table's
        // `runtime` pointer until the entry returns.
        unsafe {
            let entry: OrchEntry = std::mem::transmute::<u64, OrchEntry>(entry_addr);
            let _call = simpler_device::crash::enter_orchestration(entry_addr);
            entry(&ops, args)
        }
    }));
    match called {
        Ok(rc) => rc,
        Err(payload) if simpler_device::is_reset_unwind(&*payload) => {
            std::panic::resume_unwind(payload)
        }
        // An in-process Rust orchestration panicked (`OrchEntry` is "C-unwind").
        Err(payload) => {
            let text = crate::panics::text(&*payload);
            o.fail(ORCH_EXPLICIT_FATAL, || {
                format!("the orchestration panicked: {text}")
            })
        }
    }
}

/// Recovers the orchestrator behind the ops table's `runtime` pointer.
///
/// # Safety
/// `rt` must be the `runtime` field of a table built by [`call_entry`], called on
/// the orchestrator thread during the entry call.
unsafe fn orch<'x>(rt: *mut c_void) -> &'x mut Orchestrator<'x> {
    // SAFETY: guaranteed by the caller.
    unsafe { &mut *(rt as *mut Orchestrator<'x>) }
}

fn text(message: *const c_char) -> String {
    if message.is_null() {
        return String::new();
    }
    // SAFETY: the ops contract requires a NUL-terminated string or null.
    unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}

unsafe extern "C" fn op_submit_task(
    rt: *mut c_void,
    desc: *const TaskDesc,
    outputs: *mut TaskOutputs,
) -> i32 {
    // SAFETY: called by the orchestration through the table during the entry call.
    let o = unsafe { orch(rt) };
    if desc.is_null() {
        return o.invalid(|| "submit_task was passed a null TaskDesc".into());
    }
    // SAFETY: non-null `desc` points to a caller-owned TaskDesc whose `size` field is read
    // first; `outputs` is null or a caller-owned TaskOutputs.
    let size = unsafe { (*desc).size };
    if size as usize != std::mem::size_of::<TaskDesc>() {
        return o.invalid(|| {
            format!(
                "TaskDesc.size is {size} but this runtime expects {}",
                std::mem::size_of::<TaskDesc>()
            )
        });
    }
    // SAFETY: as above; the size matches, so the whole struct is there.
    let (d, out) = unsafe { (&*desc, outputs.as_mut()) };
    o.guarded(ORCH_EXPLICIT_FATAL, |o| o.submit(d, out))
}

unsafe extern "C" fn op_scope_begin(rt: *mut c_void, mode: u32) -> i32 {
    // SAFETY: called through the table during the entry call.
    let o = unsafe { orch(rt) };
    if mode != SCOPE_AUTO && mode != SCOPE_MANUAL {
        return o.invalid(|| format!("unknown scope mode {mode}"));
    }
    if mode == SCOPE_AUTO && o.scopes.iter().any(|s| s.mode == SCOPE_MANUAL) {
        return o.invalid(|| "an AUTO scope cannot open inside a MANUAL scope".into());
    }
    if o.scopes.len() >= MAX_SCOPE_DEPTH {
        return o.invalid(|| format!("scopes nest deeper than {MAX_SCOPE_DEPTH}"));
    }
    let begin = o.scope_tasks.len();
    o.scopes.push(Scope {
        mode,
        begin,
        opened_after: o.submit_calls,
    });
    0
}

unsafe extern "C" fn op_scope_end(rt: *mut c_void) -> i32 {
    // SAFETY: called through the table during the entry call.
    let o = unsafe { orch(rt) };
    if o.scopes.len() <= 1 {
        return o.invalid(|| "scope_end without a matching scope_begin".into());
    }
    o.close_scope();
    0
}

unsafe extern "C" fn op_report_fatal(rt: *mut c_void, code: i32, message: *const c_char) {
    // SAFETY: called through the table during the entry call.
    let o = unsafe { orch(rt) };
    let msg = text(message);
    o.fail(ORCH_EXPLICIT_FATAL, || {
        format!("the orchestration reported a fatal error (code {code}): {msg}")
    });
}

unsafe extern "C" fn op_is_fatal(rt: *mut c_void) -> i32 {
    // SAFETY: called through the table during the entry call.
    i32::from(unsafe { orch(rt) }.shared.errors.is_fatal())
}

unsafe extern "C" fn op_log(_rt: *mut c_void, level: u32, message: *const c_char) {
    let msg = text(message);
    let tag = match level {
        LOG_ERROR => "error",
        LOG_WARN => "warn",
        LOG_INFO => "info",
        _ => "debug",
    };
    if level <= LOG_WARN || std::env::var_os("SIMPLER_ORCH_LOG").is_some() {
        eprintln!("[orchestration {tag}] {msg}");
    }
}

unsafe extern "C" fn op_cluster_count(rt: *mut c_void) -> u32 {
    // SAFETY: called through the table during the entry call.
    unsafe { orch(rt) }.clusters
}

unsafe extern "C" fn op_aiv_count(rt: *mut c_void) -> u32 {
    // SAFETY: called through the table during the entry call.
    unsafe { orch(rt) }.clusters * 2
}

unsafe extern "C" fn op_get_tensor_data(
    rt: *mut c_void,
    t: *const ChipTensor,
    dst: *mut c_void,
    bytes: u64,
) -> i32 {
    // SAFETY: called through the table during the entry call.
    let o = unsafe { orch(rt) };
    if dst.is_null() && bytes > 0 {
        return o.invalid(|| "get_tensor_data was passed a null destination".into());
    }
    // SAFETY: `t` is null or points to a ChipTensor (ops contract).
    let t = unsafe { t.as_ref() };
    match o.guarded(Err(ORCH_EXPLICIT_FATAL), |o| {
        o.tensor_access(t, bytes, false)
    }) {
        Ok(view) => {
            // SAFETY: the caller owns `bytes` writable bytes at `dst` (ops contract).
            let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, bytes as usize) };
            // SAFETY: `tensor_access` checked that the view lies inside its buffer, a device
            // allocation of this run (the orchestration's tensors are, by its contract), and
            // waited for every task writing the region; `out` holds numel × elem bytes.
            unsafe { devmem::read_view(&view, out) };
            0
        }
        Err(code) => code,
    }
}

unsafe extern "C" fn op_set_tensor_data(
    rt: *mut c_void,
    t: *const ChipTensor,
    src: *const c_void,
    bytes: u64,
) -> i32 {
    // SAFETY: called through the table during the entry call.
    let o = unsafe { orch(rt) };
    if src.is_null() && bytes > 0 {
        return o.invalid(|| "set_tensor_data was passed a null source".into());
    }
    // SAFETY: `t` is null or points to a ChipTensor (ops contract).
    let t = unsafe { t.as_ref() };
    match o.guarded(Err(ORCH_EXPLICIT_FATAL), |o| {
        o.tensor_access(t, bytes, true)
    }) {
        Ok(view) => {
            // SAFETY: the caller owns `bytes` readable bytes at `src` (ops contract).
            let data = unsafe { std::slice::from_raw_parts(src as *const u8, bytes as usize) };
            // SAFETY: `tensor_access` checked that the view lies inside its buffer, a device
            // allocation of this run (the orchestration's tensors are, by its contract), and
            // waited for every task reading or writing the region; `data` holds numel × elem
            // bytes.
            unsafe { devmem::write_view(&view, data) };
            0
        }
        Err(code) => code,
    }
}
