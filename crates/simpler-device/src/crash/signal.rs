//! The signal handlers and the device threads' alternate signal stacks: with the fault-free
//! read of `peek` and the slab's chunk access, the only `unsafe` code of the crash reporter.
//!
//! [`install`] puts one handler on SIGSEGV, SIGBUS, SIGFPE and SIGABRT (`sigaction`,
//! `SA_SIGINFO | SA_ONSTACK`), remembering the handlers it replaces. On a device thread the
//! handler formats the report into a buffer on its stack and writes it to stderr with
//! `write(2)`: no allocation, no lock, nothing but async-signal-safe calls. Then, on every
//! thread, it hands the signal to the handler it replaced: a function is called as it
//! expects; the default action (or an ignored fault) is restored and the signal raised again
//! if it was sent, or left to recur when the faulting instruction runs again, so the
//! process ends by the same signal as it would have without the reporter. A device thread
//! runs its handler on an alternate stack of its own ([`AltStack`]) so a stack overflow can
//! be reported too. It also registers an `on_exit` function: a kernel or orchestration
//! that calls `exit()` is reported the same way before the process ends with its status.

use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Once, OnceLock};

use libc::c_int;

use super::report::{self, Buf, Fault};
use super::tables::{self, CodeKind};

/// The signals the reporter takes.
const SIGNALS: [c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGABRT];

/// The handler each signal had before [`install`].
static PREVIOUS: [OnceLock<Action>; 4] = [const { OnceLock::new() }; 4];

/// The page size (read once at install).
static PAGE: AtomicU64 = AtomicU64::new(4096);

/// The thread id of the device thread writing a report (0: none).
static REPORTER: AtomicI32 = AtomicI32::new(0);

/// Reports written; past [`MAX_REPORTS`] (a replaced handler that keeps resuming a
/// faulting thread) no more are.
static REPORTS: AtomicU32 = AtomicU32::new(0);
const MAX_REPORTS: u32 = 16;

/// Bytes of each device thread's alternate signal stack (a guard page below it).
const ALT_STACK: usize = 64 << 10;

/// A saved `sigaction`.
struct Action(libc::sigaction);

// SAFETY: a `sigaction` is plain data (a handler address, flags and a signal mask); it is
// written once before being shared and only read afterwards.
unsafe impl Sync for Action {}
// SAFETY: as above: plain data.
unsafe impl Send for Action {}

/// The page size (4096 until [`install`] has read it).
pub(crate) fn page_size() -> u64 {
    PAGE.load(Ordering::Relaxed)
}

/// The calling thread's OS id.
pub(crate) fn gettid() -> i32 {
    // SAFETY: `gettid` takes no arguments, cannot fail and is async-signal-safe.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Whether `SIMPLER_CRASH_REPORT` (its value, if set) asks for crash reports: `0` turns
/// them off, unset or `1` leaves them on; any other value warns on stderr, naming it, and
/// leaves them on, as every other `SIMPLER_*` variable's bad value does.
fn reports_wanted(value: Option<&std::ffi::OsStr>) -> bool {
    match value.map(|v| v.to_str()) {
        None | Some(Some("1")) => true,
        Some(Some("0")) => false,
        Some(v) => {
            eprintln!(
                "simpler: warning: SIMPLER_CRASH_REPORT={:?} is neither 0 nor 1; crash reports \
                 stay on",
                v.unwrap_or("<not UTF-8>")
            );
            true
        }
    }
}

/// Installs the handlers, once per process. `SIMPLER_CRASH_REPORT=0` leaves the process's
/// handlers alone.
pub(crate) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: `sysconf` has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE.store(page as u64, Ordering::Relaxed);
        }
        if !reports_wanted(std::env::var_os("SIMPLER_CRASH_REPORT").as_deref()) {
            return;
        }
        // SAFETY: `on_exit` only records the function; it runs at `exit()` on the thread
        // that called it, with the status (glibc).
        unsafe { on_exit(on_process_exit, std::ptr::null_mut()) };
        let handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = on_signal;
        for (i, &sig) in SIGNALS.iter().enumerate() {
            // SAFETY: an all-zero `sigaction` is a valid value (SIG_DFL, no flags, empty
            // mask); every field we rely on is then set.
            let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
            new.sa_sigaction = handler as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            // SAFETY: as above.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: `sa_mask` is a valid `sigset_t` to initialize; `sigaction` reads
            // `new` and writes `old`, both valid for the call.
            let ok = unsafe {
                libc::sigemptyset(&mut new.sa_mask);
                libc::sigaction(sig, &new, &mut old) == 0
            };
            if ok {
                let _ = PREVIOUS[i].set(Action(old));
            }
        }
    });
}

