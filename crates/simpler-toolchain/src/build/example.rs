//! Building an example directory (its `simpler.toml` and C sources) into a validated
//! [`Bundle`], in memory. This module owns the order of the work — every source must exist,
//! then all compile in parallel through one [`Compiler`], then each library is loaded once
//! exactly as a run will load it ([`simpler_host::loader`]: `dlopen` with `RTLD_NOW`, then
//! the entry symbol looked up) — and the errors that name the manifest field at fault.
//!
//! Loading at build time means a library that does not load (an undefined reference) or
//! does not export its entry symbol (misspelt, `static`, hidden) fails the build, naming the
//! source and the manifest field, rather than the run. Loading runs the library's
//! initializers: it is the user's code, about to run anyway.

use std::path::{Path, PathBuf};

use simpler_host::loader::{self, EntryKind, LoadError};
use simpler_host::{Bundle, BundleCode, BundleError, BundleKernel, CodeImage};

use super::{CompileError, Compiler, IncludeDirError, Target};
use crate::manifest::{self, LoadedManifest, ManifestError, SourceEntry};

/// Why an example could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The manifest is missing or invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A source named in the manifest does not exist.
    #[error(
        "source file `{}` does not exist (named by `{field}` in `{}`)",
        path.display(),
        manifest.display()
    )]
    MissingSource {
        /// The missing file.
        path: PathBuf,
        /// The manifest field naming it, e.g. `kernels[0].source`.
        field: String,
        /// The manifest.
        manifest: PathBuf,
    },
    /// A source named in the manifest is not a regular file (a device, FIFO or directory,
    /// refused without blocking).
    #[error("source file named by `{field}` in `{}`: {source}", manifest.display())]
    BadSource {
        /// Why: [`ReadFileError::NotRegular`](simpler_host::fsio::ReadFileError) naming the
        /// file and what it is.
        source: simpler_host::fsio::ReadFileError,
        /// The manifest field naming it, e.g. `kernels[0].source`.
        field: String,
        /// The manifest.
        manifest: PathBuf,
    },
    /// `$SIMPLER_INCLUDE_DIR` does not hold the simpler headers.
    #[error(transparent)]
    IncludeDir(#[from] IncludeDirError),
    /// A source could not be compiled.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// A compiled library does not export the entry symbol the manifest names.
    #[error(
        "{} `{}` does not export its entry symbol `{}` (named by `{}` in `{}`); \
         define `{}` there, marked {} and not static, or fix `{}`",
        unit.role(),
        unit.path.display(),
        unit.entry,
        unit.entry_field,
        manifest.display(),
        unit.entry,
        entry_marker(unit.kernel.is_some()),
        unit.entry_field
    )]
    MissingEntry {
        /// The source, its entry symbol and the manifest field naming it (it has a
        /// default).
        unit: Box<SourceEntry>,
        /// The manifest.
        manifest: PathBuf,
    },
    /// A compiled library cannot be loaded (typically an undefined reference).
    #[error("the library compiled from `{}` for the {role} does not load: {reason}{}", path.display(),
        if warnings.trim().is_empty() { String::new() } else { format!("\nthe compiler warned:\n{}", warnings.trim_end()) })]
    Load {
        /// "orchestration" or "kernel 3 (aiv)".
        role: String,
        /// The source.
        path: PathBuf,
        /// The dynamic loader's message.
        reason: String,
        /// What the compiler printed (an implicit declaration explains an undefined symbol).
        warnings: String,
    },
    /// The compiled libraries do not form a valid bundle.
    #[error("the built bundle is invalid")]
    Bundle(#[source] BundleError),
    /// The bundle could not be written.
    #[error("cannot write the bundle")]
    Write(#[source] BundleError),
}

/// The macro that exports a kernel's (or else the orchestration's) entry.
fn entry_marker(kernel: bool) -> &'static str {
    if kernel {
        "SIMPLER_KERNEL"
    } else {
        "SIMPLER_ORCHESTRATION"
    }
}

/// One compiled source, for the build summary.
#[derive(Debug, Clone)]
pub struct CompiledUnit {
    /// "orchestration" or "kernel 3 (aiv)".
    pub role: String,
    /// The source file.
    pub source: PathBuf,
    /// The entry symbol.
    pub entry: String,
    /// Size of the compiled library in bytes.
    pub size: usize,
    /// Whatever the compiler printed (warnings), possibly empty.
    pub diagnostics: String,
    /// True when the library came from the kernel cache.
    pub cached: bool,
}

