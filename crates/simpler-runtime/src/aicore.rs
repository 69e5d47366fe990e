//! The AICore executor: the resident loop each core runs for the duration of a run.
//!
//! Report READY(epoch); then repeatedly wait for a new DMB value, run the dispatched kernel
//! from the payload buffer selected by the id's parity, and answer ACK then FIN; leave on
//! [`EXIT_SIGNAL`](crate::handshake::EXIT_SIGNAL).

use simpler_abi::{CoreMailbox, KernelEntry};
use simpler_device::{AicoreContext, DevicePtr};

use crate::devmem;
use crate::handshake::{ack, fin, fin_error, fin_skipped, ready, EXITED, EXIT_SIGNAL};

/// The AICore kernel of a run; `arg` is the address of its
/// [`RunLaunchDesc`](simpler_abi::RunLaunchDesc).
pub fn aicore_kernel(ctx: &AicoreContext<'_>, arg: DevicePtr) {
    let Some(desc) = devmem::launch_desc(arg.0) else {
        ctx.regs.write_cond(EXITED);
        return;
    };
    let mailbox = devmem::mailbox(desc.core_mailbox_addr, ctx.core_id);
    // SAFETY: the mailbox array has one entry per core, allocated by the host for the run;
    // this core is the only writer of its own global context.
    unsafe {
        let g = std::ptr::addr_of_mut!((*mailbox).global);
        (*g).core_id = ctx.core_id;
        (*g).core_type = ctx.core_type as u32;
        (*g).sub_block_id = ctx.sub_block_id as i32;
        (*g).fatal_code = 0;
    }
    ctx.regs.write_cond(ready(desc.epoch));
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
        failed = run_dispatch(mailbox, id);
        ctx.regs
            .write_cond(if failed { fin_error(id) } else { fin(id) });
    }
}

/// Polls before parking: right after a dispatch the next one often arrives within
/// microseconds (a chain, or a pre-loaded pending task), and a park/unpark round trip costs
/// far more than that. Yielding (not spinning) lets the scheduler thread run on a small host.
const POLL_YIELDS: u32 = 200;

fn wait_next(ctx: &AicoreContext<'_>, last: u64) -> u64 {
    for i in 0..POLL_YIELDS {
        let v = ctx.regs.read_dmb();
        if v != last {
            return v;
        }
        if i < 16 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    ctx.regs.wait_dmb_change(last)
}

/// Runs dispatch `id` from its payload buffer; true when the kernel reported a fatal code.
fn run_dispatch(mailbox: *mut CoreMailbox, id: u32) -> bool {
    // SAFETY: the scheduler fully wrote payload buffer `id & 1` before publishing `id` in DMB
    // (release; we read DMB with acquire), and will not touch it until it sees our FIN.
    // `kernel_addr` was resolved from a registered kernel entry of the running callable.
    unsafe {
        let payload = std::ptr::addr_of_mut!((*mailbox).payloads[(id & 1) as usize]);
        std::ptr::addr_of_mut!((*mailbox).global.fatal_code).write(0);
        let entry: KernelEntry = std::mem::transmute::<u64, KernelEntry>((*payload).kernel_addr);
        entry(std::ptr::addr_of_mut!((*payload).args) as *mut i64);
        std::ptr::addr_of!((*mailbox).global.fatal_code).read_volatile() != 0
    }
}
