//! What the stall monitor reads of a worker thread: its CPU time, how often it has blocked
//! in the OS, and whether the OS has it asleep now. A worker that has run one slice for
//! long is stalled only if its kernel keeps the thread busy (its CPU time advances: a spin)
//! or blocks in the OS (a sleep, a lock, a blocking call: its voluntary context switches
//! advance, or it is asleep when looked at); one the OS merely has not scheduled (a loaded
//! host) is left alone.
//! The module's `unsafe` blocks are the two libc calls that read a thread's CPU clock.

/// A worker thread's identity for the monitor: its CPU-time clock and its thread id.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ThreadProbe {
    clock: libc::clockid_t,
    tid: i32,
}

impl ThreadProbe {
    /// The calling thread's probe (None when the OS gives no CPU clock).
    pub(crate) fn current() -> Option<ThreadProbe> {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: `pthread_self()` is the calling, live thread; `clock` is a valid place
        // for the result.
        let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
        if rc != 0 {
            return None;
        }
        // SAFETY: `gettid` takes no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        Some(ThreadProbe { clock, tid })
    }

    /// CPU time the thread has used, nanoseconds (None if it cannot be read).
    pub(crate) fn cpu_ns(&self) -> Option<u64> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `self.clock` is the CPU clock of a pool worker, which never exits; `ts`
        // is a valid place for the result.
        let rc = unsafe { libc::clock_gettime(self.clock, &mut ts) };
        (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    /// True if the OS has the thread asleep (state `S` or `D` in its `stat`).
    pub(crate) fn asleep(&self) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{}/stat", self.tid)) else {
            return false;
        };
        // The state follows the command name, which is in parentheses and may hold spaces.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|c| c == 'S' || c == 'D')
    }

    /// Times the thread has given up its CPU to wait in the OS (`voluntary_ctxt_switches`
    /// in its `status`; None if it cannot be read). A thread that only waits for a CPU on a
    /// loaded host does not add to it: those are involuntary switches.
    pub(crate) fn voluntary_switches(&self) -> Option<u64> {
        let path = format!("/proc/self/task/{}/status", self.tid);
        let status = std::fs::read_to_string(path).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::ThreadProbe;
    use std::time::Duration;

    /// A sleep is a voluntary switch; waiting for a CPU (or computing) is not one, so the
    /// count is what tells a polling kernel from a thread the OS has not scheduled.
    #[test]
    fn a_sleep_adds_voluntary_switches_and_a_spin_adds_none() {
        let probe = ThreadProbe::current().expect("a CPU clock on Linux");
        let before = probe.voluntary_switches().expect("readable status");
        for _ in 0..3 {
            std::thread::sleep(Duration::from_micros(200));
        }
        let slept = probe.voluntary_switches().unwrap();
        assert!(slept >= before + 3, "3 sleeps: {before} -> {slept}");
        let cpu = probe.cpu_ns().unwrap();
        while probe.cpu_ns().unwrap() < cpu + 2_000_000 {
            std::hint::spin_loop();
        }
        // Reading /proc does not block either; a preemption would be involuntary.
        let spun = probe.voluntary_switches().unwrap();
        assert!(spun <= slept + 1, "a 2 ms spin: {slept} -> {spun}");
    }
}
