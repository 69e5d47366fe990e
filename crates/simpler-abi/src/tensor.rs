//! Tensors as the device sees them: [`DataType`], [`TensorArgType`] and the 128-byte
//! [`ChipTensor`] view descriptor (`docs/chip-runtime.md`, tensor map).

use crate::assert_layout;

/// Maximum number of dimensions of a [`ChipTensor`].
pub const MAX_TENSOR_DIMS: usize = 5;

/// Element type of a tensor. The discriminants are the wire values stored in
/// [`ChipTensor::dtype`] and written by C code as `SIMPLER_DT_*`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// IEEE-754 binary32.
    Float32 = 0,
    /// IEEE-754 binary16.
    Float16 = 1,
    /// Signed 32-bit integer.
    Int32 = 2,
    /// Signed 16-bit integer.
    Int16 = 3,
    /// Signed 8-bit integer.
    Int8 = 4,
    /// Unsigned 8-bit integer.
    Uint8 = 5,
    /// bfloat16.
    Bfloat16 = 6,
    /// Signed 64-bit integer.
    Int64 = 7,
    /// Unsigned 64-bit integer.
    Uint64 = 8,
    /// Unsigned 16-bit integer.
    Uint16 = 9,
    /// Unsigned 32-bit integer.
    Uint32 = 10,
    /// IEEE-754 binary64.
    Float64 = 11,
}

impl DataType {
    /// Every data type, in wire order.
    pub const ALL: [DataType; 12] = [
        DataType::Float32,
        DataType::Float16,
        DataType::Int32,
        DataType::Int16,
        DataType::Int8,
        DataType::Uint8,
        DataType::Bfloat16,
        DataType::Int64,
        DataType::Uint64,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Float64,
    ];

    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 => 1,
            DataType::Float16 | DataType::Bfloat16 | DataType::Int16 | DataType::Uint16 => 2,
            DataType::Float32 | DataType::Int32 | DataType::Uint32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }

    /// Decodes a wire value; `None` for an unknown one.
    pub const fn from_raw(raw: u32) -> Option<DataType> {
        if (raw as usize) < Self::ALL.len() {
            Some(Self::ALL[raw as usize])
        } else {
            None
        }
    }

    /// Lower-case name as used in manifests and messages (`"f32"`, `"i64"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::Float32 => "f32",
            DataType::Float16 => "f16",
            DataType::Int32 => "i32",
            DataType::Int16 => "i16",
            DataType::Int8 => "i8",
            DataType::Uint8 => "u8",
            DataType::Bfloat16 => "bf16",
            DataType::Int64 => "i64",
            DataType::Uint64 => "u64",
            DataType::Uint16 => "u16",
            DataType::Uint32 => "u32",
            DataType::Float64 => "f64",
        }
    }

    /// Parses a name produced by [`DataType::name`].
    pub fn from_name(name: &str) -> Option<DataType> {
        Self::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a task argument takes part in dependency discovery (`docs/chip-runtime.md`, tensor map).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorArgType {
    /// Read by the task: waits for earlier writers of an overlapping region (RAW).
    Input = 0,
    /// Allocated by the runtime from the shape and dtype given; returned to the orchestration.
    Output = 1,
    /// Read and written: waits for earlier readers and writers (RAW, WAW, WAR).
    Inout = 2,
    /// Written into an existing buffer: waits for earlier readers and writers.
    OutputExisting = 3,
    /// Passed to the kernel with no dependency tracking at all.
    NoDep = 4,
}

impl TensorArgType {
    /// Decodes a wire value; `None` for an unknown one.
    pub const fn from_raw(raw: u32) -> Option<TensorArgType> {
        match raw {
            0 => Some(TensorArgType::Input),
            1 => Some(TensorArgType::Output),
            2 => Some(TensorArgType::Inout),
            3 => Some(TensorArgType::OutputExisting),
            4 => Some(TensorArgType::NoDep),
            _ => None,
        }
    }

    /// True for the tags under which the task writes the tensor.
    pub const fn writes(self) -> bool {
        matches!(
            self,
            TensorArgType::Output | TensorArgType::Inout | TensorArgType::OutputExisting
        )
    }
}

/// [`ChipTensor::flags`] bit: the view is row-major contiguous (a cache, set by the runtime).
pub const TENSOR_FLAG_CONTIGUOUS: u32 = 1;

/// Sentinel for [`ChipTensor::owner_task_id`]: no task produced this buffer.
pub const NO_OWNER_TASK: u64 = u64::MAX;

/// A strided view over a device buffer: 128 bytes, two cache lines.
///
/// Element `(i0, .., i{n-1})` lives at byte
/// `buffer_addr + (start_offset + Σ ik·strides[k]) · dtype.size_bytes()`.
/// `shapes` and `strides` are counted in elements; entries at or past `ndims` are ignored
/// and kept zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChipTensor {
    /// Device address of the whole buffer the view points into.
    pub buffer_addr: u64,
    /// Size of that whole buffer in bytes.
    pub buffer_size: u64,
    /// Offset of the view's first element from `buffer_addr`, in elements.
    pub start_offset: u64,
    /// Extent of each dimension, in elements.
    pub shapes: [u64; MAX_TENSOR_DIMS],
    /// Distance between consecutive indices of each dimension, in elements.
    pub strides: [u64; MAX_TENSOR_DIMS],
    /// Task that produced the buffer, or [`NO_OWNER_TASK`].
    pub owner_task_id: u64,
    /// Number of dimensions in use, 1..=5.
    pub ndims: u32,
    /// Raw [`DataType`] wire value (kept raw: C code may write anything).
    pub dtype: u32,
    /// Bumped by the runtime each time a task writes this view.
    pub version: u32,
    /// `TENSOR_FLAG_*` bits.
    pub flags: u32,
}

