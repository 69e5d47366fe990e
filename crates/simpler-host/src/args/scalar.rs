//! The one scalar encoding: a number (or raw bits) → the 64 bits a run passes for a dtype.
//! The host's argument check, the Python extension and the toolchain's text parser
//! (`simpler run --scalar`) all encode through [`ScalarValue::encode`]; nothing else keeps
//! range tables or float rounding. This module knows dtypes, not signatures or text.
//!
//! Rules (`docs/toolchain.md` §6):
//! - an integer for an integer dtype must lie in the dtype's range; it travels sign-extended
//!   (signed dtypes, as in C) or zero-extended (unsigned ones);
//! - a number for `f32`, `f16` or `bf16` is rounded once to the nearest value of the dtype,
//!   ties to even, from its exact value (an `f64`, or an integer of up to 128 bits); the bits
//!   are zero-extended. Infinities and NaN pass; a finite value that rounds to infinity is
//!   out of range;
//! - a float for an integer dtype is refused ([`ScalarError::FloatForInteger`]), whatever its
//!   value;
//! - raw bits pass unchanged.
//!
//! Rounding once: `half` converts `f32` to `f16`/`bf16` exactly (ties to even), but its
//! `f64` conversions round twice (through `f32`, or after dropping the low 32 bits of the
//! mantissa). So a wider value is first rounded *to odd* at `f32` (truncated, its last bit
//! set when inexact), and only then to nearest even: rounding to odd at a precision at least
//! two bits wider than the target preserves exactly what the final rounding needs, so the
//! result is the correctly rounded one. Integers wider than `f64`'s 53 bits are rounded to
//! odd at 53 bits the same way.

use half::{bf16, f16};
use simpler_abi::DataType;

/// A scalar argument's value before it is encoded by the signature's dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarValue {
    /// An integer: must fit the dtype (a negative value is sign-extended, as in C); for a
    /// float dtype, its value rounded to that type.
    Int(i128),
    /// A floating-point number: the bit pattern of the (float) dtype, zero-extended.
    Float(f64),
    /// Raw bits, passed unchanged whatever the dtype (a C `double` keeps its 64 bits).
    Bits(u64),
}

/// Why a scalar value cannot be encoded for a dtype. Each message names the value and the
/// dtype; an out-of-range one also gives the range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScalarError {
    /// A float for an integer dtype.
    #[error("scalar {value} is a float but the signature declares {dtype}")]
    FloatForInteger {
        /// The value as written.
        value: String,
        /// The declared dtype.
        dtype: DataType,
    },
    /// The value lies outside the dtype's range (or outside 64 bits when no dtype is given):
    /// `300 is out of range for u8 (0..=255)`, `70000 is out of range for f16 (|x| <= 65504)`.
    #[error("{value} is out of range for {} ({range})", target_name(*.dtype))]
    OutOfRange {
        /// The value as written.
        value: String,
        /// The dtype; `None` when none was known (any 64-bit integer was acceptable).
        dtype: Option<DataType>,
        /// What the dtype holds: `0..=255`, `|x| <= 65504`, with `; it is unsigned` added for
        /// a negative value given to an unsigned dtype.
        range: String,
    },
}

/// `u8`, `f16`, ... or `64 bits` when no dtype is known.
fn target_name(dtype: Option<DataType>) -> &'static str {
    dtype.map_or("64 bits", DataType::name)
}

impl ScalarError {
    /// The refusal of `value` (as written, e.g. `1e400` or a 40-digit integer) for `dtype`:
    /// [`ScalarError::OutOfRange`] with the dtype's range. For parsers whose input is outside
    /// every value [`ScalarValue`] holds.
    pub fn out_of_range(value: impl Into<String>, dtype: DataType) -> ScalarError {
        let value = value.into();
        let range = range_text(Some(dtype), value.starts_with('-'));
        ScalarError::OutOfRange {
            value,
            dtype: Some(dtype),
            range,
        }
    }

