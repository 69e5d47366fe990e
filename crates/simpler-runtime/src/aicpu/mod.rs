//! The AICPU kernel: splits the launched threads into one orchestrator (the top index) and
//! schedulers (the rest), shares the run's state among them through the descriptor's state
//! word, and has the last thread out publish the result record and release the state.
//!
//! A thread whose part unwinds (a runtime panic, or a device reset ending the kernel) winds
//! the run down on its way out — it latches a fatal error, stands in for a missing
//! orchestrator's "done" and rings the others — so the other threads finish instead of
//! waiting for it; the last thread out then releases every core (the AICore kernel ends)
//! and publishes nothing, and the unwind goes on to the device, which reports it as the
//! launch's fault.
//!
//! A run whose threads cannot all come back (`docs/chip-runtime.md`, the two clocks) still
//! publishes its result: when the schedulers leave an orchestrator that has not returned
//! after an error, the last scheduler out publishes (the orchestrator, if it ever returns,
//! publishes nothing more); when a core was abandoned with a kernel still running, the run
//! state that kernel reads is never freed.

mod deferred;
mod drain;
mod graph;
mod handoff;
mod idle;
mod ops;
mod orchestrator;
mod ring;
mod scheduler;
mod state;
mod submit;
mod task;
pub mod tensormap;
mod watchdog;

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use simpler_abi::{
    CodeSource, RunLaunchDesc, RunResult, RunVerdict, ORCH_EXPLICIT_FATAL, ORCH_INVALID_ARGS,
    RUNTIME_HBG, RUNTIME_TMR, RUN_LAUNCH_MAGIC, RUN_LAUNCH_VERSION, RUN_RESULT_PAYLOAD_BYTES,
    SCHED_KERNEL_FATAL,
};
use simpler_device::{AicpuContext, DevicePtr};

pub(crate) use self::ops::call_entry;
pub(crate) use self::orchestrator::Orchestrator;
pub use self::ring::RING_COUNT;
pub(crate) use self::state::RunShared;
pub use self::state::{
    DEFAULT_DEP_POOL, DEFAULT_OP_EXECUTE_TIMEOUT_MS, DEFAULT_SCHEDULER_TIMEOUT_MS,
    DEFAULT_TENSOR_WAIT_TIMEOUT_MS,
};
pub use self::task::TaskId;
use crate::devmem::RunMemory;
use crate::handshake::EXIT_SIGNAL;

/// Device status returned when the launch descriptor is unusable.
pub const STATUS_BAD_DESCRIPTOR: i32 = -1;

/// Whether a descriptor can be run by `thread_num` AICPU threads.
fn usable(d: &RunLaunchDesc, thread_num: u32) -> bool {
    d.magic == RUN_LAUNCH_MAGIC
        && d.version == RUN_LAUNCH_VERSION
        && d.epoch != 0
        && d.runtime_state_addr != 0
        && d.core_mailbox_addr != 0
        && d.result_addr != 0
        && thread_num >= 2
        && (d.runtime == RUNTIME_TMR || (d.runtime == RUNTIME_HBG && d.graph_addr != 0))
}

