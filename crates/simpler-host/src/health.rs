//! Device health per device generation (`docs/health.md` §1, §3, §4).
//!
//! **Owns:** the [`StreamHistory`] of the streams a runner's run boundaries were recorded on
//! (bounded: [`STREAM_HISTORY`] ids; an id that could not be read, or one more distinct id
//! than fits, makes the history incomplete), the attribution of a [`FaultNotice`] against it
//! ([`Attribution`]), and [`DeviceHealth`]: whether the device is *suspect*, its first fault
//! code, and the counters of everything else.
//!
//! Rules, each a test below:
//! - A notice naming this runner's device and one of its recorded streams is **Mine**: the
//!   device becomes suspect (the first such code is kept), which refuses admission at
//!   prepare and at launch ([`device_admits_new_run`]).
//! - A notice naming another device, or (with a complete history) a stream this runner never
//!   used, is **NotMine**; with an incomplete history an unknown stream is **Undecided**;
//!   both are only counted, as are lost and dropped notices.
//! - A notice never decides a run, starts recovery or reclaims anything: the lane reads them
//!   only after a run's verdict is decided, and nothing here touches a run. Silence is not
//!   health: a device with no notice is not thereby proven sound.
//! - Suspicion belongs to a device generation. Admission returns only through
//!   [`DeviceHealth::retire_after_confirmed_reset`], called after a *confirmed* forced reset:
//!   it retires the generation (suspicion, first code, stream history) and keeps the
//!   runner-lifetime counters. A notice raised before the reset but delivered after it
//!   counts against the new generation (a known limit: notices can lag by seconds).
//! - "Mine" means the stream matches, not that a run caused the fault.

use simpler_device::{FaultNotice, StreamId};

use crate::fault_monitor::{FaultMonitor, NoticeCursor, NoticeRead};

/// Most distinct stream ids a history holds (`RunStreamIdentities`).
pub const STREAM_HISTORY: usize = 32;

/// The streams this runner's run boundaries were recorded on, in this device generation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamHistory {
    ids: Vec<StreamId>,
    incomplete: bool,
}

/// Whose fault a notice is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attribution {
    /// This runner's device, on a stream its boundaries were recorded on.
    Mine,
    /// Another device, or a stream this runner provably never used.
    NotMine,
    /// This device, on a stream the (incomplete) history cannot place.
    Undecided,
}

impl StreamHistory {
    /// Notes a stream a boundary was recorded on; `None` is an id that could not be read
    /// (`aclrtStreamGetId` failing), which makes the history incomplete, as does overflow.
    pub fn note(&mut self, stream: Option<StreamId>) {
        match stream {
            None => self.incomplete = true,
            Some(s) if self.ids.contains(&s) => {}
            Some(_) if self.ids.len() >= STREAM_HISTORY => self.incomplete = true,
            Some(s) => self.ids.push(s),
        }
    }

    /// Whether every stream ever noted is held.
    pub fn is_complete(&self) -> bool {
        !self.incomplete
    }

    /// Distinct ids held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no id is held.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Attributes `notice` for a runner on `device` (logical ids compared as they are; no
    /// translation).
    pub fn attribute(&self, device: u32, notice: &FaultNotice) -> Attribution {
        if notice.device != device {
            return Attribution::NotMine;
        }
        match notice.stream {
            Some(s) if self.ids.contains(&s) => Attribution::Mine,
            Some(_) if !self.incomplete => Attribution::NotMine,
            _ => Attribution::Undecided,
        }
    }
}

/// Runner-lifetime counts of notices (they survive generation retirement).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealthTotals {
    /// Notices attributed to this runner (each made, or kept, the device suspect).
    pub own: u64,
    /// Notices for another device or an unused stream.
    pub unattributed: u64,
    /// Notices the stream history could not place.
    pub undecided: u64,
    /// Notices that never reached this runner whole (lost or dropped).
    pub undelivered: u64,
}

