//! The orchestration contract: the exported entry symbol, the arguments it receives
//! ([`OrchArgs`]) and the versioned operations table ([`OrchOps`]) through which it submits
//! tasks and opens scopes (`docs/chip-runtime.md`).
//!
//! The orchestration library has no link-time dependency on the runtime: every call goes
//! through the table, whose first two fields are its size and version so it can grow.

use std::ffi::{c_char, c_void};

use crate::{assert_layout, ChipTensor, MAX_TASK_SCALARS, MAX_TASK_TENSORS};

/// Most tensors an orchestration entry may receive.
pub const MAX_ORCH_TENSORS: usize = 256;
/// Most scalars an orchestration entry may receive.
pub const MAX_ORCH_SCALARS: usize = 128;
/// Most explicit dependencies one task may name.
pub const MAX_TASK_DEPS: usize = 16;
/// Default name of the orchestration entry symbol.
pub const DEFAULT_ORCH_ENTRY: &str = "aicpu_orchestration_entry";
/// Default name of a kernel entry symbol.
pub const DEFAULT_KERNEL_ENTRY: &str = "kernel_entry";
/// Current [`OrchOps::version`].
pub const ORCH_OPS_VERSION: u32 = 2;

/// The run's arguments as the orchestration sees them, in signature order.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OrchArgs {
    /// Number of valid entries of `tensors`.
    pub tensor_count: u32,
    /// Number of valid entries of `scalars`.
    pub scalar_count: u32,
    /// Reserved, zero.
    pub reserved: u64,
    /// Device tensors, one per tensor argument of the signature.
    pub tensors: [ChipTensor; MAX_ORCH_TENSORS],
    /// Scalar arguments as raw 64-bit patterns.
    pub scalars: [u64; MAX_ORCH_SCALARS],
}

assert_layout!(
    OrchArgs,
    size = 33808,
    tensor_count = 0,
    scalar_count = 4,
    reserved = 8,
    tensors = 16,
    scalars = 32784
);

impl OrchArgs {
    /// Empty arguments (no tensors, no scalars).
    pub fn empty() -> Box<OrchArgs> {
        Box::new(OrchArgs {
            tensor_count: 0,
            scalar_count: 0,
            reserved: 0,
            tensors: [ChipTensor::ZERO; MAX_ORCH_TENSORS],
            scalars: [0; MAX_ORCH_SCALARS],
        })
    }
}

/// [`TaskDesc::kernel_ids`] value of an inactive lane.
pub const NO_KERNEL: i32 = -1;
/// Lane index of the AIC kernel in [`TaskDesc::kernel_ids`].
pub const LANE_AIC: usize = 0;
/// Lane index of the first AIV kernel in [`TaskDesc::kernel_ids`].
pub const LANE_AIV0: usize = 1;
/// Lane index of the second AIV kernel in [`TaskDesc::kernel_ids`].
pub const LANE_AIV1: usize = 2;

/// One task submission, filled by the orchestration and read by `submit_task`.
///
/// For a tensor tagged `OUTPUT` only `shapes`, `ndims` and `dtype` are read: the runtime
/// allocates the buffer and returns the view in [`TaskOutputs`]. Every other tag passes a
/// view of an existing buffer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TaskDesc {
    /// `sizeof(TaskDesc)` as the caller compiled it; must equal 4520.
    pub size: u32,
    /// Number of valid `tensors` / `tags` (≤ 32).
    pub tensor_count: u32,
    /// Number of valid `scalars` (≤ 16).
    pub scalar_count: u32,
    /// Number of valid `deps` (≤ 16).
    pub dep_count: u32,
    /// Kernel func ids per lane (AIC, AIV0, AIV1); [`NO_KERNEL`] when inactive.
    pub kernel_ids: [i32; 3],
    /// Logical SPMD block count (≥ 1).
    pub block_num: i32,
    /// `TASK_FLAG_*` bits.
    pub flags: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// [`TensorArgType`](crate::TensorArgType) wire value of each tensor.
    pub tags: [u32; MAX_TASK_TENSORS],
    /// Explicit dependencies: ids of tasks this one must wait for.
    pub deps: [u64; MAX_TASK_DEPS],
    /// Scalar arguments as raw bits.
    pub scalars: [u64; MAX_TASK_SCALARS],
    /// Tensor arguments in kernel slot order.
    pub tensors: [ChipTensor; MAX_TASK_TENSORS],
}

assert_layout!(
    TaskDesc,
    size = 4520,
    size = 0,
    tensor_count = 4,
    scalar_count = 8,
    dep_count = 12,
    kernel_ids = 16,
    block_num = 28,
    flags = 32,
    reserved = 36,
    tags = 40,
    deps = 168,
    scalars = 296,
    tensors = 424
);

/// [`TaskDesc::flags`] bit: all blocks must start together or not at all.
pub const TASK_FLAG_REQUIRE_SYNC_START: u32 = 1;

