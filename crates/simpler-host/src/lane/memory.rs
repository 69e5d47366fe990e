//! Device memory the worker's `malloc` handed out, and the check of in-place device tensors
//! against it.
//!
//! Every allocation made through the worker's `ChipWorker::malloc` is
//! recorded here (base address and size, bytes). A run's [`OwnedArg::Device`] tensor must lie
//! inside one live allocation — its first byte and its last — or the submit is refused with
//! [`HostError::InvalidDevicePointer`] naming the argument. The lane refuses to free an
//! allocation a queued or running run covers (or one a run given up on may still touch):
//! that check is the lane's, over the [`DeviceRange`]s its runs keep. This module records
//! and checks; it never allocates or frees device memory itself.
//!
//! [`OwnedArg::Device`]: crate::OwnedArg::Device

use std::collections::BTreeMap;

use simpler_device::DevicePtr;

use crate::args::OwnedArg;
use crate::signature::Signature;
use crate::HostError;

use super::LaneEngine;

/// A byte range of device memory, `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeviceRange {
    /// First byte.
    pub(crate) start: u64,
    /// One past the last byte.
    pub(crate) end: u64,
}

impl DeviceRange {
    /// Whether the two ranges share a byte.
    pub(crate) fn overlaps(&self, other: &DeviceRange) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// The live allocations of one worker, by base address, and which of them are imported
/// comm windows (memory the worker did not allocate and never frees).
#[derive(Debug, Default)]
pub(crate) struct DeviceMemory {
    live: BTreeMap<u64, u64>,
    windows: std::collections::BTreeSet<u64>,
}

impl DeviceMemory {
    /// Records an allocation of `size` bytes at `ptr`.
    pub(crate) fn record(&mut self, ptr: DevicePtr, size: u64) {
        self.live.insert(ptr.addr(), size);
    }

    /// The allocation whose base is `ptr`, if this worker made it.
    pub(crate) fn allocation(&self, ptr: DevicePtr) -> Option<DeviceRange> {
        self.live.get(&ptr.addr()).map(|&size| DeviceRange {
            start: ptr.addr(),
            end: ptr.addr() + size,
        })
    }

    /// Forgets the allocation at `ptr` (it was freed, or the window released).
    pub(crate) fn forget(&mut self, ptr: DevicePtr) {
        self.live.remove(&ptr.addr());
        self.windows.remove(&ptr.addr());
    }

    /// Records an imported window of `size` bytes at `ptr`: device tensors may lie in it,
    /// like in an allocation, but `free` refuses it.
    pub(crate) fn record_window(&mut self, ptr: DevicePtr, size: u64) {
        self.live.insert(ptr.addr(), size);
        self.windows.insert(ptr.addr());
    }

    /// True when `range` shares a byte with a live allocation or window.
    pub(crate) fn overlapping(&self, range: &DeviceRange) -> bool {
        self.live.range(..range.end).any(|(&base, &size)| {
            DeviceRange {
                start: base,
                end: base + size,
            }
            .overlaps(range)
        })
    }

    /// True when `ptr` is the base of an imported window.
    pub(crate) fn is_window(&self, ptr: DevicePtr) -> bool {
        self.windows.contains(&ptr.addr())
    }

    /// The live allocation or window whose range holds `[ptr, ptr + len)`, if any.
    pub(crate) fn window_holding(&self, ptr: DevicePtr, len: u64) -> Option<DeviceRange> {
        let (&base, &size) = self.live.range(..=ptr.addr()).next_back()?;
        let end = ptr.addr().checked_add(len)?;
        (self.windows.contains(&base) && end <= base + size).then_some(DeviceRange {
            start: base,
            end: base + size,
        })
    }

    /// The ranges of a run's device tensors (signature order), each checked with
    /// [`check_tensor`](DeviceMemory::check_tensor).
    ///
    /// # Errors
    /// [`HostError::InvalidDevicePointer`] naming the first tensor outside the allocations.
    pub(crate) fn check_device_args(
        &self,
        signature: &Signature,
        args: &[OwnedArg],
    ) -> Result<Vec<DeviceRange>, HostError> {
        let mut ranges = Vec::new();
        for (spec, arg) in signature.args.iter().zip(args) {
            if let OwnedArg::Device { ptr, shape, dtype } = arg {
                // The argument check proved the size fits in 64 bits.
                let bytes = shape
                    .iter()
                    .try_fold(dtype.size_bytes() as u64, |n, &d| n.checked_mul(d))
                    .unwrap_or(u64::MAX);
                ranges.push(self.check_tensor(&spec.name, *ptr, bytes)?);
            }
        }
        Ok(ranges)
    }

