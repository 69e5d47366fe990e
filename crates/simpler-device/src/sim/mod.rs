//! The sim backend: an Ascend-style chip played by host threads.
//!
//! AICore cores and AICPU threads are persistent host threads started with the device
//! ([`pool`]), each registered for crash reports (`crate::crash`), device memory is checked
//! host memory ([`memory`]), placed against guard pages under [`Memcheck`] (`guard`), and
//! streams and events are host queues and sequence counters ([`stream`]). Kernels are plain functions; the
//! launch argument is a device (= host) address. `docs/sim-device.md` describes the whole.
//!
//! Every failure the host must survive can be injected ([`SimDevice::inject`], see
//! [`FaultRule`]), and [`Device::reset`] is a forced reset that terminates running kernels.
//! A kernel that panics on a device thread is a kernel fault of its launch
//! ([`KERNEL_PANIC_STATUS`], with the message); the thread lives on. Kernel faults raise
//! asynchronous fault notices to the process's one exception callback ([`notices`]); each
//! device has its own logical id ([`Device::device_id`]), unique in the process. Stream and
//! event handles are unique in the process too, so a handle of one sim device is refused by
//! every other. [`SimDevice::launch_host_fn`] runs a host function in stream order, the way
//! a framework's own work sits on a stream it lends to the runtime.
//!
//! This module must not know about runs or the runtime: it runs whatever kernels it is
//! given.

mod faults;
mod guard;
mod memory;
pub mod notices;
pub(crate) mod pool;
mod stream;

pub use crate::exec::{pool_threads, pool_threads_started, ExecutorKind};

pub use faults::{FaultAction, FaultPoint, FaultRule, KernelKind, KernelSpan};
pub use guard::Memcheck;
pub use notices::{fault_callback_installed, raise_foreign_notice, NoticeDelivery, NoticeStats};
pub use pool::KERNEL_PANIC_STATUS;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use self::faults::SimFaults;
use self::memory::Memory;
use self::pool::{Chip, Pools};
use self::stream::{Event, Op, Stream};
use crate::sdma::SdmaFault;
use crate::{
    AicoreKernel, AicpuKernel, Device, DeviceError, DevicePtr, EventId, EventStatus, FaultCallback,
    StreamId, Topology,
};

/// Source of the sim devices' logical ids (unique in the process).
static DEVICE_IDS: AtomicU32 = AtomicU32::new(0);

/// Source of the stream and event handles of every sim device (unique in the process, from
/// 1), so that no device mistakes another's handle for one of its own.
static HANDLES: AtomicU32 = AtomicU32::new(1);

/// The next process-unique handle value.
///
/// # Errors
/// [`DeviceError::InvalidLaunch`] once 2^32 − 1 handles have been issued (never reused: a
/// reused value could name a live stream of another device).
fn next_handle() -> Result<u32, DeviceError> {
    HANDLES
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| h.checked_add(1))
        .map_err(|_| {
            DeviceError::InvalidLaunch(
                "the sim has issued every stream and event handle of this process".into(),
            )
        })
}

/// How a sim device is built: memcheck and executor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimOptions {
    /// Where allocations are placed (guard pages).
    pub memcheck: Memcheck,
    /// How device threads run (`docs/sim-device.md` §11).
    pub executor: ExecutorKind,
    /// Provision the chip's SDMA engine (`docs/sim-device.md` §12): kernels may then start
    /// asynchronous copies. Off by default, as on hardware (`enable_sdma`).
    pub sdma: bool,
}

/// The simulated chip.
pub struct SimDevice {
    chip: Arc<Chip>,
    memory: Arc<Memory>,
    pools: Arc<Pools>,
    streams: Mutex<HashMap<u32, Arc<Stream>>>,
    events: Mutex<HashMap<u32, Arc<Event>>>,
    faults: Arc<SimFaults>,
}

/// How long dropping a device waits for running kernels to be terminated.
const DROP_RESET_TIMEOUT: Duration = Duration::from_secs(2);

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDevice")
            .field("topology", &self.chip.topology)
            .finish_non_exhaustive()
    }
}

