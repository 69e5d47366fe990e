//! # simpler-host — the host program
//!
//! Owns everything the host does for a chip: [`ChipWorker`] (device and runtime bring-up,
//! callable registration, device memory, runs), callable loading and the bundle file format,
//! the staging of host tensors by signature, and the run lane: pipelined runs (launch depth
//! 2), per-run completion fences, the outcome decision and launch grading
//! (`docs/lane.md`).
//!
//! Modules, by responsibility:
//! - **The worker and its API**: `worker` ([`ChipWorker`]), [`WorkerConfig`], [`config`]
//!   (per-run options), `args` (host and owned run arguments and their check), `borrowed`
//!   (the synchronous run's borrowed buffers), `handle` ([`RunHandle`]), `error`
//!   ([`HostError`]).
//! - **Callables**: [`callable`] (what a callable is made of), [`signature`], [`loader`]
//!   (shared-library images, in-process functions), [`bundle`] (the callable file),
//!   [`registry`] (callable ids, generations, image cache), [`fsio`] (atomic writes).
//! - **The run lane**: `lane` (the engine behind one lock and the handle that drives it:
//!   queue, slots, prepare, launch, drain, finalize, teardown), `identity` (run identity),
//!   `fence` (the per-slot completion fence and its wait-reference tokens), `join` (the
//!   cross-run join), `launch` (launch grading), `outcome` (the decision and drain rules,
//!   pure), `caller_stream` (launch on a borrowed caller stream).
//! - **Device health and lifecycle**: [`fault_monitor`] (the process's exception-callback
//!   slot, notice ring and fork hooks), [`health`] (device health per generation,
//!   attribution, admission), [`mode`] (the PROGRAM/KERNEL latch), [`lifecycle`]
//!   (environment identity, context and fork refusal, close/drop rules), [`timeouts`],
//!   [`sim_context`] (caller contexts on the sim platform, for borrowed workers).
//! - **Tracing**: `trace` (a run's host spans, its device trace area, the decoder into
//!   the `simpler_trace` model; `docs/tracing.md`).
//! - **Plumbing**: `pod` (byte views of ABI records), `sync` (the locks and atomics loom
//!   model-checks).
//!
//! It talks to the device only through the [`simpler_device::Device`] trait and to the chip
//! runtime only through `simpler_abi` structures placed in device memory (plus the two
//! kernel entry functions it launches). It must not reach into runtime internals.

mod args;
mod borrowed;
pub mod bundle;
pub mod callable;
mod caller_stream;
pub mod config;
mod error;
pub mod fault_monitor;
mod fence;
pub mod fsio;
mod handle;
pub mod health;
mod identity;
mod join;
mod lane;
mod launch;
pub mod lifecycle;
pub mod loader;
pub mod mode;
mod outcome;
mod pod;
pub mod registry;
pub mod signature;
pub mod sim_context;
mod sync;
pub mod timeouts;
mod trace;
mod worker;
mod worker_config;

pub use args::{
    is_float_dtype, ArgError, ArgOffer, ArgProblem, HostArg, HostBuffer, HostInput, HostMemory,
    HostTensor, OwnedArg, Passing, ScalarError, ScalarValue,
};
pub use bundle::{Bundle, BundleCode, BundleError, BundleKernel};
pub use callable::{
    check_kernel_name, duplicate_kernel_name, resolve_kernel_names, CallableSpec, CodeImage,
    KernelNameError, KernelSpec, Runtime, MAX_KERNEL_NAME_BYTES,
};
pub use config::{CallConfig, RingValue, RuntimeEnv};
pub use error::HostError;
pub use fence::Completion;
pub use handle::{RunHandle, RunOutput};
pub use identity::{RunIdentity, StreamRole, Waiter};
pub use lane::{GraphReport, RecordedRun, RunReport, StagingReport};
pub use launch::LaunchGrade;
pub use lifecycle::{EnvironmentIdentity, Ownership, WorkerState};
pub use mode::{ExecutionMode, ExecutionModeLatch};
pub use registry::{CallableId, CallableInfo, ImageCacheStats, MAX_CALLABLES};
pub use signature::{ArgDirection, ArgSpec, Signature, SignatureError};
/// The trace model runs report ([`RunReport::trace`]), re-exported for callers.
pub use simpler_trace as trace_model;
pub use timeouts::Timeouts;
pub use trace::{CapturedTrace, DEFAULT_TRACE_RECORDS};
pub use worker::ChipWorker;
pub use worker_config::WorkerConfig;
