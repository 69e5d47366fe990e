//! A run's arguments as Python passes them, and their conversion into the host's owned
//! arguments.
//!
//! Python passes one item per signature entry, in signature order:
//!
//! - [`HostTensor`](NativeHostTensor): a C-contiguous numpy array and its dtype;
//! - [`DeviceTensor`](NativeDeviceTensor): device memory from `malloc`, its shape and dtype;
//! - `int` or `float`: a scalar value, encoded by the signature's dtype;
//! - [`RawScalar`](NativeRawScalar): 64 raw bits (a ctypes `c_double`, ...), passed unchanged.
//!
//! This module only turns Python objects into descriptions of memory
//! ([`ArgOffer`](simpler_host::ArgOffer)); the host checks them all
//! ([`Signature::check_offers`]) and says how each host array is lent to the run in place
//! (the array stays alive in the run's arguments): read-only for an argument the run only
//! reads ([`OwnedArg::Input`]), writable for one it writes ([`OwnedArg::Tensor`]). Nothing
//! is copied at submit, so ordering a run behind an earlier one that writes its arrays is
//! the lane's alone. Nothing touches the device before the check passes.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyTuple};
use simpler_abi::DataType;
use simpler_device::DevicePtr;
use simpler_host::{ArgError, OwnedArg, Signature};
use simpler_host::{ArgOffer, HostMemory, Passing, ScalarValue};

use crate::array::ArrayMemory;
use crate::error;

/// A dtype given by its wire value (`simpler.DataType`).
fn dtype(py: Python<'_>, wire: u32) -> PyResult<DataType> {
    DataType::from_raw(wire).ok_or_else(|| {
        error::argument_type(py, format!("{wire} is not a DataType wire value (0..=10)"))
    })
}

/// A host tensor argument: a numpy array and its element type.
#[pyclass(module = "simpler._native", name = "HostTensor", frozen)]
pub struct NativeHostTensor {
    pub(crate) array: Py<PyAny>,
    pub(crate) dtype: DataType,
}

#[pymethods]
impl NativeHostTensor {
    /// `array`, a `numpy.ndarray` (C-contiguous, native byte order), holds elements of
    /// `dtype` (a `DataType` wire value).
    #[new]
    fn new(py: Python<'_>, array: Py<PyAny>, dtype: u32) -> PyResult<NativeHostTensor> {
        Ok(NativeHostTensor {
            array,
            dtype: self::dtype(py, dtype)?,
        })
    }

    /// The array.
    #[getter]
    fn array(&self, py: Python<'_>) -> Py<PyAny> {
        self.array.clone_ref(py)
    }

    /// The dtype's wire value.
    #[getter]
    fn dtype(&self) -> u32 {
        self.dtype as u32
    }
}

/// A device tensor argument: memory from `malloc`, passed to the run in place.
#[pyclass(module = "simpler._native", name = "DeviceTensor", frozen)]
pub struct NativeDeviceTensor {
    pub(crate) address: u64,
    pub(crate) shape: Vec<u64>,
    pub(crate) dtype: DataType,
}

#[pymethods]
impl NativeDeviceTensor {
    /// The tensor at device `address`: `shape` in elements (C order), `dtype` a `DataType`
    /// wire value.
    #[new]
    fn new(
        py: Python<'_>,
        address: u64,
        shape: Vec<u64>,
        dtype: u32,
    ) -> PyResult<NativeDeviceTensor> {
        Ok(NativeDeviceTensor {
            address,
            shape,
            dtype: self::dtype(py, dtype)?,
        })
    }

    /// The device address of the first element.
    #[getter]
    fn address(&self) -> u64 {
        self.address
    }

    /// Shape in elements.
    #[getter]
    fn shape(&self) -> Vec<u64> {
        self.shape.clone()
    }

    /// The dtype's wire value.
    #[getter]
    fn dtype(&self) -> u32 {
        self.dtype as u32
    }
}

