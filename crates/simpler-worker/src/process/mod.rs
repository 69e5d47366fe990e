//! Endpoints in child processes: a chip in its own process (`chip_isolation = "process"`)
//! and a sub worker process running serialized callables; the child side of both
//! (`docs/l3-worker.md` §5, §7).
//!
//! Parent side: [`spawn_chip`] and [`spawn_sub`] start a child ([`ChildProgram`]) and return
//! its [`Endpoint`]. Child side: [`serve_chip_child`] is a chip child's whole main (the
//! `simpler-child` binary calls it), and [`SubChild`] is what a binding's sub worker loop
//! drives. Between them: one mailbox per child (`mailbox`), the messages (`wire`), and the
//! parent's shared memory, which children map ([`WireTensor`]).
//!
//! Modules, by responsibility: `sys` (the futex and `_exit` calls), `mailbox` (layout and
//! protocol), `wire` and `wire_error` (messages), `spawn` (the process, its pipes, its
//! crash report), `link` (the parent's side of one child), `child` (the child's side),
//! `chip_child` and `chip_serve` (a chip's two sides), `sub_child` (a sub worker's two
//! sides). Nothing here touches the engine's scheduling; the lanes call the endpoints.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use simpler_host::WorkerConfig;

use crate::{Endpoint, WorkerError};

mod child;
mod chip_child;
mod chip_serve;
mod link;
mod mailbox;
mod spawn;
pub mod sub_child;
mod sys;
mod wire;
mod wire_error;

pub use child::EXIT_PARENT_GONE;
pub use chip_serve::{serve_chip_child, serve_chip_child_status};
pub use sub_child::{SubChild, SubRequest};
pub use wire::{WireArg, WireTensor};

/// The environment a child process is started with (`docs/l3-worker.md` §5). A child
/// program reads nothing else: [`serve_chip_child`] and [`SubChild::connect`] connect from
/// these.
pub mod env {
    /// `chip` or `sub`: what the child is started as.
    pub const ROLE: &str = "SIMPLER_CHILD_ROLE";
    /// The chip's or sub worker's id (decimal).
    pub const INDEX: &str = "SIMPLER_CHILD_INDEX";
    /// The parent's descriptor of the child's mailbox (decimal); the child maps it through
    /// `/proc/<parent pid>/fd/<fd>`.
    pub const MAILBOX_FD: &str = "SIMPLER_CHILD_MAILBOX_FD";
    /// The mailbox's length in bytes (decimal).
    pub const MAILBOX_LEN: &str = "SIMPLER_CHILD_MAILBOX_LEN";
    /// The parent's process id (decimal).
    pub const PARENT_PID: &str = "SIMPLER_CHILD_PARENT_PID";
    /// Names the Rust child program, overriding the search of
    /// [`ChildProgram::for_rust`](super::ChildProgram::for_rust).
    pub const PROGRAM: &str = "SIMPLER_CHILD_PROGRAM";
}

/// The file name of the Rust child program.
pub const RUST_CHILD_PROGRAM: &str = "simpler-child";

/// The program a child process runs, with its leading arguments: the `simpler-child`
/// binary for Rust users, `python -m simpler._child` for the Python package. The engine
/// adds no arguments of its own; it passes everything in the environment ([`mod@env`]).
#[derive(Clone, Debug)]
pub struct ChildProgram {
    /// The executable.
    pub program: PathBuf,
    /// Arguments put before the engine's own.
    pub args: Vec<OsString>,
    /// Variables set in the child's environment, on top of this process's (the engine adds
    /// its own `SIMPLER_CHILD_*` ones after these).
    pub env: Vec<(OsString, OsString)>,
}

