//! `simpler._native`'s view of [`simpler_toolchain`]: the kernel compiler with its content-hash
//! cache, example manifests, whole-example builds, `allclose` and scalar text parsing, so the
//! Python package (`compiler.py`, `manifest.py`, `callable.py`, `testing/scene.py`) wraps
//! the one implementation the CLI uses instead of keeping its own.
//!
//! Errors become the `simpler.errors` classes: manifest and source problems
//! `InvalidCallableError` (with `path` and `field`), compiler rejections `CompileError`
//! (with `file`, `line`, `column`, `stderr`, `command`), a compiler that cannot start
//! `CompilerNotFoundError`, a library without its entry symbol `LoadError`, bad compiler or
//! cache settings and bad tolerances `InvalidConfigError`, bad scalars
//! `InvalidArgumentError`. Compile errors are mapped in [`crate::error`] with the host's;
//! the rest are built here with its [`Raise`].

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyModule};
use simpler_abi::{CoreType, DataType};
use simpler_toolchain::build::{self, BuildError, CompileError, Compiler, Target};
use simpler_toolchain::cache::KernelCache;
use simpler_toolchain::compare::{self, Element, Report, Tolerance};
use simpler_toolchain::manifest::{self, ManifestError};
use simpler_toolchain::{error_chain, scalar};

use crate::callable::NativeCallable;
use crate::error::{self, compile_error, Raise};

/// The Python exception of a [`ManifestError`].
fn manifest_error(py: Python<'_>, e: &ManifestError) -> PyErr {
    let path = match e {
        ManifestError::Missing { path }
        | ManifestError::Io { path, .. }
        | ManifestError::Parse { path, .. }
        | ManifestError::Field { path, .. }
        | ManifestError::Signature { path, .. }
        | ManifestError::DuplicateKernelName { path, .. } => path,
    };
    let mut raise = Raise::new("InvalidCallableError", error_chain(e))
        .detail("path", path.display().to_string());
    if let ManifestError::Field { field, .. } = e {
        raise = raise.detail("field", field.as_str());
    }
    if let ManifestError::DuplicateKernelName { name, .. } = e {
        raise = raise.detail("kernel", name.as_str());
    }
    raise.into_err(py)
}

/// The Python exception of a [`BuildError`].
fn build_error(py: Python<'_>, e: &BuildError) -> PyErr {
    match e {
        BuildError::Manifest(m) => manifest_error(py, m),
        BuildError::Compile(c) => compile_error(py, c),
        BuildError::MissingSource {
            path,
            field,
            manifest,
        } => Raise::new(
            "InvalidCallableError",
            format!(
                "invalid manifest `{}`: field `{field}`: source file `{}` does not exist",
                manifest.display(),
                path.display()
            ),
        )
        .detail("path", manifest.display().to_string())
        .detail("field", field.as_str())
        .into_err(py),
        BuildError::BadSource {
            field, manifest, ..
        } => Raise::new("InvalidCallableError", error_chain(e))
            .detail("path", manifest.display().to_string())
            .detail("field", field.as_str())
            .into_err(py),
        BuildError::MissingEntry { .. } | BuildError::Load { .. } => {
            Raise::new("LoadError", error_chain(e)).into_err(py)
        }
        BuildError::IncludeDir(_) => Raise::new("InvalidConfigError", error_chain(e)).into_err(py),
        BuildError::Bundle(_) | BuildError::Write(_) => {
            Raise::new("InvalidCallableError", error_chain(e)).into_err(py)
        }
    }
}

fn core_type(py: Python<'_>, name: &str) -> PyResult<CoreType> {
    match name {
        "aic" => Ok(CoreType::Aic),
        "aiv" => Ok(CoreType::Aiv),
        _ => Err(Raise::new(
            "InvalidConfigError",
            format!("core_type must be 'aic' or 'aiv', got {name:?}"),
        )
        .into_err(py)),
    }
}

/// The compiler and its cache (`simpler.KernelCompiler` wraps one).
#[pyclass(module = "simpler._native", name = "KernelCompiler", frozen)]
pub struct NativeCompiler {
    compiler: Compiler,
}

#[pymethods]
impl NativeCompiler {
    /// A compiler running `cc` (its words), searching `include_dirs` in order, adding
    /// `extra_flags` after the base flags, caching in `cache_dir` (default: the
    /// environment's location).
    #[new]
    #[pyo3(signature = (cc, include_dirs, extra_flags, cache_dir=None))]
    fn new(
        py: Python<'_>,
        cc: Vec<String>,
        include_dirs: Vec<PathBuf>,
        extra_flags: Vec<String>,
        cache_dir: Option<PathBuf>,
    ) -> PyResult<NativeCompiler> {
        let compiler = Compiler::new(cc, include_dirs, KernelCache::locate(cache_dir))
            .map_err(|e| compile_error(py, &e))?
            .with_extra_flags(extra_flags);
        Ok(NativeCompiler { compiler })
    }

