//! The sim device allocator: device memory is host memory, and every live allocation is
//! known, so copies, memsets and frees are checked (out of range, double free, foreign
//! pointer) instead of being undefined behaviour. Every live allocation is also in the crash
//! reporter's lock-free table (`crate::crash`), so a crash report can say where a faulting
//! address lies; under sim memcheck each one is placed against a guard page (`guard`).
//!
//! This module (with `guard`) is the only one of the sim backend that touches memory
//! through raw pointers: raw allocation, release and byte copies into ranges it has just
//! validated. (The sim's only other `unsafe` is the kernel call in `pool`, whose contract
//! the launch's caller keeps.)

use std::alloc::Layout;
use std::collections::{BTreeMap, HashSet};

use parking_lot::Mutex;

use super::guard::{self, GuardedMap, Memcheck};
use crate::crash::{self, LiveView};
use crate::{DeviceError, DevicePtr};

/// Alignment of every allocation handed out (memcheck `after` placement: see `guard`).
pub(crate) const ALIGN: u64 = 64;
/// Largest single allocation accepted (64 GiB).
const MAX_ALLOC: u64 = 64 << 30;

/// Where an allocation's bytes come from.
enum Backing {
    /// A host-heap block (memcheck off).
    Heap { raw: *mut u8, layout: Layout },
    /// A mapping of its own between guard pages (memcheck on).
    Guarded(GuardedMap),
}

struct Allocation {
    size: u64,
    backing: Backing,
    /// Its entry in the crash reporter's table, if it has one.
    live: Option<usize>,
}

// SAFETY: `raw` is an owned heap block; the map that holds it is behind a mutex.
unsafe impl Send for Allocation {}

impl Allocation {
    /// Gives the bytes back and drops the crash-table entry.
    ///
    /// # Safety
    /// The allocation must be out of the live map and unused (nothing may touch it).
    unsafe fn release(self) {
        if let Some(id) = self.live {
            crash::forget_live(id);
        }
        match self.backing {
            // SAFETY: `raw` came from `alloc_zeroed` with exactly this layout and is
            // released once (the caller removed the allocation from the live map).
            Backing::Heap { raw, layout } => unsafe { std::alloc::dealloc(raw, layout) },
            // SAFETY: unused, by the caller's contract.
            Backing::Guarded(map) => unsafe { map.unmap() },
        }
    }
}

#[derive(Default)]
struct State {
    live: BTreeMap<u64, Allocation>,
    freed: HashSet<u64>,
    /// Allocations made so far (the next one's number, minus one).
    made: u64,
}

/// Checked device-memory allocator of one device.
pub(crate) struct Memory {
    device: u32,
    memcheck: Memcheck,
    state: Mutex<State>,
}

impl Memory {
    /// The allocator of device `device` (the id crash reports name), placing allocations
    /// as `memcheck` says.
    pub(crate) fn new(device: u32, memcheck: Memcheck) -> Memory {
        Memory {
            device,
            memcheck,
            state: Mutex::new(State::default()),
        }
    }

    /// The memcheck mode allocations are placed by.
    pub(crate) fn memcheck(&self) -> Memcheck {
        self.memcheck
    }

    pub(crate) fn alloc(&self, size: u64) -> Result<DevicePtr, DeviceError> {
        if size == 0 || size > MAX_ALLOC {
            return Err(DeviceError::InvalidSize(size));
        }
        let (base, backing, lo, hi) = match self.memcheck {
            Memcheck::Off => {
                let (base, raw, layout) = Self::heap_block(size)?;
                (base, Backing::Heap { raw, layout }, base, base + size)
            }
            mode => {
                let map = guard::map(size, mode, crash::page_size())?;
                let (base, lo, hi) = (map.base, map.start, map.start + map.len);
                (base, Backing::Guarded(map), lo, hi)
            }
        };
        let mut st = self.state.lock();
        st.made += 1;
        let live = crash::note_live(LiveView {
            base,
            size,
            lo,
            hi,
            device: self.device,
            guarded: self.memcheck != Memcheck::Off,
            seq: st.made,
        });
        st.freed.remove(&base);
        st.live.insert(
            base,
            Allocation {
                size,
                backing,
                live,
            },
        );
        Ok(DevicePtr::from_raw(base))
    }

