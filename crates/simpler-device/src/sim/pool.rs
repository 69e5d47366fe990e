//! Persistent device threads: one per AICore and one per AICPU thread, started once with the
//! device and reused by every kernel launch (never once per run). An idle thread blocks on its
//! job channel; nothing spins while there is no work.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_utils::sync::WaitGroup;

use crate::{
    AicoreContext, AicoreKernel, AicpuContext, AicpuKernel, CoreRegs, DevicePtr, Doorbell, Topology,
};

/// State shared by the device and its threads.
pub(crate) struct Chip {
    pub(crate) topology: Topology,
    pub(crate) cores: Box<[CoreRegs]>,
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
                            kernel(&ctx, arg);
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
                    let bell = Arc::new(Doorbell::new());
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
                            let rc = kernel(&ctx, arg);
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
