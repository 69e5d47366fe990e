//! `simpler._native.Callable`: a callable made of shared-library images — an orchestration,
//! its kernels and a signature — as the host's [`Bundle`] holds it.
//!
//! Built from Python (`ChipCallable.build`), compiled from an example folder
//! ([`build_example`](crate::toolchain::build_example)), read from a file written by
//! `simpler build`, or read from bytes; validated on construction (names, signature, func ids, ELF images), so a
//! malformed callable fails where it is made rather than at registration. Registration turns
//! it into a [`CallableSpec`](simpler_host::CallableSpec) with [`Bundle::into_spec`].

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use simpler_abi::CoreType;
use simpler_host::signature::dtype_from_name;
use simpler_host::{ArgDirection, ArgSpec, Bundle, BundleCode, BundleKernel, Signature};

use crate::error::{self, Raise};

/// One signature entry as Python passes and receives it: a host [`ArgSpec`] as the tuple
/// `(name, direction, dtype, shape or None)`, direction and dtype spelt by their host names
/// ([`ArgDirection::name`], [`DataType::name`](simpler_abi::DataType::name): `"in"`,
/// `"f32"`).
pub(crate) type ArgTuple = (String, String, String, Option<Vec<u64>>);

/// One kernel as Python passes it: `(func_id, core, entry, image, name)`, core `"aic"` or
/// `"aiv"`, name `None` for the entry symbol (the host's rule, [`BundleKernel::name`]).
pub(crate) type KernelTuple<'py> = (u32, String, String, Bound<'py, PyBytes>, Option<String>);

/// A callable of shared-library images (the host's [`Bundle`]).
#[pyclass(module = "simpler._native", name = "Callable", frozen)]
pub struct NativeCallable {
    pub(crate) bundle: Bundle,
}

fn core_type(name: &str) -> Option<CoreType> {
    Some(match name {
        "aic" => CoreType::Aic,
        "aiv" => CoreType::Aiv,
        _ => return None,
    })
}

/// Builds a [`Signature`] from Python's tuples, direction and dtype read by the host's
/// parsers (the signature is validated by the bundle afterwards).
///
/// # Errors
/// `SignatureError` naming the argument whose direction or dtype is unknown.
pub(crate) fn signature(py: Python<'_>, args: Vec<ArgTuple>) -> PyResult<Signature> {
    let specs = args
        .into_iter()
        .map(|(name, direction, dtype, shape)| {
            let bad = |reason: String| {
                Raise::new("SignatureError", format!("argument `{name}`: {reason}")).into_err(py)
            };
            let direction: ArgDirection = direction.parse().map_err(|e| bad(format!("{e}")))?;
            let dtype = dtype_from_name(&dtype).map_err(|e| bad(format!("{e}")))?;
            Ok(ArgSpec {
                name,
                direction,
                dtype,
                shape,
            })
        })
        .collect::<PyResult<Vec<ArgSpec>>>()?;
    Ok(Signature { args: specs })
}

/// The signature as Python's `(name, direction, dtype, shape or None)` tuples.
pub(crate) fn signature_tuples(sig: &Signature) -> Vec<ArgTuple> {
    sig.args
        .iter()
        .map(|a| {
            (
                a.name.clone(),
                a.direction.name().to_string(),
                a.dtype.name().to_string(),
                a.shape.clone(),
            )
        })
        .collect()
}

impl NativeCallable {
    fn checked(py: Python<'_>, bundle: Bundle) -> PyResult<NativeCallable> {
        match bundle.validate() {
            Ok(()) => Ok(NativeCallable { bundle }),
            Err(simpler_host::BundleError::InvalidSignature(e)) => Err(Raise::new(
                "SignatureError",
                format!("invalid signature: {e}"),
            )
            .detail("callable", bundle.name.as_str())
            .into_err(py)),
            Err(e) => Err(Raise::new(
                "InvalidCallableError",
                format!("invalid callable `{}`: {e}", bundle.name),
            )
            .detail("callable", bundle.name.as_str())
            .detail("reason", e.to_string())
            .into_err(py)),
        }
    }
}

