//! What the lane keeps per run: the [`RunState`] (the run's request and its [`Stage`], which
//! carries exactly the data valid where the run stands), and the [`RunCell`] the lane shares
//! with the run's handle (its epoch, dispatch id and, once decided, its terminal state).
//!
//! The queue's phase orders a run (`queue`); the stage holds what the run owns in that
//! phase. A run that ended before launching is [`Stage::Failed`] while it waits to reach the
//! front: it holds no slot and no staging. This module holds data only: what each stage
//! does on the device is `prepare`'s, `launch`'s and `finalize`'s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use simpler_device::StreamId;

use crate::args::OwnedArg;
use crate::caller_stream::CallerOrder;
use crate::config::RunPlan;
use crate::identity::RunIdentity;
use crate::join::JoinRefs;
use crate::launch::LaunchGrade;
use crate::registry::Registered;
use crate::trace::RunCapture;
use crate::HostError;

use super::alias::HostRange;
use super::memory::DeviceRange;
use super::staging::StagedArgs;
use super::RunReport;

/// The terminal state of a run, once decided.
struct Terminal {
    result: Result<RunReport, HostError>,
    args: Option<Vec<OwnedArg>>,
}

/// State shared by a run's handle and the lane: identity, submission time and, once the run
/// is terminal, its outcome and arguments.
pub(crate) struct RunCell {
    /// The run's epoch (process-unique, non-zero).
    pub(crate) epoch: u64,
    /// The run's place in its lane's FIFO.
    pub(crate) dispatch_id: u64,
    /// When the run was submitted (the start of its `total_time`).
    pub(crate) submitted: Instant,
    done: AtomicBool,
    terminal: Mutex<Option<Terminal>>,
}

impl RunCell {
    /// A cell for the run `epoch` at `dispatch_id`, submitted now.
    pub(crate) fn new(epoch: u64, dispatch_id: u64) -> RunCell {
        RunCell {
            epoch,
            dispatch_id,
            submitted: Instant::now(),
            done: AtomicBool::new(false),
            terminal: Mutex::new(None),
        }
    }

    /// Ends the run (once) with its outcome and the arguments it hands back.
    pub(crate) fn finish(&self, result: Result<RunReport, HostError>, args: Vec<OwnedArg>) {
        let mut t = self.terminal.lock();
        debug_assert!(t.is_none(), "a run ends once");
        *t = Some(Terminal {
            result,
            args: Some(args),
        });
        self.done.store(true, Ordering::Release);
    }

    /// Whether the run is terminal.
    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The run's outcome.
    ///
    /// # Panics
    /// If the run is not terminal (callers check [`is_done`](RunCell::is_done) first).
    pub(crate) fn outcome(&self) -> Result<RunReport, HostError> {
        self.terminal
            .lock()
            .as_ref()
            .expect("a done run has a terminal state")
            .result
            .clone()
    }

    /// Takes the arguments handed back (empty once taken, or when the lane kept them).
    pub(crate) fn take_args(&self) -> Vec<OwnedArg> {
        self.terminal
            .lock()
            .as_mut()
            .and_then(|t| t.args.take())
            .unwrap_or_default()
    }
}

/// What a run asked for: fixed at admission.
pub(crate) struct RunRequest {
    /// Shared with the run's handle.
    pub(crate) cell: Arc<RunCell>,
    /// The registered callable (name, signature, code addresses).
    pub(crate) callable: Arc<Registered>,
    /// Resolved per-run options (threads, ring sizing).
    pub(crate) plan: RunPlan,
    /// The run's arguments, signature order.
    pub(crate) args: Vec<OwnedArg>,
    /// The caller's stream to launch on (a borrowed caller launch).
    pub(crate) caller: Option<StreamId>,
    /// The host memory the run reads and writes (alias ordering).
    pub(crate) host_ranges: Vec<HostRange>,
    /// The device memory its in-place device tensors cover (refused frees).
    pub(crate) device_ranges: Vec<DeviceRange>,
    /// What the run records (`docs/tracing.md`); off unless the run's level says otherwise.
    pub(crate) capture: RunCapture,
    /// How the run gets its graph (`host_build_graph`: built here, or a recording).
    pub(crate) graph: super::graph::GraphPlan,
    /// The run's graph image once prepared, and what building it cost.
    pub(crate) graph_image: Option<(Arc<super::graph::GraphImage>, super::graph::GraphReport)>,
}

