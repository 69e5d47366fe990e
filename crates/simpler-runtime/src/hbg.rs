//! `host_build_graph`, the host half (`docs/chip-runtime.md` §17): runs a run's
//! orchestration on the calling (host) thread, to completion, before launch, and writes the
//! graph it submitted as a graph image (`simpler_abi::graph`) for the device schedulers.
//!
//! The build serves the same [`OrchOps`](simpler_abi::OrchOps) table as the device
//! orchestrator, with the same checks, scopes and dependency discovery (the tensor map), on
//! one forward-only ring: nothing runs and nothing is reclaimed while it builds, so a graph
//! that does not fit (task window, dependency pool, output heap, the fanin cap, a ready
//! queue) fails at once, and a tensor-data call that would wait for a task is refused.
//! It touches no device state: the image is returned to the caller, which uploads it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use simpler_abi::*;
use simpler_device::{DevicePtr, Doorbell};

use crate::aicpu::{call_entry, Orchestrator, RunShared, DEFAULT_DEP_POOL, RING_COUNT};
use crate::devmem::RunMemory;

/// A built graph: the image and what the build saw.
#[derive(Clone, Debug)]
pub struct BuiltGraph {
    /// The graph image, header first (`simpler_abi::graph`), ready to upload.
    pub image: Vec<u8>,
    /// Tasks in the graph.
    pub tasks: u32,
    /// Dependency edges (wake entries).
    pub edges: u32,
    /// `get_tensor_data` / `set_tensor_data` calls the orchestration made (a replay of the
    /// image does not repeat them).
    pub tensor_data_calls: u64,
    /// Output-heap bytes the graph's `OUTPUT`s use.
    pub heap_bytes: u64,
}

/// Why a build failed: the runtime error code (positive, `simpler_abi::codes`) and message,
/// as a device run would report them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildFailure {
    /// The orchestrator error code (e.g. 6 DEPENDENCY_OVERFLOW, 5 INVALID_ARGS).
    pub code: i32,
    /// The message, naming the submit and the limit.
    pub message: String,
}

/// Runs the orchestration `desc` names on this thread and returns its graph as an image
/// stamped with `generation`, for a chip of `clusters` clusters.
///
/// `desc` is read as a device run's descriptor would be: `orch_entry`, `orch_args_addr`, the
/// two func tables (`func_count` entries), `heap_addr`/`heap_size` (outputs are carved from
/// there, and stored relative to `heap_addr`), `ring_task_window[0]` (else `task_window`),
/// `ring_heap[0]` (0 = the whole heap), `ring_dep_pool[0]` and `ready_queue`. The image
/// stores every tensor inside an orchestration tensor argument relative to that argument,
/// so it can be replayed on other buffers of the same sizes.
///
/// # Errors
/// The orchestrator error the build latched (the same codes as a device run, plus
/// DEPENDENCY_OVERFLOW (6) and READY_QUEUE_OVERFLOW (104)).
///
/// # Safety
/// Every address `desc` names must be readable host memory of the stated type and size for
/// the whole call (on the sim, device memory is host memory), `orch_entry` must be 0 or an
/// [`OrchEntry`] keeping its contract, and the tensors the orchestration reads or writes
/// through `get/set_tensor_data` must be live memory nobody else touches during the call.
pub unsafe fn build(
    desc: &RunLaunchDesc,
    clusters: u32,
    generation: u64,
) -> Result<BuiltGraph, BuildFailure> {
    let arg = DevicePtr::from_raw(desc as *const RunLaunchDesc as u64);
    // SAFETY: `desc` is an aligned descriptor whose addresses meet the contract above.
    let Some(mem) = (unsafe { RunMemory::from_launch_arg(arg) }) else {
        unreachable!("a reference is never null or misaligned");
    };
    let window = match desc.ring_task_window[0] {
        0 => desc.task_window,
        w => w,
    };
    if window < 4 || !window.is_power_of_two() {
        return Err(BuildFailure {
            code: ORCH_INVALID_ARGS,
            message: format!("ring 0's task window must be a power of two ≥ 4, got {window}"),
        });
    }
    let pool = match desc.ring_dep_pool[0] {
        0 => DEFAULT_DEP_POOL,
        p => p,
    };
    let mut windows = [4; RING_COUNT];
    windows[0] = window;
    let mut pools = [4; RING_COUNT];
    pools[0] = pool;
    let mut shared = RunShared::new(mem, clusters, 1, windows, pools);
    shared.build = true;
    let mut o = Orchestrator::new(&shared, Arc::new(Doorbell::new()), clusters);
    o.run(call_entry);
    if let Some((code, message)) = shared.errors.verdict() {
        return Err(BuildFailure { code, message });
    }
    let tensor_data_calls = o.tensor_data_calls;
    let heap_base = desc.heap_addr;
    drop(o);
    write_image(&shared, &mem, heap_base, generation, tensor_data_calls)
}

