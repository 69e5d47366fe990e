//! What a level-3 task is given: [`Tensor`] views over host or child memory, each with a
//! [`Tag`] that drives dependencies, and scalars, in one [`TaskArgs`] (`docs/l3-worker.md`
//! §3).
//!
//! A tensor is a view — byte offset, shape, strides (in elements) and dtype — over one
//! [`Memory`]: host memory (a [`HostMemory`] object, shared with child processes or
//! private to this process) or a child allocation (persistent device memory on one chip,
//! [`ChildAllocation`]). This module describes and checks views; it never reads or writes
//! the bytes.

use std::sync::Arc;

use simpler_abi::DataType;
use simpler_device::DevicePtr;

use crate::memory::HostMemory;
use crate::WorkerError;

/// How a task uses a tensor, and so which dependencies it has (`docs/l3-worker.md` §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Tag {
    /// Read: the task runs after the live producers of any overlapping footprint.
    Input,
    /// Written (the memory exists already; nothing is allocated): the task runs after the
    /// live producers and consumers of any overlapping footprint, and becomes its producer.
    Output,
    /// As [`Output`](Tag::Output) (upstream's spelling for memory the caller provides).
    OutputExisting,
    /// Read and written: both rules.
    InOut,
    /// Neither looked up nor recorded: the caller orders this access itself.
    NoDep,
}

impl Tag {
    /// True when the task writes the tensor.
    pub fn writes(self) -> bool {
        matches!(self, Tag::Output | Tag::OutputExisting | Tag::InOut)
    }

    /// True when the task reads the tensor.
    pub fn reads(self) -> bool {
        matches!(self, Tag::Input | Tag::InOut)
    }

    /// The upstream name (`"INPUT"`, `"OUTPUT_EXISTING"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Tag::Input => "INPUT",
            Tag::Output => "OUTPUT",
            Tag::OutputExisting => "OUTPUT_EXISTING",
            Tag::InOut => "INOUT",
            Tag::NoDep => "NO_DEP",
        }
    }
}

/// Persistent device memory on one chip (`alloc_child_tensor`): `nbytes` at `ptr` on the
/// chip with worker id `worker`. Never freed by the engine on its own; freed by `free`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChildAllocation {
    /// The chip's worker id (its index in the worker's chips).
    pub worker: usize,
    /// The allocation's first byte, in the chip's address space.
    pub ptr: DevicePtr,
    /// Its length, in bytes.
    pub nbytes: u64,
    /// Which allocation at this address it is (the engine numbers every child allocation
    /// and comm window; 0 is none of them): a tensor of memory that was freed and
    /// allocated again at the same address names an older generation and is refused.
    pub generation: u64,
}

/// The memory a tensor views.
#[derive(Clone)]
pub enum Memory {
    /// Host memory of this process (shared with children or not).
    Host(Arc<dyn HostMemory>),
    /// Device memory on one chip.
    Child(ChildAllocation),
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Memory::Host(m) => f
                .debug_struct("Host")
                .field("ptr", &m.as_ptr())
                .field("len", &m.len())
                .field("shared", &m.shared().is_some())
                .finish(),
            Memory::Child(c) => c.fmt(f),
        }
    }
}

/// A view over [`Memory`]: `shape` elements of `dtype` starting `byte_offset` bytes in,
/// `strides[i]` elements apart along dimension `i` (C order when made by
/// [`Tensor::new`]). Cheap to clone; the memory is shared, not copied.
#[derive(Clone, Debug)]
pub struct Tensor {
    memory: Memory,
    byte_offset: u64,
    shape: Vec<u64>,
    strides: Vec<u64>,
    dtype: DataType,
}

/// The C-order strides (in elements) of `shape`.
pub fn c_strides(shape: &[u64]) -> Vec<u64> {
    let mut strides = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1]);
    }
    strides
}

impl Tensor {
    /// A C-order tensor of `shape` × `dtype` over the whole of `memory` from its first byte.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`tensor`) when the shape has no dimensions, more
    /// than [`simpler_abi::MAX_TENSOR_DIMS`], a zero extent, or needs more bytes than the
    /// memory holds.
    pub fn new(memory: Memory, shape: &[u64], dtype: DataType) -> Result<Tensor, WorkerError> {
        Tensor::view(memory, 0, shape, &c_strides(shape), dtype)
    }

    /// A view of `shape` elements with `strides` (elements) starting `byte_offset` bytes
    /// into `memory`.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`tensor`) when the rank is 0 or above
    /// [`simpler_abi::MAX_TENSOR_DIMS`], `strides` has another length, an extent is 0, or
    /// the furthest element lies outside the memory.
    pub fn view(
        memory: Memory,
        byte_offset: u64,
        shape: &[u64],
        strides: &[u64],
        dtype: DataType,
    ) -> Result<Tensor, WorkerError> {
        let bad = |reason: String| WorkerError::InvalidArgument {
            arg: "tensor".into(),
            reason,
        };
        if shape.is_empty() || shape.len() > simpler_abi::MAX_TENSOR_DIMS {
            return Err(bad(format!(
                "has {} dimensions; 1..={} are supported",
                shape.len(),
                simpler_abi::MAX_TENSOR_DIMS
            )));
        }
        if strides.len() != shape.len() {
            return Err(bad(format!(
                "has {} strides for {} dimensions",
                strides.len(),
                shape.len()
            )));
        }
        if shape.contains(&0) {
            return Err(bad(format!("shape {shape:?} has no elements")));
        }
        let tensor = Tensor {
            memory,
            byte_offset,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            dtype,
        };
        let capacity = tensor.memory_len();
        match tensor.byte_span() {
            Some((_, end)) if end <= capacity => Ok(tensor),
            _ => Err(bad(format!(
                "a view of shape {shape:?}, strides {strides:?} of {dtype} at byte {byte_offset} \
                 reaches past the {capacity} bytes of its memory"
            ))),
        }
    }

