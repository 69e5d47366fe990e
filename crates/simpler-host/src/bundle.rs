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
//!   "kernels": [ { "func_id": 0, "core": "aic", "entry": "kernel_entry", "size": 15880 } ]
//! }
//! ```
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
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use simpler_abi::CoreType;

use crate::{CallableSpec, CodeImage, KernelSpec, Signature, SignatureError};

/// The 8 bytes every bundle starts with.
pub const BUNDLE_MAGIC: &[u8; 8] = b"SIMPLERB";
/// The format version this build writes and the only one it reads.
pub const BUNDLE_FORMAT_VERSION: u32 = 1;
/// The 4 bytes every ELF file starts with.
pub const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
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
}

/// Why a bundle could not be read, validated or written.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The data does not start with [`BUNDLE_MAGIC`].
    #[error("not a simpler bundle (the file starts with {found:02x?}, not \"SIMPLERB\")")]
    BadMagic {
        /// The first bytes found (at most 8).
        found: Vec<u8>,
    },
    /// The format version is not [`BUNDLE_FORMAT_VERSION`].
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
    /// Bytes follow the checksum.
    #[error("bundle has {count} trailing bytes after its checksum")]
    TrailingBytes {
        /// How many.
        count: u64,
    },
    /// Reading or writing the file failed.
    #[error("cannot {op} bundle file `{}`", path.display())]
    Io {
        /// "read" or "write".
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// On-disk metadata, the JSON object of the module doc.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    name: String,
    signature: Signature,
    orchestration: CodeMeta,
    kernels: Vec<KernelMeta>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CodeMeta {
    entry: String,
    size: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KernelMeta {
    func_id: u32,
    #[serde(with = "core_name")]
    core: CoreType,
    entry: String,
    size: u64,
}

mod core_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use simpler_abi::CoreType;

    pub fn serialize<S: Serializer>(c: &CoreType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(c.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<CoreType, D::Error> {
        let name = String::deserialize(d)?;
        match name.as_str() {
            "aic" => Ok(CoreType::Aic),
            "aiv" => Ok(CoreType::Aiv),
            _ => Err(serde::de::Error::custom(format!(
                "unknown core type `{name}` (expected `aic` or `aiv`)"
            ))),
        }
    }
}

fn read_u32(data: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"))
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
    /// (unique, in range), entry names and images (non-empty, ELF).
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
        }
        Ok(())
    }

    /// Serializes the bundle in the format of the module doc. It does not validate: call
    /// [`Bundle::validate`] first, or use [`Bundle::write`], which does.
    ///
    /// # Panics
    /// If the metadata JSON exceeds 4 GiB (it holds names and sizes only).
    pub fn to_bytes(&self) -> Vec<u8> {
        let meta = Metadata {
            name: self.name.clone(),
            signature: self.signature.clone(),
            orchestration: CodeMeta {
                entry: self.orchestration.entry.clone(),
                size: self.orchestration.image.len() as u64,
            },
            kernels: self
                .kernels
                .iter()
                .map(|k| KernelMeta {
                    func_id: k.func_id,
                    core: k.core_type,
                    entry: k.code.entry.clone(),
                    size: k.code.image.len() as u64,
                })
                .collect(),
        };
        let json = serde_json::to_vec(&meta).expect("bundle metadata always serializes");
        let meta_len = u32::try_from(json.len()).expect("bundle metadata exceeds 4 GiB");
        let images: usize = self.orchestration.image.len()
            + self
                .kernels
                .iter()
                .map(|k| k.code.image.len())
                .sum::<usize>();
        let mut out = Vec::with_capacity(PREFIX_LEN + json.len() + images + CRC_LEN);
        out.extend_from_slice(BUNDLE_MAGIC);
        out.extend_from_slice(&BUNDLE_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&meta_len.to_le_bytes());
        out.extend_from_slice(&json);
        out.extend_from_slice(&self.orchestration.image);
        for k in &self.kernels {
            out.extend_from_slice(&k.code.image);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses and validates a bundle.
    ///
    /// # Errors
    /// A [`BundleError`] naming the first problem: frame problems (magic, version,
    /// truncation, checksum, trailing bytes, metadata) before content problems
    /// ([`Bundle::validate`]).
    pub fn from_bytes(data: &[u8]) -> Result<Bundle, BundleError> {
        let got = data.len() as u64;
        let truncated = |expected: usize| BundleError::Truncated {
            expected: expected as u64,
            got,
        };
        // Magic: a short prefix of the magic is a truncated bundle, anything else is not one.
        let head = &data[..data.len().min(BUNDLE_MAGIC.len())];
        if head != &BUNDLE_MAGIC[..head.len()] {
            return Err(BundleError::BadMagic {
                found: head.to_vec(),
            });
        }
        if data.len() < 12 {
            return Err(truncated(PREFIX_LEN + CRC_LEN));
        }
        let version = read_u32(data, 8);
        if version != BUNDLE_FORMAT_VERSION {
            return Err(BundleError::UnsupportedVersion {
                found: version,
                supported: BUNDLE_FORMAT_VERSION,
            });
        }
        if data.len() < PREFIX_LEN {
            return Err(truncated(PREFIX_LEN + CRC_LEN));
        }
        let meta_len = read_u32(data, 12) as usize;
        let meta_end = PREFIX_LEN + meta_len;
        if data.len() < meta_end + CRC_LEN {
            return Err(truncated(meta_end + CRC_LEN));
        }
        // CRC of everything but the last 4 bytes, as if the file had its declared length.
        let whole_crc_ok = || {
            let (body, tail) = data.split_at(data.len() - CRC_LEN);
            crc32fast::hash(body) == read_u32(tail, 0)
        };
        let meta: Metadata = match serde_json::from_slice(&data[PREFIX_LEN..meta_end]) {
            Ok(m) => m,
            Err(e) => {
                if !whole_crc_ok() {
                    let (body, tail) = data.split_at(data.len() - CRC_LEN);
                    return Err(BundleError::ChecksumMismatch {
                        stored: read_u32(tail, 0),
                        computed: crc32fast::hash(body),
                    });
                }
                return Err(BundleError::MalformedMetadata {
                    detail: e.to_string(),
                });
            }
        };
        let sizes =
            std::iter::once(meta.orchestration.size).chain(meta.kernels.iter().map(|k| k.size));
        let mut expected = (meta_end + CRC_LEN) as u64;
        for s in sizes {
            expected = expected
                .checked_add(s)
                .ok_or_else(|| BundleError::MalformedMetadata {
                    detail: "image sizes overflow a 64-bit length".into(),
                })?;
        }
        if got < expected {
            return Err(BundleError::Truncated { expected, got });
        }
        // `expected <= got <= usize::MAX` from here on.
        let end = expected as usize;
        let (body, tail) = data[..end].split_at(end - CRC_LEN);
        let stored = read_u32(tail, 0);
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(BundleError::ChecksumMismatch { stored, computed });
        }
        if got > expected {
            return Err(BundleError::TrailingBytes {
                count: got - expected,
            });
        }
        let mut at = meta_end;
        let mut take = |size: u64| {
            let image = data[at..at + size as usize].to_vec();
            at += size as usize;
            image
        };
        let orchestration = BundleCode {
            entry: meta.orchestration.entry,
            image: take(meta.orchestration.size),
        };
        let kernels = meta
            .kernels
            .into_iter()
            .map(|k| BundleKernel {
                func_id: k.func_id,
                core_type: k.core,
                code: BundleCode {
                    entry: k.entry,
                    image: take(k.size),
                },
            })
            .collect();
        let bundle = Bundle {
            name: meta.name,
            signature: meta.signature,
            orchestration,
            kernels,
        };
        bundle.validate()?;
        Ok(bundle)
    }

    /// Reads and validates the bundle file at `path`.
    ///
    /// # Errors
    /// [`BundleError::Io`] if the file cannot be read, else as [`Bundle::from_bytes`].
    pub fn read(path: impl AsRef<Path>) -> Result<Bundle, BundleError> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|source| BundleError::Io {
            op: "read",
            path: path.to_path_buf(),
            source,
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
                    image: CodeImage::Library {
                        bytes: k.code.image,
                        entry: k.code.entry,
                    },
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArgDirection, ArgSpec};
    use simpler_abi::DataType;

    fn image(tag: u8, len: usize) -> Vec<u8> {
        let mut v = ELF_MAGIC.to_vec();
        v.extend((0..len).map(|i| tag.wrapping_add(i as u8)));
        v
    }

    fn sample() -> Bundle {
        Bundle {
            name: "gemm".into(),
            signature: Signature::new(vec![
                ArgSpec {
                    name: "A".into(),
                    direction: ArgDirection::In,
                    dtype: DataType::Float32,
                    shape: Some(vec![4, 4]),
                },
                ArgSpec {
                    name: "C".into(),
                    direction: ArgDirection::Out,
                    dtype: DataType::Float32,
                    shape: None,
                },
                ArgSpec {
                    name: "alpha".into(),
                    direction: ArgDirection::Scalar,
                    dtype: DataType::Float32,
                    shape: None,
                },
            ])
            .unwrap(),
            orchestration: BundleCode {
                entry: "aicpu_orchestration_entry".into(),
                image: image(1, 300),
            },
            kernels: vec![
                BundleKernel {
                    func_id: 0,
                    core_type: CoreType::Aic,
                    code: BundleCode {
                        entry: "kernel_entry".into(),
                        image: image(2, 200),
                    },
                },
                BundleKernel {
                    func_id: 7,
                    core_type: CoreType::Aiv,
                    code: BundleCode {
                        entry: "vec_entry".into(),
                        image: image(3, 100),
                    },
                },
            ],
        }
    }

    fn meta_len(bytes: &[u8]) -> usize {
        read_u32(bytes, 12) as usize
    }

    /// Rewrites the metadata JSON of a serialized bundle and fixes up length and CRC, so the
    /// frame is valid and only the content is wrong.
    fn with_metadata(bytes: &[u8], f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let ml = meta_len(bytes);
        let mut v: serde_json::Value = serde_json::from_slice(&bytes[16..16 + ml]).unwrap();
        f(&mut v);
        let json = serde_json::to_vec(&v).unwrap();
        reframe(bytes, &json)
    }

    fn reframe(bytes: &[u8], json: &[u8]) -> Vec<u8> {
        let ml = meta_len(bytes);
        let mut out = bytes[..12].to_vec();
        out.extend_from_slice(&(json.len() as u32).to_le_bytes());
        out.extend_from_slice(json);
        out.extend_from_slice(&bytes[16 + ml..bytes.len() - 4]);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    #[test]
    fn round_trip() {
        let b = sample();
        let bytes = b.to_bytes();
        assert_eq!(&bytes[..8], BUNDLE_MAGIC);
        assert_eq!(read_u32(&bytes, 8), 1);
        let back = Bundle::from_bytes(&bytes).unwrap();
        assert_eq!(back, b);
        // Serialization is deterministic.
        assert_eq!(back.to_bytes(), bytes);
    }

    #[test]
    fn round_trip_without_kernels() {
        let b = Bundle {
            kernels: vec![],
            signature: Signature::default(),
            ..sample()
        };
        assert_eq!(Bundle::from_bytes(&b.to_bytes()).unwrap(), b);
    }

    #[test]
    fn into_spec_keeps_everything() {
        let spec = sample().into_spec();
        assert_eq!(spec.name, "gemm");
        assert_eq!(spec.signature, sample().signature);
        match &spec.orchestration {
            CodeImage::Library { bytes, entry } => {
                assert_eq!(entry, "aicpu_orchestration_entry");
                assert_eq!(bytes, &image(1, 300));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(spec.kernels.len(), 2);
        assert_eq!(spec.kernels[1].func_id, 7);
        assert_eq!(spec.kernels[1].core_type, CoreType::Aiv);
        match &spec.kernels[1].image {
            CodeImage::Library { bytes, entry } => {
                assert_eq!(entry, "vec_entry");
                assert_eq!(bytes, &image(3, 100));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_magic() {
        let mut bytes = sample().to_bytes();
        bytes[0] = b'X';
        let e = Bundle::from_bytes(&bytes).unwrap_err();
        assert!(matches!(e, BundleError::BadMagic { .. }), "{e:?}");
        assert!(e.to_string().contains("not a simpler bundle"), "{e}");
        // A short file that is not a prefix of the magic is not a bundle either.
        let e = Bundle::from_bytes(b"\x7fELF").unwrap_err();
        assert!(matches!(e, BundleError::BadMagic { .. }), "{e:?}");
    }

    #[test]
    fn unsupported_version() {
        let mut bytes = sample().to_bytes();
        bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
        let e = Bundle::from_bytes(&bytes).unwrap_err();
        assert!(
            matches!(
                e,
                BundleError::UnsupportedVersion {
                    found: 2,
                    supported: 1
                }
            ),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("version 2") && msg.contains("version 1"),
            "{msg}"
        );
    }

    #[test]
    fn truncated_at_every_region() {
        let bytes = sample().to_bytes();
        let ml = meta_len(&bytes);
        let cuts = [
            0,
            3,
            8,
            10,
            12,
            15,
            16,
            16 + ml / 2,
            16 + ml,
            16 + ml + 1,
            16 + ml + 150,
            bytes.len() - 150,
            bytes.len() - 4,
            bytes.len() - 1,
        ];
        for cut in cuts {
            let e = Bundle::from_bytes(&bytes[..cut]).unwrap_err();
            match e {
                BundleError::Truncated { expected, got } => {
                    assert_eq!(got, cut as u64);
                    assert!(expected > got, "cut {cut}: expected {expected}");
                }
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        // Once the metadata is readable the full length is known exactly.
        let e = Bundle::from_bytes(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "expected {} bytes, got {}",
                bytes.len(),
                bytes.len() - 1
            )),
            "{e}"
        );
    }

    #[test]
    fn checksum_mismatch_on_a_flipped_byte() {
        let bytes = sample().to_bytes();
        let ml = meta_len(&bytes);
        // In the images, in the CRC itself, and inside the metadata JSON.
        for at in [16 + ml + 250, bytes.len() - 2, 16 + 3] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x5a;
            let e = Bundle::from_bytes(&bad).unwrap_err();
            assert!(
                matches!(e, BundleError::ChecksumMismatch { .. }),
                "flip at {at}: {e:?}"
            );
            assert!(e.to_string().contains("checksum mismatch"), "{e}");
        }
    }

    #[test]
    fn malformed_metadata() {
        let bytes = sample().to_bytes();
        // Not JSON at all, with a valid checksum.
        let e = Bundle::from_bytes(&reframe(&bytes, b"{not json")).unwrap_err();
        assert!(matches!(e, BundleError::MalformedMetadata { .. }), "{e:?}");
        // JSON, but an unknown field.
        let bad = with_metadata(&bytes, |v| {
            v["extra"] = 1.into();
        });
        let e = Bundle::from_bytes(&bad).unwrap_err();
        assert!(matches!(e, BundleError::MalformedMetadata { .. }), "{e:?}");
        assert!(e.to_string().contains("extra"), "{e}");
        // An unknown core type.
        let bad = with_metadata(&bytes, |v| {
            v["kernels"][0]["core"] = "gpu".into();
        });
        let e = Bundle::from_bytes(&bad).unwrap_err();
        assert!(e.to_string().contains("unknown core type `gpu`"), "{e}");
        // Sizes that overflow.
        let bad = with_metadata(&bytes, |v| {
            v["kernels"][0]["size"] = u64::MAX.into();
        });
        let e = Bundle::from_bytes(&bad).unwrap_err();
        assert!(matches!(e, BundleError::MalformedMetadata { .. }), "{e:?}");
    }

    #[test]
    fn invalid_signature() {
        let mut b = sample();
        b.signature.args[1].name = "A".into();
        let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
        match &e {
            BundleError::InvalidSignature(SignatureError::DuplicateName(n)) => assert_eq!(n, "A"),
            other => panic!("{other:?}"),
        }
        let src = std::error::Error::source(&e).unwrap().to_string();
        assert!(src.contains("`A` appears twice"), "{src}");
    }

    #[test]
    fn duplicate_func_id() {
        let mut b = sample();
        b.kernels[1].func_id = 0;
        let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
        assert!(
            matches!(e, BundleError::DuplicateFuncId { func_id: 0 }),
            "{e:?}"
        );
    }

    #[test]
    fn func_id_out_of_range() {
        let mut b = sample();
        b.kernels[1].func_id = simpler_abi::MAX_FUNC_ID as u32;
        let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
        assert!(
            matches!(
                e,
                BundleError::FuncIdOutOfRange {
                    func_id: 1024,
                    max: 1024
                }
            ),
            "{e:?}"
        );
        b.kernels[1].func_id = simpler_abi::MAX_FUNC_ID as u32 - 1;
        assert!(Bundle::from_bytes(&b.to_bytes()).is_ok());
    }

    #[test]
    fn empty_name_and_entry() {
        let mut b = sample();
        b.name.clear();
        let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
        assert!(matches!(e, BundleError::EmptyName), "{e:?}");
        let mut b = sample();
        b.kernels[0].code.entry.clear();
        let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
        assert!(matches!(e, BundleError::EmptyEntry { .. }), "{e:?}");
        assert!(e.to_string().contains("kernel func_id 0"), "{e}");
    }

    #[test]
    fn empty_image() {
        let mut b = sample();
        b.orchestration.image.clear();
        let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
        assert!(matches!(e, BundleError::EmptyImage { .. }), "{e:?}");
        assert!(e.to_string().contains("orchestration"), "{e}");
    }

    #[test]
    fn not_elf() {
        let mut b = sample();
        b.kernels[1].code.image = b"MZ\x90\x00 a PE file".to_vec();
        let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
        assert!(matches!(e, BundleError::NotElf { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("kernel func_id 7") && msg.contains("not an ELF shared object"),
            "{msg}"
        );
        // Shorter than the magic.
        b.kernels[1].code.image = b"\x7fE".to_vec();
        let e = Bundle::from_bytes(&b.to_bytes()).unwrap_err();
        assert!(matches!(e, BundleError::NotElf { .. }), "{e:?}");
    }

    #[test]
    fn trailing_bytes() {
        let mut bytes = sample().to_bytes();
        bytes.extend_from_slice(b"junk");
        let e = Bundle::from_bytes(&bytes).unwrap_err();
        assert!(
            matches!(e, BundleError::TrailingBytes { count: 4 }),
            "{e:?}"
        );
    }

    #[test]
    fn declared_sizes_that_do_not_fit_are_caught() {
        // Metadata that claims a bigger image, with a checksum that covers the file as is.
        let bytes = sample().to_bytes();
        let bad = with_metadata(&bytes, |v| {
            let n = v["orchestration"]["size"].as_u64().unwrap();
            v["orchestration"]["size"] = (n + 1).into();
        });
        let e = Bundle::from_bytes(&bad).unwrap_err();
        // One byte has moved from the CRC into the last image, so the frame is short by one.
        assert!(matches!(e, BundleError::Truncated { .. }), "{e:?}");
        // Claiming a smaller image leaves the CRC at the wrong place.
        let bad = with_metadata(&bytes, |v| {
            let n = v["orchestration"]["size"].as_u64().unwrap();
            v["orchestration"]["size"] = (n - 1).into();
        });
        let e = Bundle::from_bytes(&bad).unwrap_err();
        assert!(matches!(e, BundleError::ChecksumMismatch { .. }), "{e:?}");
    }

    #[test]
    fn io_error_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.simpler");
        let e = Bundle::read(&missing).unwrap_err();
        assert!(matches!(e, BundleError::Io { op: "read", .. }), "{e:?}");
        assert!(e.to_string().contains("nope.simpler"), "{e}");
        let e = sample()
            .write(dir.path().join("no-such-dir").join("x.simpler"))
            .unwrap_err();
        assert!(matches!(e, BundleError::Io { op: "write", .. }), "{e:?}");
        assert!(e.to_string().contains("no-such-dir"), "{e}");
    }

    fn dir_entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn write_is_atomic_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gemm.simpler");
        let b = sample();
        b.write(&path).unwrap();
        assert_eq!(dir_entries(dir.path()), vec!["gemm.simpler".to_string()]);
        assert_eq!(Bundle::read(&path).unwrap(), b);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o644);
        }

        // Overwriting replaces the file.
        let mut b2 = sample();
        b2.name = "other".into();
        b2.write(&path).unwrap();
        assert_eq!(Bundle::read(&path).unwrap(), b2);

        // A bundle that fails validation does not touch the destination.
        let before = std::fs::read(&path).unwrap();
        let mut bad = sample();
        bad.kernels[1].func_id = 0;
        let e = bad.write(&path).unwrap_err();
        assert!(matches!(e, BundleError::DuplicateFuncId { .. }), "{e:?}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert_eq!(dir_entries(dir.path()), vec!["gemm.simpler".to_string()]);
    }
}
