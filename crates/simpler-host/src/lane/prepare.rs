//! Prepare: the lane's pump (admission to a free slot, in dispatch order, behind any
//! unfinished run it shares a written host buffer with), the staging of a
//! run's host tensors and the publication of its slot's descriptor, arguments and func
//! tables; the end of runs that never launched.
//!
//! Staging comes from the slot's pool (`staging`). A failed preparation rolls back: the
//! buffers it reused go back to the pool and the ones it allocated are freed; a rollback that
//! proved every release publishes the run's epoch on the release marker and the run ends
//! with [`HostError::RunPreparationRefused`]; one that could not keeps the buffers it could
//! not free (quarantine) and the run's arguments, and poisons admission
//! (`docs/lane.md` §4).
//!
//! Nothing here waits on the device or touches a launched run: the pump does nothing while a
//! driver is waiting with the lock released.

use std::sync::Arc;

use simpler_abi::{
    ChipTensor, DataType, OrchArgs, RunLaunchDesc, RUNTIME_HBG, RUNTIME_TMR, RUN_LAUNCH_MAGIC,
    RUN_LAUNCH_VERSION,
};
use simpler_device::{Device, DevicePtr};

use crate::args::OwnedArg;
use crate::identity::RunIdentity;
use crate::lifecycle::{end_of_failed_preparation, PreparationEnd};
use crate::pod::bytes_of;
use crate::registry::Registered;
use crate::{ArgSpec, HostError};

use super::alias;
use super::graph::{self, GraphImage, GraphPlan, GraphReport};
use super::queue::Phase;
use super::run::{FailedRun, PreparedRun, RunRequest, RunState, Stage};
use super::slot::PipelineSlot;
use super::staging::{Origin, StagedArgs, StagingBuffer, StagingPool};
use super::LaneEngine;
use crate::trace::area::{self, AreaShape};
use simpler_trace::TraceLevel;

impl LaneEngine {
    /// Launches whatever can go: ends a failed unlaunched front, then prepares and launches
    /// queued runs in dispatch order while a slot is free. Does nothing while a driver is
    /// waiting on the device.
    pub(super) fn pump(&mut self) {
        if self.driving {
            return;
        }
        loop {
            // A front that ended before launching leaves at once.
            if let Some(front) = self.queue.front() {
                let failed = self.queue.get_mut(front).and_then(|run| match &run.stage {
                    Stage::Failed(f) => Some(f.error.clone()),
                    _ => None,
                });
                if let Some(error) = failed {
                    self.queue.advance(front, Phase::Terminal).expect("front");
                    let (_, run) = self.queue.pop_terminal_front().expect("terminal front");
                    self.end_unlaunched(run, error);
                    continue;
                }
            }
            if self.is_closed() {
                return;
            }
            let next = self
                .queue
                .phases()
                .into_iter()
                .find(|&(_, p)| p == Phase::Queued)
                .map(|(id, _)| id);
            let Some(id) = next else { return };
            if let Some(why) = self.admission_refusal() {
                // Unlaunched runs end; launched ones are drained by their waiters.
                for (_, run) in self.queue.poison() {
                    self.end_unlaunched(run, HostError::DeviceUnusable(why.clone()));
                }
                return;
            }
            if self.aliases_an_unfinished_run(id) {
                return; // staged once the run it shares buffers with is finalized
            }
            let Some(slot) = self
                .slots
                .iter()
                .position(|s| s.occupant.is_none() && !s.quarantined)
            else {
                return;
            };
            if self.queue.advance(id, Phase::Prepared).is_err() {
                return; // an older run has not launched yet
            }
            match self.prepare(id, slot) {
                Ok(()) => {
                    self.queue.advance(id, Phase::Launched).expect("prepared");
                    self.launch(id, slot);
                }
                Err((error, retained)) => self.fail_preparation(id, error, retained),
            }
        }
    }

    /// Whether queued run `id` shares a host buffer with a run ahead of it in the lane, one
    /// of the two writing it.
    fn aliases_an_unfinished_run(&self, id: u64) -> bool {
        let Some(run) = self.queue.get(id) else {
            return false;
        };
        let later = &run.request.host_ranges;
        !later.is_empty()
            && self
                .queue
                .phases()
                .into_iter()
                .take_while(|&(d, _)| d != id)
                .filter_map(|(d, _)| self.queue.get(d))
                .any(|earlier| alias::conflict(&earlier.request.host_ranges, later))
    }

