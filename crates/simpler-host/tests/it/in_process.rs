//! Runs task graphs whose kernels and orchestration are in-process Rust functions: tiled
//! vector add (independent tasks), a chain through an INOUT accumulator (RAW/WAW), a graph
//! whose correctness needs WAR ordering, and run-level failures that must leave the worker
//! usable and the host buffers untouched — a kernel or orchestration that panics among them
//! (the entries are "C-unwind": the panic fails the run, naming its text).

use crate::common::*;
use simpler_abi::*;
use simpler_host::*;

const N: usize = 1 << 16;
const TILE: usize = 1024;

/// c = a + b
unsafe extern "C-unwind" fn add_kernel(args: *mut i64) {
    let (a, b, c) = (tensor(args, 0), tensor(args, 1), tensor(args, 2));
    let (a, b, c) = (data(a), data(b), data(c));
    for i in 0..c.len() {
        c[i] = a[i] + b[i];
    }
}

/// acc += x (acc is INOUT)
unsafe extern "C-unwind" fn accumulate_kernel(args: *mut i64) {
    let (x, acc) = (data(tensor(args, 0)), data(tensor(args, 1)));
    for i in 0..acc.len() {
        acc[i] += x[i];
    }
}

/// out = in * 2
unsafe extern "C-unwind" fn double_kernel(args: *mut i64) {
    let (x, y) = (data(tensor(args, 0)), data(tensor(args, 1)));
    for i in 0..y.len() {
        y[i] = x[i] * 2.0;
    }
}

/// vector add tiled into N / TILE independent AIV tasks.
unsafe extern "C-unwind" fn vadd_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes its table and valid args.
    unsafe { vadd_tiles(ops, args, false) }
}

/// [`vadd_orch`] with one runtime-allocated scratch output per task (unused by the kernel),
/// so that the outer scope pins every task in its ring slot.
unsafe extern "C-unwind" fn vadd_scratch_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes its table and valid args.
    unsafe { vadd_tiles(ops, args, true) }
}

/// # Safety
/// `ops` and `args` are what the runtime passed the orchestration entry.
unsafe fn vadd_tiles(ops: *const OrchOps, args: *const OrchArgs, scratch: bool) -> i32 {
    // SAFETY: the runtime passes valid args.
    let a = unsafe { &*args };
    for t in 0..N / TILE {
        let mut d = task(0, LANE_AIV0);
        push(
            &mut d,
            view(&a.tensors[0], t * TILE, TILE),
            TensorArgType::Input,
        );
        push(
            &mut d,
            view(&a.tensors[1], t * TILE, TILE),
            TensorArgType::Input,
        );
        push(
            &mut d,
            view(&a.tensors[2], t * TILE, TILE),
            TensorArgType::OutputExisting,
        );
        // SAFETY: TaskOutputs is plain data.
        let mut outs: TaskOutputs = unsafe { std::mem::zeroed() };
        if scratch {
            push(
                &mut d,
                ChipTensor::contiguous(0, &[1], DataType::Float32),
                TensorArgType::Output,
            );
        }
        // SAFETY: `ops` is the runtime's table; `outs` receives the scratch output.
        let rc = unsafe { ((*ops).submit_task)((*ops).runtime, &*d, &mut outs) };
        if rc != 0 {
            return rc;
        }
    }
    0
}

/// out = x + x + ... (8 times) through a zeroed accumulator: RAW/WAW chain on `out`;
/// then y = 2*out on AIC (RAW across core types).
unsafe extern "C-unwind" fn chain_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args.
    let a = unsafe { &*args };
    for _ in 0..8 {
        let mut d = task(1, LANE_AIV0);
        push(&mut d, a.tensors[0], TensorArgType::Input);
        push(&mut d, a.tensors[1], TensorArgType::Inout);
        // SAFETY: `ops` is the runtime's table.
        if unsafe { submit(ops, &d) } != 0 {
            return 1;
        }
    }
    let mut d = task(2, LANE_AIC);
    push(&mut d, a.tensors[1], TensorArgType::Input);
    push(&mut d, a.tensors[2], TensorArgType::OutputExisting);
    // SAFETY: `ops` is the runtime's table.
    unsafe { submit(ops, &d) }
}

