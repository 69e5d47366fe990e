//! `host_build_graph` (`docs/chip-runtime.md` §17) with in-process callables: a run whose
//! orchestration the host runs before launch gives the same result as under
//! `tensormap_and_ringbuffer`; a graph that does not fit fails at once with the upstream
//! codes; tensor-data calls that would wait are refused; recordings replay on new buffers
//! and refuse stale callables, other shapes or scalars, and corrupt images.

use std::sync::Arc;

use crate::common::*;
use simpler_abi::*;
use simpler_device::Device;
use simpler_host::*;

fn hbg() -> CallConfig {
    CallConfig {
        runtime: Some(Runtime::HostBuildGraph),
        ..CallConfig::default()
    }
}

/// Records `id` on `args(1.0, 0)` through a handle.
fn record(w: &ChipWorker, id: CallableId) -> RecordedRun {
    w.submit_record(id, args(1.0, 0), &CallConfig::default())
        .unwrap()
        .result()
        .unwrap()
        .report
        .recording
        .unwrap()
}

fn run_code(e: &HostError) -> i32 {
    match e {
        HostError::RunFailed { code, .. } => *code,
        other => panic!("expected a failed run, got {other}"),
    }
}

#[test]
fn a_host_built_graph_gives_the_same_result_as_the_device_orchestration() {
    let (_dev, w, id) = worker();
    for config in [CallConfig::default(), hbg()] {
        let out = w
            .submit_with(id, args(3.0, 0), &config)
            .unwrap()
            .result()
            .unwrap();
        let graph = out.report.graph;
        match config.runtime {
            Some(Runtime::HostBuildGraph) => {
                let g = graph.expect("a host_build_graph run reports its graph");
                assert_eq!(g.tasks, 4);
                assert!(!g.replayed);
                assert!(g.image_bytes > 64);
            }
            _ => assert!(graph.is_none()),
        }
        assert_eq!(out.report.tasks, 4);
        check_output(out, 3.0);
    }
}

#[test]
fn the_runtime_resolves_run_then_callable_then_worker() {
    let dev = small_device();
    let w = ChipWorker::with_device(
        WorkerConfig {
            runtime: Runtime::HostBuildGraph,
            ..config()
        },
        dev as Arc<dyn Device>,
    )
    .unwrap();
    let by_worker = w.register(&spec("inc")).unwrap();
    let by_callable = w
        .register(&CallableSpec {
            runtime: Some(Runtime::TensormapAndRingbuffer),
            ..spec("inc_tmr")
        })
        .unwrap();
    let graph = |id, config: &CallConfig| {
        let out = w
            .submit_with(id, args(1.0, 0), config)
            .unwrap()
            .result()
            .unwrap();
        let g = out.report.graph.is_some();
        check_output(out, 1.0);
        g
    };
    assert!(
        graph(by_worker, &CallConfig::default()),
        "the worker's default"
    );
    assert!(
        !graph(by_callable, &CallConfig::default()),
        "the callable's own"
    );
    assert!(graph(by_callable, &hbg()), "the run's");
}

#[test]
fn a_recording_replays_on_new_buffers_without_the_orchestration() {
    let (_dev, w, id) = worker();
    let (mut x, mut y) = (f32_bytes(&input(1.0)), vec![0u8; N * 4]);
    let (rec, report) = w
        .record(id, &mut host_args(&mut x, &mut y), &CallConfig::default())
        .unwrap();
    check_bytes(&y, 1.0);
    assert!(
        report.recording.is_none(),
        "handed out once, as the tuple's first"
    );
    assert_eq!(rec.tasks(), 4);
    assert_eq!(rec.callable(), id);
    for seed in [5.0f32, 9.0] {
        let (mut x, mut y) = (f32_bytes(&input(seed)), vec![0u8; N * 4]);
        let report = w
            .replay(&rec, &mut host_args(&mut x, &mut y), &CallConfig::default())
            .unwrap();
        let g = report.graph.unwrap();
        assert!(g.replayed);
        assert_eq!(g.build_time, std::time::Duration::ZERO);
        check_bytes(&y, seed);
    }
    // Owned arguments, through a handle, two in flight.
    let handles: Vec<_> = [2.0f32, 4.0]
        .iter()
        .map(|&s| {
            (
                s,
                w.submit_replay(&rec, args(s, 0), &CallConfig::default())
                    .unwrap(),
            )
        })
        .collect();
    for (s, h) in handles {
        check_output(h.result().unwrap(), s);
    }
}