    /// Stages run `id`'s tensors into `slot_idx` and publishes the slot's descriptor,
    /// arguments and tables. On failure, rolls back and returns the error with the staging
    /// it could not free.
    pub(super) fn prepare(
        &mut self,
        id: u64,
        slot_idx: usize,
    ) -> Result<(), (HostError, Vec<DevicePtr>)> {
        let LaneEngine {
            device,
            config,
            resources,
            slots,
            queue,
            generation,
            trace_origin_ns,
            ..
        } = self;
        let heap = resources
            .heap(device, config.heap_size)
            .map_err(|e| (e, Vec::new()))?;
        let slot = &mut slots[slot_idx];
        let run = queue.get_mut(id).expect("a queued run");
        let prepare_start = run.request.capture.now();
        let identity = RunIdentity {
            epoch: run.request.cell.epoch,
            generation: *generation,
            dispatch_id: id,
            slot: slot.index,
        };
        let trace_addr = match run.request.capture.level() {
            TraceLevel::Off => Ok(0),
            level => area::arm(
                device,
                &mut slot.trace_area,
                AreaShape {
                    level: level as u32,
                    cores: device.topology().core_count(),
                    aicpu_threads: run.request.plan.aicpu_threads,
                    capacity: run.request.plan.trace_records,
                    clock_origin_ns: *trace_origin_ns,
                },
            ),
        };
        let trace_addr = trace_addr.map_err(|e| (e, Vec::new()))?;
        let request = &run.request;
        let stage_start = request.capture.now();
        let mut staging = StagedArgs::with_capacity(request.args.len());
        let mut taken = Vec::new();
        let mut orch_args = OrchArgs::empty();
        let staged = stage_args(
            &**device,
            &mut slot.staging,
            request,
            &mut staging,
            &mut taken,
            &mut orch_args,
        )
        .and_then(|()| {
            let mut desc = RunLaunchDesc {
                magic: RUN_LAUNCH_MAGIC,
                version: RUN_LAUNCH_VERSION,
                epoch: identity.epoch,
                result_addr: slot.result.addr(),
                orch_entry: request.callable.orchestration.addr,
                orch_args_addr: slot.orch_args.addr(),
                func_table_addr: slot.func_table.addr(),
                func_core_types_addr: slot.func_types.addr(),
                func_count: request.callable.func_addrs.len() as u32,
                aicpu_thread_num: request.plan.aicpu_threads,
                heap_addr: heap.addr(),
                heap_size: config.heap_size,
                task_window: config.task_window,
                scheduler_timeout_ms: config.scheduler_timeout.as_millis() as u32,
                core_mailbox_addr: slot.mailboxes.addr(),
                runtime_state_addr: slot.state_word.addr(),
                ring_task_window: request.plan.windows,
                ring_heap: request.plan.heaps,
                ring_dep_pool: request.plan.dep_pools,
                tensor_wait_timeout_ms: config.tensor_data_timeout.as_millis() as u32,
                op_execute_timeout_ms: crate::worker_config::ceil_ms(config.op_execute_timeout),
                trace_addr,
                runtime: RUNTIME_TMR,
                ready_queue: request.plan.ready_queue,
                graph_addr: 0,
                graph_bytes: 0,
                graph_generation: 0,
            };
            let timeout = config.run_timeout;
            let graph =
                prepare_graph(device, request, &mut desc, &orch_args, *generation, timeout)?;
            publish(&**device, slot, &request.callable, &orch_args, &desc)?;
            Ok(graph)
        });
        let graph = match staged {
            Ok(graph) => graph,
            Err(e) if matches!(e, HostError::Timeout(_)) => {
                // A graph build left running may still write the staging: keep all of it.
                let retained = taken.into_iter().map(|(b, _)| b.ptr).collect();
                return Err((e, retained));
            }
            Err(e) => {
                // The rollback: reused buffers go back to the pool, allocated ones are freed; one
                // whose free fails is not proven released.
                let mut retained = Vec::new();
                for (buffer, origin) in taken {
                    match origin {
                        Origin::Reused => slot.staging.put_back([buffer]),
                        Origin::Allocated => {
                            if device.free(buffer.ptr).is_err() {
                                retained.push(buffer.ptr);
                            }
                        }
                    }
                }
                return Err((e, retained));
            }
        };
        run.request.graph_image = graph;
        run.request
            .capture
            .span("stage", identity.epoch, stage_start);
        run.request
            .capture
            .span("prepare", identity.epoch, prepare_start);
        run.stage = Stage::Prepared(PreparedRun { identity, staging });
        slot.occupant = Some(id);
        Ok(())
    }

