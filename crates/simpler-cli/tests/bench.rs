//! Command-line tests of `simpler bench --balance`: the flags it takes and refuses, and the
//! shape of its JSON report. The figures themselves are never judged here (a test runs with
//! 1 ms tasks on a loaded machine); `docs/chip-runtime.md` says what they mean.

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
