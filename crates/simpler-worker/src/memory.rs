//! Host memory a level-3 task reads or writes: the [`HostMemory`] contract, and
//! [`SharedRegion`] — anonymous shared memory (a `memfd`) that child processes map too.
//!
//! Every piece of host memory a task names is one `HostMemory` object behind an `Arc`; the
//! object keeps the bytes alive and says where they are (process address, length) and
//! whether a child process can reach them ([`HostMemory::shared`]). A `SharedRegion` has no
//! name in any file system: a child maps it through the parent's descriptor
//! (`/proc/<parent>/fd/<fd>`), so a process killed by SIGKILL leaves no segment behind
//! (`docs/l3-worker.md` §5). This module owns mapping and unmapping; it never interprets the
//! bytes.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Host memory a task may name: `len()` bytes at `as_ptr()` in this process.
///
/// # Safety
/// An implementation guarantees that `as_ptr()` points to `len()` bytes that stay mapped,
/// readable and (unless [`read_only`](HostMemory::read_only)) writable, at the same
/// address, for as long as the object lives; that the address and length never change; and
/// that the object may be shared between threads. The engine orders the tasks that touch
/// the bytes by their tags (`docs/l3-worker.md` §3); what another owner does with them
/// meanwhile is the owner's affair.
pub unsafe trait HostMemory: Send + Sync + 'static {
    /// The first byte.
    fn as_ptr(&self) -> *mut u8;

    /// The length, in bytes.
    fn len(&self) -> usize;

    /// True when the memory holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when tasks may only read the memory (a read-only numpy array).
    fn read_only(&self) -> bool {
        false
    }

    /// Where a child process finds the same bytes; `None` for memory private to this
    /// process (a plain heap allocation, a numpy array).
    fn shared(&self) -> Option<SharedRef> {
        None
    }
}

/// Where a child process finds shared host memory: `len` bytes at `offset` of the region
/// `region` (a memfd the parent holds as descriptor `fd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SharedRef {
    /// The region's process-unique id ([`SharedRegion::id`]).
    pub region: u64,
    /// The parent's descriptor of the region.
    pub fd: i32,
    /// The region's whole length, in bytes.
    pub region_len: u64,
    /// Offset of the first byte inside the region.
    pub offset: u64,
    /// Length, in bytes.
    pub len: u64,
}

/// Why shared memory could not be made or mapped.
#[derive(Debug, thiserror::Error)]
pub enum SharedMemoryError {
    /// A zero-length region.
    #[error("a shared region of 0 bytes was asked for; give a positive size")]
    Empty,
    /// The system refused (`memfd_create`, `ftruncate`, `open`, `mmap`).
    #[error("{call} failed for a shared region of {len} bytes: {source}")]
    Os {
        /// The call that failed.
        call: &'static str,
        /// The region's length.
        len: u64,
        /// The system's error.
        source: std::io::Error,
    },
}

static NEXT_REGION: AtomicU64 = AtomicU64::new(1);

/// Anonymous shared memory: a memfd of `len` bytes mapped `MAP_SHARED` in this process,
/// zero-filled, page-aligned, committed only where touched. Child processes map the same
/// pages ([`SharedRegion::map_from_parent`]). Unmapped and closed on drop.
pub struct SharedRegion {
    id: u64,
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the region is plain shared memory owned by this object; the pointer is only a
// mapping address, valid from any thread until drop.
unsafe impl Send for SharedRegion {}
// SAFETY: as above; `&SharedRegion` hands out nothing but the address.
unsafe impl Sync for SharedRegion {}

impl std::fmt::Debug for SharedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRegion")
            .field("id", &self.id)
            .field("fd", &self.fd.as_raw_fd())
            .field("len", &self.len)
            .finish()
    }
}

fn os_error(call: &'static str, len: u64) -> SharedMemoryError {
    SharedMemoryError::Os {
        call,
        len,
        source: std::io::Error::last_os_error(),
    }
}