/// The result of [`build_example`].
#[derive(Debug)]
pub struct Built {
    /// The manifest it came from.
    pub manifest: LoadedManifest,
    /// The bundle, validated.
    pub bundle: Bundle,
    /// The sources compiled, orchestration first.
    pub units: Vec<CompiledUnit>,
}

/// Loads `image` as a run would and resolves the entry symbol of `unit` in it.
fn check_entry(
    unit: &SourceEntry,
    image: &[u8],
    manifest: &Path,
    warnings: &str,
) -> Result<(), BuildError> {
    let kind = match unit.kernel {
        None => EntryKind::Orchestration,
        Some(_) => EntryKind::Kernel,
    };
    let role = unit.role();
    let code = CodeImage::Library {
        bytes: image.to_vec(),
        entry: unit.entry.clone(),
    };
    match loader::load(&code, kind, &role) {
        Ok(_) => Ok(()),
        Err(LoadError::MissingSymbol { .. }) => Err(BuildError::MissingEntry {
            unit: Box::new(unit.clone()),
            manifest: manifest.to_path_buf(),
        }),
        Err(e) => Err(BuildError::Load {
            role,
            path: unit.path.clone(),
            reason: match e {
                // dlerror() starts with the staged file's (temporary, meaningless) path.
                LoadError::Open { reason, .. } => match reason.split_once(".so: ") {
                    Some((file, rest)) if !file.contains(' ') => rest.to_string(),
                    _ => reason,
                },
                other => other.to_string(),
            },
            warnings: warnings.to_string(),
        }),
    }
}

fn target_of(unit: &SourceEntry) -> Target {
    match unit.kernel {
        None => Target::Orchestration,
        Some((_, core)) => Target::Kernel(core),
    }
}

/// Compiles the example at `target` (a directory holding `simpler.toml`, or the manifest
/// file itself) with `compiler` into a validated [`Bundle`], in memory. Sources compile in
/// parallel; the first failure in manifest order is the one reported.
///
/// # Errors
/// [`BuildError`]: manifest, missing source, compiler missing or failing, a library that does
/// not load or lacks its entry symbol, invalid bundle.
pub fn build_example(target: &Path, compiler: &Compiler) -> Result<Built, BuildError> {
    build_manifest(manifest::load(target)?, compiler)
}

/// [`build_example`] for a manifest already loaded.
///
/// # Errors
/// As [`build_example`], less the manifest's own errors.
pub fn build_manifest(loaded: LoadedManifest, compiler: &Compiler) -> Result<Built, BuildError> {
    let units = loaded.sources();
    // Every source must exist before anything is compiled.
    for u in &units {
        match simpler_host::fsio::open_regular(&u.path) {
            Ok(_) => {}
            Err(simpler_host::fsio::ReadFileError::Missing { .. }) => {
                return Err(BuildError::MissingSource {
                    path: u.path.clone(),
                    field: u.field.clone(),
                    manifest: loaded.path.clone(),
                })
            }
            Err(source) => {
                return Err(BuildError::BadSource {
                    source,
                    field: u.field.clone(),
                    manifest: loaded.path.clone(),
                })
            }
        }
    }
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = units
            .iter()
            .map(|u| s.spawn(|| compiler.compile_target(&u.path, target_of(u))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("compiler thread panicked"))
            .collect()
    });
    let mut compiled = Vec::with_capacity(units.len());
    let mut images = Vec::with_capacity(units.len());
    for (u, r) in units.iter().zip(results) {
        let c = r?;
        check_entry(u, &c.image, &loaded.path, &c.diagnostics)?;
        compiled.push(CompiledUnit {
            role: u.role(),
            source: u.path.clone(),
            entry: u.entry.clone(),
            size: c.image.len(),
            diagnostics: c.diagnostics,
            cached: c.cached,
        });
        images.push(c.image);
    }
    let m = &loaded.manifest;
    let mut images = images.into_iter();
    let orchestration = BundleCode {
        entry: m.orchestration.entry.clone(),
        image: images.next().expect("orchestration image"),
    };
    let kernels = m
        .kernels
        .iter()
        .zip(images)
        .map(|(k, image)| BundleKernel {
            func_id: k.func_id,
            core_type: k.core,
            name: k.name().to_string(),
            code: BundleCode {
                entry: k.entry.clone(),
                image,
            },
        })
        .collect();
    let bundle = Bundle {
        name: m.name.clone(),
        signature: loaded.signature.clone(),
        orchestration,
        kernels,
        runtime: m.runtime,
    };
    bundle.validate().map_err(BuildError::Bundle)?;
    Ok(Built {
        manifest: loaded,
        bundle,
        units: compiled,
    })
}
