//! [`WorkerOptions`]: what a level-3 (or higher) worker is made of — its chips and how
//! they are isolated, its sub workers, the heap ring's size and the timeouts — and their
//! validation, each refusal naming the option (`docs/l3-worker.md` §1, §8). Nothing here
//! starts anything.

use std::time::Duration;

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

/// Smallest heap of the ring, in bytes.
pub const MIN_HEAP_RING_SIZE: u64 = 1 << 20;

/// The configuration of a [`Worker`](crate::Worker).
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// The level, at least 3; a label in messages (the engine is the same at every level).
    pub level: u32,
    /// One configuration per chip; chip `i` is worker id `i`.
    pub chips: Vec<WorkerConfig>,
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
        if self.chips.is_empty() && subs == 0 {
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
    }
}
