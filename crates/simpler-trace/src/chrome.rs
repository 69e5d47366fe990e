//! The Chrome JSON trace format (`chrome://tracing`, Perfetto's JSON importer): write and read.
//!
//! Owns the JSON layout (docs/tracing.md, "Export and tools"): a `{"traceEvents": [...]}`
//! object; "M" metadata events name each process and thread; each subtask, AICPU phase, host
//! span and run is an "X" complete event (`ts`/`dur` in µs, host clock); AICPU instants and
//! drop counts are "i" events; each dependency edge is a flow, "s" at the producer's
//! last-ending subtask's end and "f" (`bp: "e"`) at the consumer's first-starting subtask's
//! start, named by the edge kind; counters are "C" events. Thread ids follow the same track
//! order as the Perfetto export; a "runs" thread (tid 0) holds one event per run with its
//! epoch, level and clock alignment.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::TraceError;
use crate::model::*;
use crate::perfetto::{flows, run_window};
use crate::tracks::{self, aicpu_label, ThreadKind};

/// One Chrome trace event; fields the format leaves out are `None`.
#[derive(Debug, Serialize, Deserialize)]
struct Event {
    name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    cat: String,
    ph: String,
    #[serde(default)]
    ts: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    #[serde(default)]
    tid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<String>,
    /// Non-standard: the run a counter sample belongs to (viewers ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    epoch: Option<u64>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    args: Map<String, Value>,
}

/// The top-level object.
#[derive(Debug, Serialize, Deserialize)]
struct File {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Event>,
    #[serde(rename = "displayTimeUnit", default)]
    display_time_unit: String,
}

const RUNS_TID: u32 = 0;

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

fn ns(us: f64) -> u64 {
    (us * 1_000.0).round().max(0.0) as u64
}

fn base(name: impl Into<String>, cat: &str, ph: &str, ts: u64, pid: u32, tid: u32) -> Event {
    Event {
        name: name.into(),
        cat: cat.to_string(),
        ph: ph.to_string(),
        ts: us(ts),
        dur: None,
        pid,
        tid,
        id: None,
        bp: None,
        s: None,
        epoch: None,
        args: Map::new(),
    }
}

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Writes `trace` as Chrome JSON. Times are host-clock µs with ns precision.
///
/// Errors: those of `w`.
pub fn write(trace: &Trace, w: impl Write) -> io::Result<()> {
    let mut events = Vec::new();
    let mut flow_id = 0u64;
    for p in &trace.processes {
        let pid = p.pid + 1;
        let clock = p.clock;
        let threads = tracks::threads(p);
        let tid_of = |name: &str| -> u32 {
            threads
                .iter()
                .position(|t| t == name)
                .expect("tracks::threads lists it") as u32
                + 1
        };
        let mut m = base("process_name", "", "M", 0, pid, 0);
        m.args = args(json!({ "name": p.name }));
        events.push(m);
        let mut m = base("thread_name", "", "M", 0, pid, RUNS_TID);
        m.args = args(json!({ "name": "runs" }));
        events.push(m);
        for (i, t) in threads.iter().enumerate() {
            let label = match ThreadKind::of(t) {
                ThreadKind::Aicpu(n) => aicpu_label(n),
                _ => t.clone(),
            };
            let mut m = base("thread_name", "", "M", 0, pid, i as u32 + 1);
            m.args = args(json!({ "name": label }));
            events.push(m);
            let mut m = base("thread_sort_index", "", "M", 0, pid, i as u32 + 1);
            m.args = args(json!({ "sort_index": i + 1 }));
            events.push(m);
        }
        for run in &p.runs {
            let (lo, hi) = run_window(run);
            let mut e = base(
                run.callable.clone(),
                "run",
                "X",
                clock.to_host(lo),
                pid,
                RUNS_TID,
            );
            e.dur = Some(us(clock.to_host(hi) - clock.to_host(lo)));
            e.args = args(json!({
                "epoch": run.epoch, "level": run.level.name(),
                "clock_device_ns": clock.device_ns, "clock_host_ns": clock.host_ns,
            }));
            events.push(e);
            let mut next = || {
                flow_id += 1;
                flow_id
            };
            let (outs, ins) = flows(run, &mut next);
            let index = TaskIndex::new(run);
            let mut flow_start: BTreeMap<u64, &SubtaskSpan> = BTreeMap::new();
            for (i, ids) in &outs {
                for id in ids {
                    flow_start.insert(*id, &run.subtasks[*i]);
                }
            }
            for (i, s) in run.subtasks.iter().enumerate() {
                let tid = tid_of(&s.core_name());
                let start = clock.to_host(s.start_ns);
                let mut e = base(
                    index.kernel_name(s.task, s.func_id),
                    "subtask",
                    "X",
                    start,
                    pid,
                    tid,
                );
                e.dur = Some(us(clock.to_host(s.end_ns).saturating_sub(start)));
                e.args = args(json!({
                    "epoch": run.epoch, "task": s.task, "func_id": s.func_id,
                    "block": s.block, "core": s.core,
                }));
                if let Some(t) = index.task(s.task) {
                    e.args.insert("submit".into(), json!(t.submit_index));
                }
                events.push(e);
                for (id, dep) in ins.get(&i).into_iter().flatten() {
                    let from = flow_start[id];
                    let mut f = base(
                        dep.kind.name(),
                        "dep",
                        "s",
                        clock.to_host(from.end_ns),
                        pid,
                        tid_of(&from.core_name()),
                    );
                    f.id = Some(*id);
                    f.args = args(json!({
                        "epoch": run.epoch, "producer": dep.producer, "consumer": dep.consumer,
                    }));
                    events.push(f);
                    let mut f = base(dep.kind.name(), "dep", "f", start, pid, tid);
                    f.id = Some(*id);
                    f.bp = Some("e".into());
                    events.push(f);
                }
            }
            for a in &run.aicpu {
                let tid = tid_of(&a.thread_name());
                let start = clock.to_host(a.start_ns);
                let instant = a.start_ns == a.end_ns;
                let mut e = base(
                    a.phase.name(),
                    "aicpu",
                    if instant { "i" } else { "X" },
                    start,
                    pid,
                    tid,
                );
                if instant {
                    e.s = Some("t".into());
                } else {
                    e.dur = Some(us(clock.to_host(a.end_ns).saturating_sub(start)));
                }
                e.args = args(json!({ "epoch": run.epoch }));
                if let Some(t) = a.task {
                    e.args.insert("task".into(), json!(t));
                }
                if let Some(c) = a.core {
                    e.args.insert("core".into(), json!(c));
                }
                events.push(e);
            }
            for c in &run.counters {
                let mut e = base(
                    c.name.clone(),
                    "counter",
                    "C",
                    clock.to_host(c.ts_ns),
                    pid,
                    0,
                );
                e.epoch = Some(run.epoch);
                e.args = args(json!({ "value": c.value }));
                events.push(e);
            }
            for d in &run.dropped {
                let name = format!("dropped {} events on {}", d.count, d.thread);
                let mut e = base(
                    name,
                    "dropped",
                    "i",
                    clock.to_host(lo),
                    pid,
                    tid_of(&d.thread),
                );
                e.s = Some("t".into());
                e.args = args(json!({ "epoch": run.epoch, "count": d.count, "thread": d.thread }));
                events.push(e);
            }
        }
        for h in &p.host_spans {
            let mut e = base(
                h.name.clone(),
                "host",
                "X",
                h.start_ns,
                pid,
                tid_of(&h.thread),
            );
            e.dur = Some(us(h.end_ns.saturating_sub(h.start_ns)));
            if let Some(ep) = h.epoch {
                e.args = args(json!({ "epoch": ep }));
            }
            events.push(e);
        }
    }
    let file = File {
        trace_events: events,
        display_time_unit: "ns".into(),
    };
    let mut w = io::BufWriter::new(w);
    serde_json::to_writer(&mut w, &file).map_err(io::Error::other)?;
    w.flush()
}

