//! Element-wise comparison with NumPy's `allclose` semantics: how `simpler run --check`,
//! the example tests and Python scene tests decide that a result matches its reference.
//! This module owns the closeness rule and the [`Report`]; it reads element bytes through
//! [`crate::scalar`] and knows nothing about files or runs.
//!
//! An element is close when `|actual - expected| <= atol + rtol * |expected|` (asymmetric
//! in `expected`, as NumPy's `isclose(actual, expected)`), evaluated in `f64`. Integers are
//! compared exactly in `i128`. NaN is close to nothing, itself included, unless
//! [`Tolerance::equal_nan`] is set (NumPy's `equal_nan=True`), when NaN is close to NaN; an
//! infinity is close only to the same infinity. See `docs/toolchain.md` §5.

use std::fmt;

use simpler_abi::DataType;

use crate::scalar;

/// The tolerances of a comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance, a finite number >= 0.
    pub rtol: f64,
    /// Absolute tolerance, a finite number >= 0.
    pub atol: f64,
    /// Whether NaN is close to NaN (NumPy's `equal_nan`).
    pub equal_nan: bool,
}

impl Tolerance {
    /// `rtol` and `atol` with NaN never close.
    pub fn new(rtol: f64, atol: f64) -> Tolerance {
        Tolerance {
            rtol,
            atol,
            equal_nan: false,
        }
    }

    /// The same tolerances with NaN close to NaN when `equal_nan`.
    pub fn with_equal_nan(self, equal_nan: bool) -> Tolerance {
        Tolerance { equal_nan, ..self }
    }

    /// Checks that both tolerances are finite and >= 0.
    ///
    /// # Errors
    /// [`CompareError::BadTolerance`] naming the tolerance.
    pub fn validate(&self) -> Result<(), CompareError> {
        for (which, value) in [("rtol", self.rtol), ("atol", self.atol)] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(CompareError::BadTolerance { which, value });
            }
        }
        Ok(())
    }
}

/// Why two arrays could not be compared at all.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompareError {
    /// The arrays have different numbers of elements.
    #[error("length mismatch: actual has {actual} elements, expected {expected}")]
    LengthMismatch {
        /// Elements of the actual array.
        actual: usize,
        /// Elements of the expected array.
        expected: usize,
    },
    /// A byte buffer is not a whole number of elements.
    #[error("{len} bytes are not a whole number of {dtype} elements")]
    Ragged {
        /// The buffer's length in bytes.
        len: usize,
        /// The element type.
        dtype: DataType,
    },
    /// A tolerance is negative or not finite.
    #[error("{which} must be a finite number >= 0, got {value}")]
    BadTolerance {
        /// "rtol" or "atol".
        which: &'static str,
        /// The value.
        value: f64,
    },
}

/// One element of a comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Element {
    /// Flat (C-order) index.
    pub index: usize,
    /// The actual value.
    pub actual: f64,
    /// The expected value.
    pub expected: f64,
}

/// The outcome of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Number of elements compared.
    pub total: usize,
    /// Number not close.
    pub mismatches: usize,
    /// Largest `|actual - expected|` over the pairs where it is a number (0 with none): NaN
    /// pairs are left out, an infinity against anything else counts as infinite.
    pub max_abs_err: f64,
    /// The first element that is not close.
    pub first: Option<Element>,
    /// The element that is not close with the largest `|actual - expected|` (a NaN
    /// difference counting as infinite; the first of equals).
    pub worst: Option<Element>,
}

impl Report {
    /// True when every element is close.
    pub fn passed(&self) -> bool {
        self.mismatches == 0
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.first, &self.worst) {
            (Some(first), Some(worst)) => {
                write!(
                    f,
                    "{} of {} elements differ; first at index {}: actual {:e}, expected {:e}",
                    self.mismatches, self.total, first.index, first.actual, first.expected
                )?;
                if worst.index != first.index {
                    write!(
                        f,
                        "; worst at index {}: actual {:e}, expected {:e}",
                        worst.index, worst.actual, worst.expected
                    )?;
                }
                write!(f, "; max |actual - expected| = {:e}", self.max_abs_err)
            }
            _ => write!(
                f,
                "all {} elements match (max |actual - expected| = {:e})",
                self.total, self.max_abs_err
            ),
        }
    }
}

