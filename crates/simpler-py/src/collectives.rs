//! The collectives' argument rules for `simpler.collectives` (`docs/comm.md` §4): thin
//! wrappers of `simpler_worker::collectives`, which owns every rule and message, so Python
//! does not repeat them. This module only converts Python values (dtype wire codes, shapes
//! as sequences of ints, seconds as a number) and raises the rules' errors through
//! [`error::worker_error`] as `InvalidArgumentError` with `arg` and `reason`; it also
//! exports the limits and op codes the rules use.
//!
//! Python's collectives take their wait limit as `timeout_s`, so a refused timeout names
//! `timeout_s` here where Rust's rule names `timeout`.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString};
use simpler_abi::DataType;
use simpler_worker::collectives::{self, Op};
use simpler_worker::WorkerError;

use crate::error::{self, invalid_argument};

/// `repr(value)`, or `?` when it has none.
fn repr(value: &Bound<'_, PyAny>) -> String {
    value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
}

/// The data type of wire value `code`; an `InvalidArgumentError` naming `arg` otherwise.
fn dtype_of(py: Python<'_>, arg: &str, code: u32) -> PyResult<DataType> {
    DataType::from_raw(code)
        .ok_or_else(|| invalid_argument(py, arg, format!("{code} is not a DataType wire value")))
}

/// `collective_check_dtype(code: int) -> int`: the wire value `code` if collectives support
/// its dtype (f32, i32).
///
/// Raises `InvalidArgumentError` naming `dtype` for another or an unknown dtype.
#[pyfunction]
fn collective_check_dtype(py: Python<'_>, code: u32) -> PyResult<u32> {
    let dtype = dtype_of(py, "dtype", code)?;
    collectives::check_dtype(dtype)
        .map(|d| d as u32)
        .map_err(|e| error::worker_error(py, e))
}

/// `collective_check_count(count: int) -> int`: `count` (elements per rank of a domain) if
/// it is an int (not a bool) of at least 1.
///
/// Raises `InvalidArgumentError` naming `count` otherwise.
#[pyfunction]
fn collective_check_count(py: Python<'_>, count: &Bound<'_, PyAny>) -> PyResult<u64> {
    let count = count_of(py, count)?;
    collectives::check_count(count).map_err(|e| error::worker_error(py, e))
}

/// A count as a `u64`: any object with `__index__` but a bool, at least 0 (the rule refuses
/// 0 with its own message).
fn count_of(py: Python<'_>, count: &Bound<'_, PyAny>) -> PyResult<u64> {
    let bad = || {
        invalid_argument(
            py,
            "count",
            format!(
                "must be an int >= 1 (elements per rank), got {}",
                repr(count)
            ),
        )
    };
    if count.is_instance_of::<PyBool>() {
        return Err(bad());
    }
    let v: i128 = count.extract().map_err(|_| bad())?;
    u64::try_from(v).map_err(|_| bad())
}

/// The sizes of a collectives domain (see `collectives::DomainLayout`).
#[pyclass(module = "simpler._native", name = "CollectiveLayout", frozen)]
pub struct NativeCollectiveLayout {
    /// Elements of the domain's dtype in each rank's `scratch` buffer.
    #[pyo3(get)]
    scratch: u64,
    /// Bytes of each rank's window.
    #[pyo3(get)]
    window: u64,
}

/// `collective_domain_layout(n: int, count: int, dtype: int) -> CollectiveLayout`: the
/// `scratch` elements and `window` bytes per rank of a domain over `n` chips for up to
/// `count` elements per rank of the dtype of wire value `dtype`.
///
/// Raises `InvalidArgumentError` naming `count` (not an int >= 1, or too large for a
/// window) or `dtype` (not f32 or i32).
#[pyfunction]
fn collective_domain_layout(
    py: Python<'_>,
    n: usize,
    count: &Bound<'_, PyAny>,
    dtype: u32,
) -> PyResult<NativeCollectiveLayout> {
    let count = count_of(py, count)?;
    let dtype = dtype_of(py, "dtype", dtype)?;
    let layout =
        collectives::domain_layout(n, count, dtype).map_err(|e| error::worker_error(py, e))?;
    Ok(NativeCollectiveLayout {
        scratch: layout.scratch,
        window: layout.window,
    })
}

