//! The sim backend: an Ascend-style chip played by host threads.
//!
//! AICore cores and AICPU threads are persistent host threads started with the device
//! ([`pool`]), device memory is checked host memory ([`memory`]), and streams and events
//! are host queues and sequence counters ([`stream`]). Kernels are plain functions; the
//! launch argument is a device (= host) address.

mod memory;
mod pool;
mod stream;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use self::memory::Memory;
use self::pool::{Chip, Pools};
use self::stream::{Event, Op, Stream};
use crate::{
    AicoreKernel, AicpuKernel, CoreRegs, Device, DeviceError, DevicePtr, EventId, EventStatus,
    StreamId, Topology,
};

/// The simulated chip.
pub struct SimDevice {
    chip: Arc<Chip>,
    memory: Arc<Memory>,
    pools: Arc<Pools>,
    streams: Mutex<HashMap<u32, Arc<Stream>>>,
    events: Mutex<HashMap<u32, Arc<Event>>>,
    next_handle: AtomicU32,
}

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDevice")
            .field("topology", &self.chip.topology)
            .finish_non_exhaustive()
    }
}

impl SimDevice {
    /// Starts a sim device: one thread per AICore and per AICPU thread, started now and
    /// reused by every launch.
    ///
    /// # Errors
    /// [`DeviceError::InvalidLaunch`] for a topology out of range or when threads cannot
    /// be started.
    pub fn new(topology: Topology) -> Result<SimDevice, DeviceError> {
        topology.validate().map_err(DeviceError::InvalidLaunch)?;
        let cores = (0..topology.core_count())
            .map(|_| CoreRegs::default())
            .collect::<Vec<_>>()
            .into_boxed_slice();
        let chip = Arc::new(Chip { topology, cores });
        let pools = Pools::start(chip.clone())
            .map_err(|e| DeviceError::InvalidLaunch(format!("cannot start device threads: {e}")))?;
        Ok(SimDevice {
            chip,
            memory: Arc::new(Memory::default()),
            pools: Arc::new(pools),
            streams: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            next_handle: AtomicU32::new(1),
        })
    }

    /// Number of live device allocations (for leak checks).
    pub fn live_allocations(&self) -> usize {
        self.memory.live_count()
    }

    fn stream(&self, id: StreamId) -> Result<Arc<Stream>, DeviceError> {
        self.streams
            .lock()
            .get(&id.0)
            .cloned()
            .ok_or(DeviceError::UnknownStream(id))
    }

    fn event(&self, id: EventId) -> Result<Arc<Event>, DeviceError> {
        self.events
            .lock()
            .get(&id.0)
            .cloned()
            .ok_or(DeviceError::UnknownEvent(id))
    }
}

impl Device for SimDevice {
    fn topology(&self) -> &Topology {
        &self.chip.topology
    }

    fn malloc(&self, size: u64) -> Result<DevicePtr, DeviceError> {
        self.memory.alloc(size)
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), DeviceError> {
        self.memory.free(ptr)
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DeviceError> {
        self.memory.copy_in(dst, src)
    }

    fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DeviceError> {
        self.memory.copy_out(dst, src)
    }

    fn memset(&self, dst: DevicePtr, value: u8, len: u64) -> Result<(), DeviceError> {
        self.memory.fill(dst, value, len)
    }

    fn create_stream(&self) -> Result<StreamId, DeviceError> {
        let id = StreamId(self.next_handle.fetch_add(1, Ordering::Relaxed));
        let s = Stream::start(id, self.pools.clone(), self.memory.clone())?;
        self.streams.lock().insert(id.0, Arc::new(s));
        Ok(id)
    }

    fn destroy_stream(&self, stream: StreamId) -> Result<(), DeviceError> {
        let s = self
            .streams
            .lock()
            .remove(&stream.0)
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
        self.stream(stream)?.enqueue(Op::Copy { dst, bytes: src })
    }

    fn launch_aicore(
        &self,
        stream: StreamId,
        kernel: AicoreKernel,
        arg: DevicePtr,
    ) -> Result<(), DeviceError> {
        self.stream(stream)?.enqueue(Op::Aicore { kernel, arg })
    }

    fn launch_aicpu(
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
        self.stream(stream)?.enqueue(Op::Aicpu {
            kernel,
            arg,
            threads,
        })
    }

    fn query_stream(&self, stream: StreamId) -> Result<bool, DeviceError> {
        Ok(self.stream(stream)?.is_idle())
    }

    fn synchronize_stream(&self, stream: StreamId, timeout: Duration) -> Result<(), DeviceError> {
        if timeout.is_zero() {
            return Err(DeviceError::ZeroTimeout);
        }
        self.stream(stream)?.synchronize(timeout)
    }

    fn create_event(&self) -> Result<EventId, DeviceError> {
        let id = EventId(self.next_handle.fetch_add(1, Ordering::Relaxed));
        self.events.lock().insert(id.0, Arc::new(Event::default()));
        Ok(id)
    }

    fn destroy_event(&self, event: EventId) -> Result<(), DeviceError> {
        self.events
            .lock()
            .remove(&event.0)
            .map(drop)
            .ok_or(DeviceError::UnknownEvent(event))
    }

    fn record_event(&self, event: EventId, stream: StreamId) -> Result<(), DeviceError> {
        let e = self.event(event)?;
        let s = self.stream(stream)?;
        let seq = e.begin_record();
        s.enqueue(Op::Record { event: e, seq })
    }

    fn query_event(&self, event: EventId) -> Result<EventStatus, DeviceError> {
        Ok(self.event(event)?.status())
    }

    fn synchronize_event(&self, event: EventId, timeout: Duration) -> Result<(), DeviceError> {
        if timeout.is_zero() {
            return Err(DeviceError::ZeroTimeout);
        }
        let e = self.event(event)?;
        let target = e.target();
        if e.wait_until(target, Some(Instant::now() + timeout)) {
            Ok(())
        } else {
            Err(DeviceError::Timeout(timeout))
        }
    }

    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<(), DeviceError> {
        let e = self.event(event)?;
        let s = self.stream(stream)?;
        let seq = e.target();
        s.enqueue(Op::Wait { event: e, seq })
    }
}

impl Drop for SimDevice {
    fn drop(&mut self) {
        // Streams first: they hold the pools and may still be running a kernel.
        self.streams.lock().clear();
    }
}
