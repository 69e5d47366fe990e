//! A task slot of a ring and what lives in it (`docs/chip-runtime.md`, rings).
//!
//! A slot is reused once its task is CONSUMED. Its life: the orchestrator writes the body
//! while the slot is free, publishes the task (ready queue or fanin wiring), schedulers read
//! the body and count completions, and the last pin released marks it consumed, after which
//! the orchestrator may reclaim the slot.
//!
//! Pins (`pins`): one while the task has not completed, one per consumer that retains it
//! (released when that consumer completes), and — only for a task that owns runtime-allocated
//! (heap) outputs — one for the enclosing scope (released at scope end), because its outputs
//! stay readable through `owner_task_id` until then. A task without heap outputs is
//! consumed as soon as it has completed and its consumers have, even inside an open scope
//! (`docs/chip-runtime.md`, task life). The task is CONSUMED exactly when the count reaches
//! zero.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;
use simpler_abi::{ChipTensor, KernelArgs};

/// A task id: `ring << 32 | local index`.
pub type TaskId = u64;

/// Slot id of a free slot.
pub(crate) const NO_TASK: TaskId = u64::MAX;

/// The ring of a task id.
pub(crate) fn ring_of(id: TaskId) -> usize {
    (id >> 32) as usize
}

/// The local index of a task id within its ring.
pub(crate) fn local_of(id: TaskId) -> u32 {
    id as u32
}

/// How a task is dispatched (`docs/chip-runtime.md`: three resource shapes + dummy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// One AIC core per block.
    Aic = 0,
    /// One AIV core per block.
    Aiv = 1,
    /// One cluster per block: its AIC and/or AIV lanes together.
    Mix = 2,
    /// Never dispatched: completes as soon as its dependencies do.
    Dummy = 3,
}

/// Lane bits of a MIX task (bit 0 AIC, bit 1 AIV0, bit 2 AIV1).
pub(crate) const LANE_BITS: [u8; 3] = [1, 2, 4];

/// The core type a lane's kernel runs on: AIC for lane 0, AIV for lanes 1 and 2.
pub(crate) fn lane_core_type(lane: usize) -> simpler_abi::CoreType {
    if lane == simpler_abi::LANE_AIC {
        simpler_abi::CoreType::Aic
    } else {
        simpler_abi::CoreType::Aiv
    }
}

/// What the orchestrator fixed about a task.
pub(crate) struct TaskBody {
    pub(crate) shape: Shape,
    /// Kernel entry address per lane (AIC, AIV0, AIV1); 0 when the lane is unused.
    pub(crate) kernels: [u64; 3],
    /// Func id per lane (for messages); -1 when unused.
    pub(crate) func_ids: [i32; 3],
    /// The submit call of the run that made this task (1 = the first; for messages).
    pub(crate) submit: u64,
    /// Bit per used lane.
    pub(crate) lanes: u8,
    pub(crate) block_num: u32,
    pub(crate) sync_start: bool,
    /// The task's tensors; the `args` tensor slots point into this buffer, which is only
    /// rewritten while the slot is free.
    pub(crate) tensors: Vec<ChipTensor>,
    /// Argument array: tensor pointers, scalars and the two count slots (the context slots
    /// are filled at dispatch).
    pub(crate) args: KernelArgs,
    /// Producers this task pins until it completes.
    pub(crate) retained: Vec<TaskId>,
    /// Dependency-pool entries this task holds until it completes.
    pub(crate) edges: u32,
}

impl Default for TaskBody {
    fn default() -> Self {
        TaskBody {
            shape: Shape::Dummy,
            kernels: [0; 3],
            func_ids: [-1; 3],
            submit: 0,
            lanes: 0,
            block_num: 1,
            sync_start: false,
            tensors: Vec::new(),
            args: KernelArgs::default(),
            retained: Vec::new(),
            edges: 0,
        }
    }
}

impl TaskBody {
    /// Fills the argument array from the body's tensors (one pointer each, into `tensors`,
    /// which must not change after) and `scalars`, with the two count slots
    /// (`docs/chip-runtime.md` §3); the context slots are filled at dispatch.
    pub(crate) fn bind_args(&mut self, scalars: &[u64]) {
        self.args = KernelArgs::default();
        let n = self.tensors.len();
        for (slot, t) in self.args.slots.iter_mut().zip(&self.tensors) {
            *slot = t as *const ChipTensor as u64;
        }
        self.args.slots[n..n + scalars.len()].copy_from_slice(scalars);
        self.args.slots[simpler_abi::TENSOR_COUNT_SLOT] = n as u64;
        self.args.slots[simpler_abi::SCALAR_COUNT_SLOT] = scalars.len() as u64;
    }

    /// Subtasks that must finish for the task to complete.
    pub(crate) fn subtasks(&self) -> u32 {
        self.block_num * self.lanes.count_ones().max(1)
    }
}

/// Consumers waiting on a task, and whether it has completed, under one lock so wiring and
/// completion cannot interleave.
#[derive(Default)]
pub(crate) struct Fanout {
    pub(crate) completed: bool,
    pub(crate) consumers: Vec<TaskId>,
}

