//! Failures and refusals of a level-3 worker: poisoned consumers and the first error of a
//! run (naming task, worker and cause), a failing orchestration cancelling what it had not
//! dispatched, panics, every refusal at submit, init and close with its message.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use simpler_abi::DataType;
use simpler_host::CallConfig;
use simpler_worker::*;

const N: u64 = 32;

fn cfg() -> CallConfig {
    CallConfig::default()
}

fn flag() -> (Arc<AtomicBool>, Callable) {
    let f = Arc::new(AtomicBool::new(false));
    let f2 = f.clone();
    (
        f,
        closure(move |_| {
            f2.store(true, Ordering::SeqCst);
            Ok(())
        }),
    )
}

#[test]
fn a_failed_chip_task_poisons_its_consumers_and_names_task_worker_and_cause() {
    let w = Worker::new(options(2, 2)).unwrap();
    let chip = w.register(add_one_callable("add_one")).unwrap();
    let (consumer_ran, consumer) = flag();
    let consumer = w.register(consumer).unwrap();
    let (other_ran, other) = flag();
    let other = w.register(other).unwrap();
    w.init().unwrap();
    let (_xr, x) = f32_buffer(&w, &[1.0; N as usize]);
    let (_yr, y) = f32_buffer(&w, &[0.0; N as usize]);
    let (_zr, z) = f32_buffer(&w, &[0.0; N as usize]);
    let err = w
        .run(|o| {
            o.submit_next_level(&chip, add_args(&x, &y, FAIL), &cfg(), 1)?;
            // y's consumer, and z's (a consumer of the consumer).
            o.submit_sub(
                &consumer,
                TaskArgs::new()
                    .tensor(y.clone(), Tag::Input)
                    .tensor(z.clone(), Tag::Output),
            )?;
            o.submit_next_level(&chip, add_args(&z, &x, 0), &cfg(), 0)?;
            o.submit_sub(&other, TaskArgs::new().tensor(x.clone(), Tag::NoDep))?;
            // Submitted after the failure: poisoned at once.
            std::thread::sleep(Duration::from_millis(200));
            o.submit_sub(&consumer, TaskArgs::new().tensor(y.clone(), Tag::Input))?;
            Ok(())
        })
        .unwrap_err();
    let WorkerError::TaskFailed {
        task,
        worker,
        cause,
    } = &err
    else {
        panic!("a task failure, got {err}")
    };
    assert_eq!(
        (task.as_str(), worker.as_str()),
        ("#0 add_one", "chip 1 (device 1)")
    );
    assert_eq!(cause.kind(), "HOST");
    assert!(
        cause.to_string().contains("42"),
        "the chip's own error: {cause}"
    );
    assert!(
        !consumer_ran.load(Ordering::SeqCst),
        "poisoned consumers never run"
    );
    assert!(
        other_ran.load(Ordering::SeqCst),
        "an independent task still runs"
    );
    assert_eq!(
        tensor_f32(&x),
        vec![1.0; N as usize],
        "the poisoned chip task did not run"
    );
    w.close().unwrap();
}

#[test]
fn the_first_error_of_a_run_wins_and_a_panicking_closure_leaves_its_worker_usable() {
    let w = Worker::new(options(0, 2)).unwrap();
    let fail = w
        .register(closure(|a| {
            let ms = a.scalar(0).unwrap();
            std::thread::sleep(Duration::from_millis(ms));
            Err(format!("failed after {ms} ms"))
        }))
        .unwrap();
    let panics = w.register(closure(|_| panic!("boom"))).unwrap();
    let (ran, ok) = flag();
    let ok = w.register(ok).unwrap();
    w.init().unwrap();
    let err = w
        .run(|o| {
            o.submit_sub(&fail, TaskArgs::new().scalar(150))?;
            o.submit_sub(&fail, TaskArgs::new().scalar(0))?;
            Ok(())
        })
        .unwrap_err();
    assert!(err.to_string().contains("#1 closure"), "{err}");
    assert!(err.to_string().contains("sub worker"), "{err}");
    assert_eq!(err.root_cause().to_string(), "failed after 0 ms");
    assert_eq!(err.root_cause().kind(), "SUB_FAILED");

    let err = w
        .run(|o| o.submit_sub(&panics, TaskArgs::new()).map(|_| ()))
        .unwrap_err();
    assert!(
        err.to_string().contains("the sub callable panicked: boom"),
        "{err}"
    );
    for _ in 0..4 {
        w.run(|o| o.submit_sub(&ok, TaskArgs::new()).map(|_| ()))
            .unwrap();
    }
    assert!(ran.load(Ordering::SeqCst));
    w.close().unwrap();
}