/// How a launched run's launch went.
#[derive(Clone, Debug)]
pub(crate) enum LaunchState {
    /// Both submit callbacks succeeded.
    Complete,
    /// Something reached the device and the launch did not complete: `error` is the run's
    /// outcome whatever the drain finds.
    Partial(HostError),
}

impl LaunchState {
    /// The public grade.
    pub(crate) fn grade(&self) -> LaunchGrade {
        match self {
            LaunchState::Complete => LaunchGrade::Complete,
            LaunchState::Partial(_) => LaunchGrade::Partial,
        }
    }

    /// The launch error of a Partial launch.
    pub(crate) fn error(&self) -> Option<&HostError> {
        match self {
            LaunchState::Complete => None,
            LaunchState::Partial(e) => Some(e),
        }
    }
}

/// A run staged into a slot, not launched.
pub(crate) struct PreparedRun {
    pub(crate) identity: RunIdentity,
    pub(crate) staging: StagedArgs,
}

/// A run on the device (fully or partially launched).
pub(crate) struct LaunchedRun {
    pub(crate) identity: RunIdentity,
    pub(crate) staging: StagedArgs,
    pub(crate) launch: LaunchState,
    /// From the launch of the first kernel (the start of its `device_time`).
    pub(crate) started: Instant,
    /// References this run holds on its predecessor's fence.
    pub(crate) join: Option<JoinRefs>,
    /// The caller ordering of a run launched on a caller's stream.
    pub(crate) order: Option<CallerOrder>,
    /// When the drain first found the run's own failure published while a boundary was
    /// still pending (the grace before the run is given up starts then).
    pub(crate) failure_seen: Option<Instant>,
}

/// A run that ended before launching (a failed preparation, a NotStarted launch).
pub(crate) struct FailedRun {
    /// Its outcome.
    pub(crate) error: HostError,
    /// The preparation's rollback could not be proven: the lane keeps the arguments.
    pub(crate) args_retained: bool,
}

/// Where a run stands, with the data valid there.
// At most two runs are held (in place, in the queue): boxing the launched part would only
// add an allocation per run.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Stage {
    /// Admitted; no slot yet.
    Queued,
    /// Staged into a slot.
    Prepared(PreparedRun),
    /// On the device.
    Launched(LaunchedRun),
    /// Ended before launching; leaves the lane when it reaches the front.
    Failed(FailedRun),
}

/// What the lane keeps per run.
pub(crate) struct RunState {
    pub(crate) request: RunRequest,
    pub(crate) stage: Stage,
}

impl RunState {
    /// A run just admitted.
    pub(crate) fn queued(request: RunRequest) -> RunState {
        RunState {
            request,
            stage: Stage::Queued,
        }
    }

    /// The launched part, if the run is on the device.
    pub(crate) fn launched(&self) -> Option<&LaunchedRun> {
        match &self.stage {
            Stage::Launched(l) => Some(l),
            _ => None,
        }
    }

    /// The launched part, mutably.
    pub(crate) fn launched_mut(&mut self) -> Option<&mut LaunchedRun> {
        match &mut self.stage {
            Stage::Launched(l) => Some(l),
            _ => None,
        }
    }

    /// The run's identity once it holds (or held) a slot.
    pub(crate) fn identity(&self) -> Option<RunIdentity> {
        match &self.stage {
            Stage::Prepared(p) => Some(p.identity),
            Stage::Launched(l) => Some(l.identity),
            Stage::Queued | Stage::Failed(_) => None,
        }
    }
}
