//! `simpler-child`: the Rust child program of the level-3 engine (`docs/l3-worker.md` §5).
//! A parent Worker starts it with the `SIMPLER_CHILD_*` environment; as a chip child it
//! serves one chip until shut down or orphaned. Sub workers of Rust closures are threads of
//! the parent, so the sub role is refused here: sub worker processes run a binding's child
//! program (Python's `python -m simpler._child`).

use std::process::ExitCode;

use simpler_worker::process::{env, serve_chip_child};

fn main() -> ExitCode {
    match std::env::var(env::ROLE).as_deref() {
        Ok("chip") => serve_chip_child(),
        Ok("sub") => {
            eprintln!(
                "simpler-child: sub workers of Rust closures run as threads; sub worker \
                 processes need a binding's child program"
            );
            ExitCode::from(2)
        }
        Ok(other) => {
            eprintln!("simpler-child: unknown role `{other}` in {}", env::ROLE);
            ExitCode::from(2)
        }
        Err(_) => {
            eprintln!(
                "simpler-child: {} is not set; this program is started by a simpler Worker \
                 running chips in child processes, not by hand",
                env::ROLE
            );
            ExitCode::from(2)
        }
    }
}
