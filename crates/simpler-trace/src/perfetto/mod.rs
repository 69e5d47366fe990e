//! Perfetto's native protobuf trace format: writing a [`Trace`] and reading our own files back.
//!
//! Owns the track layout in Perfetto terms (docs/tracing.md §6): per [`ProcessTrace`] one
//! process track; per AICore, AICPU thread and host thread one thread track; a "runs" track
//! with one slice per run (carrying its epoch, level and the clock alignment); one counter
//! track per counter name. Subtasks and AICPU phases are slices (or instants) on their
//! thread's track, times converted from the device clock to the host clock with the process's
//! [`ClockAlignment`](crate::ClockAlignment); host spans are already in the host clock. Each
//! dependency edge is one flow from the producer's last-ending subtask to the consumer's
//! first-starting subtask (`crate::export::Flows`); the consumer's slice names its edges in a "deps"
//! annotation ("RAW from task 3; WAR from task 0"). A thread that dropped events gets an
//! instant "dropped N events" with a `count` annotation.
//!
//! All packets are on one trusted packet sequence. Event names and debug annotation names are
//! interned: the first packet clears the sequence's incremental state and carries every name
//! once (`interned_data`); each event packet needs that state and names its event and
//! annotations by iid. The writer encodes straight into one output buffer ([`pb`]); the reader
//! decodes packet by packet with `prost` over the few messages it needs ([`schema`]).

mod pb;
mod read;
mod schema;

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::export::{run_window, FastMap, Flows, Incoming, SubtaskNames};
use crate::model::{AicpuPhase, ProcessTrace, Trace};
use crate::tracks::{thread_label, ThreadIndex};
use pb::{annotation, descriptor, event, interned, packet};

pub use read::read;

/// The packet sequence every packet we write belongs to.
const SEQUENCE_ID: u64 = 1;
/// Name of the per-process track holding one slice per run.
const RUNS_TRACK: &str = "runs";
/// Name prefix of the instant that states a thread's dropped events.
const DROPPED: &str = "dropped ";
/// Output bytes gathered before they are handed to the writer.
const CHUNK: usize = 1 << 20;

/// The debug annotations we write; interned with iid = the discriminant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ann {
    Epoch = 1,
    Task,
    FuncId,
    Block,
    Core,
    Submit,
    Deps,
    Level,
    ClockDeviceNs,
    ClockHostNs,
    Count,
}

impl Ann {
    const ALL: [Ann; 11] = [
        Ann::Epoch,
        Ann::Task,
        Ann::FuncId,
        Ann::Block,
        Ann::Core,
        Ann::Submit,
        Ann::Deps,
        Ann::Level,
        Ann::ClockDeviceNs,
        Ann::ClockHostNs,
        Ann::Count,
    ];

    /// The annotation's name as viewers show it.
    fn name(self) -> &'static str {
        match self {
            Ann::Epoch => "epoch",
            Ann::Task => "task",
            Ann::FuncId => "func_id",
            Ann::Block => "block",
            Ann::Core => "core",
            Ann::Submit => "submit",
            Ann::Deps => "deps",
            Ann::Level => "level",
            Ann::ClockDeviceNs => "clock_device_ns",
            Ann::ClockHostNs => "clock_host_ns",
            Ann::Count => "count",
        }
    }
}

/// The Perfetto pid of model pid `pid` (Perfetto reserves pid 0).
fn perfetto_pid(pid: u32) -> i32 {
    i32::try_from(u64::from(pid) + 1).unwrap_or(i32::MAX)
}

/// Writes `trace` as a Perfetto protobuf trace (a `perfetto.protos.Trace` message: the
/// interned names, the track descriptors, then the events in time order). Times are
/// host-clock ns.
///
/// Errors: those of `w`.
pub fn write(trace: &Trace, mut w: impl Write) -> io::Result<()> {
    let mut enc = Encoder::default();
    for p in &trace.processes {
        enc.process(p);
    }
    enc.finish(&mut w)?;
    w.flush()
}

/// One event packet waiting for the time sort: its sort key, its track and type, and the
/// encoded rest of its `TrackEvent` in [`Encoder::bodies`].
struct Event {
    ts: u64,
    seq: u64,
    track: u64,
    body: usize,
    body_len: u32,
    rank: u8,
    kind: u8,
}

