//! [`WorkerConfig`]: the shape of the chip and the lane a worker drives (topology, AICPU
//! threads, heap, task window, launch depth) and its timeouts, with their validation. The
//! worker and the lane read it; per-run options are the `config` module's. It holds no
//! state of a running worker.

use std::time::Duration;

use simpler_device::Topology;

use crate::HostError;

/// Configuration of a worker (`ChipWorker`).
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Shape of the simulated chip (default: 8 clusters, 4 AICPU threads).
    pub topology: Topology,
    /// AICPU threads a run uses (1 orchestrator + schedulers), 2..=topology.aicpu_threads;
    /// 0 means all of them.
    pub aicpu_thread_num: u32,
    /// Bytes of device heap for runtime-allocated outputs (default 256 MiB, allocated with the
    /// worker; the sim maps it lazily).
    pub heap_size: u64,
    /// Task slots per ring, a power of two ≥ 4 (default 16,384): the most tasks of one ring
    /// alive at once; a run may submit any number of tasks as earlier ones complete.
    pub task_window: u32,
    /// How long to wait for a run's completion before declaring the device unusable
    /// (default 50 s, the stream-synchronize timeout, or `SIMPLER_STREAM_SYNC_TIMEOUT_MS`);
    /// also bounds every fallback stream synchronize.
    pub run_timeout: Duration,
    /// The scheduler's no-progress watchdog (default 10 s, or
    /// `SIMPLER_SCHEDULER_TIMEOUT_MS`): a run in which nothing runs and nothing progresses
    /// this long fails with SCHEDULER_TIMEOUT and a stall class. A running kernel does not
    /// count as a stall (the op-execute timeout bounds it).
    pub scheduler_timeout: Duration,
    /// The longest one kernel dispatch may run (default 45 s, or
    /// `SIMPLER_OP_EXECUTE_TIMEOUT_US`), 1 ms..=`i32::MAX` ms, passed to the runtime rounded
    /// up to whole milliseconds. A kernel past it fails the run with OP_EXECUTE_TIMEOUT, its
    /// core is abandoned and the worker refuses new runs until a forced reset.
    pub op_execute_timeout: Duration,
    /// How long `get/set_tensor_data` may wait (default 15 s, or
    /// `SIMPLER_TENSOR_DATA_TIMEOUT_MS`).
    pub tensor_data_timeout: Duration,
    /// Runs on the device at once: 1 or 2 (default 2, two pipeline slots).
    pub launch_depth: u32,
    /// Measurement knob: drain every run through the bounded stream synchronize even when its
    /// own record proves success (the drain without completion fences; default false).
    pub always_synchronize: bool,
    /// Sim memcheck: device allocations placed against guard pages, so an access past (or
    /// before) a tensor faults at once and the crash report names the allocation (default
    /// off, or `SIMPLER_SIM_MEMCHECK`; `docs/sim-device.md` §2). Used by
    /// [`ChipWorker::new`](crate::ChipWorker::new), which starts the sim device.
    pub sim_memcheck: simpler_device::sim::Memcheck,
    /// How the sim device runs its cores and AICPU threads: fibers on the process's shared
    /// pool of `available_parallelism` threads (default), or one OS thread each
    /// (`SIMPLER_SIM_EXECUTOR=threads`; `docs/sim-device.md` §11).
    pub sim_executor: simpler_device::sim::ExecutorKind,
    /// Provision the chip's SDMA engine, so kernels may start asynchronous copies whose
    /// tasks complete when the copy lands (`docs/chip-runtime.md` §18; default false, as
    /// upstream's `enable_sdma`). Used by [`ChipWorker::new`](crate::ChipWorker::new); a
    /// worker on an existing device has the engine that device was started with.
    pub enable_sdma: bool,
    /// The runtime variant of runs whose callable and [`CallConfig`](crate::CallConfig) name
    /// none (default `tensormap_and_ringbuffer`).
    pub runtime: crate::Runtime,
}

impl Default for WorkerConfig {
    /// The sim defaults, with the timeouts resolved from the `SIMPLER_*_TIMEOUT_*`
    /// environment variables (a bad value warns and keeps the default).
    fn default() -> Self {
        let timeouts = crate::timeouts::Timeouts::from_env();
        WorkerConfig {
            topology: Topology::default(),
            aicpu_thread_num: 0,
            heap_size: 256 << 20,
            task_window: simpler_runtime::DEFAULT_TASK_WINDOW,
            run_timeout: timeouts.stream_sync,
            scheduler_timeout: timeouts.scheduler,
            op_execute_timeout: timeouts.op_execute,
            tensor_data_timeout: timeouts.tensor_data,
            launch_depth: 2,
            always_synchronize: false,
            sim_memcheck: simpler_device::sim::Memcheck::from_env(),
            sim_executor: simpler_device::sim::ExecutorKind::from_env(),
            enable_sdma: false,
            runtime: crate::Runtime::default(),
        }
    }
}

impl WorkerConfig {
    /// The AICPU threads a run gets by default: `aicpu_thread_num`, or all of the chip's
    /// (`topology.aicpu_threads`) when it is 0.
    pub fn effective_aicpu_threads(&self) -> u32 {
        match self.aicpu_thread_num {
            0 => self.topology.aicpu_threads,
            n => n,
        }
    }

    /// Checks every field.
    ///
    /// # Errors
    /// [`HostError::InvalidConfig`] naming the first bad field.
    pub(crate) fn validate(&self) -> Result<(), HostError> {
        self.topology.validate().map_err(HostError::InvalidConfig)?;
        let max = self.topology.aicpu_threads;
        if self.aicpu_thread_num != 0 && !(2..=max).contains(&self.aicpu_thread_num) {
            return Err(HostError::InvalidConfig(format!(
                "aicpu_thread_num must be 0 (auto) or in 2..={max}, got {}",
                self.aicpu_thread_num
            )));
        }
        if self.heap_size < 1024 {
            return Err(HostError::InvalidConfig(format!(
                "heap_size must be at least 1024 bytes, got {}",
                self.heap_size
            )));
        }
        if self.task_window < 4 || !self.task_window.is_power_of_two() {
            return Err(HostError::InvalidConfig(format!(
                "task_window must be a power of two of at least 4, got {}",
                self.task_window
            )));
        }
        if !(1..=2).contains(&self.launch_depth) {
            return Err(HostError::InvalidConfig(format!(
                "launch_depth must be 1 or 2, got {}",
                self.launch_depth
            )));
        }
        for (name, t) in [
            ("scheduler_timeout", self.scheduler_timeout),
            ("tensor_data_timeout", self.tensor_data_timeout),
            ("op_execute_timeout", self.op_execute_timeout),
        ] {
            if t.is_zero() || t.as_millis() > i32::MAX as u128 {
                return Err(HostError::InvalidConfig(format!(
                    "{name} must be between 1 ms and {} ms, got {t:?}",
                    i32::MAX
                )));
            }
        }
        if self.run_timeout.is_zero() {
            return Err(HostError::InvalidConfig(
                "run_timeout must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// `t` in whole milliseconds, rounded up (the launch descriptor's unit); `t` is at most
/// `i32::MAX` ms once validated.
pub(crate) fn ceil_ms(t: Duration) -> u32 {
    let ms = t.as_micros().div_ceil(1000);
    u32::try_from(ms).unwrap_or(u32::MAX)
}