/// WAR: y = 2*x reads x, then x is overwritten (x = x + x via a runtime output would not
/// test it) — here task 2 writes x = a + b while task 1 may still read it. Correct y needs
/// task 2 to wait for task 1.
unsafe extern "C-unwind" fn war_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args.
    let a = unsafe { &*args };
    let (x, y, p, q) = (a.tensors[0], a.tensors[1], a.tensors[2], a.tensors[3]);
    let mut d = task(2, LANE_AIC);
    push(&mut d, x, TensorArgType::Input);
    push(&mut d, y, TensorArgType::OutputExisting);
    // SAFETY: `ops` is the runtime's table.
    if unsafe { submit(ops, &d) } != 0 {
        return 1;
    }
    let mut d = task(0, LANE_AIV0);
    push(&mut d, p, TensorArgType::Input);
    push(&mut d, q, TensorArgType::Input);
    push(&mut d, x, TensorArgType::OutputExisting);
    // SAFETY: `ops` is the runtime's table.
    unsafe { submit(ops, &d) }
}

unsafe extern "C-unwind" fn failing_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args.
    let a = unsafe { &*args };
    let mut d = task(3, LANE_AIV0);
    push(&mut d, a.tensors[0], TensorArgType::Inout);
    // SAFETY: `ops` is the runtime's table.
    unsafe { submit(ops, &d) }
}

/// A kernel that panics (after writing, so a failed run is seen not to copy back).
unsafe extern "C-unwind" fn panicking_kernel(args: *mut i64) {
    data(tensor(args, 0))[0] = -1.0;
    panic!("kernel boom {}", 42);
}

unsafe extern "C-unwind" fn panicking_task_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args.
    let a = unsafe { &*args };
    let mut d = task(9, LANE_AIV0);
    push(&mut d, a.tensors[0], TensorArgType::Inout);
    // SAFETY: `ops` is the runtime's table.
    unsafe { submit(ops, &d) }
}

unsafe extern "C-unwind" fn panicking_orch(_ops: *const OrchOps, _args: *const OrchArgs) -> i32 {
    panic!("orchestration boom");
}

unsafe extern "C-unwind" fn returns_error_orch(
    _ops: *const OrchOps,
    _args: *const OrchArgs,
) -> i32 {
    7
}

fn spec(name: &str, orch: OrchEntry, sig: Vec<(&str, ArgDirection)>) -> CallableSpec {
    let kernels: [(u32, CoreType, KernelEntry); 5] = [
        (0, CoreType::Aiv, add_kernel),
        (1, CoreType::Aiv, accumulate_kernel),
        (2, CoreType::Aic, double_kernel),
        (3, CoreType::Aiv, fatal_42),
        (9, CoreType::Aiv, panicking_kernel),
    ];
    CallableSpec {
        name: name.into(),
        signature: Signature::new(
            sig.into_iter()
                .map(|(n, d)| ArgSpec {
                    name: n.into(),
                    direction: d,
                    dtype: DataType::Float32,
                    shape: None,
                })
                .collect(),
        )
        .unwrap(),
        orchestration: CodeImage::Orchestration(orch),
        kernels: kernels
            .into_iter()
            .map(|(func_id, core_type, f)| KernelSpec {
                func_id,
                core_type,
                image: CodeImage::Kernel(f),
                // The failing kernel has a name: errors name it.
                name: (func_id == 3).then(|| "fatal_42".to_string()),
            })
            .collect(),
        runtime: None,
    }
}

use ArgDirection::{In, InOut, Out};

