//! [`BundleError`]: every way a bundle can fail to be read, validated or written, one
//! variant each, naming the file, kernel or field that was wrong.

use std::path::PathBuf;

use crate::SignatureError;

/// Why a bundle could not be read, validated or written.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The data does not start with [`BUNDLE_MAGIC`](super::BUNDLE_MAGIC).
    #[error("not a simpler bundle (the file starts with {found:02x?}, not \"SIMPLERB\")")]
    BadMagic {
        /// The first bytes found (at most 8).
        found: Vec<u8>,
    },
    /// The format version is not [`BUNDLE_FORMAT_VERSION`](super::BUNDLE_FORMAT_VERSION).
    #[error(
        "unsupported bundle format version {found}; this build of simpler supports version \
         {supported} (rebuild the bundle with this version of `simpler build`)"
    )]
    UnsupportedVersion {
        /// Version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The data ends before the length its header and metadata declare.
    #[error("bundle is truncated: expected {expected} bytes, got {got}")]
    Truncated {
        /// Bytes the frame needs (at least).
        expected: u64,
        /// Bytes present.
        got: u64,
    },
    /// The trailing CRC-32 does not match the content.
    #[error(
        "bundle checksum mismatch: stored CRC-32 {stored:#010x}, computed {computed:#010x} \
         (the file is corrupt)"
    )]
    ChecksumMismatch {
        /// CRC stored in the file.
        stored: u32,
        /// CRC of the bytes before it.
        computed: u32,
    },
    /// The metadata is not the expected JSON object (or declares impossible sizes).
    #[error("malformed bundle metadata JSON: {detail}")]
    MalformedMetadata {
        /// What is wrong, as the JSON parser or the size check reports it.
        detail: String,
    },
    /// The callable name is empty.
    #[error("bundle has an empty callable name")]
    EmptyName,
    /// The signature does not validate.
    #[error("bundle signature is invalid")]
    InvalidSignature(#[source] SignatureError),
    /// Two kernels share a func id.
    #[error("kernel func_id {func_id} appears more than once in the bundle")]
    DuplicateFuncId {
        /// The repeated id.
        func_id: u32,
    },
    /// A func id is not below [`simpler_abi::MAX_FUNC_ID`].
    #[error("kernel func_id {func_id} is out of range; func ids must be below {max}")]
    FuncIdOutOfRange {
        /// The id.
        func_id: u32,
        /// [`simpler_abi::MAX_FUNC_ID`].
        max: usize,
    },
    /// A kernel's name is refused ([`check_kernel_name`](crate::check_kernel_name)).
    #[error("kernel func_id {func_id} has an invalid name: {reason}")]
    InvalidKernelName {
        /// The kernel's func id.
        func_id: u32,
        /// What is wrong with the name.
        reason: crate::KernelNameError,
    },
    /// Two kernels share a name.
    #[error(
        "kernels func_id {first} and func_id {second} are both named `{name}`; kernel names \
         must be unique in a callable"
    )]
    DuplicateKernelName {
        /// The shared name.
        name: String,
        /// The func id of the earlier kernel.
        first: u32,
        /// The func id of the later kernel.
        second: u32,
    },
    /// An entry symbol name is empty.
    #[error("{what} has an empty entry symbol name")]
    EmptyEntry {
        /// "orchestration" or "kernel func_id N".
        what: String,
    },
    /// An image has no bytes.
    #[error("{what} has an empty image")]
    EmptyImage {
        /// "orchestration" or "kernel func_id N".
        what: String,
    },
    /// An image does not start with the ELF magic.
    #[error(
        "{what} image is not an ELF shared object (it starts with {found:02x?}, not 7f 45 4c 46)"
    )]
    NotElf {
        /// "orchestration" or "kernel func_id N".
        what: String,
        /// Its first bytes (at most 4).
        found: Vec<u8>,
    },
    /// The metadata's `runtime` is not a [`Runtime::name`](crate::Runtime::name).
    #[error("bundle metadata field `runtime`: {reason} (rebuild the bundle with this simpler)")]
    UnknownRuntime {
        /// The name in the file.
        found: String,
        /// Why, listing the runtimes ([`Runtime`](crate::Runtime)'s `FromStr` error).
        reason: String,
    },
    /// Bytes follow the checksum.
    #[error("bundle has {count} trailing bytes after its checksum")]
    TrailingBytes {
        /// How many.
        count: u64,
    },
    /// The file could not be read: it is missing, not a regular file (a directory, FIFO or
    /// device), larger than [`MAX_BUNDLE_BYTES`](super::MAX_BUNDLE_BYTES), or the OS failed.
    #[error("cannot read bundle file `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What was wrong, naming the file (and its size when it is too large).
        #[source]
        source: crate::fsio::ReadFileError,
    },
    /// Writing the file failed.
    #[error("cannot {op} bundle file `{}`", path.display())]
    Io {
        /// "write".
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
