//! Endpoints in child processes: a chip in its own process (`chip_isolation = "process"`)
//! and a sub worker process running serialized callables; the child side of both
//! (`docs/l3-worker.md` §5).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;

use simpler_host::WorkerConfig;

use crate::{Endpoint, WorkerError};

/// The program a child process runs, with its leading arguments: the `simpler-child`
/// binary for Rust users, `python -m simpler._child` for the Python package.
#[derive(Clone, Debug)]
pub struct ChildProgram {
    /// The executable.
    pub program: PathBuf,
    /// Arguments put before the engine's own.
    pub args: Vec<OsString>,
}

impl ChildProgram {
    /// The Rust child program, `simpler-child`: `$SIMPLER_CHILD_PROGRAM`, else next to the
    /// current executable or in its parent directory.
    ///
    /// # Errors
    /// [`WorkerError::Startup`] naming where it looked and the variable.
    pub fn for_rust() -> Result<ChildProgram, WorkerError> {
        if let Some(p) = std::env::var_os("SIMPLER_CHILD_PROGRAM") {
            return Ok(ChildProgram {
                program: p.into(),
                args: Vec::new(),
            });
        }
        let exe = std::env::current_exe().ok();
        let dirs: Vec<PathBuf> = exe
            .iter()
            .filter_map(|e| e.parent())
            .flat_map(|d| [Some(d.to_path_buf()), d.parent().map(|p| p.to_path_buf())])
            .flatten()
            .collect();
        for d in &dirs {
            let candidate = d.join("simpler-child");
            if candidate.is_file() {
                return Ok(ChildProgram {
                    program: candidate,
                    args: Vec::new(),
                });
            }
        }
        Err(WorkerError::Startup {
            endpoint: "the chip child program".into(),
            reason: format!(
                "simpler-child was not found in {dirs:?}; set SIMPLER_CHILD_PROGRAM to its path"
            ),
        })
    }
}

/// Starts chip `index` (configured by `config`) in a child process running `program`;
/// returns once the child has brought its chip up, or fails by `deadline` having killed
/// and reaped it.
///
/// # Errors
/// [`WorkerError::Startup`] naming the chip and why.
#[allow(dead_code)] // called by the worker once it starts children
pub(crate) fn spawn_chip(
    index: usize,
    config: &WorkerConfig,
    program: &ChildProgram,
    deadline: Instant,
) -> Result<Box<dyn Endpoint>, WorkerError> {
    let _ = (config, program, deadline);
    Err(WorkerError::Startup {
        endpoint: format!("chip {index}"),
        reason: "chip processes are not available in this build".into(),
    })
}

/// Starts sub worker `index` in a child process running `program`; returns once it is
/// ready.
///
/// # Errors
/// [`WorkerError::Startup`] naming the sub worker and why.
#[allow(dead_code)] // called by the worker once it starts children
pub(crate) fn spawn_sub(
    index: usize,
    program: &ChildProgram,
    deadline: Instant,
) -> Result<Box<dyn Endpoint>, WorkerError> {
    let _ = (program, deadline);
    Err(WorkerError::Startup {
        endpoint: format!("sub worker {index}"),
        reason: "sub worker processes are not available in this build".into(),
    })
}
