//! The child side of a level-3 worker's child processes, for `python -m simpler._child`
//! (`python/simpler/_child.py`): `serve_chip_child` (a chip child's whole life) and
//! `SubChild` (a sub worker's requests, for the Python loop that runs the functions).
//!
//! [`NativeSubChild::next`] blocks detached from the interpreter and answers a
//! [`NativeSubRequest`]; a run's tensors arrive as [`NativeMappedTensor`]s — the parent's
//! shared memory mapped into this process, described by `__array_interface__` so numpy
//! views it in place with the task's dtype, shape and strides (read-only for an `INPUT`
//! tensor) — and its scalars as ints. The mappings belong to the engine's `SubChild`, which
//! keeps each region mapped at least until the reply to the request that named it. A run
//! whose memory cannot be mapped is answered with the error here and never reaches Python.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use simpler_abi::DataType;
use simpler_worker::process::{SubChild, SubRequest, WireArg, WireTensor};
use simpler_worker::{Tag, WorkerError};

use crate::error;
use crate::sync::lock;

/// Serves this process as a chip child until the parent says stop or dies; returns the
/// exit status (0 after a clean stop).
#[pyfunction]
pub fn serve_chip_child(py: Python<'_>) -> u8 {
    py.detach(simpler_worker::process::serve_chip_child_status)
}

/// numpy's type string of `dtype` (bfloat16 as its raw 16-bit words: numpy has no bfloat16;
/// the Python side views it through `ml_dtypes` when installed).
fn typestr(dtype: DataType) -> &'static str {
    let little = cfg!(target_endian = "little");
    match (dtype, little) {
        (DataType::Int8, _) => "|i1",
        (DataType::Uint8, _) => "|u1",
        (DataType::Float32, true) => "<f4",
        (DataType::Float16, true) => "<f2",
        (DataType::Int32, true) => "<i4",
        (DataType::Int16, true) => "<i2",
        (DataType::Bfloat16 | DataType::Uint16, true) => "<u2",
        (DataType::Int64, true) => "<i8",
        (DataType::Uint64, true) => "<u8",
        (DataType::Uint32, true) => "<u4",
        (DataType::Float64, true) => "<f8",
        (DataType::Float32, false) => ">f4",
        (DataType::Float16, false) => ">f2",
        (DataType::Int32, false) => ">i4",
        (DataType::Int16, false) => ">i2",
        (DataType::Bfloat16 | DataType::Uint16, false) => ">u2",
        (DataType::Int64, false) => ">i8",
        (DataType::Uint64, false) => ">u8",
        (DataType::Uint32, false) => ">u4",
        (DataType::Float64, false) => ">f8",
    }
}

fn tag_wire(tag: Tag) -> u32 {
    match tag {
        Tag::Input => 0,
        Tag::Output => 1,
        Tag::InOut => 2,
        Tag::OutputExisting => 3,
        Tag::NoDep => 4,
    }
}

/// One tensor of a sub task, mapped into this process.
#[pyclass(module = "simpler._native", name = "MappedTensor", frozen)]
pub struct NativeMappedTensor {
    address: usize,
    nbytes: usize,
    shape: Vec<u64>,
    strides: Vec<u64>,
    dtype: DataType,
    tag: Tag,
}

impl NativeMappedTensor {
    /// A tensor of `nbytes` from its first element at `address` (in this process).
    pub(crate) fn new(
        address: usize,
        nbytes: usize,
        shape: Vec<u64>,
        strides: Vec<u64>,
        dtype: DataType,
        tag: Tag,
    ) -> NativeMappedTensor {
        NativeMappedTensor {
            address,
            nbytes,
            shape,
            strides,
            dtype,
            tag,
        }
    }
}

#[pymethods]
impl NativeMappedTensor {
    /// The first element's address in this process.
    #[getter]
    fn address(&self) -> usize {
        self.address
    }

    /// Bytes from the first element to one past the furthest.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// Shape, in elements.
    #[getter]
    fn shape(&self) -> Vec<u64> {
        self.shape.clone()
    }

    /// Strides, in elements.
    #[getter]
    fn strides(&self) -> Vec<u64> {
        self.strides.clone()
    }

    /// The dtype's wire value.
    #[getter]
    fn dtype(&self) -> u32 {
        self.dtype as u32
    }

    /// The tag's `TensorArgType` wire value.
    #[getter]
    fn tag(&self) -> u32 {
        tag_wire(self.tag)
    }

    /// False for an `INPUT` tensor (the task only reads it).
    #[getter]
    fn writable(&self) -> bool {
        self.tag != Tag::Input
    }

    /// numpy's array interface (version 3) of the tensor.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let size = self.dtype.size_bytes() as u64;
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item(
            "strides",
            PyTuple::new(py, self.strides.iter().map(|s| s * size))?,
        )?;
        d.set_item("typestr", typestr(self.dtype))?;
        d.set_item("data", (self.address, !self.writable()))?;
        Ok(d)
    }
}

