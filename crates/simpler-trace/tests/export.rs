//! The written Perfetto protobuf, Chrome JSON and SVG of synthetic traces, decoded and checked
//! independently of our readers, and round trips through the readers.

use std::collections::BTreeMap;

use perfetto_protos::trace::Trace as PbTrace;
use perfetto_protos::trace_packet::trace_packet::SequenceFlags;
use perfetto_protos::trace_packet::TracePacket;
use perfetto_protos::track_event::track_event::Type;
use protobuf::Message;
use serde_json::Value;
use simpler_trace::sample::{synthetic, SampleSpec};
use simpler_trace::*;

/// Two chips (merged), chip 0 with two runs, chip 1 with a drop count.
fn fixture() -> Trace {
    let mut t = synthetic(&SampleSpec {
        tasks: 24,
        dropped: 0,
        ..Default::default()
    });
    let mut second = synthetic(&SampleSpec {
        tasks: 9,
        aic: 1,
        aiv: 2,
        dropped: 0,
    })
    .processes
    .remove(0)
    .runs
    .remove(0);
    second.epoch = 2;
    second.callable = "gemm_small".into();
    let shift = 1_000_000;
    for s in &mut second.subtasks {
        s.start_ns += shift;
        s.end_ns += shift;
    }
    for a in &mut second.aicpu {
        a.start_ns += shift;
        a.end_ns += shift;
    }
    for c in &mut second.counters {
        c.ts_ns += shift;
    }
    t.processes[0].runs.push(second);
    // Ready-queue waits of several tasks overlap on one thread without nesting.
    let wait = |task: u64, start_ns: u64, end_ns: u64| AicpuSpan {
        thread: 1,
        phase: AicpuPhase::ReadyWait,
        task: Some(task),
        core: None,
        start_ns,
        end_ns,
    };
    t.processes[0].runs[0].aicpu.extend([
        wait(1, 100, 5_000),
        wait(2, 200, 6_000),
        wait(3, 300, 400),
        wait(4, 5_500, 5_600),
    ]);
    let mut other = synthetic(&SampleSpec {
        tasks: 10,
        aic: 3,
        aiv: 3,
        dropped: 17,
    });
    other.processes[0].name = "chip 1 (device 1)".into();
    other.processes[0].clock = ClockAlignment {
        device_ns: 5_000,
        host_ns: 2_000_000_000,
    };
    t.merge(other);
    t
}

/// The model with every list in a fixed order, for comparing round trips.
fn normalized(mut t: Trace) -> Trace {
    t.processes.sort_by_key(|p| p.pid);
    for p in &mut t.processes {
        p.runs.sort_by_key(|r| r.epoch);
        p.host_spans.sort_by(|a, b| {
            (&a.thread, a.start_ns, &a.name).cmp(&(&b.thread, b.start_ns, &b.name))
        });
        for r in &mut p.runs {
            r.subtasks
                .sort_by_key(|s| (s.task, s.func_id, s.block, s.start_ns));
            r.aicpu
                .sort_by_key(|a| (a.thread, a.start_ns, a.end_ns, a.phase));
            r.counters
                .sort_by(|a, b| (&a.name, a.ts_ns).cmp(&(&b.name, b.ts_ns)));
            r.edges.sort_by_key(|e| (e.producer, e.consumer, e.kind));
            r.dropped.sort_by(|a, b| a.thread.cmp(&b.thread));
            r.tasks.sort_by_key(|t| t.submit_index);
        }
    }
    t
}

