//! Dependency discovery from tensor regions (`docs/chip-runtime.md`, tensor map), owned by the
//! orchestrator thread.
//!
//! Accesses are keyed by buffer base address, so every view of one buffer is compared with
//! every other. Two views overlap when their byte ranges intersect and — where both views
//! share strides that nest (row-major style) — when their per-dimension index boxes
//! intersect too; otherwise the byte-range answer stands (conservative: a false overlap
//! only adds an edge). A reader waits for earlier overlapping writers (RAW); a writer waits
//! for earlier overlapping writers (WAW) and readers (WAR). Entries of completed tasks are
//! pruned as they are met, and swept from the whole map as their tasks are reclaimed.

use std::collections::HashMap;

use simpler_abi::{ChipTensor, MAX_TENSOR_DIMS};

/// Why a new access must wait for an earlier one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConflictKind {
    /// A read after an overlapping write.
    Raw,
    /// A write after an overlapping write.
    Waw,
    /// A write after an overlapping read.
    War,
}

/// The part of a buffer a view touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// First byte touched (absolute address).
    pub lo: u64,
    /// One past the last byte touched.
    pub hi: u64,
    elem: u64,
    ndims: u32,
    start: u64,
    shapes: [u64; MAX_TENSOR_DIMS],
    strides: [u64; MAX_TENSOR_DIMS],
}

impl Region {
    /// The region of a view with element size `elem` bytes, or `None` for an empty view.
    pub fn of(t: &ChipTensor, elem: u64) -> Option<Region> {
        let nd = (t.ndims as usize).min(MAX_TENSOR_DIMS);
        if nd == 0 || t.shapes[..nd].contains(&0) {
            return None;
        }
        let mut last = t.start_offset;
        for d in 0..nd {
            last = last.checked_add((t.shapes[d] - 1).checked_mul(t.strides[d])?)?;
        }
        Some(Region {
            lo: t
                .buffer_addr
                .checked_add(t.start_offset.checked_mul(elem)?)?,
            hi: t
                .buffer_addr
                .checked_add(last.checked_add(1)?.checked_mul(elem)?)?,
            elem,
            ndims: nd as u32,
            start: t.start_offset,
            shapes: t.shapes,
            strides: t.strides,
        })
    }

    /// Per-dimension origin of the view when its elements have unique mixed-radix
    /// coordinates under its strides (each stride a multiple of the next, and each inner
    /// index range within the extent the outer stride implies); `None` otherwise.
    fn origin(&self) -> Option<[u64; MAX_TENSOR_DIMS]> {
        let nd = self.ndims as usize;
        let strides = &self.strides[..nd];
        if strides.contains(&0) || strides.windows(2).any(|w| w[0] % w[1] != 0) {
            return None;
        }
        let mut rem = self.start;
        let mut o = [0u64; MAX_TENSOR_DIMS];
        for (o, &stride) in o.iter_mut().zip(strides) {
            *o = rem / stride;
            rem %= stride;
        }
        // Exact only if every inner index range stays inside the extent its outer stride
        // implies (a view wider than a row wraps into the next row).
        let fits = (1..nd).all(|d| (o[d] + self.shapes[d]) * strides[d] <= strides[d - 1]);
        (rem == 0 && fits).then_some(o)
    }

