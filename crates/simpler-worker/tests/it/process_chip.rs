//! A chip in a child process, driven through its endpoint (`spawn_chip`, then `Endpoint`
//! calls): runs over shared buffers written by the child into this process's pages, device
//! memory round trips, crashes of the child (SIGKILL, abort, NULL dereference) reported as
//! `Died` with their signal and stderr tail, startup failures that leave nothing running,
//! and a child that ends when its parent is SIGKILLed (`docs/l3-worker.md` §5).

use std::io::BufRead;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::process_common::*;
use simpler_abi::DataType;
use simpler_host::{CallConfig, CallableSpec, CodeImage, KernelSpec, WorkerConfig};
use simpler_test_support::{child, test_name};
use simpler_worker::memory::SharedRegion;
use simpler_worker::process::{spawn_chip, spawn_sub, ChildProgram};
use simpler_worker::{
    Callable, ChildAllocation, Endpoint, EndpointError, EndpointKind, Memory, Tag, TaskArg, Tensor,
    VecMemory, WorkerError,
};

fn start_chip() -> Box<dyn Endpoint> {
    let mut chip = spawn_chip(0, 4, &small_chip(), &child_program(), deadline()).unwrap();
    chip.register(7, &Callable::Chip(callable())).unwrap();
    chip
}

fn vector_args(x: Tensor, y: Tensor, mode: u64) -> Vec<TaskArg> {
    vec![
        TaskArg::Tensor(x, Tag::Input),
        TaskArg::Tensor(y, Tag::Output),
        TaskArg::Scalar(mode),
    ]
}

fn shared_args(mode: u64) -> (Arc<SharedRegion>, Vec<TaskArg>) {
    let region = Arc::new(SharedRegion::new((8 * N) as u64, "l3proc-buf").unwrap());
    let xs: Vec<f32> = (0..N).map(|i| i as f32 * 0.5 - 3.0).collect();
    write_f32(&region, 0, &xs);
    let memory = Memory::Host(region.clone());
    let x = Tensor::view(memory.clone(), 0, &[N as u64], &[1], DataType::Float32).unwrap();
    let y = Tensor::view(memory, (4 * N) as u64, &[N as u64], &[1], DataType::Float32).unwrap();
    (region, vector_args(x, y, mode))
}

fn died(result: Result<(), EndpointError>) -> String {
    match result {
        Err(EndpointError::Died { report }) => report,
        other => panic!("expected Died, got {other:?}"),
    }
}

