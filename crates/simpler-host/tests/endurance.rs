//! Endurance: 10,000 consecutive runs of a C callable (kernels and orchestration loaded
//! from shared-library images) in one process, and register → run → unregister cycles of
//! the same callable. Threads, open file descriptors, memory mappings, live device
//! allocations and resident memory must stay flat: nothing is started, opened or loaded per
//! run (the upstream sim dies after about 185 runs from per-run library reloads), and an
//! unregistered callable's code is unmapped (`SIMPLER_ENDURANCE_CYCLES` sets the cycle
//! count, 1,000 by default). Code that a run given up on may still execute stays mapped.
//!
//! A test binary of its own, not a module of `it`: it measures the whole process, so no
//! other test may start threads, open descriptors or allocate in it meanwhile; its tests
//! take [`SERIAL`] for the same reason.

// The fixtures of the `it` binary; this binary uses a part of them.
#[allow(dead_code, unused_imports)]
#[path = "it/common.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use common::*;
use simpler_abi::{CoreType, DataType};
use simpler_host::*;

const KERNEL: &str = r#"
#include "simpler/kernel.h"
SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    SimplerChipTensor *x = simpler_arg_tensor(args, 0);
    SimplerChipTensor *y = simpler_arg_tensor(args, 1);
    float *a = SIMPLER_TENSOR_DATA(float, x), *b = SIMPLER_TENSOR_DATA(float, y);
    for (uint64_t i = 0; i < x->shapes[0]; ++i) b[i] = a[i] + 1.0f;
}
"#;

const ORCH: &str = r#"
#include "simpler/orchestration.h"
SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops, const SimplerOrchArgs *args) {
    /* y = x + 1 in 4 tiles, then z = y + 1 through a runtime-allocated intermediate. */
    uint64_t n = args->tensors[0].shapes[0], tile = n / 4;
    for (uint64_t t = 0; t < 4; ++t) {
        SimplerTaskDesc d;
        simpler_task_init(&d, SIMPLER_CORE_AIV, 0);
        SimplerChipTensor in = simpler_view_1d(&args->tensors[0], t * tile, tile);
        SimplerTaskOutputs outs;
        simpler_task_add_input(&d, &in);
        uint64_t shape[1] = {tile};
        simpler_task_add_output(&d, shape, 1, SIMPLER_DT_FLOAT32);
        int32_t rc = simpler_submit(ops, &d, &outs);
        if (rc) return rc;
        SimplerTaskDesc e;
        simpler_task_init(&e, SIMPLER_CORE_AIV, 0);
        SimplerChipTensor out = simpler_view_1d(&args->tensors[1], t * tile, tile);
        simpler_task_add_input(&e, &outs.tensors[0]);
        simpler_task_add_output_existing(&e, &out);
        rc = simpler_submit(ops, &e, NULL);
        if (rc) return rc;
    }
    return 0;
}
"#;

fn compile(dir: &Path, name: &str, src: &str) -> Vec<u8> {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let c = dir.join(format!("{name}.c"));
    let so = dir.join(format!("{name}.so"));
    std::fs::write(&c, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(cc)
        .args(["-std=c11", "-O2", "-shared", "-fPIC", "-Werror", "-I"])
        .arg(&include)
        .arg(&c)
        .arg("-o")
        .arg(&so)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(so).unwrap()
}

/// One measuring test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Memory mappings of this process.
fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count())
}

/// Mappings of code images the loader staged (`simpler-code-*.so`, unlinked at once).
fn code_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |m| {
        m.lines().filter(|l| l.contains("simpler-code-")).count()
    })
}

fn count_dir(path: &str) -> usize {
    std::fs::read_dir(path).map(|d| d.count()).unwrap_or(0)
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The `plus_two` callable, compiled into `dir`.
fn plus_two(dir: &Path) -> CallableSpec {
    CallableSpec {
        name: "plus_two".into(),
        signature: Signature::new(vec![
            ArgSpec {
                name: "x".into(),
                direction: ArgDirection::In,
                dtype: DataType::Float32,
                shape: Some(vec![256]),
            },
            ArgSpec {
                name: "z".into(),
                direction: ArgDirection::Out,
                dtype: DataType::Float32,
                shape: Some(vec![256]),
            },
        ])
        .unwrap(),
        orchestration: CodeImage::Library {
            bytes: compile(dir, "orch", ORCH),
            entry: "aicpu_orchestration_entry".into(),
        },
        kernels: vec![KernelSpec {
            func_id: 0,
            core_type: CoreType::Aiv,
            image: CodeImage::Library {
                bytes: compile(dir, "kernel", KERNEL),
                entry: "kernel_entry".into(),
            },
            name: None,
        }],
        runtime: None,
    }
}

#[test]
fn ten_thousand_runs_keep_threads_fds_and_memory_flat() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let spec = plus_two(dir.path());
    let worker = ChipWorker::new(WorkerConfig::default()).unwrap();
    let id = worker.register(&spec).unwrap();
    let mut x: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let mut z = vec![0f32; 256];
    let mut run = |i: usize| {
        worker
            .run(id, &mut [host_f32(&mut x), host_f32(&mut z)])
            .unwrap_or_else(|e| panic!("run {i}: {e}"));
        assert_eq!(z[255], 257.0, "run {i}");
    };
    for i in 0..500 {
        run(i);
    }
    let (threads, fds, rss) = (
        count_dir("/proc/self/task"),
        count_dir("/proc/self/fd"),
        rss_kib(),
    );
    for i in 500..10_000 {
        run(i);
    }
    let (threads2, fds2, rss2) = (
        count_dir("/proc/self/task"),
        count_dir("/proc/self/fd"),
        rss_kib(),
    );
    println!("threads {threads} -> {threads2}, fds {fds} -> {fds2}, rss {rss} KiB -> {rss2} KiB");
    assert!(
        threads2 <= threads,
        "threads grew from {threads} to {threads2}"
    );
    assert!(fds2 <= fds, "open files grew from {fds} to {fds2}");
    assert!(
        rss2 < rss + 16 * 1024,
        "resident memory grew from {rss} KiB to {rss2} KiB"
    );
}

