//! The [`Device`] trait — the contract every backend keeps with the host — and the values
//! that cross it besides handles: fault notices, the exception callback, event status.

use std::time::Duration;

use crate::{AicoreKernel, AicpuKernel, DeviceError, DevicePtr, EventId, StreamId, Topology};

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

/// The device abstraction the host drives: device memory, in-order streams, reusable events,
/// the launch of the two kernels of a run, fault notices and a forced reset.
///
/// Every backend keeps this contract; the host's run lane (`docs/lane.md`) and device
/// health (`docs/health.md`) rely on nothing else.
///
/// - **Threads.** Implementations are `Send + Sync`; every method may be called from any
///   thread, concurrently with any other. Only the calls with a `timeout` (and
///   [`Device::destroy_stream`], which drains the stream) wait for device work.
/// - **Handles.** A [`DevicePtr`], [`StreamId`] or [`EventId`] the device did not issue (made
///   with a `from_raw` constructor, issued by another device, or already destroyed) is
///   refused with [`DeviceError::UnknownPointer`], [`DeviceError::UnknownStream`] or
///   [`DeviceError::UnknownEvent`], never undefined behaviour. The launch argument is the one
///   exception: the device cannot know what a kernel will do with it, so the launches are
///   `unsafe` and their caller vouches for it.
/// - **Memory.** Copies, fills and frees are checked against the live allocations: an
///   out-of-range access, a double free or a foreign pointer is an error naming the address.
/// - **Stream order.** Work on one stream runs in submission order; a stream's next
///   operation starts only when the previous one has finished (a kernel finishes when all
///   its threads have returned). Streams are independent of each other except through
///   [`Device::stream_wait_event`].
/// - **Events.** An event is re-recordable without a reset: a record replaces the previous
///   one, and query/synchronize answer for the latest record made before the call. An event
///   never recorded reads as complete.
/// - **Kernel faults are sticky and seen by one call only.** A kernel's fatal status (a
///   non-zero AICPU return, an injected fault, a kernel that panicked) leaves events and
///   stream queries clean; only [`Device::synchronize_stream`] reports it, as
///   [`DeviceError::KernelFault`], and keeps reporting it until [`Device::reset`], as
///   measured on hardware (`docs/lane.md` §1). The
///   stream keeps running later work.
/// - **Fault notices.** Faults are also reported out of band, as [`FaultNotice`]s (device,
///   stream, code) handed to the one exception callback of the process
///   ([`Device::set_fault_callback`]). A notice arrives asynchronously, possibly late,
///   possibly never; it is evidence about the device, never a run's verdict
///   (`docs/health.md` §2).
/// - **Reset.** [`Device::reset`] is a forced reset: the only way to end work that no
///   boundary and no stream synchronize can prove finished.
///
/// Errors are [`DeviceError`]s naming the handle or address at fault; a call that fails
/// changes nothing unless its documentation says otherwise (a sim fault rule can make an
/// enqueueing call fail after the operation was enqueued, as hardware may).
pub trait Device: Send + Sync {
    /// The chip's topology (fixed for the device's life).
    fn topology(&self) -> &Topology;

    /// The device's logical id, as its [`FaultNotice`]s name it (unique in the process).
    fn device_id(&self) -> u32;

    /// Installs (`Some`) or removes (`None`) the exception callback. There is **one slot per
    /// process and backend**, not per device: installing through any device replaces the
    /// callback every device of the backend reports to, and removing it silences them all.
    /// Notices raised while no callback is installed are lost.
    ///
    /// # Errors
    /// A backend-specific failure to (un)install; the sim never fails.
    fn set_fault_callback(&self, callback: Option<FaultCallback>) -> Result<(), DeviceError>;

    /// Allocates `size` bytes (> 0) of zeroed device memory, 64-byte aligned (under sim
    /// memcheck's `after` placement: aligned to the largest power of two ≤ 64 dividing
    /// `size`); returns the allocation's base address.
    ///
    /// # Errors
    /// [`DeviceError::InvalidSize`] for 0 or more than the device can hold,
    /// [`DeviceError::OutOfMemory`].
    fn malloc(&self, size: u64) -> Result<DevicePtr, DeviceError>;

