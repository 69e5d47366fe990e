//! Drain: the first two steps of finalizing the front run — **completion** (the run's own
//! two boundaries; a queued successor never delays it) and the **verdict** (one read of the
//! run's epoch-stamped result record, the decision of [`crate::outcome`], and the bounded
//! synchronize of the bound streams when nothing else can answer) — plus the non-blocking
//! pre-checks a poll makes before anything is mutated (`docs/lane.md` §3, §9).
//!
//! Every device wait here runs with the lane lock released (a blocking driver) or is
//! answered WouldBlock (a poll); the drain never synchronizes or resets the whole device.
//!
//! A run whose kernel hangs never completes its boundaries, yet its runtime publishes the
//! failure (OP_EXECUTE_TIMEOUT, or an error after which the orchestrator did not return):
//! once a run is old enough for a clock to have fired, a pending completion looks at the
//! run's own result record every [`RECORD_PEEK_SLICE`]; a published failure whose
//! boundaries still do not complete within [`PUBLISHED_FAILURE_GRACE`] (at once for
//! OP_EXECUTE_TIMEOUT, whose kernel the runtime has abandoned) ends the run with
//! that failure, given up on (a thread may still be executing a kernel: the device is
//! unusable until a forced reset; `docs/lane.md`, outcome).

use std::time::{Duration, Instant};

use parking_lot::MutexGuard;
use simpler_abi::{code_name, RunResult, SCHED_OP_EXECUTE_TIMEOUT};
use simpler_device::DeviceError;

use crate::caller_stream::{self, TailStatus};
use crate::fence::{Completion, FenceError};
use crate::identity::RunIdentity;
use crate::join;
use crate::launch::LaunchGrade;
use crate::outcome::{
    decide_run_drain, decide_run_execution, device_run_result_terminal, DrainAction, RecordRead,
    RunExecution, RunOutcomeEvidence, Terminal,
};
use crate::pod::from_bytes;
use crate::HostError;

use super::driver::{streams_idle, BoundStreams, Driver, Front, PairSync, Step};
use super::{LaneEngine, Progress};

/// How often a blocking driver looks at a pending run's result record, once the run is old
/// enough for one of the runtime's clocks to have fired.
pub(super) const RECORD_PEEK_SLICE: Duration = Duration::from_millis(50);
/// How long a failure the run published waits for the run's boundaries before the run is
/// given up on: the last AICPU thread publishes moments before both kernels exit, so only
/// a run with a kernel or the orchestrator left behind stays pending this long.
pub(super) const PUBLISHED_FAILURE_GRACE: Duration = Duration::from_secs(1);

/// How long `failure`, published by a run whose boundaries are still pending, waits for
/// them: [`PUBLISHED_FAILURE_GRACE`], except for OP_EXECUTE_TIMEOUT, which the runtime
/// publishes only after abandoning the core whose kernel did not return, so that kernel's
/// boundary cannot complete: the run is given up on at once, within one record look
/// ([`RECORD_PEEK_SLICE`]) of the clock firing (`docs/health.md` §8).
fn published_failure_grace(failure: &HostError) -> Duration {
    match failure {
        HostError::RunFailed { code, .. } if *code == -SCHED_OP_EXECUTE_TIMEOUT => Duration::ZERO,
        _ => PUBLISHED_FAILURE_GRACE,
    }
}

/// The front run's verdict, before copy back.
pub(super) struct Verdict {
    /// The run's outcome (a copy-back failure can still turn a success into an error).
    pub(super) result: Result<(), HostError>,
    /// The bounded synchronize that ran, if one did.
    pub(super) sync: Option<PairSync>,
    /// From the launch of the first kernel to the proof of both boundaries.
    pub(super) device_time: Duration,
    /// Tasks the orchestration submitted, as the record says (0 when no record was read).
    pub(super) tasks: u64,
}

impl Driver<'_, '_> {
    /// Completion: the run's own boundaries, waited for (bounded by the caller's deadline and
    /// the run's own timeout) when blocking. A run past its own timeout is given up on.
    pub(super) fn completion(
        &mut self,
        front: &Front,
        user_deadline: Option<Instant>,
    ) -> Step<Completion> {
        let identity = front.identity;
        let boundaries = if front.fence.fenced(&identity) {
            front.fence.poll(&*self.device, &identity)
        } else {
            // A partial launch: a kernel without its boundary, or only a marker copy or a
            // committed join wait. Either way device-visible work no boundary covers.
            debug_assert!(
                front.grade == LaunchGrade::Partial || front.fence.has_device_references(&identity)
            );
            Completion::Unfenced
        };
        if boundaries != Completion::Pending {
            return Ok(boundaries);
        }
        self.published_failure(front)?;
        if !self.blocking {
            return Err(Progress::WouldBlock);
        }
        let until = user_deadline.map_or(front.run_deadline, |u| u.min(front.run_deadline));
        let (device, fence) = (self.device.clone(), front.fence.clone());
        loop {
            let now = Instant::now();
            let left = until.saturating_duration_since(now);
            // Until a clock can have fired, one wait; then slices between record looks.
            let slice = if now < front.peek_from {
                left.min(front.peek_from - now)
            } else {
                left.min(RECORD_PEEK_SLICE)
            };
            let last = slice >= left;
            let waited = MutexGuard::unlocked(self.lane, || {
                fence.wait(&*device, &identity, slice.max(Duration::from_micros(1)))
            });
            match waited {
                Ok(()) => return Ok(Completion::Complete),
                Err(FenceError::TimedOut(_)) if !last => self.published_failure(front)?,
                Err(FenceError::TimedOut(_)) => {
                    if Instant::now() < front.run_deadline {
                        return Err(Progress::UserTimeout);
                    }
                    let run_timeout = self.lane.config.run_timeout;
                    return Err(self.give_up(
                        HostError::Timeout(run_timeout),
                        "a run did not complete within the run timeout",
                    ));
                }
                Err(_) => return Ok(Completion::Error),
            }
        }
    }

