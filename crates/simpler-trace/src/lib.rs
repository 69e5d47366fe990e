//! The trace of a simpler run: the model every recorder fills and every tool reads.
//!
//! Owns the in-memory trace model ([`model`]) and the code that turns it into files and
//! figures. Depends on nothing of the runtime or the host: the capture side (simpler-host,
//! simpler-worker) builds a [`Trace`], this crate only reads and writes it. See
//! `docs/tracing.md`.

pub mod model;

pub use model::*;
