//! What the Perfetto and Chrome writers share: a run's device-clock window, its dependency
//! flows, each subtask's kernel name and submit index looked up once per task, the lanes
//! that make every track's slices nest ([`nest`]), and the cheap hash map they (and
//! `tracks::ThreadIndex`) look events up in.
//!
//! Owns no format: the writers (`perfetto`, `chrome`) turn these into their own events. Reads
//! the model only (`crate::model`, which it must not change).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::model::{DepEdge, RunTrace, TaskIndex};

/// A hash map keyed by our own ids (task ids, core ids, names we write), hashed by a multiply
/// per word instead of SipHash: the writers look one up per event, and the keys come from a
/// trace, not from an adversary.
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// The hasher of [`FastMap`] (the Fx hash: rotate, xor, multiply per word).
#[derive(Clone, Copy, Default)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("an 8-byte chunk")));
        }
        let mut last = [0u8; 8];
        let rest = chunks.remainder();
        last[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_le_bytes(last) ^ (rest.len() as u64) << 56);
    }

    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits weakest; hashbrown takes its bucket from them.
        self.0.rotate_left(26)
    }
}

/// The device-clock window of a run: first to last recorded device time (0..0 when empty).
pub(crate) fn run_window(run: &RunTrace) -> (u64, u64) {
    let times = run
        .subtasks
        .iter()
        .flat_map(|s| [s.start_ns, s.end_ns])
        .chain(run.aicpu.iter().flat_map(|a| [a.start_ns, a.end_ns]))
        .chain(run.counters.iter().map(|c| c.ts_ns));
    let (lo, hi) = times.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)));
    if lo > hi {
        (0, 0)
    } else {
        (lo, hi)
    }
}

/// One flow ending at a consumer's subtask.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Incoming {
    /// The flow id.
    pub(crate) id: u64,
    /// The edge it draws.
    pub(crate) edge: DepEdge,
    /// Index (in the run's subtasks) of the producer's last-ending subtask, where it starts.
    pub(crate) from: usize,
}

/// The flows of one run (docs/tracing.md §6, "Flows"): per edge with subtasks on both sides,
/// in edge order, one flow id, from the producer's last-ending subtask to the consumer's
/// first-starting subtask; looked up by subtask index.
pub(crate) struct Flows {
    /// `out[out_at[i]..out_at[i + 1]]`: the ids of the flows starting at subtask `i`.
    out_at: Vec<usize>,
    out: Vec<u64>,
    /// `ins[in_at[i]..in_at[i + 1]]`: the flows ending at subtask `i`.
    in_at: Vec<usize>,
    ins: Vec<Incoming>,
}

impl Flows {
    /// The flows of `run`, numbered from `*last_id + 1` on (`*last_id` ends at the last one
    /// given out, so ids stay unique across the runs of a file).
    pub(crate) fn new(run: &RunTrace, last_id: &mut u64) -> Flows {
        // Per task: (first-starting, last-ending) subtask; the first of equals wins.
        let mut ends: FastMap<u64, (usize, usize)> = FastMap::default();
        ends.reserve(run.tasks.len());
        for (i, s) in run.subtasks.iter().enumerate() {
            let (first, last) = ends.entry(s.task).or_insert((i, i));
            if run.subtasks[*last].end_ns < s.end_ns {
                *last = i;
            }
            if run.subtasks[*first].start_ns > s.start_ns {
                *first = i;
            }
        }
        // Per edge with both ends: (producer's subtask, consumer's subtask, id, edge).
        let linked: Vec<(usize, usize, u64, DepEdge)> = run
            .edges
            .iter()
            .filter_map(|e| {
                let (&(_, p), &(c, _)) = (ends.get(&e.producer)?, ends.get(&e.consumer)?);
                *last_id += 1;
                Some((p, c, *last_id, *e))
            })
            .collect();
        let n = run.subtasks.len();
        let (out_at, by_producer) = bucket(n, linked.iter().map(|l| l.0));
        let (in_at, by_consumer) = bucket(n, linked.iter().map(|l| l.1));
        Flows {
            out_at,
            out: by_producer.iter().map(|&k| linked[k].2).collect(),
            in_at,
            ins: by_consumer
                .iter()
                .map(|&k| {
                    let (from, _, id, edge) = linked[k];
                    Incoming { id, edge, from }
                })
                .collect(),
        }
    }

