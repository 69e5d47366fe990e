//! Why `simpler run` failed: [`RunError`], one variant per refusal, each naming the flag,
//! argument and file at fault, and the exit code it maps to.

use std::path::PathBuf;

use simpler_abi::DataType;
use simpler_host::{ArgDirection, BundleError, HostError};
use simpler_toolchain::build::BuildError;
use simpler_toolchain::compare::CompareError;
use simpler_toolchain::npy::NpyError;
use simpler_toolchain::scalar::ScalarError;

/// The error a [`RunError::Load`] or [`RunError::Execute`] carries: whatever the worker
/// reports.
pub type ExecError = Box<dyn std::error::Error + Send + Sync>;

/// Why `simpler run` failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The target is neither a file nor a directory.
    #[error("`{}` is neither a bundle file nor an example directory", path.display())]
    NoTarget {
        /// The target given.
        path: PathBuf,
    },
    /// Building the example directory failed.
    #[error("cannot build `{}`", path.display())]
    Build {
        /// The example.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<BuildError>,
    },
    /// `--trace` or `--deps` at `--trace-level off`.
    #[error("{flag} needs a trace level other than off")]
    TraceLevelOff {
        /// The flag.
        flag: &'static str,
    },
    /// A `--trace` or `--deps` path may not be written.
    #[error("{flag} `{}`: {reason}", path.display())]
    TracePath {
        /// The flag.
        flag: &'static str,
        /// The path.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// Writing `--trace` or `--deps` failed (nothing was left at the path).
    #[error("cannot write {flag} `{}`", path.display())]
    WriteTrace {
        /// The flag.
        flag: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Reading the bundle failed.
    #[error("cannot load bundle `{}`", path.display())]
    Bundle {
        /// The bundle file.
        path: PathBuf,
        /// Why.
        #[source]
        source: BundleError,
    },
    /// A flag names an argument the signature does not have.
    #[error("{flag} {name}: `{callable}` has no argument `{name}` (its arguments: {known})")]
    UnknownArg {
        /// The flag.
        flag: &'static str,
        /// The name given.
        name: String,
        /// The callable.
        callable: String,
        /// The signature's names.
        known: String,
    },
    /// A flag names an argument of the wrong direction.
    #[error("{flag} {name}: `{name}` is {article} `{direction}` argument: use {hint}, not {flag}")]
    WrongKind {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
        /// "a" or "an".
        article: &'static str,
        /// Its direction.
        direction: &'static str,
        /// The flags it takes instead.
        hint: &'static str,
    },
    /// A flag names the same argument twice.
    #[error("{flag} {name} is given more than once")]
    Duplicate {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
    },
    /// Required arguments have no value.
    #[error("missing {flag} for {}", list_names(names))]
    Missing {
        /// The flag they need.
        flag: &'static str,
        /// The arguments.
        names: Vec<String>,
    },
    /// A `.npy` file could not be used.
    #[error("{flag} {name}")]
    File {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
        /// Why.
        #[source]
        source: NpyError,
    },
    /// A file's dtype is not the argument's.
    #[error("{flag} {name}: wrong dtype: `{name}` expects {expected}, but `{}` holds {got}", path.display())]
    DtypeMismatch {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
        /// The file.
        path: PathBuf,
        /// The signature's dtype.
        expected: DataType,
        /// The file's.
        got: DataType,
    },
    /// A file's shape is not the argument's.
    #[error("{flag} {name}: wrong shape: `{name}` expects {}, but `{}` has shape {}", fmt_shape(expected), path.display(), fmt_shape(got))]
    ShapeMismatch {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
        /// The file.
        path: PathBuf,
        /// The expected shape.
        expected: Vec<u64>,
        /// The file's.
        got: Vec<u64>,
    },
    /// A file's rank is not 1..=5.
    #[error("{flag} {name}: `{}` has {ndims} dimensions; a tensor has 1 to 5", path.display())]
    BadRank {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
        /// The file.
        path: PathBuf,
        /// Its rank.
        ndims: usize,
    },
    /// An `out` argument's shape cannot be known.
    #[error(
        "output `{name}` has no fixed shape in the signature, so its size is unknown; \
         give --check {name}=REFERENCE.npy (its shape is used) or fix the shape in the manifest"
    )]
    OutputShapeUnknown {
        /// The argument.
        name: String,
    },
    /// An `out` argument's shape is too large to allocate.
    #[error(
        "output `{name}` of shape {} is too large to allocate",
        fmt_shape(shape)
    )]
    OutputTooLarge {
        /// The argument.
        name: String,
        /// Its shape.
        shape: Vec<u64>,
    },
    /// A scalar value does not parse for its dtype.
    #[error("--scalar {name}={value}: {source}")]
    BadScalar {
        /// The argument.
        name: String,
        /// The text given.
        value: String,
        /// Why.
        #[source]
        source: ScalarError,
    },
    /// An output's directory does not exist.
    #[error("--output {name}: directory `{}` does not exist", dir.display())]
    OutputDir {
        /// The argument.
        name: String,
        /// The missing directory.
        dir: PathBuf,
    },
    /// An output is a file the run reads.
    #[error(
        "--output {name}: `{}` is the same file as {what} (`{}`); the run must not replace a \
         file it reads: write the result to another file",
        path.display(),
        other.display()
    )]
    OutputIsRead {
        /// The argument.
        name: String,
        /// The output file.
        path: PathBuf,
        /// What reads the other path: `--input x`, `--check y`, `the bundle`, `the manifest`.
        what: String,
        /// The path it reads.
        other: PathBuf,
    },
    /// An output path exists and is not a regular file (a directory, symbolic link, FIFO,
    /// socket or device).
    #[error("--output {name}")]
    OutputNotRegular {
        /// The argument.
        name: String,
        /// What the path is ([`simpler_host::fsio::refuse_non_regular`]'s message).
        #[source]
        source: std::io::Error,
    },
    /// Two outputs go to the same file (the same path, or links to one file).
    #[error("--output {first} and --output {second} both write `{}`", path.display())]
    SameOutput {
        /// One argument.
        first: String,
        /// The other.
        second: String,
        /// The file.
        path: PathBuf,
    },
    /// A tolerance is negative or not finite.
    #[error("--{source}")]
    BadTolerance {
        /// Which tolerance, and its value.
        #[source]
        source: CompareError,
    },
    /// A `PTO2_RING_*` environment variable does not parse or breaks its rule.
    #[error("environment variable {var}={value:?}: {reason}")]
    BadEnvironment {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong, naming the ring and the rule.
        reason: String,
    },
    /// The worker refused the run before running it: its configuration or an argument is
    /// invalid (see [`refused_before_running`]).
    #[error("the worker refused to run `{callable}`")]
    Refused {
        /// The callable.
        callable: String,
        /// What the worker reported.
        #[source]
        source: ExecError,
    },
    /// The callable's code could not be registered: an image that does not load, an entry
    /// symbol it does not export, a malformed kernel table. Nothing ran.
    #[error("cannot load `{callable}`")]
    Load {
        /// The callable.
        callable: String,
        /// What the worker reported.
        #[source]
        source: ExecError,
    },
    /// The run itself failed.
    #[error("running `{callable}` failed")]
    Execute {
        /// The callable.
        callable: String,
        /// What the worker reported.
        #[source]
        source: ExecError,
    },
    /// An output file could not be written.
    #[error("cannot write output `{name}`")]
    WriteOutput {
        /// The argument.
        name: String,
        /// Why.
        #[source]
        source: NpyError,
    },
    /// One or more `--check`s failed.
    #[error("check failed for {}", list_names(names))]
    CheckFailed {
        /// The arguments that did not match.
        names: Vec<String>,
    },
}

