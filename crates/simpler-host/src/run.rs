//! One run on a [`ChipWorker`]: stage → publish → launch → wait → decide → copy back →
//! release. Completion is established by the run's two boundary events; the verdict comes
//! from its own epoch-stamped result record; a missing or foreign record falls back to a
//! bounded stream synchronize, which on hardware is the only call that yields the device's
//! verdict (`design/run-completion-fences.txt`). Nothing is freed on a path where the device
//! may still touch it: such paths mark the worker unusable instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use simpler_abi::{
    code_name, ChipTensor, OrchArgs, RunLaunchDesc, RunResult, RunVerdict, RUN_LAUNCH_MAGIC,
    RUN_LAUNCH_VERSION,
};
use simpler_device::{Device, DevicePtr};

use crate::pod::{bytes_of, from_bytes};
use crate::worker::{ChipWorker, Inner, Registered};
use crate::{ArgDirection, HostArg, HostError};

/// What a successful run reports.
#[derive(Clone, Copy, Debug)]
pub struct RunReport {
    /// The run's epoch (process-unique, non-zero).
    pub epoch: u64,
    /// From the launch of the first kernel to the proof of both boundaries.
    pub device_time: Duration,
    /// From the call to the return, including staging and copy-back.
    pub total_time: Duration,
}

/// Device buffers staged for one run's host tensors, by argument position.
struct Staging<'d> {
    device: &'d Arc<dyn Device>,
    buffers: Vec<Option<DevicePtr>>,
}

impl Staging<'_> {
    /// Frees the buffers: only on paths where the device is proven done with them.
    fn release(mut self) {
        for p in self.buffers.drain(..).flatten() {
            let _ = self.device.free(p);
        }
    }

    /// Keeps the buffers allocated forever: the device may still touch them.
    fn retain(mut self) {
        self.buffers.clear();
    }
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        // Early returns before launch: nothing device-visible uses these yet.
        for p in self.buffers.drain(..).flatten() {
            let _ = self.device.free(p);
        }
    }
}

