//! The state one run shares among its AICPU threads: the task arena, the ready queues, the
//! progress counters and the latched error words.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_queue::SegQueue;
use parking_lot::Mutex;
use simpler_abi::{ChipTensor, CoreType, KernelArgs, RunLaunchDesc};
use simpler_device::Doorbell;

/// Tasks per arena chunk.
const CHUNK: usize = 1024;

/// What the orchestrator fixed about a task before publishing it; read-only afterwards.
pub(crate) struct TaskBody {
    /// Task id (its index in the run).
    pub(crate) id: u32,
    /// Func id of its kernel (for messages).
    pub(crate) func_id: i32,
    /// Kernel entry address.
    pub(crate) kernel_addr: u64,
    /// Core type it runs on.
    pub(crate) core_type: CoreType,
    /// Its tensors. Never read by name: it owns the buffer the `args` tensor slots point
    /// into, which must not move or drop while the task can still be dispatched.
    #[allow(dead_code)]
    pub(crate) tensors: Box<[ChipTensor]>,
    /// Argument array without the two context slots.
    pub(crate) args: KernelArgs,
}

/// Consumers of a task and whether it has completed, guarded together so that wiring a new
/// consumer and completing the producer cannot interleave badly.
#[derive(Default)]
pub(crate) struct Fanout {
    pub(crate) completed: bool,
    pub(crate) consumers: Vec<u32>,
}

/// One task of the run.
#[derive(Default)]
pub(crate) struct Task {
    pub(crate) body: OnceLock<TaskBody>,
    /// Producers not yet completed, plus one while the orchestrator is still wiring.
    pub(crate) fanin: AtomicU32,
    /// Mirrors `fanout.completed` for lock-free pruning of the tensor map.
    pub(crate) done: AtomicBool,
    pub(crate) fanout: Mutex<Fanout>,
}

/// Tasks in chunks allocated on demand: addresses never move while the run lasts.
pub(crate) struct TaskArena {
    chunks: Box<[AtomicPtr<Task>]>,
}

impl TaskArena {
    fn new(window: u32) -> TaskArena {
        let n = (window as usize).div_ceil(CHUNK);
        TaskArena {
            chunks: (0..n)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        }
    }

    /// Makes sure slot `id` exists (orchestrator only). False past the window.
    pub(crate) fn ensure(&self, id: u32) -> bool {
        let Some(slot) = self.chunks.get(id as usize / CHUNK) else {
            return false;
        };
        if slot.load(Ordering::Acquire).is_null() {
            let chunk: Box<[Task]> = (0..CHUNK).map(|_| Task::default()).collect();
            slot.store(Box::into_raw(chunk) as *mut Task, Ordering::Release);
        }
        true
    }

    /// Task `id`, which must have been [`ensure`](TaskArena::ensure)d.
    pub(crate) fn get(&self, id: u32) -> &Task {
        let chunk = self.chunks[id as usize / CHUNK].load(Ordering::Acquire);
        assert!(!chunk.is_null(), "task {id} used before it was allocated");
        // SAFETY: a non-null chunk pointer is a leaked `Box<[Task; CHUNK]>` that lives until
        // the arena drops, and `id % CHUNK < CHUNK`.
        unsafe { &*chunk.add(id as usize % CHUNK) }
    }
}

impl Drop for TaskArena {
    fn drop(&mut self) {
        for slot in self.chunks.iter() {
            let p = slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                // SAFETY: `p` came from `Box::into_raw` of a boxed slice of CHUNK tasks.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, CHUNK)) });
            }
        }
    }
}

/// First-writer-wins error words (spec `l2-runtime.md` §2.7) plus the first message.
#[derive(Default)]
pub(crate) struct ErrorWords {
    pub(crate) orch: AtomicI32,
    pub(crate) sched: AtomicI32,
    message: Mutex<String>,
}

