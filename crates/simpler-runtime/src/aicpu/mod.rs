//! The AICPU kernel: splits the launched threads into one orchestrator (the top index) and
//! schedulers (the rest), shares the run's state among them through the descriptor's state
//! word, and has the last thread out publish the result record and free the state.

mod orchestrator;
mod ring;
mod scheduler;
mod state;
mod submit;
mod task;
pub mod tensormap;

use std::sync::atomic::Ordering;
use std::time::Duration;

use simpler_abi::{
    CodeSource, RunResult, RunVerdict, ORCH_INVALID_ARGS, RUN_LAUNCH_MAGIC, RUN_LAUNCH_VERSION,
    RUN_RESULT_PAYLOAD_BYTES,
};
use simpler_device::{AicpuContext, DevicePtr};

pub use self::ring::RING_COUNT;
use self::state::RunShared;
pub use self::state::{
    DEFAULT_DEP_POOL, DEFAULT_SCHEDULER_TIMEOUT_MS, DEFAULT_TENSOR_WAIT_TIMEOUT_MS,
};
pub use self::task::TaskId;
use crate::devmem;
use crate::handshake::EXIT_SIGNAL;

/// Device status returned when the launch descriptor is unusable.
pub const STATUS_BAD_DESCRIPTOR: i32 = -1;

/// The AICPU kernel of a run; `arg` is the address of its
/// [`RunLaunchDesc`](simpler_abi::RunLaunchDesc). Returns 0, or a non-zero device status
/// when the descriptor is unusable (nothing is published then).
pub fn aicpu_kernel(ctx: &AicpuContext<'_>, arg: DevicePtr) -> i32 {
    let desc = match devmem::launch_desc(arg.0) {
        Some(d)
            if d.magic == RUN_LAUNCH_MAGIC
                && d.version == RUN_LAUNCH_VERSION
                && d.epoch != 0
                && d.runtime_state_addr != 0
                && d.core_mailbox_addr != 0
                && d.result_addr != 0
                && ctx.thread_num >= 2 =>
        {
            d
        }
        _ => {
            // Release the cores so the AICore kernel can end too.
            if ctx.thread_idx == 0 {
                for regs in ctx.cores {
                    regs.write_dmb(EXIT_SIGNAL);
                }
            }
            return STATUS_BAD_DESCRIPTOR;
        }
    };
    let word = devmem::state_word(desc.runtime_state_addr);
    let schedulers = ctx.thread_num - 1;
    let orchestrator_thread = ctx.thread_num - 1;
    let shared: &RunShared = if ctx.thread_idx == orchestrator_thread {
        let windows: [u32; RING_COUNT] = std::array::from_fn(|r| match desc.ring_task_window[r] {
            0 => desc.task_window,
            w => w,
        });
        let pools: [u32; RING_COUNT] = std::array::from_fn(|r| match desc.ring_dep_pool[r] {
            0 => DEFAULT_DEP_POOL,
            p => p,
        });
        let bad = windows.iter().position(|&w| w < 4 || !w.is_power_of_two());
        let safe = windows.map(|w| if w >= 4 && w.is_power_of_two() { w } else { 4 });
        let shared = RunShared::new(desc, schedulers as usize, safe, pools);
        if let Some(r) = bad {
            let w = windows[r];
            shared.errors.orch_fail(ORCH_INVALID_ARGS, || {
                format!("ring {r}'s task window must be a power of two ≥ 4, got {w}")
            });
        }
        let p = Box::into_raw(Box::new(shared));
        word.store(p as u64, Ordering::Release);
        // SAFETY: just leaked; freed only by the last thread out, after every thread of the
        // run has counted itself out.
        unsafe { &*p }
    } else {
        // The orchestrator thread publishes the state within microseconds of the launch:
        // yield to it first (a sleep costs tens of microseconds), sleep only if it is late.
        // A run ended by a device reset may leave its state behind (its threads unwound
        // without counting out; the state is leaked, never freed): wait for this run's own.
        let ours = |p: u64| {
            // SAFETY: a non-zero word points to a `RunShared` that is either live or leaked
            // by a reset; it is freed only after the word is swapped back to zero.
            p != 0 && unsafe { (*(p as *const RunShared)).desc.epoch } == desc.epoch
        };
        let mut p = word.load(Ordering::Acquire);
        let mut polls = 0u32;
        while !ours(p) {
            if polls < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
            polls += 1;
            p = word.load(Ordering::Acquire);
        }
        // SAFETY: the orchestrator thread published a live `RunShared`; it stays alive until
        // this thread counts itself out below.
        unsafe { &*(p as *const RunShared) }
    };

    if ctx.thread_idx == orchestrator_thread {
        let _ = shared.orch_bell.set(ctx.doorbell.clone());
        if !shared.errors.is_fatal() {
            orchestrator::Orchestrator::new(shared, ctx.doorbell.clone(), ctx.topology.clusters)
                .run();
        } else {
            shared.orch_done.store(true, Ordering::Release);
            shared.ring_schedulers();
        }
    } else {
        scheduler::run(ctx, shared, ctx.thread_idx, schedulers);
    }

    if shared.exited.fetch_add(1, Ordering::AcqRel) + 1 == ctx.thread_num {
        devmem::publish_result(desc.result_addr, &result_record(shared));
        let p = word.swap(0, Ordering::AcqRel);
        // SAFETY: every thread of the run has counted itself out, so no reference remains;
        // `p` is the pointer leaked above.
        drop(unsafe { Box::from_raw(p as *mut RunShared) });
    }
    0
}

fn result_record(shared: &RunShared) -> RunResult {
    let mut r = RunResult::EMPTY;
    r.published = shared.desc.epoch;
    match shared.errors.verdict() {
        None => r.verdict = RunVerdict::Ok as u32,
        Some((code, message)) => {
            r.verdict = RunVerdict::Error as u32;
            r.completion_code = -code;
            r.code_source = CodeSource::Header as u32;
            let bytes = message.as_bytes();
            let n = bytes.len().min(RUN_RESULT_PAYLOAD_BYTES);
            r.payload[..n].copy_from_slice(&bytes[..n]);
            r.payload_bytes = n as u32;
        }
    }
    r
}