/// Asserts `got == want` field by field, naming the first difference briefly.
fn assert_same(got: Trace, want: Trace) {
    let (got, want) = (normalized(got), normalized(want));
    assert_eq!(got.processes.len(), want.processes.len());
    for (g, w) in got.processes.iter().zip(&want.processes) {
        assert_eq!((g.pid, &g.name, g.clock), (w.pid, &w.name, w.clock));
        assert_eq!(g.host_spans, w.host_spans, "host spans of {}", w.name);
        assert_eq!(g.runs.len(), w.runs.len(), "runs of {}", w.name);
        for (gr, wr) in g.runs.iter().zip(&w.runs) {
            let at = format!("{} run {}", w.name, wr.epoch);
            assert_eq!(
                (gr.epoch, &gr.callable, gr.level),
                (wr.epoch, &wr.callable, wr.level),
                "{at}"
            );
            assert_eq!(gr.tasks, wr.tasks, "tasks of {at}");
            assert_eq!(gr.subtasks, wr.subtasks, "subtasks of {at}");
            assert_eq!(gr.edges, wr.edges, "edges of {at}");
            assert_eq!(gr.aicpu, wr.aicpu, "aicpu of {at}");
            assert_eq!(gr.counters, wr.counters, "counters of {at}");
            assert_eq!(gr.dropped, wr.dropped, "dropped of {at}");
        }
    }
    assert_eq!(got, want);
}

const SEQ_INCREMENTAL_STATE_CLEARED: u32 = SequenceFlags::SEQ_INCREMENTAL_STATE_CLEARED as u32;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = SequenceFlags::SEQ_NEEDS_INCREMENTAL_STATE as u32;

/// A slice decoded straight from the protobuf.
#[derive(Debug, Clone)]
struct Slice {
    name: String,
    start: u64,
    end: u64,
    ann: BTreeMap<String, u64>,
    flows_out: Vec<u64>,
    flows_in: Vec<u64>,
}

