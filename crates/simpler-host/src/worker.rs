//! [`ChipWorker`]: one chip driven from the host — device bring-up, the callable registry,
//! device memory, and runs through the run lane.
//!
//! A run is submitted ([`ChipWorker::submit`], arguments checked synchronously) and handed
//! to the lane (`crate::exec`): up to [`WorkerConfig::launch_depth`] runs are on the device
//! at once, each in its own pipeline slot, a successor launched behind its predecessor by the
//! cross-run join; completion is each run's own two boundaries, the verdict its own
//! epoch-stamped result record. [`ChipWorker::run`] is submit + wait for borrowed buffers.
//! The worker is a thin owner of an `Arc<Shared>` so run handles can drive the lane.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use simpler_abi::{CoreType, MAX_FUNC_ID};
use simpler_device::sim::SimDevice;
use simpler_device::{Device, DevicePtr, Topology};

use crate::config::CallConfig;
use crate::exec::{self, Kernels, Lane, RunReport};
use crate::handle::{OwnedArg, RunHandle};
use crate::loader::{self, EntryKind, LoadedCode};
use crate::{CallableSpec, HostArg, HostError, Signature};

/// Number of callable slots (`MAX_REGISTERED_CALLABLE_IDS`).
pub const MAX_CALLABLES: usize = 64;

/// Configuration of a [`ChipWorker`].
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
    /// Most tasks one run may submit (default 16,384).
    pub task_window: u32,
    /// How long to wait for a run's completion before declaring the device unusable
    /// (default 50 s, the stream-synchronize timeout, or `SIMPLER_STREAM_SYNC_TIMEOUT_MS`);
    /// also bounds every fallback stream synchronize.
    pub run_timeout: Duration,
    /// The scheduler's no-progress watchdog (default 10 s, or
    /// `SIMPLER_SCHEDULER_TIMEOUT_MS`): a run with no progress this long fails with
    /// SCHEDULER_TIMEOUT and a stall class.
    pub scheduler_timeout: Duration,
    /// How long `get/set_tensor_data` may wait (default 15 s, or
    /// `SIMPLER_TENSOR_DATA_TIMEOUT_MS`).
    pub tensor_data_timeout: Duration,
    /// Runs on the device at once: 1 or 2 (default 2, two pipeline slots).
    pub launch_depth: u32,
    /// Measurement knob: drain every run through the bounded stream synchronize even when its
    /// own record proves success (the behaviour before completion fences; default false).
    pub always_synchronize: bool,
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
            tensor_data_timeout: timeouts.tensor_data,
            launch_depth: 2,
            always_synchronize: false,
        }
    }
}

