//! The pool in a forked child: the child has one thread and none of the parent's workers, so
//! a `pthread_atfork` child hook forgets the parent's pool, and the child's first device
//! starts a pool of its own (its devices inherited from the parent are unusable; the host
//! refuses them). This module holds the one `unsafe` call that installs the hook.

use std::sync::OnceLock;

/// What the child hook runs (set once, with the first pool).
static FORGET: OnceLock<fn()> = OnceLock::new();

extern "C" fn in_child() {
    if let Some(f) = FORGET.get() {
        f();
    }
}

/// Makes every forked child run `forget` right after the fork (once per process; later
/// calls do nothing). `forget` must be async-signal-safe: a store of an atomic.
pub(crate) fn forget_pool_in_children(forget: fn()) {
    if FORGET.set(forget).is_ok() {
        // SAFETY: `in_child` is a plain `extern "C" fn()` that only reads a `OnceLock` set
        // before the hook is installed and runs an atomic store; no other hook is passed.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            eprintln!("simpler: warning: cannot install the sim pool's fork hook (error {rc})");
        }
    }
}
