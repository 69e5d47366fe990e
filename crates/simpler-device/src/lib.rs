//! # simpler-device — the platform layer (HAL)
//!
//! Owns the [`Device`] trait (device memory, streams, events, the launch of the two kernels
//! of a run, fault notices, reset — its contract is on the trait), the handles it issues
//! ([`DevicePtr`], [`StreamId`], [`EventId`]), the kernel calling contract ([`AicoreKernel`],
//! [`AicpuKernel`]), the per-core handshake registers ([`CoreRegs`]) and idle parking
//! ([`Doorbell`]) that both kernels use, the sim backend ([`sim::SimDevice`]) that plays
//! an Ascend-style chip with host threads (`docs/sim-device.md`), the executors that run its
//! device threads — fibers on one shared pool, or a thread each (`exec`, and [`wait`]: how
//! device code waits; `docs/sim-device.md` §11) — and the crash reports of
//! its device threads ([`crash`]: what a thread runs, as the runtime records it, and the
//! signal handlers that print it), the clocks traces are stamped with ([`clock`]), and the
//! sim's asynchronous copy engine ([`sdma`]).
//!
//! It must not know about runs, task graphs or callables: those belong to `simpler-runtime`
//! (what runs on the device) and `simpler-host` (what drives it), neither of which it
//! depends on. The device treats the kernels it launches as opaque functions and the memory
//! it hands out as opaque bytes; only a crash report looks further, at the numbers the
//! runtime recorded for the call that crashed (and that call's tensor arguments).

mod activation;
pub mod clock;
pub mod crash;
pub mod deadline;
mod device;
mod error;
mod exec;
mod handle;
mod kernel;
mod regs;
pub mod sdma;
pub mod sim;
mod sync;
mod topology;
pub mod wait;

pub use device::{Device, EventStatus, FaultCallback, FaultNotice};
pub use error::DeviceError;
pub use handle::{DevicePtr, EventId, StreamId};
pub use kernel::{AicoreContext, AicoreKernel, AicpuContext, AicpuKernel};
pub use regs::{is_reset_unwind, CoreRegs, Doorbell};
pub use topology::Topology;