    /// The ids of the flows starting at subtask `i`, in edge order.
    pub(crate) fn outgoing(&self, i: usize) -> &[u64] {
        &self.out[self.out_at[i]..self.out_at[i + 1]]
    }

    /// The flows ending at subtask `i`, in edge order.
    pub(crate) fn incoming(&self, i: usize) -> &[Incoming] {
        &self.ins[self.in_at[i]..self.in_at[i + 1]]
    }
}

/// A counting sort of items `0..` into `n` buckets, item k into bucket `keys[k]`: returns the
/// bucket offsets (bucket `i` is `order[at[i]..at[i + 1]]`, `n + 1` of them) and the items in
/// bucket order, each bucket's in item order.
pub(crate) fn bucket(
    n: usize,
    keys: impl Iterator<Item = usize> + Clone,
) -> (Vec<usize>, Vec<usize>) {
    let mut at = vec![0; n + 1];
    for k in keys.clone() {
        at[k + 1] += 1;
    }
    for i in 0..n {
        at[i + 1] += at[i];
    }
    let mut next = at.clone();
    let mut order = vec![0; at[n]];
    for (item, k) in keys.enumerate() {
        order[next[k]] = item;
        next[k] += 1;
    }
    (at, order)
}

/// Where [`nest`] put each slice.
pub(crate) struct Lanes {
    /// Per slice, in input order: its lane on its track, 0 for the track itself, `k > 0` for
    /// the track's k-th overflow track.
    pub lane: Vec<u32>,
    /// The slices in the order they were placed: by track, then by start, longest first.
    /// Lane `k > 0` of a track is first used by a later slice than lane `k - 1`.
    pub order: Vec<usize>,
}

/// Puts the slices `(track, start, end)` (`track < tracks`, times in one clock) in lanes so
/// that the slices of every lane of a track nest: viewers pair a track's begins and ends like
/// brackets, and the Chrome JSON format does not allow crossing complete events on one
/// thread. A slice that would cross one still open in every lane so far takes a new lane; an
/// end before its start counts as the start. Cost: a sort per track, then per slice a walk
/// over the track's lanes.
pub(crate) fn nest(tracks: usize, slices: &[(usize, u64, u64)]) -> Lanes {
    let (at, mut order) = bucket(tracks, slices.iter().map(|s| s.0));
    for t in 0..tracks {
        order[at[t]..at[t + 1]].sort_by_key(|&k| (slices[k].1, std::cmp::Reverse(slices[k].2)));
    }
    let mut lane = vec![0u32; slices.len()];
    // The lanes of the current track, each a stack of open slice ends.
    let mut open: Vec<Vec<u64>> = Vec::new();
    let mut track = usize::MAX;
    for &k in &order {
        let (t, start, end) = slices[k];
        let end = end.max(start);
        if t != track {
            track = t;
            open.clear();
        }
        let mut chosen = None;
        for (i, stack) in open.iter_mut().enumerate() {
            while stack.last().is_some_and(|&top| top <= start) {
                stack.pop();
            }
            if stack.last().is_none_or(|&top| top >= end) {
                stack.push(end);
                chosen = Some(i);
                break;
            }
        }
        lane[k] = match chosen {
            Some(i) => i as u32,
            None => {
                open.push(vec![end]);
                (open.len() - 1) as u32
            }
        };
    }
    Lanes { lane, order }
}

/// The kernel name (`TaskIndex::kernel_name`) and submit index of one run's subtasks, each
/// distinct (task, func id) looked up once, its name kept as the writer's own handle `T` (an
/// interned id, say).
pub(crate) struct SubtaskNames<'r, T> {
    index: TaskIndex<'r>,
    memo: FastMap<Kernel, (T, Option<u64>)>,
    /// The last lookup: a task's blocks tend to come one after another.
    last: Option<(Kernel, (T, Option<u64>))>,
}

/// A (task, func id) pair.
type Kernel = (u64, u32);

