//! Ordering by the tensor map across chips and sub workers (RAW, WAR, WAW, several
//! producers), no false dependency between disjoint strided views, and the pipeline of two
//! runs in flight. Each dependency test would fail if the engine missed the edge: the
//! producer is held back (a gated kernel, a sleeping closure) so an unordered consumer
//! would see the old bytes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use simpler_abi::DataType;
use simpler_host::CallConfig;
use simpler_worker::*;

const N: u64 = 64;

fn cfg() -> CallConfig {
    CallConfig::default()
}

#[test]
fn a_sub_task_reads_what_a_chip_wrote_and_a_chip_reads_what_a_sub_task_wrote() {
    let w = Worker::new(options(1, 2)).unwrap();
    let chip = w.register(add_one_callable("add_one")).unwrap();
    let seen: Arc<Mutex<Vec<f32>>> = Arc::default();
    let seen2 = seen.clone();
    let read = w
        .register(closure(move |a| {
            *seen2.lock().unwrap() = a.read_f32(0)?;
            Ok(())
        }))
        .unwrap();
    let slow_write = w
        .register(closure(|a| {
            std::thread::sleep(Duration::from_millis(50));
            a.write_f32(0, &[5.0; N as usize])
        }))
        .unwrap();
    w.init().unwrap();
    let (_xr, x) = f32_buffer(&w, &[1.0; N as usize]);
    let (_yr, y) = f32_buffer(&w, &[0.0; N as usize]);
    let (_zr, z) = f32_buffer(&w, &[0.0; N as usize]);
    let gate = Gate::close();
    let held = u64::from(gate.func());
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        gate.open();
    });
    // RAW chip -> sub: the chip's write is held back by the gate.
    let report = w
        .run(|o| {
            o.submit_next_level(&chip, add_args(&x, &y, held), &cfg(), 0)?;
            o.submit_sub(&read, TaskArgs::new().tensor(y.clone(), Tag::Input))?;
            Ok(())
        })
        .unwrap();
    opener.join().unwrap();
    assert_eq!(report.edges, 1);
    assert_eq!(*seen.lock().unwrap(), vec![2.0; N as usize]);
    // RAW sub -> chip: the sub task writes x late.
    w.run(|o| {
        o.submit_sub(&slow_write, TaskArgs::new().tensor(x.clone(), Tag::Output))?;
        o.submit_next_level(&chip, add_args(&x, &z, 0), &cfg(), 0)?;
        Ok(())
    })
    .unwrap();
    assert_eq!(tensor_f32(&z), vec![6.0; N as usize]);
    w.close().unwrap();
}

