//! Persistent device threads: one per AICore and one per AICPU thread, started once with the
//! device and reused by every kernel launch (never once per run). An idle thread blocks on its
//! job channel; nothing spins while there is no work.
//!
//! A forced reset terminates the kernels that are running: it raises the chip's kill switch
//! and wakes every device thread; a thread waiting on its doorbell or register unwinds out of
//! its kernel, which this module catches (the kernel then counts as ended, with
//! [`KILLED_STATUS`] for an AICPU kernel).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_utils::sync::WaitGroup;

use crate::regs::{KillSwitch, Killed};
use crate::{
    AicoreContext, AicoreKernel, AicpuContext, AicpuKernel, CoreRegs, DevicePtr, Doorbell, Topology,
};

/// Status of an AICPU kernel terminated by a reset.
pub(crate) const KILLED_STATUS: i32 = -0x5e5e7;

/// State shared by the device and its threads.
pub(crate) struct Chip {
    pub(crate) topology: Topology,
    pub(crate) cores: Box<[CoreRegs]>,
    /// One doorbell per AICPU thread.
    pub(crate) aicpu_bells: Box<[Arc<Doorbell>]>,
    /// Raised by a forced reset to terminate running kernels.
    pub(crate) kill: KillSwitch,
}

impl Chip {
    pub(crate) fn new(topology: Topology, kill: KillSwitch) -> Chip {
        let cores = (0..topology.core_count())
            .map(|_| CoreRegs::with_kill_switch(kill.clone()))
            .collect();
        let aicpu_bells = (0..topology.aicpu_threads)
            .map(|_| Arc::new(Doorbell::with_kill_switch(kill.clone())))
            .collect();
        Chip {
            topology,
            cores,
            aicpu_bells,
            kill,
        }
    }

    /// Wakes every device thread (so that a raised kill switch is noticed at once).
    pub(crate) fn wake_all(&self) {
        for c in self.cores.iter() {
            c.wake_core();
        }
        for b in self.aicpu_bells.iter() {
            b.force_ring();
        }
    }
}

/// Runs a kernel body; a body terminated by a reset returns `None`, any other panic goes on.
fn run_killable<R>(body: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => Some(r),
        Err(payload) if payload.is::<Killed>() => None,
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

enum Job {
    Aicore {
        kernel: AicoreKernel,
        arg: DevicePtr,
        done: WaitGroup,
    },
    Aicpu {
        kernel: AicpuKernel,
        arg: DevicePtr,
        threads: u32,
        status: Arc<AtomicI32>,
        done: WaitGroup,
    },
}

/// The AICore and AICPU thread pools of one device.
pub(crate) struct Pools {
    chip: Arc<Chip>,
    aicore: Vec<Sender<Job>>,
    aicpu: Vec<Sender<Job>>,
    handles: Vec<JoinHandle<()>>,
}

impl Pools {
    pub(crate) fn start(chip: Arc<Chip>) -> std::io::Result<Pools> {
        let mut pools = Pools {
            chip: chip.clone(),
            aicore: Vec::new(),
            aicpu: Vec::new(),
            handles: Vec::new(),
        };
        for core in 0..chip.topology.core_count() {
            let (tx, rx) = channel::<Job>();
            let chip = chip.clone();
            let h = std::thread::Builder::new()
                .name(format!("sim-aicore-{core}"))
                .spawn(move || {
                    let t = &chip.topology;
                    while let Ok(job) = rx.recv() {
                        if let Job::Aicore { kernel, arg, done } = job {
                            let ctx = AicoreContext {
                                core_id: core,
                                core_type: t.core_type(core),
                                cluster_id: t.cluster_of(core),
                                sub_block_id: t.sub_block_of(core),
                                regs: &chip.cores[core as usize],
                            };
                            let _ = run_killable(|| kernel(&ctx, arg));
                            drop(done);
                        }
                    }
                })?;
            pools.aicore.push(tx);
            pools.handles.push(h);
        }
        for idx in 0..chip.topology.aicpu_threads {
            let (tx, rx) = channel::<Job>();
            let chip = chip.clone();
            let h = std::thread::Builder::new()
                .name(format!("sim-aicpu-{idx}"))
                .spawn(move || {
                    let bell = chip.aicpu_bells[idx as usize].clone();
                    while let Ok(job) = rx.recv() {
                        if let Job::Aicpu {
                            kernel,
                            arg,
                            threads,
                            status,
                            done,
                        } = job
                        {
                            let ctx = AicpuContext {
                                thread_idx: idx,
                                thread_num: threads,
                                topology: &chip.topology,
                                cores: &chip.cores,
                                doorbell: &bell,
                            };
                            let rc = run_killable(|| kernel(&ctx, arg)).unwrap_or(KILLED_STATUS);
                            if rc != 0 {
                                let _ = status.compare_exchange(
                                    0,
                                    rc,
                                    Ordering::AcqRel,
                                    Ordering::Acquire,
                                );
                            }
                            drop(done);
                        }
                    }
                })?;
            pools.aicpu.push(tx);
            pools.handles.push(h);
        }
        Ok(pools)
    }

    /// Runs the AICore kernel on every core and returns when all have returned.
    pub(crate) fn run_aicore(&self, kernel: AicoreKernel, arg: DevicePtr) {
        for regs in self.chip.cores.iter() {
            regs.reset();
        }
        let done = WaitGroup::new();
        for tx in &self.aicore {
            let _ = tx.send(Job::Aicore {
                kernel,
                arg,
                done: done.clone(),
            });
        }
        done.wait();
    }

    /// Runs the AICPU kernel on the first `threads` AICPU threads; returns the first non-zero
    /// status any of them returned, or 0.
    pub(crate) fn run_aicpu(&self, kernel: AicpuKernel, arg: DevicePtr, threads: u32) -> i32 {
        let status = Arc::new(AtomicI32::new(0));
        let done = WaitGroup::new();
        for tx in self.aicpu.iter().take(threads as usize) {
            let _ = tx.send(Job::Aicpu {
                kernel,
                arg,
                threads,
                status: status.clone(),
                done: done.clone(),
            });
        }
        done.wait();
        status.load(Ordering::Acquire)
    }
}

impl Drop for Pools {
    fn drop(&mut self) {
        self.aicore.clear();
        self.aicpu.clear();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}
