//! Scalars of a [`DataType`] as the 64 raw bits a run passes to the orchestration, and
//! element values decoded from their bits. This module owns the one encoding, used by
//! `simpler run --scalar`, the Python extension and [`crate::compare`]; it does not know
//! about signatures or files.
//!
//! Encoding rules (`docs/toolchain.md`, "Scalars"):
//! - integer dtypes take integers in the dtype's range; signed values are sign-extended to
//!   64 bits, unsigned ones zero-extended;
//! - `f32`, `f16` and `bf16` take numbers, rounded to the nearest value of the dtype (ties to
//!   even, straight from the decimal or `f64` value: `half` for `f16`/`bf16`); the bits are
//!   zero-extended. `inf`, `-inf` and `nan` spelt out are accepted; a finite number that
//!   would round to infinity (`1e39` or `1e400` as `f32`, `70000` as `f16`) is refused;
//! - in text, `0x…` gives the raw bits directly; they must fit the dtype's width.
//!
//! Every refusal is a [`ScalarError`] naming the text and the dtype.

use half::{bf16, f16};
use simpler_abi::DataType;

/// Why a value is not a scalar of its dtype.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScalarError {
    /// `0x…` text whose digits are not hexadecimal (or overflow 64 bits).
    #[error("bad hex bits `{text}`: {reason}")]
    BadBits {
        /// The text given.
        text: String,
        /// What is wrong with the digits.
        reason: String,
    },
    /// `0x…` bits wider than the dtype.
    #[error("raw bits {text} do not fit in {width}-bit {dtype}")]
    BitsTooWide {
        /// The text given.
        text: String,
        /// The dtype's width in bits.
        width: usize,
        /// The dtype.
        dtype: DataType,
    },
    /// Text that is not a number, for a float dtype.
    #[error("`{text}` is not a number ({dtype} expected)")]
    NotANumber {
        /// The text given.
        text: String,
        /// The dtype.
        dtype: DataType,
    },
    /// A value that is not an integer, for an integer dtype.
    #[error("`{text}` is not an integer ({dtype} expected)")]
    NotAnInteger {
        /// The text (or value) given.
        text: String,
        /// The dtype.
        dtype: DataType,
    },
    /// A value outside the dtype's range.
    #[error("{text} is out of range for {dtype} ({range})")]
    OutOfRange {
        /// The text (or value) given.
        text: String,
        /// The dtype.
        dtype: DataType,
        /// The range the dtype holds, e.g. `0..=255` or `|x| <= 65504`.
        range: String,
    },
}

/// True for the floating-point dtypes (`f32`, `f16`, `bf16`).
pub fn is_float(dtype: DataType) -> bool {
    matches!(
        dtype,
        DataType::Float32 | DataType::Float16 | DataType::Bfloat16
    )
}

/// The inclusive range of an integer dtype, `None` for a float dtype.
pub fn int_range(dtype: DataType) -> Option<(i128, i128)> {
    Some(match dtype {
        DataType::Int8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::Int16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => (i32::MIN.into(), i32::MAX.into()),
        DataType::Int64 => (i64::MIN.into(), i64::MAX.into()),
        DataType::Uint8 => (0, u8::MAX.into()),
        DataType::Uint16 => (0, u16::MAX.into()),
        DataType::Uint32 => (0, u32::MAX.into()),
        DataType::Uint64 => (0, u64::MAX.into()),
        DataType::Float32 | DataType::Float16 | DataType::Bfloat16 => return None,
    })
}

/// The largest finite value of a float dtype, as text for messages.
fn float_max(dtype: DataType) -> String {
    match dtype {
        DataType::Float16 => f16::MAX.to_string(),
        DataType::Bfloat16 => format!("{:e}", f32::from(bf16::MAX)),
        _ => format!("{:e}", f32::MAX),
    }
}

/// Encodes an integer as a scalar of `dtype`: range-checked for an integer dtype (signed
/// values sign-extended), rounded for a float dtype.
///
/// # Errors
/// [`ScalarError::OutOfRange`] when `value` is outside the dtype's range.
pub fn encode_int(value: i128, dtype: DataType) -> Result<u64, ScalarError> {
    match int_range(dtype) {
        Some((min, max)) => {
            if value < min || value > max {
                return Err(ScalarError::OutOfRange {
                    text: value.to_string(),
                    dtype,
                    range: format!("{min}..={max}"),
                });
            }
            // Two's complement truncation: sign extension for the signed dtypes.
            Ok(value as i64 as u64)
        }
        None => encode_float_text(value as f64, &value.to_string(), dtype),
    }
}

