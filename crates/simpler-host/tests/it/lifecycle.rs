//! The callable registry and the worker lifecycle on the sim device (`docs/health.md`,
//! "Registry" and "Lifecycle"): explicit and automatic ids in one namespace, the shared
//! image cache, occupancy generations, −1 on failure, mutation refused while a run is
//! outstanding; the borrowed context check (refused, restored, retried with the same handle),
//! CLOSED terminal, a failed close that keeps retryable cleanup, dropping an unclosed worker
//! (handles detached, resources kept), and `RunPreparationRefused` for a proven rollback.
//! The real `fork()` test (child refuses, parent continues) is a unit test of the worker,
//! where it can hold the lane's lock across the fork.

use std::num::NonZeroU64;
use std::sync::Arc;

use crate::common::*;
use simpler_device::sim::{FaultAction, FaultPoint, FaultRule};
use simpler_device::Device;
use simpler_host::lifecycle::{current_context, enter_context};
use simpler_host::*;

#[test]
fn explicit_and_automatic_ids_share_one_namespace_and_one_image_cache() {
    let (_dev, w, first) = worker();
    assert_eq!(first, CallableId(0));
    let st0 = w.image_cache_stats();
    // An equal image gets a distinct id and shares the load.
    let second = w.register(&spec("inc-again")).unwrap();
    assert_eq!(second, CallableId(1));
    let st1 = w.image_cache_stats();
    assert_eq!(st1.uploads, st0.uploads, "nothing loaded again");
    assert_eq!(
        st1.shared,
        st0.shared + 1 + spec("x").kernels.len() as u64,
        "the orchestration and every kernel shared"
    );
    assert_eq!(st1.live_images, st0.live_images);
    // Explicit ids: in range and free, else invalid-argument.
    assert_eq!(
        w.register_with_id(10, &spec("ten")).unwrap(),
        CallableId(10)
    );
    for (id, why) in [
        (10, "taken"),
        (64, "out of range"),
        (u32::MAX, "out of range"),
    ] {
        let r = w.register_with_id(id, &spec("x"));
        assert!(
            matches!(&r, Err(e @ HostError::InvalidArgument { arg, reason }) if arg == "callable_id" && reason.contains(why) && e.is_invalid_argument()),
            "{id}: {r:?}"
        );
    }
    // Automatic ids skip explicit ones.
    assert_eq!(w.register(&spec("auto")).unwrap(), CallableId(2));
    // Every occupancy has its own generation; reuse of an id gets a new one.
    let g10 = w.callable_info(CallableId(10)).unwrap().generation;
    w.unregister(CallableId(10)).unwrap();
    assert_eq!(w.callable_info(CallableId(10)), None);
    w.register_with_id(10, &spec("ten-again")).unwrap();
    let info = w.callable_info(CallableId(10)).unwrap();
    assert_ne!(info.generation, g10);
    assert_eq!(info.name, "ten-again");
    // The checked accessor answers the same occupancy, signature included.
    assert_eq!(w.registered_callable(CallableId(10)).unwrap(), info);
    assert_eq!(*info.signature, spec("ten-again").signature);
    assert!(matches!(
        w.registered_callable(CallableId(11)),
        Err(HostError::UnknownCallable(11))
    ));
    // Both ids sharing an image run.
    for id in [first, second] {
        check_output(w.submit(id, args(4.0, 0)).unwrap().result().unwrap(), 4.0);
    }
    // Fill the table: automatic registration is then invalid-state, and the out-parameter
    // form writes −1.
    while w.register(&spec("fill")).is_ok() {}
    let r = w.register(&spec("one more"));
    assert!(matches!(&r, Err(e) if e.is_invalid_state()), "{r:?}");
    let mut out = 5;
    assert!(w.register_v2(&spec("v2"), &mut out).is_err());
    assert_eq!(out, -1);
    w.unregister(CallableId(63)).unwrap();
    w.register_v2(&spec("v2"), &mut out).unwrap();
    assert_eq!(out, 63);
    w.close().unwrap();
}

