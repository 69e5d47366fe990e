//! Outcome decision: what a run's evidence says, as pure functions (`docs/lane.md` §9:
//! completion is not the verdict).
//!
//! Two channels meet here: the run's boundaries (did both kernels exit?) and the run's own
//! epoch-stamped result record (what did the device say?). [`device_run_result_terminal`]
//! reads a record, [`decide_run_execution`] combines the channels into one outcome, and
//! [`decide_run_drain`] picks what the drain does: a recorded success returns without
//! touching either stream (a queued successor is never waited on); anything else falls back
//! to a bounded stream synchronize, which on hardware is the only call that produces the
//! device's verdict. [`RecordReadLedger`] makes the record read happen once per run.
//!
//! Silence is never success: no record, a foreign record or an unreadable record is
//! Undecided, with a reason.

use std::collections::HashMap;

use simpler_abi::{CodeSource, RunResult, RunVerdict, RUN_RESULT_PAYLOAD_BYTES};
use simpler_device::DeviceError;

use crate::fence::Completion;

/// Whether the run's result record was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RecordRead {
    /// No read (no trusted region, or not attempted yet).
    #[default]
    NotAttempted,
    /// The transfer failed: the bytes are not evidence.
    Failed,
    /// The bytes were read.
    Ok,
}

/// What a run's record says on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminal {
    /// The record decides nothing; the reason says why.
    Undecided(&'static str),
    /// The run reported success.
    Succeeded,
    /// The run reported failure.
    Failed {
        /// Completion code (non-zero).
        code: i32,
        /// Where it came from.
        source: CodeSource,
    },
}

impl Default for Terminal {
    fn default() -> Self {
        Terminal::Undecided(reason::RECORD_DECIDED_NOTHING)
    }
}

/// The reason strings of the decision rules.
pub mod reason {
    /// The record's epoch is 0: never published.
    pub const EPOCH_ZERO: &str = "the record was never published (epoch 0)";
    /// The record belongs to another run.
    pub const EPOCH_MISMATCH: &str = "the record belongs to another run (epoch mismatch)";
    /// An Ok verdict with a code, code source or payload.
    pub const OK_WITH_CODE: &str = "an Ok record carries a code, code source or payload";
    /// An Error verdict with code 0.
    pub const ERROR_WITHOUT_CODE: &str = "an Error record carries code 0";
    /// An Error verdict with no valid code source.
    pub const ERROR_BAD_SOURCE: &str = "an Error record has no valid code source";
    /// Verdict None.
    pub const VERDICT_NONE: &str = "the record's verdict is None";
    /// Unknown verdict value.
    pub const VERDICT_UNKNOWN: &str = "the record's verdict is unknown";
    /// A payload length beyond the buffer.
    pub const BAD_PAYLOAD: &str = "the record's payload length exceeds its buffer";
    /// A boundary query or wait failed.
    pub const BOUNDARY_ERROR: &str = "a boundary query or wait failed";
    /// Work was submitted that no recorded boundary covers.
    pub const UNFENCED: &str = "submitted work no recorded boundary covers";
    /// The record transfer failed.
    pub const READ_FAILED: &str = "the result record could not be read";
    /// Boundaries complete but no record read.
    pub const NOT_READ: &str = "no result record was read";
    /// The fallback: nothing decided.
    pub const RECORD_DECIDED_NOTHING: &str = "record decided nothing";
}

/// Reads one record against the run's epoch (`device_run_result_terminal`).
pub fn device_run_result_terminal(r: &RunResult, epoch: u64) -> Terminal {
    if r.published == 0 {
        return Terminal::Undecided(reason::EPOCH_ZERO);
    }
    if r.published != epoch {
        return Terminal::Undecided(reason::EPOCH_MISMATCH);
    }
    if r.payload_bytes as usize > RUN_RESULT_PAYLOAD_BYTES {
        return Terminal::Undecided(reason::BAD_PAYLOAD);
    }
    match r.verdict {
        v if v == RunVerdict::Ok as u32 => {
            if r.completion_code != 0
                || r.code_source != CodeSource::None as u32
                || r.payload_bytes != 0
            {
                Terminal::Undecided(reason::OK_WITH_CODE)
            } else {
                Terminal::Succeeded
            }
        }
        v if v == RunVerdict::Error as u32 => {
            if r.completion_code == 0 {
                return Terminal::Undecided(reason::ERROR_WITHOUT_CODE);
            }
            let source = match r.code_source {
                s if s == CodeSource::Header as u32 => CodeSource::Header,
                s if s == CodeSource::ThreadRc as u32 => CodeSource::ThreadRc,
                s if s == CodeSource::ShutdownRc as u32 => CodeSource::ShutdownRc,
                _ => return Terminal::Undecided(reason::ERROR_BAD_SOURCE),
            };
            Terminal::Failed {
                code: r.completion_code,
                source,
            }
        }
        v if v == RunVerdict::None as u32 => Terminal::Undecided(reason::VERDICT_NONE),
        _ => Terminal::Undecided(reason::VERDICT_UNKNOWN),
    }
}