/// A copy of a runner's health, for callers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthReport {
    /// The device generation (starts at 1; each confirmed reset retires one).
    pub generation: u64,
    /// Whether a notice of this runner's own made the device suspect in this generation.
    pub suspect: bool,
    /// The first own fault code of this generation.
    pub first_error_code: Option<i32>,
    /// The stream of that first own notice.
    pub first_error_stream: Option<StreamId>,
    /// Whether the stream history of this generation is complete.
    pub history_complete: bool,
    /// Distinct streams in the history.
    pub history_len: usize,
    /// Counters since the runner started.
    pub totals: HealthTotals,
}

/// The health of one runner's device.
#[derive(Clone, Debug)]
pub struct DeviceHealth {
    generation: u64,
    suspect: bool,
    first_error: Option<(i32, Option<StreamId>)>,
    history: StreamHistory,
    totals: HealthTotals,
}

impl Default for DeviceHealth {
    fn default() -> Self {
        DeviceHealth {
            generation: 1,
            suspect: false,
            first_error: None,
            history: StreamHistory::default(),
            totals: HealthTotals::default(),
        }
    }
}

impl DeviceHealth {
    /// The stream history of the current generation.
    pub fn history(&self) -> &StreamHistory {
        &self.history
    }

    /// Notes a stream a boundary was recorded on (see [`StreamHistory::note`]).
    pub fn note_stream(&mut self, stream: Option<StreamId>) {
        self.history.note(stream);
    }

    /// Records a fault of this runner's own; true only for the fault that makes the device
    /// suspect (the first of the generation), whose code is kept.
    pub fn note_own_device_fault(&mut self, code: i32, stream: Option<StreamId>) -> bool {
        self.totals.own += 1;
        if self.suspect {
            return false;
        }
        self.suspect = true;
        self.first_error = Some((code, stream));
        true
    }

    /// Consumes one read of the notice ring for a runner on `device`. Only a Mine notice
    /// changes anything but a counter.
    pub fn consume(&mut self, device: u32, read: NoticeRead) -> Option<Attribution> {
        match read {
            NoticeRead::Notice(n) => {
                let a = self.history.attribute(device, &n);
                match a {
                    Attribution::Mine => {
                        if self.note_own_device_fault(n.code, n.stream) {
                            tracing::error!(
                                device,
                                code = n.code,
                                stream = ?n.stream,
                                generation = self.generation,
                                "a fault notice names this runner's device and stream; \
                                 the device is suspect and refuses new runs"
                            );
                        }
                    }
                    Attribution::NotMine => self.totals.unattributed += 1,
                    Attribution::Undecided => self.totals.undecided += 1,
                }
                Some(a)
            }
            NoticeRead::Lost | NoticeRead::Dropped => {
                self.totals.undelivered += 1;
                None
            }
            NoticeRead::Pending | NoticeRead::End => None,
        }
    }

    /// Whether this generation refuses new runs.
    pub fn is_suspect(&self) -> bool {
        self.suspect
    }

    /// Why admission is refused, if it is.
    pub fn refusal(&self) -> Option<String> {
        let (code, stream) = self.first_error?;
        let stream = stream.map_or_else(
            || "no stream".to_string(),
            |s| format!("stream {}", s.raw()),
        );
        Some(format!(
            "the device is suspect: a fault notice (code {code}, {stream}) named one of this \
             worker's streams in device generation {}; only a confirmed forced reset restores \
             admission",
            self.generation
        ))
    }

    /// After a *confirmed* forced reset: retires the generation unconditionally (suspicion,
    /// first code, stream history); the counters stay.
    pub fn retire_after_confirmed_reset(&mut self) {
        self.generation += 1;
        self.suspect = false;
        self.first_error = None;
        self.history = StreamHistory::default();
    }

    /// A copy for callers.
    pub fn report(&self) -> HealthReport {
        HealthReport {
            generation: self.generation,
            suspect: self.suspect,
            first_error_code: self.first_error.map(|(c, _)| c),
            first_error_stream: self.first_error.and_then(|(_, s)| s),
            history_complete: self.history.is_complete(),
            history_len: self.history.len(),
            totals: self.totals,
        }
    }
}

/// Admission under device health (`device_admits_new_run`): neither quarantined by the lane
/// (a run it could not prove finished) nor suspect. Checked at prepare and around launch.
pub fn device_admits_new_run(lane_quarantined: bool, health: &DeviceHealth) -> bool {
    !lane_quarantined && !health.is_suspect()
}