/// Encodes a number as a scalar of `dtype`: rounded to nearest even for a float dtype; for
/// an integer dtype it must be integral and in range.
///
/// # Errors
/// [`ScalarError::OutOfRange`] for a finite value that rounds to infinity or lies outside an
/// integer dtype's range, [`ScalarError::NotAnInteger`] for a fraction (or NaN, infinity)
/// given to an integer dtype.
pub fn encode_float(value: f64, dtype: DataType) -> Result<u64, ScalarError> {
    let text = value.to_string();
    if is_float(dtype) {
        return encode_float_text(value, &text, dtype);
    }
    if !value.is_finite() || value.fract() != 0.0 {
        return Err(ScalarError::NotAnInteger { text, dtype });
    }
    let (min, max) = int_range(dtype).expect("an integer dtype has a range");
    if value < min as f64 || value > max as f64 {
        return Err(ScalarError::OutOfRange {
            text,
            dtype,
            range: format!("{min}..={max}"),
        });
    }
    encode_int(value as i128, dtype)
}

/// Rounds `value` to the float `dtype`; `text` names it in errors.
fn encode_float_text(value: f64, text: &str, dtype: DataType) -> Result<u64, ScalarError> {
    let (bits, inf) = match dtype {
        DataType::Float16 => {
            let h = f16::from_f64(value);
            (u64::from(h.to_bits()), h.is_infinite())
        }
        DataType::Bfloat16 => {
            let h = bf16::from_f64(value);
            (u64::from(h.to_bits()), h.is_infinite())
        }
        _ => {
            let f = value as f32;
            (u64::from(f.to_bits()), f.is_infinite())
        }
    };
    if inf && value.is_finite() {
        return Err(ScalarError::OutOfRange {
            text: text.to_string(),
            dtype,
            range: format!("|x| <= {}", float_max(dtype)),
        });
    }
    Ok(bits)
}

/// True when `t` spells an infinity out (`inf`, `+Infinity`, ...), as opposed to a number
/// too large for `f64`.
fn spells_infinity(t: &str) -> bool {
    let body = t.trim_start_matches(['+', '-']).to_ascii_lowercase();
    body == "inf" || body == "infinity"
}

/// Parses `text` as a scalar of `dtype` into the 64 bits passed to the orchestration:
/// an integer for an integer dtype, a number for a float dtype, or `0x…` raw bits.
///
/// # Errors
/// [`ScalarError`] saying why the text is not a value of `dtype`.
pub fn parse(text: &str, dtype: DataType) -> Result<u64, ScalarError> {
    let t = text.trim();
    let width = dtype.size_bytes() * 8;
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        let v = u64::from_str_radix(hex, 16).map_err(|e| ScalarError::BadBits {
            text: t.to_string(),
            reason: e.to_string(),
        })?;
        if width < 64 && v >> width != 0 {
            return Err(ScalarError::BitsTooWide {
                text: t.to_string(),
                width,
                dtype,
            });
        }
        return Ok(v);
    }
    if is_float(dtype) {
        let v: f64 = t.parse().map_err(|_| ScalarError::NotANumber {
            text: t.to_string(),
            dtype,
        })?;
        // `1e400` parses as infinity: a finite number too large, not an infinity.
        if v.is_infinite() && !spells_infinity(t) {
            return Err(ScalarError::OutOfRange {
                text: t.to_string(),
                dtype,
                range: format!("|x| <= {}", float_max(dtype)),
            });
        }
        return encode_float_text(v, t, dtype);
    }
    let (min, max) = int_range(dtype).expect("an integer dtype has a range");
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ScalarError::NotAnInteger {
            text: t.to_string(),
            dtype,
        });
    }
    let out_of_range = || ScalarError::OutOfRange {
        text: t.to_string(),
        dtype,
        range: if min == 0 && t.starts_with('-') {
            format!("{min}..={max}; it is unsigned")
        } else {
            format!("{min}..={max}")
        },
    };
    // Any run of digits longer than i128 holds is out of every range.
    let v: i128 = t.parse().map_err(|_| out_of_range())?;
    if v < min || v > max {
        return Err(out_of_range());
    }
    encode_int(v, dtype)
}

