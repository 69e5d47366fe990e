//! The status codes of the C ABI (`SimplerStatus` in `include/simpler/host.h`, table in
//! `docs/c-abi.md` §7) and the one mapping from [`HostError`] (and, for the collectives
//! domain, [`WorkerError`]) to them. The numbers are
//! stable: a code keeps its number forever and new codes are appended. This module decides
//! codes only; it never formats a message of its own beyond the error's text.

use simpler_host::HostError;
use simpler_worker::WorkerError;

/// A status code: 0 is success, every other value one family of failure.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SimplerStatus {
    /// Success.
    Ok = 0,
    /// An argument of the call is wrong (the text names it).
    InvalidArgument = 1,
    /// Not allowed now: a latched execution mode, a registry mutation with a run
    /// outstanding, all 64 callable slots taken, memory a run uses.
    InvalidState = 2,
    /// No callable under that id.
    UnknownCallable = 3,
    /// `simpler_wait_run` ran out of time; the run goes on.
    Timeout = 4,
    /// The run executed and failed with a runtime code.
    RunFailed = 5,
    /// The device faulted and no run result explains it.
    DeviceFault = 6,
    /// Earlier failures closed admission.
    DeviceUnusable = 7,
    /// The run's evidence decided nothing.
    RunUndecided = 8,
    /// Not launched: an earlier launch awaits its drain.
    LanePoisoned = 9,
    /// A borrowed context used on a thread where its generation is not current
    /// (retryable once it is).
    ExecutionContextRefused = 10,
    /// A handle inherited by a forked child (never restorable).
    ForkedChild = 11,
    /// The context was finalized.
    WorkerClosed = 12,
    /// The entry is closed (kernel-mode launch).
    Unsupported = 13,
    /// A panic inside the library (a bug).
    Internal = 14,
    /// A required pointer argument is NULL.
    NullPointer = 15,
    /// Not a live handle: finalized, destroyed, or never made by this process.
    InvalidHandle = 16,
    /// A configuration field is out of range.
    InvalidConfig = 17,
    /// The bundle, its signature or a code image was refused.
    InvalidCallable = 18,
    /// A device call failed (memory, copies, streams).
    DeviceError = 19,
    /// The run's completion was not proven within the run timeout; the device is unusable.
    RunTimeout = 20,
    /// The run was refused at preparation and rolled back.
    RunPreparationRefused = 21,
    /// The run was detached from a worker dropped without close.
    Detached = 22,
    /// Finalized, but not everything could be freed; finalizing again retries.
    CleanupIncomplete = 23,
}

impl SimplerStatus {
    /// Every status, in number order (the number is the index).
    pub const ALL: [SimplerStatus; 24] = [
        SimplerStatus::Ok,
        SimplerStatus::InvalidArgument,
        SimplerStatus::InvalidState,
        SimplerStatus::UnknownCallable,
        SimplerStatus::Timeout,
        SimplerStatus::RunFailed,
        SimplerStatus::DeviceFault,
        SimplerStatus::DeviceUnusable,
        SimplerStatus::RunUndecided,
        SimplerStatus::LanePoisoned,
        SimplerStatus::ExecutionContextRefused,
        SimplerStatus::ForkedChild,
        SimplerStatus::WorkerClosed,
        SimplerStatus::Unsupported,
        SimplerStatus::Internal,
        SimplerStatus::NullPointer,
        SimplerStatus::InvalidHandle,
        SimplerStatus::InvalidConfig,
        SimplerStatus::InvalidCallable,
        SimplerStatus::DeviceError,
        SimplerStatus::RunTimeout,
        SimplerStatus::RunPreparationRefused,
        SimplerStatus::Detached,
        SimplerStatus::CleanupIncomplete,
    ];

    /// The status of number `code`, if there is one.
    pub fn from_code(code: i32) -> Option<SimplerStatus> {
        usize::try_from(code)
            .ok()
            .and_then(|i| SimplerStatus::ALL.get(i).copied())
    }

