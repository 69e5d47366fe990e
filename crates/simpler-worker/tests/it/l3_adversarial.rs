//! Attacks on the level-3 engine from outside: operands naming chips that do not exist,
//! views a chip cannot take, tasks that disagree with their chip callable's signature, many
//! threads submitting at once, an orchestration waiting on the run before it, a submit or a
//! registration blocked behind busy runs and given up by its check, a task calling back into
//! its worker (and dropping it), sub worker processes that never return, exit mid-task or
//! are killed while idle, a start that fails half-way, and 200 runs over four chip processes
//! that must not grow this process's descriptors, threads or children (run in a process of
//! their own) (`docs/l3-worker.md` §1, §2, §5, §8). Every test holds `serial()`: they start
//! child processes and count them.

use crate::common;
use crate::process_common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{add_args, add_one_callable, f32_buffer, options, read_f32, worker, Gate};
use crate::process_common::{alive, children, gone_within, serial};
use simpler_abi::DataType;
use simpler_host::CallConfig;
use simpler_test_support::{in_own_process, test_name};
use simpler_worker::process::{ChildProgram, SubChild, SubRequest, WireArg};
use simpler_worker::*;

fn cfg() -> CallConfig {
    CallConfig::default()
}

/// The sub worker program of these tests: `ok` fills its one tensor with 1.0, `hang` never
/// returns, `exit` ends the process with status 7 mid-task.
#[test]
#[ignore = "the child program of the other tests"]
fn adversarial_sub_child() {
    if std::env::var("SIMPLER_CHILD_ROLE").as_deref() != Ok("sub") {
        return;
    }
    let mut child = SubChild::connect().unwrap();
    let mut names: HashMap<u32, String> = HashMap::new();
    loop {
        match child.next().unwrap() {
            SubRequest::Register { key, name, .. } => {
                names.insert(key, name);
                child.reply(Ok(())).unwrap();
            }
            SubRequest::Unregister { key } => {
                names.remove(&key);
                child.reply(Ok(())).unwrap();
            }
            SubRequest::Run { key, args } => {
                let outcome = match names.get(&key).map(String::as_str) {
                    Some("ok") => fill_ones(&mut child, &args),
                    Some("hang") => loop {
                        std::thread::sleep(Duration::from_secs(60));
                    },
                    Some("exit") => std::process::exit(7),
                    other => Err(format!("no callable {other:?}")),
                };
                child.reply(outcome).unwrap();
            }
            SubRequest::Shutdown => break,
        }
    }
}

fn fill_ones(child: &mut SubChild, args: &[WireArg]) -> Result<(), String> {
    let Some(WireArg::Tensor(t)) = args.first() else {
        return Err("expected a tensor".into());
    };
    let (ptr, len) = child.tensor_memory(t).map_err(|e| e.to_string())?;
    // SAFETY: the parent's shared region, `len` bytes from `ptr`, is mapped here and this
    // task alone writes it while it runs.
    let out = unsafe { std::slice::from_raw_parts_mut(ptr.cast::<f32>(), len / 4) };
    out.fill(1.0);
    Ok(())
}

/// This test binary running only `adversarial_sub_child`; sub worker `crash` (if any)
/// instead writes `boom` to stderr and exits with status 9 before it connects.
fn sub_program(crash: Option<usize>) -> ChildProgram {
    let crash = crash.map_or(String::from("none"), |i| i.to_string());
    let helper = test_name!(adversarial_sub_child);
    let script = format!(
        "if [ \"$SIMPLER_CHILD_INDEX\" = {crash} ]; then echo boom >&2; exit 9; fi; \
         exec \"$0\" --exact {helper} --ignored >/dev/null"
    );
    ChildProgram {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            script.into(),
            std::env::current_exe().unwrap().into(),
        ],
        env: Vec::new(),
    }
}

fn sub_processes(count: usize, close_timeout: Duration) -> WorkerOptions {
    WorkerOptions {
        sub_workers: SubWorkers::Processes {
            count,
            program: sub_program(None),
        },
        heap_ring_size: 1 << 20,
        close_timeout,
        ..WorkerOptions::default()
    }
}

