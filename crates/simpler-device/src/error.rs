//! Device errors: one typed error per way a device call can fail, naming what was wrong.

use crate::{DevicePtr, EventId, StreamId};

/// A device operation failed. Each variant names the handle or address at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// A size of zero, or larger than the device can hold.
    #[error("invalid allocation size {0} bytes")]
    InvalidSize(u64),
    /// The device ran out of memory.
    #[error("device out of memory allocating {0} bytes")]
    OutOfMemory(u64),
    /// The address is not inside any live allocation.
    #[error("address {0:#x} is not inside any live device allocation")]
    UnknownPointer(u64),
    /// The pointer was already freed.
    #[error("double free of device allocation at {0:#x}")]
    DoubleFree(u64),
    /// Free of an address inside an allocation rather than its base.
    #[error("free of {ptr:#x}, which is inside the allocation at {base:#x}, not its base")]
    NotAllocationBase {
        /// The address passed.
        ptr: u64,
        /// Base of the allocation containing it.
        base: u64,
    },
    /// A copy runs past the end of its allocation.
    #[error(
        "access of {len} bytes at {ptr:#x} overruns the allocation at {base:#x} of {size} bytes"
    )]
    OutOfRange {
        /// Start of the access.
        ptr: u64,
        /// Its length in bytes.
        len: u64,
        /// Base of the allocation.
        base: u64,
        /// Size of the allocation.
        size: u64,
    },
    /// The stream handle is unknown or destroyed.
    #[error("unknown stream {0:?}")]
    UnknownStream(StreamId),
    /// The event handle is unknown or destroyed.
    #[error("unknown event {0:?}")]
    UnknownEvent(EventId),
    /// A wait ran out of time.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// A timeout of zero was passed where a bounded wait is required.
    #[error("a zero timeout is not allowed")]
    ZeroTimeout,
    /// A kernel (or another operation) on the stream ended with a fatal status (sticky).
    #[error(
        "a kernel on stream {stream:?} failed with device status {status}{}",
        panic_detail(.panic)
    )]
    KernelFault {
        /// The stream.
        stream: StreamId,
        /// The kernel's status ([`sim::KERNEL_PANIC_STATUS`](crate::sim::KERNEL_PANIC_STATUS)
        /// on the sim for a panic).
        status: i32,
        /// The panic message, when the fault is a kernel (or host function) that panicked on
        /// a device thread; `None` for a returned or injected status.
        panic: Option<String>,
    },
    /// The launch shape is not possible on this device.
    #[error("invalid launch: {0}")]
    InvalidLaunch(String),
    /// The device has been shut down.
    #[error("the device is shut down")]
    ShutDown,
    /// A fault injected by the sim's fault configuration, at the named call.
    #[error("injected fault at {0}")]
    Injected(&'static str),
    /// A forced reset could not confirm that the device stopped touching its memory.
    #[error("the device reset could not be confirmed: {0}")]
    ResetUnconfirmed(String),
}

/// The tail of a [`DeviceError::KernelFault`] message for a panic.
fn panic_detail(panic: &Option<String>) -> String {
    match panic {
        Some(message) => format!(": it panicked: {message}"),
        None => String::new(),
    }
}

impl DeviceError {
    /// Builds an `OutOfRange` error.
    pub(crate) fn out_of_range(ptr: DevicePtr, len: u64, base: u64, size: u64) -> DeviceError {
        DeviceError::OutOfRange {
            ptr: ptr.addr(),
            len,
            base,
            size,
        }
    }
}
