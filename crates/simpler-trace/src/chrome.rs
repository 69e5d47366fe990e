//! The Chrome JSON trace format (`chrome://tracing`, Perfetto's JSON importer): write and read.
//!
//! Owns the JSON layout (docs/tracing.md §7): a `{"traceEvents": [...]}` object; "M" metadata
//! events name each process and thread; each subtask, AICPU phase, host span and run is an "X"
//! complete event (`ts`/`dur` in µs, host clock); AICPU instants and drop counts are "i"
//! events; each dependency edge is a flow, "s" at the producer's last-ending subtask's end and
//! "f" (`bp: "e"`) at the consumer's first-starting subtask's start, named by the edge kind;
//! counters are "C" events. Thread ids follow the same track order as the Perfetto export; a
//! "runs" thread (tid 0) holds one event per run with its epoch, level and clock alignment.
//! The "X" events of one thread always nest: one that would cross another goes to an overflow
//! thread ("AICPU 1 (scheduler) +1", its `thread_name` naming the thread it overflows in
//! `overflow_of`), which the reader folds back into that thread.
//! The writer writes the JSON text itself, event by event, into one buffer handed to the
//! writer in chunks; the reader decodes with serde.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::TraceError;
use crate::export::{run_window, FastMap, Flows, SubtaskNames};
use crate::model::*;
use crate::tracks::{thread_label, ThreadIndex, ThreadKind};

/// One Chrome trace event as read; fields the format leaves out are `None`.
#[derive(Debug, Deserialize)]
struct Event {
    name: String,
    #[serde(default)]
    cat: String,
    ph: String,
    #[serde(default)]
    ts: f64,
    #[serde(default)]
    dur: Option<f64>,
    pid: u32,
    #[serde(default)]
    tid: u32,
    /// Non-standard: the run a counter sample belongs to (viewers ignore it).
    #[serde(default)]
    epoch: Option<u64>,
    #[serde(default)]
    args: Map<String, Value>,
}

/// The top-level object as read.
#[derive(Debug, Deserialize)]
struct File {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Event>,
}

const RUNS_TID: u32 = 0;
/// Output bytes gathered before they are handed to the writer.
const CHUNK: usize = 1 << 20;

fn ns(us: f64) -> u64 {
    (us * 1_000.0).round().max(0.0) as u64
}

