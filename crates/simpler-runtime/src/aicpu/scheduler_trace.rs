//! The scheduler's trace points that need more than one line (`docs/tracing.md`,
//! Capture): idle runs, placing phases with their counter samples, and handshake instants.

use simpler_abi::*;

use super::super::task::{Shape, TaskId};
use super::Scheduler;
use crate::trace::{self, NONE32, NONE64};

impl Scheduler<'_, '_> {
    /// Level scheduler: ends a run of idle passes begun at `since` (if any).
    pub(super) fn end_idle(&mut self, since: &mut Option<u64>) {
        if let (Some(t), Some(t0)) = (self.tracer.as_mut(), since.take()) {
            t.phase(TRACE_PHASE_SCHED_IDLE, NONE64, NONE32, t0);
        }
    }

    /// Level scheduler: a placing phase from `t0` to now, then the ready-queue depths and
    /// the rings' live tasks that changed since this thread last sampled them, all stamped
    /// with the phase's end (one clock reading).
    pub(super) fn record_place(&mut self, t0: u64) {
        let Some(t) = self.tracer.as_mut() else {
            return;
        };
        let now = t.now();
        t.push(
            TRACE_AICPU,
            [TRACE_PHASE_SCHED_PLACE, NONE32, 0],
            NONE64,
            t0,
            now,
        );
        for (q, counter) in [
            (Shape::Aic, TRACE_COUNTER_READY_AIC),
            (Shape::Aiv, TRACE_COUNTER_READY_AIV),
            (Shape::Mix, TRACE_COUNTER_READY_MIX),
        ] {
            t.sample(counter, self.shared.ready[q as usize].len() as i64, now);
        }
        for (r, ring) in self.shared.rings.iter().enumerate() {
            t.sample(TRACE_COUNTER_RING0 + r as u32, i64::from(ring.alive()), now);
        }
    }

    /// Level dispatch: an instant `phase` for `sub` on core `core` (an index into `cores`).
    pub(super) fn instant(&mut self, phase: u32, core: usize, task: TaskId) {
        let id = self.cores[core].id;
        if let Some(t) = trace::at(&mut self.tracer, TRACE_LEVEL_DISPATCH) {
            let now = t.now();
            t.push(TRACE_AICPU, [phase, id, 0], task, now, now);
        }
    }
}