impl RunError {
    /// 2 for problems with the command line, its files or the environment (nothing ran), 1
    /// for a failed run, output write or check.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Execute { .. }
            | RunError::WriteOutput { .. }
            | RunError::WriteTrace { .. }
            | RunError::CheckFailed { .. } => 1,
            _ => 2,
        }
    }
}

/// Whether the worker refused a run for bad input before running anything: an invalid
/// configuration (worker or ring sizing), argument, device pointer, callable or signature,
/// also when it comes as the cause of a run refused at preparation. Exit code 2, where
/// every other worker error is 1.
pub fn refused_before_running(e: &HostError) -> bool {
    match e {
        HostError::InvalidConfig(_)
        | HostError::InvalidArgument { .. }
        | HostError::ArgumentCount { .. }
        | HostError::InvalidDevicePointer { .. }
        | HostError::InvalidCallable { .. }
        | HostError::Signature(_) => true,
        HostError::RunPreparationRefused { cause, .. } => refused_before_running(cause),
        _ => false,
    }
}

pub(crate) fn list_names(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `[512, 512]` style.
pub fn fmt_shape(shape: &[u64]) -> String {
    format!("{shape:?}")
}

pub(crate) fn article(direction: ArgDirection) -> &'static str {
    match direction {
        ArgDirection::Scalar => "a",
        ArgDirection::In | ArgDirection::Out | ArgDirection::InOut => "an",
    }
}
