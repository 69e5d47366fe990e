//! `simpler_worker::collectives` on sim chips in this process: the C chip code the Python
//! package ships, compiled and registered from Rust, runs allreduce (f32, i32), allgather
//! and reduce-scatter over 2, 3 and 4 chips with exact values; several collectives share
//! one domain round after round; bad dtype, count, rank counts, sizes and timeouts are
//! refused naming the argument, before anything is submitted, and take no round.

use std::sync::Arc;
use std::time::Duration;

use simpler_abi::DataType;
use simpler_device::Topology;
use simpler_host::WorkerConfig;
use simpler_toolchain::{build, cache::KernelCache};
use simpler_worker::collectives::*;
use simpler_worker::*;

fn compiler() -> build::Compiler {
    let root = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    build::Compiler::new(
        build::compiler_words(std::env::var_os("CC")).unwrap(),
        vec![build::repository_include_dir()],
        KernelCache::new(root.join("collectives-kernel-cache")),
    )
    .unwrap()
}

fn chip() -> WorkerConfig {
    WorkerConfig {
        topology: Topology {
            clusters: 1,
            aicpu_threads: 3,
        },
        heap_size: 1 << 20,
        run_timeout: Duration::from_secs(60),
        ..WorkerConfig::default()
    }
}

fn worker(chips: usize) -> (Worker, Collectives) {
    let w = Worker::new(WorkerOptions {
        chips: vec![chip(); chips],
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    })
    .unwrap();
    let coll = Collectives::new(&w, &compiler()).unwrap();
    w.init().unwrap();
    (w, coll)
}

/// A host buffer of `values` (4-byte elements as raw bits) and a 1-D tensor over it.
fn buffer(w: &Worker, bits: &[u32], dtype: DataType) -> (Arc<SharedRegion>, Tensor) {
    let region = w.create_buffer(bits.len() as u64 * 4).unwrap();
    // SAFETY: the region maps `len()` bytes, 4-byte aligned (a page); no task runs yet.
    unsafe {
        std::slice::from_raw_parts_mut(region.as_ptr().cast::<u32>(), bits.len())
            .copy_from_slice(bits)
    };
    let memory: Arc<dyn HostMemory> = region.clone();
    let t = Tensor::new(Memory::Host(memory), &[bits.len() as u64], dtype).unwrap();
    (region, t)
}

fn read(region: &SharedRegion) -> Vec<u32> {
    // SAFETY: as in `buffer`; the run that wrote it is over.
    unsafe { std::slice::from_raw_parts(region.as_ptr().cast::<u32>(), region.len() / 4) }.to_vec()
}

