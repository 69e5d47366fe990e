//! # simpler-runtime — what runs on the chip
//!
//! The `tensormap_and_ringbuffer` runtime as two device kernels, launched by the host for
//! every run (spec `l2-runtime.md` §1–§3):
//!
//! - [`aicore_kernel`] runs on every AICore: it reports ready, then executes the kernels the
//!   AICPU dispatches to it through its handshake registers until told to exit
//!   ([`aicore`]).
//! - [`aicpu_kernel`] runs on the AICPU threads: the top thread runs the user's orchestration,
//!   which submits tasks whose dependencies are discovered from overlapping tensor regions;
//!   the other threads are schedulers that dispatch ready tasks to idle cores and release
//!   consumers on completion; the last thread out publishes the run's result record
//!   ([`aicpu`]).
//!
//! The runtime sees only `simpler_abi` structures in device memory and the device's
//! register file; it never sees host types.

pub mod aicore;
pub mod aicpu;
mod devmem;
pub mod handshake;

pub use aicore::aicore_kernel;
pub use aicpu::aicpu_kernel;

/// Default task window: the most tasks one run may submit.
pub const DEFAULT_TASK_WINDOW: u32 = 16384;
