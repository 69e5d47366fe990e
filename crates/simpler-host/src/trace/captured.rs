//! A run's trace as the lane hands it over (`docs/tracing.md` §2, Buffers): the records
//! copied back from the slot's trace area at the run's end, decoded into the trace model the
//! first time anyone looks at it.
//!
//! Copying the records back is all a traced run pays at its end; building the model (one
//! event per record, names resolved, sorted) is done once, on first use, by whoever reads
//! the trace, so a run that is traced but never looked at costs only its recording and the
//! copy. This module owns that deferral and nothing else: the records come from `area`, the
//! model from `decode`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use simpler_abi::CoreType;
use simpler_device::Topology;
use simpler_trace::{CoreKind, Trace, TraceLevel};

use super::decode::{decode, RawArea, RunFacts};

/// A run's trace: the chip's process with this run and its host spans
/// ([`RunReport::trace`](crate::RunReport::trace)).
///
/// It dereferences to the [`Trace`] model; the first dereference decodes the records (about
/// 20–50 ns per record on a desktop core) and later ones return the same model.
/// `Send + Sync`: threads that race to look first decode once.
pub struct CapturedTrace {
    /// The trace without the run's device events: the process, its clock alignment and the
    /// host spans.
    frame: Trace,
    /// The records read back and what decoding them needs; `None` when the area could not
    /// be read back (the trace then has no run).
    pending: Option<Pending>,
    model: OnceLock<Trace>,
}

/// What decoding needs besides the records.
struct Pending {
    area: RawArea,
    epoch: u64,
    callable: String,
    level: TraceLevel,
    kernel_names: BTreeMap<u32, String>,
    topology: Topology,
}

impl CapturedTrace {
    /// A trace of `frame` (one process, no runs yet) and, when the area was read back, the
    /// run `epoch` of `callable` in `area`, decoded on first use.
    pub(crate) fn new(
        frame: Trace,
        area: Option<RawArea>,
        epoch: u64,
        callable: &str,
        level: TraceLevel,
        kernel_names: &BTreeMap<u32, String>,
        topology: Topology,
    ) -> CapturedTrace {
        CapturedTrace {
            frame,
            pending: area.map(|area| Pending {
                area,
                epoch,
                callable: callable.to_string(),
                level,
                kernel_names: kernel_names.clone(),
                topology,
            }),
            model: OnceLock::new(),
        }
    }

    /// The model, decoding the records on the first call.
    pub fn model(&self) -> &Trace {
        self.model.get_or_init(|| self.build())
    }

    /// Whether the records have been decoded yet (a first [`model`](Self::model) call is
    /// then free).
    pub fn is_decoded(&self) -> bool {
        self.model.get().is_some()
    }

    /// The model by value (decoding it when nobody has yet).
    pub fn into_model(self) -> Trace {
        match self.model.into_inner() {
            Some(model) => model,
            None => {
                let this = CapturedTrace {
                    frame: self.frame,
                    pending: self.pending,
                    model: OnceLock::new(),
                };
                this.build()
            }
        }
    }

    fn build(&self) -> Trace {
        let mut trace = self.frame.clone();
        if let (Some(p), Some(process)) = (&self.pending, trace.processes.first_mut()) {
            let topology = p.topology;
            let core_kind = move |core: u32| match topology.core_type(core) {
                CoreType::Aic => CoreKind::Aic,
                CoreType::Aiv => CoreKind::Aiv,
            };
            process.runs.push(decode(
                &p.area,
                &RunFacts {
                    epoch: p.epoch,
                    callable: &p.callable,
                    level: p.level,
                    kernel_names: &p.kernel_names,
                    core_kind: &core_kind,
                },
            ));
        }
        trace
    }
}

impl std::ops::Deref for CapturedTrace {
    type Target = Trace;

    fn deref(&self) -> &Trace {
        self.model()
    }
}

impl From<Trace> for CapturedTrace {
    /// A trace that is already a model (nothing left to decode).
    fn from(model: Trace) -> CapturedTrace {
        CapturedTrace {
            frame: Trace::default(),
            pending: None,
            model: OnceLock::from(model),
        }
    }
}