/// One element decoded for comparison.
#[derive(Clone, Copy)]
enum Value {
    F(f64),
    I(i128),
}

impl Value {
    fn as_f64(self) -> f64 {
        match self {
            Value::F(v) => v,
            Value::I(v) => v as f64,
        }
    }
}

/// Whether one pair is close, and its `|actual - expected|` (NaN when either is NaN).
fn closeness(a: Value, e: Value, tol: &Tolerance) -> (bool, f64) {
    match (a, e) {
        (Value::I(a), Value::I(e)) => {
            let err = (a - e).unsigned_abs() as f64;
            (err <= tol.atol + tol.rtol * e.unsigned_abs() as f64, err)
        }
        _ => {
            let (a, e) = (a.as_f64(), e.as_f64());
            if a.is_nan() || e.is_nan() {
                (tol.equal_nan && a.is_nan() && e.is_nan(), f64::NAN)
            } else if a.is_infinite() || e.is_infinite() {
                (a == e, if a == e { 0.0 } else { f64::INFINITY })
            } else {
                let err = (a - e).abs();
                (err <= tol.atol + tol.rtol * e.abs(), err)
            }
        }
    }
}

/// Compares `n` pairs produced by `pair(i)`.
fn compare_pairs(n: usize, tol: &Tolerance, pair: impl Fn(usize) -> (Value, Value)) -> Report {
    let mut out = Report {
        total: n,
        mismatches: 0,
        max_abs_err: 0.0,
        first: None,
        worst: None,
    };
    let mut worst_err = f64::NEG_INFINITY;
    for i in 0..n {
        let (a, e) = pair(i);
        let (close, err) = closeness(a, e, tol);
        if !err.is_nan() && err > out.max_abs_err {
            out.max_abs_err = err;
        }
        if close {
            continue;
        }
        out.mismatches += 1;
        let element = Element {
            index: i,
            actual: a.as_f64(),
            expected: e.as_f64(),
        };
        out.first.get_or_insert(element);
        let rank = if err.is_nan() { f64::INFINITY } else { err };
        if rank > worst_err {
            worst_err = rank;
            out.worst = Some(element);
        }
    }
    out
}

/// Compares two arrays of `dtype` given as little-endian element bytes.
///
/// # Errors
/// [`CompareError`] for invalid tolerances, a buffer that is not a whole number of
/// elements, or arrays of different lengths.
pub fn allclose(
    actual: &[u8],
    expected: &[u8],
    dtype: DataType,
    tol: Tolerance,
) -> Result<Report, CompareError> {
    tol.validate()?;
    let size = dtype.size_bytes();
    for len in [actual.len(), expected.len()] {
        if len % size != 0 {
            return Err(CompareError::Ragged { len, dtype });
        }
    }
    let (na, ne) = (actual.len() / size, expected.len() / size);
    if na != ne {
        return Err(CompareError::LengthMismatch {
            actual: na,
            expected: ne,
        });
    }
    let element = |bytes: &[u8], i: usize| {
        let mut raw = [0u8; 8];
        raw[..size].copy_from_slice(&bytes[i * size..(i + 1) * size]);
        let bits = u64::from_le_bytes(raw);
        match scalar::decode_int(bits, dtype) {
            Some(v) => Value::I(v),
            None => Value::F(scalar::decode(bits, dtype)),
        }
    };
    Ok(compare_pairs(na, &tol, |i| {
        (element(actual, i), element(expected, i))
    }))
}

/// Compares two `f32` slices.
///
/// # Errors
/// [`CompareError`] for invalid tolerances or slices of different lengths.
pub fn allclose_f32(
    actual: &[f32],
    expected: &[f32],
    tol: Tolerance,
) -> Result<Report, CompareError> {
    allclose_with(actual.len(), expected.len(), tol, |i| {
        (
            Value::F(f64::from(actual[i])),
            Value::F(f64::from(expected[i])),
        )
    })
}

/// Compares two `f64` slices (what Python passes after converting any dtype to float64).
///
/// # Errors
/// [`CompareError`] for invalid tolerances or slices of different lengths.
pub fn allclose_f64(
    actual: &[f64],
    expected: &[f64],
    tol: Tolerance,
) -> Result<Report, CompareError> {
    allclose_with(actual.len(), expected.len(), tol, |i| {
        (Value::F(actual[i]), Value::F(expected[i]))
    })
}