#[test]
fn a_replay_refused_by_the_signature_is_a_replay_mismatch_naming_the_argument() {
    let (_dev, w, id) = worker();
    let rec = record(&w, id);
    // The recording takes these shapes, but `y` is written: a read-only buffer for it is
    // refused by the signature's check, and a replay says so as a mismatch.
    let mut read_only = args(1.0, 0);
    read_only[1] = OwnedArg::Input {
        buffer: Box::new(vec![0u8; N * 4]),
        shape: vec![N as u64],
        dtype: DataType::Float32,
    };
    match w.submit_replay(&rec, read_only, &CallConfig::default()) {
        Err(e @ HostError::ReplayMismatch { .. }) => {
            assert!(e.is_invalid_argument(), "still an invalid argument: {e}");
            let HostError::ReplayMismatch { arg, .. } = e else {
                unreachable!()
            };
            assert_eq!(arg, "y");
        }
        other => panic!("expected a mismatch, got {:?}", other.err()),
    }
    // A fixed-shape signature refuses another shape before the recording is consulted
    // (the bindings' order); the refusal converts to the replay's error, naming it.
    let fixed = Signature::new(vec![ArgSpec {
        name: "a".into(),
        direction: ArgDirection::In,
        dtype: DataType::Float32,
        shape: Some(vec![4, 4]),
    }])
    .unwrap();
    let offer = ArgOffer::Host(HostMemory {
        addr: 0x1000,
        len: 8 * 8 * 4,
        writable: true,
        shape: vec![8, 8],
        dtype: DataType::Float32,
    });
    let refusal = fixed.check_offers("gemm", &[offer]).unwrap_err();
    match refusal.into_replay_mismatch() {
        HostError::ReplayMismatch { arg, reason } => {
            assert_eq!(arg, "a");
            assert!(reason.contains("[8, 8]"), "{reason}");
        }
        other => panic!("expected a mismatch, got {other}"),
    }
    let count = fixed.check_offers("gemm", &[]).unwrap_err();
    assert!(matches!(
        count.into_replay_mismatch(),
        HostError::ReplayMismatch { arg, .. } if arg == "gemm"
    ));
}

#[test]
fn a_replay_refuses_other_shapes_scalars_and_stale_callables() {
    let (_dev, w, id) = worker();
    let rec = record(&w, id);
    let mut other = args(1.0, 0);
    other[0] = OwnedArg::Tensor {
        buffer: Box::new(vec![0u8; 2 * N * 4]),
        shape: vec![2 * N as u64],
        dtype: DataType::Float32,
    };
    match w.submit_replay(&rec, other, &CallConfig::default()) {
        Err(HostError::ReplayMismatch { arg, reason }) => {
            assert_eq!(arg, "x");
            assert!(reason.contains("[2048]"), "{reason}");
        }
        other => panic!("expected a mismatch, got {:?}", other.err()),
    }
    match w.submit_replay(&rec, args(1.0, 1), &CallConfig::default()) {
        Err(HostError::ReplayMismatch { arg, .. }) => assert_eq!(arg, "func"),
        other => panic!("expected a mismatch, got {:?}", other.err()),
    }
    w.unregister(id).unwrap();
    match w.submit_replay(&rec, args(1.0, 0), &CallConfig::default()) {
        Err(HostError::StaleRecording { reason, .. }) => {
            assert!(reason.contains("no longer registered"), "{reason}")
        }
        other => panic!("expected a stale recording, got {:?}", other.err()),
    }
    let again = w.register_with_id(id.0, &spec("inc")).unwrap();
    assert_eq!(again, id);
    match w.submit_replay(&rec, args(1.0, 0), &CallConfig::default()) {
        Err(HostError::StaleRecording { reason, .. }) => {
            assert!(reason.contains("registered again"), "{reason}")
        }
        other => panic!("expected a stale recording, got {:?}", other.err()),
    }
}

