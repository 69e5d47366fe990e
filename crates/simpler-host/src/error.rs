//! The host's error type: one variant per kind of failure a caller may want to tell apart,
//! each naming the thing that was wrong.

use std::sync::Arc;
use std::time::Duration;

use simpler_device::DeviceError;

use crate::loader::LoadError;
use crate::SignatureError;

/// A failure of a [`ChipWorker`](crate::ChipWorker) operation. Cloneable, so a run's error
/// can be returned by every wait on its handle.
#[derive(Clone, Debug, thiserror::Error)]
pub enum HostError {
    /// The worker configuration is invalid.
    #[error("invalid worker configuration: {0}")]
    InvalidConfig(String),
    /// A device call failed; `context` says what the host was doing.
    #[error("{context}: {source}")]
    Device {
        /// What the host was doing.
        context: String,
        /// The device's error.
        source: DeviceError,
    },
    /// Code could not be loaded.
    #[error(transparent)]
    Load(Arc<LoadError>),
    /// The callable is malformed (duplicate func ids, ids out of range, bad signature...).
    #[error("invalid callable `{name}`: {reason}")]
    InvalidCallable {
        /// The callable's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The callable's signature is malformed.
    #[error("invalid signature: {0}")]
    Signature(#[from] SignatureError),
    /// No callable is registered under this id.
    #[error("no callable is registered under id {0}")]
    UnknownCallable(u32),
    /// Every callable slot is taken.
    #[error("all {0} callable slots are in use")]
    RegistryFull(usize),
    /// The run's arguments do not match the signature in number.
    #[error("callable `{callable}` takes {expected} arguments, got {got}")]
    ArgumentCount {
        /// The callable's name.
        callable: String,
        /// How many the signature declares.
        expected: usize,
        /// How many were passed.
        got: usize,
    },
    /// One argument does not match the signature.
    #[error("argument `{arg}`: {reason}")]
    InvalidArgument {
        /// The argument's name in the signature.
        arg: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A device tensor argument ([`OwnedArg::Device`](crate::OwnedArg::Device)) does not lie
    /// inside one live allocation made by this worker's
    /// [`malloc`](crate::ChipWorker::malloc): an unknown or freed pointer, or a tensor that
    /// runs past the end of its allocation. Refused before the run is admitted.
    #[error("argument `{arg}`: the device tensor at {ptr:#x} ({bytes} bytes) {reason}")]
    InvalidDevicePointer {
        /// The argument's name in the signature.
        arg: String,
        /// The tensor's first byte.
        ptr: u64,
        /// The tensor's size in bytes (its shape × its dtype's size).
        bytes: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// [`ChipWorker::free`](crate::ChipWorker::free) of memory that a queued or running run
    /// uses (or that a run given up on may still touch); nothing is freed.
    #[error(
        "device memory at {ptr:#x} is used by {runs} queued or running run(s); wait for them \
         before freeing it"
    )]
    DeviceMemoryInUse {
        /// The allocation that was to be freed.
        ptr: u64,
        /// How many runs use it.
        runs: usize,
    },
    /// The run executed and failed with a runtime error code (`docs/chip-runtime.md` §13).
    #[error("run failed with {name} (code {code}): {message}")]
    RunFailed {
        /// Completion code (negated runtime code).
        code: i32,
        /// Name of the runtime code.
        name: &'static str,
        /// The device's explanation.
        message: String,
    },
    /// A replay's arguments differ from what its recording was made with
    /// (`docs/chip-runtime.md` §17): `arg` names the argument (or the callable, for a
    /// count or overlap mismatch).
    #[error("argument `{arg}` cannot replay the recording: {reason}")]
    ReplayMismatch {
        /// The argument (or callable) that differs.
        arg: String,
        /// How it differs.
        reason: String,
    },
    /// A recording whose callable was unregistered or registered again since.
    #[error("the recording of `{callable}` is stale: {reason}")]
    StaleRecording {
        /// The recorded callable's name.
        callable: String,
        /// What changed.
        reason: String,
    },
    /// The device reported a fault that no run result explains.
    #[error("the device reported a fault and the run published no result: {0}")]
    DeviceFault(DeviceError),
    /// The run's completion could not be established within the timeout.
    #[error("the run did not complete within {0:?}; the device is now unusable")]
    Timeout(Duration),
    /// Earlier failures left the device in a state that refuses new work.
    #[error("the device is unusable: {0}")]
    DeviceUnusable(String),
    /// [`RunHandle::wait`](crate::RunHandle::wait) ran out of time; the run goes on.
    #[error("the run was not finished within {0:?}; it is still in flight")]
    WaitTimeout(Duration),
    /// The run's evidence decided nothing (no readable record of its own, a boundary that
    /// failed, or work no boundary covers); the reason says which.
    #[error("the run's outcome could not be decided: {0}")]
    RunUndecided(String),
    /// The run never launched: an earlier run failed in a way that closed the lane.
    #[error("the run was not launched: {0}")]
    LanePoisoned(String),
    /// The worker is shut down.
    #[error("the worker is closed")]
    WorkerClosed,
    /// The operation is not allowed in the worker's current state (a latched execution mode,
    /// a registry mutation while a run is outstanding, recovery of a borrowed device...).
    #[error("invalid state: {0}")]
    InvalidState(String),
    /// A registry mutation ([`ChipWorker::register_timeout`](crate::ChipWorker::register_timeout),
    /// [`ChipWorker::unregister_timeout`](crate::ChipWorker::unregister_timeout)) waited its
    /// whole timeout for a moment with no run outstanding; nothing was changed.
    #[error(
        "timed out after {waited:?} waiting for outstanding runs: {outstanding} run(s) still \
         outstanding; the callable registry was not changed"
    )]
    RegistryBusy {
        /// How many runs were still outstanding when the timeout ran out.
        outstanding: usize,
        /// The timeout it waited.
        waited: Duration,
    },
    /// The worker was used from the wrong execution context: a forked child (never
    /// restorable), or a thread whose current borrowed context is not the worker's (restoring
    /// it allows a retry with the same handle). Nothing was changed.
    #[error("execution context refused: {0}")]
    ExecutionContextRefused(String),
    /// The run was not prepared, and its rollback was proven: every binding and resource it
    /// took is released (the release marker matched its epoch), so its arguments are handed
    /// back. `cause` says why preparation failed.
    #[error("run {epoch} was refused at preparation and rolled back: {cause}")]
    RunPreparationRefused {
        /// The run's epoch (the release marker's).
        epoch: u64,
        /// Why preparation failed.
        cause: Box<HostError>,
    },
    /// The worker was dropped without `close()` while the run was in flight: its handle is
    /// detached, and whatever the device may still touch is kept.
    #[error("the run was detached: {0}")]
    Detached(String),
    /// `close()` was accepted (the worker is closed) but could not prove every resource
    /// free; what it could not free is kept, and calling `close()` again retries.
    #[error("the worker is closed, but its cleanup is incomplete: {0}")]
    CleanupIncomplete(String),
}