/// Writes `trace` as Chrome JSON. Times are host-clock µs with ns precision (exact decimals:
/// `1000000.5` is 1 000 000 500 ns).
///
/// Errors: those of `w`.
pub fn write(trace: &Trace, w: impl Write) -> io::Result<()> {
    let mut j = Json::new(w);
    j.buf.extend_from_slice(b"{\"traceEvents\":[");
    let mut last_flow = 0u64;
    for p in &trace.processes {
        let pid = p.pid + 1;
        let clock = p.clock;
        let threads = ThreadIndex::new(p);
        let tid = |i: usize| i as u32 + 1;
        let slices = Nested::new(p, &threads);
        j.start("process_name", "", "M", 0);
        j.pid_tid(pid, 0);
        j.arg_s("name", &p.name);
        j.end()?;
        j.start("thread_name", "", "M", 0);
        j.pid_tid(pid, RUNS_TID);
        j.arg_s("name", "runs");
        j.end()?;
        for (i, t) in threads.names().iter().enumerate() {
            j.start("thread_name", "", "M", 0);
            j.pid_tid(pid, tid(i));
            j.arg_s("name", &thread_label(t));
            j.end()?;
            j.start("thread_sort_index", "", "M", 0);
            j.pid_tid(pid, tid(i));
            j.arg_u("sort_index", sort_index(tid(i), 0));
            j.end()?;
        }
        for &(overflow, of, lane) in &slices.overflow {
            let label = match of {
                RUNS_TID => "runs".to_string(),
                of => thread_label(&threads.names()[of as usize - 1]),
            };
            j.start("thread_name", "", "M", 0);
            j.pid_tid(pid, overflow);
            j.arg_s("name", &format!("{label} +{lane}"));
            j.arg_u(OVERFLOW_OF, u64::from(of));
            j.end()?;
            j.start("thread_sort_index", "", "M", 0);
            j.pid_tid(pid, overflow);
            j.arg_u("sort_index", sort_index(of, lane));
            j.end()?;
        }
        let mut next = 0usize;
        for run in &p.runs {
            let epoch = run.epoch;
            let (lo, hi) = run_window(run);
            let (lo_host, hi_host) = (clock.to_host(lo), clock.to_host(hi));
            j.start(&run.callable, "run", "X", lo_host);
            j.us("dur", hi_host - lo_host);
            j.pid_tid(pid, slices.tid[next]);
            next += 1;
            let first_subtask = next;
            j.arg_u("epoch", epoch);
            j.arg_s("level", run.level.name());
            j.arg_u("clock_device_ns", clock.device_ns);
            j.arg_u("clock_host_ns", clock.host_ns);
            j.end()?;
            let flows = Flows::new(run, &mut last_flow);
            let mut names = SubtaskNames::new(run, |n| j.intern(n));
            next += run.subtasks.len();
            for (i, s) in run.subtasks.iter().enumerate() {
                let t = slices.tid[first_subtask + i];
                let start = clock.to_host(s.start_ns);
                let (name, submit) = names.get(s.task, s.func_id, |n| j.intern(n));
                j.start_interned(name, "subtask", "X", start);
                j.us("dur", clock.to_host(s.end_ns).saturating_sub(start));
                j.pid_tid(pid, t);
                j.arg_u("epoch", epoch);
                j.arg_u("task", s.task);
                j.arg_u("func_id", u64::from(s.func_id));
                j.arg_u("block", u64::from(s.block));
                j.arg_u("core", u64::from(s.core));
                if let Some(submit) = submit {
                    j.arg_u("submit", submit);
                }
                j.end()?;
                for f in flows.incoming(i) {
                    let from = &run.subtasks[f.from];
                    let kind = f.edge.kind.name();
                    j.start(kind, "dep", "s", clock.to_host(from.end_ns));
                    j.pid_tid(pid, slices.tid[first_subtask + f.from]);
                    j.u("id", f.id);
                    j.arg_u("epoch", epoch);
                    j.arg_u("producer", f.edge.producer);
                    j.arg_u("consumer", f.edge.consumer);
                    j.end()?;
                    j.start(kind, "dep", "f", start);
                    j.pid_tid(pid, t);
                    j.u("id", f.id);
                    j.s("bp", "e");
                    j.end()?;
                }
            }
            for a in &run.aicpu {
                let start = clock.to_host(a.start_ns);
                let instant = a.start_ns == a.end_ns;
                j.start(
                    a.phase.name(),
                    "aicpu",
                    if instant { "i" } else { "X" },
                    start,
                );
                if instant {
                    j.pid_tid(pid, tid(threads.aicpu(a.thread)));
                } else {
                    j.us("dur", clock.to_host(a.end_ns).saturating_sub(start));
                    j.pid_tid(pid, slices.tid[next]);
                    next += 1;
                }
                if instant {
                    j.s("s", "t");
                }
                j.arg_u("epoch", epoch);
                if let Some(t) = a.task {
                    j.arg_u("task", t);
                }
                if let Some(c) = a.core {
                    j.arg_u("core", u64::from(c));
                }
                j.end()?;
            }
            for c in &run.counters {
                j.start(&c.name, "counter", "C", clock.to_host(c.ts_ns));
                j.pid_tid(pid, 0);
                j.u("epoch", epoch);
                j.arg_i("value", c.value);
                j.end()?;
            }
            for d in &run.dropped {
                let name = format!("dropped {} events on {}", d.count, d.thread);
                j.start(&name, "dropped", "i", lo_host);
                j.pid_tid(pid, tid(threads.named(&d.thread)));
                j.s("s", "t");
                j.arg_u("epoch", epoch);
                j.arg_u("count", d.count);
                j.arg_s("thread", &d.thread);
                j.end()?;
            }
        }
        for h in &p.host_spans {
            j.start(&h.name, "host", "X", h.start_ns);
            j.us("dur", h.end_ns.saturating_sub(h.start_ns));
            j.pid_tid(pid, slices.tid[next]);
            next += 1;
            if let Some(epoch) = h.epoch {
                j.arg_u("epoch", epoch);
            }
            j.end()?;
        }
    }
    j.buf.extend_from_slice(b"],\"displayTimeUnit\":\"ns\"}");
    j.finish()
}

