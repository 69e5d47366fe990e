//! The three process-wide tables the crash report reads: the device threads and what each is
//! running ([`ThreadSlot`]), the live device allocations ([`LiveSlot`]) and the names of
//! loaded code ([`NameSlot`]). Each lives in a [`Slab`], so the signal handler reads them
//! without locks or allocation; each slot is written only by its owner.
//!
//! Publication: a slot's key (`tid`, `base`, `entry`) is stored last with release and
//! cleared first; a reader loads the key with acquire, copies the other fields, and checks
//! the key again, so a slot being reused while it reads is skipped (a report may miss an
//! allocation freed at that instant, never show a mix of two).

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use super::slab::Slab;

/// What kind of device thread a [`ThreadSlot`] describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ThreadKind {
    /// An AICore core (its index is the core id).
    Aicore = 1,
    /// An AICPU thread (its index is the thread index).
    Aicpu = 2,
    /// The chip's SDMA engine thread.
    Sdma = 3,
}

/// What a device thread is executing: nothing of the user's, a kernel or an orchestration,
/// or work on addresses a kernel named (an SDMA copy, a deferred-completion counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CodeKind {
    /// Runtime or device code (the thread is between user calls).
    None = 0,
    /// A kernel entry, for one block of a task.
    Kernel = 1,
    /// An orchestration entry.
    Orchestration = 2,
    /// An SDMA copy a kernel submitted: `entry` the source, `args` the destination, `task`
    /// the byte count.
    SdmaCopy = 3,
    /// The runtime reading a deferred-completion counter a kernel registered: `entry` the
    /// counter's address, `task` the task.
    Counter = 4,
}

/// One device thread and what it runs (written by the thread itself).
#[derive(Default)]
pub(crate) struct ThreadSlot {
    /// OS thread id; 0 while the slot is free.
    pub(crate) tid: AtomicI32,
    pub(crate) device: AtomicU32,
    pub(crate) kind: AtomicU32,
    pub(crate) index: AtomicU32,
    /// `CoreType` as u32 + 1 for an AICore thread, else 0.
    pub(crate) core_type: AtomicU32,
    /// The run's epoch (0: no run).
    pub(crate) epoch: AtomicU64,
    /// The run's func id → kernel entry table and its length.
    pub(crate) func_table: AtomicU64,
    pub(crate) func_count: AtomicU32,
    /// [`CodeKind`] of the user call in progress.
    pub(crate) code: AtomicU32,
    pub(crate) entry: AtomicU64,
    /// Address of the kernel call's argument array (0: not known).
    pub(crate) args: AtomicU64,
    pub(crate) task: AtomicU64,
    pub(crate) block_idx: AtomicI32,
    pub(crate) block_num: AtomicI32,
}

/// A plain copy of a [`ThreadSlot`], as the report uses it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ThreadView {
    pub(crate) device: u32,
    pub(crate) kind: u32,
    pub(crate) index: u32,
    pub(crate) core_type: u32,
    pub(crate) epoch: u64,
    pub(crate) func_table: u64,
    pub(crate) func_count: u32,
    pub(crate) code: u32,
    pub(crate) entry: u64,
    pub(crate) args: u64,
    pub(crate) task: u64,
    pub(crate) block_idx: i32,
    pub(crate) block_num: i32,
}

impl ThreadSlot {
    /// Copies the fields (the caller is the owning thread, or its signal handler).
    pub(crate) fn view(&self) -> ThreadView {
        let r = Ordering::Relaxed;
        ThreadView {
            device: self.device.load(r),
            kind: self.kind.load(r),
            index: self.index.load(r),
            core_type: self.core_type.load(r),
            epoch: self.epoch.load(r),
            func_table: self.func_table.load(r),
            func_count: self.func_count.load(r),
            code: self.code.load(r),
            entry: self.entry.load(r),
            args: self.args.load(r),
            task: self.task.load(r),
            block_idx: self.block_idx.load(r),
            block_num: self.block_num.load(r),
        }
    }
}

/// The device threads of the process.
pub(crate) static THREADS: Slab<ThreadSlot> = Slab::new();

/// The slot of OS thread `tid`, if it is a device thread. Lock-free.
pub(crate) fn thread_of(tid: i32) -> Option<&'static ThreadSlot> {
    let mut found = None;
    THREADS.scan(|s| {
        if s.tid.load(Ordering::Acquire) == tid {
            found = Some(s);
            return false;
        }
        true
    });
    found
}

/// One live device allocation.
#[derive(Default)]
pub(crate) struct LiveSlot {
    /// Base address; 0 while the slot is free.
    pub(crate) base: AtomicU64,
    pub(crate) size: AtomicU64,
    /// The mapping the allocation owns, guard pages included (`lo..hi`; `base..base+size`
    /// when it has no guard pages).
    pub(crate) lo: AtomicU64,
    pub(crate) hi: AtomicU64,
    pub(crate) device: AtomicU32,
    /// 1 when placed against guard pages (memcheck).
    pub(crate) guarded: AtomicU32,
    /// The device's allocation number (1 = its first).
    pub(crate) seq: AtomicU64,
}

/// A plain copy of a live allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveView {
    pub(crate) base: u64,
    pub(crate) size: u64,
    pub(crate) lo: u64,
    pub(crate) hi: u64,
    pub(crate) device: u32,
    pub(crate) guarded: bool,
    pub(crate) seq: u64,
}

impl LiveView {
    /// One past the last byte.
    pub(crate) fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }
}

/// The live device allocations of every device of the process.
static LIVE: Slab<LiveSlot> = Slab::new();

