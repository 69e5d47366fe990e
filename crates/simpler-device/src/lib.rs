//! # simpler-device — the platform layer (HAL)
//!
//! Owns the [`Device`] trait — device memory, streams, events and the launch of the two
//! kernels of a run — plus the per-core handshake registers ([`CoreRegs`]) and idle
//! parking ([`Doorbell`]) that both kernels use, and the sim backend ([`sim::SimDevice`])
//! that plays an Ascend-style chip with host threads.
//!
//! It knows nothing about runs, task graphs or callables: those belong to
//! `simpler-runtime` (what runs on the device) and `simpler-host` (what drives it). The
//! device treats the kernels it launches as opaque functions and the memory it hands out as
//! opaque bytes.
//!
//! ## Contract (every backend)
//! - Work on one stream runs in submission order; a stream's next operation starts only when
//!   the previous one has finished (a kernel finishes when all its threads have returned).
//! - An event is re-recordable without a reset: a record replaces the previous one, and
//!   query/synchronize answer for the latest record made before the call. An event never
//!   recorded reads as complete.
//! - A kernel's fatal status leaves events and stream queries clean; only
//!   [`Device::synchronize_stream`] reports it, and keeps reporting it (sticky), as measured
//!   on hardware (`design/run-completion-fences.txt`, "The question a stream cannot answer").
//! - [`Device::reset`] is a forced reset: the only way to end work that no boundary and no
//!   stream synchronize can prove finished.
//! - Faults are also reported out of band, as [`FaultNotice`]s (device, stream, code) handed
//!   to the one exception callback of the process ([`Device::set_fault_callback`]). A notice
//!   arrives asynchronously, possibly late, possibly never; it is evidence about the device,
//!   never a run's verdict (`design/run-completion-fences.txt`; spec `run-lane.md` §5).
//! - Memory copies are checked against the live allocations: an out-of-range copy, a double
//!   free or a foreign pointer is an error, never undefined behaviour.

mod error;
mod regs;
pub mod sim;
mod topology;

pub use error::DeviceError;
pub use regs::{CoreRegs, Doorbell};
pub use topology::Topology;

use std::time::Duration;

use simpler_abi::CoreType;

/// A device address. On the sim platform it is a host address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The address `bytes` past this one.
    pub fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0 + bytes)
    }
}

/// Handle of a stream created by [`Device::create_stream`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamId(pub u32);

/// Handle of an event created by [`Device::create_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId(pub u32);

/// An asynchronous fault notice: what the exception callback receives
/// (`aclrtSetExceptionInfoCallback`'s device id, stream id and error code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FaultNotice {
    /// Logical id of the device that raised it ([`Device::device_id`]).
    pub device: u32,
    /// The stream the fault was raised on, when the device could name one.
    pub stream: Option<StreamId>,
    /// The device's fault code.
    pub code: i32,
}

/// The exception callback: called from a device thread, at any time, possibly concurrently
/// with itself. It must not block.
pub type FaultCallback = std::sync::Arc<dyn Fn(FaultNotice) + Send + Sync>;

/// Answer of [`Device::query_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventStatus {
    /// The latest record has not been reached by its stream yet.
    Pending,
    /// The latest record has been reached (or the event was never recorded).
    Complete,
}

/// What an AICore kernel sees when it runs on one core.
pub struct AicoreContext<'a> {
    /// Global core id: `0..clusters` are AIC, `clusters..3*clusters` AIV.
    pub core_id: u32,
    /// Core type.
    pub core_type: CoreType,
    /// Cluster the core belongs to.
    pub cluster_id: u32,
    /// Lane within the cluster among cores of its type (AIV 0 or 1; AIC 0).
    pub sub_block_id: u32,
    /// This core's handshake registers.
    pub regs: &'a CoreRegs,
}

/// What an AICPU kernel sees when it runs on one AICPU thread.
pub struct AicpuContext<'a> {
    /// Index of this thread, `0..thread_num`.
    pub thread_idx: u32,
    /// Number of AICPU threads the kernel was launched on.
    pub thread_num: u32,
    /// The chip's topology.
    pub topology: &'a Topology,
    /// Every core's handshake registers, indexed by core id.
    pub cores: &'a [CoreRegs],
    /// This thread's doorbell: ring it to wake the thread from [`AicpuContext::park`].
    pub doorbell: &'a std::sync::Arc<Doorbell>,
}

impl AicpuContext<'_> {
    /// Parks this thread until its doorbell rings or `timeout` passes. Follow the
    /// [`Doorbell`] protocol: [`Doorbell::prepare_park`], re-check for work, then park.
    pub fn park(&self, timeout: Duration) {
        self.doorbell.park(timeout);
    }
}

