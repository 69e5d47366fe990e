//! A process-wide table of slots that a signal handler can read without taking a lock or
//! allocating.
//!
//! Writers ([`Slab::claim`], [`Slab::release`]) serialize on a mutex that the handler never
//! takes; readers ([`Slab::get`], [`Slab::scan`]) only load atomics. Slots live in chunks of
//! [`CHUNK`], allocated on first use and never freed, so a reference to a slot stays valid
//! for the life of the process; a slot's fields are atomics its owner publishes.
//!
//! This module owns the table's memory and nothing else; what a slot means is its user's.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Slots per chunk.
pub(crate) const CHUNK: usize = 256;
/// Most chunks: the table holds at most `CHUNK * MAX_CHUNKS` (1,048,576) slots.
const MAX_CHUNKS: usize = 4096;

/// The table (a `static`).
pub(crate) struct Slab<T: 'static> {
    /// Chunk `c` holds slots `c * CHUNK ..`; null until first used.
    chunks: [AtomicPtr<T>; MAX_CHUNKS],
    /// Slots handed out so far: readers look at `0..high`.
    high: AtomicUsize,
    /// Released slots, reused before new ones.
    free: Mutex<Vec<usize>>,
}

impl<T: Default + Sync + 'static> Slab<T> {
    /// An empty table.
    pub(crate) const fn new() -> Slab<T> {
        Slab {
            chunks: [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_CHUNKS],
            high: AtomicUsize::new(0),
            free: Mutex::new(Vec::new()),
        }
    }

    /// A slot for the caller to fill: a released one or a fresh one (`T::default()` when
    /// fresh; a released slot holds what its last owner left, which its user resets).
    /// `None` when every slot is taken.
    pub(crate) fn claim(&'static self) -> Option<(usize, &'static T)> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let index = match free.pop() {
            Some(i) => i,
            None => {
                let i = self.high.load(Ordering::Relaxed);
                if i >= CHUNK * MAX_CHUNKS {
                    return None;
                }
                let c = &self.chunks[i / CHUNK];
                if c.load(Ordering::Relaxed).is_null() {
                    let chunk: Box<[T]> = (0..CHUNK).map(|_| T::default()).collect();
                    c.store(Box::leak(chunk).as_mut_ptr(), Ordering::Release);
                }
                self.high.store(i + 1, Ordering::Release);
                i
            }
        };
        drop(free);
        self.get(index).map(|slot| (index, slot))
    }

    /// Gives slot `index` back (its user has already marked it empty for readers).
    pub(crate) fn release(&'static self, index: usize) {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(index);
    }

    /// Slot `index`, if it was ever handed out. Lock-free.
    pub(crate) fn get(&'static self, index: usize) -> Option<&'static T> {
        if index >= self.high.load(Ordering::Acquire) {
            return None;
        }
        let chunk = self.chunks[index / CHUNK].load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        // SAFETY: a non-null chunk pointer is the start of a leaked `Box<[T]>` of `CHUNK`
        // initialized slots (published with release after it was built, read with
        // acquire), never freed or moved; `index % CHUNK < CHUNK`.
        Some(unsafe { &*chunk.add(index % CHUNK) })
    }

    /// Calls `f` on every slot ever handed out, in index order, until it returns false.
    /// Lock-free and allocation-free (a signal handler may call it).
    pub(crate) fn scan(&'static self, mut f: impl FnMut(&'static T) -> bool) {
        let high = self.high.load(Ordering::Acquire);
        for i in 0..high {
            match self.get(i) {
                Some(slot) if f(slot) => {}
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    #[test]
    fn slots_are_reused_and_scanned_across_chunks() {
        static SLAB: Slab<AtomicU64> = Slab::new();
        let mut taken = Vec::new();
        for n in 0..(CHUNK as u64 + 10) {
            let (i, slot) = SLAB.claim().unwrap();
            slot.store(n + 1, Ordering::Relaxed);
            taken.push(i);
        }
        let mut sum = 0;
        SLAB.scan(|s| {
            sum += s.load(Ordering::Relaxed);
            true
        });
        let n = CHUNK as u64 + 10;
        assert_eq!(sum, n * (n + 1) / 2, "every slot of both chunks is seen");
        SLAB.get(taken[3]).unwrap().store(0, Ordering::Relaxed);
        SLAB.release(taken[3]);
        let (again, _) = SLAB.claim().unwrap();
        assert_eq!(again, taken[3], "a released slot is handed out first");
        assert!(SLAB.get(CHUNK * 10).is_none(), "a slot never handed out");
    }
}
