//! Host memory of level-3 tasks, seen from Python.
//!
//! - [`ArrayHostMemory`]: a numpy array lent to a task in place, as a [`HostMemory`]: the task
//!   keeps the array alive, and the memory is read-only when numpy says the array is.
//!   Private to this process (a child process cannot see it).
//! - [`NativeSharedMemory`] (`simpler._native.SharedMemory`): shared memory — a
//!   `create_buffer` region, or one `orch.alloc` tensor of the heap ring — which numpy views
//!   through `__array_interface__` without copying; every view keeps the object, and so the
//!   memory, alive.
//! - [`KnownMemory`]: the live shared memory objects of one worker, by address. A numpy view
//!   of one of them (the whole, a slice, a reshape, a strided view) passed as a task argument
//!   becomes a tensor over that shared memory — which child processes map — instead of a
//!   private array.
//!
//! [`host_tensor`] turns a numpy array into a task tensor by these rules ([`private_tensor`]
//! always lends it as private memory: a level-2 run in a child process copies it through the
//! mailbox). This module reads
//! what numpy says of an array (`__array_interface__`: address, shape, strides, read-only
//! flag); what a task may do with the tensor is the engine's check (`simpler-worker`).

use std::sync::{Arc, Mutex, Weak};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use simpler_abi::DataType;
use simpler_worker::{HostMemory, Memory, Tag, Tensor, WorkerError};

use crate::error;
use crate::sync::lock;

/// The bytes of a numpy array, lent to a level-3 task in place.
pub(crate) struct ArrayHostMemory {
    /// Keeps the array (and so its memory) alive; never used to reach the data.
    _owner: Py<PyAny>,
    ptr: *mut u8,
    len: usize,
    read_only: bool,
}

// SAFETY: the pointer addresses memory owned by (or kept alive through) the array `_owner`
// references, which is not tied to the thread that made the borrow; `Py<PyAny>` is itself
// `Send + Sync` (dropping it without the interpreter defers the reference count).
unsafe impl Send for ArrayHostMemory {}
// SAFETY: as above; `&ArrayHostMemory` hands out nothing but the address.
unsafe impl Sync for ArrayHostMemory {}

// SAFETY: `ptr..ptr + len` is the data span of a live ndarray that `_owner` keeps alive, and
// numpy does not move or resize an array others reference; `read_only` is numpy's own flag,
// so no task writes memory numpy marked read-only.
unsafe impl HostMemory for ArrayHostMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn read_only(&self) -> bool {
        self.read_only
    }
}

/// A piece of shared host memory Python holds: `len` bytes at address `start` of `memory`;
/// for an `orch.alloc` tensor, the engine's tensor too (what `orch.free` releases).
pub(crate) struct HostView {
    memory: Arc<dyn HostMemory>,
    start: usize,
    len: usize,
    alloc: Option<Tensor>,
}

impl HostView {
    /// The whole of `memory` (a `create_buffer` region).
    pub(crate) fn whole(memory: Arc<dyn HostMemory>) -> HostView {
        HostView {
            start: memory.as_ptr() as usize,
            len: memory.len(),
            memory,
            alloc: None,
        }
    }

    /// The bytes of the host tensor `tensor` (an `orch.alloc` tensor); `None` for a tensor of
    /// chip memory.
    pub(crate) fn of_alloc(tensor: Tensor) -> Option<HostView> {
        let Memory::Host(memory) = tensor.memory() else {
            return None;
        };
        Some(HostView {
            memory: memory.clone(),
            start: memory.as_ptr() as usize + tensor.byte_offset() as usize,
            len: tensor.nbytes() as usize,
            alloc: Some(tensor),
        })
    }
}

/// `simpler._native.SharedMemory`: shared host memory as numpy sees it (see the module docs).
#[pyclass(module = "simpler._native", name = "SharedMemory", frozen)]
pub struct NativeSharedMemory {
    view: Arc<HostView>,
}

impl NativeSharedMemory {
    /// Wraps `view` and records it in `known`, so views of it come back as shared tensors.
    pub(crate) fn new(view: HostView, known: &KnownMemory) -> NativeSharedMemory {
        let view = Arc::new(view);
        known.add(&view);
        NativeSharedMemory { view }
    }
}