/// A request to the sub worker loop.
#[pyclass(module = "simpler._native", name = "SubRequest", frozen)]
pub struct NativeSubRequest {
    kind: &'static str,
    key: u32,
    name: Option<String>,
    payload: Option<Vec<u8>>,
    args: Vec<Py<PyAny>>,
}

#[pymethods]
impl NativeSubRequest {
    /// `"register"`, `"unregister"`, `"run"` or `"shutdown"` (which takes no reply).
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    /// The callable's key (0 for a shutdown).
    #[getter]
    fn key(&self) -> u32 {
        self.key
    }

    /// A registration's qualified name.
    #[getter]
    fn name(&self) -> Option<String> {
        self.name.clone()
    }

    /// A registration's serialized function.
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.payload.as_deref().map(|p| PyBytes::new(py, p))
    }

    /// A run's arguments: `MappedTensor`s and ints (64 raw bits), in order.
    #[getter]
    fn args<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.args.iter().map(|a| a.clone_ref(py)))
    }
}

/// `simpler._native.SubChild`: this process's connection to its parent as a sub worker.
#[pyclass(module = "simpler._native", name = "SubChild", frozen)]
pub struct NativeSubChild {
    inner: Mutex<SubChild>,
}

/// The tensors and scalars of a run, mapped; the error text when a tensor cannot be.
fn mapped_args(
    py: Python<'_>,
    child: &mut SubChild,
    args: Vec<WireArg>,
) -> PyResult<Result<Vec<Py<PyAny>>, WorkerError>> {
    let mut out = Vec::with_capacity(args.len());
    for arg in args {
        match arg {
            WireArg::Scalar(bits) => out.push(bits.into_pyobject(py)?.into_any().unbind()),
            WireArg::Tensor(t) => {
                let WireTensor {
                    shape,
                    strides,
                    dtype,
                    tag,
                    ..
                } = &t;
                let (ptr, nbytes) = match child.tensor_memory(&t) {
                    Ok(m) => m,
                    Err(e) => return Ok(Err(e)),
                };
                let tensor = NativeMappedTensor {
                    address: ptr as usize,
                    nbytes,
                    shape: shape.clone(),
                    strides: strides.clone(),
                    dtype: *dtype,
                    tag: *tag,
                };
                out.push(Py::new(py, tensor)?.into_any());
            }
        }
    }
    Ok(Ok(out))
}

#[pymethods]
impl NativeSubChild {
    /// Connects to the parent that started this process as a sub worker (from the
    /// environment it set) and reports ready.
    #[staticmethod]
    fn connect(py: Python<'_>) -> PyResult<NativeSubChild> {
        let child = py
            .detach(SubChild::connect)
            .map_err(|e| error::worker_error(py, e))?;
        Ok(NativeSubChild {
            inner: Mutex::new(child),
        })
    }

    /// Blocks (detached) until the parent's next request.
    fn next(&self, py: Python<'_>) -> PyResult<NativeSubRequest> {
        loop {
            let inner = &self.inner;
            let request = py
                .detach(|| lock(inner).next())
                .map_err(|e| error::worker_error(py, e))?;
            let (kind, key) = match &request {
                SubRequest::Register { key, .. } => ("register", *key),
                SubRequest::Unregister { key } => ("unregister", *key),
                SubRequest::Run { key, .. } => ("run", *key),
                SubRequest::Shutdown => ("shutdown", 0),
            };
            let mut out = NativeSubRequest {
                kind,
                key,
                name: None,
                payload: None,
                args: Vec::new(),
            };
            match request {
                SubRequest::Register { name, payload, .. } => {
                    out.name = Some(name);
                    out.payload = Some(payload);
                }
                SubRequest::Run { args, .. } => {
                    // Mapping only maps memory: it never waits, so it runs attached.
                    let mapped = mapped_args(py, &mut lock(inner), args)?;
                    match mapped {
                        Ok(args) => out.args = args,
                        Err(e) => {
                            // The task fails here; Python never sees it. The reply is a write
                            // to the parent, which may wait: detached.
                            let e = e.to_string();
                            py.detach(|| lock(inner).reply(Err(e)))
                                .map_err(|e| error::worker_error(py, e))?;
                            continue;
                        }
                    }
                }
                SubRequest::Unregister { .. } | SubRequest::Shutdown => {}
            }
            return Ok(out);
        }
    }

    /// Answers the last request: `None` for success, or the error text (a traceback) that
    /// fails it.
    #[pyo3(signature = (error=None))]
    fn reply(&self, py: Python<'_>, error: Option<String>) -> PyResult<()> {
        let inner = &self.inner;
        py.detach(|| lock(inner).reply(error.map_or(Ok(()), Err)))
            .map_err(|e| error::worker_error(py, e))
    }
}