impl ChildProgram {
    /// `program` with no arguments.
    pub fn new(program: impl Into<PathBuf>) -> ChildProgram {
        ChildProgram {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// The Rust child program `simpler-child`: `$SIMPLER_CHILD_PROGRAM` when set, else the
    /// file next to the current executable, else in its parent directory (cargo puts test
    /// binaries in `target/<profile>/deps`, beside which `simpler-child` is not).
    ///
    /// # Errors
    /// [`WorkerError::InvalidConfig`] naming every place looked at and the variable to set.
    pub fn for_rust() -> Result<ChildProgram, WorkerError> {
        if let Some(named) = std::env::var_os(env::PROGRAM).filter(|v| !v.is_empty()) {
            let path = PathBuf::from(&named);
            return if path.is_file() {
                Ok(ChildProgram::new(path))
            } else {
                Err(WorkerError::InvalidConfig(format!(
                    "{}={} names no file; point it at the `{RUST_CHILD_PROGRAM}` program",
                    env::PROGRAM,
                    path.display()
                )))
            };
        }
        let exe = std::env::current_exe().map_err(|e| {
            WorkerError::InvalidConfig(format!(
                "cannot find `{RUST_CHILD_PROGRAM}`: the current executable is unknown ({e}); \
                 set {} to its path",
                env::PROGRAM
            ))
        })?;
        let candidates = candidates(&exe);
        if let Some(found) = candidates.iter().find(|p| p.is_file()) {
            return Ok(ChildProgram::new(found));
        }
        let looked = candidates
            .iter()
            .map(|p| format!("`{}`", p.display()))
            .collect::<Vec<_>>()
            .join(" and ");
        Err(WorkerError::InvalidConfig(format!(
            "cannot find the `{RUST_CHILD_PROGRAM}` program for chip processes: looked at \
             {looked}; build it (cargo build -p simpler-worker --bin {RUST_CHILD_PROGRAM}) or \
             set {} to its path",
            env::PROGRAM
        )))
    }
}

fn candidates(exe: &Path) -> Vec<PathBuf> {
    let dir = exe.parent();
    [dir, dir.and_then(Path::parent)]
        .into_iter()
        .flatten()
        .map(|d| d.join(RUST_CHILD_PROGRAM))
        .collect()
}

/// Starts chip `index` (configured by `config`) in a child process running `program`;
/// returns its endpoint once the child has brought its chip up (READY). `device_id` is the
/// device id the worker configured for the chip (`WorkerOptions::device_id(index)`): the
/// endpoint describes itself as `chip {index} (device {device_id}, pid {p})`, whatever the
/// child's device reports (every sim device reports 0).
///
/// # Errors
/// [`WorkerError::Startup`] naming the chip (`chip {index} (device {device_id})`) and why —
/// the program could not run, the chip refused `config` (its error), the child died (its
/// exit status or signal and stderr tail), or `deadline` passed. The child is killed and
/// reaped: nothing is left running.
pub fn spawn_chip(
    index: usize,
    device_id: u32,
    config: &WorkerConfig,
    program: &ChildProgram,
    deadline: Instant,
) -> Result<Box<dyn Endpoint>, WorkerError> {
    Ok(Box::new(chip_child::start(
        index, device_id, config, program, deadline,
    )?))
}

/// Starts sub worker `index` in a child process running `program` (a binding's sub worker
/// loop over [`SubChild`]); returns its endpoint once the child has connected (READY).
///
/// # Errors
/// [`WorkerError::Startup`] naming the sub worker and why, as [`spawn_chip`].
pub fn spawn_sub(
    index: usize,
    program: &ChildProgram,
    deadline: Instant,
) -> Result<Box<dyn Endpoint>, WorkerError> {
    Ok(Box::new(sub_child::start(index, program, deadline)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sub_child_and_its_requests_can_leave_the_thread_that_made_them() {
        // Bindings block in `next()` with their interpreter lock released.
        fn send_sync<T: Send + Sync>() {}
        send_sync::<SubChild>();
        send_sync::<SubRequest>();
        send_sync::<WireTensor>();
    }

    #[test]
    fn the_rust_child_is_looked_for_beside_the_executable_and_one_level_up() {
        let got = candidates(Path::new("/t/target/debug/deps/test-abc"));
        assert_eq!(
            got,
            [
                PathBuf::from("/t/target/debug/deps/simpler-child"),
                PathBuf::from("/t/target/debug/simpler-child")
            ]
        );
    }
}