    /// Whether two views of the same buffer may touch a common byte.
    pub fn overlaps(&self, other: &Region) -> bool {
        if self.lo >= other.hi || other.lo >= self.hi {
            return false;
        }
        let nd = self.ndims as usize;
        if self.elem != other.elem
            || self.ndims != other.ndims
            || self.strides[..nd] != other.strides[..nd]
        {
            return true;
        }
        match (self.origin(), other.origin()) {
            (Some(a), Some(b)) => {
                (0..nd).all(|d| a[d] < b[d] + other.shapes[d] && b[d] < a[d] + self.shapes[d])
            }
            _ => true,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Access {
    task: u64,
    region: Region,
}

/// The recorded accesses of one buffer, oldest first, writers apart from readers: a reader
/// conflicts only with writers, so it never scans the readers (every task of a long flat
/// graph may read the same weights).
#[derive(Default)]
struct Accesses {
    writes: Vec<Access>,
    reads: Vec<Access>,
}

impl Accesses {
    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.reads.is_empty()
    }
}

/// The tensor map: recent accesses per buffer.
///
/// Entries of completed tasks are pruned when their buffer is next met, and
/// [`sweep`](TensorMap::sweep) drops those of buffers never met again, so the map holds
/// about as many entries as there are live tasks however long the run is.
#[derive(Default)]
pub struct TensorMap {
    buffers: HashMap<u64, Accesses>,
    /// Emptied access lists of swept buffers, kept (with their capacity) for buffers met
    /// later: a run that allocates many short-lived intermediates then records their
    /// accesses without allocating.
    spare: Vec<Accesses>,
}

/// Most emptied access lists [`TensorMap::sweep`] keeps.
const SPARE_LISTS: usize = 4096;

/// Maps of finished runs, emptied, for later runs' orchestrators ([`TensorMap::recycled`]):
/// a run then starts with the table capacity and access lists of the one before.
static RECYCLED: parking_lot::Mutex<Vec<TensorMap>> = parking_lot::Mutex::new(Vec::new());
/// Most maps kept in [`RECYCLED`] (one per run lane in flight is plenty).
const RECYCLED_MAPS: usize = 4;

impl Drop for TensorMap {
    /// Empties the map and keeps it for a later run, unless it never held anything or
    /// enough maps are kept already.
    fn drop(&mut self) {
        if self.buffers.capacity() == 0 || RECYCLED.lock().len() >= RECYCLED_MAPS {
            return;
        }
        let mut map = std::mem::take(self);
        for (_, mut list) in map.buffers.drain() {
            if map.spare.len() >= SPARE_LISTS {
                break;
            }
            list.writes.clear();
            list.reads.clear();
            map.spare.push(list);
        }
        // `kept` is released before `map` could drop: a map that finds the list filled
        // meanwhile drops here and, looking again, frees itself.
        let mut kept = RECYCLED.lock();
        if kept.len() < RECYCLED_MAPS {
            kept.push(map);
        }
    }
}

impl TensorMap {
    /// An empty map, reusing one a finished run left (see [`RECYCLED`]) when there is one.
    pub fn recycled() -> TensorMap {
        RECYCLED.lock().pop().unwrap_or_default()
    }

    /// Collects into `deps` the tasks a new access of `region` in buffer `base` must wait
    /// for, skipping (and pruning) tasks for which `is_done` holds: earlier overlapping
    /// writers for a read; earlier overlapping writers and readers for a write.
    pub fn conflicts(
        &mut self,
        base: u64,
        region: &Region,
        write: bool,
        is_done: impl Fn(u64) -> bool,
        deps: &mut Vec<u64>,
    ) {
        self.conflicts_by_kind(base, region, write, is_done, deps, |_| {});
    }

    /// [`conflicts`](TensorMap::conflicts), also calling `kind` once for every task it
    /// adds to `deps`, in the order added, with the kind of the conflict that added it.
    pub fn conflicts_by_kind(
        &mut self,
        base: u64,
        region: &Region,
        write: bool,
        is_done: impl Fn(u64) -> bool,
        deps: &mut Vec<u64>,
        mut kind: impl FnMut(ConflictKind),
    ) {
        let Some(list) = self.buffers.get_mut(&base) else {
            return;
        };
        let mut scan = |accesses: &mut Vec<Access>, k: ConflictKind| {
            accesses.retain(|a| !is_done(a.task));
            for a in accesses.iter() {
                if a.region.overlaps(region) && !deps.contains(&a.task) {
                    deps.push(a.task);
                    kind(k);
                }
            }
        };
        let on_writes = if write {
            ConflictKind::Waw
        } else {
            ConflictKind::Raw
        };
        scan(&mut list.writes, on_writes);
        if write {
            scan(&mut list.reads, ConflictKind::War);
        }
    }

    /// Records an access by `task`. A write drops earlier entries it fully covers with the
    /// same geometry, which it now orders behind itself.
    pub fn record(&mut self, base: u64, region: Region, write: bool, task: u64) {
        let spare = &mut self.spare;
        let list = self
            .buffers
            .entry(base)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        let access = Access { task, region };
        if write {
            list.writes.retain(|a| a.region != region);
            list.reads.retain(|a| a.region != region);
            list.writes.push(access);
        } else {
            list.reads.push(access);
        }
    }

    /// Drops every entry of a task for which `is_done` holds, and every buffer left with
    /// none; cost: one pass over the map.
    pub fn sweep(&mut self, is_done: impl Fn(u64) -> bool) {
        let spare = &mut self.spare;
        self.buffers.retain(|_, list| {
            list.writes.retain(|a| !is_done(a.task));
            list.reads.retain(|a| !is_done(a.task));
            if !list.is_empty() {
                return true;
            }
            if spare.len() < SPARE_LISTS {
                spare.push(std::mem::take(list));
            }
            false
        });
    }

    /// Entries held (all buffers).
    pub fn len(&self) -> usize {
        self.buffers
            .values()
            .map(|l| l.writes.len() + l.reads.len())
            .sum()
    }

    /// True when the map holds no entry.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simpler_abi::DataType;

    fn tile(base: u64, r0: u64, c0: u64, rows: u64, cols: u64) -> Region {
        let mut t = ChipTensor::contiguous(base, &[512, 512], DataType::Float32);
        t.start_offset = r0 * 512 + c0;
        t.shapes[0] = rows;
        t.shapes[1] = cols;
        Region::of(&t, 4).unwrap()
    }

    #[test]
    fn side_by_side_tiles_do_not_overlap_but_byte_ranges_do() {
        let a = tile(0x1000, 0, 0, 64, 64);
        let b = tile(0x1000, 0, 64, 64, 64);
        assert!(a.lo < b.hi && b.lo < a.hi, "the byte ranges interleave");
        assert!(!a.overlaps(&b));
        assert!(a.overlaps(&tile(0x1000, 63, 63, 2, 2)));
        assert!(!a.overlaps(&tile(0x1000, 64, 0, 64, 64)));
    }

    #[test]
    fn raw_waw_and_war_edges() {
        let mut m = TensorMap::default();
        let r = tile(0x1000, 0, 0, 64, 64);
        let none = |_| false;
        let mut d = Vec::new();
        m.record(0x1000, r, true, 1); // writer
        m.conflicts(0x1000, &r, false, none, &mut d);
        assert_eq!(d, vec![1], "RAW");
        m.record(0x1000, r, false, 2); // reader
        d.clear();
        m.conflicts(0x1000, &r, true, none, &mut d);
        assert_eq!(d, vec![1, 2], "WAW and WAR");
        d.clear();
        m.conflicts(0x1000, &r, true, |t| t == 1, &mut d);
        assert_eq!(d, vec![2], "completed tasks are skipped");
        d.clear();
        m.conflicts(0x1000, &tile(0x1000, 64, 64, 8, 8), true, none, &mut d);
        assert!(d.is_empty());
    }

    #[test]
    fn a_sweep_drops_the_entries_of_done_tasks_and_empty_buffers() {
        let mut m = TensorMap::default();
        let r = tile(0x1000, 0, 0, 8, 8);
        let s = tile(0x9000, 0, 0, 8, 8);
        m.record(0x1000, r, true, 1);
        m.record(0x1000, r, false, 2);
        m.record(0x9000, s, false, 3);
        assert_eq!(m.len(), 3);
        m.sweep(|t| t != 2);
        assert_eq!(m.len(), 1, "only the live reader is left");
        let mut d = Vec::new();
        m.conflicts(0x1000, &r, true, |_| false, &mut d);
        assert_eq!(d, vec![2]);
        m.sweep(|_| true);
        assert!(m.is_empty(), "a buffer with no entry left is dropped");
    }

    #[test]
    fn readers_of_one_region_pile_up_without_ordering_each_other() {
        let mut m = TensorMap::default();
        let r = tile(0x1000, 0, 0, 8, 8);
        let mut d = Vec::new();
        for t in 0..100 {
            m.conflicts(0x1000, &r, false, |_| false, &mut d);
            m.record(0x1000, r, false, t);
        }
        assert!(d.is_empty(), "reads never wait for reads");
        m.conflicts(0x1000, &r, true, |t| t < 90, &mut d);
        assert_eq!(
            d,
            (90..100).collect::<Vec<_>>(),
            "a write waits for every live reader"
        );
        m.record(0x1000, r, true, 100);
        assert_eq!(m.len(), 1, "the write covers the readers' region");
    }

    #[test]
    fn a_view_wider_than_its_row_wraps_into_the_next() {
        // Elements 5..21 of rows of 16: the view wraps into row 1, which the reader reads.
        let mut w = ChipTensor::contiguous(0x1000, &[4, 16], DataType::Uint32);
        w.start_offset = 5;
        w.shapes = [1, 16, 0, 0, 0];
        let mut r = w;
        r.start_offset = 16;
        r.shapes = [1, 4, 0, 0, 0];
        let (w, r) = (Region::of(&w, 4).unwrap(), Region::of(&r, 4).unwrap());
        assert!(w.overlaps(&r));
        assert!(r.overlaps(&w));
    }

    #[test]
    fn mismatched_geometry_falls_back_to_bytes() {
        let a = tile(0x1000, 0, 0, 64, 64);
        let mut t = ChipTensor::contiguous(0x1000, &[1024], DataType::Float32);
        t.start_offset = 64;
        t.shapes[0] = 4;
        let flat = Region::of(&t, 4).unwrap();
        assert!(a.overlaps(&flat), "different strides: byte ranges decide");
    }
}