#[test]
fn a_failing_orchestration_cancels_what_it_had_not_dispatched_and_waits_for_the_rest() {
    let w = Worker::new(options(1, 1)).unwrap();
    let chip = w.register(add_one_callable("add_one")).unwrap();
    let (consumer_ran, consumer) = flag();
    let consumer = w.register(consumer).unwrap();
    w.init().unwrap();
    let (_xr, x) = f32_buffer(&w, &[1.0; 2 * N as usize]);
    let (yr, y) = f32_buffer(&w, &[0.0; 2 * N as usize]);
    let (y0, y1) = (block(&y, 0, N), block(&y, N, N));
    let gate = Gate::close();
    let handle = w
        .submit(|o| {
            let held = add_args(&block(&x, 0, N), &y0, gate.func().into());
            o.submit_next_level(&chip, held, &cfg(), 0)?;
            std::thread::sleep(Duration::from_millis(50));
            // Queued behind the held chip: never dispatched.
            o.submit_next_level(&chip, add_args(&block(&x, N, N), &y1, 0), &cfg(), 0)?;
            o.submit_sub(&consumer, TaskArgs::new().tensor(y0.clone(), Tag::Input))?;
            Err(WorkerError::InvalidArgument {
                arg: "input".into(),
                reason: "the user's orchestration gave up".into(),
            })
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!handle.done(), "the dispatched task is waited for");
    assert_eq!(
        handle
            .wait(Some(Duration::from_millis(10)))
            .unwrap_err()
            .kind(),
        "WAIT_TIMEOUT"
    );
    gate.open();
    let err = handle.wait(Some(Duration::from_secs(20))).unwrap_err();
    assert_eq!(err.kind(), "ORCHESTRATION_FAILED");
    assert!(err.to_string().contains("gave up"), "{err}");
    assert_eq!(
        handle.wait(None).unwrap_err().kind(),
        "ORCHESTRATION_FAILED",
        "stable"
    );
    let y = read_f32(&*yr);
    assert_eq!(
        &y[..N as usize],
        &[2.0; N as usize],
        "the dispatched task finished"
    );
    assert_eq!(
        &y[N as usize..],
        &[0.0; N as usize],
        "the queued task was cancelled"
    );
    assert!(!consumer_ran.load(Ordering::SeqCst));

    // A panicking orchestration: the panic reaches the caller, the run fails, the worker
    // goes on.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        w.submit(|_| panic!("orchestration bug"))
    }));
    assert!(caught.is_err());
    w.run(|o| o.submit_sub(&consumer, TaskArgs::new()).map(|_| ()))
        .unwrap();
    assert!(consumer_ran.load(Ordering::SeqCst));
    w.close().unwrap();
}