    /// The header's name, NUL-terminated (`SIMPLER_STATUS_OK\0`, ...).
    pub fn name_nul(self) -> &'static str {
        match self {
            SimplerStatus::Ok => "SIMPLER_STATUS_OK\0",
            SimplerStatus::InvalidArgument => "SIMPLER_STATUS_INVALID_ARGUMENT\0",
            SimplerStatus::InvalidState => "SIMPLER_STATUS_INVALID_STATE\0",
            SimplerStatus::UnknownCallable => "SIMPLER_STATUS_UNKNOWN_CALLABLE\0",
            SimplerStatus::Timeout => "SIMPLER_STATUS_TIMEOUT\0",
            SimplerStatus::RunFailed => "SIMPLER_STATUS_RUN_FAILED\0",
            SimplerStatus::DeviceFault => "SIMPLER_STATUS_DEVICE_FAULT\0",
            SimplerStatus::DeviceUnusable => "SIMPLER_STATUS_DEVICE_UNUSABLE\0",
            SimplerStatus::RunUndecided => "SIMPLER_STATUS_RUN_UNDECIDED\0",
            SimplerStatus::LanePoisoned => "SIMPLER_STATUS_LANE_POISONED\0",
            SimplerStatus::ExecutionContextRefused => "SIMPLER_STATUS_EXECUTION_CONTEXT_REFUSED\0",
            SimplerStatus::ForkedChild => "SIMPLER_STATUS_FORKED_CHILD\0",
            SimplerStatus::WorkerClosed => "SIMPLER_STATUS_WORKER_CLOSED\0",
            SimplerStatus::Unsupported => "SIMPLER_STATUS_UNSUPPORTED\0",
            SimplerStatus::Internal => "SIMPLER_STATUS_INTERNAL\0",
            SimplerStatus::NullPointer => "SIMPLER_STATUS_NULL_POINTER\0",
            SimplerStatus::InvalidHandle => "SIMPLER_STATUS_INVALID_HANDLE\0",
            SimplerStatus::InvalidConfig => "SIMPLER_STATUS_INVALID_CONFIG\0",
            SimplerStatus::InvalidCallable => "SIMPLER_STATUS_INVALID_CALLABLE\0",
            SimplerStatus::DeviceError => "SIMPLER_STATUS_DEVICE_ERROR\0",
            SimplerStatus::RunTimeout => "SIMPLER_STATUS_RUN_TIMEOUT\0",
            SimplerStatus::RunPreparationRefused => "SIMPLER_STATUS_RUN_PREPARATION_REFUSED\0",
            SimplerStatus::Detached => "SIMPLER_STATUS_DETACHED\0",
            SimplerStatus::CleanupIncomplete => "SIMPLER_STATUS_CLEANUP_INCOMPLETE\0",
        }
    }

    /// The header's name without the NUL.
    pub fn name(self) -> &'static str {
        self.name_nul().trim_end_matches('\0')
    }

    /// The status of a host error. Exhaustive on purpose: a new [`HostError`] variant does
    /// not compile until it has a code.
    pub fn of(e: &HostError) -> SimplerStatus {
        match e {
            HostError::InvalidConfig(_) => SimplerStatus::InvalidConfig,
            HostError::Device { .. } => SimplerStatus::DeviceError,
            HostError::Load(_) | HostError::InvalidCallable { .. } | HostError::Signature(_) => {
                SimplerStatus::InvalidCallable
            }
            HostError::UnknownCallable(_) => SimplerStatus::UnknownCallable,
            // A full registry is an invalid-state error by design (docs/health.md §5).
            HostError::RegistryFull(_) => SimplerStatus::InvalidState,
            HostError::ArgumentCount { .. }
            | HostError::InvalidArgument { .. }
            | HostError::InvalidDevicePointer { .. }
            | HostError::ReplayMismatch { .. } => SimplerStatus::InvalidArgument,
            HostError::DeviceMemoryInUse { .. } | HostError::RegistryBusy { .. } => {
                SimplerStatus::InvalidState
            }
            HostError::RunFailed { .. } => SimplerStatus::RunFailed,
            HostError::DeviceFault(_) => SimplerStatus::DeviceFault,
            HostError::Timeout(_) => SimplerStatus::RunTimeout,
            HostError::DeviceUnusable(_) => SimplerStatus::DeviceUnusable,
            HostError::WaitTimeout(_) => SimplerStatus::Timeout,
            HostError::RunUndecided(_) => SimplerStatus::RunUndecided,
            HostError::LanePoisoned(_) => SimplerStatus::LanePoisoned,
            HostError::WorkerClosed => SimplerStatus::WorkerClosed,
            HostError::InvalidState(_) | HostError::StaleRecording { .. } => {
                SimplerStatus::InvalidState
            }
            HostError::ExecutionContextRefused(_) => SimplerStatus::ExecutionContextRefused,
            HostError::RunPreparationRefused { .. } => SimplerStatus::RunPreparationRefused,
            HostError::Detached(_) => SimplerStatus::Detached,
            HostError::CleanupIncomplete(_) => SimplerStatus::CleanupIncomplete,
        }
    }
}