/// Everything the decision looks at (`RunOutcomeEvidence`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunOutcomeEvidence {
    /// What the run's fence says.
    pub boundaries: Completion,
    /// Whether the record was read.
    pub record_read: RecordRead,
    /// What the record says (meaningful only when `record_read` is Ok).
    pub terminal: Terminal,
}

impl Default for RunOutcomeEvidence {
    fn default() -> Self {
        RunOutcomeEvidence {
            boundaries: Completion::Pending,
            record_read: RecordRead::NotAttempted,
            terminal: Terminal::default(),
        }
    }
}

/// A decided (or undecidable) run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunExecution {
    /// Not known yet.
    Pending,
    /// Completed and reported success.
    Succeeded,
    /// Reported failure.
    Failed {
        /// Completion code.
        code: i32,
        /// Where it came from.
        source: CodeSource,
    },
    /// The evidence decides nothing.
    Undecided,
}

impl RunExecution {
    /// The state's name.
    #[cfg_attr(not(test), allow(dead_code))] // for messages; exercised by the tests
    pub fn name(self) -> &'static str {
        match self {
            RunExecution::Pending => "Pending",
            RunExecution::Succeeded => "Succeeded",
            RunExecution::Failed { .. } => "Failed",
            RunExecution::Undecided => "Undecided",
        }
    }
}

/// An outcome and, iff it is Undecided, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunDecision {
    /// The outcome.
    pub outcome: RunExecution,
    /// Set iff `outcome` is Undecided.
    pub reason: Option<&'static str>,
}

fn decided(outcome: RunExecution) -> RunDecision {
    RunDecision {
        outcome,
        reason: None,
    }
}

fn undecided(reason: &'static str) -> RunDecision {
    RunDecision {
        outcome: RunExecution::Undecided,
        reason: Some(reason),
    }
}

/// Combines the two channels into one outcome (`decide_run_execution`), in rule order:
///
/// 1. a published failure is the outcome, whatever the boundaries say;
/// 2. a boundary Error or Unfenced decides nothing;
/// 3. a failed read decides nothing; no read leaves Pending boundaries Pending and
///    Complete boundaries undecided;
/// 4. a recorded success needs Complete boundaries (Pending stays Pending);
/// 5. anything else is undecided, with the record's own reason.
pub fn decide_run_execution(ev: &RunOutcomeEvidence) -> RunDecision {
    if ev.record_read == RecordRead::Ok {
        if let Terminal::Failed { code, source } = ev.terminal {
            return decided(RunExecution::Failed { code, source });
        }
    }
    match ev.boundaries {
        Completion::Error => return undecided(reason::BOUNDARY_ERROR),
        Completion::Unfenced => return undecided(reason::UNFENCED),
        _ => {}
    }
    match ev.record_read {
        RecordRead::Failed => return undecided(reason::READ_FAILED),
        RecordRead::NotAttempted => {
            return match ev.boundaries {
                Completion::Pending => decided(RunExecution::Pending),
                _ => undecided(reason::NOT_READ),
            }
        }
        RecordRead::Ok => {}
    }
    match (ev.terminal, ev.boundaries) {
        (Terminal::Succeeded, Completion::Complete) => decided(RunExecution::Succeeded),
        (Terminal::Succeeded, Completion::Pending) => decided(RunExecution::Pending),
        (Terminal::Undecided(r), _) => undecided(r),
        _ => undecided(reason::RECORD_DECIDED_NOTHING),
    }
}