    /// Frees an allocation by its base address. The caller must know that no kernel still
    /// uses it (the device does not track what kernels touch).
    ///
    /// # Errors
    /// [`DeviceError::DoubleFree`], [`DeviceError::NotAllocationBase`] (an address inside an
    /// allocation), [`DeviceError::UnknownPointer`].
    fn free(&self, ptr: DevicePtr) -> Result<(), DeviceError>;

    /// Copies `src.len()` host bytes to `dst`, synchronously (unordered with every stream).
    ///
    /// # Errors
    /// [`DeviceError::UnknownPointer`], or [`DeviceError::OutOfRange`] when the range does
    /// not lie in one live allocation.
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DeviceError>;

    /// Copies `dst.len()` bytes at `src` into host memory, synchronously.
    ///
    /// # Errors
    /// As [`Device::copy_to_device`].
    fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DeviceError>;

    /// Fills `len` bytes at `dst` with `value`, synchronously.
    ///
    /// # Errors
    /// As [`Device::copy_to_device`].
    fn memset(&self, dst: DevicePtr, value: u8, len: u64) -> Result<(), DeviceError>;

    /// Creates an in-order stream, idle and without a fault.
    ///
    /// # Errors
    /// A backend-specific failure to create one ([`DeviceError::InvalidLaunch`] on the sim
    /// when its thread cannot be started).
    fn create_stream(&self) -> Result<StreamId, DeviceError>;

    /// Destroys a stream after its queued work has finished (blocks until then); the handle
    /// is refused afterwards.
    ///
    /// # Errors
    /// [`DeviceError::UnknownStream`].
    fn destroy_stream(&self, stream: StreamId) -> Result<(), DeviceError>;

    /// Enqueues a host-to-device copy of `src` (taken by value) on a stream: it lands after
    /// everything queued before it on the stream. A range that is no longer allocated when
    /// the copy runs makes it a fatal status of the stream (sticky).
    ///
    /// # Errors
    /// [`DeviceError::UnknownPointer`] / [`DeviceError::OutOfRange`] (checked at the call),
    /// [`DeviceError::UnknownStream`].
    fn copy_to_device_async(
        &self,
        stream: StreamId,
        dst: DevicePtr,
        src: Vec<u8>,
    ) -> Result<(), DeviceError>;

    /// Enqueues the AICore kernel on a stream: once everything queued before it has
    /// finished, it runs on every AICore of the device, and the stream moves on when every
    /// core has returned. A kernel that panics is a fatal status of the stream
    /// ([`DeviceError::KernelFault`] with the panic message) and raises a fault notice; the
    /// cores stay usable.
    ///
    /// # Safety
    /// The caller (the host, by the launch contract of `docs/lane.md`) upholds
    /// `kernel`'s argument contract ([`AicoreKernel`], and the kernel's own documentation):
    /// `arg` must meet it from this call until the kernel has finished — as proven by a
    /// synchronize of this stream, an event recorded on it after the launch, or an `Ok`
    /// [`Device::reset`] — so nothing `arg` reaches may be freed or rewritten (except as the
    /// kernel's protocol allows) before then.
    ///
    /// # Errors
    /// [`DeviceError::UnknownStream`]; nothing is enqueued then.
    unsafe fn launch_aicore(
        &self,
        stream: StreamId,
        kernel: AicoreKernel,
        arg: DevicePtr,
    ) -> Result<(), DeviceError>;

    /// Enqueues the AICore kernel for lazy activation (`docs/sim-device.md` §13): as
    /// [`launch_aicore`](Device::launch_aicore), except that once everything queued before
    /// it has finished the launch *arms* every core — its DMB reset, its COND set to
    /// `armed_cond` — and the kernel runs only on the cores whose DMB is written after
    /// that (once each, from that write on). A core never written ends with the launch when
    /// it is disarmed ([`CoreRegs::disarm`](crate::CoreRegs::disarm), true), which the
    /// kernel's protocol must do for every core it did not dispatch to; a reset disarms
    /// every core. An empty run then touches no core. A backend without lazy activation
    /// may run it as [`launch_aicore`](Device::launch_aicore) (the default): the kernel
    /// then runs on every core, `disarm` answers false, and the kernel itself must write
    /// `armed_cond` when it starts, as the runtime's does.
    ///
    /// # Safety
    /// As for [`Device::launch_aicore`].
    ///
    /// # Errors
    /// As for [`Device::launch_aicore`].
    unsafe fn launch_aicore_lazy(
        &self,
        stream: StreamId,
        kernel: AicoreKernel,
        arg: DevicePtr,
        armed_cond: u64,
    ) -> Result<(), DeviceError> {
        let _ = armed_cond;
        // SAFETY: the caller's contract is `launch_aicore`'s.
        unsafe { self.launch_aicore(stream, kernel, arg) }
    }

