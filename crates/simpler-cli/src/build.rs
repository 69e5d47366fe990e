//! `simpler build`: compiling an example directory (its `simpler.toml` and C sources) into a
//! [`Bundle`]. This module owns finding the C compiler and the `simpler/*.h` headers,
//! running the compiler in a private temporary directory, and assembling the bundle;
//! `simpler run` uses the same [`build`] to build a directory in memory.
//!
//! Each source is compiled on its own with `$CC` (default `cc`; it may carry extra words,
//! e.g. `CC="ccache gcc"`) as
//! `-std=c11 -O2 -shared -fPIC -I <include> -o <tmp>/<unit>.so <source> -lm`.
//!
//! Each compiled library is then loaded once, exactly as a run will load it
//! ([`simpler_host::loader`]: `dlopen` with `RTLD_NOW`, then the entry symbol looked up), so
//! that a library that does not load (an undefined reference) or does not export its entry
//! symbol (misspelt, `static`, hidden) fails the build, naming the source and the manifest
//! field, rather than the run. Loading runs the library's initializers: it is the user's
//! code, about to run anyway.
//!
//! The include directory is the first of:
//! 1. `$SIMPLER_INCLUDE_DIR`, if set (it must contain `simpler/kernel.h`);
//! 2. `<dir of the simpler executable>/../../include` (the repository's `include/` when run
//!    from `target/<profile>/`), if it contains `simpler/kernel.h`;
//! 3. the nearest `include/` holding `simpler/kernel.h` in the example directory or one of
//!    its ancestors;
//! 4. the repository's `include/` as it was when this binary was compiled.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use simpler_host::loader::{self, EntryKind, LoadError};
use simpler_host::{Bundle, BundleCode, BundleError, BundleKernel, CodeImage};

use crate::manifest::{self, LoadedManifest, ManifestError};

/// The header whose presence marks an include directory as simpler's.
const MARKER_HEADER: &str = "simpler/kernel.h";

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
    /// `$SIMPLER_INCLUDE_DIR` does not hold the simpler headers.
    #[error("SIMPLER_INCLUDE_DIR=`{}` does not contain {MARKER_HEADER}", path.display())]
    IncludeDir {
        /// The directory named.
        path: PathBuf,
    },
    /// `$CC` is set but empty of words.
    #[error("$CC is set but names no compiler")]
    EmptyCc,
    /// The C compiler could not be started.
    #[error("cannot run the C compiler `{cc}` (set $CC to choose another)")]
    CompilerNotFound {
        /// The program.
        cc: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The C compiler rejected a source; its diagnostics (with file:line) follow.
    #[error("compiling `{}` failed ({status}):\n{}", path.display(), stderr.trim_end())]
    Compile {
        /// The source.
        path: PathBuf,
        /// The compiler's exit status.
        status: std::process::ExitStatus,
        /// The compiler's diagnostics.
        stderr: String,
    },
    /// A compiled library does not export the entry symbol the manifest names.
    #[error(
        "{role} `{}` does not export its entry symbol `{symbol}` (named by `{field}` in `{}`); \
         define `{symbol}` there, marked {} and not static, or fix `{field}`",
        path.display(),
        manifest.display(),
        entry_marker(*kind)
    )]
    MissingEntry {
        /// "orchestration" or "kernel 3 (aiv)".
        role: String,
        /// The source.
        path: PathBuf,
        /// The symbol looked for.
        symbol: String,
        /// The manifest field naming it, e.g. `kernels[0].entry` (it has a default).
        field: String,
        /// The manifest.
        manifest: PathBuf,
        /// A kernel's or the orchestration's.
        kind: EntryKind,
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
    /// The temporary build directory or a compiled library could not be used.
    #[error("build I/O error on `{}`", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The compiled libraries do not form a valid bundle.
    #[error("the built bundle is invalid")]
    Bundle(#[source] BundleError),
    /// The bundle could not be written.
    #[error("cannot write the bundle")]
    Write(#[source] BundleError),
}

/// The macro that exports an entry of `kind`.
fn entry_marker(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::Kernel => "SIMPLER_KERNEL",
        EntryKind::Orchestration => "SIMPLER_ORCHESTRATION",
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
}

/// The result of [`build`].
#[derive(Debug)]
pub struct Built {
    /// The manifest it came from.
    pub manifest: LoadedManifest,
    /// The bundle, validated.
    pub bundle: Bundle,
    /// The sources compiled, orchestration first.
    pub units: Vec<CompiledUnit>,
    /// The include directory used.
    pub include_dir: PathBuf,
}

/// Where the `simpler/*.h` headers are; see the module doc for the search order.
///
/// # Errors
/// [`BuildError::IncludeDir`] if `env_dir` is given but lacks the headers.
pub fn find_include_dir(
    example_dir: &Path,
    env_dir: Option<OsString>,
    exe: Option<PathBuf>,
) -> Result<PathBuf, BuildError> {
    let has_headers = |d: &Path| d.join(MARKER_HEADER).is_file();
    if let Some(d) = env_dir.filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        return if has_headers(&d) {
            Ok(d)
        } else {
            Err(BuildError::IncludeDir { path: d })
        };
    }
    if let Some(exe_dir) = exe.as_deref().and_then(Path::parent) {
        let d = exe_dir.join("../../include");
        if has_headers(&d) {
            return Ok(std::fs::canonicalize(&d).unwrap_or(d));
        }
    }
    let start = std::fs::canonicalize(example_dir).unwrap_or_else(|_| example_dir.to_path_buf());
    for dir in start.ancestors() {
        let d = dir.join("include");
        if has_headers(&d) {
            return Ok(d);
        }
    }
    Ok(PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../include"
    )))
}

