//! Run traces (`docs/tracing.md`, Capture): a small graph with every edge kind, SPMD blocks
//! and a MIX task, run at each level; what the trace says is checked against what the
//! orchestration submitted: every subtask once on a core of its kernel's type with
//! start < end, every edge's consumer starting after its producer ended, device times
//! inside the host's launch..wait window once aligned, exact drop counts with tiny buffers,
//! and nothing at all at level off.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::common::*;
use simpler_abi::*;
use simpler_host::trace_model::{
    AicpuPhase, CoreKind, EdgeKind, ProcessTrace, RunTrace, Trace, TraceLevel,
};
use simpler_host::*;

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Runs 50 ms: its consumers are submitted long before it ends, so their edges are wired.
unsafe extern "C-unwind" fn slow_kernel(_args: *mut i64) {
    spin(Duration::from_millis(50));
}

unsafe extern "C-unwind" fn quick_kernel(_args: *mut i64) {
    spin(Duration::from_micros(20));
}

const SLOW_AIV: i32 = 0;
const AIV: i32 = 1;
const AIC: i32 = 2;
const AIV_B: i32 = 3;
/// Independent tasks after the graph.
const EXTRA: usize = 16;

/// Submits `d`, returning its task id (`u64::MAX` on failure; task ids start at 0).
///
/// # Safety
/// `ops` is the table the orchestration entry received.
unsafe fn submit_id(ops: *const OrchOps, d: &TaskDesc) -> u64 {
    // SAFETY: TaskOutputs is plain data.
    let mut out: TaskOutputs = unsafe { std::mem::zeroed() };
    // SAFETY: the caller passes the table it received.
    let rc = unsafe { ((*ops).submit_task)((*ops).runtime, d, &mut out) };
    if rc == 0 {
        out.task_id
    } else {
        u64::MAX
    }
}

/// T0 writes a (4 blocks, slow); T1 (AIC) reads a (RAW T0), writes b; T2 writes a (WAW T0,
/// WAR T1); T3 depends explicitly on T1; T4 (MIX: AIC + AIV0 + AIV1, 2 blocks) reads b
/// (RAW T1); then `EXTRA` independent AIV tasks.
unsafe extern "C-unwind" fn graph_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args.
    let g = unsafe { &*args };
    let (a, b) = (g.tensors[0], g.tensors[1]);
    // SAFETY: `ops` is the table this orchestration entry received.
    let submit = |d: &TaskDesc| unsafe { submit_id(ops, d) };
    let mut d = task(SLOW_AIV, LANE_AIV0);
    d.block_num = 4;
    push(&mut d, a, TensorArgType::OutputExisting);
    if submit(&d) == u64::MAX {
        return 1;
    }
    let mut d = task(AIC, LANE_AIC);
    push(&mut d, a, TensorArgType::Input);
    push(&mut d, b, TensorArgType::OutputExisting);
    let t1 = submit(&d);
    if t1 == u64::MAX {
        return 1;
    }
    let mut d = task(AIV, LANE_AIV0);
    push(&mut d, a, TensorArgType::OutputExisting);
    if submit(&d) == u64::MAX {
        return 1;
    }
    let mut d = task(AIV, LANE_AIV0);
    d.deps[0] = t1;
    d.dep_count = 1;
    if submit(&d) == u64::MAX {
        return 1;
    }
    let mut d = task(AIC, LANE_AIC);
    d.kernel_ids[LANE_AIV0] = AIV;
    d.kernel_ids[LANE_AIV1] = AIV_B;
    d.block_num = 2;
    push(&mut d, b, TensorArgType::Input);
    if submit(&d) == u64::MAX {
        return 1;
    }
    for _ in 0..EXTRA {
        let d = task(AIV, LANE_AIV0);
        if submit(&d) == u64::MAX {
            return 1;
        }
    }
    0
}

/// `n` independent AIV tasks without tensors (scalar 0 of the run).
unsafe extern "C-unwind" fn flat_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid args.
    let n = unsafe { (*args).scalars[0] };
    for _ in 0..n {
        let d = task(AIV, LANE_AIV0);
        // SAFETY: `ops` is the runtime's table.
        if unsafe { submit(ops, &d) } != 0 {
            return 1;
        }
    }
    0
}