    /// The range of a device tensor of `bytes` bytes at `ptr`, passed as argument `arg`,
    /// provided it lies inside one live allocation.
    ///
    /// # Errors
    /// [`HostError::InvalidDevicePointer`] naming `arg`: the pointer is in no live allocation
    /// of this worker, or the tensor runs past the end of the one it starts in.
    pub(crate) fn check_tensor(
        &self,
        arg: &str,
        ptr: DevicePtr,
        bytes: u64,
    ) -> Result<DeviceRange, HostError> {
        let bad = |reason: String| HostError::InvalidDevicePointer {
            arg: arg.into(),
            ptr: ptr.addr(),
            bytes,
            reason,
        };
        let Some((&base, &size)) = self.live.range(..=ptr.addr()).next_back() else {
            return Err(bad(
                "is not inside any live allocation made by this worker's malloc".into(),
            ));
        };
        let end = base + size;
        if ptr.addr() >= end {
            return Err(bad(
                "is not inside any live allocation made by this worker's malloc".into(),
            ));
        }
        match ptr.addr().checked_add(bytes) {
            Some(tensor_end) if tensor_end <= end => Ok(DeviceRange {
                start: ptr.addr(),
                end: tensor_end,
            }),
            _ => Err(bad(format!(
                "runs past the end of its allocation ({size} bytes at {base:#x}) by {} bytes",
                ptr.addr().saturating_add(bytes) - end
            ))),
        }
    }
}

impl LaneEngine {
    /// How many runs use `allocation`: runs in the lane whose device tensors overlap it, and
    /// runs given up on that the device may still be running.
    pub(super) fn runs_using(&self, allocation: &DeviceRange) -> usize {
        let overlaps = |ranges: &[DeviceRange]| ranges.iter().any(|r| r.overlaps(allocation));
        let in_lane = self
            .queue
            .phases()
            .into_iter()
            .filter_map(|(d, _)| self.queue.get(d))
            .filter(|run| overlaps(&run.request.device_ranges))
            .count();
        let retained = self
            .retained_device_ranges
            .iter()
            .filter(|ranges| overlaps(ranges))
            .count();
        in_lane + retained
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_tensor_must_lie_inside_one_live_allocation() {
        let mut m = DeviceMemory::default();
        m.record(DevicePtr::from_raw(0x1000), 256);
        m.record(DevicePtr::from_raw(0x2000), 64);
        // (pointer, bytes, accepted)
        let rows = [
            (0x1000, 256, true),
            (0x1040, 64, true),
            (0x2000, 64, true),
            (0x1000, 257, false),
            (0x10ff, 2, false),
            (0x0fff, 1, false),
            (0x1100, 1, false),
            (0x3000, 4, false),
            (0x2000, u64::MAX, false),
        ];
        for (ptr, bytes, ok) in rows {
            let r = m.check_tensor("x", DevicePtr::from_raw(ptr), bytes);
            assert_eq!(r.is_ok(), ok, "{ptr:#x} + {bytes}: {r:?}");
            if let Err(e) = r {
                assert!(matches!(&e, HostError::InvalidDevicePointer { arg, .. } if arg == "x"));
                assert!(e.to_string().contains("argument `x`"), "{e}");
            }
        }
        m.forget(DevicePtr::from_raw(0x2000));
        assert!(m.check_tensor("y", DevicePtr::from_raw(0x2000), 4).is_err());
        assert_eq!(
            m.allocation(DevicePtr::from_raw(0x1000)).map(|r| r.end),
            Some(0x1100)
        );
        assert_eq!(
            m.allocation(DevicePtr::from_raw(0x1040)),
            None,
            "not a base"
        );
    }

    #[test]
    fn ranges_overlap_only_when_they_share_a_byte() {
        let r = |start, end| DeviceRange { start, end };
        assert!(r(0, 10).overlaps(&r(9, 12)));
        assert!(!r(0, 10).overlaps(&r(10, 12)));
        assert!(r(5, 6).overlaps(&r(0, 10)));
    }
}