/// What the drain does once the boundaries have been waited on (`decide_run_drain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainAction {
    /// The record transfer failed: synchronize the pair to converge it, report the transfer
    /// error.
    ReportTransferError,
    /// A recorded success on complete boundaries: touch neither stream.
    AcceptRecordedSuccess,
    /// Anything else: the bounded stream synchronize produces the device's verdict.
    Synchronize,
}

/// The switch inside the drain: `transfer_failed` is the record read's own status.
pub fn decide_run_drain(transfer_failed: bool, ev: &RunOutcomeEvidence) -> DrainAction {
    if transfer_failed {
        return DrainAction::ReportTransferError;
    }
    match decide_run_execution(ev).outcome {
        RunExecution::Succeeded => DrainAction::AcceptRecordedSuccess,
        _ => DrainAction::Synchronize,
    }
}

/// One result-record read per run: the transfer happens at most once per (slot, epoch), and
/// a later read repeats its status verbatim (`RunRecordReadLedgerT`).
#[derive(Debug, Default)]
pub struct RecordReadLedger {
    entries: HashMap<(u32, u64), Result<RunResult, DeviceError>>,
    transfers: u64,
}

impl RecordReadLedger {
    /// Reads the record of run `epoch` in `slot` with `read` (called only the first time);
    /// `region_trusted == false` (an uninitialized region) gives NotAttempted without a read.
    pub fn read_with_status(
        &mut self,
        slot: u32,
        epoch: u64,
        region_trusted: bool,
        read: impl FnOnce() -> Result<RunResult, DeviceError>,
    ) -> (RecordRead, Option<RunResult>, Option<DeviceError>) {
        if !region_trusted {
            return (RecordRead::NotAttempted, None, None);
        }
        let transfers = &mut self.transfers;
        let entry = self.entries.entry((slot, epoch)).or_insert_with(|| {
            *transfers += 1;
            read()
        });
        match entry {
            Ok(r) => (RecordRead::Ok, Some(*r), None),
            // A failed copy's bytes are cleared: no record comes back.
            Err(e) => (RecordRead::Failed, None, Some(e.clone())),
        }
    }

    /// Forgets a finalized run's entry (the lane calls it at retirement).
    pub fn forget(&mut self, slot: u32, epoch: u64) {
        self.entries.remove(&(slot, epoch));
    }

    /// Forgets everything (a new device generation).
    pub fn reset(&mut self) {
        self.entries.clear();
    }

