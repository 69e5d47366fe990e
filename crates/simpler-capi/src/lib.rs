//! # simpler-capi — the native C host ABI
//!
//! `libsimpler.so` / `libsimpler.a` and `include/simpler/host.h`: the boundary through
//! which a C or C++ framework embeds the runtime (`docs/c-abi.md`). Everything behind it is
//! simpler-host's Rust API; this crate only converts, validates handles and maps errors —
//! it never re-implements a lane, registry, latch or lifecycle rule.
//!
//! Every entry runs in [`ffi_guard::run`] (a panic becomes `SIMPLER_STATUS_INTERNAL`, a
//! failure sets the thread's last error), checks its pointers, refuses a handle inherited
//! by a forked child from the handle's value before any lock ([`handles`]), then looks the
//! handle up and calls the worker.
//!
//! Modules, by responsibility:
//! - [`types`]: the `#[repr(C)]` mirrors of the header, layouts asserted;
//! - [`status`]: the status codes and the exhaustive [`simpler_host::HostError`] mapping;
//! - [`ffi_guard`]: `catch_unwind` and the per-thread last error;
//! - [`handles`]: the handle encoding and the per-process tables;
//! - [`raw`] and [`host_buffer`]: every read or write of caller memory (the unsafe code);
//! - [`context_table`]: the live contexts and their lookup;
//! - [`context`], [`register`], [`run`], [`replay`], [`memory`], [`sim`], [`library`]: the
//!   entries of `include/simpler/host.h`;
//! - [`domain`]: the collectives domain of `include/simpler/domain.h` (a level-3 worker of
//!   sim chips from simpler-worker, the one piece behind this ABI that is not simpler-host).

pub mod context;
pub mod context_table;
pub mod domain;
pub mod ffi_guard;
pub mod handles;
pub mod host_buffer;
pub mod library;
pub mod memory;
pub mod raw;
pub mod register;
pub mod replay;
pub mod run;
pub mod sim;
pub mod status;
pub mod types;

pub use status::SimplerStatus;