extern "C" {
    /// glibc's `on_exit(3)`: `f(status, arg)` runs at `exit()`, on the calling thread.
    fn on_exit(f: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
}

/// Runs at `exit()`: when the thread that called it is a device thread inside a user call
/// (a kernel or orchestration called `exit`), says so on stderr before the process ends.
extern "C" fn on_process_exit(status: c_int, _arg: *mut c_void) {
    let Some(slot) = tables::thread_of(gettid()) else {
        return;
    };
    let view = slot.view();
    let user = [CodeKind::Kernel as u32, CodeKind::Orchestration as u32];
    if !user.contains(&view.code) || REPORTS.fetch_add(1, Ordering::Relaxed) >= MAX_REPORTS {
        return;
    }
    let mut buf = Buf::new();
    report::write_exit(&mut buf, Some(status), &view);
    write_stderr(buf.as_bytes());
}

/// The handler of every reported signal.
extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: `__errno_location` returns this thread's errno, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    let tid = gettid();
    let mut owner = false;
    if let Some(slot) = tables::thread_of(tid) {
        match REPORTER.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                owner = true;
                if REPORTS.fetch_add(1, Ordering::Relaxed) < MAX_REPORTS {
                    // SAFETY: the kernel passes a valid `siginfo_t` to an SA_SIGINFO
                    // handler; `si_addr` is defined for every signal (meaningful for the
                    // faults the report reads it for).
                    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as u64) };
                    let fault = Fault {
                        signal: sig,
                        code,
                        addr,
                    };
                    let mut buf = Buf::new();
                    report::write(&mut buf, &fault, &slot.view(), PAGE.load(Ordering::Relaxed));
                    write_stderr(buf.as_bytes());
                }
            }
            // A signal while this thread reports or chains (abort() in the replaced
            // handler): no second report.
            Err(t) if t == tid => {}
            // Another device thread is reporting and about to end the process: let it.
            Err(_) => pause(2000),
        }
    }
    // SAFETY: `sig`, `info` and `ctx` are the kernel's arguments of this handler, passed on
    // unchanged.
    unsafe { chain(sig, info, ctx) };
    if owner {
        REPORTER.store(0, Ordering::Release);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Hands the signal to the handler [`install`] replaced.
///
/// # Safety
/// The arguments must be those the kernel passed to [`on_signal`].
unsafe fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let prev = SIGNALS
        .iter()
        .position(|&s| s == sig)
        .and_then(|i| PREVIOUS[i].get());
    // SAFETY: the kernel's `info` is valid for the handler's duration.
    let sent = unsafe { (*info).si_code } <= 0;
    let handler = prev.map_or(libc::SIG_DFL, |a| a.0.sa_sigaction);
    if handler == libc::SIG_IGN && sent {
        return;
    }
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: an all-zero `sigaction` is SIG_DFL with no flags and an empty mask;
        // `sigaction` and `raise` are async-signal-safe.
        unsafe {
            let dfl: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
            if sent {
                // Blocked until this handler returns, then the default action.
                libc::raise(sig);
            }
        }
        // A fault raised by an instruction recurs when it runs again, now with the default
        // action.
        return;
    }
    let flags = prev.map_or(0, |a| a.0.sa_flags);
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: a handler installed with SA_SIGINFO has this signature; it gets the
        // kernel's arguments unchanged.
        unsafe {
            let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                std::mem::transmute(handler);
            f(sig, info, ctx);
        }
    } else {
        // SAFETY: a handler installed without SA_SIGINFO takes the signal number only.
        unsafe {
            let f: extern "C" fn(c_int) = std::mem::transmute(handler);
            f(sig);
        }
    }
}