/// Reads every notice the monitor holds for `cursor` into `health` (stops at the first
/// Pending one). Called at finalize, after the run's verdict is decided.
pub(crate) fn consume_device_fault_notices(
    monitor: &FaultMonitor,
    cursor: &mut NoticeCursor,
    health: &mut DeviceHealth,
    device: u32,
) {
    loop {
        match monitor.read(cursor) {
            NoticeRead::Pending | NoticeRead::End => return,
            r => {
                health.consume(device, r);
            }
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    const DEV: u32 = 7;

    fn n(device: u32, stream: Option<u32>, code: i32) -> FaultNotice {
        FaultNotice {
            device,
            stream: stream.map(StreamId::from_raw),
            code,
        }
    }

    fn history(ids: &[Option<u32>]) -> StreamHistory {
        let mut h = StreamHistory::default();
        for id in ids {
            h.note(id.map(StreamId::from_raw));
        }
        h
    }

    #[test]
    fn attribution_table() {
        use Attribution::*;
        let full: Vec<Option<u32>> = (0..STREAM_HISTORY as u32).map(Some).collect();
        let mut overflow = full.clone();
        overflow.push(Some(1000));
        // (history, notice, attribution)
        let rows: Vec<(&str, Vec<Option<u32>>, FaultNotice, Attribution)> = vec![
            (
                "my device, my stream",
                vec![Some(1), Some(2)],
                n(DEV, Some(2), -1),
                Mine,
            ),
            (
                "my device, a stream I never used",
                vec![Some(1), Some(2)],
                n(DEV, Some(9), -1),
                NotMine,
            ),
            (
                "another device, my stream id",
                vec![Some(1)],
                n(DEV + 1, Some(1), -1),
                NotMine,
            ),
            (
                "my device, no stream named",
                vec![Some(1)],
                n(DEV, None, -1),
                Undecided,
            ),
            (
                "unreadable id: unknown stream undecided",
                vec![Some(1), None],
                n(DEV, Some(9), -1),
                Undecided,
            ),
            (
                "unreadable id: a known stream is still mine",
                vec![Some(1), None],
                n(DEV, Some(1), -1),
                Mine,
            ),
            (
                "32 ids fit: complete",
                full.clone(),
                n(DEV, Some(500), -1),
                NotMine,
            ),
            (
                "the 33rd id overflows: undecided",
                overflow.clone(),
                n(DEV, Some(500), -1),
                Undecided,
            ),
            (
                "overflow keeps the 32 it holds",
                overflow,
                n(DEV, Some(31), -1),
                Mine,
            ),
            ("empty history", vec![], n(DEV, Some(1), -1), NotMine),
        ];
        for (name, ids, notice, want) in rows {
            let h = history(&ids);
            assert_eq!(h.attribute(DEV, &notice), want, "{name}");
        }
        let h = history(&full);
        assert!(h.is_complete());
        assert_eq!(h.len(), STREAM_HISTORY);
        let h = history(&[Some(3), Some(3), Some(3)]);
        assert_eq!(h.len(), 1, "ids are held once");
    }

    #[test]
    fn only_a_mine_notice_makes_the_device_suspect() {
        // (reads, suspect, first code, totals (own, unattributed, undecided, undelivered))
        let mine = |c| NoticeRead::Notice(n(DEV, Some(1), c));
        type Row = (
            &'static str,
            Vec<NoticeRead>,
            bool,
            Option<i32>,
            (u64, u64, u64, u64),
        );
        let rows: Vec<Row> = vec![
            ("nothing", vec![], false, None, (0, 0, 0, 0)),
            ("one of mine", vec![mine(-5)], true, Some(-5), (1, 0, 0, 0)),
            (
                "first code wins",
                vec![mine(-5), mine(-6)],
                true,
                Some(-5),
                (2, 0, 0, 0),
            ),
            (
                "code 0 is kept as 0",
                vec![mine(0)],
                true,
                Some(0),
                (1, 0, 0, 0),
            ),
            (
                "another device is only counted",
                vec![NoticeRead::Notice(n(DEV + 1, Some(1), -5))],
                false,
                None,
                (0, 1, 0, 0),
            ),
            (
                "an unused stream is only counted",
                vec![NoticeRead::Notice(n(DEV, Some(99), -5))],
                false,
                None,
                (0, 1, 0, 0),
            ),
            (
                "a notice with no stream is only counted",
                vec![NoticeRead::Notice(n(DEV, None, -5))],
                false,
                None,
                (0, 0, 1, 0),
            ),
            (
                "lost and dropped are only counted",
                vec![
                    NoticeRead::Lost,
                    NoticeRead::Dropped,
                    NoticeRead::Pending,
                    NoticeRead::End,
                ],
                false,
                None,
                (0, 0, 0, 2),
            ),
        ];
        for (name, reads, suspect, code, totals) in rows {
            let mut h = DeviceHealth::default();
            h.note_stream(Some(StreamId::from_raw(1)));
            for r in reads {
                h.consume(DEV, r);
            }
            let rep = h.report();
            assert_eq!(rep.suspect, suspect, "{name}");
            assert_eq!(rep.first_error_code, code, "{name}");
            let t = rep.totals;
            assert_eq!(
                (t.own, t.unattributed, t.undecided, t.undelivered),
                totals,
                "{name}"
            );
            assert_eq!(device_admits_new_run(false, &h), !suspect, "{name}");
            assert_eq!(h.refusal().is_some(), suspect, "{name}");
        }
    }

    #[test]
    fn note_own_device_fault_is_true_only_for_the_fault_that_makes_it_suspect() {
        let mut h = DeviceHealth::default();
        assert!(h.note_own_device_fault(-1, None));
        assert!(!h.note_own_device_fault(-2, None));
        assert_eq!(h.report().first_error_code, Some(-1));
        h.retire_after_confirmed_reset();
        assert!(
            h.note_own_device_fault(-3, None),
            "a new generation can become suspect"
        );
    }

    #[test]
    fn admission_under_device_health() {
        // (lane quarantined, suspect, admits)
        for (quarantined, suspect, admits) in [
            (false, false, true),
            (true, false, false),
            (false, true, false),
            (true, true, false),
        ] {
            let mut h = DeviceHealth::default();
            if suspect {
                h.note_own_device_fault(-1, None);
            }
            assert_eq!(device_admits_new_run(quarantined, &h), admits);
        }
    }

    #[test]
    fn a_confirmed_reset_retires_the_generation_and_keeps_the_counters() {
        let mut h = DeviceHealth::default();
        h.note_stream(Some(StreamId::from_raw(1)));
        h.note_stream(None);
        h.consume(DEV, NoticeRead::Notice(n(DEV, Some(1), -9)));
        h.consume(DEV, NoticeRead::Lost);
        assert!(h.is_suspect());
        h.retire_after_confirmed_reset();
        let r = h.report();
        assert_eq!(r.generation, 2);
        assert!(!r.suspect);
        assert_eq!(r.first_error_code, None);
        assert!(
            r.history_complete,
            "the history is retired with the generation"
        );
        assert_eq!(r.history_len, 0);
        assert_eq!((r.totals.own, r.totals.undelivered), (1, 1));
        // The retired generation's streams are no longer "mine" until noted again.
        assert_eq!(
            h.consume(DEV, NoticeRead::Notice(n(DEV, Some(1), -9))),
            Some(Attribution::NotMine)
        );
        assert!(device_admits_new_run(false, &h));
    }

    #[test]
    fn consuming_from_the_monitor_stops_at_a_pending_notice() {
        let m = FaultMonitor::new();
        let mut c = m.cursor_from_now();
        let mut h = DeviceHealth::default();
        h.note_stream(Some(StreamId::from_raw(4)));
        m.report(n(DEV + 1, Some(4), -1));
        let seq = m.ring().sequence();
        m.ring().hold_writing(seq + 1);
        m.ring().sequence_bump_for_tests();
        m.report(n(DEV, Some(4), -2));
        consume_device_fault_notices(&m, &mut c, &mut h, DEV);
        assert!(
            !h.is_suspect(),
            "the notice behind a pending one is not read yet"
        );
        assert_eq!(h.report().totals.unattributed, 1);
    }
}