/// One slot of a task ring.
pub(crate) struct Task {
    /// Id of the task occupying the slot, or [`NO_TASK`].
    pub(crate) id: AtomicU64,
    body: UnsafeCell<TaskBody>,
    /// Producers not yet completed, plus one while the orchestrator is wiring.
    pub(crate) fanin: AtomicU32,
    pub(crate) pins: AtomicU32,
    pub(crate) completed: AtomicBool,
    pub(crate) consumed: AtomicBool,
    /// Set while the task owns heap outputs and its scope is open: its scope pins it (the
    /// structural deadlock check, and the validity of its outputs).
    pub(crate) in_open_scope: AtomicBool,
    pub(crate) fanout: Mutex<Fanout>,
    /// Next SPMD block to hand out.
    pub(crate) next_block: AtomicU32,
    /// Subtasks finished.
    pub(crate) done_subtasks: AtomicU32,
    /// Device clock (ns) at which the task was queued ready (set only when the run records
    /// level dispatch or more).
    pub(crate) ready_ns: AtomicU64,
}

// SAFETY: `body` is written only by the orchestrator thread while the slot is free (no other
// thread holds the task's id: it was consumed and not yet republished) and read by other
// threads only after publication, which happens-after the write through a release store
// (ready-queue push or fanin decrement under acquire/release). Every other field is atomic or
// locked.
unsafe impl Sync for Task {}

impl Default for Task {
    fn default() -> Self {
        Task {
            id: AtomicU64::new(NO_TASK),
            body: UnsafeCell::new(TaskBody::default()),
            fanin: AtomicU32::new(0),
            pins: AtomicU32::new(0),
            completed: AtomicBool::new(false),
            consumed: AtomicBool::new(true),
            in_open_scope: AtomicBool::new(false),
            fanout: Mutex::new(Fanout::default()),
            next_block: AtomicU32::new(0),
            done_subtasks: AtomicU32::new(0),
            ready_ns: AtomicU64::new(0),
        }
    }
}

impl Task {
    /// The body of a published task.
    pub(crate) fn body(&self) -> &TaskBody {
        // SAFETY: see the `Sync` impl: callers hold a published task id, so the orchestrator
        // will not rewrite the body until this task is consumed, which needs the caller's
        // own pin or completion to be released first.
        unsafe { &*self.body.get() }
    }

    /// The body of a free slot, for the orchestrator to fill.
    ///
    /// # Safety
    /// Only the orchestrator thread may call this, only while the slot is free (consumed and
    /// not yet given a new id), and it must not keep the reference past publication.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn body_mut(&self) -> &mut TaskBody {
        // SAFETY: guaranteed by the caller.
        unsafe { &mut *self.body.get() }
    }

    /// Re-arms a free slot for task `id`: pinned by not having completed and, when `scoped`
    /// (the task owns heap outputs), by its scope.
    pub(crate) fn arm(&self, id: TaskId, scoped: bool) {
        self.fanout.lock().completed = false;
        self.completed.store(false, Ordering::Relaxed);
        self.consumed.store(false, Ordering::Relaxed);
        self.in_open_scope.store(scoped, Ordering::Relaxed);
        self.pins.store(1 + u32::from(scoped), Ordering::Relaxed);
        self.fanin.store(1, Ordering::Relaxed);
        self.next_block.store(0, Ordering::Relaxed);
        self.done_subtasks.store(0, Ordering::Relaxed);
        self.id.store(id, Ordering::Release);
    }

    /// Returns the slot to the state of a new one ([`Task::default`]) for a later run's
    /// ring, keeping the capacity of its vectors (tensors, retained producers, consumers),
    /// so a recycled slot's submit allocates nothing.
    pub(crate) fn recycle(&mut self) {
        let body = self.body.get_mut();
        let mut tensors = std::mem::take(&mut body.tensors);
        let mut retained = std::mem::take(&mut body.retained);
        let mut consumers = std::mem::take(&mut self.fanout.get_mut().consumers);
        tensors.clear();
        retained.clear();
        consumers.clear();
        *self = Task::default();
        let body = self.body.get_mut();
        body.tensors = tensors;
        body.retained = retained;
        self.fanout.get_mut().consumers = consumers;
    }

    /// Adds a pin if the task is not consumed yet; false if it already is.
    pub(crate) fn try_pin(&self) -> bool {
        self.pins
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p > 0).then_some(p + 1)
            })
            .is_ok()
    }

    /// Drops a pin; true when it was the last one (the task is now consumed).
    pub(crate) fn unpin(&self) -> bool {
        let before = self.pins.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "pin count underflow");
        if before == 1 {
            self.consumed.store(true, Ordering::Release);
            true
        } else {
            false
        }
    }

    /// True when the slot holds `id` and that task has completed, or holds something else
    /// (then `id` completed long ago).
    pub(crate) fn is_done(&self, id: TaskId) -> bool {
        self.id.load(Ordering::Acquire) != id || self.completed.load(Ordering::Acquire)
    }
}
