//! Staging buffers: the device copies of a run's host tensors, pooled per pipeline slot.
//!
//! A slot keeps the staging allocations of the runs it hosted ([`StagingPool`]) and the next
//! run it hosts reuses them: each tensor takes the smallest idle buffer that fits; when none
//! fits the pool grows (one idle buffer that is too small is freed, and one of the needed
//! size allocated), so a slot holds at most as many buffers as its largest run has tensors.
//! Buffers go back to their slot's pool only on a path that proved the device done with
//! them (a finalized run, a run that never launched); what a run given up on may still touch
//! is quarantined by the lane instead, exactly as before pooling. A failed preparation hands
//! its reused buffers back and frees the ones it allocated, so the device is left as the
//! attempt found it. A reused buffer staging an output the run does not copy in is cleared,
//! so every output starts zeroed as fresh device memory does. Pools are freed at teardown.
//!
//! A pool knows nothing of runs: whether the device is done with a buffer (pool) or may
//! still touch it (quarantine) is the lane's decision, made before a buffer is put back.

use simpler_device::{Device, DeviceError, DevicePtr};

/// One staging allocation: where it is and how many bytes it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StagingBuffer {
    /// The allocation.
    pub(crate) ptr: DevicePtr,
    /// Its size in bytes (at least the tensor staged in it).
    pub(crate) capacity: u64,
}

/// A run's staging, by argument (`None`: a scalar, or a device tensor passed in place).
pub(crate) type StagedArgs = Vec<Option<StagingBuffer>>;

/// Where a staging buffer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Taken from the slot's pool.
    Reused,
    /// Allocated by this preparation (the pool grew).
    Allocated,
}

/// The staging memory a worker holds between runs (`ChipWorker::staging_report`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagingReport {
    /// Idle staging buffers the pipeline slots keep for their next runs.
    pub pooled_buffers: usize,
    /// Bytes those buffers hold.
    pub pooled_bytes: u64,
    /// Staging buffers of runs given up on: the device may still touch them, so they are
    /// freed only after a confirmed reset (or a proof of quiescence at teardown).
    pub quarantined_buffers: usize,
}

/// One slot's idle staging buffers.
#[derive(Debug, Default)]
pub(crate) struct StagingPool {
    idle: Vec<StagingBuffer>,
}

impl StagingPool {
    /// A buffer of at least `bytes` bytes: the smallest idle one that fits, else a new
    /// allocation (after freeing the largest idle buffer, which is too small; one whose free
    /// fails stays idle).
    ///
    /// # Errors
    /// The device's allocation error (the pool is left as it was, less the freed buffer).
    pub(crate) fn take(
        &mut self,
        device: &dyn Device,
        bytes: u64,
    ) -> Result<(StagingBuffer, Origin), DeviceError> {
        let fitting = self
            .idle
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity >= bytes)
            .min_by_key(|(_, b)| b.capacity)
            .map(|(i, _)| i);
        if let Some(i) = fitting {
            return Ok((self.idle.swap_remove(i), Origin::Reused));
        }
        let largest = self
            .idle
            .iter()
            .enumerate()
            .max_by_key(|(_, b)| b.capacity)
            .map(|(i, _)| i);
        if let Some(i) = largest {
            let small = self.idle.swap_remove(i);
            if device.free(small.ptr).is_err() {
                self.idle.push(small);
            }
        }
        let ptr = device.malloc(bytes)?;
        Ok((
            StagingBuffer {
                ptr,
                capacity: bytes,
            },
            Origin::Allocated,
        ))
    }

    /// Returns buffers the device is proven done with.
    pub(crate) fn put_back(&mut self, buffers: impl IntoIterator<Item = StagingBuffer>) {
        self.idle.extend(buffers);
    }

    /// Frees every idle buffer (teardown); one whose free fails is kept for a retry. True
    /// when none is left.
    pub(crate) fn release(&mut self, device: &dyn Device) -> bool {
        self.idle.retain(|b| device.free(b.ptr).is_err());
        self.idle.is_empty()
    }

    /// Idle buffers.
    pub(crate) fn len(&self) -> usize {
        self.idle.len()
    }

    /// Bytes held by idle buffers.
    pub(crate) fn bytes(&self) -> u64 {
        self.idle.iter().map(|b| b.capacity).sum()
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use simpler_device::sim::SimDevice;
    use simpler_device::Topology;

    fn device() -> SimDevice {
        SimDevice::new(Topology {
            clusters: 1,
            aicpu_threads: 2,
        })
        .unwrap()
    }

    #[test]
    fn the_smallest_fitting_buffer_is_reused_and_the_pool_grows_by_replacing_a_small_one() {
        let dev = device();
        let mut pool = StagingPool::default();
        let (a, o) = pool.take(&dev, 64).unwrap();
        assert_eq!(o, Origin::Allocated);
        let (b, _) = pool.take(&dev, 256).unwrap();
        pool.put_back([a, b]);
        assert_eq!((pool.len(), pool.bytes()), (2, 320));
        // 48 bytes fit both; the smaller one is taken.
        let (c, o) = pool.take(&dev, 48).unwrap();
        assert_eq!((c, o), (a, Origin::Reused));
        pool.put_back([c]);
        // 1 KiB fits neither: the largest idle buffer (256) is freed, a new one allocated.
        let live = dev.live_allocations();
        let (d, o) = pool.take(&dev, 1024).unwrap();
        assert_eq!((d.capacity, o), (1024, Origin::Allocated));
        assert_eq!(dev.live_allocations(), live, "one freed, one allocated");
        assert_eq!(pool.len(), 1, "the 64-byte buffer is still idle");
        pool.put_back([d]);
        assert!(pool.release(&dev));
        assert_eq!(dev.live_allocations(), 0);
    }
}
