//! Teardown: `close()` (drain, then free everything provably free), the drop of an unclosed
//! worker (detach what is still on the device), the recovery of admission through a
//! confirmed forced reset, and the retention of everything a run given up on may still
//! touch (`docs/health.md` §4, §7; `docs/lane.md` §11).
//!
//! An owned lane proves an unusable device free by a confirmed forced reset; a borrowed one
//! never resets the device: it can only synchronize its bound streams, and the caller owns
//! recovery. What cannot be proven free is kept and named, and a later `close()` retries.
//!
//! A forced reset waits for running kernels at most the run timeout — or only
//! [`LEFT_RUNNING_RESET_WAIT`] once a run was given up on with a kernel still running past
//! its op-execute timeout (it has had its time; on the sim, code that never reaches a
//! register wait cannot be stopped), so that close, drop and recovery answer promptly
//! whatever device threads are still stuck.

use std::time::Duration;

use crate::fault_monitor::FaultMonitor;
use crate::join;
use crate::lifecycle::{close_step, CloseStep, Ownership, WorkerState};
use crate::{caller_stream, HostError};

use super::driver::{sync_streams, Driver};
use super::handle::LaneHandle;
use super::queue::Phase;
use super::run::{RunState, Stage};
use super::{Guard, LaneEngine, Progress};

/// How long a forced reset waits for a kernel that was left running past its op-execute
/// timeout.
pub(super) const LEFT_RUNNING_RESET_WAIT: Duration = Duration::from_secs(1);

impl LaneHandle {
    /// `close()` (the caller checked identity and context first): claims CLOSED, drains the
    /// lane — unlaunched runs end with [`HostError::WorkerClosed`], launched runs are
    /// drained — and cleans up. A cleanup that cannot prove everything free keeps what it
    /// could not free and stays owed; the next `close()` retries it.
    ///
    /// # Errors
    /// [`HostError::CleanupIncomplete`] naming what was kept.
    pub(crate) fn close(&self) -> Result<(), HostError> {
        let mut lane = self.lock();
        match close_step(lane.state) {
            CloseStep::Nothing => return Ok(()),
            CloseStep::CloseAndCleanUp => {
                lane.state = WorkerState::Closed { debt: true };
                self.set_closed();
                self.drain_for_close(&mut lane);
            }
            CloseStep::RetryCleanup => {}
        }
        let r = lane.teardown();
        lane.release_monitor();
        lane.state = WorkerState::Closed { debt: r.is_err() };
        if let Err(why) = &r {
            tracing::error!(why = %why, "close(): cleanup incomplete; close() again retries it");
        }
        r.map_err(HostError::CleanupIncomplete)
    }

    fn drain_for_close(&self, lane: &mut Guard<'_>) {
        loop {
            while lane.driving {
                self.wait_for_progress(lane);
            }
            for (_, run) in lane.queue.poison() {
                lane.end_unlaunched(run, HostError::WorkerClosed);
            }
            self.notify_progress();
            if lane.queue.is_empty() {
                break;
            }
            let _ = self.drive_once(lane, None);
        }
    }

    /// Dropping a worker that was not closed: what can be finalized without waiting is; runs
    /// not launched end with [`HostError::Detached`]; runs still on the device are detached —
    /// their handles end with `Detached` and everything they may still touch (staging, slot,
    /// events, streams) is kept. Only when nothing was detached is the lane torn down (after
    /// a forced reset when an owned device is unusable). A worker closed with cleanup debt
    /// retries it.
    pub(crate) fn detach(&self) {
        let mut lane = self.lock();
        match lane.state {
            WorkerState::Closed { debt: true } => {
                if lane.teardown().is_ok() {
                    lane.state = WorkerState::Closed { debt: false };
                }
                return;
            }
            WorkerState::Closed { debt: false } | WorkerState::Detached => return,
            WorkerState::Open => {}
        }
        lane.state = WorkerState::Detached;
        self.set_closed();
        while lane.driving {
            self.wait_for_progress(&mut lane);
        }
        while Driver::new(&mut lane, false).finalize_front(None) == Progress::Finalized {}
        for (_, run) in lane.queue.poison() {
            lane.end_unlaunched(
                run,
                HostError::Detached(
                    "the worker was dropped without close() before the run launched".into(),
                ),
            );
        }
        let mut detached = 0usize;
        while let Some(front) = lane.queue.front() {
            lane.queue.advance(front, Phase::Terminal).expect("front");
            let (_, mut run) = lane.queue.pop_terminal_front().expect("terminal front");
            lane.retain_run(&mut run);
            let args = std::mem::take(&mut run.request.args);
            run.request.cell.finish(
                Err(HostError::Detached(
                    "the worker was dropped without close() while the run was on the device; \
                     its device resources are kept"
                        .into(),
                )),
                args,
            );
            detached += 1;
        }
        self.notify_progress();
        if detached > 0 {
            tracing::warn!(
                detached,
                "a worker was dropped without close() with runs on the device; their resources are kept"
            );
            lane.mark_unusable(|| "runs were detached when the worker was dropped".into());
        } else if let Err(why) = lane.teardown() {
            tracing::error!(why = %why, "dropping the worker: cleanup incomplete; resources kept");
        }
        lane.release_monitor();
    }