    /// Ends run `id` after a failed preparation: a proven rollback publishes its epoch (the
    /// run ends with `RunPreparationRefused`); an unproven one quarantines `retained`, keeps
    /// the run's arguments and closes admission.
    fn fail_preparation(&mut self, id: u64, error: HostError, retained: Vec<DevicePtr>) {
        let epoch = self
            .queue
            .get_mut(id)
            .map_or(0, |run| run.request.cell.epoch);
        if retained.is_empty() {
            // Every binding and buffer the preparation took is proven released.
            self.release_marker.publish(epoch);
        } else {
            self.quarantine.extend(retained);
            self.mark_unusable(|| {
                format!("a failed preparation could not release its staging: {error}")
            });
        }
        let end = end_of_failed_preparation(&mut self.release_marker, epoch);
        if let Some(run) = self.queue.get_mut(id) {
            run.stage = Stage::Failed(FailedRun {
                error: match end {
                    // The host build of a graph failed as a device run would, or refused a
                    // recording: that is the run's own failure, reported as such.
                    PreparationEnd::Refused
                        if matches!(
                            error,
                            HostError::RunFailed { .. } | HostError::InvalidArgument { .. }
                        ) =>
                    {
                        error
                    }
                    PreparationEnd::Refused => HostError::RunPreparationRefused {
                        epoch,
                        cause: Box::new(error),
                    },
                    PreparationEnd::Unproven => error,
                },
                args_retained: end == PreparationEnd::Unproven,
            });
        }
    }

    /// Ends a run that never launched: with its own failure when it has one, else with
    /// `error`. A run whose preparation rollback was not proven keeps its arguments in the
    /// lane.
    pub(super) fn end_unlaunched(&mut self, run: RunState, error: HostError) {
        let RunState { request, stage } = run;
        let RunRequest { cell, args, .. } = request;
        let (error, args_retained) = match stage {
            Stage::Queued => (error, false),
            Stage::Prepared(prepared) => {
                let slot = &mut self.slots[prepared.identity.slot as usize];
                slot.staging
                    .put_back(prepared.staging.into_iter().flatten());
                if slot.occupant == Some(cell.dispatch_id) {
                    slot.occupant = None;
                }
                (error, false)
            }
            Stage::Failed(failed) => (failed.error, failed.args_retained),
            Stage::Launched(_) => unreachable!("a launched run is drained, never ended unlaunched"),
        };
        if args_retained {
            self.retained_args.push(args);
            cell.finish(Err(error), Vec::new());
        } else {
            cell.finish(Err(error), args);
        }
    }
}

/// Stages each argument of `request` (signature order): a host tensor (writable or a
/// read-only input, both read through a shared view) into a staging buffer from `pool`
/// ([`stage_host`]), a device tensor in place, a scalar as bits. `staging` gets one entry
/// per argument and `taken` every buffer taken so far with its origin, also on failure.
fn stage_args(
    device: &dyn Device,
    pool: &mut StagingPool,
    request: &RunRequest,
    staging: &mut StagedArgs,
    taken: &mut Vec<(StagingBuffer, Origin)>,
    orch_args: &mut OrchArgs,
) -> Result<(), HostError> {
    let signature = &request.callable.signature;
    for (spec, arg) in signature.args.iter().zip(&request.args) {
        match arg {
            OwnedArg::Tensor {
                buffer,
                shape,
                dtype,
            } => {
                let p = stage_host(device, pool, spec, buffer.bytes(), staging, taken)?;
                push_tensor(orch_args, p.addr(), shape, *dtype);
            }
            OwnedArg::Input {
                buffer,
                shape,
                dtype,
            } => {
                let p = stage_host(device, pool, spec, buffer.bytes(), staging, taken)?;
                push_tensor(orch_args, p.addr(), shape, *dtype);
            }
            OwnedArg::Scalar(v) => {
                staging.push(None);
                orch_args.scalars[orch_args.scalar_count as usize] = *v;
                orch_args.scalar_count += 1;
            }
            OwnedArg::Device { ptr, shape, dtype } => {
                // In place: the caller owns the buffer and its ordering.
                staging.push(None);
                push_tensor(orch_args, ptr.addr(), shape, *dtype);
            }
        }
    }
    Ok(())
}

