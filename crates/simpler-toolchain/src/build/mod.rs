//! Compiling C kernels and orchestrations into shared libraries for the sim platform. This
//! module owns the one flag set, the compiler command, finding the `simpler/*.h` headers,
//! compiling through the [`KernelCache`], and locating the first error in the compiler's
//! diagnostics; [`example`] builds a whole example directory into a bundle with it.
//!
//! Each source is compiled on its own as
//!
//! ```text
//! $CC -std=c11 -O2 -shared -fPIC [extra flags] [-D__DAV_VEC__ | -D__DAV_CUBE__] [flags]
//!     -I <simpler include dir> [-I <include dir>...] -o <out>.so <source> -lm
//! ```
//!
//! `-D__DAV_VEC__` marks an `aiv` kernel and `-D__DAV_CUBE__` an `aic` one, as on the chip;
//! an orchestration gets neither. `$CC` (default `cc`) may be several words
//! (`CC="ccache gcc"`). libm is linked so kernels may call math functions. The flags are
//! described in `docs/toolchain.md` §2.

pub mod example;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Mutex;

use simpler_abi::CoreType;

use crate::cache::{CacheError, CacheKey, KernelCache, KeyInputs};

pub use example::{build_example, build_manifest, BuildError, Built, CompiledUnit};

/// The flags every source is compiled with, first.
pub const BASE_FLAGS: [&str; 4] = ["-std=c11", "-O2", "-shared", "-fPIC"];

/// The header whose presence marks an include directory as simpler's.
pub const MARKER_HEADER: &str = "simpler/kernel.h";

/// What a source is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// An orchestration (runs on an AICPU thread).
    Orchestration,
    /// A kernel for one AICore type.
    Kernel(CoreType),
}

impl Target {
    /// The defines the target adds: `-D__DAV_VEC__` for `aiv`, `-D__DAV_CUBE__` for `aic`.
    pub fn defines(self) -> &'static [&'static str] {
        match self {
            Target::Orchestration => &[],
            Target::Kernel(CoreType::Aiv) => &["-D__DAV_VEC__"],
            Target::Kernel(CoreType::Aic) => &["-D__DAV_CUBE__"],
        }
    }
}

/// The first error the compiler reported: `file:line[:column]: [fatal ]error: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file, as the compiler printed it.
    pub file: String,
    /// The line (1-based).
    pub line: u32,
    /// The column (1-based), when the compiler gave one.
    pub column: Option<u32>,
    /// The message after `error:`.
    pub message: String,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if let Some(c) = self.column {
            write!(f, ":{c}")?;
        }
        write!(f, ": error: {}", self.message)
    }
}

/// Finds the first `file:line[:column]: [fatal ]error: message` line of gcc or clang output.
pub fn first_error(output: &str) -> Option<Diagnostic> {
    fn number(s: &str) -> Option<(u32, &str)> {
        let end = s.bytes().position(|b| !b.is_ascii_digit())?;
        let (digits, rest) = s.split_at(end);
        Some((digits.parse().ok()?, rest.strip_prefix(':')?))
    }
    output.lines().find_map(|l| {
        let (file, rest) = l.split_once(':')?;
        if file.is_empty() {
            return None;
        }
        let (line, rest) = number(rest)?;
        let (column, rest) = match number(rest) {
            Some((c, rest)) => (Some(c), rest),
            None => (None, rest),
        };
        let rest = rest.trim_start();
        let rest = rest.strip_prefix("fatal ").unwrap_or(rest);
        let message = rest.strip_prefix("error:")?.trim().to_string();
        Some(Diagnostic {
            file: file.to_string(),
            line,
            column,
            message,
        })
    })
}

/// The largest C source (or orchestration source) a build reads, bytes: 64 MiB.
pub const MAX_SOURCE_BYTES: u64 = 64 << 20;