/// The AICPU kernel of a run; `arg` is the address of its
/// [`RunLaunchDesc`](simpler_abi::RunLaunchDesc). Returns 0, or a non-zero device status
/// when the descriptor is unusable (nothing is published then).
///
/// # Safety
/// `arg` must be null or meet the launch argument contract of the crate doc until the
/// kernel returns, and the kernel must be called as [`simpler_device::AicpuKernel`]'s
/// contract says: once on each of the `thread_num` (≥ 2) AICPU threads, concurrently with
/// the run's [`aicore_kernel`](crate::aicore_kernel) on every core.
pub unsafe fn aicpu_kernel(ctx: &AicpuContext<'_>, arg: DevicePtr) -> i32 {
    // SAFETY: the caller's contract covers `arg`.
    let mem = match unsafe { RunMemory::from_launch_arg(arg) } {
        Some(m) if usable(m.desc(), ctx.thread_num) => m,
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
    let desc = *mem.desc();
    simpler_device::crash::set_run(desc.epoch, desc.func_table_addr, desc.func_count);
    if desc.runtime == RUNTIME_HBG {
        return graph_kernel(ctx, mem);
    }
    let schedulers = ctx.thread_num - 1;
    let orchestrator_thread = ctx.thread_num - 1;
    let orchestrator = ctx.thread_idx == orchestrator_thread;
    let shared = if orchestrator {
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
        let shared = RunShared::new(mem, ctx.topology.clusters, schedulers as usize, safe, pools);
        if let Some(r) = bad {
            let w = windows[r];
            shared.errors.orch_fail(ORCH_INVALID_ARGS, || {
                format!("ring {r}'s task window must be a power of two ≥ 4, got {w}")
            });
        }
        shared.share(&mem)
    } else {
        find_state(&mem, desc.epoch)
    };

    take_part(ctx, &mem, &shared, orchestrator, || {
        if orchestrator {
            let _ = shared.orch_bell.set(ctx.doorbell.clone());
            if !shared.errors.is_fatal() {
                let mut o = orchestrator::Orchestrator::new(
                    &shared,
                    ctx.doorbell.clone(),
                    ctx.topology.clusters,
                );
                o.tracer = crate::trace::Tracer::for_aicpu(&mem, ctx.thread_idx);
                crate::trace::align_clocks(&mem);
                o.run(call_entry);
            } else {
                shared.orch_done.store(true, Ordering::Release);
                shared.ring_schedulers();
            }
        } else {
            scheduler::run(ctx, &shared, ctx.thread_idx, schedulers);
        }
    });
    0
}

/// The state of run `epoch`, once the thread that builds it has shared it. That thread
/// publishes the state within microseconds of the launch: yield to it first (a sleep costs
/// tens of microseconds), sleep only if it is late. A run ended by a device reset may leave
/// its state behind (its threads unwound without releasing it): wait for this run's own.
fn find_state(mem: &RunMemory, epoch: u64) -> Arc<RunShared> {
    let mut polls = 0u32;
    RunShared::find(
        mem,
        |s| s.desc.epoch == epoch,
        || {
            if polls < 1000 {
                simpler_device::wait::yield_now();
            } else {
                simpler_device::wait::sleep(Duration::from_micros(50));
            }
            polls += 1;
        },
    )
}

/// A `host_build_graph` run (`docs/chip-runtime.md` §17): the top thread attaches the
/// graph image, then every thread is a scheduler.
fn graph_kernel(ctx: &AicpuContext<'_>, mem: RunMemory) -> i32 {
    let schedulers = ctx.thread_num;
    let shared = if ctx.thread_idx == ctx.thread_num - 1 {
        let shared = graph::attach(mem, ctx.topology.clusters, schedulers as usize);
        crate::trace::align_clocks(&mem);
        shared.share(&mem)
    } else {
        find_state(&mem, mem.desc().epoch)
    };
    take_part(ctx, &mem, &shared, false, || {
        scheduler::run(ctx, &shared, ctx.thread_idx, schedulers);
    });
    0
}

/// Runs this thread's part of the run, then counts the thread out. A part that unwinds
/// winds the run down first, and the unwind goes on (to the device thread, which reports a
/// panic as the launch's fault).
fn take_part(
    ctx: &AicpuContext<'_>,
    mem: &RunMemory,
    shared: &Arc<RunShared>,
    orchestrator: bool,
    part: impl FnOnce(),
) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(part)) {
        wind_down(shared, ctx.thread_idx, orchestrator);
        count_out(ctx, mem, shared, orchestrator, true);
        resume_unwind(payload);
    }
    count_out(ctx, mem, shared, orchestrator, false);
}

/// A thread's part unwound: makes the rest of the run end without it.
fn wind_down(shared: &RunShared, thread: u32, orchestrator: bool) {
    if orchestrator {
        shared.errors.orch_fail(ORCH_EXPLICIT_FATAL, || {
            format!("AICPU thread {thread} (the orchestrator) ended abnormally")
        });
        shared.orch_done.store(true, Ordering::Release);
    } else {
        shared.errors.sched_fail(SCHED_KERNEL_FATAL, || {
            format!("AICPU thread {thread} (a scheduler) ended abnormally")
        });
    }
    shared.progress();
    shared.ring_schedulers();
    shared.ring_orchestrator();
}

