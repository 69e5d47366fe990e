//! The AICore executor: the resident loop each core runs for the duration of a run.
//!
//! Report READY(epoch); then repeatedly wait for a new DMB value, run the dispatched kernel
//! from the payload buffer selected by the id's parity, and answer ACK then FIN; leave on
//! [`EXIT_SIGNAL`](crate::handshake::EXIT_SIGNAL). Device memory is reached only through
//! `devmem`; this module's one `unsafe` block hands its caller's promise about `arg` on.

use simpler_device::{AicoreContext, DevicePtr};

use crate::devmem::RunMemory;
use crate::handshake::{ack, fin, fin_error, fin_skipped, ready, EXITED, EXIT_SIGNAL};
use crate::trace::{self, Tracer};

/// The AICore kernel of a run; `arg` is the address of its
/// [`RunLaunchDesc`](simpler_abi::RunLaunchDesc) (null: the core reports EXITED at once).
///
/// # Safety
/// `arg` must meet the launch argument contract of the crate doc until the kernel returns,
/// and the kernel must be called as [`simpler_device::AicoreKernel`]'s contract says —
/// once on every AICore of the device, or, launched lazily with COND armed to
/// [`ready`](crate::handshake::ready)`(epoch)`, once on every core that is dispatched to —
/// concurrently with the run's [`aicpu_kernel`](crate::aicpu_kernel), which tells the cores
/// what to run and when to leave (and disarms the cores it never dispatched to).
pub unsafe fn aicore_kernel(ctx: &AicoreContext<'_>, arg: DevicePtr) {
    // SAFETY: the caller's contract covers `arg`.
    let Some(mem) = (unsafe { RunMemory::from_launch_arg(arg) }) else {
        ctx.regs.write_cond(EXITED);
        return;
    };
    let d = mem.desc();
    simpler_device::crash::set_run(d.epoch, d.func_table_addr, d.func_count);
    let mailbox = mem.mailbox(ctx.core_id);
    mailbox.init_global(ctx.core_id, ctx.core_type as u32, ctx.sub_block_id as i32);
    // Level `tasks` and up: each subtask's start and end around the kernel call.
    let mut tracer = Tracer::for_core(&mem, ctx.core_id);
    ctx.regs.write_cond(ready(mem.desc().epoch));
    let mut last = 0u64;
    // After a kernel reports a fatal code the core runs nothing more: later dispatches (a
    // pre-loaded pending one) are answered FIN_SKIPPED at once, so the failure cannot be
    // lost behind a successor's ACK and is attributed to the dispatch that failed.
    let mut failed = false;
    loop {
        let value = wait_next(ctx, last);
        last = value;
        if value == EXIT_SIGNAL {
            ctx.regs.write_cond(EXITED);
            return;
        }
        let id = value as u32;
        if failed {
            ctx.regs.write_cond(fin_skipped(id));
            continue;
        }
        ctx.regs.write_cond(ack(id));
        let start = trace::start(&tracer, simpler_abi::TRACE_LEVEL_TASKS);
        failed = mailbox.run_dispatch(id);
        if let (Some(t), Some(start)) = (tracer.as_mut(), start) {
            let end = t.now();
            let (task, block) = mailbox.dispatch_task(id);
            t.push(
                simpler_abi::TRACE_SUBTASK,
                [ctx.core_id, block, ctx.sub_block_id],
                task,
                start,
                end,
            );
        }
        ctx.regs
            .write_cond(if failed { fin_error(id) } else { fin(id) });
    }
}

/// Polls before parking on an OS thread: right after a dispatch the next one often arrives
/// within microseconds (a chain, or a pre-loaded pending task), and a park/unpark round trip
/// costs far more than that. Yielding (not spinning) lets the scheduler thread run on a
/// small host. A pool fiber parks at once: there a park is a switch and its wake a push.
const POLL_YIELDS: u32 = 200;

fn wait_next(ctx: &AicoreContext<'_>, last: u64) -> u64 {
    let polls = if simpler_device::wait::polling_pays() {
        POLL_YIELDS
    } else {
        0
    };
    for i in 0..polls {
        let v = ctx.regs.read_dmb();
        if v != last {
            return v;
        }
        if i < 16 {
            std::hint::spin_loop();
        } else {
            simpler_device::wait::yield_now();
        }
    }
    ctx.regs.wait_dmb_change(last)
}
