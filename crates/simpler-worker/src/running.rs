//! What an initialized worker holds — its engine, lane threads, its children's
//! kill switches — and how `close` ends it: wait for the runs in flight (killing the child
//! processes still running tasks once the close timeout has passed), free the child tensors
//! left, shut every endpoint down and join every thread (`docs/l3-worker.md` §1, §5).
//!
//! The worker's life (when close may run, from which thread) is `crate::worker`'s; this module
//! only takes a running worker down.

use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crate::endpoint::KillSwitch;
use crate::engine::Engine;
use crate::lane::WorkItem;
use crate::WorkerError;

/// The threads and channels of an initialized worker.
pub(crate) struct Running {
    /// The engine the lanes and the orchestrators share.
    pub(crate) engine: Arc<Engine>,
    /// The thread that called `init` (the only one `close` is taken from).
    pub(crate) init_thread: ThreadId,
    /// The lane threads, in lane order.
    pub(crate) lanes: Vec<JoinHandle<()>>,
    /// The child processes: (endpoint, pid).
    pub(crate) pids: Vec<(String, u32)>,
    /// Each lane's endpoint's kill switch (child processes have one).
    pub(crate) kill: Vec<Option<KillSwitch>>,
    /// `close()` waits this long for the runs in flight before it trips `kill`.
    pub(crate) close_timeout: Duration,
}

/// How often `close()` trips again the kill switches of lanes still busy once its
/// `close_timeout` has passed (a task dispatched just as the switch was tripped is killed
/// by the next trip).
const KILL_AGAIN: Duration = Duration::from_millis(500);

/// Waits for the runs in flight (killing the child processes still busy after the close
/// timeout), frees child tensors, stops the lanes.
pub(crate) fn shut_down(r: Running) -> Result<(), WorkerError> {
    let engine = r.engine;
    {
        let mut st = engine.state.lock();
        st.closing = true;
        engine.changed.notify_all();
        let mut deadline = Instant::now().checked_add(r.close_timeout);
        while !st.runs.is_empty() {
            let Some(d) = deadline else {
                engine.changed.wait(&mut st);
                continue;
            };
            if !engine.changed.wait_until(&mut st, d).timed_out() || st.runs.is_empty() {
                continue;
            }
            let reason = format!(
                "close() found its task still running after close_timeout ({:?})",
                r.close_timeout
            );
            // Collectives still waiting (also on chips in this process, which cannot be
            // killed) give up at their next poll (`docs/comm.md` §5).
            crate::comm::abort_all(&st);
            for (lane, slot) in st.lanes.iter().enumerate() {
                if let (true, None, Some(kill)) = (slot.busy(), &slot.dead, &r.kill[lane]) {
                    tracing::warn!(endpoint = %slot.describe, "close() kills a busy child process");
                    kill.trip(&reason);
                }
            }
            deadline = Instant::now().checked_add(KILL_AGAIN);
        }
    }
    let mut first = crate::child_memory::free_all(&engine);
    let stopped = stop_lanes(&engine.lanes, r.lanes);
    if first.is_ok() {
        first = stopped;
    }
    first
}

/// Shuts every lane's endpoint down and joins the lane threads; the first error.
pub(crate) fn stop_lanes(
    senders: &[crossbeam_channel::Sender<WorkItem>],
    threads: Vec<JoinHandle<()>>,
) -> Result<(), WorkerError> {
    let mut first = Ok(());
    let replies: Vec<_> = senders
        .iter()
        .map(|tx| {
            let (rtx, rrx) = crossbeam_channel::bounded(1);
            let _ = tx.send(WorkItem::Shutdown { reply: rtx });
            rrx
        })
        .collect();
    for rx in replies {
        if let Ok(Err(e)) = rx.recv() {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    for t in threads {
        if t.join().is_err() && first.is_ok() {
            first = Err(WorkerError::InvalidState("a lane thread panicked".into()));
        }
    }
    first
}