#[test]
fn perfetto_file_has_every_subtask_once_on_its_core_and_a_flow_per_edge() {
    let trace = fixture();
    let mut bytes = Vec::new();
    perfetto::write(&trace, &mut bytes).unwrap();
    let pb = PbTrace::parse_from_bytes(&bytes).unwrap();

    // uuid → (perfetto pid, thread name) for thread tracks; process names by pid.
    let mut threads: BTreeMap<u64, (i32, String)> = BTreeMap::new();
    let mut processes: BTreeMap<i32, String> = BTreeMap::new();
    let mut counter_tracks: BTreeMap<u64, String> = BTreeMap::new();
    let mut open: BTreeMap<u64, Vec<Slice>> = BTreeMap::new();
    let mut slices: BTreeMap<u64, Vec<Slice>> = BTreeMap::new();
    let mut instants: BTreeMap<u64, Vec<Slice>> = BTreeMap::new();
    let mut counter_values = 0usize;
    let mut overflow: Vec<String> = Vec::new();
    // Interned names: the first packet clears the sequence's state and carries every name once.
    let first = &pb.packet[0];
    assert_eq!(first.trusted_packet_sequence_id(), 1);
    assert_eq!(first.sequence_flags(), SEQ_INCREMENTAL_STATE_CLEARED);
    let interned = first.interned_data.as_ref().expect("interned names first");
    let event_names: BTreeMap<u64, String> = interned
        .event_names
        .iter()
        .map(|n| (n.iid(), n.name().to_string()))
        .collect();
    let ann_names: BTreeMap<u64, String> = interned
        .debug_annotation_names
        .iter()
        .map(|n| (n.iid(), n.name().to_string()))
        .collect();
    assert_eq!(
        interned.event_names.len(),
        event_names.len(),
        "an iid used twice"
    );
    for (list, what) in [(&event_names, "event"), (&ann_names, "annotation")] {
        let distinct: std::collections::BTreeSet<&String> = list.values().collect();
        assert_eq!(distinct.len(), list.len(), "an {what} name interned twice");
        assert!(!list.contains_key(&0), "iid 0 is not an iid");
    }
    for name in [
        "gemm",
        "gemm_small",
        "gemm_tile",
        "relu",
        "dispatch",
        "prepare",
    ] {
        assert!(
            event_names.values().any(|n| n == name),
            "{name} not interned"
        );
    }
    for name in ["epoch", "task", "block", "func_id", "core", "deps"] {
        assert!(ann_names.values().any(|n| n == name), "{name} not interned");
    }
    for p in &pb.packet[1..] {
        assert!(
            p.interned_data.is_none(),
            "names are interned once, up front"
        );
        if p.has_track_descriptor() {
            let d = p.track_descriptor();
            if let Some(proc_) = d.process.as_ref() {
                processes.insert(proc_.pid(), proc_.process_name().to_string());
            }
            if let Some(t) = d.thread.as_ref() {
                assert!(t.tid() != 0 && t.pid() != 0);
                threads.insert(d.uuid(), (t.pid(), t.thread_name().to_string()));
            }
            if d.counter.is_some() {
                counter_tracks.insert(d.uuid(), d.name().to_string());
            }
            if d.name().ends_with(" +1") {
                overflow.push(d.name().to_string());
            }
            continue;
        }
        assert!(p.has_track_event());
        assert_eq!(p.trusted_packet_sequence_id(), 1);
        assert_eq!(p.sequence_flags(), SEQ_NEEDS_INCREMENTAL_STATE);
        let e = p.track_event();
        // Names by iid only: every event and annotation name is sent once, in the first packet.
        assert!(!e.has_name(), "{e:?}");
        for a in &e.debug_annotations {
            assert!(a.has_name_iid() && !a.has_name(), "{a:?}");
        }
        let ann = e
            .debug_annotations
            .iter()
            .filter(|a| a.has_uint_value())
            .map(|a| (ann_names[&a.name_iid()].clone(), a.uint_value()))
            .collect();
        let name = match e.type_() {
            Type::TYPE_SLICE_BEGIN | Type::TYPE_INSTANT => event_names[&e.name_iid()].clone(),
            _ => {
                assert!(!e.has_name_iid(), "ends and counters have no name");
                String::new()
            }
        };
        let s = Slice {
            name,
            start: p.timestamp(),
            end: p.timestamp(),
            ann,
            flows_out: e.flow_ids.clone(),
            flows_in: e.terminating_flow_ids.clone(),
        };
        match e.type_() {
            Type::TYPE_SLICE_BEGIN => open.entry(e.track_uuid()).or_default().push(s),
            Type::TYPE_SLICE_END => {
                let mut b = open
                    .get_mut(&e.track_uuid())
                    .unwrap()
                    .pop()
                    .expect("end after begin");
                b.end = p.timestamp();
                slices.entry(e.track_uuid()).or_default().push(b);
            }
            Type::TYPE_INSTANT => instants.entry(e.track_uuid()).or_default().push(s),
            Type::TYPE_COUNTER => {
                assert!(counter_tracks.contains_key(&e.track_uuid()));
                counter_values += 1;
            }
            Type::TYPE_UNSPECIFIED => panic!("untyped event"),
        }
    }
    assert!(open.values().all(Vec::is_empty), "unclosed slices");
    // The crossing ready-queue waits of chip 0 need a second track under AICPU 1.
    assert_eq!(overflow, ["AICPU 1 (scheduler) +1"]);
    assert_eq!(processes.len(), 2);
    assert_eq!(processes[&1], "chip 0 (device 0)");
    assert_eq!(processes[&2], "chip 1 (device 1)");
    let names: Vec<&str> = threads
        .values()
        .filter(|(pid, _)| *pid == 1)
        .map(|(_, n)| n.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "AIC 0",
            "AIC 1",
            "AIV 1",
            "AIV 2",
            "AIV 3",
            "AIV 4",
            "AIV 5",
            "AICPU 0 (orchestrator)",
            "AICPU 1 (scheduler)",
            "AICPU 2 (scheduler)",
            "host lane"
        ]
    );
    let total_counters: usize = trace.runs().map(|(_, r)| r.counters.len()).sum();
    assert_eq!(counter_values, total_counters);

    for p in &trace.processes {
        let ppid = p.pid as i32 + 1;
        let track = |name: &str| -> u64 {
            *threads
                .iter()
                .find(|(_, (pid, n))| *pid == ppid && n == name)
                .unwrap_or_else(|| panic!("no track {name}"))
                .0
        };
        for run in &p.runs {
            // Every subtask once, on its core's track, at its host-clock time, start < end.
            let mut flow_src: BTreeMap<u64, Slice> = BTreeMap::new();
            let mut flow_dst: BTreeMap<u64, Slice> = BTreeMap::new();
            for s in &run.subtasks {
                let on_core: Vec<&Slice> = slices[&track(&s.core_name())]
                    .iter()
                    .filter(|x| {
                        x.ann.get("epoch") == Some(&run.epoch)
                            && x.ann["task"] == s.task
                            && x.ann["block"] == u64::from(s.block)
                            && x.ann["func_id"] == u64::from(s.func_id)
                    })
                    .collect();
                assert_eq!(on_core.len(), 1, "{s:?}");
                let x = on_core[0];
                assert!(x.start < x.end, "{x:?}");
                assert_eq!(
                    (x.start, x.end),
                    (p.clock.to_host(s.start_ns), p.clock.to_host(s.end_ns))
                );
                assert_eq!(x.name, run.kernel_name(s.task, s.func_id));
                assert_eq!(x.ann["core"], u64::from(s.core));
                assert!(x.ann.contains_key("submit"));
            }
            let own = threads.iter().filter(|(_, (pid, _))| *pid == ppid);
            for x in own.filter_map(|(u, _)| slices.get(u)).flatten() {
                if x.ann.get("epoch") != Some(&run.epoch) {
                    continue;
                }
                for id in &x.flows_out {
                    assert!(
                        flow_src.insert(*id, x.clone()).is_none(),
                        "flow {id} starts twice"
                    );
                }
                for id in &x.flows_in {
                    assert!(
                        flow_dst.insert(*id, x.clone()).is_none(),
                        "flow {id} ends twice"
                    );
                }
            }
            // Every edge has a flow whose consumer starts after its producer ended.
            assert_eq!(flow_src.len(), run.edges.len());
            for e in &run.edges {
                let id = flow_src
                    .iter()
                    .find(|(id, src)| {
                        src.ann["task"] == e.producer
                            && flow_dst
                                .get(id)
                                .is_some_and(|d| d.ann["task"] == e.consumer)
                    })
                    .map(|(id, _)| *id)
                    .unwrap_or_else(|| panic!("no flow for {e:?}"));
                let (src, dst) = (&flow_src[&id], &flow_dst[&id]);
                assert!(
                    dst.start > src.end,
                    "{e:?}: consumer starts {} before producer ends {}",
                    dst.start,
                    src.end
                );
            }
        }
        // Dropped counts stated on the thread that dropped them.
        for d in p.runs.iter().flat_map(|r| &r.dropped) {
            let inst = &instants[&track(&d.thread)];
            let hit: Vec<_> = inst
                .iter()
                .filter(|i| i.name.starts_with("dropped "))
                .collect();
            assert_eq!(hit.len(), 1);
            assert_eq!(hit[0].ann["count"], d.count);
            assert_eq!(
                hit[0].name,
                format!("dropped {} events on {}", d.count, d.thread)
            );
        }
    }
    assert_eq!(trace.processes[1].runs[0].dropped[0].count, 17);
}

