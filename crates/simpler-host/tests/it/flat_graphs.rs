//! Flat graphs of any length: a task that owns no runtime-allocated (heap) output leaves its
//! ring slot once it and its consumers have completed, even while its scope is open, so an
//! orchestration that never opens an inner scope may submit far more tasks than the ring's
//! window (`docs/chip-runtime.md`, task life). Tasks that do own heap outputs stay pinned
//! by their scope, and a scope pinning a whole window fails at once with SCOPE_DEADLOCK
//! naming the scope, how many tasks it pins and the fix.
//!
//! The 1,000,000-task graph runs only in release builds (`scripts/test.sh` runs it); the
//! 100,000-task one runs everywhere.

use std::time::{Duration, Instant};

use crate::common::*;
use simpler_abi::*;
use simpler_host::*;

/// Counters the chains add into (one chain per counter).
const CHAINS: usize = 16;
/// Func ids.
const ADD: i32 = 0;
const FILL: i32 = 1;

/// `c[0] += w[0]`: tensors `[w (INPUT), c (INOUT)]`, u32.
unsafe extern "C-unwind" fn add_kernel(args: *mut i64) {
    let (w, c) = (tensor(args, 0), tensor(args, 1));
    // SAFETY: both are u32 views of live device (= host) memory checked by the runtime; `c`
    // is written by this task alone (its chain orders the others after it).
    unsafe {
        let w = (w.buffer_addr as *const u32)
            .add(w.start_offset as usize)
            .read();
        let c = (c.buffer_addr as *mut u32).add(c.start_offset as usize);
        c.write(c.read().wrapping_add(w));
    }
}

/// Fills its only tensor (a runtime-allocated u32 output) with ones.
unsafe extern "C-unwind" fn fill_kernel(args: *mut i64) {
    let t = tensor(args, 0);
    // SAFETY: a contiguous u32 output of `numel` elements allocated for this task.
    unsafe {
        let p = (t.buffer_addr as *mut u32).add(t.start_offset as usize);
        for i in 0..t.numel() as usize {
            p.add(i).write(1);
        }
    }
}

/// Submits `scalars[0]` tasks at depth 0: task `i` adds the shared weight `w[0]` into
/// counter `i % CHAINS` — `CHAINS` dependency chains, and every task reads `w`. With
/// `scalars[1]` non-zero, every `scalars[1]`-th task also allocates a one-element output
/// (and so stays pinned by the outer scope).
unsafe extern "C-unwind" fn flat_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes its table and the run's arguments.
    let a = unsafe { &*args };
    let (n, heap_every) = (a.scalars[0], a.scalars[1]);
    for i in 0..n {
        let mut d = task(ADD, LANE_AIV0);
        push(&mut d, view(&a.tensors[0], 0, 1), TensorArgType::Input);
        let c = view(&a.tensors[1], i as usize % CHAINS, 1);
        push(&mut d, c, TensorArgType::Inout);
        // SAFETY: the table the runtime passed.
        let rc = unsafe { submit(ops, &d) };
        if rc != 0 {
            return rc;
        }
        if heap_every != 0 && i % heap_every == 0 {
            let mut d = task(FILL, LANE_AIV0);
            let mut out = ChipTensor::ZERO;
            out.ndims = 1;
            out.dtype = DataType::Uint32 as u32;
            out.shapes[0] = 1;
            push(&mut d, out, TensorArgType::Output);
            // SAFETY: TaskOutputs is plain data.
            let mut outs: TaskOutputs = unsafe { std::mem::zeroed() };
            // SAFETY: the table the runtime passed; `outs` receives the output.
            let rc = unsafe { ((*ops).submit_task)((*ops).runtime, &*d, &mut outs) };
            if rc != 0 {
                return rc;
            }
        }
    }
    0
}

fn register(w: &ChipWorker) -> CallableId {
    let tensor = |name: &str, direction| ArgSpec {
        name: name.into(),
        direction,
        dtype: DataType::Uint32,
        shape: None,
    };
    let scalar = |name: &str| ArgSpec {
        name: name.into(),
        direction: ArgDirection::Scalar,
        dtype: DataType::Uint64,
        shape: None,
    };
    let kernel = |func_id: i32, f: KernelEntry| KernelSpec {
        func_id: func_id as u32,
        core_type: CoreType::Aiv,
        image: CodeImage::Kernel(f),
        name: None,
    };
    w.register(&CallableSpec {
        name: "flat".into(),
        signature: Signature::new(vec![
            tensor("w", ArgDirection::In),
            tensor("c", ArgDirection::InOut),
            scalar("tasks"),
            scalar("heap_every"),
        ])
        .unwrap(),
        orchestration: CodeImage::Orchestration(flat_orch),
        kernels: vec![kernel(ADD, add_kernel), kernel(FILL, fill_kernel)],
        runtime: None,
    })
    .unwrap()
}

