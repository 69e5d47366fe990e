//! Fixtures shared by the integration tests of several simpler crates, used only as a
//! dev-dependency (never by a library or binary).
//!
//! Owns what more than one crate's tests need: in-process kernels over f32 tensors
//! ([`kernel`]), gates that hold such kernels back until a test opens them ([`gate`]), the C
//! sources of small crashing kernels and their example manifest ([`c_sources`]), small whole
//! examples and how to write them into a folder ([`examples`]), running one
//! test of the current test binary alone in a child process ([`child`]), paths that are not
//! regular files ([`files`]), and bounded polling
//! ([`eventually`]). Helpers only one crate's tests use stay in that crate's `tests/it/`.
//! Depends on `simpler-abi` alone and must stay below `simpler-device`: the device crate's
//! own tests use it, and a fixture built on the runtime's types belongs to that crate's tests.

pub mod c_sources;
pub mod child;
pub mod examples;
pub mod files;
pub mod gate;
pub mod kernel;

use std::time::{Duration, Instant};

/// Waits until `f` holds, polling every millisecond; panics naming `what` after 20 s.
pub fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
