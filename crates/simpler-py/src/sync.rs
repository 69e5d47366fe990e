//! The one lock helper of the bindings: every wrapper's mutex guards a value that is only
//! swapped or cloned, so a poisoned lock is taken as it is.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning: every critical section of the bindings only swaps or
/// clones values.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
