//! The scheduler's half of deferred completion (`docs/chip-runtime.md` §18): taking a
//! finished dispatch's conditions into the waiting list, counting the dispatches whose
//! conditions now hold, and, at the end of the run, dropping what still waits and letting
//! the SDMA engine land its copies. What a slab means is [`super::super::deferred`]'s.

use std::sync::atomic::Ordering;

use super::super::deferred;
use super::{Scheduler, Sub, PARK_SLICE};

impl Scheduler<'_, '_> {
    /// The slab of dispatch `sub`, just finished on core `core` without a fatal code: true
    /// if the dispatch now waits for its conditions (it is not counted yet). A bad slab
    /// fails the run (first error wins) and the dispatch is counted as usual.
    pub(super) fn defer(&mut self, core: usize, sub: Sub) -> bool {
        let shared = self.shared;
        let slab = shared.mem.mailbox(self.cores[core].id).deferred(sub.id);
        match deferred::accept(shared, sub.task, sub.lane, slab, self.sdma) {
            Ok(None) => false,
            Ok(Some(w)) => {
                shared.deferred_task.store(sub.task, Ordering::Release);
                shared.deferred.fetch_add(1, Ordering::AcqRel);
                self.waiting.push(w);
                true
            }
            Err((code, message)) => {
                shared.errors.sched_fail(code, || message);
                false
            }
        }
    }

    /// Counts every waiting dispatch whose conditions all hold now; true if any.
    pub(super) fn settle_deferred(&mut self) -> bool {
        // No allocation: settled entries are swapped out in place (order does not matter).
        let mut any = false;
        let mut i = 0;
        while i < self.waiting.len() {
            if !self.waiting[i].settle(self.sdma) {
                i += 1;
                continue;
            }
            let task = self.waiting.swap_remove(i).task;
            self.shared.progress();
            self.shared.deferred.fetch_sub(1, Ordering::AcqRel);
            self.count_subtask(task);
            any = true;
        }
        any
    }

    /// Forgets the waiting dispatches (the run failed: they will never be counted).
    pub(super) fn drop_waiting(&mut self) {
        let n = self.waiting.len() as u32;
        self.waiting.clear();
        self.shared.deferred.fetch_sub(n, Ordering::AcqRel);
    }

    /// Waits until the SDMA engine has landed every copy (each landing rings this thread).
    pub(super) fn wait_for_copies(&self) {
        let Some(e) = self.sdma else { return };
        while e.in_flight() > 0 {
            self.ctx.doorbell.prepare_park();
            if e.in_flight() == 0 {
                self.ctx.doorbell.cancel_park();
                break;
            }
            self.ctx.park(PARK_SLICE);
        }
    }
}