fn serialized(name: &str) -> Callable {
    Callable::SubSerialized {
        name: name.into(),
        payload: Arc::from(&b""[..]),
    }
}

#[test]
fn a_copy_naming_a_chip_the_worker_lacks_is_refused_naming_the_operand() {
    let _serial = serial();
    let (w, _) = worker(2, 0);
    let (_xr, x) = f32_buffer(&w, &[1.0; 16]);
    let ghost = Tensor::new(
        Memory::Child(ChildAllocation {
            worker: 9,
            ptr: simpler_device::DevicePtr::from_raw(1 << 20),
            nbytes: 64,
            generation: 0,
        }),
        &[16],
        DataType::Float32,
    )
    .unwrap();
    let seen = Mutex::new(Vec::new());
    let report = w
        .run(|o| {
            seen.lock().unwrap().extend([
                o.copy_to(&ghost, &x).unwrap_err(),
                o.copy_from(&x, &ghost).unwrap_err(),
                o.free(&ghost).unwrap_err(),
            ]);
            Ok(())
        })
        .unwrap();
    assert_eq!(report.tasks, 0);
    let seen = seen.into_inner().unwrap();
    for (e, arg) in seen.iter().zip(["`dst`", "`src`", "`tensor`"]) {
        assert_eq!(e.kind(), "INVALID_ARGUMENT", "{e}");
        assert!(
            e.to_string().contains(arg) && e.to_string().contains("chip 9"),
            "{e}"
        );
    }
    assert!(seen[0].to_string().contains("2 chip(s)"), "{}", seen[0]);
    assert_eq!(
        w.free_child_tensor(&ghost).unwrap_err().kind(),
        "INVALID_ARGUMENT"
    );
    w.close().unwrap();
}

#[test]
fn a_view_a_chip_cannot_take_is_refused_at_submit_and_the_run_goes_on() {
    let _serial = serial();
    let (w, chip) = worker(2, 0);
    let chip = chip.unwrap();
    let (_mr, m) = f32_buffer(&w, &[0.0; 64]);
    let (yr, y) = f32_buffer(&w, &[0.0; 32]);
    // Every other element: 32 f32 with a stride of 2.
    let strided = Tensor::view(m.memory().clone(), 0, &[32], &[2], DataType::Float32).unwrap();
    let contiguous = Tensor::view(m.memory().clone(), 0, &[32], &[1], DataType::Float32).unwrap();
    let report = w
        .run(|o| {
            let e = o
                .submit_next_level(&chip, add_args(&strided, &y, 0), &cfg(), 0)
                .unwrap_err();
            assert!(
                e.to_string().contains("`args[0]`") && e.to_string().contains("contiguous"),
                "{e}"
            );
            let group = vec![add_args(&contiguous, &y, 0), add_args(&y, &strided, 0)];
            let e = o
                .submit_next_level_group(&chip, group, &cfg(), &[0, 1])
                .unwrap_err();
            assert!(e.to_string().contains("`args_list[1][1]`"), "{e}");
            o.submit_next_level(&chip, add_args(&contiguous, &y, 0), &cfg(), 1)?;
            Ok(())
        })
        .unwrap();
    assert_eq!(report.tasks, 1, "only the good task entered the graph");
    assert_eq!(read_f32(&*yr), vec![1.0; 32]);
    w.close().unwrap();
}

