//! The engine over chip child processes: chips named by their configured device ids, runs
//! on shared buffers, private memory refused at submit, a chip child that crashes fails its
//! task with ENDPOINT_FAILURE and is refused after while the other chip goes on; close
//! leaves no child.

use std::sync::Arc;
use std::time::Duration;

use crate::process_common::*;
use simpler_abi::DataType;
use simpler_host::CallConfig;
use simpler_worker::*;

#[test]
fn chips_in_child_processes_run_fail_alone_and_leave_nothing() {
    let _serial = serial();
    let before = children();
    let w = Worker::new(WorkerOptions {
        chips: vec![small_chip(); 2],
        device_ids: vec![4, 9],
        chip_isolation: ChipIsolation::Process,
        chip_program: Some(child_program()),
        sub_workers: SubWorkers::Threads(1),
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    })
    .unwrap();
    let chip = w.register(Callable::Chip(callable())).unwrap();
    w.init().unwrap();
    let pids = w.child_pids();
    assert_eq!(pids.len(), 2, "{pids:?}");
    // Each chip is named by its configured device id (every sim child's device says 0).
    for ((name, pid), (i, d)) in pids.iter().zip([(0, 4), (1, 9)]) {
        assert_eq!(name, &format!("chip {i} (device {d}, pid {pid})"));
    }
    let buffers = XyBuffers::new(&w);
    let (xr, yr, x) = (&buffers.xr, &buffers.yr, &buffers.x);
    write_f32(xr, 0, &(0..N).map(|i| i as f32).collect::<Vec<_>>());
    let y = |c: u64| buffers.y(c);
    let args = |y: Tensor, mode: u64| {
        TaskArgs::new()
            .tensor(x.clone(), Tag::Input)
            .tensor(y, Tag::Output)
            .scalar(mode)
    };
    let cfg = CallConfig::default();
    let report = w
        .run(|o| {
            o.submit_next_level(&chip, args(y(0), AFFINE), &cfg, 0)?;
            o.submit_next_level(&chip, args(y(1), AFFINE), &cfg, 1)?;
            // An intermediate from the heap ring crosses to a child as well.
            let mid = o.alloc(&[N as u64], DataType::Float32)?;
            o.submit_next_level(
                &chip,
                TaskArgs::new()
                    .tensor(y(0), Tag::Input)
                    .tensor(mid, Tag::Output)
                    .scalar(AFFINE),
                &cfg,
                1,
            )?;
            Ok(())
        })
        .unwrap();
    assert_eq!((report.tasks, report.edges), (3, 1));
    let out = read_f32(yr, 0, 2 * N);
    for i in 0..N {
        assert_eq!(out[i], 2.0 * i as f32 + 1.0);
        assert_eq!(out[N + i], 2.0 * i as f32 + 1.0);
    }
    // Private memory cannot reach a child.
    let private: Arc<dyn HostMemory> = Arc::new(VecMemory::new(vec![0; N * 4]));
    let p = Tensor::new(Memory::Host(private), &[N as u64], DataType::Float32).unwrap();
    let err = w.run(|o| {
        let e = o
            .submit_next_level(
                &chip,
                TaskArgs::new()
                    .tensor(p.clone(), Tag::Input)
                    .tensor(y(0), Tag::Output)
                    .scalar(0),
                &cfg,
                0,
            )
            .unwrap_err();
        assert!(
            e.to_string().contains("`args[0]`") && e.to_string().contains("create_buffer"),
            "{e}"
        );
        Ok(())
    });
    err.unwrap();
    // Chip 0's child crashes.
    let err = w
        .run(|o| {
            o.submit_next_level(&chip, args(y(0), SEGV), &cfg, 0)?;
            o.submit_next_level(&chip, args(y(1), AFFINE), &cfg, 1)?;
            Ok(())
        })
        .unwrap_err();
    eprintln!("crash: {err}");
    assert_eq!(err.root_cause().kind(), "ENDPOINT_FAILURE");
    assert!(err.to_string().contains("chip 0 (device 4, pid "), "{err}");
    let e = w
        .run(|o| {
            o.submit_next_level(&chip, args(y(0), AFFINE), &cfg, 0)
                .map(|_| ())
        })
        .unwrap_err();
    assert!(e.to_string().contains("refused"), "{e}");
    w.run(|o| {
        o.submit_next_level(&chip, args(y(1), AFFINE), &cfg, 1)
            .map(|_| ())
    })
    .unwrap();
    w.close().unwrap();
    for (_, pid) in pids {
        assert!(
            gone_within(pid, Duration::from_secs(5)),
            "child {pid} is gone"
        );
    }
    assert_eq!(children(), before);
}