    /// A zeroed host-heap block holding `size` bytes at a 64-byte aligned base.
    fn heap_block(size: u64) -> Result<(u64, *mut u8, Layout), DeviceError> {
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
        Ok(((raw as u64).div_ceil(ALIGN) * ALIGN, raw, layout))
    }

    pub(crate) fn free(&self, ptr: DevicePtr) -> Result<(), DeviceError> {
        let mut st = self.state.lock();
        match st.live.remove(&ptr.addr()) {
            Some(a) => {
                st.freed.insert(ptr.addr());
                drop(st);
                // SAFETY: removed from the live map, so released once; the caller of
                // `free` vouches that no kernel uses it any more (the `Device::free`
                // contract).
                unsafe { a.release() };
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
            // SAFETY: the device is gone (or proved idle), so nothing uses its memory; each
            // allocation is released once, out of the emptied map.
            unsafe { a.release() };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_misuse_is_a_typed_error() {
        let m = Memory::new(0, Memcheck::Off);
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
        let m = Memory::new(0, Memcheck::Off);
        let p = m.alloc(4096).unwrap();
        let mut b = vec![1u8; 4096];
        m.copy_out(&mut b, p).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        m.fill(p, 0xab, 4096).unwrap();
        assert!(m.fill(p, 0, 4097).is_err());
    }

    /// The live allocation the crash table lists at `base`, if any.
    fn listed(base: u64) -> Option<LiveView> {
        let mut found = None;
        crate::crash::scan_live_for_tests(|v| {
            if v.base == base {
                found = Some(*v);
            }
        });
        found
    }

    #[test]
    fn memcheck_after_ends_each_allocation_on_its_guard_page() {
        let page = crash::page_size();
        let m = Memory::new(41, Memcheck::After);
        assert_eq!(m.memcheck(), Memcheck::After);
        for size in [16u64, 100, 4000, 4096, 3 * 4096 + 8] {
            let p = m.alloc(size).unwrap();
            assert_eq!(
                (p.addr() + size) % page,
                0,
                "size {size} ends on the guard page"
            );
            assert_eq!(p.addr() % guard::end_alignment(size), 0, "size {size}");
            let v = listed(p.addr()).expect("listed for crash reports");
            assert_eq!((v.size, v.device, v.hi), (size, 41, p.addr() + size + page));
            assert!(v.guarded);
            // Fresh, zeroed, and every byte inside is usable through the checked copies.
            let mut back = vec![1u8; size as usize];
            m.copy_out(&mut back, p).unwrap();
            assert!(back.iter().all(|&b| b == 0));
            m.copy_in(p, &vec![7u8; size as usize]).unwrap();
            assert!(m.copy_in(p, &vec![0u8; size as usize + 1]).is_err());
            m.free(p).unwrap();
            assert!(
                listed(p.addr()).is_none(),
                "a freed allocation is no longer listed"
            );
        }
        assert_eq!(m.live_count(), 0);
    }

    #[test]
    fn memcheck_before_starts_each_allocation_after_its_guard_page() {
        let page = crash::page_size();
        let m = Memory::new(42, Memcheck::Before);
        let p = m.alloc(100).unwrap();
        assert_eq!(p.addr() % page, 0);
        assert_eq!(listed(p.addr()).unwrap().lo, p.addr() - page);
        m.fill(p, 3, 100).unwrap();
        drop(m);
        assert!(
            listed(p.addr()).is_none(),
            "dropping the allocator unlists its memory"
        );
    }

    #[test]
    fn memcheck_off_keeps_the_heap_placement() {
        let m = Memory::new(43, Memcheck::Off);
        let p = m.alloc(100).unwrap();
        let v = listed(p.addr()).unwrap();
        assert!(!v.guarded);
        assert_eq!((v.lo, v.hi, v.seq), (p.addr(), p.addr() + 100, 1));
        // The heap block is padded: the bytes right past the end are the block's own, not a
        // guard page (as before memcheck existed).
        assert!(matches!(st_backing(&m, p), Some(true)));
        m.free(p).unwrap();
    }

    /// Whether the allocation at `p` is a heap block (`Some(true)`) or a guarded mapping.
    fn st_backing(m: &Memory, p: DevicePtr) -> Option<bool> {
        let st = m.state.lock();
        st.live
            .get(&p.addr())
            .map(|a| matches!(a.backing, Backing::Heap { .. }))
    }
}
