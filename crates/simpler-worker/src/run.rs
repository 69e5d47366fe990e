//! Runs: what a caller holds ([`RunHandle`], answered with a [`RunReport`] or the run's
//! first error) and what the engine keeps per run in flight ([`Run`]: its graph, tensor
//! map, ready queues, scopes and heap allocations) (`docs/l3-worker.md` §2, §6).
//!
//! A run is in flight from the moment `Worker::submit` reserves its pipeline place until it
//! is terminal: its submission is closed and every task is over. Only the run at the head
//! of the queue dispatches. This module holds the data; the orchestrator fills it and the
//! scheduler drives it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::graph::{Graph, Target};
use crate::ring::HeapBlock;
use crate::tensormap::{TaskId, TensorMap};
use crate::WorkerError;

/// Runs in flight at once (the pipeline places).
pub(crate) const PIPELINE_DEPTH: usize = 2;

/// What a successful run reports.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// The run's id (per worker, from 1, in submission order).
    pub run: u64,
    /// Tasks the orchestration submitted.
    pub tasks: usize,
    /// Dependency edges the tensor map inferred (one per distinct live producer of each
    /// task).
    pub edges: usize,
    /// From `Worker::submit` to the run's end.
    pub total_time: Duration,
    /// The wall time its chip tasks' callables ran, summed over tasks and group members:
    /// each measured on its lane from the later of its batch's start and the previous run's
    /// end to its own end, so a pipelined batch counts its wall time once (copies not
    /// counted). For a chip in a child process it includes the request's trip through the
    /// mailbox.
    pub chip_time: Duration,
    /// Tasks the orchestrations of its chip tasks' runs submitted
    /// (`simpler_host::RunReport::tasks`), summed over tasks and group members: the chips'
    /// own task count, beside [`tasks`](RunReport::tasks), the engine's.
    pub chip_tasks: u64,
    /// The merged trace of a run whose [`RunConfig::trace_level`](crate::RunConfig) is not
    /// Off: the "L3 host" process, then one process per chip (`docs/tracing.md`).
    pub trace: Option<Box<simpler_host::trace_model::Trace>>,
}

/// The outcome of one run, shared by the engine and every handle.
pub(crate) struct RunShared {
    id: u64,
    /// The worker's uid (a wait from one of its tasks would never end).
    worker: u64,
    outcome: Mutex<Option<Result<RunReport, WorkerError>>>,
    over: Condvar,
}

impl RunShared {
    /// A run not yet over.
    pub(crate) fn new(id: u64, worker: u64) -> Arc<RunShared> {
        Arc::new(RunShared {
            id,
            worker,
            outcome: Mutex::new(None),
            over: Condvar::new(),
        })
    }

    /// Sets the outcome (once) and wakes every waiter.
    pub(crate) fn finish(&self, outcome: Result<RunReport, WorkerError>) {
        let mut slot = self.outcome.lock();
        assert!(slot.is_none(), "run {} finished twice", self.id);
        *slot = Some(outcome);
        self.over.notify_all();
    }
}

/// A submitted run. `Send + Sync`; any thread may wait on it, any number of times.
#[derive(Clone)]
pub struct RunHandle {
    shared: Arc<RunShared>,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("id", &self.shared.id)
            .field("done", &self.done())
            .finish()
    }
}

impl RunHandle {
    pub(crate) fn new(shared: Arc<RunShared>) -> RunHandle {
        RunHandle { shared }
    }

    /// Waits until the run is over, at most `timeout` (`None`: as long as it takes), and
    /// returns its outcome. Waiting again answers the same.
    ///
    /// # Errors
    /// [`WorkerError::WaitTimeout`] when the run is not over in time (it goes on), or the
    /// run's first error: [`WorkerError::TaskFailed`] naming the task (`#3 <callable>`), the
    /// worker and the cause, or [`WorkerError::Orchestration`]. [`WorkerError::InvalidState`]
    /// for a wait on a run not over from a task of its worker (every run in flight ends
    /// after that task).
    pub fn wait(&self, timeout: Option<Duration>) -> Result<RunReport, WorkerError> {
        // A timeout too long to be an instant waits as long as it takes.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut slot = self.shared.outcome.lock();
        loop {
            if let Some(outcome) = slot.as_ref() {
                return outcome.clone();
            }
            if crate::lane::in_lane_of(self.shared.worker) {
                return Err(crate::lane::from_a_task("RunHandle::wait"));
            }
            match deadline {
                None => self.shared.over.wait(&mut slot),
                Some(d) => {
                    if self.shared.over.wait_until(&mut slot, d).timed_out() && slot.is_none() {
                        return Err(WorkerError::WaitTimeout(timeout.unwrap_or_default()));
                    }
                }
            }
        }
    }

    /// True once the run is over (never blocks).
    pub fn done(&self) -> bool {
        self.shared.outcome.lock().is_some()
    }

    /// Waits for the run and returns its outcome.
    ///
    /// # Errors
    /// As [`wait`](RunHandle::wait) without a timeout.
    pub fn result(self) -> Result<RunReport, WorkerError> {
        self.wait(None)
    }

    /// The run's id.
    pub fn id(&self) -> u64 {
        self.shared.id
    }
}

