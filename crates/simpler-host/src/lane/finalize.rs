//! Finalize: [`Driver::finalize_front`], which takes the front run to its end one named step
//! at a time — completion and verdict (`drain`), then caller discharge, successor discharge,
//! retirement and copy back (here) — and [`LaneEngine::give_up`], the end of a run nothing
//! proves quiescent (`docs/lane.md` §10, §11).
//!
//! A blocking driver waits on the device with the lane lock released; a non-blocking one (a
//! poll, holding a try-locked guard) answers WouldBlock from any step that would wait, before
//! anything is mutated (the fence's cached completion and the record ledger are
//! idempotent). Only the front run is finalized, and nothing is freed that its proofs do not
//! cover.

use std::time::{Duration, Instant};

use parking_lot::MutexGuard;
use simpler_device::Device;

use crate::args::OwnedArg;
use crate::caller_stream::{self, CallerOrder, TailStatus};
use crate::fence::Completion;
use crate::identity::RunIdentity;
use crate::join::{self, JoinRefs};
use crate::signature::Signature;
use crate::HostError;

use super::drain::Verdict;
use super::driver::{BoundStreams, Driver, Front, Step};
use super::queue::Phase;
use super::run::{LaunchedRun, RunRequest, RunState, Stage};
use super::staging::StagedArgs;
use super::{LaneEngine, Progress, RunReport};
use crate::trace::RunCapture;

impl Driver<'_, '_> {
    /// Finalizes the front run if it can be: Finalized when it was made terminal (its own
    /// outcome, or given up on), WouldBlock when it is not launched or a step would wait
    /// without `blocking`, UserTimeout when `user_deadline` passed first.
    pub(super) fn finalize_front(&mut self, user_deadline: Option<Instant>) -> Progress {
        let Some(front) = self.lane.launched_front() else {
            return Progress::WouldBlock; // unlaunched: the pump's business
        };
        match self.finalize(&front, user_deadline) {
            Ok(()) => Progress::Finalized,
            Err(stop) => stop,
        }
    }

    fn finalize(&mut self, front: &Front, user_deadline: Option<Instant>) -> Step<()> {
        let boundaries = self.completion(front, user_deadline)?;
        let epoch = front.identity.epoch;
        let capture = self.lane.capture_of(front.dispatch);
        let mut read_start = capture.and_then(|c| {
            c.waited(epoch);
            c.now()
        });
        let successor = self.lane.joined_successor(&front.identity);
        let streams = self.lane.bound_streams(front.dispatch);
        if !self.blocking {
            self.ready_without_blocking(front, boundaries, successor, &streams)?;
        }
        let verdict = self.verdict(front, boundaries, &streams, user_deadline)?;
        let finalize_start = self.lane.capture_of(front.dispatch).and_then(|c| {
            c.span("record read", epoch, read_start.take());
            c.now()
        });
        // Health: the notices delivered so far are consumed now, after the verdict (a notice
        // never decides a run).
        self.lane.consume_notices();
        self.discharge_caller(front, boundaries, &verdict, &streams)?;
        self.discharge_successor(successor, &streams)?;
        self.retire(front)?;
        self.lane.copy_back_and_end(front, verdict, finalize_start);
        Ok(())
    }

    /// Caller discharge: the caller order's references on this run's fence. The AICPU
    /// stream's own wait is proven by the completed `cpu_done`, the caller's wait by Tail
    /// (waited for, bounded); otherwise only quiescence of every bound stream releases them.
    fn discharge_caller(
        &mut self,
        front: &Front,
        boundaries: Completion,
        verdict: &Verdict,
        streams: &BoundStreams,
    ) -> Step<()> {
        let Some(mut order) = self.lane.take_order(front.dispatch) else {
            return Ok(());
        };
        let synced = verdict.sync.as_ref().is_some_and(|s| s.quiescent);
        let synced_every_bound_stream = synced && !order.tail_recorded;
        let cpu_done = boundaries == Completion::Complete || synced;
        let mut tail = caller_stream::tail_status(&*self.device, &order);
        if tail == TailStatus::Pending && self.blocking {
            let left = front
                .run_deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            let (device, event) = (self.device.clone(), order.events.tail);
            if MutexGuard::unlocked(self.lane, || device.synchronize_event(event, left).is_ok()) {
                tail = TailStatus::Complete;
            }
        }
        if synced_every_bound_stream {
            caller_stream::discharge_on_quiescence(&front.fence, &mut order);
        }
        let proven = caller_stream::discharge_by_proofs(
            &front.fence,
            &mut order,
            cpu_done,
            tail == TailStatus::Complete,
        );
        if proven {
            return Ok(());
        }
        if self.synchronize(&streams.all, None)?.quiescent {
            caller_stream::discharge_on_quiescence(&front.fence, &mut order);
            return Ok(());
        }
        self.lane.put_order_back(front.dispatch, order);
        Err(self.give_up(
            HostError::DeviceUnusable(
                "the caller's stream could not be proven past the run's Tail".into(),
            ),
            "a caller launch's references could not be proven released",
        ))
    }