/// The fixture with the optional fields the readers return absent somewhere too: a host span
/// outside any run, an AICPU span that names no task or core.
fn fixture_with_every_field() -> Trace {
    let mut t = fixture();
    let p = &mut t.processes[0];
    let end = p.host_spans.iter().map(|h| h.end_ns).max().unwrap();
    p.host_spans.push(HostSpan {
        thread: "host lane".into(),
        name: "close".into(),
        epoch: None,
        start_ns: end + 10,
        end_ns: end + 20,
    });
    p.runs[0].aicpu.push(AicpuSpan {
        thread: 1,
        phase: AicpuPhase::SchedIdle,
        task: None,
        core: None,
        start_ns: 7_000,
        end_ns: 7_100,
    });
    let runs = || t.processes.iter().flat_map(|p| &p.runs);
    let host = || t.processes.iter().flat_map(|p| &p.host_spans);
    let aicpu = || runs().flat_map(|r| &r.aicpu);
    assert!(t.processes.len() > 1 && t.processes.iter().all(|p| p.clock.host_ns > 0));
    assert!(runs().any(|r| !r.tasks.is_empty() && !r.subtasks.is_empty()));
    assert!(runs().any(|r| !r.edges.is_empty() && !r.counters.is_empty()));
    assert!(runs().any(|r| !r.dropped.is_empty()));
    assert!(host().any(|h| h.epoch.is_some()) && host().any(|h| h.epoch.is_none()));
    assert!(aicpu().any(|a| a.task.is_some()) && aicpu().any(|a| a.task.is_none()));
    assert!(aicpu().any(|a| a.core.is_some()) && aicpu().any(|a| a.core.is_none()));
    t
}