/// Registers the vector-add callable and checks a run of it: the worker is still usable.
fn assert_still_adds(w: &ChipWorker) {
    let id = w
        .register(&spec(
            "vadd",
            vadd_orch,
            vec![("a", In), ("b", In), ("c", Out)],
        ))
        .unwrap();
    let (mut a, mut b, mut c) = (vec![1.0f32; N], vec![2.0f32; N], vec![0.0f32; N]);
    w.run(
        id,
        &mut [host_f32(&mut a), host_f32(&mut b), host_f32(&mut c)],
    )
    .unwrap();
    assert!(
        c.iter().all(|&v| v == 3.0),
        "the worker is usable after run failures"
    );
}

#[test]
fn tiled_vector_add_matches_reference() {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let id = w
        .register(&spec(
            "vadd",
            vadd_orch,
            vec![("a", In), ("b", In), ("c", Out)],
        ))
        .unwrap();
    let mut a: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let mut b: Vec<f32> = (0..N).map(|i| (i % 7) as f32 * 0.5).collect();
    let mut c = vec![f32::NAN; N];
    let report = w
        .run(
            id,
            &mut [host_f32(&mut a), host_f32(&mut b), host_f32(&mut c)],
        )
        .unwrap();
    assert_eq!(
        report.tasks,
        (N / TILE) as u64,
        "the record counts the tasks"
    );
    for i in 0..N {
        assert_eq!(c[i], a[i] + b[i], "element {i}");
    }
}

#[test]
fn raw_waw_chain_and_cross_core_type_dependency() {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let id = w
        .register(&spec(
            "chain",
            chain_orch,
            vec![("x", In), ("acc", InOut), ("y", Out)],
        ))
        .unwrap();
    for round in 0..5 {
        let mut x: Vec<f32> = (0..4096).map(|i| (i % 13) as f32).collect();
        let mut acc = vec![1.0f32; 4096];
        let mut y = vec![0.0f32; 4096];
        let report = w
            .run(
                id,
                &mut [host_f32(&mut x), host_f32(&mut acc), host_f32(&mut y)],
            )
            .unwrap();
        assert_eq!(report.tasks, 9, "8 accumulations and the doubling");
        for i in 0..4096 {
            let want = 1.0 + 8.0 * x[i];
            assert_eq!(acc[i], want, "round {round} element {i}");
            assert_eq!(y[i], 2.0 * want, "round {round} element {i}");
        }
    }
}

#[test]
fn war_hazard_is_ordered() {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let id = w
        .register(&spec(
            "war",
            war_orch,
            vec![("x", InOut), ("y", Out), ("p", In), ("q", In)],
        ))
        .unwrap();
    for _ in 0..20 {
        let mut x = vec![3.0f32; 65536];
        let mut y = vec![0.0f32; 65536];
        let mut p = vec![10.0f32; 65536];
        let mut q = vec![20.0f32; 65536];
        w.run(
            id,
            &mut [
                host_f32(&mut x),
                host_f32(&mut y),
                host_f32(&mut p),
                host_f32(&mut q),
            ],
        )
        .unwrap();
        assert!(
            y.iter().all(|&v| v == 6.0),
            "the reader saw the later write"
        );
        assert!(x.iter().all(|&v| v == 30.0));
    }
}

