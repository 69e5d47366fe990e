//! Perfetto's native protobuf trace format: writing a [`Trace`] and reading our own files back.
//!
//! Owns the track layout in Perfetto terms (docs/tracing.md, "Export and tools"): per
//! [`ProcessTrace`] one process track; per AICore, AICPU thread and host thread one thread
//! track; a "runs" track with one slice per run (carrying its epoch, level and the clock
//! alignment); one counter track per counter name. Subtasks and AICPU phases are slices (or
//! instants) on their thread's track, times converted from the device clock to the host clock
//! with the process's [`ClockAlignment`](crate::ClockAlignment); host spans are already in the
//! host clock. Each dependency edge is one flow from the producer's last-ending subtask to the
//! consumer's first-starting subtask; the consumer's slice names its edges in a "deps"
//! annotation ("RAW from task 3; WAR from task 0"). A thread that dropped events gets an
//! instant "dropped N events" with a `count` annotation. No interned data: every packet stands
//! alone. The types are those of the `perfetto_protos` crate.

mod read;

use std::collections::BTreeMap;
use std::io::{self, Write};

use perfetto_protos::counter_descriptor::CounterDescriptor;
use perfetto_protos::debug_annotation::DebugAnnotation;
use perfetto_protos::process_descriptor::ProcessDescriptor;
use perfetto_protos::thread_descriptor::ThreadDescriptor;
use perfetto_protos::trace_packet::TracePacket;
use perfetto_protos::track_descriptor::TrackDescriptor;
use perfetto_protos::track_event::track_event::Type;
use perfetto_protos::track_event::TrackEvent;
use protobuf::{CodedOutputStream, Message, MessageField};

use crate::model::{ProcessTrace, RunTrace, TaskIndex, Trace};
use crate::tracks::{self, aicpu_label, ThreadKind};

pub use read::read;

/// The packet sequence every packet we write belongs to.
const SEQUENCE_ID: u32 = 1;
/// Field number of `Trace.packet`.
const PACKET_FIELD: u32 = 1;
/// Field number of `TracePacket.track_event`.
const TRACK_EVENT_FIELD: u32 = 11;
/// Name of the per-process track holding one slice per run.
const RUNS_TRACK: &str = "runs";
/// Name prefix of the instant that states a thread's dropped events.
const DROPPED: &str = "dropped ";

/// The Perfetto pid of model pid `pid` (Perfetto reserves pid 0).
fn perfetto_pid(pid: u32) -> i32 {
    i32::try_from(u64::from(pid) + 1).unwrap_or(i32::MAX)
}

/// Writes `trace` as a Perfetto protobuf trace (a `perfetto.protos.Trace` message, streamed
/// packet by packet). Times are host-clock ns.
///
/// Errors: those of `w`.
pub fn write(trace: &Trace, w: impl Write) -> io::Result<()> {
    let mut w = io::BufWriter::new(w);
    {
        let mut os = CodedOutputStream::new(&mut w);
        let mut next_uuid = 1u64;
        let mut events: Vec<Event> = Vec::new();
        let mut flow_counter = 0u64;
        let mut flow = next_flow(&mut flow_counter);
        for p in &trace.processes {
            let layout = Layout::new(p, &mut next_uuid);
            let pending = layout.events(p, &mut events, &mut flow);
            let overflow = layout.place(pending, &mut events, &mut next_uuid);
            for packet in layout.descriptors(p).into_iter().chain(overflow) {
                os.write_message(PACKET_FIELD, &packet)
                    .map_err(io::Error::other)?;
            }
        }
        // Perfetto sorts, but pairs begin/end per track in file order: keep each track's events
        // time-ordered, ends before begins at one instant (zero-length slices excepted).
        events.sort_by_key(|e| (e.ts, e.rank, e.seq));
        for e in events {
            os.write_bytes(PACKET_FIELD, &e.packet)
                .map_err(io::Error::other)?;
        }
        os.flush().map_err(io::Error::other)?;
    }
    w.flush()
}

