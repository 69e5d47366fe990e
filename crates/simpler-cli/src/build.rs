//! `simpler build`: compiling an example directory (its `simpler.toml` and C sources) into a
//! bundle file. This module owns what is particular to the command line — the compiler from
//! `$CC`, the include directory search (see [`find_include_dir`]), the kernel cache from the
//! environment, writing the bundle and printing the summary; the compiling itself, with the
//! one flag set and the entry-symbol check, is [`simpler_toolchain::build`]. `simpler run`
//! uses the same [`build`] to build a directory in memory.
//!
//! Before the bundle is written its path is checked ([`check_output`]): its directory
//! exists, it is not the manifest or a source of the example (a hard or symbolic link
//! included), and an existing file there is a regular one. A refusal is bad input (exit code
//! 2); only the write itself failing is exit code 1 ([`BuildCommandError::exit_code`]).

use std::path::{Path, PathBuf};

use simpler_host::fsio::refuse_non_regular;
use simpler_host::Runtime;
use simpler_toolchain::build::{self as toolchain, find_include_dir, BuildError, Compiler};
use simpler_toolchain::cache::KernelCache;

use crate::files::{parent_dir, same_file};

/// Why `simpler build` failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildCommandError {
    /// Building (or writing the bundle) failed.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The bundle's directory does not exist.
    #[error("-o {}: directory `{}` does not exist; create it first", path.display(), dir.display())]
    OutputDir {
        /// Where the bundle would go.
        path: PathBuf,
        /// The missing directory.
        dir: PathBuf,
    },
    /// The bundle's path is a file the build reads.
    #[error(
        "-o {}: it is the same file as {what} (`{}`); the build must not replace its own \
         input: write the bundle to another file",
        path.display(),
        other.display()
    )]
    OutputIsRead {
        /// Where the bundle would go.
        path: PathBuf,
        /// What the other path is: `the manifest`, `the orchestration source`, `the kernel 5
        /// (aiv) source`.
        what: String,
        /// The file read.
        other: PathBuf,
    },
    /// The bundle's path exists and is not a regular file.
    #[error("-o {}", path.display())]
    OutputNotRegular {
        /// Where the bundle would go.
        path: PathBuf,
        /// What the path is ([`refuse_non_regular`]'s message).
        #[source]
        source: std::io::Error,
    },
}

impl BuildCommandError {
    /// 1 when writing the bundle failed, 2 for everything else (bad input: flags, manifest,
    /// sources, compile errors, libraries that do not load, the output path).
    pub fn exit_code(&self) -> u8 {
        match self {
            BuildCommandError::Build(BuildError::Write(_)) => 1,
            _ => 2,
        }
    }
}

/// An example built by the command line: the toolchain's result and the include directory
/// it used.
#[derive(Debug)]
pub struct Built {
    /// Manifest, bundle and compiled units.
    pub built: toolchain::Built,
    /// The include directory used.
    pub include_dir: PathBuf,
}

/// The compiler `simpler build` uses: `$CC` (or `cc`) with the simpler headers found from
/// `example_dir` ([`find_include_dir`]) and the kernel cache where the environment says
/// (`$SIMPLER_CACHE_DIR`, else `$XDG_CACHE_HOME/simpler/kernels`, else
/// `~/.cache/simpler/kernels`).
///
/// # Errors
/// [`BuildError::IncludeDir`] or [`BuildError::Compile`] (`$CC` blank).
pub fn compiler_for(example_dir: &Path) -> Result<(Compiler, PathBuf), BuildError> {
    let include_dir = find_include_dir(
        example_dir,
        std::env::var_os("SIMPLER_INCLUDE_DIR"),
        std::env::current_exe().ok(),
    )?;
    let cc = toolchain::compiler_words(std::env::var_os("CC"))?;
    let compiler = Compiler::new(cc, vec![include_dir.clone()], KernelCache::locate(None))?;
    Ok((compiler, include_dir))
}