/// Registers a live allocation; the id goes back to [`forget_live`] when it is freed.
/// `None` when the table is full (the allocation is then missing from crash reports).
pub(crate) fn note_live(a: LiveView) -> Option<usize> {
    let (i, s) = LIVE.claim()?;
    let r = Ordering::Relaxed;
    s.size.store(a.size, r);
    s.lo.store(a.lo, r);
    s.hi.store(a.hi, r);
    s.device.store(a.device, r);
    s.guarded.store(u32::from(a.guarded), r);
    s.seq.store(a.seq, r);
    s.base.store(a.base, Ordering::Release);
    Some(i)
}

/// Removes a live allocation registered by [`note_live`].
pub(crate) fn forget_live(id: usize) {
    if let Some(s) = LIVE.get(id) {
        s.base.store(0, Ordering::Release);
        LIVE.release(id);
    }
}

/// Calls `f` on every live allocation until it returns false. Lock-free.
pub(crate) fn scan_live(mut f: impl FnMut(&LiveView) -> bool) {
    LIVE.scan(|s| {
        let base = s.base.load(Ordering::Acquire);
        if base == 0 {
            return true;
        }
        let r = Ordering::Relaxed;
        let v = LiveView {
            base,
            size: s.size.load(r),
            lo: s.lo.load(r),
            hi: s.hi.load(r),
            device: s.device.load(r),
            guarded: s.guarded.load(r) != 0,
            seq: s.seq.load(r),
        };
        if s.base.load(Ordering::Acquire) != base {
            return true;
        }
        f(&v)
    });
}

/// Bytes of a code name kept (longer names are cut).
pub(crate) const NAME_BYTES: usize = 160;

/// The name of one loaded code entry.
pub(crate) struct NameSlot {
    /// Entry address; 0 while the slot is free.
    pub(crate) entry: AtomicU64,
    len: AtomicU32,
    /// The UTF-8 bytes, 8 per word (little-endian).
    text: [AtomicU64; NAME_BYTES / 8],
}

impl Default for NameSlot {
    fn default() -> Self {
        NameSlot {
            entry: AtomicU64::new(0),
            len: AtomicU32::new(0),
            text: [const { AtomicU64::new(0) }; NAME_BYTES / 8],
        }
    }
}

/// The names of the process's loaded code.
static NAMES: Slab<NameSlot> = Slab::new();

/// `name` cut to at most [`NAME_BYTES`] bytes on a character boundary.
fn cut(name: &str) -> &str {
    let mut n = name.len().min(NAME_BYTES);
    while !name.is_char_boundary(n) {
        n -= 1;
    }
    &name[..n]
}

/// Registers `name` for the code entry at `entry`; `None` when the table is full.
pub(crate) fn note_name(entry: u64, name: &str) -> Option<usize> {
    let (i, s) = NAMES.claim()?;
    let name = cut(name);
    let mut words = [0u8; NAME_BYTES];
    words[..name.len()].copy_from_slice(name.as_bytes());
    for (w, chunk) in s.text.iter().zip(words.chunks_exact(8)) {
        w.store(
            u64::from_le_bytes(chunk.try_into().expect("8-byte chunk")),
            Ordering::Relaxed,
        );
    }
    s.len.store(name.len() as u32, Ordering::Relaxed);
    s.entry.store(entry, Ordering::Release);
    Some(i)
}

/// Removes a name registered by [`note_name`].
pub(crate) fn forget_name(id: usize) {
    if let Some(s) = NAMES.get(id) {
        s.entry.store(0, Ordering::Release);
        NAMES.release(id);
    }
}

/// Copies the name of the code at `entry` into `out`; returns its length, 0 if none is
/// registered (one of them when the same entry was named twice). Lock-free.
pub(crate) fn name_of(entry: u64, out: &mut [u8; NAME_BYTES]) -> usize {
    let mut len = 0;
    if entry == 0 {
        return 0;
    }
    NAMES.scan(|s| {
        if s.entry.load(Ordering::Acquire) != entry {
            return true;
        }
        let mut bytes = [0u8; NAME_BYTES];
        for (w, chunk) in s.text.iter().zip(bytes.chunks_exact_mut(8)) {
            chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        let n = (s.len.load(Ordering::Relaxed) as usize).min(NAME_BYTES);
        if s.entry.load(Ordering::Acquire) == entry {
            *out = bytes;
            len = n;
        }
        true
    });
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_are_cut_and_forgotten() {
        let mut out = [0u8; NAME_BYTES];
        let id = note_name(0xdead_0001, "`demo` kernel func 3").unwrap();
        let n = name_of(0xdead_0001, &mut out);
        assert_eq!(&out[..n], b"`demo` kernel func 3");
        let long = "é".repeat(NAME_BYTES);
        let id2 = note_name(0xdead_0002, &long).unwrap();
        let n = name_of(0xdead_0002, &mut out);
        assert!(
            n <= NAME_BYTES && n.is_multiple_of(2),
            "cut on a character boundary: {n}"
        );
        forget_name(id);
        forget_name(id2);
        assert_eq!(name_of(0xdead_0001, &mut out), 0);
    }

    #[test]
    fn live_allocations_are_listed_until_forgotten() {
        let a = LiveView {
            base: 0x5151_0000,
            size: 100,
            lo: 0x5151_0000,
            hi: 0x5151_0064,
            device: 7,
            guarded: false,
            seq: 4,
        };
        let id = note_live(a).unwrap();
        let mut seen = None;
        scan_live(|v| {
            if v.base == a.base {
                seen = Some(*v);
            }
            true
        });
        assert_eq!(seen, Some(a));
        forget_live(id);
        let mut still = false;
        scan_live(|v| {
            still |= v.base == a.base;
            true
        });
        assert!(!still);
    }
}