#[pymethods]
impl NativeCallable {
    /// Builds and validates a callable: `signature` as `(name, direction, dtype, shape)`
    /// tuples, `orchestration` as `(entry, image)`, `kernels` as `(func_id, core, entry,
    /// image, name or None)` tuples (names valid and unique, else `InvalidCallableError`); `runtime` the variant its runs use unless a run names one (`None`: the
    /// worker's; another name than the host's is an `InvalidConfigError`).
    #[new]
    #[pyo3(signature = (name, signature, orchestration, kernels, *, runtime=None))]
    fn new(
        py: Python<'_>,
        name: String,
        signature: Vec<ArgTuple>,
        orchestration: (String, Bound<'_, PyBytes>),
        kernels: Vec<KernelTuple<'_>>,
        runtime: Option<Bound<'_, PyAny>>,
    ) -> PyResult<NativeCallable> {
        let runtime = match &runtime {
            Some(v) if !v.is_none() => Some(crate::config::runtime(py, "runtime", v)?),
            _ => None,
        };
        let signature = self::signature(py, signature)?;
        let mut bundle_kernels = Vec::with_capacity(kernels.len());
        for (func_id, core, entry, image, kernel_name) in kernels {
            let core_type = core_type(&core).ok_or_else(|| {
                Raise::new(
                    "InvalidCallableError",
                    format!("kernel func_id {func_id}: unknown core type `{core}` (aic or aiv)"),
                )
                .into_err(py)
            })?;
            bundle_kernels.push(BundleKernel {
                func_id,
                core_type,
                name: kernel_name.unwrap_or_else(|| entry.clone()),
                code: BundleCode {
                    entry,
                    image: image.as_bytes().to_vec(),
                },
            });
        }
        let bundle = Bundle {
            name,
            signature,
            orchestration: BundleCode {
                entry: orchestration.0,
                image: orchestration.1.as_bytes().to_vec(),
            },
            kernels: bundle_kernels,
            runtime,
        };
        NativeCallable::checked(py, bundle)
    }

    /// Reads a bundle file written by `simpler build`.
    #[staticmethod]
    fn read(py: Python<'_>, path: PathBuf) -> PyResult<NativeCallable> {
        let bundle = py
            .detach(|| Bundle::read(&path))
            .map_err(|e| error::bundle_error(py, e))?;
        Ok(NativeCallable { bundle })
    }

    /// Parses the bytes of a bundle file.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &Bound<'_, PyBytes>) -> PyResult<NativeCallable> {
        let bundle = Bundle::from_bytes(data.as_bytes()).map_err(|e| error::bundle_error(py, e))?;
        Ok(NativeCallable { bundle })
    }

    /// Writes the callable as a bundle file (atomically), readable by `simpler run`.
    fn write(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.bundle.write(&path))
            .map_err(|e| error::bundle_error(py, e))
    }

    /// The bundle file's bytes.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.bundle.to_bytes())
    }

    /// Name shown in messages.
    #[getter]
    fn name(&self) -> &str {
        &self.bundle.name
    }

    /// The runtime variant the callable's runs use unless a run names one; `None`: the
    /// worker's.
    #[getter]
    fn runtime(&self) -> Option<&'static str> {
        self.bundle.runtime.map(simpler_host::Runtime::name)
    }

    /// The signature as `(name, direction, dtype, shape or None)` tuples.
    #[getter]
    fn signature(&self) -> Vec<ArgTuple> {
        signature_tuples(&self.bundle.signature)
    }

    /// `(entry, image)` of the orchestration.
    #[getter]
    fn orchestration<'py>(&self, py: Python<'py>) -> (String, Bound<'py, PyBytes>) {
        let o = &self.bundle.orchestration;
        (o.entry.clone(), PyBytes::new(py, &o.image))
    }

    /// `(func_id, name)` of each kernel, the name it goes by once registered
    /// (`Bundle::kernel_names`: a default shared by several kernels is qualified).
    #[getter]
    fn kernel_names(&self) -> Vec<(u32, String)> {
        let funcs = self.bundle.kernels.iter().map(|k| k.func_id);
        funcs.zip(self.bundle.kernel_names()).collect()
    }

    /// `(func_id, core, entry, image, name)` of each kernel.
    #[getter]
    #[allow(clippy::type_complexity)]
    fn kernels<'py>(
        &self,
        py: Python<'py>,
    ) -> Vec<(u32, &'static str, String, Bound<'py, PyBytes>, String)> {
        self.bundle
            .kernels
            .iter()
            .map(|k| {
                (
                    k.func_id,
                    k.core_type.name(),
                    k.code.entry.clone(),
                    PyBytes::new(py, &k.code.image),
                    k.name.clone(),
                )
            })
            .collect()
    }
}