#[test]
fn kernel_fatal_fails_the_run_and_leaves_outputs_and_worker_intact() {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let bad = w
        .register(&spec("bad", failing_orch, vec![("x", InOut)]))
        .unwrap();
    let mut x = vec![5.0f32; 16];
    let err = w.run(bad, &mut [host_f32(&mut x)]).unwrap_err();
    match &err {
        HostError::RunFailed {
            code,
            name,
            message,
        } => {
            assert_eq!(*code, -SCHED_KERNEL_FATAL);
            assert_eq!(*name, "KERNEL_FATAL");
            assert!(message.contains("fatal code 42"), "{message}");
            assert!(
                message.starts_with("kernel `fatal_42` (func 3) (task"),
                "the kernel is named: {message}"
            );
        }
        other => panic!("unexpected {other}"),
    }
    assert!(
        x.iter().all(|&v| v == 5.0),
        "a failed run must not copy back"
    );

    let rc = w
        .register(&spec("rc", returns_error_orch, vec![("x", InOut)]))
        .unwrap();
    let err = w.run(rc, &mut [host_f32(&mut x)]).unwrap_err();
    assert!(
        matches!(err, HostError::RunFailed { code, .. } if code == -ORCH_EXPLICIT_FATAL),
        "{err}"
    );
    assert!(err.to_string().contains("returned 7"), "{err}");

    assert_still_adds(&w);
}

#[test]
fn a_panicking_kernel_or_orchestration_fails_its_run_and_leaves_the_worker_usable() {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let bad = w
        .register(&spec("panics", panicking_task_orch, vec![("x", InOut)]))
        .unwrap();
    let mut x = vec![5.0f32; 16];
    let err = w.run(bad, &mut [host_f32(&mut x)]).unwrap_err();
    match &err {
        HostError::RunFailed { code, message, .. } => {
            assert_eq!(*code, -SCHED_KERNEL_FATAL, "{message}");
            assert!(message.contains("panicked: kernel boom 42"), "{message}");
            assert!(message.contains("func 9"), "the kernel is named: {message}");
        }
        other => panic!("unexpected {other}"),
    }
    assert!(
        x.iter().all(|&v| v == 5.0),
        "a failed run must not copy back"
    );
    let orch = w
        .register(&spec("orch_panics", panicking_orch, vec![("x", InOut)]))
        .unwrap();
    let err = w.run(orch, &mut [host_f32(&mut x)]).unwrap_err();
    assert!(
        matches!(&err, HostError::RunFailed { code, .. } if *code == -ORCH_EXPLICIT_FATAL),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("the orchestration panicked: orchestration boom"),
        "{err}"
    );
    assert_still_adds(&w);
}

#[test]
fn arguments_are_checked_against_the_signature() {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let mut s = spec("vadd", vadd_orch, vec![("a", In), ("b", In), ("c", Out)]);
    s.signature.args[0].shape = Some(vec![N as u64]);
    let id = w.register(&s).unwrap();
    let (mut a, mut b, mut c) = (vec![0.0f32; N], vec![0.0f32; N], vec![0.0f32; N]);
    let err = w
        .run(id, &mut [host_f32(&mut a), host_f32(&mut b)])
        .unwrap_err();
    assert!(
        matches!(
            err,
            HostError::ArgumentCount {
                expected: 3,
                got: 2,
                ..
            }
        ),
        "{err}"
    );
    let mut short = vec![0.0f32; 8];
    let err = w
        .run(
            id,
            &mut [host_f32(&mut short), host_f32(&mut b), host_f32(&mut c)],
        )
        .unwrap_err();
    assert!(
        matches!(&err, HostError::InvalidArgument { arg, .. } if arg == "a"),
        "{err}"
    );
    let err = w
        .run(
            id,
            &mut [host_f32(&mut a), HostArg::Scalar(1), host_f32(&mut c)],
        )
        .unwrap_err();
    assert!(
        matches!(&err, HostError::InvalidArgument { arg, .. } if arg == "b"),
        "{err}"
    );
    let mut wrong = HostTensor {
        bytes: f32_bytes_mut(&mut c),
        shape: vec![N as u64],
        dtype: DataType::Int32,
    };
    wrong.dtype = DataType::Int32;
    let err = w
        .run(
            id,
            &mut [host_f32(&mut a), host_f32(&mut b), HostArg::Tensor(wrong)],
        )
        .unwrap_err();
    assert!(err.to_string().contains("dtype is i32"), "{err}");
    assert!(matches!(
        w.run(CallableId(9), &mut []),
        Err(HostError::UnknownCallable(9))
    ));
}