/// The thread-name argument that marks an overflow thread: the tid of the thread whose
/// crossing slices it holds (readers fold it back into that thread).
const OVERFLOW_OF: &str = "overflow_of";

/// A thread's sort index: each thread's overflow threads sort right after it.
fn sort_index(tid: u32, lane: u32) -> u64 {
    (u64::from(tid) << 20) + u64::from(lane)
}

/// The thread of every complete ("X") event of one process such that the events of each
/// thread nest, as the format requires: a slice that would cross another on its thread goes
/// to an overflow thread ([`crate::export::nest`], the Perfetto export's rule).
struct Nested {
    /// Per slice, in the writer's order (per run: the run, its subtasks, its AICPU phases
    /// that last; then the host spans): its tid.
    tid: Vec<u32>,
    /// The overflow threads, each (tid, the thread it overflows, its lane).
    overflow: Vec<(u32, u32, u32)>,
}

impl Nested {
    fn new(p: &ProcessTrace, threads: &ThreadIndex) -> Nested {
        let clock = p.clock;
        let tid = |i: usize| i + 1;
        let mut slices: Vec<(usize, u64, u64)> = Vec::new();
        for run in &p.runs {
            let (lo, hi) = run_window(run);
            slices.push((RUNS_TID as usize, clock.to_host(lo), clock.to_host(hi)));
            for s in &run.subtasks {
                let t = tid(threads.core(s.core_kind, s.core));
                slices.push((t, clock.to_host(s.start_ns), clock.to_host(s.end_ns)));
            }
            for a in run.aicpu.iter().filter(|a| a.start_ns != a.end_ns) {
                let t = tid(threads.aicpu(a.thread));
                slices.push((t, clock.to_host(a.start_ns), clock.to_host(a.end_ns)));
            }
        }
        for h in &p.host_spans {
            slices.push((tid(threads.named(&h.thread)), h.start_ns, h.end_ns));
        }
        let tracks = threads.names().len() + 1;
        let lanes = crate::export::nest(tracks, &slices);
        let mut overflow = Vec::new();
        let mut of_lane: FastMap<(usize, u32), u32> = FastMap::default();
        let mut out = vec![0u32; slices.len()];
        for &k in &lanes.order {
            let (track, lane) = (slices[k].0, lanes.lane[k]);
            out[k] = if lane == 0 {
                track as u32
            } else {
                *of_lane.entry((track, lane)).or_insert_with(|| {
                    let t = (tracks + overflow.len()) as u32;
                    overflow.push((t, track as u32, lane));
                    t
                })
            };
        }
        Nested { tid: out, overflow }
    }
}

/// The JSON text of one [`write`], written by hand in the order serde would: per event
/// `start`, then its optional fields in the format's order (`dur`, `pid`/`tid`, `id`, `bp`,
/// `s`, `epoch`), its `args`, `end`. Keys are ours and need no escaping; every string value is
/// escaped (interned names once).
struct Json<W: Write> {
    w: W,
    buf: Vec<u8>,
    /// Events started so far (a comma goes before all but the first).
    events: usize,
    /// Whether the current event's `args` object is open.
    args_open: bool,
    digits: itoa::Buffer,
    /// Interned names, escaped with their quotes, and their ids.
    names: Vec<Vec<u8>>,
    ids: FastMap<String, usize>,
}

