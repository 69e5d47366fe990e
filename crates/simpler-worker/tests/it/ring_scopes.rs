//! The heap ring behind `orch.alloc` and scopes: heap per scope depth, reclamation once a
//! scope has ended and its tasks are over, RING_FULL after the deadlock timeout (or at once
//! for an allocation bigger than a heap), early `free`, and the scope rules.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use simpler_abi::DataType;
use simpler_host::CallConfig;
use simpler_worker::*;

/// 768 KiB of f32: only one fits in a 1 MiB heap.
const BIG: u64 = 768 * 1024 / 4;

fn ring_worker(timeout_ms: u64) -> (Worker, CallableHandle, CallableHandle, mpsc::Sender<()>) {
    let mut o = options(1, 1);
    o.deadlock_timeout = Duration::from_millis(timeout_ms);
    let w = Worker::new(o).unwrap();
    let chip = w.register(add_one_callable("add_one")).unwrap();
    let (tx, rx) = mpsc::channel::<()>();
    let rx = Mutex::new(rx);
    let hold = w
        .register(closure(move |_| {
            rx.lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(20))
                .map_err(|e| e.to_string())
        }))
        .unwrap();
    w.init().unwrap();
    (w, chip, hold, tx)
}

fn heap_of(t: &Tensor) -> SharedRef {
    let Memory::Host(m) = t.memory() else {
        panic!("a host tensor")
    };
    m.shared().expect("heap-ring memory is shared")
}

#[test]
fn each_scope_depth_has_its_heap_and_alloc_tensors_are_shared_memory_tasks_use() {
    let (w, chip, _hold, _tx) = ring_worker(200);
    let (_xr, x) = f32_buffer(&w, &[4.0; 256]);
    let (outr, out) = f32_buffer(&w, &[0.0; 256]);
    w.run(|o| {
        let mut regions = vec![heap_of(&o.alloc(&[16], DataType::Float32)?).region];
        for _ in 0..4 {
            o.scope_begin()?;
            regions.push(heap_of(&o.alloc(&[16], DataType::Float32)?).region);
        }
        for _ in 0..4 {
            o.scope_end()?;
        }
        assert_eq!(regions[3], regions[4], "depth 4 shares heap 3");
        regions.truncate(4);
        regions.sort_unstable();
        regions.dedup();
        assert_eq!(regions.len(), 4, "depths 0..3 have a heap each");
        // An intermediate from the ring between two chip tasks.
        let mid = o.alloc(&[256], DataType::Float32)?;
        assert_eq!(heap_of(&mid).offset % 1024, 0);
        let c = CallConfig::default();
        o.submit_next_level(&chip, add_args(&x, &mid, 0), &c, 0)?;
        o.submit_next_level(&chip, add_args(&mid, &out, 0), &c, 0)?;
        Ok(())
    })
    .unwrap();
    assert_eq!(read_f32(&*outr), vec![6.0; 256]);
    w.close().unwrap();
}

#[test]
fn an_allocation_that_never_fits_is_ring_full_after_the_deadlock_timeout() {
    let (w, _chip, _hold, _tx) = ring_worker(300);
    w.run(|o| {
        let _a = o.alloc(&[BIG], DataType::Float32)?;
        let t0 = Instant::now();
        let err = o.alloc(&[BIG], DataType::Float32).unwrap_err();
        assert!(
            t0.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(err.kind(), "RING_FULL");
        assert!(err.to_string().contains("deadlock timeout"), "{err}");
        let t0 = Instant::now();
        let err = o.alloc(&[1 << 20], DataType::Float32).unwrap_err();
        assert!(
            t0.elapsed() < Duration::from_millis(100),
            "too big fails at once"
        );
        assert!(err.to_string().contains("heap_ring_size"), "{err}");
        Ok(())
    })
    .unwrap();
    // The run's own scope ended: its allocation was reclaimed for the next run.
    w.run(|o| o.alloc(&[BIG], DataType::Float32).map(|_| ()))
        .unwrap();
    w.close().unwrap();
}

#[test]
fn an_ended_scope_is_reclaimed_once_the_tasks_naming_it_are_over() {
    let (w, _chip, hold, tx) = ring_worker(10_000);
    let released = Arc::new(AtomicBool::new(false));
    let r2 = released.clone();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        r2.store(true, Ordering::SeqCst);
        tx.send(()).unwrap();
    });
    w.run(|o| {
        let first = o.scope(|o| {
            let a = o.alloc(&[BIG], DataType::Float32)?;
            o.submit_sub(&hold, TaskArgs::new().tensor(a.clone(), Tag::Input))?;
            Ok(heap_of(&a))
        })?;
        let t0 = Instant::now();
        let second = o.scope(|o| o.alloc(&[BIG], DataType::Float32))?;
        assert!(
            released.load(Ordering::SeqCst),
            "served only after the task naming the first allocation ended"
        );
        assert!(t0.elapsed() >= Duration::from_millis(100));
        let second = heap_of(&second);
        assert_eq!((second.region, second.offset), (first.region, first.offset));
        Ok(())
    })
    .unwrap();
    releaser.join().unwrap();
    w.close().unwrap();
}

