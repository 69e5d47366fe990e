//! The run's two clocks and what a run that cannot end leaves behind: a kernel that does not
//! return within the op-execute timeout ends its run with OP_EXECUTE_TIMEOUT, named, within
//! that timeout plus a small margin; the worker refuses new runs until a forced reset
//! confirms the device quiet; `close()` and drop answer promptly whatever device threads are
//! still stuck. An orchestration that never returns, and a `get_tensor_data` waiting on a
//! hung producer, end as errors too.
//!
//! Timeouts are a second or less so the file stays fast; margins are generous for a loaded
//! two-core machine.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{data, host_f32, push, submit, task, tensor};
use simpler_abi::*;
use simpler_device::Topology;
use simpler_host::*;

const MS: fn(u64) -> Duration = Duration::from_millis;
/// The op-execute timeout of these tests.
const OP_EXECUTE: Duration = Duration::from_millis(1000);
/// How long after a clock fires the host may take to report it: the runtime looks every
/// 20 ms, the host gives a published failure 1 s to be followed by the run's boundaries,
/// and the machine may be busy.
const MARGIN: Duration = Duration::from_millis(3000);

/// Released by `a_hung_kernel_ends_as_a_named_error_and_the_worker_recovers_only_by_reset`.
static RELEASE_HELD: AtomicBool = AtomicBool::new(false);
/// Released at the end of `get_tensor_data_on_a_hung_producer_ends_as_an_error`.
static RELEASE_PRODUCER: AtomicBool = AtomicBool::new(false);

/// Writes 3.0 into its tensor once `RELEASE_HELD` is set (waiting without touching any
/// register: to the device, user code that does not return).
unsafe extern "C-unwind" fn held_kernel(args: *mut i64) {
    while !RELEASE_HELD.load(Ordering::Acquire) {
        std::thread::sleep(MS(1));
    }
    for v in data(tensor(args, 0)) {
        *v = 3.0;
    }
}

/// As `held_kernel`, on `RELEASE_PRODUCER`.
unsafe extern "C-unwind" fn held_producer(args: *mut i64) {
    while !RELEASE_PRODUCER.load(Ordering::Acquire) {
        std::thread::sleep(MS(1));
    }
    for v in data(tensor(args, 0)) {
        *v = 3.0;
    }
}

/// Never returns.
unsafe extern "C-unwind" fn endless_kernel(_args: *mut i64) {
    loop {
        std::thread::sleep(MS(5));
    }
}

/// Writes 1.0 into its tensor.
unsafe extern "C-unwind" fn ones_kernel(args: *mut i64) {
    for v in data(tensor(args, 0)) {
        *v = 1.0;
    }
}

/// One task of func `scalars[0]` writing tensor 0.
unsafe extern "C-unwind" fn one_task_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid tables and arguments.
    let (ops, a) = unsafe { (&*ops, &*args) };
    let mut d = task(a.scalars[0] as i32, LANE_AIV0);
    push(&mut d, a.tensors[0], TensorArgType::Inout);
    // SAFETY: the runtime's table.
    unsafe { submit(ops, &d) }
}

/// One task of func `scalars[0]` writing tensor 0, then get_tensor_data of tensor 0.
unsafe extern "C-unwind" fn task_then_get_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid tables and arguments.
    let (ops, a) = unsafe { (&*ops, &*args) };
    let mut d = task(a.scalars[0] as i32, LANE_AIV0);
    push(&mut d, a.tensors[0], TensorArgType::Inout);
    // SAFETY: the runtime's table and a host buffer of the view's size.
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

/// Never returns and never submits.
unsafe extern "C-unwind" fn looping_orch(_ops: *const OrchOps, _args: *const OrchArgs) -> i32 {
    loop {
        std::thread::sleep(MS(5));
    }
}

fn callable(name: &str, orch: OrchEntry) -> CallableSpec {
    let kernel = |func_id, f: KernelEntry| KernelSpec {
        func_id,
        core_type: CoreType::Aiv,
        image: CodeImage::Kernel(f),
        name: None,
    };
    CallableSpec {
        name: name.into(),
        signature: Signature::new(vec![
            ArgSpec {
                name: "x".into(),
                direction: ArgDirection::InOut,
                dtype: DataType::Float32,
                shape: None,
            },
            ArgSpec {
                name: "func".into(),
                direction: ArgDirection::Scalar,
                dtype: DataType::Uint64,
                shape: None,
            },
        ])
        .unwrap(),
        orchestration: CodeImage::Orchestration(orch),
        kernels: vec![
            kernel(0, ones_kernel),
            kernel(5, held_producer),
            kernel(6, endless_kernel),
            kernel(7, held_kernel),
        ],
        runtime: None,
    }
}

/// A one-cluster worker with a short scheduler timeout and the tests' op-execute timeout;
/// the run timeout is far beyond both, so only the runtime's clocks can end a run.
fn worker(scheduler: Duration) -> ChipWorker {
    ChipWorker::new(WorkerConfig {
        topology: Topology {
            clusters: 1,
            aicpu_threads: 2,
        },
        heap_size: 1 << 16,
        scheduler_timeout: scheduler,
        op_execute_timeout: OP_EXECUTE,
        run_timeout: Duration::from_secs(30),
        ..WorkerConfig::default()
    })
    .unwrap()
}