/// A scalar argument given as 64 raw bits, passed whatever the signature's dtype.
#[pyclass(module = "simpler._native", name = "RawScalar", frozen)]
pub struct NativeRawScalar {
    bits: u64,
}

#[pymethods]
impl NativeRawScalar {
    /// The scalar whose 64 bits are `bits`.
    #[new]
    fn new(bits: u64) -> NativeRawScalar {
        NativeRawScalar { bits }
    }

    /// The bits.
    #[getter]
    fn bits(&self) -> u64 {
        self.bits
    }
}

/// A Python number as a scalar value (`bool` counts as an integer); `None` for anything
/// else. `name` names the argument when the integer does not fit 128 bits.
pub(crate) fn scalar_value(
    py: Python<'_>,
    name: &str,
    item: &Bound<'_, PyAny>,
) -> PyResult<Option<ScalarValue>> {
    if let Ok(raw) = item.cast::<NativeRawScalar>() {
        return Ok(Some(ScalarValue::Bits(raw.get().bits)));
    }
    if item.is_instance_of::<PyFloat>() {
        return Ok(Some(ScalarValue::Float(item.extract()?)));
    }
    if item.is_instance_of::<PyInt>() || item.is_instance_of::<PyBool>() {
        return match item.extract::<i128>() {
            Ok(v) => Ok(Some(ScalarValue::Int(v))),
            Err(_) => Err(error::invalid_argument(
                py,
                name,
                format!("scalar {} does not fit 64 bits", item.repr()?),
            )),
        };
    }
    Ok(None)
}

/// `simpler.scalar_to_uint64`: the 64 bits `value` (an `int`, a `float` or a `RawScalar`)
/// travels as for the dtype with wire value `dtype` (`None`: any 64-bit integer, floats as
/// f32). Raises `ArgumentTypeError` for a float with an integer dtype and
/// `InvalidArgumentError` for a value out of the dtype's range.
#[pyfunction]
#[pyo3(signature = (value, dtype=None))]
pub fn encode_scalar(
    py: Python<'_>,
    value: &Bound<'_, PyAny>,
    dtype: Option<u32>,
) -> PyResult<u64> {
    let dtype = dtype.map(|d| self::dtype(py, d)).transpose()?;
    let Some(v) = scalar_value(py, "value", value)? else {
        return Err(error::argument_type(
            py,
            format!(
                "a scalar must be an int, a float or a RawScalar, got {}",
                value.get_type().name()?
            ),
        ));
    };
    v.encode(dtype).map_err(|e| error::scalar_error(py, e))
}

/// `simpler.uint64_to_scalar`: the value the 64 bits `bits` carry for the dtype with wire
/// value `dtype`, the inverse of [`encode_scalar`] ([`ScalarValue::decode`]): an `int` for an
/// integer dtype (sign-extended from its width when signed), a `float` for `f32`, `f16`,
/// `bf16`. Raises `ArgumentTypeError` for an unknown dtype.
#[pyfunction]
pub fn decode_scalar(py: Python<'_>, bits: u64, dtype: u32) -> PyResult<Py<PyAny>> {
    let dtype = self::dtype(py, dtype)?;
    Ok(match ScalarValue::decode(bits, dtype) {
        ScalarValue::Int(v) => v.into_pyobject(py)?.into_any().unbind(),
        ScalarValue::Float(f) => f.into_pyobject(py)?.into_any().unbind(),
        ScalarValue::Bits(b) => b.into_pyobject(py)?.into_any().unbind(),
    })
}

/// One item after conversion, before the host's check.
enum Item {
    Host(ArrayMemory, DataType),
    Device(DevicePtr),
    Scalar,
}

/// Converts Python's items for a run of `callable` (its name) with signature `sig` into the
/// run's owned arguments, after the host's check (see the module docs).
pub(crate) fn owned_args(
    py: Python<'_>,
    callable: &str,
    sig: &Signature,
    args: &Bound<'_, PyAny>,
) -> PyResult<Vec<OwnedArg>> {
    owned_args_refused_by(py, callable, sig, args, error::arg_error)
}

