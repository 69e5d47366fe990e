//! A thousand consecutive runs with the chips in child processes — each run a small task on
//! each of 2 chips over shared buffers — leave this process's thread count, descriptors,
//! memfd mappings and /dev/shm where they were and its resident memory within 16 MiB;
//! each child's descriptors and memfd mappings stay flat too, and its resident memory
//! within 16 MiB; the children are the two chips, alive (no zombie), and none is left after
//! close.
//!
//! A test binary of its own, not a module of `it`: it measures the whole process and its
//! children, so no other test may run threads, start children or allocate in it meanwhile.

mod leak_probe;
// The fixtures of the `it` binary; this binary uses a part of them.
#[allow(dead_code)]
#[path = "it/process_common.rs"]
mod process_common;

use std::time::{Duration, Instant};

use leak_probe::Probe;
use process_common::*;
use simpler_host::CallConfig;
use simpler_worker::*;

const RUNS: usize = 1000;

/// True when `pid` is this process's child and has not been reaped: it exists and is no
/// zombie (`alive`), or it is a zombie still listed among the children.
fn zombie(pid: u32) -> bool {
    children().contains(&pid) && !alive(pid)
}

#[test]
fn a_thousand_runs_over_chip_processes_keep_this_process_and_its_children_flat() {
    let before_all = children();
    assert!(before_all.is_empty(), "no child before: {before_all:?}");
    let w = Worker::new(WorkerOptions {
        chips: vec![small_chip(); 2],
        chip_isolation: ChipIsolation::Process,
        chip_program: Some(child_program()),
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    })
    .unwrap();
    let chip = w.register(Callable::Chip(callable())).unwrap();
    w.init().unwrap();
    let mut pids: Vec<u32> = w.child_pids().into_iter().map(|(_, p)| p).collect();
    pids.sort_unstable();
    let buffers = XyBuffers::new(&w);
    let (xr, yr, x) = (&buffers.xr, &buffers.yr, &buffers.x);
    let y = |c: u64| buffers.y(c);
    let cfg = CallConfig::default();
    let run = |i: usize| {
        write_f32(xr, 0, &vec![i as f32; N]);
        let report = w
            .run(|o| {
                for c in 0..2 {
                    let args = TaskArgs::new()
                        .tensor(x.clone(), Tag::Input)
                        .tensor(y(c), Tag::Output)
                        .scalar(AFFINE);
                    o.submit_next_level(&chip, args, &cfg, c as usize)?;
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(report.tasks, 2);
        let want = 2.0 * i as f32 + 1.0;
        let out = read_f32(yr, 0, 2 * N);
        assert!(
            out.iter().all(|v| *v == want),
            "run {i}: both chips wrote {want}"
        );
    };
    for i in 0..20 {
        run(i);
    }
    let before = Probe::this();
    let kids: Vec<Probe> = pids.iter().map(|p| Probe::of(&p.to_string())).collect();
    assert!(
        before.memfd_maps >= 4,
        "two buffers and two mailboxes are memfds: {before:?}"
    );
    let t0 = Instant::now();
    for i in 0..RUNS {
        run(i);
    }
    let elapsed = t0.elapsed();
    let grown = Probe::this().assert_flat_since(&before, "this process", RUNS, 16 << 20);
    let mut now = children();
    now.sort_unstable();
    assert_eq!(now, pids, "the children are the two chips");
    for (pid, was) in pids.iter().zip(&kids) {
        assert!(alive(*pid) && !zombie(*pid), "chip child {pid} runs");
        let is = Probe::of(&pid.to_string());
        assert_eq!(is.fds, was.fds, "chip child {pid}: descriptors are flat");
        assert_eq!(
            is.memfd_maps, was.memfd_maps,
            "chip child {pid}: memfd mappings are flat"
        );
        let grown = is.rss.saturating_sub(was.rss);
        assert!(
            grown < 16 << 20,
            "chip child {pid}: resident memory grew {grown} bytes over {RUNS} runs"
        );
        eprintln!(
            "chip child {pid}: {} descriptors, {} memfd mappings, resident memory {} -> {} bytes",
            is.fds, is.memfd_maps, was.rss, is.rss
        );
    }
    eprintln!(
        "{RUNS} runs over 2 chip processes in {elapsed:?} ({:?} per run); this process: {} \
         threads, {} descriptors, {} memfd mappings, resident memory grew {grown} bytes",
        elapsed / RUNS as u32,
        before.threads,
        before.fds,
        before.memfd_maps
    );
    w.close().unwrap();
    for pid in &pids {
        assert!(
            gone_within(*pid, Duration::from_secs(5)),
            "child {pid} is gone"
        );
        assert!(!zombie(*pid), "child {pid} is reaped");
    }
    assert!(children().is_empty(), "no child left: {:?}", children());
}
