//! The AICore kernel entry contract: `void kernel_entry(int64_t *args)` over a
//! [`KernelArgs`] array (`docs/chip-runtime.md`).
//!
//! Slots `[0, T)` hold pointers to the task's [`ChipTensor`](crate::ChipTensor)s, slots
//! `[T, T+S)` the scalars as raw 64-bit patterns, slot [`LOCAL_CONTEXT_SLOT`] a pointer to the
//! [`LocalContext`] (rewritten on every dispatch), slot [`GLOBAL_CONTEXT_SLOT`] a pointer
//! to the core's [`GlobalContext`], and slots [`TENSOR_COUNT_SLOT`] / [`SCALAR_COUNT_SLOT`]
//! the task's T and S, so a kernel can check what it was given before reading it, and slot
//! [`ASYNC_SLAB_SLOT`](crate::deferred::ASYNC_SLAB_SLOT) a pointer to the dispatch's
//! deferred-completion slab.

use crate::assert_layout;

/// Most tensors one task may take.
pub const MAX_TASK_TENSORS: usize = 32;
/// Most scalars one task may take.
pub const MAX_TASK_SCALARS: usize = 16;
/// Slot of the pointer to the [`LocalContext`].
pub const LOCAL_CONTEXT_SLOT: usize = 48;
/// Slot of the pointer to the [`GlobalContext`].
pub const GLOBAL_CONTEXT_SLOT: usize = 49;
/// Slot holding the number of tensor arguments of the dispatched task.
pub const TENSOR_COUNT_SLOT: usize = 50;
/// Slot holding the number of scalar arguments of the dispatched task.
pub const SCALAR_COUNT_SLOT: usize = 51;
/// Number of 64-bit slots in a kernel argument array (512 bytes).
pub const KERNEL_ARG_SLOTS: usize = 64;

/// The argument array handed to a kernel entry, 512 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelArgs {
    /// Tensor pointers, then scalar bits, then the two context pointers at 48 and 49.
    pub slots: [u64; KERNEL_ARG_SLOTS],
}

assert_layout!(KernelArgs, size = 512, slots = 0);

impl Default for KernelArgs {
    fn default() -> Self {
        KernelArgs {
            slots: [0; KERNEL_ARG_SLOTS],
        }
    }
}

/// Per-dispatch SPMD context: which logical block of how many this invocation is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalContext {
    /// Index of this block, `0..block_num`.
    pub block_idx: i32,
    /// Number of logical blocks of the task (≥ 1).
    pub block_num: i32,
}

assert_layout!(LocalContext, size = 8, block_idx = 0, block_num = 4);

/// Per-core context, written once per core and read by kernels.
///
/// A kernel reports a fatal error by storing a non-zero code into `fatal_code` (the C helper
/// `simpler_kernel_fail`); the core executor forwards it to the scheduler, which fails the run
/// with [`SCHED_KERNEL_FATAL`](crate::SCHED_KERNEL_FATAL).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalContext {
    /// Index of the core within its cluster's lanes of its type (AIV: 0 or 1; AIC: 0).
    pub sub_block_id: i32,
    /// Global core id, `0..core_count`.
    pub core_id: u32,
    /// [`CoreType`] wire value of this core.
    pub core_type: u32,
    /// Written by the kernel to report a fatal error; cleared before every dispatch.
    pub fatal_code: i32,
    /// Reserved, zero.
    pub reserved: [u64; 6],
}

assert_layout!(
    GlobalContext,
    size = 64,
    sub_block_id = 0,
    core_id = 4,
    core_type = 8,
    fatal_code = 12,
    reserved = 16
);

/// The two kinds of AICore core.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoreType {
    /// Cube (matrix) core; one per cluster.
    Aic = 0,
    /// Vector core; two per cluster.
    Aiv = 1,
}

impl CoreType {
    /// Decodes a wire value; `None` for an unknown one.
    pub const fn from_raw(raw: u32) -> Option<CoreType> {
        match raw {
            0 => Some(CoreType::Aic),
            1 => Some(CoreType::Aiv),
            _ => None,
        }
    }

    /// `"aic"` or `"aiv"`.
    pub const fn name(self) -> &'static str {
        match self {
            CoreType::Aic => "aic",
            CoreType::Aiv => "aiv",
        }
    }
}

impl std::fmt::Display for CoreType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A kernel entry point: `void kernel_entry(int64_t *args)`. `"C-unwind"`: an in-process
/// Rust kernel that panics unwinds to the runtime, which fails its run with
/// [`KERNEL_PANIC_FATAL_CODE`] and the panic's text (C kernels never unwind).
pub type KernelEntry = unsafe extern "C-unwind" fn(args: *mut i64);

/// The fatal code of a dispatch whose in-process kernel panicked: the run fails with
/// KERNEL_FATAL and a message carrying the panic's text.
pub const KERNEL_PANIC_FATAL_CODE: i32 = i32::MIN;

/// One dispatch buffer of a core: the kernel and arguments the AICPU published for the
/// AICore to run. 640 bytes; `args` starts on its own cache line.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DispatchPayload {
    /// Address of the kernel entry ([`KernelEntry`]).
    pub kernel_addr: u64,
    /// Id of the task being run (for diagnostics).
    pub task_id: u64,
    /// SPMD context of this dispatch; `args` slot 48 points here.
    pub local: LocalContext,
    /// `DISPATCH_FLAG_*` bits.
    pub flags: u64,
    /// Reserved, zero.
    pub reserved: [u64; 4],
    /// The kernel argument array.
    pub args: KernelArgs,
    /// Reserved, zero.
    pub reserved2: [u64; 8],
}

assert_layout!(
    DispatchPayload,
    size = 640,
    kernel_addr = 0,
    task_id = 8,
    local = 16,
    flags = 24,
    args = 64
);

/// [`DispatchPayload::flags`]: the kernel may wait for other cores (a block of a
/// `require_sync_start` task, whose blocks may rendezvous), so the core runs it where such
/// a wait cannot hold up other cores (on the sim's pool, a blocking section).
pub const DISPATCH_FLAG_MAY_WAIT: u64 = 1;

/// A core's mailbox in device memory: two dispatch buffers, selected by the parity of the
/// dispatch id (so the next task can be written while the current one runs), the core's
/// [`GlobalContext`], and one [`DeferredSlab`](crate::deferred::DeferredSlab) per dispatch
/// buffer (`docs/chip-runtime.md` §18). 4544 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CoreMailbox {
    /// Dispatch buffers; buffer `id & 1` holds dispatch `id`.
    pub payloads: [DispatchPayload; 2],
    /// The core's global context; `args` slot 49 points here.
    pub global: GlobalContext,
    /// Completion conditions of dispatch buffer `i`; `args` slot 52 of a dispatch points to
    /// its buffer's slab.
    pub deferred: [crate::deferred::DeferredSlab; 2],
}

assert_layout!(
    CoreMailbox,
    size = 4544,
    payloads = 0,
    global = 1280,
    deferred = 1344
);
