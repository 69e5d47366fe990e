//! The integration tests of simpler-abi, one test binary: each module checks one C header
//! (or C library) against the Rust contract, by compiling C programs with the system C
//! compiler (`cc`) and running them as child processes; `cc` holds the compiler helpers. The
//! C programs run in processes of their own, so no test needs one; the tests run
//! concurrently on the harness's threads.

mod cc;

mod c_async;
mod c_collectives;
mod c_comm;
mod c_headers;
mod c_helpers;
mod c_queue;