/// A flow id source: unique within one written file.
fn next_flow(counter: &mut u64) -> impl FnMut() -> u64 + '_ {
    move || {
        *counter += 1;
        *counter
    }
}

/// One event packet with its sort key.
struct Event {
    ts: u64,
    rank: u8,
    seq: u64,
    /// The encoded `TracePacket` (encoded at once: the message structs are large, and a
    /// trace holds a million of them).
    packet: Vec<u8>,
}

/// Sort ranks at one timestamp.
const RANK_END: u8 = 0;
const RANK_INSTANT: u8 = 1;
const RANK_BEGIN: u8 = 2;
const RANK_END_ZERO: u8 = 3;

/// The tracks of one process.
struct Layout {
    process_uuid: u64,
    runs_uuid: u64,
    threads: Vec<(String, u64)>,
    thread_uuids: std::collections::HashMap<String, u64>,
    counters: BTreeMap<String, u64>,
}

impl Layout {
    fn new(p: &ProcessTrace, next_uuid: &mut u64) -> Layout {
        let mut take = || {
            let u = *next_uuid;
            *next_uuid += 1;
            u
        };
        let process_uuid = take();
        let runs_uuid = take();
        let threads: Vec<(String, u64)> = tracks::threads(p)
            .into_iter()
            .map(|t| (t, take()))
            .collect();
        let mut counters = BTreeMap::new();
        for c in p.runs.iter().flat_map(|r| r.counters.iter()) {
            if !counters.contains_key(&c.name) {
                counters.insert(c.name.clone(), take());
            }
        }
        let thread_uuids = threads.iter().cloned().collect();
        Layout {
            process_uuid,
            runs_uuid,
            threads,
            thread_uuids,
            counters,
        }
    }

    fn thread_uuid(&self, name: &str) -> u64 {
        *self
            .thread_uuids
            .get(name)
            .expect("tracks::threads lists every thread the process names")
    }

    fn descriptors(&self, p: &ProcessTrace) -> Vec<TracePacket> {
        let pid = perfetto_pid(p.pid);
        let mut out = Vec::new();
        let mut process = ProcessDescriptor::new();
        process.set_pid(pid);
        process.set_process_name(p.name.clone());
        let mut d = TrackDescriptor::new();
        d.set_uuid(self.process_uuid);
        d.process = MessageField::some(process);
        out.push(descriptor(d));
        let mut d = TrackDescriptor::new();
        d.set_uuid(self.runs_uuid);
        d.set_parent_uuid(self.process_uuid);
        d.set_name(RUNS_TRACK.to_string());
        out.push(descriptor(d));
        for (i, (name, uuid)) in self.threads.iter().enumerate() {
            let mut t = ThreadDescriptor::new();
            t.set_pid(pid);
            let tid = i64::from(pid) * 10_000 + i as i64 + 1;
            t.set_tid(i32::try_from(tid).unwrap_or(i32::MAX));
            t.set_thread_name(thread_label(name));
            let mut d = TrackDescriptor::new();
            d.set_uuid(*uuid);
            d.thread = MessageField::some(t);
            out.push(descriptor(d));
        }
        for (name, uuid) in &self.counters {
            let mut d = TrackDescriptor::new();
            d.set_uuid(*uuid);
            d.set_parent_uuid(self.process_uuid);
            d.set_name(name.clone());
            d.counter = MessageField::some(CounterDescriptor::new());
            out.push(descriptor(d));
        }
        out
    }