#[test]
fn a_task_that_disagrees_with_the_chip_signature_is_refused_naming_the_argument() {
    let _serial = serial();
    let (w, chip) = worker(1, 0);
    let chip = chip.unwrap();
    let (_xr, x) = f32_buffer(&w, &[1.0; 16]);
    let (yr, y) = f32_buffer(&w, &[0.0; 16]);
    let half = Tensor::new(x.memory().clone(), &[16], DataType::Float16).unwrap();
    let refusals = Mutex::new(Vec::new());
    let report = w
        .run(|o| {
            let refuse = |args: TaskArgs| {
                let e = o.submit_next_level(&chip, args, &cfg(), 0).unwrap_err();
                refusals.lock().unwrap().push(e);
            };
            // y is written by the chip: tagged INPUT, the tensor map would miss the write.
            refuse(
                TaskArgs::new()
                    .tensor(x.clone(), Tag::Input)
                    .tensor(y.clone(), Tag::Input)
                    .scalar(0),
            );
            refuse(
                TaskArgs::new()
                    .tensor(half.clone(), Tag::Input)
                    .tensor(y.clone(), Tag::Output)
                    .scalar(0),
            );
            refuse(
                TaskArgs::new()
                    .tensor(x.clone(), Tag::Input)
                    .tensor(y.clone(), Tag::Output),
            );
            refuse(
                TaskArgs::new()
                    .tensor(x.clone(), Tag::Input)
                    .scalar(1)
                    .scalar(0),
            );
            refuse(add_args(&x, &y, 0).tensor(y.clone(), Tag::NoDep));
            // NO_DEP stands for any direction: the caller orders it.
            o.submit_next_level(
                &chip,
                TaskArgs::new()
                    .tensor(x.clone(), Tag::NoDep)
                    .tensor(y.clone(), Tag::Output)
                    .scalar(0),
                &cfg(),
                0,
            )?;
            Ok(())
        })
        .unwrap();
    assert_eq!(report.tasks, 1);
    assert_eq!(read_f32(&*yr), vec![2.0; 16]);
    let refusals = refusals.into_inner().unwrap();
    let expect: [&[&str]; 5] = [
        &["`args[1]`", "`y` of `add_one`", "tag INPUT", "out"],
        &[
            "`args[0]`",
            "`x`",
            "dtype is f16, the signature declares f32",
        ],
        &["`args`", "takes 3 arguments (x, y, func), got 2"],
        &["`args[1]`", "`y`", "declares an out tensor, got a scalar"],
        &["`args`", "got 4"],
    ];
    for (e, words) in refusals.iter().zip(expect) {
        assert_eq!(e.kind(), "INVALID_ARGUMENT", "{e}");
        for word in words {
            assert!(e.to_string().contains(word), "`{word}` not in: {e}");
        }
    }
    w.close().unwrap();
}

#[test]
fn threads_submitting_at_once_each_get_their_own_run() {
    let _serial = serial();
    let w = Arc::new(Worker::new(options(2, 2)).unwrap());
    let chip = w.register(add_one_callable("add_one")).unwrap();
    let check = w
        .register(common::closure(|a| {
            let f = a.read_f32(0)?;
            if f.iter().all(|x| *x == f[0]) {
                Ok(())
            } else {
                Err(format!("torn output {f:?}"))
            }
        }))
        .unwrap();
    w.init().unwrap();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (w, chip, check) = (w.clone(), chip.clone(), check.clone());
            std::thread::spawn(move || {
                let (_xr, x) = f32_buffer(&w, &[t as f32; 64]);
                let (yr, y) = f32_buffer(&w, &[0.0; 64]);
                let mut ids = Vec::new();
                for _ in 0..8 {
                    let report = w
                        .run(|o| {
                            let mid = o.alloc(&[64], DataType::Float32)?;
                            o.submit_next_level(&chip, add_args(&x, &mid, 0), &cfg(), t % 2)?;
                            o.submit_next_level(&chip, add_args(&mid, &y, 0), &cfg(), 1 - t % 2)?;
                            o.submit_sub(&check, TaskArgs::new().tensor(y.clone(), Tag::Input))?;
                            Ok(())
                        })
                        .unwrap();
                    assert_eq!(report.tasks, 3);
                    assert_eq!(read_f32(&*yr), vec![t as f32 + 2.0; 64]);
                    ids.push(report.run);
                }
                ids
            })
        })
        .collect();
    let mut ids: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=48).collect::<Vec<_>>(), "one run each, none lost");
    w.close().unwrap();
}

