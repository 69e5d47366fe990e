//! Access to device memory by address. Every raw-pointer dereference of the runtime lives
//! here, each with its justification; callers receive references or copies.
//!
//! The host guarantees (by the launch contract) that every address in a
//! [`RunLaunchDesc`](simpler_abi::RunLaunchDesc) points to live device memory of the right
//! type and size for the whole duration of both kernels of the run.

use std::sync::atomic::AtomicU64;

use simpler_abi::{CoreMailbox, OrchArgs, RunLaunchDesc, RunResult};

/// Reads the launch descriptor.
///
/// Returns `None` for a null address.
pub(crate) fn launch_desc(addr: u64) -> Option<RunLaunchDesc> {
    if addr == 0 || !addr.is_multiple_of(std::mem::align_of::<RunLaunchDesc>() as u64) {
        return None;
    }
    // SAFETY: a non-null, aligned launch argument points to a `RunLaunchDesc` the host
    // wrote before launching and keeps alive until the run is finalized.
    Some(unsafe { std::ptr::read(addr as *const RunLaunchDesc) })
}

/// The run-state word shared by the AICPU threads of a run.
pub(crate) fn state_word<'a>(addr: u64) -> &'a AtomicU64 {
    // SAFETY: `runtime_state_addr` is a host-allocated, 8-byte aligned, zeroed word reserved
    // for the runtime; `AtomicU64` has the layout of `u64`.
    unsafe { &*(addr as *const AtomicU64) }
}

/// Mailbox of core `core`.
pub(crate) fn mailbox(base: u64, core: u32) -> *mut CoreMailbox {
    (base as *mut CoreMailbox).wrapping_add(core as usize)
}

/// Reads a copy of core `core`'s fatal code.
pub(crate) fn mailbox_fatal_code(base: u64, core: u32) -> i32 {
    // SAFETY: the mailbox array has one entry per core for the whole run; the core wrote
    // the code before its FIN (release), which the caller observed (acquire).
    unsafe { std::ptr::addr_of!((*mailbox(base, core)).global.fatal_code).read_volatile() }
}

/// The orchestration arguments.
pub(crate) fn orch_args<'a>(addr: u64) -> &'a OrchArgs {
    // SAFETY: the host wrote the run's `OrchArgs` at this address before the launch and
    // nothing writes it during the run.
    unsafe { &*(addr as *const OrchArgs) }
}

/// A `[T; count]` table in device memory, copied out.
pub(crate) fn table<T: Copy>(addr: u64, count: usize) -> Vec<T> {
    if addr == 0 || count == 0 {
        return Vec::new();
    }
    // SAFETY: the host allocated `count` entries of `T` at `addr` for this run.
    unsafe { std::slice::from_raw_parts(addr as *const T, count).to_vec() }
}

/// Writes the run result record: every field first, then the epoch with release ordering.
pub(crate) fn publish_result(addr: u64, record: &RunResult) {
    let p = addr as *mut RunResult;
    // SAFETY: `result_addr` is the slot's result region (a `RunResult`), owned by this run
    // until the host reads it after both kernels complete.
    unsafe {
        std::ptr::addr_of_mut!((*p).payload_bytes).write(record.payload_bytes);
        std::ptr::addr_of_mut!((*p).verdict).write(record.verdict);
        std::ptr::addr_of_mut!((*p).completion_code).write(record.completion_code);
        std::ptr::addr_of_mut!((*p).code_source).write(record.code_source);
        std::ptr::addr_of_mut!((*p).payload).write(record.payload);
        (*(std::ptr::addr_of!((*p).published) as *const AtomicU64))
            .store(record.published, std::sync::atomic::Ordering::Release);
    }
}

/// Calls `f(byte address, element index)` for every element of a view, row-major.
fn for_each_element(t: &simpler_abi::ChipTensor, elem: u64, mut f: impl FnMut(u64, usize)) {
    let nd = (t.ndims as usize).min(simpler_abi::MAX_TENSOR_DIMS);
    let shape = &t.shapes[..nd];
    if nd == 0 || shape.contains(&0) {
        return;
    }
    let mut idx = [0u64; simpler_abi::MAX_TENSOR_DIMS];
    let mut n = 0usize;
    loop {
        let off = t.start_offset + (0..nd).map(|d| idx[d] * t.strides[d]).sum::<u64>();
        f(t.buffer_addr + off * elem, n);
        n += 1;
        let mut d = nd;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Copies a view's elements, packed row-major, into `out` (`out.len()` = numel × elem size).
pub(crate) fn read_view(t: &simpler_abi::ChipTensor, out: &mut [u8]) {
    let elem = t.data_type().map_or(1, |d| d.size_bytes()) as u64;
    let e = elem as usize;
    for_each_element(t, elem, |addr, n| {
        // SAFETY: the caller checked that the view lies inside its buffer, a live device
        // allocation of this run, and that `out` holds numel × elem bytes.
        let src = unsafe { std::slice::from_raw_parts(addr as *const u8, e) };
        out[n * e..(n + 1) * e].copy_from_slice(src);
    });
}

/// Writes `data`, packed row-major, into a view's elements.
pub(crate) fn write_view(t: &simpler_abi::ChipTensor, data: &[u8]) {
    let elem = t.data_type().map_or(1, |d| d.size_bytes()) as u64;
    let e = elem as usize;
    for_each_element(t, elem, |addr, n| {
        // SAFETY: as in `read_view`; no task touches the region (the caller waited for its
        // readers and writers), so the write does not race.
        let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, e) };
        dst.copy_from_slice(&data[n * e..(n + 1) * e]);
    });
}
