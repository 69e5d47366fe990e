//! What the stall monitor reads of a worker thread: its CPU time and whether the OS has it
//! asleep. A worker that has run one slice for long is stalled only if its kernel keeps
//! the thread busy (its CPU time advances: a spin) or asleep in the OS (a sleep, a lock,
//! a blocking call); one the OS merely has not scheduled (a loaded host) is left alone.
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
}
