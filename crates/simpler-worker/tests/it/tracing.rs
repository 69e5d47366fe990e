//! Traced L3 runs (`docs/tracing.md`, Capture): with chips in threads and in child
//! processes alike, a run at level tasks comes back with one merged trace — the "L3 host"
//! process with the engine's scheduler and lane spans, then one process per chip holding
//! that chip's run with its subtasks — and an untraced run with none. A level-2 run of an
//! [`IsolatedChip`] brings the same trace back, and its chip's task count.

use std::sync::Arc;
use std::time::Duration;

use crate::process_common::*;
use simpler_abi::DataType;
use simpler_host::trace_model::TraceLevel;
use simpler_host::{CallConfig, ScalarValue};
use simpler_worker::*;

fn traced_run(isolation: ChipIsolation) {
    let w = Worker::new(WorkerOptions {
        chips: vec![small_chip(); 2],
        device_ids: vec![4, 9],
        chip_isolation: isolation,
        chip_program: Some(child_program()),
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    })
    .unwrap();
    let chip = w.register(Callable::Chip(callable())).unwrap();
    w.init().unwrap();
    let buffers = XyBuffers::new(&w);
    let (xr, x) = (&buffers.xr, &buffers.x);
    write_f32(xr, 0, &(0..N).map(|i| i as f32).collect::<Vec<_>>());
    let y = |c: u64| buffers.y(c);
    let submit = |o: &Orchestrator| {
        for c in 0..2u64 {
            let args = TaskArgs::new()
                .tensor(x.clone(), Tag::Input)
                .tensor(y(c), Tag::Output)
                .scalar(AFFINE);
            o.submit_next_level(&chip, args, &CallConfig::default(), c as usize)?;
        }
        Ok(())
    };
    let untraced = w.run(submit).unwrap();
    assert!(
        untraced.trace.is_none(),
        "{isolation:?}: an untraced run has no trace"
    );
    let report = w
        .run_with(
            submit,
            &RunConfig {
                trace_level: TraceLevel::Tasks,
            },
        )
        .unwrap();
    assert_eq!(
        (untraced.chip_tasks, report.chip_tasks),
        (2, 2),
        "{isolation:?}: each chip run's one task, summed"
    );
    let trace = report.trace.expect("a traced run has a trace");
    let names: Vec<&str> = trace.processes.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names.len(), 3, "{isolation:?}: {names:?}");
    assert_eq!(names[0], L3_HOST);
    assert!(
        names[1].starts_with("chip 0 (device 4") && names[2].starts_with("chip 1 (device 9"),
        "{isolation:?}: one process per chip, named as the engine names it: {names:?}"
    );
    let pids: std::collections::BTreeSet<u32> = trace.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids.len(), 3, "unique pids");
    let host = &trace.processes[0];
    for (i, p) in trace.processes[1..].iter().enumerate() {
        assert_eq!(p.runs.len(), 1, "{isolation:?}: chip {i}'s one task");
        let run = &p.runs[0];
        assert_eq!(run.level, TraceLevel::Tasks);
        assert!(!run.subtasks.is_empty(), "{isolation:?}: chip {i}");
        assert!(run.subtasks.iter().all(|s| s.start_ns < s.end_ns));
        assert!(run.dropped.is_empty(), "{:?}", run.dropped);
        assert!(
            p.host_spans.iter().any(|s| s.name == "launch"),
            "the chip's own lane spans came along"
        );
        // The engine's lane span for this chip's task, on the chip's track.
        assert!(
            host.host_spans
                .iter()
                .any(|s| s.thread == p.name && s.start_ns <= s.end_ns),
            "{isolation:?}: no lane span on {} in {:?}",
            p.name,
            host.host_spans
        );
    }
    assert_eq!(
        host.host_spans
            .iter()
            .filter(|s| s.thread == "L3 scheduler" && s.name.starts_with("dispatch"))
            .count(),
        2,
        "{:?}",
        host.host_spans
    );
    w.close().unwrap();
}

#[test]
fn a_traced_run_merges_one_process_per_chip_in_threads() {
    let _serial = serial();
    traced_run(ChipIsolation::Thread);
}

#[test]
fn a_traced_run_merges_one_process_per_chip_in_child_processes() {
    let _serial = serial();
    traced_run(ChipIsolation::Process);
}

#[test]
fn an_isolated_chip_run_brings_its_trace_and_task_count_back() {
    let _serial = serial();
    let chip = IsolatedChip::start(IsolatedOptions {
        chip: small_chip(),
        device_id: 3,
        program: Some(child_program()),
        startup_timeout: Duration::from_secs(60),
    })
    .unwrap();
    let key = chip.register(callable()).unwrap();
    let xs: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let x: Arc<dyn HostMemory> = Arc::new(VecMemory::new(
        xs.iter().flat_map(|v| v.to_ne_bytes()).collect(),
    ));
    let y = Arc::new(VecMemory::new(vec![0; N * 4]));
    let ym: Arc<dyn HostMemory> = y.clone();
    let args = vec![
        IsolatedArg::Host(Tensor::new(Memory::Host(x), &[N as u64], DataType::Float32).unwrap()),
        IsolatedArg::Host(Tensor::new(Memory::Host(ym), &[N as u64], DataType::Float32).unwrap()),
        IsolatedArg::Scalar(ScalarValue::Int(AFFINE as i128)),
    ];
    let untraced = chip.run(key, args.clone(), &CallConfig::default()).unwrap();
    assert!(untraced.trace.is_none(), "an untraced run has no trace");
    assert_eq!(untraced.chip_tasks, 1, "the chip run's one task");
    assert_eq!(
        untraced.tasks, 3,
        "the engine's: copy in, the chip task, copy back"
    );
    let config = CallConfig {
        trace_level: TraceLevel::Tasks,
        ..CallConfig::default()
    };
    let report = chip.run(key, args, &config).unwrap();
    assert_eq!(report.chip_tasks, 1);
    let ys: Vec<f32> = y
        .to_vec()
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert!(ys.iter().zip(&xs).all(|(y, x)| *y == 2.0 * x + 1.0));
    let trace = report.trace.expect("a traced run has a trace");
    let names: Vec<&str> = trace.processes.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[0], L3_HOST);
    assert_eq!(
        names[1],
        chip.endpoint(),
        "the chip's process, named as the engine names it"
    );
    let p = &trace.processes[1];
    assert_eq!(p.runs.len(), 1);
    assert_eq!(p.runs[0].level, TraceLevel::Tasks);
    assert!(
        !p.runs[0].subtasks.is_empty(),
        "the chip's subtasks came back"
    );
    let dispatched = trace.processes[0]
        .host_spans
        .iter()
        .filter(|s| s.name.starts_with("dispatch"))
        .count();
    assert_eq!(dispatched, 3, "the copies and the chip task");
    chip.close().unwrap();
}
