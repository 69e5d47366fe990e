//! Host-side run arguments and their check against a [`Signature`]: count, kind, dtype,
//! shape and byte length, all before anything touches the device.

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

/// Checks `args` against `sig`.
///
/// # Errors
/// [`HostError::ArgumentCount`] or [`HostError::InvalidArgument`] naming the argument.
pub(crate) fn check(
    callable: &str,
    sig: &Signature,
    args: &[HostArg<'_>],
) -> Result<(), HostError> {
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
            (ArgDirection::Scalar, HostArg::Scalar(_)) => {}
            (ArgDirection::Scalar, HostArg::Tensor(_)) => {
                return Err(bad("the signature declares a scalar, got a tensor".into()));
            }
            (d, HostArg::Scalar(_)) => {
                return Err(bad(format!(
                    "the signature declares an {} tensor, got a scalar",
                    d.name()
                )));
            }
            (_, HostArg::Tensor(t)) => {
                if t.dtype != spec.dtype {
                    return Err(bad(format!(
                        "dtype is {}, the signature declares {}",
                        t.dtype, spec.dtype
                    )));
                }
                if t.shape.is_empty() || t.shape.len() > simpler_abi::MAX_TENSOR_DIMS {
                    return Err(bad(format!(
                        "has {} dimensions; 1..=5 are supported",
                        t.shape.len()
                    )));
                }
                if let Some(want) = &spec.shape {
                    if want != &t.shape {
                        return Err(bad(format!(
                            "shape is {:?}, the signature declares {:?}",
                            t.shape, want
                        )));
                    }
                }
                let numel = t.shape.iter().try_fold(1u64, |a, &s| a.checked_mul(s));
                let bytes = numel.and_then(|n| n.checked_mul(t.dtype.size_bytes() as u64));
                match bytes {
                    Some(0) => return Err(bad(format!("shape {:?} has no elements", t.shape))),
                    Some(b) if b == t.bytes.len() as u64 => {}
                    _ => {
                        return Err(bad(format!(
                            "holds {} bytes but shape {:?} of {} needs {}",
                            t.bytes.len(),
                            t.shape,
                            t.dtype,
                            bytes.map_or("more than 2^64".to_string(), |b| b.to_string())
                        )))
                    }
                }
            }
        }
    }
    Ok(())
}