/// Sort ranks at one timestamp.
const RANK_END: u8 = 0;
const RANK_INSTANT: u8 = 1;
const RANK_BEGIN: u8 = 2;
const RANK_END_ZERO: u8 = 3;

/// A slice (host clock) waiting for [`Encoder::place`] to choose its track: its begin's
/// encoded body (name and annotations) in [`Encoder::bodies`].
#[derive(Clone, Copy)]
struct Pending {
    track: u64,
    start: u64,
    end: u64,
    body: (usize, u32),
}

/// The state of one [`write`].
#[derive(Default)]
struct Encoder {
    /// Interned event names; iid = position + 1.
    names: Vec<String>,
    iids: FastMap<String, u64>,
    /// The iids of the AICPU phase names met so far (a handful: searched in order).
    phases: Vec<(AicpuPhase, u64)>,
    /// The descriptor packets, encoded (each a `Trace.packet` field).
    descriptors: Vec<u8>,
    /// Every event's `TrackEvent` fields but its type and track, encoded back to back.
    bodies: Vec<u8>,
    events: Vec<Event>,
    /// The last track uuid and flow id given out (both unique within the file).
    last_uuid: u64,
    last_flow: u64,
}

impl Encoder {
    fn uuid(&mut self) -> u64 {
        self.last_uuid += 1;
        self.last_uuid
    }

    /// The iid of event name `name`, interning it on first use.
    fn intern(&mut self, name: &str) -> u64 {
        if let Some(&iid) = self.iids.get(name) {
            return iid;
        }
        self.names.push(name.to_string());
        let iid = self.names.len() as u64;
        self.iids.insert(name.to_string(), iid);
        iid
    }

    /// The iid of AICPU phase `phase`'s name.
    fn phase(&mut self, phase: AicpuPhase) -> u64 {
        if let Some(&(_, iid)) = self.phases.iter().find(|(p, _)| *p == phase) {
            return iid;
        }
        let iid = self.intern(phase.name());
        self.phases.push((phase, iid));
        iid
    }

