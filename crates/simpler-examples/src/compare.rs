//! Element-wise comparison with numpy's `allclose` semantics.

use std::fmt;

/// Why [`allclose`] refused: the first differing element, and how many differ.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Index of the first element that is not close.
    pub index: usize,
    /// `actual[index]` (NaN when `actual` is too short to have it).
    pub actual: f32,
    /// `expected[index]` (NaN when `expected` is too short to have it).
    pub expected: f32,
    /// How many elements are not close; elements present in only one slice count.
    pub count: usize,
    /// Number of elements compared: the longer of the two lengths.
    pub total: usize,
    /// Largest `|actual - expected|` over the elements both slices have and that are not
    /// close (NaN if one of them involved a NaN or an infinity).
    pub max_abs_diff: f64,
    /// `actual.len()`.
    pub actual_len: usize,
    /// `expected.len()`.
    pub expected_len: usize,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.actual_len != self.expected_len {
            write!(
                f,
                "length mismatch: actual has {} elements, expected {}; ",
                self.actual_len, self.expected_len
            )?;
        }
        write!(
            f,
            "{} of {} elements differ; first at index {}: actual {:e}, expected {:e}",
            self.count, self.total, self.index, self.actual, self.expected
        )?;
        if !self.max_abs_diff.is_nan() {
            write!(f, "; max |actual - expected| = {:e}", self.max_abs_diff)?;
        }
        Ok(())
    }
}

impl std::error::Error for Mismatch {}

/// Whether one element is close: numpy's `isclose` with `equal_nan = False`.
///
/// `|a - e| <= atol + rtol * |e|`, evaluated in `f64` so the boundary is exact for `f32`
/// inputs. NaN is never close to anything (itself included); an infinity is close only to
/// the same infinity.
fn is_close(a: f32, e: f32, rtol: f32, atol: f32) -> bool {
    if a.is_nan() || e.is_nan() {
        return false;
    }
    if a.is_infinite() || e.is_infinite() {
        return a == e;
    }
    let (a, e) = (f64::from(a), f64::from(e));
    (a - e).abs() <= f64::from(atol) + f64::from(rtol) * e.abs()
}

/// Checks `actual` against `expected` element by element, as numpy's
/// `allclose(actual, expected, rtol, atol)`: each pair must satisfy
/// `|actual - expected| <= atol + rtol * |expected|`. NaN never compares equal; slices of
/// different lengths never match (the extra elements count as differing).
///
/// On failure the [`Mismatch`] names the first bad index with both values and counts every
/// element that differs.
pub fn allclose(actual: &[f32], expected: &[f32], rtol: f32, atol: f32) -> Result<(), Mismatch> {
    let common = actual.len().min(expected.len());
    let total = actual.len().max(expected.len());
    let mut first: Option<usize> = None;
    let mut count = total - common;
    let mut max_abs_diff = 0f64;
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        if !is_close(a, e, rtol, atol) {
            first.get_or_insert(i);
            count += 1;
            let d = (f64::from(a) - f64::from(e)).abs();
            max_abs_diff = if d.is_finite() && !max_abs_diff.is_nan() {
                max_abs_diff.max(d)
            } else {
                f64::NAN
            };
        }
    }
    if count == 0 {
        return Ok(());
    }
    let index = first.unwrap_or(common);
    let at = |s: &[f32]| s.get(index).copied().unwrap_or(f32::NAN);
    Err(Mismatch {
        index,
        actual: at(actual),
        expected: at(expected),
        count,
        total,
        max_abs_diff,
        actual_len: actual.len(),
        expected_len: expected.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_slices_match() {
        assert_eq!(allclose(&[], &[], 0.0, 0.0), Ok(()));
        assert_eq!(
            allclose(&[1.0, -2.5, 0.0], &[1.0, -2.5, -0.0], 0.0, 0.0),
            Ok(())
        );
    }

    #[test]
    fn tolerance_boundary_is_inclusive() {
        // atol only: |1.5 - 1| = 0.5 <= 0.5.
        assert!(allclose(&[1.5], &[1.0], 0.0, 0.5).is_ok());
        // One ulp past the boundary fails.
        let past = f32::from_bits(1.5f32.to_bits() + 1);
        assert!(allclose(&[past], &[1.0], 0.0, 0.5).is_err());
        // rtol only: |3 - 2| = 1 <= 0.5 * |2|.
        assert!(allclose(&[3.0], &[2.0], 0.5, 0.0).is_ok());
        assert!(allclose(&[3.0], &[-2.0], 0.5, 0.0).is_err());
        // Both: 1 + 0.25 * 4 = 2 >= |6 - 4|.
        assert!(allclose(&[6.0], &[4.0], 0.25, 1.0).is_ok());
        assert!(allclose(&[6.0001], &[4.0], 0.25, 1.0).is_err());
    }

    #[test]
    fn tolerance_is_relative_to_expected_not_actual() {
        // numpy is asymmetric: |10 - 5| = 5 <= 0.5 * |10|, but not <= 0.5 * |5|.
        assert!(allclose(&[5.0], &[10.0], 0.5, 0.0).is_ok());
        assert!(allclose(&[10.0], &[5.0], 0.5, 0.0).is_err());
    }

    #[test]
    fn nan_is_never_equal() {
        let m = allclose(&[f32::NAN], &[f32::NAN], 1.0, 1.0).unwrap_err();
        assert_eq!(m.index, 0);
        assert_eq!(m.count, 1);
        assert!(allclose(&[0.0], &[f32::NAN], 1e9, 1e9).is_err());
        assert!(allclose(&[f32::NAN], &[0.0], 1e9, 1e9).is_err());
    }

    #[test]
    fn infinities_match_only_themselves() {
        assert!(allclose(&[f32::INFINITY], &[f32::INFINITY], 0.0, 0.0).is_ok());
        assert!(allclose(&[f32::NEG_INFINITY], &[f32::INFINITY], 1.0, 1.0).is_err());
        assert!(allclose(&[f32::MAX], &[f32::INFINITY], 1.0, 1.0).is_err());
        assert!(allclose(&[f32::INFINITY], &[f32::MAX], 1.0, 1.0).is_err());
    }

    #[test]
    fn mismatch_names_the_first_index_and_counts_all() {
        let actual = [1.0, 2.0, 9.0, 4.0, 7.0];
        let expected = [1.0, 2.0, 3.0, 4.0, 5.0];
        let m = allclose(&actual, &expected, 1e-5, 1e-5).unwrap_err();
        assert_eq!(
            (m.index, m.actual, m.expected, m.count, m.total),
            (2, 9.0, 3.0, 2, 5)
        );
        assert_eq!(m.max_abs_diff, 6.0);
        let text = m.to_string();
        assert!(text.contains("2 of 5 elements differ"), "{text}");
        assert!(text.contains("index 2"), "{text}");
        assert!(text.contains("actual 9e0"), "{text}");
        assert!(text.contains("expected 3e0"), "{text}");
    }

    #[test]
    fn different_lengths_never_match() {
        let m = allclose(&[1.0, 2.0], &[1.0, 2.0, 3.0], 1.0, 1.0).unwrap_err();
        assert_eq!((m.index, m.count, m.total), (2, 1, 3));
        assert!(m.actual.is_nan());
        assert_eq!(m.expected, 3.0);
        assert!(m.to_string().contains("length mismatch"), "{m}");
        // A differing element in the common part comes first.
        let m = allclose(&[0.0, 2.0, 5.0], &[1.0, 2.0], 0.0, 0.0).unwrap_err();
        assert_eq!((m.index, m.actual, m.expected, m.count), (0, 0.0, 1.0, 2));
    }
}