    /// Enqueues the AICPU kernel on a stream: once everything queued before it has
    /// finished, it runs on AICPU threads `0..threads`, and the stream moves on when every
    /// thread has returned. The first non-zero return of a thread, or a panic of one (with
    /// its message), is a fatal status of the stream and raises a fault notice; the threads
    /// stay usable.
    ///
    /// # Safety
    /// As for [`Device::launch_aicore`], for `kernel`'s contract ([`AicpuKernel`]).
    ///
    /// # Errors
    /// [`DeviceError::InvalidLaunch`] when `threads` is not in
    /// `1..=topology().aicpu_threads`, [`DeviceError::UnknownStream`]; nothing is enqueued
    /// then.
    unsafe fn launch_aicpu(
        &self,
        stream: StreamId,
        kernel: AicpuKernel,
        arg: DevicePtr,
        threads: u32,
    ) -> Result<(), DeviceError>;

    /// True when every operation queued on the stream has finished. Never blocks and never
    /// reports a kernel's fatal status.
    ///
    /// # Errors
    /// [`DeviceError::UnknownStream`].
    fn query_stream(&self, stream: StreamId) -> Result<bool, DeviceError>;

    /// Waits until the stream drains, at most `timeout` (> 0). Reports the first fatal
    /// status of a kernel on the stream since the last reset — sticky: every later call
    /// reports it again.
    ///
    /// # Errors
    /// [`DeviceError::KernelFault`] (the stream drained), [`DeviceError::Timeout`] (it did
    /// not), [`DeviceError::ZeroTimeout`], [`DeviceError::UnknownStream`].
    fn synchronize_stream(&self, stream: StreamId, timeout: Duration) -> Result<(), DeviceError>;

    /// Creates an event (reusable: re-recording replaces the previous record). It reads as
    /// complete until first recorded.
    ///
    /// # Errors
    /// A backend-specific failure to create one.
    fn create_event(&self) -> Result<EventId, DeviceError>;

    /// Destroys an event; the handle is refused afterwards. Work already queued that records
    /// or waits on it still completes.
    ///
    /// # Errors
    /// [`DeviceError::UnknownEvent`].
    fn destroy_event(&self, event: EventId) -> Result<(), DeviceError>;

    /// Enqueues a record of `event` on `stream`: the record is reached once everything
    /// queued on the stream before it has finished (whatever their status).
    ///
    /// # Errors
    /// [`DeviceError::UnknownEvent`], [`DeviceError::UnknownStream`].
    fn record_event(&self, event: EventId, stream: StreamId) -> Result<(), DeviceError>;

    /// Whether the latest record of `event` has been reached. Never blocks.
    ///
    /// # Errors
    /// [`DeviceError::UnknownEvent`].
    fn query_event(&self, event: EventId) -> Result<EventStatus, DeviceError>;

    /// Waits, at most `timeout` (> 0), for the latest record of `event` made before the call.
    ///
    /// # Errors
    /// [`DeviceError::Timeout`], [`DeviceError::ZeroTimeout`], [`DeviceError::UnknownEvent`].
    fn synchronize_event(&self, event: EventId, timeout: Duration) -> Result<(), DeviceError>;

    /// Makes `stream` wait, before its next operation, for the latest record of `event` made
    /// before this call (a never-recorded event does not hold it).
    ///
    /// # Errors
    /// [`DeviceError::UnknownStream`], [`DeviceError::UnknownEvent`].
    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<(), DeviceError>;

    /// Forced reset, the only call that invalidates every reference the device holds: drops
    /// all queued work, terminates the running kernels, completes every event and clears
    /// sticky kernel faults. Memory, streams and events stay valid handles.
    ///
    /// # Errors
    /// `Ok` confirms that no kernel runs any more; [`DeviceError::ResetUnconfirmed`] means
    /// the device may still touch its memory, so nothing may be freed;
    /// [`DeviceError::ZeroTimeout`].
    fn reset(&self, timeout: Duration) -> Result<(), DeviceError>;
}
