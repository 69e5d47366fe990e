//! Comm domains on chips in this process (`docs/comm.md`): every refusal of
//! `allocate_domain` names its field and makes nothing; contexts and windows are laid out as
//! `simpler_abi::comm` says and zeroed; an in-process kernel built on the Rust kernel-side
//! API (notify, wait, barrier) sums one value per rank over 2, 4 and 8 chips; a wait whose
//! peer never comes fails the task with `WAIT_TIMEOUT`; released domains refuse tasks and
//! free their name; a run's domains are freed once it is over; a chip is in two domains
//! with independent ranks.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{chip_config, f32_buffer};
use simpler_abi::comm::{self as comm, CommContext};
use simpler_abi::*;
use simpler_host::{ArgDirection, ArgSpec, CallableSpec, CodeImage, KernelSpec, Signature};
use simpler_worker::*;

/// Tensor argument `i` of a kernel.
fn tensor<'a>(args: *mut i64, i: usize) -> &'a ChipTensor {
    // SAFETY: the runtime passes tensor pointers in the first slots.
    unsafe { &*(*args.add(i) as *const ChipTensor) }
}

/// The allreduce kernel: tensor 0 the rank's window buffer (i32 × 32: element 0 the value,
/// element 16 the signal), tensor 1 the output (f32 × 1); scalars: device_ctx, the rank's
/// value, the wait timeout (µs).
unsafe extern "C-unwind" fn sum_ranks(args: *mut i64) {
    let r = std::panic::catch_unwind(|| {
        // SAFETY: the signature fixes two tensors and three scalars (slots 2..5).
        let (ctx, value, timeout) = unsafe {
            (
                *args.add(2) as u64 as *const CommContext,
                *args.add(3) as i32,
                *args.add(4) as u64,
            )
        };
        let win = tensor(args, 0);
        let base = (win.buffer_addr + win.start_offset * 4) as *mut i32;
        let out = tensor(args, 1);
        let out = (out.buffer_addr + out.start_offset * 4) as *mut f32;
        // SAFETY: `ctx` is the rank's context and `base` lies in its window (the test
        // passes them); peers' copies are reached through `peer_ptr`.
        unsafe {
            let c = &*ctx;
            let (me, n) = (c.rank_id, c.rank_num);
            let signal = base.add(16);
            base.write_volatile(value);
            for p in (0..n).filter(|p| *p != me) {
                let rc = comm::notify(ctx, signal, p, 1, comm::NOTIFY_ADD);
                if rc != 0 {
                    return rc;
                }
            }
            let rc = comm::wait(ctx, signal, comm::CMP_GE, n as i32 - 1, timeout);
            if rc != 0 {
                return rc;
            }
            let mut sum = 0i64;
            for p in 0..n {
                let peer = comm::peer_ptr(ctx, base as *const _, p) as *const i32;
                sum += i64::from(peer.read_volatile());
            }
            out.write(sum as f32);
            comm::barrier(ctx, timeout)
        }
    });
    let code = r.unwrap_or(999);
    if code != 0 {
        // SAFETY: `args` is the kernel's argument array.
        unsafe { comm::fail(args, code) };
    }
}

/// One sync-start AIV task (a blocking section on the sim) over the two tensors and three
/// scalars.
unsafe extern "C-unwind" fn orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args and its own table.
    unsafe {
        let a = &*args;
        // SAFETY: TaskDesc is plain data; all-zero is a valid start.
        let mut d: Box<TaskDesc> = Box::new(std::mem::zeroed());
        d.size = std::mem::size_of::<TaskDesc>() as u32;
        d.kernel_ids = [NO_KERNEL; 3];
        d.block_num = 1;
        d.flags = TASK_FLAG_REQUIRE_SYNC_START;
        d.kernel_ids[LANE_AIV0] = 0;
        for (i, tag) in [
            (0, TensorArgType::Inout),
            (1, TensorArgType::OutputExisting),
        ] {
            d.tensors[i] = a.tensors[i];
            d.tags[i] = tag as u32;
        }
        d.tensor_count = 2;
        for s in 0..3 {
            d.scalars[s] = a.scalars[s];
        }
        d.scalar_count = 3;
        ((*ops).submit_task)((*ops).runtime, &*d, std::ptr::null_mut())
    }
}