impl WorkerConfig {
    fn validate(&self) -> Result<(), HostError> {
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
        if self.task_window < 4 {
            return Err(HostError::InvalidConfig(format!(
                "task_window must be at least 4, got {}",
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

/// Id of a registered callable (its registry slot, `0..64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallableId(pub u32);

/// A registered callable: loaded code and its func tables.
pub(crate) struct Registered {
    pub(crate) name: String,
    pub(crate) signature: Signature,
    pub(crate) orchestration: LoadedCode,
    pub(crate) _kernels: Vec<LoadedCode>,
    /// func id → entry address (0 = none), `func_count` entries.
    pub(crate) func_addrs: Vec<u64>,
    /// The func table as published to the device (little-endian u64 per func id).
    pub(crate) func_table_bytes: Vec<u8>,
    /// The core-type table as published (little-endian u32 per func id).
    pub(crate) func_type_bytes: Vec<u8>,
}

/// Everything a worker and its run handles share.
pub(crate) struct Shared {
    pub(crate) device: Arc<dyn Device>,
    pub(crate) config: WorkerConfig,
    pub(crate) kernels: Kernels,
    pub(crate) callables: Mutex<Vec<Option<Arc<Registered>>>>,
    pub(crate) lane: Mutex<Lane>,
    /// Signalled whenever the lane makes progress (runs end, a driver finishes).
    pub(crate) cv: Condvar,
}

/// One chip, its runtime and its callables.
///
/// Thread-safe. Dropping the worker drains the runs in flight (queued runs end with
/// [`HostError::WorkerClosed`]) and frees every device allocation it made — after a forced
/// device reset if the device was marked unusable, and never while the device may still
/// touch the memory.
pub struct ChipWorker {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ChipWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChipWorker")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl ChipWorker {
    /// Starts a sim device with `config` and prepares the lane (streams and slots).
    ///
    /// # Errors
    /// [`HostError::InvalidConfig`] naming the bad field, or a device error.
    pub fn new(config: WorkerConfig) -> Result<ChipWorker, HostError> {
        config.validate()?;
        let device: Arc<dyn Device> = Arc::new(
            SimDevice::new(config.topology)
                .map_err(HostError::device("starting the sim device"))?,
        );
        ChipWorker::with_device(config, device)
    }

    /// A worker on an existing device (for example a [`SimDevice`] whose faults a test
    /// injects). `config.topology` is ignored: the device's own topology is used.
    ///
    /// # Errors
    /// [`HostError::InvalidConfig`] naming the bad field, or a device error.
    pub fn with_device(
        config: WorkerConfig,
        device: Arc<dyn Device>,
    ) -> Result<ChipWorker, HostError> {
        let config = WorkerConfig {
            topology: *device.topology(),
            ..config
        };
        config.validate()?;
        let lane = Lane::new(&device, config.launch_depth, config.heap_size)?;
        Ok(ChipWorker {
            shared: Arc::new(Shared {
                device,
                config,
                kernels: Kernels::default(),
                callables: Mutex::new((0..MAX_CALLABLES).map(|_| None).collect()),
                lane: Mutex::new(lane),
                cv: Condvar::new(),
            }),
        })
    }

    /// The device this worker drives.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.shared.device
    }

    /// The worker's configuration (with the device's topology).
    pub fn config(&self) -> &WorkerConfig {
        &self.shared.config
    }

    /// Why the device refuses new runs, if it does (admission is closed until a confirmed
    /// forced reset, which happens when the worker is dropped).
    pub fn unusable_reason(&self) -> Option<String> {
        self.shared.lane.lock().unusable.clone()
    }

    /// Loads a callable's code and registers it under the lowest free id.
    ///
    /// # Errors
    /// [`HostError::InvalidCallable`] (duplicate or out-of-range func ids, no kernels),
    /// [`HostError::Signature`], [`HostError::Load`] naming the image and symbol, or
    /// [`HostError::RegistryFull`].
    pub fn register(&self, spec: &CallableSpec) -> Result<CallableId, HostError> {
        spec.signature.validate()?;
        let invalid = |reason: String| HostError::InvalidCallable {
            name: spec.name.clone(),
            reason,
        };
        let mut count = 0usize;
        for (i, k) in spec.kernels.iter().enumerate() {
            if k.func_id as usize >= MAX_FUNC_ID {
                return Err(invalid(format!(
                    "func id {} is not below {MAX_FUNC_ID}",
                    k.func_id
                )));
            }
            if spec.kernels[..i].iter().any(|o| o.func_id == k.func_id) {
                return Err(invalid(format!(
                    "func id {} is used by two kernels",
                    k.func_id
                )));
            }
            count = count.max(k.func_id as usize + 1);
        }
        let orchestration = loader::load(
            &spec.orchestration,
            EntryKind::Orchestration,
            &format!("`{}` orchestration", spec.name),
        )?;
        let mut func_addrs = vec![0u64; count];
        let mut func_types = vec![0u32; count];
        let mut kernels = Vec::with_capacity(spec.kernels.len());
        for k in &spec.kernels {
            let code = loader::load(
                &k.image,
                EntryKind::Kernel,
                &format!("`{}` kernel func {}", spec.name, k.func_id),
            )?;
            func_addrs[k.func_id as usize] = code.addr;
            func_types[k.func_id as usize] = match k.core_type {
                CoreType::Aic => 1,
                CoreType::Aiv => 2,
            };
            kernels.push(code);
        }
        let func_table_bytes = func_addrs.iter().flat_map(|a| a.to_le_bytes()).collect();
        let func_type_bytes = func_types.iter().flat_map(|t| t.to_le_bytes()).collect();
        let registered = Arc::new(Registered {
            name: spec.name.clone(),
            signature: spec.signature.clone(),
            orchestration,
            _kernels: kernels,
            func_addrs,
            func_table_bytes,
            func_type_bytes,
        });
        let mut callables = self.shared.callables.lock();
        let free = callables
            .iter()
            .position(Option::is_none)
            .ok_or(HostError::RegistryFull(MAX_CALLABLES))?;
        callables[free] = Some(registered);
        Ok(CallableId(free as u32))
    }

    /// Removes a callable; its code is unloaded once no run uses it.
    ///
    /// # Errors
    /// [`HostError::UnknownCallable`].
    pub fn unregister(&self, id: CallableId) -> Result<(), HostError> {
        let mut callables = self.shared.callables.lock();
        match callables.get_mut(id.0 as usize).and_then(Option::take) {
            Some(_) => Ok(()),
            None => Err(HostError::UnknownCallable(id.0)),
        }
    }

    fn callable(&self, id: CallableId) -> Result<Arc<Registered>, HostError> {
        self.shared
            .callables
            .lock()
            .get(id.0 as usize)
            .and_then(Clone::clone)
            .ok_or(HostError::UnknownCallable(id.0))
    }

    /// Submits a run of a registered callable on owned `args` (signature order) to the lane
    /// and returns at once with its handle; the run is prepared and launched now when a
    /// pipeline slot is free. When the lane already holds two runs, this call first drives
    /// the oldest to completion.
    ///
    /// # Errors
    /// Argument errors (synchronously, before anything touches the device),
    /// [`HostError::UnknownCallable`], [`HostError::DeviceUnusable`] when admission is
    /// closed, [`HostError::WorkerClosed`]. Failures of the run itself are the handle's.
    pub fn submit(&self, id: CallableId, args: Vec<OwnedArg>) -> Result<RunHandle, HostError> {
        self.submit_with(id, args, &CallConfig::default())
    }

    /// [`submit`](ChipWorker::submit) with per-run options (ring sizing, AICPU threads).
    ///
    /// # Errors
    /// As `submit`, plus [`HostError::InvalidConfig`] naming the bad option.
    pub fn submit_with(
        &self,
        id: CallableId,
        mut args: Vec<OwnedArg>,
        config: &CallConfig,
    ) -> Result<RunHandle, HostError> {
        let plan = config.plan(&self.shared.config)?;
        let callable = self.callable(id)?;
        crate::args::check_owned(&callable.name, &callable.signature, &mut args)?;
        exec::submit(&self.shared, callable, args, plan)
    }

    /// Runs a registered callable on `args` (signature order) and waits for it.
    ///
    /// `In` and `InOut` tensors are copied to the device; after a successful run, `Out` and
    /// `InOut` tensors are copied back into `args`. A failed run leaves every host buffer
    /// untouched, and the worker stays usable unless the device's state could not be proven.
    ///
    /// # Errors
    /// Argument errors (before anything touches the device), [`HostError::RunFailed`] with
    /// the runtime's code and message, [`HostError::Timeout`], [`HostError::DeviceFault`],
    /// [`HostError::DeviceUnusable`], [`HostError::RunUndecided`].
    pub fn run(&self, id: CallableId, args: &mut [HostArg<'_>]) -> Result<RunReport, HostError> {
        self.run_with(id, args, &CallConfig::default())
    }

    /// [`run`](ChipWorker::run) with per-run options (ring sizing, AICPU threads).
    ///
    /// # Errors
    /// As `run`, plus [`HostError::InvalidConfig`] naming the bad option.
    pub fn run_with(
        &self,
        id: CallableId,
        args: &mut [HostArg<'_>],
        config: &CallConfig,
    ) -> Result<RunReport, HostError> {
        let plan = config.plan(&self.shared.config)?;
        let callable = self.callable(id)?;
        crate::args::check(&callable.name, &callable.signature, args)?;
        let owned: Vec<OwnedArg> = callable
            .signature
            .args
            .iter()
            .zip(args.iter())
            .map(|(spec, a)| match a {
                HostArg::Tensor(t) => OwnedArg::Tensor {
                    buffer: Box::new(if spec.direction.copies_in() {
                        t.bytes.to_vec()
                    } else {
                        vec![0u8; t.bytes.len()]
                    }),
                    shape: t.shape.clone(),
                    dtype: t.dtype,
                },
                HostArg::Scalar(v) => OwnedArg::Scalar(*v),
            })
            .collect();
        let out = exec::submit(&self.shared, callable.clone(), owned, plan)?.result()?;
        for ((spec, dst), src) in callable
            .signature
            .args
            .iter()
            .zip(args.iter_mut())
            .zip(out.args)
        {
            if let (HostArg::Tensor(t), OwnedArg::Tensor { mut buffer, .. }) = (dst, src) {
                if spec.direction.copies_back() {
                    t.bytes.copy_from_slice(buffer.bytes_mut());
                }
            }
        }
        Ok(out.report)
    }

    /// Allocates `size` bytes of device memory.
    ///
    /// # Errors
    /// A device error (zero or huge size, out of memory).
    pub fn malloc(&self, size: u64) -> Result<DevicePtr, HostError> {
        self.shared
            .device
            .malloc(size)
            .map_err(HostError::device(format!("allocating {size} bytes")))
    }

    /// Frees device memory from [`malloc`](ChipWorker::malloc).
    ///
    /// # Errors
    /// A device error (unknown pointer, double free).
    pub fn free(&self, ptr: DevicePtr) -> Result<(), HostError> {
        self.shared
            .device
            .free(ptr)
            .map_err(HostError::device("freeing device memory"))
    }

    /// Copies host bytes to device memory.
    ///
    /// # Errors
    /// A device error when the range is not inside one live allocation.
    pub fn copy_to(&self, dst: DevicePtr, src: &[u8]) -> Result<(), HostError> {
        self.shared
            .device
            .copy_to_device(dst, src)
            .map_err(HostError::device("copying to the device"))
    }

    /// Copies device memory to host bytes.
    ///
    /// # Errors
    /// A device error when the range is not inside one live allocation.
    pub fn copy_from(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), HostError> {
        self.shared
            .device
            .copy_from_device(dst, src)
            .map_err(HostError::device("copying from the device"))
    }
}

impl Drop for ChipWorker {
    fn drop(&mut self) {
        exec::close(&self.shared);
    }
}
