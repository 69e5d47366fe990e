//! The trace model: what one or more runs recorded, per chip process, in each clock domain.
//!
//! Owns the plain data types that the capture side fills (simpler-host, simpler-worker) and the
//! exporters read. Holds no I/O and no recording logic. Device-side times (subtask, AICPU and
//! counter timestamps) stay in the device clock; host spans are in the host clock
//! (`CLOCK_MONOTONIC` ns). A process's [`ClockAlignment`] converts between them; see
//! `docs/tracing.md`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How much a run records (docs/tracing.md). Each level records everything of the levels
/// below it; host spans are recorded at every level but [`TraceLevel::Off`].
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum TraceLevel {
    /// Nothing is recorded.
    #[default]
    Off = 0,
    /// Each subtask's start and end on its core (kernel, func id, submit index, block).
    Tasks = 1,
    /// Plus AICPU dispatch, ACK and FIN handshake times and ready-queue waits.
    Dispatch = 2,
    /// Plus the scheduler loop phases.
    Scheduler = 3,
    /// Plus the orchestrator's submit phases (tensor-map lookup, dependency wiring, heap
    /// allocation, back-pressure waits).
    Orchestrator = 4,
}

impl TraceLevel {
    /// Every level, lowest first.
    pub const ALL: [TraceLevel; 5] = [
        TraceLevel::Off,
        TraceLevel::Tasks,
        TraceLevel::Dispatch,
        TraceLevel::Scheduler,
        TraceLevel::Orchestrator,
    ];

    /// True when a run at level `self` records what level `other` records (`self >= other`).
    pub fn records(self, other: TraceLevel) -> bool {
        self >= other
    }

    /// The level's name: "off", "tasks", "dispatch", "scheduler" or "orchestrator".
    pub fn name(self) -> &'static str {
        match self {
            TraceLevel::Off => "off",
            TraceLevel::Tasks => "tasks",
            TraceLevel::Dispatch => "dispatch",
            TraceLevel::Scheduler => "scheduler",
            TraceLevel::Orchestrator => "orchestrator",
        }
    }

    /// The level with number `n` (0..=4), or `None`.
    pub fn from_u8(n: u8) -> Option<TraceLevel> {
        TraceLevel::ALL.get(usize::from(n)).copied()
    }
}

impl fmt::Display for TraceLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A trace level string that is neither a level name nor a number 0..=4.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown trace level {0:?} (expected off, tasks, dispatch, scheduler, orchestrator or 0..4)"
)]
pub struct ParseTraceLevelError(pub String);

impl FromStr for TraceLevel {
    type Err = ParseTraceLevelError;

    /// Parses a level name (case-insensitive) or its number "0".."4".
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if let Ok(n) = t.parse::<u8>() {
            return TraceLevel::from_u8(n).ok_or_else(|| ParseTraceLevelError(s.to_string()));
        }
        TraceLevel::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| ParseTraceLevelError(s.to_string()))
    }
}

/// Everything recorded: one process per chip, plus one "L3 host" process for an L3 engine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// The processes, pids unique within the trace.
    pub processes: Vec<ProcessTrace>,
}

impl Trace {
    /// Appends `other`'s processes, renumbering their pids so that every pid stays unique.
    ///
    /// A pid of `other` that is not already used keeps its number; a clashing one gets the
    /// smallest pid above every pid in use.
    pub fn merge(&mut self, other: Trace) {
        let mut used: std::collections::BTreeSet<u32> =
            self.processes.iter().map(|p| p.pid).collect();
        for mut p in other.processes {
            if used.contains(&p.pid) {
                p.pid = used.last().map_or(0, |m| m.saturating_add(1));
            }
            used.insert(p.pid);
            self.processes.push(p);
        }
    }

    /// Every run of every process, with its process.
    pub fn runs(&self) -> impl Iterator<Item = (&ProcessTrace, &RunTrace)> {
        self.processes
            .iter()
            .flat_map(|p| p.runs.iter().map(move |r| (p, r)))
    }
}

/// One chip (or the L3 host) and what it recorded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessTrace {
    /// Unique within the [`Trace`].
    pub pid: u32,
    /// Shown as the process track's name, e.g. "chip 0 (device 0)", "L3 host".
    pub name: String,
    /// Device clock → host clock for this chip.
    pub clock: ClockAlignment,
    /// The traced runs, in launch order.
    pub runs: Vec<RunTrace>,
    /// Host-side phases, host clock.
    pub host_spans: Vec<HostSpan>,
}

