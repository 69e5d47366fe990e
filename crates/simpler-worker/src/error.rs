//! [`WorkerError`]: every failure of the level-3 engine, typed, each naming what was wrong
//! (the argument, the worker, the task, the endpoint). Cloneable, so a run's error is
//! answered by every wait on its handle.

use simpler_host::HostError;

/// A failure of a [`Worker`](crate::Worker) call, an orchestration call or a run.
#[derive(Clone, Debug, thiserror::Error)]
pub enum WorkerError {
    /// An argument is wrong; `arg` names it.
    #[error("argument `{arg}`: {reason}")]
    InvalidArgument {
        /// The argument (`worker`, `workers`, `args_list`, `tensor 2`, ...).
        arg: String,
        /// What is wrong and, where there is one, the fix.
        reason: String,
    },
    /// A worker id that names no chip or sub worker.
    #[error("worker {id}: there is no such {kind} (this worker has {count})")]
    UnknownWorker {
        /// The id given.
        id: i64,
        /// `chip`, `child worker` (level 4 and above) or `sub worker`.
        kind: &'static str,
        /// How many there are.
        count: usize,
    },
    /// A callable handle this worker did not issue, or one unregistered since.
    #[error("unknown callable handle {0}: register it with this worker first")]
    UnknownCallable(String),
    /// The worker's configuration is invalid.
    #[error("invalid worker configuration: {0}")]
    InvalidConfig(String),
    /// The call is not allowed in the worker's (or the orchestrator's) current state.
    #[error("{0}")]
    InvalidState(String),
    /// The worker is closed.
    #[error("the worker is closed")]
    Closed,
    /// A child process or endpoint could not be started; nothing is left running.
    #[error("{endpoint} failed to start: {reason}")]
    Startup {
        /// The endpoint (`chip 1 (device 1)`, `sub worker 0`).
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// An endpoint died (a chip child crashed, was killed, lost its mailbox); its in-flight
    /// task failed and later tasks to it are refused. `report` is the child's crash report
    /// (how it ended, the end of its stderr; the endpoint is not named again there). The
    /// message ends with the recovery: a new worker.
    #[error(
        "ENDPOINT_FAILURE: {endpoint} died: {report}\n  tasks to it are refused; close this \
         Worker and create a new one to use it again"
    )]
    EndpointFailure {
        /// The endpoint.
        endpoint: String,
        /// What is known of the death: exit status or signal, the child's last output.
        report: String,
    },
    /// A next-level child died during the task and was re-created as a new generation: the
    /// task failed (it is never re-executed) and the child takes later work
    /// (`docs/l4-worker.md` §4).
    #[error(
        "ENDPOINT_FAILURE: {endpoint} died: {report}\n  it was restarted as generation \
         {generation}; the task was not re-executed"
    )]
    EndpointRestarted {
        /// The endpoint.
        endpoint: String,
        /// What is known of the death.
        report: String,
        /// The child's generation now (the first is 1).
        generation: u64,
    },
    /// A task ran past its endpoint's task timeout (a remote child's
    /// `remote_task_timeout_s`); the endpoint stopped it.
    #[error("TASK_TIMEOUT: {endpoint} did not finish the task within {after:?}: {report}")]
    TaskTimeout {
        /// The endpoint.
        endpoint: String,
        /// The timeout.
        after: std::time::Duration,
        /// What the endpoint did about it.
        report: String,
    },
    /// A task failed: `task` names it, `worker` where it ran, `cause` why.
    #[error("task {task} on {worker} failed: {cause}")]
    TaskFailed {
        /// The task (`#3 gemm_block`).
        task: String,
        /// The endpoint it ran on.
        worker: String,
        /// The failure (a chip run's error, a Python traceback, an endpoint death).
        cause: Box<WorkerError>,
    },
    /// The orchestration function failed (returned an error, or raised in Python).
    #[error("the orchestration failed: {0}")]
    Orchestration(String),
    /// A sub callable failed; `message` is its error text (a Python traceback).
    #[error("{message}")]
    SubFailed {
        /// The error text.
        message: String,
    },
    /// The heap ring could not serve an allocation in time (nothing was reclaimed).
    #[error("heap ring {ring} cannot fit {nbytes} bytes: {reason}")]
    RingFull {
        /// The ring (0..=3).
        ring: usize,
        /// The allocation.
        nbytes: u64,
        /// Why (too big for the heap, or nothing freed within the deadlock timeout).
        reason: String,
    },
    /// A bounded wait (for a run, a queue's next item or a counter) ended before what it
    /// waited for came; that goes on.
    #[error("timed out after {0:?}; what the wait was for (a run, a queue's next item, a counter) goes on")]
    WaitTimeout(std::time::Duration),
    /// A chip's host error (registration, device memory, a run).
    #[error(transparent)]
    Host(#[from] HostError),
}

impl WorkerError {
    /// A short stable name of the error kind (`"ENDPOINT_FAILURE"`, `"TASK_FAILED"`, ...),
    /// for bindings that map kinds to exception classes.
    pub fn kind(&self) -> &'static str {
        match self {
            WorkerError::InvalidArgument { .. } => "INVALID_ARGUMENT",
            WorkerError::UnknownWorker { .. } => "UNKNOWN_WORKER",
            WorkerError::UnknownCallable(_) => "UNKNOWN_CALLABLE",
            WorkerError::InvalidConfig(_) => "INVALID_CONFIG",
            WorkerError::InvalidState(_) => "INVALID_STATE",
            WorkerError::Closed => "CLOSED",
            WorkerError::Startup { .. } => "STARTUP_FAILED",
            WorkerError::EndpointFailure { .. } | WorkerError::EndpointRestarted { .. } => {
                "ENDPOINT_FAILURE"
            }
            WorkerError::TaskTimeout { .. } => "TASK_TIMEOUT",
            WorkerError::TaskFailed { .. } => "TASK_FAILED",
            WorkerError::Orchestration(_) => "ORCHESTRATION_FAILED",
            WorkerError::SubFailed { .. } => "SUB_FAILED",
            WorkerError::RingFull { .. } => "RING_FULL",
            WorkerError::WaitTimeout(_) => "WAIT_TIMEOUT",
            WorkerError::Host(_) => "HOST",
        }
    }

    /// The innermost cause of a [`TaskFailed`](WorkerError::TaskFailed) chain (itself
    /// otherwise).
    pub fn root_cause(&self) -> &WorkerError {
        match self {
            WorkerError::TaskFailed { cause, .. } => cause.root_cause(),
            other => other,
        }
    }
}
