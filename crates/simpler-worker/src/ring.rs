//! The heap ring behind `orch.alloc`: 4 shared heaps (one [`SharedRegion`] each, so child
//! processes see the same bytes), bump allocation with FIFO reclamation, 1024-byte
//! alignment (`docs/l3-worker.md` §6).
//!
//! Heap `i` serves the allocations made at scope depth `min(depth, 3)`. Each heap is a
//! circular byte range: allocations are carved at its head, and its tail advances only
//! over a freed block at the tail — a block freed out of order waits for the ones before
//! it. An allocation that does not fit waits for reclamation up to the deadlock timeout,
//! then fails with [`WorkerError::RingFull`]; one larger than a heap fails at once. A heap's
//! region is made on its first allocation.
//!
//! This module owns the heaps' bytes and their bookkeeping; when an allocation may be
//! reclaimed (its scope is over and so is every task naming it) is the engine's decision.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::memory::{HostMemory, SharedRef, SharedRegion};
use crate::WorkerError;

/// Heaps in the ring.
pub(crate) const HEAPS: usize = 4;

/// Alignment (and size granule) of every allocation, in bytes.
pub(crate) const ALIGN: u64 = 1024;

/// One allocation: `len` bytes at `offset` of heap `heap`'s region. Host memory a task may
/// name; a child process finds it through [`HostMemory::shared`].
pub(crate) struct HeapBlock {
    region: Arc<SharedRegion>,
    heap: usize,
    offset: u64,
    len: u64,
}

impl HeapBlock {
    /// The heap it came from.
    pub(crate) fn heap(&self) -> usize {
        self.heap
    }

    /// Its offset in the heap.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }
}

// SAFETY: `offset + len` lies inside the region (checked by `Heap::carve`), and the region
// stays mapped at the same address while this block holds it.
unsafe impl HostMemory for HeapBlock {
    fn as_ptr(&self) -> *mut u8 {
        // SAFETY: `offset` is inside the region's mapping (see above).
        unsafe { self.region.as_ptr().add(self.offset as usize) }
    }

    fn len(&self) -> usize {
        self.len as usize
    }

    fn shared(&self) -> Option<SharedRef> {
        Some(self.region.share(self.offset, self.len))
    }
}

/// One carved block of a heap, in allocation order.
#[derive(Debug)]
struct Block {
    offset: u64,
    len: u64,
    freed: bool,
}

#[derive(Default)]
struct HeapState {
    region: Option<Arc<SharedRegion>>,
    /// Live blocks, oldest (the tail) first.
    blocks: VecDeque<Block>,
}

impl HeapState {
    /// Where `len` (aligned) bytes fit in a heap of `size` bytes, if they do now.
    fn fit(&self, len: u64, size: u64) -> Option<u64> {
        let (Some(tail), Some(last)) = (self.blocks.front(), self.blocks.back()) else {
            return (len <= size).then_some(0);
        };
        let head = last.offset + last.len;
        if last.offset >= tail.offset {
            // Not wrapped: live bytes are [tail, head).
            if head + len <= size {
                Some(head)
            } else {
                (len <= tail.offset).then_some(0)
            }
        } else {
            // Wrapped: live bytes are [tail, size) and [0, head).
            (head + len <= tail.offset).then_some(head)
        }
    }
}

struct Heap {
    state: Mutex<HeapState>,
    reclaimed: Condvar,
}

/// The 4 heaps.
pub(crate) struct HeapRing {
    size: u64,
    timeout: Duration,
    heaps: [Heap; HEAPS],
}

impl HeapRing {
    /// A ring of 4 heaps of `size` bytes each (regions made on first use); an allocation
    /// waits at most `timeout` for room.
    pub(crate) fn new(size: u64, timeout: Duration) -> HeapRing {
        HeapRing {
            size,
            timeout,
            heaps: std::array::from_fn(|_| Heap {
                state: Mutex::new(HeapState::default()),
                reclaimed: Condvar::new(),
            }),
        }
    }

    /// Takes `nbytes` from heap `heap` (0..4), waiting for reclamation up to the deadlock
    /// timeout.
    ///
    /// # Errors
    /// [`WorkerError::RingFull`] when `nbytes` exceeds the heap, or nothing was reclaimed
    /// in time; [`WorkerError::InvalidState`] when the heap's shared region cannot be made.
    pub(crate) fn alloc(&self, heap: usize, nbytes: u64) -> Result<Arc<HeapBlock>, WorkerError> {
        let full = |reason: String| WorkerError::RingFull {
            ring: heap,
            nbytes,
            reason,
        };
        let len = nbytes.max(1).div_ceil(ALIGN).saturating_mul(ALIGN);
        if len > self.size {
            return Err(full(format!(
                "a heap holds {} bytes (heap_ring_size); allocate less or raise heap_ring_size",
                self.size
            )));
        }
        let h = &self.heaps[heap];
        let deadline = Instant::now() + self.timeout;
        let mut state = h.state.lock();
        let offset = loop {
            if let Some(offset) = state.fit(len, self.size) {
                break offset;
            }
            if h.reclaimed.wait_until(&mut state, deadline).timed_out()
                && state.fit(len, self.size).is_none()
            {
                return Err(full(format!(
                    "nothing was reclaimed within the deadlock timeout ({:?}): {} allocations \
                     of this heap are still live (their scope has not ended or a task naming \
                     them has not finished)",
                    self.timeout,
                    state.blocks.iter().filter(|b| !b.freed).count()
                )));
            }
        };
        let region = match &state.region {
            Some(r) => r.clone(),
            None => {
                let r = SharedRegion::new(self.size, &format!("heap{heap}")).map_err(|e| {
                    WorkerError::InvalidState(format!("heap ring {heap} cannot be mapped: {e}"))
                })?;
                let r = Arc::new(r);
                state.region = Some(r.clone());
                r
            }
        };
        state.blocks.push_back(Block {
            offset,
            len,
            freed: false,
        });
        Ok(Arc::new(HeapBlock {
            region,
            heap,
            offset,
            len: nbytes,
        }))
    }