/// Appends a tensor at device address `addr` to the orchestration arguments.
fn push_tensor(orch_args: &mut OrchArgs, addr: u64, shape: &[u64], dtype: DataType) {
    orch_args.tensors[orch_args.tensor_count as usize] = ChipTensor::contiguous(addr, shape, dtype);
    orch_args.tensor_count += 1;
}

/// Stages one host tensor, `bytes`, into a staging buffer from `pool`: copied in when the
/// signature copies it in; otherwise zeroed, as a fresh allocation is. Records the buffer in
/// `staging` and `taken`, and returns where it is.
fn stage_host(
    device: &dyn Device,
    pool: &mut StagingPool,
    spec: &ArgSpec,
    bytes: &[u8],
    staging: &mut StagedArgs,
    taken: &mut Vec<(StagingBuffer, Origin)>,
) -> Result<DevicePtr, HostError> {
    let (staged, origin) = pool
        .take(device, bytes.len() as u64)
        .map_err(HostError::device(format!(
            "staging argument `{}`",
            spec.name
        )))?;
    taken.push((staged, origin));
    staging.push(Some(staged));
    let p = staged.ptr;
    if spec.direction.copies_in() {
        device
            .copy_to_device(p, bytes)
            .map_err(HostError::device(format!(
                "copying argument `{}` to the device",
                spec.name
            )))?;
    } else if origin == Origin::Reused {
        // An output starts zeroed, as fresh device memory does.
        device
            .memset(p, 0, bytes.len() as u64)
            .map_err(HostError::device(format!(
                "clearing the staging of argument `{}`",
                spec.name
            )))?;
    }
    Ok(p)
}

/// The graph of a `host_build_graph` run: built on the host and uploaded (and kept as a
/// recording when asked), or the recording it replays; `None` under
/// `tensormap_and_ringbuffer`. Points `desc` at the image.
fn prepare_graph(
    device: &Arc<dyn Device>,
    request: &RunRequest,
    desc: &mut RunLaunchDesc,
    orch_args: &OrchArgs,
    lane: u64,
    timeout: std::time::Duration,
) -> Result<Option<(Arc<GraphImage>, GraphReport)>, HostError> {
    let callable = &request.callable;
    let graph = match &request.graph {
        GraphPlan::Device => return Ok(None),
        GraphPlan::Replay(image) => {
            let report = GraphReport {
                tasks: image.tasks,
                image_bytes: image.bytes,
                replayed: true,
                ..GraphReport::default()
            };
            (image.clone(), report)
        }
        GraphPlan::Build | GraphPlan::Record(_) => {
            if !request.plan.heap_given {
                // One forward-only ring: the whole heap.
                desc.ring_heap = [0; 4];
            }
            let key = match &request.graph {
                GraphPlan::Record(id) => Some(graph::recording_key(*id, callable, &request.args)),
                _ => None,
            };
            let clusters = device.topology().clusters;
            graph::build_and_upload(
                device, desc, orch_args, callable, clusters, lane, key, timeout,
            )?
        }
    };
    desc.runtime = RUNTIME_HBG;
    desc.graph_addr = graph.0.ptr.addr();
    desc.graph_bytes = graph.0.bytes;
    desc.graph_generation = callable.generation;
    Ok(Some(graph))
}

/// Publishes the slot's orchestration arguments, kernel tables and launch descriptor.
fn publish(
    device: &dyn Device,
    slot: &PipelineSlot,
    callable: &Registered,
    orch_args: &OrchArgs,
    desc: &RunLaunchDesc,
) -> Result<(), HostError> {
    let publish = |what: &str, dst: DevicePtr, bytes: &[u8]| {
        if bytes.is_empty() {
            return Ok(());
        }
        device
            .copy_to_device(dst, bytes)
            .map_err(HostError::device(format!("publishing the {what}")))
    };
    publish(
        "orchestration arguments",
        slot.orch_args,
        bytes_of(orch_args),
    )?;
    publish("kernel table", slot.func_table, &callable.func_table_bytes)?;
    publish(
        "kernel core-type table",
        slot.func_types,
        &callable.func_type_bytes,
    )?;
    publish("launch descriptor", slot.desc, bytes_of(desc))
}
