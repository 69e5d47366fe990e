//! A run's arguments and the host's one check of them against a [`Signature`]: count, kind,
//! dtype, rank, shape, byte length, writability, aliasing and scalar encoding, all before
//! anything touches the device.
//!
//! Every path into a run goes through the same rules: [`ChipWorker::run`] (borrowed
//! [`HostArg`]s), [`ChipWorker::submit`] (owned arguments) and bindings that hold foreign
//! memory ([`Signature::check_offers`]: a binding describes each argument as an
//! [`ArgOffer`] and learns how to pass it, lent in place or copied). The public types are
//! re-exported from [`crate::signature`]. This module only inspects descriptions of memory;
//! it never reads or writes the bytes. Scalars are encoded by the one scalar encoding, the
//! `scalar` submodule ([`ScalarValue::encode`]), which the toolchain's text parser uses too.
//!
//! [`ChipWorker::run`]: crate::ChipWorker::run
//! [`ChipWorker::submit`]: crate::ChipWorker::submit

mod scalar;

use simpler_abi::DataType;

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

/// Host memory a binding can lend to a run or copy: the bytes at `addr..addr + len`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMemory {
    /// Address of the first byte (used only to detect overlapping arguments).
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
    /// False when the memory's owner forbids writes (a read-only numpy array).
    pub writable: bool,
    /// Shape in elements, C order.
    pub shape: Vec<u64>,
    /// Element type.
    pub dtype: DataType,
}

impl HostMemory {
    fn overlaps(&self, other: &HostMemory) -> bool {
        self.addr < other.addr.saturating_add(other.len)
            && other.addr < self.addr.saturating_add(self.len)
    }
}

/// One argument a binding offers for a run, in signature order, before the host decides how
/// each host buffer travels ([`Signature::check_offers`]).
#[derive(Clone, Debug, PartialEq)]
pub enum ArgOffer {
    /// Host memory, to be lent to the run in place or copied.
    Host(HostMemory),
    /// A tensor in device memory (from `malloc`), passed in place.
    Device {
        /// Shape in elements, C order.
        shape: Vec<u64>,
        /// Element type.
        dtype: DataType,
    },
    /// A scalar, encoded by the signature's dtype.
    Scalar(ScalarValue),
}

/// How a binding passes one offered argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passing {
    /// Lend the host memory in place: the run reads it and, for `out`/`inout`, writes it.
    Lend,
    /// Copy the host memory's bytes: the run only reads them, and the memory is read-only or
    /// overlaps an earlier argument, so it must not be lent as writable.
    Copy,
    /// The device tensor, in place.
    Device,
    /// The scalar's 64 encoded bits.
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
/// its kind, dtype, rank and shape are checked).
///
/// # Errors
/// [`HostError::ArgumentCount`] or [`HostError::InvalidArgument`] naming the argument.
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
                len: buffer.bytes_mut().len() as u64,
                shape,
                dtype: *dtype,
            },
            OwnedArg::Scalar(_) => ArgView::Scalar,
            OwnedArg::Device { shape, dtype, .. } => device_view(shape, *dtype),
        })
        .collect();
    Ok(check_views(callable, sig, &views)?)
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

impl Signature {
    /// Checks the arguments a binding offers for a run of `callable` (its name, for
    /// messages) and decides how each travels: host memory is lent in place unless the run
    /// only reads it and it is read-only or overlaps an earlier lent argument (then
    /// [`Passing::Copy`]); scalars are encoded by their declared dtype. After this, no two
    /// lent buffers overlap, and every lent buffer the run writes is writable.
    ///
    /// These are the rules [`ChipWorker::submit`](crate::ChipWorker::submit) applies again
    /// to the owned arguments built from the answer.
    ///
    /// # Errors
    /// [`ArgError`]: the count; then, argument by argument, the kind, a tensor's dtype, rank,
    /// shape, byte length and writability, a scalar's encoding; then written arguments that
    /// overlap another lent one.
    pub fn check_offers(
        &self,
        callable: &str,
        offers: &[ArgOffer],
    ) -> Result<Vec<Passing>, ArgError> {
        check_count(callable, self, offers.len())?;
        let mut passing = Vec::with_capacity(offers.len());
        for (spec, offer) in self.args.iter().zip(offers) {
            let invalid = |problem| ArgError::Invalid {
                arg: spec.name.clone(),
                problem,
            };
            let p = match offer {
                ArgOffer::Host(m) => {
                    let view = ArgView::Tensor {
                        len: m.len as u64,
                        shape: &m.shape,
                        dtype: m.dtype,
                    };
                    check_view(spec, &view)?;
                    match (m.writable, spec.direction.copies_back()) {
                        (true, _) => Passing::Lend,
                        (false, false) => Passing::Copy,
                        (false, true) => {
                            return Err(invalid(ArgProblem::ReadOnly(spec.direction.name())))
                        }
                    }
                }
                ArgOffer::Device { shape, dtype } => {
                    check_view(spec, &device_view(shape, *dtype))?;
                    Passing::Device
                }
                ArgOffer::Scalar(v) => {
                    check_view(spec, &ArgView::Scalar)?;
                    let bits = v
                        .encode(Some(spec.dtype))
                        .map_err(|e| invalid(ArgProblem::Scalar(e)))?;
                    Passing::Scalar(bits)
                }
            };
            passing.push(p);
        }
        unalias(self, offers, &mut passing)?;
        Ok(passing)
    }
}