#[test]
fn perfetto_round_trip() {
    let trace = fixture_with_every_field();
    let mut bytes = Vec::new();
    perfetto::write(&trace, &mut bytes).unwrap();
    let back = perfetto::read(&bytes).unwrap();
    assert_same(back, trace.clone());
    assert_same(read(&bytes).unwrap(), trace);
}

#[test]
fn perfetto_reader_resolves_names_by_the_sequence_state() {
    let mut bytes = Vec::new();
    perfetto::write(&fixture(), &mut bytes).unwrap();
    let pb = PbTrace::parse_from_bytes(&bytes).unwrap();
    let instant = pb
        .packet
        .iter()
        .rev()
        .find(|p| p.has_track_event() && p.track_event().type_() == Type::TYPE_INSTANT)
        .unwrap()
        .clone();
    let with_tail = |head: TracePacket| {
        let mut tail = PbTrace::new();
        tail.packet = vec![head, instant.clone()];
        // Concatenated messages merge: the packets are appended to the file's.
        let mut b = bytes.clone();
        b.extend(tail.write_to_bytes().unwrap());
        b
    };
    // Clearing the state forgets the names: the instant's iids no longer resolve.
    let mut clear = TracePacket::new();
    clear.set_trusted_packet_sequence_id(1);
    clear.set_sequence_flags(SEQ_INCREMENTAL_STATE_CLEARED);
    match perfetto::read(&with_tail(clear.clone())) {
        Err(TraceError::Shape(m)) => assert!(m.contains("never interned"), "{m}"),
        other => panic!("read a forgotten iid: {other:?}"),
    }
    // Interned again in the clearing packet, they do.
    clear.interned_data = pb.packet[0].interned_data.clone();
    assert!(perfetto::read(&with_tail(clear)).is_ok());
}