    /// The memory viewed.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// Bytes from the memory's start to the view's first element.
    pub fn byte_offset(&self) -> u64 {
        self.byte_offset
    }

    /// Shape, in elements.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Strides, in elements.
    pub fn strides(&self) -> &[u64] {
        &self.strides
    }

    /// Element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// Number of elements.
    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Bytes of the elements (`numel × dtype size`).
    pub fn nbytes(&self) -> u64 {
        self.numel() * self.dtype.size_bytes() as u64
    }

    /// True when the elements are C-order contiguous.
    pub fn is_contiguous(&self) -> bool {
        let c = c_strides(&self.shape);
        self.shape
            .iter()
            .zip(self.strides.iter().zip(&c))
            .all(|(extent, (s, c))| *extent == 1 || s == c)
    }

    /// Bytes the memory holds.
    pub fn memory_len(&self) -> u64 {
        match &self.memory {
            Memory::Host(m) => m.len() as u64,
            Memory::Child(c) => c.nbytes,
        }
    }

    /// The half-open byte range `[first, end)` the view touches, relative to the memory's
    /// start; `None` on overflow.
    pub fn byte_span(&self) -> Option<(u64, u64)> {
        let size = self.dtype.size_bytes() as u64;
        let mut last = 0u64;
        for (extent, stride) in self.shape.iter().zip(&self.strides) {
            last = last.checked_add((extent - 1).checked_mul(*stride)?)?;
        }
        let end = self
            .byte_offset
            .checked_add(last.checked_mul(size)?)?
            .checked_add(size)?;
        Some((self.byte_offset, end))
    }
}

/// One argument of a task, in the callable's signature order.
#[derive(Clone, Debug)]
pub enum TaskArg {
    /// A tensor and how the task uses it.
    Tensor(Tensor, Tag),
    /// A scalar's raw 64 bits.
    Scalar(u64),
}

/// A task's arguments, in the callable's signature order.
#[derive(Clone, Debug, Default)]
pub struct TaskArgs {
    /// The arguments.
    pub args: Vec<TaskArg>,
}

impl TaskArgs {
    /// No arguments.
    pub fn new() -> TaskArgs {
        TaskArgs::default()
    }

    /// Appends a tensor used as `tag`.
    pub fn add_tensor(&mut self, tensor: Tensor, tag: Tag) -> &mut TaskArgs {
        self.args.push(TaskArg::Tensor(tensor, tag));
        self
    }

    /// Appends a scalar's raw 64 bits.
    pub fn add_scalar(&mut self, value: u64) -> &mut TaskArgs {
        self.args.push(TaskArg::Scalar(value));
        self
    }

    /// Builder form of [`add_tensor`](TaskArgs::add_tensor).
    pub fn tensor(mut self, tensor: Tensor, tag: Tag) -> TaskArgs {
        self.add_tensor(tensor, tag);
        self
    }

    /// Builder form of [`add_scalar`](TaskArgs::add_scalar).
    pub fn scalar(mut self, value: u64) -> TaskArgs {
        self.add_scalar(value);
        self
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        self.args.len()
    }

    /// True with no arguments.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::VecMemory;

    fn host(n: usize) -> Memory {
        Memory::Host(Arc::new(VecMemory::new(vec![0; n])))
    }

    #[test]
    fn views_are_checked_against_their_memory() {
        let t = Tensor::new(host(64), &[4, 4], DataType::Float32).unwrap();
        assert_eq!(t.strides(), &[4, 1]);
        assert_eq!(t.byte_span(), Some((0, 64)));
        assert!(t.is_contiguous());
        let err = Tensor::new(host(60), &[4, 4], DataType::Float32).unwrap_err();
        assert!(
            err.to_string().contains("reaches past the 60 bytes"),
            "{err}"
        );
        let col = Tensor::view(host(64), 4, &[4, 1], &[4, 1], DataType::Float32).unwrap();
        assert!(!col.is_contiguous() || col.shape()[1] == 1);
        assert_eq!(col.byte_span(), Some((4, 56)));
        assert!(Tensor::new(host(8), &[], DataType::Float32).is_err());
        assert!(Tensor::new(host(8), &[0], DataType::Float32).is_err());
        assert!(Tensor::view(host(8), 0, &[2], &[1, 1], DataType::Uint8).is_err());
    }

    #[test]
    fn tags_say_what_they_read_and_write() {
        assert!(Tag::Input.reads() && !Tag::Input.writes());
        assert!(Tag::InOut.reads() && Tag::InOut.writes());
        assert!(!Tag::NoDep.reads() && !Tag::NoDep.writes());
        assert_eq!(Tag::OutputExisting.name(), "OUTPUT_EXISTING");
    }
}
