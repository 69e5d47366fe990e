//! # simpler-worker — the engine of every level above one chip
//!
//! One host driving many chips (level 3), and, with the same engine, a host driving other
//! hosts (level 4 and above: the level number is a label; there the next-level workers are
//! children a binding makes, [`NextLevelChild`], in place of chips, `docs/l4-worker.md`). A user's orchestration function
//! runs on the caller's thread and submits tasks to next-level workers (chips) and sub
//! workers; the engine infers their dependencies from the tensors' tags over host buffers,
//! allocates intermediates from a ring of heaps, and ready tasks are dispatched to
//! endpoints by whichever thread made them ready (`docs/l3-worker.md`).
//!
//! Modules, by responsibility:
//! - **The worker and its runs**: `worker` ([`Worker`]: life, registration, submit,
//!   close), `options` ([`WorkerOptions`]), `registry` ([`CallableHandle`]), `run`
//!   ([`RunHandle`], [`RunReport`], a run's engine state), `orchestrator`
//!   ([`Orchestrator`]: submits, scopes, allocation, copies), `validate` (the submit-time
//!   argument checks), `admission` (a checked task into its run's graph), `child_memory`
//!   (child tensors), `running` (an initialized worker's threads, and their shutdown).
//! - **The engine**: `engine` (the state behind the one lock), `graph` (task slots),
//!   `tensormap` (footprints, live accesses), `ring` (the heap ring), `scheduler`
//!   (completions and dispatch, under the engine lock), `lane` (one thread per endpoint,
//!   handing batches of runs to it).
//! - **Arguments and memory**: [`tensor`] (views, tags, task arguments), [`memory`] (the
//!   host memory contract, shared regions children map), `host_view` (host tensors as
//!   bytes, [`SubArgs`] accessors).
//! - **Endpoints**: [`endpoint`] (the one trait), `chip_local` (a chip in this process),
//!   `sub_thread` (a sub worker thread), `chip_args` (a chip task's arguments as a chip run
//!   takes them), [`process`] (endpoints in child processes and the child side).
//! - **Collectives**: [`collectives`] (allreduce, allgather and reduce-scatter over a comm
//!   domain, built from the collectives' C chip code, `docs/comm.md` §4).
//! - **Level 2 in a child process**: `isolated` ([`IsolatedChip`]: one chip in a child
//!   process behind level 2's calls, each run staged through device memory as engine
//!   tasks).
//! - **Errors**: `error` ([`WorkerError`]).
//!
//! It drives chips only through [`simpler_host::ChipWorker`] (in this process or in a child
//! process) and never reaches into the host's run lane or the chip runtime.

mod admission;
mod channel;
mod child_memory;
mod chip_args;
mod chip_local;
pub mod collectives;
pub mod comm;
#[cfg(test)]
mod death_tests;
pub mod endpoint;
mod engine;
mod error;
mod graph;
mod host_view;
mod isolated;
mod lane;
pub mod memory;
mod options;
mod orchestrator;
pub mod process;
mod queue;
mod registry;
mod ring;
mod run;
mod running;
mod scheduler;
mod sub_thread;
pub mod tensor;
mod tensormap;
mod trace;
mod validate;
mod worker;

pub use channel::{Compare, Notify, WorkerChipRegion, MAX_REGION_PART};
pub use chip_args::owned_args;
pub use comm::{CommBufferSpec, CommDomain, RankContext};
pub use endpoint::{
    BatchRun, Callable, CallableKey, Endpoint, EndpointError, EndpointKind, KillSwitch, RunFacts,
    SubArgs, SubClosure,
};
pub use error::WorkerError;
pub use isolated::{
    ChipHealth, IsolatedArg, IsolatedChip, IsolatedOptions, IsolatedReport, IsolatedRunHandle,
};
pub use memory::{HostMemory, SharedMemoryError, SharedRef, SharedRegion, VecMemory};
pub use options::{
    ChildStart, ChildStarter, ChipIsolation, NextLevelChild, SubWorkers, WorkerOptions,
    MIN_HEAP_RING_SIZE,
};
pub use orchestrator::Orchestrator;
pub use process::ChildProgram;
pub use queue::{Opcode, QueueMessage, WorkerChipQueue};
pub use registry::CallableHandle;
pub use run::{RunHandle, RunReport};
pub use tensor::{c_strides, ChildAllocation, Memory, Tag, TaskArg, TaskArgs, Tensor};
pub use tensormap::TaskId;
pub use trace::{RunConfig, L3_HOST};
pub use worker::Worker;
