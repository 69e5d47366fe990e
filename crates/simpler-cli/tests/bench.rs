//! Command-line tests of `simpler bench --balance` and `simpler bench --executor`: the flags
//! they take and refuse, and the shape of their reports. The figures themselves are never
//! judged here (the tests run with 1 ms tasks, or one sample per figure, on a loaded
//! machine); `docs/chip-runtime.md` and `docs/sim-device.md` say what they mean.

mod common;

use common::{simpler, text};

#[test]
fn balance_reports_one_point_per_scheduler_and_cluster_count() {
    let dir = tempfile::tempdir().unwrap();
    let o = simpler(
        &[
            "bench",
            "--balance",
            "--json",
            "--task-ms",
            "1",
            "--runs",
            "1",
        ],
        dir.path(),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(report["task_ms"], 1);
    let points = report["points"].as_array().expect("points");
    let mut seen: Vec<(u64, u64)> = points
        .iter()
        .map(|p| {
            let (s, c) = (
                p["schedulers"].as_u64().unwrap(),
                p["clusters"].as_u64().unwrap(),
            );
            assert_eq!(p["tasks"].as_u64(), Some(3 * c), "one task per core: {p}");
            let ratio = p["worst_ratio"].as_f64().unwrap();
            assert!(ratio >= p["median_ratio"].as_f64().unwrap(), "{p}");
            // Each task sleeps one task time, so no makespan is shorter.
            assert!(ratio >= 1.0, "{p}");
            (s, c)
        })
        .collect();
    seen.sort_unstable();
    let want: Vec<(u64, u64)> = [1, 3, 6]
        .into_iter()
        .flat_map(|s| [1, 5, 8, 24].map(|c| (s, c)))
        .collect();
    assert_eq!(seen, want);
}

#[test]
fn balance_flags_are_refused_where_they_do_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["bench", "--full"][..],
        &["bench", "--task-ms", "10"],
        &["bench", "--balance", "--tasks", "5"],
        &["bench", "--balance", "--task-ms", "0"],
    ] {
        let o = simpler(args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {:?}", text(&o));
    }
}

#[test]
fn executor_both_reports_both_executors_with_the_floor_and_the_targets() {
    let dir = tempfile::tempdir().unwrap();
    let o = simpler(
        &[
            "bench",
            "--executor",
            "both",
            "--json",
            "--runs",
            "1",
            "--tasks",
            "32",
            "--idle-secs",
            "1",
        ],
        dir.path(),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert!(
        report["floor_us"]["median"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert_eq!(report["targets"]["empty_run_us"]["value"], 20.0);
    assert_eq!(report["params"]["tasks"], 32);
    assert_eq!(report["params"]["idle_secs"], 1.0);
    let executors = report["executors"].as_object().expect("executors");
    let mut names: Vec<&str> = executors.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["pool", "threads"]);
    for (name, e) in executors {
        assert_eq!(e["executor"], name.as_str());
        assert_eq!(e["throughput"]["tasks_per_run"], 32);
        for figure in [
            &e["empty_run_us"],
            &e["one_task_run_us"],
            &e["throughput"]["chain_72_tasks_per_s"],
            &e["chips"]["concurrent_empty_run_us"],
        ] {
            let median = figure["median"].as_f64().unwrap();
            assert!(median.is_finite() && median > 0.0, "{name}: {figure}");
        }
        assert!(
            e["chips"]["threads_after"].as_u64().unwrap() >= 1,
            "{name}: {e}"
        );
        assert!(e["idle"]["cpu_ms"].as_f64().unwrap() >= 0.0, "{name}: {e}");
        assert_eq!(e["record_read"]["points"].as_array().unwrap().len(), 4);
    }
}

#[test]
fn executor_table_names_every_figure_and_its_target() {
    let dir = tempfile::tempdir().unwrap();
    let o = simpler(
        &[
            "bench",
            "--executor",
            "pool",
            "--runs",
            "1",
            "--tasks",
            "16",
            "--idle-secs",
            "0",
        ],
        dir.path(),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    for line in [
        "floor (park/unpark round trip",
        "empty-run round trip",
        "1-task run round trip",
        "short runs, depth 2 / depth 1",
        "chain, 72 / 24 cores",
        "submit cost",
        "8 chips at once / one chip",
        "idle worker: CPU time",
        "record read, successor 2048 tasks",
        "record read, largest / smallest",
        "<= 20 us",
        ">= 300k/s",
    ] {
        assert!(out.contains(line), "{line:?} missing:\n{out}");
    }
    assert!(
        !out.contains("pool gain"),
        "one executor, no gain column:\n{out}"
    );
}

#[test]
fn executor_flags_are_refused_where_they_do_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["bench", "--idle-secs", "1"][..],
        &["bench", "--executor", "both", "--balance"],
        &["bench", "--executor", "fibers"],
        &["bench", "--executor", "pool", "--runs", "0"],
    ] {
        let o = simpler(args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {:?}", text(&o));
    }
}