/// [`owned_args`] for a replay of a recording of `callable`: a signature refusal is the
/// replay's `ReplayMismatchError` naming the argument ([`ArgError::into_replay_mismatch`]),
/// as the host's own replay checks raise.
pub(crate) fn replay_args(
    py: Python<'_>,
    callable: &str,
    sig: &Signature,
    args: &Bound<'_, PyAny>,
) -> PyResult<Vec<OwnedArg>> {
    owned_args_refused_by(py, callable, sig, args, |py, e| {
        error::host_error(py, e.into_replay_mismatch())
    })
}

/// [`owned_args`] with `refuse` turning the signature's refusal into the Python error.
fn owned_args_refused_by(
    py: Python<'_>,
    callable: &str,
    sig: &Signature,
    args: &Bound<'_, PyAny>,
    refuse: impl FnOnce(Python<'_>, ArgError) -> PyErr,
) -> PyResult<Vec<OwnedArg>> {
    if !(args.is_instance_of::<PyList>() || args.is_instance_of::<PyTuple>()) {
        return Err(error::argument_type(
            py,
            format!("run arguments are a list, got {}", args.get_type().name()?),
        ));
    }
    let list: Vec<Bound<'_, PyAny>> = args.extract()?;
    let mut items = Vec::with_capacity(list.len());
    let mut offers = Vec::with_capacity(list.len());
    for (i, obj) in list.iter().enumerate() {
        let name = sig
            .args
            .get(i)
            .map_or_else(|| format!("#{i}"), |a| a.name.clone());
        if let Ok(t) = obj.cast::<NativeHostTensor>() {
            let t = t.get();
            let memory = ArrayMemory::borrow(t.array.bind(py), &name)?;
            let range = memory.range();
            offers.push(ArgOffer::Host(HostMemory {
                addr: range.start,
                len: range.len(),
                writable: !memory.readonly,
                shape: memory.shape.clone(),
                dtype: t.dtype,
            }));
            items.push(Item::Host(memory, t.dtype));
        } else if let Ok(t) = obj.cast::<NativeDeviceTensor>() {
            let t = t.get();
            offers.push(ArgOffer::Device {
                shape: t.shape.clone(),
                dtype: t.dtype,
            });
            items.push(Item::Device(DevicePtr::from_raw(t.address)));
        } else if let Some(v) = scalar_value(py, &name, obj)? {
            offers.push(ArgOffer::Scalar(v));
            items.push(Item::Scalar);
        } else {
            return Err(error::argument_type(
                py,
                format!(
                    "argument `{name}`: expected a HostTensor, DeviceTensor, RawScalar, int or \
                     float, got {}",
                    obj.get_type().name()?
                ),
            ));
        }
    }
    let passing = sig
        .check_offers(callable, &offers)
        .map_err(|e| refuse(py, e))?;
    Ok(items
        .into_iter()
        .zip(offers)
        .zip(passing)
        .map(|((item, offer), passing)| match (item, offer, passing) {
            (Item::Host(memory, dtype), _, Passing::LendReadOnly) => OwnedArg::Input {
                shape: memory.shape.clone(),
                buffer: Box::new(memory),
                dtype,
            },
            (Item::Host(memory, dtype), _, Passing::LendWritable) => OwnedArg::Tensor {
                shape: memory.shape.clone(),
                buffer: Box::new(
                    memory
                        .into_writable()
                        .expect("check_offers lends only writable memory writable"),
                ),
                dtype,
            },
            (Item::Device(ptr), ArgOffer::Device { shape, dtype }, _) => {
                OwnedArg::Device { ptr, shape, dtype }
            }
            (_, _, Passing::Scalar(bits)) => OwnedArg::Scalar(bits),
            _ => unreachable!("check_offers answers each offer with its own kind of passing"),
        })
        .collect())
}