    /// Pushes the instants and counters of `p` onto `out` and returns its slices
    /// `(event, start, end)` (host clock) for [`Layout::place`].
    fn events(
        &self,
        p: &ProcessTrace,
        out: &mut Vec<Event>,
        flow: &mut impl FnMut() -> u64,
    ) -> Vec<Pending> {
        let mut pending = Vec::new();
        let clock = p.clock;
        for run in &p.runs {
            let epoch = ann_u("epoch", run.epoch);
            let (lo, hi) = run_window(run);
            let mut e = event(self.runs_uuid, run.callable.clone());
            e.debug_annotations = vec![
                epoch.clone(),
                ann_s("level", run.level.name()),
                ann_u("clock_device_ns", clock.device_ns),
                ann_u("clock_host_ns", clock.host_ns),
            ];
            pending.push(Pending::new(e, clock.to_host(lo), clock.to_host(hi)));

            let (outs, ins) = flows(run, flow);
            let index = TaskIndex::new(run);
            for (i, s) in run.subtasks.iter().enumerate() {
                let mut e = event(
                    self.thread_uuid(&s.core_name()),
                    index.kernel_name(s.task, s.func_id),
                );
                e.debug_annotations = vec![
                    epoch.clone(),
                    ann_u("task", s.task),
                    ann_u("func_id", u64::from(s.func_id)),
                    ann_u("block", u64::from(s.block)),
                    ann_u("core", u64::from(s.core)),
                ];
                if let Some(t) = index.task(s.task) {
                    e.debug_annotations.push(ann_u("submit", t.submit_index));
                }
                if let Some(o) = outs.get(&i) {
                    e.flow_ids = o.clone();
                }
                if let Some(list) = ins.get(&i) {
                    e.terminating_flow_ids = list.iter().map(|(id, _)| *id).collect();
                    let deps: Vec<String> = list
                        .iter()
                        .map(|(_, d)| format!("{} from task {}", d.kind, d.producer))
                        .collect();
                    e.debug_annotations.push(ann_s("deps", &deps.join("; ")));
                }
                pending.push(Pending::new(
                    e,
                    clock.to_host(s.start_ns),
                    clock.to_host(s.end_ns),
                ));
            }
            for a in &run.aicpu {
                let mut e = event(
                    self.thread_uuid(&a.thread_name()),
                    a.phase.name().to_string(),
                );
                e.debug_annotations = vec![epoch.clone()];
                if let Some(t) = a.task {
                    e.debug_annotations.push(ann_u("task", t));
                }
                if let Some(c) = a.core {
                    e.debug_annotations.push(ann_u("core", u64::from(c)));
                }
                if a.start_ns == a.end_ns {
                    push_instant(out, e, clock.to_host(a.start_ns));
                } else {
                    pending.push(Pending::new(
                        e,
                        clock.to_host(a.start_ns),
                        clock.to_host(a.end_ns),
                    ));
                }
            }
            for c in &run.counters {
                let mut e = TrackEvent::new();
                e.set_type(Type::TYPE_COUNTER);
                e.set_track_uuid(self.counters[&c.name]);
                e.set_counter_value(c.value);
                e.debug_annotations = vec![epoch.clone()];
                let ts = clock.to_host(c.ts_ns);
                out.push(Event {
                    ts,
                    rank: RANK_INSTANT,
                    seq: out.len() as u64,
                    packet: packet(ts, e),
                });
            }
            for d in &run.dropped {
                let mut e = event(
                    self.thread_uuid(&d.thread),
                    format!("{DROPPED}{} events on {}", d.count, d.thread),
                );
                e.debug_annotations = vec![epoch.clone(), ann_u("count", d.count)];
                push_instant(out, e, clock.to_host(lo));
            }
        }
        for h in &p.host_spans {
            let mut e = event(self.thread_uuid(&h.thread), h.name.clone());
            if let Some(ep) = h.epoch {
                e.debug_annotations = vec![ann_u("epoch", ep)];
            }
            pending.push(Pending::new(e, h.start_ns, h.end_ns));
        }
        pending
    }