#[test]
fn an_orchestration_may_wait_for_the_run_before_it() {
    let _serial = serial();
    let (w, chip) = worker(1, 0);
    let chip = chip.unwrap();
    let (_xr, x) = f32_buffer(&w, &[1.0; 16]);
    let (yr, y) = f32_buffer(&w, &[0.0; 16]);
    let (zr, z) = f32_buffer(&w, &[0.0; 16]);
    let gate = Gate::close();
    let first = w
        .submit(|o| {
            o.submit_next_level(&chip, add_args(&x, &y, gate.func().into()), &cfg(), 0)
                .map(|_| ())
        })
        .unwrap();
    let opened = AtomicBool::new(false);
    let second = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            opened.store(true, Ordering::SeqCst);
            gate.open();
        });
        w.run(|o| {
            // The first run is the head: it finishes while this orchestration waits.
            assert_eq!(
                first
                    .wait(Some(Duration::from_millis(10)))
                    .unwrap_err()
                    .kind(),
                "WAIT_TIMEOUT"
            );
            first.wait(None)?;
            assert!(opened.load(Ordering::SeqCst));
            o.submit_next_level(&chip, add_args(&y, &z, 0), &cfg(), 0)?;
            Ok(())
        })
    })
    .unwrap();
    assert_eq!(second.tasks, 1);
    assert_eq!(read_f32(&*yr), vec![2.0; 16]);
    assert_eq!(read_f32(&*zr), vec![3.0; 16]);
    w.close().unwrap();
}

#[test]
fn a_submit_or_register_blocked_behind_busy_runs_ends_when_its_check_says_so() {
    let _serial = serial();
    let w = Worker::new(options(0, 1)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = Mutex::new(rx);
    let hold = w
        .register(common::closure(move |_| {
            let rx = rx.lock().unwrap();
            rx.recv_timeout(Duration::from_secs(20))
                .map_err(|e| e.to_string())
        }))
        .unwrap();
    w.init().unwrap();
    let runs: Vec<RunHandle> = (0..2)
        .map(|_| {
            w.submit(|o| o.submit_sub(&hold, TaskArgs::new()).map(|_| ()))
                .unwrap()
        })
        .collect();
    let give_up_after = |ms: u64| {
        let t0 = Instant::now();
        move || {
            if t0.elapsed() > Duration::from_millis(ms) {
                Err(WorkerError::WaitTimeout(Duration::from_millis(ms)))
            } else {
                Ok(())
            }
        }
    };
    // Two runs in flight: the third submit waits for a place until its check gives up.
    let called = AtomicBool::new(false);
    let t0 = Instant::now();
    let e = w
        .submit_interruptible(
            |_| {
                called.store(true, Ordering::SeqCst);
                Ok(())
            },
            give_up_after(100),
        )
        .unwrap_err();
    assert_eq!(e.kind(), "WAIT_TIMEOUT", "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert!(!called.load(Ordering::SeqCst), "nothing was submitted");
    // The sub worker is busy: a registration waits behind its task until the check gives up.
    let e = w
        .register_interruptible(common::closure(|_| Ok(())), give_up_after(100))
        .unwrap_err();
    assert_eq!(e.kind(), "WAIT_TIMEOUT", "{e}");
    tx.send(()).unwrap();
    tx.send(()).unwrap();
    for run in runs {
        run.result().unwrap();
    }
    let late = w.register(common::closure(|_| Ok(()))).unwrap();
    w.run(|o| o.submit_sub(&late, TaskArgs::new()).map(|_| ()))
        .unwrap();
    w.close().unwrap();
}

#[test]
fn a_task_calling_back_into_its_worker_is_refused_instead_of_waiting_for_itself() {
    let _serial = serial();
    let w = Arc::new(Worker::new(options(1, 1)).unwrap());
    let me: Arc<std::sync::OnceLock<std::sync::Weak<Worker>>> = Arc::default();
    let (go, started) = std::sync::mpsc::channel::<RunHandle>();
    let started = Mutex::new(started);
    let seen: Arc<Mutex<Vec<Result<(), WorkerError>>>> = Arc::default();
    let (me2, seen2) = (me.clone(), seen.clone());
    let reentrant = w
        .register(common::closure(move |_| {
            let w = me2
                .get()
                .and_then(std::sync::Weak::upgrade)
                .ok_or("no worker")?;
            // The handle of a run to wait on: this task's own (in flight), or one over.
            let run = started.lock().unwrap().recv().map_err(|e| e.to_string())?;
            let mut seen = seen2.lock().unwrap();
            seen.push(w.run(|_| Ok(())).map(drop));
            seen.push(w.register(common::closure(|_| Ok(()))).map(drop));
            seen.push(w.alloc_child_tensor(0, &[4], DataType::Float32).map(drop));
            seen.push(run.wait(None).map(drop));
            Ok(())
        }))
        .unwrap();
    me.set(Arc::downgrade(&w)).unwrap();
    w.init().unwrap();
    let t0 = Instant::now();
    let task = |o: &Orchestrator| o.submit_sub(&reentrant, TaskArgs::new()).map(drop);
    let own = w.submit(task).unwrap();
    go.send(own.clone()).unwrap();
    own.wait(None).unwrap();
    let again = w.submit(task).unwrap();
    go.send(own).unwrap();
    again.result().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "no deadlock");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 8);
    for (i, outcome) in seen.iter().enumerate() {
        if i == 7 {
            assert!(
                outcome.is_ok(),
                "waiting on a run that is over is fine: {outcome:?}"
            );
            continue;
        }
        let e = outcome.as_ref().unwrap_err();
        assert_eq!(e.kind(), "INVALID_STATE", "{e}");
        assert!(e.to_string().contains("from a task of this worker"), "{e}");
    }
    // Outside its tasks the worker takes the same calls.
    w.register(common::closure(|_| Ok(()))).unwrap();
    w.close().unwrap();
}

