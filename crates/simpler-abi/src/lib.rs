//! # simpler-abi — the bytes that cross program boundaries
//!
//! Owns every `#[repr(C)]` type that one of simpler's three programs (host, AICPU kernel,
//! AICore kernel) or a user's C code (kernels, orchestration) reads after another wrote it:
//! tensors ([`ChipTensor`]), the kernel argument array ([`KernelArgs`]), the versioned
//! orchestration operations table ([`OrchOps`]), the run launch descriptor
//! ([`RunLaunchDesc`]), the `host_build_graph` graph image ([`GraphImageHeader`]), the
//! device run result record ([`RunResult`]), the run's trace area ([`TraceControl`],
//! [`TraceBufferHeader`], [`TraceRecord`]) and a communication domain's shared region
//! ([`comm`]: its layout — the [`CommWorkspace`] header, one [`CommContext`] per rank, one
//! window per rank — and the kernel-side calls [`comm::peer_ptr`], [`comm::notify`],
//! [`comm::wait`] and [`comm::barrier`] that Rust kernels make on it; `docs/comm.md`), and
//! a dispatch's deferred-completion slab ([`deferred`]: the conditions a kernel registers
//! with [`deferred::wait_counter`] and [`deferred::sdma_copy`]; `docs/chip-runtime.md` §18).
//!
//! Beyond trivial accessors and layout arithmetic, its only logic is those comm and
//! deferred-completion calls:
//! atomic loads, stores and adds on the region, and waits that poll it, spinning, yielding
//! or briefly sleeping the calling thread until a deadline on the monotonic clock. It
//! allocates nothing, starts no threads and does no I/O. Every type here has a size/offset
//! assertion below its definition and a matching `_Static_assert` in `include/simpler/*.h`;
//! `tests/it/c_headers.rs` (for the comm types, `tests/it/c_comm.rs`, which also runs the C and
//! Rust calls side by side) compiles a C file against the headers and compares the numbers,
//! so the two cannot drift apart silently.

pub mod codes;
pub mod comm;
pub mod deferred;
pub mod graph;
pub mod kernel;
pub mod orch;
pub mod region;
pub mod result;
pub mod run;
pub mod tensor;
pub mod trace;

pub use codes::*;
pub use comm::{CommContext, CommWorkspace};
pub use graph::*;
pub use kernel::*;
pub use orch::*;
pub use result::*;
pub use run::*;
pub use tensor::*;
pub use trace::*;

/// Asserts at compile time that `$ty` is `$size` bytes and each named field sits at its
/// offset. Used next to every boundary type; the C headers carry the same numbers.
#[macro_export]
macro_rules! assert_layout {
    ($ty:ty, size = $size:expr $(, $field:ident = $off:expr)* $(,)?) => {
        const _: () = {
            assert!(::core::mem::size_of::<$ty>() == $size);
            $( assert!(::core::mem::offset_of!($ty, $field) == $off); )*
        };
    };
}
