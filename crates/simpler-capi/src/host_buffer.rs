//! A C caller's host tensor lent to a run in place ([`CallerMemory`]): the run stages its
//! inputs from the caller's bytes and copies its outputs back into them, one copy each way.
//!
//! The lane dereferences a run's host buffers only while the run is not terminal (staging
//! before launch, the copy back when the run is finalized by the lane) and holds no slice
//! between calls; dropping a buffer frees nothing. The C contract (`docs/c-abi.md`
//! §10) keeps the memory alive and untouched from `simpler_launch_run*` until
//! `simpler_finalize_run` (or the context's finalize) returns, which covers every access.
//! This module holds the crate's only raw pointer into a host tensor.

use std::ptr::NonNull;

use simpler_host::{HostBuffer, HostInput};

/// `len` bytes of caller memory at `ptr`, lent to one run.
pub struct CallerMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the memory is the C caller's, lent to the run as a whole; the lane uses a run's
// buffers from one thread at a time (its lock holder).
unsafe impl Send for CallerMemory {}

impl CallerMemory {
    /// Lends `len` bytes at `ptr` (non-NULL, `len > 0`).
    ///
    /// # Safety
    /// The bytes stay valid, and are not accessed except through this buffer, until the run
    /// they are lent to is finalized (the C contract of `simpler_prepare_run`).
    pub unsafe fn new(ptr: NonNull<u8>, len: usize) -> CallerMemory {
        CallerMemory { ptr, len }
    }
}

impl HostBuffer for CallerMemory {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `new`'s contract: live and lent to this buffer while the run is not
        // finalized, the only time the lane calls this.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `bytes`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl HostInput for CallerMemory {
    fn bytes(&self) -> &[u8] {
        HostBuffer::bytes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_is_the_callers_memory() {
        let mut v = vec![1u8, 2, 3];
        let p = NonNull::new(v.as_mut_ptr()).unwrap();
        {
            // SAFETY: `v` outlives `b` and is not touched while `b` is used.
            let mut b = unsafe { CallerMemory::new(p, 3) };
            HostBuffer::bytes_mut(&mut b)[1] = 9;
            assert_eq!(HostInput::bytes(&b), &[1, 9, 3]);
            assert_eq!(HostBuffer::bytes(&b).as_ptr(), p.as_ptr());
        }
        assert_eq!(v, [1, 9, 3]);
    }
}
