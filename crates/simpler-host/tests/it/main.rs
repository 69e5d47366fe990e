//! The integration tests of simpler-host, one test binary: each module is one area of the
//! chip worker, end to end on the sim device; `common` holds their in-process fixtures.
//!
//! The tests run concurrently on the harness's threads, so none may rely on the whole
//! process being its own: every gate serves one test (`simpler_test_support::gate`), a case
//! that may end its process runs in a child process of this binary
//! (`simpler_test_support::child`), and the tests that watch process-wide state are binaries
//! of their own: `health.rs` (the process's fault monitor and callback slot) and
//! `endurance.rs` (the process's threads, descriptors and memory).

mod common;

mod activation;
mod async_completion;
mod balance;
mod caller_stream;
mod clocks;
mod crash_report;
mod device_memory;
mod flat_graphs;
mod host_build_graph;
mod in_process;
mod lane;
mod lifecycle;
mod proptest_deps;
mod proptest_scopes;
mod runtime_semantics;
mod tracing;