fn arg_u(e: &Event, key: &str) -> Option<u64> {
    e.args.get(key).and_then(Value::as_u64)
}

fn need(e: &Event, key: &str) -> Result<u64, TraceError> {
    arg_u(e, key)
        .ok_or_else(|| TraceError::Shape(format!("event {:?} has no {key:?} argument", e.name)))
}

/// Decodes a Chrome JSON trace written by [`write`].
///
/// Errors: [`TraceError::Json`] when the bytes are not a Chrome trace object;
/// [`TraceError::Shape`] when an event lacks an argument we wrote or names an unknown thread.
pub fn read(bytes: &[u8]) -> Result<Trace, TraceError> {
    let file: File = serde_json::from_slice(bytes).map_err(|e| TraceError::Json(e.to_string()))?;
    let mut procs: BTreeMap<u32, ProcessTrace> = BTreeMap::new();
    let mut threads: BTreeMap<(u32, u32), String> = BTreeMap::new();
    for e in file.trace_events.iter().filter(|e| e.ph == "M") {
        let name = e
            .args
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match e.name.as_str() {
            "process_name" => {
                let pid = e.pid.checked_sub(1).ok_or_else(|| {
                    TraceError::Shape("process id 0 is not one simpler writes".into())
                })?;
                procs.insert(
                    e.pid,
                    ProcessTrace {
                        pid,
                        name: name.into(),
                        ..Default::default()
                    },
                );
            }
            "thread_name" => {
                let canonical = match ThreadKind::of(name) {
                    ThreadKind::Aicpu(n) => aicpu_thread_name(n),
                    _ => name.to_string(),
                };
                threads.insert((e.pid, e.tid), canonical);
            }
            _ => {}
        }
    }
    let mut runs: Vec<&Event> = file
        .trace_events
        .iter()
        .filter(|e| e.ph == "X" && e.cat == "run")
        .collect();
    runs.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    for e in runs {
        let p = process(&mut procs, e.pid)?;
        p.clock = ClockAlignment {
            device_ns: need(e, "clock_device_ns")?,
            host_ns: need(e, "clock_host_ns")?,
        };
        let level = e.args.get("level").and_then(Value::as_str).unwrap_or("off");
        let level = level
            .parse()
            .map_err(|x| TraceError::Shape(format!("run {:?}: {x}", e.name)))?;
        p.runs.push(RunTrace {
            epoch: need(e, "epoch")?,
            callable: e.name.clone(),
            level,
            ..Default::default()
        });
    }
    let mut submit = crate::model::ReadTasks::new();
    for e in &file.trace_events {
        if e.ph == "M" || e.cat == "run" || e.ph == "f" {
            continue;
        }
        let thread = || {
            threads.get(&(e.pid, e.tid)).cloned().ok_or_else(|| {
                TraceError::Shape(format!(
                    "event {:?} on unnamed thread {}:{}",
                    e.name, e.pid, e.tid
                ))
            })
        };
        let start = ns(e.ts);
        let end = start + e.dur.map_or(0, ns);
        let p = process(&mut procs, e.pid)?;
        let clock = p.clock;
        match (e.ph.as_str(), e.cat.as_str()) {
            ("X", "host") => p.host_spans.push(HostSpan {
                thread: thread()?,
                name: e.name.clone(),
                epoch: arg_u(e, "epoch"),
                start_ns: start,
                end_ns: end,
            }),
            ("X", "subtask") => {
                let ThreadKind::Core(core_kind, core) = ThreadKind::of(&thread()?) else {
                    return Err(TraceError::Shape(format!(
                        "subtask {:?} off a core thread",
                        e.name
                    )));
                };
                let epoch = need(e, "epoch")?;
                let task = need(e, "task")?;
                let func_id = u32::try_from(need(e, "func_id")?).unwrap_or(u32::MAX);
                p.run_mut(epoch).subtasks.push(SubtaskSpan {
                    task,
                    func_id,
                    core,
                    core_kind,
                    block: u32::try_from(need(e, "block")?).unwrap_or(u32::MAX),
                    start_ns: clock.to_device(start),
                    end_ns: clock.to_device(end),
                });
                let entry = submit
                    .entry((e.pid, epoch, task))
                    .or_insert_with(|| (arg_u(e, "submit").unwrap_or(task), Vec::new()));
                if !entry.1.iter().any(|k| k.func_id == func_id) {
                    entry.1.push(KernelRef {
                        func_id,
                        name: e.name.clone(),
                        core: core_kind,
                    });
                }
            }
            ("X" | "i", "aicpu") => {
                let ThreadKind::Aicpu(thread) = ThreadKind::of(&thread()?) else {
                    return Err(TraceError::Shape(format!(
                        "AICPU phase {:?} off an AICPU thread",
                        e.name
                    )));
                };
                let phase = AicpuPhase::from_name(&e.name).ok_or_else(|| {
                    TraceError::Shape(format!("unknown AICPU phase {:?}", e.name))
                })?;
                p.run_mut(need(e, "epoch")?).aicpu.push(AicpuSpan {
                    thread,
                    phase,
                    task: arg_u(e, "task"),
                    core: arg_u(e, "core").map(|c| u32::try_from(c).unwrap_or(u32::MAX)),
                    start_ns: clock.to_device(start),
                    end_ns: clock.to_device(end),
                });
            }
            ("C", _) => {
                let value = e.args.get("value").and_then(Value::as_i64).ok_or_else(|| {
                    TraceError::Shape(format!("counter {:?} has no integer value", e.name))
                })?;
                p.run_mut(e.epoch.unwrap_or(0))
                    .counters
                    .push(CounterSample {
                        name: e.name.clone(),
                        ts_ns: clock.to_device(start),
                        value,
                    });
            }
            ("i", "dropped") => {
                let thread = thread()?;
                p.run_mut(need(e, "epoch")?).dropped.push(DroppedEvents {
                    thread,
                    count: need(e, "count")?,
                });
            }
            ("s", "dep") => {
                let kind = e
                    .name
                    .parse()
                    .map_err(|x| TraceError::Shape(format!("flow: {x}")))?;
                let edge = DepEdge {
                    producer: need(e, "producer")?,
                    consumer: need(e, "consumer")?,
                    kind,
                };
                let epoch = need(e, "epoch")?;
                p.run_mut(epoch).edges.push(edge);
            }
            _ => {}
        }
    }
    crate::model::assemble(procs, submit)
}

fn process(
    procs: &mut BTreeMap<u32, ProcessTrace>,
    pid: u32,
) -> Result<&mut ProcessTrace, TraceError> {
    procs.get_mut(&pid).ok_or_else(|| {
        TraceError::Shape(format!("event of process {pid} that has no process_name"))
    })
}