#[test]
fn the_registry_is_not_mutated_while_a_run_is_outstanding() {
    let (_dev, w, id) = worker();
    let gate = Gate::close();
    let h = w.submit(id, args(1.0, gate.func().into())).unwrap();
    let mut out = 9;
    let rows: Vec<(&str, Result<(), HostError>)> = vec![
        ("register", w.register(&spec("b")).map(drop)),
        (
            "register_with_id",
            w.register_with_id(7, &spec("b")).map(drop),
        ),
        ("register_v2", w.register_v2(&spec("b"), &mut out)),
        ("unregister", w.unregister(id)),
    ];
    for (name, r) in rows {
        assert!(
            matches!(&r, Err(HostError::InvalidState(m)) if m.contains("outstanding")),
            "{name}: {r:?}"
        );
    }
    assert_eq!(out, -1);
    assert!(w.callable_info(CallableId(7)).is_none());
    gate.open();
    check_output(h.result().unwrap(), 1.0);
    w.register_with_id(7, &spec("b")).unwrap();
    w.unregister(id).unwrap();
    w.close().unwrap();
}

#[test]
fn a_registration_with_a_timeout_waits_for_no_run_outstanding_or_says_how_many() {
    let (_dev, w, id) = worker();
    let gate = Gate::close();
    let h = w.submit(id, args(1.0, gate.func().into())).unwrap();
    let short = std::time::Duration::from_millis(100);
    let rows: Vec<(&str, Result<(), HostError>)> = vec![
        (
            "register_timeout",
            w.register_timeout(&spec("b"), short).map(drop),
        ),
        ("unregister_timeout", w.unregister_timeout(id, short)),
    ];
    for (name, r) in rows {
        match &r {
            Err(
                e @ HostError::RegistryBusy {
                    outstanding,
                    waited,
                },
            ) => {
                assert_eq!((*outstanding, *waited), (1, short), "{name}");
                assert!(e.is_invalid_state(), "{name}");
                let text = e.to_string();
                assert!(
                    text.contains("timed out") && text.contains("1 run(s)"),
                    "{name}: {text}"
                );
            }
            other => panic!("{name}: expected RegistryBusy, got {other:?}"),
        }
    }
    assert!(
        w.callable_info(CallableId(1)).is_none(),
        "nothing registered"
    );
    assert!(w.callable_info(id).is_some(), "nothing removed");
    // The same registration, given time, goes through once the held run ends.
    let long = std::time::Duration::from_secs(60);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(200));
            gate.open();
        });
        let b = w.register_timeout(&spec("b"), long).unwrap();
        assert!(h.poll(), "registered only once no run was outstanding");
        w.unregister_timeout(b, long).unwrap();
    });
    check_output(h.result().unwrap(), 1.0);
    // Threads that keep running runs do not starve a waiting registration: new submits
    // wait behind it while the lane drains.
    let registered = std::thread::scope(|s| {
        let runners: Vec<_> = (0..4)
            .map(|t| {
                let w = &w;
                s.spawn(move || {
                    for i in 0..20 {
                        let seed = (t * 100 + i) as f32;
                        check_output(w.submit(id, args(seed, 0)).unwrap().result().unwrap(), seed);
                    }
                })
            })
            .collect();
        let ids: Vec<CallableId> = (0..5)
            .map(|i| {
                w.register_timeout(&spec(&format!("busy{i}")), long)
                    .unwrap()
            })
            .collect();
        for r in runners {
            r.join().unwrap();
        }
        ids
    });
    for id in registered {
        assert!(w.callable_info(id).is_some());
        w.unregister_timeout(id, long).unwrap();
    }
    w.close().unwrap();
}

