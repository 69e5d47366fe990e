//! The device resources of the lane (`docs/lane.md` §2):
//!
//! - per pipeline slot ([`PipelineSlot`], one per unit of launch depth): the launch
//!   descriptor, the epoch-stamped result region, the orchestration arguments, the func
//!   tables, the core mailboxes and the runtime state word, the slot's completion fence and
//!   its two join-proof events, and its three caller-order events (created lazily, by the
//!   first caller launch the slot hosts), the pool of staging buffers its runs reuse and
//!   the trace area of its traced runs (allocated by the first one, `docs/tracing.md`).
//!   Two runs in flight never share any of these, so a successor can be staged while its
//!   predecessor executes;
//! - per lane ([`LaneResources`]): the stream pair every run is launched on (preparing a
//!   successor never selects or replaces a stream) and the output heap (device scratch:
//!   runs execute one after the other on the device, so one heap serves both slots).
//!
//! Everything is allocated once per worker and freed at teardown, and only on a path that
//! proved the device done with it; a free or destroy that fails keeps its handle, so a
//! retried teardown frees exactly what is left.

use std::sync::Arc;

use simpler_abi::{CoreMailbox, OrchArgs, RunLaunchDesc, RunResult, MAX_FUNC_ID};
use simpler_device::{Device, DevicePtr, EventId};

use crate::caller_stream::CallerEvents;
use crate::fence::RunCompletionFence;
use crate::identity::{StreamPair, StreamRole};
use crate::HostError;

use super::staging::StagingPool;
use crate::trace::area::TraceArea;

/// One pipeline slot's device resources.
pub(crate) struct PipelineSlot {
    pub(crate) index: u32,
    pub(crate) desc: DevicePtr,
    pub(crate) result: DevicePtr,
    pub(crate) orch_args: DevicePtr,
    pub(crate) func_table: DevicePtr,
    pub(crate) func_types: DevicePtr,
    pub(crate) mailboxes: DevicePtr,
    pub(crate) state_word: DevicePtr,
    /// The slot's completion fence (shared with a driver waiting outside the lane lock).
    pub(crate) fence: Arc<RunCompletionFence>,
    /// Join-proof events, by the stream that holds the join wait (created at first join).
    pub(crate) proofs: [Option<EventId>; 2],
    /// Start, Fork and Tail of caller launches (created at the first one).
    pub(crate) caller_events: CallerEvents,
    /// The zero result marker was published: the region's bytes are evidence from now on.
    pub(crate) result_initialized: bool,
    /// Dispatch id of the run occupying the slot.
    pub(crate) occupant: Option<u64>,
    /// The slot's last run could not be proven finished: it is never reused.
    pub(crate) quarantined: bool,
    /// Staging buffers of the slot's finished runs, reused by its next ones.
    pub(crate) staging: StagingPool,
    /// The trace area of the slot's traced runs (allocated by the first one).
    pub(crate) trace_area: Option<TraceArea>,
    allocations: Vec<DevicePtr>,
}

impl PipelineSlot {
    pub(crate) fn new(device: &Arc<dyn Device>, index: u32) -> Result<PipelineSlot, HostError> {
        let mut allocations = Vec::new();
        let mut alloc = |bytes: usize, what: &str| -> Result<DevicePtr, HostError> {
            match device.malloc(bytes as u64) {
                Ok(p) => {
                    allocations.push(p);
                    Ok(p)
                }
                Err(e) => {
                    for p in allocations.drain(..) {
                        let _ = device.free(p);
                    }
                    Err(HostError::device(format!(
                        "allocating the slot {index} {what}"
                    ))(e))
                }
            }
        };
        let cores = device.topology().core_count() as usize;
        let desc = alloc(std::mem::size_of::<RunLaunchDesc>(), "launch descriptor")?;
        let result = alloc(std::mem::size_of::<RunResult>(), "result region")?;
        let orch_args = alloc(std::mem::size_of::<OrchArgs>(), "orchestration arguments")?;
        let func_table = alloc(8 * MAX_FUNC_ID, "kernel table")?;
        let func_types = alloc(4 * MAX_FUNC_ID, "kernel core-type table")?;
        let mailboxes = alloc(std::mem::size_of::<CoreMailbox>() * cores, "core mailboxes")?;
        let state_word = alloc(8, "runtime state word")?;
        Ok(PipelineSlot {
            index,
            desc,
            result,
            orch_args,
            func_table,
            func_types,
            mailboxes,
            state_word,
            fence: Arc::new(RunCompletionFence::new()),
            proofs: [None, None],
            caller_events: CallerEvents::default(),
            result_initialized: false,
            occupant: None,
            quarantined: false,
            staging: StagingPool::default(),
            trace_area: None,
            allocations,
        })
    }

