//! Command-line tests of `simpler bench --balance`, `--executor`, `--l3`, `--replay`,
//! `--workload decoder_layer` and `--peer`: the flags they take and refuse, and the shape of their reports. The figures themselves are never
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

/// Tasks one decode step of `examples/decoder_layer` submits for `batch` sequences of
/// `lens` tokens each (the example's default model and block), counted from the
/// orchestration's structure: one allocation-only task, 5 row-wise ops over tiles of 8
/// sequences, 4 projections in 64 x 64 output tiles with K steps of 128, one rope task per
/// sequence, and per sequence and KV head 4 attention tasks per cache block plus 1.
fn decoder_layer_tasks(lens: &[usize]) -> u64 {
    use simpler_examples::decoder_layer::{DEFAULT_BLOCK_SIZE, DEFAULT_MODEL};
    let m = DEFAULT_MODEL;
    let batch = lens.len();
    let mm = |rows: usize, k: usize, n: usize| rows.div_ceil(64) * n.div_ceil(64) * k.div_ceil(128);
    let qkv = (m.heads + 2 * m.kv_heads) * m.head_dim;
    let matmuls = mm(batch, m.embed, qkv)
        + mm(batch, m.heads * m.head_dim, m.embed)
        + mm(batch, m.embed, 2 * m.ffn)
        + mm(batch, m.ffn, m.embed);
    let blocks: usize = lens.iter().map(|n| n.div_ceil(DEFAULT_BLOCK_SIZE)).sum();
    let attention = m.kv_heads * (4 * blocks + batch);
    (1 + 5 * batch.div_ceil(8) + matmuls + batch + attention) as u64
}

/// `simpler bench --workload decoder_layer <flags> --json`, parsed.
fn decoder_layer_json(flags: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["bench", "--workload", "decoder_layer", "--json"];
    args.extend(flags);
    let o = simpler(&args, dir.path());
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    serde_json::from_str(&out).expect("one JSON object")
}