    /// The same refusal, naming the value as `value` spells it (a parser's input text rather
    /// than the number it parsed to).
    pub fn with_value(self, value: impl Into<String>) -> ScalarError {
        match self {
            ScalarError::FloatForInteger { dtype, .. } => ScalarError::FloatForInteger {
                value: value.into(),
                dtype,
            },
            ScalarError::OutOfRange { dtype, range, .. } => ScalarError::OutOfRange {
                value: value.into(),
                dtype,
                range,
            },
        }
    }
}

/// True for the float dtypes (`f32`, `f16`, `bf16`, `f64`), whose scalars are numbers
/// rounded to the type; false for the integer dtypes, whose scalars must be integers in
/// range.
pub fn is_float_dtype(dtype: DataType) -> bool {
    matches!(
        dtype,
        DataType::Float32 | DataType::Float16 | DataType::Bfloat16 | DataType::Float64
    )
}

/// The inclusive range of an integer dtype; `None` for a float dtype.
fn int_range(dtype: DataType) -> Option<(i128, i128)> {
    Some(match dtype {
        DataType::Int8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::Int16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => (i32::MIN.into(), i32::MAX.into()),
        DataType::Int64 => (i64::MIN.into(), i64::MAX.into()),
        DataType::Uint8 => (0, u8::MAX.into()),
        DataType::Uint16 => (0, u16::MAX.into()),
        DataType::Uint32 => (0, u32::MAX.into()),
        DataType::Uint64 => (0, u64::MAX.into()),
        DataType::Float32 | DataType::Float16 | DataType::Bfloat16 | DataType::Float64 => {
            return None
        }
    })
}

/// The integers a scalar without a dtype may be: a signed or an unsigned 64-bit value.
const UNTYPED_RANGE: (i128, i128) = (i64::MIN as i128, u64::MAX as i128);

/// What `dtype` holds, for messages: `0..=255`, `|x| <= 65504`; `negative` (the refused value
/// is negative) adds `; it is unsigned` for an unsigned dtype.
fn range_text(dtype: Option<DataType>, negative: bool) -> String {
    let Some(dtype) = dtype else {
        return format!("{}..={}", UNTYPED_RANGE.0, UNTYPED_RANGE.1);
    };
    match int_range(dtype) {
        Some((0, max)) if negative => format!("0..={max}; it is unsigned"),
        Some((min, max)) => format!("{min}..={max}"),
        None => {
            let max = match dtype {
                DataType::Float16 => f16::MAX.to_string(),
                DataType::Bfloat16 => format!("{:e}", f32::from(bf16::MAX)),
                DataType::Float64 => format!("{:e}", f64::MAX),
                _ => format!("{:e}", f32::MAX),
            };
            format!("|x| <= {max}")
        }
    }
}

impl ScalarValue {
    /// The 64 bits this value travels as for `dtype`; `None` (no dtype known) accepts any
    /// integer in `-2^63..2^64` and encodes floats as `f32`.
    ///
    /// Numbers for a float dtype are rounded once, to nearest with ties to even (see the
    /// module docs); infinities and NaN pass, but a finite value that would round to infinity
    /// is out of range.
    ///
    /// # Errors
    /// [`ScalarError::FloatForInteger`] for a float with an integer dtype;
    /// [`ScalarError::OutOfRange`] for an integer outside the dtype's range (or outside 64
    /// bits) or a finite number beyond the float dtype's largest value.
    pub fn encode(self, dtype: Option<DataType>) -> Result<u64, ScalarError> {
        match self {
            ScalarValue::Bits(bits) => Ok(bits),
            ScalarValue::Int(v) => {
                let out_of_range = || ScalarError::OutOfRange {
                    value: v.to_string(),
                    dtype,
                    range: range_text(dtype, v < 0),
                };
                let (min, max) = match dtype {
                    None => UNTYPED_RANGE,
                    Some(dt) => match int_range(dt) {
                        Some(range) => range,
                        None => return round_to(int_to_f64_odd(v), dt).ok_or_else(out_of_range),
                    },
                };
                if v < min || v > max {
                    return Err(out_of_range());
                }
                // Two's-complement truncation: a negative value comes out sign-extended.
                Ok(v as u64)
            }
            ScalarValue::Float(f) => {
                let dt = dtype.unwrap_or(DataType::Float32);
                if !is_float_dtype(dt) {
                    return Err(ScalarError::FloatForInteger {
                        value: format!("{f:?}"),
                        dtype: dt,
                    });
                }
                round_to(f, dt).ok_or_else(|| ScalarError::OutOfRange {
                    value: format!("{f:?}"),
                    dtype: Some(dt),
                    range: range_text(Some(dt), false),
                })
            }
        }
    }
}