#[test]
fn register_rejects_malformed_callables() {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let mut s = spec("dup", vadd_orch, vec![("a", In)]);
    s.kernels[1].func_id = 0;
    assert!(matches!(
        w.register(&s),
        Err(HostError::InvalidCallable { .. })
    ));
    let mut s = spec("far", vadd_orch, vec![("a", In)]);
    s.kernels[0].func_id = 5000;
    assert!(matches!(
        w.register(&s),
        Err(HostError::InvalidCallable { .. })
    ));
    let mut s = spec("kind", vadd_orch, vec![("a", In)]);
    s.orchestration = CodeImage::Kernel(add_kernel);
    assert!(matches!(w.register(&s), Err(HostError::Load(_))));
    let mut s = spec("junk", vadd_orch, vec![("a", In)]);
    s.orchestration = CodeImage::Library {
        bytes: b"not an elf".to_vec(),
        entry: "x".into(),
    };
    let err = w.register(&s).unwrap_err();
    assert!(err.to_string().contains("orchestration"), "{err}");
}

#[test]
fn runtime_env_sizes_the_rings_of_one_run() {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let sig = || vec![("a", In), ("b", In), ("c", Out)];
    let id = w.register(&spec("vadd", vadd_orch, sig())).unwrap();
    let pinned = w
        .register(&spec("vadd_scratch", vadd_scratch_orch, sig()))
        .unwrap();
    let (mut a, mut b, mut c) = (vec![1.0f32; N], vec![2.0f32; N], vec![0.0f32; N]);
    let window = |w: u64| CallConfig {
        runtime_env: RuntimeEnv {
            ring_task_window: Some(RingValue::All(w)),
            ..RuntimeEnv::default()
        },
        ..CallConfig::default()
    };
    // 64 tasks with scratch outputs, all pinned by the outer scope: a 64-slot ring holds at
    // most 63.
    let err = w
        .run_with(
            pinned,
            &mut [host_f32(&mut a), host_f32(&mut b), host_f32(&mut c)],
            &window(64),
        )
        .unwrap_err();
    assert!(
        matches!(&err, HostError::RunFailed { code, message, .. }
            if *code == -ORCH_SCOPE_DEADLOCK && message.contains("PTO2_RING_TASK_WINDOW (64)")),
        "{err}"
    );
    assert!(c.iter().all(|&v| v == 0.0));
    w.run_with(
        pinned,
        &mut [host_f32(&mut a), host_f32(&mut b), host_f32(&mut c)],
        &window(128),
    )
    .unwrap();
    assert!(c.iter().all(|&v| v == 3.0));
    // Without scratch outputs nothing pins the tasks: 4 slots are enough for 64 of them.
    c.fill(0.0);
    w.run_with(
        id,
        &mut [host_f32(&mut a), host_f32(&mut b), host_f32(&mut c)],
        &window(4),
    )
    .unwrap();
    assert!(c.iter().all(|&v| v == 3.0));
    let err = w
        .run_with(
            id,
            &mut [host_f32(&mut a), host_f32(&mut b), host_f32(&mut c)],
            &window(100),
        )
        .unwrap_err();
    assert!(
        matches!(&err, HostError::InvalidConfig(m) if m.contains("ring_task_window[0]")),
        "{err}"
    );
    let huge = CallConfig {
        runtime_env: RuntimeEnv {
            ring_heap: Some(RingValue::All(1 << 40)),
            ..RuntimeEnv::default()
        },
        ..CallConfig::default()
    };
    let err = w
        .run_with(
            id,
            &mut [host_f32(&mut a), host_f32(&mut b), host_f32(&mut c)],
            &huge,
        )
        .unwrap_err();
    assert!(err.to_string().contains("worker's heap"), "{err}");
}

