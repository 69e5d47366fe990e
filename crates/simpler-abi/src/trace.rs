//! The device-side trace area of a run (`docs/tracing.md`, Capture): one control block the
//! host writes, followed by one buffer per recording thread (every AICore, then every AICPU
//! thread), each a [`TraceBufferHeader`] and `capacity` fixed-size [`TraceRecord`]s.
//!
//! Each buffer has exactly one writer (the thread it belongs to), so recording takes no lock
//! and allocates nothing: the writer stores a record at `len` and bumps `len`, and once the
//! buffer is full it bumps `dropped` instead. The host reads the area back after both
//! kernels of the run have finished.
//!
//! Layout of the area at [`RunLaunchDesc::trace_addr`](crate::RunLaunchDesc::trace_addr):
//!
//! ```text
//! TraceControl
//! buffer 0 .. buffer_count-1, each: TraceBufferHeader, then capacity × TraceRecord
//! ```
//!
//! Buffer `i < core_count` belongs to AICore `i`; buffer `core_count + t` to AICPU thread
//! `t`. [`TraceControl::buffer_offset`] gives a buffer's byte offset from the area's start.

use crate::assert_layout;

/// [`TraceControl::magic`]: "STRC".
pub const TRACE_MAGIC: u32 = 0x4352_5453;

/// What the run records, as a number: 0 off, 1 tasks, 2 dispatch, 3 scheduler, 4
/// orchestrator (each level records everything the ones below it do).
pub type TraceLevelRaw = u32;
/// Level `tasks`: every subtask's start and end on its core, the tasks and their edges.
pub const TRACE_LEVEL_TASKS: TraceLevelRaw = 1;
/// Level `dispatch`: + AICPU dispatch, ACK, FIN handshake times and ready-queue waits.
pub const TRACE_LEVEL_DISPATCH: TraceLevelRaw = 2;
/// Level `scheduler`: + scheduler loop phases and counter samples.
pub const TRACE_LEVEL_SCHEDULER: TraceLevelRaw = 3;
/// Level `orchestrator`: + submit phases.
pub const TRACE_LEVEL_ORCHESTRATOR: TraceLevelRaw = 4;

/// The head of a run's trace area, written by the host before the launch (the alignment
/// pair is written by the runtime).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceControl {
    /// [`TRACE_MAGIC`].
    pub magic: u32,
    /// The run's level (`TRACE_LEVEL_*`, ≥ 1: an untraced run has no area).
    pub level: TraceLevelRaw,
    /// Buffers that follow (AICores first, then AICPU threads).
    pub buffer_count: u32,
    /// AICores of the device: buffers `0..core_count` are theirs.
    pub core_count: u32,
    /// Records each buffer holds.
    pub capacity: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Origin of the device clock, on the sim platform a host `CLOCK_MONOTONIC` reading
    /// (ns): device time is `CLOCK_MONOTONIC − origin`. The host picks one per device.
    pub clock_origin_ns: u64,
    /// Device clock (ns) of the run's one simultaneous reading of both clocks, written by the
    /// runtime at the start of the run (0 = not taken).
    pub align_device_ns: u64,
    /// Host clock (`CLOCK_MONOTONIC`, ns) of that reading.
    pub align_host_ns: u64,
}

assert_layout!(
    TraceControl,
    size = 48,
    magic = 0,
    level = 4,
    buffer_count = 8,
    core_count = 12,
    capacity = 16,
    clock_origin_ns = 24,
    align_device_ns = 32,
    align_host_ns = 40
);

impl TraceControl {
    /// Bytes of one buffer of `capacity` records (header included).
    pub const fn buffer_bytes(capacity: u32) -> u64 {
        (core::mem::size_of::<TraceBufferHeader>()
            + capacity as usize * core::mem::size_of::<TraceRecord>()) as u64
    }

    /// Byte offset of buffer `index` from the start of the area.
    pub const fn buffer_offset(&self, index: u32) -> u64 {
        core::mem::size_of::<TraceControl>() as u64
            + index as u64 * Self::buffer_bytes(self.capacity)
    }

    /// Total bytes of the area.
    pub const fn area_bytes(&self) -> u64 {
        self.buffer_offset(self.buffer_count)
    }
}

/// The head of one thread's buffer. The host writes `capacity` and zeroes the rest before
/// the launch; the owning thread alone writes `len` and `dropped` during the run.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceBufferHeader {
    /// Records the buffer holds.
    pub capacity: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Records written (≤ capacity).
    pub len: u64,
    /// Events that found the buffer full and were not recorded.
    pub dropped: u64,
}

assert_layout!(
    TraceBufferHeader,
    size = 24,
    capacity = 0,
    len = 8,
    dropped = 16
);