#[test]
fn a_worker_dropped_by_its_own_task_closes_without_waiting_for_that_task() {
    let _serial = serial();
    let w = Arc::new(Worker::new(options(1, 1)).unwrap());
    let weak: Arc<std::sync::OnceLock<std::sync::Weak<Worker>>> = Arc::default();
    let (upgraded_tx, upgraded_rx) = std::sync::mpsc::channel::<()>();
    let (dropped_tx, dropped_rx) = std::sync::mpsc::channel::<()>();
    let channels = Mutex::new((upgraded_tx, dropped_rx));
    let weak2 = weak.clone();
    let last = w
        .register(common::closure(move |_| {
            let w = weak2.get().and_then(std::sync::Weak::upgrade);
            let w = w.ok_or("no worker")?;
            let channels = channels.lock().unwrap();
            channels.0.send(()).map_err(|e| e.to_string())?;
            // The caller drops its reference meanwhile: this one is the last.
            channels.1.recv().map_err(|e| e.to_string())?;
            drop(w);
            Ok(())
        }))
        .unwrap();
    weak.set(Arc::downgrade(&w)).unwrap();
    w.init().unwrap();
    let task = |o: &Orchestrator| o.submit_sub(&last, TaskArgs::new()).map(drop);
    let run = w.submit(task).unwrap();
    upgraded_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    drop(w);
    dropped_tx.send(()).unwrap();
    let report = run.wait(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(report.tasks, 1);
    let worker = weak.get().unwrap();
    common::eventually("the worker is gone", || worker.strong_count() == 0);
}

#[test]
fn close_kills_a_sub_process_whose_task_never_returns() {
    let _serial = serial();
    let w = Worker::new(sub_processes(2, Duration::from_millis(300))).unwrap();
    let hang = w.register(serialized("hang")).unwrap();
    let ok = w.register(serialized("ok")).unwrap();
    w.init().unwrap();
    let pids: Vec<u32> = w.child_pids().into_iter().map(|(_, p)| p).collect();
    let region = w.create_buffer(64).unwrap();
    let memory: Arc<dyn HostMemory> = region.clone();
    let out = Tensor::new(Memory::Host(memory), &[16], DataType::Float32).unwrap();
    let stuck = w
        .submit(|o| {
            o.submit_sub(&hang, TaskArgs::new())?;
            o.submit_sub(&ok, TaskArgs::new().tensor(out.clone(), Tag::Output))?;
            Ok(())
        })
        .unwrap();
    // A bounded wait ends cleanly, and the run goes on (the other sub worker's task ends).
    let e = stuck.wait(Some(Duration::from_millis(200))).unwrap_err();
    assert_eq!(e.kind(), "WAIT_TIMEOUT", "{e}");
    assert!(!stuck.done());
    assert_eq!(read_f32(&*region), vec![1.0; 16]);
    let t0 = Instant::now();
    w.close().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "close took {:?}",
        t0.elapsed()
    );
    let e = stuck.wait(None).unwrap_err();
    assert_eq!(e.root_cause().kind(), "ENDPOINT_FAILURE", "{e}");
    let text = e.to_string();
    assert!(
        text.contains("close_timeout") && text.contains("SIGKILL") && text.contains("hang"),
        "{text}"
    );
    for pid in pids {
        assert!(
            gone_within(pid, Duration::from_secs(2)),
            "child {pid} is gone"
        );
    }
    assert!(children().is_empty(), "{:?}", children());
}

