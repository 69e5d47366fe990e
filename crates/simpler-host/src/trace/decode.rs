//! Decoding a run's trace area, as read back from the device, into the trace model
//! (`docs/tracing.md`, Capture). Pure: bytes in, [`RunTrace`] out, nothing touches the device.
//!
//! A decode problem never fails the run: a record the decoder cannot make sense of (an
//! unknown kind or phase, an end before its start, a count past the buffer's capacity) is
//! counted in [`RunTrace::dropped`] under "<thread> garbled", next to the events the
//! thread dropped because its buffer was full.

use std::collections::{BTreeMap, HashMap};

use simpler_abi::*;
use simpler_trace::{
    aicpu_thread_name, AicpuPhase, AicpuSpan, CoreKind, CounterSample, DepEdge, DroppedEvents,
    EdgeKind, KernelRef, RunTrace, SubtaskSpan, TaskInfo, TraceLevel,
};

/// One thread's buffer as read back: its header and its first `len` records.
#[derive(Clone, Debug, Default)]
pub(crate) struct RawBuffer {
    pub(crate) header: TraceBufferHeader,
    pub(crate) records: Vec<TraceRecord>,
}

/// A run's trace area as read back.
#[derive(Clone, Debug, Default)]
pub(crate) struct RawArea {
    pub(crate) control: TraceControl,
    /// Buffers in area order (cores, then AICPU threads).
    pub(crate) buffers: Vec<RawBuffer>,
}

/// What the decoder needs to know about the run besides its records.
pub(crate) struct RunFacts<'a> {
    pub(crate) epoch: u64,
    pub(crate) callable: &'a str,
    pub(crate) level: TraceLevel,
    /// func id → kernel name (missing: "func N").
    pub(crate) kernel_names: &'a BTreeMap<u32, String>,
    /// Core id → its kind.
    pub(crate) core_kind: &'a dyn Fn(u32) -> CoreKind,
}

/// The trace model of one run from its area.
pub(crate) fn decode(area: &RawArea, facts: &RunFacts<'_>) -> RunTrace {
    let c = &area.control;
    let aicpu_threads = c.buffer_count.saturating_sub(c.core_count);
    // Sized up front: one event per record of its kind, no growth on the way.
    let mut count = [0usize; 8];
    for r in area.buffers.iter().flat_map(|b| &b.records) {
        count[(r.kind as usize).min(7)] += 1;
    }
    let of = |kind: u32| count[(kind as usize).min(7)];
    let mut run = RunTrace {
        epoch: facts.epoch,
        callable: facts.callable.to_string(),
        level: facts.level,
        tasks: Vec::with_capacity(of(TRACE_TASK)),
        subtasks: Vec::with_capacity(of(TRACE_SUBTASK)),
        edges: Vec::with_capacity(of(TRACE_EDGE)),
        aicpu: Vec::with_capacity(of(TRACE_AICPU)),
        counters: Vec::with_capacity(of(TRACE_COUNTER)),
        dropped: Vec::new(),
    };
    // Task records first: subtasks name their kernel through their task's lanes.
    let mut lanes: HashMap<u64, [u32; 3]> = HashMap::with_capacity(of(TRACE_TASK));
    let mut garbled = vec![0u64; area.buffers.len()];
    for (i, b) in area.buffers.iter().enumerate() {
        for r in b.records.iter().filter(|r| r.kind == TRACE_TASK) {
            lanes.insert(r.task, [r.a, r.b, r.c]);
            run.tasks.push(task_info(r, facts.kernel_names));
        }
        if b.header.len > u64::from(b.header.capacity) {
            garbled[i] += b.header.len - u64::from(b.header.capacity);
        }
    }
    for (i, b) in area.buffers.iter().enumerate() {
        let index = i as u32;
        let thread = aicpu_thread(index, c.core_count, aicpu_threads);
        for r in &b.records {
            let ok = match r.kind {
                TRACE_TASK => true,
                TRACE_SUBTASK if index < c.core_count && r.start_ns <= r.end_ns => {
                    let kind = (facts.core_kind)(r.a);
                    let func = lanes
                        .get(&r.task)
                        .map_or(u32::MAX, |l| lane_func(l, kind, r.c));
                    run.subtasks.push(SubtaskSpan {
                        task: r.task,
                        func_id: func,
                        core: r.a,
                        core_kind: kind,
                        block: r.b,
                        start_ns: r.start_ns,
                        end_ns: r.end_ns,
                    });
                    true
                }
                TRACE_EDGE => match edge_kind(r.a) {
                    Some(kind) => {
                        run.edges.push(DepEdge {
                            producer: r.start_ns,
                            consumer: r.task,
                            kind,
                        });
                        true
                    }
                    None => false,
                },
                TRACE_AICPU if r.start_ns <= r.end_ns => match (phase(r.a), thread) {
                    (Some(phase), Some(thread)) => {
                        run.aicpu.push(AicpuSpan {
                            thread,
                            phase,
                            task: (r.task != u64::MAX).then_some(r.task),
                            core: (r.b != u32::MAX).then_some(r.b),
                            start_ns: r.start_ns,
                            end_ns: r.end_ns,
                        });
                        true
                    }
                    _ => false,
                },
                TRACE_COUNTER => match counter_name(r.a) {
                    Some(name) => {
                        run.counters.push(CounterSample {
                            name,
                            ts_ns: r.start_ns,
                            value: r.end_ns as i64,
                        });
                        true
                    }
                    None => false,
                },
                _ => false,
            };
            if !ok {
                garbled[i] += 1;
            }
        }
    }
    for (i, b) in area.buffers.iter().enumerate() {
        let name = thread_name(i as u32, c.core_count, aicpu_threads, facts.core_kind);
        if b.header.dropped > 0 {
            run.dropped.push(DroppedEvents {
                thread: name.clone(),
                count: b.header.dropped,
            });
        }
        if garbled[i] > 0 {
            run.dropped.push(DroppedEvents {
                thread: format!("{name} garbled"),
                count: garbled[i],
            });
        }
    }
    // Stable sorts: records of one thread are already in order, and equal keys keep it.
    run.subtasks.sort_by_key(|s| (s.start_ns, s.core));
    run.aicpu.sort_by_key(|s| (s.thread, s.start_ns));
    run.counters.sort_by_key(|s| s.ts_ns);
    run.tasks.sort_by_key(|t| t.submit_index);
    run
}

