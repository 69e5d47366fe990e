//! Persistent device threads: one per AICore and one per AICPU thread, started once with the
//! device and reused by every kernel launch (never once per run), run by the device's
//! executor (`exec`: fibers on the shared pool, or OS threads). An idle device thread waits
//! on its job inbox; nothing spins and nothing wakes while there is no work.
//!
//! Every kernel call runs inside `catch_unwind`, so a device thread outlives whatever its
//! kernel does (`docs/sim-device.md`):
//! - a forced reset terminates the kernels that are running: it raises the chip's kill
//!   switch and wakes every device thread; a thread waiting on its doorbell or register
//!   unwinds out of its kernel with [`Killed`] (the kernel then counts as ended, with
//!   [`KILLED_STATUS`] for an AICPU kernel);
//! - any other panic ends that thread's part of the launch: the launch reports the first
//!   panic's message ([`KernelEnd::panic`]), which its stream turns into a kernel fault, and
//!   the thread takes the next job as usual (never a silently dead core).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::crash::{DeviceThread, Role};
use crate::exec::{panic_message, Countdown, DeviceThread as Spawned, ExecutorKind, Inbox};
use crate::regs::{KillSwitch, Killed};
use crate::sdma::{SdmaEngine, SdmaFaultHook};
use crate::{
    AicoreContext, AicoreKernel, AicpuContext, AicpuKernel, CoreRegs, DevicePtr, Doorbell, Topology,
};

/// Status of an AICPU kernel terminated by a reset.
pub(crate) const KILLED_STATUS: i32 = -0x5e5e7;

/// Device status of a launch in which a kernel (or a host function on the stream's thread)
/// panicked: the `status` of its [`DeviceError::KernelFault`](crate::DeviceError::KernelFault)
/// (whose `panic` holds the message) and the code of its fault notice.
pub const KERNEL_PANIC_STATUS: i32 = -0x5e5e8;

/// State shared by the device and its threads.
pub(crate) struct Chip {
    pub(crate) topology: Topology,
    pub(crate) cores: Box<[CoreRegs]>,
    /// One doorbell per AICPU thread.
    pub(crate) aicpu_bells: Box<[Arc<Doorbell>]>,
    /// Raised by a forced reset to terminate running kernels.
    pub(crate) kill: KillSwitch,
    /// The device's logical id (named by crash reports).
    pub(crate) device: u32,
    /// The SDMA engine, when the device was started with one ([`SimOptions::sdma`](super::SimOptions::sdma)).
    pub(crate) sdma: Option<SdmaEngine>,
    /// AICore kernel calls so far, one per core per launch that ran on it.
    pub(crate) aicore_calls: std::sync::atomic::AtomicU64,
}