/// Writes all of `bytes` to stderr with `write(2)` (retrying partial writes and EINTR).
fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid buffer of `bytes.len()` bytes; `write` is
        // async-signal-safe.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        if n > 0 {
            bytes = &bytes[n as usize..];
        } else if n < 0
            // SAFETY: errno of this thread, as in `on_signal`.
            && unsafe { *libc::__errno_location() } == libc::EINTR
        {
            continue;
        } else {
            return;
        }
    }
}

/// Sleeps `ms` milliseconds (async-signal-safe).
fn pause(ms: u64) {
    let t = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    // SAFETY: `t` is a valid timespec; a null remainder is allowed.
    unsafe { libc::nanosleep(&t, std::ptr::null_mut()) };
}

/// A device thread's alternate signal stack, installed for the thread's life and replaced by
/// the one it had (if any) when dropped on that thread.
pub(crate) struct AltStack {
    map: *mut c_void,
    len: usize,
    old: libc::stack_t,
}

impl AltStack {
    /// Maps a stack with a guard page below it and makes it the calling thread's
    /// alternate signal stack; `None` if either step fails (signals then run on whatever
    /// stack the thread has).
    pub(crate) fn install() -> Option<AltStack> {
        let page = PAGE.load(Ordering::Relaxed) as usize;
        let len = ALT_STACK + page;
        // SAFETY: an anonymous private mapping at an address of the kernel's choice; no
        // existing memory is affected.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return None;
        }
        let stack = libc::stack_t {
            // SAFETY: `page < len`, so the offset stays inside the mapping.
            ss_sp: unsafe { map.cast::<u8>().add(page) }.cast(),
            ss_flags: 0,
            ss_size: ALT_STACK,
        };
        // SAFETY: an all-zero `stack_t` is a valid value to receive the old stack.
        let mut old: libc::stack_t = unsafe { std::mem::zeroed() };
        // SAFETY: the first page lies inside our mapping; `stack` describes the rest of it,
        // which stays mapped until `drop` restores `old`; `old` is valid to write.
        let ok = unsafe {
            libc::mprotect(map, page, libc::PROT_NONE) == 0
                && libc::sigaltstack(&stack, &mut old) == 0
        };
        if !ok {
            // SAFETY: the mapping is ours and not in use.
            unsafe { libc::munmap(map, len) };
            return None;
        }
        Some(AltStack { map, len, old })
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        // SAFETY: this runs on the thread that installed the stack (the guard lives on it)
        // and not inside a handler, so the stack is not in use; the old stack (or
        // SS_DISABLE) is restored before the mapping goes away.
        unsafe {
            let mut old = self.old;
            old.ss_flags &= libc::SS_DISABLE;
            if libc::sigaltstack(&old, std::ptr::null_mut()) == 0 {
                libc::munmap(self.map, self.len);
            }
        }
    }
}

#[cfg(test)]
mod env_tests {
    use super::reports_wanted;
    use std::ffi::OsStr;

    #[test]
    fn crash_report_values_zero_is_off_and_anything_else_stays_on() {
        assert!(reports_wanted(None));
        assert!(reports_wanted(Some(OsStr::new("1"))));
        assert!(!reports_wanted(Some(OsStr::new("0"))));
        // A bad value warns and keeps the reports: a typo never silently changes behaviour.
        assert!(reports_wanted(Some(OsStr::new("banana"))));
        assert!(reports_wanted(Some(OsStr::new("off"))));
    }
}