    /// Successor discharge: the joined successor's references on this run's fence, by the
    /// ladder of [`crate::join`] — completed proofs (waited for, bounded, when blocking: they
    /// follow this run's complete boundaries closely), else a synchronize of the pair.
    fn discharge_successor(&mut self, successor: Option<u64>, streams: &BoundStreams) -> Step<()> {
        let Some(successor) = successor else {
            return Ok(());
        };
        let mut join = self.lane.take_join(successor);
        let mut discharged = join::discharge_by_proofs(&*self.device, &mut join, None);
        if !discharged && self.blocking {
            let (device, timeout) = (self.device.clone(), self.lane.config.run_timeout);
            discharged = MutexGuard::unlocked(self.lane, || {
                join::discharge_by_proofs(&*device, &mut join, Some(timeout))
            });
        }
        if !discharged {
            if self.synchronize(&streams.pair, None)?.quiescent {
                join::discharge_on_quiescence(&mut join);
            } else {
                self.lane.put_join_back(successor, join);
                return Err(self.give_up(
                    HostError::DeviceUnusable("a successor's join could not be discharged".into()),
                    "a successor's wait references could not be proven released",
                ));
            }
        }
        self.lane.put_join_back(successor, join);
        Ok(())
    }

    /// Retirement: the run's fence (refused while references remain), its record in the
    /// ledger, and its slot.
    fn retire(&mut self, front: &Front) -> Step<()> {
        if front.fence.retire(&front.identity).is_err() {
            return Err(self.give_up(
                HostError::DeviceUnusable("the completion fence could not be retired".into()),
                "references on a retiring fence",
            ));
        }
        let lane = &mut **self.lane;
        lane.ledger
            .forget(front.identity.slot, front.identity.epoch);
        lane.slots[front.identity.slot as usize].occupant = None;
        Ok(())
    }
}

impl LaneEngine {
    /// The front run, if it is launched.
    fn launched_front(&mut self) -> Option<Front> {
        let dispatch = self.queue.front()?;
        let run_timeout = self.config.run_timeout;
        let first_clock = self
            .config
            .scheduler_timeout
            .min(self.config.op_execute_timeout);
        let launched = self.queue.get_mut(dispatch)?.launched()?;
        let (identity, started, grade) =
            (launched.identity, launched.started, launched.launch.grade());
        Some(Front {
            dispatch,
            identity,
            started,
            grade,
            fence: self.slots[identity.slot as usize].fence.clone(),
            run_deadline: simpler_device::deadline::deadline_from(started, run_timeout),
            peek_from: simpler_device::deadline::deadline_from(started, first_clock),
        })
    }

    /// The run behind the front whose join references are on `front`'s fence.
    fn joined_successor(&mut self, front: &RunIdentity) -> Option<u64> {
        let next = self.queue.phases().get(1).map(|&(d, _)| d)?;
        let joined = self
            .queue
            .get_mut(next)
            .and_then(|run| run.launched())
            .and_then(|l| l.join.as_ref())
            .is_some_and(|j| j.pred == *front);
        joined.then_some(next)
    }

    /// The streams run `dispatch` is bound to.
    fn bound_streams(&mut self, dispatch: u64) -> BoundStreams {
        let pair = self.resources.streams.both();
        let (tail_recorded, caller) = self
            .order_of(dispatch)
            .map_or((None, None), |o| (Some(o.tail_recorded), Some(o.caller)));
        let mut bound = pair.to_vec();
        let mut all = pair.to_vec();
        if let Some(c) = caller {
            all.push(c);
            if tail_recorded == Some(false) {
                bound.push(c);
            }
        }
        BoundStreams {
            pair,
            bound,
            all,
            tail_recorded,
        }
    }

    fn launched_mut(&mut self, dispatch: u64) -> Option<&mut LaunchedRun> {
        self.queue
            .get_mut(dispatch)
            .and_then(RunState::launched_mut)
    }

    /// The caller order of launched run `dispatch`, if it has one.
    pub(super) fn order_of(&mut self, dispatch: u64) -> Option<&CallerOrder> {
        self.launched_mut(dispatch).and_then(|l| l.order.as_ref())
    }

    /// The join of launched run `dispatch`, if it has one.
    pub(super) fn join_of(&mut self, dispatch: u64) -> Option<&JoinRefs> {
        self.launched_mut(dispatch).and_then(|l| l.join.as_ref())
    }

    /// The capture of run `dispatch` when it records (`None`: untraced, or not in the lane).
    fn capture_of(&mut self, dispatch: u64) -> Option<&mut RunCapture> {
        self.queue
            .get_mut(dispatch)
            .map(|run| &mut run.request.capture)
            .filter(|c| c.on())
    }