fn failed(result: Result<(), EndpointError>) -> WorkerError {
    match result {
        Err(EndpointError::Failed(e)) => e,
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[test]
fn a_run_on_shared_buffers_is_written_by_the_child_into_this_processs_pages() {
    let _serial = serial();
    let mut chip = start_chip();
    let pid = chip.pid().unwrap();
    assert_eq!(chip.kind(), EndpointKind::Chip);
    // The configured device id, not the sim device's own (0).
    assert_eq!(chip.describe(), format!("chip 0 (device 4, pid {pid})"));

    let (region, args) = shared_args(AFFINE);
    chip.run(7, &args, &CallConfig::default()).unwrap();
    let ys = read_f32(&region, 4 * N, N);
    for (i, y) in ys.iter().enumerate() {
        assert_eq!(*y, 2.0 * (i as f32 * 0.5 - 3.0) + 1.0, "y[{i}]");
    }
    // The child mapped the parent's memfd itself: the chip's output reached these pages
    // with no copy through the mailbox.
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains("memfd:simpler-l3proc-buf"), "{maps}");
    let again = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    chip.run(7, &args, &CallConfig::default()).unwrap();
    assert_eq!(
        again.matches("simpler-l3proc-buf").count(),
        std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap()
            .matches("simpler-l3proc-buf")
            .count(),
        "a region is mapped once"
    );

    // Memory private to this process never reaches the child.
    let private = Memory::Host(Arc::new(VecMemory::new(vec![0; 4 * N])));
    let x = Tensor::new(private, &[N as u64], DataType::Float32).unwrap();
    let mut bad = args.clone();
    bad[0] = TaskArg::Tensor(x, Tag::Input);
    let e = failed(chip.run(7, &bad, &CallConfig::default()));
    assert!(
        matches!(&e, WorkerError::InvalidArgument { arg, reason }
            if arg == "args[0]" && reason.contains("create_buffer")),
        "{e}"
    );
    // The chip's own argument check runs in the child and comes back typed.
    let e = failed(chip.run(7, &args[..2], &CallConfig::default()));
    assert!(
        matches!(
            &e,
            WorkerError::Host(simpler_host::HostError::ArgumentCount { .. })
        ),
        "{e}"
    );
    let e = failed(chip.run(99, &args, &CallConfig::default()));
    assert!(e.to_string().contains("no callable under key 99"), "{e}");

    chip.unregister(7).unwrap();
    assert!(failed(chip.run(7, &args, &CallConfig::default()))
        .to_string()
        .contains("key 7"));
    chip.shutdown().unwrap();
    assert!(!alive(pid), "shut down and reaped");
}

#[test]
fn device_memory_round_trips_through_malloc_copy_to_run_and_copy_from() {
    let _serial = serial();
    let mut chip = start_chip();
    let bytes = (4 * N) as u64;
    let px = chip.malloc(bytes).unwrap();
    let py = chip.malloc(bytes).unwrap();
    let xs: Vec<f32> = (0..N).map(|i| 100.0 - i as f32).collect();
    let raw: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
    chip.copy_to(px, &raw).unwrap();
    let device = |ptr| {
        Tensor::new(
            Memory::Child(ChildAllocation {
                worker: 0,
                ptr,
                nbytes: bytes,
                generation: 0,
            }),
            &[N as u64],
            DataType::Float32,
        )
        .unwrap()
    };
    let args = vector_args(device(px), device(py), AFFINE);
    chip.run(7, &args, &CallConfig::default()).unwrap();
    let mut back = vec![0u8; bytes as usize];
    chip.copy_from(&mut back, py).unwrap();
    for (i, c) in back.chunks(4).enumerate() {
        let y = f32::from_le_bytes(c.try_into().unwrap());
        assert_eq!(y, 2.0 * (100.0 - i as f32) + 1.0, "y[{i}]");
    }

    // Copies bigger than a mailbox message go through a staging region.
    let big_len = 3 << 20;
    let big = chip.malloc(big_len as u64).unwrap();
    let pattern: Vec<u8> = (0..big_len).map(|i| (i * 7 % 251) as u8).collect();
    chip.copy_to(big, &pattern).unwrap();
    let mut seen = vec![0u8; big_len];
    chip.copy_from(&mut seen, big).unwrap();
    assert!(seen == pattern, "3 MiB survive both directions");

    // Device errors come back as the chip's typed errors.
    chip.free(big).unwrap();
    let e = failed(chip.free(big));
    assert!(
        matches!(e, WorkerError::Host(simpler_host::HostError::Device { .. })),
        "{e}"
    );
    let other_chip = Tensor::new(
        Memory::Child(ChildAllocation {
            worker: 1,
            ptr: px,
            nbytes: bytes,
            generation: 0,
        }),
        &[N as u64],
        DataType::Float32,
    )
    .unwrap();
    let e = failed(chip.run(
        7,
        &vector_args(other_chip, device(py), AFFINE),
        &CallConfig::default(),
    ));
    assert!(
        e.to_string().contains("args[0]") && e.to_string().contains("chip 1"),
        "{e}"
    );

    // Callables of in-process functions cannot cross.
    unsafe extern "C-unwind" fn orch(
        _: *const simpler_abi::OrchOps,
        _: *const simpler_abi::OrchArgs,
    ) -> i32 {
        0
    }
    unsafe extern "C-unwind" fn kernel(_: *mut i64) {}
    let spec = CallableSpec {
        name: "inproc".into(),
        signature: callable().signature.clone(),
        orchestration: CodeImage::Orchestration(orch),
        kernels: vec![KernelSpec {
            func_id: 0,
            core_type: simpler_abi::CoreType::Aiv,
            image: CodeImage::Kernel(kernel),
            name: None,
        }],
        runtime: None,
    };
    let e = failed(chip.register(8, &Callable::Chip(Arc::new(spec))));
    assert!(
        e.to_string().contains("`inproc`")
            && e.to_string().contains("in-process function")
            && e.to_string().contains("C sources"),
        "{e}"
    );
    chip.shutdown().unwrap();
}

#[test]
fn a_child_killed_during_a_long_task_fails_it_as_died_with_the_signal() {
    let _serial = serial();
    let mut chip = start_chip();
    let pid = chip.pid().unwrap();
    let (_region, args) = shared_args(SLOW);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        // SAFETY: kill(2) with a pid and a signal number has no memory effects.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        Instant::now()
    });
    let result = chip.run(7, &args, &CallConfig::default());
    let returned = Instant::now();
    let killed = killer.join().unwrap();
    let report = died(result);
    assert!(
        report.contains("was killed by signal SIGKILL (9)") && !report.contains("chip 0"),
        "{report}"
    );
    assert!(
        returned.duration_since(killed) < Duration::from_secs(2),
        "the death is noticed promptly"
    );
    // Later calls are refused the same way; shutdown only reaps.
    assert!(died(chip.run(7, &args, &CallConfig::default())).contains("SIGKILL"));
    chip.shutdown().unwrap();
    assert!(!alive(pid));
}