/// Sleeps 600 ms, then writes 2.0 into its tensor: it reads its arguments long after a
/// short scheduler timeout.
unsafe extern "C-unwind" fn sleepy_kernel(args: *mut i64) {
    std::thread::sleep(std::time::Duration::from_millis(600));
    for v in data(tensor(args, 0)) {
        *v = 2.0;
    }
}

/// Sleeps 600 ms before submitting anything.
unsafe extern "C-unwind" fn sleepy_orch(_ops: *const OrchOps, _args: *const OrchArgs) -> i32 {
    std::thread::sleep(std::time::Duration::from_millis(600));
    0
}

/// Submits one sleepy kernel writing x, then reads x back with get_tensor_data.
unsafe extern "C-unwind" fn sleepy_then_get_orch(
    ops: *const OrchOps,
    args: *const OrchArgs,
) -> i32 {
    // SAFETY: the runtime passes valid tables and arguments.
    let (ops, a) = unsafe { (&*ops, &*args) };
    let mut d = task(4, LANE_AIV0);
    push(&mut d, a.tensors[0], TensorArgType::OutputExisting);
    // SAFETY: calls through the runtime's table.
    unsafe {
        let rc = submit(ops, &d);
        if rc != 0 {
            return rc;
        }
        let mut out = vec![0u8; a.tensors[0].buffer_size as usize];
        (ops.get_tensor_data)(
            ops.runtime,
            &a.tensors[0],
            out.as_mut_ptr().cast(),
            out.len() as u64,
        )
    }
}

fn sleepy_spec(name: &str, orch: OrchEntry) -> CallableSpec {
    let mut s = spec(name, orch, vec![("x", InOut)]);
    s.kernels.push(KernelSpec {
        func_id: 4,
        core_type: CoreType::Aiv,
        image: CodeImage::Kernel(sleepy_kernel),
        name: None,
    });
    s
}

/// The no-progress clock runs only while nothing runs: an orchestrator that submits nothing
/// for longer than the scheduler timeout is a stall (named, with the run and the clock), but
/// a kernel running longer than the scheduler timeout is not — the op-execute clock bounds
/// it — and the run completes.
#[test]
fn the_watchdog_names_the_stall_and_a_long_kernel_is_no_stall() {
    let ms = std::time::Duration::from_millis;
    let w = ChipWorker::new(WorkerConfig {
        scheduler_timeout: ms(150),
        op_execute_timeout: ms(5000),
        ..WorkerConfig::default()
    })
    .unwrap();
    let id = w.register(&sleepy_spec("starved", sleepy_orch)).unwrap();
    let mut x = vec![1.0f32; 16];
    let err = w.run(id, &mut [host_f32(&mut x)]).unwrap_err();
    match &err {
        HostError::RunFailed { code, message, .. } => {
            assert_eq!(*code, -SCHED_TIMEOUT, "{err}");
            for want in [
                "ORCH_STARVATION",
                "no-progress clock fired (150 ms)",
                "run ",
            ] {
                assert!(message.contains(want), "{want}: {message}");
            }
        }
        other => panic!("{other}"),
    }
    // A 600 ms kernel under a 150 ms scheduler timeout (and a 5 s op-execute timeout).
    let id = w
        .register(&sleepy_spec("long kernel", sleepy_then_get_orch))
        .unwrap();
    w.run(id, &mut [host_f32(&mut x)]).unwrap();
    assert!(
        x.iter().all(|&v| v == 2.0),
        "the long kernel's output: {x:?}"
    );
    assert_still_adds(&w);
}

