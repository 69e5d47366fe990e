//! How the AICPU threads of a run come to share its [`RunShared`]: the thread that builds
//! the state publishes it through the run's state word ([`RunShared::share`]), the others
//! find it there ([`RunShared::find`]), and the last thread out releases it
//! ([`RunShared::release`]). The word holds a raw `Arc` pointer, so this is the one place
//! that turns the word's value back into a reference; the word itself is reached through
//! [`RunMemory::state_word`].
//!
//! This module must not build or read the state: only hand it over.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::state::RunShared;
use crate::devmem::RunMemory;

impl RunShared {
    /// Publishes the run's shared state through the state word (release); returns this
    /// thread's reference to it. The word holds a reference of its own until
    /// [`release`](RunShared::release).
    pub(crate) fn share(self, mem: &RunMemory) -> Arc<RunShared> {
        let state = Arc::new(self);
        let p = Arc::into_raw(state.clone());
        mem.state_word().store(p as u64, Ordering::Release);
        state
    }

    /// The state published through the state word that passes `accept` (this run's), once
    /// it is there; calls `wait` between looks. A state a reset left behind (its threads
    /// unwound without [`release`](RunShared::release)) stays allocated and is passed over.
    pub(crate) fn find(
        mem: &RunMemory,
        accept: impl Fn(&RunShared) -> bool,
        mut wait: impl FnMut(),
    ) -> Arc<RunShared> {
        loop {
            let p = mem.state_word().load(Ordering::Acquire) as *const RunShared;
            // SAFETY: a non-zero word points to a `RunShared` published by `share`, whose
            // own reference is released only by `release`, after the word is swapped to
            // zero and every thread of its run has counted out — which this thread, if the
            // state is its run's, has not — or never (a reset left it).
            if !p.is_null() && accept(unsafe { &*p }) {
                // SAFETY: as above, the word's reference keeps `p` alive while we take ours.
                unsafe { Arc::increment_strong_count(p) };
                // SAFETY: `p` came from `Arc::into_raw` and we now own one strong count.
                return unsafe { Arc::from_raw(p) };
            }
            wait();
        }
    }

    /// Swaps the state word back to zero and releases its reference (the last thread out
    /// of a run; each thread's own reference goes with its `Arc`).
    pub(crate) fn release(mem: &RunMemory) {
        let p = mem.state_word().swap(0, Ordering::AcqRel) as *const RunShared;
        if !p.is_null() {
            // SAFETY: a non-zero word holds the reference `share` leaked into it, and the
            // swap took it out, so it is released once.
            drop(unsafe { Arc::from_raw(p) });
        }
    }
}
