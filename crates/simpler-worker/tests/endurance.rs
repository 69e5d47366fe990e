//! A thousand consecutive runs in one process — each a chip task into a heap-ring
//! intermediate, read by a sub task — leave the thread count, the open descriptors, the
//! memfd mappings (heap ring, shared buffers) and /dev/shm where they were, and the
//! resident memory within 16 MiB. The same with chips in child processes:
//! `endurance_process.rs`.
//!
//! A test binary of its own, not a module of `it`: it measures the whole process, so no
//! other test may run threads, open descriptors or allocate in it meanwhile.

// The fixtures of the `it` binary; this binary uses a part of them.
#[allow(dead_code, unused_imports)]
#[path = "it/common.rs"]
mod common;
mod leak_probe;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::*;
use leak_probe::Probe;
use simpler_abi::DataType;
use simpler_host::CallConfig;
use simpler_worker::*;

const N: u64 = 256;
const RUNS: usize = 1000;

#[test]
fn a_thousand_runs_keep_threads_descriptors_and_memory_flat() {
    let w = Worker::new(options(2, 2)).unwrap();
    let chip = w.register(add_one_callable("add_one")).unwrap();
    let checked = Arc::new(AtomicUsize::new(0));
    let c2 = checked.clone();
    let check = w
        .register(closure(move |a| {
            let want = a.scalar(1).unwrap() as f32 + 1.0;
            if a.read_f32(0)?.iter().any(|v| *v != want) {
                return Err(format!("expected {want} everywhere"));
            }
            c2.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }))
        .unwrap();
    w.init().unwrap();
    let (xr, x) = f32_buffer(&w, &[0.0; N as usize]);
    let run = |i: usize| {
        write_f32(&*xr, 0, &[i as f32; N as usize]);
        w.run(|o| {
            let mid = o.alloc(&[N], DataType::Float32)?;
            o.submit_next_level(&chip, add_args(&x, &mid, 0), &CallConfig::default(), i % 2)?;
            o.submit_sub(
                &check,
                TaskArgs::new().tensor(mid, Tag::Input).scalar(i as u64),
            )?;
            Ok(())
        })
        .unwrap()
    };
    for i in 0..20 {
        run(i);
    }
    let before = Probe::this();
    assert!(
        before.memfd_maps >= 2,
        "the heap ring and the buffer are memfds: {before:?}"
    );
    let t0 = Instant::now();
    for i in 0..RUNS {
        assert_eq!(run(i).tasks, 2);
    }
    let elapsed = t0.elapsed();
    assert_eq!(checked.load(Ordering::SeqCst), RUNS + 20);
    let grown = Probe::this().assert_flat_since(&before, "this process", RUNS, 16 << 20);
    eprintln!("{RUNS} runs in {elapsed:?}; resident memory grew {grown} bytes");
    w.close().unwrap();
}
