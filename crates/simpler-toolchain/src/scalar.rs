//! Scalars of a [`DataType`] parsed from text into the 64 raw bits a run passes to the
//! orchestration (`simpler run --scalar`, Python's `parse_scalar`), and element values
//! decoded from their bits ([`crate::compare`]). The encoding itself — ranges, rounding,
//! out-of-range refusals — is the host's one encoding ([`ScalarValue::encode`]); this module
//! only reads text and decodes bits, and does not know about signatures or files.
//!
//! Text rules (`docs/toolchain.md` §6):
//! - integer dtypes take decimal integers (an optional sign, digits), encoded by the host;
//! - `f32`, `f16` and `bf16` take numbers as Rust's `f64` parser reads them, encoded by the
//!   host (rounded once to the nearest value of the dtype, ties to even). `inf`, `-inf` and
//!   `nan` spelt out are accepted; a finite number too large for the dtype, `1e400` included
//!   (which parses as infinity), is refused;
//! - `0x…` gives the raw bits directly; they must fit the dtype's width.
//!
//! Every refusal is a [`ScalarError`] naming the text and the dtype.

use half::{bf16, f16};
use simpler_abi::DataType;
use simpler_host::{is_float_dtype, ScalarError as HostScalarError, ScalarValue};

/// Why text is not a scalar of its dtype.
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
    /// Text that is not an integer, for an integer dtype.
    #[error("`{text}` is not an integer ({dtype} expected)")]
    NotAnInteger {
        /// The text given.
        text: String,
        /// The dtype.
        dtype: DataType,
    },
    /// A number the host's encoding refuses for the dtype (out of range: `300 is out of
    /// range for u8 (0..=255)`), naming it as written.
    #[error(transparent)]
    Encode(#[from] HostScalarError),
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
    // The host's refusals name the value as written here (`7e4`, `+300`), not as parsed.
    let encode = |v: ScalarValue| v.encode(Some(dtype)).map_err(|e| e.with_value(t).into());
    if is_float_dtype(dtype) {
        let v: f64 = t.parse().map_err(|_| ScalarError::NotANumber {
            text: t.to_string(),
            dtype,
        })?;
        // `1e400` parses as infinity: a finite number too large, not an infinity.
        if v.is_infinite() && !spells_infinity(t) {
            return Err(HostScalarError::out_of_range(t, dtype).into());
        }
        return encode(ScalarValue::Float(v));
    }
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ScalarError::NotAnInteger {
            text: t.to_string(),
            dtype,
        });
    }
    // Any run of digits longer than i128 holds is out of every range.
    let v: i128 = t
        .parse()
        .map_err(|_| HostScalarError::out_of_range(t, dtype))?;
    encode(ScalarValue::Int(v))
}

/// The value of one element of `dtype` held in the low bits of `bits` (little-endian
/// element bytes read as an integer), as `f64`: exact for every dtype except 64-bit
/// integers beyond 2^53.
pub fn decode(bits: u64, dtype: DataType) -> f64 {
    match dtype {
        DataType::Float32 => f64::from(f32::from_bits(bits as u32)),
        DataType::Float16 => f16::from_bits(bits as u16).to_f64(),
        DataType::Bfloat16 => bf16::from_bits(bits as u16).to_f64(),
        DataType::Float64 => f64::from_bits(bits),
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
        DataType::Float32 | DataType::Float16 | DataType::Bfloat16 | DataType::Float64 => {
            return None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str, dtype: DataType) -> ScalarError {
        parse(text, dtype).unwrap_err()
    }

    /// A number encoded by the host's encoding, which [`parse`] hands its numbers to.
    fn encode_float(value: f64, dtype: DataType) -> Result<u64, HostScalarError> {
        ScalarValue::Float(value).encode(Some(dtype))
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
                matches!(e, ScalarError::Encode(HostScalarError::OutOfRange { .. })),
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
    fn refusals_name_the_text_as_written() {
        assert_eq!(
            refused("7e4", DataType::Float16).to_string(),
            "7e4 is out of range for f16 (|x| <= 65504)"
        );
        assert_eq!(
            refused(" +300 ", DataType::Uint8).to_string(),
            "+300 is out of range for u8 (0..=255)"
        );
        assert_eq!(
            refused("-1e400", DataType::Float32).to_string(),
            "-1e400 is out of range for f32 (|x| <= 3.4028235e38)"
        );
        assert_eq!(
            refused(
                "-99999999999999999999999999999999999999999",
                DataType::Uint8
            )
            .to_string(),
            "-99999999999999999999999999999999999999999 is out of range for u8 (0..=255; it is \
             unsigned)"
        );
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
