//! `host_build_graph` on the device (`docs/chip-runtime.md` §17): the top AICPU thread
//! attaches the run's graph image — checks it, rebinds its tensors to this run's arguments
//! and heap, fills one forward-only ring with its tasks and queues those that wait for
//! nothing — before every thread turns scheduler. Completions then release the tasks on
//! each producer's wake list (no fanout lists, no wiring, no reclamation).
//!
//! An image that fails a check (magic, version, sizes, checksum, generation, argument
//! count, a func id not registered for its lane, a tensor or wake entry out of range, fanins
//! that do not match the wake lists) fails the run with INVALID_ARGS before any task runs.

use std::sync::atomic::Ordering;

use simpler_abi::*;

use super::ring::RING_COUNT;
use super::state::{RunShared, WakeLists, DEFAULT_DEP_POOL};
use super::task::{lane_core_type, Shape, TaskId, LANE_BITS};
use crate::devmem::{GraphView, RunMemory};

/// The run state of a `host_build_graph` run of a chip of `clusters` clusters served by
/// `schedulers` threads, with the image's tasks in ring 0 and those without producers
/// queued. A bad image gives a state with its error latched and no tasks.
pub(super) fn attach(mem: RunMemory, clusters: u32, schedulers: usize) -> RunShared {
    let desc = *mem.desc();
    let tasks = mem.graph().map_or(0, |g| g.header.task_count);
    let window = (tasks.saturating_add(1)).next_power_of_two().max(4);
    let mut windows = [4; RING_COUNT];
    windows[0] = window;
    let pools = [DEFAULT_DEP_POOL; RING_COUNT];
    let mut shared = RunShared::new(mem, clusters, schedulers, windows, pools);
    shared.ready_cap = match desc.ready_queue {
        0 => DEFAULT_HBG_READY_QUEUE,
        n => n,
    };
    let loaded = mem
        .graph()
        .and_then(|g| check(&g, &desc, &mem).map(|()| g))
        .and_then(|g| load(&shared, &g, &mem).map(|w| (g, w)));
    match loaded {
        Ok((g, wakes)) => {
            let n = g.header.task_count;
            shared.rings[0].next.store(n, Ordering::Release);
            shared.submitted.store(u64::from(n), Ordering::Release);
            shared.wakes = Some(wakes);
            shared.orch_done.store(true, Ordering::Release);
            for (i, t) in g.tasks.iter().enumerate() {
                if t.fanin == 0 {
                    shared.make_ready(i as TaskId);
                }
            }
        }
        Err(why) => {
            shared
                .errors
                .orch_fail(ORCH_INVALID_ARGS, || format!("host_build_graph: {why}"));
            shared.orch_done.store(true, Ordering::Release);
        }
    }
    shared.progress();
    shared
}

/// The checks on the image as a whole.
fn check(g: &GraphView<'_>, desc: &RunLaunchDesc, mem: &RunMemory) -> Result<(), String> {
    let h = &g.header;
    if h.magic != GRAPH_IMAGE_MAGIC || h.version != GRAPH_IMAGE_VERSION {
        return Err(format!(
            "the graph image has magic {:#x} version {}; expected {GRAPH_IMAGE_MAGIC:#x} version {GRAPH_IMAGE_VERSION}",
            h.magic, h.version
        ));
    }
    let sum = crc32fast::hash(g.body);
    if sum != h.checksum {
        return Err(format!(
            "the graph image is corrupt: its checksum is {sum:#010x}, its header says {:#010x}",
            h.checksum
        ));
    }
    if h.generation != desc.graph_generation {
        return Err(format!(
            "the graph image is stale: built for callable generation {}, the run is of generation {}",
            h.generation, desc.graph_generation
        ));
    }
    let args = mem.orch_arg_buffers().len();
    if h.arg_tensor_count as usize != args {
        return Err(format!(
            "the graph image was built for {} tensor arguments; the run passes {args}",
            h.arg_tensor_count
        ));
    }
    if h.heap_bytes > desc.heap_size {
        return Err(format!(
            "the graph's outputs need {} heap bytes; the run's heap has {}",
            h.heap_bytes, desc.heap_size
        ));
    }
    Ok(())
}