/// Serializes ring 0 of a finished build.
fn write_image(
    shared: &RunShared,
    mem: &RunMemory,
    heap_base: u64,
    generation: u64,
    tensor_data_calls: u64,
) -> Result<BuiltGraph, BuildFailure> {
    let ring = &shared.rings[0];
    let n = ring.next.load(Ordering::Acquire);
    let args = mem.orch_arg_buffers();
    let cap = match shared.desc.ready_queue {
        0 => DEFAULT_HBG_READY_QUEUE,
        c => c,
    };
    let mut tasks = Vec::with_capacity(n as usize);
    let mut tensors = Vec::new();
    let mut wakes: Vec<u32> = Vec::new();
    let mut ready = [0u32; 3];
    let mut heap_end = 0u64;
    for local in 0..n {
        let slot = ring.slot(local);
        let body = slot.body();
        let fanin = slot.fanin.load(Ordering::Acquire);
        let wake_first = wakes.len() as u32;
        wakes.extend(slot.fanout.lock().consumers.iter().map(|&c| c as u32));
        let shape = body.shape as u32;
        if fanin == 0 && shape < 3 {
            ready[shape as usize] += 1;
        }
        let tensor_first = tensors.len() as u32;
        for t in &body.tensors {
            let (reloc, arg, base) = if t.owner_task_id != NO_OWNER_TASK {
                heap_end = heap_end.max(
                    t.buffer_addr
                        .wrapping_sub(heap_base)
                        .saturating_add(t.buffer_size),
                );
                (GRAPH_RELOC_HEAP, 0, heap_base)
            } else {
                match args.iter().position(|&(a, size)| {
                    t.buffer_addr >= a
                        && t.buffer_addr.saturating_add(t.buffer_size) <= a.saturating_add(size)
                }) {
                    Some(i) => (GRAPH_RELOC_ARG, i as u32, args[i].0),
                    None => (GRAPH_RELOC_ABSOLUTE, 0, 0),
                }
            };
            let mut tensor = *t;
            tensor.buffer_addr = tensor.buffer_addr.wrapping_sub(base);
            tensors.push(GraphTensor { tensor, reloc, arg });
        }
        let ns = body.args.slots[SCALAR_COUNT_SLOT] as usize;
        let nt = body.tensors.len();
        let mut scalars = [0u64; MAX_TASK_SCALARS];
        scalars[..ns].copy_from_slice(&body.args.slots[nt..nt + ns]);
        tasks.push(GraphTask {
            func_ids: body.func_ids,
            shape,
            lanes: u32::from(body.lanes),
            block_num: body.block_num,
            flags: if body.sync_start {
                GRAPH_TASK_SYNC_START
            } else {
                0
            },
            fanin,
            wake_first,
            wake_count: wakes.len() as u32 - wake_first,
            tensor_first,
            tensor_count: nt as u32,
            scalar_count: ns as u32,
            reserved: 0,
            submit: body.submit,
            scalars,
        });
    }
    if let Some(shape) = ready.iter().position(|&r| r > cap) {
        let name = ["AIC", "AIV", "MIX"][shape];
        return Err(BuildFailure {
            code: SCHED_READY_QUEUE_OVERFLOW,
            message: format!(
                "host_build_graph: {} {name} tasks are ready at launch; a ready queue holds {cap}: raise PTO2_READY_QUEUE",
                ready[shape]
            ),
        });
    }
    let layout = graph_image_layout(n, tensors.len() as u32, wakes.len() as u32)
        .expect("a built graph's tables fit in memory");
    let mut image = Vec::with_capacity(layout.total as usize);
    let header = GraphImageHeader {
        magic: GRAPH_IMAGE_MAGIC,
        version: GRAPH_IMAGE_VERSION,
        generation,
        total_bytes: layout.total,
        task_count: n,
        tensor_count: tensors.len() as u32,
        wake_count: wakes.len() as u32,
        arg_tensor_count: args.len() as u32,
        heap_bytes: heap_end,
        ..GraphImageHeader::default()
    };
    image.extend_from_slice(plain_bytes(std::slice::from_ref(&header)));
    image.extend_from_slice(plain_bytes(&tasks));
    image.extend_from_slice(plain_bytes(&tensors));
    image.extend_from_slice(plain_bytes(&wakes));
    let sum = crc32fast::hash(&image[std::mem::size_of::<GraphImageHeader>()..]);
    image[8..12].copy_from_slice(&sum.to_ne_bytes());
    Ok(BuiltGraph {
        image,
        tasks: n,
        edges: wakes.len() as u32,
        tensor_data_calls,
        heap_bytes: heap_end,
    })
}

/// The graph image's records: `repr(C)` integers without padding (their layout asserts
/// leave no gap between fields), so every byte of one is initialized.
trait Record: Copy {}
impl Record for GraphImageHeader {}
impl Record for GraphTask {}
impl Record for GraphTensor {}
impl Record for u32 {}

/// Records as their bytes.
fn plain_bytes<T: Record>(items: &[T]) -> &[u8] {
    // SAFETY: a `Record` has no padding, so every byte is initialized; the slice covers
    // exactly the items' memory and borrows it.
    unsafe { std::slice::from_raw_parts(items.as_ptr() as *const u8, std::mem::size_of_val(items)) }
}