impl Clone for CapturedTrace {
    /// A copy of the decoded model (decoding it first when nobody has).
    fn clone(&self) -> CapturedTrace {
        CapturedTrace::from(self.model().clone())
    }
}

impl fmt::Debug for CapturedTrace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let records: usize = self
            .pending
            .as_ref()
            .map_or(0, |p| p.area.buffers.iter().map(|b| b.records.len()).sum());
        f.debug_struct("CapturedTrace")
            .field("records", &records)
            .field("decoded", &self.is_decoded())
            .finish()
    }
}

impl serde::Serialize for CapturedTrace {
    /// Serializes the model (as [`Trace`] does).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.model().serialize(s)
    }
}

impl PartialEq for CapturedTrace {
    fn eq(&self, other: &CapturedTrace) -> bool {
        self.model() == other.model()
    }
}

#[cfg(test)]
mod tests {
    use simpler_abi::{TraceBufferHeader, TraceControl, TraceRecord, TRACE_SUBTASK, TRACE_TASK};
    use simpler_trace::{ClockAlignment, ProcessTrace};

    use super::*;
    use crate::trace::decode::RawBuffer;

    fn frame() -> Trace {
        Trace {
            processes: vec![ProcessTrace {
                pid: 0,
                name: "chip 0 (device 0)".into(),
                clock: ClockAlignment::default(),
                runs: Vec::new(),
                host_spans: Vec::new(),
            }],
        }
    }

    fn area() -> RawArea {
        let rec = |kind, a, task, s, e| TraceRecord {
            kind,
            a,
            b: 0,
            c: if kind == TRACE_TASK { u32::MAX } else { 0 },
            task,
            start_ns: s,
            end_ns: e,
        };
        let header = |len| TraceBufferHeader {
            capacity: 8,
            len,
            ..TraceBufferHeader::default()
        };
        RawArea {
            control: TraceControl {
                buffer_count: 2,
                core_count: 1,
                capacity: 8,
                ..TraceControl::default()
            },
            buffers: vec![
                RawBuffer {
                    header: header(1),
                    records: vec![rec(TRACE_SUBTASK, 0, 5, 10, 20)],
                },
                RawBuffer {
                    header: header(1),
                    records: vec![rec(TRACE_TASK, 3, 5, 1, 1)],
                },
            ],
        }
    }

    /// Run 7 of "gemm" (func 3 is "matmul") on a one-cluster chip, from `area`.
    fn captured(area: Option<RawArea>) -> CapturedTrace {
        let names: BTreeMap<u32, String> = [(3, "matmul".to_string())].into();
        let topology = Topology {
            clusters: 1,
            aicpu_threads: 1,
        };
        CapturedTrace::new(
            frame(),
            area,
            7,
            "gemm",
            TraceLevel::Tasks,
            &names,
            topology,
        )
    }

    #[test]
    fn the_records_are_decoded_once_on_first_use() {
        let t = captured(Some(area()));
        assert!(!t.is_decoded());
        assert!(format!("{t:?}").contains("records: 2"));
        let run = &t.processes[0].runs[0];
        assert!(t.is_decoded());
        assert_eq!(run.epoch, 7);
        assert_eq!(run.subtasks.len(), 1);
        assert_eq!(run.subtasks[0].func_id, 3);
        assert_eq!(run.tasks[0].kernels[0].name, "matmul");
        assert!(std::ptr::eq(t.model(), t.model()), "decoded once");
        let copy = t.clone();
        assert_eq!(copy, t);
        assert_eq!(copy.into_model(), *t.model());
        // Not yet decoded: into_model decodes.
        let fresh = captured(Some(area()));
        assert_eq!(fresh.into_model(), *t.model());
    }

    #[test]
    fn a_trace_whose_area_was_not_read_back_has_no_run() {
        let t = captured(None);
        assert_eq!(t.processes.len(), 1);
        assert!(t.processes[0].runs.is_empty());
        let json = serde_json::to_string(&t).unwrap();
        let back: Trace = serde_json::from_str(&json).unwrap();
        assert_eq!(back, *t.model());
    }
}
