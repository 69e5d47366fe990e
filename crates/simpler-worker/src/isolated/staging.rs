//! The staging pool of an [`IsolatedChip`](super::IsolatedChip): persistent device memory
//! of its chip through which a level-2 run's host tensors travel (copied in before the
//! chip task, copied back after it), kept between runs (`docs/l3-worker.md` §9).
//!
//! A run takes one slot per host tensor, all distinct, each the smallest free slot that
//! holds the tensor's bytes, and allocates a new slot (rounded up to [`SLOT_ALIGN`]) only
//! when none fits. Runs of one chip never overlap on it (a run's tasks start once the run
//! before is over), so consecutive runs share slots freely. A slot no run used in the last
//! [`KEPT_RUNS`] runs is evicted: the pool holds what the last two runs needed, no more.
//! This module only chooses; the caller allocates (through the engine) and frees the
//! evicted slots with `orch.free`, which waits for the tasks still naming them.

use crate::tensor::{Memory, Tensor};
use crate::WorkerError;

/// Slots are allocated in multiples of this many bytes, so that tensors of nearly one
/// size share them.
pub(crate) const SLOT_ALIGN: u64 = 4096;

/// A slot stays while one of this many most recent runs used it.
pub(crate) const KEPT_RUNS: u64 = 2;

struct Slot {
    /// The whole allocation, as a `u8` tensor of `cap` elements.
    tensor: Tensor,
    cap: u64,
    /// The last run that took it.
    used: u64,
}

/// The pool (see the module docs).
#[derive(Default)]
pub(crate) struct Staging {
    runs: u64,
    slots: Vec<Slot>,
}

impl Staging {
    /// Starts a run: its number, which [`take`](Staging::take) and
    /// [`evict`](Staging::evict) are given.
    pub(crate) fn begin(&mut self) -> u64 {
        self.runs += 1;
        self.runs
    }

    /// A slot of at least `need` bytes for run `run`, not yet taken by it: the smallest
    /// free one, or a new one of `need` rounded up to [`SLOT_ALIGN`] from `alloc`. Returns
    /// the whole slot (a `u8` tensor of device memory).
    ///
    /// # Errors
    /// `alloc`'s.
    pub(crate) fn take(
        &mut self,
        run: u64,
        need: u64,
        alloc: impl FnOnce(u64) -> Result<Tensor, WorkerError>,
    ) -> Result<Tensor, WorkerError> {
        let fitting = self
            .slots
            .iter_mut()
            .filter(|s| s.used != run && s.cap >= need)
            .min_by_key(|s| s.cap);
        if let Some(slot) = fitting {
            slot.used = run;
            return Ok(slot.tensor.clone());
        }
        let cap = need.div_ceil(SLOT_ALIGN).saturating_mul(SLOT_ALIGN);
        let tensor = alloc(cap)?;
        debug_assert!(matches!(tensor.memory(), Memory::Child(_)));
        self.slots.push(Slot {
            tensor: tensor.clone(),
            cap,
            used: run,
        });
        Ok(tensor)
    }

    /// Removes the slots none of the last [`KEPT_RUNS`] runs (up to `run`) took, and returns
    /// them for the caller to free.
    pub(crate) fn evict(&mut self, run: u64) -> Vec<Tensor> {
        let oldest_kept = run.saturating_sub(KEPT_RUNS - 1);
        let mut evicted = Vec::new();
        self.slots.retain(|s| {
            let keep = s.used >= oldest_kept;
            if !keep {
                evicted.push(s.tensor.clone());
            }
            keep
        });
        evicted
    }

    /// Slots held.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of device memory held.
    pub(crate) fn bytes(&self) -> u64 {
        self.slots.iter().map(|s| s.cap).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::ChildAllocation;
    use simpler_abi::DataType;
    use simpler_device::DevicePtr;

    fn fake(next: &mut u64) -> impl FnMut(u64) -> Result<Tensor, WorkerError> + '_ {
        move |n| {
            *next += 1 << 20;
            let c = ChildAllocation {
                worker: 0,
                ptr: DevicePtr::from_raw(*next),
                nbytes: n,
                generation: 0,
            };
            Tensor::new(Memory::Child(c), &[n], DataType::Uint8)
        }
    }

    fn addr(t: &Tensor) -> u64 {
        match t.memory() {
            Memory::Child(c) => c.ptr.addr(),
            Memory::Host(_) => unreachable!(),
        }
    }

    #[test]
    fn slots_are_distinct_within_a_run_and_shared_across_runs() {
        let mut next = 0;
        let mut pool = Staging::default();
        let r1 = pool.begin();
        let a = pool.take(r1, 100, fake(&mut next)).unwrap();
        let b = pool.take(r1, 100, fake(&mut next)).unwrap();
        assert_ne!(addr(&a), addr(&b), "one slot per tensor of a run");
        assert_eq!(a.nbytes(), SLOT_ALIGN, "rounded up");
        assert!(pool.evict(r1).is_empty());
        // The next run of the same shapes allocates nothing.
        let r2 = pool.begin();
        let a2 = pool.take(r2, 4000, |_| panic!("no allocation")).unwrap();
        let b2 = pool.take(r2, 1, |_| panic!("no allocation")).unwrap();
        assert_eq!([addr(&a2), addr(&b2)], [addr(&a), addr(&b)]);
        assert_eq!((pool.len(), pool.bytes()), (2, 2 * SLOT_ALIGN));
    }

    #[test]
    fn the_smallest_fitting_slot_is_taken_and_unused_slots_are_evicted_after_two_runs() {
        let mut next = 0;
        let mut pool = Staging::default();
        let r1 = pool.begin();
        let big = pool.take(r1, 3 * SLOT_ALIGN, fake(&mut next)).unwrap();
        let small = pool.take(r1, 10, fake(&mut next)).unwrap();
        let r2 = pool.begin();
        assert_eq!(
            addr(&pool.take(r2, 5, fake(&mut next)).unwrap()),
            addr(&small)
        );
        assert!(pool.evict(r2).is_empty(), "run 1 is among the last two");
        let r3 = pool.begin();
        let again = pool.take(r3, 5, fake(&mut next)).unwrap();
        assert_eq!(addr(&again), addr(&small));
        let evicted = pool.evict(r3);
        assert_eq!(evicted.len(), 1);
        assert_eq!(addr(&evicted[0]), addr(&big), "unused in runs 2 and 3");
        assert_eq!(pool.len(), 1);
        // A failed allocation takes nothing.
        let r4 = pool.begin();
        let err = pool
            .take(r4, 1 << 30, |_| {
                Err(WorkerError::InvalidState("full".into()))
            })
            .unwrap_err();
        assert_eq!(err.kind(), "INVALID_STATE");
        assert_eq!(pool.len(), 1);
    }
}