impl ProcessTrace {
    /// The run of `epoch`, added (empty) if the process has none yet: how the readers
    /// gather a run's events as they meet them.
    pub fn run_mut(&mut self, epoch: u64) -> &mut RunTrace {
        match self.runs.iter().position(|r| r.epoch == epoch) {
            Some(i) => &mut self.runs[i],
            None => {
                self.runs.push(RunTrace {
                    epoch,
                    ..Default::default()
                });
                self.runs.last_mut().expect("just pushed")
            }
        }
    }
}

/// Tasks a reader gathered, keyed by (pid, epoch, task): submit index and kernels.
pub(crate) type ReadTasks = std::collections::BTreeMap<(u32, u64, u64), (u64, Vec<KernelRef>)>;

/// The trace a reader gathered: `tasks` placed into their processes' runs (each run's tasks
/// in submit order), processes in pid order. A task of an unknown pid is a shape error.
pub(crate) fn assemble(
    mut procs: std::collections::BTreeMap<u32, ProcessTrace>,
    tasks: ReadTasks,
) -> Result<Trace, crate::error::TraceError> {
    for ((pid, epoch, task), (submit_index, kernels)) in tasks {
        let p = procs.get_mut(&pid).ok_or_else(|| {
            crate::error::TraceError::Shape(format!("task {task} of unknown process {pid}"))
        })?;
        p.run_mut(epoch).tasks.push(TaskInfo {
            task,
            submit_index,
            kernels,
        });
    }
    for p in procs.values_mut() {
        for r in &mut p.runs {
            r.tasks.sort_by_key(|t| (t.submit_index, t.task));
        }
    }
    Ok(Trace {
        processes: procs.into_values().collect(),
    })
}

/// One simultaneous reading of both clocks: `host_ns = device_ns - clock.device_ns + clock.host_ns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockAlignment {
    /// The device clock's reading, ns.
    pub device_ns: u64,
    /// The host clock's reading at the same instant, ns (`CLOCK_MONOTONIC`).
    pub host_ns: u64,
}

impl ClockAlignment {
    /// The host-clock time (ns) of device-clock time `device_ns`, saturating at 0 and
    /// `u64::MAX`.
    pub fn to_host(&self, device_ns: u64) -> u64 {
        let shifted = i128::from(device_ns) - i128::from(self.device_ns) + i128::from(self.host_ns);
        shifted.clamp(0, i128::from(u64::MAX)) as u64
    }

    /// The device-clock time (ns) of host-clock time `host_ns`, the inverse of
    /// [`ClockAlignment::to_host`], saturating at 0 and `u64::MAX`.
    pub fn to_device(&self, host_ns: u64) -> u64 {
        let shifted = i128::from(host_ns) - i128::from(self.host_ns) + i128::from(self.device_ns);
        shifted.clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// One traced run of a callable on a chip.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunTrace {
    /// The run's epoch on its chip.
    pub epoch: u64,
    /// The callable's name.
    pub callable: String,
    /// The level the run recorded at.
    pub level: TraceLevel,
    /// The run's tasks, in submit order.
    pub tasks: Vec<TaskInfo>,
    /// Subtask spans on the AICores, device clock.
    pub subtasks: Vec<SubtaskSpan>,
    /// Dependency edges between tasks.
    pub edges: Vec<DepEdge>,
    /// AICPU thread phases, device clock.
    pub aicpu: Vec<AicpuSpan>,
    /// Counter samples, device clock.
    pub counters: Vec<CounterSample>,
    /// Events dropped, per recording thread; empty = nothing dropped.
    pub dropped: Vec<DroppedEvents>,
}

impl RunTrace {
    /// The task with id `task`, if recorded (a linear search; see [`TaskIndex`] for many).
    pub fn task(&self, task: u64) -> Option<&TaskInfo> {
        self.tasks.iter().find(|t| t.task == task)
    }

