//! The tensor map of one run: every live access (reader or writer, by which task) to host
//! memory or a chip's device memory, and the footprint test that decides which accesses
//! conflict (`docs/l3-worker.md` §3).
//!
//! A [`Footprint`] is an address space (this process's host memory, or chip `i`'s device
//! memory), the byte range `[start, end)` a view touches, and the view's geometry (first
//! byte, per-dimension extents, strides in bytes, element width). Two footprints overlap
//! when they share a byte: disjoint byte ranges never do; two views with equal strides whose
//! address decomposition is unique (each dimension's stride at least the span of the
//! dimensions inside it) are compared exactly, dimension by dimension, so two column blocks
//! of one row-major matrix do not overlap; anything else is assumed to overlap.
//!
//! The map owns no task state: it answers which tasks a new access must wait for and
//! forgets a task's accesses when the engine says the task is over. It never reads memory.

use std::collections::HashMap;

use crate::tensor::{Memory, Tag, Tensor};

/// A task of one run, by its index in the run's graph (`#3` in messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u32);

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Where an address lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum AddressSpace {
    /// This process's host memory (virtual addresses).
    Host,
    /// The device memory of chip `i` (its device addresses).
    Chip(usize),
}

/// The bytes a tensor view touches, and its geometry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Footprint {
    /// The address space.
    pub(crate) space: AddressSpace,
    /// First byte touched (absolute address in the space).
    pub(crate) start: u64,
    /// One past the last byte touched.
    pub(crate) end: u64,
    /// Per-dimension extents, in elements.
    extents: Vec<u64>,
    /// Per-dimension strides, in bytes.
    strides: Vec<u64>,
    /// Bytes of one element.
    elem: u64,
}

impl Footprint {
    /// The footprint of a view whose first element is at absolute address `offset`.
    ///
    /// `extents` and `strides` (bytes) have one entry per dimension, every extent ≥ 1;
    /// returns `None` when the last byte's address overflows.
    pub(crate) fn new(
        space: AddressSpace,
        offset: u64,
        extents: &[u64],
        strides: &[u64],
        elem: u64,
    ) -> Option<Footprint> {
        let mut last = 0u64;
        for (e, s) in extents.iter().zip(strides) {
            last = last.checked_add(e.checked_sub(1)?.checked_mul(*s)?)?;
        }
        let end = offset.checked_add(last)?.checked_add(elem)?;
        Some(Footprint {
            space,
            start: offset,
            end,
            extents: extents.to_vec(),
            strides: strides.to_vec(),
            elem,
        })
    }

    /// The footprint of `tensor`; `None` on address overflow (the view checks prevent it).
    pub(crate) fn of(tensor: &Tensor) -> Option<Footprint> {
        let (space, base) = match tensor.memory() {
            Memory::Host(m) => (AddressSpace::Host, m.as_ptr() as u64),
            Memory::Child(c) => (AddressSpace::Chip(c.worker), c.ptr.addr()),
        };
        let elem = tensor.dtype().size_bytes() as u64;
        let strides: Option<Vec<u64>> = tensor
            .strides()
            .iter()
            .map(|s| s.checked_mul(elem))
            .collect();
        Footprint::new(
            space,
            base.checked_add(tensor.byte_offset())?,
            tensor.shape(),
            &strides?,
            elem,
        )
    }

    /// True when the two views may share a byte: exact for views of equal strides whose
    /// decomposition is unique, conservative (true when the byte ranges meet) otherwise.
    pub(crate) fn overlaps(&self, other: &Footprint) -> bool {
        if self.space != other.space || self.end <= other.start || other.end <= self.start {
            return false;
        }
        self.exact_overlap(other).unwrap_or(true)
    }