#[test]
fn bad_submissions_are_refused_naming_what_was_wrong() {
    let w = Worker::new(options(2, 2)).unwrap();
    let chip = w.register(add_one_callable("add_one")).unwrap();
    let (_, sub) = flag();
    let sub = w.register(sub).unwrap();
    let (_, gone) = flag();
    let gone = w.register(gone).unwrap();
    w.unregister(&gone).unwrap();
    let other_worker = Worker::new(options(1, 0)).unwrap();
    let foreign = other_worker.register(add_one_callable("add_one")).unwrap();
    w.init().unwrap();
    let (_xr, x) = f32_buffer(&w, &[1.0; N as usize]);
    let (_yr, y) = f32_buffer(&w, &[0.0; N as usize]);
    let dev1 = w.alloc_child_tensor(1, &[N], DataType::Float32).unwrap();
    let freed = w.alloc_child_tensor(0, &[N], DataType::Float32).unwrap();
    w.free_child_tensor(&freed).unwrap();
    let Memory::Child(c) = dev1.memory() else {
        unreachable!()
    };
    let oversized = Tensor::new(
        Memory::Child(ChildAllocation {
            nbytes: 1 << 20,
            ..*c
        }),
        &[1 << 18],
        DataType::Float32,
    )
    .unwrap();

    let refusals: Arc<Mutex<Vec<(String, WorkerError)>>> = Arc::default();
    let r = refusals.clone();
    let report = w
        .run(|o| {
            let note = |what: &str, e: Result<TaskId, WorkerError>| {
                r.lock().unwrap().push((what.into(), e.unwrap_err()));
            };
            let a = || add_args(&x, &y, 0);
            note("unknown worker", o.submit_next_level(&chip, a(), &cfg(), 7));
            note(
                "duplicate",
                o.submit_next_level_group(&chip, vec![a(), a()], &cfg(), &[1, 1]),
            );
            note(
                "lengths",
                o.submit_next_level_group(&chip, vec![a()], &cfg(), &[0, 1]),
            );
            note(
                "group worker",
                o.submit_next_level_group(&chip, vec![a(), a()], &cfg(), &[0, 5]),
            );
            note("chip to sub", o.submit_sub(&chip, a()));
            note("sub to chip", o.submit_next_level(&sub, a(), &cfg(), 0));
            note("unregistered", o.submit_sub(&gone, TaskArgs::new()));
            note("foreign", o.submit_next_level(&foreign, a(), &cfg(), 0));
            let on1 = add_args(&dev1, &y, 0);
            note("other chip", o.submit_next_level(&chip, on1, &cfg(), 0));
            let dev_sub = TaskArgs::new().scalar(1).tensor(dev1.clone(), Tag::Input);
            note("device to sub", o.submit_sub(&sub, dev_sub));
            note(
                "freed",
                o.submit_next_level(&chip, add_args(&freed, &y, 0), &cfg(), 0),
            );
            note(
                "oversized",
                o.submit_next_level(&chip, add_args(&oversized, &y, 0), &cfg(), 1),
            );
            note(
                "sub group",
                o.submit_sub_group(&sub, vec![TaskArgs::new(); 3]),
            );
            note("copy host dst", o.copy_to(&x, &y));
            note("copy sizes", o.copy_to(&dev1, &block(&x, 0, 4)));
            Ok(())
        })
        .unwrap();
    assert_eq!(report.tasks, 0, "nothing refused entered the graph");
    let refusals = refusals.lock().unwrap();
    let expect = [
        (
            "unknown worker",
            "UNKNOWN_WORKER",
            vec!["worker 7", "chip", "has 2"],
        ),
        (
            "duplicate",
            "INVALID_ARGUMENT",
            vec!["`workers`", "appears twice"],
        ),
        (
            "lengths",
            "INVALID_ARGUMENT",
            vec!["`args_list`", "1 argument lists for 2"],
        ),
        ("group worker", "UNKNOWN_WORKER", vec!["worker 5"]),
        (
            "chip to sub",
            "INVALID_ARGUMENT",
            vec!["`handle`", "chip callable", "submit_next_level"],
        ),
        (
            "sub to chip",
            "INVALID_ARGUMENT",
            vec!["`handle`", "sub callable", "submit_sub"],
        ),
        ("unregistered", "UNKNOWN_CALLABLE", vec!["unregistered"]),
        ("foreign", "UNKNOWN_CALLABLE", vec!["another worker"]),
        (
            "other chip",
            "INVALID_ARGUMENT",
            vec!["`args[0]`", "chip 1", "chip 0"],
        ),
        (
            "device to sub",
            "INVALID_ARGUMENT",
            vec!["`args[1]`", "sub task"],
        ),
        (
            "freed",
            "INVALID_ARGUMENT",
            vec!["`args[0]`", "not a live allocation"],
        ),
        (
            "oversized",
            "INVALID_ARGUMENT",
            vec!["`args[0]`", "exceeds"],
        ),
        (
            "sub group",
            "INVALID_ARGUMENT",
            vec!["`args_list`", "this worker has 2"],
        ),
        (
            "copy host dst",
            "INVALID_ARGUMENT",
            vec!["`dst`", "child tensor"],
        ),
        ("copy sizes", "INVALID_ARGUMENT", vec!["`src`", "16 bytes"]),
    ];
    assert_eq!(refusals.len(), expect.len());
    for ((what, err), (want, kind, words)) in refusals.iter().zip(expect) {
        assert_eq!(what, want);
        assert_eq!(err.kind(), kind, "{what}: {err}");
        for word in words {
            assert!(
                err.to_string().contains(word),
                "{what}: `{word}` not in: {err}"
            );
        }
    }
    w.close().unwrap();
}

