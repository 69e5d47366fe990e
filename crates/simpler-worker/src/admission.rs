//! Admission of a checked task into its run: the memory it names must be live (heap-ring
//! allocations of this run whose scope is open, child allocations not freed, and views
//! inside them), its target endpoints alive; the tensor map gives its producers; it enters
//! the graph READY, PENDING or poisoned, its accesses are recorded and the memory it names
//! is held until it is over (`docs/l3-worker.md` §3, §6, §8). Callers (the orchestrator)
//! have made the pure argument checks before.

use std::sync::Arc;

use crate::engine::{Engine, State};
use crate::graph::{Admitted, Target, Task, Use, Work};
use crate::memory::HostMemory;
use crate::tensor::{Memory, Tag, Tensor};
use crate::tensormap::{Footprint, TaskId};
use crate::WorkerError;

fn bad(arg: &str, reason: String) -> WorkerError {
    WorkerError::InvalidArgument {
        arg: arg.into(),
        reason,
    }
}

/// A task about to be admitted.
pub(crate) struct Submission {
    /// Names the task after its id (`#3 <what>`).
    pub(crate) what: String,
    pub(crate) target: Target,
    pub(crate) work: Work,
    /// Every tensor the task names: (argument name, tensor, tag).
    pub(crate) accesses: Vec<(String, Tensor, Tag)>,
}

/// The identity of a host memory object (its `Arc`'s address).
pub(crate) fn memory_key(m: &Arc<dyn HostMemory>) -> usize {
    Arc::as_ptr(m).cast::<u8>() as usize
}

/// Admits the checked submission `s` of `orch.<method>()` into run `run_id`'s graph (see
/// the module docs).
///
/// # Errors
/// [`WorkerError::EndpointFailure`] for a dead target; [`WorkerError::InvalidArgument`]
/// naming the argument for memory that is not live; [`WorkerError::InvalidState`] once the
/// orchestration has returned.
pub(crate) fn admit(
    engine: &Engine,
    run_id: u64,
    method: &str,
    s: Submission,
) -> Result<TaskId, WorkerError> {
    let mut st = engine.state.lock();
    refuse_dead_targets(engine, &st, &s.target)?;
    let head = st.is_head(run_id);
    let State { runs, children, .. } = &mut *st;
    let run = crate::run::open_run(runs, run_id, method)?;

    // The memory it names must be live; its release waits for the task.
    let mut uses = Vec::new();
    for (arg, t, _) in &s.accesses {
        match t.memory() {
            Memory::Host(m) if engine.ring.contains(m.as_ptr() as usize) => {
                let key = memory_key(m);
                match run.allocs.get(&key) {
                    Some(a) if !a.released => uses.push(Use::Heap(key)),
                    Some(_) => {
                        return Err(bad(
                            arg,
                            "is heap-ring memory whose scope has ended (or that orch.free \
                             released); allocate it in a scope that is still open"
                                .into(),
                        ))
                    }
                    None => {
                        return Err(bad(
                            arg,
                            "is heap-ring memory of another run (released with that run); \
                             allocate it with orch.alloc in this run"
                                .into(),
                        ))
                    }
                }
            }
            Memory::Host(_) => {}
            Memory::Child(c) => {
                let id = (c.worker, c.ptr.addr());
                let live = children
                    .get(&id)
                    .filter(|r| !r.released && r.generation == c.generation);
                let Some(rec) = live else {
                    return Err(bad(
                        arg,
                        format!(
                            "device memory at {:#x} of chip {} is not a live allocation \
                             (alloc_child_tensor, not yet freed)",
                            c.ptr.addr(),
                            c.worker
                        ),
                    ));
                };
                let end = t.byte_span().map_or(u64::MAX, |(_, e)| e);
                if end > rec.nbytes {
                    return Err(bad(
                        arg,
                        format!(
                            "a view reaching byte {end} exceeds the {} bytes of its \
                             allocation on chip {}",
                            rec.nbytes, c.worker
                        ),
                    ));
                }
                uses.push(Use::Child(id.0, id.1));
            }
        }
    }
    uses.sort_unstable_by_key(|u| match u {
        Use::Heap(k) => (0, *k as u64, 0),
        Use::Child(w, a) => (1, *w as u64, *a),
    });
    uses.dedup();

    // Producers from the tensor map.
    let mut producers = Vec::new();
    let mut footprints = Vec::new();
    for (arg, t, tag) in &s.accesses {
        if *tag == Tag::NoDep {
            continue;
        }
        let fp = Footprint::of(t).ok_or_else(|| bad(arg, "its addresses overflow".into()))?;
        run.map.conflicts(&fp, *tag, &mut producers);
        footprints.push((fp, *tag));
    }
    let mut spaces = Vec::new();
    for (fp, _) in &footprints {
        if !spaces.contains(&fp.space) {
            spaces.push(fp.space);
        }
    }

    let id = run.graph.next_id();
    let task = Task::new(
        format!("{id} {}", s.what),
        s.target,
        s.work,
        spaces,
        uses.clone(),
    );
    let (id, admitted) = run.graph.add(task, &mut producers);
    for (fp, tag) in footprints {
        run.map.record(fp, tag, id);
    }
    for u in &uses {
        match u {
            Use::Heap(k) => run.allocs.get_mut(k).expect("checked above").users += 1,
            Use::Child(w, a) => children.get_mut(&(*w, *a)).expect("checked above").users += 1,
        }
    }
    match admitted {
        Admitted::Ready => {
            run.enqueue(id);
            if head {
                // Dispatched at once, from this thread (`docs/l3-worker.md` §4).
                crate::scheduler::advance(engine, &mut st);
            }
        }
        Admitted::Pending => {}
        Admitted::Poisoned => engine.tasks_over(run, children, &[id]),
    }
    Ok(id)
}

/// Refuses a task whose target endpoint is dead (or, for sub tasks, too few are alive).
fn refuse_dead_targets(engine: &Engine, st: &State, target: &Target) -> Result<(), WorkerError> {
    let dead = |lane: usize| {
        st.lanes[lane]
            .dead
            .as_ref()
            .map(|report| WorkerError::EndpointFailure {
                endpoint: st.lanes[lane].describe.clone(),
                report: report.clone(),
            })
    };
    match target {
        Target::Chip(w) => dead(*w).map_or(Ok(()), Err),
        Target::ChipGroup(ws) => ws.iter().find_map(|w| dead(*w)).map_or(Ok(()), Err),
        Target::Sub | Target::SubGroup(_) => {
            let subs = engine.chips..engine.chips + engine.subs;
            let alive = subs.clone().filter(|l| st.lanes[*l].dead.is_none()).count();
            let n = target.members();
            match subs.clone().find_map(dead) {
                Some(e) if alive < n => Err(e),
                _ => Ok(()),
            }
        }
    }
}