#[test]
fn get_tensor_data_times_out_with_tensor_wait_timeout() {
    let ms = std::time::Duration::from_millis;
    let w = ChipWorker::new(WorkerConfig {
        tensor_data_timeout: ms(100),
        ..WorkerConfig::default()
    })
    .unwrap();
    let id = w
        .register(&sleepy_spec("get", sleepy_then_get_orch))
        .unwrap();
    let mut x = vec![1.0f32; 16];
    let err = w.run(id, &mut [host_f32(&mut x)]).unwrap_err();
    assert!(
        matches!(&err, HostError::RunFailed { code, message, .. } if *code == -ORCH_TENSOR_WAIT_TIMEOUT && message.contains("100 ms")),
        "{err}"
    );
    // With the default 15 s it waits for the producer and succeeds.
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let id = w
        .register(&sleepy_spec("get", sleepy_then_get_orch))
        .unwrap();
    w.run(id, &mut [host_f32(&mut x)]).unwrap();
}

/// Records the tensor and scalar counts it was dispatched with into x[0], x[1].
unsafe extern "C-unwind" fn count_kernel(args: *mut i64) {
    let x = data(tensor(args, 0));
    // SAFETY: slots 50 and 51 hold the counts.
    unsafe {
        x[0] = *args.add(TENSOR_COUNT_SLOT) as f32;
        x[1] = *args.add(SCALAR_COUNT_SLOT) as f32;
    }
}

unsafe extern "C-unwind" fn count_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid tables and arguments.
    let (ops, a) = unsafe { (&*ops, &*args) };
    let mut d = task(5, LANE_AIV0);
    push(&mut d, a.tensors[0], TensorArgType::Inout);
    d.scalars[..3].copy_from_slice(&[7, 8, 9]);
    d.scalar_count = 3;
    // SAFETY: the runtime's table.
    unsafe { submit(ops, &d) }
}

/// Submits a task with an OUTPUT argument but no TaskOutputs.
unsafe extern "C-unwind" fn null_outputs_orch(ops: *const OrchOps, _args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes a valid table.
    let ops = unsafe { &*ops };
    let mut d = task(0, LANE_AIV0);
    let mut out = ChipTensor::ZERO;
    out.ndims = 1;
    out.shapes[0] = 16;
    push(&mut d, out, TensorArgType::Output);
    // SAFETY: the runtime's table.
    unsafe { submit(ops, &d) }
}

#[test]
fn kernels_see_their_argument_counts_and_errors_name_the_submit() {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let mut s = spec("count", count_orch, vec![("x", InOut)]);
    s.kernels.push(KernelSpec {
        func_id: 5,
        core_type: CoreType::Aiv,
        image: CodeImage::Kernel(count_kernel),
        name: None,
    });
    let id = w.register(&s).unwrap();
    let mut x = vec![0.0f32; 4];
    w.run(id, &mut [host_f32(&mut x)]).unwrap();
    assert_eq!(&x[..2], &[1.0, 3.0]);

    let id = w
        .register(&spec("nullout", null_outputs_orch, vec![("x", InOut)]))
        .unwrap();
    let err = w.run(id, &mut [host_f32(&mut x)]).unwrap_err().to_string();
    assert!(
        err.contains("submit #1 (aiv0 func 0)") && err.contains("outputs is NULL"),
        "{err}"
    );
}

/// Abuses the API in ways that must fail cleanly: an output whose size overflows, an
/// explicit dependency on a task never issued, a tensor-data view whose element count
/// overflows. `scalars[0]` selects the case.
unsafe extern "C-unwind" fn abuse_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid tables and arguments.
    let (ops, a) = unsafe { (&*ops, &*args) };
    let mut d = task(0, LANE_AIV0);
    // SAFETY: TaskOutputs is plain data; all-zero is a valid value.
    let mut outs: Box<TaskOutputs> = Box::new(unsafe { std::mem::zeroed() });
    match a.scalars[0] {
        0 => {
            d.kernel_ids = [NO_KERNEL; 3];
            let mut big = ChipTensor::ZERO;
            big.ndims = 1;
            big.dtype = DataType::Uint8 as u32;
            big.shapes[0] = u64::MAX;
            push(&mut d, big, TensorArgType::Output);
            // SAFETY: the runtime's table.
            unsafe { (ops.submit_task)(ops.runtime, &*d, &mut *outs) }
        }
        1 => {
            push(&mut d, a.tensors[0], TensorArgType::Inout);
            d.deps[0] = 0xffff_ffff;
            d.dep_count = 1;
            // SAFETY: the runtime's table.
            unsafe { submit(ops, &d) }
        }
        _ => {
            let mut v = a.tensors[0];
            v.ndims = 2;
            v.shapes[0] = 1 << 63;
            v.shapes[1] = 2;
            v.strides = [0; 5];
            let mut sink = [0u8; 4];
            // SAFETY: the runtime's table; the buffer is 4 bytes as passed.
            unsafe { (ops.get_tensor_data)(ops.runtime, &v, sink.as_mut_ptr().cast(), 0) }
        }
    }
}