/// An AICore kernel: runs once on every AICore of the chip with the launch argument.
pub type AicoreKernel = fn(&AicoreContext<'_>, DevicePtr);

/// An AICPU kernel: runs once on each launched AICPU thread; a non-zero return is a fatal
/// device status (sticky on the stream, seen only by [`Device::synchronize_stream`]).
pub type AicpuKernel = fn(&AicpuContext<'_>, DevicePtr) -> i32;

/// The device abstraction the host drives. Implementations are thread-safe.
///
/// Errors are [`DeviceError`]s naming the handle or address at fault.
pub trait Device: Send + Sync {
    /// The chip's topology.
    fn topology(&self) -> &Topology;

    /// The device's logical id, as its [`FaultNotice`]s name it.
    fn device_id(&self) -> u32;

    /// Installs (`Some`) or removes (`None`) the exception callback. There is **one slot per
    /// process and backend**, not per device: installing through any device replaces the
    /// callback every device of the backend reports to, and removing it silences them all.
    /// Notices raised while no callback is installed are lost.
    fn set_fault_callback(&self, callback: Option<FaultCallback>) -> Result<(), DeviceError>;

    /// Allocates `size` bytes (> 0) of zeroed device memory, 64-byte aligned.
    fn malloc(&self, size: u64) -> Result<DevicePtr, DeviceError>;
    /// Frees an allocation by its base address.
    fn free(&self, ptr: DevicePtr) -> Result<(), DeviceError>;
    /// Copies host bytes into device memory; the range must lie in one live allocation.
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DeviceError>;
    /// Copies device memory into host bytes; the range must lie in one live allocation.
    fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DeviceError>;
    /// Fills device memory with `value`; the range must lie in one live allocation.
    fn memset(&self, dst: DevicePtr, value: u8, len: u64) -> Result<(), DeviceError>;

    /// Creates an in-order stream.
    fn create_stream(&self) -> Result<StreamId, DeviceError>;
    /// Destroys a stream after its queued work has finished.
    fn destroy_stream(&self, stream: StreamId) -> Result<(), DeviceError>;
    /// Enqueues a host-to-device copy of `src` (taken by value) on a stream.
    fn copy_to_device_async(
        &self,
        stream: StreamId,
        dst: DevicePtr,
        src: Vec<u8>,
    ) -> Result<(), DeviceError>;
    /// Enqueues the AICore kernel on a stream: it runs on every AICore.
    fn launch_aicore(
        &self,
        stream: StreamId,
        kernel: AicoreKernel,
        arg: DevicePtr,
    ) -> Result<(), DeviceError>;
    /// Enqueues the AICPU kernel on a stream: it runs on `threads` AICPU threads.
    fn launch_aicpu(
        &self,
        stream: StreamId,
        kernel: AicpuKernel,
        arg: DevicePtr,
        threads: u32,
    ) -> Result<(), DeviceError>;
    /// True when every operation queued on the stream has finished. Never reports a
    /// kernel's fatal status.
    fn query_stream(&self, stream: StreamId) -> Result<bool, DeviceError>;
    /// Waits until the stream drains, at most `timeout`; reports a kernel fatal status
    /// (sticky) or [`DeviceError::Timeout`].
    fn synchronize_stream(&self, stream: StreamId, timeout: Duration) -> Result<(), DeviceError>;

    /// Creates an event (reusable: re-recording replaces the previous record).
    fn create_event(&self) -> Result<EventId, DeviceError>;
    /// Destroys an event.
    fn destroy_event(&self, event: EventId) -> Result<(), DeviceError>;
    /// Enqueues a record of `event` on `stream`.
    fn record_event(&self, event: EventId, stream: StreamId) -> Result<(), DeviceError>;
    /// Whether the latest record of `event` has been reached. Never blocks.
    fn query_event(&self, event: EventId) -> Result<EventStatus, DeviceError>;
    /// Waits, at most `timeout` (> 0), for the latest record of `event` made before the call.
    fn synchronize_event(&self, event: EventId, timeout: Duration) -> Result<(), DeviceError>;
    /// Makes `stream` wait, before its next operation, for the latest record of `event` made
    /// before this call.
    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<(), DeviceError>;

    /// Forced reset, the only call that invalidates every reference the device holds: drops
    /// all queued work, terminates the running kernels, completes every event and clears
    /// sticky kernel faults. Memory, streams and events stay valid handles. `Ok` confirms
    /// that no kernel runs any more; [`DeviceError::ResetUnconfirmed`] (or a timeout) means
    /// the device may still touch its memory, so nothing may be freed.
    fn reset(&self, timeout: Duration) -> Result<(), DeviceError>;
}