#[test]
fn sub_processes_that_exit_mid_task_or_die_idle_fail_their_tasks_and_close_still_ends() {
    let _serial = serial();
    let w = Worker::new(sub_processes(2, Duration::from_secs(5))).unwrap();
    let exit = w.register(serialized("exit")).unwrap();
    let ok = w.register(serialized("ok")).unwrap();
    w.init().unwrap();
    let pids: Vec<u32> = w.child_pids().into_iter().map(|(_, p)| p).collect();
    let region = w.create_buffer(64).unwrap();
    let memory: Arc<dyn HostMemory> = region.clone();
    let out = Tensor::new(Memory::Host(memory), &[16], DataType::Float32).unwrap();
    let sub_task = |h: &CallableHandle| {
        let t = out.clone();
        w.run(move |o| {
            o.submit_sub(h, TaskArgs::new().tensor(t, Tag::Output))
                .map(|_| ())
        })
    };

    let e = sub_task(&exit).unwrap_err();
    assert_eq!(e.root_cause().kind(), "ENDPOINT_FAILURE", "{e}");
    assert!(e.to_string().contains("exited with status 7"), "{e}");
    // The one left alive takes the next task.
    sub_task(&ok).unwrap();
    assert_eq!(read_f32(&*region), vec![1.0; 16]);

    // Killed while idle: the engine learns it at the next task, which fails.
    let idle = pids
        .iter()
        .copied()
        .find(|p| alive(*p))
        .expect("one sub worker lives");
    // SAFETY: `idle` is a live child of this process, not yet reaped.
    assert_eq!(unsafe { libc::kill(idle as i32, libc::SIGKILL) }, 0);
    assert!(gone_within(idle, Duration::from_secs(2)) || !alive(idle));
    let e = sub_task(&ok).unwrap_err();
    assert_eq!(e.root_cause().kind(), "ENDPOINT_FAILURE", "{e}");
    assert!(e.to_string().contains("SIGKILL"), "{e}");
    // Now both are known dead: refused at submit.
    let e = sub_task(&ok).unwrap_err();
    assert!(
        e.kind() == "ORCHESTRATION_FAILED" && e.to_string().contains("tasks to it are refused"),
        "{e}"
    );
    let t0 = Instant::now();
    w.close().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(children().is_empty(), "{:?}", children());
}

