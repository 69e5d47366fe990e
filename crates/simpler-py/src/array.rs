//! Host memory of numpy arrays, borrowed without copying.
//!
//! The Python layer turns every tensor-like object (buffer protocol, `__dlpack__`, numpy)
//! into a `numpy.ndarray` view of the same memory; this module reads such an array's
//! `__array_interface__` (data address, read-only flag, shape, strides, type string) and
//! checks what only a view of Python memory can tell: a numpy array, C-contiguous, in native
//! byte order, its data aligned to its element size. Everything the signature decides (dtype, shape, emptiness, writability,
//! aliasing) is the host's check (`Signature::check_offers`). Only objects whose type is
//! `numpy.ndarray` (or a subclass) are accepted, so the interface is numpy's own description
//! of memory it owns or keeps alive.
//!
//! An [`ArrayMemory`] holds a strong reference to its array, which keeps the memory mapped
//! and stops numpy from resizing it (resizing needs no other references) for as long as the
//! borrow lives. What it cannot stop is other Python code writing the array concurrently
//! while a run executes with the interpreter detached; as with any extension that releases
//! the GIL over a buffer, that is the caller's responsibility.
//!
//! A run borrows an array as the host's input ([`HostInput`], any array: the lane only reads
//! it) or as its output buffer ([`HostBuffer`], a [`WritableArray`] only: what numpy allows
//! writes to). The lane never holds a slice of either between two calls, and orders runs
//! whose arrays overlap, one of them writing (`docs/lane.md`), so no read of an array
//! overlaps a copy back into it.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use simpler_host::{HostBuffer, HostInput};

use crate::error;

/// `numpy.ndarray`, imported on first use.
static NDARRAY: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// numpy's `__array_interface__` of `obj`, which must be a `numpy.ndarray`; `arg` names it.
///
/// # Errors
/// `ArgumentTypeError` naming `arg` for any other object.
pub(crate) fn array_interface<'py>(
    obj: &Bound<'py, PyAny>,
    arg: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let py = obj.py();
    let ndarray = NDARRAY.get_or_try_init(py, || -> PyResult<_> {
        Ok(py
            .import("numpy")?
            .getattr("ndarray")?
            .cast_into::<PyType>()?
            .unbind())
    })?;
    if !obj.is_instance(ndarray.bind(py))? {
        return Err(error::argument_type(
            py,
            format!(
                "argument `{arg}`: expected a numpy.ndarray, got {}",
                obj.get_type().name()?
            ),
        ));
    }
    Ok(obj.getattr("__array_interface__")?.cast_into::<PyDict>()?)
}

/// The contiguous memory of one numpy array.
pub(crate) struct ArrayMemory {
    /// Keeps the array (and so its memory) alive; never used to reach the data.
    _owner: Py<PyAny>,
    ptr: *mut u8,
    len: usize,
    /// Shape in elements.
    pub(crate) shape: Vec<u64>,
    /// True when numpy says the memory must not be written.
    pub(crate) readonly: bool,
}

// SAFETY: `ptr` addresses memory owned by (or kept alive through) the array that `_owner`
// references; that memory is not tied to the thread that created the borrow, and `Py<PyAny>`
// is itself `Send`. The bytes are read through `&self` and written only through
// `WritableArray::bytes_mut` (`&mut self`).
unsafe impl Send for ArrayMemory {}