fn allclose_with(
    na: usize,
    ne: usize,
    tol: Tolerance,
    pair: impl Fn(usize) -> (Value, Value),
) -> Result<Report, CompareError> {
    tol.validate()?;
    if na != ne {
        return Err(CompareError::LengthMismatch {
            actual: na,
            expected: ne,
        });
    }
    Ok(compare_pairs(na, &tol, pair))
}

/// A flat C-order index as a multi-dimensional one, `[i, j, k]`.
pub fn unravel(mut flat: usize, shape: &[u64]) -> Vec<u64> {
    let mut idx = vec![0u64; shape.len()];
    for d in (0..shape.len()).rev() {
        let n = shape[d].max(1) as usize;
        idx[d] = (flat % n) as u64;
        flat /= n;
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn tol(rtol: f64, atol: f64) -> Tolerance {
        Tolerance::new(rtol, atol)
    }

    fn close(a: f32, e: f32, rtol: f64, atol: f64) -> bool {
        allclose_f32(&[a], &[e], tol(rtol, atol)).unwrap().passed()
    }

    #[test]
    fn equal_arrays_match() {
        assert!(allclose_f32(&[], &[], tol(0.0, 0.0)).unwrap().passed());
        let r = allclose_f32(&[1.0, -2.5, 0.0], &[1.0, -2.5, -0.0], tol(0.0, 0.0)).unwrap();
        assert!(
            r.passed() && r.first.is_none() && r.worst.is_none(),
            "{r:?}"
        );
        assert_eq!(r.total, 3);
    }

    #[test]
    fn tolerance_boundary_is_inclusive() {
        assert!(close(1.5, 1.0, 0.0, 0.5));
        assert!(!close(f32::from_bits(1.5f32.to_bits() + 1), 1.0, 0.0, 0.5));
        assert!(close(3.0, 2.0, 0.5, 0.0));
        assert!(!close(3.0, -2.0, 0.5, 0.0));
        assert!(close(6.0, 4.0, 0.25, 1.0));
        assert!(!close(6.0001, 4.0, 0.25, 1.0));
    }

    #[test]
    fn tolerance_is_relative_to_expected_not_actual() {
        assert!(close(5.0, 10.0, 0.5, 0.0));
        assert!(!close(10.0, 5.0, 0.5, 0.0));
        let r = allclose(
            &f32s(&[0.0, 10.5]),
            &f32s(&[0.0, 10.0]),
            DataType::Float32,
            tol(0.049, 0.0),
        )
        .unwrap();
        assert!(!r.passed());
    }

    #[test]
    fn nan_is_never_close_unless_equal_nan() {
        let r = allclose_f32(&[f32::NAN, 1.0], &[f32::NAN, 1.0], tol(1.0, 1.0)).unwrap();
        assert_eq!((r.mismatches, r.first.map(|m| m.index)), (1, Some(0)));
        // NaN pairs leave max_abs_err alone.
        assert_eq!(r.max_abs_err, 0.0);
        assert!(!close(0.0, f32::NAN, 1e9, 1e9));
        assert!(!close(f32::NAN, 0.0, 1e9, 1e9));
        let eq = tol(1.0, 1.0).with_equal_nan(true);
        assert!(allclose_f32(&[f32::NAN], &[f32::NAN], eq).unwrap().passed());
        assert!(!allclose_f32(&[f32::NAN], &[0.0], eq).unwrap().passed());
    }

    #[test]
    fn infinities_match_only_themselves() {
        assert!(close(f32::INFINITY, f32::INFINITY, 0.0, 0.0));
        assert!(!close(f32::NEG_INFINITY, f32::INFINITY, 1.0, 1.0));
        assert!(!close(f32::MAX, f32::INFINITY, 1.0, 1.0));
        assert!(!close(f32::INFINITY, f32::MAX, 1.0, 1.0));
        let r = allclose_f32(&[f32::INFINITY], &[1.0], tol(1.0, 1.0)).unwrap();
        assert_eq!(r.max_abs_err, f64::INFINITY);
    }

    #[test]
    fn first_and_worst_mismatch_and_max_error() {
        let r = allclose(
            &f32s(&[1.0, 5.0, 2.0, 9.0]),
            &f32s(&[1.0, 4.0, 2.0, 1.0]),
            DataType::Float32,
            tol(0.0, 0.5),
        )
        .unwrap();
        assert_eq!(r.mismatches, 2);
        let e = |index, actual, expected| Element {
            index,
            actual,
            expected,
        };
        assert_eq!(r.first, Some(e(1, 5.0, 4.0)));
        assert_eq!(r.worst, Some(e(3, 9.0, 1.0)));
        assert_eq!(r.max_abs_err, 8.0);
        let text = r.to_string();
        assert!(text.contains("2 of 4 elements differ"), "{text}");
        assert!(
            text.contains("first at index 1: actual 5e0, expected 4e0"),
            "{text}"
        );
        assert!(text.contains("worst at index 3"), "{text}");
        // A NaN mismatch is worse than any finite one; the first of equals wins.
        let r = allclose_f64(
            &[0.0, 9.0, f64::NAN, f64::NAN],
            &[1.0, 0.0, 0.0, 0.0],
            tol(0.0, 0.0),
        )
        .unwrap();
        assert_eq!(r.worst.map(|w| w.index), Some(2));
        assert_eq!(r.first.map(|w| w.index), Some(0));
    }

    #[test]
    fn integers_compare_exactly() {
        let bytes = |v: &[i64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let r = allclose(
            &bytes(&[i64::MAX, -1]),
            &bytes(&[i64::MAX - 1, -1]),
            DataType::Int64,
            tol(0.0, 0.0),
        )
        .unwrap();
        assert_eq!(r.mismatches, 1);
        assert_eq!(r.max_abs_err, 1.0);
        let r = allclose(&[255, 0], &[255, 0], DataType::Uint8, tol(0.0, 0.0)).unwrap();
        assert!(r.passed());
        // i8 -1 against 1: a difference of 2, signed.
        assert!(allclose(&[0xff], &[0x01], DataType::Int8, tol(0.0, 2.0))
            .unwrap()
            .passed());
        let r = allclose(&[0xff], &[0x01], DataType::Int8, tol(0.0, 1.0)).unwrap();
        assert_eq!(r.first.map(|m| (m.actual, m.expected)), Some((-1.0, 1.0)));
    }

    #[test]
    fn half_precision_elements_are_decoded() {
        // f16 1.0 (0x3c00) vs 1.0009765625 (0x3c01); bf16 1.0 (0x3f80) vs 1.0078125 (0x3f81).
        let r = allclose(
            &[0x00, 0x3c],
            &[0x01, 0x3c],
            DataType::Float16,
            tol(0.0, 1e-3),
        )
        .unwrap();
        assert!(r.passed(), "{r:?}");
        let r = allclose(
            &[0x80, 0x3f],
            &[0x81, 0x3f],
            DataType::Bfloat16,
            tol(0.0, 1e-3),
        )
        .unwrap();
        assert!(!r.passed());
        assert_eq!(r.first.unwrap().expected, 1.0078125);
    }

    #[test]
    fn arrays_that_cannot_be_compared() {
        assert_eq!(
            allclose_f32(&[1.0, 2.0], &[1.0, 2.0, 3.0], tol(1.0, 1.0)),
            Err(CompareError::LengthMismatch {
                actual: 2,
                expected: 3
            })
        );
        assert!(matches!(
            allclose(&[0; 5], &[0; 4], DataType::Float32, tol(0.0, 0.0)),
            Err(CompareError::Ragged { len: 5, .. })
        ));
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let e = allclose_f32(&[], &[], tol(bad, 0.0)).unwrap_err();
            assert!(matches!(
                e,
                CompareError::BadTolerance { which: "rtol", .. }
            ));
            let e = allclose_f32(&[], &[], tol(0.0, bad)).unwrap_err();
            assert!(e.to_string().starts_with("atol must be"), "{e}");
        }
    }

    #[test]
    fn unravel_indices() {
        assert_eq!(unravel(5, &[2, 3]), vec![1, 2]);
        assert_eq!(unravel(0, &[4]), vec![0]);
        assert_eq!(unravel(23, &[2, 3, 4]), vec![1, 2, 3]);
    }
}