/// Why a source could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The source does not exist.
    #[error("source file `{}` does not exist", path.display())]
    MissingSource {
        /// The source.
        path: PathBuf,
    },
    /// The source is not a regular file (a device, FIFO or directory, refused without
    /// blocking) or is larger than [`MAX_SOURCE_BYTES`].
    #[error("source file: {0}")]
    Source(simpler_host::fsio::ReadFileError),
    /// The compiler command has no words (`$CC` set to blanks).
    #[error("$CC is set but names no compiler")]
    EmptyCc,
    /// The C compiler could not be started.
    #[error("cannot run the C compiler `{cc}` (set $CC to choose another)")]
    CompilerNotFound {
        /// The command.
        cc: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The C compiler rejected the source; its diagnostics (with file:line) follow.
    #[error("compiling `{}` failed ({status}):\n{}", path.display(), stderr.trim_end())]
    Rejected {
        /// The source.
        path: PathBuf,
        /// The compiler's exit status.
        status: ExitStatus,
        /// The compiler's diagnostics.
        stderr: String,
        /// The first error in them, if one could be located.
        diagnostic: Option<Box<Diagnostic>>,
        /// The command that failed, words joined by spaces.
        command: String,
    },
    /// The kernel cache could not be used.
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// The compiler command: `$CC` split into words, or `cc`.
///
/// # Errors
/// [`CompileError::EmptyCc`] if `$CC` is set to blanks.
pub fn compiler_words(env_cc: Option<OsString>) -> Result<Vec<String>, CompileError> {
    match env_cc {
        Some(cc) if !cc.is_empty() => {
            let words: Vec<String> = cc
                .to_string_lossy()
                .split_whitespace()
                .map(str::to_string)
                .collect();
            if words.is_empty() {
                Err(CompileError::EmptyCc)
            } else {
                Ok(words)
            }
        }
        _ => Ok(vec!["cc".to_string()]),
    }
}

/// `$SIMPLER_INCLUDE_DIR` names a directory without the simpler headers.
#[derive(Debug, thiserror::Error)]
#[error("SIMPLER_INCLUDE_DIR=`{}` does not contain {MARKER_HEADER}", path.display())]
pub struct IncludeDirError {
    /// The directory named.
    pub path: PathBuf,
}

/// Where the `simpler/*.h` headers are for an example in `example_dir`, the first of:
/// 1. `env_dir` (`$SIMPLER_INCLUDE_DIR`), if set: it must contain `simpler/kernel.h`;
/// 2. `<dir of exe>/../../include` (the repository's `include/` for a binary run from
///    `target/<profile>/`), if it contains `simpler/kernel.h`;
/// 3. the nearest `include/` holding `simpler/kernel.h` in `example_dir` or an ancestor;
/// 4. the repository's `include/` as it was when this crate was compiled.
///
/// # Errors
/// [`IncludeDirError`] if `env_dir` is given but lacks the headers.
pub fn find_include_dir(
    example_dir: &Path,
    env_dir: Option<OsString>,
    exe: Option<PathBuf>,
) -> Result<PathBuf, IncludeDirError> {
    let has_headers = |d: &Path| d.join(MARKER_HEADER).is_file();
    if let Some(d) = env_dir.filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        return if has_headers(&d) {
            Ok(d)
        } else {
            Err(IncludeDirError { path: d })
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
    Ok(repository_include_dir())
}

/// The repository's `include/` as it was when this crate was compiled.
pub fn repository_include_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../include"))
}

/// The repository's `examples/` as it was when this crate was compiled.
pub fn repository_examples_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples"))
}

/// A compiled library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// The shared library's bytes.
    pub image: Vec<u8>,
    /// What the compiler printed (warnings), possibly empty; on a cache hit, what it printed
    /// when the entry was made.
    pub diagnostics: String,
    /// True when the library came from the cache.
    pub cached: bool,
}

/// The C compiler with its include directories, extra flags and kernel cache. Shared by
/// threads compiling in parallel (`Sync`).
#[derive(Debug)]
pub struct Compiler {
    cc: Vec<String>,
    include_dirs: Vec<PathBuf>,
    extra_flags: Vec<String>,
    cache: KernelCache,
    banner: Mutex<Option<String>>,
}

