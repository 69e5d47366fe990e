//! The fault-free read of the process's own memory ([`read_own`]), by which a report looks at
//! pointers it cannot trust (a run's func table, a kernel's argument array and tensors).
//!
//! It must stay async-signal-safe: the signal handler's report calls it.

use std::ffi::c_void;

/// Copies `out.len()` bytes at address `addr` of this process into `out` without touching
/// them directly (`process_vm_readv` on the process itself), so an unmapped or protected
/// address is a `false`, not a fault. Async-signal-safe. False also where the system refuses
/// the call.
pub(crate) fn read_own(addr: u64, out: &mut [u8]) -> bool {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: out.len(),
    };
    // SAFETY: `local` describes `out`, writable for its length; the kernel reads `remote`
    // on our behalf and reports an unreadable range as an error instead of faulting.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == out.len() as isize
}
