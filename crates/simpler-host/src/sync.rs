//! The locks of the lock-sensitive pieces (the completion fence) and the atomics of the
//! lock-free one (the fault monitor's notice ring), switched to `loom`'s model-checked
//! versions when the crate's `loom` feature is on, so the loom models in `fence` and
//! `fault_monitor` exercise the real code (`cargo test -p simpler-host --lib --features loom
//! --profile ci loom`; only this crate recompiles for it).

#[cfg(feature = "loom")]
pub(crate) use loom::sync::atomic;
#[cfg(feature = "loom")]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::atomic;
pub(crate) use std::sync::TryLockError;
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks, ignoring poison: a panic while holding a fence lock leaves counts that are still
/// the most conservative facts available.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