/// Rejects written arguments whose memory overlaps another lent argument, and copies an
/// overlapping argument that both only read, so that no two lent views share a byte.
fn unalias(sig: &Signature, offers: &[ArgOffer], passing: &mut [Passing]) -> Result<(), ArgError> {
    for j in 0..offers.len() {
        for i in 0..j {
            let (ArgOffer::Host(a), ArgOffer::Host(b)) = (&offers[i], &offers[j]) else {
                continue;
            };
            if passing[i] != Passing::Lend || passing[j] != Passing::Lend || !a.overlaps(b) {
                continue;
            }
            let (si, sj) = (&sig.args[i], &sig.args[j]);
            if si.direction.copies_back() || sj.direction.copies_back() {
                let (written, other) = if sj.direction.copies_back() {
                    (sj, si)
                } else {
                    (si, sj)
                };
                return Err(ArgError::Invalid {
                    arg: written.name.clone(),
                    problem: ArgProblem::Aliased {
                        direction: written.direction.name(),
                        other: other.name.clone(),
                    },
                });
            }
            passing[j] = Passing::Copy;
        }
    }
    Ok(())
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

    fn sig() -> Signature {
        Signature::new(vec![
            spec("a", In, DataType::Float32),
            spec("b", In, DataType::Float32),
            spec("c", Out, DataType::Float32),
            spec("n", Scalar, DataType::Uint64),
        ])
        .unwrap()
    }

    fn host(addr: usize, n: u64, writable: bool) -> ArgOffer {
        ArgOffer::Host(HostMemory {
            addr,
            len: n as usize * 4,
            writable,
            shape: vec![n],
            dtype: DataType::Float32,
        })
    }

    fn offers() -> Vec<ArgOffer> {
        vec![
            host(0x1000, 16, true),
            host(0x2000, 16, true),
            host(0x3000, 16, true),
            ArgOffer::Scalar(ScalarValue::Int(7)),
        ]
    }

    #[test]
    fn well_formed_offers_are_lent_and_scalars_encoded() {
        let p = sig().check_offers("k", &offers()).unwrap();
        assert_eq!(
            p,
            [
                Passing::Lend,
                Passing::Lend,
                Passing::Lend,
                Passing::Scalar(7)
            ]
        );
        let mut device = offers();
        device[1] = ArgOffer::Device {
            shape: vec![16],
            dtype: DataType::Float32,
        };
        assert_eq!(
            sig().check_offers("k", &device).unwrap()[1],
            Passing::Device
        );
    }

    #[test]
    fn the_count_names_every_declared_argument() {
        let e = sig().check_offers("vadd", &offers()[..2]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "callable `vadd` takes 4 arguments (a, b, c, n), got 2"
        );
        assert!(matches!(
            HostError::from(e),
            HostError::ArgumentCount {
                expected: 4,
                got: 2,
                ..
            }
        ));
    }

    #[test]
    fn each_mismatch_names_its_argument() {
        let cases: Vec<(usize, ArgOffer, &str, &str)> = vec![
            (
                3,
                host(0x9000, 4, true),
                "n",
                "declares a scalar, got a tensor",
            ),
            (
                2,
                ArgOffer::Scalar(ScalarValue::Int(1)),
                "c",
                "declares an out tensor, got a scalar",
            ),
            (
                0,
                ArgOffer::Host(HostMemory {
                    dtype: DataType::Int32,
                    ..memory(host(0x1000, 16, true))
                }),
                "a",
                "dtype is i32, the signature declares f32",
            ),
            (
                1,
                ArgOffer::Host(HostMemory {
                    shape: vec![],
                    ..memory(host(0x2000, 16, true))
                }),
                "b",
                "has 0 dimensions",
            ),
            (
                1,
                ArgOffer::Host(HostMemory {
                    shape: vec![0],
                    len: 0,
                    ..memory(host(0x2000, 16, true))
                }),
                "b",
                "shape [0] has no elements",
            ),
            (
                1,
                ArgOffer::Host(HostMemory {
                    shape: vec![8],
                    ..memory(host(0x2000, 16, true))
                }),
                "b",
                "holds 64 bytes but shape [8] of f32 needs 32",
            ),
            (
                2,
                host(0x3000, 16, false),
                "c",
                "read-only but the run writes it (out)",
            ),
            (
                3,
                ArgOffer::Scalar(ScalarValue::Int(-1)),
                "n",
                "-1 is out of range for u64 (0..=18446744073709551615; it is unsigned)",
            ),
            (
                1,
                ArgOffer::Device {
                    shape: vec![16],
                    dtype: DataType::Float16,
                },
                "b",
                "dtype is f16",
            ),
        ];
        for (i, offer, arg, want) in cases {
            let mut args = offers();
            args[i] = offer;
            let e = sig().check_offers("k", &args).unwrap_err();
            assert_eq!(e.arg(), Some(arg), "{e}");
            assert!(e.to_string().contains(want), "`{e}` should say `{want}`");
            assert!(
                e.to_string().starts_with(&format!("argument `{arg}`: ")),
                "{e}"
            );
            let host = HostError::from(e.clone());
            assert_eq!(host.to_string(), e.to_string());
            assert!(host.is_invalid_argument());
        }
    }

    fn memory(offer: ArgOffer) -> HostMemory {
        match offer {
            ArgOffer::Host(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn only_kind_errors_and_floats_for_integers_are_type_errors() {
        let mut args = offers();
        args[3] = ArgOffer::Scalar(ScalarValue::Float(1.5));
        let e = sig().check_offers("k", &args).unwrap_err();
        assert!(e.is_type_error(), "{e}");
        assert!(e
            .to_string()
            .contains("scalar 1.5 is a float but the signature declares u64"));
        args[3] = host(0x9000, 4, true);
        assert!(sig().check_offers("k", &args).unwrap_err().is_type_error());
        args[3] = ArgOffer::Scalar(ScalarValue::Int(-1));
        assert!(!sig().check_offers("k", &args).unwrap_err().is_type_error());
    }

    #[test]
    fn read_only_inputs_are_copied_and_read_aliases_copied_once() {
        let mut args = offers();
        args[0] = host(0x1000, 16, false);
        args[1] = host(0x1000, 16, true);
        let p = sig().check_offers("k", &args).unwrap();
        assert_eq!(&p[..3], [Passing::Copy, Passing::Lend, Passing::Lend]);
        args[0] = host(0x1000, 16, true);
        let p = sig().check_offers("k", &args).unwrap();
        assert_eq!(&p[..3], [Passing::Lend, Passing::Copy, Passing::Lend]);
    }

    #[test]
    fn a_written_argument_may_not_overlap_another_lent_one() {
        let mut args = offers();
        args[2] = host(0x1000 + 60, 16, true); // its first element is a's last
        let e = sig().check_offers("k", &args).unwrap_err();
        assert_eq!(
            e.to_string(),
            "argument `c`: the run writes it (out) and it shares memory with argument `a`; \
             pass separate arrays"
        );
        // Adjacent, not overlapping: fine.
        args[2] = host(0x1000 + 64, 16, true);
        assert!(sig().check_offers("k", &args).is_ok());
        // A read-only input overlapping an output is copied, so the output is still lent.
        args[0] = host(0x3000, 16, false);
        args[2] = host(0x3000, 16, true);
        let p = sig().check_offers("k", &args).unwrap();
        assert_eq!(&p[..3], [Passing::Copy, Passing::Lend, Passing::Lend]);
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
        let mut owned = vec![OwnedArg::Scalar(1)];
        let e = check_owned("k", &one, &mut owned).unwrap_err();
        assert_eq!(
            e.to_string(),
            "argument `x`: the signature declares an in tensor, got a scalar"
        );
    }
}
