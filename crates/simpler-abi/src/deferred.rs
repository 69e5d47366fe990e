//! Deferred completion (`docs/chip-runtime.md` §18): a kernel that hands work to an
//! asynchronous engine — a copy on the SDMA engine, or a wait for a counter (the COUNTER
//! engine) — registers completion conditions in its dispatch's [`DeferredSlab`] and returns;
//! the scheduler counts the dispatch finished only once every condition holds, so the task's
//! consumers never start before the engine's work has landed.
//!
//! Argument slot [`ASYNC_SLAB_SLOT`] of every dispatch points to its slab (one per dispatch
//! buffer of the core, so a pre-loaded next dispatch never overwrites conditions the
//! scheduler has not read). The runtime empties it before each dispatch; the kernel adds at
//! most [`MAX_DEFERRED_CONDITIONS`]; the scheduler reads it after the core's FIN.
//!
//! This module is the mirror of `include/simpler/async.h`, byte for byte and call for call
//! (`tests/it/c_async.rs` checks both): the layout, the engine kinds, and the kernel-side calls
//! [`wait_counter`], [`wait_counter32`] and [`sdma_copy`] that Rust kernels make.
//!
//! Failures fail the run, naming the task: a condition of an engine the chip does not have
//! (ROCE, URMA, CCU; SDMA on a worker without `enable_sdma`) or a null or misaligned
//! counter →
//! [`SCHED_ASYNC_COMPLETION_INVALID`](crate::SCHED_ASYNC_COMPLETION_INVALID); a 65th
//! condition → [`SCHED_ASYNC_WAIT_OVERFLOW`](crate::SCHED_ASYNC_WAIT_OVERFLOW); a copy the
//! engine refused → [`SCHED_ASYNC_REGISTRATION_FAILED`](crate::SCHED_ASYNC_REGISTRATION_FAILED).

use std::sync::atomic::{AtomicU32, Ordering};

use crate::assert_layout;

/// Argument slot holding the address of the dispatch's [`DeferredSlab`].
pub const ASYNC_SLAB_SLOT: usize = 52;
/// Most completion conditions one dispatch may register.
pub const MAX_DEFERRED_CONDITIONS: usize = 64;

/// Engine kind: a counter in device memory, 64-bit (or 32-bit with [`COUNTER_32`]); the
/// condition holds once `*addr >= value`. Whoever writes the counter (a kernel, the host
/// through a region's 32-bit counters, a peer chip through a domain's 32-bit signals) is not
/// the scheduler's concern: it polls.
pub const ASYNC_ENGINE_COUNTER: u32 = 0;
/// [`DeferredCondition::flags`] of a COUNTER condition: the counter is a `u32` (4-byte
/// aligned, `value <= u32::MAX`), as region counters and comm signals are.
pub const COUNTER_32: u32 = 1;
/// Engine kind: a copy on the SDMA engine; `addr` is the ticket [`sdma_copy`] got, and the
/// condition holds once that copy has landed. Present only on a worker started with
/// `enable_sdma`.
pub const ASYNC_ENGINE_SDMA: u32 = 1;
/// Engine kind: RoCE. Declared by the device ABI; the sim has no such engine.
pub const ASYNC_ENGINE_ROCE: u32 = 2;
/// Engine kind: URMA. Declared by the device ABI; the sim has no such engine.
pub const ASYNC_ENGINE_URMA: u32 = 3;
/// Engine kind: CCU. Declared by the device ABI; the sim has no such engine.
pub const ASYNC_ENGINE_CCU: u32 = 4;

/// The name of engine kind `engine` (`"COUNTER"`, `"SDMA"`, …), `None` for an unknown one.
pub const fn engine_name(engine: u32) -> Option<&'static str> {
    match engine {
        ASYNC_ENGINE_COUNTER => Some("COUNTER"),
        ASYNC_ENGINE_SDMA => Some("SDMA"),
        ASYNC_ENGINE_ROCE => Some("ROCE"),
        ASYNC_ENGINE_URMA => Some("URMA"),
        ASYNC_ENGINE_CCU => Some("CCU"),
        _ => None,
    }
}

/// One completion condition, 24 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeferredCondition {
    /// `ASYNC_ENGINE_*`.
    pub engine: u32,
    /// COUNTER: [`COUNTER_32`] for a 32-bit counter, else 0. Other engines: zero.
    pub flags: u32,
    /// COUNTER: the counter's device address (8-byte aligned). SDMA: the copy's ticket.
    pub addr: u64,
    /// COUNTER: the value the counter must reach. SDMA: unused, zero.
    pub value: u64,
}

assert_layout!(
    DeferredCondition,
    size = 24,
    engine = 0,
    flags = 4,
    addr = 8,
    value = 16
);

