//! A run's arguments and the host's one check of them against a [`Signature`]: count, kind,
//! dtype, rank, shape, byte length, writability, aliasing and scalar encoding, all before
//! anything touches the device.
//!
//! Every path into a run goes through the same rules: [`ChipWorker::run`] (borrowed
//! [`HostArg`]s), [`ChipWorker::submit`] (owned arguments, the `owned` submodule) and
//! bindings that hold foreign memory (the `offers` submodule, [`Signature::check_offers`]: a
//! binding describes each argument as an [`ArgOffer`] and learns how to lend it, read-only
//! or writable). The public types are re-exported from [`crate::signature`] and the crate
//! root. This module only inspects descriptions of memory; it never reads or writes the
//! bytes. Scalars are encoded by the one scalar encoding, the `scalar` submodule
//! ([`ScalarValue::encode`]), which the toolchain's text parser uses too.
//!
//! [`ChipWorker::run`]: crate::ChipWorker::run
//! [`ChipWorker::submit`]: crate::ChipWorker::submit

mod offers;
mod owned;
mod scalar;

use simpler_abi::DataType;

pub use self::offers::{ArgOffer, HostMemory, Passing};
pub use self::owned::{HostBuffer, HostInput, OwnedArg};
pub use self::scalar::{is_float_dtype, ScalarError, ScalarValue};
use crate::{ArgDirection, ArgSpec, HostError, Signature};

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

/// Why a run's arguments do not match the callable's signature. Each variant but
/// [`Count`](ArgError::Count) names the argument; [`HostError`] carries the same text
/// (`ArgumentCount` or `InvalidArgument`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// More or fewer arguments than the signature declares.
    #[error(
        "callable `{callable}` takes {} arguments ({}), got {got}",
        arguments.len(),
        arguments.join(", ")
    )]
    Count {
        /// The callable's name.
        callable: String,
        /// The names the signature declares, in order.
        arguments: Vec<String>,
        /// How many were passed.
        got: usize,
    },
    /// A tensor where the signature declares a scalar, or the other way round.
    #[error("argument `{arg}`: {}", kind_reason(*.declared, *.got_tensor))]
    Kind {
        /// The argument.
        arg: String,
        /// The signature's direction for it.
        declared: ArgDirection,
        /// True when a tensor was passed (for a scalar), false for a scalar.
        got_tensor: bool,
    },
    /// A tensor or scalar that fails one of the signature's rules.
    #[error("argument `{arg}`: {problem}")]
    Invalid {
        /// The argument.
        arg: String,
        /// What is wrong.
        problem: ArgProblem,
    },
}

/// `the signature declares an in tensor, got a scalar` and the like.
fn kind_reason(declared: ArgDirection, got_tensor: bool) -> String {
    let declared = if declared.is_tensor() {
        format!("an {} tensor", declared.name())
    } else {
        "a scalar".into()
    };
    let got = if got_tensor { "a tensor" } else { "a scalar" };
    format!("the signature declares {declared}, got {got}")
}

/// What is wrong with one argument ([`ArgError::Invalid`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgProblem {
    /// The tensor's dtype is not the declared one.
    #[error("dtype is {got}, the signature declares {declared}")]
    Dtype {
        /// The tensor's dtype.
        got: DataType,
        /// The signature's.
        declared: DataType,
    },
    /// The tensor has no dimensions or more than [`simpler_abi::MAX_TENSOR_DIMS`].
    #[error("has {0} dimensions; 1..=5 are supported")]
    Rank(usize),
    /// The shape differs from the one the signature fixes.
    #[error("shape is {got:?}, the signature declares {declared:?}")]
    Shape {
        /// The tensor's shape.
        got: Vec<u64>,
        /// The signature's.
        declared: Vec<u64>,
    },
    /// The shape has a zero extent.
    #[error("shape {0:?} has no elements")]
    Empty(Vec<u64>),
    /// The buffer's length is not shape × element size.
    #[error("holds {len} bytes but shape {shape:?} of {dtype} needs {}", needs_text(*.needs))]
    Length {
        /// The buffer's bytes.
        len: u64,
        /// The tensor's shape.
        shape: Vec<u64>,
        /// The tensor's dtype.
        dtype: DataType,
        /// The bytes the shape needs (`None`: more than 2^64).
        needs: Option<u64>,
    },
    /// The memory is read-only but the run writes it.
    #[error("the memory is read-only but the run writes it ({0}); pass a writable array")]
    ReadOnly(&'static str),
    /// The run writes the memory and it overlaps another argument.
    #[error(
        "the run writes it ({direction}) and it shares memory with argument `{other}`; pass \
         separate arrays"
    )]
    Aliased {
        /// The written argument's direction.
        direction: &'static str,
        /// The other argument.
        other: String,
    },
    /// The scalar cannot be encoded for its dtype.
    #[error(transparent)]
    Scalar(ScalarError),
}

/// A byte count, or `more than 2^64` when it overflowed.
fn needs_text(needs: Option<u64>) -> String {
    needs.map_or_else(|| "more than 2^64".to_string(), |b| b.to_string())
}