/// Counts this thread out of the run. The last one out publishes the result record (unless
/// the last scheduler out already did, leaving an orchestrator behind) and releases the
/// state word; when a core was abandoned it also leaves the state allocated for good, since
/// the kernel still running there may read its task's arguments. If a thread of the run
/// unwound, the last one out instead releases every core (a scheduler that unwound cannot
/// tell its own cores to exit), publishes nothing and leaves the state allocated, as a
/// reset would.
fn count_out(
    ctx: &AicpuContext<'_>,
    mem: &RunMemory,
    shared: &Arc<RunShared>,
    orchestrator: bool,
    unwound: bool,
) {
    if unwound {
        shared.unwound.store(true, Ordering::Release);
    }
    if !orchestrator
        && shared.schedulers_exited.fetch_add(1, Ordering::AcqRel) + 1 == shared.schedulers()
        && !shared.orch_done.load(Ordering::Acquire)
        && !shared.unwound.load(Ordering::Acquire)
        && shared.claim_publication()
    {
        // The schedulers leave an orchestrator that has not returned after the run failed:
        // the result is decided (the first error), publish it now.
        mem.publish_result(&result_record(shared));
    }
    if shared.exited.fetch_add(1, Ordering::AcqRel) + 1 != ctx.thread_num {
        return;
    }
    if shared.unwound.load(Ordering::Acquire) {
        for regs in ctx.cores {
            regs.write_dmb(EXIT_SIGNAL);
        }
        return;
    }
    if shared.claim_publication() {
        mem.publish_result(&result_record(shared));
    }
    if shared.abandoned_cores.load(Ordering::Acquire) > 0 {
        // Leaked on purpose: an abandoned kernel's arguments point into this state.
        std::mem::forget(Arc::clone(shared));
    }
    RunShared::release(mem);
}