impl SimplerStatus {
    /// The status of a level-3 engine error (the collectives domain's entries). Exhaustive
    /// on purpose, as [`SimplerStatus::of`].
    pub fn of_worker(e: &WorkerError) -> SimplerStatus {
        match e {
            WorkerError::InvalidArgument { .. } | WorkerError::UnknownWorker { .. } => {
                SimplerStatus::InvalidArgument
            }
            WorkerError::UnknownCallable(_) => SimplerStatus::UnknownCallable,
            WorkerError::InvalidConfig(_) => SimplerStatus::InvalidConfig,
            WorkerError::InvalidState(_) | WorkerError::RingFull { .. } => {
                SimplerStatus::InvalidState
            }
            WorkerError::Closed => SimplerStatus::WorkerClosed,
            WorkerError::Startup { .. } => SimplerStatus::DeviceError,
            WorkerError::EndpointFailure { .. } | WorkerError::EndpointRestarted { .. } => {
                SimplerStatus::DeviceUnusable
            }
            WorkerError::TaskTimeout { .. } => SimplerStatus::RunTimeout,
            WorkerError::TaskFailed { .. }
            | WorkerError::Orchestration(_)
            | WorkerError::SubFailed { .. } => SimplerStatus::RunFailed,
            WorkerError::WaitTimeout(_) => SimplerStatus::Timeout,
            WorkerError::Host(h) => SimplerStatus::of(h),
        }
    }
}

/// A failed entry: its status and the text `simpler_last_error` gives back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Never [`SimplerStatus::Ok`].
    pub status: SimplerStatus,
    /// What went wrong, naming the thing that was wrong.
    pub message: String,
}

impl Failure {
    /// A failure of `status` saying `message`.
    pub fn new(status: SimplerStatus, message: impl Into<String>) -> Failure {
        debug_assert_ne!(status, SimplerStatus::Ok);
        Failure {
            status,
            message: message.into(),
        }
    }

    /// `SIMPLER_STATUS_NULL_POINTER` naming the parameter.
    pub fn null(param: &str) -> Failure {
        Failure::new(
            SimplerStatus::NullPointer,
            format!("`{param}` is NULL; it must point to valid memory"),
        )
    }

    /// `SIMPLER_STATUS_INVALID_ARGUMENT` naming the parameter.
    pub fn invalid(param: &str, reason: impl std::fmt::Display) -> Failure {
        Failure::new(
            SimplerStatus::InvalidArgument,
            format!("`{param}`: {reason}"),
        )
    }
}

impl From<HostError> for Failure {
    fn from(e: HostError) -> Failure {
        Failure::new(SimplerStatus::of(&e), e.to_string())
    }
}

impl From<WorkerError> for Failure {
    fn from(e: WorkerError) -> Failure {
        Failure::new(SimplerStatus::of_worker(&e), e.to_string())
    }
}

/// What every entry's body returns.
pub type Outcome = Result<(), Failure>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_indices_and_names_match_the_header() {
        for (i, s) in SimplerStatus::ALL.iter().enumerate() {
            assert_eq!(*s as i32, i as i32);
            assert_eq!(SimplerStatus::from_code(i as i32), Some(*s));
            assert!(s.name().starts_with("SIMPLER_STATUS_"));
        }
        assert_eq!(SimplerStatus::from_code(24), None);
        assert_eq!(SimplerStatus::from_code(-1), None);
        let header = include_str!("../../../include/simpler/host.h");
        for s in SimplerStatus::ALL {
            let line = format!("{} = {}", s.name(), s as i32);
            assert!(header.contains(&line), "host.h lacks `{line}`");
        }
    }

    #[test]
    fn host_errors_map_to_their_families() {
        let cases = [
            (HostError::RegistryFull(64), SimplerStatus::InvalidState),
            (
                HostError::WaitTimeout(std::time::Duration::ZERO),
                SimplerStatus::Timeout,
            ),
            (
                HostError::Timeout(std::time::Duration::ZERO),
                SimplerStatus::RunTimeout,
            ),
            (
                HostError::UnknownCallable(3),
                SimplerStatus::UnknownCallable,
            ),
            (HostError::WorkerClosed, SimplerStatus::WorkerClosed),
            (
                HostError::ExecutionContextRefused("x".into()),
                SimplerStatus::ExecutionContextRefused,
            ),
            (
                HostError::InvalidState("x".into()),
                SimplerStatus::InvalidState,
            ),
        ];
        for (e, s) in cases {
            let f = Failure::from(e.clone());
            assert_eq!(f.status, s, "{e}");
            assert_eq!(f.message, e.to_string());
        }
    }
}