fn task_info(r: &TraceRecord, names: &BTreeMap<u32, String>) -> TaskInfo {
    let kernels = [r.a, r.b, r.c]
        .into_iter()
        .enumerate()
        .filter(|&(_, f)| f != u32::MAX)
        .map(|(lane, f)| KernelRef {
            func_id: f,
            name: names
                .get(&f)
                .cloned()
                .unwrap_or_else(|| format!("func {f}")),
            core: if lane == 0 {
                CoreKind::Aic
            } else {
                CoreKind::Aiv
            },
        })
        .collect();
    TaskInfo {
        task: r.task,
        submit_index: r.start_ns,
        kernels,
    }
}

/// The func id a subtask of a task with `lanes` (AIC, AIV0, AIV1) ran on a core of `kind`
/// with sub-block `sub_block`: the AIC lane on an AIC; on an AIV, the lane of its sub-block
/// when the task uses it (a MIX task), else the task's one AIV lane.
fn lane_func(lanes: &[u32; 3], kind: CoreKind, sub_block: u32) -> u32 {
    match kind {
        CoreKind::Aic => lanes[0],
        CoreKind::Aiv => {
            let own = lanes[1 + (sub_block.min(1) as usize)];
            if own != u32::MAX {
                own
            } else {
                lanes[1]
            }
        }
    }
}

/// The model's AICPU thread number of buffer `index` (0 the orchestrator — the runtime's
/// top thread — then the schedulers), `None` for a core's buffer.
fn aicpu_thread(index: u32, core_count: u32, threads: u32) -> Option<u32> {
    let t = index.checked_sub(core_count)?;
    Some(if t + 1 == threads { 0 } else { t + 1 })
}

fn thread_name(index: u32, cores: u32, threads: u32, kind: &dyn Fn(u32) -> CoreKind) -> String {
    match aicpu_thread(index, cores, threads) {
        Some(t) => aicpu_thread_name(t),
        None => format!("{} {index}", kind(index)),
    }
}

fn edge_kind(raw: u32) -> Option<EdgeKind> {
    Some(match raw {
        TRACE_EDGE_RAW => EdgeKind::Raw,
        TRACE_EDGE_WAW => EdgeKind::Waw,
        TRACE_EDGE_WAR => EdgeKind::War,
        TRACE_EDGE_EXPLICIT => EdgeKind::Explicit,
        _ => return None,
    })
}

fn phase(raw: u32) -> Option<AicpuPhase> {
    Some(match raw {
        TRACE_PHASE_DISPATCH => AicpuPhase::Dispatch,
        TRACE_PHASE_ACK => AicpuPhase::Ack,
        TRACE_PHASE_FIN => AicpuPhase::Fin,
        TRACE_PHASE_READY_WAIT => AicpuPhase::ReadyWait,
        TRACE_PHASE_SCHED_COLLECT => AicpuPhase::SchedCollect,
        TRACE_PHASE_SCHED_PLACE => AicpuPhase::SchedPlace,
        TRACE_PHASE_SCHED_IDLE => AicpuPhase::SchedIdle,
        TRACE_PHASE_SCHED_PARK => AicpuPhase::SchedPark,
        TRACE_PHASE_SUBMIT => AicpuPhase::Submit,
        TRACE_PHASE_TENSOR_MAP_LOOKUP => AicpuPhase::TensorMapLookup,
        TRACE_PHASE_DEPENDENCY_WIRING => AicpuPhase::DependencyWiring,
        TRACE_PHASE_HEAP_ALLOC => AicpuPhase::HeapAlloc,
        TRACE_PHASE_BACK_PRESSURE => AicpuPhase::BackPressure,
        _ => return None,
    })
}

