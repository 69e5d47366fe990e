//! The trace outputs of `simpler run`: `--trace FILE [--trace-level L] [--trace-format F]` and
//! `--deps FILE`. Owns checking their paths before anything runs (the same rules as an
//! `--output`: the directory exists, the file is none the run reads nor another output, an
//! existing file is a regular one) and writing them, atomically, after a successful run. A
//! run that fails brings no trace back (the worker's error carries none), so then nothing is
//! written and [`not_written_note`] says so on stderr, beside the run's error.
//! The formats are [`simpler_trace`]'s (docs/tracing.md, "Export and tools").

use std::path::{Path, PathBuf};

use simpler_host::fsio::refuse_non_regular;
use simpler_trace::{Format, Trace, TraceLevel};

use super::error::RunError;
use super::outputs::ReadFile;
use crate::files::{parent_dir, same_file};

/// What `simpler run` was asked to record and where to write it.
#[derive(Debug, Clone, Default)]
pub struct TraceRequest {
    /// `--trace FILE`: the whole trace.
    pub trace: Option<PathBuf>,
    /// `--trace-level L`; default `tasks` when a trace or graph is asked for.
    pub level: Option<TraceLevel>,
    /// `--trace-format F`; default from the extension (`.json` Chrome, else Perfetto).
    pub format: Option<Format>,
    /// `--deps FILE`: the task graph, Graphviz dot, or JSON for a `.json` FILE.
    pub deps: Option<PathBuf>,
}

impl TraceRequest {
    /// The level the run records at: the one given, else `tasks` when `--trace` or `--deps`
    /// is given, else off.
    pub fn level(&self) -> TraceLevel {
        match self.level {
            Some(l) => l,
            None if self.trace.is_some() || self.deps.is_some() => TraceLevel::Tasks,
            None => TraceLevel::Off,
        }
    }

    fn files(&self) -> impl Iterator<Item = (&'static str, &Path)> {
        [
            ("--trace", self.trace.as_deref()),
            ("--deps", self.deps.as_deref()),
        ]
        .into_iter()
        .filter_map(|(f, p)| p.map(|p| (f, p)))
    }
}

/// Checks the trace outputs against the files the run reads and its `--output`s.
///
/// # Errors
/// [`RunError::TraceLevelOff`] when a file is asked for at level off;
/// [`RunError::TracePath`] naming the flag and file at fault.
pub fn check(
    req: &TraceRequest,
    outputs: &[(String, PathBuf)],
    reads: &[ReadFile<'_>],
) -> Result<(), RunError> {
    let files: Vec<(&'static str, &Path)> = req.files().collect();
    if req.level() == TraceLevel::Off {
        if let Some((flag, _)) = files.first() {
            return Err(RunError::TraceLevelOff { flag });
        }
    }
    for (k, &(flag, path)) in files.iter().enumerate() {
        let bad = |reason: String| RunError::TracePath {
            flag,
            path: path.to_path_buf(),
            reason,
        };
        let dir = parent_dir(path);
        if !dir.is_dir() {
            return Err(bad(format!("directory `{}` does not exist", dir.display())));
        }
        if let Some(r) = reads.iter().find(|r| same_file(path, &r.path)) {
            return Err(bad(format!("it is the file {} reads", r.what)));
        }
        if let Some((name, _)) = outputs.iter().find(|(_, p)| same_file(path, p)) {
            return Err(bad(format!("--output {name} writes it too")));
        }
        if let Some((other, _)) = files[..k].iter().find(|(_, p)| same_file(path, p)) {
            return Err(bad(format!("{other} writes it too")));
        }
        refuse_non_regular(path).map_err(|e| bad(e.to_string()))?;
    }
    Ok(())
}

/// The one line printed to stderr when the run failed after `--trace`/`--deps` were accepted:
/// which files were not written and why (`nothing_ran`: the worker refused the run or its
/// code did not load; else the run failed, and a failed run brings no trace back). `None`
/// when no trace file was asked for.
pub fn not_written_note(req: &TraceRequest, nothing_ran: bool) -> Option<String> {
    let files: Vec<String> = req
        .files()
        .map(|(flag, path)| format!("{flag} `{}`", path.display()))
        .collect();
    if files.is_empty() {
        return None;
    }
    let why = if nothing_ran {
        "nothing ran"
    } else {
        "the run failed, and a failed run brings no trace back"
    };
    Some(format!(
        "note: no trace file written ({}): {why}",
        files.join(", ")
    ))
}

/// Writes `--trace` and `--deps` from the run's `trace`, each atomically; prints a line per
/// file written.
///
/// # Errors
/// [`RunError::WriteTrace`] (exit code 1) when the run brought no trace back or a write
/// failed; nothing is left at that path.
pub fn write(req: &TraceRequest, trace: Option<&Trace>) -> Result<(), RunError> {
    let files: Vec<_> = req.files().collect();
    if files.is_empty() {
        return Ok(());
    }
    let Some(trace) = trace else {
        let (flag, path) = files[0];
        return Err(RunError::WriteTrace {
            flag,
            path: path.to_path_buf(),
            source: std::io::Error::other("the run brought no trace back"),
        });
    };
    for (flag, path) in files {
        let mut bytes = Vec::new();
        let rendered = if flag == "--trace" {
            let format = req.format.unwrap_or_else(|| Format::of_path(path));
            simpler_trace::write(trace, format, &mut bytes).map(|_| format.to_string())
        } else {
            let run = trace.runs().map(|(_, r)| r).next();
            let run = run.ok_or_else(|| std::io::Error::other("the trace holds no run"));
            run.and_then(|run| match Format::of_path(path) {
                Format::Chrome => {
                    simpler_trace::deps::write_json(run, &mut bytes).map(|_| "JSON".into())
                }
                Format::Perfetto => {
                    simpler_trace::deps::write_dot(run, &mut bytes).map(|_| "dot".into())
                }
            })
        };
        let what = rendered
            .and_then(|what| simpler_host::fsio::write_atomic(path, &bytes).map(|_| what))
            .map_err(|source| RunError::WriteTrace {
                flag,
                path: path.to_path_buf(),
                source,
            })?;
        outln!("wrote {} ({what})", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_names_every_file_and_why() {
        let mut req = TraceRequest::default();
        assert_eq!(not_written_note(&req, false), None);
        req.trace = Some("t.pftrace".into());
        let note = not_written_note(&req, true).unwrap();
        assert_eq!(
            note,
            "note: no trace file written (--trace `t.pftrace`): nothing ran"
        );
        req.deps = Some("d.json".into());
        let note = not_written_note(&req, false).unwrap();
        assert!(
            note.contains("--trace `t.pftrace`, --deps `d.json`")
                && note.ends_with("the run failed, and a failed run brings no trace back"),
            "{note}"
        );
    }
}