#[test]
fn the_orchestrator_and_the_worker_refuse_calls_out_of_their_place() {
    let (w, chip) = worker(1, 0);
    let chip = chip.unwrap();
    let kept: Mutex<Option<Orchestrator>> = Mutex::new(None);
    let inner = Mutex::new(None);
    w.run(|o| {
        // A clone works from another thread while the function runs.
        let o2 = o.clone();
        let t = std::thread::scope(|s| s.spawn(move || o2.alloc(&[4], DataType::Float32)).join());
        assert!(t.unwrap().is_ok());
        *kept.lock().unwrap() = Some(o.clone());
        let nested = w.submit(|_| Ok(()));
        *inner.lock().unwrap() = Some((nested.map(|_| ()), w.close(), w.unregister(&chip)));
        Ok(())
    })
    .unwrap();
    let (nested, close, unregister) = inner.into_inner().unwrap().unwrap();
    for (e, what) in [
        (nested.unwrap_err(), "submit()"),
        (close.unwrap_err(), "close()"),
        (unregister.unwrap_err(), "unregister()"),
    ] {
        assert_eq!(e.kind(), "INVALID_STATE");
        assert!(e.to_string().contains(what) && e.to_string().contains("inside an orchestration"));
    }
    let o = kept.into_inner().unwrap().unwrap();
    let err = o.scope_begin().unwrap_err();
    assert!(
        err.to_string()
            .contains("only inside its orchestration function"),
        "{err}"
    );
    let err = o.alloc(&[4], DataType::Float32).unwrap_err();
    assert!(err.to_string().contains("orch.alloc()"), "{err}");

    // close() from another thread than init's is refused; from init's it closes, once.
    let w = Arc::new(w);
    let w2 = w.clone();
    let err = std::thread::spawn(move || w2.close())
        .join()
        .unwrap()
        .unwrap_err();
    assert!(
        err.to_string().contains("thread that called init()"),
        "{err}"
    );
    w.run(|_| Ok(())).unwrap();
    w.close().unwrap();
    w.close().unwrap();
    assert_eq!(w.run(|_| Ok(())).unwrap_err().kind(), "CLOSED");
    assert_eq!(
        w.register(add_one_callable("late")).unwrap_err().kind(),
        "CLOSED"
    );
}