#[pymethods]
impl NativeSharedMemory {
    /// Length in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.view.len
    }

    /// The first byte's address in this process.
    #[getter]
    fn address(&self) -> usize {
        self.view.start
    }

    /// The id of the shared region holding the bytes (the same in every process that maps
    /// it); `None` for memory private to this process.
    #[getter]
    fn region(&self) -> Option<u64> {
        self.view.memory.shared().map(|s| s.region)
    }

    /// Offset of the first byte inside its shared region; `None` as for `region`.
    #[getter]
    fn offset(&self) -> Option<u64> {
        let base = self.view.memory.as_ptr() as usize;
        self.view
            .memory
            .shared()
            .map(|s| s.offset + (self.view.start - base) as u64)
    }

    /// numpy's array interface (version 3): the bytes as a writable, flat `uint8` array.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, [self.view.len])?)?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.view.start, self.view.memory.read_only()))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedMemory(nbytes={}, region={:?})",
            self.view.len,
            self.view.memory.shared().map(|s| s.region)
        )
    }
}

/// The live shared memory objects of one worker (see the module docs).
#[derive(Default)]
pub(crate) struct KnownMemory {
    views: Mutex<Vec<Weak<HostView>>>,
}

impl KnownMemory {
    fn add(&self, view: &Arc<HostView>) {
        let mut views = lock(&self.views);
        views.retain(|w| w.strong_count() > 0);
        views.push(Arc::downgrade(view));
    }

    /// The newest live view holding `span` bytes from address `addr`.
    fn find(&self, addr: usize, span: usize) -> Option<Arc<HostView>> {
        let views = lock(&self.views);
        views.iter().rev().filter_map(Weak::upgrade).find(|v| {
            addr >= v.start
                && addr
                    .checked_add(span)
                    .is_some_and(|end| end <= v.start + v.len)
        })
    }

    /// The `orch.alloc` tensor whose bytes are exactly `len` from `addr`, newest first.
    pub(crate) fn alloc_at(&self, addr: usize, len: usize) -> Option<Tensor> {
        let views = lock(&self.views);
        views
            .iter()
            .rev()
            .filter_map(Weak::upgrade)
            .find(|v| v.start == addr && v.len == len && v.alloc.is_some())
            .and_then(|v| v.alloc.clone())
    }
}

/// What numpy says of one array.
pub(crate) struct ArrayView {
    /// The first element's address.
    pub(crate) addr: usize,
    /// Shape, in elements.
    pub(crate) shape: Vec<u64>,
    /// Strides, in elements.
    pub(crate) strides: Vec<u64>,
    /// numpy's read-only flag.
    pub(crate) readonly: bool,
    /// Bytes from the first element to one past the last.
    pub(crate) span: usize,
}