impl ScalarValue {
    /// The value the 64 bits `bits` carry for `dtype`: the inverse of [`ScalarValue::encode`].
    /// An integer dtype reads its low bits, sign-extended for a signed dtype
    /// ([`ScalarValue::Int`]); `f32`, `f16` and `bf16` read their low 32 or 16 bits as that
    /// type, widened exactly to an `f64` ([`ScalarValue::Float`]). Higher bits are ignored,
    /// so `ScalarValue::decode(v.encode(Some(dt))?, dt)` is `v`'s value in `dt` for every
    /// value `encode` accepts.
    pub fn decode(bits: u64, dtype: DataType) -> ScalarValue {
        match dtype {
            DataType::Int8 => ScalarValue::Int((bits as i8).into()),
            DataType::Int16 => ScalarValue::Int((bits as i16).into()),
            DataType::Int32 => ScalarValue::Int((bits as i32).into()),
            DataType::Int64 => ScalarValue::Int((bits as i64).into()),
            DataType::Uint8 => ScalarValue::Int((bits as u8).into()),
            DataType::Uint16 => ScalarValue::Int((bits as u16).into()),
            DataType::Uint32 => ScalarValue::Int((bits as u32).into()),
            DataType::Uint64 => ScalarValue::Int(bits.into()),
            DataType::Float32 => ScalarValue::Float(f32::from_bits(bits as u32).into()),
            DataType::Float16 => ScalarValue::Float(f16::from_bits(bits as u16).into()),
            DataType::Bfloat16 => ScalarValue::Float(bf16::from_bits(bits as u16).into()),
            DataType::Float64 => ScalarValue::Float(f64::from_bits(bits)),
        }
    }
}

/// The bits of `x` rounded to the float `dtype` (nearest, ties to even), zero-extended;
/// `None` when a finite `x` rounds to infinity. `x` is exact or already rounded to odd at 53
/// bits, which a single later rounding to 24 bits or fewer treats as the exact value.
fn round_to(x: f64, dtype: DataType) -> Option<u64> {
    let (bits, infinite) = match dtype {
        DataType::Float16 => {
            let h = f16::from_f32(f64_to_f32_odd(x));
            (u64::from(h.to_bits()), h.is_infinite())
        }
        DataType::Bfloat16 => {
            let h = bf16::from_f32(f64_to_f32_odd(x));
            (u64::from(h.to_bits()), h.is_infinite())
        }
        DataType::Float64 => (x.to_bits(), x.is_infinite()),
        DataType::Float32 => {
            // Rust's `as` rounds to nearest, ties to even, straight from the f64.
            let s = x as f32;
            (u64::from(s.to_bits()), s.is_infinite())
        }
        _ => unreachable!("round_to is only asked about float dtypes"),
    };
    (!infinite || !x.is_finite()).then_some(bits)
}

/// `x` rounded to odd at `f32`'s precision: exact when `x` is an `f32` value, otherwise `x`
/// truncated toward zero with the last mantissa bit set. Infinities and NaN pass through;
/// a finite value beyond `f32::MAX` becomes `±f32::MAX` (odd), which rounds on to infinity.
fn f64_to_f32_odd(x: f64) -> f32 {
    let nearest = x as f32;
    if !x.is_finite() || f64::from(nearest) == x {
        return nearest;
    }
    // `nearest` is one step from the truncation at most; step back when it rounded away from
    // zero (the bit pattern orders magnitudes, so one less is one step toward zero).
    let truncated = if f64::from(nearest).abs() > x.abs() {
        f32::from_bits(nearest.to_bits() - 1)
    } else {
        nearest
    };
    f32::from_bits(truncated.to_bits() | 1)
}

