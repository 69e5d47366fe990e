//! Why the decoder-layer bench fails: [`DecoderBenchError`], one variant per cause, each
//! naming the row or the path at fault.

use simpler_host::HostError;
use simpler_toolchain::build::BuildError;

use super::CycleError;

/// Why the decoder-layer bench failed.
#[derive(Debug, thiserror::Error)]
pub enum DecoderBenchError {
    /// The worker, a registration or a step failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The example folder has no manifest.
    #[error(
        "`{}` does not exist: the decoder-layer bench needs the example folder \
         `examples/decoder_layer` (give it with --example DIR)",
        path.display()
    )]
    MissingExample {
        /// The manifest looked for.
        path: std::path::PathBuf,
    },
    /// The example folder has no empty kernel.
    #[error(
        "the empty kernel `{}` does not exist (the bench runs the layer's graph again with \
         every kernel replaced by it)",
        path.display()
    )]
    MissingEmptyKernel {
        /// The file looked for.
        path: std::path::PathBuf,
    },
    /// The layer or its empty twin does not build.
    #[error("cannot build the decoder layer of `{}`", dir.display())]
    Build {
        /// The example folder.
        dir: std::path::PathBuf,
        /// Why.
        #[source]
        source: Box<BuildError>,
    },
    /// A parameter out of range (`name` is the [`DecoderParams`](super::DecoderParams) field).
    #[error("bench parameter `{name}` {reason}")]
    InvalidParam {
        /// The field.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The empty-kernel step submitted another number of tasks than the real one.
    #[error(
        "batch {batch}, context {context}: the empty-kernel step submitted {empty} tasks, the \
         real step {real}"
    )]
    TaskMismatch {
        /// The row's batch.
        batch: usize,
        /// The row's context.
        context: usize,
        /// Tasks of the real step.
        real: u64,
        /// Tasks of the empty step.
        empty: u64,
    },
    /// The traced step's report holds no trace of its run.
    #[error("batch {batch}, context {context}: the traced step's report has no trace of its run")]
    NoTrace {
        /// The row's batch.
        batch: usize,
        /// The row's context.
        context: usize,
    },
    /// Every traced step dropped trace events.
    #[error(
        "batch {batch}, context {context}: the traced step dropped {dropped} trace events even \
         with {records} records per buffer"
    )]
    TraceDropped {
        /// The row's batch.
        batch: usize,
        /// The row's context.
        context: usize,
        /// Events dropped by the last try.
        dropped: u64,
        /// Records per buffer of the last try.
        records: u32,
    },
    /// The traced edges form a cycle.
    #[error("batch {batch}, context {context}: {source}")]
    Cycle {
        /// The row's batch.
        batch: usize,
        /// The row's context.
        context: usize,
        /// The cycle.
        #[source]
        source: CycleError,
    },
}