/// Subtasks of `graph_orch`: 4 + 1 + 1 + 1 + 2 × 3 + EXTRA.
const GRAPH_SUBTASKS: usize = 13 + EXTRA;
const GRAPH_TASKS: usize = 5 + EXTRA;

fn callable(name: &str, orch: OrchEntry, sig: Vec<ArgSpec>) -> CallableSpec {
    let kernels: [(i32, CoreType, KernelEntry); 4] = [
        (SLOW_AIV, CoreType::Aiv, slow_kernel),
        (AIV, CoreType::Aiv, quick_kernel),
        (AIC, CoreType::Aic, quick_kernel),
        (AIV_B, CoreType::Aiv, quick_kernel),
    ];
    CallableSpec {
        name: name.into(),
        signature: Signature::new(sig).unwrap(),
        orchestration: CodeImage::Orchestration(orch),
        kernels: kernels
            .into_iter()
            .map(|(f, core_type, k)| KernelSpec {
                func_id: f as u32,
                core_type,
                image: CodeImage::Kernel(k),
                name: None,
            })
            .collect(),
        runtime: None,
    }
}

fn tensor_spec(name: &str) -> ArgSpec {
    ArgSpec {
        name: name.into(),
        direction: ArgDirection::InOut,
        dtype: DataType::Float32,
        shape: None,
    }
}

fn scalar_spec() -> ArgSpec {
    ArgSpec {
        name: "n".into(),
        direction: ArgDirection::Scalar,
        dtype: DataType::Uint64,
        shape: None,
    }
}

fn traced(level: TraceLevel, records: u32) -> CallConfig {
    CallConfig {
        trace_level: level,
        trace_buffer_records: records,
        ..CallConfig::default()
    }
}

/// Runs the graph at `level`; returns its trace.
fn run_graph(
    w: &ChipWorker,
    id: CallableId,
    level: TraceLevel,
) -> Option<std::sync::Arc<simpler_host::CapturedTrace>> {
    let (mut a, mut b) = (vec![0f32; 256], vec![0f32; 256]);
    let report = w
        .run_with(
            id,
            &mut [host_f32(&mut a), host_f32(&mut b)],
            &traced(level, 0),
        )
        .unwrap();
    assert_eq!(report.tasks, GRAPH_TASKS as u64);
    report.trace
}

fn graph_worker() -> (ChipWorker, CallableId) {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let id = w
        .register(&callable(
            "graph",
            graph_orch,
            vec![tensor_spec("a"), tensor_spec("b")],
        ))
        .unwrap();
    (w, id)
}

fn only_run(trace: &Trace) -> (&ProcessTrace, &RunTrace) {
    assert_eq!(trace.processes.len(), 1, "one process: the chip");
    let p = &trace.processes[0];
    assert_eq!(p.runs.len(), 1);
    (p, &p.runs[0])
}