impl SharedRegion {
    /// A new zero-filled region of `len` bytes; `name` only labels it in `/proc/<pid>/maps`.
    ///
    /// # Errors
    /// [`SharedMemoryError::Empty`] for 0 bytes, [`SharedMemoryError::Os`] when the system
    /// refuses (no memory, too many descriptors).
    pub fn new(len: u64, name: &str) -> Result<SharedRegion, SharedMemoryError> {
        if len == 0 {
            return Err(SharedMemoryError::Empty);
        }
        let cname = std::ffi::CString::new(format!("simpler-{name}"))
            .unwrap_or_else(|_| c"simpler".to_owned());
        // SAFETY: `cname` is a valid NUL-terminated string; MFD_CLOEXEC keeps the descriptor
        // out of programs this process executes (children reach it through /proc instead).
        let raw = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(os_error("memfd_create", len));
        }
        // SAFETY: `raw` is a descriptor this call just opened and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let Ok(off_len) = libc::off_t::try_from(len) else {
            return Err(SharedMemoryError::Os {
                call: "ftruncate",
                len,
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            });
        };
        // SAFETY: `fd` is an open memfd owned by this function.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), off_len) } != 0 {
            return Err(os_error("ftruncate", len));
        }
        let ptr = map(fd.as_raw_fd(), len)?;
        Ok(SharedRegion {
            id: NEXT_REGION.fetch_add(1, Ordering::Relaxed),
            fd,
            ptr,
            len: len as usize,
        })
    }

    /// Maps, in a child process, the region its parent holds as descriptor `fd`
    /// (`/proc/<parent pid>/fd/<fd>`), `len` bytes, keeping `id` as its id.
    ///
    /// # Errors
    /// [`SharedMemoryError::Os`] when the descriptor cannot be opened (the parent is gone or
    /// closed it) or mapped.
    pub fn map_from_parent(
        parent: u32,
        fd: i32,
        len: u64,
        id: u64,
    ) -> Result<SharedRegion, SharedMemoryError> {
        if len == 0 {
            return Err(SharedMemoryError::Empty);
        }
        let path = std::ffi::CString::new(format!("/proc/{parent}/fd/{fd}"))
            .expect("a formatted path has no NUL");
        // SAFETY: `path` is a valid NUL-terminated string.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(os_error("open", len));
        }
        // SAFETY: `raw` is a descriptor this call just opened and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let ptr = map(fd.as_raw_fd(), len)?;
        Ok(SharedRegion {
            id,
            fd,
            ptr,
            len: len as usize,
        })
    }

    /// The region's process-unique id (kept by children that map it).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The descriptor of the memfd (valid while the region lives).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Where a child finds `len` bytes at `offset` of this region.
    pub fn share(&self, offset: u64, len: u64) -> SharedRef {
        SharedRef {
            region: self.id,
            fd: self.fd.as_raw_fd(),
            region_len: self.len as u64,
            offset,
            len,
        }
    }
}

fn map(fd: RawFd, len: u64) -> Result<*mut u8, SharedMemoryError> {
    // SAFETY: a fresh shared mapping of an open descriptor at an address the kernel picks;
    // nothing else refers to that address range yet.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(os_error("mmap", len));
    }
    Ok(ptr.cast())
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `new`/`map_from_parent`, and
        // no borrow of it outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

// SAFETY: the mapping stays at `ptr` for `len` bytes, readable and writable, until drop.
unsafe impl HostMemory for SharedRegion {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn shared(&self) -> Option<SharedRef> {
        Some(self.share(0, self.len as u64))
    }
}

/// Host memory in a plain `Vec<u8>` owned by the engine: private to this process.
pub struct VecMemory {
    bytes: parking_lot::Mutex<Vec<u8>>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the vector is never resized after construction; the pointer is its buffer.
unsafe impl Send for VecMemory {}
// SAFETY: as above.
unsafe impl Sync for VecMemory {}

impl VecMemory {
    /// Takes ownership of `bytes`.
    pub fn new(mut bytes: Vec<u8>) -> VecMemory {
        let ptr = bytes.as_mut_ptr();
        let len = bytes.len();
        VecMemory {
            bytes: parking_lot::Mutex::new(bytes),
            ptr,
            len,
        }
    }

    /// A copy of the bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        // SAFETY: `ptr` is the vector's buffer of `len` bytes, alive while `self` is; tasks
        // writing it are ordered by the engine before a caller reads it back.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }.to_vec()
    }

    /// Gives the bytes back.
    pub fn into_vec(self) -> Vec<u8> {
        self.bytes.into_inner()
    }
}

// SAFETY: the vector's buffer stays put: the vector is never touched until `into_vec`,
// which consumes the object.
unsafe impl HostMemory for VecMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_is_zeroed_shared_and_seen_through_the_parent_descriptor() {
        let region = SharedRegion::new(8192, "test").unwrap();
        // SAFETY: the region maps 8192 writable bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(region.as_ptr(), region.len()) };
        assert!(bytes.iter().all(|b| *b == 0));
        bytes[100] = 7;
        let again =
            SharedRegion::map_from_parent(std::process::id(), region.fd(), 8192, region.id())
                .unwrap();
        assert_ne!(again.as_ptr(), region.as_ptr());
        // SAFETY: the second mapping holds the same 8192 bytes.
        let seen = unsafe { std::slice::from_raw_parts(again.as_ptr(), again.len()) };
        assert_eq!(seen[100], 7, "both mappings share the pages");
        assert_eq!(region.shared().unwrap().len, 8192);
    }

    #[test]
    fn empty_regions_and_missing_descriptors_are_refused() {
        assert!(matches!(
            SharedRegion::new(0, "x"),
            Err(SharedMemoryError::Empty)
        ));
        let err = SharedRegion::map_from_parent(std::process::id(), 987_654, 4096, 1).unwrap_err();
        assert!(err.to_string().contains("open failed"), "{err}");
    }
}
