//! Criterion benchmarks of runtime overhead: one run of 16,384 no-op tasks, independent and
//! chained, on 24 and 72 simulated cores. Criterion prints the time per run; tasks/s is
//! 16,384 / that time. `simpler bench --json` prints the same workloads' medians directly.

#![allow(missing_docs)] // criterion_group! generates an undocumented public function.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use simpler_bench::{noop_worker, run_noop, Graph};
use simpler_host::{CallConfig, WorkerConfig};

const TASKS: u64 = 16_384;

fn runs(c: &mut Criterion) {
    let mut group = c.benchmark_group("noop_run");
    group.throughput(Throughput::Elements(TASKS));
    group.sample_size(10);
    for (clusters, threads) in [(8u32, 4u32), (24, 6)] {
        let (worker, id) =
            noop_worker(WorkerConfig::default().sim_executor, clusters, threads).unwrap();
        for graph in [Graph::Independent, Graph::Chain] {
            let name = format!("{graph:?}/{}cores", clusters * 3);
            let config = CallConfig::default();
            group.bench_function(name, |b| {
                b.iter(|| run_noop(&worker, id, graph, TASKS, &config).unwrap());
            });
        }
    }
    group.finish();
}

criterion_group!(benches, runs);
criterion_main!(benches);
