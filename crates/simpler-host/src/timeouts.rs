//! Timeouts (`docs/health.md` §8): defaults, the `SIMPLER_*_TIMEOUT_*` environment
//! variables, and the ordering rules between them.
//!
//! Parsing: the value is trimmed, must be a whole decimal token (no sign, no unit), ≥ 1, and
//! at most `i32::MAX` milliseconds (for the op-execute timeout, given in microseconds:
//! `i32::MAX` × 1000 µs). An invalid value keeps the default and yields a warning.
//!
//! Every binding resolves them here, so each variable means the same from the CLI, Rust
//! (`WorkerConfig::default()`) and Python (`Worker()`): on the sim too, the scheduler
//! timeout bounds a run in which nothing runs and nothing progresses, the op-execute timeout
//! bounds each kernel dispatch, and the stream-sync timeout bounds the host's wait for a run
//! (`docs/health.md` §8; the two clocks: `docs/chip-runtime.md`).
//! Ordering (checked on hardware platforms; the sim skips it, as upstream does): scheduler
//! < op-execute < stream-sync, and stream-sync > scheduler + 1.5 s; when an override breaks
//! it, op-execute and stream-sync fall back to their defaults and the scheduler override is
//! dropped, with a warning.

use std::time::Duration;

/// Default op-execute timeout (45 s).
pub const DEFAULT_OP_EXECUTE: Duration = Duration::from_secs(45);
/// Default stream-synchronize timeout (50 s): how long a run's completion may take.
pub const DEFAULT_STREAM_SYNC: Duration = Duration::from_secs(50);
/// Default scheduler no-progress watchdog (10 s).
pub const DEFAULT_SCHEDULER: Duration = Duration::from_secs(10);
/// Default `get/set_tensor_data` wait (15 s).
pub const DEFAULT_TENSOR_DATA: Duration = Duration::from_secs(15);

/// The four timeouts a worker runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Longest one kernel dispatch may execute (`SIMPLER_OP_EXECUTE_TIMEOUT_US`).
    pub op_execute: Duration,
    /// Longest the host waits for a run's boundaries (`SIMPLER_STREAM_SYNC_TIMEOUT_MS`).
    pub stream_sync: Duration,
    /// Scheduler no-progress watchdog (`SIMPLER_SCHEDULER_TIMEOUT_MS`).
    pub scheduler: Duration,
    /// `get/set_tensor_data` wait (`SIMPLER_TENSOR_DATA_TIMEOUT_MS`).
    pub tensor_data: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            op_execute: DEFAULT_OP_EXECUTE,
            stream_sync: DEFAULT_STREAM_SYNC,
            scheduler: DEFAULT_SCHEDULER,
            tensor_data: DEFAULT_TENSOR_DATA,
        }
    }
}