#[test]
fn decoder_layer_reports_every_figure_of_a_tiny_row() {
    let report = decoder_layer_json(&["--batch", "1", "--context", "32", "--steps", "1"]);
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{report}");
    let r = &rows[0];
    assert_eq!(
        (r["batch"].as_u64(), r["context"].as_u64()),
        (Some(1), Some(32))
    );
    assert_eq!(r["tasks"].as_u64(), Some(decoder_layer_tasks(&[32])), "{r}");
    for key in ["step_us", "empty_step_us", "runtime_us_per_task"] {
        let v = r[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing: {r}"));
        assert!(v.is_finite() && v > 0.0, "{key}: {r}");
    }
    for key in ["outside_kernels", "outside_kernels_from_trace"] {
        let v = r[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing: {r}"));
        assert!(v > 0.0 && v <= 1.0, "{key}: {r}");
    }
    let per_task = r["empty_step_us"].as_f64().unwrap() / r["tasks"].as_f64().unwrap();
    assert!(
        (r["runtime_us_per_task"].as_f64().unwrap() - per_task).abs() < 1e-9,
        "{r}"
    );
    assert_eq!(report["targets"]["runtime_us_per_task"], 1.0);
    assert_eq!(report["targets"]["outside_kernels_from_trace"], 0.25);
}

#[test]
fn decoder_layer_counts_the_tasks_of_full_and_ragged_sequences() {
    let flags = ["--batch", "3", "--context", "40", "--steps", "1"];
    let full = decoder_layer_json(&flags);
    assert_eq!(full["lengths"], "full");
    assert_eq!(
        full["rows"][0]["tasks"].as_u64(),
        Some(decoder_layer_tasks(&[40; 3])),
        "{full}"
    );
    let mut ragged_flags = flags.to_vec();
    ragged_flags.push("--ragged");
    let ragged = decoder_layer_json(&ragged_flags);
    assert_eq!(ragged["lengths"], "ragged");
    use simpler_examples::decoder_layer::{inputs, DEFAULT_BLOCK_SIZE, DEFAULT_MODEL};
    let x = inputs(DEFAULT_MODEL, 3, 40, DEFAULT_BLOCK_SIZE, 0);
    let lens: Vec<usize> = x.paged.context_lens.iter().map(|&n| n as usize).collect();
    assert_ne!(lens, [40; 3], "ragged lengths differ");
    assert_eq!(
        ragged["rows"][0]["tasks"].as_u64(),
        Some(decoder_layer_tasks(&lens)),
        "{ragged}"
    );
}

#[test]
fn decoder_layer_table_prints_each_row_beside_its_targets() {
    let dir = tempfile::tempdir().unwrap();
    let o = simpler(
        &[
            "bench",
            "--workload",
            "decoder_layer",
            "--batch",
            "1",
            "2",
            "--context",
            "16",
            "--steps",
            "1",
        ],
        dir.path(),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    for text in [
        "runtime us/task",
        "outside kernels",
        "from trace",
        "<= 1.00",
        "<= 25%",
        "embed 256, heads 8/2 kv, head_dim 32, ffn 512, block 16",
    ] {
        assert!(out.contains(text), "{text:?} missing:\n{out}");
    }
    for batch in ["    1      16", "    2      16"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(batch))
            .unwrap_or_else(|| panic!("row {batch:?} missing:\n{out}"));
        assert!(line.contains("met") || line.contains("MISSED"), "{line}");
    }
}

#[test]
fn decoder_layer_flags_are_refused_where_they_do_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["bench", "--batch", "1"][..],
        &["bench", "--steps", "1"],
        &["bench", "--example", "x"],
        &["bench", "--ragged"],
        &["bench", "--workload", "decoder_layer", "--tasks", "5"],
        &["bench", "--workload", "decoder_layer", "--runs", "2"],
        &["bench", "--workload", "decoder_layer", "--replay"],
        &["bench", "--workload", "decoder_layer", "--batch", "0"],
        &["bench", "--workload", "decoder_layer", "--steps", "0"],
        &["bench", "--workload", "gemm"],
    ] {
        let o = simpler(args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {:?}", text(&o));
    }
    let missing = dir.path().join("no_such_example");
    let o = simpler(
        &[
            "bench",
            "--workload",
            "decoder_layer",
            "--example",
            missing.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{:?}", text(&o));
    let (_, err) = text(&o);
    assert!(
        err.contains("no_such_example") && err.contains("--example"),
        "{err}"
    );
}

#[test]
fn peer_reports_both_runtimes_and_their_ratios() {
    let dir = tempfile::tempdir().unwrap();
    let o = simpler(
        &["bench", "--peer", "--tasks", "64", "--runs", "1", "--json"],
        dir.path(),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    let mut keys: Vec<&str> = report
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["chain_ratio", "independent_ratio", "ours", "rayon"]);
    let positive = |v: &serde_json::Value| v.as_f64().is_some_and(|v| v.is_finite() && v > 0.0);
    assert!(positive(&report["independent_ratio"]), "{report}");
    assert!(positive(&report["chain_ratio"]), "{report}");
    for side in ["ours", "rayon"] {
        for key in ["independent_tasks_per_s", "chain_tasks_per_s"] {
            assert!(positive(&report[side][key]), "{side}.{key}: {report}");
        }
        assert_eq!(report[side]["tasks_per_run"], 64, "{report}");
    }
    let ratio = report["ours"]["independent_tasks_per_s"].as_f64().unwrap()
        / report["rayon"]["independent_tasks_per_s"].as_f64().unwrap();
    assert!((report["independent_ratio"].as_f64().unwrap() - ratio).abs() <= 1e-9 * ratio);
}

#[test]
fn peer_table_prints_both_shapes_beside_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let o = simpler(
        &["bench", "--peer", "--tasks", "32", "--runs", "1"],
        dir.path(),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    let independent = out
        .lines()
        .find(|l| l.starts_with("independent "))
        .unwrap_or_else(|| panic!("independent row missing:\n{out}"));
    assert!(
        independent.ends_with(">= 25% met") || independent.ends_with(">= 25% MISSED"),
        "{independent}"
    );
    let chain = out
        .lines()
        .find(|l| l.starts_with("chain "))
        .unwrap_or_else(|| panic!("chain row missing:\n{out}"));
    assert!(chain.ends_with("—"), "{chain}");
}

#[test]
fn peer_flags_are_refused_where_they_do_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["bench", "--peer", "--l3"][..],
        &["bench", "--peer", "--executor", "pool"],
        &["bench", "--peer", "--balance"],
        &["bench", "--peer", "--workload", "decoder_layer"],
        &["bench", "--peer", "--runs", "0"],
        &["bench", "--peer", "--tasks", "0"],
    ] {
        let o = simpler(args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {:?}", text(&o));
    }
}