impl SimDevice {
    /// Starts a sim device without memcheck, on the executor `SIMPLER_SIM_EXECUTOR` names
    /// (default: fibers on the process's shared pool): one device thread per AICore and
    /// per AICPU thread, started now and reused by every launch. The first device of the process installs the
    /// crash reporter (`crate::crash`).
    ///
    /// # Errors
    /// [`DeviceError::InvalidLaunch`] for a topology out of range or when threads cannot
    /// be started.
    pub fn new(topology: Topology) -> Result<SimDevice, DeviceError> {
        SimDevice::with_memcheck(topology, Memcheck::Off)
    }

    /// Starts a sim device whose allocations are placed as `memcheck` says (against guard
    /// pages unless [`Memcheck::Off`]); otherwise as [`SimDevice::new`].
    ///
    /// # Errors
    /// As [`SimDevice::new`].
    pub fn with_memcheck(topology: Topology, memcheck: Memcheck) -> Result<SimDevice, DeviceError> {
        SimDevice::with_options(
            topology,
            SimOptions {
                memcheck,
                executor: ExecutorKind::from_env(),
                sdma: false,
            },
        )
    }

    /// Starts a sim device as `options` say: its allocations placed by
    /// [`SimOptions::memcheck`], its device threads run by [`SimOptions::executor`] (fibers
    /// on the process's shared pool, or one OS thread each).
    ///
    /// # Errors
    /// As [`SimDevice::new`].
    pub fn with_options(topology: Topology, options: SimOptions) -> Result<SimDevice, DeviceError> {
        let memcheck = options.memcheck;
        topology.validate().map_err(DeviceError::InvalidLaunch)?;
        crate::crash::install();
        let device = DEVICE_IDS.fetch_add(1, Ordering::Relaxed);
        let faults = Arc::new(SimFaults::new(device));
        let sdma = options.sdma.then(|| {
            let faults = faults.clone();
            Box::new(move || match faults.check(FaultPoint::SdmaCopy) {
                None => SdmaFault::None,
                Some(FaultAction::SlowFinish(d)) => SdmaFault::Delay(d),
                Some(_) => SdmaFault::Refuse,
            }) as crate::sdma::SdmaFaultHook
        });
        let chip = Arc::new(
            Chip::new(topology, Arc::new(AtomicBool::new(false)), device, sdma).map_err(|e| {
                DeviceError::InvalidLaunch(format!("cannot start the SDMA engine: {e}"))
            })?,
        );
        let pools = Pools::start(chip.clone(), options.executor)
            .map_err(|e| DeviceError::InvalidLaunch(format!("cannot start device threads: {e}")))?;
        Ok(SimDevice {
            chip,
            memory: Arc::new(Memory::new(device, memcheck)),
            pools: Arc::new(pools),
            streams: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            faults,
        })
    }

    /// How this device's threads run.
    pub fn executor(&self) -> ExecutorKind {
        self.pools.kind()
    }

    /// The memcheck mode of this device's allocations.
    pub fn memcheck(&self) -> Memcheck {
        self.memory.memcheck()
    }

    /// Number of live device allocations (for leak checks).
    pub fn live_allocations(&self) -> usize {
        self.memory.live_count()
    }

    /// Arms a fault-injection rule (rules are checked in the order they were injected).
    pub fn inject(&self, rule: FaultRule) {
        self.faults.inject(rule);
    }