#[test]
fn register_run_unregister_cycles_unmap_their_code() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let cycles: usize = std::env::var("SIMPLER_ENDURANCE_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let dir = tempfile::tempdir().unwrap();
    let spec = plus_two(dir.path());
    let worker = ChipWorker::new(WorkerConfig::default()).unwrap();
    let mut x: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let mut z = vec![0f32; 256];
    let mut cycle = |i: usize| {
        let id = worker
            .register(&spec)
            .unwrap_or_else(|e| panic!("register {i}: {e}"));
        worker
            .run(id, &mut [host_f32(&mut x), host_f32(&mut z)])
            .unwrap_or_else(|e| panic!("run {i}: {e}"));
        assert_eq!(z[255], 257.0, "run {i}");
        worker
            .unregister(id)
            .unwrap_or_else(|e| panic!("unregister {i}: {e}"));
    };
    for i in 0..50 {
        cycle(i);
    }
    let before = (
        mappings(),
        code_mappings(),
        count_dir("/proc/self/task"),
        count_dir("/proc/self/fd"),
        rss_kib(),
    );
    let started = std::time::Instant::now();
    for i in 50..50 + cycles {
        cycle(i);
    }
    let per_cycle = started.elapsed() / cycles as u32;
    let after = (
        mappings(),
        code_mappings(),
        count_dir("/proc/self/task"),
        count_dir("/proc/self/fd"),
        rss_kib(),
    );
    println!(
        "{cycles} register/run/unregister cycles ({per_cycle:?} each): mappings {} -> {}, \
         code mappings {} -> {}, threads {} -> {}, fds {} -> {}, rss {} KiB -> {} KiB",
        before.0,
        after.0,
        before.1,
        after.1,
        before.2,
        after.2,
        before.3,
        after.3,
        before.4,
        after.4
    );
    // (The give-up test may have left its own kept image mapped before this one ran.)
    assert!(
        after.1 <= before.1,
        "unregistered code stays mapped: {} code mappings, {} before",
        after.1,
        before.1
    );
    assert!(
        after.0 <= before.0 + 16,
        "mappings grew from {} to {}",
        before.0,
        after.0
    );
    assert!(after.2 <= before.2, "threads grew");
    assert!(after.3 <= before.3, "open files grew");
    assert!(
        after.4 < before.4 + 16 * 1024,
        "resident memory grew from {} KiB to {} KiB",
        before.4,
        after.4
    );
}

#[test]
fn code_stays_mapped_after_a_give_up_and_is_unmapped_otherwise() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let image = CodeImage::Library {
        bytes: compile(dir.path(), "kernel", KERNEL),
        entry: "kernel_entry".into(),
    };
    let load = |gate| {
        loader::load_for_device(&image, loader::EntryKind::Kernel, "kernel func 0", gate).unwrap()
    };
    let base = code_mappings();
    let gate = loader::UnloadGate::new();
    let clean = load(&gate);
    assert!(code_mappings() > base, "the load mapped nothing");
    assert!(clean.unmaps_on_drop());
    drop(clean);
    assert_eq!(code_mappings(), base, "clean code was not unmapped");
    let kept = load(&gate);
    gate.give_up(); // a run given up on after this load: a thread may be inside it
    assert!(!kept.unmaps_on_drop());
    drop(kept);
    assert!(
        code_mappings() > base,
        "code a thread may execute was unmapped"
    );
    let later = load(&gate); // loaded after the give-up: no abandoned thread can be in it
    let mapped = code_mappings();
    assert!(later.unmaps_on_drop());
    drop(later);
    assert!(code_mappings() < mapped);
    let checked = loader::load(&image, loader::EntryKind::Kernel, "kernel func 0").unwrap();
    assert!(
        checked.unmaps_on_drop(),
        "code loaded for no device is unmapped"
    );
}