impl From<LoadError> for HostError {
    fn from(e: LoadError) -> HostError {
        HostError::Load(Arc::new(e))
    }
}

impl HostError {
    /// This error with a kernel named by the callable's kernel names (func id → name,
    /// `docs/tracing.md`) where the device's message names it only by func id: a kernel's
    /// fatal code, "kernel func N (task …) …", reads "kernel `name` (func N) (task …) …".
    /// Any other error is returned as it is.
    pub(crate) fn naming_kernels(
        self,
        names: &std::collections::BTreeMap<u32, String>,
    ) -> HostError {
        match self {
            HostError::RunFailed {
                code,
                name,
                message,
            } => HostError::RunFailed {
                code,
                name,
                message: name_kernel(message, names),
            },
            other => other,
        }
    }

    /// Whether this is an invalid-state error (`INVALID_STATE`): [`HostError::InvalidState`],
    /// a full callable registry, a registry mutation that timed out waiting for outstanding
    /// runs, or a free of memory a run uses.
    pub fn is_invalid_state(&self) -> bool {
        matches!(
            self,
            HostError::InvalidState(_)
                | HostError::RegistryFull(_)
                | HostError::StaleRecording { .. }
                | HostError::DeviceMemoryInUse { .. }
                | HostError::RegistryBusy { .. }
        )
    }