/// A heap-ring allocation of a run.
pub(crate) struct HeapAlloc {
    /// The memory (kept alive while the run is).
    pub(crate) block: Arc<HeapBlock>,
    /// Tasks naming it that are not over.
    pub(crate) users: usize,
    /// Its scope ended, or `orch.free` released it.
    pub(crate) released: bool,
    /// Given back to the ring.
    pub(crate) reclaimed: bool,
}

/// The engine's state of one run in flight.
pub(crate) struct Run {
    /// The run's id.
    pub(crate) id: u64,
    /// What handles wait on.
    pub(crate) shared: Arc<RunShared>,
    /// When `Worker::submit` was called.
    pub(crate) started: Instant,
    /// Its tasks.
    pub(crate) graph: Graph,
    /// Its live accesses.
    pub(crate) map: TensorMap,
    /// READY single-chip tasks, one FIFO per chip.
    pub(crate) ready_chip: Vec<VecDeque<TaskId>>,
    /// READY chip groups, one FIFO.
    pub(crate) ready_groups: VecDeque<TaskId>,
    /// READY sub tasks and sub groups, one FIFO.
    pub(crate) ready_sub: VecDeque<TaskId>,
    /// Tasks dispatched and not yet over.
    pub(crate) running: usize,
    /// The orchestration has returned: no more tasks.
    pub(crate) closed: bool,
    /// Why the run's undispatched tasks were cancelled (its orchestration failed): single
    /// chip tasks still waiting in a lane's channel are cancelled too when the lane comes
    /// to them (`crate::scheduler::claim`).
    pub(crate) cancelled: Option<String>,
    /// The first error.
    pub(crate) error: Option<WorkerError>,
    /// Open scopes' allocations (by memory identity); `[0]` is the run's own scope.
    pub(crate) scopes: Vec<Vec<usize>>,
    /// The comm domains its orchestration made (`crate::comm`), freed when it is over.
    pub(crate) domains: Vec<u64>,
    /// Heap allocations, by memory identity.
    pub(crate) allocs: HashMap<usize, HeapAlloc>,
    /// The summed wall time of its chip tasks' callable runs so far.
    pub(crate) chip_time: Duration,
    /// The summed task count of its chip tasks' runs so far.
    pub(crate) chip_tasks: u64,
    /// What a traced run collects (`None`: untraced).
    pub(crate) trace: Option<crate::trace::RunCapture>,
}

impl Run {
    /// A run with no tasks, for worker `worker` (its uid) of `chips` chips.
    pub(crate) fn new(id: u64, chips: usize, worker: u64) -> Run {
        Run {
            id,
            shared: RunShared::new(id, worker),
            started: Instant::now(),
            graph: Graph::default(),
            map: TensorMap::default(),
            ready_chip: (0..chips).map(|_| VecDeque::new()).collect(),
            ready_groups: VecDeque::new(),
            ready_sub: VecDeque::new(),
            running: 0,
            closed: false,
            cancelled: None,
            error: None,
            scopes: vec![Vec::new()],
            domains: Vec::new(),
            allocs: HashMap::new(),
            chip_time: Duration::ZERO,
            chip_tasks: 0,
            trace: None,
        }
    }

    /// Puts READY task `id` in its target's queue.
    pub(crate) fn enqueue(&mut self, id: TaskId) {
        match &self.graph.task(id).target {
            Target::Chip(w) => self.ready_chip[*w].push_back(id),
            Target::ChipGroup(_) => self.ready_groups.push_back(id),
            Target::Sub | Target::SubGroup(_) => self.ready_sub.push_back(id),
        }
    }

    /// Records `error` as the run's error unless one came first.
    pub(crate) fn record_error(&mut self, error: &WorkerError) {
        if self.error.is_none() {
            self.error = Some(error.clone());
        }
    }

    /// True when the run is over: closed, and every task is.
    pub(crate) fn terminal(&self) -> bool {
        self.closed && self.running == 0 && self.graph.all_terminal()
    }

    /// The outcome of a terminal run.
    pub(crate) fn outcome(&self) -> Result<RunReport, WorkerError> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(RunReport {
                run: self.id,
                tasks: self.graph.len(),
                edges: self.graph.edges(),
                total_time: self.started.elapsed(),
                chip_time: self.chip_time,
                chip_tasks: self.chip_tasks,
                trace: None,
            }),
        }
    }
}

/// The refusal of `orch.<method>()` once the orchestration function has returned.
pub(crate) fn returned(method: &str) -> WorkerError {
    WorkerError::InvalidState(format!(
        "orch.{method}() is valid only inside its orchestration function; this run's \
         orchestration has returned"
    ))
}

/// Run `id` among `runs` while its orchestration is open (checked under the engine lock,
/// so a clone of the orchestrator racing with the function's return is refused, not
/// admitted into a closed run).
///
/// # Errors
/// [`WorkerError::InvalidState`] naming `orch.<method>()` once the run is closed.
pub(crate) fn open_run<'a>(
    runs: &'a mut VecDeque<Run>,
    id: u64,
    method: &str,
) -> Result<&'a mut Run, WorkerError> {
    runs.iter_mut()
        .find(|r| r.id == id && !r.closed)
        .ok_or_else(|| returned(method))
}