/// Fills ring 0 with the image's tasks, rebinding their tensors, and returns the wake lists.
fn load(shared: &RunShared, g: &GraphView<'_>, mem: &RunMemory) -> Result<WakeLists, String> {
    let desc = mem.desc();
    let args = mem.orch_arg_buffers();
    let n = g.tasks.len();
    let mut incoming = vec![0u32; n];
    for &w in g.wakes {
        let Some(c) = incoming.get_mut(w as usize) else {
            return Err(format!("a wake entry names task {w}; the image has {n}"));
        };
        *c += 1;
    }
    let ring = &shared.rings[0];
    let mut spans = Vec::with_capacity(n);
    for (i, t) in g.tasks.iter().enumerate() {
        let what = || format!("task {i} (submit #{})", t.submit);
        if t.fanin != incoming[i] {
            return Err(format!(
                "{} waits for {} producers but {} wake lists name it",
                what(),
                t.fanin,
                incoming[i]
            ));
        }
        let wake_end = u64::from(t.wake_first) + u64::from(t.wake_count);
        let tensor_end = u64::from(t.tensor_first) + u64::from(t.tensor_count);
        if wake_end > g.wakes.len() as u64
            || tensor_end > g.tensors.len() as u64
            || t.tensor_count as usize > MAX_TASK_TENSORS
            || t.scalar_count as usize > MAX_TASK_SCALARS
            || !(1..=i16::MAX as u32).contains(&t.block_num)
        {
            return Err(format!("{} has out-of-range counts", what()));
        }
        let shape = match t.shape {
            0 => Shape::Aic,
            1 => Shape::Aiv,
            2 => Shape::Mix,
            3 => Shape::Dummy,
            s => return Err(format!("{} has unknown shape {s}", what())),
        };
        let mut kernels = [0u64; 3];
        let mut lanes = 0u8;
        for (lane, &func) in t.func_ids.iter().enumerate() {
            if func == NO_KERNEL {
                continue;
            }
            let want = lane_core_type(lane) as u32 + 1;
            let entry = usize::try_from(func).ok().and_then(|f| {
                let addr = *shared.func_addrs.get(f)?;
                (addr != 0 && shared.func_types.get(f) == Some(&want)).then_some(addr)
            });
            let Some(addr) = entry else {
                return Err(format!(
                    "{}: func id {func} is not registered for its {} lane",
                    what(),
                    ["aic", "aiv0", "aiv1"][lane]
                ));
            };
            kernels[lane] = addr;
            lanes |= LANE_BITS[lane];
        }
        if u32::from(lanes) != t.lanes || (shape == Shape::Dummy) != (lanes == 0) {
            return Err(format!(
                "{} has lanes that do not match its kernels",
                what()
            ));
        }
        let local = i as u32;
        ring.ensure(local);
        let slot = ring.slot(local);
        // SAFETY: the state is not shared yet: this thread is the only one that can see the
        // slot, which no task occupies; the reference is dropped before the task is queued.
        let body = unsafe { slot.body_mut() };
        body.shape = shape;
        body.kernels = kernels;
        body.func_ids = t.func_ids;
        body.submit = t.submit;
        body.lanes = lanes;
        body.block_num = t.block_num;
        body.sync_start = t.flags & GRAPH_TASK_SYNC_START != 0;
        body.tensors.clear();
        body.tensors.reserve_exact(t.tensor_count as usize);
        let first = t.tensor_first as usize;
        for gt in &g.tensors[first..first + t.tensor_count as usize] {
            let mut tensor = gt.tensor;
            let base = match gt.reloc {
                GRAPH_RELOC_ABSOLUTE => 0,
                GRAPH_RELOC_ARG => match args.get(gt.arg as usize) {
                    Some(&(addr, size)) if tensor.buffer_addr + tensor.buffer_size <= size => addr,
                    _ => {
                        return Err(format!(
                            "{}: a tensor reaches outside orchestration argument {}",
                            what(),
                            gt.arg
                        ))
                    }
                },
                GRAPH_RELOC_HEAP => desc.heap_addr,
                r => return Err(format!("{}: a tensor has unknown relocation {r}", what())),
            };
            tensor.buffer_addr = tensor.buffer_addr.wrapping_add(base);
            body.tensors.push(tensor);
        }
        body.bind_args(&t.scalars[..t.scalar_count as usize]);
        body.retained.clear();
        body.edges = 0;
        slot.arm(TaskId::from(local), false);
        slot.fanin.store(t.fanin, Ordering::Relaxed);
        spans.push((t.wake_first, t.wake_count));
    }
    Ok(WakeLists::new(spans, g.wakes.to_vec()))
}
