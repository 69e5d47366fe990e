//! [`WorkerOptions`]: what a level-3 (or higher) worker is made of — its next-level
//! workers (chips, and how they are isolated, or the children a binding makes at level 4
//! and above), its sub workers, the heap ring's size and the timeouts — and their
//! validation, each refusal naming the option (`docs/l3-worker.md` §1, §8,
//! `docs/l4-worker.md` §1). Nothing here starts anything.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use simpler_host::WorkerConfig;

use crate::process::ChildProgram;
use crate::WorkerError;

/// Where the chips run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChipIsolation {
    /// Each chip on a `ChipWorker` in this process (host tensors are lent in place).
    #[default]
    Thread,
    /// Each chip in its own child process (host tensors must be shared memory).
    Process,
}

/// The sub workers.
#[derive(Clone, Debug, Default)]
pub enum SubWorkers {
    /// None.
    #[default]
    None,
    /// This many threads running Rust closures.
    Threads(usize),
    /// This many child processes running `program` (a binding's serialized callables).
    Processes {
        /// How many.
        count: usize,
        /// The child program.
        program: ChildProgram,
    },
}

impl SubWorkers {
    /// How many sub workers.
    pub fn count(&self) -> usize {
        match self {
            SubWorkers::None => 0,
            SubWorkers::Threads(n) => *n,
            SubWorkers::Processes { count, .. } => *count,
        }
    }
}

/// What a next-level child is given when the worker starts it
/// ([`NextLevelChild::start`]).
#[derive(Clone, Debug)]
pub struct ChildStart {
    /// The child's worker id (its lane).
    pub index: usize,
    /// When the whole worker's startup must be over (`WorkerOptions::startup_timeout`
    /// from `init`).
    pub deadline: Instant,
    /// Moves each time a sub task member of this worker ends (a sub task may have written
    /// host memory): a child that caches what it sent for a tensor drops the cache when the
    /// count has moved (`docs/l4-worker.md` §3).
    pub sub_ends: Arc<AtomicU64>,
}

/// Starts one next-level child: returns its endpoint, ready for work, or why it could not
/// start (the worker then shuts down the children already started).
pub type ChildStarter =
    Arc<dyn Fn(ChildStart) -> Result<Box<dyn crate::Endpoint>, WorkerError> + Send + Sync>;

/// A next-level worker a binding makes (level 4 and above: a level-3 worker in this
/// process or on another host), in place of chips (`docs/l4-worker.md` §1).
#[derive(Clone)]
pub struct NextLevelChild {
    /// How messages name it before it has started (`worker 1 (ray actor on node a)`).
    pub describe: String,
    /// Starts it.
    pub start: ChildStarter,
}

impl std::fmt::Debug for NextLevelChild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NextLevelChild")
            .field("describe", &self.describe)
            .finish_non_exhaustive()
    }
}

/// Smallest heap of the ring, in bytes.
pub const MIN_HEAP_RING_SIZE: u64 = 1 << 20;

/// The configuration of a [`Worker`](crate::Worker).
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// The level, at least 3; a label in messages (the engine is the same at every level).
    pub level: u32,
    /// One configuration per chip; chip `i` is worker id `i`.
    pub chips: Vec<WorkerConfig>,
    /// The next-level children of a level-4 (or higher) worker, in place of chips: child
    /// `i` is worker id `i`. Empty at level 3; never together with `chips`.
    pub next_level: Vec<NextLevelChild>,
    /// The device id of each chip, for messages (`chip 1 (device 5)`); empty means
    /// `0..chips.len()`. Distinct.
    pub device_ids: Vec<u32>,
    /// Where the chips run (default [`ChipIsolation::Thread`]).
    pub chip_isolation: ChipIsolation,
    /// The program chip children run; `None` is [`ChildProgram::for_rust`].
    pub chip_program: Option<ChildProgram>,
    /// The sub workers (default none).
    pub sub_workers: SubWorkers,
    /// Bytes of each of the ring's 4 heaps (default 64 MiB, at least 1 MiB).
    pub heap_ring_size: u64,
    /// How long `init` may take to start every endpoint (default 300 s).
    pub startup_timeout: Duration,
    /// How long an `orch.alloc` waits for the ring to reclaim room before RING_FULL
    /// (default 10 s).
    pub deadlock_timeout: Duration,
    /// How long `close()` waits for the runs in flight before it kills the child processes
    /// still running their tasks (which then fail with ENDPOINT_FAILURE); default 30 s.
    /// Endpoints in this process cannot be killed: close waits for them (a chip's own run
    /// timeout bounds its tasks).
    pub close_timeout: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            level: 3,
            chips: Vec::new(),
            next_level: Vec::new(),
            device_ids: Vec::new(),
            chip_isolation: ChipIsolation::Thread,
            chip_program: None,
            sub_workers: SubWorkers::None,
            heap_ring_size: 64 << 20,
            startup_timeout: Duration::from_secs(300),
            deadlock_timeout: Duration::from_secs(10),
            close_timeout: Duration::from_secs(30),
        }
    }
}