    /// Compiles `source` for `core` (`"aic"`, `"aiv"`, or `None` for an orchestration or a
    /// plain library) with `flags` and `include_dirs` after the compiler's own; returns the
    /// library's bytes.
    #[pyo3(signature = (source, core=None, flags=Vec::new(), include_dirs=Vec::new()))]
    fn compile<'py>(
        &self,
        py: Python<'py>,
        source: PathBuf,
        core: Option<&str>,
        flags: Vec<String>,
        include_dirs: Vec<PathBuf>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let flags = self.flags(py, core, flags)?;
        let compiled = py
            .detach(|| self.compiler.compile(&source, &flags, &include_dirs))
            .map_err(|e| compile_error(py, &e))?;
        Ok(PyBytes::new(py, &compiled.image))
    }

    /// Where the library of `source` for `core` with `flags` is (or would be) cached.
    #[pyo3(signature = (source, core=None, flags=Vec::new()))]
    fn cache_path(
        &self,
        py: Python<'_>,
        source: PathBuf,
        core: Option<&str>,
        flags: Vec<String>,
    ) -> PyResult<PathBuf> {
        let flags = self.flags(py, core, flags)?;
        py.detach(|| self.compiler.cache_path(&source, &flags))
            .map_err(|e| compile_error(py, &e))
    }

    /// Cache lookups that found an entry.
    #[getter]
    fn hits(&self) -> u64 {
        self.compiler.cache().stats().hits
    }

    /// Cache lookups that did not.
    #[getter]
    fn misses(&self) -> u64 {
        self.compiler.cache().stats().misses
    }

    /// The cache directory.
    #[getter]
    fn cache_dir(&self) -> PathBuf {
        self.compiler.cache().dir().to_path_buf()
    }
}

impl NativeCompiler {
    /// `core`'s defines followed by `flags`.
    fn flags(
        &self,
        py: Python<'_>,
        core: Option<&str>,
        flags: Vec<String>,
    ) -> PyResult<Vec<String>> {
        let target = match core {
            None => Target::Orchestration,
            Some(c) => Target::Kernel(core_type(py, c)?),
        };
        Ok(target
            .defines()
            .iter()
            .map(|d| d.to_string())
            .chain(flags)
            .collect())
    }
}

/// The compiler command: `cc` (or `$CC` when `None`) split into words, `["cc"]` by default.
#[pyfunction]
#[pyo3(signature = (cc=None))]
pub fn compiler_words(py: Python<'_>, cc: Option<String>) -> PyResult<Vec<String>> {
    let text = match cc {
        Some(c) if c.trim().is_empty() => return Err(compile_error(py, &CompileError::EmptyCc)),
        Some(c) => Some(c.into()),
        None => std::env::var_os("CC"),
    };
    build::compiler_words(text).map_err(|e| compile_error(py, &e))
}

/// The kernel cache directory the environment names (`$SIMPLER_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/simpler/kernels`, else `~/.cache/simpler/kernels`).
#[pyfunction]
pub fn default_cache_dir() -> PathBuf {
    KernelCache::locate(None).dir().to_path_buf()
}

