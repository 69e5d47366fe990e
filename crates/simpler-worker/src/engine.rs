//! The engine's shared state behind its one lock: the runs in flight, what each lane is
//! doing, the live child allocations — and the bookkeeping every path shares when a task is
//! over (tensor-map retirement, release of the memory it named) (`docs/l3-worker.md` §1,
//! §6).
//!
//! The orchestrator (adding tasks, dispatching the ready ones), the lanes (their members'
//! ends, and the dispatch that follows: `crate::scheduler`) and the worker (control calls,
//! close) all change this state under [`Engine::state`]; the heap ring and the registry
//! have their own locks, taken after it or alone. Nothing here blocks while holding the
//! lock.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};

use crate::graph::{TaskState, Use};
use crate::lane::{ControlOp, ControlReply, WorkItem};
use crate::memory::SharedRegion;
use crate::registry::Registry;
use crate::ring::HeapRing;
use crate::run::Run;
use crate::tensormap::TaskId;
use crate::WorkerError;

/// How often a caller blocked in the engine (for a pipeline place, the orchestration, a
/// control call's answer) runs its wait check (`Worker::submit_interruptible`).
pub(crate) const CHECK_SLICE: std::time::Duration = std::time::Duration::from_millis(50);

/// What the engine knows of one lane (chip `w` is lane `w`, sub worker `j` is lane
/// `chips + j`).
pub(crate) struct LaneSlot {
    /// The endpoint's `describe()`.
    pub(crate) describe: String,
    /// Task members dispatched to it and not yet ended (a chip lane takes up to
    /// [`CHIP_LANE_DEPTH`] at once, any other lane one).
    pub(crate) queued: usize,
    /// Held for the chip group at the head of the group queue.
    pub(crate) reserved: bool,
    /// The death report, once the endpoint died.
    pub(crate) dead: Option<String>,
}

impl LaneSlot {
    /// A lane with nothing dispatched to it.
    pub(crate) fn new(describe: String) -> LaneSlot {
        LaneSlot {
            describe,
            queued: 0,
            reserved: false,
            dead: None,
        }
    }

    /// Some task member is dispatched to it and not yet over.
    pub(crate) fn busy(&self) -> bool {
        self.queued > 0
    }
}

/// Most single chip tasks dispatched to one chip lane and not yet ended: the lane hands
/// the runs among them that wait in its channel to its chip together (`crate::lane`,
/// `docs/l3-worker.md` §4), so a lane never waits for the dispatch of its next task.
pub(crate) const CHIP_LANE_DEPTH: usize = 16;

/// A live child allocation (persistent device memory of one chip).
pub(crate) struct ChildRec {
    /// Its length, in bytes.
    pub(crate) nbytes: u64,
    /// Tasks naming it that are not over.
    pub(crate) users: usize,
    /// `orch.free` released it: freed once `users` is 0 (a window: released with its
    /// domain, freed at its run's end).
    pub(crate) released: bool,
    /// A comm domain's window (`crate::comm`), not an allocation of the chip's.
    pub(crate) window: bool,
    /// Its generation (`ChildAllocation::generation`): tensors of it carry the same.
    pub(crate) generation: u64,
}

/// A live comm domain (`crate::comm`) or L3↔L2 region (`crate::channel`): the shared
/// region its member chips attached.
pub(crate) struct DomainRec {
    pub(crate) name: String,
    /// Member chip and the window's base in its address space, in rank order.
    pub(crate) members: Vec<(usize, u64)>,
    pub(crate) region: Arc<SharedRegion>,
    /// Released: no task may name it any more; freed at its run's end.
    pub(crate) released: bool,
    /// A domain (its region starts with a workspace whose abort word kernels watch), not an
    /// L3↔L2 region (`crate::channel`).
    pub(crate) abortable: bool,
}

/// Everything under the engine lock.
pub(crate) struct State {
    /// Runs in flight, the head (dispatching) run first.
    pub(crate) runs: VecDeque<Run>,
    /// One per lane.
    pub(crate) lanes: Vec<LaneSlot>,
    /// Live child allocations (and comm windows) by (chip, device address).
    pub(crate) children: HashMap<(usize, u64), ChildRec>,
    /// Live comm domains by id, until their run is over.
    pub(crate) domains: HashMap<u64, DomainRec>,
    /// The next comm domain's id.
    pub(crate) next_domain: u64,
    /// The next child allocation's or window's generation (from 1).
    pub(crate) next_generation: u64,
    /// The next run's id.
    pub(crate) next_run: u64,
    /// `close()` has begun: no new runs.
    pub(crate) closing: bool,
}

impl State {
    /// True when run `id` is the head run.
    pub(crate) fn is_head(&self, id: u64) -> bool {
        self.runs.front().is_some_and(|r| r.id == id)
    }
}

