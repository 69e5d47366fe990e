//! Device health on the sim device, end to end (`docs/health.md` §1–§4):
//! fault notices reach the process's monitor, are consumed at a run's finalize, and a notice
//! naming this worker's device and one of its streams makes the device suspect — which
//! refuses admission — while every other notice is only counted. A notice never decides a
//! run; silence is not health; admission returns only through a confirmed forced reset.
//!
//! The monitor and the callback slot are process-wide, so every row runs in this binary's
//! one test, in order (parallel tests' notices would show up in each other's counters).
//!
//! A test binary of its own, not a module of `it`: the other tests' faults would raise
//! notices into the same monitor while this one counts them.

// The fixtures of the `it` binary; this binary uses a part of them.
#[allow(dead_code, unused_imports)]
#[path = "it/common.rs"]
mod common;

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use simpler_device::sim::{
    raise_foreign_notice, FaultAction, FaultPoint, FaultRule, NoticeDelivery, SimDevice,
};
use simpler_device::{Device, FaultNotice, StreamId};
use simpler_host::fault_monitor::FaultMonitor;
use simpler_host::lifecycle::enter_context;
use simpler_host::*;
use simpler_test_support::eventually;

/// How a row makes a notice.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// The faulted kernel's stream (AICPU or AICore), raised while run 1 executes.
    Kernel(FaultPoint, Option<FaultAction>),
    /// The device names a stream this worker never used.
    ForeignStream,
    /// The device names no stream.
    NoStream,
    /// Another device names this worker's AICPU stream id.
    OtherDevice,
}

struct Row {
    name: &'static str,
    source: Source,
    /// Wait for the notice to be delivered before run 2 (a late one arrives after run 1).
    await_delivery: bool,
    /// Run 2 is admitted.
    second_admitted: bool,
    /// Run 3 (after run 2 finalized) is admitted.
    third_admitted: bool,
    /// (own, unattributed, undecided) after the rows' runs.
    totals: (u64, u64, u64),
}

const CODE: i32 = 0x5e;

const ROWS: &[Row] = &[
    Row {
        name: "a notice on the AICPU stream while run 1 executes",
        source: Source::Kernel(FaultPoint::AicpuKernel, None),
        await_delivery: true,
        second_admitted: false,
        third_admitted: false,
        totals: (1, 0, 0),
    },
    Row {
        name: "a notice on the AICore stream while run 1 executes",
        source: Source::Kernel(FaultPoint::AicoreKernel, None),
        await_delivery: true,
        second_admitted: false,
        third_admitted: false,
        totals: (1, 0, 0),
    },
    Row {
        name: "a late notice: admitted until a finalize after its delivery",
        source: Source::Kernel(
            FaultPoint::AicpuKernel,
            Some(FaultAction::DelayNotice(Duration::from_millis(300))),
        ),
        await_delivery: true,
        second_admitted: true,
        third_admitted: false,
        totals: (1, 0, 0),
    },
    Row {
        name: "a lost notice: silence is not health, but nothing refuses",
        source: Source::Kernel(FaultPoint::AicpuKernel, Some(FaultAction::LoseNotice)),
        await_delivery: false,
        second_admitted: true,
        third_admitted: true,
        totals: (0, 0, 0),
    },
    Row {
        name: "this device, a stream the worker never used: only counted",
        source: Source::ForeignStream,
        await_delivery: true,
        second_admitted: true,
        third_admitted: true,
        totals: (0, 1, 0),
    },
    Row {
        name: "this device, no stream named: undecided, only counted",
        source: Source::NoStream,
        await_delivery: true,
        second_admitted: true,
        third_admitted: true,
        totals: (0, 0, 1),
    },
    Row {
        name: "another device naming this worker's stream id: only counted",
        source: Source::OtherDevice,
        await_delivery: true,
        second_admitted: true,
        third_admitted: true,
        totals: (0, 1, 0),
    },
];

fn notice_rows() {
    for row in ROWS {
        let (dev, w, id) = worker();
        assert!(w.watches_fault_notices(), "{}", row.name);
        // A warm run records the stream pair in the history.
        check_output(w.submit(id, args(0.0, 0)).unwrap().result().unwrap(), 0.0);
        let before = dev.notice_stats();
        match row.source {
            Source::Kernel(point, delivery) => {
                dev.inject(FaultRule::next(
                    point,
                    FaultAction::RaiseNotice { code: CODE },
                ));
                if let Some(d) = delivery {
                    dev.inject(FaultRule::next(FaultPoint::Notice, d));
                }
            }
            Source::ForeignStream => {
                dev.raise_notice(Some(StreamId::from_raw(9999)), CODE, NoticeDelivery::Prompt)
            }
            Source::NoStream => dev.raise_notice(None, CODE, NoticeDelivery::Prompt),
            Source::OtherDevice => raise_foreign_notice(
                FaultNotice {
                    device: dev.device_id() + 100_000,
                    stream: Some(StreamId::from_raw(2)),
                    code: CODE,
                },
                NoticeDelivery::Prompt,
            ),
        }
        // Run 1: a notice never decides a run — its own record does.
        check_output(w.submit(id, args(1.0, 0)).unwrap().result().unwrap(), 1.0);
        if row.await_delivery && !matches!(row.source, Source::OtherDevice) {
            eventually(row.name, || dev.notice_stats().delivered > before.delivered);
        }
        let second = w.submit(id, args(2.0, 0));
        assert_eq!(
            second.is_ok(),
            row.second_admitted,
            "{}: {second:?}",
            row.name
        );
        match second {
            Ok(h) => check_output(h.result().unwrap(), 2.0),
            Err(e) => {
                assert!(
                    matches!(&e, HostError::DeviceUnusable(m) if m.contains("suspect")),
                    "{e}"
                )
            }
        }
        let third = w.submit(id, args(3.0, 0));
        assert_eq!(third.is_ok(), row.third_admitted, "{}: {third:?}", row.name);
        if let Ok(h) = third {
            check_output(h.result().unwrap(), 3.0);
        }
        let h = w.health().unwrap();
        assert_eq!(h.suspect, !row.third_admitted, "{}", row.name);
        assert_eq!(
            (h.totals.own, h.totals.unattributed, h.totals.undecided),
            row.totals,
            "{}",
            row.name
        );
        if h.suspect {
            assert_eq!(h.first_error_code, Some(CODE), "{}", row.name);
            assert!(w.unusable_reason().unwrap().contains("suspect"));
        }
        w.close().unwrap();
    }
}

