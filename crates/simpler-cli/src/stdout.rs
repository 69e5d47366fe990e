//! What the commands print to stdout. A stdout that fails — its reader went away
//! (`simpler run … | true`, `simpler trace summary FILE | head -1`: `EPIPE`) or it cannot take
//! more (a full disk) — ends the printing: the rest of what would have been printed is
//! dropped and nothing panics. For most commands stdout is a report beside the files they
//! write, so a failed stdout does not fail them: every file is still written and the exit
//! status is the command's own (lines go through [`print`], the crate's `out!`/`outln!`
//! macros). A command whose stdout *is* its output (`simpler trace summary`) writes it with
//! [`write`] and fails on any error but a closed pipe. Errors go to stderr as before.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout failed: nothing more is printed.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `args` to stdout and flushes it, unless an earlier write failed (then it writes
/// nothing and returns `Ok`). A closed pipe (`EPIPE`) is the reader's choice: it ends the
/// printing and returns `Ok`.
///
/// # Errors
/// Any other write or flush error (a full disk: `ENOSPC`), returned once; later calls write
/// nothing and return `Ok`.
pub fn write(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    if CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_fmt(args).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) => {
            if CLOSED.swap(true, Ordering::Relaxed) || e.kind() == std::io::ErrorKind::BrokenPipe {
                Ok(())
            } else {
                Err(e)
            }
        }
    }
}

/// Writes `args` to stdout, unless an earlier write failed. A failure other than a closed
/// pipe is noted once on stderr ([`write`] says which are quiet).
pub fn print(args: std::fmt::Arguments<'_>) {
    if let Err(e) = write(args) {
        // Not `eprintln!`: a closed stderr must not panic either.
        let _ = writeln!(
            std::io::stderr(),
            "warning: cannot write to stdout ({e}); nothing more is printed"
        );
    }
}
