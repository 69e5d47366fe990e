//! The driver: the one thread at a time that takes the front run to its end ([`Driver`]),
//! with the lane lock it releases around each device wait, what it gathers about the front
//! run ([`Front`], [`BoundStreams`]) and the bounded synchronize of a run's bound streams
//! ([`sync_streams`]) — the pieces every step (`drain`, `finalize`) and `teardown` share
//! (`docs/lane.md` §3, §9).
//!
//! The steps themselves are `drain`'s and `finalize`'s; this module must not decide a run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;
use simpler_device::{Device, DeviceError, StreamId};

use crate::fence::RunCompletionFence;
use crate::identity::RunIdentity;
use crate::launch::LaunchGrade;
use crate::HostError;

use super::{Guard, Progress};

/// Why a step stopped the finalize early: the [`Progress`] to report.
pub(super) type Step<T> = Result<T, Progress>;

/// What finalizing needs to know about the front run, gathered once.
pub(super) struct Front {
    pub(super) dispatch: u64,
    pub(super) identity: RunIdentity,
    pub(super) started: Instant,
    pub(super) grade: LaunchGrade,
    pub(super) fence: Arc<RunCompletionFence>,
    /// When the run's own timeout budget runs out.
    pub(super) run_deadline: Instant,
    /// From when a pending run's result record is worth a look: the runtime can publish a
    /// failure before both kernels have exited only once a clock has fired, which takes at
    /// least the shorter of the scheduler and op-execute timeouts.
    pub(super) peek_from: Instant,
}

/// The streams the front run is bound to.
pub(super) struct BoundStreams {
    /// The lane's private pair.
    pub(super) pair: [StreamId; 2],
    /// The pair, plus the caller's stream of a caller launch whose Tail never went out (then
    /// only its synchronize can prove the caller's wait consumed).
    pub(super) bound: Vec<StreamId>,
    /// The pair, plus the caller's stream of any caller launch.
    pub(super) all: Vec<StreamId>,
    /// Whether Tail went out (`None`: not a caller launch). With a Tail, the caller's stream
    /// is proven by the Tail alone.
    pub(super) tail_recorded: Option<bool>,
}

/// The thread finalizing the front run, with the lane lock it may release.
pub(super) struct Driver<'g, 'l> {
    pub(super) lane: &'g mut Guard<'l>,
    pub(super) device: Arc<dyn Device>,
    /// Device waits are allowed (with the lock released).
    pub(super) blocking: bool,
}

impl<'g, 'l> Driver<'g, 'l> {
    /// A driver over the locked `lane`.
    pub(super) fn new(lane: &'g mut Guard<'l>, blocking: bool) -> Driver<'g, 'l> {
        let device = lane.device.clone();
        Driver {
            lane,
            device,
            blocking,
        }
    }

    /// Runs `f` with the lane lock released when blocking (a driver), or in place when not
    /// (a poll holds a try-locked guard and must never block re-acquiring it).
    pub(super) fn outside_lock<R>(&mut self, f: impl FnOnce() -> R) -> R {
        if self.blocking {
            MutexGuard::unlocked(self.lane, f)
        } else {
            f()
        }
    }

    /// A bounded synchronize of `streams`, outside the lock when blocking: at most the run
    /// timeout, and at most until `user_deadline` — a synchronize that the caller's deadline
    /// cut short is the caller's timeout (UserTimeout: the run goes on and stays waitable),
    /// never evidence about the run.
    pub(super) fn synchronize(
        &mut self,
        streams: &[StreamId],
        user_deadline: Option<Instant>,
    ) -> Step<PairSync> {
        let device = self.device.clone();
        let run_timeout = self.lane.config.run_timeout;
        let user_left = user_deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let (timeout, cut_by_user) = match user_left {
            Some(left) if left.is_zero() => return Err(Progress::UserTimeout),
            Some(left) if left < run_timeout => (left, true),
            _ => (run_timeout, false),
        };
        let ps = self.outside_lock(|| sync_streams(&*device, streams, timeout));
        if cut_by_user && matches!(ps.error, Some(DeviceError::Timeout(_))) {
            return Err(Progress::UserTimeout);
        }
        Ok(ps)
    }

    /// Gives up on the front run (see
    /// [`LaneEngine::give_up`](super::LaneEngine::give_up)); the step's stop.
    pub(super) fn give_up(&mut self, error: HostError, why: &str) -> Progress {
        self.lane.give_up(error, why);
        Progress::Finalized
    }
}

/// Result of a bounded synchronize of a run's bound streams.
pub(super) struct PairSync {
    /// Every stream drained (a kernel fault is reported only after its stream drained).
    pub(super) quiescent: bool,
    /// The first error (a sticky kernel fault, a timeout, a failed call).
    pub(super) error: Option<DeviceError>,
}

/// Bounded synchronize of the given streams (the bound streams of a run: never the whole
/// device).
pub(super) fn sync_streams(dev: &dyn Device, streams: &[StreamId], timeout: Duration) -> PairSync {
    let mut error = None;
    for &s in streams {
        match dev.synchronize_stream(s, timeout) {
            Ok(()) => {}
            Err(e @ DeviceError::KernelFault { .. }) => {
                error.get_or_insert(e);
            }
            Err(e) => {
                return PairSync {
                    quiescent: false,
                    error: Some(error.unwrap_or(e)),
                }
            }
        }
    }
    PairSync {
        quiescent: true,
        error,
    }
}

/// Whether every stream is idle (non-blocking).
pub(super) fn streams_idle(dev: &dyn Device, streams: &[StreamId]) -> bool {
    streams.iter().all(|&s| dev.query_stream(s) == Ok(true))
}
