//! The critical path of a traced run: the longest path through its task DAG (the trace's
//! dependency edges), each task weighing its kernel time. Pure arithmetic over the trace
//! model's subtask spans and edges; this module measures nothing.
//!
//! A task's **kernel time** is the time its longest block spent in kernels: per block, the
//! summed spans of that block's subtasks (one per lane: a mixed task's AIC and AIV parts of
//! one block count together), then the maximum over the blocks (blocks may run side by
//! side). A task without subtasks (an allocation-only task) weighs 0.

use std::collections::HashMap;

use simpler_host::trace_model::{DepEdge, SubtaskSpan};

/// The edges of a trace hold a cycle, which no run's task graph can: the trace is not one
/// run's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the dependency edges of the trace form a cycle through {tasks} task(s)")]
pub struct CycleError {
    /// Tasks left unvisited by the topological order (on or behind a cycle).
    pub tasks: usize,
}

/// The critical path of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CriticalPath {
    /// The summed kernel time of the tasks on the longest path, ns.
    pub kernel_ns: u64,
    /// Tasks on that path.
    pub tasks: usize,
}

/// Each task's kernel time (module doc), ns, by task id.
pub fn task_kernel_ns(subtasks: &[SubtaskSpan]) -> HashMap<u64, u64> {
    let mut per_block: HashMap<(u64, u32), u64> = HashMap::with_capacity(subtasks.len());
    for s in subtasks {
        *per_block.entry((s.task, s.block)).or_default() += s.duration_ns();
    }
    let mut out: HashMap<u64, u64> = HashMap::with_capacity(per_block.len());
    for ((task, _), ns) in per_block {
        let w = out.entry(task).or_default();
        *w = (*w).max(ns);
    }
    out
}

