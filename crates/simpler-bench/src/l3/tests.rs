//! The sweep's parameters and its shape with tiny settings (1 run, k in {1, 2}) on chips in
//! this process and sub worker threads; the chip-process row needs the `simpler-child`
//! program and is exercised through the CLI (`crates/simpler-cli/tests/it/bench.rs`). No
//! figure is judged: only that every one is there, positive and finite.

use super::*;
use simpler_toolchain::build::{compiler_words, repository_include_dir};
use simpler_toolchain::cache::KernelCache;

fn compiler(cache: &std::path::Path) -> simpler_toolchain::build::Compiler {
    simpler_toolchain::build::Compiler::new(
        compiler_words(std::env::var_os("CC")).unwrap(),
        vec![repository_include_dir()],
        KernelCache::new(cache),
    )
    .unwrap()
}

#[test]
fn runs_shrink_for_large_k_but_keep_a_floor() {
    assert_eq!(runs_for(200, 1), 200);
    assert_eq!(runs_for(200, 16), 200);
    assert_eq!(runs_for(200, 64), 50);
    assert_eq!(runs_for(200, 256), 20);
    assert_eq!(runs_for(1, 256), 1);
    assert_eq!(runs_for(10, 256), 10);
}

#[test]
fn bad_parameters_are_named() {
    let named = |p: L3Params| match p.check() {
        Err(L3BenchError::InvalidParam { name, .. }) => name,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let ok = L3Params::default();
    assert!(ok.check().is_ok());
    assert_eq!(
        named(L3Params {
            runs: 0,
            ..ok.clone()
        }),
        "runs"
    );
    assert_eq!(
        named(L3Params {
            ks: vec![0, 1],
            ..ok.clone()
        }),
        "ks"
    );
    assert_eq!(
        named(L3Params {
            ks: vec![4, 4],
            ..ok.clone()
        }),
        "ks"
    );
    assert_eq!(
        named(L3Params {
            ks: vec![],
            ..ok.clone()
        }),
        "ks"
    );
    assert_eq!(
        named(L3Params {
            chips: 0,
            ..ok.clone()
        }),
        "chips"
    );
    assert_eq!(
        named(L3Params {
            sub_workers: 0,
            ..ok.clone()
        }),
        "sub_workers"
    );
    assert_eq!(named(L3Params { rows: vec![], ..ok }), "rows");
}

#[test]
fn the_targets_read_each_part_on_its_own() {
    let t = CHIP_THREAD_TARGET;
    let both = Fit {
        fixed_us: 9.0,
        per_task_us: 1.5,
    };
    let slow_tasks = Fit {
        fixed_us: 9.0,
        per_task_us: 3.0,
    };
    let slow_fixed = Fit {
        fixed_us: 11.0,
        per_task_us: 1.0,
    };
    assert_eq!(
        t.met_by(&both),
        Met {
            fixed: true,
            per_task: true
        }
    );
    assert_eq!(
        t.met_by(&slow_tasks),
        Met {
            fixed: true,
            per_task: false
        }
    );
    assert_eq!(
        t.met_by(&slow_fixed),
        Met {
            fixed: false,
            per_task: true
        }
    );
    let bent = Fit {
        fixed_us: -50.0,
        per_task_us: 1.0,
    };
    assert_eq!(
        t.met_by(&bent),
        Met {
            fixed: false,
            per_task: true
        }
    );
    assert_eq!(RowKind::SubThread.target(), None);
}

fn point(k: u64, median: f64, p90: f64) -> Point {
    Point {
        k,
        runs: 1,
        run_us: Spread {
            median,
            p90,
            samples: 1,
        },
    }
}

fn row(kind: RowKind, points: Vec<Point>) -> RowFigures {
    RowFigures {
        row: kind,
        worst_tail: Tail::worst(&points),
        points,
        fit: Fit {
            fixed_us: 0.0,
            per_task_us: 0.0,
        },
        target: None,
        met: None,
        engine_one_task_us: None,
        engine_k1_us: None,
    }
}

#[test]
fn the_worst_tail_is_the_largest_p90_over_median() {
    let points = vec![
        point(1, 10.0, 20.0),
        point(2, 10.0, 45.0),
        point(4, 100.0, 120.0),
    ];
    assert_eq!(Tail::worst(&points), Some(Tail { k: 2, ratio: 4.5 }));
    assert_eq!(Tail::worst(&[]), None);
}

#[test]
fn process_over_thread_is_read_at_16_or_the_largest_k_below_both_rows_have() {
    let thread = row(
        RowKind::ChipThread,
        vec![
            point(1, 10.0, 10.0),
            point(16, 100.0, 100.0),
            point(64, 400.0, 400.0),
        ],
    );
    let process = row(
        RowKind::ChipProcess,
        vec![
            point(1, 30.0, 30.0),
            point(16, 125.0, 125.0),
            point(64, 4000.0, 4000.0),
        ],
    );
    let rows = [thread.clone(), process];
    assert_eq!(
        process_over_thread(&rows),
        Some(RowRatio { k: 16, ratio: 1.25 })
    );
    let short = row(
        RowKind::ChipProcess,
        vec![point(1, 30.0, 30.0), point(2, 1.0, 1.0)],
    );
    assert_eq!(
        process_over_thread(&[thread.clone(), short]),
        Some(RowRatio { k: 1, ratio: 3.0 }),
        "k = 2 is not in the thread row"
    );
    assert_eq!(process_over_thread(&[thread]), None);
}

#[test]
fn a_tiny_sweep_reports_every_point_of_every_row() {
    let cache = tempfile::tempdir().unwrap();
    let spec = callable::noop_chip_callable(&compiler(cache.path())).unwrap();
    assert!(spec.kernels.is_empty() && spec.signature.args.is_empty());
    let params = L3Params {
        runs: 1,
        ks: vec![1, 2],
        chips: 2,
        sub_workers: 2,
        rows: vec![RowKind::ChipThread, RowKind::SubThread],
        chip_program: None,
    };
    let report = measure_l3(&params, spec).unwrap();
    let floor = report.floor_us.expect("a chip row measures the floor");
    assert!(floor.median > 0.0 && floor.samples == 1, "{floor:?}");
    let rows: Vec<RowKind> = report.rows.iter().map(|r| r.row).collect();
    assert_eq!(rows, [RowKind::ChipThread, RowKind::SubThread]);
    for r in &report.rows {
        let ks: Vec<u64> = r.points.iter().map(|p| p.k).collect();
        assert_eq!(ks, [1, 2], "{r:?}");
        for p in &r.points {
            assert_eq!((p.runs, p.run_us.samples), (1, 1), "{r:?}");
            assert!(
                p.run_us.median.is_finite() && p.run_us.median > 0.0,
                "{r:?}"
            );
        }
        // Two points: the line goes through both.
        for p in &r.points {
            let at = r.fit.at(p.k as f64);
            assert!(
                (at - p.run_us.median).abs() < 1e-6 * at.abs().max(1.0),
                "{r:?}"
            );
        }
        assert_eq!(r.target, r.row.target());
        assert_eq!(r.met.is_some(), r.target.is_some());
        assert_eq!(r.engine_one_task_us.is_some(), r.row == RowKind::ChipThread);
        if let Some(e) = r.engine_k1_us {
            assert_eq!(e, r.points[0].run_us.median - floor.median);
        }
        assert_eq!(r.engine_k1_us.is_some(), r.row == RowKind::ChipThread);
    }
    for r in &report.rows {
        assert_eq!(r.worst_tail, Tail::worst(&r.points), "{r:?}");
    }
    assert_eq!(
        report.slope_target_us,
        Some(floor.median / 2.0 + SLOPE_OVER_HALF_FLOOR_US)
    );
    assert_eq!(report.process_over_thread, None, "no process row");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["rows"][0]["row"], "chip_thread");
    assert_eq!(json["upstream"]["fit"]["per_task_us"], 8.08);
}

#[test]
fn a_sweep_without_chip_rows_has_no_floor() {
    let cache = tempfile::tempdir().unwrap();
    let spec = callable::noop_chip_callable(&compiler(cache.path())).unwrap();
    let params = L3Params {
        runs: 1,
        ks: vec![1, 2],
        rows: vec![RowKind::SubThread],
        ..L3Params::default()
    };
    let report = measure_l3(&params, spec).unwrap();
    assert!(report.floor_us.is_none());
    assert_eq!(report.rows.len(), 1);
    assert_eq!(report.rows[0].engine_one_task_us, None);
    assert_eq!(report.rows[0].engine_k1_us, None);
}
