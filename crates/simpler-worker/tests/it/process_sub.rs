//! A sub worker process without Python: this test binary re-executed as the child, running
//! a `SubChild` loop, and driven through its endpoint (`spawn_sub`, then `Endpoint` calls):
//! register (a payload bigger than a mailbox message included), runs over shared memory
//! with scalars, the child's error text as `SubFailed`, regions mapped once, refusals of
//! what cannot cross, and shutdown (`docs/l3-worker.md` §7).

use std::collections::HashMap;
use std::sync::Arc;

use crate::process_common::*;
use simpler_abi::DataType;
use simpler_host::CallConfig;
use simpler_test_support::test_name;
use simpler_worker::memory::SharedRegion;
use simpler_worker::process::{spawn_sub, ChildProgram, SubChild, SubRequest, WireArg};
use simpler_worker::{
    Callable, ChildAllocation, EndpointError, EndpointKind, Memory, Tag, TaskArg, Tensor,
    WorkerError,
};

const FAILURE: &str =
    "Traceback (most recent call last):\n  File \"job.py\", line 3, in job\nValueError: boom";

/// The sub worker program: `scale` (payload byte 0 = factor) computes
/// `out = in * factor + scalar` over f32; `regions` writes how many regions the child maps
/// into out[0]; `fail` fails with [`FAILURE`].
#[test]
#[ignore = "the child program of the other tests"]
fn sub_child_program() {
    if std::env::var("SIMPLER_CHILD_ROLE").as_deref() != Ok("sub") {
        return;
    }
    let mut child = SubChild::connect().unwrap();
    let mut callables: HashMap<u32, (String, Vec<u8>)> = HashMap::new();
    loop {
        match child.next().unwrap() {
            SubRequest::Register { key, name, payload } => {
                callables.insert(key, (name, payload));
                child.reply(Ok(())).unwrap();
            }
            SubRequest::Unregister { key } => {
                callables.remove(&key);
                child.reply(Ok(())).unwrap();
            }
            SubRequest::Run { key, args } => {
                let outcome = match callables.get(&key) {
                    None => Err(format!("no callable under key {key}")),
                    Some((name, payload)) => run(&mut child, name, payload, &args),
                };
                child.reply(outcome).unwrap();
            }
            SubRequest::Shutdown => break,
        }
    }
}

fn run(child: &mut SubChild, name: &str, payload: &[u8], args: &[WireArg]) -> Result<(), String> {
    let (WireArg::Tensor(input), WireArg::Tensor(output)) = (&args[0], &args[1]) else {
        return Err("expected two tensors".into());
    };
    let (src, src_len) = child.tensor_memory(input).map_err(|e| e.to_string())?;
    let (dst, dst_len) = child.tensor_memory(output).map_err(|e| e.to_string())?;
    assert_eq!((src_len, dst_len), (4 * N, 4 * N));
    // SAFETY: the parent's shared regions, `4 * N` bytes each, are mapped in this process
    // and this task has them alone while it runs.
    let (src, dst) = unsafe {
        (
            std::slice::from_raw_parts(src.cast::<f32>(), N),
            std::slice::from_raw_parts_mut(dst.cast::<f32>(), N),
        )
    };
    match name {
        "scale" => {
            let WireArg::Scalar(bits) = args[2] else {
                return Err("expected a scalar".into());
            };
            let add = f32::from_bits(bits as u32);
            for (d, s) in dst.iter_mut().zip(src) {
                *d = s * f32::from(payload[0]) + add;
            }
            Ok(())
        }
        "regions" => {
            dst[0] = child.mapped_regions() as f32;
            Ok(())
        }
        "fail" => Err(FAILURE.into()),
        other => Err(format!("unknown callable {other}")),
    }
}

/// This test binary running only its test `helper` (a libtest name), its harness's stdout
/// silenced (the parent's stdout is the child's).
fn this_binary_as_child(helper: &str) -> ChildProgram {
    ChildProgram {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            "exec \"$0\" \"$@\" >/dev/null".into(),
            std::env::current_exe().unwrap().into(),
            "--exact".into(),
            helper.into(),
            "--ignored".into(),
        ],
        env: Vec::new(),
    }
}