#[test]
fn overflowing_sizes_and_ids_are_invalid_args_not_crashes() {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let mut s = spec("abuse", abuse_orch, vec![("x", InOut)]);
    s.signature.args.push(ArgSpec {
        name: "case".into(),
        direction: ArgDirection::Scalar,
        dtype: DataType::Uint64,
        shape: None,
    });
    let id = w.register(&s).unwrap();
    for (case, want) in [
        (0u64, "too large"),
        (1, "not submitted before"),
        (2, "more than 2^64"),
    ] {
        let mut x = vec![1.0f32; 16];
        let err = w
            .run(id, &mut [host_f32(&mut x), HostArg::Scalar(case)])
            .unwrap_err();
        assert!(
            matches!(&err, HostError::RunFailed { code, message, .. } if *code == -ORCH_INVALID_ARGS && message.contains(want)),
            "case {case}: {err}"
        );
    }
}

#[test]
fn a_reset_while_the_orchestrator_waits_in_an_op_does_not_abort() {
    let ms = std::time::Duration::from_millis;
    let w = ChipWorker::new(WorkerConfig {
        run_timeout: ms(200),
        ..WorkerConfig::default()
    })
    .unwrap();
    let id = w
        .register(&sleepy_spec("get", sleepy_then_get_orch))
        .unwrap();
    let mut x = vec![1.0f32; 16];
    let err = w.run(id, &mut [host_f32(&mut x)]).unwrap_err();
    assert!(matches!(err, HostError::Timeout(_)), "{err}");
    // Dropping the worker resets the device while the orchestrator is parked inside
    // get_tensor_data; the unwind must stop before the orchestration's C frames.
    drop(w);
}

/// Never returns and never touches a register: only leaving it behind ends the drop.
unsafe extern "C-unwind" fn endless_kernel(_args: *mut i64) {
    loop {
        std::hint::spin_loop();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

unsafe extern "C-unwind" fn endless_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid tables and arguments.
    let (ops, a) = unsafe { (&*ops, &*args) };
    let mut d = task(6, LANE_AIV0);
    push(&mut d, a.tensors[0], TensorArgType::Inout);
    // SAFETY: the runtime's table.
    unsafe { submit(ops, &d) }
}

#[test]
fn dropping_a_worker_with_a_kernel_that_never_returns_does_not_hang() {
    let ms = std::time::Duration::from_millis;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let w = ChipWorker::new(WorkerConfig {
            run_timeout: ms(200),
            ..WorkerConfig::default()
        })
        .unwrap();
        let mut s = spec("endless", endless_orch, vec![("x", InOut)]);
        s.kernels.push(KernelSpec {
            func_id: 6,
            core_type: CoreType::Aiv,
            image: CodeImage::Kernel(endless_kernel),
            name: None,
        });
        let id = w.register(&s).unwrap();
        let mut x = vec![0.0f32; 4];
        let err = w.run(id, &mut [host_f32(&mut x)]).unwrap_err();
        assert!(matches!(err, HostError::Timeout(_)), "{err}");
        drop(w);
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("dropping the worker hung on a kernel that never returns");
}
