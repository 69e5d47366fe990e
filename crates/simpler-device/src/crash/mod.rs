//! Crash reports of device threads: a SIGSEGV, SIGBUS, SIGFPE or SIGABRT raised on a device
//! thread prints what that thread was running before the process ends (`docs/sim-device.md`
//! §10).
//!
//! On the sim, kernels are host code on host threads: a kernel that dereferences NULL,
//! calls `abort()` or writes past its tensor takes the host process down with it, and the
//! report is what the user gets instead of a bare "Segmentation fault". It names the
//! device, the thread (AICore core and type, or AICPU thread), the run epoch, the user code
//! running (kernel: its name, func id, task and block; or the orchestration), the faulting
//! address and whether it lies inside, just past or just before a live device allocation
//! (which one, at what offset, which of the kernel's tensor arguments it backs; under sim
//! memcheck, whether it hit a guard page). The process then ends by the same signal (exit
//! status 128 + the signal number), through the handler that was there before, if any.
//!
//! What each piece is:
//! - `signal`: the handlers (installed once per process by the first sim device), the
//!   chaining to the handlers they replace, and the device threads' alternate stacks;
//! - `tables`: the lock-free tables the handler reads — device threads and what they run,
//!   live device allocations, names of loaded code;
//! - `report`: the report's text, formatted without allocating;
//! - `peek`: the fault-free read of the process's own memory the report uses;
//! - `slab`: the tables' lock-free storage.
//!
//! Who writes what: the sim's device threads register themselves (`DeviceThread`); the
//! runtime says which run ([`set_run`]) and which kernel or orchestration call
//! ([`enter_kernel`], [`enter_orchestration`]) a thread is in; the sim allocator registers
//! live allocations; the host names the code it loads ([`name_code`]). None of these calls
//! blocks on anything the handler needs, and the handler takes no lock.
//!
//! This module must not know runs or tasks beyond the numbers it is handed; it must not
//! allocate, lock or call anything not async-signal-safe inside the handler.

mod peek;
mod report;
mod signal;
mod slab;
mod tables;

use std::cell::Cell;
use std::sync::atomic::{compiler_fence, AtomicBool, Ordering};

/// Set once this process is a chip's child process of a level-3 worker (see
/// [`set_isolated_child`]).
static ISOLATED_CHILD: AtomicBool = AtomicBool::new(false);

/// Says that this process runs a chip as a child process of its worker: a crash report
/// then says the worker reports the death instead of advising how to isolate kernels
/// (they already are). Called by the chip child's server before its device starts.
pub fn set_isolated_child() {
    ISOLATED_CHILD.store(true, Ordering::Relaxed);
}

/// True once [`set_isolated_child`] was called (read by the handler: an atomic load).
pub(crate) fn is_isolated_child() -> bool {
    ISOLATED_CHILD.load(Ordering::Relaxed)
}

pub(crate) use tables::{forget_live, note_live, LiveView};
use tables::{CodeKind, ThreadKind, ThreadSlot};

thread_local! {
    /// The calling device thread's slot (`None` on every other thread).
    static CURRENT: Cell<Option<&'static ThreadSlot>> = const { Cell::new(None) };
}

/// Installs the crash handlers, once per process (`SIMPLER_CRASH_REPORT=0` opts out).
pub(crate) fn install() {
    signal::install();
}

/// The page size the handlers use.
pub(crate) fn page_size() -> u64 {
    signal::install();
    signal::page_size()
}

/// Which device thread a [`DeviceThread`] registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// AICore core `core` of type `core_type`.
    Aicore {
        /// Core id.
        core: u32,
        /// Its type.
        core_type: simpler_abi::CoreType,
    },
    /// AICPU thread `index`.
    Aicpu {
        /// Thread index.
        index: u32,
    },
    /// The chip's SDMA engine thread.
    Sdma,
}

/// A device thread's registration, for the thread's life: while it lives, a crash on the
/// thread is reported (with an alternate signal stack of its own). Made and dropped on the
/// thread it registers.
pub(crate) struct DeviceThread {
    index: Option<usize>,
    _alt: Option<signal::AltStack>,
}

