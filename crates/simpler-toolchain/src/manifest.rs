//! The example manifest, `simpler.toml`: what an example directory declares about its
//! callable. This module owns the one parser of it (serde + toml, strictly: unknown fields
//! are errors naming the field and file) and turning it into a validated [`Signature`];
//! compiling the sources is [`crate::build`]'s job. The schema is described in
//! `docs/toolchain.md`.
//!
//! ```toml
//! name = "gemm"                          # required: letters, digits, `_`, `-`, `.`
//! runtime = "host_build_graph"           # optional: a simpler_host::Runtime name; absent:
//!                                        # the worker's (tensormap_and_ringbuffer by default)
//! [orchestration]                        # required
//! source = "orchestration.c"             # required
//! entry = "aicpu_orchestration_entry"    # optional, this is the default
//! [[kernels]]                            # optional, any number
//! func_id = 0                            # required, below simpler_abi::MAX_FUNC_ID, unique
//! core = "aic"                           # required: "aic" | "aiv"
//! source = "kernels/gemm_tile.c"         # required
//! entry = "kernel_entry"                 # optional, this is the default
//! name = "gemm_tile"                     # optional, unique; default: the source's stem
//! [[args]]                               # optional, in positional order, tensors first
//! name = "A"                             # required, unique
//! direction = "in"                       # required: in | out | inout | scalar
//! dtype = "f32"                          # required: a simpler_abi::DataType name
//! shape = [512, 512]                     # optional (tensors only); absent accepts any shape
//! ```
//!
//! Source paths are relative to the directory holding the manifest.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};
use simpler_abi::{CoreType, DataType};
use simpler_host::{ArgDirection, ArgSpec, Runtime, Signature, SignatureError};

/// File name of the manifest inside an example directory.
pub const MANIFEST_FILE: &str = "simpler.toml";

/// The largest manifest [`load`] reads (1 MiB); a larger one is refused unread.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Why a manifest could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The manifest file does not exist.
    #[error("no manifest: `{}` does not exist", path.display())]
    Missing {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The manifest could not be read: it is not a regular file (a directory, FIFO or
    /// device, refused at open), larger than [`MAX_MANIFEST_BYTES`], not UTF-8, or the OS
    /// failed.
    #[error("cannot read manifest `{}`", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was wrong, naming the file (and its size when it is too large).
        #[source]
        source: simpler_host::fsio::ReadFileError,
    },
    /// The manifest is not valid TOML or does not have the expected fields.
    #[error("invalid manifest `{}`", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The TOML error (names the field, with line and column).
        #[source]
        source: toml::de::Error,
    },
    /// A field has a value the format allows but simpler does not.
    #[error("invalid manifest `{}`: field `{field}`: {reason}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// Dotted path of the field, e.g. `kernels[1].func_id`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// Two kernels have the same name (given, or defaulted to their sources' stems).
    #[error(
        "invalid manifest `{}`: {first} and {second} are both named `{name}` (kernel names \
         must be unique; a kernel without `name` is named after its source file's stem)",
        path.display()
    )]
    DuplicateKernelName {
        /// The file.
        path: PathBuf,
        /// The shared name.
        name: String,
        /// The earlier entry, e.g. `kernels[0]`.
        first: String,
        /// The later entry, e.g. `kernels[2]`.
        second: String,
    },
    /// The `[[args]]` do not form a valid signature.
    #[error("invalid manifest `{}`: the [[args]] do not form a valid signature", path.display())]
    Signature {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: SignatureError,
    },
}

/// The `[orchestration]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrchestrationSection {
    /// C source, relative to the manifest's directory.
    pub source: PathBuf,
    /// Entry symbol.
    #[serde(default = "default_orch_entry")]
    pub entry: String,
}

/// One `[[kernels]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelSection {
    /// Id the orchestration submits it under.
    pub func_id: u32,
    /// Core type.
    #[serde(deserialize_with = "de_core")]
    pub core: CoreType,
    /// C source, relative to the manifest's directory.
    pub source: PathBuf,
    /// Entry symbol.
    #[serde(default = "default_kernel_entry")]
    pub entry: String,
    /// The kernel's name in traces, summaries, crash reports and errors: unique in the
    /// manifest, valid by [`simpler_host::check_kernel_name`]. Absent in the file, [`parse`]
    /// sets it to the source file's stem (`kernels/qk_matmul.c` → `qk_matmul`), so after
    /// [`parse`] it is always `Some` ([`KernelSection::name`]).
    #[serde(default)]
    pub name: Option<String>,
}