/// `collective_timeout_us(seconds: float) -> int`: the `timeout_us` scalar of a wait limit
/// of `seconds` (a real number, not a bool) in (0, `COLLECTIVE_MAX_TIMEOUT_S`].
///
/// Raises `InvalidArgumentError` naming `timeout_s` otherwise.
#[pyfunction]
fn collective_timeout_us(py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<u64> {
    let number = if seconds.is_instance_of::<PyBool>() || seconds.is_instance_of::<PyString>() {
        None
    } else {
        seconds.extract::<f64>().ok()
    };
    let Some(number) = number else {
        return Err(invalid_argument(
            py,
            "timeout_s",
            format!("must be a number of seconds, got {}", repr(seconds)),
        ));
    };
    collectives::check_timeout_secs(number).map_err(|e| {
        let e = match e {
            WorkerError::InvalidArgument { reason, .. } => WorkerError::InvalidArgument {
                arg: "timeout_s".into(),
                reason,
            },
            other => other,
        };
        error::worker_error(py, e)
    })
}

/// One rank's tensor as Python describes it: its dtype's wire value and its shape.
type Described = (u32, Vec<u64>);

/// Each tensor of `seq` as `(dtype, shape)`, with the dtypes `dtypes` decoded from it.
fn pairs(dtypes: Vec<DataType>, seq: &[Described]) -> Vec<(DataType, &[u64])> {
    dtypes
        .into_iter()
        .zip(seq)
        .map(|(d, (_, shape))| (d, shape.as_slice()))
        .collect()
}

/// `collective_check(op, inputs, outputs, dtype, scratch, n)`: checks one collective's
/// tensors, `inputs` and `outputs` each a list of `(dtype wire value, shape)` per rank, over
/// `n` ranks on a domain of `dtype` (a wire value) with `scratch` elements per rank (see
/// `collectives::check_shapes`).
///
/// Raises `InvalidArgumentError` naming `op` (an unknown op code), `inputs` / `outputs`,
/// `inputs[r]` / `outputs[r]` or `dtype`.
#[pyfunction]
fn collective_check(
    py: Python<'_>,
    op: u64,
    inputs: Vec<Described>,
    outputs: Vec<Described>,
    dtype: u32,
    scratch: u64,
    n: usize,
) -> PyResult<()> {
    let op = Op::from_code(op).ok_or_else(|| {
        invalid_argument(
            py,
            "op",
            format!("{op} is not a collective op code (0, 1 or 2)"),
        )
    })?;
    let dtype = dtype_of(py, "dtype", dtype)?;
    let typed = |what: &str, seq: &[Described]| -> PyResult<Vec<DataType>> {
        seq.iter()
            .enumerate()
            .map(|(i, (code, _))| dtype_of(py, &format!("{what}[{i}]"), *code))
            .collect()
    };
    let xs = pairs(typed("inputs", &inputs)?, &inputs);
    let ys = pairs(typed("outputs", &outputs)?, &outputs);
    collectives::check_shapes(op, &xs, &ys, dtype, scratch, n)
        .map_err(|e| error::worker_error(py, e))
}

/// `collective_rename(text: str) -> str`: an engine error's text with every
/// `args_list[r][i]` renamed to the collective's own argument (`inputs[r]`, `outputs[r]`,
/// `domain scratch[r]`, `domain signal[r]`).
#[pyfunction]
fn collective_rename(text: &str) -> String {
    collectives::rename(text)
}

/// Adds the functions, `CollectiveLayout` and the constants `COLLECTIVE_OPS` (name → op
/// code), `COLLECTIVE_DTYPES` (the supported dtypes' wire values),
/// `COLLECTIVE_SIGNAL_WORDS` (int32 words of a rank's `signal`),
/// `COLLECTIVE_MAX_TIMEOUT_S` and `COLLECTIVE_DEFAULT_TIMEOUT_S` (seconds).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeCollectiveLayout>()?;
    m.add_function(wrap_pyfunction!(collective_check_dtype, m)?)?;
    m.add_function(wrap_pyfunction!(collective_check_count, m)?)?;
    m.add_function(wrap_pyfunction!(collective_domain_layout, m)?)?;
    m.add_function(wrap_pyfunction!(collective_timeout_us, m)?)?;
    m.add_function(wrap_pyfunction!(collective_check, m)?)?;
    m.add_function(wrap_pyfunction!(collective_rename, m)?)?;
    let ops = PyDict::new(m.py());
    for op in Op::ALL {
        ops.set_item(op.name(), op.code())?;
    }
    m.add("COLLECTIVE_OPS", ops)?;
    m.add(
        "COLLECTIVE_DTYPES",
        collectives::DTYPES.map(|d| d as u32).to_vec(),
    )?;
    m.add("COLLECTIVE_SIGNAL_WORDS", collectives::SIGNAL_WORDS)?;
    m.add(
        "COLLECTIVE_MAX_TIMEOUT_S",
        collectives::MAX_TIMEOUT.as_secs_f64(),
    )?;
    m.add(
        "COLLECTIVE_DEFAULT_TIMEOUT_S",
        collectives::DEFAULT_TIMEOUT.as_secs_f64(),
    )?;
    Ok(())
}