impl Chip {
    /// A chip of `topology`; with `sdma`, an SDMA engine whose copies ask `sdma`'s hook
    /// about faults and ring the chip's AICPU doorbells.
    pub(crate) fn new(
        topology: Topology,
        kill: KillSwitch,
        device: u32,
        sdma: Option<SdmaFaultHook>,
    ) -> std::io::Result<Chip> {
        let cores = (0..topology.core_count())
            .map(|_| CoreRegs::with_kill_switch(kill.clone()))
            .collect();
        let aicpu_bells: Box<[Arc<Doorbell>]> = (0..topology.aicpu_threads)
            .map(|_| Arc::new(Doorbell::with_kill_switch(kill.clone())))
            .collect();
        let sdma = match sdma {
            Some(hook) => Some(SdmaEngine::start(device, aicpu_bells.clone(), hook)?),
            None => None,
        };
        Ok(Chip {
            topology,
            cores,
            aicpu_bells,
            kill,
            device,
            sdma,
            aicore_calls: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Wakes every device thread (so that a raised kill switch is noticed at once). Call it
    /// after raising the kill switch.
    pub(crate) fn wake_all(&self) {
        // Pairs with the fence in `disarm_if_killed`: either this disarm sees a core a lazy
        // launch armed, or that launch sees the raised kill switch and disarms it itself.
        std::sync::atomic::fence(Ordering::SeqCst);
        for c in self.cores.iter() {
            // A core a lazy launch armed but never started ends with the launch at once.
            c.disarm();
            c.wake_core();
        }
        for b in self.aicpu_bells.iter() {
            b.force_ring();
        }
    }

    /// After a lazy launch armed every core: if a reset raised the kill switch meanwhile,
    /// its [`wake_all`](Self::wake_all) may have run before the cores were armed, and then
    /// nothing would ever disarm them; the launch disarms them itself, so it ends.
    fn disarm_if_killed(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.kill.load(Ordering::Relaxed) {
            for c in self.cores.iter() {
                c.disarm();
            }
        }
    }
}

/// How one device thread's kernel call ended.
enum Ending<R> {
    /// The kernel returned.
    Returned(R),
    /// A reset terminated it.
    Killed,
    /// It panicked, with this message.
    Panicked(String),
}

/// Runs a kernel body, catching every unwind out of it.
fn run_caught<R>(body: impl FnOnce() -> R) -> Ending<R> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => Ending::Returned(r),
        Err(payload) if payload.is::<Killed>() => Ending::Killed,
        Err(payload) => Ending::Panicked(panic_message(&*payload)),
    }
}

/// How a whole launch ended, as its threads report it.
#[derive(Default)]
pub(crate) struct KernelEnd {
    /// The first non-zero status a thread returned (AICPU), or 0.
    pub(crate) status: i32,
    /// The first panic of a thread, prefixed with the thread (`"AICore 3: ..."`).
    pub(crate) panic: Option<String>,
}

/// What the threads of one launch share: the first non-zero status and the first panic.
#[derive(Default)]
struct LaunchEnd {
    status: AtomicI32,
    panic: Mutex<Option<String>>,
}

impl LaunchEnd {
    fn note_status(&self, rc: i32) {
        if rc != 0 {
            let _ = self
                .status
                .compare_exchange(0, rc, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    fn note_panic(&self, thread: impl FnOnce() -> String, message: String) {
        self.panic
            .lock()
            .get_or_insert_with(|| format!("{}: {message}", thread()));
    }

    fn finish(&self) -> KernelEnd {
        KernelEnd {
            status: self.status.load(Ordering::Acquire),
            panic: self.panic.lock().take(),
        }
    }
}

enum Job {
    Aicore {
        kernel: AicoreKernel,
        arg: DevicePtr,
        end: Arc<LaunchEnd>,
        done: Arc<Countdown>,
    },
    Aicpu {
        kernel: AicpuKernel,
        arg: DevicePtr,
        threads: u32,
        end: Arc<LaunchEnd>,
        done: Arc<Countdown>,
    },
}

/// The AICore and AICPU thread pools of one device.
pub(crate) struct Pools {
    chip: Arc<Chip>,
    kind: ExecutorKind,
    aicore: Vec<Arc<Inbox<Job>>>,
    aicpu: Vec<Arc<Inbox<Job>>>,
    handles: Vec<Spawned>,
    /// Held for the whole of an AICore launch: launches from different streams run one
    /// after the other, so a lazy launch arms a core only once the last one is over. (A
    /// fiber may park holding it and release it from another worker thread: parking_lot's
    /// lock is not tied to the thread that took it.)
    aicore_launch: Mutex<()>,
}

impl Pools {
    pub(crate) fn start(chip: Arc<Chip>, kind: ExecutorKind) -> std::io::Result<Pools> {
        let mut pools = Pools {
            chip: chip.clone(),
            kind,
            aicore: Vec::new(),
            aicpu: Vec::new(),
            handles: Vec::new(),
            aicore_launch: Mutex::new(()),
        };
        for core in 0..chip.topology.core_count() {
            let tx = Arc::new(Inbox::<Job>::default());
            let rx = tx.clone();
            let chip = chip.clone();
            let h = Spawned::spawn(kind, format!("sim-aicore-{core}"), false, move || {
                let t = &chip.topology;
                let role = Role::Aicore {
                    core,
                    core_type: t.core_type(core),
                };
                let crash = DeviceThread::enter(chip.device, role);
                while let Some(job) = rx.recv() {
                    if let Job::Aicore {
                        kernel,
                        arg,
                        end,
                        done,
                    } = job
                    {
                        let ctx = AicoreContext {
                            core_id: core,
                            core_type: t.core_type(core),
                            cluster_id: t.cluster_of(core),
                            sub_block_id: t.sub_block_of(core),
                            regs: &chip.cores[core as usize],
                        };
                        chip.aicore_calls.fetch_add(1, Ordering::Relaxed);
                        // SAFETY: this job executes one `launch_aicore` (or lazy) call, whose
                        // caller vouched for `arg` until the kernel finishes (its
                        // `# Safety`); `arg` is passed unchanged, `run_aicore` sent the job
                        // to every core at once (`run_aicore_lazy` to each core on its first
                        // DMB write, as the lazy contract says), `ctx` is this core's, and
                        // the device frees no memory by itself.
                        let ending = run_caught(|| unsafe { kernel(&ctx, arg) });
                        crash.end_launch();
                        if let Ending::Panicked(message) = ending {
                            end.note_panic(|| format!("AICore {core}"), message);
                        }
                        // Before the count-down: the next launch may arm the core then.
                        chip.cores[core as usize].activation.finished();
                        done.count_down();
                    }
                }
            })?;
            pools.aicore.push(tx);
            pools.handles.push(h);
        }
        for idx in 0..chip.topology.aicpu_threads {
            let tx = Arc::new(Inbox::<Job>::default());
            let rx = tx.clone();
            let chip = chip.clone();
            let h = Spawned::spawn(kind, format!("sim-aicpu-{idx}"), true, move || {
                let bell = chip.aicpu_bells[idx as usize].clone();
                let crash = DeviceThread::enter(chip.device, Role::Aicpu { index: idx });
                while let Some(job) = rx.recv() {
                    if let Job::Aicpu {
                        kernel,
                        arg,
                        threads,
                        end,
                        done,
                    } = job
                    {
                        let ctx = AicpuContext {
                            thread_idx: idx,
                            thread_num: threads,
                            topology: &chip.topology,
                            cores: &chip.cores,
                            doorbell: &bell,
                            sdma: chip.sdma.as_ref(),
                        };
                        // SAFETY: this job executes one `launch_aicpu` call, whose caller
                        // vouched for `arg` until the kernel finishes (its `# Safety`);
                        // `arg` is passed unchanged, `run_aicpu` sent the job to threads
                        // `0..threads` at once, `ctx` is this thread's, and the device
                        // frees no memory by itself.
                        let ending = run_caught(|| unsafe { kernel(&ctx, arg) });
                        crash.end_launch();
                        match ending {
                            Ending::Returned(rc) => end.note_status(rc),
                            Ending::Killed => end.note_status(KILLED_STATUS),
                            Ending::Panicked(message) => {
                                end.note_panic(|| format!("AICPU thread {idx}"), message);
                            }
                        }
                        done.count_down();
                    }
                }
            })?;
            pools.aicpu.push(tx);
            pools.handles.push(h);
        }
        Ok(pools)
    }

    /// How this device's threads run.
    pub(crate) fn kind(&self) -> ExecutorKind {
        self.kind
    }

    /// Runs the AICore kernel on every core and returns when all have returned, with the
    /// first panic of a core, if any (the status is always 0).
    pub(crate) fn run_aicore(&self, kernel: AicoreKernel, arg: DevicePtr) -> KernelEnd {
        let _one_at_a_time = crate::exec::blocking(|| self.aicore_launch.lock());
        for regs in self.chip.cores.iter() {
            regs.reset();
        }
        let end = Arc::new(LaunchEnd::default());
        let done = Arc::new(Countdown::new(self.aicore.len()));
        for tx in &self.aicore {
            tx.send(Job::Aicore {
                kernel,
                arg,
                end: end.clone(),
                done: done.clone(),
            });
        }
        done.wait();
        end.finish()
    }

    /// Arms the AICore kernel on every core without running it (`docs/sim-device.md` §13):
    /// each core's DMB and COND are reset, the core is armed, then COND is set to
    /// `armed_cond`; a core's kernel starts on its first DMB write, and a core disarmed
    /// before one ([`CoreRegs::disarm`], or a reset) counts as ended without running.
    /// Returns when every core has ended, with the first panic of a core, if any.
    pub(crate) fn run_aicore_lazy(
        &self,
        kernel: AicoreKernel,
        arg: DevicePtr,
        armed_cond: u64,
    ) -> KernelEnd {
        let _one_at_a_time = crate::exec::blocking(|| self.aicore_launch.lock());
        let end = Arc::new(LaunchEnd::default());
        let done = Arc::new(Countdown::new(self.aicore.len()));
        for (regs, tx) in self.chip.cores.iter().zip(&self.aicore) {
            regs.reset();
            let (tx, end, done) = (tx.clone(), end.clone(), done.clone());
            regs.activation.arm(Box::new(move |run| {
                if run {
                    tx.send(Job::Aicore {
                        kernel,
                        arg,
                        end,
                        done,
                    });
                } else {
                    done.count_down();
                }
            }));
        }
        // Only once every core is armed: whoever sees `armed_cond` may write DMB.
        for regs in self.chip.cores.iter() {
            regs.write_cond(armed_cond);
        }
        self.chip.disarm_if_killed();
        done.wait();
        end.finish()
    }

    /// Runs the AICPU kernel on the first `threads` AICPU threads; returns the first non-zero
    /// status any of them returned (0 if none) and the first panic, if any.
    pub(crate) fn run_aicpu(&self, kernel: AicpuKernel, arg: DevicePtr, threads: u32) -> KernelEnd {
        let end = Arc::new(LaunchEnd::default());
        let done = Arc::new(Countdown::new(threads as usize));
        for tx in self.aicpu.iter().take(threads as usize) {
            tx.send(Job::Aicpu {
                kernel,
                arg,
                threads,
                end: end.clone(),
                done: done.clone(),
            });
        }
        done.wait();
        end.finish()
    }
}

impl Drop for Pools {
    fn drop(&mut self) {
        for regs in self.chip.cores.iter() {
            regs.disarm();
        }
        for inbox in self.aicore.iter().chain(&self.aicpu) {
            inbox.close();
        }
        for h in self.handles.drain(..) {
            h.join();
        }
    }
}