fn sum_callable() -> Callable {
    let tensor = |name: &str, direction, dtype| ArgSpec {
        name: name.into(),
        direction,
        dtype,
        shape: None,
    };
    let scalar = |name: &str| ArgSpec {
        name: name.into(),
        direction: ArgDirection::Scalar,
        dtype: DataType::Uint64,
        shape: None,
    };
    Callable::Chip(Arc::new(CallableSpec {
        name: "sum_ranks".into(),
        signature: Signature::new(vec![
            tensor("window", ArgDirection::InOut, DataType::Int32),
            tensor("out", ArgDirection::Out, DataType::Float32),
            scalar("device_ctx"),
            scalar("value"),
            scalar("timeout_us"),
        ])
        .unwrap(),
        orchestration: CodeImage::Orchestration(orch),
        kernels: vec![KernelSpec {
            func_id: 0,
            core_type: CoreType::Aiv,
            image: CodeImage::Kernel(sum_ranks),
            name: None,
        }],
        runtime: None,
    }))
}

fn worker(chips: usize) -> (Worker, CallableHandle) {
    let w = Worker::new(WorkerOptions {
        chips: vec![chip_config(); chips],
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    })
    .unwrap();
    let h = w.register(sum_callable()).unwrap();
    w.init().unwrap();
    (w, h)
}

fn spec(name: &str, dtype: DataType, count: u64) -> CommBufferSpec {
    CommBufferSpec {
        name: name.into(),
        dtype,
        count,
    }
}

fn buffers() -> Vec<CommBufferSpec> {
    vec![spec("win", DataType::Int32, 32)]
}

fn args(rank: &RankContext, out: &Tensor, value: i32, timeout_us: u64) -> TaskArgs {
    TaskArgs::new()
        .tensor(rank.buffer("win").unwrap().clone(), Tag::InOut)
        .tensor(out.clone(), Tag::OutputExisting)
        .scalar(rank.device_ctx)
        .scalar(value as u64)
        .scalar(timeout_us)
}

fn allreduce(chips: usize) {
    let (w, h) = worker(chips);
    let (regions, outs): (Vec<_>, Vec<_>) = (0..chips).map(|_| f32_buffer(&w, &[-1.0])).unzip();
    let members: Vec<usize> = (0..chips).rev().collect(); // rank r is chip chips-1-r
    w.run(|o| {
        let d = o.allocate_domain("ar", &members, 4096, &buffers())?;
        let list = members
            .iter()
            .map(|&c| args(d.rank_of(c).unwrap(), &outs[c], 10 + c as i32, 20_000_000))
            .collect();
        o.submit_next_level_group(&h, list, &Default::default(), &members)?;
        Ok(())
    })
    .unwrap();
    let want: i32 = (0..chips as i32).map(|c| 10 + c).sum();
    for (c, r) in regions.iter().enumerate() {
        assert_eq!(
            common::read_f32(&**r),
            vec![want as f32],
            "chip {c} of {chips}"
        );
    }
    drop(outs);
    w.close().unwrap();
}

#[test]
fn allreduce_over_2_4_and_8_chips() {
    for chips in [2, 4, 8] {
        allreduce(chips);
    }
}

#[test]
fn contexts_and_windows_follow_the_layout_and_start_zeroed() {
    let (w, _h) = worker(3);
    w.run(|o| {
        let d = o.allocate_domain(
            "lay",
            &[2, 0],
            5000,
            &[
                spec("a", DataType::Float32, 3),
                spec("b", DataType::Int32, 10),
            ],
        )?;
        assert_eq!(d.workers, vec![2, 0]);
        assert!(d.rank_of(1).is_none());
        for (r, rank) in d.ranks.iter().enumerate() {
            assert_eq!(rank.domain_rank as usize, r);
            assert_eq!(rank.domain_size, 2);
            assert_eq!(rank.actual_window_size, 8192);
            // In this process a device address is a host address (thread isolation).
            // SAFETY: the context lies in the domain's live mapping.
            let ctx = unsafe { &*(rank.device_ctx as *const CommContext) };
            assert_eq!(
                (ctx.rank_id, ctx.rank_num, ctx.win_size),
                (r as u32, 2, 8192)
            );
            assert_eq!(ctx.windows_in[r], rank.local_window_base);
            assert_eq!(ctx.windows_in[1 - r], d.ranks[1 - r].local_window_base);
            assert_eq!(ctx.windows_in[2], 0);
            assert_eq!(ctx.windows_out[..2], ctx.windows_in[..2]);
            // SAFETY: the workspace lies at the region's start.
            let ws = unsafe { &*(ctx.workspace as *const comm::CommWorkspace) };
            assert_eq!(
                (ws.magic, ws.version, ws.rank_num, ws.abort),
                (comm::MAGIC, 1, 2, 0)
            );
            // SAFETY: the window is 8192 mapped bytes.
            let window =
                unsafe { std::slice::from_raw_parts(ctx.windows_in[r] as *const u8, 8192) };
            assert!(
                window.iter().all(|b| *b == 0),
                "rank {r}'s window is zeroed"
            );
            let b = rank.buffer("b").unwrap();
            assert_eq!(
                b.byte_offset() - rank.buffer("a").unwrap().byte_offset(),
                64
            );
            assert_eq!(b.shape(), &[10]);
        }
        Ok(())
    })
    .unwrap();
    w.close().unwrap();
}

