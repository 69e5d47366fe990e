//! Task rings and heap rings (`docs/chip-runtime.md`, rings).
//!
//! Each of the four rings has a window of task slots (a power of two; slot = local index &
//! (window − 1)), allocated in chunks on first use so a short run touches little memory, and
//! a heap from which runtime-allocated outputs are carved, one packed block per task,
//! reclaimed in task order as the ring's oldest tasks are consumed. Only the orchestrator
//! thread allocates and reclaims; other threads only look slots up.
//!
//! A dropped ring gives its full-size chunks, recycled ([`Task::recycle`]), to a
//! process-wide spare list that later runs' rings take from before they allocate: a run
//! then starts on memory already touched (no page faults, no zeroing) whose slots keep
//! their vectors' capacity.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use super::task::{Task, TaskId};

/// Number of rings.
pub const RING_COUNT: usize = 4;
/// Alignment of output blocks in a heap ring, bytes.
pub const HEAP_ALIGN: u64 = 1024;
/// Most slots per chunk.
const CHUNK: usize = 1024;
/// Most spare chunks kept for later runs (64 Ki slots); beyond it a dropped ring frees its
/// chunks.
const SPARE_LIMIT: usize = 64;

/// Recycled full-size chunks of finished runs' rings.
static SPARE_CHUNKS: parking_lot::Mutex<Vec<Box<[Task]>>> = parking_lot::Mutex::new(Vec::new());

/// One ring's task slots.
pub(crate) struct TaskRing {
    pub(crate) window: u32,
    chunk: usize,
    /// The slots, `chunk` per entry, each allocated on first use.
    chunks: Box<[OnceLock<Box<[Task]>>]>,
    /// Next local index to hand out (orchestrator only; atomic for readers' diagnostics).
    pub(crate) next: AtomicU32,
    /// Oldest local index not yet reclaimed.
    pub(crate) last_alive: AtomicU32,
    /// Live dependency-pool entries held by this ring's tasks.
    pub(crate) edges_live: AtomicU32,
    pub(crate) dep_pool: u32,
}

impl TaskRing {
    pub(crate) fn new(window: u32, dep_pool: u32) -> TaskRing {
        debug_assert!(window.is_power_of_two());
        let chunk = CHUNK.min(window as usize);
        TaskRing {
            window,
            chunk,
            chunks: (0..window as usize / chunk)
                .map(|_| OnceLock::new())
                .collect(),
            next: AtomicU32::new(0),
            last_alive: AtomicU32::new(0),
            edges_live: AtomicU32::new(0),
            dep_pool,
        }
    }

    fn index(&self, local: u32) -> (usize, usize) {
        let slot = (local & (self.window - 1)) as usize;
        (slot / self.chunk, slot % self.chunk)
    }

    /// Makes sure the slot of `local` is allocated (orchestrator only).
    pub(crate) fn ensure(&self, local: u32) {
        let (c, _) = self.index(local);
        self.chunks[c].get_or_init(|| {
            let spare = (self.chunk == CHUNK)
                .then(|| SPARE_CHUNKS.lock().pop())
                .flatten();
            spare.unwrap_or_else(|| (0..self.chunk).map(|_| Task::default()).collect())
        });
    }

    /// The slot of `local`, which must have been [`ensure`](TaskRing::ensure)d.
    pub(crate) fn slot(&self, local: u32) -> &Task {
        match self.try_slot(local) {
            Some(task) => task,
            None => panic!("task slot {local} used before allocation"),
        }
    }

    /// The slot of `local` if its chunk has been allocated.
    pub(crate) fn try_slot(&self, local: u32) -> Option<&Task> {
        let (c, i) = self.index(local);
        self.chunks[c].get().map(|chunk| &chunk[i])
    }

    /// True when `local` has been handed out (it may have been reclaimed since).
    pub(crate) fn issued(&self, local: u32) -> bool {
        // Local indices count up from 0 for the whole run and never wrap (2^32 tasks).
        local < self.next.load(Ordering::Relaxed)
    }

    /// Tasks allocated and not yet reclaimed.
    pub(crate) fn alive(&self) -> u32 {
        self.next
            .load(Ordering::Relaxed)
            .wrapping_sub(self.last_alive.load(Ordering::Relaxed))
    }

    /// True when one more task fits (`alive < window − 1`).
    pub(crate) fn has_room(&self) -> bool {
        self.alive() < self.window - 1
    }
}