    /// Places `slices` on their tracks so that every track's slices nest (Perfetto pairs a
    /// track's begins and ends like brackets): a slice that would cross one already on its
    /// track goes to an overflow track under it ("AICPU 1 (scheduler) +1", ...), the first
    /// one where it nests. Returns the overflow tracks' descriptors.
    fn place(
        &self,
        mut slices: Vec<Pending>,
        out: &mut Vec<Event>,
        next_uuid: &mut u64,
    ) -> Vec<TracePacket> {
        slices.sort_by_key(|p| (p.track, p.start, std::cmp::Reverse(p.end)));
        let mut descriptors = Vec::new();
        // Per track: its lanes, each (uuid, stack of open slice ends).
        let mut lanes: BTreeMap<u64, Vec<(u64, Vec<u64>)>> = BTreeMap::new();
        for p in slices {
            let (start, end, track) = (p.start, p.end.max(p.start), p.track);
            let track_lanes = lanes
                .entry(track)
                .or_insert_with(|| vec![(track, Vec::new())]);
            let mut chosen = None;
            for (uuid, stack) in track_lanes.iter_mut() {
                while stack.last().is_some_and(|&top| top <= start) {
                    stack.pop();
                }
                let fits = match stack.last() {
                    None => true,
                    Some(&top) => top >= end,
                };
                if fits {
                    stack.push(end);
                    chosen = Some(*uuid);
                    break;
                }
            }
            let uuid = chosen.unwrap_or_else(|| {
                let uuid = *next_uuid;
                *next_uuid += 1;
                let mut d = TrackDescriptor::new();
                d.set_uuid(uuid);
                d.set_parent_uuid(track);
                d.set_name(format!("{} +{}", self.label(track), track_lanes.len()));
                descriptors.push(descriptor(d));
                track_lanes.push((uuid, vec![end]));
                uuid
            });
            push_slice(out, p, uuid);
        }
        descriptors
    }

    /// The shown name of track `uuid` of this layout.
    fn label(&self, uuid: u64) -> String {
        if uuid == self.runs_uuid {
            return RUNS_TRACK.to_string();
        }
        let name = self
            .threads
            .iter()
            .find(|(_, u)| *u == uuid)
            .map_or("", |(n, _)| n.as_str());
        thread_label(name)
    }
}

/// The thread track label of thread `name`: "AICPU 0 (orchestrator)" etc., else the name.
fn thread_label(name: &str) -> String {
    match ThreadKind::of(name) {
        ThreadKind::Aicpu(n) => aicpu_label(n),
        _ => name.to_string(),
    }
}

/// The device-clock window of a run: first to last recorded device time (0..0 when empty).
pub(crate) fn run_window(run: &RunTrace) -> (u64, u64) {
    let times = run
        .subtasks
        .iter()
        .flat_map(|s| [s.start_ns, s.end_ns])
        .chain(run.aicpu.iter().flat_map(|a| [a.start_ns, a.end_ns]))
        .chain(run.counters.iter().map(|c| c.ts_ns));
    let (lo, hi) = times.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)));
    if lo > hi {
        (0, 0)
    } else {
        (lo, hi)
    }
}