    /// The kernel name of `func_id` in `task`, else of `func_id` in any task, else
    /// `"func {func_id}"` (a linear search; see [`TaskIndex`] for many).
    pub fn kernel_name(&self, task: u64, func_id: u32) -> String {
        let by_task = self
            .task(task)
            .and_then(|t| t.kernels.iter().find(|k| k.func_id == func_id));
        let any = || {
            self.tasks
                .iter()
                .flat_map(|t| t.kernels.iter())
                .find(|k| k.func_id == func_id)
        };
        match by_task.or_else(any) {
            Some(k) if !k.name.is_empty() => k.name.clone(),
            _ => format!("func {func_id}"),
        }
    }
}

/// The tasks of a run by id and the kernel names by func id, for lookups per subtask.
#[derive(Clone, Debug)]
pub struct TaskIndex<'a> {
    by_task: std::collections::HashMap<u64, &'a TaskInfo>,
    by_func: std::collections::HashMap<u32, &'a str>,
}

impl<'a> TaskIndex<'a> {
    /// Indexes `run`'s tasks (the first task with an id wins; the first non-empty name of a
    /// func id wins).
    pub fn new(run: &'a RunTrace) -> TaskIndex<'a> {
        let mut by_task = std::collections::HashMap::with_capacity(run.tasks.len());
        let mut by_func = std::collections::HashMap::new();
        for t in &run.tasks {
            by_task.entry(t.task).or_insert(t);
            for k in t.kernels.iter().filter(|k| !k.name.is_empty()) {
                by_func.entry(k.func_id).or_insert(k.name.as_str());
            }
        }
        TaskIndex { by_task, by_func }
    }

    /// The task with id `task`, if recorded.
    pub fn task(&self, task: u64) -> Option<&'a TaskInfo> {
        self.by_task.get(&task).copied()
    }

    /// As [`RunTrace::kernel_name`], in constant time.
    pub fn kernel_name(&self, task: u64, func_id: u32) -> String {
        let by_task = self.task(task).and_then(|t| {
            t.kernels
                .iter()
                .find(|k| k.func_id == func_id && !k.name.is_empty())
        });
        match by_task
            .map(|k| k.name.as_str())
            .or_else(|| self.by_func.get(&func_id).copied())
        {
            Some(n) => n.to_string(),
            None => format!("func {func_id}"),
        }
    }
}

/// One task as submitted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskInfo {
    /// The task id (unique within the run).
    pub task: u64,
    /// The task's position in submit order, from 0.
    pub submit_index: u64,
    /// The kernels of the task's lanes.
    pub kernels: Vec<KernelRef>,
}

/// One kernel a task runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelRef {
    /// The kernel's func id.
    pub func_id: u32,
    /// The kernel's name.
    pub name: String,
    /// The kind of core it runs on.
    pub core: CoreKind,
}

/// The kind of an AICore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CoreKind {
    /// A cube core.
    Aic,
    /// A vector core.
    Aiv,
}

impl CoreKind {
    /// "AIC" or "AIV".
    pub fn name(self) -> &'static str {
        match self {
            CoreKind::Aic => "AIC",
            CoreKind::Aiv => "AIV",
        }
    }
}

impl fmt::Display for CoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One subtask (one block of one lane of a task) on the core that ran it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubtaskSpan {
    /// The task's id.
    pub task: u64,
    /// The kernel's func id.
    pub func_id: u32,
    /// The core's id on the chip; its track is named "{core_kind} {core}", e.g. "AIV 7".
    pub core: u32,
    /// The core's kind.
    pub core_kind: CoreKind,
    /// The block index within the lane.
    pub block: u32,
    /// Start, device clock ns.
    pub start_ns: u64,
    /// End, device clock ns (`>= start_ns`).
    pub end_ns: u64,
}

impl SubtaskSpan {
    /// `end_ns - start_ns`, 0 when inverted.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// The name of the core's track, e.g. "AIC 0".
    pub fn core_name(&self) -> String {
        format!("{} {}", self.core_kind, self.core)
    }
}

/// The kind of a dependency edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EdgeKind {
    /// Read after write.
    #[serde(rename = "RAW")]
    Raw,
    /// Write after write.
    #[serde(rename = "WAW")]
    Waw,
    /// Write after read.
    #[serde(rename = "WAR")]
    War,
    /// Declared by the orchestration, not inferred from tensors.
    #[serde(rename = "explicit")]
    Explicit,
}

impl EdgeKind {
    /// Every kind.
    pub const ALL: [EdgeKind; 4] = [
        EdgeKind::Raw,
        EdgeKind::Waw,
        EdgeKind::War,
        EdgeKind::Explicit,
    ];

    /// "RAW", "WAW", "WAR" or "explicit".
    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Raw => "RAW",
            EdgeKind::Waw => "WAW",
            EdgeKind::War => "WAR",
            EdgeKind::Explicit => "explicit",
        }
    }
}

