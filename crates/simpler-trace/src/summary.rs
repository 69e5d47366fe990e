//! The timing breakdown of each traced run: where the time went, in figures.
//!
//! Owns [`Summary`] and its definitions (docs/tracing.md, "Summary"), per run:
//! - **Host**: first to last host span of the run's epoch (host clock), `None` without any.
//! - **Device** (makespan): first subtask start to last subtask end (device clock).
//! - **Orch**: time AICPU thread 0 (the orchestrator) was busy: the union of its span intervals,
//!   back-pressure waits excluded.
//! - **Sched**: time the scheduler threads (AICPU 1..) were busy: per thread the union of its
//!   span intervals, waiting phases (ready-queue wait, idle turns, park) excluded, summed over
//!   the threads.
//! - **Effective**: summed subtask busy time ÷ (Device × cores used), cores used = cores with at
//!   least one subtask.
//! - **Scheduler overhead share**: Sched ÷ (scheduler threads × Device).
//! - **Critical path**: the longest chain through the dependency edges, each task weighing its
//!   longest subtask (its blocks may run side by side), compared with Device.
//! - Per kernel: count, mean, p50 and p99 (nearest rank) of subtask durations; per core: busy
//!   time and busy ÷ Device.
//!
//! A figure the run's trace level does not record is `None` and printed as "not recorded at
//! level X", never as a zero: Orch needs level `orchestrator`, Sched and the scheduler
//! overhead level `scheduler`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use crate::model::{AicpuPhase, ProcessTrace, RunTrace, Trace, TraceLevel};

/// Figures of every traced run of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// One per run, in process then launch order.
    pub runs: Vec<RunSummary>,
}

/// Figures of one run; times in ns.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    /// The process's name.
    pub process: String,
    /// The run's epoch.
    pub epoch: u64,
    /// The callable's name.
    pub callable: String,
    /// The level the run was traced at: which figures it records.
    pub level: TraceLevel,
    /// Tasks recorded.
    pub tasks: usize,
    /// Subtasks recorded.
    pub subtasks: usize,
    /// Host: first to last host span of the epoch; `None` without host spans.
    pub host_ns: Option<u64>,
    /// Device: first subtask start to last subtask end (the makespan).
    pub device_ns: u64,
    /// Orch: orchestrator busy time; `None` below level orchestrator.
    pub orch_ns: Option<u64>,
    /// Sched: scheduler busy time, summed over scheduler threads; `None` below level
    /// scheduler.
    pub sched_ns: Option<u64>,
    /// Scheduler threads with at least one span.
    pub sched_threads: usize,
    /// Effective: kernel busy ÷ (Device × cores used), 0..=1 (0 when Device is 0).
    pub effective: f64,
    /// Sched ÷ (scheduler threads × Device), 0 when either is 0; `None` below level
    /// scheduler.
    pub sched_overhead: Option<f64>,
    /// The longest chain through the edges by longest subtask per task.
    pub critical_path_ns: u64,
    /// Per kernel name, by name.
    pub kernels: Vec<KernelStats>,
    /// Per core, in track order.
    pub cores: Vec<CoreUse>,
    /// Events dropped, all threads.
    pub dropped: u64,
}

/// Subtask durations of one kernel, ns.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelStats {
    /// The kernel's name.
    pub name: String,
    /// Subtasks.
    pub count: usize,
    /// Mean duration.
    pub mean_ns: f64,
    /// Median (nearest rank).
    pub p50_ns: u64,
    /// 99th percentile (nearest rank).
    pub p99_ns: u64,
}

/// How busy one core was.
#[derive(Clone, Debug, PartialEq)]
pub struct CoreUse {
    /// The core's track name, e.g. "AIC 0".
    pub core: String,
    /// Subtasks it ran.
    pub subtasks: usize,
    /// Summed subtask durations, ns.
    pub busy_ns: u64,
    /// busy ÷ Device, 0..=1.
    pub utilisation: f64,
}

impl Summary {
    /// The figures of every run of `trace`.
    pub fn of(trace: &Trace) -> Summary {
        Summary {
            runs: trace.runs().map(|(p, r)| RunSummary::of(p, r)).collect(),
        }
    }
}