    /// Encodes an event body with `write` onto [`Encoder::bodies`]; returns where it lies.
    fn body(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> (usize, u32) {
        let at = self.bodies.len();
        write(&mut self.bodies);
        let len = u32::try_from(self.bodies.len() - at).expect("one event body is under 4 GiB");
        (at, len)
    }

    /// Appends a descriptor packet whose `TrackDescriptor` `write` encodes.
    fn descriptor(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        pb::nested(&mut self.descriptors, pb::trace::PACKET, |p| {
            pb::uint(p, packet::SEQUENCE_ID, SEQUENCE_ID);
            pb::nested(p, packet::TRACK_DESCRIPTOR, write);
        });
    }

    /// Queues an instant or counter event (`kind`) at `ts`.
    fn point(&mut self, kind: u64, track: u64, ts: u64, body: (usize, u32)) {
        let seq = self.events.len() as u64;
        self.events.push(Event {
            ts,
            seq,
            track,
            body: body.0,
            body_len: body.1,
            rank: RANK_INSTANT,
            kind: kind as u8,
        });
    }

    /// Lays out the tracks of `p` and queues its events.
    fn process(&mut self, p: &ProcessTrace) {
        let threads = ThreadIndex::new(p);
        let process_uuid = self.uuid();
        let runs_uuid = self.uuid();
        let first_thread = self.last_uuid + 1;
        self.last_uuid += threads.names().len() as u64;
        let thread_uuid = |i: usize| first_thread + i as u64;
        let mut counters: BTreeMap<&str, u64> = BTreeMap::new();
        for c in p.runs.iter().flat_map(|r| r.counters.iter()) {
            if !counters.contains_key(c.name.as_str()) {
                let uuid = self.uuid();
                counters.insert(&c.name, uuid);
            }
        }

        let pid = i64::from(perfetto_pid(p.pid));
        self.descriptor(|d| {
            pb::uint(d, descriptor::UUID, process_uuid);
            pb::nested(d, descriptor::PROCESS, |m| {
                pb::int(m, descriptor::PID, pid);
                pb::bytes(m, descriptor::PROCESS_NAME, p.name.as_bytes());
            });
        });
        self.descriptor(|d| {
            pb::uint(d, descriptor::UUID, runs_uuid);
            pb::uint(d, descriptor::PARENT_UUID, process_uuid);
            pb::bytes(d, descriptor::NAME, RUNS_TRACK.as_bytes());
        });
        for (i, name) in threads.names().iter().enumerate() {
            let tid = (pid * 10_000 + i as i64 + 1).min(i64::from(i32::MAX));
            self.descriptor(|d| {
                pb::uint(d, descriptor::UUID, thread_uuid(i));
                pb::nested(d, descriptor::THREAD, |t| {
                    pb::int(t, descriptor::PID, pid);
                    pb::int(t, descriptor::TID, tid);
                    pb::bytes(t, descriptor::THREAD_NAME, thread_label(name).as_bytes());
                });
            });
        }
        for (name, uuid) in &counters {
            self.descriptor(|d| {
                pb::uint(d, descriptor::UUID, *uuid);
                pb::uint(d, descriptor::PARENT_UUID, process_uuid);
                pb::bytes(d, descriptor::NAME, name.as_bytes());
                pb::nested(d, descriptor::COUNTER, |_| {});
            });
        }

        let clock = p.clock;
        let slices = p.host_spans.len()
            + p.runs
                .iter()
                .map(|r| 1 + r.subtasks.len() + r.aicpu.len())
                .sum::<usize>();
        let points: usize = p
            .runs
            .iter()
            .map(|r| r.counters.len() + r.dropped.len())
            .sum();
        let mut pending = Vec::with_capacity(slices);
        self.events.reserve(2 * slices + points);
        // About what a subtask's body takes (its annotations, a flow or two).
        self.bodies.reserve(48 * (slices + points));
        for run in &p.runs {
            let epoch = run.epoch;
            let (lo, hi) = run_window(run);
            let name = self.intern(&run.callable);
            let body = self.body(|b| {
                pb::uint(b, event::NAME_IID, name);
                ann_u(b, Ann::Epoch, epoch);
                ann_s(b, Ann::Level, run.level.name());
                ann_u(b, Ann::ClockDeviceNs, clock.device_ns);
                ann_u(b, Ann::ClockHostNs, clock.host_ns);
            });
            pending.push(Pending {
                track: runs_uuid,
                start: clock.to_host(lo),
                end: clock.to_host(hi),
                body,
            });

            let flows = Flows::new(run, &mut self.last_flow);
            let mut names = SubtaskNames::new(run, |n| self.intern(n));
            for (i, s) in run.subtasks.iter().enumerate() {
                let (name, submit) = names.get(s.task, s.func_id, |n| self.intern(n));
                let (outs, ins) = (flows.outgoing(i), flows.incoming(i));
                let body = self.body(|b| {
                    pb::uint(b, event::NAME_IID, name);
                    ann_u(b, Ann::Epoch, epoch);
                    ann_u(b, Ann::Task, s.task);
                    ann_u(b, Ann::FuncId, u64::from(s.func_id));
                    ann_u(b, Ann::Block, u64::from(s.block));
                    ann_u(b, Ann::Core, u64::from(s.core));
                    if let Some(submit) = submit {
                        ann_u(b, Ann::Submit, submit);
                    }
                    for id in outs {
                        pb::fixed64(b, event::FLOW_IDS, *id);
                    }
                    for f in ins {
                        pb::fixed64(b, event::TERMINATING_FLOW_IDS, f.id);
                    }
                    if !ins.is_empty() {
                        ann_deps(b, ins);
                    }
                });
                pending.push(Pending {
                    track: thread_uuid(threads.core(s.core_kind, s.core)),
                    start: clock.to_host(s.start_ns),
                    end: clock.to_host(s.end_ns),
                    body,
                });
            }
            for a in &run.aicpu {
                let name = self.phase(a.phase);
                let body = self.body(|b| {
                    pb::uint(b, event::NAME_IID, name);
                    ann_u(b, Ann::Epoch, epoch);
                    if let Some(t) = a.task {
                        ann_u(b, Ann::Task, t);
                    }
                    if let Some(c) = a.core {
                        ann_u(b, Ann::Core, u64::from(c));
                    }
                });
                let track = thread_uuid(threads.aicpu(a.thread));
                if a.start_ns == a.end_ns {
                    self.point(event::INSTANT, track, clock.to_host(a.start_ns), body);
                } else {
                    pending.push(Pending {
                        track,
                        start: clock.to_host(a.start_ns),
                        end: clock.to_host(a.end_ns),
                        body,
                    });
                }
            }
            for c in &run.counters {
                let body = self.body(|b| {
                    pb::int(b, event::COUNTER_VALUE, c.value);
                    ann_u(b, Ann::Epoch, epoch);
                });
                let track = counters[c.name.as_str()];
                self.point(event::COUNTER, track, clock.to_host(c.ts_ns), body);
            }
            for d in &run.dropped {
                let name = self.intern(&format!("{DROPPED}{} events on {}", d.count, d.thread));
                let body = self.body(|b| {
                    pb::uint(b, event::NAME_IID, name);
                    ann_u(b, Ann::Epoch, epoch);
                    ann_u(b, Ann::Count, d.count);
                });
                let track = thread_uuid(threads.named(&d.thread));
                self.point(event::INSTANT, track, clock.to_host(lo), body);
            }
        }
        for h in &p.host_spans {
            let name = self.intern(&h.name);
            let body = self.body(|b| {
                pb::uint(b, event::NAME_IID, name);
                if let Some(epoch) = h.epoch {
                    ann_u(b, Ann::Epoch, epoch);
                }
            });
            pending.push(Pending {
                track: thread_uuid(threads.named(&h.thread)),
                start: h.start_ns,
                end: h.end_ns,
                body,
            });
        }
        let label = |track: u64| -> String {
            if track == runs_uuid {
                RUNS_TRACK.to_string()
            } else {
                thread_label(&threads.names()[(track - first_thread) as usize])
            }
        };
        self.place(pending, runs_uuid, 1 + threads.names().len(), label);
    }

    /// Places `slices` on their tracks so that every track's slices nest (Perfetto pairs a
    /// track's begins and ends like brackets): a slice that would cross one already on its
    /// track goes to an overflow track under it ("AICPU 1 (scheduler) +1", ...), the first
    /// one where it nests, its descriptor named after `label` of the track. Every slice's
    /// track is one of `tracks` uuids from `first_track` on.
    fn place(
        &mut self,
        slices: Vec<Pending>,
        first_track: u64,
        tracks: usize,
        label: impl Fn(u64) -> String,
    ) {
        let keys: Vec<(usize, u64, u64)> = slices
            .iter()
            .map(|p| ((p.track - first_track) as usize, p.start, p.end))
            .collect();
        let lanes = crate::export::nest(tracks, &keys);
        // The overflow tracks of the current track, by lane - 1.
        let mut overflow: Vec<u64> = Vec::new();
        let mut current = None;
        for &k in &lanes.order {
            let p = slices[k];
            let (start, end, track) = (p.start, p.end.max(p.start), p.track);
            if current != Some(track) {
                current = Some(track);
                overflow.clear();
            }
            let lane = lanes.lane[k] as usize;
            let uuid = if lane == 0 {
                track
            } else if let Some(&uuid) = overflow.get(lane - 1) {
                uuid
            } else {
                let uuid = self.uuid();
                let name = format!("{} +{}", label(track), lane);
                self.descriptor(|d| {
                    pb::uint(d, descriptor::UUID, uuid);
                    pb::uint(d, descriptor::PARENT_UUID, track);
                    pb::bytes(d, descriptor::NAME, name.as_bytes());
                });
                overflow.push(uuid);
                uuid
            };
            // At one instant: longer slices begin first and later-begun slices end first.
            self.events.push(Event {
                ts: start,
                seq: u64::MAX - (end - start),
                track: uuid,
                body: p.body.0,
                body_len: p.body.1,
                rank: RANK_BEGIN,
                kind: event::SLICE_BEGIN as u8,
            });
            self.events.push(Event {
                ts: end,
                seq: u64::MAX - start,
                track: uuid,
                body: 0,
                body_len: 0,
                rank: if end <= start {
                    RANK_END_ZERO
                } else {
                    RANK_END
                },
                kind: event::SLICE_END as u8,
            });
        }
    }

    /// Writes the file (nothing for a trace without processes): the interned names (clearing
    /// the sequence's incremental state), the descriptors, then the events sorted by time
    /// (Perfetto sorts, but pairs a track's begins and ends in file order: ends before begins
    /// at one instant, zero-length slices excepted).
    fn finish(mut self, w: &mut impl Write) -> io::Result<()> {
        if self.descriptors.is_empty() {
            // No process: an empty file (what the reader reads as an empty trace).
            return Ok(());
        }
        let mut out = Vec::with_capacity(CHUNK + (CHUNK >> 4));
        pb::nested(&mut out, pb::trace::PACKET, |p| {
            pb::uint(p, packet::SEQUENCE_ID, SEQUENCE_ID);
            pb::uint(
                p,
                packet::SEQUENCE_FLAGS,
                packet::SEQ_INCREMENTAL_STATE_CLEARED,
            );
            pb::nested(p, packet::INTERNED_DATA, |d| {
                for (i, name) in self.names.iter().enumerate() {
                    pb::nested(d, interned::EVENT_NAMES, |e| {
                        pb::uint(e, interned::IID, i as u64 + 1);
                        pb::bytes(e, interned::NAME, name.as_bytes());
                    });
                }
                for a in Ann::ALL {
                    pb::nested(d, interned::DEBUG_ANNOTATION_NAMES, |e| {
                        pb::uint(e, interned::IID, a as u64);
                        pb::bytes(e, interned::NAME, a.name().as_bytes());
                    });
                }
            });
        });
        out.extend_from_slice(&self.descriptors);
        self.events.sort_by_key(|e| (e.ts, e.rank, e.seq));
        for e in &self.events {
            let body = &self.bodies[e.body..e.body + e.body_len as usize];
            pb::nested(&mut out, pb::trace::PACKET, |p| {
                pb::uint(p, packet::TIMESTAMP, e.ts);
                pb::uint(p, packet::SEQUENCE_ID, SEQUENCE_ID);
                pb::uint(
                    p,
                    packet::SEQUENCE_FLAGS,
                    packet::SEQ_NEEDS_INCREMENTAL_STATE,
                );
                pb::nested(p, packet::TRACK_EVENT, |t| {
                    pb::uint(t, event::TYPE, u64::from(e.kind));
                    pb::uint(t, event::TRACK_UUID, e.track);
                    t.extend_from_slice(body);
                });
            });
            if out.len() >= CHUNK {
                w.write_all(&out)?;
                out.clear();
            }
        }
        w.write_all(&out)
    }
}

/// Appends debug annotation `a` = `v`.
fn ann_u(b: &mut Vec<u8>, a: Ann, v: u64) {
    pb::nested(b, event::DEBUG_ANNOTATIONS, |b| {
        pb::uint(b, annotation::NAME_IID, a as u64);
        pb::uint(b, annotation::UINT_VALUE, v);
    });
}

/// Appends debug annotation `a` = `v`.
fn ann_s(b: &mut Vec<u8>, a: Ann, v: &str) {
    pb::nested(b, event::DEBUG_ANNOTATIONS, |b| {
        pb::uint(b, annotation::NAME_IID, a as u64);
        pb::bytes(b, annotation::STRING_VALUE, v.as_bytes());
    });
}

/// Appends the "deps" annotation of a consumer's slice: "RAW from task 3; WAR from task 0".
fn ann_deps(b: &mut Vec<u8>, ins: &[Incoming]) {
    pb::nested(b, event::DEBUG_ANNOTATIONS, |b| {
        pb::uint(b, annotation::NAME_IID, Ann::Deps as u64);
        pb::nested(b, annotation::STRING_VALUE, |b| {
            let mut digits = itoa::Buffer::new();
            for (k, f) in ins.iter().enumerate() {
                if k > 0 {
                    b.extend_from_slice(b"; ");
                }
                b.extend_from_slice(f.edge.kind.name().as_bytes());
                b.extend_from_slice(b" from task ");
                b.extend_from_slice(digits.format(f.edge.producer).as_bytes());
            }
        });
    });
}
