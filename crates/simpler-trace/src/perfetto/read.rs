//! Reading a Perfetto trace that [`super::write`] wrote back into the model.
//!
//! Owns the decoding of our own track layout (module doc of [`super`]); traces from other
//! producers are refused with [`TraceError::Shape`] where they lack what we need. What comes
//! back: every process with its name and clock alignment, every run (epoch, callable, level),
//! its tasks (as far as their subtasks name them), subtasks, AICPU spans and instants, counters,
//! drop counts, the edges that have a flow, and the host spans. Interned event and debug
//! annotation names are resolved per packet sequence, as Perfetto does: a packet with
//! `SEQ_INCREMENTAL_STATE_CLEARED` forgets its sequence's names, `interned_data` adds to them.
//! The packets are decoded one at a time by [`super::schema`].

use std::collections::{BTreeMap, HashMap};

use super::pb::packet::SEQ_INCREMENTAL_STATE_CLEARED;
use super::schema::{self, DebugAnnotation, EventType, TrackEvent};
use super::{perfetto_pid, DROPPED, RUNS_TRACK};
use crate::error::TraceError;
use crate::model::*;
use crate::tracks::ThreadKind;

/// What a track uuid stands for.
enum Role {
    Process,
    Runs(u32),
    Thread(u32, String),
    Counter(u32, String),
}

/// One decoded slice or instant (host clock).
struct Raw {
    track: u64,
    name: String,
    start: u64,
    end: u64,
    instant: bool,
    ann: Vec<DebugAnnotation>,
}

impl Raw {
    fn u(&self, key: &str) -> Option<u64> {
        self.ann
            .iter()
            .filter(|a| a.name() == key)
            .find_map(|a| a.uint_value)
    }
    fn s(&self, key: &str) -> Option<&str> {
        self.ann
            .iter()
            .filter(|a| a.name() == key)
            .find_map(|a| a.string_value.as_deref())
    }
    fn need(&self, key: &str) -> Result<u64, TraceError> {
        self.u(key).ok_or_else(|| {
            TraceError::Shape(format!("event {:?} has no {key:?} annotation", self.name))
        })
    }
}

/// The interned names of one packet sequence, by iid.
#[derive(Default)]
struct Interned {
    events: HashMap<u64, String>,
    annotations: HashMap<u64, String>,
}

impl Interned {
    /// The name of `e`: its own, else its interned one.
    fn event_name(&self, e: &TrackEvent) -> Result<String, TraceError> {
        if let Some(iid) = e.name_iid {
            self.events.get(&iid).cloned().ok_or_else(|| {
                TraceError::Shape(format!("event name iid {iid} was never interned"))
            })
        } else {
            Ok(e.name().to_string())
        }
    }

    /// The annotations of `e`, taken out of it, with their interned names resolved.
    fn annotations(&self, e: &mut TrackEvent) -> Result<Vec<DebugAnnotation>, TraceError> {
        std::mem::take(&mut e.debug_annotations)
            .into_iter()
            .map(|mut a| {
                if let Some(iid) = a.name_iid {
                    let name = self.annotations.get(&iid).ok_or_else(|| {
                        TraceError::Shape(format!(
                            "debug annotation name iid {iid} was never interned"
                        ))
                    })?;
                    a.name = Some(name.clone());
                }
                Ok(a)
            })
            .collect()
    }
}