impl fmt::Display for EdgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An edge kind string that is not "RAW", "WAW", "WAR" or "explicit".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown dependency edge kind {0:?} (expected RAW, WAW, WAR or explicit)")]
pub struct ParseEdgeKindError(pub String);

impl FromStr for EdgeKind {
    type Err = ParseEdgeKindError;

    /// Parses "RAW", "WAW", "WAR" or "explicit", case-insensitive.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EdgeKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ParseEdgeKindError(s.to_string()))
    }
}

/// `consumer` waits for `producer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DepEdge {
    /// The task that must finish first.
    pub producer: u64,
    /// The task that waits.
    pub consumer: u64,
    /// Why it waits.
    pub kind: EdgeKind,
}

/// What an AICPU thread was doing. Spans have start < end; instants have start == end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AicpuPhase {
    /// Handing a subtask to a core (level dispatch).
    Dispatch,
    /// The core's acknowledgement of a dispatch (level dispatch).
    Ack,
    /// The core's finish notice (level dispatch).
    Fin,
    /// Waiting on an empty ready queue (level dispatch).
    ReadyWait,
    /// Scheduler: collecting finished subtasks (level scheduler).
    SchedCollect,
    /// Scheduler: placing ready subtasks on idle cores (level scheduler).
    SchedPlace,
    /// Scheduler: a loop turn with nothing to do (level scheduler).
    SchedIdle,
    /// Scheduler: parked until woken (level scheduler).
    SchedPark,
    /// Orchestrator: submitting a task (level orchestrator).
    Submit,
    /// Orchestrator: looking tensors up in the tensor map (level orchestrator).
    TensorMapLookup,
    /// Orchestrator: wiring the task's dependencies (level orchestrator).
    DependencyWiring,
    /// Orchestrator: allocating from the ring heap (level orchestrator).
    HeapAlloc,
    /// Orchestrator: waiting for ring space (level orchestrator).
    BackPressure,
}

impl AicpuPhase {
    /// Every phase.
    pub const ALL: [AicpuPhase; 13] = [
        AicpuPhase::Dispatch,
        AicpuPhase::Ack,
        AicpuPhase::Fin,
        AicpuPhase::ReadyWait,
        AicpuPhase::SchedCollect,
        AicpuPhase::SchedPlace,
        AicpuPhase::SchedIdle,
        AicpuPhase::SchedPark,
        AicpuPhase::Submit,
        AicpuPhase::TensorMapLookup,
        AicpuPhase::DependencyWiring,
        AicpuPhase::HeapAlloc,
        AicpuPhase::BackPressure,
    ];

    /// The phase's name as shown in traces, e.g. "dispatch", "tensor_map_lookup".
    pub fn name(self) -> &'static str {
        match self {
            AicpuPhase::Dispatch => "dispatch",
            AicpuPhase::Ack => "ack",
            AicpuPhase::Fin => "fin",
            AicpuPhase::ReadyWait => "ready_wait",
            AicpuPhase::SchedCollect => "sched_collect",
            AicpuPhase::SchedPlace => "sched_place",
            AicpuPhase::SchedIdle => "sched_idle",
            AicpuPhase::SchedPark => "sched_park",
            AicpuPhase::Submit => "submit",
            AicpuPhase::TensorMapLookup => "tensor_map_lookup",
            AicpuPhase::DependencyWiring => "dependency_wiring",
            AicpuPhase::HeapAlloc => "heap_alloc",
            AicpuPhase::BackPressure => "back_pressure",
        }
    }

    /// The phase named `name` (as [`AicpuPhase::name`] gives), or `None`.
    pub fn from_name(name: &str) -> Option<AicpuPhase> {
        AicpuPhase::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The lowest level that records this phase.
    pub fn level(self) -> TraceLevel {
        match self {
            AicpuPhase::Dispatch | AicpuPhase::Ack | AicpuPhase::Fin | AicpuPhase::ReadyWait => {
                TraceLevel::Dispatch
            }
            AicpuPhase::SchedCollect
            | AicpuPhase::SchedPlace
            | AicpuPhase::SchedIdle
            | AicpuPhase::SchedPark => TraceLevel::Scheduler,
            AicpuPhase::Submit
            | AicpuPhase::TensorMapLookup
            | AicpuPhase::DependencyWiring
            | AicpuPhase::HeapAlloc
            | AicpuPhase::BackPressure => TraceLevel::Orchestrator,
        }
    }
}