/// A crash-report slot carried by a pool fiber from worker to worker: attached to the
/// worker thread that runs the fiber ([`fiber_switch_in`]), detached when it suspends
/// ([`fiber_switch_out`]).
#[derive(Clone, Copy)]
pub(crate) struct FiberSlot(&'static ThreadSlot);

/// Attaches a fiber's slot (if it has one) to the calling worker thread, before the fiber
/// runs: a crash on this thread is then reported as that fiber's.
#[inline(never)]
pub(crate) fn fiber_switch_in(slot: Option<FiberSlot>) {
    thread_local! {
        /// The worker's thread id (a system call to read, so read once).
        static TID: i32 = signal::gettid();
    }
    if let Some(FiberSlot(s)) = slot {
        s.tid.store(TID.with(|t| *t), Ordering::Release);
        CURRENT.with(|c| c.set(Some(s)));
        compiler_fence(Ordering::SeqCst);
    }
}

/// Detaches whatever slot the fiber that just suspended on this worker had attached (or
/// registered while it ran).
#[inline(never)]
pub(crate) fn fiber_switch_out() -> Option<FiberSlot> {
    let s = CURRENT.with(|c| c.take())?;
    s.tid.store(0, Ordering::Release);
    compiler_fence(Ordering::SeqCst);
    Some(FiberSlot(s))
}

/// A pool worker thread's registration: its own alternate signal stack (a crash on a
/// fiber's stack — a stack overflow — is handled on it). The worker has no slot: the fiber
/// it runs brings its own.
pub(crate) struct WorkerThread {
    _alt: Option<signal::AltStack>,
}

thread_local! {
    /// Set on a pool worker thread: a device thread registered on it is a fiber, which
    /// uses the worker's alternate stack.
    static ON_POOL_WORKER: Cell<bool> = const { Cell::new(false) };
}

impl WorkerThread {
    /// Registers the calling worker thread.
    pub(crate) fn enter() -> WorkerThread {
        install();
        ON_POOL_WORKER.with(|w| w.set(true));
        WorkerThread {
            _alt: signal::AltStack::install(),
        }
    }
}

impl DeviceThread {
    /// Registers the calling thread (or pool fiber) as `role` of device `device`. A thread
    /// that cannot be registered (a million device threads) runs unreported. A fiber gets
    /// no alternate signal stack of its own: it runs on its worker's.
    pub(crate) fn enter(device: u32, role: Role) -> DeviceThread {
        install();
        let Some((index, slot)) = tables::THREADS.claim() else {
            return DeviceThread {
                index: None,
                _alt: None,
            };
        };
        let r = Ordering::Relaxed;
        let (kind, idx, core_type) = match role {
            Role::Aicore { core, core_type } => (ThreadKind::Aicore, core, core_type as u32 + 1),
            Role::Aicpu { index } => (ThreadKind::Aicpu, index, 0),
            Role::Sdma => (ThreadKind::Sdma, 0, 0),
        };
        slot.device.store(device, r);
        slot.kind.store(kind as u32, r);
        slot.index.store(idx, r);
        slot.core_type.store(core_type, r);
        slot.epoch.store(0, r);
        slot.func_table.store(0, r);
        slot.func_count.store(0, r);
        slot.code.store(CodeKind::None as u32, r);
        slot.tid.store(signal::gettid(), Ordering::Release);
        CURRENT.with(|c| c.set(Some(slot)));
        let on_fiber = ON_POOL_WORKER.with(Cell::get);
        DeviceThread {
            index: Some(index),
            _alt: if on_fiber {
                None
            } else {
                signal::AltStack::install()
            },
        }
    }

    /// The thread's kernel launch ended: no run, no call.
    pub(crate) fn end_launch(&self) {
        with_slot(|s| {
            s.code.store(CodeKind::None as u32, Ordering::Relaxed);
            s.epoch.store(0, Ordering::Relaxed);
            s.func_table.store(0, Ordering::Relaxed);
            s.func_count.store(0, Ordering::Relaxed);
        });
    }
}

impl Drop for DeviceThread {
    fn drop(&mut self) {
        if let Some(index) = self.index {
            CURRENT.with(|c| c.set(None));
            if let Some(slot) = tables::THREADS.get(index) {
                slot.tid.store(0, Ordering::Release);
            }
            tables::THREADS.release(index);
        }
    }
}

// Never inlined: code on a pool fiber may have moved to another worker since its last
// call, and must read that worker's thread-local.
#[inline(never)]
fn with_slot(f: impl FnOnce(&ThreadSlot)) {
    if let Some(s) = CURRENT.with(Cell::get) {
        f(s);
        // The stores must be done before the code they describe runs, as this thread's
        // signal handler sees it.
        compiler_fence(Ordering::SeqCst);
    }
}

/// Records the run the calling device thread works for: its epoch and its func id →
/// kernel entry table (`func_count` u64 entries at device address `func_table`, read only
/// by a crash report, and only once it is known to lie in a live allocation). Cleared when
/// the thread's kernel launch ends. A no-op on a thread that is not a sim device thread.
pub fn set_run(epoch: u64, func_table: u64, func_count: u32) {
    with_slot(|s| {
        s.epoch.store(epoch, Ordering::Relaxed);
        s.func_table.store(func_table, Ordering::Relaxed);
        s.func_count.store(func_count, Ordering::Relaxed);
    });
}

/// One kernel call, as a crash report names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelCall {
    /// Address of the kernel entry.
    pub entry: u64,
    /// Address of the call's argument array (a [`simpler_abi::KernelArgs`]; 0 if none): a
    /// report names the tensor arguments whose buffer is the allocation a fault hit.
    pub args: u64,
    /// The task's id (`u64::MAX`: none).
    pub task: u64,
    /// The block this call runs, `0..block_num`.
    pub block_idx: i32,
    /// Blocks of the task.
    pub block_num: i32,
}