/// What `submit_task` hands back: the task's id and the runtime-allocated outputs, in the
/// order of the `OUTPUT` arguments. The views are valid only inside the enclosing scope.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TaskOutputs {
    /// Id of the submitted task (usable as an explicit dependency).
    pub task_id: u64,
    /// Number of valid `tensors`.
    pub count: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// The allocated outputs.
    pub tensors: [ChipTensor; MAX_TASK_TENSORS],
}

assert_layout!(
    TaskOutputs,
    size = 4112,
    task_id = 0,
    count = 8,
    reserved = 12,
    tensors = 16
);

/// Scope mode: dependencies discovered from tensors (the default).
pub const SCOPE_AUTO: u32 = 0;
/// Scope mode: only explicit dependencies apply inside.
pub const SCOPE_MANUAL: u32 = 1;

/// Log level of [`OrchOps::log`]: error.
pub const LOG_ERROR: u32 = 0;
/// Log level of [`OrchOps::log`]: warning.
pub const LOG_WARN: u32 = 1;
/// Log level of [`OrchOps::log`]: information.
pub const LOG_INFO: u32 = 2;
/// Log level of [`OrchOps::log`]: debug.
pub const LOG_DEBUG: u32 = 3;

/// The operations table an orchestration calls into. Every function receives `runtime`
/// back as its first argument. Return codes: 0 on success, otherwise an orchestrator error
/// code (`ORCH_*`), after which the run is failed and further submissions are refused.
#[repr(C)]
pub struct OrchOps {
    /// `sizeof(OrchOps)` of the runtime that filled it.
    pub size: u32,
    /// [`ORCH_OPS_VERSION`] of the runtime that filled it.
    pub version: u32,
    /// Opaque runtime handle.
    pub runtime: *mut c_void,
    /// Submits one task; fills `outputs` (may be null when the task has no `OUTPUT`).
    pub submit_task: unsafe extern "C" fn(
        runtime: *mut c_void,
        desc: *const TaskDesc,
        outputs: *mut TaskOutputs,
    ) -> i32,
    /// Opens a scope of the given mode (`SCOPE_AUTO` / `SCOPE_MANUAL`).
    pub scope_begin: unsafe extern "C" fn(runtime: *mut c_void, mode: u32) -> i32,
    /// Closes the innermost scope.
    pub scope_end: unsafe extern "C" fn(runtime: *mut c_void) -> i32,
    /// Fails the run with `code` and a NUL-terminated message (may be null).
    pub report_fatal: unsafe extern "C" fn(runtime: *mut c_void, code: i32, message: *const c_char),
    /// Non-zero once the run has failed.
    pub is_fatal: unsafe extern "C" fn(runtime: *mut c_void) -> i32,
    /// Writes a NUL-terminated message to the runtime log at a `LOG_*` level.
    pub log: unsafe extern "C" fn(runtime: *mut c_void, level: u32, message: *const c_char),
    /// Number of clusters (1 AIC + 2 AIV) available to the run.
    pub cluster_count: unsafe extern "C" fn(runtime: *mut c_void) -> u32,
    /// Number of AIV cores available to the run.
    pub aiv_count: unsafe extern "C" fn(runtime: *mut c_void) -> u32,
    /// (v2) Waits until every earlier task writing an overlapping region has completed, then
    /// copies the view's elements, packed in row-major order, into `dst` (`dst_bytes` must
    /// equal numel × element size). Times out with `ORCH_TENSOR_WAIT_TIMEOUT`.
    pub get_tensor_data: unsafe extern "C" fn(
        runtime: *mut c_void,
        tensor: *const ChipTensor,
        dst: *mut c_void,
        dst_bytes: u64,
    ) -> i32,
    /// (v2) Waits until every earlier task reading or writing an overlapping region has
    /// completed, then writes `src` (packed row-major, `src_bytes` = numel × element size)
    /// into the view. Later tasks see the new data.
    pub set_tensor_data: unsafe extern "C" fn(
        runtime: *mut c_void,
        tensor: *const ChipTensor,
        src: *const c_void,
        src_bytes: u64,
    ) -> i32,
}

assert_layout!(
    OrchOps,
    size = 96,
    size = 0,
    version = 4,
    runtime = 8,
    submit_task = 16,
    scope_begin = 24,
    scope_end = 32,
    report_fatal = 40,
    is_fatal = 48,
    log = 56,
    cluster_count = 64,
    aiv_count = 72,
    get_tensor_data = 80,
    set_tensor_data = 88
);

/// The orchestration entry: `int32_t entry(const SimplerOrchOps *ops, const SimplerOrchArgs *args)`.
/// A non-zero return fails the run with [`ORCH_EXPLICIT_FATAL`](crate::ORCH_EXPLICIT_FATAL),
/// and so does a panic of an in-process Rust orchestration (`"C-unwind"`: it unwinds to the
/// runtime, whose message carries the panic's text).
pub type OrchEntry = unsafe extern "C-unwind" fn(ops: *const OrchOps, args: *const OrchArgs) -> i32;