impl ErrorWords {
    /// Latches an orchestrator error; returns `code`.
    pub(crate) fn orch_fail(&self, code: i32, message: impl FnOnce() -> String) -> i32 {
        if self
            .orch
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.note(message());
        }
        code
    }

    /// Latches a scheduler error.
    pub(crate) fn sched_fail(&self, code: i32, message: impl FnOnce() -> String) {
        if self
            .sched
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.note(message());
        }
    }

    fn note(&self, message: String) {
        let mut m = self.message.lock();
        if m.is_empty() {
            *m = message;
        }
    }

    /// True once any error is latched.
    pub(crate) fn is_fatal(&self) -> bool {
        self.orch.load(Ordering::Acquire) != 0 || self.sched.load(Ordering::Acquire) != 0
    }

    /// The orchestrator error if any, else the scheduler error, with the first message.
    pub(crate) fn verdict(&self) -> Option<(i32, String)> {
        let orch = self.orch.load(Ordering::Acquire);
        let code = if orch != 0 {
            orch
        } else {
            self.sched.load(Ordering::Acquire)
        };
        (code != 0).then(|| (code, self.message.lock().clone()))
    }
}

/// Everything the AICPU threads of one run share.
pub(crate) struct RunShared {
    pub(crate) desc: RunLaunchDesc,
    pub(crate) tasks: TaskArena,
    /// Tasks published by the orchestrator.
    pub(crate) submitted: AtomicU32,
    /// Tasks completed.
    pub(crate) completed: AtomicU32,
    /// Set once the orchestration has returned (after its last submit).
    pub(crate) orch_done: AtomicBool,
    /// Ready tasks per core type (index = `CoreType as usize`).
    pub(crate) ready: [SegQueue<u32>; 2],
    /// Doorbells of the scheduler threads, registered as they start.
    pub(crate) bells: Box<[OnceLock<Arc<Doorbell>>]>,
    pub(crate) errors: ErrorWords,
    /// AICPU threads that have finished with this state.
    pub(crate) exited: AtomicU32,
    /// func id → kernel entry address (0 = none).
    pub(crate) func_addrs: Vec<u64>,
    /// func id → core type + 1 (0 = none).
    pub(crate) func_types: Vec<u32>,
}

impl RunShared {
    pub(crate) fn new(desc: RunLaunchDesc, schedulers: usize) -> RunShared {
        let n = desc.func_count as usize;
        RunShared {
            desc,
            tasks: TaskArena::new(desc.task_window.max(1)),
            submitted: AtomicU32::new(0),
            completed: AtomicU32::new(0),
            orch_done: AtomicBool::new(false),
            ready: [SegQueue::new(), SegQueue::new()],
            bells: (0..schedulers).map(|_| OnceLock::new()).collect(),
            errors: ErrorWords::default(),
            exited: AtomicU32::new(0),
            func_addrs: crate::devmem::table(desc.func_table_addr, n),
            func_types: crate::devmem::table(desc.func_core_types_addr, n),
        }
    }

    /// Wakes every scheduler that is parked.
    pub(crate) fn ring_schedulers(&self) {
        for bell in self.bells.iter().filter_map(|b| b.get()) {
            bell.ring();
        }
    }

    /// Makes task `id` ready: queues it for its core type and wakes the schedulers.
    pub(crate) fn push_ready(&self, id: u32) {
        let ty = self.tasks.get(id).body.get().map(|b| b.core_type);
        if let Some(ty) = ty {
            self.ready[ty as usize].push(id);
            self.ring_schedulers();
        }
    }

    /// True when the run has nothing left to do: the orchestration returned and every
    /// submitted task completed.
    pub(crate) fn all_done(&self) -> bool {
        self.orch_done.load(Ordering::Acquire)
            && self.completed.load(Ordering::Acquire) == self.submitted.load(Ordering::Acquire)
    }

    /// Marks task `id` complete and releases its consumers.
    pub(crate) fn complete(&self, id: u32) {
        let task = self.tasks.get(id);
        let consumers = {
            let mut f = task.fanout.lock();
            f.completed = true;
            std::mem::take(&mut f.consumers)
        };
        task.done.store(true, Ordering::Release);
        for c in consumers {
            if self.tasks.get(c).fanin.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.push_ready(c);
            }
        }
        self.completed.fetch_add(1, Ordering::AcqRel);
        if self.all_done() {
            self.ring_schedulers();
        }
    }
}