#[test]
fn free_releases_early_and_a_released_or_foreign_tensor_is_refused() {
    let (w, _chip, hold, tx) = ring_worker(200);
    let mut kept = None;
    w.run(|o| {
        let a = o.alloc(&[BIG], DataType::Float32)?;
        o.free(&a)?;
        let b = o.alloc(&[BIG], DataType::Float32)?;
        assert_eq!(
            heap_of(&b).offset,
            heap_of(&a).offset,
            "a was reclaimed at once"
        );
        let err = o.submit_sub(&hold, TaskArgs::new().tensor(a.clone(), Tag::Input));
        let err = err.unwrap_err().to_string();
        assert!(
            err.contains("args[0]") && err.contains("scope has ended"),
            "{err}"
        );
        assert!(o
            .free(&a)
            .unwrap_err()
            .to_string()
            .contains("released already"));
        let (_r, plain) = f32_buffer(&w, &[0.0; 4]);
        assert!(o
            .free(&plain)
            .unwrap_err()
            .to_string()
            .contains("not memory from orch.alloc"));
        kept = Some(b);
        Ok(())
    })
    .unwrap();
    let old = kept.unwrap();
    let err = w
        .run(|o| {
            let e = o.submit_sub(&hold, TaskArgs::new().tensor(old.clone(), Tag::Input));
            Err(e.unwrap_err())
        })
        .unwrap_err();
    assert!(err.to_string().contains("another run"), "{err}");
    drop(tx);
    w.close().unwrap();
}

#[test]
fn scopes_nest_64_deep_end_only_when_begun_and_close_when_the_orchestration_returns() {
    let (w, _chip, _hold, _tx) = ring_worker(300);
    w.run(|o| {
        let err = o.scope_end().unwrap_err();
        assert_eq!(err.kind(), "INVALID_STATE");
        assert!(
            err.to_string().contains("without a matching scope_begin"),
            "{err}"
        );
        for _ in 0..64 {
            o.scope_begin()?;
        }
        let err = o.scope_begin().unwrap_err();
        assert!(err.to_string().contains("at most 64"), "{err}");
        // Left open: the scopes close when the orchestration returns.
        o.alloc(&[BIG], DataType::Float32)?;
        Ok(())
    })
    .unwrap();
    w.run(|o| {
        for _ in 0..3 {
            o.scope_begin()?;
        }
        // Heap 3 again: the open scopes' allocation of the last run was reclaimed.
        o.alloc(&[BIG], DataType::Float32).map(|_| ())
    })
    .unwrap();
    // A scope closes even when its body fails.
    let err = w
        .run(|o| {
            let failed = o.scope(|o| {
                o.scope_begin()?;
                Err::<(), _>(WorkerError::InvalidArgument {
                    arg: "x".into(),
                    reason: "test".into(),
                })
            });
            assert!(failed.is_err());
            o.scope_end()?;
            o.scope_end()
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("without a matching scope_begin"),
        "{err}"
    );
    w.close().unwrap();
}