impl ArrayMemory {
    /// Borrows the memory of `obj`, a C-contiguous `numpy.ndarray` (possibly empty). `arg`
    /// names it in errors (`argument `arg`: ...`).
    ///
    /// # Errors
    /// `ArgumentTypeError` when `obj` is not an ndarray; `InvalidArgumentError` when it is
    /// not C-contiguous, not in native byte order, not aligned to its element size, or too
    /// large to address.
    pub(crate) fn borrow(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<ArrayMemory> {
        let py = obj.py();
        let iface = array_interface(obj, arg)?;
        let item = |key: &str| -> PyResult<Bound<'_, PyAny>> {
            iface.get_item(key)?.ok_or_else(|| {
                error::invalid_argument(py, arg, format!("__array_interface__ has no `{key}`"))
            })
        };
        let (addr, readonly): (usize, bool) = item("data")?.extract()?;
        let shape: Vec<u64> = item("shape")?.extract()?;
        let typestr: String = item("typestr")?.extract()?;
        if !item("strides")?.is_none() {
            return Err(error::invalid_argument(
                py,
                arg,
                "the array is not C-contiguous; pass numpy.ascontiguousarray(...) of it",
            ));
        }
        if typestr.starts_with('>') && cfg!(target_endian = "little")
            || typestr.starts_with('<') && cfg!(target_endian = "big")
        {
            return Err(error::invalid_argument(
                py,
                arg,
                format!("the array's byte order is not native (`{typestr}`)"),
            ));
        }
        let itemsize: u64 = obj.getattr("itemsize")?.extract()?;
        let len = shape
            .iter()
            .try_fold(itemsize, |acc, &d| acc.checked_mul(d))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| error::invalid_argument(py, arg, "the array is too large"))?;
        if len > 0 && addr == 0 {
            return Err(error::invalid_argument(
                py,
                arg,
                "the array's data pointer is null",
            ));
        }
        // Kernels read a tensor's elements in place as their type: refused, never staged.
        if len > 0 && itemsize > 0 && addr % itemsize as usize != 0 {
            return Err(error::invalid_argument(
                py,
                arg,
                format!(
                    "the array's data at {addr:#x} is not aligned to its {itemsize}-byte \
                     elements (e.g. numpy.frombuffer with an offset); pass a copy of it \
                     (arr.copy())"
                ),
            ));
        }
        // An empty array may have any address (even null); its slices use a dangling one.
        let ptr = if len == 0 {
            std::ptr::NonNull::<u8>::dangling().as_ptr()
        } else {
            addr as *mut u8
        };
        Ok(ArrayMemory {
            _owner: obj.clone().unbind(),
            ptr,
            len,
            shape,
            readonly,
        })
    }

    /// The byte range the array covers, for aliasing checks.
    pub(crate) fn range(&self) -> std::ops::Range<usize> {
        let start = self.ptr as usize;
        start..start + self.len
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bytes, for reading.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `borrow` checked that `ptr..ptr + len` is the whole contiguous data of a
        // live ndarray, which `_owner` keeps alive (and unresizable) while `self` lives; an
        // empty array has a dangling, non-null `ptr` and `len` 0.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The memory for writing; `None` when numpy marked the array read-only.
    pub(crate) fn into_writable(self) -> Option<WritableArray> {
        (!self.readonly).then_some(WritableArray(self))
    }
}

/// A run's input: the lane reads the array in place when it stages the run.
impl HostInput for ArrayMemory {
    fn bytes(&self) -> &[u8] {
        ArrayMemory::bytes(self)
    }
}

/// The memory of a numpy array that numpy allows writes to.
pub(crate) struct WritableArray(ArrayMemory);

impl WritableArray {
    /// The bytes, for reading.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.0.bytes()
    }

    /// The bytes, for writing.
    ///
    /// No other view of an overlapping range may be in use meanwhile (see
    /// [`ArrayMemory::range`]): the argument check refuses a written array that overlaps
    /// another writable one, and the lane takes this view only to copy an output back, in
    /// order with every run that reads or writes the same bytes.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        let (ptr, len) = (self.0.ptr, self.0.len);
        // SAFETY: as in `ArrayMemory::bytes`; numpy reports the memory writable
        // (`into_writable`), and `&mut self` makes this the only view taken through this
        // borrow.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }
}

/// A run's `out`/`inout` buffer: staged from in place, and its output copied back into it.
impl HostBuffer for WritableArray {
    fn bytes(&self) -> &[u8] {
        WritableArray::bytes(self)
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        WritableArray::bytes_mut(self)
    }
}