#[test]
fn a_child_that_crashes_at_start_fails_init_and_the_started_ones_are_stopped() {
    let _serial = serial();
    let w = Worker::new(WorkerOptions {
        sub_workers: SubWorkers::Processes {
            count: 3,
            program: sub_program(Some(1)),
        },
        ..sub_processes(3, Duration::from_secs(5))
    })
    .unwrap();
    w.register(serialized("ok")).unwrap();
    let e = w.init().unwrap_err();
    assert_eq!(e.kind(), "STARTUP_FAILED", "{e}");
    let text = e.to_string();
    assert!(
        text.contains("sub worker 1")
            && text.contains("exited with status 9")
            && text.contains("boom"),
        "{text}"
    );
    assert!(
        children().is_empty(),
        "sub worker 0 was stopped: {:?}",
        children()
    );
    let again = w.init().unwrap_err();
    assert_eq!(again.kind(), "INVALID_STATE");
    assert!(
        again.to_string().contains("failed") && again.to_string().contains("sub worker 1"),
        "{again}"
    );
    assert_eq!(w.run(|_| Ok(())).unwrap_err().kind(), "INVALID_STATE");
    w.close().unwrap();
    assert_eq!(w.register(serialized("late")).unwrap_err().kind(), "CLOSED");
}

/// Open descriptors, threads and live children of this process.
fn resources() -> (usize, usize, usize) {
    let count = |dir: &str| std::fs::read_dir(dir).map_or(0, |d| d.count());
    (
        count("/proc/self/fd"),
        count("/proc/self/task"),
        children().len(),
    )
}

#[test]
fn two_hundred_runs_on_four_chip_processes_keep_descriptors_threads_and_children_flat() {
    use crate::process_common::{callable, child_program, small_chip, AFFINE, N};
    let _serial = serial();
    // It counts this process's descriptors and threads, which the other tests of this binary
    // open and start on their own threads: it runs in a child process that runs it alone.
    in_own_process!(
        two_hundred_runs_on_four_chip_processes_keep_descriptors_threads_and_children_flat
    );
    let w = Worker::new(WorkerOptions {
        chips: vec![small_chip(); 4],
        chip_isolation: ChipIsolation::Process,
        chip_program: Some(child_program()),
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    })
    .unwrap();
    let chip = w.register(Callable::Chip(callable())).unwrap();
    w.init().unwrap();
    let xr = w.create_buffer((N * 4) as u64).unwrap();
    let yr = w.create_buffer((4 * N * 4) as u64).unwrap();
    process_common::write_f32(&xr, 0, &vec![1.0; N]);
    let xm: Arc<dyn HostMemory> = xr.clone();
    let ym: Arc<dyn HostMemory> = yr.clone();
    let x = Tensor::new(Memory::Host(xm), &[N as u64], DataType::Float32).unwrap();
    let y = |c: u64| {
        let m = Memory::Host(ym.clone());
        Tensor::view(m, c * N as u64 * 4, &[N as u64], &[1], DataType::Float32).unwrap()
    };
    let one_run = || {
        w.run(|o| {
            let mid = o.alloc(&[N as u64], DataType::Float32)?;
            let args = |a: &Tensor, b: Tensor| {
                TaskArgs::new()
                    .tensor(a.clone(), Tag::Input)
                    .tensor(b, Tag::Output)
                    .scalar(AFFINE)
            };
            o.submit_next_level(&chip, args(&x, mid.clone()), &cfg(), 0)?;
            for c in 1..4 {
                o.submit_next_level(&chip, args(&mid, y(c)), &cfg(), c as usize)?;
            }
            Ok(())
        })
        .unwrap()
    };
    for _ in 0..10 {
        one_run();
    }
    let before = resources();
    let t0 = Instant::now();
    for _ in 0..200 {
        assert_eq!(one_run().tasks, 4);
    }
    eprintln!("200 runs over 4 chip processes: {:?}", t0.elapsed());
    assert_eq!(process_common::read_f32(&yr, 3 * N * 4, N), vec![7.0; N]);
    assert_eq!(
        resources(),
        before,
        "(descriptors, threads, children) stay flat"
    );
    w.close().unwrap();
    assert!(children().is_empty(), "{:?}", children());
}
