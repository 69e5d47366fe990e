//! The device resources a run occupies: launch descriptor, result region, orchestration
//! arguments, func tables, core mailboxes, runtime state word, output heap, the two streams
//! and their two boundary events. Allocated once per worker (the heap lazily, at the first
//! run) and reused by every run; freed when the worker drops.

use std::sync::Arc;

use simpler_abi::{CoreMailbox, OrchArgs, RunLaunchDesc, RunResult, MAX_FUNC_ID};
use simpler_device::{Device, DevicePtr, EventId, StreamId};

use crate::HostError;

/// One pipeline slot's device resources.
pub(crate) struct RunSlot {
    pub(crate) desc: DevicePtr,
    pub(crate) result: DevicePtr,
    pub(crate) orch_args: DevicePtr,
    pub(crate) func_table: DevicePtr,
    pub(crate) func_types: DevicePtr,
    pub(crate) mailboxes: DevicePtr,
    pub(crate) state_word: DevicePtr,
    pub(crate) heap: Option<DevicePtr>,
    pub(crate) aicore_stream: StreamId,
    pub(crate) aicpu_stream: StreamId,
    /// Boundary event recorded after the AICore kernel.
    pub(crate) core_done: EventId,
    /// Boundary event recorded after the AICPU kernel.
    pub(crate) cpu_done: EventId,
    allocations: Vec<DevicePtr>,
}

impl RunSlot {
    pub(crate) fn new(device: &Arc<dyn Device>) -> Result<RunSlot, HostError> {
        let mut allocations = Vec::new();
        let mut alloc = |bytes: usize, what: &str| -> Result<DevicePtr, HostError> {
            let p = device
                .malloc(bytes as u64)
                .map_err(HostError::device(format!("allocating the {what}")))?;
            allocations.push(p);
            Ok(p)
        };
        let cores = device.topology().core_count() as usize;
        let desc = alloc(std::mem::size_of::<RunLaunchDesc>(), "launch descriptor")?;
        let result = alloc(std::mem::size_of::<RunResult>(), "result region")?;
        let orch_args = alloc(std::mem::size_of::<OrchArgs>(), "orchestration arguments")?;
        let func_table = alloc(8 * MAX_FUNC_ID, "kernel table")?;
        let func_types = alloc(4 * MAX_FUNC_ID, "kernel core-type table")?;
        let mailboxes = alloc(std::mem::size_of::<CoreMailbox>() * cores, "core mailboxes")?;
        let state_word = alloc(8, "runtime state word")?;
        let stream = |what: &str| {
            device
                .create_stream()
                .map_err(HostError::device(format!("creating the {what} stream")))
        };
        let event = |what: &str| {
            device
                .create_event()
                .map_err(HostError::device(format!("creating the {what} event")))
        };
        Ok(RunSlot {
            desc,
            result,
            orch_args,
            func_table,
            func_types,
            mailboxes,
            state_word,
            heap: None,
            aicore_stream: stream("AICore")?,
            aicpu_stream: stream("AICPU")?,
            core_done: event("AICore boundary")?,
            cpu_done: event("AICPU boundary")?,
            allocations,
        })
    }

    /// The output heap, allocated at first use.
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
        self.allocations.push(h);
        self.heap = Some(h);
        Ok(h)
    }

    /// Releases everything (only once the slot is known to be quiescent).
    pub(crate) fn release(&mut self, device: &Arc<dyn Device>) {
        for p in self.allocations.drain(..) {
            let _ = device.free(p);
        }
        let _ = device.destroy_event(self.core_done);
        let _ = device.destroy_event(self.cpu_done);
        let _ = device.destroy_stream(self.aicore_stream);
        let _ = device.destroy_stream(self.aicpu_stream);
    }
}
