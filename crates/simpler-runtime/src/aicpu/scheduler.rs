//! A scheduler thread: owns the clusters `c ≡ index (mod schedulers)`, dispatches ready
//! tasks to its idle cores through the register handshake, detects completions by reading
//! COND, and releases consumers (spec `l2-runtime.md` §3).
//!
//! It never spins while idle: after a pass with no progress it announces it will park,
//! re-checks (ready queues, its cores' COND, the end of the run) and parks on its doorbell,
//! which cores ring on every COND write and the orchestrator and other schedulers ring when
//! they make tasks ready.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use simpler_abi::{CoreType, SCHED_KERNEL_FATAL};
use simpler_device::AicpuContext;

use super::state::RunShared;
use crate::devmem;
use crate::handshake::{
    dispatch_state, next_dispatch_id, ready, DispatchState, EXITED, EXIT_SIGNAL,
};

/// How long one park lasts before the thread looks around anyway.
const PARK_SLICE: Duration = Duration::from_millis(50);

/// One core as this scheduler sees it.
struct CoreExec {
    id: u32,
    ty: CoreType,
    /// (task, dispatch id) running on the core.
    running: Option<(u32, u32)>,
    last_dispatch: u32,
}

/// Runs scheduler `index` of `schedulers` until the run is over.
pub(crate) fn run(ctx: &AicpuContext<'_>, shared: &RunShared, index: u32, schedulers: u32) {
    let bell: &Arc<_> = ctx.doorbell;
    let topo = ctx.topology;
    let mut cores: Vec<CoreExec> = (0..topo.clusters)
        .filter(|c| c % schedulers == index)
        .flat_map(|c| topo.cluster_cores(c))
        .map(|id| CoreExec {
            id,
            ty: topo.core_type(id),
            running: None,
            last_dispatch: 0,
        })
        .collect();
    for c in &cores {
        ctx.cores[c.id as usize].set_owner(Some(bell.clone()));
    }
    let _ = shared.bells[index as usize].set(bell.clone());
    wait_ready(ctx, shared, &cores);

    loop {
        let mut progress = false;
        for c in cores.iter_mut() {
            if let Some((task, id)) = c.running {
                match dispatch_state(ctx.cores[c.id as usize].read_cond(), id) {
                    DispatchState::Running => {}
                    state => {
                        c.running = None;
                        progress = true;
                        if state == DispatchState::Failed {
                            report_kernel_fault(shared, c.id, task);
                        }
                        shared.complete(task);
                    }
                }
            }
        }
        let fatal = shared.errors.is_fatal();
        let busy = cores.iter().any(|c| c.running.is_some());
        if !busy && (shared.all_done() || (fatal && shared.orch_done.load(Ordering::Acquire))) {
            break;
        }
        if !fatal {
            for c in cores.iter_mut().filter(|c| c.running.is_none()) {
                if let Some(task) = shared.ready[c.ty as usize].pop() {
                    dispatch(ctx, shared, c, task);
                    progress = true;
                }
            }
        }
        if !progress {
            bell.prepare_park();
            if has_work(ctx, shared, &cores) {
                bell.cancel_park();
            } else {
                bell.park(PARK_SLICE);
            }
        }
    }

    for c in &cores {
        let regs = &ctx.cores[c.id as usize];
        regs.write_dmb(EXIT_SIGNAL);
    }
    for c in &cores {
        let regs = &ctx.cores[c.id as usize];
        while regs.read_cond() != EXITED {
            bell.prepare_park();
            if regs.read_cond() == EXITED {
                bell.cancel_park();
                break;
            }
            bell.park(PARK_SLICE);
        }
        regs.set_owner(None);
    }
}

/// Waits until every owned core has reported READY for this run.
fn wait_ready(ctx: &AicpuContext<'_>, shared: &RunShared, cores: &[CoreExec]) {
    let want = ready(shared.desc.epoch);
    for c in cores {
        let regs = &ctx.cores[c.id as usize];
        while regs.read_cond() != want {
            ctx.doorbell.prepare_park();
            if regs.read_cond() == want {
                ctx.doorbell.cancel_park();
                break;
            }
            ctx.park(PARK_SLICE);
        }
    }
}

/// True if a pass of the loop would make progress or end it.
fn has_work(ctx: &AicpuContext<'_>, shared: &RunShared, cores: &[CoreExec]) -> bool {
    let mut busy = false;
    for c in cores {
        match c.running {
            Some((_, id)) => {
                busy = true;
                if dispatch_state(ctx.cores[c.id as usize].read_cond(), id)
                    != DispatchState::Running
                {
                    return true;
                }
            }
            None => {
                if !shared.ready[c.ty as usize].is_empty() && !shared.errors.is_fatal() {
                    return true;
                }
            }
        }
    }
    !busy
        && (shared.all_done()
            || (shared.errors.is_fatal() && shared.orch_done.load(Ordering::Acquire)))
}

/// Writes the task into the core's next payload buffer and publishes the dispatch id.
fn dispatch(ctx: &AicpuContext<'_>, shared: &RunShared, core: &mut CoreExec, task: u32) {
    let body = shared
        .tasks
        .get(task)
        .body
        .get()
        .expect("a ready task has a published body");
    let id = next_dispatch_id(core.last_dispatch);
    core.last_dispatch = id;
    let mailbox = devmem::mailbox(shared.desc.core_mailbox_addr, core.id);
    // SAFETY: the mailbox of this core is written only by its owning scheduler (us), and
    // buffer `id & 1` is not being read: the core finished the previous dispatch (we saw its
    // FIN) and reads a buffer only after seeing its id in DMB, which we publish below.
    unsafe {
        let p = std::ptr::addr_of_mut!((*mailbox).payloads[(id & 1) as usize]);
        (*p).kernel_addr = body.kernel_addr;
        (*p).task_id = u64::from(body.id);
        (*p).local = simpler_abi::LocalContext {
            block_idx: 0,
            block_num: 1,
        };
        (*p).args = body.args;
        (*p).args.slots[simpler_abi::LOCAL_CONTEXT_SLOT] = std::ptr::addr_of!((*p).local) as u64;
        (*p).args.slots[simpler_abi::GLOBAL_CONTEXT_SLOT] =
            std::ptr::addr_of!((*mailbox).global) as u64;
    }
    core.running = Some((task, id));
    ctx.cores[core.id as usize].write_dmb(u64::from(id));
}

fn report_kernel_fault(shared: &RunShared, core: u32, task: u32) {
    let code = devmem::mailbox_fatal_code(shared.desc.core_mailbox_addr, core);
    let func = shared.tasks.get(task).body.get().map_or(-1, |b| b.func_id);
    shared.errors.sched_fail(SCHED_KERNEL_FATAL, || {
        format!("kernel func {func} (task {task}) on core {core} reported fatal code {code}")
    });
}