impl<W: Write> Json<W> {
    fn new(w: W) -> Json<W> {
        Json {
            w,
            buf: Vec::with_capacity(CHUNK + (CHUNK >> 4)),
            events: 0,
            args_open: false,
            digits: itoa::Buffer::new(),
            names: Vec::new(),
            ids: FastMap::default(),
        }
    }

    /// The id of name `name`, escaping and keeping it on first use.
    fn intern(&mut self, name: &str) -> usize {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let mut text = Vec::with_capacity(name.len() + 2);
        escape(&mut text, name);
        self.names.push(text);
        self.ids.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }

    /// Starts an event named `name`: its `name`, `cat` (left out when empty), `ph`, `ts`.
    /// Every name is interned (a trace repeats a few names many times).
    fn start(&mut self, name: &str, cat: &str, ph: &str, ts_ns: u64) {
        let name = self.intern(name);
        self.start_interned(name, cat, ph, ts_ns);
    }

    /// As [`Json::start`], the name being interned name `name`.
    fn start_interned(&mut self, name: usize, cat: &str, ph: &str, ts_ns: u64) {
        self.open();
        self.buf.extend_from_slice(&self.names[name]);
        self.rest(cat, ph, ts_ns);
    }

    fn open(&mut self) {
        if self.events > 0 {
            self.buf.push(b',');
        }
        self.events += 1;
        self.buf.extend_from_slice(b"{\"name\":");
    }

    fn rest(&mut self, cat: &str, ph: &str, ts_ns: u64) {
        if !cat.is_empty() {
            self.s("cat", cat);
        }
        self.s("ph", ph);
        self.us("ts", ts_ns);
    }

    fn key(&mut self, key: &str) {
        self.buf.extend_from_slice(b",\"");
        self.buf.extend_from_slice(key.as_bytes());
        self.buf.extend_from_slice(b"\":");
    }

    /// Field `key` = `ns` in µs, as an exact decimal.
    fn us(&mut self, key: &str, ns: u64) {
        self.key(key);
        self.buf
            .extend_from_slice(self.digits.format(ns / 1_000).as_bytes());
        let frac = ns % 1_000;
        if frac != 0 {
            let digits = [
                b'0' + (frac / 100) as u8,
                b'0' + (frac / 10 % 10) as u8,
                b'0' + (frac % 10) as u8,
            ];
            // Trailing zeros left out (frac is not 0: one digit at least stays).
            let mut keep = 3;
            while digits[keep - 1] == b'0' {
                keep -= 1;
            }
            self.buf.push(b'.');
            self.buf.extend_from_slice(&digits[..keep]);
        }
    }

    fn pid_tid(&mut self, pid: u32, tid: u32) {
        self.u("pid", u64::from(pid));
        self.u("tid", u64::from(tid));
    }

    /// Field `key` = `v`.
    fn u(&mut self, key: &str, v: u64) {
        self.key(key);
        self.buf.extend_from_slice(self.digits.format(v).as_bytes());
    }

    /// Field `key` = string `v`, one of our own tokens ("X", "subtask", ...): written as it
    /// is, without escaping.
    fn s(&mut self, key: &str, v: &str) {
        debug_assert!(
            !v.contains(['"', '\\']) && v.is_ascii(),
            "{v:?} needs escaping"
        );
        self.key(key);
        self.buf.push(b'"');
        self.buf.extend_from_slice(v.as_bytes());
        self.buf.push(b'"');
    }

