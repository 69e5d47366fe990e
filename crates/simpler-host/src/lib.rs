//! # simpler-host — the host program
//!
//! Owns everything the host does for a chip: [`ChipWorker`](worker::ChipWorker) (device and
//! runtime bring-up, callable registration, device memory, runs), callable loading from
//! shared-library images or in-process functions, the callable bundle file format, and the
//! staging of host tensors by signature.
//!
//! It talks to the device only through the [`simpler_device::Device`] trait and to the chip
//! runtime only through `simpler_abi` structures placed in device memory. It must not reach
//! into runtime internals.

pub mod callable;
pub mod signature;

pub use callable::{CallableSpec, CodeImage, KernelSpec};
pub use signature::{ArgDirection, ArgSpec, Signature, SignatureError};