#[test]
fn every_refusal_names_its_field_and_makes_nothing() {
    let (w, _h) = worker(2);
    type Call = Box<dyn Fn(&Orchestrator) -> Result<CommDomain, WorkerError>>;
    let refusals: Vec<(&str, Call)> = vec![
        ("`name`", Box::new(|o| o.allocate_domain("", &[0], 64, &[]))),
        (
            "`workers`",
            Box::new(|o| o.allocate_domain("x", &[], 64, &[])),
        ),
        (
            "`workers`",
            Box::new(|o| o.allocate_domain("x", &[0, 0], 64, &[])),
        ),
        (
            "chip",
            Box::new(|o| o.allocate_domain("x", &[0, 2], 64, &[])),
        ),
        (
            "`workers`",
            Box::new(|o| o.allocate_domain("x", &vec![0; 65], 64, &[])),
        ),
        (
            "`window_size`",
            Box::new(|o| o.allocate_domain("x", &[0], 0, &[])),
        ),
        (
            "`window_size`",
            Box::new(|o| o.allocate_domain("x", &[0], u64::MAX, &[])),
        ),
        (
            "`buffers[1].name`",
            Box::new(|o| {
                o.allocate_domain(
                    "x",
                    &[0],
                    64,
                    &[spec("a", DataType::Int8, 1), spec("a", DataType::Int8, 1)],
                )
            }),
        ),
        (
            "`buffers[0].count`",
            Box::new(|o| o.allocate_domain("x", &[0], 64, &[spec("a", DataType::Int8, 0)])),
        ),
        (
            "`buffers`",
            Box::new(|o| o.allocate_domain("x", &[0], 64, &[spec("a", DataType::Float32, 17)])),
        ),
    ];
    w.run(|o| {
        for (field, call) in &refusals {
            let err = call(o).unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
        // A refused call made nothing: the name is free, and the next domain is the first.
        let d = o.allocate_domain("x", &[0, 1], 64, &[spec("a", DataType::Float32, 16)])?;
        let err = o
            .allocate_domain("x", &[1], 64, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("`name`") && err.contains("live"), "{err}");
        o.release_domain(&d)?;
        o.release_domain(&d)?; // idempotent
        o.allocate_domain("x", &[1], 64, &[])?; // a released name is free again
        Ok(())
    })
    .unwrap();
    w.close().unwrap();
}

#[test]
fn a_released_domain_refuses_tasks_and_a_run_frees_its_domains() {
    let (w, h) = worker(2);
    let (_r, out) = f32_buffer(&w, &[0.0]);
    let mut kept: Option<CommDomain> = None;
    w.run(|o| {
        let d = o.allocate_domain("rel", &[0, 1], 4096, &buffers())?;
        o.release_domain(&d)?;
        let err = o
            .submit_next_level(
                &h,
                args(d.rank_of(0).unwrap(), &out, 1, 1000),
                &Default::default(),
                0,
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("args[0]") && err.contains("not a live allocation"),
            "{err}"
        );
        kept = Some(d);
        Ok(())
    })
    .unwrap();
    // The orchestration returned and the run is over: its domain is freed; a forgotten
    // (never released) domain is swept the same way.
    w.run(|o| {
        o.allocate_domain("forgotten", &[0, 1], 4096, &buffers())?;
        Ok(())
    })
    .unwrap();
    let d = kept.unwrap();
    let err = w
        .run(|o| {
            o.submit_next_level(
                &h,
                args(d.rank_of(1).unwrap(), &out, 1, 1000),
                &Default::default(),
                1,
            )?;
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a live allocation"), "{err}");
    // A freed window cannot be freed as a child tensor either.
    let err = w
        .free_child_tensor(d.rank_of(0).unwrap().buffer("win").unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("tensor"), "{err}");
    w.close().unwrap();
}

#[test]
fn a_wait_whose_peer_never_comes_fails_the_task_with_wait_timeout() {
    let (w, h) = worker(2);
    let (_r, out) = f32_buffer(&w, &[0.0]);
    let started = Instant::now();
    let err = w
        .run(|o| {
            let d = o.allocate_domain("lonely", &[0, 1], 4096, &buffers())?;
            // Only rank 0 runs: its wait for rank 1's notify times out after 200 ms.
            o.submit_next_level(
                &h,
                args(d.rank_of(0).unwrap(), &out, 1, 200_000),
                &Default::default(),
                0,
            )?;
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("120"),
        "the comm wait timeout code is reported: {err}"
    );
    assert!(started.elapsed() < Duration::from_secs(20), "no hang");
    // The chip is usable afterwards.
    allreduce_on(&w, &h, &[0, 1]);
    w.close().unwrap();
}

fn allreduce_on(w: &Worker, h: &CallableHandle, members: &[usize]) {
    let (regions, outs): (Vec<_>, Vec<_>) = members.iter().map(|_| f32_buffer(w, &[0.0])).unzip();
    w.run(|o| {
        let d = o.allocate_domain("again", members, 4096, &buffers())?;
        let list = d
            .ranks
            .iter()
            .zip(&outs)
            .map(|(r, out)| args(r, out, 3, 20_000_000))
            .collect();
        o.submit_next_level_group(h, list, &Default::default(), members)?;
        Ok(())
    })
    .unwrap();
    for r in &regions {
        assert_eq!(common::read_f32(&**r), vec![3.0 * members.len() as f32]);
    }
}

#[test]
fn a_chip_in_two_domains_has_independent_ranks() {
    let (w, h) = worker(3);
    let (ra, outs_a): (Vec<_>, Vec<_>) = (0..2).map(|_| f32_buffer(&w, &[0.0])).unzip();
    let (rb, outs_b): (Vec<_>, Vec<_>) = (0..2).map(|_| f32_buffer(&w, &[0.0])).unzip();
    w.run(|o| {
        let a = o.allocate_domain("a", &[0, 1], 4096, &buffers())?;
        let b = o.allocate_domain("b", &[2, 1], 4096, &buffers())?;
        assert_eq!(a.rank_of(1).unwrap().domain_rank, 1);
        assert_eq!(b.rank_of(1).unwrap().domain_rank, 1);
        assert_eq!(b.rank_of(2).unwrap().domain_rank, 0);
        assert_ne!(
            a.rank_of(1).unwrap().device_ctx,
            b.rank_of(1).unwrap().device_ctx
        );
        let la = a
            .ranks
            .iter()
            .zip(&outs_a)
            .map(|(r, t)| args(r, t, 1 + r.worker as i32, 20_000_000))
            .collect();
        o.submit_next_level_group(&h, la, &Default::default(), &[0, 1])?;
        let lb = b
            .ranks
            .iter()
            .zip(&outs_b)
            .map(|(r, t)| args(r, t, 100 * r.worker as i32, 20_000_000))
            .collect();
        o.submit_next_level_group(&h, lb, &Default::default(), &[2, 1])?;
        Ok(())
    })
    .unwrap();
    for r in &ra {
        assert_eq!(common::read_f32(&**r), vec![3.0]);
    }
    for r in &rb {
        assert_eq!(common::read_f32(&**r), vec![300.0]);
    }
    w.close().unwrap();
}

#[test]
fn a_tensor_of_freed_child_memory_is_refused_even_at_a_reused_address() {
    let (w, _h) = worker(1);
    for _ in 0..4 {
        let old = w.alloc_child_tensor(0, &[256], DataType::Float32).unwrap();
        w.free_child_tensor(&old).unwrap();
        let new = w.alloc_child_tensor(0, &[256], DataType::Float32).unwrap();
        // Whether or not the allocator gave the same address, the old tensor is refused and
        // cannot free the new allocation.
        let err = w.free_child_tensor(&old).unwrap_err().to_string();
        assert!(err.contains("not a live allocation"), "{err}");
        w.free_child_tensor(&new).unwrap();
    }
    w.close().unwrap();
}