    /// AICore kernel calls on this device so far: one per core per launch that ran on it
    /// (a lazy launch runs only on the cores that were dispatched to,
    /// [`Device::launch_aicore_lazy`]).
    pub fn aicore_kernel_calls(&self) -> u64 {
        self.chip
            .aicore_calls
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts recording when each kernel runs (clearing earlier records), or stops.
    pub fn trace_kernels(&self, on: bool) {
        self.faults.set_tracing(on);
    }

    /// The kernels run since tracing started, in the order they finished.
    pub fn kernel_trace(&self) -> Vec<KernelSpan> {
        self.faults.spans()
    }

    /// Disarms every rule not yet spent.
    pub fn clear_faults(&self) {
        self.faults.clear();
    }

    /// How many times `point` was reached since the device started (faulted or not).
    pub fn calls(&self, point: FaultPoint) -> u64 {
        self.faults.calls(point)
    }

    /// Counts of this device's fault notices (raised, delivered, lost).
    pub fn notice_stats(&self) -> NoticeStats {
        self.faults.notice_stats()
    }

    /// Raises a fault notice from this device naming `stream` (`None`: a notice that names no
    /// stream), delivered as `delivery` says — a fault the device reports and no run does.
    pub fn raise_notice(&self, stream: Option<StreamId>, code: i32, delivery: NoticeDelivery) {
        self.faults.raise_notice_with(stream, code, delivery);
    }

    /// Enqueues a host function on `stream`: it runs on the stream's thread once everything
    /// queued before it has finished, and the stream's later work waits for it to return.
    ///
    /// # Errors
    /// [`DeviceError::UnknownStream`].
    pub fn launch_host_fn(
        &self,
        stream: StreamId,
        f: impl FnOnce() + Send + 'static,
    ) -> Result<(), DeviceError> {
        self.stream(stream)?.enqueue(Op::HostFn(Box::new(f)))
    }

    /// Counts a call at `point`; an armed rule that fails it outright yields the error to
    /// return, one that lets the operation be enqueued first yields `Ok(true)`.
    fn gate(&self, point: FaultPoint, timeout: Option<Duration>) -> Result<bool, DeviceError> {
        match self.faults.check(point) {
            None => Ok(false),
            Some(FaultAction::EnqueueThenFail) => Ok(true),
            Some(FaultAction::TimeOut) => match timeout {
                Some(t) => Err(DeviceError::Timeout(t)),
                None => Err(DeviceError::Injected(point.name())),
            },
            Some(_) => Err(DeviceError::Injected(point.name())),
        }
    }

    /// Enqueues through `enqueue` unless a rule refuses it; reports an injected failure after
    /// enqueueing when the rule says so.
    fn submit(
        &self,
        point: FaultPoint,
        enqueue: impl FnOnce() -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let fail_after = self.gate(point, None)?;
        enqueue()?;
        if fail_after {
            return Err(DeviceError::Injected(point.name()));
        }
        Ok(())
    }

    /// Ends all device work: drops queued operations, completes every event, terminates the
    /// running kernels and clears sticky faults. False when a kernel is still running at
    /// the deadline (the kill switch then stays raised).
    fn abort_all(&self, timeout: Duration) -> bool {
        let streams: Vec<Arc<Stream>> = self.streams.lock().values().cloned().collect();
        let events: Vec<Arc<Event>> = self.events.lock().values().cloned().collect();
        self.chip.kill.store(true, Ordering::Release);
        // No SDMA copy of the aborted work may land in memory the host frees after a reset.
        if let Some(e) = &self.chip.sdma {
            e.abort();
        }
        for s in &streams {
            s.abort_queued();
        }
        for e in &events {
            e.force_complete();
        }
        self.chip.wake_all();
        let deadline = crate::deadline::deadline(timeout);
        if !streams.iter().all(|s| s.wait_idle(deadline)) {
            return false;
        }
        self.chip.kill.store(false, Ordering::Release);
        for s in &streams {
            s.finish_reset();
        }
        for e in &events {
            e.force_complete();
        }
        true
    }

    /// Queues an AICore launch on `stream`: eager (`None`) or lazy with COND armed to the
    /// value. The callers' `# Safety` covers `arg`.
    fn enqueue_aicore(
        &self,
        stream: StreamId,
        kernel: AicoreKernel,
        arg: DevicePtr,
        armed_cond: Option<u64>,
    ) -> Result<(), DeviceError> {
        let s = self.stream(stream)?;
        self.submit(FaultPoint::LaunchAicore, || {
            s.enqueue(Op::Aicore {
                kernel,
                arg,
                armed_cond,
            })
        })
    }

    fn stream(&self, id: StreamId) -> Result<Arc<Stream>, DeviceError> {
        self.streams
            .lock()
            .get(&id.raw())
            .cloned()
            .ok_or(DeviceError::UnknownStream(id))
    }

    fn event(&self, id: EventId) -> Result<Arc<Event>, DeviceError> {
        self.events
            .lock()
            .get(&id.raw())
            .cloned()
            .ok_or(DeviceError::UnknownEvent(id))
    }
}

impl Device for SimDevice {
    fn topology(&self) -> &Topology {
        &self.chip.topology
    }