/// [`TraceRecord::kind`]: one subtask on an AICore (core buffers only). `task`; `a` core
/// id, `b` block index, `c` the core's sub-block id (0/1 for AIV, 0 for AIC); `start_ns` /
/// `end_ns` around the kernel call.
pub const TRACE_SUBTASK: u32 = 1;
/// [`TraceRecord::kind`]: a task was submitted (orchestrator). `task`; `a`/`b`/`c` the func
/// ids of its AIC / AIV0 / AIV1 lanes (`u32::MAX` = none); `start_ns` the submit number
/// (1-based), `end_ns` the block count.
pub const TRACE_TASK: u32 = 2;
/// [`TraceRecord::kind`]: a dependency edge (orchestrator). `task` the consumer,
/// `start_ns` the producer, `a` its [`TRACE_EDGE_RAW`]… kind.
pub const TRACE_EDGE: u32 = 3;
/// [`TraceRecord::kind`]: an AICPU phase. `a` the phase (`TRACE_PHASE_*`), `b` the core id
/// (`u32::MAX` = none), `task` (`u64::MAX` = none), `start_ns`..`end_ns` (equal for an
/// instant).
pub const TRACE_AICPU: u32 = 4;
/// [`TraceRecord::kind`]: a counter sample. `a` the counter (`TRACE_COUNTER_*`), `start_ns`
/// the time, `end_ns` the value (an `i64`'s bits).
pub const TRACE_COUNTER: u32 = 5;

/// Edge kind: read after write.
pub const TRACE_EDGE_RAW: u32 = 0;
/// Edge kind: write after write.
pub const TRACE_EDGE_WAW: u32 = 1;
/// Edge kind: write after read.
pub const TRACE_EDGE_WAR: u32 = 2;
/// Edge kind: an explicit dependency of the task descriptor (`TaskDesc::deps`). Creator
/// retention through `owner_task_id` is recorded as RAW (or WAW for an output into it).
pub const TRACE_EDGE_EXPLICIT: u32 = 3;

/// AICPU phase: a subtask written to a core's payload and its id published (level dispatch).
pub const TRACE_PHASE_DISPATCH: u32 = 0;
/// AICPU phase: the scheduler saw the core's ACK (instant, level dispatch).
pub const TRACE_PHASE_ACK: u32 = 1;
/// AICPU phase: the scheduler saw the core's FIN (instant, level dispatch).
pub const TRACE_PHASE_FIN: u32 = 2;
/// AICPU phase: a ready task waited in its queue, from ready to dispatch (level dispatch).
pub const TRACE_PHASE_READY_WAIT: u32 = 3;
/// AICPU phase: collecting finished dispatches (level scheduler).
pub const TRACE_PHASE_SCHED_COLLECT: u32 = 4;
/// AICPU phase: placing ready tasks (level scheduler).
pub const TRACE_PHASE_SCHED_PLACE: u32 = 5;
/// AICPU phase: idle passes that yielded (level scheduler).
pub const TRACE_PHASE_SCHED_IDLE: u32 = 6;
/// AICPU phase: parked on the doorbell (level scheduler).
pub const TRACE_PHASE_SCHED_PARK: u32 = 7;
/// AICPU phase: one whole submit (level orchestrator).
pub const TRACE_PHASE_SUBMIT: u32 = 8;
/// AICPU phase: the tensor-map lookup of a submit (level orchestrator).
pub const TRACE_PHASE_TENSOR_MAP_LOOKUP: u32 = 9;
/// AICPU phase: wiring a submit's producers (level orchestrator).
pub const TRACE_PHASE_DEPENDENCY_WIRING: u32 = 10;
/// AICPU phase: carving a submit's outputs from the heap (level orchestrator).
pub const TRACE_PHASE_HEAP_ALLOC: u32 = 11;
/// AICPU phase: waiting for room in a ring (level orchestrator).
pub const TRACE_PHASE_BACK_PRESSURE: u32 = 12;

/// Counter: AIC ready-queue depth.
pub const TRACE_COUNTER_READY_AIC: u32 = 0;
/// Counter: AIV ready-queue depth.
pub const TRACE_COUNTER_READY_AIV: u32 = 1;
/// Counter: MIX ready-queue depth.
pub const TRACE_COUNTER_READY_MIX: u32 = 2;
/// Counter: live tasks of ring `r` is `TRACE_COUNTER_RING0 + r`.
pub const TRACE_COUNTER_RING0: u32 = 3;

/// One recorded event: 40 bytes, fields as the `kind` constants say.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceRecord {
    /// `TRACE_SUBTASK`, `TRACE_TASK`, …
    pub kind: u32,
    /// First argument (by kind).
    pub a: u32,
    /// Second argument (by kind).
    pub b: u32,
    /// Third argument (by kind).
    pub c: u32,
    /// Task id (by kind).
    pub task: u64,
    /// Start time on the device clock (ns), or a value (by kind).
    pub start_ns: u64,
    /// End time on the device clock (ns), or a value (by kind).
    pub end_ns: u64,
}

assert_layout!(
    TraceRecord,
    size = 40,
    kind = 0,
    a = 4,
    b = 8,
    c = 12,
    task = 16,
    start_ns = 24,
    end_ns = 32
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_follow_the_control_block_at_a_fixed_stride() {
        let c = TraceControl {
            buffer_count: 3,
            capacity: 10,
            ..TraceControl::default()
        };
        assert_eq!(TraceControl::buffer_bytes(10), 24 + 400);
        assert_eq!(c.buffer_offset(0), 48);
        assert_eq!(c.buffer_offset(2), 48 + 2 * 424);
        assert_eq!(c.area_bytes(), 48 + 3 * 424);
        // Every buffer header stays 8-byte aligned.
        assert_eq!(c.buffer_offset(1) % 8, 0);
    }
}