    /// A pending run's own published failure: gives the run up with it once the failure has
    /// waited [`PUBLISHED_FAILURE_GRACE`] for the boundaries (a kernel, or the orchestrator,
    /// was left running on the device). `Ok` while there is none, or the grace runs.
    fn published_failure(&mut self, front: &Front) -> Step<()> {
        if Instant::now() < front.peek_from {
            return Ok(());
        }
        let Some(failure) = self.lane.peek_published_failure(&front.identity) else {
            return Ok(());
        };
        let seen = self.lane.note_failure_seen(front.dispatch);
        if seen.elapsed() < published_failure_grace(&failure) {
            return Ok(());
        }
        let error = self.lane.launch_error_of(front.dispatch).unwrap_or(failure);
        self.lane.kernels_left_running = true;
        Err(self.give_up(
            error,
            "the run published its failure while a kernel or the orchestrator was still \
             running on the device",
        ))
    }

    /// A poll's pre-checks: everything the remaining steps do must complete without waiting
    /// (the synchronize it would need finds idle streams, the successor's proofs or the
    /// caller's Tail are complete).
    pub(super) fn ready_without_blocking(
        &mut self,
        front: &Front,
        boundaries: Completion,
        successor: Option<u64>,
        streams: &BoundStreams,
    ) -> Step<()> {
        let device = self.device.clone();
        let device = &*device;
        let needs_sync = boundaries != Completion::Complete || self.lane.config.always_synchronize;
        if needs_sync && !streams_idle(device, &streams.bound) {
            return Err(Progress::WouldBlock);
        }
        if let Some(s) = successor {
            let proven = self
                .lane
                .join_of(s)
                .is_some_and(|j| join::proofs_complete(device, j));
            if !proven && !streams_idle(device, &streams.pair) {
                return Err(Progress::WouldBlock);
            }
        }
        if streams.tail_recorded == Some(true) {
            // Poll also queries Tail: the run is not finalized before the caller consumed it.
            let order = self.lane.order_of(front.dispatch).expect("a caller order");
            if caller_stream::tail_status(device, order) != TailStatus::Complete
                && !streams_idle(device, &streams.all)
            {
                return Err(Progress::WouldBlock);
            }
        }
        Ok(())
    }

