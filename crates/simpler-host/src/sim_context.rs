//! Caller contexts on the sim platform (`docs/lane.md` §12): what a framework's current
//! device context is on hardware — a device, named by a nonzero context generation — so
//! that a borrowed worker ([`ChipWorker::borrowed`]) has something to borrow without an
//! accelerator. A process-wide table maps each live context's generation to its sim
//! device; the C host ABI and the Python package look generations up here, so both attach
//! to a caller context the same way.
//!
//! This module owns the table and the contexts' lifetimes only; it never drives a device
//! and never touches a worker's lane.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use simpler_device::sim::{SimDevice, SimOptions};
use simpler_device::{Device, Topology};

use crate::lifecycle::{enter_context, ContextGuard};
use crate::{ChipWorker, HostError, WorkerConfig};

/// Generations handed out to sim contexts start here, far from the small numbers a caller
/// picks for its own contexts in tests.
const FIRST_GENERATION: u64 = 1 << 40;

static NEXT_GENERATION: AtomicU64 = AtomicU64::new(FIRST_GENERATION);

fn table() -> &'static Mutex<HashMap<u64, Weak<SimDevice>>> {
    static TABLE: std::sync::OnceLock<Mutex<HashMap<u64, Weak<SimDevice>>>> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// A caller-owned device context on the sim platform: a sim device and the generation that
/// names it. Borrowed workers attach to it by generation
/// ([`ChipWorker::borrowed_sim_context`]); the caller creates streams on
/// [`device`](SimContext::device) and makes the context current on a thread with
/// [`enter`](SimContext::enter). Dropping it removes the generation from the table (a worker
/// already attached keeps the device alive).
pub struct SimContext {
    generation: NonZeroU64,
    device: Arc<SimDevice>,
}

impl std::fmt::Debug for SimContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimContext")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl SimContext {
    /// Starts a sim device of `topology` built as `options` say and registers it under a
    /// fresh generation (never one in use in this process).
    ///
    /// # Errors
    /// [`HostError::Device`] when the sim device cannot be started (a topology out of
    /// range).
    pub fn create(topology: Topology, options: SimOptions) -> Result<SimContext, HostError> {
        let device = Arc::new(SimDevice::with_options(topology, options).map_err(
            HostError::device("starting the sim device of a caller context"),
        )?);
        let raw = NEXT_GENERATION.fetch_add(1, Ordering::AcqRel);
        let generation = NonZeroU64::new(raw).expect("generations start above zero");
        table().lock().insert(raw, Arc::downgrade(&device));
        Ok(SimContext { generation, device })
    }

    /// The context's generation (what `borrowed_context_generation` names).
    pub fn generation(&self) -> NonZeroU64 {
        self.generation
    }

    /// The context's device: the caller's streams, events and host functions live here.
    pub fn device(&self) -> &Arc<SimDevice> {
        &self.device
    }

    /// Makes this context the calling thread's current one until the guard is dropped.
    pub fn enter(&self) -> ContextGuard {
        enter_context(self.generation)
    }
}

impl Drop for SimContext {
    fn drop(&mut self) {
        table().lock().remove(&self.generation.get());
    }
}

/// The sim device of the live caller context `generation`, if there is one.
pub fn sim_context_device(generation: NonZeroU64) -> Option<Arc<SimDevice>> {
    table()
        .lock()
        .get(&generation.get())
        .and_then(Weak::upgrade)
}

impl ChipWorker {
    /// A borrowed worker ([`ChipWorker::borrowed`]) on the sim caller context
    /// `generation` (a live [`SimContext`]), which must be current on the calling thread.
    ///
    /// # Errors
    /// [`HostError::ExecutionContextRefused`] naming the generation when no live sim context
    /// has it, or when it is not current on this thread; otherwise as
    /// [`ChipWorker::borrowed`].
    pub fn borrowed_sim_context(
        config: WorkerConfig,
        generation: NonZeroU64,
    ) -> Result<ChipWorker, HostError> {
        let Some(device) = sim_context_device(generation) else {
            return Err(HostError::ExecutionContextRefused(format!(
                "borrowed_context_generation {generation} names no live caller context on \
                 the sim platform (create one first: SimContext::create, \
                 simpler_sim_context_create, simpler.sim.Context)"
            )));
        };
        ChipWorker::borrowed(config, device as Arc<dyn Device>, generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology() -> Topology {
        Topology {
            clusters: 1,
            aicpu_threads: 2,
        }
    }

    #[test]
    fn a_generation_names_its_device_until_the_context_is_dropped() {
        let a = SimContext::create(topology(), SimOptions::default()).unwrap();
        let b = SimContext::create(topology(), SimOptions::default()).unwrap();
        assert_ne!(a.generation(), b.generation());
        let found = sim_context_device(a.generation()).expect("a is live");
        assert!(Arc::ptr_eq(&found, a.device()));
        drop(found);
        let g = a.generation();
        drop(a);
        assert!(sim_context_device(g).is_none());
        assert!(sim_context_device(b.generation()).is_some());
    }

    #[test]
    fn a_borrowed_worker_needs_a_live_and_current_context() {
        let unknown = NonZeroU64::new(7).unwrap();
        let e = ChipWorker::borrowed_sim_context(WorkerConfig::default(), unknown).unwrap_err();
        assert!(
            matches!(&e, HostError::ExecutionContextRefused(m) if m.contains('7')),
            "{e}"
        );
        let ctx = SimContext::create(topology(), SimOptions::default()).unwrap();
        // Live but not current on this thread.
        let e = ChipWorker::borrowed_sim_context(WorkerConfig::default(), ctx.generation())
            .unwrap_err();
        assert!(matches!(e, HostError::ExecutionContextRefused(_)), "{e}");
        let _current = ctx.enter();
        let w = ChipWorker::borrowed_sim_context(WorkerConfig::default(), ctx.generation())
            .expect("current and live");
        assert_eq!(w.latched_mode(), Some(crate::ExecutionMode::Kernel));
        w.close().unwrap();
    }
}
