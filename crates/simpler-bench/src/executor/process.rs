//! What the process costs the OS, read from Linux: its OS thread count
//! (`/proc/self/status`), its threads' context switches (`/proc/self/task/*/status`) and
//! its CPU time (`getrusage(RUSAGE_SELF)`). Read-only; the one `unsafe` call of the bench
//! crate (getrusage) lives here.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use super::ExecutorBenchError;

fn read(path: &Path) -> Result<String, ExecutorBenchError> {
    std::fs::read_to_string(path).map_err(|source| ExecutorBenchError::Os {
        what: path.display().to_string(),
        source,
    })
}

/// The number after `key:` in a `/proc/.../status` text.
fn field(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        rest.trim().parse().ok()
    })
}

fn missing(path: &Path, key: &str) -> ExecutorBenchError {
    ExecutorBenchError::Os {
        what: path.display().to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, format!("no `{key}:` line")),
    }
}

/// OS threads of the process now (`Threads:` of `/proc/self/status`).
///
/// # Errors
/// [`ExecutorBenchError::Os`] when the file cannot be read or has no such line.
pub fn os_threads() -> Result<u64, ExecutorBenchError> {
    let path = Path::new("/proc/self/status");
    field(&read(path)?, "Threads").ok_or_else(|| missing(path, "Threads"))
}

/// Context switches (voluntary + nonvoluntary) of each live thread of the process, by
/// thread id.
///
/// # Errors
/// [`ExecutorBenchError::Os`] when `/proc/self/task` cannot be listed. A thread that
/// ends while it is read is left out.
pub fn context_switches() -> Result<HashMap<u64, u64>, ExecutorBenchError> {
    let dir = Path::new("/proc/self/task");
    let entries = std::fs::read_dir(dir).map_err(|source| ExecutorBenchError::Os {
        what: dir.display().to_string(),
        source,
    })?;
    let mut out = HashMap::new();
    for entry in entries.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue; // the thread ended
        };
        let switches = field(&status, "voluntary_ctxt_switches").unwrap_or(0)
            + field(&status, "nonvoluntary_ctxt_switches").unwrap_or(0);
        out.insert(tid, switches);
    }
    Ok(out)
}

/// Context switches between two [`context_switches`] readings: each thread's increase,
/// a thread started in between counted from zero (threads that ended are lost).
pub fn switches_between(before: &HashMap<u64, u64>, after: &HashMap<u64, u64>) -> u64 {
    after
        .iter()
        .map(|(tid, &n)| n.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum()
}

/// User + system CPU time the process has used so far, every thread's (living or ended).
///
/// # Errors
/// [`ExecutorBenchError::Os`] (naming `getrusage`) when the call fails.
pub fn cpu_time() -> Result<Duration, ExecutorBenchError> {
    // SAFETY: rusage is a plain C struct of integers; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage for the call to fill.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return Err(ExecutorBenchError::Os {
            what: "getrusage(RUSAGE_SELF)".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Ok(tv(usage.ru_utime) + tv(usage.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_by_exact_key() {
        let s =
            "Name:\tx\nThreads:\t7\nvoluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(field(s, "Threads"), Some(7));
        assert_eq!(field(s, "voluntary_ctxt_switches"), Some(10));
        assert_eq!(field(s, "nonvoluntary_ctxt_switches"), Some(3));
        assert_eq!(field(s, "Thread"), None);
    }

    #[test]
    fn a_live_thread_shows_in_the_readings() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // `/proc/thread-self` links to `<pid>/task/<tid>`.
            let link = std::fs::read_link("/proc/thread-self").unwrap();
            let tid: u64 = link.file_name().unwrap().to_str().unwrap().parse().unwrap();
            tid_tx.send(tid).unwrap();
            rx.recv().ok();
        });
        let tid = tid_rx.recv().unwrap();
        assert!(
            os_threads().unwrap() >= 2,
            "this thread and the spawned one"
        );
        assert!(context_switches().unwrap().contains_key(&tid));
        tx.send(()).unwrap();
        t.join().unwrap();
        let spent = cpu_time().unwrap();
        let busy = std::time::Instant::now();
        while busy.elapsed() < Duration::from_millis(30) {
            std::hint::spin_loop();
        }
        assert!(cpu_time().unwrap() > spent);
    }

    #[test]
    fn switches_count_increases_and_new_threads() {
        let before = HashMap::from([(1, 10), (2, 5)]);
        let after = HashMap::from([(1, 12), (3, 4)]);
        assert_eq!(switches_between(&before, &after), 6);
    }
}
