//! The lock and drop helpers of the bindings: every wrapper's mutex guards a value that is
//! only swapped or cloned, so a poisoned lock is taken as it is; and a value whose drop may
//! wait (it joins threads or drains runs) is dropped with the interpreter released.

use std::sync::{Mutex, MutexGuard};

use pyo3::Python;

/// Locks `m`, ignoring poisoning: every critical section of the bindings only swaps or
/// clones values.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Drops `value` (if any) detached from the interpreter: what its drop waits for (an
/// engine's threads joined, a child process reaped, a device's streams drained) may itself
/// need the interpreter — a level-4 child's lane calls Python, a stream thread runs a Python
/// host function — and would deadlock behind this thread's hold of it. For the `Drop` of a
/// pyclass, which runs attached. While the interpreter is finalizing (no attaching then)
/// the value is dropped where it is.
pub(crate) fn drop_detached<T: Send>(mut value: Option<T>) {
    if value.is_none() {
        return;
    }
    Python::try_attach(|py| {
        let value = value.take();
        py.detach(move || drop(value));
    });
    drop(value);
}

/// Takes the value out of a wrapper's `Mutex<Option<T>>` in its `Drop` (no other thread
/// can hold the lock then), ignoring poisoning.
pub(crate) fn take_last<T>(m: &mut Mutex<Option<T>>) -> Option<T> {
    m.get_mut().unwrap_or_else(|p| p.into_inner()).take()
}
