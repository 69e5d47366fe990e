//! The execution-mode latch of one runner (`docs/health.md` §6; caller
//! launches: `docs/lane.md` §12).
//!
//! **Owns:** which of the two ways of launching runs a worker uses, claimed once and never
//! undone:
//!
//! - [`ExecutionMode::Program`]: the worker launches its runs itself, on its own stream pair
//!   (`ChipWorker::submit` / `run`) — the program entry.
//! - [`ExecutionMode::Kernel`]: runs are launched on a stream the caller lends
//!   (`ChipWorker::submit_on_stream`) — the eager kernel entry a framework embedding the
//!   runtime uses. A worker initialised in a borrowed context (`ChipWorker::borrowed`)
//!   claims it at init.
//!
//! The latch is per runner (per worker), not per process or device. [`latched_mode`]
//! returns an `Option`: empty while unclaimed (an owned worker before its first launch).
//! Latching the held mode again is a no-op; the other mode is refused with an invalid-state
//! error, so a KERNEL worker refuses program launch and a PROGRAM worker refuses caller
//! streams. Registration neither needs nor claims a mode. ChipWorker never re-initialises,
//! so upstream's "relatch after finalize" case does not arise: the latch dies with its
//! worker.
//!
//! [`latched_mode`]: ExecutionModeLatch::latched_mode

use std::sync::atomic::{AtomicU8, Ordering};

use crate::HostError;

/// How a worker launches its runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExecutionMode {
    /// The worker's own program launch on its own streams.
    Program,
    /// Launch on a caller's stream (the borrowed, eager kernel entry).
    Kernel,
}

impl ExecutionMode {
    /// `PROGRAM` or `KERNEL`.
    pub fn name(self) -> &'static str {
        match self {
            ExecutionMode::Program => "PROGRAM",
            ExecutionMode::Kernel => "KERNEL",
        }
    }

    fn code(self) -> u8 {
        match self {
            ExecutionMode::Program => 1,
            ExecutionMode::Kernel => 2,
        }
    }
}

/// A once-claimed [`ExecutionMode`]. Lock-free; safe to share.
#[derive(Debug, Default)]
pub struct ExecutionModeLatch(AtomicU8);

impl ExecutionModeLatch {
    /// An unclaimed latch.
    pub const fn new() -> ExecutionModeLatch {
        ExecutionModeLatch(AtomicU8::new(0))
    }

    /// The claimed mode; `None` while unclaimed.
    pub fn latched_mode(&self) -> Option<ExecutionMode> {
        match self.0.load(Ordering::Acquire) {
            1 => Some(ExecutionMode::Program),
            2 => Some(ExecutionMode::Kernel),
            _ => None,
        }
    }

    /// Claims `mode`, or confirms it is the mode already held.
    ///
    /// # Errors
    /// [`HostError::InvalidState`] when the other mode is held.
    pub fn latch(&self, mode: ExecutionMode) -> Result<(), HostError> {
        match self
            .0
            .compare_exchange(0, mode.code(), Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(held) if held == mode.code() => Ok(()),
            Err(_) => {
                let held = self.latched_mode().map_or("?", ExecutionMode::name);
                Err(HostError::InvalidState(format!(
                    "this worker's execution mode is latched to {held}; {} is refused \
                     (a mode is claimed once and never undone{})",
                    mode.name(),
                    if held == "KERNEL" {
                        ": a KERNEL context refuses program launch"
                    } else {
                        ""
                    }
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ExecutionMode::*;

    #[test]
    fn latch_table() {
        // (claims in order, result of each, final mode)
        let rows: &[(&[ExecutionMode], &[bool], Option<ExecutionMode>)] = &[
            (&[], &[], None),
            (&[Program], &[true], Some(Program)),
            (&[Kernel], &[true], Some(Kernel)),
            (&[Program, Program], &[true, true], Some(Program)),
            (&[Program, Kernel], &[true, false], Some(Program)),
            (&[Kernel, Program], &[true, false], Some(Kernel)),
            (
                &[Kernel, Program, Kernel],
                &[true, false, true],
                Some(Kernel),
            ),
        ];
        for (claims, oks, mode) in rows {
            let l = ExecutionModeLatch::new();
            assert_eq!(l.latched_mode(), None, "unlatched start");
            for (m, ok) in claims.iter().zip(*oks) {
                let r = l.latch(*m);
                assert_eq!(r.is_ok(), *ok, "{claims:?}: {m:?}");
                if let Err(e) = r {
                    assert!(matches!(e, HostError::InvalidState(_)), "{e}");
                }
            }
            assert_eq!(l.latched_mode(), *mode, "{claims:?}");
        }
    }

    #[test]
    fn a_kernel_context_refuses_program_launch_by_name() {
        let l = ExecutionModeLatch::new();
        l.latch(Kernel).unwrap();
        let e = l.latch(Program).unwrap_err().to_string();
        assert!(e.contains("KERNEL context refuses program launch"), "{e}");
    }

    #[test]
    fn concurrent_claims_agree_on_one_mode() {
        for _ in 0..50 {
            let l = std::sync::Arc::new(ExecutionModeLatch::new());
            let ts: Vec<_> = [Program, Kernel, Program, Kernel]
                .into_iter()
                .map(|m| {
                    let l = l.clone();
                    std::thread::spawn(move || (m, l.latch(m).is_ok()))
                })
                .collect();
            let results: Vec<_> = ts.into_iter().map(|t| t.join().unwrap()).collect();
            let held = l.latched_mode().unwrap();
            for (m, ok) in results {
                assert_eq!(ok, m == held);
            }
        }
    }
}