#[test]
fn a_corrupt_image_is_refused_before_any_task_runs() {
    let (dev, w, id) = worker();
    let rec = record(&w, id);
    let (ptr, bytes) = rec.image_location();
    let mut image = vec![0u8; bytes as usize];
    dev.copy_from_device(&mut image, ptr).unwrap();
    image[64 + 28] ^= 1; // the first task's fanin
    dev.copy_to_device(ptr, &image).unwrap();
    let (mut x, mut y) = (f32_bytes(&input(1.0)), vec![7u8; N * 4]);
    let err = w
        .replay(&rec, &mut host_args(&mut x, &mut y), &CallConfig::default())
        .unwrap_err();
    assert_eq!(run_code(&err), -ORCH_INVALID_ARGS, "{err}");
    assert!(err.to_string().contains("corrupt"), "{err}");
    assert!(
        y.iter().all(|&b| b == 7),
        "a failed run leaves the output alone"
    );
    // The header's generation (outside the checksum) must match the run's.
    image[64 + 28] ^= 1;
    image[16] ^= 0x40;
    dev.copy_to_device(ptr, &image).unwrap();
    let err = w
        .replay(&rec, &mut host_args(&mut x, &mut y), &CallConfig::default())
        .unwrap_err();
    assert_eq!(run_code(&err), -ORCH_INVALID_ARGS, "{err}");
    assert!(err.to_string().contains("stale"), "{err}");
    image[16] ^= 0x40;
    dev.copy_to_device(ptr, &image).unwrap();
    let report = w
        .replay(&rec, &mut host_args(&mut x, &mut y), &CallConfig::default())
        .unwrap();
    assert!(report.graph.unwrap().replayed, "the restored image replays");
    check_bytes(&y, 1.0);
    // The worker stays usable.
    let out = w
        .submit_with(id, args(2.0, 0), &hbg())
        .unwrap()
        .result()
        .unwrap();
    check_output(out, 2.0);
}

/// `scalars[0]` tasks each write one element of `y`, then one task reads all of `y`.
unsafe extern "C-unwind" fn fan_in_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args and its own table.
    unsafe {
        let a = &*args;
        let producers = a.scalars[0] as usize;
        for i in 0..producers {
            let mut d = task(0, LANE_AIV0);
            push(&mut d, view(&a.tensors[0], i, 1), TensorArgType::Input);
            push(
                &mut d,
                view(&a.tensors[1], i, 1),
                TensorArgType::OutputExisting,
            );
            let rc = submit(ops, &d);
            if rc != 0 {
                return rc;
            }
        }
        let mut d = task(0, LANE_AIV0);
        push(
            &mut d,
            view(&a.tensors[1], 0, producers),
            TensorArgType::Input,
        );
        push(
            &mut d,
            view(&a.tensors[0], 0, producers),
            TensorArgType::OutputExisting,
        );
        submit(ops, &d)
    }
}

/// Submits one task writing `y`, then reads `y` back with get_tensor_data.
unsafe extern "C-unwind" fn tensor_data_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args and its own table.
    unsafe {
        let a = &*args;
        let mut d = task(0, LANE_AIV0);
        push(&mut d, a.tensors[0], TensorArgType::Input);
        push(&mut d, a.tensors[1], TensorArgType::OutputExisting);
        let rc = submit(ops, &d);
        if rc != 0 {
            return rc;
        }
        let mut out = vec![0f32; N];
        ((*ops).get_tensor_data)(
            (*ops).runtime,
            &a.tensors[1],
            out.as_mut_ptr().cast(),
            (N * 4) as u64,
        )
    }
}

fn register_orch(w: &ChipWorker, name: &str, orch: OrchEntry) -> CallableId {
    w.register(&CallableSpec {
        orchestration: CodeImage::Orchestration(orch),
        ..spec(name)
    })
    .unwrap()
}

