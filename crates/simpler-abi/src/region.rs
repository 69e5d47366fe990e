//! The L3↔L2 region: shared memory between a level-3 orchestration on the host and a chip
//! task running on one chip (`docs/comm.md` §7), described to the chip by six 64-bit
//! scalars. This module owns the descriptor's layout and its constants; the host side is
//! `simpler_worker::WorkerChipRegion`, the chip side `simpler/region.h`.
//!
//! A region is `payload_bytes` of payload, then (64-byte aligned) `counter_bytes` of 32-bit
//! counters. One writer per 64-byte line: the host writes what the chip reads and the
//! reverse, never both in one line.

/// `magic_version`: the magic `SRGN` in the high 32 bits, the layout version (1) in the low.
pub const MAGIC_VERSION: u64 = (0x5352_474E_u64 << 32) | 1;

/// Scalars of a descriptor.
pub const DESCRIPTOR_WORDS: usize = 6;

/// Alignment of the counter area, and the size of a line with one writer.
pub const LINE_BYTES: u64 = 64;

/// A region as the chip task receives it: six `u64` scalars in this order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionDescriptor {
    /// [`MAGIC_VERSION`].
    pub magic_version: u64,
    /// The region's id on its worker, never 0.
    pub region_id: u64,
    /// Device address of the payload's first byte (the chip's address space).
    pub payload_base: u64,
    /// Payload bytes.
    pub payload_bytes: u64,
    /// Device address of the first counter, 64-byte aligned.
    pub counter_base: u64,
    /// Counter bytes, a multiple of 4 (each counter a `u32`).
    pub counter_bytes: u64,
}

crate::assert_layout!(
    RegionDescriptor,
    size = 48,
    magic_version = 0,
    region_id = 8,
    payload_base = 16,
    payload_bytes = 24,
    counter_base = 32,
    counter_bytes = 40
);

impl RegionDescriptor {
    /// The six scalars, in order.
    pub fn words(&self) -> [u64; DESCRIPTOR_WORDS] {
        [
            self.magic_version,
            self.region_id,
            self.payload_base,
            self.payload_bytes,
            self.counter_base,
            self.counter_bytes,
        ]
    }
}

/// Offset of the counter area in a region of `payload_bytes` payload: the payload rounded
/// up to [`LINE_BYTES`] (`None` on overflow).
pub const fn counter_offset(payload_bytes: u64) -> Option<u64> {
    match payload_bytes.checked_add(LINE_BYTES - 1) {
        Some(n) => Some(n / LINE_BYTES * LINE_BYTES),
        None => None,
    }
}

/// The notify ops and wait comparisons of a region's counters: the codes of
/// [`crate::comm`] (`docs/comm.md`), the same numbers `simpler/region.h` uses.
pub use crate::comm::{CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE, NOTIFY_ADD, NOTIFY_SET};

/// Whether `counter CMP value` holds, compared as unsigned `u32` (`cmp` one of comm's
/// `CMP_*` codes, re-exported here); `None` for an unknown `cmp`.
pub fn holds(counter: u32, cmp: u32, value: u32) -> Option<bool> {
    Some(match cmp {
        CMP_EQ => counter == value,
        CMP_NE => counter != value,
        CMP_GT => counter > value,
        CMP_GE => counter >= value,
        CMP_LT => counter < value,
        CMP_LE => counter <= value,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_start_on_a_line_after_the_payload() {
        assert_eq!(counter_offset(0), Some(0));
        assert_eq!(counter_offset(1), Some(64));
        assert_eq!(counter_offset(64), Some(64));
        assert_eq!(counter_offset(u64::MAX), None);
    }

    #[test]
    fn comparisons_are_unsigned() {
        assert_eq!(holds(u32::MAX, CMP_GT, 1), Some(true));
        assert_eq!(holds(3, CMP_LE, 3), Some(true));
        assert_eq!(holds(3, CMP_NE, 3), Some(false));
        assert_eq!(holds(0, 6, 0), None);
    }
}
