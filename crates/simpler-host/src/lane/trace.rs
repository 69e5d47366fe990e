//! The end of a traced run in the lane (`docs/tracing.md`, Capture): after the proof of
//! completion and the copy back, the slot's trace area is read back, and the run's trace
//! (the chip's process with this run, decoded on first use, and its host spans) is assembled
//! for its [`RunReport`](super::RunReport). Reading or decoding never changes the verdict: a trace
//! that cannot be read back has no run in it, and is still returned with its host spans.

use std::sync::Arc;

use simpler_trace::ClockAlignment;

use super::LaneEngine;
use crate::registry::Registered;
use crate::trace::area;
use crate::trace::{CapturedTrace, RunCapture};

impl LaneEngine {
    /// The trace of run `epoch`, which ran in slot `slot`; `finalize_start` opens its
    /// "finalize" span, which ends here. The records are copied back now and decoded on
    /// the trace's first use.
    pub(super) fn run_trace(
        &mut self,
        slot: usize,
        callable: &Registered,
        epoch: u64,
        mut capture: RunCapture,
        finalize_start: Option<u64>,
    ) -> Arc<CapturedTrace> {
        let read_start = capture.now();
        let raw = self.slots[slot]
            .trace_area
            .as_ref()
            .and_then(|a| area::read(&*self.device, a));
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
        let level = capture.level();
        capture.span("trace read", epoch, read_start);
        capture.span("finalize", epoch, finalize_start);
        let name = format!("chip 0 (device {})", self.device.device_id());
        Arc::new(CapturedTrace::new(
            capture.into_frame(name, clock),
            raw,
            epoch,
            &callable.name,
            level,
            &callable.kernel_names,
            *self.device.topology(),
        ))
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use simpler_device::sim::SimDevice;
    use simpler_device::{Device, Topology};
    use simpler_trace::TraceLevel;

    use crate::config::CallConfig;
    use crate::lane::queue::Phase;
    use crate::lane::run::{RunCell, RunRequest, RunState};
    use crate::lane::LaneHandle;
    use crate::lifecycle::EnvironmentIdentity;
    use crate::registry::{self, ImageCache};
    use crate::trace::RunCapture;
    use crate::worker::tests::empty_spec;
    use crate::worker_config::WorkerConfig;

    /// An untraced run allocates no trace area and leaves `trace_addr` 0; a traced one arms
    /// the slot's area, which the next traced run reuses.
    #[test]
    fn only_a_traced_run_has_a_trace_area() {
        let topology = Topology {
            clusters: 1,
            aicpu_threads: 2,
        };
        let device: Arc<dyn Device> = Arc::new(SimDevice::new(topology).unwrap());
        let config = WorkerConfig {
            topology,
            heap_size: 1 << 16,
            run_timeout: Duration::from_secs(30),
            ..WorkerConfig::default()
        };
        let identity = EnvironmentIdentity::new(device.device_id(), None);
        let lane = LaneHandle::open(device.clone(), config.clone(), identity).unwrap();
        let callable =
            Arc::new(registry::build(&mut ImageCache::default(), &empty_spec(), 1).unwrap());
        let mut areas = Vec::new();
        for level in [TraceLevel::Off, TraceLevel::Tasks, TraceLevel::Tasks] {
            let plan = CallConfig {
                trace_level: level,
                ..CallConfig::default()
            }
            .plan(&config)
            .unwrap();
            let mut engine = lane.lock_for_tests();
            let dispatch = engine.next_dispatch;
            engine.next_dispatch += 1;
            let epoch = crate::lane::EPOCHS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let cell = Arc::new(RunCell::new(epoch, dispatch));
            let run = RunState::queued(RunRequest {
                cell: cell.clone(),
                callable: callable.clone(),
                plan,
                args: Vec::new(),
                caller: None,
                host_ranges: Vec::new(),
                device_ranges: Vec::new(),
                capture: RunCapture::new(level),
                graph: crate::lane::graph::GraphPlan::Device,
                graph_image: None,
            });
            engine.queue.admit(dispatch, run).unwrap();
            engine.queue.advance(dispatch, Phase::Prepared).unwrap();
            engine.prepare(dispatch, 0).map_err(|(e, _)| e).unwrap();
            let mut raw = vec![0u8; std::mem::size_of::<simpler_abi::RunLaunchDesc>()];
            device
                .copy_from_device(&mut raw, engine.slots[0].desc)
                .unwrap();
            let desc: simpler_abi::RunLaunchDesc = crate::pod::from_bytes(&raw).unwrap();
            let area = engine.slots[0]
                .trace_area
                .as_ref()
                .map(|a| format!("{a:?}"));
            assert_eq!(desc.trace_addr != 0, level != TraceLevel::Off, "{level}");
            assert_eq!(area.is_some(), level != TraceLevel::Off, "{level}");
            areas.push(area);
            engine.queue.advance(dispatch, Phase::Launched).unwrap();
            engine.launch(dispatch, 0);
            engine.pump();
            drop(engine);
            let report = lane
                .wait_for(&cell, None, None)
                .and_then(|()| cell.outcome())
                .unwrap();
            assert_eq!(report.trace.is_some(), level != TraceLevel::Off);
        }
        assert_eq!(areas[1], areas[2], "the slot's area is reused");
        lane.detach();
    }
}
