//! A run's task graph: one slot per task (its target, its work, its state, the producers
//! it still waits for and the consumers that wait for it) and the rules that move slots
//! between states (`docs/l3-worker.md` §2).
//!
//! States: PENDING (waiting for producers) → READY → RUNNING → COMPLETED or FAILED. A
//! task whose producer fails is poisoned: FAILED without ever running, and so are its own
//! consumers, transitively. The graph knows nothing of lanes, the tensor map or memory:
//! the engine asks it what became ready or failed and acts on that.

use simpler_device::DevicePtr;
use simpler_host::CallConfig;

use crate::endpoint::CallableKey;
use crate::tensor::{TaskArgs, Tensor};
use crate::tensormap::{AddressSpace, TaskId};
use crate::WorkerError;

/// Where a task runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// One chip, by worker id.
    Chip(usize),
    /// Several chips at once (all members start together).
    ChipGroup(Vec<usize>),
    /// Any one idle sub worker.
    Sub,
    /// This many distinct sub workers at once.
    SubGroup(usize),
}

impl Target {
    /// Lanes (members) the task occupies when it runs.
    pub(crate) fn members(&self) -> usize {
        match self {
            Target::Chip(_) | Target::Sub => 1,
            Target::ChipGroup(w) => w.len(),
            Target::SubGroup(n) => *n,
        }
    }
}

/// What a task does when it runs.
#[derive(Clone, Debug)]
pub(crate) enum Work {
    /// Runs callable `key`; member `i` gets `args[i]`.
    Call {
        /// The callable.
        key: CallableKey,
        /// Per-run options (chip tasks).
        config: CallConfig,
        /// One argument list per member.
        args: Vec<TaskArgs>,
    },
    /// Copies the host tensor `src` to device memory at `dst`.
    CopyTo {
        /// Device address (the child tensor's first byte).
        dst: DevicePtr,
        /// A contiguous host tensor.
        src: Tensor,
    },
    /// Copies device memory at `src` into the host tensor `dst`.
    CopyFrom {
        /// A contiguous host tensor.
        dst: Tensor,
        /// Device address.
        src: DevicePtr,
    },
}

/// A task's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TaskState {
    /// Waiting for producers.
    Pending,
    /// In its target's ready queue.
    Ready,
    /// Dispatched to lanes.
    Running,
    /// Over, successfully.
    Completed,
    /// Over, failed, poisoned or cancelled.
    Failed,
}

impl TaskState {
    /// True once the task is over.
    pub(crate) fn terminal(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed)
    }
}

/// Memory a task names whose release waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Use {
    /// A heap-ring allocation of the run, by its memory's identity.
    Heap(usize),
    /// A child allocation: (chip, device address).
    Child(usize, u64),
}

/// One task slot.
#[derive(Debug)]
pub(crate) struct Task {
    /// `#3 gemm_block`.
    pub(crate) name: String,
    /// Where it runs.
    pub(crate) target: Target,
    /// What it does; taken when it is dispatched.
    pub(crate) work: Option<Work>,
    /// Its state.
    pub(crate) state: TaskState,
    /// Producers not yet completed.
    fanin: usize,
    /// Consumers.
    fanout: Vec<TaskId>,
    /// Members still running (while RUNNING).
    pub(crate) members_left: usize,
    /// The first member failure.
    pub(crate) error: Option<WorkerError>,
    /// Address spaces in which it recorded accesses.
    pub(crate) spaces: Vec<AddressSpace>,
    /// Memory whose release waits for it.
    pub(crate) uses: Vec<Use>,
}

impl Task {
    /// A new slot (not yet in a graph).
    pub(crate) fn new(
        name: String,
        target: Target,
        work: Work,
        spaces: Vec<AddressSpace>,
        uses: Vec<Use>,
    ) -> Task {
        Task {
            name,
            target,
            work: Some(work),
            state: TaskState::Pending,
            fanin: 0,
            fanout: Vec::new(),
            members_left: 0,
            error: None,
            spaces,
            uses,
        }
    }
}

/// How a task entered the graph.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admitted {
    /// No live producer: READY.
    Ready,
    /// Waits for producers: PENDING.
    Pending,
    /// A producer had failed: the task is FAILED at once.
    Poisoned,
}

/// The task slots of one run.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    tasks: Vec<Task>,
    edges: usize,
    terminal: usize,
}

impl Graph {
    /// Tasks submitted.
    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Dependency edges made (one per distinct live producer of each task).
    pub(crate) fn edges(&self) -> usize {
        self.edges
    }

    /// True when every task is over.
    pub(crate) fn all_terminal(&self) -> bool {
        self.terminal == self.tasks.len()
    }

    /// The id the next task gets.
    pub(crate) fn next_id(&self) -> TaskId {
        TaskId(self.tasks.len() as u32)
    }

    /// The slot of `id`.
    pub(crate) fn task(&self, id: TaskId) -> &Task {
        &self.tasks[id.0 as usize]
    }

    /// The slot of `id`, mutably.
    pub(crate) fn task_mut(&mut self, id: TaskId) -> &mut Task {
        &mut self.tasks[id.0 as usize]
    }

    /// Adds `task` waiting for `producers` (any order, repeats allowed; completed ones are
    /// ignored). A task with a failed producer is poisoned at once.
    pub(crate) fn add(
        &mut self,
        mut task: Task,
        producers: &mut Vec<TaskId>,
    ) -> (TaskId, Admitted) {
        let id = self.next_id();
        producers.sort_unstable();
        producers.dedup();
        let mut poisoned_by = None;
        for p in producers.iter() {
            let producer = &mut self.tasks[p.0 as usize];
            match producer.state {
                TaskState::Completed => {}
                TaskState::Failed => {
                    poisoned_by.get_or_insert(*p);
                }
                _ => {
                    producer.fanout.push(id);
                    task.fanin += 1;
                    self.edges += 1;
                }
            }
        }
        let admitted = if let Some(p) = poisoned_by {
            task.state = TaskState::Failed;
            task.error = Some(poison(&task.name, &self.tasks[p.0 as usize].name));
            self.terminal += 1;
            Admitted::Poisoned
        } else if task.fanin == 0 {
            task.state = TaskState::Ready;
            Admitted::Ready
        } else {
            Admitted::Pending
        };
        self.tasks.push(task);
        (id, admitted)
    }

