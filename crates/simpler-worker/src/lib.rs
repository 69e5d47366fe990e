//! # simpler-worker — the engine of every level above one chip
//!
//! One host driving many chips (level 3), and, with the same engine, a host driving other
//! hosts (level 4 and above: the level number is a label). A user's orchestration function
//! runs on the caller's thread and submits tasks to next-level workers (chips) and sub
//! workers; the engine infers their dependencies from the tensors' tags over host buffers,
//! allocates intermediates from a ring of heaps, and one scheduler thread dispatches ready
//! tasks to endpoints (`docs/l3-worker.md`).
//!
//! Modules, by responsibility:
//! - **Arguments and memory**: [`tensor`] (views, tags, task arguments), [`memory`] (the
//!   host memory contract, shared regions children map).
//! - **Endpoints**: [`endpoint`] (the one trait), `chip_args` (a chip task's arguments as a
//!   chip run takes them), [`process`] (endpoints in child processes and the child side).
//! - **Errors**: `error` ([`WorkerError`]).
//!
//! It drives chips only through [`simpler_host::ChipWorker`] (in this process or in a child
//! process) and never reaches into the host's run lane or the chip runtime.

mod chip_args;
pub mod endpoint;
mod error;
pub mod memory;
pub mod process;
pub mod tensor;

pub use chip_args::owned_args;
pub use endpoint::{
    Callable, CallableKey, Endpoint, EndpointError, EndpointKind, SubArgs, SubClosure,
};
pub use error::WorkerError;
pub use memory::{HostMemory, SharedMemoryError, SharedRef, SharedRegion, VecMemory};
pub use process::ChildProgram;
pub use tensor::{c_strides, ChildAllocation, Memory, Tag, TaskArg, TaskArgs, Tensor};