impl fmt::Display for AicpuPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One phase (span or instant) of an AICPU thread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AicpuSpan {
    /// The AICPU thread: 0 is the orchestrator, 1.. the schedulers (track "AICPU {thread}").
    pub thread: u32,
    /// What it was doing.
    pub phase: AicpuPhase,
    /// The task concerned, if any.
    pub task: Option<u64>,
    /// The core concerned, if any.
    pub core: Option<u32>,
    /// Start, device clock ns.
    pub start_ns: u64,
    /// End, device clock ns (`== start_ns` for an instant).
    pub end_ns: u64,
}

impl AicpuSpan {
    /// `end_ns - start_ns`, 0 when inverted.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// The name of the thread's track: "AICPU {thread}".
    pub fn thread_name(&self) -> String {
        aicpu_thread_name(self.thread)
    }
}

/// The track name of AICPU thread `thread`: "AICPU {thread}".
pub fn aicpu_thread_name(thread: u32) -> String {
    format!("AICPU {thread}")
}

/// One reading of a counter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CounterSample {
    /// The counter, e.g. "ready_queue.aic", "ready_queue.aiv", "ready_queue.mix",
    /// "ring0.occupancy".
    pub name: String,
    /// When, device clock ns.
    pub ts_ns: u64,
    /// The value.
    pub value: i64,
}

/// How many events one recording thread dropped because its buffer was full.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DroppedEvents {
    /// The thread's track name, e.g. "AIC 3", "AICPU 1", "host lane".
    pub thread: String,
    /// Events dropped (> 0).
    pub count: u64,
}

/// A host-side phase of a run (or of the L3 engine), host clock (`CLOCK_MONOTONIC` ns).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostSpan {
    /// The host thread's track name, e.g. "host lane".
    pub thread: String,
    /// The phase: "prepare", "launch", "wait", "record read", "finalize", "copy back",
    /// "stage", ...
    pub name: String,
    /// The run's epoch, if the span belongs to one run.
    pub epoch: Option<u64>,
    /// Start, host clock ns.
    pub start_ns: u64,
    /// End, host clock ns.
    pub end_ns: u64,
}