/// Admission returns only through a confirmed forced reset that retires the generation.
fn recovery() {
    let (dev, w, id) = worker();
    dev.inject(FaultRule::next(
        FaultPoint::AicpuKernel,
        FaultAction::RaiseNotice { code: CODE },
    ));
    check_output(w.submit(id, args(1.0, 0)).unwrap().result().unwrap(), 1.0);
    assert!(w.health().unwrap().suspect);
    // Close and re-create is not a path back for this worker; an unconfirmed reset is not
    // either.
    dev.inject(FaultRule::next(FaultPoint::Reset, FaultAction::Refuse));
    assert!(w.recover_device().is_err());
    assert!(
        w.health().unwrap().suspect,
        "an unconfirmed reset restores nothing"
    );
    assert!(matches!(
        w.submit(id, args(2.0, 0)),
        Err(HostError::DeviceUnusable(_))
    ));
    let before_resets = dev.calls(FaultPoint::Reset);
    w.recover_device().unwrap();
    assert_eq!(dev.calls(FaultPoint::Reset), before_resets + 1);
    let h = w.health().unwrap();
    assert_eq!(
        (h.generation, h.suspect, h.first_error_code),
        (2, false, None)
    );
    assert_eq!(h.totals.own, 1, "the counters survive the generation");
    check_output(w.submit(id, args(3.0, 0)).unwrap().result().unwrap(), 3.0);
    assert!(w.watches_fault_notices(), "the callback was reinstalled");
    // A new generation can become suspect again.
    dev.inject(FaultRule::next(
        FaultPoint::AicoreKernel,
        FaultAction::RaiseNotice { code: CODE + 1 },
    ));
    check_output(w.submit(id, args(4.0, 0)).unwrap().result().unwrap(), 4.0);
    let h = w.health().unwrap();
    assert_eq!(
        (h.generation, h.suspect, h.first_error_code),
        (2, true, Some(CODE + 1))
    );
    w.close().unwrap();
}

/// A borrowed worker never resets the device: recovery is the caller's.
fn borrowed_recovery_is_refused() {
    let dev = small_device();
    let g = NonZeroU64::new(41).unwrap();
    let _ctx = enter_context(g);
    let w = ChipWorker::borrowed(config(), dev.clone() as Arc<dyn Device>, g).unwrap();
    assert!(matches!(
        w.recover_device(),
        Err(HostError::InvalidState(_))
    ));
    assert_eq!(dev.calls(FaultPoint::Reset), 0);
    w.close().unwrap();
}

/// The process holds one installation however many workers it runs; the last one out
/// uninstalls.
fn one_installation_per_process() {
    let base = FaultMonitor::global().snapshot().references;
    let (_d1, w1, _) = worker();
    let (_d2, w2, _) = worker();
    let s = FaultMonitor::global().snapshot();
    assert_eq!(s.references, base + 2);
    assert!(s.installed);
    assert!(simpler_device::sim::fault_callback_installed());
    w1.close().unwrap();
    drop(w2);
    let s = FaultMonitor::global().snapshot();
    assert_eq!(s.references, base);
    if base == 0 {
        assert!(!s.installed);
        assert!(!simpler_device::sim::fault_callback_installed());
    }
}

/// The stream history is bounded: past 32 distinct caller streams it is incomplete, and a
/// notice on an unknown stream of this device is undecided (only counted).
fn an_overflowing_history_makes_attribution_undecided() {
    let dev: Arc<SimDevice> = small_device();
    let w = ChipWorker::with_device(config(), dev.clone() as Arc<dyn Device>).unwrap();
    let id = w.register(&spec("inc")).unwrap();
    let x = w.malloc((N * 4) as u64).unwrap();
    let y = w.malloc((N * 4) as u64).unwrap();
    w.copy_to(x, &f32_bytes(&input(5.0))).unwrap();
    for _ in 0..32 {
        let s = dev.create_stream().unwrap();
        w.submit_on_stream(id, device_args(x, y, 0), &CallConfig::default(), s)
            .unwrap()
            .wait(None)
            .unwrap();
    }
    let h = w.health().unwrap();
    assert!(
        !h.history_complete,
        "2 private + 32 caller streams overflow 32"
    );
    assert_eq!(h.history_len, 32);
    dev.raise_notice(
        Some(StreamId::from_raw(77_777)),
        CODE,
        NoticeDelivery::Prompt,
    );
    let s = dev.create_stream().unwrap();
    w.submit_on_stream(id, device_args(x, y, 0), &CallConfig::default(), s)
        .unwrap()
        .wait(None)
        .unwrap();
    let h = w.health().unwrap();
    assert!(!h.suspect);
    assert_eq!(h.totals.undecided, 1);
    w.close().unwrap();
}

#[test]
fn device_health() {
    notice_rows();
    recovery();
    borrowed_recovery_is_refused();
    one_installation_per_process();
    an_overflowing_history_makes_attribution_undecided();
}