#[test]
fn a_graph_that_does_not_fit_fails_at_once_naming_the_limit() {
    let (_dev, w, _) = worker();
    let fan_in = register_orch(&w, "fan_in", fan_in_orch);
    // 128 producers fit the fanin cap; 129 do not.
    let out = w
        .submit_with(fan_in, args(0.0, 128), &hbg())
        .unwrap()
        .result();
    assert!(out.is_ok(), "{:?}", out.err());
    let err = w
        .submit_with(fan_in, args(0.0, 129), &hbg())
        .unwrap()
        .result()
        .unwrap_err();
    assert_eq!(run_code(&err), -ORCH_DEPENDENCY_OVERFLOW, "{err}");
    assert!(err.to_string().contains("HBG_MAX_FANIN"), "{err}");
    // The same graph is fine where the device orchestrates.
    let out = w
        .submit_with(fan_in, args(0.0, 129), &CallConfig::default())
        .unwrap()
        .result();
    assert!(out.is_ok(), "{:?}", out.err());

    let small = |runtime_env| CallConfig {
        runtime_env,
        ..hbg()
    };
    let cases: [(RuntimeEnv, i32, &str); 3] = [
        (
            RuntimeEnv {
                ring_task_window: Some(RingValue::All(64)),
                ..RuntimeEnv::default()
            },
            ORCH_FLOW_CONTROL_DEADLOCK,
            "PTO2_RING_TASK_WINDOW",
        ),
        (
            RuntimeEnv {
                ring_dep_pool: Some(RingValue::All(64)),
                ..RuntimeEnv::default()
            },
            ORCH_DEPENDENCY_OVERFLOW,
            "PTO2_RING_DEP_POOL",
        ),
        (
            RuntimeEnv {
                ready_queue: Some(32),
                ..RuntimeEnv::default()
            },
            SCHED_READY_QUEUE_OVERFLOW,
            "PTO2_READY_QUEUE",
        ),
    ];
    for (env, code, variable) in cases {
        let err = w
            .submit_with(fan_in, args(0.0, 100), &small(env))
            .unwrap()
            .result()
            .unwrap_err();
        assert_eq!(run_code(&err), -code, "{err}");
        assert!(err.to_string().contains(variable), "{err}");
    }
}

#[test]
fn tensor_data_that_would_wait_for_a_task_is_refused_naming_it() {
    let (_dev, w, _) = worker();
    let id = register_orch(&w, "tensor_data", tensor_data_orch);
    let err = w
        .submit_with(id, args(0.0, 0), &hbg())
        .unwrap()
        .result()
        .unwrap_err();
    assert_eq!(run_code(&err), -ORCH_INVALID_ARGS, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("submit #1") && text.contains("has not run"),
        "{text}"
    );
    // Under the device orchestration the same call waits for the task and succeeds.
    let out = w
        .submit_with(id, args(0.0, 0), &CallConfig::default())
        .unwrap()
        .result();
    assert!(out.is_ok(), "{:?}", out.err());
}

#[test]
fn a_recording_replays_only_on_the_worker_that_made_it() {
    let (_dev_a, a, id_a) = worker();
    let (_dev_b, b, id_b) = worker();
    assert_eq!(id_a, id_b, "both workers give the callable the same id");
    let rec = record(&a, id_a);
    match b.submit_replay(&rec, args(1.0, 0), &CallConfig::default()) {
        Err(HostError::StaleRecording { reason, .. }) => {
            assert!(reason.contains("another worker"), "{reason}")
        }
        other => panic!("expected a stale recording, got {:?}", other.err()),
    }
}

static RELEASE_BUILD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Does not return until the test releases it (an orchestration stuck in its own code).
unsafe extern "C-unwind" fn stuck_orch(_ops: *const OrchOps, _args: *const OrchArgs) -> i32 {
    while !RELEASE_BUILD.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    0
}

#[test]
fn an_orchestration_that_does_not_return_times_out_the_run() {
    let dev = small_device();
    let w = ChipWorker::with_device(
        WorkerConfig {
            run_timeout: std::time::Duration::from_millis(300),
            ..config()
        },
        dev as Arc<dyn Device>,
    )
    .unwrap();
    let id = register_orch(&w, "stuck", stuck_orch);
    let err = w
        .submit_with(id, args(0.0, 0), &hbg())
        .unwrap()
        .result()
        .unwrap_err();
    assert!(matches!(err, HostError::Timeout(_)), "{err}");
    // The build may still write the run's staging: the worker refuses new runs.
    assert!(w.unusable_reason().is_some());
    RELEASE_BUILD.store(true, std::sync::atomic::Ordering::Release);
}