#[test]
fn a_writer_waits_for_earlier_readers_and_writers() {
    let w = Worker::new(options(1, 2)).unwrap();
    let chip = w.register(add_one_callable("add_one")).unwrap();
    // Reads its input twice, 50 ms apart: a write in between fails the task.
    let steady_read = w
        .register(closure(|a| {
            let before = a.read(0)?;
            std::thread::sleep(Duration::from_millis(50));
            if a.read(0)? != before {
                return Err("the input changed while it was read".into());
            }
            Ok(())
        }))
        .unwrap();
    let write_7 = w
        .register(closure(|a| a.write_f32(0, &[7.0; N as usize])))
        .unwrap();
    let slow_write_1 = w
        .register(closure(|a| {
            std::thread::sleep(Duration::from_millis(50));
            a.write_f32(0, &[1.0; N as usize])
        }))
        .unwrap();
    w.init().unwrap();
    let (_xr, x) = f32_buffer(&w, &[3.0; N as usize]);
    let (_yr, y) = f32_buffer(&w, &[0.0; N as usize]);

    // WAR sub -> sub.
    let report = w
        .run(|o| {
            o.submit_sub(&steady_read, TaskArgs::new().tensor(x.clone(), Tag::Input))?;
            o.submit_sub(&write_7, TaskArgs::new().tensor(x.clone(), Tag::Output))?;
            Ok(())
        })
        .unwrap();
    assert_eq!(report.edges, 1);
    assert_eq!(tensor_f32(&x), vec![7.0; N as usize]);

    // WAR chip -> sub: the chip's read of x is held back by the gate.
    let gate = Gate::close();
    let held = u64::from(gate.func());
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        gate.open();
    });
    w.run(|o| {
        o.submit_next_level(&chip, add_args(&x, &y, held), &cfg(), 0)?;
        o.submit_sub(&slow_write_1, TaskArgs::new().tensor(x.clone(), Tag::InOut))?;
        Ok(())
    })
    .unwrap();
    opener.join().unwrap();
    assert_eq!(
        tensor_f32(&y),
        vec![8.0; N as usize],
        "the chip read x before it was overwritten"
    );

    // WAW sub -> chip: the late sub write must land first.
    w.run(|o| {
        o.submit_sub(
            &slow_write_1,
            TaskArgs::new().tensor(y.clone(), Tag::Output),
        )?;
        o.submit_next_level(&chip, add_args(&x, &y, 0), &cfg(), 0)?;
        Ok(())
    })
    .unwrap();
    assert_eq!(
        tensor_f32(&y),
        vec![2.0; N as usize],
        "the chip's write is the last"
    );
    w.close().unwrap();
}

#[test]
fn a_consumer_waits_for_every_producer_of_what_it_reads() {
    let w = Worker::new(options(1, 2)).unwrap();
    let chip = w.register(add_one_callable("add_one")).unwrap();
    let half_writer = w
        .register(closure(|a| {
            let ms = a.scalar(1).unwrap_or(0);
            std::thread::sleep(Duration::from_millis(ms));
            a.write_f32(0, &vec![ms as f32; (N / 2) as usize])
        }))
        .unwrap();
    w.init().unwrap();
    let (_yr, y) = f32_buffer(&w, &[0.0; N as usize]);
    let (_zr, z) = f32_buffer(&w, &[0.0; N as usize]);
    let report = w
        .run(|o| {
            for (half, ms) in [(0, 40u64), (1, 80)] {
                let args = TaskArgs::new()
                    .tensor(block(&y, half * N / 2, N / 2), Tag::Output)
                    .scalar(ms);
                o.submit_sub(&half_writer, args)?;
            }
            o.submit_next_level(&chip, add_args(&y, &z, 0), &cfg(), 0)?;
            Ok(())
        })
        .unwrap();
    assert_eq!(
        report.edges, 2,
        "the halves are disjoint; the reader waits for both"
    );
    let z = tensor_f32(&z);
    assert!(z[..N as usize / 2].iter().all(|v| *v == 41.0), "{z:?}");
    assert!(z[N as usize / 2..].iter().all(|v| *v == 81.0), "{z:?}");
    w.close().unwrap();
}