fn result_record(shared: &RunShared) -> RunResult {
    let mut r = RunResult::EMPTY;
    r.published = shared.desc.epoch;
    r.tasks = shared.submitted.load(Ordering::Acquire);
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    use simpler_device::{CoreRegs, Doorbell, Topology};

    use super::*;

    /// A run's descriptor, state word and result record in host memory.
    pub(super) struct Run {
        desc: Box<RunLaunchDesc>,
        word: Box<AtomicU64>,
        result: Box<RunResult>,
    }

    impl Run {
        pub(super) fn new() -> Run {
            let word = Box::new(AtomicU64::new(0));
            let mut result = Box::new(RunResult::EMPTY);
            let desc = Box::new(RunLaunchDesc {
                epoch: 41,
                runtime_state_addr: &*word as *const AtomicU64 as u64,
                result_addr: &mut *result as *mut RunResult as u64,
                ..RunLaunchDesc::default()
            });
            Run { desc, word, result }
        }

        pub(super) fn mem(&self) -> RunMemory {
            let arg = DevicePtr::from_raw(&*self.desc as *const RunLaunchDesc as u64);
            // SAFETY: the descriptor and the word and record it names live in `self`, which
            // outlives every use in these tests; its other addresses are 0 and never used.
            unsafe { RunMemory::from_launch_arg(arg) }.unwrap()
        }

        fn published(&self) -> u64 {
            // SAFETY: `result` is a live record; the tests run the threads' ends in order.
            unsafe { std::ptr::read_volatile(&self.result.published) }
        }
    }

    /// What one AICPU thread of a two-thread run sees (thread 1 is the orchestrator).
    struct Thread {
        topology: Topology,
        cores: Vec<CoreRegs>,
        bell: Arc<Doorbell>,
    }

    impl Thread {
        fn new() -> Thread {
            let topology = Topology {
                clusters: 1,
                aicpu_threads: 2,
            };
            let cores = (0..topology.core_count())
                .map(|_| CoreRegs::default())
                .collect();
            Thread {
                topology,
                cores,
                bell: Arc::new(Doorbell::new()),
            }
        }

        fn ctx(&self, thread_idx: u32) -> AicpuContext<'_> {
            AicpuContext {
                thread_idx,
                thread_num: 2,
                topology: &self.topology,
                cores: &self.cores,
                doorbell: &self.bell,
                sdma: None,
            }
        }
    }

    fn share(run: &Run) -> Arc<RunShared> {
        let mem = run.mem();
        RunShared::new(mem, 1, 1, [4; RING_COUNT], [16; RING_COUNT]).share(&mem)
    }

    #[test]
    fn parts_that_return_publish_the_result_and_release_the_state() {
        let run = Run::new();
        let t = Thread::new();
        let shared = share(&run);
        take_part(&t.ctx(1), &run.mem(), &shared, true, || {});
        assert_eq!(run.published(), 0, "only the last thread out publishes");
        take_part(&t.ctx(0), &run.mem(), &shared, false, || {});
        assert_eq!(run.published(), 41);
        assert_eq!(
            run.word.load(Ordering::Acquire),
            0,
            "the state word is released"
        );
        assert_eq!(
            Arc::strong_count(&shared),
            1,
            "only this test's reference is left"
        );
        assert!(t.cores.iter().all(|c| c.read_dmb() == 0));
    }

    #[test]
    fn an_unwinding_part_winds_the_run_down_and_publishes_nothing() {
        for orchestrator_unwinds in [true, false] {
            let run = Run::new();
            let t = Thread::new();
            let shared = share(&run);
            let (bad, good) = if orchestrator_unwinds { (1, 0) } else { (0, 1) };
            let unwound = catch_unwind(AssertUnwindSafe(|| {
                take_part(
                    &t.ctx(bad),
                    &run.mem(),
                    &shared,
                    orchestrator_unwinds,
                    || panic!("runtime bug"),
                )
            }));
            let payload = unwound.expect_err("the unwind goes on to the device");
            assert_eq!(payload.downcast_ref::<&str>(), Some(&"runtime bug"));
            // The others see a failed run (and, without an orchestrator, a finished one), so
            // they end instead of waiting.
            assert!(shared.errors.is_fatal());
            assert_eq!(
                shared.orch_done.load(Ordering::Acquire),
                orchestrator_unwinds
            );
            assert!(
                t.cores.iter().all(|c| c.read_dmb() == 0),
                "not the last out"
            );
            take_part(
                &t.ctx(good),
                &run.mem(),
                &shared,
                !orchestrator_unwinds,
                || {},
            );
            // The last thread out released every core and published nothing; the state
            // stays allocated, as after a reset.
            assert!(t.cores.iter().all(|c| c.read_dmb() == EXIT_SIGNAL));
            assert_eq!(run.published(), 0);
            assert_ne!(run.word.load(Ordering::Acquire), 0);
            RunShared::release(&run.mem());
        }
    }

    #[test]
    fn the_last_scheduler_out_publishes_for_an_orchestrator_left_behind() {
        let mut run = Run::new();
        let t = Thread::new();
        let shared = share(&run);
        shared
            .errors
            .sched_fail(simpler_abi::SCHED_TIMEOUT, || "stalled".into());
        // The scheduler leaves while the orchestrator has not returned.
        take_part(&t.ctx(0), &run.mem(), &shared, false, || {});
        assert_eq!(run.published(), 41, "published without the orchestrator");
        assert_eq!(run.result.completion_code, -simpler_abi::SCHED_TIMEOUT);
        // When the orchestrator finally returns it publishes nothing more, and as the last
        // thread out it releases the state.
        run.result.published = 0;
        shared.orch_done.store(true, Ordering::Release);
        take_part(&t.ctx(1), &run.mem(), &shared, true, || {});
        assert_eq!(run.published(), 0, "the record is published once");
        assert_eq!(run.word.load(Ordering::Acquire), 0);
        assert_eq!(Arc::strong_count(&shared), 1);
    }

    #[test]
    fn a_run_with_an_abandoned_core_never_frees_its_state() {
        let run = Run::new();
        let t = Thread::new();
        let shared = share(&run);
        shared.abandoned_cores.fetch_add(1, Ordering::AcqRel);
        shared.orch_done.store(true, Ordering::Release);
        take_part(&t.ctx(1), &run.mem(), &shared, true, || {});
        take_part(&t.ctx(0), &run.mem(), &shared, false, || {});
        assert_eq!(run.published(), 41);
        assert_eq!(run.word.load(Ordering::Acquire), 0, "the word is released");
        assert_eq!(
            Arc::strong_count(&shared),
            2,
            "one reference is left for the abandoned kernel"
        );
    }

    #[test]
    fn the_no_progress_clock_stops_while_anything_runs() {
        let run = Run::new();
        let shared = share(&run);
        std::thread::sleep(Duration::from_millis(30));
        assert!(shared.stalled_for_ms() >= 20);
        shared.running.fetch_add(1, Ordering::AcqRel);
        assert_eq!(shared.stalled_for_ms(), 0, "a running subtask is no stall");
        shared.progress();
        shared.running.fetch_sub(1, Ordering::AcqRel);
        assert!(
            shared.stalled_for_ms() < 20,
            "the end of a dispatch is progress"
        );
        RunShared::release(&run.mem());
    }
}