/// Runs func `func` of `id` on a 16-element x; the result and how long the run took.
fn run(w: &ChipWorker, id: CallableId, func: u64) -> (Result<Vec<f32>, HostError>, Duration) {
    let mut x = vec![0.0f32; 16];
    let t = Instant::now();
    let r = w.run(id, &mut [host_f32(&mut x), HostArg::Scalar(func)]);
    (r.map(|_| x), t.elapsed())
}

/// The code name and message of a failed run.
fn failure(r: Result<Vec<f32>, HostError>) -> (i32, String) {
    match r {
        Err(HostError::RunFailed { code, message, .. }) => (code, message),
        other => panic!("expected a failed run, got {other:?}"),
    }
}

#[test]
fn a_hung_kernel_ends_as_a_named_error_and_the_worker_recovers_only_by_reset() {
    let w = worker(MS(300));
    let id = w.register(&callable("held", one_task_orch)).unwrap();
    let (r, took) = run(&w, id, 7);
    let (code, message) = failure(r);
    assert_eq!(code, -SCHED_OP_EXECUTE_TIMEOUT, "{message}");
    for want in [
        "op-execute clock fired (1000 ms)",
        "run ",
        "submit #1",
        "func 7 aiv",
        "block 0/1",
        "on core ",
        "abandoned",
    ] {
        assert!(message.contains(want), "{want:?} missing: {message}");
    }
    assert!(
        took >= OP_EXECUTE && took < OP_EXECUTE + MARGIN,
        "reported after {took:?}"
    );
    // The kernel still runs on its core: nothing new is admitted.
    let why = w.unusable_reason().expect("the worker refuses new runs");
    assert!(why.contains("OP_EXECUTE_TIMEOUT"), "{why}");
    let refused = run(&w, id, 0).0;
    assert!(
        matches!(refused, Err(HostError::DeviceUnusable(_))),
        "{refused:?}"
    );
    // A forced reset cannot be confirmed while the kernel runs, and says so promptly.
    let t = Instant::now();
    let reset = w.recover_device();
    assert!(reset.is_err(), "{reset:?}");
    assert!(
        t.elapsed() < MARGIN,
        "the refused reset took {:?}",
        t.elapsed()
    );
    assert!(w.unusable_reason().is_some());
    // Once the kernel returns, a forced reset restores admission.
    RELEASE_HELD.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Err(e) = w.recover_device() {
        assert!(
            Instant::now() < deadline,
            "the reset was never confirmed: {e}"
        );
        std::thread::sleep(MS(50));
    }
    assert_eq!(w.unusable_reason(), None);
    let (r, _) = run(&w, id, 0);
    assert!(r.unwrap().iter().all(|&v| v == 1.0));
    w.close().unwrap();
}

#[test]
fn a_kernel_that_never_returns_leaves_close_and_drop_prompt() {
    let w = worker(MS(300));
    let id = w.register(&callable("endless", one_task_orch)).unwrap();
    let (r, took) = run(&w, id, 6);
    let (code, message) = failure(r);
    assert_eq!(code, -SCHED_OP_EXECUTE_TIMEOUT, "{message}");
    assert!(message.contains("func 6 aiv"), "{message}");
    assert!(took < OP_EXECUTE + MARGIN, "reported after {took:?}");
    let t = Instant::now();
    let closed = w.close();
    assert!(
        matches!(&closed, Err(HostError::CleanupIncomplete(why)) if why.contains("reset")),
        "memory the kernel may touch is kept: {closed:?}"
    );
    assert_eq!(w.state().unwrap(), WorkerState::Closed { debt: true });
    drop(w);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "close and drop took {:?}",
        t.elapsed()
    );
}

#[test]
fn an_orchestration_that_never_returns_ends_as_an_error() {
    let scheduler = MS(300);
    let w = worker(scheduler);
    let id = w.register(&callable("looping", looping_orch)).unwrap();
    let (r, took) = run(&w, id, 0);
    let (code, message) = failure(r);
    assert_eq!(code, -SCHED_TIMEOUT, "{message}");
    assert!(message.contains("ORCH_STARVATION"), "{message}");
    // The watchdog fires after one scheduler timeout; the schedulers give the orchestrator
    // one more before they leave without it.
    assert!(took < scheduler * 2 + MARGIN, "reported after {took:?}");
    assert!(w.unusable_reason().is_some());
    drop(w);
}

#[test]
fn get_tensor_data_on_a_hung_producer_ends_as_an_error() {
    let w = worker(MS(300));
    let id = w.register(&callable("get", task_then_get_orch)).unwrap();
    let (r, took) = run(&w, id, 5);
    let (code, message) = failure(r);
    assert_eq!(code, -SCHED_OP_EXECUTE_TIMEOUT, "{message}");
    assert!(message.contains("func 5 aiv"), "{message}");
    assert!(took < OP_EXECUTE + MARGIN, "reported after {took:?}");
    RELEASE_PRODUCER.store(true, Ordering::Release);
    drop(w);
}