impl ArgError {
    /// The argument it names; `None` for [`ArgError::Count`].
    pub fn arg(&self) -> Option<&str> {
        match self {
            ArgError::Count { .. } => None,
            ArgError::Kind { arg, .. } | ArgError::Invalid { arg, .. } => Some(arg),
        }
    }

    /// True for a wrong kind of value: a tensor for a scalar (or the reverse), or a float
    /// for an integer scalar. Bindings raise these as type errors.
    pub fn is_type_error(&self) -> bool {
        matches!(
            self,
            ArgError::Kind { .. }
                | ArgError::Invalid {
                    problem: ArgProblem::Scalar(ScalarError::FloatForInteger { .. }),
                    ..
                }
        )
    }

    /// What is wrong, without the argument's name.
    pub fn reason(&self) -> String {
        match self {
            ArgError::Count { .. } => self.to_string(),
            ArgError::Kind {
                declared,
                got_tensor,
                ..
            } => kind_reason(*declared, *got_tensor),
            ArgError::Invalid { problem, .. } => problem.to_string(),
        }
    }
}

impl ArgError {
    /// This refusal as a replay's: [`HostError::ReplayMismatch`] naming the argument (the
    /// callable, for a count), so every check that refuses a replay's arguments — the
    /// recording's or the signature's, whichever runs first — raises the one error
    /// (`docs/chip-runtime.md` §17).
    pub fn into_replay_mismatch(self) -> HostError {
        let arg = match &self {
            ArgError::Count { callable, .. } => callable.clone(),
            other => other.arg().unwrap_or_default().to_string(),
        };
        HostError::ReplayMismatch {
            arg,
            reason: self.reason(),
        }
    }
}

impl From<ArgError> for HostError {
    fn from(e: ArgError) -> HostError {
        match e {
            ArgError::Count {
                callable,
                arguments,
                got,
            } => HostError::ArgumentCount {
                callable,
                expected: arguments.len(),
                got,
            },
            other => HostError::InvalidArgument {
                arg: other.arg().unwrap_or_default().to_string(),
                reason: other.reason(),
            },
        }
    }
}

/// What the check needs to know about one argument.
enum ArgView<'a> {
    /// A tensor of `len` bytes.
    Tensor {
        len: u64,
        shape: &'a [u64],
        dtype: DataType,
    },
    /// A scalar.
    Scalar,
}

fn check_count(callable: &str, sig: &Signature, got: usize) -> Result<(), ArgError> {
    if got == sig.args.len() {
        return Ok(());
    }
    Err(ArgError::Count {
        callable: callable.into(),
        arguments: sig.args.iter().map(|a| a.name.clone()).collect(),
        got,
    })
}

/// Checks one argument's kind, and a tensor's dtype, rank, shape and byte length.
fn check_view(spec: &ArgSpec, arg: &ArgView<'_>) -> Result<(), ArgError> {
    let invalid = |problem| ArgError::Invalid {
        arg: spec.name.clone(),
        problem,
    };
    let kind = |got_tensor| ArgError::Kind {
        arg: spec.name.clone(),
        declared: spec.direction,
        got_tensor,
    };
    match (spec.direction, arg) {
        (ArgDirection::Scalar, ArgView::Scalar) => Ok(()),
        (ArgDirection::Scalar, ArgView::Tensor { .. }) => Err(kind(true)),
        (_, ArgView::Scalar) => Err(kind(false)),
        (_, &ArgView::Tensor { len, shape, dtype }) => {
            if dtype != spec.dtype {
                return Err(invalid(ArgProblem::Dtype {
                    got: dtype,
                    declared: spec.dtype,
                }));
            }
            if shape.is_empty() || shape.len() > simpler_abi::MAX_TENSOR_DIMS {
                return Err(invalid(ArgProblem::Rank(shape.len())));
            }
            if let Some(want) = &spec.shape {
                if want.as_slice() != shape {
                    return Err(invalid(ArgProblem::Shape {
                        got: shape.to_vec(),
                        declared: want.clone(),
                    }));
                }
            }
            let needs = shape
                .iter()
                .try_fold(dtype.size_bytes() as u64, |a, &s| a.checked_mul(s));
            match needs {
                Some(0) => Err(invalid(ArgProblem::Empty(shape.to_vec()))),
                Some(b) if b == len => Ok(()),
                _ => Err(invalid(ArgProblem::Length {
                    len,
                    shape: shape.to_vec(),
                    dtype,
                    needs,
                })),
            }
        }
    }
}