/// Compiles the example at `target` (a directory holding `simpler.toml`, or the manifest
/// file itself) into a validated bundle, in memory, through the kernel cache.
///
/// # Errors
/// [`BuildError`]: manifest, missing source, compiler missing or failing, a library that does
/// not load or lacks its entry symbol, invalid bundle.
pub fn build(target: &Path) -> Result<Built, BuildError> {
    let loaded = simpler_toolchain::manifest::load(target)?;
    let (compiler, include_dir) = compiler_for(&loaded.dir)?;
    let built = toolchain::build_manifest(loaded, &compiler)?;
    Ok(Built { built, include_dir })
}

/// Where `simpler build` writes: `out` (or `out/<name>.simpler` if `out` is a directory),
/// by default `<example-dir>/<name>.simpler`.
pub fn output_path(built: &Built, out: Option<&Path>) -> PathBuf {
    let file = format!("{}.simpler", built.built.bundle.name);
    match out {
        Some(o) if o.is_dir() => o.join(file),
        Some(o) => o.to_path_buf(),
        None => built.built.manifest.dir.join(file),
    }
}

/// Checks where the bundle of `built` is about to be written: see the module doc.
///
/// # Errors
/// [`BuildCommandError::OutputDir`], [`BuildCommandError::OutputIsRead`] or
/// [`BuildCommandError::OutputNotRegular`].
pub fn check_output(path: &Path, built: &Built) -> Result<(), BuildCommandError> {
    // `-o out/` names a directory to put the bundle in, even when it does not exist.
    let spelt_as_dir = path
        .as_os_str()
        .to_string_lossy()
        .ends_with(std::path::MAIN_SEPARATOR);
    let dir = if spelt_as_dir { path } else { parent_dir(path) };
    if !dir.is_dir() {
        return Err(BuildCommandError::OutputDir {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
        });
    }
    let b = &built.built;
    let reads = std::iter::once(("the manifest".to_string(), &b.manifest.path)).chain(
        b.units
            .iter()
            .map(|u| (format!("the {} source", u.role), &u.source)),
    );
    for (what, other) in reads {
        if same_file(path, other) {
            return Err(BuildCommandError::OutputIsRead {
                path: path.to_path_buf(),
                what,
                other: other.clone(),
            });
        }
    }
    refuse_non_regular(path).map_err(|source| BuildCommandError::OutputNotRegular {
        path: path.to_path_buf(),
        source,
    })
}

/// Prints compiler diagnostics (warnings) of the units that had any, to stderr.
pub fn print_diagnostics(built: &Built) {
    for u in &built.built.units {
        if !u.diagnostics.trim().is_empty() {
            eprint!("{}", u.diagnostics);
        }
    }
}

/// `simpler build <example-dir> [-o OUT] [--runtime R]`: builds, stamps the bundle with
/// `runtime` when given (over the manifest's), checks the output path, writes the bundle
/// atomically, prints a summary. Returns the path written.
///
/// # Errors
/// [`BuildCommandError`].
pub fn command(
    target: &Path,
    out: Option<&Path>,
    runtime: Option<Runtime>,
) -> Result<PathBuf, BuildCommandError> {
    let mut built = build(target)?;
    if runtime.is_some() {
        built.built.bundle.runtime = runtime;
    }
    print_diagnostics(&built);
    let path = output_path(&built, out);
    check_output(&path, &built)?;
    let b = &built.built;
    b.bundle.write(&path).map_err(BuildError::Write)?;
    let nargs = b.bundle.signature.args.len();
    outln!(
        "built `{}` from {} ({nargs} argument{}; {}headers from {})",
        b.bundle.name,
        b.manifest.path.display(),
        if nargs == 1 { "" } else { "s" },
        b.bundle
            .runtime
            .map_or(String::new(), |r| format!("runtime {r}; ")),
        built.include_dir.display()
    );
    for u in &b.units {
        outln!(
            "  {:<18} {} -> {} bytes (entry `{}`{})",
            u.role,
            u.source.display(),
            u.size,
            u.entry,
            if u.cached { ", cached" } else { "" }
        );
    }
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    outln!("wrote {} ({size} bytes)", path.display());
    Ok(path)
}