assert_layout!(
    ChipTensor,
    size = 128,
    buffer_addr = 0,
    buffer_size = 8,
    start_offset = 16,
    shapes = 24,
    strides = 64,
    owner_task_id = 104,
    ndims = 112,
    dtype = 116,
    version = 120,
    flags = 124
);

impl ChipTensor {
    /// An all-zero descriptor (ndims 0): not a valid view, only a placeholder.
    pub const ZERO: ChipTensor = ChipTensor {
        buffer_addr: 0,
        buffer_size: 0,
        start_offset: 0,
        shapes: [0; MAX_TENSOR_DIMS],
        strides: [0; MAX_TENSOR_DIMS],
        owner_task_id: NO_OWNER_TASK,
        ndims: 0,
        dtype: 0,
        version: 0,
        flags: 0,
    };

    /// A row-major contiguous view of a whole buffer of `shape` elements of `dtype`.
    ///
    /// # Panics
    /// If `shape` is empty or has more than [`MAX_TENSOR_DIMS`] entries (a caller bug).
    pub fn contiguous(buffer_addr: u64, shape: &[u64], dtype: DataType) -> ChipTensor {
        assert!(
            !shape.is_empty() && shape.len() <= MAX_TENSOR_DIMS,
            "a tensor has 1..=5 dimensions, got {}",
            shape.len()
        );
        let mut t = ChipTensor::ZERO;
        t.buffer_addr = buffer_addr;
        t.ndims = shape.len() as u32;
        t.dtype = dtype as u32;
        let mut stride = 1u64;
        for d in (0..shape.len()).rev() {
            t.shapes[d] = shape[d];
            t.strides[d] = stride;
            stride = stride.saturating_mul(shape[d]);
        }
        t.buffer_size = stride.saturating_mul(dtype.size_bytes() as u64);
        t.flags = TENSOR_FLAG_CONTIGUOUS;
        t
    }

    /// The decoded data type, `None` if the raw value is unknown.
    pub fn data_type(&self) -> Option<DataType> {
        DataType::from_raw(self.dtype)
    }

    /// The dimensions in use (`shapes[..ndims]`), clamped to 5.
    pub fn shape(&self) -> &[u64] {
        &self.shapes[..(self.ndims as usize).min(MAX_TENSOR_DIMS)]
    }

    /// Number of elements in the view (product of the shape; 0 for ndims 0), saturating at
    /// `u64::MAX` for an absurd shape.
    pub fn numel(&self) -> u64 {
        self.checked_numel().unwrap_or(u64::MAX)
    }

    /// Number of elements, or `None` when the product overflows.
    pub fn checked_numel(&self) -> Option<u64> {
        if self.ndims == 0 {
            return Some(0);
        }
        self.shape().iter().try_fold(1u64, |a, &s| a.checked_mul(s))
    }
}
