//! [`BorrowedBytes`]: a [`HostBuffer`] over a caller's slice, so the synchronous
//! `ChipWorker::run` stages straight from the caller's tensors and copies outputs straight
//! back into them — one copy each way, no owned intermediate.
//!
//! A submitted run owns its buffers (`HostBuffer: 'static`); a borrowed slice is not
//! `'static`, so this module erases its lifetime, and the synchronous run restores the
//! guarantee by construction: the lane dereferences a run's host buffers only while the run
//! is not terminal (staging at prepare, copy back at finalize, both under the lane lock), and
//! `run` does not return — nor unwind — before its run is terminal ([`AbortUnlessTerminal`]).
//! After that the lane may still hold the buffer (dropping it frees nothing) but never reads
//! or writes through it again.
//!
//! This module holds the host's only raw pointer into caller memory.

use std::ptr::NonNull;

use crate::args::HostBuffer;

/// The bytes of a caller's `&mut [u8]`, lent to one run for as long as the run is not
/// terminal.
pub(crate) struct BorrowedBytes {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a `BorrowedBytes` stands for the `&mut [u8]` it was made from, which is `Send`;
// it is used by one thread at a time (the lane's lock holder).
unsafe impl Send for BorrowedBytes {}

impl BorrowedBytes {
    /// Lends `bytes` to a run.
    ///
    /// # Safety
    /// `bytes` must stay valid, and must not be read or written except through the returned
    /// buffer, until the run it is lent to is terminal (the lane makes its last access before
    /// it marks the run terminal).
    pub(crate) unsafe fn new(bytes: &mut [u8]) -> BorrowedBytes {
        BorrowedBytes {
            ptr: NonNull::from(&mut *bytes).cast(),
            len: bytes.len(),
        }
    }
}

impl HostBuffer for BorrowedBytes {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `new`'s contract: the slice is live and lent to this buffer alone while its
        // run is not terminal, which is the only time the lane calls this.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `new`'s contract: the slice is live and lent to this buffer alone while its
        // run is not terminal, which is the only time the lane calls this.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// Aborts the process if dropped before `terminal()` holds: an unwind out of the synchronous
/// run while its run is still in the lane would leave the lane pointing into the caller's
/// slices (a panic there is a violated invariant of the lane's).
pub(crate) struct AbortUnlessTerminal<F: Fn() -> bool>(pub(crate) F);

impl<F: Fn() -> bool> Drop for AbortUnlessTerminal<F> {
    fn drop(&mut self) {
        if !(self.0)() {
            eprintln!(
                "simpler-host: unwinding out of ChipWorker::run while its run still borrows the \
                 caller's buffers; aborting"
            );
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_borrowed_buffer_reads_and_writes_the_callers_bytes() {
        let mut bytes = vec![1u8, 2, 3, 4];
        {
            // SAFETY: `bytes` outlives `b` and is not touched while `b` is used.
            let mut b = unsafe { BorrowedBytes::new(&mut bytes) };
            assert_eq!(b.bytes_mut(), &[1, 2, 3, 4]);
            b.bytes_mut()[0] = 9;
            assert_eq!(b.bytes(), &[9, 2, 3, 4]);
            assert_eq!(b.bytes().as_ptr(), b.bytes_mut().as_ptr());
        }
        assert_eq!(bytes, [9, 2, 3, 4]);
    }
}
