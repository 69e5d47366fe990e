//! The error of reading a trace file back.
//!
//! Owns [`TraceError`] and the [`Corruption`] it names; the readers in `perfetto` and
//! `chrome` produce them.

use std::fmt;

/// A trace file could not be read back into the model.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The bytes are not a Perfetto protobuf trace: the first place that does not decode.
    #[error("not a valid Perfetto trace: at byte {offset}, {problem}")]
    Protobuf {
        /// Byte offset in the file of the trace packet that is broken (or of the bytes that
        /// should have started one).
        offset: usize,
        /// What is wrong there.
        problem: Corruption,
    },
    /// The bytes are not a Chrome JSON trace.
    #[error("not a Chrome JSON trace: {0}")]
    Json(String),
    /// The file decodes but does not hold what simpler writes (a track, an event or an
    /// annotation is missing or malformed).
    #[error("not a simpler trace: {0}")]
    Shape(String),
}

/// What is wrong at the offset a [`TraceError::Protobuf`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// The bytes there do not start a trace packet (a `Trace.packet` field).
    NotAPacket,
    /// A packet starts there but the file ends before it does.
    Truncated,
    /// The packet there does not decode: a field of it has the wrong type or overruns it.
    BadPacket,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Corruption::NotAPacket => "the bytes there are not a trace packet",
            Corruption::Truncated => "the file ends inside the trace packet that starts there",
            Corruption::BadPacket => "the trace packet there is malformed",
        })
    }
}