impl Drop for TaskRing {
    fn drop(&mut self) {
        let mut chunks: Vec<Box<[Task]>> = self
            .chunks
            .iter_mut()
            .filter_map(OnceLock::take)
            .filter(|c| c.len() == CHUNK)
            .collect();
        let room = SPARE_LIMIT.saturating_sub(SPARE_CHUNKS.lock().len());
        chunks.truncate(room);
        for chunk in chunks.iter_mut() {
            chunk.iter_mut().for_each(Task::recycle);
        }
        let mut spare = SPARE_CHUNKS.lock();
        let room = SPARE_LIMIT.saturating_sub(spare.len());
        spare.extend(chunks.into_iter().take(room));
    }
}

/// One ring's output heap: blocks handed out in task order and reclaimed in task order.
pub(crate) struct HeapRing {
    pub(crate) base: u64,
    pub(crate) size: u64,
    /// Live blocks: (task id, start offset, end offset), oldest first.
    blocks: VecDeque<(TaskId, u64, u64)>,
}

impl HeapRing {
    pub(crate) fn new(base: u64, size: u64) -> HeapRing {
        HeapRing {
            base,
            size,
            blocks: VecDeque::new(),
        }
    }

    /// Carves `bytes` (a multiple of [`HEAP_ALIGN`]) for `task`; `None` if it does not fit now.
    pub(crate) fn alloc(&mut self, task: TaskId, bytes: u64) -> Option<u64> {
        let offset = self.place(bytes)?;
        self.blocks.push_back((task, offset, offset + bytes));
        Some(self.base + offset)
    }

    fn place(&self, bytes: u64) -> Option<u64> {
        let (Some(&(_, tail, _)), Some(&(_, _, top))) = (self.blocks.front(), self.blocks.back())
        else {
            return (bytes <= self.size).then_some(0);
        };
        if top > tail {
            // Not wrapped: room at the end, else at the start before the tail.
            if self.size - top >= bytes {
                Some(top)
            } else if tail >= bytes {
                Some(0)
            } else {
                None
            }
        } else {
            // Wrapped (or one block exactly filling): room between top and tail.
            (tail - top >= bytes && top != tail).then_some(top)
        }
    }

    /// True when `bytes` would fit now.
    pub(crate) fn fits(&self, bytes: u64) -> bool {
        self.place(bytes).is_some()
    }

    /// The task owning the oldest live block, which must go before any other block can.
    pub(crate) fn oldest_task(&self) -> Option<TaskId> {
        self.blocks.front().map(|&(t, _, _)| t)
    }

    /// Releases the blocks of tasks that `reclaimed` says are gone, oldest first.
    pub(crate) fn release_while(&mut self, reclaimed: impl Fn(TaskId) -> bool) {
        while let Some(&(t, _, _)) = self.blocks.front() {
            if !reclaimed(t) {
                break;
            }
            self.blocks.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_ring_wraps_and_reclaims_in_order() {
        let mut h = HeapRing::new(0x10000, 4096);
        assert_eq!(h.alloc(1, 2048), Some(0x10000));
        assert_eq!(h.alloc(2, 1024), Some(0x10800));
        assert_eq!(
            h.alloc(3, 2048),
            None,
            "no room at the end nor before the tail"
        );
        assert_eq!(h.oldest_task(), Some(1));
        h.release_while(|t| t == 1);
        assert_eq!(h.oldest_task(), Some(2));
        assert_eq!(h.alloc(3, 2048), Some(0x10000), "wraps to the start");
        assert_eq!(
            h.alloc(4, 1024),
            None,
            "wrapped: only the gap before the tail counts"
        );
        h.release_while(|t| t <= 2);
        assert_eq!(h.alloc(4, 1024), Some(0x10800));
        assert_eq!(h.alloc(5, 8192), None);
        h.release_while(|_| true);
        assert_eq!(h.alloc(6, 4096), Some(0x10000), "empty heap restarts at 0");
    }

    #[test]
    fn task_ring_room_and_slots() {
        let r = TaskRing::new(8, 16);
        assert!(r.has_room());
        r.next.store(7, Ordering::Relaxed);
        assert!(!r.has_room(), "at most window - 1 tasks alive");
        r.ensure(9);
        assert!(
            std::ptr::eq(r.slot(9), r.slot(1)),
            "slot = local & (window - 1)"
        );
    }
}
