//! The host's error type: one variant per kind of failure a caller may want to tell apart,
//! each naming the thing that was wrong.

use std::time::Duration;

use simpler_device::DeviceError;

use crate::loader::LoadError;
use crate::SignatureError;

/// A failure of a [`ChipWorker`](crate::ChipWorker) operation.
#[derive(Debug, thiserror::Error)]
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
    Load(#[from] LoadError),
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
    /// The run executed and failed with a runtime error code (spec `l2-runtime.md` §2.7).
    #[error("run failed with {name} (code {code}): {message}")]
    RunFailed {
        /// Completion code (negated runtime code).
        code: i32,
        /// Name of the runtime code.
        name: &'static str,
        /// The device's explanation.
        message: String,
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
}

impl HostError {
    /// Wraps a device error with what the host was doing.
    pub(crate) fn device(context: impl Into<String>) -> impl FnOnce(DeviceError) -> HostError {
        let context = context.into();
        move |source| HostError::Device { context, source }
    }
}