/// A manifest as Python takes it: path, name, `(source, entry)` of the orchestration,
/// `(func_id, core, source, entry, name)` per kernel (the name resolved: the source's stem
/// when the manifest gives none), and the signature as `(name, direction,
/// dtype, shape)` tuples.
type ManifestTuple = (
    PathBuf,
    String,
    (PathBuf, String),
    Vec<(u32, &'static str, PathBuf, String, String)>,
    Vec<crate::callable::ArgTuple>,
);

/// Loads the manifest of an example folder (or the manifest file) and checks that every
/// source it names exists.
#[pyfunction]
pub fn load_manifest(py: Python<'_>, target: PathBuf) -> PyResult<ManifestTuple> {
    let loaded = manifest::load(&target).map_err(|e| manifest_error(py, &e))?;
    for s in loaded.sources() {
        if !s.path.is_file() {
            let e = BuildError::MissingSource {
                path: s.path,
                field: s.field,
                manifest: loaded.path.clone(),
            };
            return Err(build_error(py, &e));
        }
    }
    let m = &loaded.manifest;
    Ok((
        loaded.path.clone(),
        m.name.clone(),
        (
            loaded.source_path(&m.orchestration.source),
            m.orchestration.entry.clone(),
        ),
        m.kernels
            .iter()
            .map(|k| {
                (
                    k.func_id,
                    k.core.name(),
                    loaded.source_path(&k.source),
                    k.entry.clone(),
                    k.name().to_string(),
                )
            })
            .collect(),
        crate::callable::signature_tuples(&loaded.signature),
    ))
}

/// Compiles an example folder (or its manifest) with `compiler` into a callable, exactly as
/// `simpler build` does: same flags, same cache, every entry symbol checked.
#[pyfunction]
pub fn build_example(
    py: Python<'_>,
    target: PathBuf,
    compiler: &NativeCompiler,
) -> PyResult<NativeCallable> {
    let built = py
        .detach(|| build::build_example(&target, &compiler.compiler))
        .map_err(|e| build_error(py, &e))?;
    Ok(NativeCallable {
        bundle: built.bundle,
    })
}

/// The repository's `examples/` as it was when the extension was built.
pub fn examples_dir() -> PathBuf {
    let d = build::repository_examples_dir();
    std::fs::canonicalize(&d).unwrap_or(d)
}

/// `(index, actual, expected)` of one element.
type ElementTuple = (usize, f64, f64);

/// A comparison report: `(total, mismatches, max_abs_err, first, worst)`.
type ReportTuple = (
    usize,
    usize,
    f64,
    Option<ElementTuple>,
    Option<ElementTuple>,
);

fn report_tuple(r: Report) -> ReportTuple {
    let t = |e: Element| (e.index, e.actual, e.expected);
    (
        r.total,
        r.mismatches,
        r.max_abs_err,
        r.first.map(t),
        r.worst.map(t),
    )
}

/// NumPy `allclose` of two arrays given as little-endian element bytes of `dtype` (a simpler
/// dtype name, or `"f64"`): `|actual - expected| <= atol + rtol * |expected|`.
#[pyfunction]
#[pyo3(signature = (actual, expected, dtype, rtol, atol, equal_nan=false))]
pub fn allclose(
    py: Python<'_>,
    actual: &Bound<'_, PyBytes>,
    expected: &Bound<'_, PyBytes>,
    dtype: &str,
    rtol: f64,
    atol: f64,
    equal_nan: bool,
) -> PyResult<ReportTuple> {
    let tol = Tolerance::new(rtol, atol).with_equal_nan(equal_nan);
    let (a, e) = (actual.as_bytes(), expected.as_bytes());
    let result = if dtype == "f64" {
        let floats = |b: &[u8]| -> Vec<f64> {
            b.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect()
        };
        if a.len() % 8 != 0 || e.len() % 8 != 0 {
            return Err(Raise::new(
                "InvalidArgumentError",
                "f64 buffers must hold whole 8-byte elements",
            )
            .into_err(py));
        }
        compare::allclose_f64(&floats(a), &floats(e), tol)
    } else {
        let dt = DataType::from_name(dtype).ok_or_else(|| {
            Raise::new("InvalidArgumentError", format!("unknown dtype `{dtype}`")).into_err(py)
        })?;
        py.detach(|| compare::allclose(a, e, dt, tol))
    };
    result.map(report_tuple).map_err(|e| {
        let class = match e {
            compare::CompareError::BadTolerance { .. } => "InvalidConfigError",
            _ => "InvalidArgumentError",
        };
        Raise::new(class, e.to_string()).into_err(py)
    })
}

fn scalar_dtype(py: Python<'_>, dtype: &str) -> PyResult<DataType> {
    DataType::from_name(dtype).ok_or_else(|| {
        Raise::new("InvalidArgumentError", format!("unknown dtype `{dtype}`")).into_err(py)
    })
}

/// Text that is not a scalar of its dtype is an `InvalidArgumentError`; a number the host's
/// encoding refuses is mapped as the host maps it (out of range: `InvalidArgumentError`).
fn scalar_error(py: Python<'_>, e: scalar::ScalarError) -> PyErr {
    match e {
        scalar::ScalarError::Encode(host) => error::scalar_error(py, host),
        other => Raise::new("InvalidArgumentError", other.to_string()).into_err(py),
    }
}

/// The 64 raw bits of `text` (a number, or `0x…` raw bits) as a scalar of `dtype`, by the
/// rules of `simpler run --scalar`.
#[pyfunction]
pub fn parse_scalar(py: Python<'_>, text: &str, dtype: &str) -> PyResult<u64> {
    let dt = scalar_dtype(py, dtype)?;
    scalar::parse(text, dt).map_err(|e| scalar_error(py, e))
}

/// Adds the toolchain's classes, functions and constants to `simpler._native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeCompiler>()?;
    m.add_function(wrap_pyfunction!(compiler_words, m)?)?;
    m.add_function(wrap_pyfunction!(default_cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(load_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(build_example, m)?)?;
    m.add_function(wrap_pyfunction!(allclose, m)?)?;
    m.add_function(wrap_pyfunction!(parse_scalar, m)?)?;
    m.add("EXAMPLES_DIR", examples_dir())?;
    Ok(())
}