/// The SDMA submit call a slab names: copies `bytes` bytes from device address `src` to
/// `dst` asynchronously and returns the copy's ticket, or 0 when the engine refused it (a
/// null address, zero bytes, or an injected fault). `engine` is [`DeferredSlab::sdma_engine`].
pub type SdmaSubmit = unsafe extern "C" fn(engine: u64, dst: u64, src: u64, bytes: u64) -> u64;

/// A dispatch's completion conditions, 1600 bytes: a 64-byte header, then
/// [`MAX_DEFERRED_CONDITIONS`] [`DeferredCondition`]s.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DeferredSlab {
    /// Conditions registered, `0..=MAX_DEFERRED_CONDITIONS` (only the dispatch's kernel
    /// writes it, with [`AtomicU32`] semantics so C and Rust kernels agree).
    pub count: u32,
    /// First registration error of the dispatch (`SCHED_ASYNC_*`), 0 if none.
    pub error: u32,
    /// The chip's [`SdmaSubmit`] call as an address; 0 when the worker has no SDMA engine.
    pub sdma_submit: u64,
    /// The engine argument of `sdma_submit`.
    pub sdma_engine: u64,
    /// Reserved, zero.
    pub reserved: [u64; 5],
    /// The conditions; `[0, count)` are meaningful.
    pub conditions: [DeferredCondition; MAX_DEFERRED_CONDITIONS],
}

assert_layout!(
    DeferredSlab,
    size = 1600,
    count = 0,
    error = 4,
    sdma_submit = 8,
    sdma_engine = 16,
    conditions = 64
);

impl Default for DeferredSlab {
    fn default() -> Self {
        DeferredSlab {
            count: 0,
            error: 0,
            sdma_submit: 0,
            sdma_engine: 0,
            reserved: [0; 5],
            conditions: [DeferredCondition::default(); MAX_DEFERRED_CONDITIONS],
        }
    }
}

/// The slab of the dispatch whose arguments are `args`.
///
/// # Safety
/// `args` is the argument array the runtime passed to the running kernel.
unsafe fn slab(args: *mut i64) -> *mut DeferredSlab {
    // SAFETY: slot ASYNC_SLAB_SLOT of a dispatch's arguments holds its slab's address (the
    // caller's contract).
    unsafe { *args.add(ASYNC_SLAB_SLOT) as u64 as *mut DeferredSlab }
}

/// Records `code` as the slab's first registration error (a later one does not replace it).
///
/// # Safety
/// `s` is the running dispatch's slab.
unsafe fn set_error(s: *mut DeferredSlab, code: i32) {
    // SAFETY: `error` is a u32 of the live slab, written only by this dispatch's kernel.
    let error = unsafe { &*(std::ptr::addr_of_mut!((*s).error) as *const AtomicU32) };
    let _ = error.compare_exchange(0, code as u32, Ordering::Relaxed, Ordering::Relaxed);
}

/// Appends one condition; false (and the slab's error set to ASYNC_WAIT_OVERFLOW) when the
/// slab is full.
///
/// # Safety
/// `s` is the running dispatch's slab.
unsafe fn push(s: *mut DeferredSlab, c: DeferredCondition) -> bool {
    // SAFETY: `count` is a u32 of the live slab; the runtime emptied it before the dispatch
    // and reads it only after the kernel returned.
    let count = unsafe { &*(std::ptr::addr_of_mut!((*s).count) as *const AtomicU32) };
    let n = count.load(Ordering::Relaxed) as usize;
    if n >= MAX_DEFERRED_CONDITIONS {
        // SAFETY: as above.
        unsafe { set_error(s, crate::SCHED_ASYNC_WAIT_OVERFLOW) };
        return false;
    }
    // SAFETY: `n < MAX_DEFERRED_CONDITIONS` keeps the write inside the slab's array.
    unsafe { std::ptr::addr_of_mut!((*s).conditions[n]).write(c) };
    count.store(n as u32 + 1, Ordering::Release);
    true
}

/// Defers the dispatch's completion until the 64-bit counter at `counter` reaches `value`
/// (COUNTER engine). 0 on success, else the code the run fails with:
/// [`SCHED_ASYNC_WAIT_OVERFLOW`](crate::SCHED_ASYNC_WAIT_OVERFLOW) when the dispatch already
/// has [`MAX_DEFERRED_CONDITIONS`] conditions,
/// [`SCHED_ASYNC_COMPLETION_INVALID`](crate::SCHED_ASYNC_COMPLETION_INVALID) for a null or
/// misaligned counter (registered anyway, so the scheduler names it). The counter must stay
/// valid, 8-byte aligned device memory until the condition holds.
///
/// # Safety
/// `args` is the argument array the runtime passed to the running kernel.
pub unsafe fn wait_counter(args: *mut i64, counter: *const u64, value: u64) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { counter_condition(args, counter as u64, 0, value, 8) }
}