#[test]
fn kernels_that_abort_or_segfault_kill_the_child_with_their_stderr_in_the_report() {
    let _serial = serial();
    for (mode, signal, line) in [
        (ABORT, "SIGABRT", "abort kernel: giving up now"),
        (SEGV, "SIGSEGV", "simpler: crash: SIGSEGV"),
    ] {
        let mut chip = start_chip();
        let (_region, args) = shared_args(mode);
        let report = died(chip.run(7, &args, &CallConfig::default()));
        assert!(
            report.contains(&format!("was killed by signal {signal}")) && report.contains(line),
            "{report}"
        );
        assert!(
            report.contains("simpler: crash:"),
            "the sim's crash report: {report}"
        );
        assert!(
            !report.contains("Kernel crashes")
                && report.contains("runs in a child process of its worker"),
            "a chip in a child process is not told to isolate its kernels: {report}"
        );
        drop(chip);
    }
    assert!(children().is_empty(), "{:?}", children());
}

#[test]
fn startup_failures_are_typed_and_leave_nothing_running() {
    let _serial = serial();
    let startup = |r: Result<Box<dyn Endpoint>, WorkerError>| match r {
        Err(WorkerError::Startup { endpoint, reason }) => (endpoint, reason),
        Err(other) => panic!("expected Startup, got {other}"),
        Ok(_) => panic!("expected Startup, got an endpoint"),
    };
    let (who, why) = startup(spawn_chip(
        2,
        7,
        &small_chip(),
        &ChildProgram::new("/no/such/simpler-child"),
        deadline(),
    ));
    assert_eq!(who, "chip 2 (device 7)");
    assert!(why.contains("/no/such/simpler-child"), "{why}");

    let sh = |script: &str| ChildProgram {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        env: Vec::new(),
    };
    let (_, why) = startup(spawn_chip(
        0,
        0,
        &small_chip(),
        &sh("echo 'cannot start: broken' >&2; exit 7"),
        deadline(),
    ));
    assert!(
        why.contains("exited with status 7") && why.contains("cannot start: broken"),
        "{why}"
    );

    let refused = WorkerConfig {
        aicpu_thread_num: 1,
        ..small_chip()
    };
    let (_, why) = startup(spawn_chip(1, 1, &refused, &child_program(), deadline()));
    assert!(
        why.contains("aicpu_thread_num"),
        "the chip's own error: {why}"
    );

    let t = Instant::now();
    let (_, why) = startup(spawn_chip(
        0,
        0,
        &small_chip(),
        &sh("sleep 30"),
        Instant::now() + Duration::from_millis(300),
    ));
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(
        why.contains("not ready within") && why.contains("killed"),
        "{why}"
    );

    let (who, why) = startup(spawn_sub(3, &child_program(), deadline()));
    assert_eq!(who, "sub worker 3");
    assert!(
        why.contains("sub workers of Rust closures run as threads"),
        "{why}"
    );

    assert!(children().is_empty(), "no child left: {:?}", children());
}

#[test]
fn the_rust_child_program_is_found_beside_the_test_binary_or_named_by_the_variable() {
    // The variable is set in a child process of this binary running only this test: setting
    // it here would race the other tests' threads reading the environment.
    let name =
        test_name!(the_rust_child_program_is_found_beside_the_test_binary_or_named_by_the_variable);
    if child::is_alone(&name) {
        let e = ChildProgram::for_rust().unwrap_err();
        assert!(
            e.to_string()
                .contains("SIMPLER_CHILD_PROGRAM=/no/such/child names no file"),
            "{e}"
        );
        return;
    }
    let _serial = serial();
    let found = ChildProgram::for_rust().unwrap();
    assert_eq!(
        std::fs::canonicalize(&found.program).unwrap(),
        std::fs::canonicalize(env!("CARGO_BIN_EXE_simpler-child")).unwrap()
    );
    child::rerun_alone(&name, &[("SIMPLER_CHILD_PROGRAM", "/no/such/child")]);
}

const HELPER: &str = "SIMPLER_PROCESS_TEST_HELPER";

/// Run only by `a_chip_child_ends_when_its_parent_is_killed`, as the parent it kills.
#[test]
#[ignore = "a helper process of another test"]
fn helper_parent_of_a_chip_child() {
    if std::env::var_os(HELPER).is_none() {
        return;
    }
    let chip = spawn_chip(0, 0, &small_chip(), &child_program(), deadline()).unwrap();
    println!("CHILD_PID {}", chip.pid().unwrap());
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

#[test]
fn a_chip_child_ends_when_its_parent_is_killed() {
    let _serial = serial();
    let shm_before = dev_shm();
    let mut helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &test_name!(helper_parent_of_a_chip_child),
            "--ignored",
            "--nocapture",
        ])
        .env(HELPER, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = helper.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(pid) = line.strip_prefix("CHILD_PID ") {
                let _ = tx.send(pid.trim().parse::<u32>().unwrap());
            }
        }
    });
    let child = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the helper started its chip child");
    assert!(alive(child));
    helper.kill().unwrap();
    helper.wait().unwrap();
    assert!(
        gone_within(child, Duration::from_secs(2)),
        "the chip child {child} outlived its parent"
    );
    assert_eq!(dev_shm(), shm_before, "nothing left in /dev/shm");
}