/// Per edge of `run` with subtasks on both sides, a flow id: the outgoing ids keyed by the
/// producer's last-ending subtask index, the incoming (id, edge) keyed by the consumer's
/// first-starting subtask index.
#[allow(clippy::type_complexity)]
pub(crate) fn flows<'r>(
    run: &'r RunTrace,
    flow: &mut impl FnMut() -> u64,
) -> (
    BTreeMap<usize, Vec<u64>>,
    BTreeMap<usize, Vec<(u64, &'r crate::DepEdge)>>,
) {
    let mut last: BTreeMap<u64, usize> = BTreeMap::new();
    let mut first: BTreeMap<u64, usize> = BTreeMap::new();
    for (i, s) in run.subtasks.iter().enumerate() {
        let l = last.entry(s.task).or_insert(i);
        if run.subtasks[*l].end_ns < s.end_ns {
            *l = i;
        }
        let f = first.entry(s.task).or_insert(i);
        if run.subtasks[*f].start_ns > s.start_ns {
            *f = i;
        }
    }
    let mut outs: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut ins: BTreeMap<usize, Vec<(u64, &crate::DepEdge)>> = BTreeMap::new();
    for e in &run.edges {
        let (Some(&p), Some(&c)) = (last.get(&e.producer), first.get(&e.consumer)) else {
            continue;
        };
        let id = flow();
        outs.entry(p).or_default().push(id);
        ins.entry(c).or_default().push((id, e));
    }
    (outs, ins)
}

fn descriptor(d: TrackDescriptor) -> TracePacket {
    let mut p = TracePacket::new();
    p.set_trusted_packet_sequence_id(SEQUENCE_ID);
    p.set_track_descriptor(d);
    p
}

/// The encoded packet of event `e` at `ts`.
fn packet(ts: u64, e: TrackEvent) -> Vec<u8> {
    let mut p = TracePacket::new();
    p.set_timestamp(ts);
    p.set_trusted_packet_sequence_id(SEQUENCE_ID);
    p.set_track_event(e);
    p.write_to_bytes()
        .expect("a TracePacket has no required field left unset")
}

fn event(track: u64, name: String) -> TrackEvent {
    let mut e = TrackEvent::new();
    e.set_track_uuid(track);
    e.set_name(name);
    e
}

/// A slice's begin event, encoded at once (the message structs are large), waiting for
/// [`Layout::place`] to choose its track.
struct Pending {
    track: u64,
    start: u64,
    end: u64,
    /// The encoded `TrackEvent` (type begin, on `track`).
    begin: Vec<u8>,
}

impl Pending {
    fn new(mut begin: TrackEvent, start: u64, end: u64) -> Pending {
        begin.set_type(Type::TYPE_SLICE_BEGIN);
        Pending {
            track: begin.track_uuid(),
            start,
            end,
            begin: begin
                .write_to_bytes()
                .expect("a TrackEvent has no required field left unset"),
        }
    }
}

/// Pushes slice `p`'s begin and end on track `uuid`.
fn push_slice(out: &mut Vec<Event>, p: Pending, uuid: u64) {
    let (start, end) = (p.start, p.end.max(p.start));
    let mut begin = p.begin;
    if uuid != p.track {
        // A later occurrence of a field overrides an earlier one when protobuf parses
        // concatenated messages: this moves the encoded event to its overflow track.
        let mut moved = TrackEvent::new();
        moved.set_track_uuid(uuid);
        begin.extend(
            moved
                .write_to_bytes()
                .expect("a TrackEvent has no required field left unset"),
        );
    }
    // At one instant: longer slices begin first and later-begun slices end first (nesting).
    out.push(Event {
        ts: start,
        rank: RANK_BEGIN,
        seq: u64::MAX - (end - start),
        packet: packet_of_encoded(start, &begin),
    });
    let mut e = TrackEvent::new();
    e.set_type(Type::TYPE_SLICE_END);
    e.set_track_uuid(uuid);
    let rank = if end <= start {
        RANK_END_ZERO
    } else {
        RANK_END
    };
    out.push(Event {
        ts: end,
        rank,
        seq: u64::MAX - start,
        packet: packet(end, e),
    });
}

/// The encoded packet at `ts` holding the encoded `TrackEvent` `event`.
fn packet_of_encoded(ts: u64, event: &[u8]) -> Vec<u8> {
    let mut p = TracePacket::new();
    p.set_timestamp(ts);
    p.set_trusted_packet_sequence_id(SEQUENCE_ID);
    let mut bytes = p
        .write_to_bytes()
        .expect("a TracePacket has no required field left unset");
    let mut os = CodedOutputStream::vec(&mut bytes);
    os.write_bytes(TRACK_EVENT_FIELD, event)
        .and_then(|_| os.flush())
        .expect("writing to a Vec cannot fail");
    drop(os);
    bytes
}

fn push_instant(out: &mut Vec<Event>, mut e: TrackEvent, ts: u64) {
    e.set_type(Type::TYPE_INSTANT);
    let seq = out.len() as u64;
    out.push(Event {
        ts,
        rank: RANK_INSTANT,
        seq,
        packet: packet(ts, e),
    });
}

fn ann_u(name: &str, v: u64) -> DebugAnnotation {
    let mut a = DebugAnnotation::new();
    a.set_name(name.to_string());
    a.set_uint_value(v);
    a
}

fn ann_s(name: &str, v: &str) -> DebugAnnotation {
    let mut a = DebugAnnotation::new();
    a.set_name(name.to_string());
    a.set_string_value(v.to_string());
    a
}