#[test]
fn chrome_file_has_every_subtask_once_and_a_flow_per_edge() {
    let trace = fixture();
    let mut bytes = Vec::new();
    chrome::write(&trace, &mut bytes).unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let thread_name = |pid: u64, tid: u64| -> String {
        events
            .iter()
            .find(|e| {
                e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == pid && e["tid"] == tid
            })
            .map(|e| e["args"]["name"].as_str().unwrap().to_string())
            .unwrap_or_default()
    };
    for p in &trace.processes {
        let pid = u64::from(p.pid) + 1;
        assert!(events.iter().any(|e| e["ph"] == "M"
            && e["name"] == "process_name"
            && e["pid"] == pid
            && e["args"]["name"] == p.name.as_str()));
        for run in &p.runs {
            let xs: Vec<&Value> = events
                .iter()
                .filter(|e| {
                    e["ph"] == "X"
                        && e["cat"] == "subtask"
                        && e["pid"] == pid
                        && e["args"]["epoch"] == run.epoch
                })
                .collect();
            assert_eq!(xs.len(), run.subtasks.len());
            for s in &run.subtasks {
                let hits: Vec<&&Value> = xs
                    .iter()
                    .filter(|e| e["args"]["task"] == s.task && e["args"]["block"] == s.block)
                    .collect();
                assert_eq!(hits.len(), 1, "{s:?}");
                let e = hits[0];
                assert_eq!(thread_name(pid, e["tid"].as_u64().unwrap()), s.core_name());
                assert!(e["dur"].as_f64().unwrap() > 0.0);
                let ts = (e["ts"].as_f64().unwrap() * 1000.0).round() as u64;
                assert_eq!(ts, p.clock.to_host(s.start_ns));
            }
            for d in &run.edges {
                let s = events
                    .iter()
                    .find(|e| {
                        e["ph"] == "s"
                            && e["pid"] == pid
                            && e["args"]["epoch"] == run.epoch
                            && e["args"]["producer"] == d.producer
                            && e["args"]["consumer"] == d.consumer
                    })
                    .unwrap_or_else(|| panic!("no flow start for {d:?}"));
                assert_eq!(s["name"], d.kind.name());
                let f = events
                    .iter()
                    .find(|e| e["ph"] == "f" && e["id"] == s["id"])
                    .expect("flow end");
                assert_eq!(f["bp"], "e");
                assert!(
                    f["ts"].as_f64().unwrap() > s["ts"].as_f64().unwrap(),
                    "{d:?}"
                );
                // The flow ends inside the consumer's first subtask and starts at the producer's end.
                let consumer_first = xs
                    .iter()
                    .filter(|e| e["args"]["task"] == d.consumer)
                    .map(|e| e["ts"].as_f64().unwrap())
                    .fold(f64::MAX, f64::min);
                assert_eq!(f["ts"].as_f64().unwrap(), consumer_first);
            }
            for d in &run.dropped {
                let i = events
                    .iter()
                    .find(|e| e["ph"] == "i" && e["cat"] == "dropped" && e["pid"] == pid)
                    .expect("drop instant");
                assert_eq!(i["args"]["count"], d.count);
                assert_eq!(thread_name(pid, i["tid"].as_u64().unwrap()), d.thread);
            }
            let counters = events
                .iter()
                .filter(|e| e["ph"] == "C" && e["pid"] == pid && e["epoch"] == run.epoch)
                .count();
            assert_eq!(counters, run.counters.len());
        }
    }
}

#[test]
fn chrome_round_trip() {
    let trace = fixture();
    let mut bytes = Vec::new();
    chrome::write(&trace, &mut bytes).unwrap();
    assert_eq!(Format::sniff(&bytes), Format::Chrome);
    assert_eq!(
        normalized(chrome::read(&bytes).unwrap()),
        normalized(trace.clone())
    );
    assert_eq!(normalized(read(&bytes).unwrap()), normalized(trace));
}

#[test]
fn chrome_slices_of_one_thread_nest_and_crossing_ones_go_to_an_overflow_thread() {
    let trace = fixture();
    let mut bytes = Vec::new();
    chrome::write(&trace, &mut bytes).unwrap();
    assert_eq!(chrome::crossing_slices(&bytes).unwrap(), []);
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let overflow: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["overflow_of"].is_u64()
        })
        .collect();
    assert_eq!(
        overflow.len(),
        1,
        "the fixture's waits need one overflow thread"
    );
    assert_eq!(overflow[0]["args"]["name"], "AICPU 1 (scheduler) +1");
    let parent = overflow[0]["args"]["overflow_of"].as_u64().unwrap();
    let parent_name = events
        .iter()
        .find(|e| {
            e["ph"] == "M"
                && e["name"] == "thread_name"
                && e["pid"] == overflow[0]["pid"]
                && e["tid"] == parent
        })
        .unwrap();
    assert_eq!(parent_name["args"]["name"], "AICPU 1 (scheduler)");
    let on_overflow = events
        .iter()
        .filter(|e| {
            e["ph"] == "X" && e["tid"] == overflow[0]["tid"] && e["pid"] == overflow[0]["pid"]
        })
        .count();
    assert_eq!(on_overflow, 1, "only the wait that crosses moves");
}