#[test]
fn column_blocks_of_one_matrix_run_at_once_and_a_reader_of_the_whole_waits_for_both() {
    let w = Worker::new(options(0, 2)).unwrap();
    let arrived = Arc::new(AtomicUsize::new(0));
    let a2 = arrived.clone();
    // Once both met, the blocks' tasks also wait for the graph to be built (live edges).
    let built = Arc::new(AtomicBool::new(true));
    let b2 = built.clone();
    // Both blocks' tasks must be running at once to pass this rendezvous.
    let rendezvous = w
        .register(closure(move |a| {
            a2.fetch_add(1, Ordering::SeqCst);
            let patience = Duration::from_millis(a.scalar(1).unwrap_or(5000));
            let deadline = Instant::now() + patience;
            while a2.load(Ordering::SeqCst) < 2 {
                if Instant::now() > deadline {
                    return Err("the other column block never ran alongside".into());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            while !b2.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        }))
        .unwrap();
    let read_all = w.register(closure(|a| a.read(0).map(|_| ()))).unwrap();
    w.init().unwrap();
    // A 4 x 8 row-major f32 matrix; its left and right 4 x 4 blocks interleave in memory.
    let region = w.create_buffer(4 * 8 * 4).unwrap();
    let m: Arc<dyn HostMemory> = region;
    let view = |col: u64| {
        Tensor::view(
            Memory::Host(m.clone()),
            col * 4,
            &[4, 4],
            &[8, 1],
            DataType::Float32,
        )
        .unwrap()
    };
    let whole = Tensor::new(Memory::Host(m.clone()), &[4, 8], DataType::Float32).unwrap();
    built.store(false, Ordering::SeqCst);
    let handle = w
        .submit(|o| {
            for col in [0, 4] {
                let args = TaskArgs::new().tensor(view(col), Tag::Output).scalar(5000);
                o.submit_sub(&rendezvous, args)?;
            }
            o.submit_sub(&read_all, TaskArgs::new().tensor(whole.clone(), Tag::Input))?;
            Ok(())
        })
        .unwrap();
    built.store(true, Ordering::SeqCst);
    let report = handle.result().unwrap();
    assert_eq!(arrived.load(Ordering::SeqCst), 2);
    assert_eq!(
        report.edges, 2,
        "no edge between the blocks; two into the reader"
    );
    // Overlapping views (columns 2..6 against 0..4) are ordered.
    arrived.store(0, Ordering::SeqCst);
    let err = w
        .run(|o| {
            for col in [0, 2] {
                let args = TaskArgs::new().tensor(view(col), Tag::Output).scalar(300);
                o.submit_sub(&rendezvous, args)?;
            }
            Ok(())
        })
        .unwrap_err();
    assert!(err.to_string().contains("never ran alongside"), "{err}");
    w.close().unwrap();
}

#[test]
fn the_next_run_is_built_while_the_first_runs_and_a_third_waits_for_a_place() {
    let w = Arc::new(Worker::new(options(0, 1)).unwrap());
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let blocker = w
        .register(closure(move |_| {
            release_rx
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(20))
                .map_err(|e| e.to_string())
        }))
        .unwrap();
    let ran: Arc<Mutex<Vec<u32>>> = Arc::default();
    let ran2 = ran.clone();
    let mark = w
        .register(closure(move |a| {
            ran2.lock().unwrap().push(a.scalar(0).unwrap() as u32);
            Ok(())
        }))
        .unwrap();
    w.init().unwrap();

    let first = w
        .submit(|o| o.submit_sub(&blocker, TaskArgs::new()).map(|_| ()))
        .unwrap();
    let built = AtomicBool::new(false);
    let second = w
        .submit(|o| {
            built.store(true, Ordering::SeqCst);
            o.submit_sub(&mark, TaskArgs::new().scalar(2)).map(|_| ())
        })
        .unwrap();
    assert!(built.load(Ordering::SeqCst));
    assert!(
        !first.done(),
        "the second run's orchestration ran while the first runs"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        ran.lock().unwrap().is_empty(),
        "the second run waits for the head run"
    );

    let third_built = Arc::new(AtomicBool::new(false));
    let (w3, t3, mark3) = (w.clone(), third_built.clone(), mark.clone());
    let third = std::thread::spawn(move || {
        w3.run(|o| {
            t3.store(true, Ordering::SeqCst);
            o.submit_sub(&mark3, TaskArgs::new().scalar(3)).map(|_| ())
        })
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !third_built.load(Ordering::SeqCst),
        "two runs are in flight: the third waits for a place"
    );
    release_tx.send(()).unwrap();
    first.wait(Some(Duration::from_secs(20))).unwrap();
    second.wait(Some(Duration::from_secs(20))).unwrap();
    third.join().unwrap().unwrap();
    assert_eq!(*ran.lock().unwrap(), [2, 3]);
    assert!(second.id() > first.id());
    Arc::into_inner(w).unwrap().close().unwrap();
}