/// Nearest-rank percentile `q` (0..=100) of sorted `v`; 0 when empty.
fn percentile(sorted: &[u64], q: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q as usize * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// Length of the union of `[start, end)` intervals.
fn union_len(mut iv: Vec<(u64, u64)>) -> u64 {
    iv.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(u64, u64)> = None;
    for (s, e) in iv {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    total + cur.map_or(0, |(s, e)| e - s)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

impl RunSummary {
    /// The figures of `run` of process `p`.
    pub fn of(p: &ProcessTrace, run: &RunTrace) -> RunSummary {
        let first = run.subtasks.iter().map(|s| s.start_ns).min().unwrap_or(0);
        let last = run.subtasks.iter().map(|s| s.end_ns).max().unwrap_or(0);
        let device_ns = last.saturating_sub(first);
        let host: Vec<_> = p
            .host_spans
            .iter()
            .filter(|h| h.epoch == Some(run.epoch))
            .collect();
        let host_ns = (!host.is_empty()).then(|| {
            let lo = host.iter().map(|h| h.start_ns).min().unwrap_or(0);
            let hi = host.iter().map(|h| h.end_ns).max().unwrap_or(0);
            hi.saturating_sub(lo)
        });

        let busy = |thread: u32, skip: &[AicpuPhase]| {
            union_len(
                run.aicpu
                    .iter()
                    .filter(|a| a.thread == thread && !skip.contains(&a.phase))
                    .map(|a| (a.start_ns, a.end_ns.max(a.start_ns)))
                    .collect(),
            )
        };
        let orch_ns = busy(0, &[AicpuPhase::BackPressure]);
        let sched: BTreeSet<u32> = run
            .aicpu
            .iter()
            .map(|a| a.thread)
            .filter(|&t| t > 0)
            .collect();
        let waits = [
            AicpuPhase::ReadyWait,
            AicpuPhase::SchedIdle,
            AicpuPhase::SchedPark,
        ];
        let sched_ns: u64 = sched.iter().map(|&t| busy(t, &waits)).sum();
        let scheduler = run.level >= TraceLevel::Scheduler;

        let mut per_core: BTreeMap<(crate::CoreKind, u32), (usize, u64)> = BTreeMap::new();
        let mut per_kernel: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let index = crate::model::TaskIndex::new(run);
        for s in &run.subtasks {
            let c = per_core.entry((s.core_kind, s.core)).or_default();
            c.0 += 1;
            c.1 += s.duration_ns();
            per_kernel
                .entry(index.kernel_name(s.task, s.func_id))
                .or_default()
                .push(s.duration_ns());
        }
        let kernel_busy: u64 = per_core.values().map(|c| c.1).sum();
        let kernels = per_kernel
            .into_iter()
            .map(|(name, mut d)| {
                d.sort_unstable();
                KernelStats {
                    name,
                    count: d.len(),
                    mean_ns: d.iter().sum::<u64>() as f64 / d.len() as f64,
                    p50_ns: percentile(&d, 50),
                    p99_ns: percentile(&d, 99),
                }
            })
            .collect();
        let cores = per_core
            .iter()
            .map(|(&(k, c), &(n, b))| CoreUse {
                core: format!("{k} {c}"),
                subtasks: n,
                busy_ns: b,
                utilisation: ratio(b as f64, device_ns as f64),
            })
            .collect();
        RunSummary {
            process: p.name.clone(),
            epoch: run.epoch,
            callable: run.callable.clone(),
            level: run.level,
            tasks: run.tasks.len().max(
                run.subtasks
                    .iter()
                    .map(|s| s.task)
                    .collect::<BTreeSet<_>>()
                    .len(),
            ),
            subtasks: run.subtasks.len(),
            host_ns,
            device_ns,
            orch_ns: (run.level >= TraceLevel::Orchestrator).then_some(orch_ns),
            sched_ns: scheduler.then_some(sched_ns),
            sched_threads: sched.len(),
            effective: ratio(kernel_busy as f64, device_ns as f64 * per_core.len() as f64),
            sched_overhead: scheduler
                .then(|| ratio(sched_ns as f64, sched.len() as f64 * device_ns as f64)),
            critical_path_ns: critical_path(run),
            kernels,
            cores,
            dropped: run.dropped.iter().map(|d| d.count).sum(),
        }
    }
}

/// The longest chain through `run.edges`, each task weighing its longest subtask, ns. Tasks on
/// a cycle (not a valid run) are left out.
pub fn critical_path(run: &RunTrace) -> u64 {
    let mut weight: BTreeMap<u64, u64> = BTreeMap::new();
    for s in &run.subtasks {
        let w = weight.entry(s.task).or_default();
        *w = (*w).max(s.duration_ns());
    }
    for e in &run.edges {
        weight.entry(e.producer).or_default();
        weight.entry(e.consumer).or_default();
    }
    let mut indeg: BTreeMap<u64, usize> = weight.keys().map(|&t| (t, 0)).collect();
    let mut out: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for e in &run.edges {
        *indeg.get_mut(&e.consumer).expect("inserted above") += 1;
        out.entry(e.producer).or_default().push(e.consumer);
    }
    let mut queue: VecDeque<u64> = indeg
        .iter()
        .filter(|(_, &d)| d == 0)
        .map(|(&t, _)| t)
        .collect();
    let mut finish: BTreeMap<u64, u64> = BTreeMap::new();
    let mut best = 0;
    while let Some(t) = queue.pop_front() {
        let f = finish.get(&t).copied().unwrap_or(0) + weight[&t];
        best = best.max(f);
        for &c in out.get(&t).into_iter().flatten() {
            let cf = finish.entry(c).or_default();
            *cf = (*cf).max(f);
            let d = indeg.get_mut(&c).expect("every consumer counted");
            *d -= 1;
            if *d == 0 {
                queue.push_back(c);
            }
        }
    }
    best
}

/// ns as a short human figure: "812 ns", "12.40 µs", "3.21 ms", "1.50 s".
pub fn fmt_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.2} µs", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", f / 1e6)
    } else {
        format!("{:.2} s", f / 1e9)
    }
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} — run {} of {:?}: {} tasks, {} subtasks",
            self.process, self.epoch, self.callable, self.tasks, self.subtasks
        )?;
        let host = self.host_ns.map_or("-".to_string(), fmt_ns);
        let unrecorded = || format!("not recorded at level {}", self.level.name());
        writeln!(
            f,
            "  Host {host}  Device {}  Orch {}  Sched {}  Effective {:.1}%",
            fmt_ns(self.device_ns),
            self.orch_ns.map_or_else(unrecorded, fmt_ns),
            self.sched_ns.map_or_else(unrecorded, fmt_ns),
            self.effective * 100.0
        )?;
        let cp = ratio(self.critical_path_ns as f64, self.device_ns as f64) * 100.0;
        let overhead = self.sched_overhead.map_or_else(unrecorded, |o| {
            format!("{:.1}% of {} thread(s)", o * 100.0, self.sched_threads)
        });
        writeln!(
            f,
            "  critical path {} ({cp:.1}% of makespan {})  scheduler overhead {overhead}",
            fmt_ns(self.critical_path_ns),
            fmt_ns(self.device_ns),
        )?;
        if self.dropped > 0 {
            writeln!(
                f,
                "  WARNING: {} events dropped (buffers full); figures undercount",
                self.dropped
            )?;
        }
        writeln!(
            f,
            "  {:<24} {:>7} {:>12} {:>12} {:>12}",
            "kernel", "count", "mean", "p50", "p99"
        )?;
        for k in &self.kernels {
            writeln!(
                f,
                "  {:<24} {:>7} {:>12} {:>12} {:>12}",
                k.name,
                k.count,
                fmt_ns(k.mean_ns.round() as u64),
                fmt_ns(k.p50_ns),
                fmt_ns(k.p99_ns)
            )?;
        }
        writeln!(
            f,
            "  {:<10} {:>9} {:>12} {:>7}",
            "core", "subtasks", "busy", "util"
        )?;
        for c in &self.cores {
            writeln!(
                f,
                "  {:<10} {:>9} {:>12} {:>6.1}%",
                c.core,
                c.subtasks,
                fmt_ns(c.busy_ns),
                c.utilisation * 100.0
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.runs.is_empty() {
            return writeln!(f, "no traced runs");
        }
        for (i, r) in self.runs.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;

    fn sub(task: u64, core: u32, kind: CoreKind, start: u64, end: u64) -> SubtaskSpan {
        SubtaskSpan {
            task,
            func_id: task as u32 % 2,
            core,
            core_kind: kind,
            block: 0,
            start_ns: start,
            end_ns: end,
        }
    }

    fn aicpu(thread: u32, phase: AicpuPhase, start: u64, end: u64) -> AicpuSpan {
        AicpuSpan {
            thread,
            phase,
            task: None,
            core: None,
            start_ns: start,
            end_ns: end,
        }
    }

    /// Three tasks: 0 (AIC 0, 100..300) → 2 (AIC 0, 400..500); 1 (AIV 1, 100..200) → 2.
    fn hand_made() -> Trace {
        let kernels = |f: u32| {
            vec![KernelRef {
                func_id: f,
                name: ["mm", "add"][f as usize].into(),
                core: CoreKind::Aic,
            }]
        };
        let run = RunTrace {
            epoch: 7,
            callable: "g".into(),
            level: TraceLevel::Orchestrator,
            tasks: (0..3)
                .map(|t| TaskInfo {
                    task: t,
                    submit_index: t,
                    kernels: kernels(t as u32 % 2),
                })
                .collect(),
            subtasks: vec![
                sub(0, 0, CoreKind::Aic, 100, 300),
                sub(1, 1, CoreKind::Aiv, 100, 200),
                sub(2, 0, CoreKind::Aic, 400, 500),
            ],
            edges: vec![
                DepEdge {
                    producer: 0,
                    consumer: 2,
                    kind: EdgeKind::Raw,
                },
                DepEdge {
                    producer: 1,
                    consumer: 2,
                    kind: EdgeKind::War,
                },
            ],
            aicpu: vec![
                aicpu(0, AicpuPhase::Submit, 0, 50),
                aicpu(0, AicpuPhase::TensorMapLookup, 10, 20), // nested: not counted twice
                aicpu(0, AicpuPhase::BackPressure, 60, 90),    // a wait: not busy
                aicpu(1, AicpuPhase::Dispatch, 90, 100),
                aicpu(1, AicpuPhase::SchedIdle, 100, 390), // a wait
                aicpu(1, AicpuPhase::SchedCollect, 390, 400),
                aicpu(2, AicpuPhase::Dispatch, 90, 110),
            ],
            counters: vec![],
            dropped: vec![DroppedEvents {
                thread: "AIC 0".into(),
                count: 5,
            }],
        };
        let host = |name: &str, s, e| HostSpan {
            thread: "host lane".into(),
            name: name.into(),
            epoch: Some(7),
            start_ns: s,
            end_ns: e,
        };
        Trace {
            processes: vec![ProcessTrace {
                pid: 0,
                name: "chip 0".into(),
                clock: ClockAlignment::default(),
                runs: vec![run],
                host_spans: vec![host("prepare", 1_000, 1_200), host("wait", 1_300, 2_000)],
            }],
        }
    }

    #[test]
    fn figures_of_a_hand_made_run() {
        let s = Summary::of(&hand_made());
        assert_eq!(s.runs.len(), 1);
        let r = &s.runs[0];
        assert_eq!((r.tasks, r.subtasks), (3, 3));
        assert_eq!(r.host_ns, Some(1_000));
        assert_eq!(r.device_ns, 400, "100..500");
        assert_eq!(
            r.orch_ns,
            Some(50),
            "union of 0..50 and 10..20; back-pressure excluded"
        );
        assert_eq!(r.sched_ns, Some(10 + 10 + 20));
        assert_eq!(r.sched_threads, 2);
        // busy 200 + 100 + 100 = 400 over 400 ns × 2 cores.
        assert!((r.effective - 0.5).abs() < 1e-9, "{}", r.effective);
        assert!((r.sched_overhead.unwrap() - 40.0 / 800.0).abs() < 1e-9);
        assert_eq!(r.critical_path_ns, 300, "task 0 (200) then task 2 (100)");
        assert_eq!(r.dropped, 5);
        let mm = r.kernels.iter().find(|k| k.name == "mm").unwrap();
        assert_eq!((mm.count, mm.p50_ns, mm.p99_ns), (2, 100, 200));
        assert!((mm.mean_ns - 150.0).abs() < 1e-9);
        let add = r.kernels.iter().find(|k| k.name == "add").unwrap();
        assert_eq!((add.count, add.p50_ns), (1, 100));
        let cores: Vec<(&str, u64)> = r
            .cores
            .iter()
            .map(|c| (c.core.as_str(), c.busy_ns))
            .collect();
        assert_eq!(cores, [("AIC 0", 300), ("AIV 1", 100)]);
        assert!((r.cores[0].utilisation - 0.75).abs() < 1e-9);
        let text = s.to_string();
        for want in [
            "Host 1.00 µs",
            "Device 400 ns",
            "Orch 50 ns",
            "Sched 40 ns",
            "Effective 50.0%",
            "critical path 300 ns",
            "5 events dropped",
            "AIV 1",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50), 50);
        assert_eq!(percentile(&v, 99), 99);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
        assert_eq!(union_len(vec![(0, 10), (5, 20), (30, 31)]), 21);
    }

    #[test]
    fn figures_a_level_does_not_record_say_so_instead_of_zero() {
        let mut t = hand_made();
        t.processes[0].runs[0].level = TraceLevel::Dispatch;
        let s = Summary::of(&t);
        let r = &s.runs[0];
        assert_eq!(
            (r.orch_ns, r.sched_ns, r.sched_overhead),
            (None, None, None)
        );
        let text = s.to_string();
        for want in [
            "Orch not recorded at level dispatch",
            "Sched not recorded at level dispatch",
            "scheduler overhead not recorded at level dispatch",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        t.processes[0].runs[0].level = TraceLevel::Scheduler;
        let r = Summary::of(&t).runs.remove(0);
        assert_eq!(
            r.orch_ns, None,
            "the orchestrator's phases need level orchestrator"
        );
        assert_eq!(r.sched_ns, Some(40));
    }

    #[test]
    fn empty_trace_says_so() {
        assert_eq!(
            Summary::of(&Trace::default()).to_string(),
            "no traced runs\n"
        );
    }
}