/// Parses one value: trimmed, whole decimal token, ≥ 1, at most `max`.
pub fn parse_value(text: &str, max: u64) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{text}` is not a whole decimal number"));
    }
    match t.parse::<u64>() {
        Ok(0) => Err(format!("`{text}` must be at least 1")),
        Ok(v) if v <= max => Ok(v),
        _ => Err(format!("`{text}` is larger than {max}")),
    }
}

impl Timeouts {
    /// Resolves the timeouts from `var` (a lookup of environment variables), checking the
    /// ordering when `check_ordering`. Returns the timeouts and one warning per value kept
    /// at its default.
    pub fn resolve(
        var: impl Fn(&str) -> Option<String>,
        check_ordering: bool,
    ) -> (Timeouts, Vec<String>) {
        let mut warnings = Vec::new();
        let mut read = |name: &str, max: u64| -> Option<u64> {
            let text = var(name)?;
            match parse_value(&text, max) {
                Ok(v) => Some(v),
                Err(e) => {
                    warnings.push(format!("{name}: {e}; keeping the default"));
                    None
                }
            }
        };
        let ms_max = i32::MAX as u64;
        let op = read("SIMPLER_OP_EXECUTE_TIMEOUT_US", ms_max * 1000).map(Duration::from_micros);
        let sync = read("SIMPLER_STREAM_SYNC_TIMEOUT_MS", ms_max).map(Duration::from_millis);
        let sched = read("SIMPLER_SCHEDULER_TIMEOUT_MS", ms_max).map(Duration::from_millis);
        let tensor = read("SIMPLER_TENSOR_DATA_TIMEOUT_MS", ms_max).map(Duration::from_millis);
        let mut t = Timeouts {
            op_execute: op.unwrap_or(DEFAULT_OP_EXECUTE),
            stream_sync: sync.unwrap_or(DEFAULT_STREAM_SYNC),
            scheduler: sched.unwrap_or(DEFAULT_SCHEDULER),
            tensor_data: tensor.unwrap_or(DEFAULT_TENSOR_DATA),
        };
        if check_ordering && (op.is_some() || sync.is_some() || sched.is_some()) {
            if let Err(why) = t.check_ordering() {
                warnings.push(format!("{why}; using the default op-execute and stream-sync timeouts and no scheduler override"));
                t.op_execute = DEFAULT_OP_EXECUTE;
                t.stream_sync = DEFAULT_STREAM_SYNC;
                t.scheduler = DEFAULT_SCHEDULER;
            }
        }
        (t, warnings)
    }

    /// Resolves from the process environment (sim: no ordering check), printing warnings.
    pub fn from_env() -> Timeouts {
        let (t, warnings) = Timeouts::resolve(|n| std::env::var(n).ok(), false);
        for w in warnings {
            eprintln!("simpler: warning: {w}");
        }
        t
    }

    /// The ordering rules, in the documented order (`docs/health.md` §8); the error names the first one broken.
    pub fn check_ordering(&self) -> Result<(), String> {
        if self.scheduler >= self.op_execute {
            return Err(format!(
                "scheduler timeout {:?} must be below op-execute {:?}",
                self.scheduler, self.op_execute
            ));
        }
        if self.op_execute >= self.stream_sync {
            return Err(format!(
                "op-execute timeout {:?} must be below stream-sync {:?}",
                self.op_execute, self.stream_sync
            ));
        }
        if self.stream_sync <= self.scheduler + Duration::from_millis(1500) {
            return Err(format!(
                "stream-sync timeout {:?} must exceed the scheduler timeout {:?} by more than 1.5 s",
                self.stream_sync, self.scheduler
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing_rules() {
        let cases: [(&str, Result<u64, &str>); 9] = [
            ("10", Ok(10)),
            (" 7 ", Ok(7)),
            ("0", Err("at least 1")),
            ("-5", Err("not a whole decimal")),
            ("+5", Err("not a whole decimal")),
            ("5ms", Err("not a whole decimal")),
            ("1e3", Err("not a whole decimal")),
            ("", Err("not a whole decimal")),
            ("2147483648", Err("larger than")),
        ];
        // The op-execute timeout is in microseconds, up to i32::MAX milliseconds.
        let (t, w) = Timeouts::resolve(
            env(&[("SIMPLER_OP_EXECUTE_TIMEOUT_US", "2147483648000")]),
            false,
        );
        assert_eq!(t.op_execute, DEFAULT_OP_EXECUTE);
        assert!(w[0].contains("larger than 2147483647000"), "{w:?}");
        let (t, _) = Timeouts::resolve(
            env(&[("SIMPLER_OP_EXECUTE_TIMEOUT_US", "2147483647000")]),
            false,
        );
        assert_eq!(t.op_execute, Duration::from_millis(i32::MAX as u64));
        for (text, want) in cases {
            match (parse_value(text, i32::MAX as u64), want) {
                (Ok(v), Ok(w)) => assert_eq!(v, w, "{text}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{text}: {e}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |n| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn defaults_and_overrides() {
        let (t, w) = Timeouts::resolve(env(&[]), true);
        assert_eq!(t, Timeouts::default());
        assert!(w.is_empty());
        assert_eq!(t.op_execute, Duration::from_secs(45));
        assert_eq!(t.stream_sync, Duration::from_secs(50));
        assert_eq!(t.scheduler, Duration::from_secs(10));
        assert_eq!(t.tensor_data, Duration::from_secs(15));
        // The CI values of upstream: 2 / 3 / 4 s, ordered.
        let ci = [
            ("SIMPLER_SCHEDULER_TIMEOUT_MS", "2000"),
            ("SIMPLER_OP_EXECUTE_TIMEOUT_US", "3000000"),
            ("SIMPLER_STREAM_SYNC_TIMEOUT_MS", "4000"),
        ];
        let (t, w) = Timeouts::resolve(env(&ci), true);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            (t.scheduler, t.op_execute, t.stream_sync),
            (
                Duration::from_secs(2),
                Duration::from_secs(3),
                Duration::from_secs(4)
            )
        );
    }

    #[test]
    fn a_bad_value_warns_and_keeps_the_default() {
        let (t, w) = Timeouts::resolve(
            env(&[
                ("SIMPLER_SCHEDULER_TIMEOUT_MS", "ten"),
                ("SIMPLER_TENSOR_DATA_TIMEOUT_MS", "250"),
            ]),
            false,
        );
        assert_eq!(t.scheduler, DEFAULT_SCHEDULER);
        assert_eq!(t.tensor_data, Duration::from_millis(250));
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("SIMPLER_SCHEDULER_TIMEOUT_MS"));
    }

    #[test]
    fn each_ordering_rule_is_checked_in_order() {
        let rows: [(&[(&str, &str)], &str); 3] = [
            (
                &[("SIMPLER_SCHEDULER_TIMEOUT_MS", "50000")],
                "below op-execute",
            ),
            (
                &[("SIMPLER_OP_EXECUTE_TIMEOUT_US", "60000000")],
                "below stream-sync",
            ),
            (
                &[
                    ("SIMPLER_SCHEDULER_TIMEOUT_MS", "2000"),
                    ("SIMPLER_OP_EXECUTE_TIMEOUT_US", "3000000"),
                    ("SIMPLER_STREAM_SYNC_TIMEOUT_MS", "3400"),
                ],
                "by more than 1.5 s",
            ),
        ];
        for (vars, want) in rows {
            let (t, w) = Timeouts::resolve(env(vars), true);
            assert!(w.iter().any(|m| m.contains(want)), "{vars:?}: {w:?}");
            assert_eq!(
                (t.op_execute, t.stream_sync, t.scheduler),
                (DEFAULT_OP_EXECUTE, DEFAULT_STREAM_SYNC, DEFAULT_SCHEDULER)
            );
            // The sim skips the ordering check: the overrides stand.
            let (sim, w) = Timeouts::resolve(env(vars), false);
            assert!(w.is_empty());
            assert_ne!(
                (sim.op_execute, sim.stream_sync, sim.scheduler),
                (DEFAULT_OP_EXECUTE, DEFAULT_STREAM_SYNC, DEFAULT_SCHEDULER)
            );
        }
    }

    #[test]
    fn the_tensor_data_timeout_stays_outside_the_ordering() {
        // (variables, warnings, tensor-data timeout, op/sync/scheduler back to defaults)
        type Row<'a> = (&'a [(&'a str, &'a str)], usize, Duration, bool);
        let rows: &[Row<'_>] = &[
            // Alone, even far above every other timeout, it triggers no ordering check.
            (
                &[("SIMPLER_TENSOR_DATA_TIMEOUT_MS", "2000000000")],
                0,
                Duration::from_millis(2_000_000_000),
                false,
            ),
            // A broken ordering resets op/sync/scheduler and keeps the tensor-data override.
            (
                &[
                    ("SIMPLER_SCHEDULER_TIMEOUT_MS", "50000"),
                    ("SIMPLER_TENSOR_DATA_TIMEOUT_MS", "250"),
                ],
                1,
                Duration::from_millis(250),
                true,
            ),
            // A bad tensor-data value warns on its own and keeps its default.
            (
                &[("SIMPLER_TENSOR_DATA_TIMEOUT_MS", "0")],
                1,
                DEFAULT_TENSOR_DATA,
                false,
            ),
        ];
        for (vars, warnings, tensor, reset) in rows {
            let (t, w) = Timeouts::resolve(env(vars), true);
            assert_eq!(w.len(), *warnings, "{vars:?}: {w:?}");
            assert_eq!(t.tensor_data, *tensor, "{vars:?}");
            let defaults = (t.op_execute, t.stream_sync, t.scheduler)
                == (DEFAULT_OP_EXECUTE, DEFAULT_STREAM_SYNC, DEFAULT_SCHEDULER);
            assert!(defaults || !reset, "{vars:?}");
            if *reset {
                assert!(w[0].contains("below op-execute"), "{w:?}");
            }
        }
    }
}