    /// Marks READY task `id` RUNNING with `members` members.
    pub(crate) fn start(&mut self, id: TaskId) {
        let t = &mut self.tasks[id.0 as usize];
        assert_eq!(t.state, TaskState::Ready, "{} dispatched twice", t.name);
        t.state = TaskState::Running;
        t.members_left = t.target.members();
    }

    /// Marks `id` COMPLETED; returns the consumers that became READY.
    pub(crate) fn complete(&mut self, id: TaskId) -> Vec<TaskId> {
        let t = &mut self.tasks[id.0 as usize];
        assert!(!t.state.terminal(), "{} completed twice", t.name);
        t.state = TaskState::Completed;
        self.terminal += 1;
        let fanout = std::mem::take(&mut t.fanout);
        let mut ready = Vec::new();
        for c in fanout {
            let consumer = &mut self.tasks[c.0 as usize];
            if consumer.state == TaskState::Pending {
                consumer.fanin -= 1;
                if consumer.fanin == 0 {
                    consumer.state = TaskState::Ready;
                    ready.push(c);
                }
            }
        }
        ready
    }

    /// Marks `id` FAILED with `error` and poisons its consumers transitively; returns every
    /// task that became FAILED (`id` first).
    pub(crate) fn fail(&mut self, id: TaskId, error: WorkerError) -> Vec<TaskId> {
        let mut failed = Vec::new();
        let t = &mut self.tasks[id.0 as usize];
        if t.state.terminal() {
            return failed;
        }
        t.state = TaskState::Failed;
        t.error = Some(error);
        self.terminal += 1;
        failed.push(id);
        let mut next = 0;
        while next < failed.len() {
            let producer = failed[next];
            next += 1;
            let fanout = std::mem::take(&mut self.tasks[producer.0 as usize].fanout);
            for c in fanout {
                let name = self.tasks[producer.0 as usize].name.clone();
                let consumer = &mut self.tasks[c.0 as usize];
                if !consumer.state.terminal() && consumer.state != TaskState::Running {
                    consumer.state = TaskState::Failed;
                    consumer.error = Some(poison(&consumer.name, &name));
                    self.terminal += 1;
                    failed.push(c);
                }
            }
        }
        failed
    }

    /// Fails every task not yet dispatched (PENDING or READY) as cancelled; returns them.
    pub(crate) fn cancel_undispatched(&mut self, why: &str) -> Vec<TaskId> {
        let mut cancelled = Vec::new();
        for (i, t) in self.tasks.iter_mut().enumerate() {
            if matches!(t.state, TaskState::Pending | TaskState::Ready) {
                t.state = TaskState::Failed;
                t.error = Some(WorkerError::InvalidState(format!(
                    "task {} was cancelled: {why}",
                    t.name
                )));
                t.fanout.clear();
                self.terminal += 1;
                cancelled.push(TaskId(i as u32));
            }
        }
        cancelled
    }
}

fn poison(task: &str, producer: &str) -> WorkerError {
    WorkerError::InvalidState(format!(
        "task {task} was not run: its producer {producer} failed"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(i: u32) -> Task {
        Task::new(
            format!("#{i} t"),
            Target::Sub,
            Work::Call {
                key: 0,
                config: CallConfig::default(),
                args: vec![TaskArgs::new()],
            },
            Vec::new(),
            Vec::new(),
        )
    }

    #[test]
    fn consumers_become_ready_when_every_producer_completed() {
        let mut g = Graph::default();
        let (a, s) = g.add(task(0), &mut vec![]);
        assert_eq!(s, Admitted::Ready);
        let (b, _) = g.add(task(1), &mut vec![]);
        let (c, s) = g.add(task(2), &mut vec![b, a, a]);
        assert_eq!(s, Admitted::Pending);
        assert_eq!(g.edges(), 2, "repeated producers make one edge");
        g.start(a);
        assert!(g.complete(a).is_empty());
        g.start(b);
        assert_eq!(g.complete(b), [c]);
        let (_, s) = g.add(task(3), &mut vec![a]);
        assert_eq!(s, Admitted::Ready, "a completed producer is no edge");
        assert_eq!(g.edges(), 2);
        assert!(!g.all_terminal());
    }

    #[test]
    fn failure_poisons_consumers_transitively_and_later_ones_at_once() {
        let mut g = Graph::default();
        let (a, _) = g.add(task(0), &mut vec![]);
        let (b, _) = g.add(task(1), &mut vec![a]);
        let (c, _) = g.add(task(2), &mut vec![b]);
        let (d, _) = g.add(task(3), &mut vec![]);
        g.start(a);
        let failed = g.fail(a, WorkerError::InvalidState("boom".into()));
        assert_eq!(failed, [a, b, c]);
        assert!(g
            .task(c)
            .error
            .as_ref()
            .unwrap()
            .to_string()
            .contains("producer #1 t"));
        let (e, s) = g.add(task(4), &mut vec![a]);
        assert_eq!(s, Admitted::Poisoned);
        assert_eq!(g.task(e).state, TaskState::Failed);
        assert_eq!(g.cancel_undispatched("stop"), [d]);
        assert!(g.all_terminal());
    }
}
