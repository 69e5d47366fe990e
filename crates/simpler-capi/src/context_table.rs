//! The live contexts of this process: a [`Context`] (its worker and the book of its runs
//! and recordings),
//! the table of them ([`CONTEXTS`]) and the lookups every entry on a context makes
//! ([`context`], [`check_open`]). The entries that make and free contexts are `context`'s,
//! the runs' table is `run`'s; this module must not know a run beyond its handle.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use simpler_host::ChipWorker;

use crate::handles::{HandleKind, ProcessTable};
use crate::status::{Failure, Outcome, SimplerStatus};
use crate::types::SimplerContext;

/// A live context: its worker and the runs and recordings made on it.
pub struct Context {
    /// The worker every entry calls.
    pub worker: ChipWorker,
    /// The runs and recordings made on this context (handles), and its latest launched
    /// run. Held only
    /// briefly, never across a worker call.
    pub book: Mutex<RunBook>,
    /// Serializes the context's launches (held across the worker's submit).
    pub launching: Mutex<()>,
}

/// What a context knows of its runs.
#[derive(Debug, Default)]
pub struct RunBook {
    /// Every run handle made on the context and not finalized.
    pub runs: HashSet<u64>,
    /// The latest launched run not yet finalized (a joined launch's only valid
    /// predecessor).
    pub latest: Option<u64>,
    /// Every recording handle made on the context and not destroyed.
    pub recordings: HashSet<u64>,
}

/// The contexts of this process.
pub static CONTEXTS: ProcessTable<Context> = ProcessTable::new(HandleKind::Context);

/// The context behind `ctx`: refused for a forked child from the value alone, then looked
/// up.
///
/// # Errors
/// `SIMPLER_STATUS_NULL_POINTER`, `SIMPLER_STATUS_FORKED_CHILD` or
/// `SIMPLER_STATUS_INVALID_HANDLE`.
pub fn context(ctx: *mut SimplerContext) -> Result<(u64, Arc<Context>), Failure> {
    if ctx.is_null() {
        return Err(Failure::null("ctx"));
    }
    let handle = ctx as usize as u64;
    Ok((handle, CONTEXTS.get().lookup(handle, "ctx")?))
}

/// The status of a closed worker for entries the worker itself does not refuse after close.
///
/// # Errors
/// `SIMPLER_STATUS_WORKER_CLOSED`, or the state query's own refusal.
pub fn check_open(c: &Context) -> Outcome {
    match c.worker.state()? {
        simpler_host::WorkerState::Open => Ok(()),
        _ => Err(Failure::new(
            SimplerStatus::WorkerClosed,
            "the context was finalized (simpler_context_finalize); only \
             simpler_context_finalize and simpler_context_destroy accept it now",
        )),
    }
}