    /// Restores admission through a confirmed forced reset (owned workers, no run
    /// outstanding), then frees what the lane had to keep.
    ///
    /// # Errors
    /// [`HostError::WorkerClosed`], [`HostError::InvalidState`] for a borrowed worker or
    /// with runs outstanding, a device error when the reset is not confirmed (admission
    /// stays closed).
    pub(crate) fn recover_device(&self) -> Result<(), HostError> {
        let mut lane = self.lock();
        if lane.is_closed() {
            return Err(HostError::WorkerClosed);
        }
        if lane.ownership == Ownership::Borrowed {
            return Err(HostError::InvalidState(
                "a borrowed worker never resets the device: the caller owns device recovery".into(),
            ));
        }
        while lane.driving {
            self.wait_for_progress(&mut lane);
        }
        if lane.outstanding() > 0 {
            return Err(HostError::InvalidState(format!(
                "{} run(s) are outstanding; finish them before recovering the device",
                lane.outstanding()
            )));
        }
        lane.device
            .reset(lane.reset_wait())
            .map_err(HostError::device(
                "the forced device reset (admission stays closed)",
            ))?;
        lane.after_confirmed_reset();
        let device = lane.device.clone();
        lane.quarantine.retain(|p| device.free(*p).is_err());
        lane.retained_args.clear();
        lane.retained_graphs.clear();
        Ok(())
    }
}

impl LaneEngine {
    /// Keeps everything a run given up on may still have the device touch: its staging, its
    /// slot, its join and caller-order references, and the device memory its tensors cover
    /// (refused frees).
    pub(super) fn retain_run(&mut self, run: &mut RunState) {
        if let Some((image, _)) = run.request.graph_image.take() {
            self.retained_graphs.push(image);
        }
        let device_ranges = std::mem::take(&mut run.request.device_ranges);
        if !device_ranges.is_empty() && matches!(run.stage, Stage::Launched(_)) {
            self.retained_device_ranges.push(device_ranges);
        }
        match std::mem::replace(&mut run.stage, Stage::Queued) {
            Stage::Launched(launched) => {
                self.quarantine
                    .extend(launched.staging.iter().flatten().map(|b| b.ptr));
                let slot = &mut self.slots[launched.identity.slot as usize];
                slot.quarantined = true;
                if let Some(order) = launched.order {
                    self.stale_orders.push((slot.fence.clone(), order));
                }
                if let Some(j) = launched.join {
                    self.stale_joins.push(j);
                }
            }
            Stage::Prepared(prepared) => {
                self.quarantine
                    .extend(prepared.staging.iter().flatten().map(|b| b.ptr));
                self.slots[prepared.identity.slot as usize].quarantined = true;
            }
            Stage::Queued | Stage::Failed(_) => {}
        }
    }

    /// How long a forced reset of this lane (or a borrowed lane's teardown synchronize)
    /// waits for running kernels.
    fn reset_wait(&self) -> Duration {
        if self.kernels_left_running {
            self.config.run_timeout.min(LEFT_RUNNING_RESET_WAIT)
        } else {
            self.config.run_timeout
        }
    }

    /// Drops the lane's reference on the process's fault monitor (once).
    pub(super) fn release_monitor(&mut self) {
        if self.cursor.take().is_some() {
            if let Err(e) = FaultMonitor::global().release(&*self.device) {
                tracing::warn!(error = %e, "uninstalling the fault callback failed");
            }
        }
    }