/// The value of one element of `dtype` held in the low bits of `bits` (little-endian
/// element bytes read as an integer), as `f64`: exact for every dtype except 64-bit
/// integers beyond 2^53.
pub fn decode(bits: u64, dtype: DataType) -> f64 {
    match dtype {
        DataType::Float32 => f64::from(f32::from_bits(bits as u32)),
        DataType::Float16 => f16::from_bits(bits as u16).to_f64(),
        DataType::Bfloat16 => bf16::from_bits(bits as u16).to_f64(),
        _ => decode_int(bits, dtype).expect("an integer dtype") as f64,
    }
}

/// The value of one element of an integer `dtype` held in the low bits of `bits`; `None`
/// for a float dtype.
pub fn decode_int(bits: u64, dtype: DataType) -> Option<i128> {
    Some(match dtype {
        DataType::Int8 => i128::from(bits as u8 as i8),
        DataType::Int16 => i128::from(bits as u16 as i16),
        DataType::Int32 => i128::from(bits as u32 as i32),
        DataType::Int64 => i128::from(bits as i64),
        DataType::Uint8 => i128::from(bits as u8),
        DataType::Uint16 => i128::from(bits as u16),
        DataType::Uint32 => i128::from(bits as u32),
        DataType::Uint64 => i128::from(bits),
        DataType::Float32 | DataType::Float16 | DataType::Bfloat16 => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str, dtype: DataType) -> ScalarError {
        parse(text, dtype).unwrap_err()
    }

    #[test]
    fn integers_parse_per_dtype() {
        assert_eq!(parse("-1", DataType::Int32), Ok(u64::MAX));
        assert_eq!(parse("255", DataType::Uint8), Ok(255));
        assert_eq!(parse("+7", DataType::Int8), Ok(7));
        assert_eq!(
            parse(" 18446744073709551615 ", DataType::Uint64),
            Ok(u64::MAX)
        );
        assert_eq!(parse("-9223372036854775808", DataType::Int64), Ok(1 << 63));
        assert!(matches!(
            refused("1.5", DataType::Int64),
            ScalarError::NotAnInteger { .. }
        ));
        assert_eq!(
            refused("1.5", DataType::Int64).to_string(),
            "`1.5` is not an integer (i64 expected)"
        );
        assert!(matches!(
            refused("", DataType::Int64),
            ScalarError::NotAnInteger { .. }
        ));
    }

    #[test]
    fn out_of_range_values_are_refused_not_wrapped() {
        for (text, dtype) in [
            ("300", DataType::Uint8),
            ("256", DataType::Uint8),
            ("-129", DataType::Int8),
            ("1e39", DataType::Float32),
            ("1e400", DataType::Float32),
            ("-1e400", DataType::Float32),
            ("1e400", DataType::Bfloat16),
            ("70000", DataType::Float16),
            ("18446744073709551616", DataType::Uint64),
            ("9223372036854775808", DataType::Int64),
            (
                "999999999999999999999999999999999999999999",
                DataType::Int64,
            ),
            ("-1", DataType::Uint32),
        ] {
            let e = refused(text, dtype);
            assert!(
                matches!(e, ScalarError::OutOfRange { .. }),
                "{text} as {dtype}: {e:?}"
            );
            assert!(e.to_string().contains("out of range"), "{e}");
            assert!(e.to_string().contains(text), "{e}");
        }
        assert_eq!(
            refused("300", DataType::Uint8).to_string(),
            "300 is out of range for u8 (0..=255)"
        );
        assert!(refused("-1", DataType::Uint8)
            .to_string()
            .contains("unsigned"));
        assert!(refused("70000", DataType::Float16)
            .to_string()
            .contains("|x| <= 65504"));
    }

    #[test]
    fn floats_round_to_nearest_even() {
        assert_eq!(parse("1.0", DataType::Float32), Ok(0x3f80_0000));
        assert_eq!(parse("1.0", DataType::Float16), Ok(0x3c00));
        assert_eq!(parse("1.0", DataType::Bfloat16), Ok(0x3f80));
        assert_eq!(parse("-2.5", DataType::Bfloat16), Ok(0xc020));
        // Ties to even; the top of f16 rounds down, past it is out of range.
        assert_eq!(
            encode_float(1.0 + 2f64.powi(-11), DataType::Float16),
            Ok(0x3c00)
        );
        assert_eq!(
            encode_float(1.0 + 3.0 * 2f64.powi(-11), DataType::Float16),
            Ok(0x3c02)
        );
        assert_eq!(parse("65519", DataType::Float16), Ok(0x7bff));
        assert!(parse("65520", DataType::Float16).is_err());
        assert_eq!(encode_float(2f64.powi(-25), DataType::Float16), Ok(0));
        assert_eq!(encode_float(2f64.powi(-25) * 1.5, DataType::Float16), Ok(1));
        // Explicit infinities and NaN pass.
        assert_eq!(
            parse("inf", DataType::Float32),
            Ok(u64::from(f32::INFINITY.to_bits()))
        );
        assert_eq!(parse("-Infinity", DataType::Float16), Ok(0xfc00));
        let nan = parse("nan", DataType::Bfloat16).unwrap();
        assert!(bf16::from_bits(nan as u16).is_nan());
        assert!(matches!(
            refused("x", DataType::Float32),
            ScalarError::NotANumber { .. }
        ));
    }

    #[test]
    fn raw_bits() {
        assert_eq!(parse("0x3c00", DataType::Float16), Ok(0x3c00));
        assert!(matches!(
            refused("0x10000", DataType::Float16),
            ScalarError::BitsTooWide { width: 16, .. }
        ));
        assert_eq!(parse("0xffffffffffffffff", DataType::Uint64), Ok(u64::MAX));
        assert!(matches!(
            refused("0xzz", DataType::Uint64),
            ScalarError::BadBits { .. }
        ));
    }

    #[test]
    fn encode_from_numbers() {
        assert_eq!(encode_int(-3, DataType::Int64), Ok(-3i64 as u64));
        assert_eq!(encode_int(-3, DataType::Int8), Ok(u64::MAX - 2));
        assert!(encode_int(300, DataType::Uint8).is_err());
        assert_eq!(encode_int(2, DataType::Float32), Ok(0x4000_0000));
        assert_eq!(encode_float(3.0, DataType::Uint8), Ok(3));
        assert!(matches!(
            encode_float(3.5, DataType::Uint8),
            Err(ScalarError::NotAnInteger { .. })
        ));
        assert!(matches!(
            encode_float(1e10, DataType::Int32),
            Err(ScalarError::OutOfRange { .. })
        ));
        assert!(matches!(
            encode_float(1e300, DataType::Float32),
            Err(ScalarError::OutOfRange { .. })
        ));
        assert_eq!(
            encode_float(f64::NEG_INFINITY, DataType::Float32),
            Ok(u64::from(f32::NEG_INFINITY.to_bits()))
        );
    }

    #[test]
    fn every_f16_and_bf16_value_round_trips() {
        for h in 0..=u16::MAX {
            for dtype in [DataType::Float16, DataType::Bfloat16] {
                let v = decode(u64::from(h), dtype);
                let back = encode_float(v, dtype).unwrap();
                if v.is_nan() {
                    assert!(decode(back, dtype).is_nan());
                } else {
                    assert_eq!(back, u64::from(h), "{dtype} {h:#06x} -> {v}");
                }
            }
        }
    }

    #[test]
    fn decode_integers_with_their_sign() {
        assert_eq!(decode_int(0xff, DataType::Int8), Some(-1));
        assert_eq!(decode_int(0xff, DataType::Uint8), Some(255));
        assert_eq!(
            decode_int(u64::MAX, DataType::Uint64),
            Some(u64::MAX.into())
        );
        assert_eq!(decode_int(0, DataType::Float32), None);
        assert_eq!(decode(0x3c00, DataType::Float16), 1.0);
        assert_eq!(decode(0x3f80, DataType::Bfloat16), 1.0);
        assert_eq!(decode(0xc020_0000, DataType::Float32), -2.5);
    }
}