/// The longest path through the DAG of `edges` (producer before consumer), every task of
/// `subtasks` or `edges` weighing its kernel time ([`task_kernel_ns`]); independent tasks are
/// paths of one task. Duplicate edges count once in effect (the longest path is the same).
///
/// # Errors
/// [`CycleError`] when the edges form a cycle.
pub fn critical_path(
    subtasks: &[SubtaskSpan],
    edges: &[DepEdge],
) -> Result<CriticalPath, CycleError> {
    let weights = task_kernel_ns(subtasks);
    // Dense indices: every task that has a weight or an edge.
    let mut index: HashMap<u64, usize> = HashMap::with_capacity(weights.len());
    let mut weight: Vec<u64> = Vec::with_capacity(weights.len());
    let id = |task: u64, index: &mut HashMap<u64, usize>, weight: &mut Vec<u64>| {
        *index.entry(task).or_insert_with(|| {
            weight.push(weights.get(&task).copied().unwrap_or(0));
            weight.len() - 1
        })
    };
    for &task in weights.keys() {
        id(task, &mut index, &mut weight);
    }
    let mut pairs = Vec::with_capacity(edges.len());
    for e in edges {
        let p = id(e.producer, &mut index, &mut weight);
        let c = id(e.consumer, &mut index, &mut weight);
        pairs.push((p, c));
    }
    let n = weight.len();
    // Successor lists in compressed form (offsets into one array).
    let mut indeg = vec![0usize; n];
    let mut start = vec![0usize; n + 1];
    for &(p, c) in &pairs {
        start[p + 1] += 1;
        indeg[c] += 1;
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut succ = vec![0usize; pairs.len()];
    for &(p, c) in &pairs {
        succ[fill[p]] = c;
        fill[p] += 1;
    }
    // Kahn's order; `best[t]` = the heaviest path ending at t (its weight, its length).
    let mut ready: Vec<usize> = (0..n).filter(|&t| indeg[t] == 0).collect();
    let mut before = vec![(0u64, 0usize); n];
    let mut longest = CriticalPath {
        kernel_ns: 0,
        tasks: 0,
    };
    let mut visited = 0;
    while let Some(t) = ready.pop() {
        visited += 1;
        let (ns, len) = before[t];
        let here = (ns + weight[t], len + 1);
        if here.0 > longest.kernel_ns || (here.0 == longest.kernel_ns && here.1 > longest.tasks) {
            longest = CriticalPath {
                kernel_ns: here.0,
                tasks: here.1,
            };
        }
        for &c in &succ[start[t]..start[t + 1]] {
            if here.0 > before[c].0 || (here.0 == before[c].0 && here.1 > before[c].1) {
                before[c] = here;
            }
            indeg[c] -= 1;
            if indeg[c] == 0 {
                ready.push(c);
            }
        }
    }
    if visited < n {
        return Err(CycleError { tasks: n - visited });
    }
    Ok(longest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use simpler_host::trace_model::{CoreKind, EdgeKind};

    /// A subtask of `task`, block `block`, running `ns` from `at`.
    fn span(task: u64, block: u32, at: u64, ns: u64) -> SubtaskSpan {
        SubtaskSpan {
            task,
            func_id: 0,
            core: 0,
            core_kind: CoreKind::Aiv,
            block,
            start_ns: at,
            end_ns: at + ns,
        }
    }

    fn edge(producer: u64, consumer: u64) -> DepEdge {
        DepEdge {
            producer,
            consumer,
            kind: EdgeKind::Raw,
        }
    }

    #[test]
    fn a_chain_sums_every_task() {
        let spans = [span(0, 0, 0, 10), span(1, 0, 10, 20), span(2, 0, 30, 30)];
        let cp = critical_path(&spans, &[edge(0, 1), edge(1, 2)]).unwrap();
        assert_eq!(
            cp,
            CriticalPath {
                kernel_ns: 60,
                tasks: 3
            }
        );
    }

    #[test]
    fn a_diamond_takes_its_heavier_side() {
        // 0 -> {1, 2} -> 3; side 2 is heavier.
        let spans = [
            span(0, 0, 0, 5),
            span(1, 0, 5, 10),
            span(2, 0, 5, 40),
            span(3, 0, 45, 7),
        ];
        let edges = [edge(0, 1), edge(0, 2), edge(1, 3), edge(2, 3)];
        let cp = critical_path(&spans, &edges).unwrap();
        assert_eq!(
            cp,
            CriticalPath {
                kernel_ns: 52,
                tasks: 3
            }
        );
        // Listing the edges in another order, or twice, changes nothing.
        let mut twice: Vec<DepEdge> = edges.iter().rev().copied().collect();
        twice.extend(edges);
        assert_eq!(critical_path(&spans, &twice).unwrap(), cp);
    }

    #[test]
    fn independent_tasks_give_the_heaviest_one() {
        let spans = [span(0, 0, 0, 10), span(1, 0, 0, 25), span(2, 0, 0, 3)];
        let cp = critical_path(&spans, &[]).unwrap();
        assert_eq!(
            cp,
            CriticalPath {
                kernel_ns: 25,
                tasks: 1
            }
        );
    }

    #[test]
    fn a_task_weighs_its_longest_block_with_its_lanes_summed() {
        // Task 0: block 0 has two lanes (4 + 6 = 10), block 1 one lane of 8.
        let spans = [span(0, 0, 0, 4), span(0, 0, 4, 6), span(0, 1, 0, 8)];
        assert_eq!(task_kernel_ns(&spans)[&0], 10);
        assert_eq!(critical_path(&spans, &[]).unwrap().kernel_ns, 10);
    }

    #[test]
    fn a_task_without_subtasks_weighs_nothing_but_links_its_neighbours() {
        // 0 -> 9 (no kernel) -> 1.
        let spans = [span(0, 0, 0, 10), span(1, 0, 20, 5)];
        let cp = critical_path(&spans, &[edge(0, 9), edge(9, 1)]).unwrap();
        assert_eq!(
            cp,
            CriticalPath {
                kernel_ns: 15,
                tasks: 3
            }
        );
        assert_eq!(
            critical_path(&[], &[]).unwrap(),
            CriticalPath {
                kernel_ns: 0,
                tasks: 0
            }
        );
    }

    #[test]
    fn a_cycle_is_an_error() {
        let spans = [span(0, 0, 0, 1), span(1, 0, 1, 1), span(2, 0, 2, 1)];
        let err = critical_path(&spans, &[edge(0, 1), edge(1, 2), edge(2, 1)]).unwrap_err();
        assert_eq!(err, CycleError { tasks: 2 });
    }
}