    /// Frees the block at `offset` of heap `heap`; the tail advances over every freed block
    /// at it, and waiting allocations are woken.
    pub(crate) fn free(&self, heap: usize, offset: u64) {
        let h = &self.heaps[heap];
        let mut state = h.state.lock();
        let block = state
            .blocks
            .iter_mut()
            .find(|b| b.offset == offset && !b.freed);
        let Some(block) = block else {
            panic!("heap {heap}: no live block at offset {offset}: freed twice");
        };
        block.freed = true;
        let mut advanced = false;
        while state.blocks.front().is_some_and(|b| b.freed) {
            state.blocks.pop_front();
            advanced = true;
        }
        if advanced {
            h.reclaimed.notify_all();
        }
    }

    /// True when `addr` lies in one of the heaps' regions.
    pub(crate) fn contains(&self, addr: usize) -> bool {
        self.heaps.iter().any(|h| {
            h.state.lock().region.as_ref().is_some_and(|r| {
                let base = r.as_ptr() as usize;
                (base..base + r.len()).contains(&addr)
            })
        })
    }

    /// Live (carved, not yet reclaimed) blocks of heap `heap`.
    #[cfg(test)]
    pub(crate) fn live(&self, heap: usize) -> usize {
        self.heaps[heap].state.lock().blocks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn bump_allocation_is_aligned_and_reclaimed_in_fifo_order() {
        let ring = HeapRing::new(MIB, Duration::from_millis(50));
        let a = ring.alloc(0, 100).unwrap();
        let b = ring.alloc(0, 2000).unwrap();
        let c = ring.alloc(0, 1024).unwrap();
        assert_eq!((a.offset(), b.offset(), c.offset()), (0, 1024, 3072));
        assert_eq!(a.len(), 100);
        assert_eq!(a.as_ptr() as usize % 1024, 0);
        assert!(ring.contains(b.as_ptr() as usize));
        assert_eq!(b.shared().unwrap().offset, 1024);
        // Out of order: freeing b leaves the tail at a.
        ring.free(0, b.offset());
        assert_eq!(ring.live(0), 3);
        ring.free(0, a.offset());
        assert_eq!(ring.live(0), 1, "a's free advances the tail over b too");
        ring.free(0, c.offset());
        assert_eq!(ring.live(0), 0);
        assert_eq!(
            ring.alloc(0, 10).unwrap().offset(),
            0,
            "an empty heap starts over"
        );
        assert_eq!(ring.alloc(1, 10).unwrap().heap(), 1);
    }

    #[test]
    fn a_full_heap_wraps_after_reclamation_and_times_out_otherwise() {
        let ring = HeapRing::new(4 * ALIGN, Duration::from_millis(60));
        let a = ring.alloc(0, 2 * ALIGN).unwrap();
        let b = ring.alloc(0, ALIGN).unwrap();
        let t0 = Instant::now();
        let err = ring.alloc(0, 2 * ALIGN).err().unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(60));
        assert_eq!(err.kind(), "RING_FULL");
        assert!(err.to_string().contains("deadlock timeout"), "{err}");
        ring.free(0, a.offset());
        let c = ring.alloc(0, 2 * ALIGN).unwrap();
        assert_eq!(c.offset(), 0, "wrapped to the start");
        // Wrapped: [0, 2K) live and [2K, 3K) live; 1 K left at the end is not contiguous
        // with the start.
        assert!(ring.alloc(0, 2 * ALIGN).is_err());
        ring.free(0, b.offset());
        assert!(ring.alloc(0, 2 * ALIGN).is_ok());
        let err = ring.alloc(1, 5 * ALIGN).err().unwrap();
        assert!(err.to_string().contains("heap_ring_size"), "{err}");
    }

    #[test]
    fn a_waiting_allocation_is_served_when_the_tail_is_freed() {
        let ring = Arc::new(HeapRing::new(2 * ALIGN, Duration::from_secs(5)));
        let a = ring.alloc(2, 2 * ALIGN).unwrap();
        let r2 = ring.clone();
        let freer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            r2.free(2, 0);
        });
        let t0 = Instant::now();
        let b = ring.alloc(2, ALIGN).unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(25));
        assert_eq!(b.offset(), 0);
        freer.join().unwrap();
        drop(a);
    }
}
