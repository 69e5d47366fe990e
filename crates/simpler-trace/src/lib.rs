//! The trace of a simpler run: the model every recorder fills and every tool reads.
//!
//! Owns the in-memory trace model ([`model`]) and the code that turns it into files and
//! figures: Perfetto protobuf and Chrome JSON ([`perfetto`], [`chrome`]), the timing breakdown
//! ([`summary`]), a static SVG swimlane ([`svg`]) and the dependency graph ([`deps`]). Depends
//! on nothing of the runtime or the host: the capture side (simpler-host, simpler-worker)
//! builds a [`Trace`], this crate only reads and writes it. See `docs/tracing.md`.

pub mod chrome;
pub mod deps;
pub mod error;
mod export;
pub mod model;
pub mod perfetto;
pub mod sample;
pub mod summary;
pub mod svg;
pub mod tracks;

use std::fmt;
use std::io::{self, Write};
use std::path::Path;
use std::str::FromStr;

pub use error::{Corruption, TraceError};
pub use model::*;

/// A trace file format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Perfetto's protobuf (`.perfetto-trace`, `.pftrace`); the default.
    #[default]
    Perfetto,
    /// Chrome JSON (`.json`).
    Chrome,
}

impl Format {
    /// The format a file name implies: `.json` is Chrome, anything else Perfetto.
    pub fn of_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => Format::Chrome,
            _ => Format::Perfetto,
        }
    }

    /// The format of file contents: JSON starts with `{` (after white space), anything else
    /// is taken for protobuf.
    pub fn sniff(bytes: &[u8]) -> Format {
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => Format::Chrome,
            _ => Format::Perfetto,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Perfetto => "perfetto",
            Format::Chrome => "chrome",
        })
    }
}

impl FromStr for Format {
    type Err = String;

    /// "perfetto" or "chrome"; the error names what was given.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "perfetto" => Ok(Format::Perfetto),
            "chrome" | "json" => Ok(Format::Chrome),
            _ => Err(format!(
                "unknown trace format {s:?} (expected perfetto or chrome)"
            )),
        }
    }
}

/// Writes `trace` in `format`.
///
/// Errors: those of `w`.
pub fn write(trace: &Trace, format: Format, w: impl Write) -> io::Result<()> {
    match format {
        Format::Perfetto => perfetto::write(trace, w),
        Format::Chrome => chrome::write(trace, w),
    }
}

/// Reads a trace file simpler wrote, in either format (told apart by [`Format::sniff`]).
///
/// Errors: [`TraceError`] from the format's reader.
pub fn read(bytes: &[u8]) -> Result<Trace, TraceError> {
    match Format::sniff(bytes) {
        Format::Perfetto => perfetto::read(bytes),
        Format::Chrome => chrome::read(bytes),
    }
}
