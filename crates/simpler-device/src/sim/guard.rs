//! Sim memcheck's placement of device allocations against guard pages, and [`Memcheck`],
//! the mode that asks for it (`docs/sim-device.md` §2).
//!
//! Under memcheck every allocation gets a mapping of its own: its data pages between two
//! inaccessible guard pages (`mmap` + `mprotect`). [`Memcheck::After`] places the data so
//! that its last byte is the last byte before the upper guard page: the first byte written
//! (or read) past the end faults at the faulting instruction, and the crash report names the
//! allocation and the offset. [`Memcheck::Before`] places it right after the lower guard
//! page, for accesses before the start. Freed memory is unmapped, so a later access to it
//! faults too (unless the address was mapped again since).
//!
//! With the end on the guard page, the base is aligned only as the size allows: to the
//! largest power of two dividing the size, at most 64 bytes — enough for any element type
//! whose size divides the allocation's (so for every tensor of that type).
//!
//! This module and `memory` are the sim's only code that maps memory.

use crate::DeviceError;

/// Where sim device allocations are placed: the sim memcheck mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Memcheck {
    /// Allocations come from the host heap, 64-byte aligned, with no guard pages.
    #[default]
    Off,
    /// Each allocation ends exactly at a guard page: an access past its end faults.
    After,
    /// Each allocation starts exactly after a guard page: an access before its start
    /// faults.
    Before,
}

impl Memcheck {
    /// Parses a `SIMPLER_SIM_MEMCHECK` value: `0`, `off` or empty: [`Memcheck::Off`];
    /// `1`, `on` or `after`: [`Memcheck::After`]; `before`: [`Memcheck::Before`]
    /// (ASCII case and surrounding blanks ignored).
    ///
    /// # Errors
    /// A message naming the value and the accepted ones.
    pub fn parse(text: &str) -> Result<Memcheck, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "0" | "off" => Ok(Memcheck::Off),
            "1" | "on" | "after" => Ok(Memcheck::After),
            "before" => Ok(Memcheck::Before),
            _ => Err(format!(
                "`{text}` is not a memcheck mode (0/off, 1/on/after, before)"
            )),
        }
    }

    /// The mode `SIMPLER_SIM_MEMCHECK` asks for: [`Memcheck::Off`] when it is unset; a bad
    /// value prints a warning and keeps memcheck off.
    pub fn from_env() -> Memcheck {
        match std::env::var("SIMPLER_SIM_MEMCHECK") {
            Err(_) => Memcheck::Off,
            Ok(text) => Memcheck::parse(&text).unwrap_or_else(|e| {
                eprintln!("simpler: warning: SIMPLER_SIM_MEMCHECK: {e}; memcheck stays off");
                Memcheck::Off
            }),
        }
    }

    /// `"off"`, `"after"` or `"before"`.
    pub fn name(self) -> &'static str {
        match self {
            Memcheck::Off => "off",
            Memcheck::After => "after",
            Memcheck::Before => "before",
        }
    }
}

/// One guarded allocation's mapping: `[guard page][data pages][guard page]`.
pub(crate) struct GuardedMap {
    /// Start of the mapping (the lower guard page).
    pub(crate) start: u64,
    /// Bytes mapped, guard pages included.
    pub(crate) len: u64,
    /// The allocation's base inside it.
    pub(crate) base: u64,
}

// SAFETY: the mapping is owned memory with no thread affinity; the allocator that holds it
// keeps it behind its lock.
unsafe impl Send for GuardedMap {}

/// The base alignment of a `size`-byte allocation placed against its upper guard page.
pub(crate) fn end_alignment(size: u64) -> u64 {
    (1u64 << size.trailing_zeros().min(6)).max(1)
}

/// Maps `size` bytes (> 0) of zeroed memory between two guard pages, placed as `mode`
/// ([`Memcheck::After`] or [`Memcheck::Before`]) says; `page` is the page size.
///
/// # Errors
/// [`DeviceError::InvalidSize`] when the mapping's size overflows,
/// [`DeviceError::OutOfMemory`] when the kernel refuses the mapping.
pub(crate) fn map(size: u64, mode: Memcheck, page: u64) -> Result<GuardedMap, DeviceError> {
    let data = size
        .checked_next_multiple_of(page)
        .ok_or(DeviceError::InvalidSize(size))?;
    let len = data
        .checked_add(2 * page)
        .filter(|&l| usize::try_from(l).is_ok())
        .ok_or(DeviceError::InvalidSize(size))?;
    // SAFETY: a fresh anonymous private mapping at an address of the kernel's choice,
    // inaccessible until the data pages are opened below; no existing memory is affected.
    let start = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if start == libc::MAP_FAILED {
        return Err(DeviceError::OutOfMemory(size));
    }
    let start = start as u64;
    // SAFETY: `start + page .. start + page + data` lies inside the mapping just made,
    // which nothing else uses yet.
    let opened = unsafe {
        libc::mprotect(
            (start + page) as *mut libc::c_void,
            data as usize,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    if opened != 0 {
        // SAFETY: the mapping is ours and unused.
        unsafe { libc::munmap(start as *mut libc::c_void, len as usize) };
        return Err(DeviceError::OutOfMemory(size));
    }
    let base = match mode {
        Memcheck::Before | Memcheck::Off => start + page,
        Memcheck::After => {
            let a = end_alignment(size);
            (start + page + data - size) / a * a
        }
    };
    Ok(GuardedMap { start, len, base })
}

impl GuardedMap {
    /// Unmaps the allocation.
    ///
    /// # Safety
    /// Nothing may access the allocation any more (the allocator has removed it from its
    /// live map under its lock).
    pub(crate) unsafe fn unmap(self) {
        // SAFETY: the mapping came from `map` and, by the caller's contract, is unused.
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.len as usize) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_name() {
        for (text, want) in [
            ("", Memcheck::Off),
            ("0", Memcheck::Off),
            (" OFF ", Memcheck::Off),
            ("1", Memcheck::After),
            ("on", Memcheck::After),
            ("after", Memcheck::After),
            ("Before", Memcheck::Before),
        ] {
            assert_eq!(Memcheck::parse(text), Ok(want), "{text:?}");
        }
        let err = Memcheck::parse("yes").unwrap_err();
        assert!(err.contains("`yes` is not a memcheck mode"), "{err}");
        assert_eq!(Memcheck::default(), Memcheck::Off);
        assert_eq!(Memcheck::Before.name(), "before");
    }

    #[test]
    fn end_alignment_follows_the_size() {
        assert_eq!(end_alignment(16), 16);
        assert_eq!(end_alignment(4000), 32);
        assert_eq!(end_alignment(4096), 64);
        assert_eq!(end_alignment(7), 1);
        assert_eq!(end_alignment(12), 4);
    }
}
