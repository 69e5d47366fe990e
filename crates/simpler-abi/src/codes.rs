//! Runtime error codes, numbered as upstream so logs read the same (`docs/chip-runtime.md`,
//! error codes). The host reports the negated value as a run's completion code.

/// Orchestrator: a scope cannot accept another task.
pub const ORCH_SCOPE_DEADLOCK: i32 = 1;
/// Orchestrator: the heap ring cannot fit an output.
pub const ORCH_HEAP_RING_DEADLOCK: i32 = 2;
/// Orchestrator: the task ring is full.
pub const ORCH_FLOW_CONTROL_DEADLOCK: i32 = 3;
/// Orchestrator: the dependency pool overflowed.
pub const ORCH_DEP_POOL_OVERFLOW: i32 = 4;
/// Orchestrator: a submission's arguments are invalid.
pub const ORCH_INVALID_ARGS: i32 = 5;
/// Orchestrator, `host_build_graph` only: a task has more producers than a task may wait
/// for, or the graph's edges exceed the dependency pool.
pub const ORCH_DEPENDENCY_OVERFLOW: i32 = 6;
/// Orchestrator: `require_sync_start` asked for more blocks than can co-launch.
pub const ORCH_REQUIRE_SYNC_START_INVALID: i32 = 7;
/// Orchestrator: `get/set_tensor_data` timed out.
pub const ORCH_TENSOR_WAIT_TIMEOUT: i32 = 8;
/// Orchestrator: the orchestration reported a fatal error (or returned non-zero).
pub const ORCH_EXPLICIT_FATAL: i32 = 9;
/// Orchestrator: too many tasks in one scope.
pub const ORCH_SCOPE_TASKS_OVERFLOW: i32 = 10;
/// Orchestrator: the tensor map overflowed.
pub const ORCH_TENSORMAP_OVERFLOW: i32 = 11;

/// Scheduler: no progress within the watchdog timeout.
pub const SCHED_TIMEOUT: i32 = 100;
/// Scheduler: a deferred-completion condition names an engine the chip lacks, a bad counter
/// or a ticket never issued (`docs/chip-runtime.md` §18).
pub const SCHED_ASYNC_COMPLETION_INVALID: i32 = 101;
/// Scheduler: a dispatch registered more than 64 deferred-completion conditions (§18).
pub const SCHED_ASYNC_WAIT_OVERFLOW: i32 = 102;
/// Scheduler: the SDMA engine refused a copy a kernel submitted (§18).
pub const SCHED_ASYNC_REGISTRATION_FAILED: i32 = 103;
/// Scheduler: a ready queue overflowed.
pub const SCHED_READY_QUEUE_OVERFLOW: i32 = 104;
/// Scheduler (simpler extension): a kernel reported a fatal error through its
/// [`GlobalContext`](crate::GlobalContext).
pub const SCHED_KERNEL_FATAL: i32 = 110;
/// Scheduler (simpler extension): a task named a func id with no registered kernel.
pub const SCHED_UNKNOWN_KERNEL: i32 = 111;
/// Scheduler (simpler extension): one kernel dispatch ran longer than the op-execute
/// timeout; its core was abandoned (the kernel may still be running).
pub const SCHED_OP_EXECUTE_TIMEOUT: i32 = 112;

/// Human-readable name of a runtime error code (positive form), for messages.
pub fn code_name(code: i32) -> &'static str {
    match code.abs() {
        ORCH_SCOPE_DEADLOCK => "SCOPE_DEADLOCK",
        ORCH_HEAP_RING_DEADLOCK => "HEAP_RING_DEADLOCK",
        ORCH_FLOW_CONTROL_DEADLOCK => "FLOW_CONTROL_DEADLOCK",
        ORCH_DEP_POOL_OVERFLOW => "DEP_POOL_OVERFLOW",
        ORCH_INVALID_ARGS => "INVALID_ARGS",
        ORCH_DEPENDENCY_OVERFLOW => "DEPENDENCY_OVERFLOW",
        ORCH_REQUIRE_SYNC_START_INVALID => "REQUIRE_SYNC_START_INVALID",
        ORCH_TENSOR_WAIT_TIMEOUT => "TENSOR_WAIT_TIMEOUT",
        ORCH_EXPLICIT_FATAL => "EXPLICIT_ORCH_FATAL",
        ORCH_SCOPE_TASKS_OVERFLOW => "SCOPE_TASKS_OVERFLOW",
        ORCH_TENSORMAP_OVERFLOW => "TENSORMAP_OVERFLOW",
        SCHED_TIMEOUT => "SCHEDULER_TIMEOUT",
        SCHED_ASYNC_COMPLETION_INVALID => "ASYNC_COMPLETION_INVALID",
        SCHED_ASYNC_WAIT_OVERFLOW => "ASYNC_WAIT_OVERFLOW",
        SCHED_ASYNC_REGISTRATION_FAILED => "ASYNC_REGISTRATION_FAILED",
        SCHED_READY_QUEUE_OVERFLOW => "READY_QUEUE_OVERFLOW",
        SCHED_KERNEL_FATAL => "KERNEL_FATAL",
        SCHED_UNKNOWN_KERNEL => "UNKNOWN_KERNEL",
        SCHED_OP_EXECUTE_TIMEOUT => "OP_EXECUTE_TIMEOUT",
        _ => "UNKNOWN",
    }
}