fn f32s(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn allreduce_allgather_and_reduce_scatter_over_2_3_and_4_chips() {
    for n in [2usize, 3, 4] {
        let (w, coll) = worker(n);
        let count = 5usize;
        // Rank r's f32 input: r + i/4 (exact sums).
        let x: Vec<Vec<f32>> = (0..n)
            .map(|r| (0..count).map(|i| r as f32 + i as f32 / 4.0).collect())
            .collect();
        let (xin, xt): (Vec<_>, Vec<_>) = x
            .iter()
            .map(|v| buffer(&w, &f32s(v), DataType::Float32))
            .unzip();
        let (ar, art): (Vec<_>, Vec<_>) = (0..n)
            .map(|_| buffer(&w, &vec![0; count], DataType::Float32))
            .unzip();
        let (ag, agt): (Vec<_>, Vec<_>) = (0..n)
            .map(|_| buffer(&w, &vec![0; n * count], DataType::Float32))
            .unzip();
        // i32 reduce-scatter input of n*count per rank: rank r, element j -> 1000 r + j;
        // and an i32 allreduce that wraps.
        let (_rsin, rst): (Vec<_>, Vec<_>) = (0..n)
            .map(|r| {
                let v: Vec<u32> = (0..n * count).map(|j| (1000 * r + j) as u32).collect();
                buffer(&w, &v, DataType::Int32)
            })
            .unzip();
        let (rs, rsot): (Vec<_>, Vec<_>) = (0..n)
            .map(|_| buffer(&w, &vec![0; count], DataType::Int32))
            .unzip();
        let (_wrapin, wrapt): (Vec<_>, Vec<_>) = (0..n)
            .map(|_| buffer(&w, &[i32::MAX as u32], DataType::Int32))
            .unzip();
        let (wrap, wrapot): (Vec<_>, Vec<_>) =
            (0..n).map(|_| buffer(&w, &[0], DataType::Int32)).unzip();
        let members: Vec<usize> = (0..n).rev().collect(); // rank r is chip n-1-r
        let by_rank = |v: &[Tensor]| members.iter().map(|&c| v[c].clone()).collect::<Vec<_>>();
        let opts = CollectiveOptions::default();
        w.run(|o| {
            let f = coll.allocate_domain(o, "f", &members, count as u64, DataType::Float32)?;
            coll.allreduce(o, &f, &by_rank(&xt), &by_rank(&art), &opts)?;
            coll.allgather(o, &f, &by_rank(&xt), &by_rank(&agt), &opts)?;
            assert_eq!(f.rounds(), 2);
            let i = coll.allocate_domain(o, "i", &members, count as u64, DataType::Int32)?;
            coll.reduce_scatter(o, &i, &by_rank(&rst), &by_rank(&rsot), &opts)?;
            coll.allreduce(o, &i, &by_rank(&wrapt), &by_rank(&wrapot), &opts)?;
            assert_eq!(i.rounds(), 2);
            Ok(())
        })
        .unwrap();
        // chip c holds rank n-1-c's data.
        let rank_of = |c: usize| n - 1 - c;
        let sum: Vec<f32> = (0..count)
            .map(|i| (0..n).map(|r| x[rank_of(r)][i]).sum())
            .collect();
        let gathered: Vec<u32> = (0..n).flat_map(|p| f32s(&x[members[p]])).collect();
        for c in 0..n {
            assert_eq!(read(&ar[c]), f32s(&sum), "allreduce on chip {c} of {n}");
            assert_eq!(read(&ag[c]), gathered, "allgather on chip {c} of {n}");
            let r = rank_of(c);
            let want: Vec<u32> = (0..count)
                .map(|j| {
                    (0..n)
                        .map(|p| (1000 * members[p] + r * count + j) as u32)
                        .fold(0u32, u32::wrapping_add)
                })
                .collect();
            assert_eq!(read(&rs[c]), want, "reduce_scatter on chip {c} of {n}");
            let wrapped = (0..n).fold(0i32, |s, _| s.wrapping_add(i32::MAX));
            assert_eq!(read(&wrap[c]), vec![wrapped as u32], "i32 wrap on chip {c}");
        }
        drop((xin, xt, art, agt, rst, rsot, wrapt, wrapot));
        w.close().unwrap();
    }
}

/// A refused call: the argument it must name, the op, inputs, outputs and timeout.
type Case = (&'static str, Op, Vec<Tensor>, Vec<Tensor>, Duration);

fn arg_of(e: &WorkerError) -> &str {
    match e {
        WorkerError::InvalidArgument { arg, .. } => arg,
        other => panic!("not an argument error: {other}"),
    }
}

#[test]
fn bad_input_is_refused_naming_the_argument_and_takes_no_round() {
    let (w, coll) = worker(2);
    let f = |w: &Worker, n| buffer(w, &vec![0; n], DataType::Float32);
    let (_a, a4) = f(&w, 4);
    let (_b, b4) = f(&w, 4);
    let (_c, c3) = f(&w, 3);
    let (_d, d8) = f(&w, 8);
    let (_e, i4) = buffer(&w, &[0; 4], DataType::Int32);
    let opts = CollectiveOptions::default();
    let ranks = [0usize, 1];
    w.run(|o| {
        let e = coll
            .allocate_domain(o, "x", &ranks, 4, DataType::Float16)
            .unwrap_err();
        assert_eq!(arg_of(&e), "dtype", "{e}");
        let e = coll
            .allocate_domain(o, "x", &ranks, 0, DataType::Float32)
            .unwrap_err();
        assert_eq!(arg_of(&e), "count", "{e}");
        let e = coll
            .allocate_domain(o, "x", &ranks, u64::MAX, DataType::Float32)
            .unwrap_err();
        assert_eq!(arg_of(&e), "count", "{e}");
        let d = coll.allocate_domain(o, "d", &ranks, 4, DataType::Float32)?;
        let cases: Vec<Case> = vec![
            (
                "inputs",
                Op::AllReduce,
                vec![a4.clone()],
                vec![b4.clone(), b4.clone()],
                opts.timeout,
            ),
            (
                "outputs",
                Op::AllReduce,
                vec![a4.clone(), a4.clone()],
                vec![b4.clone()],
                opts.timeout,
            ),
            (
                "inputs[1]",
                Op::AllReduce,
                vec![a4.clone(), i4.clone()],
                vec![b4.clone(), b4.clone()],
                opts.timeout,
            ),
            (
                "outputs[0]",
                Op::AllReduce,
                vec![a4.clone(), a4.clone()],
                vec![c3.clone(), b4.clone()],
                opts.timeout,
            ),
            (
                "inputs[1]",
                Op::AllReduce,
                vec![a4.clone(), c3.clone()],
                vec![b4.clone(), c3.clone()],
                opts.timeout,
            ),
            (
                "outputs[0]",
                Op::AllGather,
                vec![a4.clone(), a4.clone()],
                vec![b4.clone(), b4.clone()],
                opts.timeout,
            ),
            (
                "inputs[0]",
                Op::ReduceScatter,
                vec![c3.clone(), c3.clone()],
                vec![b4.clone(), b4.clone()],
                opts.timeout,
            ),
            (
                "timeout",
                Op::AllReduce,
                vec![a4.clone(), a4.clone()],
                vec![b4.clone(), b4.clone()],
                Duration::ZERO,
            ),
            (
                "timeout",
                Op::AllReduce,
                vec![a4.clone(), a4.clone()],
                vec![b4.clone(), b4.clone()],
                Duration::from_secs(41),
            ),
        ];
        for (want, op, x, y, timeout) in cases {
            let o2 = CollectiveOptions { timeout, ..opts };
            let e = coll.submit(o, op, &d, &x, &y, &o2).unwrap_err();
            assert_eq!(arg_of(&e), want, "{op:?}: {e}");
        }
        // A reduce-scatter input larger than the scratch (2 ranks × 4 = 8 elements fit).
        let (_big, big) = buffer(&w, &[0; 16], DataType::Float32);
        let e = coll
            .reduce_scatter(
                o,
                &d,
                &[big.clone(), big.clone()],
                &[d8.clone(), d8.clone()],
                &opts,
            )
            .unwrap_err();
        assert_eq!(arg_of(&e), "inputs", "{e}");
        assert_eq!(d.rounds(), 0, "a refused collective takes no round");
        // A domain without the collectives' buffers is not a collectives domain.
        let plain = o.allocate_domain(
            "plain",
            &ranks,
            4096,
            &[CommBufferSpec {
                name: "scratch".into(),
                dtype: DataType::Float32,
                count: 4,
            }],
        )?;
        let e = CollectiveDomain::new(plain).unwrap_err();
        assert_eq!(arg_of(&e), "domain", "{e}");
        Ok(())
    })
    .unwrap();
    w.close().unwrap();
}