#[test]
fn a_borrowed_context_is_checked_refused_and_retried_with_the_same_handle() {
    let dev = small_device();
    let g = NonZeroU64::new(900).unwrap();
    // Creating a borrowed worker needs its context current.
    let r = ChipWorker::borrowed(config(), dev.clone() as Arc<dyn Device>, g);
    assert!(
        matches!(r, Err(HostError::ExecutionContextRefused(_))),
        "{r:?}"
    );
    let ctx = enter_context(g);
    let w = ChipWorker::borrowed(config(), dev.clone() as Arc<dyn Device>, g).unwrap();
    assert_eq!(w.identity().ownership, Ownership::Borrowed);
    assert_eq!(w.identity().context_generation, g);
    let id = w.register(&spec("inc")).unwrap();
    let x = w.malloc((N * 4) as u64).unwrap();
    let y = w.malloc((N * 4) as u64).unwrap();
    w.copy_to(x, &f32_bytes(&input(2.0))).unwrap();
    let caller = dev.create_stream().unwrap();
    let gate = Gate::close();
    let h = w
        .submit_on_stream(
            id,
            device_args(x, y, gate.func().into()),
            &CallConfig::default(),
            caller,
        )
        .unwrap();
    drop(ctx);
    assert_eq!(current_context(), None);
    // Without the context every operation refuses and changes nothing.
    let refused = |r: Result<(), HostError>, what: &str| {
        assert!(
            matches!(r, Err(HostError::ExecutionContextRefused(_))),
            "{what}: {r:?}"
        )
    };
    refused(h.wait(None), "wait");
    refused(h.try_poll().map(drop), "poll");
    refused(w.register(&spec("c")).map(drop), "register");
    refused(w.malloc(64).map(drop), "malloc");
    refused(w.close(), "close");
    refused(w.state().map(drop), "state");
    // Another context is not this one either.
    {
        let _other = enter_context(NonZeroU64::new(901).unwrap());
        refused(h.wait(None), "wait in another context");
    }
    gate.open();
    // Restored: the same handle waits, the worker closes.
    let _ctx = enter_context(g);
    h.wait(None).unwrap();
    let mut out = vec![0u8; N * 4];
    w.copy_from(&mut out, y).unwrap();
    check_bytes(&out, 2.0);
    assert_eq!(
        w.state().unwrap(),
        WorkerState::Open,
        "the refused close changed nothing"
    );
    w.close().unwrap();
}

#[test]
fn closed_is_terminal() {
    let (_dev, w, id) = worker();
    w.close().unwrap();
    assert_eq!(w.state().unwrap(), WorkerState::Closed { debt: false });
    let rows: Vec<(&str, Result<(), HostError>)> = vec![
        ("submit", w.submit(id, args(0.0, 0)).map(drop)),
        ("register", w.register(&spec("x")).map(drop)),
        ("unregister", w.unregister(id)),
        ("malloc", w.malloc(64).map(drop)),
        ("recover", w.recover_device()),
    ];
    for (name, r) in rows {
        assert!(matches!(r, Err(HostError::WorkerClosed)), "{name}: {r:?}");
    }
    w.close().unwrap();
    assert_eq!(w.state().unwrap(), WorkerState::Closed { debt: false });
}

#[test]
fn a_failed_close_stays_closed_with_retryable_cleanup() {
    let (dev, w, id) = worker();
    check_output(w.submit(id, args(0.0, 0)).unwrap().result().unwrap(), 0.0);
    let before = dev.live_allocations();
    assert!(before > 0);
    dev.inject(FaultRule::always(FaultPoint::Free, FaultAction::Refuse));
    let r = w.close();
    assert!(matches!(r, Err(HostError::CleanupIncomplete(_))), "{r:?}");
    assert_eq!(w.state().unwrap(), WorkerState::Closed { debt: true });
    assert_eq!(
        dev.live_allocations(),
        before,
        "what could not be freed is kept"
    );
    assert!(matches!(
        w.submit(id, args(0.0, 0)),
        Err(HostError::WorkerClosed)
    ));
    dev.clear_faults();
    w.close().unwrap();
    assert_eq!(w.state().unwrap(), WorkerState::Closed { debt: false });
    assert_eq!(dev.live_allocations(), 0, "the retry freed everything");
}