fn check_views(callable: &str, sig: &Signature, args: &[ArgView<'_>]) -> Result<(), ArgError> {
    check_count(callable, sig, args.len())?;
    sig.args
        .iter()
        .zip(args)
        .try_for_each(|(spec, arg)| check_view(spec, arg))
}

/// Checks borrowed arguments against `sig`.
///
/// # Errors
/// [`HostError::ArgumentCount`] or [`HostError::InvalidArgument`] naming the argument.
pub(crate) fn check(
    callable: &str,
    sig: &Signature,
    args: &[HostArg<'_>],
) -> Result<(), HostError> {
    let views: Vec<ArgView<'_>> = args
        .iter()
        .map(|a| match a {
            HostArg::Tensor(t) => ArgView::Tensor {
                len: t.bytes.len() as u64,
                shape: &t.shape,
                dtype: t.dtype,
            },
            HostArg::Scalar(_) => ArgView::Scalar,
        })
        .collect();
    Ok(check_views(callable, sig, &views)?)
}

/// Checks owned arguments against `sig` (a device tensor's length is its shape's, so only
/// its kind, dtype, rank and shape are checked), and that no read-only
/// [`OwnedArg::Input`] stands for an argument the run writes.
///
/// # Errors
/// [`HostError::ArgumentCount`] or [`HostError::InvalidArgument`] naming the argument.
pub(crate) fn check_owned(
    callable: &str,
    sig: &Signature,
    args: &[OwnedArg],
) -> Result<(), HostError> {
    let views: Vec<ArgView<'_>> = args
        .iter()
        .map(|a| match a {
            OwnedArg::Tensor {
                buffer,
                shape,
                dtype,
            } => ArgView::Tensor {
                len: buffer.bytes().len() as u64,
                shape,
                dtype: *dtype,
            },
            OwnedArg::Input {
                buffer,
                shape,
                dtype,
            } => ArgView::Tensor {
                len: buffer.bytes().len() as u64,
                shape,
                dtype: *dtype,
            },
            OwnedArg::Scalar(_) => ArgView::Scalar,
            OwnedArg::Device { shape, dtype, .. } => device_view(shape, *dtype),
        })
        .collect();
    check_views(callable, sig, &views)?;
    let written_input =
        sig.args.iter().zip(args).find(|(spec, arg)| {
            matches!(arg, OwnedArg::Input { .. }) && spec.direction.copies_back()
        });
    if let Some((spec, _)) = written_input {
        return Err(ArgError::Invalid {
            arg: spec.name.clone(),
            problem: ArgProblem::ReadOnly(spec.direction.name()),
        }
        .into());
    }
    Ok(())
}

fn device_view(shape: &[u64], dtype: DataType) -> ArgView<'_> {
    ArgView::Tensor {
        len: shape
            .iter()
            .try_fold(dtype.size_bytes() as u64, |a, &s| a.checked_mul(s))
            .unwrap_or(u64::MAX),
        shape,
        dtype,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ArgDirection::*;

    fn spec(name: &str, direction: ArgDirection, dtype: DataType) -> ArgSpec {
        ArgSpec {
            name: name.into(),
            direction,
            dtype,
            shape: None,
        }
    }

    #[test]
    fn owned_and_borrowed_checks_keep_the_host_messages() {
        let mut bytes = vec![0u8; 12];
        let args = [HostArg::Tensor(HostTensor {
            bytes: &mut bytes,
            shape: vec![4],
            dtype: DataType::Float32,
        })];
        let one = Signature::new(vec![spec("x", In, DataType::Float32)]).unwrap();
        let e = check("k", &one, &args).unwrap_err();
        assert_eq!(
            e.to_string(),
            "argument `x`: holds 12 bytes but shape [4] of f32 needs 16"
        );
        let owned = vec![OwnedArg::Scalar(1)];
        let e = check_owned("k", &one, &owned).unwrap_err();
        assert_eq!(
            e.to_string(),
            "argument `x`: the signature declares an in tensor, got a scalar"
        );
    }

    #[test]
    fn a_read_only_input_is_accepted_for_in_and_refused_where_the_run_writes() {
        let input = |len: usize| OwnedArg::Input {
            buffer: Box::new(vec![0u8; len]),
            shape: vec![4],
            dtype: DataType::Float32,
        };
        let sig = Signature::new(vec![
            spec("x", In, DataType::Float32),
            spec("y", Out, DataType::Float32),
            spec("z", InOut, DataType::Float32),
        ])
        .unwrap();
        let writable = || OwnedArg::Tensor {
            buffer: Box::new(vec![0u8; 16]),
            shape: vec![4],
            dtype: DataType::Float32,
        };
        assert!(check_owned("k", &sig, &[input(16), writable(), writable()]).is_ok());
        let e = check_owned("k", &sig, &[input(12), writable(), writable()]).unwrap_err();
        assert!(e.to_string().contains("holds 12 bytes"), "{e}");
        for (at, arg, dir) in [(1, "y", "out"), (2, "z", "inout")] {
            let mut args = vec![input(16), writable(), writable()];
            args[at] = input(16);
            let e = check_owned("k", &sig, &args).unwrap_err();
            assert!(e.is_invalid_argument(), "{e}");
            assert_eq!(
                e.to_string(),
                format!(
                    "argument `{arg}`: the memory is read-only but the run writes it ({dir}); \
                     pass a writable array"
                )
            );
        }
    }
}