/// `v` rounded to odd at `f64`'s 53 bits: exact when it fits, otherwise truncated toward zero
/// with the last kept bit set, so rounding it once more (to `f32` or narrower) is correct.
fn int_to_f64_odd(v: i128) -> f64 {
    let magnitude = v.unsigned_abs();
    let width = u128::BITS - magnitude.leading_zeros();
    let odd = if width <= f64::MANTISSA_DIGITS {
        magnitude
    } else {
        let shift = width - f64::MANTISSA_DIGITS;
        let sticky = u128::from(magnitude & ((1 << shift) - 1) != 0);
        ((magnitude >> shift) | sticky) << shift
    };
    // At most 53 significant bits: the conversion is exact.
    let x = odd as f64;
    if v < 0 {
        -x
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DataType::*;

    #[test]
    fn decode_inverts_encode() {
        let cases = [
            (ScalarValue::Float(0.5), Float32, ScalarValue::Float(0.5)),
            (
                ScalarValue::Float(-1.25),
                Float16,
                ScalarValue::Float(-1.25),
            ),
            (ScalarValue::Float(3.0), Bfloat16, ScalarValue::Float(3.0)),
            (ScalarValue::Int(-3), Int64, ScalarValue::Int(-3)),
            (ScalarValue::Int(-3), Int32, ScalarValue::Int(-3)),
            (ScalarValue::Int(-128), Int8, ScalarValue::Int(-128)),
            (ScalarValue::Int(-2), Int16, ScalarValue::Int(-2)),
            (ScalarValue::Int(255), Uint8, ScalarValue::Int(255)),
            (ScalarValue::Int(65535), Uint16, ScalarValue::Int(65535)),
            (ScalarValue::Int(7), Uint32, ScalarValue::Int(7)),
            (
                ScalarValue::Int(u64::MAX.into()),
                Uint64,
                ScalarValue::Int(u64::MAX.into()),
            ),
            (ScalarValue::Int(2), Float32, ScalarValue::Float(2.0)),
        ];
        for (value, dt, want) in cases {
            let bits = value.encode(Some(dt)).unwrap();
            assert_eq!(ScalarValue::decode(bits, dt), want, "{value:?} as {dt:?}");
        }
        // The raw bits of the two's complement and of an f32, as a sub task receives them.
        assert_eq!(
            ScalarValue::decode(1_056_964_608, Float32),
            ScalarValue::Float(0.5)
        );
        assert_eq!(
            ScalarValue::decode(18_446_744_073_709_551_613, Int64),
            ScalarValue::Int(-3)
        );
        // Rounded values come back as the dtype holds them.
        let bits = ScalarValue::Float(0.1).encode(Some(Float32)).unwrap();
        assert_eq!(
            ScalarValue::decode(bits, Float32),
            ScalarValue::Float(f64::from(0.1f32))
        );
    }

    fn enc(v: ScalarValue, dt: Option<DataType>) -> Result<u64, ScalarError> {
        v.encode(dt)
    }

    /// `value dtype` of an out-of-range refusal.
    fn out(v: ScalarValue, dt: Option<DataType>) -> String {
        match enc(v, dt) {
            Err(ScalarError::OutOfRange { value, dtype, .. }) => {
                format!("{value} {}", target_name(dtype))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn scalars_encode_per_dtype() {
        assert_eq!(enc(ScalarValue::Float(1.0), None), Ok(0x3F80_0000));
        assert_eq!(enc(ScalarValue::Float(1.5), Some(Float32)), Ok(0x3FC0_0000));
        // f64 keeps every bit; an integer converts exactly; decode inverts it.
        assert_eq!(
            enc(ScalarValue::Float(0.1), Some(Float64)),
            Ok(0.1f64.to_bits())
        );
        assert_eq!(
            enc(ScalarValue::Int(3), Some(Float64)),
            Ok(3.0f64.to_bits())
        );
        assert_eq!(
            ScalarValue::decode(1e-300f64.to_bits(), Float64),
            ScalarValue::Float(1e-300)
        );
        assert_eq!(enc(ScalarValue::Int(2), Some(Float32)), Ok(0x4000_0000));
        assert_eq!(enc(ScalarValue::Int(-1), Some(Int32)), Ok(u64::MAX));
        assert_eq!(enc(ScalarValue::Int(-3), Some(Int64)), Ok(-3i64 as u64));
        assert_eq!(enc(ScalarValue::Int(-3), Some(Int8)), Ok(u64::MAX - 2));
        assert_eq!(enc(ScalarValue::Int(-1), None), Ok(u64::MAX));
        assert_eq!(enc(ScalarValue::Int(255), Some(Uint8)), Ok(255));
        assert_eq!(
            enc(ScalarValue::Int(u64::MAX.into()), Some(Uint64)),
            Ok(u64::MAX)
        );
        assert_eq!(
            enc(ScalarValue::Int(i64::MIN.into()), Some(Int64)),
            Ok(1 << 63)
        );
        assert_eq!(enc(ScalarValue::Float(1.0), Some(Float16)), Ok(0x3C00));
        assert_eq!(enc(ScalarValue::Float(1.0), Some(Bfloat16)), Ok(0x3F80));
        assert_eq!(enc(ScalarValue::Float(-2.5), Some(Bfloat16)), Ok(0xC020));
        assert_eq!(
            enc(ScalarValue::Bits(u64::MAX - 1), Some(Uint8)),
            Ok(u64::MAX - 1)
        );
        assert!(matches!(
            enc(ScalarValue::Float(1.5), Some(Int32)),
            Err(ScalarError::FloatForInteger { .. })
        ));
        // A float for an integer dtype is refused even when it is integral.
        assert!(matches!(
            enc(ScalarValue::Float(3.0), Some(Uint8)),
            Err(ScalarError::FloatForInteger { .. })
        ));
    }

    #[test]
    fn out_of_range_values_are_refused_naming_value_dtype_and_range() {
        assert_eq!(out(ScalarValue::Int(256), Some(Uint8)), "256 u8");
        assert_eq!(
            out(ScalarValue::Int(1 << 31), Some(Int32)),
            "2147483648 i32"
        );
        assert_eq!(
            out(ScalarValue::Int(1 << 64), None),
            "18446744073709551616 64 bits"
        );
        assert_eq!(
            out(ScalarValue::Int(i128::from(i64::MIN) - 1), None),
            "-9223372036854775809 64 bits"
        );
        assert_eq!(out(ScalarValue::Float(1e6), Some(Float16)), "1000000.0 f16");
        assert_eq!(out(ScalarValue::Float(1e39), Some(Float32)), "1e39 f32");
        assert_eq!(out(ScalarValue::Float(1e39), None), "1e39 f32");
        assert_eq!(out(ScalarValue::Float(1e39), Some(Bfloat16)), "1e39 bf16");
        assert_eq!(out(ScalarValue::Float(1e300), Some(Float32)), "1e300 f32");
        assert_eq!(out(ScalarValue::Int(70000), Some(Float16)), "70000 f16");
        let message = |v: ScalarValue, dt| enc(v, dt).unwrap_err().to_string();
        assert_eq!(
            message(ScalarValue::Int(300), Some(Uint8)),
            "300 is out of range for u8 (0..=255)"
        );
        assert_eq!(
            message(ScalarValue::Int(-129), Some(Int8)),
            "-129 is out of range for i8 (-128..=127)"
        );
        assert_eq!(
            message(ScalarValue::Int(-1), Some(Uint32)),
            "-1 is out of range for u32 (0..=4294967295; it is unsigned)"
        );
        assert_eq!(
            message(ScalarValue::Int(1 << 64), None),
            "18446744073709551616 is out of range for 64 bits \
             (-9223372036854775808..=18446744073709551615)"
        );
        assert_eq!(
            message(ScalarValue::Float(70000.0), Some(Float16)),
            "70000.0 is out of range for f16 (|x| <= 65504)"
        );
        assert_eq!(
            message(ScalarValue::Float(1e39), Some(Float32)),
            "1e39 is out of range for f32 (|x| <= 3.4028235e38)"
        );
        assert_eq!(
            message(ScalarValue::Float(1e39), Some(Bfloat16)),
            "1e39 is out of range for bf16 (|x| <= 3.3895314e38)"
        );
        assert_eq!(
            message(ScalarValue::Float(1.5), Some(Int32)),
            "scalar 1.5 is a float but the signature declares i32"
        );
    }

    #[test]
    fn parsers_name_the_value_as_written() {
        let e = ScalarError::out_of_range("1e400", Float32);
        assert_eq!(
            e.to_string(),
            "1e400 is out of range for f32 (|x| <= 3.4028235e38)"
        );
        assert_eq!(
            ScalarError::out_of_range("-7", Uint8).to_string(),
            "-7 is out of range for u8 (0..=255; it is unsigned)"
        );
        let e = enc(ScalarValue::Float(70000.0), Some(Float16)).unwrap_err();
        assert_eq!(
            e.with_value("7e4").to_string(),
            "7e4 is out of range for f16 (|x| <= 65504)"
        );
    }

    #[test]
    fn infinities_and_nan_pass() {
        assert_eq!(
            enc(ScalarValue::Float(f64::INFINITY), Some(Float16)),
            Ok(0x7C00)
        );
        assert_eq!(
            enc(ScalarValue::Float(f64::NEG_INFINITY), Some(Float32)),
            Ok(u64::from(f32::NEG_INFINITY.to_bits()))
        );
        assert_eq!(
            enc(ScalarValue::Float(f64::NEG_INFINITY), Some(Bfloat16)),
            Ok(0xFF80)
        );
        for dt in [Float32, Float16, Bfloat16] {
            let bits = enc(ScalarValue::Float(f64::NAN), Some(dt)).unwrap();
            let nan = match dt {
                Float32 => f32::from_bits(bits as u32).is_nan(),
                Float16 => f16::from_bits(bits as u16).is_nan(),
                _ => bf16::from_bits(bits as u16).is_nan(),
            };
            assert!(nan, "{dt}: {bits:#x}");
        }
    }

    #[test]
    fn floats_round_to_nearest_even() {
        let f16_bits = |x: f64| enc(ScalarValue::Float(x), Some(Float16));
        // Ties to even; the top of f16 rounds down, past it is out of range.
        assert_eq!(f16_bits(1.0 + 2f64.powi(-11)), Ok(0x3C00));
        assert_eq!(f16_bits(1.0 + 3.0 * 2f64.powi(-11)), Ok(0x3C02));
        assert_eq!(f16_bits(65504.0), Ok(0x7BFF));
        assert_eq!(f16_bits(65519.0), Ok(0x7BFF));
        assert!(f16_bits(65520.0).is_err());
        assert_eq!(f16_bits(2f64.powi(-25)), Ok(0));
        assert_eq!(f16_bits(2f64.powi(-25) * 1.5), Ok(1));
        assert_eq!(f16_bits(-2f64.powi(-30)), Ok(0x8000));
        let bf16_bits = |x: f64| enc(ScalarValue::Float(x), Some(Bfloat16));
        assert_eq!(bf16_bits(1.0 + 2f64.powi(-8)), Ok(0x3F80));
        assert_eq!(bf16_bits(1.0 + 3.0 * 2f64.powi(-8)), Ok(0x3F82));
        // Below f32's smallest subnormal: rounds to a signed zero.
        assert_eq!(bf16_bits(-1e-300), Ok(0x8000));
    }

    /// The value of each finite, non-negative bit pattern of a 16-bit float dtype, in order.
    fn ladder(dt: DataType) -> Vec<(u16, f64)> {
        (0..=u16::MAX)
            .map(|h| match dt {
                Float16 => (h, f16::from_bits(h).to_f64()),
                _ => (h, bf16::from_bits(h).to_f64()),
            })
            .take_while(|(_, v)| v.is_finite())
            .collect()
    }

    /// One f64 step up or down from `x` (> 0).
    fn step(x: f64, up: bool) -> f64 {
        f64::from_bits(if up { x.to_bits() + 1 } else { x.to_bits() - 1 })
    }

    /// Every midpoint between neighbouring f16 (bf16) values rounds to the even one, and the
    /// f64 just above or below it to the nearer one: the result of a single rounding, which
    /// rounding through f32 (or truncating the f64 first) gets wrong just above a midpoint.
    #[test]
    fn every_f16_and_bf16_midpoint_rounds_once() {
        for dt in [Float16, Bfloat16] {
            let values = ladder(dt);
            for pair in values.windows(2) {
                let ((lo_bits, lo), (hi_bits, hi)) = (pair[0], pair[1]);
                let mid = (lo + hi) / 2.0; // exact in f64
                let even = if lo_bits % 2 == 0 { lo_bits } else { hi_bits };
                let got = |x: f64| enc(ScalarValue::Float(x), Some(dt)).unwrap();
                assert_eq!(got(mid), u64::from(even), "{dt} midpoint {mid:e}");
                assert_eq!(
                    got(step(mid, false)),
                    u64::from(lo_bits),
                    "{dt} below {mid:e}"
                );
                assert_eq!(
                    got(step(mid, true)),
                    u64::from(hi_bits),
                    "{dt} above {mid:e}"
                );
                let sign = 0x8000;
                assert_eq!(
                    got(-step(mid, true)),
                    u64::from(hi_bits | sign),
                    "{dt} below -{mid:e}"
                );
            }
        }
    }

    #[test]
    fn wide_integers_round_once() {
        // 2^60 + 2^36 + 1 lies just above the f32 midpoint 2^60 + 2^36; through f64 it would
        // become the midpoint itself and round down to even.
        let v = (1i128 << 60) + (1 << 36) + 1;
        let want = f64::powi(2.0, 60) + f64::powi(2.0, 37);
        assert_eq!(
            enc(ScalarValue::Int(v), Some(Float32)),
            Ok(u64::from((want as f32).to_bits()))
        );
        assert_eq!(
            enc(ScalarValue::Int(-v), Some(Float32)),
            Ok(u64::from((-want as f32).to_bits()))
        );
        assert_eq!(
            enc(ScalarValue::Int((1 << 60) + (1 << 36)), Some(Float32)),
            Ok(u64::from((f64::powi(2.0, 60) as f32).to_bits()))
        );
        // The same for bf16 (8 significant bits): 2^60 + 2^52 + 1 rounds up to 2^60 + 2^53.
        let v = (1i128 << 60) + (1 << 52) + 1;
        let want = bf16::from_f64(f64::powi(2.0, 60) + f64::powi(2.0, 53));
        assert_eq!(
            enc(ScalarValue::Int(v), Some(Bfloat16)),
            Ok(u64::from(want.to_bits()))
        );
        assert_eq!(
            enc(ScalarValue::Int(i128::MAX), Some(Float32)),
            Ok(u64::from((f64::powi(2.0, 127) as f32).to_bits()))
        );
        assert_eq!(
            enc(ScalarValue::Int(i128::MIN), Some(Bfloat16)),
            Ok(u64::from(bf16::from_f64(-f64::powi(2.0, 127)).to_bits()))
        );
    }

    #[test]
    fn rounding_to_odd_keeps_what_the_last_rounding_needs() {
        assert_eq!(f64_to_f32_odd(1.5), 1.5);
        let just_above_one = 1.0 + 2f64.powi(-40);
        assert_eq!(f64_to_f32_odd(just_above_one).to_bits(), 1f32.to_bits() | 1);
        assert_eq!(
            f64_to_f32_odd(-just_above_one).to_bits(),
            (-1f32).to_bits() | 1
        );
        let just_below_two = 2.0 - 2f64.powi(-40);
        assert_eq!(f64_to_f32_odd(just_below_two).to_bits(), 2f32.to_bits() - 1);
        assert_eq!(f64_to_f32_odd(1e300), f32::MAX);
        assert_eq!(f64_to_f32_odd(1e-300).to_bits(), 1);
        assert_eq!(f64_to_f32_odd(-1e-300).to_bits(), (-0f32).to_bits() | 1);
        assert!(f64_to_f32_odd(f64::NAN).is_nan());
        assert_eq!(int_to_f64_odd((1 << 53) + 1), f64::powi(2.0, 53) + 2.0);
        assert_eq!(int_to_f64_odd((1 << 54) + 2), f64::powi(2.0, 54) + 4.0);
        assert_eq!(int_to_f64_odd(-(1 << 54) - 1), -(f64::powi(2.0, 54) + 4.0));
        assert_eq!(int_to_f64_odd((1 << 54) + 4), f64::powi(2.0, 54) + 4.0);
        assert_eq!(int_to_f64_odd(1 << 54), f64::powi(2.0, 54));
    }
}
