//! The executor bench end to end, on both executors, with tiny sample counts and a 1 s idle
//! window: every figure is there, positive and finite, the thread counts were read, and the
//! report serializes with both executors' keys. No timing is judged (the machine is shared
//! and the samples are few).
//!
//! One test only: the thread counts and the CPU time are the process's, and a second test
//! running beside it would move them.

use std::time::Duration;

use simpler_bench::executor::{
    measure_report, ExecutorBenchError, ExecutorFigures, ExecutorParams, Stats,
    CHIP_ROUND_TRIPS_PER_RUN, FLOOR_SAMPLES_PER_RUN, RECORD_READS_PER_RUN, RECORD_READ_SUCCESSORS,
    ROUND_TRIPS_PER_RUN,
};
use simpler_device::sim::ExecutorKind;

fn positive(what: &str, s: &Stats, samples: usize) {
    assert!(s.is_positive(), "{what}: {s:?}");
    assert!(s.p99 > 0.0 && s.samples == samples, "{what}: {s:?}");
}

fn finite_ratio(what: &str, r: f64) {
    assert!(r.is_finite() && r > 0.0, "{what}: {r}");
}

fn check(f: &ExecutorFigures, p: &ExecutorParams) {
    let runs = p.runs as usize;
    positive("empty run", &f.empty_run_us, ROUND_TRIPS_PER_RUN * runs);
    positive("1-task run", &f.one_task_run_us, ROUND_TRIPS_PER_RUN * runs);
    // Slow-tail times are at least the median; slow-tail rates at most.
    assert!(f.empty_run_us.p99 >= f.empty_run_us.median);
    let s = &f.short_runs;
    positive("depth 1", &s.depth1_runs_per_s, runs);
    positive("depth 2", &s.depth2_runs_per_s, runs);
    assert!(s.depth1_runs_per_s.p99 <= s.depth1_runs_per_s.median);
    finite_ratio("depth2/depth1", s.depth2_over_depth1);
    let t = &f.throughput;
    assert_eq!(t.tasks_per_run, p.tasks);
    for (what, s) in [
        ("independent 24", &t.independent_24_tasks_per_s),
        ("independent 72", &t.independent_72_tasks_per_s),
        ("chain 24", &t.chain_24_tasks_per_s),
        ("chain 72", &t.chain_72_tasks_per_s),
        ("submit", &t.submit_us_per_task),
    ] {
        positive(what, s, runs);
    }
    finite_ratio("independent 72/24", t.independent_72_over_24);
    finite_ratio("chain 72/24", t.chain_72_over_24);
    let c = &f.chips;
    assert_eq!(c.chips, p.chips);
    positive("chip start", &c.start_ms, p.chips as usize);
    assert_eq!(
        c.round_trips_per_chip as usize,
        CHIP_ROUND_TRIPS_PER_RUN * runs
    );
    assert!(c.threads_before >= 1 && c.threads_after >= 1, "{c:?}");
    positive(
        "concurrent empty run",
        &c.concurrent_empty_run_us,
        (p.chips * c.round_trips_per_chip) as usize,
    );
    finite_ratio("chips/one chip", f.chips_over_one_chip);
    let idle = f.idle.as_ref().expect("an idle window was asked for");
    assert!(idle.secs >= p.idle.as_secs_f64(), "{idle:?}");
    assert!(idle.cpu_ms.is_finite() && idle.cpu_ms >= 0.0, "{idle:?}");
    assert!(idle.context_switches_per_s.is_finite() && idle.context_switches_per_s >= 0.0);
    assert!(idle.threads >= 1);
    let r = &f.record_read;
    let sizes: Vec<u64> = r.points.iter().map(|p| p.successor_tasks).collect();
    assert_eq!(sizes, RECORD_READ_SUCCESSORS);
    for point in &r.points {
        positive("record read", &point.us, RECORD_READS_PER_RUN * runs);
    }
    finite_ratio("record read largest/smallest", r.largest_over_smallest);
}

#[test]
fn both_executors_report_every_figure() {
    let params = ExecutorParams {
        runs: 1,
        tasks: 64,
        idle: Duration::from_secs(1),
        chips: 8,
    };
    let report = measure_report(&[ExecutorKind::ThreadPerCore, ExecutorKind::Pool], &params)
        .expect("the bench runs");
    positive("floor", &report.floor_us, FLOOR_SAMPLES_PER_RUN);
    assert!(report.host_cpus >= 1 && report.pool_threads >= 1);
    let threads = &report.executors["threads"];
    let pool = &report.executors["pool"];
    assert_eq!((threads.executor, pool.executor), ("threads", "pool"));
    check(threads, &params);
    check(pool, &params);
    // One OS thread per simulated core and AICPU thread, against fibers on a shared pool:
    // the old executor adds threads with every chip, the pool (started by its earlier
    // figures) adds fewer.
    assert!(
        threads.chips.threads_per_chip >= 24.0,
        "{:?}",
        threads.chips
    );
    assert!(
        pool.chips.threads_per_chip < threads.chips.threads_per_chip,
        "{:?}",
        pool.chips
    );
    assert_eq!(
        threads.pool_threads_started, 0,
        "the pool is untouched so far"
    );
    assert!(pool.pool_threads_started >= 1);

    let json = serde_json::to_value(&report).unwrap();
    for key in ["floor_us", "targets", "params", "host_cpus", "pool_threads"] {
        assert!(json.get(key).is_some(), "{key} missing: {json}");
    }
    for name in ["threads", "pool"] {
        let e = &json["executors"][name];
        for key in [
            "empty_run_us",
            "one_task_run_us",
            "short_runs",
            "throughput",
            "chips",
            "chips_over_one_chip",
            "idle",
            "record_read",
        ] {
            assert!(e.get(key).is_some(), "{name}.{key} missing: {e}");
        }
        assert!(e["empty_run_us"]["p99"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(json["params"]["idle_secs"], 1.0);

    let bad = ExecutorParams { runs: 0, ..params };
    match measure_report(&[ExecutorKind::Pool], &bad) {
        Err(ExecutorBenchError::InvalidParam { name: "runs", .. }) => {}
        other => panic!("runs 0 accepted: {other:?}"),
    }
}