/// The checks that hold at every level but off.
fn check_tasks_level(p: &ProcessTrace, run: &RunTrace) {
    assert!(run.dropped.is_empty(), "nothing dropped: {:?}", run.dropped);
    assert_eq!(run.callable, "graph");
    // Tasks in submit order with their kernels.
    assert_eq!(run.tasks.len(), GRAPH_TASKS);
    let submits: Vec<u64> = run.tasks.iter().map(|t| t.submit_index).collect();
    assert_eq!(submits, (1..=GRAPH_TASKS as u64).collect::<Vec<_>>());
    let mix = &run.tasks[4];
    let lanes: Vec<(u32, CoreKind)> = mix.kernels.iter().map(|k| (k.func_id, k.core)).collect();
    assert_eq!(
        lanes,
        [
            (AIC as u32, CoreKind::Aic),
            (AIV as u32, CoreKind::Aiv),
            (AIV_B as u32, CoreKind::Aiv)
        ]
    );
    assert_eq!(mix.kernels[0].name, format!("func {AIC}"));
    let ids: Vec<u64> = run.tasks.iter().map(|t| t.task).collect();
    // Every subtask exactly once, on a core of its kernel's type, start < end.
    let mut seen = BTreeSet::new();
    for s in &run.subtasks {
        assert!(s.start_ns < s.end_ns, "{s:?}");
        assert!(
            seen.insert((s.task, s.block, s.func_id)),
            "subtask twice: {s:?}"
        );
        let want = if s.func_id == AIC as u32 {
            CoreKind::Aic
        } else {
            CoreKind::Aiv
        };
        assert_eq!(s.core_kind, want, "{s:?}");
        assert!(ids.contains(&s.task));
    }
    assert_eq!(run.subtasks.len(), GRAPH_SUBTASKS);
    let blocks = |t: u64| run.subtasks.iter().filter(|s| s.task == t).count();
    assert_eq!(blocks(ids[0]), 4, "4 SPMD blocks");
    assert_eq!(blocks(ids[4]), 6, "2 blocks of a 3-lane MIX task");
    // The edges with their kinds.
    let edges: BTreeMap<(u64, u64), EdgeKind> = run
        .edges
        .iter()
        .map(|e| ((e.producer, e.consumer), e.kind))
        .collect();
    let want = [
        ((ids[0], ids[1]), EdgeKind::Raw),
        ((ids[0], ids[2]), EdgeKind::Waw),
        ((ids[1], ids[2]), EdgeKind::War),
        ((ids[1], ids[3]), EdgeKind::Explicit),
        ((ids[1], ids[4]), EdgeKind::Raw),
    ];
    assert_eq!(edges, want.into_iter().collect(), "{:?}", run.edges);
    // Every consumer starts after its producer ended.
    for e in &run.edges {
        let end = run
            .subtasks
            .iter()
            .filter(|s| s.task == e.producer)
            .map(|s| s.end_ns)
            .max()
            .unwrap();
        let start = run
            .subtasks
            .iter()
            .filter(|s| s.task == e.consumer)
            .map(|s| s.start_ns)
            .min()
            .unwrap();
        assert!(
            end <= start,
            "{e:?}: producer ends {end}, consumer starts {start}"
        );
    }
    // Host spans, and the device's times inside the launch..wait window once aligned.
    let span = |name: &str| {
        let s = p
            .host_spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} span in {:?}", p.host_spans));
        assert!(s.start_ns <= s.end_ns, "{s:?}");
        assert_eq!(s.epoch, Some(run.epoch));
        (s.start_ns, s.end_ns)
    };
    for name in [
        "stage",
        "record read",
        "copy back",
        "trace read",
        "finalize",
    ] {
        span(name);
    }
    let (prepare, launch, wait) = (span("prepare"), span("launch"), span("wait"));
    assert!(prepare.1 <= launch.0 && launch.1 <= wait.0);
    assert!(
        p.clock.host_ns > p.clock.device_ns,
        "the device clock has its own origin"
    );
    let first = run.subtasks.iter().map(|s| s.start_ns).min().unwrap();
    let last = run.subtasks.iter().map(|s| s.end_ns).max().unwrap();
    assert!(
        p.clock.to_host(first) >= launch.0 && p.clock.to_host(last) <= wait.1,
        "aligned device times lie in the host's launch..wait window"
    );
}

#[test]
fn level_tasks_records_every_subtask_and_edge_and_nothing_of_the_aicpu() {
    let (w, id) = graph_worker();
    for _ in 0..2 {
        // The second run reuses the slot's area.
        let trace = run_graph(&w, id, TraceLevel::Tasks).expect("a traced run has a trace");
        let (p, run) = only_run(&trace);
        assert_eq!(run.level, TraceLevel::Tasks);
        check_tasks_level(p, run);
        assert!(
            run.aicpu.is_empty(),
            "{:?}",
            &run.aicpu[..3.min(run.aicpu.len())]
        );
        assert!(run.counters.is_empty());
        // The exporters carry the captured trace through: Perfetto and Chrome JSON read
        // back to the same subtasks and edges.
        let mut bytes = Vec::new();
        simpler_host::trace_model::perfetto::write(&trace, &mut bytes).unwrap();
        let back = simpler_host::trace_model::perfetto::read(&bytes).unwrap();
        let (_, r) = only_run(&back);
        assert_eq!(r.subtasks.len(), run.subtasks.len());
        assert_eq!(r.edges.len(), run.edges.len());
        let mut json = Vec::new();
        simpler_host::trace_model::chrome::write(&trace, &mut json).unwrap();
        let back = simpler_host::trace_model::chrome::read(&json).unwrap();
        assert_eq!(only_run(&back).1.subtasks.len(), run.subtasks.len());
    }
}