/// Decodes a Perfetto protobuf trace written by [`super::write`].
///
/// Errors: [`TraceError::Protobuf`] naming the offset of the first trace packet that does not
/// decode (or of bytes that are not one);
/// [`TraceError::Shape`] when non-empty bytes hold no process track, an event names an unknown
/// track or an iid its sequence never interned, a slice end has no begin, or an annotation we
/// wrote is missing.
pub fn read(bytes: &[u8]) -> Result<Trace, TraceError> {
    let mut roles: BTreeMap<u64, Role> = BTreeMap::new();
    let mut names: BTreeMap<u32, String> = BTreeMap::new();
    let mut process_of_uuid: BTreeMap<u64, u32> = BTreeMap::new();
    let mut raws: Vec<Raw> = Vec::new();
    let mut counters: Vec<(u64, u64, i64, Option<u64>)> = Vec::new();
    let mut open: BTreeMap<u64, Vec<Raw>> = BTreeMap::new();
    let mut interned: HashMap<u32, Interned> = HashMap::new();
    for packet in schema::packets(bytes) {
        let packet = packet?;
        let seq = interned
            .entry(packet.trusted_packet_sequence_id())
            .or_default();
        if packet.sequence_flags() & SEQ_INCREMENTAL_STATE_CLEARED as u32 != 0 {
            *seq = Interned::default();
        }
        if let Some(d) = &packet.interned_data {
            for n in &d.event_names {
                seq.events.insert(n.iid(), n.name().to_string());
            }
            for n in &d.debug_annotation_names {
                seq.annotations.insert(n.iid(), n.name().to_string());
            }
        }
        if let Some(d) = &packet.track_descriptor {
            let uuid = d.uuid();
            if let Some(p) = d.process.as_ref() {
                let pid = model_pid(p.pid())?;
                names.insert(pid, p.process_name().to_string());
                process_of_uuid.insert(uuid, pid);
                roles.insert(uuid, Role::Process);
            } else if let Some(t) = d.thread.as_ref() {
                let pid = model_pid(t.pid())?;
                roles.insert(uuid, Role::Thread(pid, canonical_thread(t.thread_name())));
            } else {
                // A track under a thread or the runs track is its overflow (super::Layout::place).
                let role = match roles.get(&d.parent_uuid()) {
                    Some(Role::Thread(pid, name)) => Role::Thread(*pid, name.clone()),
                    Some(Role::Runs(pid)) => Role::Runs(*pid),
                    _ => {
                        let pid = *process_of_uuid.get(&d.parent_uuid()).ok_or_else(|| {
                            TraceError::Shape(format!("track {:?} has no process parent", d.name()))
                        })?;
                        if d.counter.is_some() {
                            Role::Counter(pid, d.name().to_string())
                        } else if d.name() == RUNS_TRACK {
                            Role::Runs(pid)
                        } else {
                            return Err(TraceError::Shape(format!("unknown track {:?}", d.name())));
                        }
                    }
                };
                roles.insert(uuid, role);
            }
            continue;
        }
        let ts = packet.timestamp();
        let Some(mut e) = packet.track_event else {
            continue;
        };
        let track = e.track_uuid();
        if !roles.contains_key(&track) {
            return Err(TraceError::Shape(format!("event on unknown track {track}")));
        }
        match e.r#type() {
            EventType::SliceBegin => open.entry(track).or_default().push(Raw {
                track,
                name: seq.event_name(&e)?,
                start: ts,
                end: ts,
                instant: false,
                ann: seq.annotations(&mut e)?,
            }),
            EventType::SliceEnd => {
                let mut r = open.get_mut(&track).and_then(|v| v.pop()).ok_or_else(|| {
                    TraceError::Shape(format!("slice end at {ts} on track {track} has no begin"))
                })?;
                r.end = ts;
                raws.push(r);
            }
            EventType::Instant => raws.push(Raw {
                track,
                name: seq.event_name(&e)?,
                start: ts,
                end: ts,
                instant: true,
                ann: seq.annotations(&mut e)?,
            }),
            EventType::Counter => {
                let epoch = seq
                    .annotations(&mut e)?
                    .iter()
                    .find(|a| a.name() == "epoch")
                    .map(|a| a.uint_value());
                counters.push((track, ts, e.counter_value(), epoch));
            }
            EventType::Unspecified => {}
        }
    }
    if let Some((track, v)) = open.iter().find(|(_, v)| !v.is_empty()) {
        return Err(TraceError::Shape(format!(
            "slice {:?} on track {track} never ends",
            v[0].name
        )));
    }

    if names.is_empty() && !bytes.is_empty() {
        return Err(TraceError::Shape(
            "no process track (not written by simpler)".into(),
        ));
    }
    let mut processes: BTreeMap<u32, ProcessTrace> = names
        .into_iter()
        .map(|(pid, name)| {
            (
                pid,
                ProcessTrace {
                    pid,
                    name,
                    ..Default::default()
                },
            )
        })
        .collect();
    // Runs first: they carry each process's clock alignment.
    let mut run_slices: Vec<&Raw> = raws
        .iter()
        .filter(|r| matches!(roles.get(&r.track), Some(Role::Runs(_))))
        .collect();
    run_slices.sort_by_key(|r| r.start);
    for r in run_slices {
        let Some(Role::Runs(pid)) = roles.get(&r.track) else {
            unreachable!()
        };
        let p = processes.get_mut(pid).expect("a runs track has a process");
        p.clock = ClockAlignment {
            device_ns: r.need("clock_device_ns")?,
            host_ns: r.need("clock_host_ns")?,
        };
        let level = r.s("level").unwrap_or("off");
        let level = level
            .parse()
            .map_err(|e| TraceError::Shape(format!("run {:?}: {e}", r.name)))?;
        p.runs.push(RunTrace {
            epoch: r.need("epoch")?,
            callable: r.name.clone(),
            level,
            ..Default::default()
        });
    }
    let mut submit = crate::model::ReadTasks::new();
    for r in &raws {
        let (pid, thread) = match roles.get(&r.track) {
            Some(Role::Thread(pid, t)) => (*pid, t.as_str()),
            _ => continue,
        };
        let p = processes
            .get_mut(&pid)
            .expect("a thread track has a process");
        let kind = ThreadKind::of(thread);
        if kind == ThreadKind::Host && !r.name.starts_with(DROPPED) {
            p.host_spans.push(HostSpan {
                thread: thread.to_string(),
                name: r.name.clone(),
                epoch: r.u("epoch"),
                start_ns: r.start,
                end_ns: r.end,
            });
            continue;
        }
        let clock = p.clock;
        let epoch = r.need("epoch")?;
        let run = p.run_mut(epoch);
        if r.instant && r.name.starts_with(DROPPED) {
            run.dropped.push(DroppedEvents {
                thread: thread.to_string(),
                count: r.need("count")?,
            });
            continue;
        }
        match kind {
            ThreadKind::Core(core_kind, core) => {
                let task = r.need("task")?;
                let func_id = u32::try_from(r.need("func_id")?).unwrap_or(u32::MAX);
                run.subtasks.push(SubtaskSpan {
                    task,
                    func_id,
                    core,
                    core_kind,
                    block: u32::try_from(r.need("block")?).unwrap_or(u32::MAX),
                    start_ns: clock.to_device(r.start),
                    end_ns: clock.to_device(r.end),
                });
                let entry = submit
                    .entry((pid, epoch, task))
                    .or_insert_with(|| (r.u("submit").unwrap_or(task), Vec::new()));
                if !entry.1.iter().any(|k| k.func_id == func_id) {
                    entry.1.push(KernelRef {
                        func_id,
                        name: r.name.clone(),
                        core: core_kind,
                    });
                }
                if let Some(deps) = r.s("deps") {
                    for d in deps.split("; ").filter(|d| !d.is_empty()) {
                        run.edges.push(parse_dep(d, task)?);
                    }
                }
            }
            ThreadKind::Aicpu(thread) => {
                let phase = AicpuPhase::from_name(&r.name).ok_or_else(|| {
                    TraceError::Shape(format!("unknown AICPU phase {:?}", r.name))
                })?;
                run.aicpu.push(AicpuSpan {
                    thread,
                    phase,
                    task: r.u("task"),
                    core: r.u("core").map(|c| u32::try_from(c).unwrap_or(u32::MAX)),
                    start_ns: clock.to_device(r.start),
                    end_ns: clock.to_device(r.end),
                });
            }
            ThreadKind::Host => unreachable!("host events handled above"),
        }
    }
    for (track, ts, value, epoch) in counters {
        let Some(Role::Counter(pid, name)) = roles.get(&track) else {
            return Err(TraceError::Shape(format!(
                "counter value on non-counter track {track}"
            )));
        };
        let p = processes
            .get_mut(pid)
            .expect("a counter track has a process");
        let clock = p.clock;
        let run = p.run_mut(epoch.unwrap_or(0));
        run.counters.push(CounterSample {
            name: name.clone(),
            ts_ns: clock.to_device(ts),
            value,
        });
    }
    crate::model::assemble(processes, submit)
}

fn model_pid(pid: i32) -> Result<u32, TraceError> {
    let m = u32::try_from(i64::from(pid) - 1)
        .map_err(|_| TraceError::Shape(format!("process id {pid} is not one simpler writes")))?;
    debug_assert_eq!(perfetto_pid(m), pid);
    Ok(m)
}

/// "AICPU 1 (scheduler)" → "AICPU 1"; other names unchanged.
fn canonical_thread(name: &str) -> String {
    match ThreadKind::of(name) {
        ThreadKind::Aicpu(n) => aicpu_thread_name(n),
        _ => name.to_string(),
    }
}

/// "RAW from task 3" → the edge 3 → `consumer`.
fn parse_dep(d: &str, consumer: u64) -> Result<DepEdge, TraceError> {
    let bad = || TraceError::Shape(format!("malformed dependency {d:?} of task {consumer}"));
    let (kind, producer) = d.split_once(" from task ").ok_or_else(bad)?;
    Ok(DepEdge {
        producer: producer.parse().map_err(|_| bad())?,
        consumer,
        kind: kind.parse().map_err(|_| bad())?,
    })
}