    /// Whether this is an invalid-argument error (`INVALID_ARGUMENT`): one argument of the
    /// call was wrong (including an explicit callable id out of range or taken, and a device
    /// tensor outside this worker's allocations).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(
            self,
            HostError::InvalidArgument { .. }
                | HostError::InvalidDevicePointer { .. }
                | HostError::ReplayMismatch { .. }
        )
    }

    /// This error as a replay's: a signature refusal ([`HostError::ArgumentCount`],
    /// [`HostError::InvalidArgument`]) of a replay's arguments becomes
    /// [`HostError::ReplayMismatch`] naming the same argument (the callable, for a count);
    /// any other error is returned as it is.
    pub(crate) fn for_replay(self) -> HostError {
        match self {
            HostError::ArgumentCount {
                callable,
                expected,
                got,
            } => HostError::ReplayMismatch {
                arg: callable,
                reason: format!("{got} arguments given; the callable takes {expected}"),
            },
            HostError::InvalidArgument { arg, reason } => HostError::ReplayMismatch { arg, reason },
            other => other,
        }
    }

    /// Wraps a device error with what the host was doing.
    pub(crate) fn device(context: impl Into<String>) -> impl FnOnce(DeviceError) -> HostError {
        let context = context.into();
        move |source| HostError::Device { context, source }
    }
}

/// `message` with a leading "kernel func N " naming the kernel as "kernel `name` (func N) "
/// when `names` has func id N; unchanged otherwise.
fn name_kernel(message: String, names: &std::collections::BTreeMap<u32, String>) -> String {
    const PREFIX: &str = "kernel func ";
    let Some(rest) = message.strip_prefix(PREFIX) else {
        return message;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let Some(kernel) = rest[..digits]
        .parse::<u32>()
        .ok()
        .and_then(|f| names.get(&f))
    else {
        return message;
    };
    if *kernel == format!("func {}", &rest[..digits]) {
        // An unnamed in-process kernel's name is its func id already.
        return message;
    }
    format!(
        "kernel `{kernel}` (func {}){}",
        &rest[..digits],
        &rest[digits..]
    )
}

#[cfg(test)]
mod naming_tests {
    use super::*;

    #[test]
    fn a_fatal_kernel_is_named_by_its_name_and_other_messages_are_kept() {
        let names = [(2u32, "softmax_update".to_string())].into_iter().collect();
        let failed = |message: &str| HostError::RunFailed {
            code: -110,
            name: "KERNEL_FATAL",
            message: message.into(),
        };
        let named = failed("kernel func 2 (task 0x5) on core 3 reported fatal code 42")
            .naming_kernels(&names);
        assert_eq!(
            named.to_string(),
            "run failed with KERNEL_FATAL (code -110): kernel `softmax_update` (func 2) \
             (task 0x5) on core 3 reported fatal code 42"
        );
        let unnamed = [(7u32, "func 7".to_string())].into_iter().collect();
        let plain = "kernel func 7 (task 0x5) reported fatal code 1";
        assert!(failed(plain)
            .naming_kernels(&unnamed)
            .to_string()
            .ends_with(plain));
        for kept in [
            "kernel func 7 (task 0x5) reported fatal code 1",
            "kernel func (task 0x5)",
            "the orchestration returned 3",
        ] {
            let e = failed(kept).naming_kernels(&names);
            assert!(e.to_string().ends_with(kept), "{e}");
        }
    }
}
