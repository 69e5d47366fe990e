//! The sim device allocator: device memory is host memory, and every live allocation is
//! known, so copies, memsets and frees are checked (out of range, double free, foreign
//! pointer) instead of being undefined behaviour.
//!
//! This is the only module of the sim backend that touches memory through raw pointers: raw
//! allocation, release and byte copies into ranges it has just validated. (The sim's only
//! other `unsafe` is the kernel call in `pool`, whose contract the launch's caller keeps.)

use std::alloc::Layout;
use std::collections::{BTreeMap, HashSet};

use parking_lot::Mutex;

use crate::{DeviceError, DevicePtr};

/// Alignment of every allocation handed out.
pub(crate) const ALIGN: u64 = 64;
/// Largest single allocation accepted (64 GiB).
const MAX_ALLOC: u64 = 64 << 30;

struct Allocation {
    size: u64,
    raw: *mut u8,
    layout: Layout,
}

// SAFETY: `raw` is an owned heap block; the map that holds it is behind a mutex.
unsafe impl Send for Allocation {}

#[derive(Default)]
struct State {
    live: BTreeMap<u64, Allocation>,
    freed: HashSet<u64>,
}

/// Checked device-memory allocator.
#[derive(Default)]
pub(crate) struct Memory {
    state: Mutex<State>,
}

impl Memory {
    pub(crate) fn alloc(&self, size: u64) -> Result<DevicePtr, DeviceError> {
        if size == 0 || size > MAX_ALLOC {
            return Err(DeviceError::InvalidSize(size));
        }
        // Over-allocate with a 16-byte-aligned zeroed layout (the calloc path: large blocks
        // stay lazily mapped) and align up by hand.
        let padded = size
            .checked_add(ALIGN)
            .ok_or(DeviceError::InvalidSize(size))?;
        let layout = Layout::from_size_align(padded as usize, 16)
            .map_err(|_| DeviceError::InvalidSize(size))?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        if raw.is_null() {
            return Err(DeviceError::OutOfMemory(size));
        }
        let base = (raw as u64).div_ceil(ALIGN) * ALIGN;
        let mut st = self.state.lock();
        st.freed.remove(&base);
        st.live.insert(base, Allocation { size, raw, layout });
        Ok(DevicePtr::from_raw(base))
    }

    pub(crate) fn free(&self, ptr: DevicePtr) -> Result<(), DeviceError> {
        let mut st = self.state.lock();
        match st.live.remove(&ptr.addr()) {
            Some(a) => {
                st.freed.insert(ptr.addr());
                drop(st);
                // SAFETY: `raw` came from `alloc_zeroed` with exactly this layout and is
                // removed from the live map, so it is released once.
                unsafe { std::alloc::dealloc(a.raw, a.layout) };
                Ok(())
            }
            None => {
                if st.freed.contains(&ptr.addr()) {
                    return Err(DeviceError::DoubleFree(ptr.addr()));
                }
                match Self::containing(&st, ptr.addr()) {
                    Some((base, _)) => Err(DeviceError::NotAllocationBase {
                        ptr: ptr.addr(),
                        base,
                    }),
                    None => Err(DeviceError::UnknownPointer(ptr.addr())),
                }
            }
        }
    }

    fn containing(st: &State, addr: u64) -> Option<(u64, u64)> {
        let (&base, a) = st.live.range(..=addr).next_back()?;
        (addr < base + a.size).then_some((base, a.size))
    }

    /// Checks that `[ptr, ptr+len)` lies inside one live allocation.
    pub(crate) fn check(&self, ptr: DevicePtr, len: u64) -> Result<(), DeviceError> {
        let st = self.state.lock();
        let (base, size) =
            Self::containing(&st, ptr.addr()).ok_or(DeviceError::UnknownPointer(ptr.addr()))?;
        match ptr.addr().checked_add(len) {
            Some(end) if end <= base + size => Ok(()),
            _ => Err(DeviceError::out_of_range(ptr, len, base, size)),
        }
    }

    pub(crate) fn copy_in(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DeviceError> {
        let st = self.state.lock();
        Self::check_locked(&st, dst, src.len() as u64)?;
        // SAFETY: the destination range lies inside a live allocation (checked under the
        // lock, which also keeps it from being freed during the copy); source and
        // destination cannot overlap because the source is a host slice we do not own.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.addr() as *mut u8, src.len()) };
        Ok(())
    }

    pub(crate) fn copy_out(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DeviceError> {
        let st = self.state.lock();
        Self::check_locked(&st, src, dst.len() as u64)?;
        // SAFETY: the source range lies inside a live allocation, kept alive by the lock.
        unsafe {
            std::ptr::copy_nonoverlapping(src.addr() as *const u8, dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    pub(crate) fn fill(&self, dst: DevicePtr, value: u8, len: u64) -> Result<(), DeviceError> {
        let st = self.state.lock();
        Self::check_locked(&st, dst, len)?;
        // SAFETY: the range lies inside a live allocation, kept alive by the lock.
        unsafe { std::ptr::write_bytes(dst.addr() as *mut u8, value, len as usize) };
        Ok(())
    }

    fn check_locked(st: &State, ptr: DevicePtr, len: u64) -> Result<(), DeviceError> {
        let (base, size) =
            Self::containing(st, ptr.addr()).ok_or(DeviceError::UnknownPointer(ptr.addr()))?;
        match ptr.addr().checked_add(len) {
            Some(end) if end <= base + size => Ok(()),
            _ => Err(DeviceError::out_of_range(ptr, len, base, size)),
        }
    }

    /// Number of live allocations (for leak checks in tests).
    pub(crate) fn live_count(&self) -> usize {
        self.state.lock().live.len()
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        let st = self.state.get_mut();
        for (_, a) in std::mem::take(&mut st.live) {
            // SAFETY: each live block came from `alloc_zeroed` with its stored layout.
            unsafe { std::alloc::dealloc(a.raw, a.layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_misuse_is_a_typed_error() {
        let m = Memory::default();
        let p = m.alloc(100).unwrap();
        assert_eq!(p.addr() % ALIGN, 0);
        m.copy_in(p, &[1; 100]).unwrap();
        let mut back = [0u8; 4];
        m.copy_out(&mut back, p.offset(96)).unwrap();
        assert_eq!(back, [1; 4]);
        assert!(matches!(
            m.copy_in(p.offset(90), &[0; 20]),
            Err(DeviceError::OutOfRange { .. })
        ));
        assert!(matches!(
            m.copy_in(DevicePtr::from_raw(8), &[0; 1]),
            Err(DeviceError::UnknownPointer(8))
        ));
        assert!(matches!(
            m.free(p.offset(8)),
            Err(DeviceError::NotAllocationBase { .. })
        ));
        assert!(matches!(m.alloc(0), Err(DeviceError::InvalidSize(0))));
        m.free(p).unwrap();
        assert_eq!(m.free(p), Err(DeviceError::DoubleFree(p.addr())));
        assert!(matches!(
            m.copy_out(&mut back, p),
            Err(DeviceError::UnknownPointer(_))
        ));
        assert_eq!(m.live_count(), 0);
    }

    #[test]
    fn fresh_memory_is_zeroed_and_fill_is_checked() {
        let m = Memory::default();
        let p = m.alloc(4096).unwrap();
        let mut b = vec![1u8; 4096];
        m.copy_out(&mut b, p).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        m.fill(p, 0xab, 4096).unwrap();
        assert!(m.fill(p, 0, 4097).is_err());
    }
}
