//! The `host_build_graph` graph image: what the host's build of a run's orchestration leaves
//! in device memory for the AICPU schedulers (`docs/chip-runtime.md` §17).
//!
//! One image is a [`GraphImageHeader`] followed, in this order and without gaps, by
//! `task_count` [`GraphTask`]s, `tensor_count` [`GraphTensor`]s and `wake_count` `u32` wake
//! entries. Tasks are numbered by their submit order from 0; that number is also the task id
//! the runtime uses (one ring). A task's wake list (`wake_first .. wake_first + wake_count`
//! of the wake entries) names the tasks that wait for it; its `fanin` is how many tasks it
//! waits for. Tensor addresses are stored relative to what they point into, so one image
//! serves every run that passes arguments of the same shapes ([`GraphTensor::reloc`]).
//!
//! `checksum` is the CRC-32 (IEEE) of every byte after the header; the device refuses an
//! image whose magic, version, sizes, checksum or generation do not match.

use crate::assert_layout;
use crate::tensor::ChipTensor;

/// [`GraphImageHeader::magic`]: "SMGR".
pub const GRAPH_IMAGE_MAGIC: u32 = 0x5247_4d53;
/// Current [`GraphImageHeader::version`].
pub const GRAPH_IMAGE_VERSION: u32 = 1;
/// Most producers one task may wait for under `host_build_graph` (upstream's fanin cap).
pub const HBG_MAX_FANIN: u32 = 128;

/// [`GraphTensor::reloc`]: `buffer_addr` is an absolute device address.
pub const GRAPH_RELOC_ABSOLUTE: u32 = 0;
/// [`GraphTensor::reloc`]: `buffer_addr` is an offset into orchestration tensor argument
/// [`GraphTensor::arg`] (the run's own argument is added).
pub const GRAPH_RELOC_ARG: u32 = 1;
/// [`GraphTensor::reloc`]: `buffer_addr` is an offset into the run's output heap (a
/// runtime-allocated `OUTPUT`; the run's `heap_addr` is added).
pub const GRAPH_RELOC_HEAP: u32 = 2;

/// [`GraphTask::flags`]: the task's blocks must all start together.
pub const GRAPH_TASK_SYNC_START: u32 = 1;

/// The head of a graph image (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphImageHeader {
    /// [`GRAPH_IMAGE_MAGIC`].
    pub magic: u32,
    /// [`GRAPH_IMAGE_VERSION`].
    pub version: u32,
    /// CRC-32 (IEEE) of the `total_bytes − 64` bytes after the header.
    pub checksum: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// The callable generation the image was built for (the registry's, non-zero).
    pub generation: u64,
    /// Bytes of the whole image, header included.
    pub total_bytes: u64,
    /// Tasks, in submit order.
    pub task_count: u32,
    /// Tensors, all tasks' together.
    pub tensor_count: u32,
    /// Wake entries, all tasks' together.
    pub wake_count: u32,
    /// Orchestration tensor arguments the build saw (a run must pass as many).
    pub arg_tensor_count: u32,
    /// Bytes of the output heap the graph's `OUTPUT`s use, from `heap_addr`.
    pub heap_bytes: u64,
    /// Reserved, 0.
    pub reserved2: u64,
}

assert_layout!(
    GraphImageHeader,
    size = 64,
    magic = 0,
    version = 4,
    checksum = 8,
    generation = 16,
    total_bytes = 24,
    task_count = 32,
    tensor_count = 36,
    wake_count = 40,
    arg_tensor_count = 44,
    heap_bytes = 48
);

/// One task of a graph image (192 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphTask {
    /// Func id per lane (AIC, AIV0, AIV1); [`NO_KERNEL`](crate::NO_KERNEL) = lane unused.
    pub func_ids: [i32; 3],
    /// Dispatch shape: 0 AIC, 1 AIV, 2 MIX, 3 dummy (never dispatched).
    pub shape: u32,
    /// Bit per used lane (1 AIC, 2 AIV0, 4 AIV1).
    pub lanes: u32,
    /// Logical blocks, 1..=32767.
    pub block_num: u32,
    /// `GRAPH_TASK_*` bits.
    pub flags: u32,
    /// Tasks this one waits for.
    pub fanin: u32,
    /// First entry of its wake list.
    pub wake_first: u32,
    /// Entries of its wake list (the tasks waiting for it).
    pub wake_count: u32,
    /// First of its tensors in the tensor table.
    pub tensor_first: u32,
    /// Its tensors (≤ 32).
    pub tensor_count: u32,
    /// Its scalars (≤ 16).
    pub scalar_count: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Its submit call in the orchestration (1 = the first), for messages.
    pub submit: u64,
    /// Scalar bits, `scalar_count` used.
    pub scalars: [u64; 16],
}

assert_layout!(
    GraphTask,
    size = 192,
    func_ids = 0,
    shape = 12,
    lanes = 16,
    block_num = 20,
    flags = 24,
    fanin = 28,
    wake_first = 32,
    wake_count = 36,
    tensor_first = 40,
    tensor_count = 44,
    scalar_count = 48,
    submit = 56,
    scalars = 64
);

/// One tensor argument of a graph task (136 bytes): the view the kernel gets, with its
/// `buffer_addr` relative to what [`reloc`](GraphTensor::reloc) names.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphTensor {
    /// The view; `buffer_addr` as `reloc` says.
    pub tensor: ChipTensor,
    /// `GRAPH_RELOC_*`.
    pub reloc: u32,
    /// The orchestration tensor argument, for [`GRAPH_RELOC_ARG`].
    pub arg: u32,
}

assert_layout!(GraphTensor, size = 136, tensor = 0, reloc = 128, arg = 132);

/// Byte offsets of the three tables of an image with these counts, and its total size;
/// `None` when the sizes overflow.
pub fn graph_image_layout(tasks: u32, tensors: u32, wakes: u32) -> Option<GraphImageLayout> {
    let header = std::mem::size_of::<GraphImageHeader>() as u64;
    let tasks_at = header;
    let tensors_at =
        tasks_at.checked_add(u64::from(tasks) * std::mem::size_of::<GraphTask>() as u64)?;
    let wakes_at =
        tensors_at.checked_add(u64::from(tensors) * std::mem::size_of::<GraphTensor>() as u64)?;
    let total = wakes_at.checked_add(u64::from(wakes) * 4)?;
    Some(GraphImageLayout {
        tasks_at,
        tensors_at,
        wakes_at,
        total,
    })
}

/// Where the tables of a graph image lie, in bytes from its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphImageLayout {
    /// The [`GraphTask`] table.
    pub tasks_at: u64,
    /// The [`GraphTensor`] table.
    pub tensors_at: u64,
    /// The `u32` wake entries.
    pub wakes_at: u64,
    /// The whole image.
    pub total: u64,
}
