//! Command-line tests of `simpler bench --balance`, `--executor`, `--l3` and `--replay`: the flags
//! they take and refuse, and the shape of their reports. The figures themselves are never
//! judged here (the tests run with 1 ms tasks, or one sample per figure, on a loaded
//! machine); `docs/chip-runtime.md` and `docs/sim-device.md` say what they mean.

use crate::common::{simpler, text};

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

#[test]
fn l3_reports_every_row_at_every_k_with_its_fit_and_target() {
    let dir = tempfile::tempdir().unwrap();
    let o = simpler(
        &["bench", "--l3", "--json", "--runs", "1", "--tasks", "2"],
        dir.path(),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(report["params"]["ks"], serde_json::json!([1, 2]));
    assert_eq!(report["params"]["runs"], 1);
    assert_eq!(report["params"]["chips"], 4);
    assert!(
        report["floor_us"]["median"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert_eq!(report["upstream"]["fit"]["fixed_us"], 43.3);
    let rows = report["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().map(|r| r["row"].as_str().unwrap()).collect();
    assert_eq!(names, ["chip_thread", "chip_process", "sub_thread"]);
    for r in rows {
        let points = r["points"].as_array().unwrap();
        let ks: Vec<u64> = points.iter().map(|p| p["k"].as_u64().unwrap()).collect();
        assert_eq!(ks, [1, 2], "{r}");
        for p in points {
            let median = p["run_us"]["median"].as_f64().unwrap();
            assert!(median.is_finite() && median > 0.0, "{r}");
            assert_eq!(p["runs"], 1, "{r}");
        }
        assert!(r["fit"]["per_task_us"].as_f64().unwrap().is_finite(), "{r}");
    }
    assert_eq!(rows[0]["target"]["fixed_us"], 10.0);
    assert_eq!(rows[1]["target"]["per_task_us"], 5.0);
    assert!(rows[2]["target"].is_null() && rows[2]["met"].is_null());
    assert!(rows[1]["engine_one_task_us"].as_f64().is_some(), "{report}");
    assert!(rows[2]["engine_one_task_us"].is_null());
    assert!(rows[0]["engine_k1_us"].as_f64().is_some(), "{report}");
    assert!(rows[2]["engine_k1_us"].is_null());
}

#[test]
fn l3_table_prints_each_k_the_fits_their_targets_and_the_floor() {
    let dir = tempfile::tempdir().unwrap();
    let o = simpler(
        &["bench", "--l3", "--runs", "1", "--tasks", "4"],
        dir.path(),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    for line in [
        "L2 empty-run floor",
        "chip, thread",
        "chip, process",
        "sub, thread",
        "<= 10.0 us + 2.00 us/task",
        "<= 30.0 us + 5.00 us/task",
        "upstream",
        "43.3",
        "fit(1) - floor",
        "k=1 - floor",
    ] {
        assert!(out.contains(line), "{line:?} missing:\n{out}");
    }
    for k in ["    1  ", "    2  ", "    4  "] {
        assert!(
            out.lines().any(|l| l.starts_with(k)),
            "k row {k:?} missing:\n{out}"
        );
    }
    assert!(!out.lines().any(|l| l.starts_with("    8  ")), "{out}");
}

#[test]
fn l3_flags_are_refused_where_they_do_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["bench", "--l3", "--balance"][..],
        &["bench", "--l3", "--executor", "pool"],
        &["bench", "--l3", "--runs", "0"],
        &["bench", "--l3", "--idle-secs", "1"],
    ] {
        let o = simpler(args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {:?}", text(&o));
    }
    let o = simpler(&["bench", "--l3", "--tasks", "1"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    assert!(text(&o).1.contains("at least 2"), "{:?}", text(&o));
}

#[test]
fn replay_prints_every_variant_of_both_workloads_with_the_targets() {
    let dir = tempfile::tempdir().unwrap();
    let o = simpler(
        &["bench", "--replay", "--runs", "1", "--tasks", "8"],
        dir.path(),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    let header = "variant      e2e (us/run)";
    for workload in [
        "noop: 8 independent no-op tasks (graph of 8 tasks,",
        "gemm: examples/gemm, 512 chained tile tasks (graph of 512 tasks,",
    ] {
        let at = out
            .find(workload)
            .unwrap_or_else(|| panic!("{workload:?} missing:\n{out}"));
        let lines: Vec<&str> = out[at..].lines().skip(1).take(8).collect();
        assert!(lines[0].starts_with(header), "{workload}:\n{out}");
        for (line, variant) in lines[1..4].iter().zip(["tmr ", "hbg ", "hbg replay "]) {
            assert!(
                line.starts_with(variant),
                "{variant:?} in {workload}:\n{out}"
            );
        }
        assert!(
            lines[4].starts_with("replay speedup (hbg e2e / hbg replay e2e): "),
            "{out}"
        );
        for (line, target) in lines[5..7].iter().zip([
            "target: replay host cost <= 10% of an HBG build's: ",
            "target: HBG replay end-to-end < TMR end-to-end: ",
        ]) {
            assert!(line.starts_with(target), "{target:?}:\n{out}");
            assert!(
                line.ends_with(" met") || line.ends_with(" MISSED"),
                "{line}"
            );
        }
    }
    for column in [
        "graph host (us/run)",
        "stage (us)",
        "launch (us)",
        "orch (us/task)",
        "upload (us)",
    ] {
        assert!(out.contains(column), "{column:?} missing:\n{out}");
    }
}

#[test]
fn replay_flags_are_refused_where_they_do_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["bench", "--replay", "--balance"][..],
        &["bench", "--replay", "--l3"],
        &["bench", "--replay", "--executor", "pool"],
        &["bench", "--replay", "--trace-write"],
        &["bench", "--replay", "--runs", "0"],
    ] {
        let o = simpler(args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {:?}", text(&o));
    }
}
