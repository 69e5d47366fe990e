//! Lazy core activation end to end (`docs/sim-device.md` §13): a run's AICore kernel runs
//! only on the cores its schedulers dispatch to, so an empty run touches no core, and the
//! cores a run never used end with it (the launch is disarmed, not left waiting).

use std::sync::Arc;

use crate::common::*;
use simpler_abi::*;
use simpler_device::sim::SimDevice;
use simpler_device::{Device, Topology};
use simpler_host::*;

/// Submits nothing.
unsafe extern "C-unwind" fn empty_orch(_ops: *const OrchOps, _args: *const OrchArgs) -> i32 {
    0
}

fn empty_spec() -> CallableSpec {
    CallableSpec {
        name: "empty".into(),
        orchestration: CodeImage::Orchestration(empty_orch),
        ..spec("inc")
    }
}

#[test]
fn an_empty_run_calls_no_aicore_kernel() {
    let (dev, w, _) = worker();
    let id = w.register(&empty_spec()).unwrap();
    let before = dev.aicore_kernel_calls();
    for _ in 0..3 {
        w.submit(id, args(1.0, 0)).unwrap().result().unwrap();
    }
    assert_eq!(
        dev.aicore_kernel_calls(),
        before,
        "an empty run started an AICore kernel"
    );
}

#[test]
fn a_run_starts_only_the_cores_it_dispatches_to() {
    let (dev, w, id) = worker();
    let topo = *dev.topology();
    let aiv = topo.clusters * 2;
    for seed in 0..4 {
        let before = dev.aicore_kernel_calls();
        let out = w
            .submit(id, args(seed as f32, 0))
            .unwrap()
            .result()
            .unwrap();
        check_output(out, seed as f32);
        let calls = dev.aicore_kernel_calls() - before;
        // Every task is an AIV task: the AIC cores never start, at least one AIV core does.
        assert!(
            (1..=u64::from(aiv)).contains(&calls),
            "{calls} AICore kernel calls for AIV-only tasks on {aiv} AIV cores"
        );
    }
}

#[test]
fn runs_alternating_between_empty_and_busy_all_end_on_one_device() {
    let dev = Arc::new(
        SimDevice::new(Topology {
            clusters: 3,
            aicpu_threads: 4,
        })
        .unwrap(),
    );
    let w = ChipWorker::with_device(config(), dev.clone() as Arc<dyn Device>).unwrap();
    let busy = w.register(&spec("inc")).unwrap();
    let empty = w.register(&empty_spec()).unwrap();
    let mut handles = Vec::new();
    for r in 0..12 {
        let id = if r % 3 == 0 { busy } else { empty };
        handles.push((r, id == busy, w.submit(id, args(r as f32, 0)).unwrap()));
    }
    for (r, is_busy, h) in handles {
        let out = h.result().unwrap();
        if is_busy {
            check_output(out, r as f32);
        }
    }
}
