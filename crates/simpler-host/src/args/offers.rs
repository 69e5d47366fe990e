//! The check of what a binding that holds foreign memory (Python's numpy arrays) offers for
//! a run: [`Signature::check_offers`] applies the signature's rules to descriptions of the
//! memory ([`ArgOffer`]) and answers how each argument travels ([`Passing`]).
//!
//! Every host array is lent to the run in place: an argument the run only reads is lent
//! read-only (the binding passes it as [`OwnedArg::Input`](crate::OwnedArg::Input)), one it
//! writes is lent writable ([`OwnedArg::Tensor`](crate::OwnedArg::Tensor)). Nothing is
//! copied at submit, so a run whose input an earlier, unfinished run writes reads it only
//! once that run's outputs are back: the lane's alias ordering (`docs/lane.md`) covers
//! read-only inputs and read aliases too. This module only inspects descriptions; it never
//! reads or writes the bytes.

use simpler_abi::DataType;

use super::{check_count, check_view, device_view, ArgError, ArgProblem, ArgView, ScalarValue};
use crate::Signature;

/// Host memory a binding can lend to a run: the bytes at `addr..addr + len`.
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
    /// Host memory, to be lent to the run in place.
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
    /// Lend the host memory read-only, in place ([`OwnedArg::Input`](crate::OwnedArg::Input)):
    /// the run only reads it (`in`), whether or not its owner allows writes.
    LendReadOnly,
    /// Lend the host memory writable, in place ([`OwnedArg::Tensor`](crate::OwnedArg::Tensor)):
    /// the run copies its output back into it (`out`, `inout`).
    LendWritable,
    /// The device tensor, in place.
    Device,
    /// The scalar's 64 encoded bits.
    Scalar(u64),
}

impl Signature {
    /// Checks the arguments a binding offers for a run of `callable` (its name, for
    /// messages) and decides how each travels: host memory is lent in place, read-only when
    /// the run only reads it ([`Passing::LendReadOnly`]) and writable when the run writes it
    /// ([`Passing::LendWritable`]); scalars are encoded by their declared dtype. After this,
    /// every memory lent writable is writable and shares no byte with another argument its
    /// owner allows writes to (a read-only view of an output is fine: inputs are staged
    /// before the run, outputs copied back after it).
    ///
    /// [`ChipWorker::submit`](crate::ChipWorker::submit) checks the owned arguments built
    /// from the answer again: kind, dtype, rank, shape and byte length, and that no
    /// read-only input stands for an argument the run writes.
    ///
    /// # Errors
    /// [`ArgError`]: the count; then, argument by argument, the kind, a tensor's dtype, rank,
    /// shape, byte length and writability, a scalar's encoding; then written arguments that
    /// overlap another writable one.
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
                    match (spec.direction.copies_back(), m.writable) {
                        (false, _) => Passing::LendReadOnly,
                        (true, true) => Passing::LendWritable,
                        (true, false) => {
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
        unalias(self, offers)?;
        Ok(passing)
    }
}

/// Rejects a written argument whose memory overlaps another argument's writable memory
/// (the earlier of the two named first). Overlapping arguments that are only read, and a
/// read-only input overlapping a written one, are fine.
fn unalias(sig: &Signature, offers: &[ArgOffer]) -> Result<(), ArgError> {
    for j in 0..offers.len() {
        for i in 0..j {
            let (ArgOffer::Host(a), ArgOffer::Host(b)) = (&offers[i], &offers[j]) else {
                continue;
            };
            if !a.writable || !b.writable || !a.overlaps(b) {
                continue;
            }
            let (si, sj) = (&sig.args[i], &sig.args[j]);
            if !si.direction.copies_back() && !sj.direction.copies_back() {
                continue;
            }
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
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArgDirection, ArgSpec, HostError};
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

    const READ: Passing = Passing::LendReadOnly;
    const WRITE: Passing = Passing::LendWritable;

    #[test]
    fn inputs_are_lent_read_only_outputs_writable_and_scalars_encoded() {
        let p = sig().check_offers("k", &offers()).unwrap();
        assert_eq!(p, [READ, READ, WRITE, Passing::Scalar(7)]);
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
    fn read_only_inputs_and_read_aliases_are_lent_in_place() {
        let mut args = offers();
        args[0] = host(0x1000, 16, false);
        args[1] = host(0x1000, 16, true);
        let p = sig().check_offers("k", &args).unwrap();
        assert_eq!(&p[..3], [READ, READ, WRITE]);
        // The same writable array twice, both only read.
        args[0] = host(0x1000, 16, true);
        let p = sig().check_offers("k", &args).unwrap();
        assert_eq!(&p[..3], [READ, READ, WRITE]);
    }

    #[test]
    fn a_written_argument_may_not_overlap_another_writable_one() {
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
        // A read-only view of the output's memory is lent too: it is staged before the run
        // and the output copied back after it.
        args[0] = host(0x3000, 16, false);
        args[2] = host(0x3000, 16, true);
        let p = sig().check_offers("k", &args).unwrap();
        assert_eq!(&p[..3], [READ, READ, WRITE]);
        // A writable array there as well is refused, naming it.
        args[1] = host(0x3000 + 32, 16, true);
        let e = sig().check_offers("k", &args).unwrap_err();
        assert_eq!(e.arg(), Some("c"));
        assert!(e.to_string().contains("argument `b`"), "{e}");
    }

    #[test]
    fn an_inout_argument_is_the_written_one_whichever_comes_first() {
        let sig = Signature::new(vec![
            spec("x", InOut, DataType::Float32),
            spec("y", In, DataType::Float32),
        ])
        .unwrap();
        let e = sig
            .check_offers("k", &[host(0x1000, 16, true), host(0x1010, 16, true)])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "argument `x`: the run writes it (inout) and it shares memory with argument `y`; \
             pass separate arrays"
        );
        let p = sig
            .check_offers("k", &[host(0x1000, 16, true), host(0x1010, 16, false)])
            .unwrap();
        assert_eq!(p, [WRITE, READ]);
    }
}