    /// Opens the `args` object, or separates its next entry; then the entry's key.
    fn arg_key(&mut self, key: &str) {
        if self.args_open {
            self.buf.extend_from_slice(b",\"");
        } else {
            self.args_open = true;
            self.buf.extend_from_slice(b",\"args\":{\"");
        }
        self.buf.extend_from_slice(key.as_bytes());
        self.buf.extend_from_slice(b"\":");
    }

    fn arg_u(&mut self, key: &str, v: u64) {
        self.arg_key(key);
        self.buf.extend_from_slice(self.digits.format(v).as_bytes());
    }

    fn arg_i(&mut self, key: &str, v: i64) {
        self.arg_key(key);
        self.buf.extend_from_slice(self.digits.format(v).as_bytes());
    }

    fn arg_s(&mut self, key: &str, v: &str) {
        self.arg_key(key);
        escape(&mut self.buf, v);
    }

    /// Ends the event; hands the buffer to the writer once it holds a chunk.
    fn end(&mut self) -> io::Result<()> {
        if self.args_open {
            self.buf.push(b'}');
            self.args_open = false;
        }
        self.buf.push(b'}');
        if self.buf.len() >= CHUNK {
            self.w.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn finish(mut self) -> io::Result<()> {
        self.w.write_all(&self.buf)?;
        self.w.flush()
    }
}

/// Appends `s` as a JSON string (quoted, escaped).
/// The complete ("X") events of a Chrome JSON file that cross another on their thread
/// (begin inside it, end after it), as (pid, tid, name) of the later-beginning one; empty
/// when every thread's slices nest, as the format requires and [`write`] guarantees.
///
/// Errors: [`TraceError::Json`] when `bytes` is not a JSON object with `traceEvents`.
pub fn crossing_slices(bytes: &[u8]) -> Result<Vec<(u32, u32, String)>, TraceError> {
    let file: File = serde_json::from_slice(bytes).map_err(|e| TraceError::Json(e.to_string()))?;
    // One track per (pid, tid); a slice the nesting rule moves off lane 0 crosses another.
    let xs: Vec<&Event> = file.trace_events.iter().filter(|e| e.ph == "X").collect();
    let mut track_of: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    let slices: Vec<(usize, u64, u64)> = xs
        .iter()
        .map(|e| {
            let next = track_of.len();
            let track = *track_of.entry((e.pid, e.tid)).or_insert(next);
            let start = ns(e.ts);
            (track, start, start + e.dur.map_or(0, ns))
        })
        .collect();
    let lanes = crate::export::nest(track_of.len(), &slices);
    let crossing = lanes
        .order
        .iter()
        .filter(|&&k| lanes.lane[k] > 0)
        .map(|&k| (xs[k].pid, xs[k].tid, xs[k].name.clone()))
        .collect();
    Ok(crossing)
}

fn escape(buf: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *buf, s).expect("writing a JSON string into a Vec cannot fail");
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
    let mut overflows = Vec::new();
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
                if let Some(of) = e.args.get(OVERFLOW_OF).and_then(Value::as_u64) {
                    let of = u32::try_from(of).map_err(|_| {
                        TraceError::Shape(format!("thread {name:?}: {OVERFLOW_OF} {of}"))
                    })?;
                    overflows.push((e.pid, e.tid, of, name));
                    continue;
                }
                let canonical = match ThreadKind::of(name) {
                    ThreadKind::Aicpu(n) => aicpu_thread_name(n),
                    _ => name.to_string(),
                };
                threads.insert((e.pid, e.tid), canonical);
            }
            _ => {}
        }
    }
    // An overflow thread holds its thread's crossing slices: read them as that thread's.
    for (pid, tid, of, name) in overflows {
        let canonical = if of == RUNS_TID {
            "runs".to_string()
        } else {
            threads.get(&(pid, of)).cloned().ok_or_else(|| {
                TraceError::Shape(format!(
                    "thread {name:?} overflows thread {pid}:{of}, which has no name"
                ))
            })?
        };
        threads.insert((pid, tid), canonical);
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
