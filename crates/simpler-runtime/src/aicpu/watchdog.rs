//! The run's two clocks as the schedulers keep them, and the reports they make when one
//! fires (`docs/chip-runtime.md`, the two clocks):
//!
//! - the **no-progress clock** ([`RunShared::stalled_for_ms`]) runs only while nothing is
//!   running; past the scheduler timeout the run fails with SCHEDULER_TIMEOUT and a stall
//!   class — RUNNING_STALLED (dispatches waiting for their deferred completion), READY_IDLE,
//!   DEP_DEADLOCK or ORCH_STARVATION ([`no_progress`]);
//! - the **op-execute clock** of one dispatch runs from the moment it became its core's
//!   running dispatch; past the op-execute timeout the run fails with OP_EXECUTE_TIMEOUT and
//!   the scheduler abandons the core ([`op_execute_overrun`]).
//!
//! Every report names the run's epoch, the clock that fired and its setting, and the task
//! concerned: its submit number, task id, func id and core type (kernels are known to the
//! runtime by func id), plus the core and block for a running dispatch. Reports fit the
//! result record's 256-byte payload.
//!
//! This module only reads the run's state and latches errors; what a scheduler does with a
//! fired clock (stop dispatching, abandon the core) is the scheduler's.

use std::sync::atomic::Ordering;

use simpler_abi::{CoreType, SCHED_OP_EXECUTE_TIMEOUT, SCHED_TIMEOUT};

use super::state::RunShared;
use super::task::{Shape, TaskId};

/// A dispatch that is running on a core, as its scheduler knows it.
pub(crate) struct RunningDispatch {
    pub(crate) task: TaskId,
    /// Lane of the task's kernel (0 AIC, 1 AIV0, 2 AIV1).
    pub(crate) lane: u8,
    pub(crate) block: u32,
    pub(crate) core: u32,
    pub(crate) core_type: CoreType,
    pub(crate) cluster: u32,
    /// Milliseconds it has run so far.
    pub(crate) ran_ms: u64,
}

fn type_name(t: CoreType) -> &'static str {
    match t {
        CoreType::Aic => "aic",
        CoreType::Aiv => "aiv",
    }
}

/// `submit #n (task 0x…, func f aiv)` for task `id`; `lane` picks the kernel (None: the
/// first lane the task uses).
pub(crate) fn describe(shared: &RunShared, id: TaskId, lane: Option<u8>) -> String {
    let body = shared.task(id).body();
    let lane = lane
        .map(usize::from)
        .or_else(|| body.func_ids.iter().position(|&f| f >= 0));
    let kernel = match lane {
        Some(l) if body.func_ids[l] >= 0 => {
            let ty = if l == 0 { "aic" } else { "aiv" };
            format!("func {} {ty}", body.func_ids[l])
        }
        _ => "dummy".to_string(),
    };
    format!("submit #{} (task {id:#x}, {kernel})", body.submit)
}

/// Latches OP_EXECUTE_TIMEOUT for `d` (the first error of the run wins; a later one is
/// not reported).
pub(crate) fn op_execute_overrun(shared: &RunShared, d: &RunningDispatch) {
    shared.errors.sched_fail(SCHED_OP_EXECUTE_TIMEOUT, || {
        let body = shared.task(d.task).body();
        format!(
            "op-execute clock fired ({} ms): run {}, {} block {}/{} on core {} ({} of cluster {}) ran {} ms and did not return; the core is abandoned",
            shared.op_execute_timeout_ms,
            shared.desc.epoch,
            describe(shared, d.task, Some(d.lane)),
            d.block,
            body.block_num,
            d.core,
            type_name(d.core_type),
            d.cluster,
            d.ran_ms,
        )
    });
}

/// The no-progress watchdog: fails the run when nothing has run and nothing progressed for
/// the scheduler timeout while work is left; true if it fired now.
pub(crate) fn no_progress(shared: &RunShared) -> bool {
    let stalled = shared.stalled_for_ms();
    if stalled <= shared.scheduler_timeout_ms || shared.all_done() {
        return false;
    }
    let ready: usize = shared.ready.iter().map(|q| q.len()).sum();
    let waiting =
        shared.submitted.load(Ordering::Acquire) - shared.completed.load(Ordering::Acquire);
    let orch_done = shared.orch_done.load(Ordering::Acquire);
    let deferred = shared.deferred.load(Ordering::Acquire);
    let (class, code, task) = if deferred > 0 {
        // Finished kernels whose engines have not reported: work still in progress.
        ("RUNNING_STALLED", 1, None)
    } else if ready > 0 {
        ("READY_IDLE", 3, first_ready(shared))
    } else if waiting > 0 {
        ("DEP_DEADLOCK", 4, oldest_waiting(shared))
    } else if !orch_done {
        ("ORCH_STARVATION", 5, None)
    } else {
        ("UNKNOWN", 99, None)
    };
    shared.errors.sched_fail(SCHED_TIMEOUT, || {
        let what = match (class, task) {
            (_, Some(t)) => format!(
                "{} is {}",
                describe(shared, t, None),
                if ready > 0 { "ready" } else { "waiting" }
            ),
            ("RUNNING_STALLED", _) => {
                let hint = shared.deferred_task.load(Ordering::Acquire);
                // Short: the run's message holds a few hundred bytes.
                let who = shared
                    .live_task(hint)
                    .filter(|t| !t.completed.load(Ordering::Acquire))
                    .map(|_| describe(shared, hint, None))
                    .unwrap_or_else(|| "a task".to_string());
                let ring = if orch_done {
                    ""
                } else {
                    " (the orchestrator has not returned: a full ring waits for them)"
                };
                format!(
                    "{who} and {} more dispatch(es) wait for deferred completion: a counter \
                     below its value or an SDMA copy not landed{ring}",
                    deferred.saturating_sub(1)
                )
            }
            ("ORCH_STARVATION", _) => format!(
                "the orchestrator has not returned after {} submits",
                shared.submitted.load(Ordering::Acquire)
            ),
            _ => "no task is left".to_string(),
        };
        format!(
            "no-progress clock fired ({} ms): run {}, stall class {class} ({code}): nothing ran for {stalled} ms; {ready} ready, {waiting} not completed; {what}",
            shared.scheduler_timeout_ms, shared.desc.epoch,
        )
    });
    true
}

/// A ready task (taken off its queue and put back: the run is failing, order no longer
/// matters).
fn first_ready(shared: &RunShared) -> Option<TaskId> {
    for shape in [Shape::Mix, Shape::Aic, Shape::Aiv] {
        let q = &shared.ready[shape as usize];
        if let Some(t) = q.pop() {
            q.push(t);
            return Some(t);
        }
    }
    None
}

/// The oldest live task that has not completed, looking at most one window per ring.
fn oldest_waiting(shared: &RunShared) -> Option<TaskId> {
    for (r, ring) in shared.rings.iter().enumerate() {
        let from = ring.last_alive.load(Ordering::Acquire);
        let to = ring.next.load(Ordering::Acquire);
        for local in (0..to.wrapping_sub(from).min(ring.window)).map(|i| from.wrapping_add(i)) {
            let id = (r as u64) << 32 | u64::from(local);
            if shared
                .live_task(id)
                .is_some_and(|t| !t.completed.load(Ordering::Acquire))
            {
                return Some(id);
            }
        }
    }
    None
}
