//! The callable bundle file: one versioned, checksummed file holding a callable's
//! orchestration library, its kernel libraries and its [`Signature`], as written by
//! `simpler build` and read by `simpler run` (or by any host program, through
//! [`Bundle::read`] and [`Bundle::into_spec`]).
//!
//! This module owns the file format, its validation and the atomic write. It does not load
//! the libraries: a [`Bundle`] turns into a [`CallableSpec`] whose code is
//! [`CodeImage::Library`], and the registry loads it like any other library image.
//!
//! # Format, version 1
//!
//! All integers are little-endian.
//!
//! | offset        | size | content                                                  |
//! |---------------|------|----------------------------------------------------------|
//! | 0             | 8    | magic `b"SIMPLERB"`                                      |
//! | 8             | 4    | format version, `u32` (= [`BUNDLE_FORMAT_VERSION`])      |
//! | 12            | 4    | metadata length `M`, `u32`                               |
//! | 16            | M    | metadata, UTF-8 JSON (below)                             |
//! | 16 + M        | Σ    | the images back to back: orchestration, then the kernels in metadata order |
//! | 16 + M + Σ    | 4    | CRC-32 (IEEE, as `crc32fast` computes it) of every byte before it |
//!
//! The metadata object (unknown fields are rejected; a change of shape is a version bump):
//!
//! ```json
//! {
//!   "name": "gemm",
//!   "signature": [ { "name": "A", "direction": "in", "dtype": "f32", "shape": [512, 512] } ],
//!   "orchestration": { "entry": "aicpu_orchestration_entry", "size": 16120 },
//!   "kernels": [ { "func_id": 0, "core": "aic", "entry": "kernel_entry", "name": "gemm_tile",
//!                  "size": 15880 } ],
//!   "runtime": "host_build_graph"
//! }
//! ```
//!
//! A kernel's `name` is optional and written only when it differs from its `entry`; absent,
//! the kernel is named after its entry symbol ([`BundleKernel::name`]).
//!
//! `runtime` is optional and written only when the bundle names one ([`Bundle::runtime`]), so
//! a bundle without it has the same bytes as before the field existed; its value is a
//! [`Runtime::name`], and any other name is [`BundleError::UnknownRuntime`].
//!
//! `size` is each image's length in bytes; the images follow the metadata in exactly that
//! order, so the file's total length is fixed by the metadata and anything after the CRC is
//! an error ([`BundleError::TrailingBytes`]).
//!
//! # Validation
//!
//! [`Bundle::from_bytes`] (and so [`Bundle::read`]) checks the frame (magic, version,
//! length, checksum) and then the content ([`Bundle::validate`]); [`Bundle::write`] validates
//! before writing anything. Every failure is its own [`BundleError`] variant. When a damaged
//! file could be explained two ways, the more specific cause wins: a file that ends early is
//! reported as [`Truncated`](BundleError::Truncated) rather than as a checksum mismatch, and
//! metadata that does not parse is reported as a checksum mismatch when the checksum also
//! fails (the bytes were damaged) and as malformed metadata only when the checksum holds
//! (the writer produced it).
//!
//! A kernel or orchestration image must start with the ELF magic `\x7fELF`; only those four
//! bytes are checked (the loader reports anything deeper, such as a wrong `e_type`, when it
//! loads the library).

use std::collections::HashSet;
use std::path::Path;

use simpler_abi::CoreType;

use crate::{CallableSpec, CodeImage, KernelSpec, Runtime, Signature};

mod error;
mod frame;

pub use error::BundleError;

/// The 8 bytes every bundle starts with.
pub const BUNDLE_MAGIC: &[u8; 8] = b"SIMPLERB";
/// The format version this build writes and the only one it reads.
pub const BUNDLE_FORMAT_VERSION: u32 = 1;
/// The 4 bytes every ELF file starts with.
pub const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// The largest bundle file [`Bundle::read`] reads (1 GiB); a larger one is refused before
/// it is read ([`BundleError::Read`]).
pub const MAX_BUNDLE_BYTES: u64 = 1 << 30;
/// Bytes before the metadata: magic, version, metadata length.
const PREFIX_LEN: usize = 16;
/// Bytes of the trailing checksum.
const CRC_LEN: usize = 4;

/// One piece of code in a bundle: a shared-library image and its entry symbol.
#[derive(Clone, PartialEq, Eq)]
pub struct BundleCode {
    /// Exported symbol of the entry.
    pub entry: String,
    /// The whole shared-library (`.so`) file.
    pub image: Vec<u8>,
}

impl std::fmt::Debug for BundleCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BundleCode")
            .field("entry", &self.entry)
            .field("image_len", &self.image.len())
            .finish()
    }
}

/// One kernel of a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleKernel {
    /// Id the orchestration submits it under (`< simpler_abi::MAX_FUNC_ID`, unique).
    pub func_id: u32,
    /// Core type it runs on.
    pub core_type: CoreType,
    /// Its name in traces, summaries, crash reports and errors ([`KernelSpec::name`]):
    /// unique in the bundle, valid by [`check_kernel_name`](crate::check_kernel_name). A
    /// bundle written without names reads back with the entry symbol here.
    pub name: String,
    /// Its library.
    pub code: BundleCode,
}

/// A callable as one file: orchestration library, kernel libraries and signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    /// Name of the callable (shown in messages; `simpler build` names the file after it).
    pub name: String,
    /// Positional arguments.
    pub signature: Signature,
    /// The orchestration library.
    pub orchestration: BundleCode,
    /// The kernel libraries.
    pub kernels: Vec<BundleKernel>,
    /// The runtime variant the callable's runs use unless a run names one
    /// ([`CallableSpec::runtime`]); `None` = the worker's. Set by the manifest's `runtime`
    /// key or `simpler build --runtime` (`docs/toolchain.md` §1).
    pub runtime: Option<Runtime>,
}