pub(crate) fn execute(
    w: &ChipWorker,
    inner: &mut Inner,
    callable: &Registered,
    args: &mut [HostArg<'_>],
    epoch: u64,
    started: Instant,
) -> Result<RunReport, HostError> {
    let dev = &w.device;
    let heap = inner.slot.heap(dev, w.config.heap_size)?;
    let slot = &inner.slot;

    // Stage host tensors by signature and build the orchestration arguments.
    let mut staging = Staging {
        device: dev,
        buffers: Vec::with_capacity(args.len()),
    };
    let mut orch_args = OrchArgs::empty();
    for (spec, arg) in callable.signature.args.iter().zip(args.iter()) {
        match arg {
            HostArg::Tensor(t) => {
                let p = dev
                    .malloc(t.bytes.len() as u64)
                    .map_err(HostError::device(format!(
                        "staging argument `{}`",
                        spec.name
                    )))?;
                staging.buffers.push(Some(p));
                if spec.direction.copies_in() {
                    dev.copy_to_device(p, t.bytes)
                        .map_err(HostError::device(format!(
                            "copying argument `{}` to the device",
                            spec.name
                        )))?;
                }
                orch_args.tensors[orch_args.tensor_count as usize] =
                    ChipTensor::contiguous(p.0, &t.shape, t.dtype);
                orch_args.tensor_count += 1;
            }
            HostArg::Scalar(v) => {
                staging.buffers.push(None);
                orch_args.scalars[orch_args.scalar_count as usize] = *v;
                orch_args.scalar_count += 1;
            }
        }
    }
    let threads = match w.config.aicpu_thread_num {
        0 => dev.topology().aicpu_threads,
        n => n,
    };
    let desc = RunLaunchDesc {
        magic: RUN_LAUNCH_MAGIC,
        version: RUN_LAUNCH_VERSION,
        epoch,
        result_addr: slot.result.0,
        orch_entry: callable.orchestration.addr,
        orch_args_addr: slot.orch_args.0,
        func_table_addr: slot.func_table.0,
        func_core_types_addr: slot.func_types.0,
        func_count: callable.func_addrs.len() as u32,
        aicpu_thread_num: threads,
        heap_addr: heap.0,
        heap_size: w.config.heap_size,
        task_window: w.config.task_window,
        scheduler_timeout_ms: 0,
        core_mailbox_addr: slot.mailboxes.0,
        runtime_state_addr: slot.state_word.0,
    };
    let addrs: Vec<u8> = callable
        .func_addrs
        .iter()
        .flat_map(|a| a.to_le_bytes())
        .collect();
    let types: Vec<u8> = callable
        .func_types
        .iter()
        .flat_map(|t| t.to_le_bytes())
        .collect();
    let publish = |what: &str, dst: DevicePtr, bytes: &[u8]| {
        if bytes.is_empty() {
            return Ok(());
        }
        dev.copy_to_device(dst, bytes)
            .map_err(HostError::device(format!("publishing the {what}")))
    };
    publish(
        "orchestration arguments",
        slot.orch_args,
        bytes_of(&*orch_args),
    )?;
    publish("kernel table", slot.func_table, &addrs)?;
    publish("kernel core-type table", slot.func_types, &types)?;
    publish("launch descriptor", slot.desc, bytes_of(&desc))?;

    // Launch: zero result marker first on the AICPU stream, then AICore, then AICPU, each
    // kernel followed by its boundary record.
    let launch_started = Instant::now();
    let zero = vec![0u8; std::mem::size_of::<RunResult>()];
    dev.copy_to_device_async(slot.aicpu_stream, slot.result, zero)
        .map_err(HostError::device("publishing the zero result marker"))?;
    if let Err(e) = dev.launch_aicore(
        slot.aicore_stream,
        simpler_runtime::aicore_kernel,
        slot.desc,
    ) {
        // Nothing but the marker copy is queued; wait for it, then roll back.
        let _ = dev.synchronize_stream(slot.aicpu_stream, w.config.run_timeout);
        return Err(HostError::device("launching the AICore kernel")(e));
    }
    // From here on the AICore kernel is on the device: any failure is a partial launch.
    let partial = |inner_unusable: &mut Option<String>, staging: Staging<'_>, e: HostError| {
        *inner_unusable = Some(format!("a run was partially launched ({e})"));
        staging.retain();
        e
    };
    let launched = dev
        .record_event(slot.core_done, slot.aicore_stream)
        .map_err(HostError::device("recording the AICore boundary"))
        .and_then(|_| {
            dev.launch_aicpu(
                slot.aicpu_stream,
                simpler_runtime::aicpu_kernel,
                slot.desc,
                threads,
            )
            .map_err(HostError::device("launching the AICPU kernel"))
        })
        .and_then(|_| {
            dev.record_event(slot.cpu_done, slot.aicpu_stream)
                .map_err(HostError::device("recording the AICPU boundary"))
        });
    let (cpu_done, core_done) = (slot.cpu_done, slot.core_done);
    let (aicpu_stream, aicore_stream, result_addr) =
        (slot.aicpu_stream, slot.aicore_stream, slot.result);
    if let Err(e) = launched {
        return Err(partial(&mut inner.unusable, staging, e));
    }

    // Completion: both boundaries, bounded.
    let timeout = w.config.run_timeout;
    for ev in [cpu_done, core_done] {
        if let Err(e) = dev.synchronize_event(ev, timeout) {
            let err = match e {
                simpler_device::DeviceError::Timeout(t) => HostError::Timeout(t),
                other => HostError::device("waiting for a run boundary")(other),
            };
            return Err(partial(&mut inner.unusable, staging, err));
        }
    }
    let device_time = launch_started.elapsed();

    // Verdict: the run's own record, read once.
    let mut raw = vec![0u8; std::mem::size_of::<RunResult>()];
    let record = dev
        .copy_from_device(&mut raw, result_addr)
        .ok()
        .and_then(|_| from_bytes::<RunResult>(&raw));
    match record {
        Some(r)
            if r.published == epoch
                && r.verdict == RunVerdict::Ok as u32
                && r.completion_code == 0 => {}
        Some(r)
            if r.published == epoch
                && r.verdict == RunVerdict::Error as u32
                && r.completion_code != 0 =>
        {
            staging.release();
            return Err(HostError::RunFailed {
                code: r.completion_code,
                name: code_name(r.completion_code),
                message: r.message(),
            });
        }
        _ => {
            // No decided record: only a stream synchronize can produce the device's verdict.
            let verdict = dev
                .synchronize_stream(aicpu_stream, timeout)
                .and_then(|_| dev.synchronize_stream(aicore_stream, timeout));
            let err = match verdict {
                Err(e) => HostError::DeviceFault(e),
                Ok(()) => HostError::DeviceUnusable(
                    "the run completed but published no result record".into(),
                ),
            };
            inner.unusable = Some(err.to_string());
            staging.retain();
            return Err(err);
        }
    }

    // Success: copy OUT and INOUT tensors back, then release the staging.
    for ((spec, arg), buf) in callable
        .signature
        .args
        .iter()
        .zip(args.iter_mut())
        .zip(&staging.buffers)
    {
        if let (HostArg::Tensor(t), Some(p)) = (arg, buf) {
            if spec.direction.copies_back() {
                dev.copy_from_device(t.bytes, *p)
                    .map_err(HostError::device(format!(
                        "copying argument `{}` back",
                        spec.name
                    )))?;
            }
        }
        debug_assert!(spec.direction != ArgDirection::Scalar || buf.is_none());
    }
    staging.release();
    Ok(RunReport {
        epoch,
        device_time,
        total_time: started.elapsed(),
    })
}