impl HostSpan {
    /// `end_ns - start_ns`, 0 when inverted.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_parses_names_and_numbers_and_orders() {
        for (i, l) in TraceLevel::ALL.into_iter().enumerate() {
            assert_eq!(l.name().parse::<TraceLevel>(), Ok(l));
            assert_eq!(i.to_string().parse::<TraceLevel>(), Ok(l));
            assert_eq!(l.to_string(), l.name());
            assert_eq!(l as usize, i);
        }
        assert_eq!("Scheduler".parse::<TraceLevel>(), Ok(TraceLevel::Scheduler));
        assert!("5".parse::<TraceLevel>().is_err());
        let e = "verbose".parse::<TraceLevel>().unwrap_err();
        assert!(e.to_string().contains("verbose"), "{e}");
        assert_eq!(TraceLevel::default(), TraceLevel::Off);
        assert!(TraceLevel::Orchestrator.records(TraceLevel::Tasks));
        assert!(TraceLevel::Tasks.records(TraceLevel::Tasks));
        assert!(!TraceLevel::Tasks.records(TraceLevel::Dispatch));
        assert!(!TraceLevel::Off.records(TraceLevel::Tasks));
    }

    #[test]
    fn edge_kind_display_and_parse_round_trip() {
        let names: Vec<String> = EdgeKind::ALL.iter().map(|k| k.to_string()).collect();
        assert_eq!(names, ["RAW", "WAW", "WAR", "explicit"]);
        for k in EdgeKind::ALL {
            assert_eq!(k.to_string().parse::<EdgeKind>(), Ok(k));
        }
        assert_eq!("raw".parse::<EdgeKind>(), Ok(EdgeKind::Raw));
        assert!("RAR"
            .parse::<EdgeKind>()
            .unwrap_err()
            .to_string()
            .contains("RAR"));
    }

    #[test]
    fn clock_alignment_converts_both_ways() {
        let c = ClockAlignment {
            device_ns: 1_000,
            host_ns: 50_000,
        };
        assert_eq!(c.to_host(1_000), 50_000);
        assert_eq!(c.to_host(1_500), 50_500);
        assert_eq!(c.to_host(0), 49_000);
        assert_eq!(c.to_device(50_500), 1_500);
        let behind = ClockAlignment {
            device_ns: 10_000,
            host_ns: 5,
        };
        assert_eq!(behind.to_host(0), 0, "saturates at 0");
        let ahead = ClockAlignment {
            device_ns: 0,
            host_ns: u64::MAX,
        };
        assert_eq!(ahead.to_host(10), u64::MAX, "saturates at u64::MAX");
    }

    fn process(pid: u32, name: &str) -> ProcessTrace {
        ProcessTrace {
            pid,
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn merge_renumbers_clashing_pids() {
        let mut a = Trace {
            processes: vec![process(0, "chip 0"), process(1, "chip 1")],
        };
        let b = Trace {
            processes: vec![process(0, "chip 2"), process(7, "L3 host")],
        };
        a.merge(b);
        let pids: Vec<(u32, &str)> = a
            .processes
            .iter()
            .map(|p| (p.pid, p.name.as_str()))
            .collect();
        assert_eq!(
            pids,
            [(0, "chip 0"), (1, "chip 1"), (2, "chip 2"), (7, "L3 host")]
        );
        let c = Trace {
            processes: vec![process(7, "again"), process(7, "and again")],
        };
        a.merge(c);
        let mut all: Vec<u32> = a.processes.iter().map(|p| p.pid).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), a.processes.len(), "pids unique: {all:?}");
    }

    #[test]
    fn serde_round_trip_and_names() {
        let run = RunTrace {
            epoch: 3,
            callable: "gemm".into(),
            level: TraceLevel::Dispatch,
            tasks: vec![TaskInfo {
                task: 1,
                submit_index: 0,
                kernels: vec![KernelRef {
                    func_id: 4,
                    name: "mm".into(),
                    core: CoreKind::Aic,
                }],
            }],
            subtasks: vec![SubtaskSpan {
                task: 1,
                func_id: 4,
                core: 2,
                core_kind: CoreKind::Aic,
                block: 0,
                start_ns: 10,
                end_ns: 20,
            }],
            edges: vec![DepEdge {
                producer: 1,
                consumer: 2,
                kind: EdgeKind::War,
            }],
            aicpu: vec![AicpuSpan {
                thread: 1,
                phase: AicpuPhase::TensorMapLookup,
                task: Some(1),
                core: None,
                start_ns: 5,
                end_ns: 5,
            }],
            counters: vec![CounterSample {
                name: "ring0.occupancy".into(),
                ts_ns: 7,
                value: -1,
            }],
            dropped: vec![DroppedEvents {
                thread: "AIC 2".into(),
                count: 9,
            }],
        };
        let t = Trace {
            processes: vec![ProcessTrace {
                pid: 0,
                name: "chip 0".into(),
                clock: ClockAlignment {
                    device_ns: 1,
                    host_ns: 2,
                },
                runs: vec![run],
                host_spans: vec![HostSpan {
                    thread: "host lane".into(),
                    name: "wait".into(),
                    epoch: Some(3),
                    start_ns: 1,
                    end_ns: 2,
                }],
            }],
        };
        let json = serde_json::to_string(&t).unwrap();
        assert!(
            json.contains("\"WAR\"") && json.contains("\"tensor_map_lookup\""),
            "{json}"
        );
        assert!(
            json.contains("\"dispatch\"") && json.contains("\"aic\""),
            "{json}"
        );
        let back: Trace = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
        let r = &t.processes[0].runs[0];
        assert_eq!(r.kernel_name(1, 4), "mm");
        assert_eq!(r.kernel_name(9, 4), "mm");
        assert_eq!(r.kernel_name(1, 5), "func 5");
        let index = TaskIndex::new(r);
        assert_eq!(index.kernel_name(1, 4), "mm");
        assert_eq!(index.kernel_name(9, 4), "mm");
        assert_eq!(index.kernel_name(1, 5), "func 5");
        assert_eq!(index.task(1).map(|t| t.submit_index), Some(0));
        assert_eq!(r.subtasks[0].core_name(), "AIC 2");
        assert_eq!(r.aicpu[0].thread_name(), "AICPU 1");
        for p in AicpuPhase::ALL {
            assert_eq!(AicpuPhase::from_name(p.name()), Some(p));
            assert!(p.level() >= TraceLevel::Dispatch);
        }
    }
}