    /// The exact answer when both views have the same strides and every dimension that
    /// either view extends has a stride at least the span of the dimensions inside it (so
    /// the candidate index differences per dimension are at most two); `None` otherwise.
    pub(crate) fn exact_overlap(&self, other: &Footprint) -> Option<bool> {
        if self.strides != other.strides {
            return None;
        }
        let n = self.strides.len();
        let spans = |extents: &[u64], elem: u64| -> Vec<i128> {
            let mut span = vec![0i128; n + 1];
            span[n] = i128::from(elem);
            for k in (0..n).rev() {
                span[k] = (i128::from(extents[k]) - 1) * i128::from(self.strides[k]) + span[k + 1];
            }
            span
        };
        let sa = spans(&self.extents, self.elem);
        let sb = spans(&other.extents, other.elem);
        for k in 0..n {
            let extended = self.extents[k].max(other.extents[k]) > 1;
            if extended && i128::from(self.strides[k]) < sa[k + 1].max(sb[k + 1]) {
                return None;
            }
        }
        let search = Search {
            strides: &self.strides,
            ea: &self.extents,
            eb: &other.extents,
            sa: &sa,
            sb: &sb,
        };
        Some(search.meets(0, i128::from(other.start) - i128::from(self.start)))
    }
}

/// The exact overlap search: view A at 0, view B at `d`, both with `strides`.
struct Search<'a> {
    strides: &'a [u64],
    ea: &'a [u64],
    eb: &'a [u64],
    /// `sa[k]`: bytes from A's first byte to past its last along dimensions `k..`.
    sa: &'a [i128],
    sb: &'a [i128],
}

impl Search<'_> {
    /// True when A's sub-view of dimensions `k..` at 0 and B's at `d` share a byte.
    ///
    /// At dimension `k`, A's slices `i` cover `[i·s, i·s + sa[k+1])` and B's slices `j`
    /// cover `[d + j·s, d + j·s + sb[k+1])`; they meet only when `δ = i − j` satisfies
    /// `d − sa[k+1] < δ·s < d + sb[k+1]`, and then the inner problem is the same one at
    /// offset `d − δ·s` whichever `(i, j)` realizes `δ`.
    fn meets(&self, k: usize, d: i128) -> bool {
        let n = self.strides.len();
        if k == n {
            // Two elements: [0, wa) and [d, d + wb).
            return -self.sb[n] < d && d < self.sa[n];
        }
        let (inner_a, inner_b) = (self.sa[k + 1], self.sb[k + 1]);
        let s = i128::from(self.strides[k]);
        let (ea, eb) = (i128::from(self.ea[k]), i128::from(self.eb[k]));
        if s == 0 {
            // Every slice is at the same place (only reached when both extents are 1).
            return self.meets(k + 1, d);
        }
        let lo = (d - inner_a).div_euclid(s) + 1;
        let hi = -(-(d + inner_b)).div_euclid(s) - 1;
        let (lo, hi) = (lo.max(-(eb - 1)), hi.min(ea - 1));
        (lo..=hi).any(|delta| self.meets(k + 1, d - delta * s))
    }
}

/// One live access of the run.
#[derive(Debug)]
struct Access {
    footprint: Footprint,
    task: TaskId,
    writer: bool,
}

/// The live accesses of one run, by address space.
#[derive(Debug, Default)]
pub(crate) struct TensorMap {
    spaces: HashMap<AddressSpace, Vec<Access>>,
}

impl TensorMap {
    /// Appends to `out` every task with a live access that an access `tag` of `footprint`
    /// must wait for: writers for INPUT; writers and readers for OUTPUT, OUTPUT_EXISTING and
    /// INOUT; nothing for NO_DEP. `out` may receive a task more than once.
    pub(crate) fn conflicts(&self, footprint: &Footprint, tag: Tag, out: &mut Vec<TaskId>) {
        if tag == Tag::NoDep {
            return;
        }
        let Some(accesses) = self.spaces.get(&footprint.space) else {
            return;
        };
        let any = tag.writes();
        out.extend(
            accesses
                .iter()
                .filter(|a| (any || a.writer) && a.footprint.overlaps(footprint))
                .map(|a| a.task),
        );
    }

    /// Records `task`'s access `tag` of `footprint` (reader for INPUT, writer for the
    /// writing tags, nothing for NO_DEP).
    pub(crate) fn record(&mut self, footprint: Footprint, tag: Tag, task: TaskId) {
        if tag == Tag::NoDep {
            return;
        }
        self.spaces
            .entry(footprint.space)
            .or_default()
            .push(Access {
                footprint,
                task,
                writer: tag.writes(),
            });
    }