    /// The verdict: a synchronize first when completion is not proven (or the measurement
    /// knob asks for one), then one record read and the decision, then the synchronize the
    /// decision asks for. Bound streams that cannot be proven quiescent give the run up.
    pub(super) fn verdict(
        &mut self,
        front: &Front,
        boundaries: Completion,
        streams: &BoundStreams,
        user_deadline: Option<Instant>,
    ) -> Step<Verdict> {
        let mut pre_sync: Option<PairSync> = None;
        if self.lane.config.always_synchronize || boundaries != Completion::Complete {
            // Measurement knob, or no completion proof: only the synchronize can answer. It
            // ends by the caller's deadline (nothing was read yet: the next wait redoes it).
            pre_sync = Some(self.synchronize(&streams.bound, user_deadline)?);
        }
        if let Some(ps) = pre_sync.as_ref().filter(|ps| !ps.quiescent) {
            let why = ps.error.clone().map_or_else(String::new, |e| e.to_string());
            let error = self
                .lane
                .launch_error_of(front.dispatch)
                .unwrap_or_else(|| match &ps.error {
                    Some(DeviceError::Timeout(t)) => HostError::Timeout(*t),
                    Some(e) => HostError::DeviceFault(e.clone()),
                    None => HostError::DeviceUnusable(why.clone()),
                });
            return Err(self.give_up(
                error,
                &format!("the stream pair could not be proven quiescent ({why})"),
            ));
        }

        let (read, record, read_error) = self.lane.read_record(&front.identity);
        let terminal = record.map_or_else(Terminal::default, |r| {
            device_run_result_terminal(&r, front.identity.epoch)
        });
        let evidence = RunOutcomeEvidence {
            boundaries,
            record_read: read,
            terminal,
        };
        let decision = decide_run_execution(&evidence);
        let action = decide_run_drain(read == RecordRead::Failed, &evidence);
        let post_sync = match (action, &pre_sync) {
            (DrainAction::AcceptRecordedSuccess, _) | (_, Some(_)) => None,
            _ => {
                if !self.blocking && !streams_idle(&*self.device, &streams.bound) {
                    return Err(Progress::WouldBlock);
                }
                // After the record read: not cut short by the caller (one read per run).
                Some(self.synchronize(&streams.bound, None)?)
            }
        };
        let sync = post_sync.or(pre_sync);
        if let Some(e) = sync.as_ref().and_then(|s| s.error.as_ref()) {
            // A sticky fault (or an unconverged pair) stays on the streams: refuse new work.
            self.lane
                .mark_unusable(|| format!("the stream pair reported {e} while draining a run"));
        }
        let result = match (action, decision.outcome) {
            (DrainAction::ReportTransferError, _) => {
                Err(HostError::device("reading the run's result record")(
                    read_error.expect("a failed read has an error"),
                ))
            }
            (_, RunExecution::Succeeded) => Ok(()),
            (_, RunExecution::Failed { code, .. }) => Err(HostError::RunFailed {
                code,
                name: code_name(code),
                message: record.map(|r| r.message()).unwrap_or_default(),
            }),
            _ => Err(self
                .lane
                .launch_error_of(front.dispatch)
                .unwrap_or_else(|| match sync.as_ref().and_then(|s| s.error.clone()) {
                    Some(e) => HostError::DeviceFault(e),
                    None => {
                        let mut why = decision
                            .reason
                            .unwrap_or("record decided nothing")
                            .to_string();
                        if let Some(e) = front.fence.first_error(&front.identity) {
                            why = format!("{why}: {e}");
                        }
                        HostError::RunUndecided(why)
                    }
                })),
        };
        Ok(Verdict {
            result,
            sync,
            device_time: front.started.elapsed(),
            tasks: record.map_or(0, |r| r.tasks),
        })
    }
}

impl LaneEngine {
    /// The failure run `identity` published, if its record (trusted region only) already
    /// says so, as the run's error. A look, not the verdict's read: the record ledger is not
    /// touched, and a failed transfer is no evidence (`None`).
    fn peek_published_failure(&self, identity: &RunIdentity) -> Option<HostError> {
        let slot = &self.slots[identity.slot as usize];
        if !slot.result_initialized {
            return None;
        }
        let mut raw = vec![0u8; std::mem::size_of::<RunResult>()];
        self.device.copy_from_device(&mut raw, slot.result).ok()?;
        let record = from_bytes::<RunResult>(&raw)?;
        match device_run_result_terminal(&record, identity.epoch) {
            Terminal::Failed { code, .. } => Some(HostError::RunFailed {
                code,
                name: code_name(code),
                message: record.message(),
            }),
            _ => None,
        }
    }

    /// When the drain first saw launched run `dispatch`'s published failure (now, the first
    /// time).
    fn note_failure_seen(&mut self, dispatch: u64) -> Instant {
        let now = Instant::now();
        self.queue
            .get_mut(dispatch)
            .and_then(|run| run.launched_mut())
            .map_or(now, |l| *l.failure_seen.get_or_insert(now))
    }

    /// Reads run `identity`'s result record once (the ledger answers a re-read), trusted
    /// only when its slot's region was initialized.
    fn read_record(
        &mut self,
        identity: &RunIdentity,
    ) -> (RecordRead, Option<RunResult>, Option<DeviceError>) {
        let slot = &self.slots[identity.slot as usize];
        let (trusted, result_addr) = (slot.result_initialized, slot.result);
        let device = &self.device;
        self.ledger
            .read_with_status(identity.slot, identity.epoch, trusted, || {
                let mut raw = vec![0u8; std::mem::size_of::<RunResult>()];
                device.copy_from_device(&mut raw, result_addr)?;
                from_bytes::<RunResult>(&raw).ok_or(DeviceError::InvalidSize(raw.len() as u64))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(code: i32) -> HostError {
        HostError::RunFailed {
            code,
            name: code_name(code),
            message: String::new(),
        }
    }

    #[test]
    fn only_an_op_execute_timeout_is_given_up_without_the_grace() {
        assert_eq!(
            published_failure_grace(&failed(-SCHED_OP_EXECUTE_TIMEOUT)),
            Duration::ZERO,
            "its kernel was abandoned: no boundary can follow"
        );
        for code in [-simpler_abi::SCHED_TIMEOUT, -9, -1] {
            assert_eq!(
                published_failure_grace(&failed(code)),
                PUBLISHED_FAILURE_GRACE,
                "code {code}"
            );
        }
        assert_eq!(
            published_failure_grace(&HostError::DeviceUnusable("x".into())),
            PUBLISHED_FAILURE_GRACE
        );
    }
}
