//! [`ChipWorker`]: one chip driven from the host — device bring-up, the callable registry,
//! device memory, and runs.
//!
//! A run is prepare → launch → wait → finalize (spec `run-lane.md` §1): the host tensors are
//! staged by signature, the run's descriptor and a zero result marker are published, the
//! AICore kernel and then the AICPU kernel are launched back to back on two streams, each
//! followed by its boundary event; completion is the two boundaries, the verdict is the
//! run's own result record (epoch-stamped), and only a recorded success copies outputs back.
//! Runs on one worker execute one at a time (launch depth 1; the pipelined lane comes later).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use simpler_abi::{CoreType, MAX_FUNC_ID};
use simpler_device::sim::SimDevice;
use simpler_device::{Device, DevicePtr, Topology};

use crate::loader::{self, EntryKind, LoadedCode};
use crate::run::{self, RunReport};
use crate::slot::RunSlot;
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
    /// Bytes of device heap for runtime-allocated outputs (default 256 MiB, reserved lazily).
    pub heap_size: u64,
    /// Most tasks one run may submit (default 16,384).
    pub task_window: u32,
    /// How long to wait for a run's completion before declaring the device unusable
    /// (default 50 s, the stream-synchronize timeout).
    pub run_timeout: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            topology: Topology::default(),
            aicpu_thread_num: 0,
            heap_size: 256 << 20,
            task_window: simpler_runtime::DEFAULT_TASK_WINDOW,
            run_timeout: Duration::from_secs(50),
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
    /// func id → core type + 1 (0 = none).
    pub(crate) func_types: Vec<u32>,
}

pub(crate) struct Inner {
    pub(crate) callables: Vec<Option<Arc<Registered>>>,
    pub(crate) slot: RunSlot,
    /// Set once the device can no longer be trusted; refuses every run.
    pub(crate) unusable: Option<String>,
}

/// One chip, its runtime and its callables.
///
/// Thread-safe; runs are serialized. Dropping the worker stops the device threads and frees
/// every device allocation it made.
pub struct ChipWorker {
    pub(crate) device: Arc<dyn Device>,
    pub(crate) config: WorkerConfig,
    pub(crate) inner: Mutex<Inner>,
}

impl std::fmt::Debug for ChipWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChipWorker")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Source of process-unique, non-zero run epochs shared by every worker.
static EPOCHS: AtomicU64 = AtomicU64::new(1);

impl ChipWorker {
    /// Starts a sim device with `config` and prepares the run slot.
    ///
    /// # Errors
    /// [`HostError::InvalidConfig`] naming the bad field, or a device error.
    pub fn new(config: WorkerConfig) -> Result<ChipWorker, HostError> {
        config.validate()?;
        let device: Arc<dyn Device> = Arc::new(
            SimDevice::new(config.topology)
                .map_err(HostError::device("starting the sim device"))?,
        );
        let slot = RunSlot::new(&device)?;
        Ok(ChipWorker {
            device,
            config,
            inner: Mutex::new(Inner {
                callables: (0..MAX_CALLABLES).map(|_| None).collect(),
                slot,
                unusable: None,
            }),
        })
    }

    /// The device this worker drives.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
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
        let registered = Arc::new(Registered {
            name: spec.name.clone(),
            signature: spec.signature.clone(),
            orchestration,
            _kernels: kernels,
            func_addrs,
            func_types,
        });
        let mut inner = self.inner.lock();
        let free = inner
            .callables
            .iter()
            .position(Option::is_none)
            .ok_or(HostError::RegistryFull(MAX_CALLABLES))?;
        inner.callables[free] = Some(registered);
        Ok(CallableId(free as u32))
    }

    /// Removes a callable; its code is unloaded once no run uses it.
    ///
    /// # Errors
    /// [`HostError::UnknownCallable`].
    pub fn unregister(&self, id: CallableId) -> Result<(), HostError> {
        let mut inner = self.inner.lock();
        match inner
            .callables
            .get_mut(id.0 as usize)
            .and_then(Option::take)
        {
            Some(_) => Ok(()),
            None => Err(HostError::UnknownCallable(id.0)),
        }
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
    /// [`HostError::DeviceUnusable`].
    pub fn run(&self, id: CallableId, args: &mut [HostArg<'_>]) -> Result<RunReport, HostError> {
        let mut inner = self.inner.lock();
        if let Some(why) = &inner.unusable {
            return Err(HostError::DeviceUnusable(why.clone()));
        }
        let callable = inner
            .callables
            .get(id.0 as usize)
            .and_then(Clone::clone)
            .ok_or(HostError::UnknownCallable(id.0))?;
        crate::args::check(&callable.name, &callable.signature, args)?;
        let epoch = EPOCHS.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        run::execute(self, &mut inner, &callable, args, epoch, started)
    }

    /// Allocates `size` bytes of device memory.
    ///
    /// # Errors
    /// A device error (zero or huge size, out of memory).
    pub fn malloc(&self, size: u64) -> Result<DevicePtr, HostError> {
        self.device
            .malloc(size)
            .map_err(HostError::device(format!("allocating {size} bytes")))
    }

    /// Frees device memory from [`malloc`](ChipWorker::malloc).
    ///
    /// # Errors
    /// A device error (unknown pointer, double free).
    pub fn free(&self, ptr: DevicePtr) -> Result<(), HostError> {
        self.device
            .free(ptr)
            .map_err(HostError::device("freeing device memory"))
    }

    /// Copies host bytes to device memory.
    ///
    /// # Errors
    /// A device error when the range is not inside one live allocation.
    pub fn copy_to(&self, dst: DevicePtr, src: &[u8]) -> Result<(), HostError> {
        self.device
            .copy_to_device(dst, src)
            .map_err(HostError::device("copying to the device"))
    }

    /// Copies device memory to host bytes.
    ///
    /// # Errors
    /// A device error when the range is not inside one live allocation.
    pub fn copy_from(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), HostError> {
        self.device
            .copy_from_device(dst, src)
            .map_err(HostError::device("copying from the device"))
    }
}

impl Drop for ChipWorker {
    fn drop(&mut self) {
        let inner = self.inner.get_mut();
        if inner.unusable.is_none() {
            inner.slot.release(&self.device);
        }
    }
}
