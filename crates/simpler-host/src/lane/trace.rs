//! The end of a traced run in the lane (`docs/tracing.md`, Capture): after the proof of
//! completion and the copy back, the slot's trace area is read back and decoded, and the
//! run's trace (the chip's process with this run and its host spans) is assembled for its
//! [`RunReport`](super::RunReport). Reading or decoding never changes the verdict: a trace
//! that cannot be read back has no run in it, and is still returned with its host spans.

use simpler_abi::CoreType;
use simpler_trace::{ClockAlignment, CoreKind, Trace};

use super::LaneEngine;
use crate::registry::Registered;
use crate::trace::area;
use crate::trace::decode::{decode, RunFacts};
use crate::trace::RunCapture;

impl LaneEngine {
    /// The trace of run `epoch`, which ran in slot `slot`; `finalize_start` opens its
    /// "finalize" span, which ends here.
    pub(super) fn run_trace(
        &mut self,
        slot: usize,
        callable: &Registered,
        epoch: u64,
        mut capture: RunCapture,
        finalize_start: Option<u64>,
    ) -> Box<Trace> {
        let read_start = capture.now();
        let raw = self.slots[slot]
            .trace_area
            .as_ref()
            .and_then(|a| area::read(&*self.device, a));
        let topology = self.device.topology();
        let core_kind = |core: u32| match topology.core_type(core) {
            CoreType::Aic => CoreKind::Aic,
            CoreType::Aiv => CoreKind::Aiv,
        };
        let clock = raw.as_ref().map_or(
            ClockAlignment {
                device_ns: 0,
                host_ns: self.trace_origin_ns,
            },
            |r| ClockAlignment {
                device_ns: r.control.align_device_ns,
                host_ns: r.control.align_host_ns,
            },
        );
        let run = raw.as_ref().map(|r| {
            decode(
                r,
                &RunFacts {
                    epoch,
                    callable: &callable.name,
                    level: capture.level(),
                    kernel_names: &callable.kernel_names,
                    core_kind: &core_kind,
                },
            )
        });
        capture.span("trace read", epoch, read_start);
        capture.span("finalize", epoch, finalize_start);
        let name = format!("chip 0 (device {})", self.device.device_id());
        Box::new(capture.into_trace(name, clock, run))
    }
}
