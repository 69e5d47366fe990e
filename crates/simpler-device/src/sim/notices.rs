//! Fault notices of the sim backend: the one exception-callback slot of the process and the
//! delivery of [`FaultNotice`]s to it (`docs/health.md` §2;
//! `docs/sim-device.md` §6; `aclrtSetExceptionInfoCallback` on hardware).
//!
//! The slot is process-wide, as on hardware: every sim device reports to whichever callback
//! was installed last, through any device. A notice is delivered asynchronously with respect
//! to the host — from the device thread that raised it ([`NoticeDelivery::Prompt`], before
//! that thread moves on, so the notice is in the callback before the faulted stream's next
//! operation), from a delivery thread after a delay ([`NoticeDelivery::Late`]; measured on
//! hardware: up to 16 s), or never ([`NoticeDelivery::Lost`]). A notice raised while no
//! callback is installed is dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::RwLock;

use crate::{FaultCallback, FaultNotice};

/// The process's exception-callback slot (all sim devices).
static SLOT: RwLock<Option<FaultCallback>> = RwLock::new(None);

/// How a raised notice reaches the callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeDelivery {
    /// From the raising device thread, at once.
    Prompt,
    /// From a delivery thread, after this delay.
    Late(Duration),
    /// Never.
    Lost,
}

/// Counts of one device's notices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoticeStats {
    /// Notices the device raised.
    pub raised: u64,
    /// Notices handed to an installed callback.
    pub delivered: u64,
    /// Notices that will never arrive (lost on purpose, or raised with no callback installed).
    pub lost: u64,
}

/// Per-device notice counters.
#[derive(Default)]
pub(crate) struct NoticeCounters {
    raised: AtomicU64,
    delivered: AtomicU64,
    lost: AtomicU64,
}

impl NoticeCounters {
    pub(crate) fn stats(&self) -> NoticeStats {
        NoticeStats {
            raised: self.raised.load(Ordering::Acquire),
            delivered: self.delivered.load(Ordering::Acquire),
            lost: self.lost.load(Ordering::Acquire),
        }
    }
}

/// Installs or removes the process's callback.
pub(crate) fn set_callback(callback: Option<FaultCallback>) {
    *SLOT.write() = callback;
}

/// Whether a callback is installed in the process's slot.
pub fn fault_callback_installed() -> bool {
    SLOT.read().is_some()
}

/// Hands `notice` to the installed callback now; false when none is installed.
fn deliver(notice: FaultNotice) -> bool {
    // Clone out of the lock: the callback must be free to (un)install callbacks itself.
    let callback = SLOT.read().clone();
    match callback {
        Some(cb) => {
            cb(notice);
            true
        }
        None => false,
    }
}

/// Raises `notice` with the given delivery; `counters` are the raising device's.
pub(crate) fn raise(
    notice: FaultNotice,
    delivery: NoticeDelivery,
    counters: &std::sync::Arc<NoticeCounters>,
) {
    counters.raised.fetch_add(1, Ordering::AcqRel);
    let finish = |counters: &NoticeCounters, delivered: bool| {
        let c = if delivered {
            &counters.delivered
        } else {
            &counters.lost
        };
        c.fetch_add(1, Ordering::AcqRel);
    };
    match delivery {
        NoticeDelivery::Prompt => finish(counters, deliver(notice)),
        NoticeDelivery::Lost => finish(counters, false),
        NoticeDelivery::Late(delay) => {
            let c = counters.clone();
            let spawned = std::thread::Builder::new()
                .name("sim-fault-notice".into())
                .spawn(move || {
                    std::thread::sleep(delay);
                    finish(&c, deliver(notice));
                });
            if spawned.is_err() {
                finish(counters, false);
            }
        }
    }
}

/// Raises a notice that no sim device's own counters account for — for example one naming a
/// device that does not exist in this process. Delivered as `delivery` says.
pub fn raise_foreign_notice(notice: FaultNotice, delivery: NoticeDelivery) {
    static FOREIGN: std::sync::OnceLock<std::sync::Arc<NoticeCounters>> =
        std::sync::OnceLock::new();
    raise(notice, delivery, FOREIGN.get_or_init(Default::default));
}