/// What a running worker shares between the caller's threads, the lanes and the
/// orchestrators.
pub(crate) struct Engine {
    /// The worker's process-unique id.
    pub(crate) uid: u64,
    /// The one engine lock.
    pub(crate) state: Mutex<State>,
    /// Notified when a run ends or `close` begins (pipeline places, close).
    pub(crate) changed: Condvar,
    /// Held while an orchestration function runs: orchestrations are serialized.
    pub(crate) orchestrating: Mutex<()>,
    /// The lanes' channels.
    pub(crate) lanes: Vec<Sender<WorkItem>>,
    /// The heaps of `orch.alloc`.
    pub(crate) ring: HeapRing,
    /// The callables.
    pub(crate) registry: Arc<Registry>,
    /// Chips (lanes `0..chips`).
    pub(crate) chips: usize,
    /// Sub workers (lanes `chips..`).
    pub(crate) subs: usize,
    /// Chips run in child processes.
    pub(crate) chip_processes: bool,
    /// Sub workers run in child processes.
    pub(crate) sub_processes: bool,
    /// The next-level workers are children a binding made (level 4 and above), not chips.
    pub(crate) children: bool,
    /// Sub task members ended so far (`ChildStart::sub_ends`).
    pub(crate) sub_ends: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Engine {
    /// What messages call a next-level worker: `chip`, or `child worker` at level 4 and
    /// above.
    pub(crate) fn next_kind(&self) -> &'static str {
        if self.children {
            "child worker"
        } else {
            "chip"
        }
    }

    /// Runs a control call on `lane` and waits for its answer.
    ///
    /// # Errors
    /// [`WorkerError::EndpointFailure`] when the endpoint is dead, the endpoint's own error,
    /// [`WorkerError::Closed`] when the lane has stopped.
    pub(crate) fn control(&self, lane: usize, op: ControlOp) -> Result<ControlReply, WorkerError> {
        self.control_checked(lane, op, &mut || Ok(()))
    }

    /// [`control`](Engine::control), calling `check` every [`CHECK_SLICE`] while the answer
    /// is awaited (the call may wait behind a long task of the lane); an `Err` from `check`
    /// ends the wait with it (the call stays queued on the lane).
    ///
    /// # Errors
    /// As [`control`](Engine::control), and `check`'s; [`WorkerError::InvalidState`] from a
    /// task of this worker (the call would wait behind that task).
    pub(crate) fn control_checked(
        &self,
        lane: usize,
        op: ControlOp,
        check: &mut dyn FnMut() -> Result<(), WorkerError>,
    ) -> Result<ControlReply, WorkerError> {
        if crate::lane::in_lane_of(self.uid) {
            let what = match op {
                ControlOp::Register(..) => "Worker::register",
                ControlOp::Unregister(_) => "Worker::unregister",
                ControlOp::Malloc(_) => "alloc_child_tensor",
                ControlOp::Free(_) => "free_child_tensor",
                ControlOp::MapWindow(_) | ControlOp::UnmapWindow(_) => "orch.allocate_domain",
            };
            return Err(crate::lane::from_a_task(what));
        }
        {
            let st = self.state.lock();
            let slot = &st.lanes[lane];
            if let Some(report) = &slot.dead {
                return Err(WorkerError::EndpointFailure {
                    endpoint: slot.describe.clone(),
                    report: report.clone(),
                });
            }
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.lanes[lane]
            .send(WorkItem::Control { op, reply: tx })
            .map_err(|_| WorkerError::Closed)?;
        loop {
            match rx.recv_timeout(CHECK_SLICE) {
                Ok(answer) => return answer,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => check()?,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Err(WorkerError::Closed)
                }
            }
        }
    }

    /// Sends a control call to `lane` without waiting (its answer is dropped).
    pub(crate) fn control_detached(&self, lane: usize, op: ControlOp) {
        let (tx, _rx) = crossbeam_channel::bounded(1);
        let _ = self.lanes[lane].send(WorkItem::Control { op, reply: tx });
    }

    /// The bookkeeping of tasks `ids` of `run` that are over (COMPLETED or FAILED): a
    /// completed task's accesses leave the tensor map, a failed one keeps its writes there
    /// (later consumers are poisoned by them); the memory each named is released, and
    /// reclaimed when nothing else holds it.
    pub(crate) fn tasks_over(
        &self,
        run: &mut Run,
        children: &mut HashMap<(usize, u64), ChildRec>,
        ids: &[TaskId],
    ) {
        for &id in ids {
            let task = run.graph.task_mut(id);
            let completed = task.state == TaskState::Completed;
            let spaces = std::mem::take(&mut task.spaces);
            let uses = std::mem::take(&mut task.uses);
            run.map.retire(id, &spaces, !completed);
            for u in uses {
                match u {
                    Use::Heap(key) => {
                        let alloc = run.allocs.get_mut(&key).expect("a named allocation");
                        alloc.users -= 1;
                        self.maybe_reclaim_heap(alloc);
                    }
                    Use::Child(w, addr) => {
                        let rec = children.get_mut(&(w, addr)).expect("a named allocation");
                        rec.users -= 1;
                        if rec.released && rec.users == 0 && !rec.window {
                            children.remove(&(w, addr));
                            self.free_child(w, addr);
                        }
                    }
                }
            }
        }
    }

    /// Gives a heap allocation back to its heap once released and unused.
    pub(crate) fn maybe_reclaim_heap(&self, alloc: &mut crate::run::HeapAlloc) {
        if alloc.released && alloc.users == 0 && !alloc.reclaimed {
            alloc.reclaimed = true;
            self.ring.free(alloc.block.heap(), alloc.block.offset());
        }
    }

    /// Frees child allocation `addr` of chip `w` through its lane, not waiting.
    pub(crate) fn free_child(&self, w: usize, addr: u64) {
        self.control_detached(
            w,
            ControlOp::Free(simpler_device::DevicePtr::from_raw(addr)),
        );
    }
}
