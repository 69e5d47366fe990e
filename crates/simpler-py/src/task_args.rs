//! A level-3 task's arguments as Python passes them, and their conversion into the engine's
//! [`TaskArgs`].
//!
//! - [`NativeTaskArgs`] (`simpler._native.HostTaskArgs`): the tensors (each a
//!   [`HostTensor`](NativeHostTensor) — a numpy array and its dtype — or a
//!   [`ChildTensor`](NativeChildTensor)), their tags (`TensorArgType` wire values) and the
//!   scalars' 64 raw bits, in the callable's signature order. The Python layer encodes the
//!   scalars (a chip callable's by its signature); this module only converts objects.
//! - [`NativeChildTensor`] (`simpler._native.ChildTensor`): device memory on one chip
//!   (`alloc_child_tensor`), passed to chip tasks in place.
//! - [`worker_id`]: a worker id as Python gives it, with the refusals of
//!   `docs/l3-worker.md` §8 (bool, float, str: `ArgumentTypeError`; negative:
//!   `InvalidArgumentError`); an unknown id is the engine's refusal.
//!
//! Arrays become tensors only at submission ([`NativeTaskArgs::to_task_args`]), against the
//! worker's shared memory ([`crate::host_memory::host_tensor`]).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyString};
use simpler_abi::DataType;
use simpler_worker::{Memory, Tag, TaskArgs, Tensor};

use crate::args::NativeHostTensor;
use crate::error::{self, Raise};
use crate::host_memory::{host_tensor, KnownMemory};

/// The tag of `TensorArgType` wire value `wire`.
fn tag(py: Python<'_>, wire: u32) -> PyResult<Tag> {
    Ok(match wire {
        0 => Tag::Input,
        1 => Tag::Output,
        2 => Tag::InOut,
        3 => Tag::OutputExisting,
        4 => Tag::NoDep,
        _ => {
            return Err(error::argument_type(
                py,
                format!("{wire} is not a TensorArgType wire value (0..=4)"),
            ))
        }
    })
}

/// A worker id given by Python: an int (or an object with `__index__`) >= 0. `what` names it
/// (`worker`, `workers[2]`).
///
/// # Errors
/// `ArgumentTypeError` for a bool, float, str or other non-integer; `InvalidArgumentError`
/// for a negative id, or one too large for any worker (named as given); each with
/// `code_name` `UNKNOWN_WORKER`, the engine's kind for an id that names no worker.
pub(crate) fn worker_id(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    let py = obj.py();
    let type_error = || -> PyResult<PyErr> {
        Ok(Raise::new(
            "ArgumentTypeError",
            format!(
                "{what}: a worker id is an int, got {} {}",
                obj.get_type().name()?,
                obj.repr()?
            ),
        )
        .detail("arg", what)
        .detail("code_name", "UNKNOWN_WORKER")
        .into_err(py))
    };
    // The engine's kind for an id that names no worker, whatever refused it.
    let no_worker = |reason: String| {
        Raise::new(
            "InvalidArgumentError",
            format!("argument `{what}`: {reason}"),
        )
        .detail("arg", what)
        .detail("reason", reason)
        .detail("code_name", "UNKNOWN_WORKER")
        .into_err(py)
    };
    if obj.is_instance_of::<PyBool>()
        || obj.is_instance_of::<PyFloat>()
        || obj.is_instance_of::<PyString>()
    {
        return Err(type_error()?);
    }
    let Ok(id) = obj.extract::<i128>() else {
        return Err(type_error()?);
    };
    if id < 0 {
        return Err(no_worker(format!(
            "worker id {id} is negative; ids count from 0"
        )));
    }
    // An id the engine cannot even count to names no worker: say so with the id given.
    i64::try_from(id)
        .ok()
        .and_then(|id| usize::try_from(id).ok())
        .ok_or_else(|| no_worker(format!("worker id {id} names no worker (ids count from 0)")))
}

/// `simpler._native.ChildTensor`: device memory on one chip of a level-3 worker.
#[pyclass(module = "simpler._native", name = "ChildTensor", frozen)]
pub struct NativeChildTensor {
    pub(crate) tensor: Tensor,
}

