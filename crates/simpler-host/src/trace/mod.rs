//! Capture of a run's trace on the host side (`docs/tracing.md`, Capture): the per-run
//! [`RunCapture`] (level, buffer size, host spans), the slot's device trace area (`area`:
//! allocate, arm before the launch, read back after the proof of completion), the decoder
//! from records to the trace model (`decode`) and the run's trace that defers decoding to
//! its first use ([`CapturedTrace`]).
//!
//! An untraced run ([`TraceLevel::Off`]) allocates nothing, arms nothing, reads no clock:
//! every entry point here first asks [`RunCapture::on`]. A trace never changes a run's
//! verdict: a failure to arm fails the run's preparation like any slot resource, but a
//! failure to read back or decode only loses (or counts as garbled) the trace.

pub(crate) mod area;
mod captured;
pub(crate) mod decode;

pub use captured::CapturedTrace;

use simpler_device::clock;
use simpler_trace::{ClockAlignment, HostSpan, ProcessTrace, Trace, TraceLevel};

/// Default records per trace buffer: 32 Ki records of 40 bytes (1.25 MiB per AICore and per
/// AICPU thread, allocated once per pipeline slot the first time a traced run uses it).
pub const DEFAULT_TRACE_RECORDS: u32 = 32 * 1024;

/// The host thread track the lane's spans are on.
pub(crate) const LANE_THREAD: &str = "host lane";

/// What the lane records for one run.
#[derive(Debug, Default)]
pub(crate) struct RunCapture {
    level: TraceLevel,
    spans: Vec<HostSpan>,
    /// When the launch ended (the start of the "wait" span), host clock ns.
    launched_ns: Option<u64>,
}

impl RunCapture {
    /// The capture of a run at `level`.
    pub(crate) fn new(level: TraceLevel) -> RunCapture {
        RunCapture {
            level,
            ..RunCapture::default()
        }
    }

    /// Whether the run records anything.
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.level != TraceLevel::Off
    }

    /// The run's level.
    pub(crate) fn level(&self) -> TraceLevel {
        self.level
    }

    /// The host clock now, when the run records (`None` otherwise: nothing is read).
    #[inline]
    pub(crate) fn now(&self) -> Option<u64> {
        self.on().then(clock::monotonic_ns)
    }

    /// Records host span `name` of run `epoch` from `start` (a [`now`](Self::now)) to now.
    pub(crate) fn span(&mut self, name: &str, epoch: u64, start: Option<u64>) {
        if let Some(start_ns) = start {
            self.spans.push(HostSpan {
                thread: LANE_THREAD.to_string(),
                name: name.to_string(),
                epoch: Some(epoch),
                start_ns,
                end_ns: clock::monotonic_ns(),
            });
        }
    }

    /// Notes the end of the launch (the wait starts).
    pub(crate) fn launched(&mut self) {
        self.launched_ns = self.now();
    }

    /// Ends the "wait" span (once: the first proof of completion).
    pub(crate) fn waited(&mut self, epoch: u64) {
        if let Some(start) = self.launched_ns.take() {
            self.span("wait", epoch, Some(start));
        }
    }

    /// The frame of the run's trace: one process (the chip) with the host spans and the
    /// clock alignment the runtime recorded, and no run yet ([`CapturedTrace`] adds the
    /// decoded run).
    pub(crate) fn into_frame(self, process: String, clock: ClockAlignment) -> Trace {
        Trace {
            processes: vec![ProcessTrace {
                pid: 0,
                name: process,
                clock,
                runs: Vec::new(),
                host_spans: self.spans,
            }],
        }
    }
}
