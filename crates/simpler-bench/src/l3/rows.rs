//! The timed loops of the level-3 sweep: one worker per row, `Worker::run` of k
//! independent no-op tasks timed from the call to its return, ks interleaved round by round
//! so the machine's drift spreads over every k alike; and the L2 floor, `ChipWorker::run`
//! of the same callable. Measures through the public `Worker` and `ChipWorker` APIs and
//! changes nothing in either.

use std::sync::Arc;
use std::time::Instant;

use simpler_device::Topology;
use simpler_host::{CallConfig, CallableSpec, ChipWorker, WorkerConfig};
use simpler_worker::{
    Callable, CallableHandle, ChipIsolation, Orchestrator, SubWorkers, TaskArgs, Worker,
    WorkerError, WorkerOptions, MIN_HEAP_RING_SIZE,
};

use super::fit::Spread;
use super::{runs_for, L3BenchError, L3Params, Point, RowKind};

/// Rounds over every k run before the measured ones (lanes, children and the sim's pool
/// reach their steady state).
pub const WARM_UP_ROUNDS: u32 = 3;

/// Clusters of each sim chip of the sweep (3 AICore cores).
pub const CHIP_CLUSTERS: u32 = 1;

/// AICPU threads of each sim chip of the sweep (1 orchestrator + 1 scheduler).
pub const CHIP_AICPU_THREADS: u32 = 2;

/// The chip every chip row and the floor run on: the smallest sim chip
/// ([`CHIP_CLUSTERS`] cluster, [`CHIP_AICPU_THREADS`] AICPU threads), so its empty run,
/// the floor under every chip task, is as cheap as the sim makes it.
pub fn chip_config() -> WorkerConfig {
    WorkerConfig {
        topology: Topology {
            clusters: CHIP_CLUSTERS,
            aicpu_threads: CHIP_AICPU_THREADS,
        },
        heap_size: 1 << 20,
        task_window: 64,
        ..WorkerConfig::default()
    }
}

/// Samples of the L2 floor: `ChipWorker::run` of `spec` (no arguments) on one chip of
/// [`chip_config`], after a warm-up, µs each.
///
/// # Errors
/// The chip's [`simpler_host::HostError`].
pub fn floor_samples(spec: &CallableSpec, samples: u32) -> Result<Vec<f64>, L3BenchError> {
    let chip = ChipWorker::new(chip_config())?;
    let id = chip.register(spec)?;
    let mut out = Vec::with_capacity(samples as usize);
    for i in 0..WARM_UP_ROUNDS * 8 + samples {
        let start = Instant::now();
        chip.run(id, &mut [])?;
        let us = start.elapsed().as_secs_f64() * 1e6;
        if i >= WARM_UP_ROUNDS * 8 {
            out.push(us);
        }
    }
    chip.close()?;
    Ok(out)
}

/// The options of `row`'s worker under `params`.
fn options(row: RowKind, params: &L3Params) -> WorkerOptions {
    let base = WorkerOptions {
        heap_ring_size: MIN_HEAP_RING_SIZE,
        ..WorkerOptions::default()
    };
    match row {
        RowKind::ChipThread => WorkerOptions {
            chips: vec![chip_config(); params.chips],
            ..base
        },
        RowKind::ChipProcess => WorkerOptions {
            chips: vec![chip_config(); params.chips],
            chip_isolation: ChipIsolation::Process,
            chip_program: params.chip_program.clone(),
            ..base
        },
        RowKind::SubThread => WorkerOptions {
            sub_workers: SubWorkers::Threads(params.sub_workers),
            ..base
        },
    }
}

/// Starts `row`'s worker with its no-op callable registered: `spec` for a chip row, a
/// closure that returns at once for the sub row.
fn start(
    row: RowKind,
    params: &L3Params,
    spec: &Arc<CallableSpec>,
) -> Result<(Worker, CallableHandle), WorkerError> {
    let worker = Worker::new(options(row, params))?;
    let callable = match row {
        RowKind::ChipThread | RowKind::ChipProcess => Callable::Chip(spec.clone()),
        RowKind::SubThread => Callable::SubClosure(Arc::new(|_| Ok(()))),
    };
    let handle = worker.register(callable)?;
    worker.init()?;
    Ok((worker, handle))
}

/// Submits `k` independent no-op tasks of `handle`: chip tasks round-robin over `chips`
/// chips, or sub tasks to any idle sub worker.
fn submit(
    o: &Orchestrator,
    row: RowKind,
    handle: &CallableHandle,
    k: u64,
    chips: usize,
) -> Result<(), WorkerError> {
    let config = CallConfig::default();
    for i in 0..k {
        match row {
            RowKind::ChipThread | RowKind::ChipProcess => {
                o.submit_next_level(handle, TaskArgs::new(), &config, i as usize % chips)?
            }
            RowKind::SubThread => o.submit_sub(handle, TaskArgs::new())?,
        };
    }
    Ok(())
}

/// Measures `row` over `params.ks`: starts its worker, runs [`WARM_UP_ROUNDS`] rounds, then
/// round `r` times one `Worker::run` for every k with `r < runs_for(params.runs, k)`;
/// closes the worker. One [`Point`] per k, in `params.ks` order.
///
/// # Errors
/// The worker's [`WorkerError`]; [`L3BenchError::Miscounted`] when a run reports another
/// task count than it submitted.
pub fn measure_row(
    row: RowKind,
    params: &L3Params,
    spec: &Arc<CallableSpec>,
) -> Result<Vec<Point>, L3BenchError> {
    let (worker, handle) = start(row, params, spec)?;
    let runs: Vec<u32> = params
        .ks
        .iter()
        .map(|&k| runs_for(params.runs, k))
        .collect();
    let mut samples: Vec<Vec<f64>> = runs
        .iter()
        .map(|&n| Vec::with_capacity(n as usize))
        .collect();
    let rounds = runs.iter().copied().max().unwrap_or(0);
    for round in 0..WARM_UP_ROUNDS + rounds {
        for (i, &k) in params.ks.iter().enumerate() {
            let measured = round >= WARM_UP_ROUNDS;
            if measured && round - WARM_UP_ROUNDS >= runs[i] {
                continue;
            }
            let start = Instant::now();
            let report = worker.run(|o| submit(o, row, &handle, k, params.chips))?;
            let us = start.elapsed().as_secs_f64() * 1e6;
            if report.tasks as u64 != k {
                return Err(L3BenchError::Miscounted {
                    row: row.name(),
                    k,
                    tasks: report.tasks,
                });
            }
            if measured {
                samples[i].push(us);
            }
        }
    }
    worker.close()?;
    Ok(params
        .ks
        .iter()
        .zip(runs)
        .zip(samples)
        .map(|((&k, runs), s)| Point {
            k,
            runs,
            run_us: Spread::of(&s),
        })
        .collect())
}
