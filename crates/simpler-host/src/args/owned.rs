//! The arguments a submitted run owns until it is finalized ([`OwnedArg`]) and the host
//! memory behind them: a [`HostBuffer`] the run may write (staged in, copied back by the
//! signature's direction) or a [`HostInput`] it only reads (staged in, never written).
//!
//! The lane reads every host tensor through a shared view ([`HostInput::bytes`],
//! [`HostBuffer::bytes`]: staging, alias ranges) and takes a mutable one
//! ([`HostBuffer::bytes_mut`]) only to copy an `out`/`inout` argument back. A read-only host
//! buffer therefore travels as [`OwnedArg::Input`], lent without a copy; the argument check
//! refuses it for an argument the run writes, so the type carries the rule and no path
//! needs a mutable view of read-only memory. This module only describes the memory; it
//! never stages or copies it.

use simpler_abi::DataType;

/// Host memory a run only reads, owned by the run until it is finalized (a read-only numpy
/// array, a shared constant).
///
/// The lane calls [`bytes`](HostInput::bytes) only while the run is not terminal, and never
/// while a run writing overlapping host memory is staged or copying back (alias ordering,
/// `docs/lane.md`); between such calls it holds no slice of the memory.
pub trait HostInput: Send + 'static {
    /// The bytes, C order (`len = numel × dtype size`); read to stage the input and to
    /// compare host ranges.
    fn bytes(&self) -> &[u8];
}

/// Host memory a run may write, owned by the run until it is finalized (Python passes
/// numpy-backed buffers).
///
/// The lane reads it through [`bytes`](HostBuffer::bytes) (staging, alias ranges) and
/// writes it through [`bytes_mut`](HostBuffer::bytes_mut) only to copy an `out`/`inout`
/// argument back; it holds no slice of the memory between calls.
pub trait HostBuffer: Send + 'static {
    /// The bytes, for reading: staged for `in`/`inout`, compared by host range.
    fn bytes(&self) -> &[u8];

    /// The bytes, for writing: an `out`/`inout` argument's output is copied back here.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl HostBuffer for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl HostInput for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }
}

/// One input shared by several runs without a copy.
impl HostInput for std::sync::Arc<[u8]> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// One argument of a submitted run, owned by the run until it is finalized.
pub enum OwnedArg {
    /// A host tensor the run may write: C-order bytes of `shape` × `dtype`, staged in and
    /// copied back by the signature's direction.
    Tensor {
        /// The bytes.
        buffer: Box<dyn HostBuffer>,
        /// Shape in elements (1..=5 dims).
        shape: Vec<u64>,
        /// Element type.
        dtype: DataType,
    },
    /// A host tensor the run only reads (an `in` argument; refused for `out`/`inout`):
    /// C-order bytes of `shape` × `dtype`, staged in and never written, so read-only memory
    /// is lent without a copy.
    Input {
        /// The bytes.
        buffer: Box<dyn HostInput>,
        /// Shape in elements (1..=5 dims).
        shape: Vec<u64>,
        /// Element type.
        dtype: DataType,
    },
    /// A scalar's raw 64 bits.
    Scalar(u64),
    /// A tensor already in device memory, inside one allocation from `ChipWorker::malloc`
    /// (checked at submit), passed in place: neither staged nor copied back. With a caller
    /// stream, the caller orders its writes before the launch and its reads after Tail.
    Device {
        /// The tensor's first byte.
        ptr: simpler_device::DevicePtr,
        /// Shape in elements (1..=5 dims), C order.
        shape: Vec<u64>,
        /// Element type.
        dtype: DataType,
    },
}

impl OwnedArg {
    /// The host bytes a host tensor ([`Tensor`](OwnedArg::Tensor) or
    /// [`Input`](OwnedArg::Input)) lends the run, read-only; `None` for a scalar or a device
    /// tensor.
    pub fn host_bytes(&self) -> Option<&[u8]> {
        match self {
            OwnedArg::Tensor { buffer, .. } => Some(buffer.bytes()),
            OwnedArg::Input { buffer, .. } => Some(buffer.bytes()),
            OwnedArg::Scalar(_) | OwnedArg::Device { .. } => None,
        }
    }
}

impl std::fmt::Debug for OwnedArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OwnedArg::Tensor { shape, dtype, .. } => f
                .debug_struct("Tensor")
                .field("shape", shape)
                .field("dtype", dtype)
                .finish_non_exhaustive(),
            OwnedArg::Input { shape, dtype, .. } => f
                .debug_struct("Input")
                .field("shape", shape)
                .field("dtype", dtype)
                .finish_non_exhaustive(),
            OwnedArg::Scalar(v) => f.debug_tuple("Scalar").field(v).finish(),
            OwnedArg::Device { ptr, shape, dtype } => f
                .debug_struct("Device")
                .field("ptr", ptr)
                .field("shape", shape)
                .field("dtype", dtype)
                .finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_bytes_reads_both_kinds_of_host_tensor_and_nothing_else() {
        let shared: std::sync::Arc<[u8]> = vec![4u8, 5, 6].into();
        let args = [
            OwnedArg::Tensor {
                buffer: Box::new(vec![1u8, 2]),
                shape: vec![2],
                dtype: DataType::Uint8,
            },
            OwnedArg::Input {
                buffer: Box::new(shared.clone()),
                shape: vec![3],
                dtype: DataType::Uint8,
            },
            OwnedArg::Scalar(9),
        ];
        assert_eq!(args[0].host_bytes(), Some(&[1u8, 2][..]));
        let lent = args[1].host_bytes().unwrap();
        assert_eq!(lent, &[4, 5, 6]);
        assert_eq!(
            lent.as_ptr(),
            shared.as_ptr(),
            "an input is lent, not copied"
        );
        assert_eq!(args[2].host_bytes(), None);
        assert_eq!(
            format!("{:?}", args[1]),
            "Input { shape: [3], dtype: Uint8, .. }"
        );
    }
}