    /// The launch error of a Partial run, which is its outcome whatever the drain finds.
    pub(super) fn launch_error_of(&mut self, dispatch: u64) -> Option<HostError> {
        self.launched_mut(dispatch)
            .and_then(|l| l.launch.error().cloned())
    }

    fn take_order(&mut self, dispatch: u64) -> Option<CallerOrder> {
        self.launched_mut(dispatch).and_then(|l| l.order.take())
    }

    fn put_order_back(&mut self, dispatch: u64, order: CallerOrder) {
        if let Some(l) = self.launched_mut(dispatch) {
            l.order = Some(order);
        }
    }

    fn take_join(&mut self, successor: u64) -> JoinRefs {
        self.launched_mut(successor)
            .and_then(|l| l.join.take())
            .expect("a joined successor holds its join")
    }

    fn put_join_back(&mut self, successor: u64, join: JoinRefs) {
        if let Some(l) = self.launched_mut(successor) {
            l.join = Some(join);
        }
    }

    /// Copy back and end: the front leaves the lane; after a success its outputs are copied
    /// back into its host buffers; its staging goes back to its slot's pool and the run ends
    /// with its verdict.
    fn copy_back_and_end(&mut self, front: &Front, verdict: Verdict, finalize_start: Option<u64>) {
        self.queue
            .advance(front.dispatch, Phase::Terminal)
            .expect("front");
        let (_, run) = self.queue.pop_terminal_front().expect("terminal front");
        let RunState { request, stage } = run;
        let RunRequest {
            cell,
            callable,
            mut args,
            mut capture,
            graph_image,
            ..
        } = request;
        let epoch = front.identity.epoch;
        let copy_start = capture.now();
        let Stage::Launched(launched) = stage else {
            unreachable!("the finalized front was launched")
        };
        let result = verdict
            .result
            .map_err(|e| e.naming_kernels(&callable.kernel_names))
            .and_then(|()| {
                copy_back(
                    &*self.device,
                    &callable.signature,
                    &mut args,
                    &launched.staging,
                )
            });
        capture.span("copy back", epoch, copy_start);
        self.slots[front.identity.slot as usize]
            .staging
            .put_back(launched.staging.into_iter().flatten());
        if let Some(j) = launched.join {
            if !j.is_discharged() {
                self.stale_joins.push(j);
            }
        }
        let trace = capture.on().then(|| {
            let slot = front.identity.slot as usize;
            self.run_trace(slot, &callable, epoch, capture, finalize_start)
        });
        let report = result.map(|()| RunReport {
            epoch: front.identity.epoch,
            device_time: verdict.device_time,
            total_time: cell.submitted.elapsed(),
            tasks: verdict.tasks,
            trace,
            graph: graph_image.as_ref().map(|(_, report)| *report),
            recording: graph_image.and_then(|(image, stats)| {
                image
                    .recording
                    .is_some()
                    .then_some(super::graph::RecordedRun { image, stats })
            }),
        });
        cell.finish(report, args);
        if self.queue.is_poisoned() && self.unusable.is_none() && self.queue.is_empty() {
            // The partial launch that closed admission was drained with a proof: reopen.
            self.queue.clear_poison();
        }
    }

    /// Nothing proves the front quiescent: marks the device unusable, retains everything it
    /// may touch (staging to quarantine, the slot blocked, references kept), and ends the
    /// front with `error`; unlaunched runs end at the next pump with the device's state.
    pub(super) fn give_up(&mut self, error: HostError, why: &str) {
        tracing::error!(error = %error, "{why}; the device is marked unusable");
        self.mark_unusable(|| format!("{why}: {error}"));
        self.consume_notices();
        let front = self.queue.front().expect("a front to give up on");
        self.queue.advance(front, Phase::Terminal).expect("front");
        let (_, mut run) = self.queue.pop_terminal_front().expect("terminal front");
        self.retain_run(&mut run);
        let args = std::mem::take(&mut run.request.args);
        run.request.cell.finish(Err(error), args);
    }
}

/// Copies the outputs of a successful run back into its host buffers (the arguments the
/// signature copies back); stops at the first failing copy.
fn copy_back(
    device: &dyn Device,
    signature: &Signature,
    args: &mut [OwnedArg],
    staging: &StagedArgs,
) -> Result<(), HostError> {
    for ((spec, arg), staged) in signature.args.iter().zip(args.iter_mut()).zip(staging) {
        if let (OwnedArg::Tensor { buffer, .. }, Some(staged)) = (arg, staged) {
            if spec.direction.copies_back() {
                device
                    .copy_from_device(buffer.bytes_mut(), staged.ptr)
                    .map_err(HostError::device(format!(
                        "copying argument `{}` back",
                        spec.name
                    )))?;
            }
        }
    }
    Ok(())
}