/// [`wait_counter`] for a 32-bit counter (4-byte aligned): a region's counter or a comm
/// domain's signal, which are 32-bit; a 64-bit read there would also see the next counter.
///
/// # Safety
/// As [`wait_counter`].
pub unsafe fn wait_counter32(args: *mut i64, counter: *const u32, value: u32) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { counter_condition(args, counter as u64, COUNTER_32, u64::from(value), 4) }
}

/// Registers a COUNTER condition; see [`wait_counter`].
///
/// # Safety
/// `args` is the argument array the runtime passed to the running kernel.
unsafe fn counter_condition(args: *mut i64, addr: u64, flags: u32, value: u64, align: u64) -> i32 {
    let c = DeferredCondition {
        engine: ASYNC_ENGINE_COUNTER,
        flags,
        addr,
        value,
    };
    // SAFETY: the caller's contract.
    if !unsafe { push(slab(args), c) } {
        crate::SCHED_ASYNC_WAIT_OVERFLOW
    } else if addr == 0 || !addr.is_multiple_of(align) {
        crate::SCHED_ASYNC_COMPLETION_INVALID
    } else {
        0
    }
}

/// Starts an asynchronous copy of `bytes` bytes from `src` to `dst` on the SDMA engine and
/// defers the dispatch's completion until it has landed. 0 on success, else the code the
/// run fails with: [`SCHED_ASYNC_COMPLETION_INVALID`](crate::SCHED_ASYNC_COMPLETION_INVALID)
/// when the worker has no SDMA engine (it was not started with `enable_sdma`),
/// [`SCHED_ASYNC_REGISTRATION_FAILED`](crate::SCHED_ASYNC_REGISTRATION_FAILED) when the
/// engine refused the copy, [`SCHED_ASYNC_WAIT_OVERFLOW`](crate::SCHED_ASYNC_WAIT_OVERFLOW)
/// when the dispatch has no condition left (the copy is then not started).
///
/// # Safety
/// `args` is the argument array the runtime passed to the running kernel, whose slab header
/// the kernel has not written (it names the runtime's submit call); `src` and `dst` are
/// device memory of at least `bytes` bytes that stay valid until the copy has landed (the
/// task's completion), and nobody else writes `dst` meanwhile.
pub unsafe fn sdma_copy(args: *mut i64, dst: *mut u8, src: *const u8, bytes: u64) -> i32 {
    // SAFETY: the caller's contract.
    let s = unsafe { slab(args) };
    // SAFETY: `s` is the live slab; the runtime wrote the header before the dispatch.
    let (count, submit, engine) = unsafe { ((*s).count, (*s).sdma_submit, (*s).sdma_engine) };
    if count as usize >= MAX_DEFERRED_CONDITIONS {
        // SAFETY: as above.
        unsafe { set_error(s, crate::SCHED_ASYNC_WAIT_OVERFLOW) };
        return crate::SCHED_ASYNC_WAIT_OVERFLOW;
    }
    if submit == 0 {
        // Registered anyway: the scheduler names the missing engine when it reads it.
        let c = DeferredCondition {
            engine: ASYNC_ENGINE_SDMA,
            ..DeferredCondition::default()
        };
        // SAFETY: as above.
        unsafe { push(s, c) };
        return crate::SCHED_ASYNC_COMPLETION_INVALID;
    }
    // SAFETY: a non-zero `sdma_submit` is the runtime's `SdmaSubmit`, with `sdma_engine` its
    // argument; the caller vouches for the memory.
    let ticket = unsafe {
        std::mem::transmute::<u64, SdmaSubmit>(submit)(engine, dst as u64, src as u64, bytes)
    };
    if ticket == 0 {
        // SAFETY: as above.
        unsafe { set_error(s, crate::SCHED_ASYNC_REGISTRATION_FAILED) };
        return crate::SCHED_ASYNC_REGISTRATION_FAILED;
    }
    let c = DeferredCondition {
        engine: ASYNC_ENGINE_SDMA,
        flags: 0,
        addr: ticket,
        value: 0,
    };
    // SAFETY: as above; the count was checked, so this push succeeds.
    unsafe { push(s, c) };
    0
}

/// Defers the dispatch's completion on a condition of any engine kind, as written (for
/// engines with no call of their own). 0 once registered — whether the chip has the engine
/// is the scheduler's to check when it reads the slab (the run then fails with
/// ASYNC_COMPLETION_INVALID) — or [`SCHED_ASYNC_WAIT_OVERFLOW`](crate::SCHED_ASYNC_WAIT_OVERFLOW)
/// when full.
///
/// # Safety
/// `args` is the argument array the runtime passed to the running kernel.
pub unsafe fn register(args: *mut i64, condition: DeferredCondition) -> i32 {
    // SAFETY: the caller's contract.
    if unsafe { push(slab(args), condition) } {
        0
    } else {
        crate::SCHED_ASYNC_WAIT_OVERFLOW
    }
}