#[test]
fn crossing_slices_names_a_slice_that_crosses_and_not_one_that_nests() {
    let json = |events: &str| format!(r#"{{"traceEvents":[{events}]}}"#);
    let x = |name: &str, ts: u32, dur: u32, tid: u32| {
        format!(r#"{{"name":"{name}","ph":"X","ts":{ts},"dur":{dur},"pid":1,"tid":{tid}}}"#)
    };
    let nested = json(&[x("a", 0, 10, 1), x("b", 2, 3, 1), x("c", 10, 5, 1)].join(","));
    assert_eq!(chrome::crossing_slices(nested.as_bytes()).unwrap(), []);
    let crossing = json(&[x("a", 0, 10, 1), x("b", 5, 10, 1), x("c", 5, 10, 2)].join(","));
    assert_eq!(
        chrome::crossing_slices(crossing.as_bytes()).unwrap(),
        [(1, 1, "b".to_string())]
    );
    assert!(chrome::crossing_slices(b"[]").is_err());
}

#[test]
fn readers_refuse_what_simpler_did_not_write() {
    assert!(matches!(read(b"{\"nope\": 1}"), Err(TraceError::Json(_))));
    // A packet whose body "hello" does not decode; text that is no packet at all.
    assert!(matches!(
        read(b"\x0a\x05hello"),
        Err(TraceError::Protobuf {
            offset: 0,
            problem: Corruption::BadPacket
        })
    ));
    let prose = read(b"this is not a trace at all").unwrap_err();
    assert!(matches!(
        prose,
        TraceError::Protobuf {
            offset: 0,
            problem: Corruption::NotAPacket
        }
    ));
    assert_eq!(
        prose.to_string(),
        "not a valid Perfetto trace: at byte 0, the bytes there are not a trace packet"
    );
    // A file cut short inside its last packet names where that packet starts.
    let mut bytes = Vec::new();
    perfetto::write(&fixture(), &mut bytes).unwrap();
    let last = PbTrace::parse_from_bytes(&bytes)
        .unwrap()
        .packet
        .pop()
        .unwrap();
    let start = bytes.len()
        - PbTrace {
            packet: vec![last],
            ..Default::default()
        }
        .write_to_bytes()
        .unwrap()
        .len();
    match perfetto::read(&bytes[..bytes.len() - 1]) {
        Err(TraceError::Protobuf { offset, problem }) => {
            assert_eq!((offset, problem), (start, Corruption::Truncated));
        }
        other => panic!("read a cut file: {other:?}"),
    }
    assert_eq!(read(b"").unwrap(), Trace::default());
    for format in [Format::Perfetto, Format::Chrome] {
        let mut bytes = Vec::new();
        write(&Trace::default(), format, &mut bytes).unwrap();
        assert_eq!(read(&bytes).unwrap(), Trace::default(), "{format}");
    }
}

#[test]
fn svg_is_well_formed_with_a_box_per_span() {
    let trace = fixture();
    let mut out = Vec::new();
    svg::write(&trace, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let boxes = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.children().any(|c| c.has_tag_name("title")))
        .count();
    let spans: usize = trace
        .processes
        .iter()
        .map(|p| {
            p.host_spans.len()
                + p.runs
                    .iter()
                    .map(|r| {
                        r.subtasks.len() + r.aicpu.iter().filter(|a| a.end_ns > a.start_ns).count()
                    })
                    .sum::<usize>()
        })
        .sum();
    assert_eq!(boxes, spans);
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    for want in [
        "chip 0 (device 0)",
        "chip 1 (device 1)",
        "AIC 0",
        "AICPU 0 (orchestrator)",
        "gemm_tile",
        "relu",
    ] {
        assert!(texts.contains(&want), "{want} missing");
    }
}

#[test]
fn summary_reads_back_from_either_file() {
    let trace = fixture();
    let want = summary::Summary::of(&trace);
    for format in [Format::Perfetto, Format::Chrome] {
        let mut bytes = Vec::new();
        write(&trace, format, &mut bytes).unwrap();
        assert_eq!(
            summary::Summary::of(&read(&bytes).unwrap()),
            want,
            "{format}"
        );
    }
    assert_eq!(want.runs.len(), 3);
    assert_eq!(want.runs[2].dropped, 17);
}
