//! The integration tests of simpler-worker, one test binary: each module is one area of the
//! level-3 worker, `common` holds the in-process fixtures and `process_common` those of the
//! tests with chips or sub workers in child processes.
//!
//! The tests run concurrently on the harness's threads, so none may rely on the whole
//! process being its own: the tests that start child processes hold `process_common::serial`
//! (they count this process's children), a test that counts the process's descriptors or
//! threads, or needs an environment variable set, runs alone in a child process of this
//! binary (`simpler_test_support::child`), and the endurance runs are binaries of their own
//! (`endurance.rs`, `endurance_process.rs`).

mod common;
mod process_common;

mod batches;
mod chips;
mod comm;
mod errors;
mod isolated;
mod l3_adversarial;
mod ordering;
mod process_chip;
mod process_engine;
mod process_sub;
mod ring_scopes;
mod tracing;
