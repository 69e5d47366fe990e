//! # simpler-py — the native half of the `simpler` Python package
//!
//! Built by maturin as `simpler._native` (an abi3 extension for CPython >= 3.9). It is a
//! thin layer over `simpler-host`: the Python package (`python/simpler/`) owns the public
//! API — `Worker`, `TaskArgs`, `ChipCallable`, the kernel compiler, scene tests — and calls
//! down into these few classes:
//!
//! - [`Callable`](callable::NativeCallable): a callable of shared-library images, the host's
//!   `Bundle` (build, read/write bundle files);
//! - [`ChipWorker`](worker::NativeWorker): one chip — register, run, submit, device
//!   memory, close;
//! - [`RunHandle`](handle::NativeRunHandle): a submitted run — poll, wait, result;
//! - [`toolchain`]: the kernel compiler and cache, manifests, example builds, `allclose`
//!   and scalar encoding of `simpler-toolchain`.
//!
//! Every Rust error becomes a Python exception in one module, [`error`], with one class per
//! error kind (defined in `simpler/errors.py`). Every call that may block detaches from the
//! interpreter, so other Python threads keep running while a run executes.
//!
//! Nothing outside this crate imports `pyo3`: the engine crates run without Python.

mod array;
mod callable;
mod error;
mod handle;
mod toml_value;
mod toolchain;
mod worker;

use pyo3::prelude::*;

/// The `simpler._native` module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<callable::NativeCallable>()?;
    m.add_class::<worker::NativeWorker>()?;
    m.add_class::<handle::NativeRunHandle>()?;
    m.add_function(wrap_pyfunction!(toml_value::parse_toml, m)?)?;
    toolchain::register(m)?;
    m.add("MAX_TENSOR_DIMS", simpler_abi::MAX_TENSOR_DIMS)?;
    m.add("MAX_CALLABLES", simpler_host::MAX_CALLABLES)?;
    m.add("MAX_FUNC_ID", simpler_abi::MAX_FUNC_ID)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