impl Compiler {
    /// A compiler running `cc` (its words), searching `include_dirs` in order (the simpler
    /// headers' directory first, normally), caching in `cache`.
    ///
    /// # Errors
    /// [`CompileError::EmptyCc`] if `cc` has no words.
    pub fn new(
        cc: Vec<String>,
        include_dirs: Vec<PathBuf>,
        cache: KernelCache,
    ) -> Result<Compiler, CompileError> {
        if cc.is_empty() || cc[0].is_empty() {
            return Err(CompileError::EmptyCc);
        }
        Ok(Compiler {
            cc,
            include_dirs,
            extra_flags: Vec::new(),
            cache,
            banner: Mutex::new(None),
        })
    }

    /// The same compiler passing `flags` after the base flags of every compile.
    pub fn with_extra_flags(mut self, flags: Vec<String>) -> Compiler {
        self.extra_flags = flags;
        self
    }

    /// The compiler command's words.
    pub fn cc(&self) -> &[String] {
        &self.cc
    }

    /// The include directories, in search order.
    pub fn include_dirs(&self) -> &[PathBuf] {
        &self.include_dirs
    }

    /// The kernel cache.
    pub fn cache(&self) -> &KernelCache {
        &self.cache
    }

    /// Every flag of a compile with `flags` and `extra_includes` (searched after the
    /// compiler's own include directories), without output, source and `-lm`.
    pub fn args(&self, flags: &[String], extra_includes: &[PathBuf]) -> Vec<String> {
        let mut args: Vec<String> = BASE_FLAGS.iter().map(|s| s.to_string()).collect();
        args.extend(self.extra_flags.iter().cloned());
        args.extend(flags.iter().cloned());
        for d in self.include_dirs.iter().chain(extra_includes) {
            let d = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
            args.push("-I".into());
            args.push(d.to_string_lossy().into_owned());
        }
        args
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.cc[0]);
        c.args(&self.cc[1..]);
        c
    }

    fn not_found(&self, source: std::io::Error) -> CompileError {
        CompileError::CompilerNotFound {
            cc: self.cc.join(" "),
            source,
        }
    }

    /// The compiler's `--version` output, asked once.
    fn banner(&self) -> Result<String, CompileError> {
        let mut banner = self.banner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = banner.as_ref() {
            return Ok(b.clone());
        }
        let out = self
            .command()
            .arg("--version")
            .output()
            .map_err(|e| self.not_found(e))?;
        let text = if out.stdout.is_empty() {
            out.stderr
        } else {
            out.stdout
        };
        let b = String::from_utf8_lossy(&text).trim().to_string();
        *banner = Some(b.clone());
        Ok(b)
    }

    /// Runs the compiler with `args`; its stderr on success.
    fn run(&self, args: &[String], source: &Path) -> Result<(String, String), CompileError> {
        let out = self
            .command()
            .args(args)
            .output()
            .map_err(|e| self.not_found(e))?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            let command = self
                .cc
                .iter()
                .chain(args)
                .cloned()
                .collect::<Vec<_>>()
                .join(" ");
            let report = if stderr.trim().is_empty() {
                String::from_utf8_lossy(&out.stdout).into_owned()
            } else {
                stderr
            };
            return Err(CompileError::Rejected {
                path: source.to_path_buf(),
                status: out.status,
                diagnostic: first_error(&report).map(Box::new),
                stderr: report,
                command,
            });
        }
        Ok((String::from_utf8_lossy(&out.stdout).into_owned(), stderr))
    }

    /// The cache key of `source` compiled with `args`: runs the compiler's `-MM` to list the
    /// headers the source includes.
    fn key(&self, source: &Path, args: &[String]) -> Result<CacheKey, CompileError> {
        use simpler_host::fsio::{read_regular, ReadFileError};
        let bytes =
            read_regular(source, MAX_SOURCE_BYTES, "a kernel source").map_err(|e| match e {
                ReadFileError::Missing { path } => CompileError::MissingSource { path },
                other => CompileError::Source(other),
            })?;
        let mut mm = args.to_vec();
        mm.push("-MM".into());
        mm.push(source.to_string_lossy().into_owned());
        let (deps, _) = self.run(&mm, source)?;
        let headers: Vec<PathBuf> = depfile_prerequisites(&deps)
            .into_iter()
            .map(PathBuf::from)
            .filter(|p| p != source)
            .collect();
        let banner = self.banner()?;
        Ok(KernelCache::key(
            &KeyInputs {
                compiler: &self.cc,
                banner: &banner,
                args,
                source: &bytes,
            },
            &headers,
        ))
    }

    fn resolve(source: &Path) -> Result<PathBuf, CompileError> {
        let missing = || CompileError::MissingSource {
            path: source.to_path_buf(),
        };
        let path = std::fs::canonicalize(source).map_err(|_| missing())?;
        // Refuses a device, FIFO or directory at once (a FIFO without blocking).
        simpler_host::fsio::open_regular(&path).map_err(|e| match e {
            simpler_host::fsio::ReadFileError::Missing { .. } => missing(),
            other => CompileError::Source(other),
        })?;
        Ok(path)
    }

    /// Compiles `source` with `flags` (after the base and extra flags) and `extra_includes`
    /// (after the compiler's include directories), through the cache.
    ///
    /// # Errors
    /// [`CompileError`]: missing source, compiler missing or rejecting the source (with its
    /// diagnostics and the first error located), cache directory unusable.
    pub fn compile(
        &self,
        source: &Path,
        flags: &[String],
        extra_includes: &[PathBuf],
    ) -> Result<Compiled, CompileError> {
        let source = Self::resolve(source)?;
        let args = self.args(flags, extra_includes);
        let key = self.key(&source, &args)?;
        if let Some(hit) = self.cache.lookup(&key) {
            return Ok(Compiled {
                image: hit.image,
                diagnostics: hit.diagnostics,
                cached: true,
            });
        }
        let stored = self.cache.store(&key, |out| {
            let mut full = args.clone();
            full.push("-o".into());
            full.push(out.to_string_lossy().into_owned());
            full.push(source.to_string_lossy().into_owned());
            // libm: the loading process need not have it mapped (a lazily bound `expf`
            // would otherwise fail mid-run).
            full.push("-lm".into());
            self.run(&full, &source).map(|(_, stderr)| stderr)
        })?;
        Ok(Compiled {
            image: stored.image,
            diagnostics: stored.diagnostics,
            cached: false,
        })
    }

    /// Compiles `source` for `target` (its defines) with the compiler's own flags.
    ///
    /// # Errors
    /// As [`Compiler::compile`].
    pub fn compile_target(&self, source: &Path, target: Target) -> Result<Compiled, CompileError> {
        let flags: Vec<String> = target.defines().iter().map(|s| s.to_string()).collect();
        self.compile(source, &flags, &[])
    }

    /// Where the library of `source` compiled with `flags` is (or would be) cached.
    ///
    /// # Errors
    /// As [`Compiler::compile`] (the key needs the compiler's `-MM`).
    pub fn cache_path(&self, source: &Path, flags: &[String]) -> Result<PathBuf, CompileError> {
        let source = Self::resolve(source)?;
        let key = self.key(&source, &self.args(flags, &[]))?;
        Ok(self.cache.entry_path(&key))
    }
}

/// The prerequisites of a make rule as `cc -MM` prints it (backslash-escaped spaces kept,
/// continuation lines joined).
pub fn depfile_prerequisites(text: &str) -> Vec<String> {
    let body = text.replace("\\\n", " ");
    let deps = body.split_once(':').map_or("", |(_, d)| d);
    let mut out = Vec::new();
    let mut word = String::new();
    let mut escaped = false;
    for ch in deps.chars() {
        if escaped {
            word.push(ch);
            escaped = false;
        } else if ch == '\\' {
            escaped = true;
        } else if ch.is_whitespace() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
        } else {
            word.push(ch);
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

#[cfg(test)]
mod tests;
