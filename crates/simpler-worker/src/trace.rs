//! Traces of L3 runs (`docs/tracing.md`, Capture): a run submitted with a [`RunConfig`]
//! whose level is not Off records the engine's scheduler and lane (endpoint) spans as host
//! spans of an "L3 host" process, runs every chip task at that level, and merges each
//! chip's trace — from this process or sent back by a chip child process with the task's
//! result — into one [`Trace`] with one process per chip, which the run's
//! [`RunReport::trace`](crate::RunReport::trace) holds.
//!
//! This module owns what a run collects ([`RunCapture`]) and the merge; the lanes time
//! their calls and `crate::scheduler` hands the pieces in.

use simpler_device::clock;
use simpler_host::trace_model::{HostSpan, ProcessTrace, Trace, TraceLevel};

/// Per-run options of an L3 run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunConfig {
    /// How much the run records: [`TraceLevel::Off`] (the default) records nothing; any
    /// other level runs each chip task at that level (a chip task whose own
    /// `CallConfig::trace_level` is higher keeps its own) and fills the report's trace.
    pub trace_level: TraceLevel,
}

/// The name of the engine's process in a merged trace.
pub const L3_HOST: &str = "L3 host";

/// What a traced run collects while it is in flight.
#[derive(Debug)]
pub(crate) struct RunCapture {
    pub(crate) level: TraceLevel,
    spans: Vec<HostSpan>,
    /// (lane, its trace) per chip task member, in completion order.
    chips: Vec<(usize, Trace)>,
}

impl RunCapture {
    /// The capture of a run at `level`; `None` for Off.
    pub(crate) fn new(level: TraceLevel) -> Option<RunCapture> {
        (level != TraceLevel::Off).then(|| RunCapture {
            level,
            spans: Vec::new(),
            chips: Vec::new(),
        })
    }

    /// Records a span of the engine on thread track `thread`.
    pub(crate) fn span(&mut self, thread: &str, name: String, run: u64, start_ns: u64) {
        self.spans.push(HostSpan {
            thread: thread.to_string(),
            name,
            epoch: Some(run),
            start_ns,
            end_ns: clock::monotonic_ns().max(start_ns),
        });
    }

    /// Adds a span measured elsewhere (a lane's call).
    pub(crate) fn push_span(&mut self, span: HostSpan) {
        self.spans.push(span);
    }

    /// Adds one chip task member's trace, from lane `lane`.
    pub(crate) fn add_chip(&mut self, lane: usize, trace: Trace) {
        self.chips.push((lane, trace));
    }

    /// The merged trace: the "L3 host" process (pid 0) with the engine's spans, then one
    /// process per chip (in lane order) holding every run its tasks made there, named as
    /// `describe(lane)` says.
    pub(crate) fn into_trace(self, describe: impl Fn(usize) -> String) -> Trace {
        let mut trace = Trace {
            processes: vec![ProcessTrace {
                pid: 0,
                name: L3_HOST.to_string(),
                clock: Default::default(),
                runs: Vec::new(),
                host_spans: self.spans,
            }],
        };
        let mut chips = self.chips;
        chips.sort_by_key(|(lane, _)| *lane);
        let mut per_chip: Vec<(usize, ProcessTrace)> = Vec::new();
        for (lane, t) in chips {
            for p in t.processes {
                match per_chip.iter_mut().find(|(l, _)| *l == lane) {
                    Some((_, chip)) => {
                        chip.runs.extend(p.runs);
                        chip.host_spans.extend(p.host_spans);
                    }
                    None => per_chip.push((
                        lane,
                        ProcessTrace {
                            name: describe(lane),
                            ..p
                        },
                    )),
                }
            }
        }
        for (_, p) in per_chip {
            trace.merge(Trace { processes: vec![p] });
        }
        trace
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simpler_host::trace_model::RunTrace;

    fn chip(epoch: u64) -> Trace {
        Trace {
            processes: vec![ProcessTrace {
                pid: 0,
                name: "chip 0 (device 0)".into(),
                clock: Default::default(),
                runs: vec![RunTrace {
                    epoch,
                    ..Default::default()
                }],
                host_spans: Vec::new(),
            }],
        }
    }

    #[test]
    fn one_process_per_chip_after_the_host() {
        let mut c = RunCapture::new(TraceLevel::Tasks).unwrap();
        c.span("L3 scheduler", "task #1".into(), 1, 0);
        c.add_chip(1, chip(10));
        c.add_chip(0, chip(11));
        c.add_chip(1, chip(12));
        let t = c.into_trace(|l| format!("chip {l}"));
        let names: Vec<&str> = t.processes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, [L3_HOST, "chip 0", "chip 1"]);
        let pids: std::collections::BTreeSet<u32> = t.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids.len(), 3, "pids are unique");
        assert_eq!(t.processes[2].runs.len(), 2, "both runs of chip 1");
        assert!(RunCapture::new(TraceLevel::Off).is_none());
    }
}
