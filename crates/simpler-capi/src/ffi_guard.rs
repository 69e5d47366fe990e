//! The frame every entry runs in: the body runs under `catch_unwind` (a panic becomes
//! `SIMPLER_STATUS_INTERNAL` with its message), its [`Failure`] becomes the status the C
//! caller gets, and the thread's last-error text is set (empty on success). No Rust error
//! or panic crosses the boundary (`docs/c-abi.md`). It owns the per-thread last-error
//! buffer and nothing else.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::status::{Failure, Outcome, SimplerStatus};

thread_local! {
    /// This thread's last failure text, NUL-terminated; empty after a success.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // Interior NULs cannot be represented in a C string: they become spaces.
    let text = CString::new(message.replace('\0', " ")).expect("NULs were replaced");
    LAST_ERROR.with(|l| *l.borrow_mut() = text);
}

/// Runs `body` as the entry `entry` (the C function's name, for the text of a panic) and
/// returns its status, setting the thread's last error.
pub fn run(entry: &str, body: impl FnOnce() -> Outcome) -> i32 {
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Err(Failure::new(
            SimplerStatus::Internal,
            format!("{entry}: internal error (a bug in simpler): {what}"),
        ))
    });
    match outcome {
        Ok(()) => {
            set_last_error("");
            SimplerStatus::Ok as i32
        }
        Err(f) => {
            set_last_error(&format!("{entry}: {}", f.message));
            f.status as i32
        }
    }
}

/// The thread's last-error text, valid until this thread's next entry call.
pub fn last_error_ptr() -> *const c_char {
    // The CString lives in the thread-local until the next `set_last_error` on this thread
    // replaces it, which only an entry call does.
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        LAST_ERROR.with(|l| l.borrow().to_string_lossy().into_owned())
    }

    #[test]
    fn a_failure_sets_the_text_and_a_success_clears_it() {
        let s = run("simpler_x", || {
            Err(Failure::invalid("size", "must not be 0"))
        });
        assert_eq!(s, SimplerStatus::InvalidArgument as i32);
        assert_eq!(last(), "simpler_x: `size`: must not be 0");
        assert_eq!(run("simpler_x", || Ok(())), 0);
        assert_eq!(last(), "");
    }

    #[test]
    fn a_panic_is_internal_and_named() {
        let s = run("simpler_y", || panic!("broken invariant"));
        assert_eq!(s, SimplerStatus::Internal as i32);
        assert!(last().contains("simpler_y") && last().contains("broken invariant"));
    }
}
