//! # simpler-runtime — what runs on the chip
//!
//! The two runtime variants as two device kernels, launched by the host for every run
//! (`docs/chip-runtime.md`): `tensormap_and_ringbuffer`, whose orchestration runs on an
//! AICPU thread while its graph is scheduled, and `host_build_graph`, whose orchestration
//! the host runs first ([`hbg`]) and whose graph image every AICPU thread then schedules:
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
//! register file; it must not know host types, and depends on nothing above
//! `simpler-device`.
//!
//! Its `unsafe` code lives in four places: `devmem` (every access to device memory by
//! address — the trace buffers `trace` records into included — and the call of the
//! kernel a dispatch names), `aicpu::handoff` (the run's shared state handed between its
//! AICPU threads as a raw `Arc` pointer in the state word), `aicpu::ops` (the C boundary of
//! the orchestration: its entry call and the callbacks it makes) and the task slot's body
//! cell in `aicpu::task` (written by the orchestrator alone while the slot is free).
//!
//! ## Launch argument contract
//!
//! Both kernels are `unsafe fn`s: they dereference their argument. Their caller (the host,
//! through the device's launch, by the launch contract of `docs/lane.md`) guarantees
//! that `arg` is null or the address of an 8-byte aligned
//! [`RunLaunchDesc`](simpler_abi::RunLaunchDesc) written before the launch, and that from
//! the launch until both kernels of the run have finished:
//!
//! - the descriptor and everything it names stay allocated and are written by nobody but
//!   the two kernels: the [`RunResult`](simpler_abi::RunResult) at `result_addr`, the
//!   [`OrchArgs`](simpler_abi::OrchArgs) at `orch_args_addr`, the two function tables of
//!   `func_count` entries, the heap of `heap_size` bytes at `heap_addr`, one
//!   [`CoreMailbox`](simpler_abi::CoreMailbox) per AICore of the device at
//!   `core_mailbox_addr`, the zeroed 8-byte word at `runtime_state_addr`, which no other
//!   run in flight shares, and, when `trace_addr` is non-zero, the trace area there
//!   ([`TraceControl`](simpler_abi::TraceControl) and `buffer_count` buffers of
//!   `capacity` records, one per core then one per AICPU thread);
//! - `orch_entry` is 0 or an [`OrchEntry`](simpler_abi::OrchEntry) that keeps its
//!   contract, and every non-zero entry of the kernel table is a
//!   [`KernelEntry`](simpler_abi::KernelEntry) that keeps its contract;
//! - the tensors the orchestration names lie in device memory of this run;
//! - both kernels are launched with the same `arg` and run concurrently, the AICore kernel
//!   on every core of the device and the AICPU kernel on at least 2 AICPU threads.

pub mod aicore;
pub mod aicpu;
mod devmem;
pub mod handshake;
pub mod hbg;
mod panics;
mod trace;

pub use aicore::aicore_kernel;
pub use aicpu::aicpu_kernel;

/// Default task window: task slots per ring, the most tasks of one ring alive at once.
pub const DEFAULT_TASK_WINDOW: u32 = 16384;