    /// Transfers made so far.
    #[cfg_attr(not(test), allow(dead_code))] // exercised by the tests
    pub fn transfers(&self) -> u64 {
        self.transfers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(published: u64, verdict: u32, code: i32, source: u32, payload: u32) -> RunResult {
        let mut r = RunResult::EMPTY;
        r.published = published;
        r.verdict = verdict;
        r.completion_code = code;
        r.code_source = source;
        r.payload_bytes = payload;
        r
    }

    const OK: u32 = RunVerdict::Ok as u32;
    const ERR: u32 = RunVerdict::Error as u32;
    const NONE: u32 = RunVerdict::None as u32;
    const HDR: u32 = CodeSource::Header as u32;

    #[test]
    fn terminal_rules() {
        let e = 42;
        let rows: Vec<(&str, RunResult, Terminal)> = vec![
            (
                "epoch 0",
                rec(0, OK, 0, 0, 0),
                Terminal::Undecided(reason::EPOCH_ZERO),
            ),
            (
                "foreign epoch",
                rec(41, OK, 0, 0, 0),
                Terminal::Undecided(reason::EPOCH_MISMATCH),
            ),
            ("ok", rec(e, OK, 0, 0, 0), Terminal::Succeeded),
            (
                "ok with code",
                rec(e, OK, -3, 0, 0),
                Terminal::Undecided(reason::OK_WITH_CODE),
            ),
            (
                "ok with source",
                rec(e, OK, 0, HDR, 0),
                Terminal::Undecided(reason::OK_WITH_CODE),
            ),
            (
                "ok with payload",
                rec(e, OK, 0, 0, 5),
                Terminal::Undecided(reason::OK_WITH_CODE),
            ),
            (
                "error",
                rec(e, ERR, -7, HDR, 3),
                Terminal::Failed {
                    code: -7,
                    source: CodeSource::Header,
                },
            ),
            (
                "error thread rc",
                rec(e, ERR, -7, 2, 0),
                Terminal::Failed {
                    code: -7,
                    source: CodeSource::ThreadRc,
                },
            ),
            (
                "error shutdown rc",
                rec(e, ERR, -7, 3, 0),
                Terminal::Failed {
                    code: -7,
                    source: CodeSource::ShutdownRc,
                },
            ),
            (
                "error code 0",
                rec(e, ERR, 0, HDR, 0),
                Terminal::Undecided(reason::ERROR_WITHOUT_CODE),
            ),
            (
                "error no source",
                rec(e, ERR, -7, 0, 0),
                Terminal::Undecided(reason::ERROR_BAD_SOURCE),
            ),
            (
                "error bad source",
                rec(e, ERR, -7, 9, 0),
                Terminal::Undecided(reason::ERROR_BAD_SOURCE),
            ),
            (
                "verdict none",
                rec(e, NONE, 0, 0, 0),
                Terminal::Undecided(reason::VERDICT_NONE),
            ),
            (
                "verdict unknown",
                rec(e, 7, 0, 0, 0),
                Terminal::Undecided(reason::VERDICT_UNKNOWN),
            ),
            (
                "payload overrun",
                rec(e, ERR, -7, HDR, 999),
                Terminal::Undecided(reason::BAD_PAYLOAD),
            ),
        ];
        for (name, r, want) in rows {
            assert_eq!(device_run_result_terminal(&r, e), want, "{name}");
        }
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn decision_rules_with_reasons() {
        use Completion as B;
        use RecordRead as R;
        use RunExecution as X;
        let failed = Terminal::Failed {
            code: -5,
            source: CodeSource::Header,
        };
        let und = Terminal::Undecided(reason::EPOCH_MISMATCH);
        let rows: Vec<(&str, B, R, Terminal, X, Option<&str>)> = vec![
            (
                "1 failure wins over complete",
                B::Complete,
                R::Ok,
                failed,
                X::Failed {
                    code: -5,
                    source: CodeSource::Header,
                },
                None,
            ),
            (
                "1 failure wins over pending",
                B::Pending,
                R::Ok,
                failed,
                X::Failed {
                    code: -5,
                    source: CodeSource::Header,
                },
                None,
            ),
            (
                "1 failure wins over a boundary error",
                B::Error,
                R::Ok,
                failed,
                X::Failed {
                    code: -5,
                    source: CodeSource::Header,
                },
                None,
            ),
            (
                "1 failure wins over unfenced",
                B::Unfenced,
                R::Ok,
                failed,
                X::Failed {
                    code: -5,
                    source: CodeSource::Header,
                },
                None,
            ),
            (
                "2 boundary error",
                B::Error,
                R::Ok,
                Terminal::Succeeded,
                X::Undecided,
                Some(reason::BOUNDARY_ERROR),
            ),
            (
                "2 unfenced",
                B::Unfenced,
                R::Ok,
                Terminal::Succeeded,
                X::Undecided,
                Some(reason::UNFENCED),
            ),
            (
                "2 unfenced without a read",
                B::Unfenced,
                R::NotAttempted,
                Terminal::Succeeded,
                X::Undecided,
                Some(reason::UNFENCED),
            ),
            (
                "3 read failed",
                B::Complete,
                R::Failed,
                Terminal::Succeeded,
                X::Undecided,
                Some(reason::READ_FAILED),
            ),
            (
                "3 read failed while pending",
                B::Pending,
                R::Failed,
                Terminal::Succeeded,
                X::Undecided,
                Some(reason::READ_FAILED),
            ),
            (
                "3 a failed read's bytes are not evidence",
                B::Complete,
                R::Failed,
                failed,
                X::Undecided,
                Some(reason::READ_FAILED),
            ),
            (
                "3 not read, pending",
                B::Pending,
                R::NotAttempted,
                Terminal::Succeeded,
                X::Pending,
                None,
            ),
            (
                "3 not read, complete",
                B::Complete,
                R::NotAttempted,
                Terminal::Succeeded,
                X::Undecided,
                Some(reason::NOT_READ),
            ),
            (
                "4 success, complete",
                B::Complete,
                R::Ok,
                Terminal::Succeeded,
                X::Succeeded,
                None,
            ),
            (
                "4 success, pending",
                B::Pending,
                R::Ok,
                Terminal::Succeeded,
                X::Pending,
                None,
            ),
            (
                "5 record undecided",
                B::Complete,
                R::Ok,
                und,
                X::Undecided,
                Some(reason::EPOCH_MISMATCH),
            ),
            (
                "5 record undecided while pending",
                B::Pending,
                R::Ok,
                und,
                X::Undecided,
                Some(reason::EPOCH_MISMATCH),
            ),
        ];
        for (name, boundaries, record_read, terminal, outcome, why) in rows {
            let d = decide_run_execution(&RunOutcomeEvidence {
                boundaries,
                record_read,
                terminal,
            });
            assert_eq!(d.outcome, outcome, "{name}");
            assert_eq!(d.reason, why, "{name}");
            assert_eq!(
                d.reason.is_some(),
                d.outcome == X::Undecided,
                "{name}: reason iff Undecided"
            );
        }
        assert_eq!(
            decide_run_execution(&RunOutcomeEvidence::default()).outcome,
            X::Pending
        );
        let names: Vec<_> = [
            X::Pending,
            X::Succeeded,
            X::Failed {
                code: 1,
                source: CodeSource::Header,
            },
            X::Undecided,
        ]
        .iter()
        .map(|x| x.name())
        .collect();
        assert_eq!(names, ["Pending", "Succeeded", "Failed", "Undecided"]);
        let names: Vec<_> = [B::Pending, B::Complete, B::Error, B::Unfenced]
            .iter()
            .map(|b| b.name())
            .collect();
        assert_eq!(names, ["Pending", "Complete", "Error", "Unfenced"]);
    }

    #[test]
    fn drain_actions() {
        let ok = RunOutcomeEvidence {
            boundaries: Completion::Complete,
            record_read: RecordRead::Ok,
            terminal: Terminal::Succeeded,
        };
        assert_eq!(
            decide_run_drain(false, &ok),
            DrainAction::AcceptRecordedSuccess
        );
        assert_eq!(
            decide_run_drain(true, &ok),
            DrainAction::ReportTransferError
        );
        let failed = RunOutcomeEvidence {
            terminal: Terminal::Failed {
                code: -1,
                source: CodeSource::Header,
            },
            ..ok
        };
        assert_eq!(decide_run_drain(false, &failed), DrainAction::Synchronize);
        let unfenced = RunOutcomeEvidence {
            boundaries: Completion::Unfenced,
            ..ok
        };
        assert_eq!(decide_run_drain(false, &unfenced), DrainAction::Synchronize);
        let unread = RunOutcomeEvidence {
            record_read: RecordRead::NotAttempted,
            ..ok
        };
        assert_eq!(decide_run_drain(false, &unread), DrainAction::Synchronize);
        let foreign = RunOutcomeEvidence {
            terminal: Terminal::Undecided(reason::EPOCH_MISMATCH),
            ..ok
        };
        assert_eq!(decide_run_drain(false, &foreign), DrainAction::Synchronize);
    }

    #[test]
    fn the_record_is_read_once_per_slot_and_epoch() {
        let mut l = RecordReadLedger::default();
        let r = rec(9, OK, 0, 0, 0);
        let (s, got, _) = l.read_with_status(0, 9, true, || Ok(r));
        assert_eq!((s, got.map(|g| g.published)), (RecordRead::Ok, Some(9)));
        let (s, _, _) = l.read_with_status(0, 9, true, || panic!("a second transfer"));
        assert_eq!(s, RecordRead::Ok);
        assert_eq!(l.transfers(), 1);
        // A failed transfer is repeated verbatim, bytes cleared.
        let (s, got, e) = l.read_with_status(1, 10, true, || Err(DeviceError::Injected("copy")));
        assert_eq!(
            (s, got.is_none(), e),
            (
                RecordRead::Failed,
                true,
                Some(DeviceError::Injected("copy"))
            )
        );
        let (s, _, e) = l.read_with_status(1, 10, true, || panic!("a second transfer"));
        assert_eq!(
            (s, e),
            (RecordRead::Failed, Some(DeviceError::Injected("copy")))
        );
        // An untrusted region is never read.
        let (s, _, _) = l.read_with_status(0, 11, false, || panic!("read of an untrusted region"));
        assert_eq!(s, RecordRead::NotAttempted);
        l.forget(0, 9);
        l.read_with_status(0, 9, true, || Ok(r));
        assert_eq!(l.transfers(), 3);
        l.reset();
        l.read_with_status(1, 10, true, || Ok(r));
        assert_eq!(l.transfers(), 4);
    }
}
