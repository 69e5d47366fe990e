//! # simpler-host — the host program
//!
//! Owns everything the host does for a chip: [`ChipWorker`] (device and runtime bring-up,
//! callable registration, device memory, runs), callable loading from shared-library images
//! or in-process functions ([`loader`]), the callable bundle file format ([`bundle`]), and
//! the staging of host tensors by signature.
//!
//! It talks to the device only through the [`simpler_device::Device`] trait and to the chip
//! runtime only through `simpler_abi` structures placed in device memory (plus the two
//! kernel entry functions it launches). It must not reach into runtime internals.

mod args;
pub mod bundle;
pub mod callable;
mod error;
pub mod loader;
mod pod;
mod run;
pub mod signature;
mod slot;
mod worker;

pub use args::{HostArg, HostTensor};
pub use bundle::{Bundle, BundleCode, BundleError, BundleKernel};
pub use callable::{CallableSpec, CodeImage, KernelSpec};
pub use error::HostError;
pub use run::RunReport;
pub use signature::{ArgDirection, ArgSpec, Signature, SignatureError};
pub use worker::{CallableId, ChipWorker, WorkerConfig, MAX_CALLABLES};
