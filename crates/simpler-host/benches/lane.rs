#![allow(missing_docs)] // criterion_group! generates undocumented items
//! Run-lane benchmarks (`docs/lane.md` §9 and §14: the verdict read waits, the
//! record read does not). Numbers are printed, never asserted:
//!
//! - `successor_in_flight/{record_read,stream_sync}/<tasks>`: the cost of learning a short
//!   predecessor's outcome while a successor of `<tasks>` tasks is queued behind it on the
//!   same streams — from the run's own record (the lane's path) and through the stream
//!   synchronize first (`WorkerConfig::always_synchronize`, the drain without fences). The
//!   first should stay flat across successor sizes, the second grow with them.
//! - `short_runs/depth{1,2}`: throughput of short runs kept two in flight.
//! - `empty_run/round_trip`: submit + result of a run whose orchestration submits nothing.

// The integration tests' fixtures; the bench uses a part of them.
#[allow(dead_code, unused_imports)]
#[path = "../tests/it/common.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use simpler_abi::*;
use simpler_host::*;

const TILE: usize = 1024;

/// One task per tile of `x`.
unsafe extern "C-unwind" fn tiles_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args and its own table.
    unsafe {
        let a = &*args;
        let tiles = a.tensors[0].shapes[0] as usize / TILE;
        for t in 0..tiles {
            let mut d = task(0, LANE_AIV0);
            for (i, tag) in [
                (0, TensorArgType::Input),
                (1, TensorArgType::OutputExisting),
            ] {
                push(&mut d, view(&a.tensors[i], t * TILE, TILE), tag);
            }
            let rc = submit(ops, &d);
            if rc != 0 {
                return rc;
            }
        }
    }
    0
}

unsafe extern "C-unwind" fn empty_orch(_ops: *const OrchOps, _args: *const OrchArgs) -> i32 {
    0
}

fn spec(name: &str, orch: OrchEntry, tensors: bool) -> CallableSpec {
    let arg = |name: &str, direction| ArgSpec {
        name: name.into(),
        direction,
        dtype: DataType::Float32,
        shape: None,
    };
    let args = if tensors {
        vec![arg("x", ArgDirection::In), arg("y", ArgDirection::Out)]
    } else {
        vec![]
    };
    CallableSpec {
        name: name.into(),
        signature: Signature::new(args).unwrap(),
        orchestration: CodeImage::Orchestration(orch),
        kernels: vec![KernelSpec {
            func_id: 0,
            core_type: CoreType::Aiv,
            image: CodeImage::Kernel(add_one),
            name: None,
        }],
        runtime: None,
    }
}

fn tiles(n: usize) -> Vec<OwnedArg> {
    let t = |v: Vec<u8>| OwnedArg::Tensor {
        buffer: Box::new(v),
        shape: vec![(n * TILE) as u64],
        dtype: DataType::Float32,
    };
    vec![t(vec![0u8; n * TILE * 4]), t(vec![0u8; n * TILE * 4])]
}

fn worker(depth: u32, always_synchronize: bool) -> ChipWorker {
    ChipWorker::new(WorkerConfig {
        launch_depth: depth,
        always_synchronize,
        heap_size: 1 << 20,
        ..WorkerConfig::default()
    })
    .unwrap()
}

fn successor_in_flight(c: &mut Criterion) {
    let mut g = c.benchmark_group("successor_in_flight");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (arm, always_sync) in [("record_read", false), ("stream_sync", true)] {
        let w = worker(2, always_sync);
        let id = w.register(&spec("tiles", tiles_orch, true)).unwrap();
        for succ in [1usize, 64, 512, 2048] {
            g.bench_with_input(BenchmarkId::new(arm, succ), &succ, |b, &succ| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let pred = w.submit(id, tiles(1)).unwrap();
                        let next = w.submit(id, tiles(succ)).unwrap();
                        let t = Instant::now();
                        pred.wait(None).unwrap();
                        total += t.elapsed();
                        next.wait(None).unwrap();
                    }
                    total
                })
            });
        }
    }
    g.finish();
}

fn short_runs(c: &mut Criterion) {
    let mut g = c.benchmark_group("short_runs");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for depth in [1, 2] {
        let w = worker(depth, false);
        let id = w.register(&spec("tiles", tiles_orch, true)).unwrap();
        g.bench_function(format!("depth{depth}"), |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                let mut inflight = std::collections::VecDeque::new();
                for _ in 0..iters {
                    if inflight.len() == 2 {
                        let h: RunHandle = inflight.pop_front().unwrap();
                        h.wait(None).unwrap();
                    }
                    inflight.push_back(w.submit(id, tiles(4)).unwrap());
                }
                for h in inflight {
                    h.wait(None).unwrap();
                }
                t.elapsed()
            })
        });
    }
    g.finish();
}

fn empty_run(c: &mut Criterion) {
    let mut g = c.benchmark_group("empty_run");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let w = worker(2, false);
    let id = w.register(&spec("empty", empty_orch, false)).unwrap();
    g.bench_function("round_trip", |b| {
        b.iter(|| w.submit(id, vec![]).unwrap().result().unwrap())
    });
    g.finish();
}

criterion_group!(benches, successor_in_flight, short_runs, empty_run);
criterion_main!(benches);
