//! Process-wide figures of one executor: many chips in one process (each chip's start
//! time, the OS threads each adds, empty-run round trips on all of them at once) and an
//! idle worker's cost (CPU time and context switches while nothing runs). Measures
//! through the public `ChipWorker` API and [`super::process`]; changes nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use serde::Serialize;
use simpler_device::sim::ExecutorKind;

use super::lane::{noops_worker, round_trip, round_trip_us};
use super::process::{context_switches, cpu_time, os_threads, switches_between};
use super::{ExecutorBenchError, Stats};

/// Many chips in one process.
#[derive(Clone, Debug, Serialize)]
pub struct ChipsFigures {
    /// ChipWorkers started (each on its own sim device, the default 24-core chip).
    pub chips: u32,
    /// Time to start each worker (`ChipWorker::new` and registering the callable), ms.
    pub start_ms: Stats,
    /// OS threads of the process before the first start.
    pub threads_before: u64,
    /// OS threads of the process with every chip started.
    pub threads_after: u64,
    /// (threads_after − threads_before) ÷ chips.
    pub threads_per_chip: f64,
    /// Empty-run round trips each chip's host thread made (after one warm-up).
    pub round_trips_per_chip: u32,
    /// Empty-run round trip with every chip running at once, one host thread per chip,
    /// over all chips' samples, µs.
    pub concurrent_empty_run_us: Stats,
}

/// Starts `chips` workers on `executor` one after the other, timing each and counting the
/// process's OS threads around them, then makes `round_trips` empty-run round trips on all
/// of them at once (one host thread per chip, started together).
///
/// # Errors
/// The first [`ExecutorBenchError`] of a worker, a run, a host thread or `/proc`.
pub fn many_chips(
    executor: ExecutorKind,
    chips: u32,
    round_trips: u32,
) -> Result<ChipsFigures, ExecutorBenchError> {
    let threads_before = os_threads()?;
    let mut workers = Vec::with_capacity(chips as usize);
    let mut start_ms = Vec::with_capacity(chips as usize);
    for _ in 0..chips {
        let start = Instant::now();
        workers.push(noops_worker(executor, 2)?);
        start_ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let threads_after = os_threads()?;
    // Held while the host threads start: each makes its warm-up run, then waits on it, so
    // the measured round trips of all chips begin together.
    let gate = RwLock::new(());
    let abort = AtomicBool::new(false);
    let per_chip = std::thread::scope(|s| {
        let hold = gate
            .write()
            .expect("the gate is only ever held, never poisoned");
        let mut hosts = Vec::with_capacity(workers.len());
        let mut failed = None;
        for (i, (worker, id)) in workers.iter().enumerate() {
            let (gate, abort) = (&gate, &abort);
            let host = std::thread::Builder::new()
                .name(format!("bench-chip-{i}"))
                .spawn_scoped(s, move || {
                    round_trip(worker, *id, 0)?;
                    drop(gate.read());
                    if abort.load(Ordering::Acquire) {
                        return Ok(Vec::new());
                    }
                    round_trip_us(worker, *id, 0, round_trips as usize)
                });
            match host {
                Ok(h) => hosts.push(h),
                Err(e) => {
                    abort.store(true, Ordering::Release);
                    failed = Some(e);
                    break;
                }
            }
        }
        drop(hold);
        let samples: Vec<_> = hosts
            .into_iter()
            .map(|h| h.join().expect("a host thread of the bench panicked"))
            .collect();
        failed.map_or(Ok(samples), Err)
    });
    let mut all = Vec::new();
    for samples in per_chip.map_err(ExecutorBenchError::Spawn)? {
        all.extend(samples?);
    }
    for (worker, _) in &workers {
        worker.close()?;
    }
    Ok(ChipsFigures {
        chips,
        start_ms: Stats::of_times(&start_ms),
        threads_before,
        threads_after,
        threads_per_chip: (threads_after as f64 - threads_before as f64) / f64::from(chips),
        round_trips_per_chip: round_trips,
        concurrent_empty_run_us: Stats::of_times(&all),
    })
}

/// An idle worker's cost to the process.
#[derive(Clone, Debug, Serialize)]
pub struct IdleFigures {
    /// The idle window, seconds.
    pub secs: f64,
    /// CPU time (user + system) the process used during the window, ms.
    pub cpu_ms: f64,
    /// Context switches of the process's threads during the window, per second.
    pub context_switches_per_s: f64,
    /// OS threads of the process during the window.
    pub threads: u64,
}

/// Starts a worker on `executor`, makes one empty run on it, then sleeps `idle` and
/// reports what the process spent meanwhile (this thread, asleep, adds about nothing).
///
/// # Errors
/// The first [`ExecutorBenchError`] of the worker, its run or `/proc`.
pub fn idle_worker(
    executor: ExecutorKind,
    idle: Duration,
) -> Result<IdleFigures, ExecutorBenchError> {
    let (worker, id) = noops_worker(executor, 2)?;
    round_trip(&worker, id, 0)?;
    let (cpu0, sw0) = (cpu_time()?, context_switches()?);
    let start = Instant::now();
    std::thread::sleep(idle);
    let (cpu1, sw1) = (cpu_time()?, context_switches()?);
    let secs = start.elapsed().as_secs_f64();
    let threads = os_threads()?;
    worker.close()?;
    Ok(IdleFigures {
        secs,
        cpu_ms: cpu1.saturating_sub(cpu0).as_secs_f64() * 1e3,
        context_switches_per_s: switches_between(&sw0, &sw1) as f64 / secs,
        threads,
    })
}