/// While it lives, the calling device thread is inside a user call (a kernel or an
/// orchestration); dropping it (also by unwinding) says the call has ended.
#[must_use = "the call is recorded only while the guard lives"]
pub struct CallGuard(());

impl Drop for CallGuard {
    fn drop(&mut self) {
        with_slot(|s| s.code.store(CodeKind::None as u32, Ordering::Relaxed));
    }
}

/// Records that the calling device thread is about to run `call`, until the guard drops.
/// A no-op on a thread that is not a sim device thread.
pub fn enter_kernel(call: KernelCall) -> CallGuard {
    with_slot(|s| {
        let r = Ordering::Relaxed;
        s.entry.store(call.entry, r);
        s.args.store(call.args, r);
        s.task.store(call.task, r);
        s.block_idx.store(call.block_idx, r);
        s.block_num.store(call.block_num, r);
        s.code.store(CodeKind::Kernel as u32, r);
    });
    CallGuard(())
}

/// Records that the calling device thread is about to run the orchestration entry at
/// `entry`, until the guard drops. A no-op on a thread that is not a sim device thread.
pub fn enter_orchestration(entry: u64) -> CallGuard {
    with_slot(|s| {
        s.entry.store(entry, Ordering::Relaxed);
        s.args.store(0, Ordering::Relaxed);
        s.task.store(u64::MAX, Ordering::Relaxed);
        s.code
            .store(CodeKind::Orchestration as u32, Ordering::Relaxed);
    });
    CallGuard(())
}

/// Records that the calling device thread (the SDMA engine's) is about to copy `bytes`
/// bytes from `src` to `dst` for a kernel, until the guard drops: a fault is reported as
/// that copy's. A no-op on a thread that is not a device thread.
pub fn enter_sdma_copy(dst: u64, src: u64, bytes: u64) -> CallGuard {
    with_slot(|s| {
        let r = Ordering::Relaxed;
        s.entry.store(src, r);
        s.args.store(dst, r);
        s.task.store(bytes, r);
        s.code.store(CodeKind::SdmaCopy as u32, r);
    });
    CallGuard(())
}

/// Records that the calling device thread is about to read the deferred-completion counter
/// at `addr` that task `task` registered, until the guard drops: a fault is reported as that
/// task's bad counter, not as the runtime's. A no-op on a thread that is not a device thread.
pub fn enter_counter_read(addr: u64, task: u64) -> CallGuard {
    with_slot(|s| {
        let r = Ordering::Relaxed;
        s.entry.store(addr, r);
        s.args.store(0, r);
        s.task.store(task, r);
        s.code.store(CodeKind::Counter as u32, r);
    });
    CallGuard(())
}

/// The name a crash report gives the code entry at one address, registered by
/// [`name_code`] until this value drops.
#[derive(Debug)]
pub struct CodeName(Option<usize>);

impl Drop for CodeName {
    fn drop(&mut self) {
        if let Some(id) = self.0.take() {
            tables::forget_name(id);
        }
    }
}

/// Names the code entry at `entry` in crash reports (at most 160 bytes of `name` are kept),
/// until the returned [`CodeName`] drops. When two live names share an entry (one image
/// registered by two callables), either may be shown.
pub fn name_code(entry: u64, name: &str) -> CodeName {
    CodeName(tables::note_name(entry, name))
}

/// Calls `f` on every live allocation listed for crash reports (tests of the allocator).
#[cfg(test)]
pub(crate) fn scan_live_for_tests(mut f: impl FnMut(&LiveView)) {
    tables::scan_live(|v| {
        f(v);
        true
    });
}
