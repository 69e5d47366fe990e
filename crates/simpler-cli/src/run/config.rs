//! The configuration `simpler run` runs with, read from the environment once, before
//! anything is built or run: the worker's ([`WorkerConfig::default`], which reads the
//! `SIMPLER_*_TIMEOUT_*` variables) and the ring sizing of the `PTO2_RING_*` variables. Each
//! `PTO2_RING_*` value is parsed and checked against its rule by `simpler_host`
//! ([`RingValue::parse`], [`CallConfig::validate`]; the rules are in `docs/chip-runtime.md`),
//! so a bad one is refused naming the variable (exit code 2) instead of failing the run. The
//! values checked are the values the run gets: they go to the worker as the run's
//! [`CallConfig`], which the worker prefers to reading the environment again.

use simpler_host::{CallConfig, HostError, RingValue, RuntimeEnv, WorkerConfig};

use super::RunError;

/// The [`RuntimeEnv`] field a variable sets.
type RingField = fn(&mut RuntimeEnv) -> &mut Option<RingValue>;

/// The ring-sizing variables, each with the field it sets.
const RING_VARS: [(&str, RingField); 3] = [
    ("PTO2_RING_TASK_WINDOW", |e| &mut e.ring_task_window),
    ("PTO2_RING_HEAP", |e| &mut e.ring_heap),
    ("PTO2_RING_DEP_POOL", |e| &mut e.ring_dep_pool),
];

/// What a run executes with.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The worker's configuration.
    pub worker: WorkerConfig,
    /// The run's options: the ring sizing the environment asks for (fields left `None` use
    /// the worker's defaults).
    pub call: CallConfig,
}

impl RunConfig {
    /// Reads the process environment (timeout warnings are printed by
    /// [`WorkerConfig::default`]).
    ///
    /// # Errors
    /// [`RunError::BadEnvironment`] naming the first `PTO2_RING_*` variable that does not
    /// parse or breaks its rule.
    pub fn from_env() -> Result<RunConfig, RunError> {
        RunConfig::resolve(|v| std::env::var(v).ok(), WorkerConfig::default())
    }

    /// [`RunConfig::from_env`] with `var` looking up the variables and `worker` as the
    /// worker's configuration.
    ///
    /// # Errors
    /// As [`RunConfig::from_env`].
    pub fn resolve(
        var: impl Fn(&str) -> Option<String>,
        worker: WorkerConfig,
    ) -> Result<RunConfig, RunError> {
        let mut call = CallConfig::default();
        for (name, field) in RING_VARS {
            let Some(text) = var(name) else { continue };
            let bad = |reason: String| RunError::BadEnvironment {
                var: name,
                value: text.clone(),
                reason,
            };
            let value = RingValue::parse(&text).map_err(bad)?;
            // Checked alone, so that a broken rule names this variable.
            let mut alone = CallConfig::default();
            *field(&mut alone.runtime_env) = Some(value);
            alone.validate(&worker).map_err(|e| {
                bad(match e {
                    HostError::InvalidConfig(why) => why,
                    other => other.to_string(),
                })
            })?;
            *field(&mut call.runtime_env) = Some(value);
        }
        Ok(RunConfig { worker, call })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(vars: &[(&str, &str)]) -> Result<RunConfig, RunError> {
        let worker = WorkerConfig {
            heap_size: 1 << 20,
            ..WorkerConfig::default()
        };
        RunConfig::resolve(
            |v| {
                vars.iter()
                    .find(|(n, _)| *n == v)
                    .map(|(_, t)| t.to_string())
            },
            worker,
        )
    }

    #[test]
    fn good_values_become_the_runs_ring_sizing() {
        let c = resolve(&[
            ("PTO2_RING_TASK_WINDOW", "64"),
            ("PTO2_RING_DEP_POOL", "8,8,16,16"),
        ])
        .unwrap();
        assert_eq!(
            c.call.runtime_env.ring_task_window,
            Some(RingValue::All(64))
        );
        assert_eq!(c.call.runtime_env.ring_heap, None);
        assert_eq!(
            c.call.runtime_env.ring_dep_pool,
            Some(RingValue::PerRing([8, 8, 16, 16]))
        );
        assert_eq!(c.call.aicpu_thread_num, 0);
        assert_eq!(resolve(&[]).unwrap().call, CallConfig::default());
    }

    #[test]
    fn bad_values_name_the_variable_and_exit_2() {
        let cases = [
            (
                ("PTO2_RING_TASK_WINDOW", "48"),
                "environment variable PTO2_RING_TASK_WINDOW=\"48\": \
                 runtime_env.ring_task_window[0]: must be a power of two",
            ),
            (
                ("PTO2_RING_TASK_WINDOW", "many"),
                "PTO2_RING_TASK_WINDOW=\"many\": `many` is not a number",
            ),
            (("PTO2_RING_DEP_POOL", "8,8"), "`8,8` has 2 values"),
            (
                ("PTO2_RING_HEAP", "1048576"),
                "PTO2_RING_HEAP=\"1048576\": runtime_env.ring_heap needs 4194304 bytes",
            ),
        ];
        for ((var, value), want) in cases {
            let e = resolve(&[(var, value)]).unwrap_err();
            assert!(matches!(e, RunError::BadEnvironment { .. }), "{e:?}");
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(want), "{e} should contain {want}");
        }
    }
}
