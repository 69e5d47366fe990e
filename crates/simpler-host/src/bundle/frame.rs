//! The on-disk frame of a bundle (the format of the module doc): the metadata schema, and
//! [`Bundle::to_bytes`] / [`Bundle::from_bytes`] — encoding, and decoding with the frame
//! checks (magic, version, length, checksum) before the content checks of
//! [`Bundle::validate`]. It touches no file: reading and writing are the module's
//! (`super`).

use serde::{Deserialize, Serialize};
use simpler_abi::CoreType;

use crate::{Runtime, Signature};

use super::{
    Bundle, BundleCode, BundleError, BundleKernel, BUNDLE_FORMAT_VERSION, BUNDLE_MAGIC, CRC_LEN,
    PREFIX_LEN,
};

/// On-disk metadata, the JSON object of the module doc.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    name: String,
    signature: Signature,
    orchestration: CodeMeta,
    kernels: Vec<KernelMeta>,
    /// A [`Runtime::name`]; absent when the bundle names none, so such bundles keep the
    /// bytes they had before the field existed. Parsed after the frame checks
    /// ([`BundleError::UnknownRuntime`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    runtime: Option<String>,
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
    /// The kernel's name; absent when it is the entry symbol (the default on read), so a
    /// bundle whose kernels are named after their entries keeps the bytes it had before the
    /// field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
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

pub(super) fn read_u32(data: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"))
}

impl Bundle {
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
                    name: (k.name != k.code.entry).then(|| k.name.clone()),
                    size: k.code.image.len() as u64,
                })
                .collect(),
            runtime: self.runtime.map(|r| r.name().to_string()),
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
    /// truncation, checksum, trailing bytes, metadata) before content problems (an unknown
    /// runtime name, then [`Bundle::validate`]).
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
        let runtime = meta
            .runtime
            .map(|found| {
                found
                    .parse::<Runtime>()
                    .map_err(|reason| BundleError::UnknownRuntime { found, reason })
            })
            .transpose()?;
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
                name: k.name.unwrap_or_else(|| k.entry.clone()),
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
            runtime,
        };
        bundle.validate()?;
        Ok(bundle)
    }
}
