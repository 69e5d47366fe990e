//! Synthetic traces: a gemm-like run laid out by a small list scheduler.
//!
//! Owns [`synthetic`], the trace that tests, the write-speed measurement and the docs use when
//! no recorded run is at hand. Every span it makes is consistent: a consumer's subtasks start
//! after each producer's last subtask ended, and no core runs two subtasks at once.

use crate::model::*;

/// What [`synthetic`] builds.
#[derive(Clone, Debug)]
pub struct SampleSpec {
    /// Tasks in the run.
    pub tasks: usize,
    /// AIC cores (ids 0..aic).
    pub aic: u32,
    /// AIV cores (ids aic..aic+aiv).
    pub aiv: u32,
    /// Events the sample states as dropped on "AIV {aic}" (0 = none).
    pub dropped: u64,
}

impl Default for SampleSpec {
    fn default() -> Self {
        SampleSpec {
            tasks: 12,
            aic: 2,
            aiv: 4,
            dropped: 0,
        }
    }
}

/// (name, func id, core kind, blocks, duration ns) of the sample's kernels.
const KERNELS: [(&str, u32, CoreKind, u32, u64); 3] = [
    ("gemm_tile", 0, CoreKind::Aic, 1, 2_000),
    ("bias_add", 1, CoreKind::Aiv, 2, 800),
    ("relu", 2, CoreKind::Aiv, 2, 500),
];

/// A one-chip trace of a run of `spec.tasks` tasks of "gemm": task i runs kernel i mod 3 and
/// depends on task i-1 (RAW) unless i is a multiple of 3, and on task i-3 (WAR) when i >= 3.
/// Device clock from 0; the clock alignment puts device 0 at host 1 s. Includes orchestrator
/// submit spans, scheduler dispatch spans, a ready-queue counter and host spans.
pub fn synthetic(spec: &SampleSpec) -> Trace {
    let mut run = RunTrace {
        epoch: 1,
        callable: "gemm".into(),
        level: TraceLevel::Orchestrator,
        ..Default::default()
    };
    let aic: Vec<u32> = (0..spec.aic.max(1)).collect();
    let aiv: Vec<u32> = (spec.aic.max(1)..spec.aic.max(1) + spec.aiv.max(1)).collect();
    let mut free: Vec<u64> = vec![0; aic.len() + aiv.len()];
    let mut task_end: Vec<u64> = Vec::with_capacity(spec.tasks);
    let mut queued: i64 = 0;
    let mut sched_free = [0u64; 2];
    for i in 0..spec.tasks {
        let task = i as u64;
        let (name, func_id, kind, blocks, dur) = KERNELS[i % KERNELS.len()];
        run.tasks.push(TaskInfo {
            task,
            submit_index: task,
            kernels: vec![KernelRef {
                func_id,
                name: name.into(),
                core: kind,
            }],
        });
        let submit = 100 * task;
        run.aicpu.push(AicpuSpan {
            thread: 0,
            phase: AicpuPhase::Submit,
            task: Some(task),
            core: None,
            start_ns: submit,
            end_ns: submit + 60,
        });
        let mut ready = submit + 60;
        if i % 3 != 0 && i >= 1 {
            run.edges.push(DepEdge {
                producer: task - 1,
                consumer: task,
                kind: EdgeKind::Raw,
            });
            ready = ready.max(task_end[i - 1]);
        }
        if i >= 3 {
            run.edges.push(DepEdge {
                producer: task - 3,
                consumer: task,
                kind: EdgeKind::War,
            });
            ready = ready.max(task_end[i - 3]);
        }
        ready += 50;
        queued += 1;
        run.counters.push(CounterSample {
            name: format!(
                "ready_queue.{}",
                if kind == CoreKind::Aic { "aic" } else { "aiv" }
            ),
            ts_ns: ready,
            value: queued,
        });
        let (ids, base) = match kind {
            CoreKind::Aic => (&aic, 0),
            CoreKind::Aiv => (&aiv, aic.len()),
        };
        let mut end_max = 0;
        for block in 0..blocks {
            let (slot, _) = (0..ids.len())
                .map(|j| (j, free[base + j]))
                .min_by_key(|&(_, f)| f)
                .expect("at least one core of each kind");
            // The dispatching scheduler thread is busy 20 ns per dispatch, one at a time.
            let thread = 1 + (block % 2);
            let t = &mut sched_free[(thread - 1) as usize];
            let dispatch = ready.max(*t).max(free[base + slot]);
            *t = dispatch + 20;
            let start = dispatch + 40;
            let end = start + dur + 10 * u64::from(block);
            free[base + slot] = end;
            end_max = end_max.max(end);
            let core = ids[slot];
            run.aicpu.push(AicpuSpan {
                thread,
                phase: AicpuPhase::Dispatch,
                task: Some(task),
                core: Some(core),
                start_ns: dispatch,
                end_ns: dispatch + 20,
            });
            run.subtasks.push(SubtaskSpan {
                task,
                func_id,
                core,
                core_kind: kind,
                block,
                start_ns: start,
                end_ns: end,
            });
        }
        queued -= 1;
        task_end.push(end_max);
    }
    if spec.dropped > 0 {
        run.dropped.push(DroppedEvents {
            thread: format!("AIV {}", aiv[0]),
            count: spec.dropped,
        });
    }
    let device_end = task_end.iter().copied().max().unwrap_or(0);
    let host0 = 1_000_000_000;
    let host_spans = [
        ("prepare", 0, 2_000),
        ("launch", 2_000, 3_000),
        ("wait", 3_000, 3_000 + device_end + 5_000),
        ("record read", 8_000 + device_end, 9_000 + device_end),
        ("finalize", 9_000 + device_end, 10_000 + device_end),
    ]
    .into_iter()
    .map(|(name, s, e)| HostSpan {
        thread: "host lane".into(),
        name: name.into(),
        epoch: Some(1),
        start_ns: host0 - 3_000 + s,
        end_ns: host0 - 3_000 + e,
    })
    .collect();
    Trace {
        processes: vec![ProcessTrace {
            pid: 0,
            name: "chip 0 (device 0)".into(),
            clock: ClockAlignment {
                device_ns: 0,
                host_ns: host0,
            },
            runs: vec![run],
            host_spans,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_respects_edges_and_cores() {
        let t = synthetic(&SampleSpec {
            tasks: 30,
            ..Default::default()
        });
        let run = &t.processes[0].runs[0];
        assert_eq!(run.tasks.len(), 30);
        for e in &run.edges {
            let pend = run
                .subtasks
                .iter()
                .filter(|s| s.task == e.producer)
                .map(|s| s.end_ns)
                .max();
            let cstart = run
                .subtasks
                .iter()
                .filter(|s| s.task == e.consumer)
                .map(|s| s.start_ns)
                .min();
            assert!(pend.unwrap() < cstart.unwrap(), "{e:?}");
        }
        let mut by_core: std::collections::BTreeMap<u32, Vec<(u64, u64)>> = Default::default();
        for s in &run.subtasks {
            assert!(s.start_ns < s.end_ns);
            by_core
                .entry(s.core)
                .or_default()
                .push((s.start_ns, s.end_ns));
        }
        for spans in by_core.values_mut() {
            spans.sort_unstable();
            assert!(
                spans.windows(2).all(|w| w[0].1 <= w[1].0),
                "overlap: {spans:?}"
            );
        }
    }
}
