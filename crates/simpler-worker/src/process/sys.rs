//! The system calls of the process endpoints that the standard library does not offer:
//! futex wait and wake on a mailbox word shared between processes, and `_exit` for a
//! child whose parent is gone (`docs/l3-worker.md` §5). Every unsafe block of the process
//! endpoints' control path is here; this module knows nothing of the mailbox's layout.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, for at most `timeout`; returns early when woken by
/// [`futex_wake`] from any process mapping the same page, on a signal, or at once when the
/// word already differs. The caller re-reads the word: a return says nothing by itself.
///
/// The futex is the shared (non-private) kind: the kernel keys it by the page's backing
/// object, so a waiter and a waker in two processes that map the same memfd meet.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 32-bit word for the whole call (it is borrowed), and
    // `ts` is a valid timespec on this stack frame; FUTEX_WAIT only reads both. Any error
    // (EAGAIN: the word differs, EINTR, ETIMEDOUT) is a plain return, by the contract above.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every waiter of `word` (in any process).
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned 32-bit word; FUTEX_WAKE does not access memory
    // beyond looking the word's key up.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// Ends this process at once with `code`: no destructors, no `atexit` handlers, no stdio
/// flush — for a child whose parent is gone, whose other threads (a chip's device threads)
/// may be anywhere.
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` has no preconditions; it never returns.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_wait_returns_at_once_on_a_changed_word_and_on_a_wake() {
        let word = Arc::new(AtomicU32::new(5));
        let t = Instant::now();
        futex_wait(&word, 4, Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(1), "the word differed");

        let t = Instant::now();
        futex_wait(&word, 5, Duration::from_millis(30));
        assert!(
            t.elapsed() >= Duration::from_millis(25),
            "the timeout bounds the wait"
        );

        let waker = {
            let word = word.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                word.store(6, Ordering::Release);
                futex_wake(&word);
            })
        };
        let t = Instant::now();
        while word.load(Ordering::Acquire) == 5 {
            futex_wait(&word, 5, Duration::from_secs(10));
        }
        assert!(t.elapsed() < Duration::from_secs(5), "woken, not timed out");
        waker.join().unwrap();
    }
}
