//! `simpler build`: compiling an example directory (its `simpler.toml` and C sources) into a
//! bundle file. This module owns what is particular to the command line — the compiler from
//! `$CC`, the include directory search (see [`find_include_dir`]), the kernel cache from the
//! environment, writing the bundle and printing the summary; the compiling itself, with the
//! one flag set and the entry-symbol check, is [`simpler_toolchain::build`]. `simpler run`
//! uses the same [`build`] to build a directory in memory.

use std::path::{Path, PathBuf};

use simpler_toolchain::build::{self as toolchain, find_include_dir, BuildError, Compiler};
use simpler_toolchain::cache::KernelCache;

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

/// Refuses, before anything is compiled, an output whose directory does not exist: `out`
/// itself when it is spelt as a directory (ends with `/`), else its parent.
fn check_output_dir(out: &Path) -> Result<(), BuildError> {
    let spelt_as_dir = out
        .as_os_str()
        .to_string_lossy()
        .ends_with(std::path::MAIN_SEPARATOR);
    let dir = if spelt_as_dir {
        Some(out)
    } else {
        out.parent()
    };
    match dir {
        Some(d) if !d.as_os_str().is_empty() && !d.is_dir() => {
            let source = std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "directory `{}` does not exist; create it first",
                    d.display()
                ),
            );
            Err(BuildError::Write(simpler_host::BundleError::Io {
                op: "write",
                path: out.to_path_buf(),
                source,
            }))
        }
        _ => Ok(()),
    }
}

/// Prints compiler diagnostics (warnings) of the units that had any, to stderr.
pub fn print_diagnostics(built: &Built) {
    for u in &built.built.units {
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
    if let Some(o) = out {
        check_output_dir(o)?;
    }
    let built = build(target)?;
    print_diagnostics(&built);
    let path = output_path(&built, out);
    let b = &built.built;
    b.bundle.write(&path).map_err(BuildError::Write)?;
    let nargs = b.bundle.signature.args.len();
    println!(
        "built `{}` from {} ({nargs} argument{}; headers from {})",
        b.bundle.name,
        b.manifest.path.display(),
        if nargs == 1 { "" } else { "s" },
        built.include_dir.display()
    );
    for u in &b.units {
        println!(
            "  {:<18} {} -> {} bytes (entry `{}`{})",
            u.role,
            u.source.display(),
            u.size,
            u.entry,
            if u.cached { ", cached" } else { "" }
        );
    }
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!("wrote {} ({size} bytes)", path.display());
    Ok(path)
}
