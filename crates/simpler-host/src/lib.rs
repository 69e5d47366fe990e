//! # simpler-host — the host program
//!
//! Owns everything the host does for a chip: [`ChipWorker`] (device and runtime bring-up,
//! callable registration, device memory, runs), callable loading from shared-library images
//! or in-process functions ([`loader`]), the callable bundle file format ([`bundle`]), and
//! the staging of host tensors by signature, and the run lane: pipelined runs (launch depth
//! 2), per-run completion fences, the outcome decision and launch grading
//! (design `run-completion-fences.txt`, spec `run-lane.md` §1–§3).
//!
//! Issue 6 modules, by responsibility: [`fault_monitor`] (the process's exception-callback
//! slot and notice ring), [`health`] (device health per generation, attribution, admission),
//! [`registry`] (callable ids, generations, image cache), [`mode`] (the PROGRAM/KERNEL latch),
//! `caller_stream` (launch on a borrowed caller stream), [`lifecycle`] (environment
//! identity, context and fork refusal, close/drop rules), `atfork` (the fork hooks) and
//! [`timeouts`].
//!
//! Lane modules, by responsibility: `identity` (run identity), `fence` (the per-slot
//! completion fence), `wait_ref` (wait-reference tokens), `join` (the cross-run join),
//! [`outcome`] (decision and drain rules, pure), `launch` (launch grading), [`lane`] (the
//! FIFO state machine), `slot` (device resources), `exec` (the executor tying them
//! together) and `handle` ([`RunHandle`]).
//!
//! It talks to the device only through the [`simpler_device::Device`] trait and to the chip
//! runtime only through `simpler_abi` structures placed in device memory (plus the two
//! kernel entry functions it launches). It must not reach into runtime internals.

mod args;
pub mod bundle;
pub mod callable;
mod caller_stream;
pub mod config;
mod error;
mod exec;
pub mod fault_monitor;
mod fence;
pub mod fsio;
mod handle;
pub mod health;
mod identity;
mod join;
pub mod lane;
mod launch;
pub mod lifecycle;
pub mod loader;
pub mod mode;
pub mod outcome;
mod pod;
pub mod registry;
pub mod signature;
mod slot;
mod sync;
pub mod timeouts;
mod worker;

pub use args::{HostArg, HostTensor};
pub use bundle::{Bundle, BundleCode, BundleError, BundleKernel};
pub use callable::{CallableSpec, CodeImage, KernelSpec};
pub use config::{CallConfig, RingValue, RuntimeEnv};
pub use error::HostError;
pub use exec::RunReport;
pub use fence::Completion;
pub use handle::{HostBuffer, OwnedArg, RunHandle, RunOutput};
pub use identity::{RunIdentity, StreamRole, Waiter};
pub use launch::LaunchGrade;
pub use lifecycle::{EnvironmentIdentity, Ownership, WorkerState};
pub use mode::{ExecutionMode, ExecutionModeLatch};
pub use registry::{CallableId, CallableInfo, ImageCacheStats, MAX_CALLABLES};
pub use signature::{ArgDirection, ArgSpec, Signature, SignatureError};
pub use timeouts::Timeouts;
pub use worker::{ChipWorker, WorkerConfig};
