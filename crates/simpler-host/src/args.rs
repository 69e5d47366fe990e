//! Host-side run arguments — borrowed ([`HostArg`], for the synchronous run) and owned
//! ([`OwnedArg`] over any [`HostBuffer`], for a submitted run) — and their check against a
//! [`Signature`]: count, kind, dtype, shape and byte length, all before anything touches the
//! device. What the lane does with them is the lane's.

use simpler_abi::DataType;

use crate::{ArgDirection, HostError, Signature};

/// A host tensor passed to a run: C-order bytes with a shape and a dtype.
#[derive(Debug)]
pub struct HostTensor<'a> {
    /// The elements, C order, native endianness; `len = numel × dtype size`.
    pub bytes: &'a mut [u8],
    /// Shape in elements (1..=5 dims).
    pub shape: Vec<u64>,
    /// Element type.
    pub dtype: DataType,
}

/// One argument of a run, in signature order.
#[derive(Debug)]
pub enum HostArg<'a> {
    /// A tensor: staged to the device and copied back by the signature's direction.
    Tensor(HostTensor<'a>),
    /// A scalar's raw 64 bits.
    Scalar(u64),
}

/// A host buffer the run owns until it is finalized (Python passes numpy-backed buffers).
pub trait HostBuffer: Send + 'static {
    /// The buffer's bytes: read to stage inputs, written to copy outputs back.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl HostBuffer for Vec<u8> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

/// One argument of a submitted run, owned by the run until it is finalized.
pub enum OwnedArg {
    /// A tensor: C-order bytes of `shape` × `dtype`.
    Tensor {
        /// The bytes.
        buffer: Box<dyn HostBuffer>,
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

impl std::fmt::Debug for OwnedArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OwnedArg::Tensor { shape, dtype, .. } => f
                .debug_struct("Tensor")
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

/// What the check needs to know about one argument, borrowed or owned.
pub(crate) enum ArgView<'a> {
    /// A tensor of `len` bytes.
    Tensor {
        len: usize,
        shape: &'a [u64],
        dtype: DataType,
    },
    /// A scalar.
    Scalar,
}

/// Checks borrowed arguments against `sig`.
pub(crate) fn check(
    callable: &str,
    sig: &Signature,
    args: &[HostArg<'_>],
) -> Result<(), HostError> {
    let views: Vec<ArgView<'_>> = args
        .iter()
        .map(|a| match a {
            HostArg::Tensor(t) => ArgView::Tensor {
                len: t.bytes.len(),
                shape: &t.shape,
                dtype: t.dtype,
            },
            HostArg::Scalar(_) => ArgView::Scalar,
        })
        .collect();
    check_views(callable, sig, &views)
}

/// Checks owned arguments against `sig`.
pub(crate) fn check_owned(
    callable: &str,
    sig: &Signature,
    args: &mut [OwnedArg],
) -> Result<(), HostError> {
    let views: Vec<ArgView<'_>> = args
        .iter_mut()
        .map(|a| match a {
            OwnedArg::Tensor {
                buffer,
                shape,
                dtype,
            } => ArgView::Tensor {
                len: buffer.bytes_mut().len(),
                shape,
                dtype: *dtype,
            },
            OwnedArg::Scalar(_) => ArgView::Scalar,
            OwnedArg::Device { shape, dtype, .. } => ArgView::Tensor {
                // A device tensor's length is its shape's; only shape and dtype are checked.
                len: shape
                    .iter()
                    .try_fold(dtype.size_bytes() as u64, |a, &s| a.checked_mul(s))
                    .map_or(usize::MAX, |b| b as usize),
                shape,
                dtype: *dtype,
            },
        })
        .collect();
    check_views(callable, sig, &views)
}

/// Checks argument views against `sig`.
///
/// # Errors
/// [`HostError::ArgumentCount`] or [`HostError::InvalidArgument`] naming the argument.
fn check_views(callable: &str, sig: &Signature, args: &[ArgView<'_>]) -> Result<(), HostError> {
    if args.len() != sig.args.len() {
        return Err(HostError::ArgumentCount {
            callable: callable.into(),
            expected: sig.args.len(),
            got: args.len(),
        });
    }
    for (spec, arg) in sig.args.iter().zip(args) {
        let bad = |reason: String| HostError::InvalidArgument {
            arg: spec.name.clone(),
            reason,
        };
        match (spec.direction, arg) {
            (ArgDirection::Scalar, ArgView::Scalar) => {}
            (ArgDirection::Scalar, ArgView::Tensor { .. }) => {
                return Err(bad("the signature declares a scalar, got a tensor".into()));
            }
            (d, ArgView::Scalar) => {
                return Err(bad(format!(
                    "the signature declares an {} tensor, got a scalar",
                    d.name()
                )));
            }
            (_, &ArgView::Tensor { len, shape, dtype }) => {
                if dtype != spec.dtype {
                    return Err(bad(format!(
                        "dtype is {}, the signature declares {}",
                        dtype, spec.dtype
                    )));
                }
                if shape.is_empty() || shape.len() > simpler_abi::MAX_TENSOR_DIMS {
                    return Err(bad(format!(
                        "has {} dimensions; 1..=5 are supported",
                        shape.len()
                    )));
                }
                if let Some(want) = &spec.shape {
                    if want.as_slice() != shape {
                        return Err(bad(format!(
                            "shape is {:?}, the signature declares {:?}",
                            shape, want
                        )));
                    }
                }
                let numel = shape.iter().try_fold(1u64, |a, &s| a.checked_mul(s));
                let bytes = numel.and_then(|n| n.checked_mul(dtype.size_bytes() as u64));
                match bytes {
                    Some(0) => return Err(bad(format!("shape {:?} has no elements", shape))),
                    Some(b) if b == len as u64 => {}
                    _ => {
                        return Err(bad(format!(
                            "holds {} bytes but shape {:?} of {} needs {}",
                            len,
                            shape,
                            dtype,
                            bytes.map_or("more than 2^64".to_string(), |b| b.to_string())
                        )))
                    }
                }
            }
        }
    }
    Ok(())
}