    fn device_id(&self) -> u32 {
        self.faults.device()
    }

    fn set_fault_callback(&self, callback: Option<FaultCallback>) -> Result<(), DeviceError> {
        notices::set_callback(callback);
        Ok(())
    }

    fn malloc(&self, size: u64) -> Result<DevicePtr, DeviceError> {
        self.gate(FaultPoint::Malloc, None)?;
        self.memory.alloc(size)
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), DeviceError> {
        self.gate(FaultPoint::Free, None)?;
        self.memory.free(ptr)
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DeviceError> {
        self.gate(FaultPoint::CopyToDevice, None)?;
        self.memory.copy_in(dst, src)
    }

    fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DeviceError> {
        self.gate(FaultPoint::CopyFromDevice, None)?;
        self.memory.copy_out(dst, src)
    }

    fn memset(&self, dst: DevicePtr, value: u8, len: u64) -> Result<(), DeviceError> {
        self.memory.fill(dst, value, len)
    }

    fn create_stream(&self) -> Result<StreamId, DeviceError> {
        let id = StreamId::from_raw(next_handle()?);
        let s = Stream::start(
            id,
            self.pools.clone(),
            self.memory.clone(),
            self.faults.clone(),
        )?;
        self.streams.lock().insert(id.raw(), Arc::new(s));
        Ok(id)
    }

    fn destroy_stream(&self, stream: StreamId) -> Result<(), DeviceError> {
        let s = self
            .streams
            .lock()
            .remove(&stream.raw())
            .ok_or(DeviceError::UnknownStream(stream))?;
        drop(s);
        Ok(())
    }

    fn copy_to_device_async(
        &self,
        stream: StreamId,
        dst: DevicePtr,
        src: Vec<u8>,
    ) -> Result<(), DeviceError> {
        self.memory.check(dst, src.len() as u64)?;
        let s = self.stream(stream)?;
        self.submit(FaultPoint::CopyToDeviceAsync, || {
            s.enqueue(Op::Copy { dst, bytes: src })
        })
    }

    unsafe fn launch_aicore(
        &self,
        stream: StreamId,
        kernel: AicoreKernel,
        arg: DevicePtr,
    ) -> Result<(), DeviceError> {
        self.enqueue_aicore(stream, kernel, arg, None)
    }

    unsafe fn launch_aicore_lazy(
        &self,
        stream: StreamId,
        kernel: AicoreKernel,
        arg: DevicePtr,
        armed_cond: u64,
    ) -> Result<(), DeviceError> {
        self.enqueue_aicore(stream, kernel, arg, Some(armed_cond))
    }

    unsafe fn launch_aicpu(
        &self,
        stream: StreamId,
        kernel: AicpuKernel,
        arg: DevicePtr,
        threads: u32,
    ) -> Result<(), DeviceError> {
        let max = self.chip.topology.aicpu_threads;
        if threads == 0 || threads > max {
            return Err(DeviceError::InvalidLaunch(format!(
                "AICPU kernel launched on {threads} threads; this device has 1..={max}"
            )));
        }
        let s = self.stream(stream)?;
        self.submit(FaultPoint::LaunchAicpu, || {
            s.enqueue(Op::Aicpu {
                kernel,
                arg,
                threads,
            })
        })
    }

    fn query_stream(&self, stream: StreamId) -> Result<bool, DeviceError> {
        let s = self.stream(stream)?;
        self.gate(FaultPoint::QueryStream, None)?;
        Ok(s.is_idle())
    }

    fn synchronize_stream(&self, stream: StreamId, timeout: Duration) -> Result<(), DeviceError> {
        if timeout.is_zero() {
            return Err(DeviceError::ZeroTimeout);
        }
        let s = self.stream(stream)?;
        self.gate(FaultPoint::SynchronizeStream, Some(timeout))?;
        s.synchronize(timeout)
    }

    fn create_event(&self) -> Result<EventId, DeviceError> {
        self.gate(FaultPoint::CreateEvent, None)?;
        let id = EventId::from_raw(next_handle()?);
        self.events
            .lock()
            .insert(id.raw(), Arc::new(Event::default()));
        Ok(id)
    }

    fn destroy_event(&self, event: EventId) -> Result<(), DeviceError> {
        self.events
            .lock()
            .remove(&event.raw())
            .map(drop)
            .ok_or(DeviceError::UnknownEvent(event))
    }

    fn record_event(&self, event: EventId, stream: StreamId) -> Result<(), DeviceError> {
        let e = self.event(event)?;
        let s = self.stream(stream)?;
        self.submit(FaultPoint::RecordEvent, || {
            let seq = e.begin_record();
            s.enqueue(Op::Record { event: e, seq })
        })
    }

    fn query_event(&self, event: EventId) -> Result<EventStatus, DeviceError> {
        let e = self.event(event)?;
        self.gate(FaultPoint::QueryEvent, None)?;
        Ok(e.status())
    }

    fn synchronize_event(&self, event: EventId, timeout: Duration) -> Result<(), DeviceError> {
        if timeout.is_zero() {
            return Err(DeviceError::ZeroTimeout);
        }
        let e = self.event(event)?;
        self.gate(FaultPoint::SynchronizeEvent, Some(timeout))?;
        let target = e.target();
        if e.wait_until(target, Some(crate::deadline::deadline(timeout))) {
            Ok(())
        } else {
            Err(DeviceError::Timeout(timeout))
        }
    }

    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<(), DeviceError> {
        let e = self.event(event)?;
        let s = self.stream(stream)?;
        self.submit(FaultPoint::StreamWaitEvent, || {
            let seq = e.target();
            s.enqueue(Op::Wait { event: e, seq })
        })
    }

    fn reset(&self, timeout: Duration) -> Result<(), DeviceError> {
        if timeout.is_zero() {
            return Err(DeviceError::ZeroTimeout);
        }
        if self.faults.check(FaultPoint::Reset).is_some() {
            return Err(DeviceError::ResetUnconfirmed(
                "injected fault at reset".into(),
            ));
        }
        if self.abort_all(timeout) {
            Ok(())
        } else {
            Err(DeviceError::ResetUnconfirmed(format!(
                "a kernel was still running {timeout:?} after the reset began"
            )))
        }
    }
}

impl Drop for SimDevice {
    fn drop(&mut self) {
        // End whatever still runs (a hung kernel would block its stream thread forever),
        // then drop the streams: they hold the pools.
        let busy = self.streams.lock().values().any(|s| !s.is_idle());
        if busy && !self.abort_all(DROP_RESET_TIMEOUT) {
            // A kernel that never reaches a register wait or park (user code spinning
            // forever) cannot be stopped. Joining its threads would hang the process, and
            // freeing the memory it may still touch would be unsound: leave both behind
            // (the streams hold the pools and the memory).
            eprintln!(
                "simpler: warning: a kernel on the sim device did not stop within {DROP_RESET_TIMEOUT:?}; \
                 its threads and memory are left behind"
            );
            for (_, stream) in self.streams.lock().drain() {
                std::mem::forget(stream);
            }
            std::mem::forget(self.pools.clone());
            std::mem::forget(self.memory.clone());
        }
        self.streams.lock().clear();
        // The memory is freed next (a field dropped after this body): no copy may land in it.
        if let Some(e) = &self.chip.sdma {
            e.abort();
        }
    }
}