#[test]
fn chrome_json_slices_nest_on_every_thread_at_every_level() {
    use simpler_host::trace_model::chrome;
    let (w, id) = graph_worker();
    for level in [
        TraceLevel::Tasks,
        TraceLevel::Dispatch,
        TraceLevel::Scheduler,
        TraceLevel::Orchestrator,
    ] {
        let trace = run_graph(&w, id, level).expect("a traced run has a trace");
        let mut json = Vec::new();
        chrome::write(&trace, &mut json).unwrap();
        let crossing = chrome::crossing_slices(&json).unwrap();
        assert!(crossing.is_empty(), "level {level:?}: {crossing:?}");
        // Overflow threads fold back into their threads: the AICPU phases read back whole.
        let back = chrome::read(&json).unwrap();
        let (_, run) = only_run(&trace);
        let (_, r) = only_run(&back);
        assert_eq!(r.aicpu.len(), run.aicpu.len(), "level {level:?}");
        assert_eq!(r.subtasks.len(), run.subtasks.len(), "level {level:?}");
    }
}

#[test]
fn level_orchestrator_adds_the_aicpu_phases_and_counters() {
    let (w, id) = graph_worker();
    let trace = run_graph(&w, id, TraceLevel::Orchestrator).unwrap();
    let (p, run) = only_run(&trace);
    check_tasks_level(p, run);
    let phases: BTreeSet<String> = run.aicpu.iter().map(|s| s.phase.to_string()).collect();
    for want in [
        AicpuPhase::Dispatch,
        AicpuPhase::Fin,
        AicpuPhase::ReadyWait,
        AicpuPhase::SchedCollect,
        AicpuPhase::SchedPlace,
        AicpuPhase::Submit,
        AicpuPhase::TensorMapLookup,
        AicpuPhase::DependencyWiring,
    ] {
        assert!(phases.contains(want.name()), "no {want}: {phases:?}");
    }
    for s in &run.aicpu {
        assert!(s.start_ns <= s.end_ns, "{s:?}");
        let orchestrator = s.phase.level() == TraceLevel::Orchestrator;
        assert_eq!(
            s.thread == 0,
            orchestrator,
            "thread 0 is the orchestrator: {s:?}"
        );
    }
    let submits = run
        .aicpu
        .iter()
        .filter(|s| s.phase == AicpuPhase::Submit)
        .count();
    assert_eq!(submits, GRAPH_TASKS);
    // Each subtask was dispatched once, to the core that ran it.
    let dispatched: BTreeSet<(u64, u32)> = run
        .aicpu
        .iter()
        .filter(|s| s.phase == AicpuPhase::Dispatch)
        .map(|s| (s.task.unwrap(), s.core.unwrap()))
        .collect();
    for s in &run.subtasks {
        assert!(dispatched.contains(&(s.task, s.core)), "{s:?}");
    }
    let counters: BTreeSet<&str> = run.counters.iter().map(|c| c.name.as_str()).collect();
    for want in [
        "ready_queue.aic",
        "ready_queue.aiv",
        "ready_queue.mix",
        "ring0.occupancy",
    ] {
        assert!(counters.contains(want), "no {want}: {counters:?}");
    }
    assert!(run.counters.iter().all(|c| c.value >= 0));
}