#[test]
fn dropping_an_unclosed_worker_detaches_its_handles_and_keeps_what_it_cannot_prove_free() {
    // A run on the device when the worker is dropped: its handle ends with Detached, and its
    // staging, slot and streams are kept.
    let (dev, w, id) = worker();
    let gate = Gate::close();
    let h = w.submit(id, args(1.0, gate.func().into())).unwrap();
    let held = dev.live_allocations();
    drop(w);
    let r = h.wait(None);
    assert!(matches!(r, Err(HostError::Detached(_))), "{r:?}");
    assert_eq!(
        dev.live_allocations(),
        held,
        "nothing the run may touch was freed"
    );
    gate.open();

    // An idle worker dropped without close: everything is provably free.
    let (dev, w, id) = worker();
    check_output(w.submit(id, args(1.0, 0)).unwrap().result().unwrap(), 1.0);
    drop(w);
    assert_eq!(dev.live_allocations(), 0);
}

#[test]
fn a_proven_preparation_rollback_is_run_preparation_refused() {
    let (dev, w, id) = worker();
    let baseline = dev.live_allocations();
    // The second staging allocation fails; the first is freed: proven.
    dev.inject(FaultRule::nth(FaultPoint::Malloc, 2, FaultAction::Refuse));
    let h = w.submit(id, args(1.0, 0)).unwrap();
    let epoch = h.epoch();
    let r = h.wait(None);
    match &r {
        Err(HostError::RunPreparationRefused { epoch: e, cause }) => {
            assert_eq!(*e, epoch, "matched by epoch");
            assert!(matches!(**cause, HostError::Device { .. }), "{cause}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(dev.live_allocations(), baseline);
    assert!(w.unusable_reason().is_none(), "admission stays open");
    // `run` reports it too, and leaves the host buffers untouched (no staging is pooled yet,
    // so its first staging allocation is the refused one).
    dev.inject(FaultRule::next(FaultPoint::Malloc, FaultAction::Refuse));
    let mut x = f32_bytes(&input(0.0));
    let mut y = vec![7u8; N * 4];
    let mut host = host_args(&mut x, &mut y);
    assert!(matches!(
        w.run(id, &mut host),
        Err(HostError::RunPreparationRefused { .. })
    ));
    assert!(y.iter().all(|&b| b == 7));
    check_output(w.submit(id, args(2.0, 0)).unwrap().result().unwrap(), 2.0);
    w.close().unwrap();
}

#[test]
fn an_unproven_preparation_rollback_keeps_its_borrows_and_poisons_admission() {
    let (dev, w, id) = worker();
    let baseline = dev.live_allocations();
    // The second staging allocation fails and the rollback's free of the first fails too.
    dev.inject(FaultRule::nth(FaultPoint::Malloc, 2, FaultAction::Refuse));
    dev.inject(FaultRule::next(FaultPoint::Free, FaultAction::Refuse));
    let h = w.submit(id, args(1.0, 0)).unwrap();
    let r = h.wait(None);
    assert!(
        matches!(r, Err(HostError::Device { .. })),
        "the original error: {r:?}"
    );
    assert_eq!(
        dev.live_allocations(),
        baseline + 1,
        "the unfreed staging is kept"
    );
    assert!(w.unusable_reason().is_some(), "admission is poisoned");
    assert!(matches!(
        w.submit(id, args(2.0, 0)),
        Err(HostError::DeviceUnusable(_))
    ));
    // Teardown's forced reset proves it, and frees it.
    w.close().unwrap();
    assert_eq!(dev.live_allocations(), 0);
}
