//! The figures of one chip's run lane, on a worker whose sim device uses a given executor:
//! round trips (an empty run, a 1-task run), short runs kept two in flight at launch
//! depth 1 and 2, and the predecessor's record read with a successor queued behind it
//! (`docs/lane.md`). Its callable, [`noops_callable`], submits `tasks` independent no-op AIV
//! tasks and takes no tensors, so nothing is staged: only the lane's and the device's own
//! costs are timed. This module measures through the public `ChipWorker` API only.

use std::collections::VecDeque;
use std::time::Instant;

use simpler_abi::*;
use simpler_device::sim::ExecutorKind;
use simpler_host::{
    ArgDirection, ArgSpec, CallableId, CallableSpec, ChipWorker, CodeImage, HostError, KernelSpec,
    OwnedArg, Signature, WorkerConfig,
};

use super::Stats;

/// Device heap of the workers here (their runs allocate nothing).
const HEAP_BYTES: u64 = 1 << 20;
/// Runs kept in flight by the short-runs figure.
const IN_FLIGHT: usize = 2;

unsafe extern "C-unwind" fn noop_kernel(_args: *mut i64) {}

/// Submits `scalars[0]` independent no-op AIV tasks (none for 0: an empty run).
unsafe extern "C-unwind" fn noops_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid tables and arguments.
    let (ops, args) = unsafe { (&*ops, &*args) };
    // SAFETY: TaskDesc is plain data; all-zero is a valid starting point.
    let mut d: Box<TaskDesc> = Box::new(unsafe { std::mem::zeroed() });
    d.size = std::mem::size_of::<TaskDesc>() as u32;
    d.kernel_ids = [NO_KERNEL; 3];
    d.kernel_ids[LANE_AIV0] = 0;
    d.block_num = 1;
    for _ in 0..args.scalars[0] {
        // SAFETY: the runtime's table with its own handle.
        let rc = unsafe { (ops.submit_task)(ops.runtime, &*d, std::ptr::null_mut()) };
        if rc != 0 {
            return rc;
        }
    }
    0
}

/// The callable of the lane figures: one scalar (`tasks`) and one no-op AIV kernel.
pub fn noops_callable() -> CallableSpec {
    CallableSpec {
        name: "noops".into(),
        signature: Signature::new(vec![ArgSpec {
            name: "tasks".into(),
            direction: ArgDirection::Scalar,
            dtype: DataType::Uint64,
            shape: None,
        }])
        .expect("a valid signature"),
        orchestration: CodeImage::Orchestration(noops_orch),
        kernels: vec![KernelSpec {
            func_id: 0,
            core_type: CoreType::Aiv,
            image: CodeImage::Kernel(noop_kernel),
            name: None,
        }],
        runtime: None,
    }
}

/// A worker on the default chip (24 cores, 4 AICPU threads) running its cores on
/// `executor`, at `launch_depth`, with [`noops_callable`] registered.
///
/// # Errors
/// Any [`HostError`] of the worker.
pub fn noops_worker(
    executor: ExecutorKind,
    launch_depth: u32,
) -> Result<(ChipWorker, CallableId), HostError> {
    let worker = ChipWorker::new(WorkerConfig {
        launch_depth,
        heap_size: HEAP_BYTES,
        sim_executor: executor,
        ..WorkerConfig::default()
    })?;
    let id = worker.register(&noops_callable())?;
    Ok((worker, id))
}

/// One run of `tasks` no-op tasks, submitted and waited for.
///
/// # Errors
/// The run's [`HostError`].
pub fn round_trip(worker: &ChipWorker, id: CallableId, tasks: u64) -> Result<(), HostError> {
    worker.submit(id, vec![OwnedArg::Scalar(tasks)])?.wait(None)
}

/// `samples` round trips of runs of `tasks` no-op tasks (after one warm-up), each timed
/// from submit to the end of its wait, microseconds.
///
/// # Errors
/// The first [`HostError`].
pub fn round_trip_us(
    worker: &ChipWorker,
    id: CallableId,
    tasks: u64,
    samples: usize,
) -> Result<Vec<f64>, HostError> {
    round_trip(worker, id, tasks)?;
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        round_trip(worker, id, tasks)?;
        out.push(start.elapsed().as_secs_f64() * 1e6);
    }
    Ok(out)
}

/// Runs per second of short runs (`tasks` tasks each) kept [`IN_FLIGHT`] in flight, at the
/// worker's launch depth: `samples` batches of `batch` runs each (after one warm-up batch).
///
/// # Errors
/// The first [`HostError`].
pub fn short_runs_per_s(
    worker: &ChipWorker,
    id: CallableId,
    tasks: u64,
    batch: usize,
    samples: usize,
) -> Result<Stats, HostError> {
    let run_batch = || -> Result<f64, HostError> {
        let start = Instant::now();
        let mut in_flight = VecDeque::with_capacity(IN_FLIGHT);
        for _ in 0..batch {
            if in_flight.len() == IN_FLIGHT {
                let oldest: simpler_host::RunHandle = in_flight.pop_front().expect("a run");
                oldest.wait(None)?;
            }
            in_flight.push_back(worker.submit(id, vec![OwnedArg::Scalar(tasks)])?);
        }
        for h in in_flight {
            h.wait(None)?;
        }
        Ok(start.elapsed().as_secs_f64())
    };
    run_batch()?;
    let seconds = (0..samples)
        .map(|_| run_batch())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Stats::of_rate(batch as f64, &seconds))
}

/// The predecessor's record read with a successor of `successor_tasks` tasks queued behind
/// it: submit the predecessor (1 task) and the successor, time only the predecessor's
/// wait, then wait for the successor; `samples` times (after one warm-up), microseconds.
///
/// # Errors
/// The first [`HostError`].
pub fn record_read_us(
    worker: &ChipWorker,
    id: CallableId,
    successor_tasks: u64,
    samples: usize,
) -> Result<Stats, HostError> {
    let once = || -> Result<f64, HostError> {
        let pred = worker.submit(id, vec![OwnedArg::Scalar(1)])?;
        let succ = worker.submit(id, vec![OwnedArg::Scalar(successor_tasks)])?;
        let start = Instant::now();
        pred.wait(None)?;
        let us = start.elapsed().as_secs_f64() * 1e6;
        succ.wait(None)?;
        Ok(us)
    };
    once()?;
    let us = (0..samples)
        .map(|_| once())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Stats::of_times(&us))
}
