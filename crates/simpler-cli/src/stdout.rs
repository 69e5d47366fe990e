//! What the commands print to stdout. A stdout that fails — its reader went away
//! (`simpler run … | true`, `simpler trace summary FILE | head -1`: `EPIPE`) or it cannot take
//! more (a full disk) — ends the printing, not the command: the rest of what would have been
//! printed is dropped, nothing panics, every file the command writes is still written and the
//! exit status is the command's own. Every line the commands print goes through [`print`]
//! (the crate's `out!`/`outln!` macros); errors go to stderr as before.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout failed: nothing more is printed.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `args` to stdout, unless an earlier write failed. A failure other than a closed
/// pipe is noted once on stderr (a closed pipe is the reader's choice and says nothing).
pub fn print(args: std::fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        if !CLOSED.swap(true, Ordering::Relaxed) && e.kind() != std::io::ErrorKind::BrokenPipe {
            // Not `eprintln!`: a closed stderr must not panic either.
            let _ = writeln!(
                std::io::stderr(),
                "warning: cannot write to stdout ({e}); nothing more is printed"
            );
        }
    }
}