impl NativeChildTensor {
    fn allocation(&self) -> Option<simpler_worker::ChildAllocation> {
        match self.tensor.memory() {
            Memory::Child(c) => Some(*c),
            Memory::Host(_) => None,
        }
    }
}

#[pymethods]
impl NativeChildTensor {
    /// The chip's worker id.
    #[getter]
    fn worker(&self) -> usize {
        self.allocation().map_or(0, |c| c.worker)
    }

    /// Shape in elements (C order).
    #[getter]
    fn shape(&self) -> Vec<u64> {
        self.tensor.shape().to_vec()
    }

    /// The dtype's wire value.
    #[getter]
    fn dtype(&self) -> u32 {
        self.tensor.dtype() as u32
    }

    /// Bytes of the elements.
    #[getter]
    fn nbytes(&self) -> u64 {
        self.tensor.nbytes()
    }

    /// The first element's address in the chip's memory.
    #[getter]
    fn address(&self) -> u64 {
        self.allocation()
            .map_or(0, |c| c.ptr.addr() + self.tensor.byte_offset())
    }
}

/// One argument before conversion.
enum Item {
    Host {
        array: Py<PyAny>,
        dtype: DataType,
        tag: Tag,
    },
    Child {
        tensor: Tensor,
        tag: Tag,
    },
    Scalar(u64),
}

/// `simpler._native.HostTaskArgs`: one level-3 task's arguments (see the module docs).
#[pyclass(module = "simpler._native", name = "HostTaskArgs", frozen)]
pub struct NativeTaskArgs {
    items: Vec<Item>,
}

#[pymethods]
impl NativeTaskArgs {
    /// `tensors[i]` (a `HostTensor` or a `ChildTensor`) used as `tags[i]` (a
    /// `TensorArgType` wire value), then `scalars` (64 raw bits each).
    #[new]
    fn new(
        py: Python<'_>,
        tensors: Vec<Bound<'_, PyAny>>,
        tags: Vec<u32>,
        scalars: Vec<u64>,
    ) -> PyResult<NativeTaskArgs> {
        if tensors.len() != tags.len() {
            return Err(error::invalid_argument(
                py,
                "tags",
                format!("{} tags for {} tensors", tags.len(), tensors.len()),
            ));
        }
        let mut items = Vec::with_capacity(tensors.len() + scalars.len());
        for (i, (obj, wire)) in tensors.iter().zip(tags).enumerate() {
            let tag = tag(py, wire)?;
            if let Ok(t) = obj.cast::<NativeHostTensor>() {
                let t = t.get();
                items.push(Item::Host {
                    array: t.array.clone_ref(py),
                    dtype: t.dtype,
                    tag,
                });
            } else if let Ok(t) = obj.cast::<NativeChildTensor>() {
                items.push(Item::Child {
                    tensor: t.get().tensor.clone(),
                    tag,
                });
            } else {
                return Err(error::argument_type(
                    py,
                    format!(
                        "tensors[{i}]: expected a HostTensor or a ChildTensor, got {}",
                        obj.get_type().name()?
                    ),
                ));
            }
        }
        items.extend(scalars.into_iter().map(Item::Scalar));
        Ok(NativeTaskArgs { items })
    }

    fn __len__(&self) -> usize {
        self.items.len()
    }
}

impl NativeTaskArgs {
    /// The engine's arguments; `what` names the task's arguments in errors (`args`,
    /// `args_list[1]`), each one as `what[i]`.
    pub(crate) fn to_task_args(
        &self,
        py: Python<'_>,
        known: &KnownMemory,
        what: &str,
    ) -> PyResult<TaskArgs> {
        let mut out = TaskArgs::new();
        for (i, item) in self.items.iter().enumerate() {
            match item {
                Item::Host { array, dtype, tag } => {
                    let name = format!("{what}[{i}]");
                    let t = host_tensor(array.bind(py), *dtype, *tag, known, &name)?;
                    out.add_tensor(t, *tag);
                }
                Item::Child { tensor, tag } => {
                    out.add_tensor(tensor.clone(), *tag);
                }
                Item::Scalar(bits) => {
                    out.add_scalar(*bits);
                }
            }
        }
        Ok(out)
    }
}