impl KernelSection {
    /// The kernel's name: [`KernelSection::name`] as [`parse`] resolved it (the source's
    /// stem when the manifest gives none; the entry symbol for a section that was never
    /// parsed and has no stem).
    pub fn name(&self) -> &str {
        match &self.name {
            Some(name) => name,
            None => self
                .source
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or(&self.entry),
        }
    }
}

/// One `[[args]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgSection {
    /// Argument name.
    pub name: String,
    /// `in`, `out`, `inout` or `scalar`.
    pub direction: ArgDirection,
    /// Element type name (`f32`, `i64`, ...).
    #[serde(deserialize_with = "de_dtype")]
    pub dtype: DataType,
    /// Exact shape, if fixed.
    #[serde(default)]
    pub shape: Option<Vec<u64>>,
}

/// A parsed `simpler.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Callable name; also the bundle's file name.
    pub name: String,
    /// The runtime variant the callable's runs use unless a run names one; `None` = the
    /// worker's. It goes into the bundle ([`simpler_host::Bundle::runtime`]).
    #[serde(default, deserialize_with = "de_runtime")]
    pub runtime: Option<Runtime>,
    /// The orchestration.
    pub orchestration: OrchestrationSection,
    /// The kernels.
    #[serde(default)]
    pub kernels: Vec<KernelSection>,
    /// The arguments, in positional order.
    #[serde(default)]
    pub args: Vec<ArgSection>,
}

/// A manifest together with where it came from.
#[derive(Debug, Clone)]
pub struct LoadedManifest {
    /// The manifest file.
    pub path: PathBuf,
    /// The directory its sources are relative to.
    pub dir: PathBuf,
    /// Its content.
    pub manifest: Manifest,
    /// Its arguments as a validated signature.
    pub signature: Signature,
}

/// One source a manifest names, with what it builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceEntry {
    /// The manifest field naming the source, e.g. `kernels[0].source`.
    pub field: String,
    /// The manifest field naming its entry symbol, e.g. `kernels[0].entry` (it has a default).
    pub entry_field: String,
    /// The source file: the manifest's directory joined with the path it gives.
    pub path: PathBuf,
    /// The entry symbol.
    pub entry: String,
    /// `None` for the orchestration, else the kernel's func id and core type.
    pub kernel: Option<(u32, CoreType)>,
}

impl SourceEntry {
    /// "orchestration" or "kernel 3 (aiv)", for messages.
    pub fn role(&self) -> String {
        match self.kernel {
            None => "orchestration".to_string(),
            Some((func_id, core)) => format!("kernel {func_id} ({core})"),
        }
    }
}

impl LoadedManifest {
    /// Absolute-or-as-given path of a source named in the manifest.
    pub fn source_path(&self, source: &Path) -> PathBuf {
        self.dir.join(source)
    }

    /// Every source the manifest names: the orchestration first, then the kernels in
    /// manifest order.
    pub fn sources(&self) -> Vec<SourceEntry> {
        let m = &self.manifest;
        let mut out = vec![SourceEntry {
            field: "orchestration.source".into(),
            entry_field: "orchestration.entry".into(),
            path: self.source_path(&m.orchestration.source),
            entry: m.orchestration.entry.clone(),
            kernel: None,
        }];
        for (i, k) in m.kernels.iter().enumerate() {
            out.push(SourceEntry {
                field: format!("kernels[{i}].source"),
                entry_field: format!("kernels[{i}].entry"),
                path: self.source_path(&k.source),
                entry: k.entry.clone(),
                kernel: Some((k.func_id, k.core)),
            });
        }
        out
    }
}

fn default_orch_entry() -> String {
    simpler_abi::DEFAULT_ORCH_ENTRY.to_string()
}

fn default_kernel_entry() -> String {
    simpler_abi::DEFAULT_KERNEL_ENTRY.to_string()
}

fn de_core<'de, D: Deserializer<'de>>(d: D) -> Result<CoreType, D::Error> {
    let name = String::deserialize(d)?;
    match name.as_str() {
        "aic" => Ok(CoreType::Aic),
        "aiv" => Ok(CoreType::Aiv),
        _ => Err(serde::de::Error::custom(format!(
            "unknown core type `{name}`, expected `aic` or `aiv`"
        ))),
    }
}

