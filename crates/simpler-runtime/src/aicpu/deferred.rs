//! Deferred completion on the scheduler side (`docs/chip-runtime.md` §18): a dispatch whose
//! kernel registered conditions in its slab is not counted finished at its FIN; it waits in
//! its scheduler's [`Waiting`] list until every condition holds — a COUNTER's counter has
//! reached its value, an SDMA copy has landed — and only then counts towards its task's
//! completion, so no consumer starts early.
//!
//! This module decides what a slab means (which conditions are valid on this chip, which
//! error fails the run with which message) and whether a condition holds; the scheduler owns
//! the list and when it is polled. It reads device memory only through `devmem`.

use simpler_abi::deferred::*;
use simpler_abi::{SCHED_ASYNC_COMPLETION_INVALID, SCHED_ASYNC_WAIT_OVERFLOW};
use simpler_device::sdma::SdmaEngine;

use super::task::TaskId;
use super::watchdog::describe;
use super::RunShared;
use crate::devmem;

/// One finished dispatch waiting for its conditions.
pub(crate) struct Waiting {
    /// Its task.
    pub(crate) task: TaskId,
    /// The conditions that did not hold yet.
    conditions: Vec<DeferredCondition>,
}

impl Waiting {
    /// Drops the conditions that hold now; true once none is left.
    pub(crate) fn settle(&mut self, sdma: Option<&SdmaEngine>) -> bool {
        let task = self.task;
        self.conditions.retain(|c| !holds(task, c, sdma));
        self.conditions.is_empty()
    }

    /// True if every condition holds now (nothing is dropped).
    pub(crate) fn ready(&self, sdma: Option<&SdmaEngine>) -> bool {
        self.conditions.iter().all(|c| holds(self.task, c, sdma))
    }
}

/// Whether condition `c` of `task`, already checked by [`accept`], holds now.
fn holds(task: TaskId, c: &DeferredCondition, sdma: Option<&SdmaEngine>) -> bool {
    match c.engine {
        ASYNC_ENGINE_COUNTER => {
            // A bad address is the kernel's: a fault here is reported as this task's counter.
            let _read = simpler_device::crash::enter_counter_read(c.addr, task);
            // SAFETY: `accept` let through only non-zero, aligned counters, which the kernel
            // that registered them vouches for until the condition holds (§18).
            unsafe { devmem::read_counter(c.addr, c.flags & COUNTER_32 != 0) >= c.value }
        }
        ASYNC_ENGINE_SDMA => sdma.is_some_and(|e| e.completed() >= c.addr),
        _ => false,
    }
}

/// What the slab of a finished dispatch of `task` on `lane` asks for: `Ok(None)` to count
/// it finished now, `Ok(Some(w))` to wait, or `Err((code, message))` to fail the run.
pub(crate) fn accept(
    shared: &RunShared,
    task: TaskId,
    lane: u8,
    slab: Option<(u32, Vec<DeferredCondition>)>,
    sdma: Option<&SdmaEngine>,
) -> Result<Option<Waiting>, (i32, String)> {
    let Some((error, conditions)) = slab else {
        return Ok(None);
    };
    let who = || describe(shared, task, Some(lane));
    if error != 0 {
        let what = match error as i32 {
            SCHED_ASYNC_WAIT_OVERFLOW => format!(
                "registered more than {MAX_DEFERRED_CONDITIONS} deferred-completion conditions"
            ),
            simpler_abi::SCHED_ASYNC_REGISTRATION_FAILED => {
                "had an SDMA copy refused (a null address, zero bytes or an injected fault)"
                    .to_string()
            }
            other => format!("reported deferred-completion error {other}"),
        };
        return Err((error as i32, format!("{} {what}", who())));
    }
    for (i, c) in conditions.iter().enumerate() {
        let invalid = |why: String| {
            Err((
                SCHED_ASYNC_COMPLETION_INVALID,
                format!("{} deferred-completion condition {i}: {why}", who()),
            ))
        };
        match c.engine {
            ASYNC_ENGINE_COUNTER => {
                let (bytes, ty) = if c.flags & COUNTER_32 != 0 {
                    (4, "u32")
                } else {
                    (8, "u64")
                };
                if c.addr == 0 || !c.addr.is_multiple_of(bytes) {
                    return invalid(format!(
                        "COUNTER address {:#x} is not a non-null, {bytes}-byte aligned {ty}",
                        c.addr
                    ));
                }
                if c.flags & !COUNTER_32 != 0 || (bytes == 4 && c.value > u64::from(u32::MAX)) {
                    return invalid(format!(
                        "COUNTER flags {:#x} / value {} are not a u64 or u32 counter's",
                        c.flags, c.value
                    ));
                }
            }
            ASYNC_ENGINE_SDMA => match sdma {
                None => {
                    return invalid(
                        "this chip has no SDMA engine (start the worker with enable_sdma=True)"
                            .to_string(),
                    );
                }
                Some(e) if c.addr == 0 || c.addr > e.submitted() => {
                    return invalid(format!(
                        "{} is not an SDMA ticket the engine issued",
                        c.addr
                    ));
                }
                Some(_) => {}
            },
            other => {
                let name = engine_name(other)
                    .map(|n| format!("engine {n} ({other})"))
                    .unwrap_or_else(|| format!("unknown engine kind {other}"));
                return invalid(format!("{name} does not exist on the sim chip"));
            }
        }
    }
    Ok(Some(Waiting { task, conditions }))
}
