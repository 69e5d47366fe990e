//! A sub worker thread (`SubWorkers::Threads`, `docs/l3-worker.md` §7): an [`Endpoint`]
//! that runs Rust closures ([`SubClosure`]) on its lane's thread, handing them the task's
//! arguments as [`SubArgs`]. A closure's `Err` fails the task with its text; a panic fails
//! it with the panic message (the lane survives). It holds no device memory.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;

use simpler_device::DevicePtr;
use simpler_host::CallConfig;

use crate::endpoint::{
    Callable, CallableKey, Endpoint, EndpointError, EndpointKind, SubArgs, SubClosure,
};
use crate::tensor::TaskArg;
use crate::WorkerError;

/// Sub worker `index`, running closures.
pub(crate) struct SubThread {
    index: usize,
    closures: HashMap<CallableKey, SubClosure>,
}

impl SubThread {
    /// Sub worker `index`, with nothing registered.
    pub(crate) fn new(index: usize) -> SubThread {
        SubThread {
            index,
            closures: HashMap::new(),
        }
    }

    fn no_memory(&self) -> EndpointError {
        EndpointError::Failed(WorkerError::InvalidState(format!(
            "{} is a sub worker; it holds no device memory",
            self.describe()
        )))
    }
}

impl Endpoint for SubThread {
    fn kind(&self) -> EndpointKind {
        EndpointKind::Sub
    }

    fn describe(&self) -> String {
        format!("sub worker {}", self.index)
    }

    fn register(&mut self, key: CallableKey, callable: &Callable) -> Result<(), EndpointError> {
        match callable {
            Callable::SubClosure(f) => {
                self.closures.insert(key, f.clone());
                Ok(())
            }
            other => Err(EndpointError::Failed(WorkerError::InvalidArgument {
                arg: "callable".into(),
                reason: format!(
                    "{other:?} cannot run on a sub worker thread, which runs Rust closures; \
                     a serialized callable needs sub worker processes"
                ),
            })),
        }
    }

    fn unregister(&mut self, key: CallableKey) -> Result<(), EndpointError> {
        self.closures.remove(&key);
        Ok(())
    }

    fn run(
        &mut self,
        key: CallableKey,
        args: &[TaskArg],
        _config: &CallConfig,
    ) -> Result<(), EndpointError> {
        let Some(f) = self.closures.get(&key) else {
            return Err(EndpointError::Failed(WorkerError::UnknownCallable(
                format!("key {key} is not registered on {}", self.describe()),
            )));
        };
        let sub_args = SubArgs { args };
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| f(&sub_args)));
        let message = match outcome {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(message)) => message,
            Err(panic) => format!(
                "the sub callable panicked: {}",
                crate::lane::panic_text(&*panic)
            ),
        };
        Err(EndpointError::Failed(WorkerError::SubFailed { message }))
    }

    fn malloc(&mut self, _nbytes: u64) -> Result<DevicePtr, EndpointError> {
        Err(self.no_memory())
    }

    fn free(&mut self, _ptr: DevicePtr) -> Result<(), EndpointError> {
        Err(self.no_memory())
    }

    fn copy_to(&mut self, _dst: DevicePtr, _src: &[u8]) -> Result<(), EndpointError> {
        Err(self.no_memory())
    }

    fn copy_from(&mut self, _dst: &mut [u8], _src: DevicePtr) -> Result<(), EndpointError> {
        Err(self.no_memory())
    }

    fn shutdown(&mut self) -> Result<(), EndpointError> {
        self.closures.clear();
        Ok(())
    }
}
