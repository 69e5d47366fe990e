//! `simpler trace summary|svg|convert`: the tools that read a trace file simpler wrote.
//!
//! Owns reading a trace file (Perfetto protobuf or Chrome JSON, told apart by content), the
//! three subcommands, and writing their outputs atomically ([`simpler_host::fsio`]), so a
//! failed write leaves no partial file. The formats and figures themselves are
//! [`simpler_trace`]'s (docs/tracing.md, "Export and tools").

use std::path::{Path, PathBuf};

use simpler_host::fsio::{read_regular, ReadFileError};
use simpler_trace::{summary::Summary, Format, Trace, TraceError};

use crate::{files, EXIT_FAILURE, EXIT_USAGE};

/// The largest trace file the `simpler trace` subcommands read (1 GiB); a larger one is
/// refused unread.
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

/// Why a `simpler trace` subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum TraceCommandError {
    /// The trace file could not be read: missing, not a regular file (a directory, FIFO or
    /// device, refused at open), larger than [`MAX_TRACE_BYTES`], or an OS error.
    #[error("cannot read trace file `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What was wrong, naming the file (and its size when it is too large).
        #[source]
        source: ReadFileError,
    },
    /// The trace file is not a trace simpler wrote.
    #[error("cannot decode trace file `{}`", path.display())]
    Decode {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        #[source]
        source: TraceError,
    },
    /// The trace file decodes but holds no traced run (an empty file, or only host spans):
    /// there is nothing to summarise, draw or convert.
    #[error("no traced runs in `{}`", path.display())]
    NoRuns {
        /// The file.
        path: PathBuf,
    },
    /// The output would replace the input.
    #[error("output `{}` is the trace file being read", path.display())]
    OutputIsInput {
        /// The output path.
        path: PathBuf,
    },
    /// The summary could not be written to stdout (a full disk; a closed pipe is not an
    /// error, [`crate::stdout::write`]).
    #[error("cannot write the summary of `{}` to stdout", path.display())]
    Stdout {
        /// The trace file summarised.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The output could not be written (nothing was left at the path).
    #[error("cannot write `{}`", path.display())]
    Write {
        /// The output path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl TraceCommandError {
    /// `1` for a failed write (of the output file or of stdout), `2` for a bad input (unreadable, undecodable or run-less) or
    /// output path.
    pub fn exit_code(&self) -> u8 {
        match self {
            TraceCommandError::Write { .. } | TraceCommandError::Stdout { .. } => EXIT_FAILURE,
            _ => EXIT_USAGE,
        }
    }
}

/// Reads and decodes the trace file at `path`, which must hold at least one traced run.
///
/// Errors: [`TraceCommandError::Read`], [`TraceCommandError::Decode`],
/// [`TraceCommandError::NoRuns`] naming `path`.
pub fn read_trace(path: &Path) -> Result<Trace, TraceCommandError> {
    read_trace_limited(path, MAX_TRACE_BYTES)
}

/// [`read_trace`] of a file of at most `limit` bytes.
///
/// Errors: as [`read_trace`].
fn read_trace_limited(path: &Path, limit: u64) -> Result<Trace, TraceCommandError> {
    let bytes =
        read_regular(path, limit, "a trace file").map_err(|source| TraceCommandError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    let trace = simpler_trace::read(&bytes).map_err(|source| TraceCommandError::Decode {
        path: path.to_path_buf(),
        source,
    })?;
    if trace.processes.iter().all(|p| p.runs.is_empty()) {
        return Err(TraceCommandError::NoRuns {
            path: path.to_path_buf(),
        });
    }
    Ok(trace)
}

/// Renders with `render` into memory, then writes `out` atomically.
///
/// Errors: [`TraceCommandError::Write`] naming `out`.
pub fn write_output(
    out: &Path,
    render: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
) -> Result<(), TraceCommandError> {
    let werr = |source| TraceCommandError::Write {
        path: out.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    render(&mut bytes).map_err(werr)?;
    simpler_host::fsio::write_atomic(out, &bytes).map_err(werr)
}

/// Writes one line to stderr, ignoring a failure (a closed or full stderr must not panic:
/// the file is written, and the exit status is the command's).
fn note(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{args}");
}

fn refuse_input_as_output(input: &Path, out: &Path) -> Result<(), TraceCommandError> {
    if files::same_file(input, out) {
        return Err(TraceCommandError::OutputIsInput {
            path: out.to_path_buf(),
        });
    }
    Ok(())
}

/// `simpler trace summary FILE`: prints the timing breakdown of every run in the file. Its
/// output is stdout, so a stdout that cannot take it fails the command; a closed pipe
/// (`| head`) ends it quietly ([`crate::stdout::write`]).
///
/// Errors: as [`read_trace`], and [`TraceCommandError::Stdout`] naming `file`.
pub fn summary(file: &Path) -> Result<(), TraceCommandError> {
    let trace = read_trace(file)?;
    crate::stdout::write(format_args!("{}", Summary::of(&trace))).map_err(|source| {
        TraceCommandError::Stdout {
            path: file.to_path_buf(),
            source,
        }
    })
}

/// `simpler trace svg FILE -o OUT`: writes the swimlane picture.
pub fn svg(file: &Path, out: &Path) -> Result<(), TraceCommandError> {
    refuse_input_as_output(file, out)?;
    let trace = read_trace(file)?;
    write_output(out, |w| simpler_trace::svg::write(&trace, w))?;
    note(format_args!("wrote {}", out.display()));
    Ok(())
}

/// `simpler trace convert FILE -o OUT [--format F]`: rewrites the trace in `format`, by
/// default the one `out`'s extension implies (`.json` Chrome, else Perfetto).
pub fn convert(file: &Path, out: &Path, format: Option<Format>) -> Result<(), TraceCommandError> {
    refuse_input_as_output(file, out)?;
    let trace = read_trace(file)?;
    let format = format.unwrap_or_else(|| Format::of_path(out));
    write_output(out, |w| simpler_trace::write(&trace, format, w))?;
    note(format_args!("wrote {} ({format})", out.display()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_render_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("x.svg");
        let e = write_output(&out, |w| {
            w.extend_from_slice(b"partial");
            Err(std::io::Error::other("boom"))
        })
        .unwrap_err();
        assert_eq!(e.exit_code(), EXIT_FAILURE);
        assert!(e.to_string().contains("x.svg"), "{e}");
        assert!(!out.exists());
    }

    #[test]
    fn reading_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.json");
        std::fs::write(&p, b"{\"traceEvents\": 3}").unwrap();
        let e = read_trace(&p).unwrap_err();
        assert!(matches!(e, TraceCommandError::Decode { .. }));
        assert!(e.to_string().contains("t.json"));
        assert_eq!(e.exit_code(), EXIT_USAGE);
        let e = read_trace(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(e, TraceCommandError::Read { .. }));
    }

    #[test]
    fn reading_refuses_non_files_and_files_over_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        for (path, kind) in simpler_test_support::files::non_regular(dir.path(), "t.pftrace") {
            let e = read_trace(&path).unwrap_err();
            assert!(
                matches!(&e, TraceCommandError::Read { source: ReadFileError::NotRegular { kind: k, .. }, .. } if *k == kind),
                "{e:?}"
            );
            assert_eq!(e.exit_code(), EXIT_USAGE);
        }
        let p = dir.path().join("t.json");
        std::fs::write(&p, vec![b' '; 100]).unwrap();
        let e = read_trace_limited(&p, 99).unwrap_err();
        assert!(
            matches!(
                &e,
                TraceCommandError::Read {
                    source: ReadFileError::TooLarge {
                        size: 100,
                        limit: 99,
                        ..
                    },
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