fn counter_name(raw: u32) -> Option<String> {
    Some(match raw {
        TRACE_COUNTER_READY_AIC => "ready_queue.aic".into(),
        TRACE_COUNTER_READY_AIV => "ready_queue.aiv".into(),
        TRACE_COUNTER_READY_MIX => "ready_queue.mix".into(),
        r if (TRACE_COUNTER_RING0..TRACE_COUNTER_RING0 + 4).contains(&r) => {
            format!("ring{}.occupancy", r - TRACE_COUNTER_RING0)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: u32, abc: [u32; 3], task: u64, s: u64, e: u64) -> TraceRecord {
        TraceRecord {
            kind,
            a: abc[0],
            b: abc[1],
            c: abc[2],
            task,
            start_ns: s,
            end_ns: e,
        }
    }

    fn buffer(records: Vec<TraceRecord>, dropped: u64) -> RawBuffer {
        RawBuffer {
            header: TraceBufferHeader {
                capacity: 16,
                len: records.len() as u64,
                dropped,
                ..Default::default()
            },
            records,
        }
    }

    #[test]
    fn records_become_the_model_and_problems_are_counted() {
        const N: u32 = u32::MAX;
        // Cores 0 (AIC), 1 and 2 (AIV, sub-blocks 0/1); AICPU threads 0 (scheduler) and 1
        // (orchestrator).
        let area = RawArea {
            control: TraceControl {
                buffer_count: 5,
                core_count: 3,
                capacity: 16,
                ..Default::default()
            },
            buffers: vec![
                buffer(vec![rec(TRACE_SUBTASK, [0, 0, 0], 7, 10, 20)], 0),
                buffer(vec![rec(TRACE_SUBTASK, [1, 0, 0], 7, 11, 19)], 2),
                buffer(
                    vec![
                        rec(TRACE_SUBTASK, [2, 0, 1], 7, 12, 18),
                        rec(TRACE_SUBTASK, [2, 0, 1], 8, 30, 25),
                    ],
                    0,
                ),
                buffer(
                    vec![
                        rec(TRACE_AICPU, [TRACE_PHASE_FIN, 0, 0], 7, 21, 21),
                        rec(
                            TRACE_COUNTER,
                            [TRACE_COUNTER_RING0 + 1, 0, 0],
                            u64::MAX,
                            5,
                            3,
                        ),
                        rec(99, [0, 0, 0], 0, 0, 0),
                    ],
                    0,
                ),
                buffer(
                    vec![
                        rec(TRACE_TASK, [4, 5, 6], 7, 1, 1),
                        rec(TRACE_TASK, [N, 5, N], 8, 2, 1),
                        rec(TRACE_EDGE, [TRACE_EDGE_WAR, 0, 0], 8, 7, 0),
                    ],
                    0,
                ),
            ],
        };
        let names: BTreeMap<u32, String> = [(4, "matmul".to_string())].into();
        let kind = |c: u32| if c == 0 { CoreKind::Aic } else { CoreKind::Aiv };
        let run = decode(
            &area,
            &RunFacts {
                epoch: 3,
                callable: "gemm",
                level: TraceLevel::Dispatch,
                kernel_names: &names,
                core_kind: &kind,
            },
        );
        let funcs: Vec<(u32, u32)> = run.subtasks.iter().map(|s| (s.core, s.func_id)).collect();
        assert_eq!(
            funcs,
            [(0, 4), (1, 5), (2, 6)],
            "lanes by core kind and sub-block"
        );
        assert_eq!(run.tasks[0].kernels[0].name, "matmul");
        assert_eq!(run.tasks[0].kernels[1].name, "func 5");
        assert_eq!(run.tasks[1].submit_index, 2);
        assert_eq!(
            run.edges,
            [DepEdge {
                producer: 7,
                consumer: 8,
                kind: EdgeKind::War
            }]
        );
        assert_eq!(run.aicpu[0].thread, 1, "runtime thread 0 is scheduler 1");
        assert_eq!(run.aicpu[0].phase, AicpuPhase::Fin);
        assert_eq!(run.counters[0].name, "ring1.occupancy");
        assert_eq!(run.counters[0].value, 3);
        let dropped: Vec<(&str, u64)> = run
            .dropped
            .iter()
            .map(|d| (d.thread.as_str(), d.count))
            .collect();
        assert_eq!(
            dropped,
            [("AIV 1", 2), ("AIV 2 garbled", 1), ("AICPU 1 garbled", 1)],
            "full buffers and records that make no sense are both counted"
        );
    }
}