#[test]
fn init_refuses_what_cannot_run_and_rolls_back() {
    let err = Worker::new(WorkerOptions {
        level: 2,
        ..options(1, 0)
    })
    .unwrap_err();
    assert!(err.to_string().contains("level"), "{err}");

    let w = Worker::new(options(1, 0)).unwrap();
    let err = w.run(|_| Ok(())).unwrap_err();
    assert!(err.to_string().contains("init() first"), "{err}");
    let (_, sub) = flag();
    w.register(sub).unwrap();
    let err = w.init().unwrap_err();
    assert_eq!(err.kind(), "INVALID_CONFIG");
    assert!(
        err.to_string().contains("no sub workers")
            && err
                .to_string()
                .contains("`sub_workers` / Python's `num_sub_workers`")
            && err.to_string().contains("pass num_sub_workers=1"),
        "{err}"
    );
    let err = w.init().unwrap_err();
    assert!(err.to_string().contains("called already"), "{err}");

    let (w, _) = worker(1, 0);
    let (_, sub) = flag();
    let err = w.register(sub).unwrap_err();
    assert!(
        err.to_string().contains("`callable`")
            && err
                .to_string()
                .contains("no sub workers; give it sub workers")
    );
    assert!(w.init().unwrap_err().to_string().contains("called already"));
    w.close().unwrap();

    // Chip 1's configuration is refused: chip 0 (started) is shut down again.
    let mut o = options(2, 1);
    o.chips[1].aicpu_thread_num = 99;
    let w = Worker::new(o).unwrap();
    let err = w.init().unwrap_err();
    assert_eq!(err.kind(), "STARTUP_FAILED");
    assert!(err.to_string().contains("chip 1") && err.to_string().contains("aicpu_thread_num"));
    assert!(w.child_pids().is_empty());

    // A serialized callable cannot run on sub worker threads.
    let w = Worker::new(options(0, 1)).unwrap();
    w.register(Callable::SubSerialized {
        name: "py_fn".into(),
        payload: Arc::from(&b"pickle"[..]),
    })
    .unwrap();
    let err = w.init().unwrap_err();
    assert!(err.to_string().contains("sub worker 0") && err.to_string().contains("py_fn"));
    let (w, _) = worker(0, 1);
    let err = w
        .register(Callable::SubSerialized {
            name: "py_fn".into(),
            payload: Arc::from(&b"pickle"[..]),
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("needs sub worker processes"),
        "{err}"
    );
    w.close().unwrap();
}

#[test]
fn callables_register_after_init_and_unregister_between_runs() {
    let (w, _) = worker(1, 1);
    let late_chip = w.register(add_one_callable("late")).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let c2 = count.clone();
    let late_sub = w
        .register(closure(move |_| {
            c2.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }))
        .unwrap();
    let (_xr, x) = f32_buffer(&w, &[1.0; N as usize]);
    let (_yr, y) = f32_buffer(&w, &[0.0; N as usize]);
    w.run(|o| {
        o.submit_next_level(&late_chip, add_args(&x, &y, 0), &cfg(), 0)?;
        o.submit_sub(&late_sub, TaskArgs::new())?;
        Ok(())
    })
    .unwrap();
    assert_eq!(tensor_f32(&y), vec![2.0; N as usize]);
    assert_eq!(count.load(Ordering::SeqCst), 1);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = Mutex::new(rx);
    let hold = w
        .register(closure(move |_| {
            rx.lock().unwrap().recv().map_err(|e| e.to_string())
        }))
        .unwrap();
    let h = w
        .submit(|o| o.submit_sub(&hold, TaskArgs::new()).map(|_| ()))
        .unwrap();
    let err = w.unregister(&late_sub).unwrap_err();
    assert!(err.to_string().contains("runs are in flight"), "{err}");
    tx.send(()).unwrap();
    h.result().unwrap();
    w.unregister(&late_sub).unwrap();
    w.unregister(&late_chip).unwrap();
    let err = w
        .run(|o| o.submit_sub(&late_sub, TaskArgs::new()).map(|_| ()))
        .unwrap_err();
    assert_eq!(err.kind(), "ORCHESTRATION_FAILED");
    assert!(err.to_string().contains("unregistered"), "{err}");
    w.close().unwrap();
}

#[test]
fn a_chip_task_is_checked_against_its_signature_at_submit() {
    let (w, h) = worker(1, 0);
    let h = h.unwrap();
    let (_, x) = f32_buffer(&w, &[1.0; N as usize]);
    let (_, y) = f32_buffer(&w, &[0.0; N as usize]);
    let (_, short) = f32_buffer(&w, &[0.0; 4]);
    let ran = Arc::new(AtomicUsize::new(0));
    let cases: Vec<(TaskArgs, &str)> = vec![
        (
            TaskArgs::new().tensor(x.clone(), Tag::Input),
            "takes 3 arguments",
        ),
        (
            TaskArgs::new()
                .tensor(x.clone(), Tag::Input)
                .scalar(0)
                .scalar(0),
            "`y` of `add_one`",
        ),
        (
            TaskArgs::new()
                .tensor(x.clone(), Tag::Input)
                .tensor(y.clone(), Tag::Input)
                .scalar(0),
            "tag INPUT does not agree",
        ),
        (
            TaskArgs::new()
                .tensor(x.clone(), Tag::Input)
                .tensor(x.clone(), Tag::Output)
                .scalar(0),
            "shares memory",
        ),
    ];
    for (args, says) in cases {
        let ran = ran.clone();
        let r = w.run(|o| {
            let e = o.submit_next_level(&h, args, &cfg(), 0).unwrap_err();
            assert_eq!(e.kind(), "INVALID_ARGUMENT", "{e}");
            assert!(e.to_string().contains(says), "{says}: {e}");
            ran.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        assert_eq!(r.unwrap().tasks, 0, "nothing was admitted");
    }
    assert_eq!(ran.load(Ordering::SeqCst), 4);
    // A dtype the signature does not declare is named too.
    let bytes = Tensor::new(short.memory().clone(), &[16], DataType::Uint8).unwrap();
    w.run(|o| {
        let e = o
            .submit_next_level(&h, add_args(&x, &bytes, 0), &cfg(), 0)
            .unwrap_err();
        assert!(
            e.to_string().contains("(`y` of `add_one`) dtype is u8"),
            "{e}"
        );
        Ok(())
    })
    .unwrap();
}