    /// Forgets `task`'s accesses in `spaces` (the spaces it recorded accesses in): all of
    /// them, or only its reads when `keep_writes` (a failed task's writes stay, so later
    /// consumers of what it should have written are poisoned).
    pub(crate) fn retire(&mut self, task: TaskId, spaces: &[AddressSpace], keep_writes: bool) {
        for space in spaces {
            if let Some(accesses) = self.spaces.get_mut(space) {
                accesses.retain(|a| a.task != task || (keep_writes && a.writer));
            }
        }
    }

    /// Live accesses, all spaces together.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.spaces.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn fp(offset: u64, extents: &[u64], strides: &[u64], elem: u64) -> Footprint {
        Footprint::new(AddressSpace::Host, offset, extents, strides, elem).unwrap()
    }

    fn bytes(f: &Footprint) -> HashSet<u64> {
        let mut out = HashSet::new();
        let n = f.extents.len();
        let mut idx = vec![0u64; n];
        loop {
            let base: u64 = f.start + idx.iter().zip(&f.strides).map(|(i, s)| i * s).sum::<u64>();
            out.extend(base..base + f.elem);
            let mut k = n;
            loop {
                if k == 0 {
                    return out;
                }
                k -= 1;
                idx[k] += 1;
                if idx[k] < f.extents[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
    }

    #[test]
    fn column_blocks_of_one_matrix_do_not_overlap_but_rows_and_the_whole_do() {
        // A 4 x 8 row-major f32 matrix: row stride 32 bytes.
        let left = fp(0, &[4, 4], &[32, 4], 4);
        let right = fp(16, &[4, 4], &[32, 4], 4);
        let whole = fp(0, &[4, 8], &[32, 4], 4);
        let mid = fp(8, &[4, 4], &[32, 4], 4);
        assert!(!left.overlaps(&right) && !right.overlaps(&left));
        assert!(left.overlaps(&whole) && right.overlaps(&whole));
        assert!(left.overlaps(&mid) && mid.overlaps(&right));
        let row1_left = fp(32, &[1, 4], &[32, 4], 4);
        assert!(row1_left.overlaps(&left) && !row1_left.overlaps(&right));
        // Other strides: conservative on the byte ranges.
        let flat = fp(0, &[32], &[4], 4);
        assert!(flat.overlaps(&right));
        assert!(!fp(128, &[4], &[4], 4).overlaps(&whole));
        // Another address space never overlaps.
        let mut chip = left.clone();
        chip.space = AddressSpace::Chip(0);
        assert!(!chip.overlaps(&left));
    }

    #[test]
    fn lookups_follow_the_tags_and_retired_tasks_are_forgotten() {
        let mut map = TensorMap::default();
        let a = fp(0, &[16], &[4], 4);
        let b = fp(32, &[16], &[4], 4);
        map.record(a.clone(), Tag::Output, TaskId(0));
        map.record(a.clone(), Tag::Input, TaskId(1));
        map.record(b.clone(), Tag::NoDep, TaskId(2));
        let mut out = Vec::new();
        map.conflicts(&b, Tag::Input, &mut out);
        assert_eq!(out, [TaskId(0)], "a reader waits for writers only");
        out.clear();
        map.conflicts(&b, Tag::InOut, &mut out);
        assert_eq!(
            out,
            [TaskId(0), TaskId(1)],
            "a writer waits for both (WAW, WAR)"
        );
        out.clear();
        map.conflicts(&b, Tag::NoDep, &mut out);
        assert!(out.is_empty());
        map.retire(TaskId(1), &[AddressSpace::Host], true);
        out.clear();
        map.conflicts(&b, Tag::Output, &mut out);
        assert_eq!(out, [TaskId(0)], "a failed reader is forgotten");
        map.retire(TaskId(0), &[AddressSpace::Host], true);
        out.clear();
        map.conflicts(&b, Tag::Input, &mut out);
        assert_eq!(out, [TaskId(0)], "a failed writer stays");
        map.retire(TaskId(0), &[AddressSpace::Host], false);
        out.clear();
        map.conflicts(&b, Tag::Output, &mut out);
        assert!(out.is_empty());
        assert_eq!(map.len(), 0);
    }

    fn view() -> impl Strategy<Value = (u64, Vec<u64>, Vec<u64>, u64)> {
        (1usize..=3, prop::sample::select(vec![1u64, 2, 4])).prop_flat_map(|(rank, elem)| {
            (
                0u64..24,
                prop::collection::vec(1u64..=4, rank),
                prop::collection::vec(1u64..=8, rank),
                Just(elem),
            )
                .prop_map(move |(off, ext, st, elem)| {
                    (off, ext, st.into_iter().map(|s| s * elem).collect(), elem)
                })
        })
    }

    /// Two sub-boxes of one C-order parent array (equal strides, unique decomposition):
    /// per dimension a parent extent, and each box's start and extent inside it.
    fn boxes_of_one_parent() -> impl Strategy<Value = (Footprint, Footprint)> {
        (1usize..=3, prop::sample::select(vec![1u64, 2, 4])).prop_flat_map(|(rank, elem)| {
            let dim = (1u64..=5).prop_flat_map(|parent| {
                (Just(parent), 0..parent, 0..parent).prop_flat_map(move |(p, a0, b0)| {
                    (Just(p), Just(a0), 1..=p - a0, Just(b0), 1..=p - b0)
                })
            });
            prop::collection::vec(dim, rank).prop_map(move |dims| {
                let parent: Vec<u64> = dims.iter().map(|d| d.0).collect();
                let strides: Vec<u64> = crate::tensor::c_strides(&parent)
                    .iter()
                    .map(|s| s * elem)
                    .collect();
                let at = |starts: Vec<u64>| starts.iter().zip(&strides).map(|(i, s)| i * s).sum();
                let a = fp(
                    at(dims.iter().map(|d| d.1).collect()),
                    &dims.iter().map(|d| d.2).collect::<Vec<_>>(),
                    &strides,
                    elem,
                );
                let b = fp(
                    at(dims.iter().map(|d| d.3).collect()),
                    &dims.iter().map(|d| d.4).collect::<Vec<_>>(),
                    &strides,
                    elem,
                );
                (a, b)
            })
        })
    }

    fn check(fa: &Footprint, fb: &Footprint) -> Result<Option<bool>, TestCaseError> {
        let truth = !bytes(fa).is_disjoint(&bytes(fb));
        let answer = fa.overlaps(fb);
        prop_assert_eq!(answer, fb.overlaps(fa), "symmetric");
        prop_assert!(
            answer || !truth,
            "never misses an overlap: {:?} {:?}",
            fa,
            fb
        );
        let exact = fa.exact_overlap(fb);
        if let Some(exact) = exact {
            prop_assert_eq!(exact, truth, "exact when eligible: {:?} {:?}", fa, fb);
        }
        Ok(exact)
    }

    proptest! {
        #[test]
        fn overlaps_agrees_with_brute_force(
            a in view(),
            b in view(),
            same_strides in any::<bool>(),
            b_elem_from_a in any::<bool>(),
        ) {
            let fa = fp(a.0, &a.1, &a.2, a.3);
            let (strides, ext, elem) = if same_strides {
                // Same rank and strides as A, B's own extents (cut or padded to A's rank).
                let ext: Vec<u64> = (0..a.1.len()).map(|k| *b.1.get(k).unwrap_or(&1)).collect();
                let elem = if b_elem_from_a { a.3 } else { b.3.min(a.3) };
                (a.2.clone(), ext, elem)
            } else {
                (b.2.clone(), b.1.clone(), b.3)
            };
            check(&fa, &fp(b.0, &ext, &strides, elem))?;
        }

        #[test]
        fn boxes_of_one_array_are_compared_exactly((a, b) in boxes_of_one_parent()) {
            let exact = check(&a, &b)?;
            prop_assert!(exact.is_some(), "sub-boxes of a C-order array are eligible: {:?} {:?}", a, b);
        }
    }
}