impl<'r, T: Copy> SubtaskNames<'r, T> {
    /// The names of `run`'s subtasks: every recorded task's kernels looked up at once, in
    /// task order (the model's own order, kind to the cache), each name's handle `make` of it.
    pub(crate) fn new(run: &'r RunTrace, mut make: impl FnMut(&str) -> T) -> SubtaskNames<'r, T> {
        let index = TaskIndex::new(run);
        let mut memo = FastMap::default();
        memo.reserve(run.tasks.len());
        for t in &run.tasks {
            for k in &t.kernels {
                memo.entry((t.task, k.func_id)).or_insert_with(|| {
                    (
                        make(&index.kernel_name(t.task, k.func_id)),
                        index.task(t.task).map(|t| t.submit_index),
                    )
                });
            }
        }
        SubtaskNames {
            index,
            memo,
            last: None,
        }
    }

    /// The kernel name's handle and the task's submit index (`None`: the task was not
    /// recorded) of a subtask of `task` running `func_id`; the handle is `make` of the name on
    /// the pair's first lookup, the same after.
    pub(crate) fn get(
        &mut self,
        task: u64,
        func_id: u32,
        make: impl FnOnce(&str) -> T,
    ) -> (T, Option<u64>) {
        let key = (task, func_id);
        if let Some((k, v)) = self.last {
            if k == key {
                return v;
            }
        }
        let index = &self.index;
        let v = *self.memo.entry(key).or_insert_with(|| {
            (
                make(&index.kernel_name(task, func_id)),
                index.task(task).map(|t| t.submit_index),
            )
        });
        self.last = Some((key, v));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;

    #[test]
    fn buckets_keep_item_order() {
        let (at, order) = bucket(3, [2, 0, 2, 0].into_iter());
        assert_eq!(at, [0, 2, 2, 4]);
        assert_eq!(order, [1, 3, 0, 2]);
    }

    #[test]
    fn flows_join_last_producer_end_to_first_consumer_start() {
        let sub = |task, start_ns, end_ns| SubtaskSpan {
            task,
            func_id: 0,
            core: 0,
            core_kind: CoreKind::Aic,
            block: 0,
            start_ns,
            end_ns,
        };
        let edge = |producer, consumer| DepEdge {
            producer,
            consumer,
            kind: EdgeKind::Raw,
        };
        let run = RunTrace {
            subtasks: vec![
                sub(1, 0, 50),
                sub(1, 10, 90),
                sub(2, 200, 300),
                sub(2, 100, 150),
            ],
            // The edge from task 7 has no subtask of its producer: no flow.
            edges: vec![edge(1, 2), edge(7, 2), edge(2, 1)],
            ..Default::default()
        };
        let mut last = 40;
        let f = Flows::new(&run, &mut last);
        assert_eq!(last, 42);
        assert_eq!(f.outgoing(1), [41]);
        assert_eq!(f.outgoing(2), [42]);
        assert!(f.outgoing(0).is_empty() && f.outgoing(3).is_empty());
        let ins: Vec<(u64, u64, usize)> = f
            .incoming(3)
            .iter()
            .map(|i| (i.id, i.edge.producer, i.from))
            .collect();
        assert_eq!(ins, [(41, 1, 1)]);
        assert_eq!(f.incoming(0)[0].from, 2);
    }

    #[test]
    fn subtask_names_agree_with_the_task_index() {
        let t = crate::sample::synthetic(&crate::sample::SampleSpec::default());
        let run = &t.processes[0].runs[0];
        let index = TaskIndex::new(run);
        let mut made: Vec<String> = Vec::new();
        let mut names = SubtaskNames::new(run, |n| {
            made.push(n.to_string());
            made.len() - 1
        });
        for s in run.subtasks.iter().chain(&run.subtasks) {
            let (name, submit) = names.get(s.task, s.func_id, |n| {
                made.push(n.to_string());
                made.len() - 1
            });
            assert_eq!(made[name], index.kernel_name(s.task, s.func_id));
            assert_eq!(submit, index.task(s.task).map(|t| t.submit_index));
        }
        assert_eq!(made.len(), run.tasks.len(), "one lookup per task");
        // A task the run did not record: its func id's name from another task, no submit index.
        let (name, submit) = names.get(999, 0, |n| {
            made.push(n.to_string());
            made.len() - 1
        });
        assert_eq!((made[name].as_str(), submit), ("gemm_tile", None));
    }
}
