//! A chip in this process (`chip_isolation = thread`, `docs/l3-worker.md` §4): an
//! [`Endpoint`] over one [`ChipWorker`]. A task's host tensors are lent to the chip run in
//! place (no copy by the engine: `owned_args`), device tensors pass as device memory. It
//! owns the map from the worker's callable keys to the chip's own callable ids; it never
//! reaches into the chip's lane. A batch of runs ([`Endpoint::run_batch`]) is pipelined:
//! up to the chip's launch depth are submitted before the oldest is waited for, so the
//! chip stages and launches a run while the one ahead of it executes (`docs/lane.md` §2).

use std::collections::HashMap;
use std::sync::Arc;

use simpler_device::DevicePtr;
use simpler_host::{CallConfig, CallableId, ChipWorker, WorkerConfig};

use crate::endpoint::{
    BatchRun, Callable, CallableKey, Endpoint, EndpointError, EndpointKind, RunFacts,
};
use crate::memory::{HostMemory, SharedRegion};
use crate::tensor::TaskArg;
use crate::WorkerError;

/// Chip `index` on a [`ChipWorker`] of this process.
pub(crate) struct ChipLocal {
    index: usize,
    device: u32,
    chip: ChipWorker,
    /// Runs of a batch in flight at once: the chip's launch depth (1 or 2).
    depth: usize,
    ids: HashMap<CallableKey, CallableId>,
    /// What the last run reported, until the lane takes it.
    last_run: RunFacts,
    /// Comm windows imported into the chip, by device address, kept mapped until unmapped.
    windows: HashMap<u64, Arc<SharedRegion>>,
}

impl ChipLocal {
    /// Starts chip `index` (labelled `device` in messages) with `config`.
    ///
    /// # Errors
    /// [`WorkerError::Startup`] naming the chip and the host's error.
    pub(crate) fn start(
        index: usize,
        device: u32,
        config: WorkerConfig,
    ) -> Result<ChipLocal, WorkerError> {
        let depth = config.launch_depth.max(1) as usize;
        let chip = ChipWorker::new(config).map_err(|e| WorkerError::Startup {
            endpoint: format!("chip {index} (device {device})"),
            reason: e.to_string(),
        })?;
        Ok(ChipLocal {
            index,
            device,
            chip,
            depth,
            ids: HashMap::new(),
            last_run: RunFacts::default(),
            windows: HashMap::new(),
        })
    }

    /// Submits one run (it goes on without this thread).
    fn submit(
        &self,
        key: CallableKey,
        args: &[TaskArg],
        config: &CallConfig,
    ) -> Result<simpler_host::RunHandle, EndpointError> {
        let id = self.id(key)?;
        let owned = crate::owned_args(self.index, args)?;
        Ok(self.chip.submit_with(id, owned, config)?)
    }

    /// Waits for a submitted run and answers what it reported.
    fn finish(handle: simpler_host::RunHandle) -> Result<RunFacts, EndpointError> {
        let report = handle.result()?.report;
        Ok(RunFacts {
            tasks: Some(report.tasks),
            trace: report
                .trace
                .map(|t| Box::new(std::sync::Arc::unwrap_or_clone(t).into_model())),
        })
    }

    fn id(&self, key: CallableKey) -> Result<CallableId, EndpointError> {
        self.ids.get(&key).copied().ok_or_else(|| {
            EndpointError::Failed(WorkerError::UnknownCallable(format!(
                "key {key} is not registered on {}",
                self.describe()
            )))
        })
    }
}

impl Endpoint for ChipLocal {
    fn kind(&self) -> EndpointKind {
        EndpointKind::Chip
    }

    fn describe(&self) -> String {
        format!("chip {} (device {})", self.index, self.device)
    }

    fn register(&mut self, key: CallableKey, callable: &Callable) -> Result<(), EndpointError> {
        let Callable::Chip(spec) = callable else {
            return Err(EndpointError::Failed(WorkerError::InvalidArgument {
                arg: "callable".into(),
                reason: format!("{callable:?} is not a chip callable"),
            }));
        };
        let id = self.chip.register(spec)?;
        self.ids.insert(key, id);
        Ok(())
    }

    fn unregister(&mut self, key: CallableKey) -> Result<(), EndpointError> {
        let id = self.id(key)?;
        self.chip.unregister(id)?;
        self.ids.remove(&key);
        Ok(())
    }

    fn run(
        &mut self,
        key: CallableKey,
        args: &[TaskArg],
        config: &CallConfig,
    ) -> Result<(), EndpointError> {
        let handle = self.submit(key, args, config)?;
        self.last_run = ChipLocal::finish(handle)?;
        Ok(())
    }

    fn run_batch(
        &mut self,
        runs: &[BatchRun<'_>],
        done: &mut dyn FnMut(usize, Result<RunFacts, EndpointError>),
    ) {
        // Submitted, oldest first; a run refused at submit keeps its place in the order.
        let mut pending: std::collections::VecDeque<(usize, Result<_, EndpointError>)> =
            std::collections::VecDeque::with_capacity(self.depth);
        for (i, r) in runs.iter().enumerate() {
            if pending.len() == self.depth {
                let (j, submitted) = pending.pop_front().expect("a full pipeline");
                done(j, submitted.and_then(ChipLocal::finish));
            }
            pending.push_back((i, self.submit(r.key, r.args, r.config)));
        }
        for (j, submitted) in pending {
            done(j, submitted.and_then(ChipLocal::finish));
        }
    }

    fn take_run_facts(&mut self) -> RunFacts {
        std::mem::take(&mut self.last_run)
    }

    fn malloc(&mut self, nbytes: u64) -> Result<DevicePtr, EndpointError> {
        Ok(self.chip.malloc(nbytes)?)
    }

    fn free(&mut self, ptr: DevicePtr) -> Result<(), EndpointError> {
        Ok(self.chip.free(ptr)?)
    }

    fn map_window(&mut self, region: &Arc<SharedRegion>) -> Result<DevicePtr, EndpointError> {
        // SAFETY: `windows` keeps the region (and so its mapping) alive until the chip has
        // released the window in `unmap_window`.
        let base = unsafe {
            self.chip
                .import_window(region.as_ptr(), region.len() as u64)?
        };
        self.windows.insert(base.addr(), region.clone());
        Ok(base)
    }

    fn unmap_window(&mut self, base: DevicePtr) -> Result<(), EndpointError> {
        self.chip.release_window(base)?;
        self.windows.remove(&base.addr());
        Ok(())
    }

    fn copy_to(&mut self, dst: DevicePtr, src: &[u8]) -> Result<(), EndpointError> {
        Ok(self.chip.copy_to(dst, src)?)
    }

    fn copy_from(&mut self, dst: &mut [u8], src: DevicePtr) -> Result<(), EndpointError> {
        Ok(self.chip.copy_from(dst, src)?)
    }

    fn shutdown(&mut self) -> Result<(), EndpointError> {
        Ok(self.chip.close()?)
    }
}