    /// Creates the join-proof events if missing (launch prologue: nothing submitted yet).
    pub(crate) fn ensure_proofs(
        &mut self,
        device: &Arc<dyn Device>,
    ) -> Result<[EventId; 2], HostError> {
        for role in StreamRole::BOTH {
            if self.proofs[role.index()].is_none() {
                let e = device
                    .create_event()
                    .map_err(HostError::device("creating a join-proof event"))?;
                self.proofs[role.index()] = Some(e);
            }
        }
        Ok([
            self.proofs[0].expect("created"),
            self.proofs[1].expect("created"),
        ])
    }

    /// Frees everything (only once the slot is proven quiescent, or after a confirmed
    /// reset). What fails to free is kept for a retry; true when nothing is left.
    pub(crate) fn release(&mut self, device: &Arc<dyn Device>) -> bool {
        self.allocations.retain(|p| device.free(*p).is_err());
        let staging = self.staging.release(&**device);
        for e in self.proofs.iter_mut() {
            if let Some(ev) = *e {
                if device.destroy_event(ev).is_ok() {
                    *e = None;
                }
            }
        }
        let events = self.caller_events.release(&**device);
        let fence = self.fence.release(&**device).is_ok();
        let trace = crate::trace::area::release(&**device, &mut self.trace_area);
        self.allocations.is_empty()
            && trace
            && staging
            && self.proofs.iter().all(Option::is_none)
            && events
            && fence
    }
}

/// Resources every run of the lane shares.
pub(crate) struct LaneResources {
    /// The stream pair every run is launched on.
    pub(crate) streams: StreamPair,
    /// The output heap, once allocated.
    pub(crate) heap: Option<DevicePtr>,
    /// Streams destroyed so far (AICore, AICPU).
    destroyed: [bool; 2],
}

impl LaneResources {
    pub(crate) fn new(device: &Arc<dyn Device>) -> Result<LaneResources, HostError> {
        let aicore_stream = device
            .create_stream()
            .map_err(HostError::device("creating the AICore stream"))?;
        let aicpu_stream = match device.create_stream() {
            Ok(s) => s,
            Err(e) => {
                let _ = device.destroy_stream(aicore_stream);
                return Err(HostError::device("creating the AICPU stream")(e));
            }
        };
        Ok(LaneResources {
            streams: StreamPair {
                aicore: aicore_stream,
                aicpu: aicpu_stream,
            },
            heap: None,
            destroyed: [false; 2],
        })
    }

    /// The output heap (allocated once).
    pub(crate) fn heap(
        &mut self,
        device: &Arc<dyn Device>,
        size: u64,
    ) -> Result<DevicePtr, HostError> {
        if let Some(h) = self.heap {
            return Ok(h);
        }
        let h = device.malloc(size).map_err(HostError::device(format!(
            "allocating the {size}-byte output heap"
        )))?;
        self.heap = Some(h);
        Ok(h)
    }

    /// Frees the heap and destroys the streams; what fails is kept for a retry. True when
    /// nothing is left.
    pub(crate) fn release(&mut self, device: &Arc<dyn Device>) -> bool {
        if let Some(h) = self.heap {
            if device.free(h).is_ok() {
                self.heap = None;
            }
        }
        for (i, s) in [self.streams.aicore, self.streams.aicpu]
            .into_iter()
            .enumerate()
        {
            if !self.destroyed[i] && device.destroy_stream(s).is_ok() {
                self.destroyed[i] = true;
            }
        }
        self.heap.is_none() && self.destroyed.iter().all(|&d| d)
    }
}
