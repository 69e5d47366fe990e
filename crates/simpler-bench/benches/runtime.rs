//! Criterion benchmarks of runtime overhead: one run of 16,384 no-op tasks, independent and
//! chained, on 24 and 72 simulated cores. Criterion prints the time per run; tasks/s is
//! 16,384 / that time. `simpler bench --json` prints the same workloads' medians directly.

#![allow(missing_docs)] // criterion_group! generates an undocumented public function.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use simpler_abi::DataType;
use simpler_bench::{noop_callable, Graph};
use simpler_device::Topology;
use simpler_host::{ChipWorker, HostArg, HostTensor, WorkerConfig};

const TASKS: u64 = 16_384;

fn runs(c: &mut Criterion) {
    let mut group = c.benchmark_group("noop_run");
    group.throughput(Throughput::Elements(TASKS));
    group.sample_size(10);
    for (clusters, threads) in [(8u32, 4u32), (24, 6)] {
        let worker = ChipWorker::new(WorkerConfig {
            topology: Topology {
                clusters,
                aicpu_threads: threads,
            },
            ..WorkerConfig::default()
        })
        .unwrap();
        let id = worker.register(&noop_callable()).unwrap();
        for graph in [Graph::Independent, Graph::Chain] {
            let name = format!("{graph:?}/{}cores", clusters * 3);
            group.bench_function(name, |b| {
                let mut token = [0u8; 4];
                b.iter(|| {
                    let mut args = [
                        HostArg::Tensor(HostTensor {
                            bytes: &mut token,
                            shape: vec![1],
                            dtype: DataType::Uint32,
                        }),
                        HostArg::Scalar(TASKS),
                        HostArg::Scalar(u64::from(graph == Graph::Chain)),
                    ];
                    worker.run(id, &mut args).unwrap();
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, runs);
criterion_main!(benches);
