//! # simpler-abi — the bytes that cross program boundaries
//!
//! Owns every `#[repr(C)]` type that one of simpler's three programs (host, AICPU kernel,
//! AICore kernel) or a user's C code (kernels, orchestration) reads after another wrote it:
//! tensors ([`ChipTensor`]), the kernel argument array ([`KernelArgs`]), the versioned
//! orchestration operations table ([`OrchOps`]), the run launch descriptor
//! ([`RunLaunchDesc`]), the `host_build_graph` graph image ([`GraphImageHeader`]), the device run result record ([`RunResult`]) and the run's trace area
//! ([`TraceControl`], [`TraceBufferHeader`], [`TraceRecord`]).
//!
//! It must not hold logic beyond trivial accessors: no allocation, no threads, no I/O.
//! Every type here has a size/offset assertion below its definition and a matching
//! `_Static_assert` in `include/simpler/*.h`; `tests/c_headers.rs` compiles a C file against
//! the headers and compares the numbers, so the two cannot drift apart silently.

pub mod codes;
pub mod graph;
pub mod kernel;
pub mod orch;
pub mod result;
pub mod run;
pub mod tensor;
pub mod trace;

pub use codes::*;
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
