//! What the endurance tests measure of a process: its threads, open descriptors, memfd
//! mappings and resident memory, and the entries of /dev/shm; and the check that two
//! snapshots are flat.

#![allow(dead_code)] // each test binary uses part of it

use std::path::PathBuf;

/// One snapshot of process `pid` (`"self"` for this one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Entries of /proc/<pid>/task.
    pub threads: usize,
    /// Entries of /proc/<pid>/fd.
    pub fds: usize,
    /// Lines of /proc/<pid>/maps mapping a memfd (the heap ring, shared buffers, mailboxes).
    pub memfd_maps: usize,
    /// Entries of /dev/shm (named shared memory; the engine makes none).
    pub shm: Vec<PathBuf>,
    /// Resident memory, bytes.
    pub rss: u64,
}

fn entries(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

impl Probe {
    /// This process now.
    pub fn this() -> Probe {
        Probe::of("self")
    }

    /// Process `pid` (`"self"` or a number) now.
    pub fn of(pid: &str) -> Probe {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap_or_default();
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let mut shm: Vec<PathBuf> = std::fs::read_dir("/dev/shm")
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        shm.sort();
        Probe {
            threads: entries(&format!("/proc/{pid}/task")),
            fds: entries(&format!("/proc/{pid}/fd")),
            memfd_maps: maps.lines().filter(|l| l.contains("/memfd:")).count(),
            shm,
            // SAFETY: sysconf has no preconditions.
            rss: pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64,
        }
    }

    /// Asserts that `self` (taken after `runs` runs) kept threads, descriptors, memfd
    /// mappings and /dev/shm where `before` had them, and grew its resident memory by less
    /// than `rss_bound` bytes; returns the growth. `who` names the process in messages.
    pub fn assert_flat_since(&self, before: &Probe, who: &str, runs: usize, rss_bound: u64) -> u64 {
        assert_eq!(
            self.threads, before.threads,
            "{who}: thread count is flat over {runs} runs"
        );
        assert_eq!(
            self.fds, before.fds,
            "{who}: descriptors are flat over {runs} runs"
        );
        assert_eq!(
            self.memfd_maps, before.memfd_maps,
            "{who}: memfd mappings are flat over {runs} runs"
        );
        assert_eq!(self.shm, before.shm, "{who}: /dev/shm is as it was");
        let grown = self.rss.saturating_sub(before.rss);
        assert!(
            grown < rss_bound,
            "{who}: resident memory grew {grown} bytes over {runs} runs (bound {rss_bound})"
        );
        grown
    }
}