fn failed(result: Result<(), EndpointError>) -> WorkerError {
    match result {
        Err(EndpointError::Failed(e)) => e,
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[test]
fn a_sub_worker_process_registers_runs_and_reports_errors_over_shared_memory() {
    let _serial = serial();
    let mut sub = spawn_sub(
        0,
        &this_binary_as_child(&test_name!(sub_child_program)),
        deadline(),
    )
    .unwrap();
    let pid = sub.pid().unwrap();
    assert_eq!(sub.kind(), EndpointKind::Sub);
    assert_eq!(sub.describe(), format!("sub worker 0 (pid {pid})"));

    // A payload bigger than the mailbox's request area is staged.
    let mut payload = vec![0u8; 3 << 20];
    payload[0] = 3;
    let scale = Callable::SubSerialized {
        name: "scale".into(),
        payload: payload.into(),
    };
    sub.register(1, &scale).unwrap();
    let serialized = |name: &str| Callable::SubSerialized {
        name: name.into(),
        payload: Arc::from(&b""[..]),
    };
    sub.register(2, &serialized("regions")).unwrap();
    sub.register(3, &serialized("fail")).unwrap();

    let region = Arc::new(SharedRegion::new((8 * N) as u64, "sub-buf").unwrap());
    let xs: Vec<f32> = (0..N).map(|i| i as f32 - 10.0).collect();
    write_f32(&region, 0, &xs);
    let x = Tensor::view(
        Memory::Host(region.clone()),
        0,
        &[N as u64],
        &[1],
        DataType::Float32,
    )
    .unwrap();
    // y is a span of the region with a memory of its own (as the heap ring's allocations).
    let y_memory = Memory::Host(Arc::new(RegionSlice::new(region.clone(), 4 * N, 4 * N)));
    let y = Tensor::new(y_memory, &[N as u64], DataType::Float32).unwrap();
    let args = |add: f32| {
        vec![
            TaskArg::Tensor(x.clone(), Tag::Input),
            TaskArg::Tensor(y.clone(), Tag::Output),
            TaskArg::Scalar(u64::from(add.to_bits())),
        ]
    };
    let cfg = CallConfig::default();
    sub.run(1, &args(1.5), &cfg).unwrap();
    let ys = read_f32(&region, 4 * N, N);
    for (i, y) in ys.iter().enumerate() {
        assert_eq!(*y, (i as f32 - 10.0) * 3.0 + 1.5, "y[{i}]");
    }
    sub.run(1, &args(-2.0), &cfg).unwrap();
    assert_eq!(read_f32(&region, 4 * N, 1)[0], -10.0 * 3.0 - 2.0);
    sub.run(2, &args(0.0), &cfg).unwrap();
    assert_eq!(
        read_f32(&region, 4 * N, 1)[0],
        1.0,
        "one region, mapped once over three runs"
    );

    // The child's error text fails the task as it is.
    let e = failed(sub.run(3, &args(0.0), &cfg));
    assert!(
        matches!(&e, WorkerError::SubFailed { message } if message == FAILURE),
        "{e:?}"
    );
    sub.unregister(1).unwrap();
    let e = failed(sub.run(1, &args(0.0), &cfg));
    assert!(e.to_string().contains("no callable under key 1"), "{e}");

    // What cannot cross is refused before it is sent.
    let closure = Callable::SubClosure(Arc::new(|_| Ok(())));
    let e = failed(sub.register(4, &closure));
    assert!(e.to_string().contains("Rust closure"), "{e}");
    let e = failed(sub.register(5, &Callable::Chip(callable())));
    assert!(e.to_string().contains("chip callable"), "{e}");
    let device = Tensor::new(
        Memory::Child(ChildAllocation {
            worker: 0,
            ptr: simpler_device::DevicePtr::from_raw(4096),
            nbytes: (4 * N) as u64,
            generation: 0,
        }),
        &[N as u64],
        DataType::Float32,
    )
    .unwrap();
    let mut bad = args(0.0);
    bad[1] = TaskArg::Tensor(device, Tag::Output);
    let e = failed(sub.run(1, &bad, &cfg));
    assert!(
        matches!(&e, WorkerError::InvalidArgument { arg, .. } if arg == "args[1]"),
        "{e}"
    );
    let e = failed(sub.free(simpler_device::DevicePtr::from_raw(4096)));
    assert!(e.to_string().contains("holds no device memory"), "{e}");

    sub.shutdown().unwrap();
    assert!(!alive(pid), "exited and reaped");
    assert!(children().is_empty(), "{:?}", children());
}

#[test]
fn a_child_that_crashes_while_serving_a_sub_task_is_reported() {
    let _serial = serial();
    // A child that connects as a sub worker, then dies on its first run.
    let program = this_binary_as_child(&test_name!(sub_child_that_dies));
    let mut sub = spawn_sub(1, &program, deadline()).unwrap();
    let region = Arc::new(SharedRegion::new(64, "x").unwrap());
    let t = Tensor::new(Memory::Host(region), &[16], DataType::Float32).unwrap();
    let result = sub.run(9, &[TaskArg::Tensor(t, Tag::Input)], &CallConfig::default());
    match result {
        Err(EndpointError::Died { report }) => assert!(
            !report.contains("sub worker 1")
                && report.starts_with("it exited with status 42")
                && report.contains("dying on purpose"),
            "{report}"
        ),
        other => panic!("expected Died, got {other:?}"),
    }
    sub.shutdown().unwrap();
    assert!(children().is_empty(), "{:?}", children());
}

/// The child of `a_child_that_crashes_while_serving_a_sub_task_is_reported`.
#[test]
#[ignore = "the child program of another test"]
fn sub_child_that_dies() {
    if std::env::var("SIMPLER_CHILD_ROLE").as_deref() != Ok("sub") {
        return;
    }
    let mut child = SubChild::connect().unwrap();
    let _ = child.next().unwrap();
    // Straight to fd 2: the test harness would capture `eprintln!`.
    std::io::Write::write_all(&mut std::io::stderr(), b"dying on purpose\n").unwrap();
    std::process::exit(42);
}