fn de_runtime<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Runtime>, D::Error> {
    let name = String::deserialize(d)?;
    name.parse().map(Some).map_err(serde::de::Error::custom)
}

fn de_dtype<'de, D: Deserializer<'de>>(d: D) -> Result<DataType, D::Error> {
    let name = String::deserialize(d)?;
    DataType::from_name(&name).ok_or_else(|| {
        let all: Vec<&str> = DataType::ALL.iter().map(|t| t.name()).collect();
        serde::de::Error::custom(format!(
            "unknown dtype `{name}`, expected one of {}",
            all.join(", ")
        ))
    })
}

/// Where the manifest of `target` is: `target` itself if it exists and is not a directory,
/// else `target/simpler.toml`.
pub fn manifest_path(target: &Path) -> PathBuf {
    // Anything there but a directory is the manifest itself, so that a FIFO or a device is
    // refused as such by `load`.
    match std::fs::metadata(target) {
        Ok(m) if !m.is_dir() => target.to_path_buf(),
        _ => target.join(MANIFEST_FILE),
    }
}

/// Parses manifest text; `path` is only used in messages.
///
/// # Errors
/// [`ManifestError`] naming `path` and the offending field.
pub fn parse(text: &str, path: &Path) -> Result<(Manifest, Signature), ManifestError> {
    let mut manifest: Manifest = toml::from_str(text).map_err(|source| ManifestError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let field = |field: String, reason: String| ManifestError::Field {
        path: path.to_path_buf(),
        field,
        reason,
    };
    if manifest.name.is_empty()
        || !manifest
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        || manifest.name.starts_with('.')
    {
        return Err(field(
            "name".into(),
            format!(
                "`{}` is not a valid callable name (use letters, digits, `_`, `-` and `.`; \
                 it names the bundle file)",
                manifest.name
            ),
        ));
    }
    if manifest.orchestration.entry.is_empty() {
        return Err(field(
            "orchestration.entry".into(),
            "must not be empty".into(),
        ));
    }
    let mut seen = HashSet::new();
    for (i, k) in manifest.kernels.iter().enumerate() {
        if k.func_id as usize >= simpler_abi::MAX_FUNC_ID {
            return Err(field(
                format!("kernels[{i}].func_id"),
                format!(
                    "{} is out of range; func ids must be below {}",
                    k.func_id,
                    simpler_abi::MAX_FUNC_ID
                ),
            ));
        }
        if !seen.insert(k.func_id) {
            return Err(field(
                format!("kernels[{i}].func_id"),
                format!("{} is used by an earlier kernel", k.func_id),
            ));
        }
        if k.entry.is_empty() {
            return Err(field(
                format!("kernels[{i}].entry"),
                "must not be empty".into(),
            ));
        }
    }
    for (i, k) in manifest.kernels.iter_mut().enumerate() {
        let name = match &k.name {
            Some(name) => name.clone(),
            None => match k.source.file_stem().and_then(|s| s.to_str()) {
                Some(stem) => stem.to_string(),
                None => {
                    return Err(field(
                        format!("kernels[{i}].name"),
                        format!(
                            "not given, and the source `{}` has no UTF-8 file stem to name \
                             the kernel after",
                            k.source.display()
                        ),
                    ))
                }
            },
        };
        simpler_host::check_kernel_name(&name)
            .map_err(|e| field(format!("kernels[{i}].name"), e.to_string()))?;
        k.name = Some(name);
    }
    if let Some((name, first, second)) =
        simpler_host::duplicate_kernel_name(manifest.kernels.iter().map(KernelSection::name))
    {
        return Err(ManifestError::DuplicateKernelName {
            path: path.to_path_buf(),
            name,
            first: format!("kernels[{first}]"),
            second: format!("kernels[{second}]"),
        });
    }
    let signature = Signature::new(
        manifest
            .args
            .iter()
            .map(|a| ArgSpec {
                name: a.name.clone(),
                direction: a.direction,
                dtype: a.dtype,
                shape: a.shape.clone(),
            })
            .collect(),
    )
    .map_err(|source| ManifestError::Signature {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((manifest, signature))
}

/// Loads the manifest of an example directory (or a manifest file given directly).
///
/// # Errors
/// [`ManifestError`] naming the file.
pub fn load(target: &Path) -> Result<LoadedManifest, ManifestError> {
    let path = manifest_path(target);
    use simpler_host::fsio::{read_regular, ReadFileError};
    let text = match read_regular(&path, MAX_MANIFEST_BYTES, "a manifest") {
        Ok(bytes) => String::from_utf8(bytes).map_err(|e| ManifestError::Io {
            source: ReadFileError::Io {
                path: path.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
            },
            path: path.clone(),
        })?,
        Err(ReadFileError::Missing { .. }) => return Err(ManifestError::Missing { path }),
        Err(source) => return Err(ManifestError::Io { path, source }),
    };
    let (manifest, signature) = parse(&text, &path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(LoadedManifest {
        path,
        dir,
        manifest,
        signature,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "gemm"
[orchestration]
source = "orchestration.c"
[[kernels]]
func_id = 0
core = "aic"
source = "kernels/gemm_tile.c"
[[kernels]]
func_id = 3
core = "aiv"
source = "kernels/add.c"
entry = "add_entry"
[[args]]
name = "A"
direction = "in"
dtype = "f32"
shape = [512, 512]
[[args]]
name = "C"
direction = "inout"
dtype = "f16"
[[args]]
name = "alpha"
direction = "scalar"
dtype = "f32"
"#;

    fn err(text: &str) -> String {
        let e = parse(text, Path::new("ex/simpler.toml")).unwrap_err();
        crate::error_chain(&e)
    }

    #[test]
    fn sources_list_the_orchestration_then_the_kernels() {
        let (manifest, signature) = parse(GOOD, Path::new("ex/simpler.toml")).unwrap();
        let loaded = LoadedManifest {
            path: "ex/simpler.toml".into(),
            dir: "ex".into(),
            manifest,
            signature,
        };
        let s = loaded.sources();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].role(), "orchestration");
        assert_eq!(s[0].path, Path::new("ex/orchestration.c"));
        assert_eq!(s[0].entry_field, "orchestration.entry");
        assert_eq!(s[2].role(), "kernel 3 (aiv)");
        assert_eq!(s[2].field, "kernels[1].source");
        assert_eq!(s[2].entry, "add_entry");
        assert_eq!(s[2].kernel, Some((3, CoreType::Aiv)));
    }

    #[test]
    fn parses_the_documented_shape_with_defaults() {
        let (m, sig) = parse(GOOD, Path::new("simpler.toml")).unwrap();
        assert_eq!(m.name, "gemm");
        assert_eq!(m.orchestration.entry, "aicpu_orchestration_entry");
        assert_eq!(m.kernels[0].entry, "kernel_entry");
        assert_eq!(m.kernels[1].entry, "add_entry");
        assert_eq!(m.kernels[1].core, CoreType::Aiv);
        assert_eq!(sig.args.len(), 3);
        assert_eq!(sig.args[0].shape, Some(vec![512, 512]));
        assert_eq!(sig.args[1].direction, ArgDirection::InOut);
        assert_eq!(sig.args[1].dtype, DataType::Float16);
        assert_eq!(sig.args[2].direction, ArgDirection::Scalar);
    }

    #[test]
    fn unknown_field_is_named() {
        let msg = err(&GOOD.replace("func_id = 3", "func_id = 3\nblock_dim = 4"));
        assert!(msg.contains("ex/simpler.toml"), "{msg}");
        assert!(msg.contains("unknown field `block_dim`"), "{msg}");
        let msg = err(&format!("{GOOD}\nversion = 2\n"));
        assert!(msg.contains("unknown field `version`"), "{msg}");
    }

    #[test]
    fn the_runtime_is_optional_and_parsed_by_name() {
        let (m, _) = parse(GOOD, Path::new("simpler.toml")).unwrap();
        assert_eq!(m.runtime, None);
        for runtime in Runtime::ALL {
            let text = format!("runtime = \"{runtime}\"\n{GOOD}");
            let (m, _) = parse(&text, Path::new("simpler.toml")).unwrap();
            assert_eq!(m.runtime, Some(runtime));
        }
    }

    #[test]
    fn an_unknown_runtime_names_the_key_and_the_runtimes() {
        let msg = err(&format!("runtime = \"hbg\"\n{GOOD}"));
        assert!(msg.contains("ex/simpler.toml"), "{msg}");
        assert!(msg.contains("runtime = \"hbg\""), "{msg}");
        assert!(msg.contains("unknown runtime `hbg`"), "{msg}");
        assert!(
            msg.contains("tensormap_and_ringbuffer") && msg.contains("host_build_graph"),
            "{msg}"
        );
        let msg = err(&format!("runtime = 2\n{GOOD}"));
        assert!(
            msg.contains("runtime = 2") && msg.contains("string"),
            "{msg}"
        );
    }

    #[test]
    fn bad_dtype_is_named() {
        let msg = err(&GOOD.replace("dtype = \"f16\"", "dtype = \"f128\""));
        assert!(msg.contains("unknown dtype `f128`"), "{msg}");
        assert!(msg.contains("dtype"), "{msg}");
    }

    #[test]
    fn bad_direction_is_named() {
        let msg = err(&GOOD.replace("direction = \"inout\"", "direction = \"output\""));
        assert!(msg.contains("unknown variant `output`"), "{msg}");
        assert!(msg.contains("`inout`"), "{msg}");
    }

    #[test]
    fn bad_core_is_named() {
        let msg = err(&GOOD.replace("core = \"aiv\"", "core = \"cube\""));
        assert!(msg.contains("unknown core type `cube`"), "{msg}");
    }

    #[test]
    fn missing_required_field() {
        let msg = err(&GOOD.replace("source = \"orchestration.c\"", ""));
        assert!(msg.contains("missing field `source`"), "{msg}");
    }

    #[test]
    fn duplicate_and_out_of_range_func_ids() {
        let msg = err(&GOOD.replace("func_id = 3", "func_id = 0"));
        assert!(msg.contains("kernels[1].func_id"), "{msg}");
        let msg = err(&GOOD.replace("func_id = 3", "func_id = 1024"));
        assert!(
            msg.contains("kernels[1].func_id") && msg.contains("1024"),
            "{msg}"
        );
    }

    #[test]
    fn a_kernel_is_named_after_its_source_stem_unless_it_names_itself() {
        let (m, _) = parse(GOOD, Path::new("simpler.toml")).unwrap();
        assert_eq!(m.kernels[0].name.as_deref(), Some("gemm_tile"));
        assert_eq!(m.kernels[1].name(), "add");
        let text = GOOD.replace(
            "entry = \"add_entry\"",
            "entry = \"add_entry\"\nname = \"qk_matmul\"",
        );
        let (m, _) = parse(&text, Path::new("simpler.toml")).unwrap();
        assert_eq!(m.kernels[1].name(), "qk_matmul");
        assert_eq!(m.kernels[0].name(), "gemm_tile");
    }

    #[test]
    fn two_kernels_of_one_name_are_refused_naming_both_entries() {
        // Defaulted: two sources with one stem.
        let text = GOOD.replace("kernels/add.c", "other/gemm_tile.c");
        let e = parse(&text, Path::new("ex/simpler.toml")).unwrap_err();
        assert!(
            matches!(&e, ManifestError::DuplicateKernelName { name, first, second, .. }
                if name == "gemm_tile" && first == "kernels[0]" && second == "kernels[1]"),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("ex/simpler.toml")
                && msg.contains("kernels[0] and kernels[1] are both named `gemm_tile`"),
            "{msg}"
        );
        // Given: one name twice.
        let text = GOOD.replace("entry = \"add_entry\"", "name = \"gemm_tile\"");
        let e = parse(&text, Path::new("ex/simpler.toml")).unwrap_err();
        assert!(
            matches!(e, ManifestError::DuplicateKernelName { .. }),
            "{e:?}"
        );
        // Two kernels of one entry symbol and distinct names are fine.
        let text = GOOD.replace("entry = \"add_entry\"", "entry = \"kernel_entry\"");
        let (m, _) = parse(&text, Path::new("ex/simpler.toml")).unwrap();
        assert_eq!(m.kernels[0].entry, m.kernels[1].entry);
        assert_ne!(m.kernels[0].name(), m.kernels[1].name());
    }

    #[test]
    fn an_invalid_kernel_name_is_named() {
        let text = GOOD.replace("entry = \"add_entry\"", "name = \"\"");
        let msg = err(&text);
        assert!(
            msg.contains("kernels[1].name") && msg.contains("kernel name is empty"),
            "{msg}"
        );
        let msg = err(&GOOD.replace("entry = \"add_entry\"", "name = 3"));
        assert!(msg.contains("name") && msg.contains("string"), "{msg}");
    }

    #[test]
    fn blank_hidden_and_over_long_kernel_names_are_refused_naming_the_character() {
        let named = |name: &str| GOOD.replace("entry = \"add_entry\"", &format!("name = {name}"));
        // TOML escapes (`\u200B`) put the characters in the name itself.
        for (toml_name, code) in [
            (r#""qk\u200Bmatmul""#, "U+200B"),
            (r#""qk\u200C""#, "U+200C"),
            (r#""\u200Dqk""#, "U+200D"),
            (r#""qk\u2060x""#, "U+2060"),
            (r#""\uFEFFqk""#, "U+FEFF"),
            (r#""qk\u202Ex""#, "U+202E"),
            (r#""qk\u202Ax""#, "U+202A"),
            (r#""qk\u2066x""#, "U+2066"),
            (r#""qk\u2069x""#, "U+2069"),
            (r#""qk\u0007""#, "U+0007"),
        ] {
            let e = parse(&named(toml_name), Path::new("ex/simpler.toml")).unwrap_err();
            assert!(
                matches!(&e, ManifestError::Field { field, .. } if field == "kernels[1].name"),
                "{toml_name}: {e:?}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains("ex/simpler.toml") && msg.contains(code) && msg.contains("qk"),
                "{toml_name}: {msg}"
            );
        }
        for blank in [r#"" ""#, r#""\t  ""#] {
            let msg = err(&named(blank));
            assert!(
                msg.contains("kernels[1].name") && msg.contains("only whitespace"),
                "{msg}"
            );
        }
        let long = format!(
            "\"{}\"",
            "k".repeat(simpler_host::MAX_KERNEL_NAME_BYTES + 1)
        );
        let msg = err(&named(&long));
        assert!(
            msg.contains("kernels[1].name") && msg.contains("bytes long"),
            "{msg}"
        );
        // Letters of any script are names.
        for ok in ["qk_matmul", "矩阵乘"] {
            let (m, _) = parse(&named(&format!("\"{ok}\"")), Path::new("simpler.toml")).unwrap();
            assert_eq!(m.kernels[1].name(), ok);
        }
    }

    #[test]
    fn bad_name() {
        let msg = err(&GOOD.replace("name = \"gemm\"", "name = \"../x\""));
        assert!(msg.contains("field `name`"), "{msg}");
    }

    #[test]
    fn invalid_signature_is_reported_with_its_cause() {
        let msg = err(&GOOD.replace("name = \"C\"", "name = \"A\""));
        assert!(msg.contains("`A` appears twice"), "{msg}");
        let text =
            GOOD.to_string() + "[[args]]\nname = \"late\"\ndirection = \"in\"\ndtype = \"f32\"\n";
        let msg = err(&text);
        assert!(msg.contains("`late` comes after a scalar"), "{msg}");
    }

    #[test]
    fn load_reports_a_missing_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let e = load(dir.path()).unwrap_err();
        assert!(matches!(e, ManifestError::Missing { .. }), "{e:?}");
        assert!(e.to_string().contains("simpler.toml"), "{e}");
    }

    #[test]
    fn load_refuses_a_fifo_a_device_and_an_oversized_manifest() {
        use simpler_host::fsio::ReadFileError;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.toml");
        simpler_test_support::files::mkfifo(&fifo);
        // Returns at once: the open does not wait for a writer.
        let e = load(&fifo).unwrap_err();
        assert!(
            matches!(
                &e,
                ManifestError::Io {
                    source: ReadFileError::NotRegular { kind: "a FIFO", .. },
                    ..
                }
            ),
            "{e:?}"
        );
        let e = load(Path::new("/dev/zero")).unwrap_err();
        assert!(
            matches!(
                &e,
                ManifestError::Io {
                    source: ReadFileError::NotRegular { .. },
                    ..
                }
            ),
            "{e:?}"
        );
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_MANIFEST_BYTES as usize + 1]).unwrap();
        let e = load(&big).unwrap_err();
        assert!(
            matches!(
                &e,
                ManifestError::Io {
                    source: ReadFileError::TooLarge { .. },
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