fn flat_worker(task_window: u32) -> ChipWorker {
    ChipWorker::new(WorkerConfig {
        task_window,
        run_timeout: Duration::from_secs(600),
        ..WorkerConfig::default()
    })
    .unwrap()
}

/// Runs `tasks` flat tasks; returns the counters.
fn run_flat(
    w: &ChipWorker,
    id: CallableId,
    tasks: u64,
    heap_every: u64,
) -> Result<Vec<u32>, HostError> {
    let mut weight = vec![3u32];
    let mut counters = vec![0u32; CHAINS];
    fn t(v: &mut [u32]) -> HostArg<'_> {
        let n = v.len() as u64;
        HostArg::Tensor(HostTensor {
            bytes: u32_bytes_mut(v),
            shape: vec![n],
            dtype: DataType::Uint32,
        })
    }
    w.run(
        id,
        &mut [
            t(&mut weight),
            t(&mut counters),
            HostArg::Scalar(tasks),
            HostArg::Scalar(heap_every),
        ],
    )?;
    Ok(counters)
}

/// Runs `tasks` flat tasks in the default 16,384-slot window and checks every counter.
fn flat_graph_runs(tasks: u64) {
    let w = flat_worker(WorkerConfig::default().task_window);
    assert_eq!(w.config().task_window, 16_384);
    let id = register(&w);
    let start = Instant::now();
    let counters = run_flat(&w, id, tasks, 0)
        .unwrap_or_else(|e| panic!("a flat graph of {tasks} tasks at depth 0: {e}"));
    eprintln!(
        "{tasks} flat tasks in {:?} ({:.0} tasks/s)",
        start.elapsed(),
        tasks as f64 / start.elapsed().as_secs_f64()
    );
    for (j, &c) in counters.iter().enumerate() {
        let adds = (tasks as usize + CHAINS - 1 - j) / CHAINS;
        assert_eq!(c, 3 * adds as u32, "counter {j}");
    }
}

#[test]
fn a_flat_graph_of_100k_tasks_runs_in_the_default_window() {
    flat_graph_runs(100_000);
}

#[test]
#[ignore = "about 30 s in a debug build: scripts/test.sh runs it on its own (--ignored)"]
fn a_flat_graph_of_1m_tasks_runs_in_the_default_window() {
    flat_graph_runs(1_000_000);
}

#[test]
fn tasks_without_heap_outputs_never_fill_a_small_window() {
    // 64 slots per ring: 63 live tasks at most, and 20,000 tasks go through.
    let w = flat_worker(64);
    let id = register(&w);
    let counters = run_flat(&w, id, 20_000, 0).unwrap();
    assert!(counters.iter().all(|&c| c == 3 * 20_000 / CHAINS as u32));
}

#[test]
fn tasks_with_heap_outputs_in_the_outer_scope_fail_with_scope_deadlock_naming_it() {
    // Every 4th flat task also allocates an output, which the outer scope pins: the first of
    // them pins ring 0 at its position, and 63 tasks later the window is full.
    let w = flat_worker(64);
    let id = register(&w);
    let start = Instant::now();
    let err = run_flat(&w, id, 20_000, 4).unwrap_err();
    let took = start.elapsed();
    let HostError::RunFailed { code, message, .. } = &err else {
        panic!("expected SCOPE_DEADLOCK, got {err}");
    };
    assert_eq!(*code, -ORCH_SCOPE_DEADLOCK, "{message}");
    for part in [
        "outer scope (depth 0)",
        "PTO2_RING_TASK_WINDOW",
        "inner scopes",
        "at most 63 tasks",
    ] {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
    // 63 slots, one task in four (plus the first) owning an output: the message counts the
    // tasks the scope pins in the ring.
    let pinned = message
        .split("(depth 0) pins ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no pinned count in: {message}"));
    assert!((12..=16).contains(&pinned), "{pinned} pinned: {message}");
    // The structural check fires at once, not through the no-progress watchdog.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // A wider window fits the same program when it is short enough.
    let w = flat_worker(1024);
    let id = register(&w);
    let counters = run_flat(&w, id, 400, 4).unwrap();
    assert!(counters.iter().all(|&c| c == 3 * 400 / CHAINS as u32));
}