/// The compiler command: `$CC` split into words, or `cc`.
///
/// # Errors
/// [`BuildError::EmptyCc`] if `$CC` is set to blanks.
pub fn compiler(env_cc: Option<OsString>) -> Result<Vec<String>, BuildError> {
    match env_cc {
        Some(cc) if !cc.is_empty() => {
            let words: Vec<String> = cc
                .to_string_lossy()
                .split_whitespace()
                .map(str::to_string)
                .collect();
            if words.is_empty() {
                Err(BuildError::EmptyCc)
            } else {
                Ok(words)
            }
        }
        _ => Ok(vec!["cc".to_string()]),
    }
}

struct Unit {
    role: String,
    field: String,
    source: PathBuf,
    entry: String,
    entry_field: String,
    kind: EntryKind,
    out: PathBuf,
}

/// Loads `image` as a run would and resolves `unit`'s entry symbol in it.
fn check_entry(
    unit: &Unit,
    image: &[u8],
    manifest: &Path,
    warnings: &str,
) -> Result<(), BuildError> {
    let code = CodeImage::Library {
        bytes: image.to_vec(),
        entry: unit.entry.clone(),
    };
    match loader::load(&code, unit.kind, &unit.role) {
        Ok(_) => Ok(()),
        Err(LoadError::MissingSymbol { .. }) => Err(BuildError::MissingEntry {
            role: unit.role.clone(),
            path: unit.source.clone(),
            symbol: unit.entry.clone(),
            field: unit.entry_field.clone(),
            manifest: manifest.to_path_buf(),
            kind: unit.kind,
        }),
        Err(e) => Err(BuildError::Load {
            role: unit.role.clone(),
            path: unit.source.clone(),
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

fn compile(cc: &[String], include: &Path, unit: &Unit) -> Result<String, BuildError> {
    let output = Command::new(&cc[0])
        .args(&cc[1..])
        .args(["-std=c11", "-O2", "-shared", "-fPIC", "-I"])
        .arg(include)
        .arg("-o")
        .arg(&unit.out)
        .arg(&unit.source)
        // libm is linked so kernels may call math functions: the loading process need not
        // have it mapped (a lazily bound `expf` would otherwise fail mid-run).
        .arg("-lm")
        .output()
        .map_err(|source| BuildError::CompilerNotFound {
            cc: cc.join(" "),
            source,
        })?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        return Err(BuildError::Compile {
            path: unit.source.clone(),
            status: output.status,
            stderr,
        });
    }
    Ok(stderr)
}

/// Compiles the example at `target` (a directory holding `simpler.toml`, or the manifest
/// file itself) into a validated [`Bundle`], in memory. Sources compile in parallel in a
/// private temporary directory that is removed afterwards.
///
/// # Errors
/// [`BuildError`]: manifest, missing source, compiler missing or failing, a library that does
/// not load or lacks its entry symbol, invalid bundle.
pub fn build(target: &Path) -> Result<Built, BuildError> {
    let loaded = manifest::load(target)?;
    let include_dir = find_include_dir(
        &loaded.dir,
        std::env::var_os("SIMPLER_INCLUDE_DIR"),
        std::env::current_exe().ok(),
    )?;
    let cc = compiler(std::env::var_os("CC"))?;
    let m = &loaded.manifest;

    let tmp = tempfile::Builder::new()
        .prefix("simpler-build-")
        .tempdir()
        .map_err(|source| BuildError::Io {
            path: std::env::temp_dir(),
            source,
        })?;
    let mut units = vec![Unit {
        role: "orchestration".into(),
        field: "orchestration.source".into(),
        source: loaded.source_path(&m.orchestration.source),
        entry: m.orchestration.entry.clone(),
        entry_field: "orchestration.entry".into(),
        kind: EntryKind::Orchestration,
        out: tmp.path().join("orchestration.so"),
    }];
    for (i, k) in m.kernels.iter().enumerate() {
        units.push(Unit {
            role: format!("kernel {} ({})", k.func_id, k.core),
            field: format!("kernels[{i}].source"),
            source: loaded.source_path(&k.source),
            entry: k.entry.clone(),
            entry_field: format!("kernels[{i}].entry"),
            kind: EntryKind::Kernel,
            out: tmp.path().join(format!("kernel_{}.so", k.func_id)),
        });
    }
    // Every source must exist before anything is compiled.
    for u in &units {
        if !u.source.is_file() {
            return Err(BuildError::MissingSource {
                path: u.source.clone(),
                field: u.field.clone(),
                manifest: loaded.path.clone(),
            });
        }
    }
    let results: Vec<Result<String, BuildError>> = std::thread::scope(|s| {
        let handles: Vec<_> = units
            .iter()
            .map(|u| s.spawn(|| compile(&cc, &include_dir, u)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("compiler thread panicked"))
            .collect()
    });
    let mut compiled = Vec::with_capacity(units.len());
    let mut images = Vec::with_capacity(units.len());
    // The first failure in manifest order is the one reported.
    for (u, r) in units.iter().zip(results) {
        let diagnostics = r?;
        let image = std::fs::read(&u.out).map_err(|source| BuildError::Io {
            path: u.out.clone(),
            source,
        })?;
        check_entry(u, &image, &loaded.path, &diagnostics)?;
        compiled.push(CompiledUnit {
            role: u.role.clone(),
            source: u.source.clone(),
            entry: u.entry.clone(),
            size: image.len(),
            diagnostics,
        });
        images.push(image);
    }
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
    };
    bundle.validate().map_err(BuildError::Bundle)?;
    Ok(Built {
        manifest: loaded,
        bundle,
        units: compiled,
        include_dir,
    })
}

/// Where `simpler build` writes: `out` (or `out/<name>.simpler` if `out` is a directory),
/// by default `<example-dir>/<name>.simpler`.
pub fn output_path(built: &Built, out: Option<&Path>) -> PathBuf {
    let file = format!("{}.simpler", built.bundle.name);
    match out {
        Some(o) if o.is_dir() => o.join(file),
        Some(o) => o.to_path_buf(),
        None => built.manifest.dir.join(file),
    }
}

/// Prints compiler diagnostics (warnings) of the units that had any, to stderr.
pub fn print_diagnostics(built: &Built) {
    for u in &built.units {
        if !u.diagnostics.trim().is_empty() {
            eprint!("{}", u.diagnostics);
        }
    }
}

/// `simpler build <example-dir> [-o OUT]`: builds, writes the bundle atomically, prints a
/// summary. Returns the path written.
///
/// # Errors
/// [`BuildError`].
pub fn command(target: &Path, out: Option<&Path>) -> Result<PathBuf, BuildError> {
    let built = build(target)?;
    print_diagnostics(&built);
    let path = output_path(&built, out);
    built.bundle.write(&path).map_err(BuildError::Write)?;
    println!(
        "built `{}` from {} ({} argument{}; headers from {})",
        built.bundle.name,
        built.manifest.path.display(),
        built.bundle.signature.args.len(),
        if built.bundle.signature.args.len() == 1 {
            ""
        } else {
            "s"
        },
        built.include_dir.display()
    );
    for u in &built.units {
        println!(
            "  {:<18} {} -> {} bytes (entry `{}`)",
            u.role,
            u.source.display(),
            u.size,
            u.entry
        );
    }
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!("wrote {} ({size} bytes)", path.display());
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_dir_search_order() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("repo");
        let inc = repo.join("include/simpler");
        std::fs::create_dir_all(&inc).unwrap();
        std::fs::write(inc.join("kernel.h"), "").unwrap();
        let example = repo.join("examples/gemm");
        std::fs::create_dir_all(&example).unwrap();

        // 1. The environment wins, and must hold the headers.
        let e = find_include_dir(&example, Some(root.path().into()), None).unwrap_err();
        assert!(matches!(e, BuildError::IncludeDir { .. }), "{e:?}");
        let got = find_include_dir(&example, Some(repo.join("include").into()), None).unwrap();
        assert_eq!(got, repo.join("include"));
        // 2. Next to the executable.
        std::fs::create_dir_all(repo.join("target/debug")).unwrap();
        let exe = repo.join("target/debug/simpler");
        let got = find_include_dir(root.path(), None, Some(exe)).unwrap();
        assert_eq!(got, std::fs::canonicalize(repo.join("include")).unwrap());
        // 3. Walking up from the example.
        let got = find_include_dir(&example, None, Some(root.path().join("a/b/simpler"))).unwrap();
        assert_eq!(got, std::fs::canonicalize(repo.join("include")).unwrap());
        // 4. The compile-time fallback.
        let got = find_include_dir(root.path(), None, None).unwrap();
        assert!(got.ends_with("../../include"), "{}", got.display());
    }

    #[test]
    fn compiler_from_env() {
        assert_eq!(compiler(None).unwrap(), vec!["cc"]);
        assert_eq!(compiler(Some("".into())).unwrap(), vec!["cc"]);
        assert_eq!(
            compiler(Some("ccache  gcc".into())).unwrap(),
            vec!["ccache", "gcc"]
        );
        assert!(matches!(
            compiler(Some("  ".into())),
            Err(BuildError::EmptyCc)
        ));
    }
}