    /// Frees every lane resource that is provably free; keeps the rest and names it. An
    /// unusable lane first needs its proof: a confirmed forced reset (owned), or a bounded
    /// synchronize of every bound stream (borrowed: never a device-wide reset).
    fn teardown(&mut self) -> Result<(), String> {
        if self.unusable.is_some() {
            match self.ownership {
                Ownership::Owned => match self.device.reset(self.reset_wait()) {
                    Ok(()) => self.after_confirmed_reset(),
                    Err(e) => {
                        return Err(format!(
                            "the forced reset was not confirmed ({e}); device memory is left \
                             allocated"
                        ))
                    }
                },
                Ownership::Borrowed => {
                    if !self.prove_bound_streams_quiescent() {
                        return Err("the borrowed device's bound streams could not be proven \
                                    quiescent; the caller owns device recovery"
                            .into());
                    }
                }
            }
        }
        let device = self.device.clone();
        let mut kept = Vec::new();
        self.quarantine.retain(|p| device.free(*p).is_err());
        if !self.quarantine.is_empty() {
            kept.push(format!("{} staging buffers", self.quarantine.len()));
        }
        for s in self.slots.iter_mut() {
            if !s.release(&device) {
                kept.push(format!("slot {} resources", s.index));
            }
        }
        if !self.resources.release(&device) {
            kept.push("the stream pair or the output heap".into());
        }
        self.retained_args.clear();
        self.retained_graphs.clear();
        if kept.is_empty() {
            Ok(())
        } else {
            Err(format!("could not free {}", kept.join(", ")))
        }
    }

    /// After a confirmed forced reset: the device holds no reference any more. Fences are
    /// abandoned and their stale tokens discarded, slots and admission reopen, the record
    /// ledger forgets, and the health generation is retired — first, unconditionally —
    /// before the fault callback is reinstalled and the notice cursor skipped to now.
    fn after_confirmed_reset(&mut self) {
        self.health.retire_after_confirmed_reset();
        for s in self.slots.iter_mut() {
            s.fence.abandon();
            s.quarantined = false;
            s.occupant = None;
        }
        for mut j in self.stale_joins.drain(..) {
            for r in j.refs.iter_mut().filter(|r| !r.is_empty()) {
                let _ = j.pred_fence.discard_stale_wait_reference(r);
            }
        }
        for (fence, mut o) in self.stale_orders.drain(..) {
            for r in [&mut o.own_wait, &mut o.caller_wait] {
                if !r.is_empty() {
                    let _ = fence.discard_stale_wait_reference(r);
                }
            }
        }
        self.retained_device_ranges.clear();
        self.unusable = None;
        self.kernels_left_running = false;
        self.queue.clear_poison();
        self.ledger.reset();
        if let Some(c) = self.cursor.as_mut() {
            let m = FaultMonitor::global();
            if let Err(e) = m.reinstall_after_device_reset(&*self.device) {
                tracing::warn!(error = %e, "reinstalling the fault callback after a reset failed");
            }
            c.skip_to_current(m.ring());
        }
    }

    /// Borrowed teardown: a bounded synchronize of the private pair and of every caller
    /// stream a kept run was bound to. Success releases the kept references on quiescence
    /// and reopens the slots; failure keeps everything.
    fn prove_bound_streams_quiescent(&mut self) -> bool {
        let mut streams = self.resources.streams.both().to_vec();
        streams.extend(self.stale_orders.iter().map(|(_, o)| o.caller));
        let ps = sync_streams(&*self.device, &streams, self.reset_wait());
        if !ps.quiescent {
            return false;
        }
        for j in self.stale_joins.iter_mut() {
            join::discharge_on_quiescence(j);
        }
        self.stale_joins.clear();
        for (fence, o) in self.stale_orders.iter_mut() {
            caller_stream::discharge_on_quiescence(fence, o);
        }
        self.stale_orders.clear();
        self.retained_device_ranges.clear();
        for s in self.slots.iter_mut() {
            if s.quarantined && s.fence.references() == 0 {
                s.fence.abandon();
                s.quarantined = false;
                s.occupant = None;
            }
        }
        self.unusable = None;
        true
    }
}
