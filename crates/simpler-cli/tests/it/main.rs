//! The integration tests of the `simpler` binary and of simpler-cli, one test binary: each
//! module is one command or area, `common` holds their helpers. Every case that may crash or
//! hang runs `simpler` as a child process, so no test needs a process of its own; the tests
//! run concurrently on the harness's threads.

mod common;

mod bench;
mod cli;
mod crash;
mod examples;
mod flagship;
mod hung;
mod oversubscription;
mod sdma;
mod trace;
