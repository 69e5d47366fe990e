//! The integration tests of simpler-device, one test binary: each module is one area of the
//! sim device as its users see it.
//!
//! The tests run concurrently on the harness's threads, so none may rely on the whole
//! process being its own: a case that crashes, or a test that counts the process's threads,
//! runs alone in a child process of this binary (`simpler_test_support::child`), and the
//! tests that fork, install the process's exception callback or measure its pool are
//! binaries of their own (`sim_fork.rs`, `sim_notices.rs`, `sim_executor_faults.rs`,
//! `sim_pool_threads.rs`).

mod crash_report;
mod sim_device;
mod sim_executor;
mod stuck_thread;
