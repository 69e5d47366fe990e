//! The error of reading a trace file back.
//!
//! Owns [`TraceError`] only; the readers in `perfetto` and `chrome` produce it.

/// A trace file could not be read back into the model.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The bytes are not a Perfetto protobuf trace.
    #[error("not a Perfetto trace: {0}")]
    Protobuf(String),
    /// The bytes are not a Chrome JSON trace.
    #[error("not a Chrome JSON trace: {0}")]
    Json(String),
    /// The file decodes but does not hold what simpler writes (a track, an event or an
    /// annotation is missing or malformed).
    #[error("not a simpler trace: {0}")]
    Shape(String),
}
