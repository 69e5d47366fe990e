//! The run launch descriptor: the one structure the host places in device memory for the
//! two kernels of a run (`docs/chip-runtime.md` §1).
//! Nothing else crosses from the host to the device for a run.

use crate::assert_layout;

/// [`RunLaunchDesc::magic`]: "SMPL".
pub const RUN_LAUNCH_MAGIC: u32 = 0x4c50_4d53;
/// Current [`RunLaunchDesc::version`].
pub const RUN_LAUNCH_VERSION: u32 = 2;
/// Most kernel func ids a callable may use (`RUNTIME_MAX_FUNC_ID`).
pub const MAX_FUNC_ID: usize = 1024;

/// Everything the AICPU and AICore kernels need to execute one run. All addresses are
/// device addresses; on the sim platform they are host addresses.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RunLaunchDesc {
    /// [`RUN_LAUNCH_MAGIC`].
    pub magic: u32,
    /// [`RUN_LAUNCH_VERSION`].
    pub version: u32,
    /// The run's epoch (non-zero, process-unique); stamped into the result record.
    pub epoch: u64,
    /// Address of the slot's [`RunResult`](crate::RunResult).
    pub result_addr: u64,
    /// Address of the orchestration entry function ([`OrchEntry`](crate::OrchEntry)).
    pub orch_entry: u64,
    /// Address of the run's [`OrchArgs`](crate::OrchArgs).
    pub orch_args_addr: u64,
    /// Address of a `[u64; func_count]` table: func id → kernel entry address (0 = none).
    pub func_table_addr: u64,
    /// Address of a `[u32; func_count]` table: func id → [`CoreType`](crate::CoreType) + 1
    /// (0 = no kernel registered under that id).
    pub func_core_types_addr: u64,
    /// Number of entries in the two func tables (≤ [`MAX_FUNC_ID`]).
    pub func_count: u32,
    /// AICPU threads taking part (1 orchestrator + the rest schedulers), ≥ 2.
    pub aicpu_thread_num: u32,
    /// Address of the heap runtime-allocated outputs are carved from.
    pub heap_addr: u64,
    /// Size of that heap in bytes.
    pub heap_size: u64,
    /// Task slots per ring, a power of two ≥ 4: the most tasks of one ring alive at once (the
    /// task window).
    pub task_window: u32,
    /// No-progress watchdog of the scheduler, in milliseconds (0 = runtime default).
    pub scheduler_timeout_ms: u32,
    /// Address of `[CoreMailbox; core_count]`: each core's dispatch payloads.
    pub core_mailbox_addr: u64,
    /// Address of one zeroed 8-byte word through which the AICPU threads of a run share
    /// their run state; the runtime returns it to zero before the kernel ends.
    pub runtime_state_addr: u64,
    /// Task window per ring (power of two ≥ 4); 0 = `task_window`.
    pub ring_task_window: [u32; 4],
    /// Output-heap bytes per ring, carved from `heap_addr` in ring order; all 0 = an equal
    /// split of `heap_size`.
    pub ring_heap: [u64; 4],
    /// Dependency-pool entries per ring; 0 = the runtime default (16,384).
    pub ring_dep_pool: [u32; 4],
    /// `get/set_tensor_data` timeout in milliseconds; 0 = the runtime default (15 s).
    pub tensor_wait_timeout_ms: u32,
    /// Op-execute timeout in milliseconds: the longest one kernel dispatch may run before
    /// the scheduler fails the run with OP_EXECUTE_TIMEOUT and abandons its core; 0 = the
    /// runtime default (45 s).
    pub op_execute_timeout_ms: u32,
    /// Address of the run's trace area ([`TraceControl`](crate::TraceControl) and its
    /// buffers, `docs/tracing.md`); 0 = the run records nothing.
    pub trace_addr: u64,
    /// Which runtime variant runs the graph: [`RUNTIME_TMR`] (the orchestration runs on the
    /// top AICPU thread) or [`RUNTIME_HBG`] (the host built the graph before launch; every
    /// AICPU thread is a scheduler; `docs/chip-runtime.md` §17).
    pub runtime: u32,
    /// `host_build_graph`: ready tasks a ready queue (one per shape) holds at most; past it
    /// the run fails with READY_QUEUE_OVERFLOW. 0 = [`DEFAULT_HBG_READY_QUEUE`].
    pub ready_queue: u32,
    /// `host_build_graph`: address of the run's [`GraphImageHeader`](crate::GraphImageHeader)
    /// and the image behind it; 0 under `tensormap_and_ringbuffer`.
    pub graph_addr: u64,
    /// Bytes of the image at `graph_addr`.
    pub graph_bytes: u64,
    /// The callable generation the image must have been built for (a stale image is
    /// refused).
    pub graph_generation: u64,
}

/// [`RunLaunchDesc::runtime`]: `tensormap_and_ringbuffer`.
pub const RUNTIME_TMR: u32 = 0;
/// [`RunLaunchDesc::runtime`]: `host_build_graph`.
pub const RUNTIME_HBG: u32 = 1;
/// Default [`RunLaunchDesc::ready_queue`] (upstream's HBG ready queue per shape).
pub const DEFAULT_HBG_READY_QUEUE: u32 = 8192;

assert_layout!(
    RunLaunchDesc,
    size = 216,
    magic = 0,
    version = 4,
    epoch = 8,
    result_addr = 16,
    orch_entry = 24,
    orch_args_addr = 32,
    func_table_addr = 40,
    func_core_types_addr = 48,
    func_count = 56,
    aicpu_thread_num = 60,
    heap_addr = 64,
    heap_size = 72,
    task_window = 80,
    scheduler_timeout_ms = 84,
    core_mailbox_addr = 88,
    runtime_state_addr = 96,
    ring_task_window = 104,
    ring_heap = 120,
    ring_dep_pool = 152,
    tensor_wait_timeout_ms = 168,
    op_execute_timeout_ms = 172,
    trace_addr = 176,
    runtime = 184,
    ready_queue = 188,
    graph_addr = 192,
    graph_bytes = 200,
    graph_generation = 208
);