#[test]
fn full_buffers_drop_events_and_count_them_exactly() {
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let id = w
        .register(&callable("flat", flat_orch, vec![scalar_spec()]))
        .unwrap();
    const TASKS: u64 = 40;
    for records in [2u32, 8, 1000] {
        let report = w
            .run_with(
                id,
                &mut [HostArg::Scalar(TASKS)],
                &traced(TraceLevel::Tasks, records),
            )
            .unwrap();
        let trace = report.trace.unwrap();
        let run = &trace.processes[0].runs[0];
        let dropped = |pred: &dyn Fn(&str) -> bool| -> u64 {
            run.dropped
                .iter()
                .filter(|d| pred(&d.thread))
                .map(|d| d.count)
                .sum()
        };
        assert!(
            run.dropped.iter().all(|d| !d.thread.contains("garbled")),
            "{:?}",
            run.dropped
        );
        // Cores: one event per subtask; the orchestrator (AICPU 0): one per task.
        let core_drops = dropped(&|t| t.starts_with("AIV") || t.starts_with("AIC "));
        assert_eq!(run.subtasks.len() as u64 + core_drops, TASKS, "{records}");
        assert_eq!(
            run.tasks.len() as u64 + dropped(&|t| t == "AICPU 0"),
            TASKS,
            "{records}"
        );
        assert!(run.tasks.len() as u32 <= records);
        if records >= 1000 {
            assert!(run.dropped.is_empty());
        } else {
            assert!(core_drops > 0 || records as u64 * 16 >= TASKS);
        }
    }
}

#[test]
fn level_off_records_nothing() {
    let (w, id) = graph_worker();
    assert!(run_graph(&w, id, TraceLevel::Off).is_none());
    // The default config is off.
    let (mut a, mut b) = (vec![0f32; 256], vec![0f32; 256]);
    let report = w
        .run(id, &mut [host_f32(&mut a), host_f32(&mut b)])
        .unwrap();
    assert!(report.trace.is_none());
}

#[test]
fn kernels_of_one_entry_are_told_apart_by_their_names_in_the_trace_and_the_summary() {
    // AIV and AIV_B run the same entry function; named, they are two kernels.
    let mut spec = callable(
        "graph",
        graph_orch,
        vec![tensor_spec("a"), tensor_spec("b")],
    );
    for k in &mut spec.kernels {
        k.name = match k.func_id as i32 {
            AIV => Some("alpha".into()),
            AIV_B => Some("beta".into()),
            _ => None,
        };
    }
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let id = w.register(&spec).unwrap();
    let trace = run_graph(&w, id, TraceLevel::Tasks).expect("a traced run has a trace");
    let (_, run) = only_run(&trace);
    assert_eq!(run.kernel_name(0, AIV as u32), "alpha");
    assert_eq!(run.kernel_name(0, AIV_B as u32), "beta");
    assert_eq!(
        run.kernel_name(0, SLOW_AIV as u32),
        format!("func {SLOW_AIV}"),
        "an unnamed in-process kernel keeps `func N`"
    );
    let summary = simpler_host::trace_model::summary::Summary::of(&trace);
    let rows: BTreeMap<&str, usize> = summary.runs[0]
        .kernels
        .iter()
        .map(|k| (k.name.as_str(), k.count))
        .collect();
    let count = |f: i32| {
        run.subtasks
            .iter()
            .filter(|s| s.func_id == f as u32)
            .count()
    };
    assert_eq!(rows.get("alpha"), Some(&count(AIV)), "{rows:?}");
    assert_eq!(rows.get("beta"), Some(&count(AIV_B)), "{rows:?}");
    assert!(count(AIV) > 0 && count(AIV_B) > 0);
    w.close().unwrap();
}

#[test]
fn two_kernels_of_one_name_are_refused_naming_both() {
    let mut spec = callable(
        "graph",
        graph_orch,
        vec![tensor_spec("a"), tensor_spec("b")],
    );
    spec.kernels[1].name = Some("same".into());
    spec.kernels[3].name = Some("same".into());
    let w = ChipWorker::new(WorkerConfig::default()).unwrap();
    let e = w.register(&spec).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, HostError::InvalidCallable { .. }), "{e:?}");
    assert!(
        msg.contains(&format!(
            "func {AIV} and func {AIV_B} are both named `same`"
        )),
        "{msg}"
    );
    spec.kernels[3].name = Some(String::new());
    let msg = w.register(&spec).unwrap_err().to_string();
    assert!(
        msg.contains(&format!("kernel func {AIV_B}: kernel name is empty")),
        "{msg}"
    );
    w.close().unwrap();
}