impl WorkerOptions {
    /// Checks every option (the chips' own configurations are checked when they start).
    ///
    /// # Errors
    /// [`WorkerError::InvalidConfig`] naming the first bad option.
    pub fn validate(&self) -> Result<(), WorkerError> {
        let bad = |m: String| Err(WorkerError::InvalidConfig(m));
        if self.level < 3 {
            return bad(format!(
                "level must be at least 3 (this engine drives the levels above one chip), got {}",
                self.level
            ));
        }
        let subs = self.sub_workers.count();
        if !matches!(self.sub_workers, SubWorkers::None) && subs == 0 {
            return bad(
                "sub_workers: a pool of 0 sub workers; for none, leave sub_workers at its \
                 default (no sub workers)"
                    .into(),
            );
        }
        if !self.next_level.is_empty() {
            if !self.chips.is_empty() {
                return bad(format!(
                    "a worker's next level is chips or workers of the level below, not both: \
                     it has {} chips and {} next-level workers",
                    self.chips.len(),
                    self.next_level.len()
                ));
            }
            if self.level < 4 {
                return bad(format!(
                    "next-level workers (add_worker / add_remote_worker) need level 4 or \
                     above; this worker has level {}",
                    self.level
                ));
            }
        }
        if self.chips.is_empty() && self.next_level.is_empty() && subs == 0 {
            return bad(
                "the worker needs at least one chip or sub worker: give it chips (`chips` / \
                 Python's `device_ids`) or sub workers (`sub_workers` / Python's \
                 `num_sub_workers`), e.g. pass num_sub_workers=1"
                    .into(),
            );
        }
        if !self.device_ids.is_empty() && self.device_ids.len() != self.chips.len() {
            return bad(format!(
                "device_ids has {} entries for {} chips; give one per chip or none",
                self.device_ids.len(),
                self.chips.len()
            ));
        }
        for (i, d) in self.device_ids.iter().enumerate() {
            if self.device_ids[..i].contains(d) {
                return bad(format!(
                    "device_ids: device {d} appears twice in {:?}; each chip needs its own device",
                    self.device_ids
                ));
            }
        }
        if self.heap_ring_size < MIN_HEAP_RING_SIZE {
            return bad(format!(
                "heap_ring_size must be at least {MIN_HEAP_RING_SIZE} bytes (1 MiB), got {}",
                self.heap_ring_size
            ));
        }
        if self.heap_ring_size > isize::MAX as u64 {
            return bad(format!(
                "heap_ring_size {} is too large to map",
                self.heap_ring_size
            ));
        }
        for (name, t) in [
            ("startup_timeout", self.startup_timeout),
            ("deadlock_timeout", self.deadlock_timeout),
            ("close_timeout", self.close_timeout),
        ] {
            if t.is_zero() {
                return bad(format!("{name} must be positive"));
            }
        }
        Ok(())
    }

    /// The device id of chip `i`.
    pub fn device_id(&self, i: usize) -> u32 {
        self.device_ids.get(i).copied().unwrap_or(i as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(o: WorkerOptions) -> String {
        o.validate().unwrap_err().to_string()
    }

    #[test]
    fn each_bad_option_is_named() {
        let one_chip = || WorkerOptions {
            chips: vec![WorkerConfig::default()],
            ..WorkerOptions::default()
        };
        assert!(one_chip().validate().is_ok());
        assert!(refused(WorkerOptions {
            level: 2,
            ..one_chip()
        })
        .contains("level"));
        let none = refused(WorkerOptions::default());
        assert!(none.contains("at least one chip"), "{none}");
        assert!(
            none.contains("`device_ids`") && none.contains("num_sub_workers=1"),
            "{none}"
        );
        assert!(refused(WorkerOptions {
            sub_workers: SubWorkers::Threads(0),
            ..one_chip()
        })
        .contains("sub_workers"));
        assert!(refused(WorkerOptions {
            chips: vec![WorkerConfig::default(); 2],
            device_ids: vec![3, 3],
            ..one_chip()
        })
        .contains("device 3 appears twice"));
        assert!(refused(WorkerOptions {
            device_ids: vec![1, 2],
            ..one_chip()
        })
        .contains("device_ids has 2 entries"));
        assert!(refused(WorkerOptions {
            heap_ring_size: 4096,
            ..one_chip()
        })
        .contains("heap_ring_size"));
        assert!(refused(WorkerOptions {
            deadlock_timeout: Duration::ZERO,
            ..one_chip()
        })
        .contains("deadlock_timeout"));
        assert!(refused(WorkerOptions {
            close_timeout: Duration::ZERO,
            ..one_chip()
        })
        .contains("close_timeout"));
        let subs_only = WorkerOptions {
            sub_workers: SubWorkers::Threads(2),
            ..WorkerOptions::default()
        };
        assert!(subs_only.validate().is_ok());
        assert_eq!(one_chip().device_id(0), 0);
        let child = || NextLevelChild {
            describe: "worker 0".into(),
            start: Arc::new(|_| Err(WorkerError::InvalidState("not started".into()))),
        };
        let l4 = WorkerOptions {
            level: 4,
            next_level: vec![child()],
            ..WorkerOptions::default()
        };
        assert!(l4.validate().is_ok());
        assert!(refused(WorkerOptions {
            chips: vec![WorkerConfig::default()],
            ..l4.clone()
        })
        .contains("not both"));
        assert!(refused(WorkerOptions {
            level: 3,
            ..l4.clone()
        })
        .contains("level 4 or above"));
    }
}