/// Reads `obj`, a numpy array of `itemsize`-byte elements; `arg` names it in errors.
///
/// # Errors
/// `ArgumentTypeError` for an object that is not an ndarray; `InvalidArgumentError` for an
/// array with no elements or dimensions, another element size, a foreign byte order, or
/// negative or unaligned strides.
pub(crate) fn array_view(
    obj: &Bound<'_, PyAny>,
    itemsize: usize,
    arg: &str,
) -> PyResult<ArrayView> {
    let py = obj.py();
    let iface = crate::array::array_interface(obj, arg)?;
    let bad = |reason: String| error::invalid_argument(py, arg, reason);
    let item = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        iface
            .get_item(key)?
            .ok_or_else(|| bad(format!("__array_interface__ has no `{key}`")))
    };
    let (addr, readonly): (usize, bool) = item("data")?.extract()?;
    let shape: Vec<u64> = item("shape")?.extract()?;
    let typestr: String = item("typestr")?.extract()?;
    let strides: Option<Vec<i64>> = item("strides")?.extract()?;
    let have: usize = obj.getattr("itemsize")?.extract()?;
    if have != itemsize {
        return Err(bad(format!(
            "the array's elements are {have} bytes; its dtype says {itemsize}"
        )));
    }
    if typestr.starts_with('>') && cfg!(target_endian = "little")
        || typestr.starts_with('<') && cfg!(target_endian = "big")
    {
        return Err(bad(format!(
            "the array's byte order is not native (`{typestr}`)"
        )));
    }
    if shape.is_empty() {
        return Err(bad(
            "a 0-d array is not a tensor; pass a 1-element array".into()
        ));
    }
    if shape.contains(&0) || addr == 0 {
        return Err(bad(format!("the array of shape {shape:?} has no elements")));
    }
    let strides = match strides {
        None => simpler_worker::c_strides(&shape),
        Some(bytes) => bytes
            .iter()
            .map(|&s| {
                u64::try_from(s)
                    .ok()
                    .filter(|s| s % itemsize as u64 == 0)
                    .map(|s| s / itemsize as u64)
            })
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| {
                bad(format!(
                    "the array's strides {bytes:?} (bytes) are negative or not a multiple of \
                     its {itemsize}-byte elements; pass numpy.ascontiguousarray(...) of it"
                ))
            })?,
    };
    let last = shape
        .iter()
        .zip(&strides)
        .try_fold(0u64, |acc, (d, s)| {
            acc.checked_add((d - 1).checked_mul(*s)?)
        })
        .and_then(|last| last.checked_add(1)?.checked_mul(itemsize as u64))
        .and_then(|span| usize::try_from(span).ok())
        .ok_or_else(|| bad("the array is too large".into()))?;
    Ok(ArrayView {
        addr,
        shape,
        strides,
        readonly,
        span: last,
    })
}

/// A task tensor over the numpy array `obj` of `dtype`, used as `tag`; `arg` names it in
/// errors. A view of shared memory `known` holds is a tensor over that memory; any other
/// array is lent in place as private memory (see the module docs).
///
/// # Errors
/// As [`array_view`], and `InvalidArgumentError` for a read-only array tagged as written.
pub(crate) fn host_tensor(
    obj: &Bound<'_, PyAny>,
    dtype: DataType,
    tag: Tag,
    known: &KnownMemory,
    arg: &str,
) -> PyResult<Tensor> {
    let py = obj.py();
    let v = array_view(obj, dtype.size_bytes(), arg)?;
    if v.readonly && tag.writes() {
        return Err(error::invalid_argument(
            py,
            arg,
            format!("tagged {} but the array is read-only", tag.name()),
        ));
    }
    let (memory, offset): (Arc<dyn HostMemory>, usize) = match known.find(v.addr, v.span) {
        Some(view) => {
            let base = view.memory.as_ptr() as usize;
            (view.memory.clone(), v.addr - base)
        }
        None => (lent(obj, &v), 0),
    };
    view_tensor(py, memory, offset, &v, dtype, arg)
}

/// The array `obj` described by `v`, lent in place as private memory.
fn lent(obj: &Bound<'_, PyAny>, v: &ArrayView) -> Arc<dyn HostMemory> {
    Arc::new(ArrayHostMemory {
        _owner: obj.clone().unbind(),
        ptr: v.addr as *mut u8,
        len: v.span,
        read_only: v.readonly,
    })
}

fn view_tensor(
    py: Python<'_>,
    memory: Arc<dyn HostMemory>,
    offset: usize,
    v: &ArrayView,
    dtype: DataType,
    arg: &str,
) -> PyResult<Tensor> {
    Tensor::view(
        Memory::Host(memory),
        offset as u64,
        &v.shape,
        &v.strides,
        dtype,
    )
    .map_err(|e| match e {
        WorkerError::InvalidArgument { reason, .. } => error::invalid_argument(py, arg, reason),
        other => error::worker_error(py, other),
    })
}

/// A tensor over the numpy array `obj` of `dtype`, lent in place as private memory (for a
/// level-2 run in a child process, which copies it through the mailbox); read-only when
/// numpy says the array is. `arg` names it in errors.
///
/// # Errors
/// As [`array_view`].
pub(crate) fn private_tensor(
    obj: &Bound<'_, PyAny>,
    dtype: DataType,
    arg: &str,
) -> PyResult<Tensor> {
    let v = array_view(obj, dtype.size_bytes(), arg)?;
    view_tensor(obj.py(), lent(obj, &v), 0, &v, dtype, arg)
}