fn kernel_what(func_id: u32) -> String {
    format!("kernel func_id {func_id}")
}

fn check_code(what: &str, code: &BundleCode) -> Result<(), BundleError> {
    if code.entry.is_empty() {
        return Err(BundleError::EmptyEntry { what: what.into() });
    }
    if code.image.is_empty() {
        return Err(BundleError::EmptyImage { what: what.into() });
    }
    if !code.image.starts_with(ELF_MAGIC) {
        return Err(BundleError::NotElf {
            what: what.into(),
            found: code.image[..code.image.len().min(4)].to_vec(),
        });
    }
    Ok(())
}
impl Bundle {
    /// Checks everything about the content that the frame cannot: name, signature, func ids
    /// (unique, in range), entry names and images (non-empty, ELF), kernel names (valid,
    /// unique).
    ///
    /// # Errors
    /// The first problem found, as its own [`BundleError`] variant.
    pub fn validate(&self) -> Result<(), BundleError> {
        if self.name.is_empty() {
            return Err(BundleError::EmptyName);
        }
        self.signature
            .validate()
            .map_err(BundleError::InvalidSignature)?;
        check_code("orchestration", &self.orchestration)?;
        let mut seen = HashSet::new();
        for k in &self.kernels {
            if k.func_id as usize >= simpler_abi::MAX_FUNC_ID {
                return Err(BundleError::FuncIdOutOfRange {
                    func_id: k.func_id,
                    max: simpler_abi::MAX_FUNC_ID,
                });
            }
            if !seen.insert(k.func_id) {
                return Err(BundleError::DuplicateFuncId { func_id: k.func_id });
            }
            check_code(&kernel_what(k.func_id), &k.code)?;
            crate::check_kernel_name(&k.name).map_err(|reason| BundleError::InvalidKernelName {
                func_id: k.func_id,
                reason,
            })?;
        }
        if let Err((name, first, second)) = crate::resolve_kernel_names(&self.named_kernels()) {
            return Err(BundleError::DuplicateKernelName {
                name,
                first: self.kernels[first].func_id,
                second: self.kernels[second].func_id,
            });
        }
        Ok(())
    }
    /// The names its kernels go by once registered, in kernel order: each given name, each
    /// default (the entry symbol) qualified with its func id where kernels share it
    /// ([`resolve_kernel_names`](crate::resolve_kernel_names)).
    pub fn kernel_names(&self) -> Vec<String> {
        crate::resolve_kernel_names(&self.named_kernels())
            .unwrap_or_else(|_| self.kernels.iter().map(|k| k.name.clone()).collect())
    }

    /// Each kernel as (func id, given name, default name). A name equal to the entry symbol
    /// is the default (written without a name): kernels sharing one entry symbol are valid,
    /// and only given names must differ.
    fn named_kernels(&self) -> Vec<(u32, Option<&str>, String)> {
        self.kernels
            .iter()
            .map(|k| {
                let given = (k.name != k.code.entry).then_some(k.name.as_str());
                (k.func_id, given, k.code.entry.clone())
            })
            .collect()
    }

    /// Reads and validates the bundle file at `path`.
    ///
    /// # Errors
    /// [`BundleError::Read`] if the file is missing, not a regular file (refused without
    /// blocking on a FIFO), larger than [`MAX_BUNDLE_BYTES`] or unreadable, else as
    /// [`Bundle::from_bytes`].
    pub fn read(path: impl AsRef<Path>) -> Result<Bundle, BundleError> {
        let path = path.as_ref();
        let data =
            crate::fsio::read_regular(path, MAX_BUNDLE_BYTES, "a bundle").map_err(|source| {
                BundleError::Read {
                    path: path.to_path_buf(),
                    source,
                }
            })?;
        Bundle::from_bytes(&data)
    }

    /// Validates the bundle and writes it to `path` atomically: into a temporary file in the
    /// same directory, flushed to disk, then renamed over `path`. On any failure `path` is
    /// left as it was and no temporary file remains.
    ///
    /// # Errors
    /// A validation [`BundleError`] (nothing is written), or [`BundleError::Io`].
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), BundleError> {
        self.validate()?;
        let path = path.as_ref();
        let io = |source| BundleError::Io {
            op: "write",
            path: path.to_path_buf(),
            source,
        };
        crate::fsio::write_atomic(path, &self.to_bytes()).map_err(io)
    }

    /// Turns the bundle into a [`CallableSpec`] whose code is all [`CodeImage::Library`].
    pub fn into_spec(self) -> CallableSpec {
        CallableSpec {
            name: self.name,
            signature: self.signature,
            orchestration: CodeImage::Library {
                bytes: self.orchestration.image,
                entry: self.orchestration.entry,
            },
            kernels: self
                .kernels
                .into_iter()
                .map(|k| KernelSpec {
                    func_id: k.func_id,
                    core_type: k.core_type,
                    // The default name (the entry symbol) stays a default, so registration
                    // qualifies it where kernels share one entry symbol.
                    name: (k.name != k.code.entry).then_some(k.name),
                    image: CodeImage::Library {
                        bytes: k.code.image,
                        entry: k.code.entry,
                    },
                })
                .collect(),
            runtime: self.runtime,
        }
    }
}

#[cfg(test)]
mod tests;
