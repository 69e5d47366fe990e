//! A callable's signature: the positional list of its arguments with their direction, dtype
//! and (optionally) shape. It fixes argument order, decides which host tensors are staged to
//! the device and copied back (`In` → copied in; `Out` → copied back; `InOut` → both), and
//! lets the host reject mismatched arguments before anything touches the device.
//!
//! The argument check itself lives in the crate's `args` module; its public half — what a
//! binding offers ([`ArgOffer`], [`HostMemory`], [`ScalarValue`]), how each argument travels
//! ([`Passing`], from [`Signature::check_offers`]) and why arguments are refused
//! ([`ArgError`], [`ArgProblem`], [`ScalarError`]) — is re-exported here, with the one scalar
//! encoding ([`ScalarValue::encode`], [`is_float_dtype`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use simpler_abi::DataType;

/// Direction of one argument, as the signature declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgDirection {
    /// A tensor read by the run: copied to the device, never copied back.
    In,
    /// A tensor written by the run: copied back to the host after the run.
    Out,
    /// A tensor read and written: copied in and copied back.
    #[serde(rename = "inout")]
    InOut,
    /// A scalar passed by value as 64 raw bits.
    Scalar,
}

impl ArgDirection {
    /// True for the tensor directions.
    pub fn is_tensor(self) -> bool {
        !matches!(self, ArgDirection::Scalar)
    }
    /// True when the host copies the tensor to the device before the run.
    pub fn copies_in(self) -> bool {
        matches!(self, ArgDirection::In | ArgDirection::InOut)
    }
    /// True when the host copies the tensor back after the run.
    pub fn copies_back(self) -> bool {
        matches!(self, ArgDirection::Out | ArgDirection::InOut)
    }
    /// `"in"`, `"out"`, `"inout"` or `"scalar"`: the names of manifests, bundles and
    /// bindings, which [`str::parse`] reads back.
    pub fn name(self) -> &'static str {
        match self {
            ArgDirection::In => "in",
            ArgDirection::Out => "out",
            ArgDirection::InOut => "inout",
            ArgDirection::Scalar => "scalar",
        }
    }

    /// Every direction, in declaration order.
    pub const ALL: [ArgDirection; 4] = [
        ArgDirection::In,
        ArgDirection::Out,
        ArgDirection::InOut,
        ArgDirection::Scalar,
    ];
}

impl fmt::Display for ArgDirection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A direction name other than `in`, `out`, `inout` and `scalar`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown direction `{0}` (expected in, out, inout or scalar)")]
pub struct UnknownDirection(pub String);

impl FromStr for ArgDirection {
    type Err = UnknownDirection;

    /// Reads a name written by [`ArgDirection::name`] (exactly, lower case).
    fn from_str(name: &str) -> Result<ArgDirection, UnknownDirection> {
        ArgDirection::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| UnknownDirection(name.to_string()))
    }
}

/// Reads a dtype name written by [`DataType::name`] (`f32`, `i64`, ...), as signatures spell
/// dtypes.
///
/// # Errors
/// [`UnknownDtype`] listing the names there are.
pub fn dtype_from_name(name: &str) -> Result<DataType, UnknownDtype> {
    DataType::from_name(name).ok_or_else(|| UnknownDtype(name.to_string()))
}

/// A dtype name that is not one of [`DataType::name`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown dtype `{0}` (expected one of f32, f64, f16, bf16, i8, i16, i32, i64, u8, u16, u32, u64)"
)]
pub struct UnknownDtype(pub String);

/// One argument of a signature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgSpec {
    /// Name used on the command line and in messages (unique within the signature).
    pub name: String,
    /// Direction.
    pub direction: ArgDirection,
    /// Element type (for a scalar, the type of its value).
    #[serde(with = "dtype_name")]
    pub dtype: DataType,
    /// Exact shape the tensor must have; `None` accepts any shape. Always `None` for scalars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
}

/// A callable's signature: its arguments in positional order, tensors before scalars.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Signature {
    /// The arguments, tensors first.
    pub args: Vec<ArgSpec>,
}

/// Why a signature is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// Two arguments share a name.
    #[error("argument name `{0}` appears twice in the signature")]
    DuplicateName(String),
    /// An argument name is empty.
    #[error("argument {0} of the signature has an empty name")]
    EmptyName(usize),
    /// An argument name holds a character a command line cannot pass in `NAME=VALUE`.
    #[error(
        "argument name {0:?} holds `=`, whitespace or a control character; a name must be \
         usable as `--input NAME=FILE`"
    )]
    BadName(String),
    /// A tensor argument comes after a scalar.
    #[error("tensor argument `{0}` comes after a scalar; tensors must come first")]
    TensorAfterScalar(String),
    /// A scalar declares a shape.
    #[error("scalar argument `{0}` declares a shape")]
    ScalarWithShape(String),
    /// A tensor shape has no dimensions or more than five.
    #[error("tensor argument `{name}` has {ndims} dimensions; 1..=5 are allowed")]
    BadRank {
        /// The argument.
        name: String,
        /// Its number of dimensions.
        ndims: usize,
    },
    /// A tensor shape has a zero extent.
    #[error("tensor argument `{name}` has shape {shape:?}; every dimension must be at least 1")]
    EmptyShape {
        /// The argument.
        name: String,
        /// Its shape.
        shape: Vec<u64>,
    },
    /// Too many tensors or scalars for one orchestration entry.
    #[error("the signature has {count} {kind}; at most {max} are allowed")]
    TooMany {
        /// "tensors" or "scalars".
        kind: &'static str,
        /// How many it has.
        count: usize,
        /// The limit.
        max: usize,
    },
}

impl Signature {
    /// Builds and validates a signature.
    ///
    /// # Errors
    /// [`SignatureError`] naming the offending argument.
    pub fn new(args: Vec<ArgSpec>) -> Result<Signature, SignatureError> {
        let sig = Signature { args };
        sig.validate()?;
        Ok(sig)
    }

    /// Checks names, ordering, ranks and counts.
    ///
    /// # Errors
    /// [`SignatureError`] naming the offending argument.
    pub fn validate(&self) -> Result<(), SignatureError> {
        let mut seen_scalar = false;
        for (i, a) in self.args.iter().enumerate() {
            if a.name.is_empty() {
                return Err(SignatureError::EmptyName(i));
            }
            if a.name
                .chars()
                .any(|c| c == '=' || c.is_whitespace() || c.is_control())
            {
                return Err(SignatureError::BadName(a.name.clone()));
            }
            if self.args[..i].iter().any(|b| b.name == a.name) {
                return Err(SignatureError::DuplicateName(a.name.clone()));
            }
            if a.direction.is_tensor() {
                if seen_scalar {
                    return Err(SignatureError::TensorAfterScalar(a.name.clone()));
                }
                if let Some(shape) = &a.shape {
                    if shape.is_empty() || shape.len() > simpler_abi::MAX_TENSOR_DIMS {
                        return Err(SignatureError::BadRank {
                            name: a.name.clone(),
                            ndims: shape.len(),
                        });
                    }
                    if shape.contains(&0) {
                        return Err(SignatureError::EmptyShape {
                            name: a.name.clone(),
                            shape: shape.clone(),
                        });
                    }
                }
            } else {
                seen_scalar = true;
                if a.shape.is_some() {
                    return Err(SignatureError::ScalarWithShape(a.name.clone()));
                }
            }
        }
        let tensors = self.tensor_count();
        if tensors > simpler_abi::MAX_ORCH_TENSORS {
            return Err(SignatureError::TooMany {
                kind: "tensors",
                count: tensors,
                max: simpler_abi::MAX_ORCH_TENSORS,
            });
        }
        let scalars = self.args.len() - tensors;
        if scalars > simpler_abi::MAX_ORCH_SCALARS {
            return Err(SignatureError::TooMany {
                kind: "scalars",
                count: scalars,
                max: simpler_abi::MAX_ORCH_SCALARS,
            });
        }
        Ok(())
    }

    /// Number of tensor arguments.
    pub fn tensor_count(&self) -> usize {
        self.args.iter().filter(|a| a.direction.is_tensor()).count()
    }

    /// Position of the argument called `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.args.iter().position(|a| a.name == name)
    }
}

mod dtype_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use simpler_abi::DataType;

    pub fn serialize<S: Serializer>(dt: &DataType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(dt.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DataType, D::Error> {
        let name = String::deserialize(d)?;
        super::dtype_from_name(&name).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, d: ArgDirection) -> ArgSpec {
        ArgSpec {
            name: name.into(),
            direction: d,
            dtype: DataType::Float32,
            shape: if d.is_tensor() { Some(vec![4]) } else { None },
        }
    }

    #[test]
    fn rejects_each_malformed_shape() {
        use ArgDirection::*;
        let cases: Vec<(Vec<ArgSpec>, SignatureError)> = vec![
            (
                vec![t("a", In), t("a", Out)],
                SignatureError::DuplicateName("a".into()),
            ),
            (vec![t("", In)], SignatureError::EmptyName(0)),
            (vec![t("x=y", In)], SignatureError::BadName("x=y".into())),
            (vec![t("a b", In)], SignatureError::BadName("a b".into())),
            (vec![t("a\0", In)], SignatureError::BadName("a\0".into())),
            (
                vec![t("s", Scalar), t("a", In)],
                SignatureError::TensorAfterScalar("a".into()),
            ),
            (
                vec![ArgSpec {
                    shape: Some(vec![1]),
                    ..t("s", Scalar)
                }],
                SignatureError::ScalarWithShape("s".into()),
            ),
            (
                vec![ArgSpec {
                    shape: Some(vec![1; 6]),
                    ..t("a", In)
                }],
                SignatureError::BadRank {
                    name: "a".into(),
                    ndims: 6,
                },
            ),
            (
                vec![ArgSpec {
                    shape: Some(vec![4, 0]),
                    ..t("a", In)
                }],
                SignatureError::EmptyShape {
                    name: "a".into(),
                    shape: vec![4, 0],
                },
            ),
        ];
        for (args, want) in cases {
            assert_eq!(Signature::new(args).unwrap_err(), want);
        }
        assert!(Signature::new(vec![t("a", In), t("b", Out), t("s", Scalar)]).is_ok());
    }

    #[test]
    fn direction_names_round_trip_and_match_serde() {
        for d in ArgDirection::ALL {
            assert_eq!(d.name().parse::<ArgDirection>(), Ok(d));
            assert_eq!(d.to_string(), d.name());
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{}\"", d.name()));
        }
        let e = "InOut".parse::<ArgDirection>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown direction `InOut` (expected in, out, inout or scalar)"
        );
        assert_eq!(dtype_from_name("bf16"), Ok(DataType::Bfloat16));
        assert!(dtype_from_name("f128")
            .unwrap_err()
            .to_string()
            .starts_with("unknown dtype `f128` (expected one of f32"));
        let bad =
            serde_json::from_str::<ArgSpec>(r#"{"name":"a","direction":"in","dtype":"f128"}"#)
                .unwrap_err();
        assert!(bad.to_string().contains("unknown dtype `f128`"), "{bad}");
    }

    #[test]
    fn json_round_trip_uses_lowercase_names() {
        let sig = Signature::new(vec![
            t("a", ArgDirection::InOut),
            t("s", ArgDirection::Scalar),
        ])
        .unwrap();
        let text = serde_json::to_string(&sig).unwrap();
        assert!(
            text.contains("\"inout\"") && text.contains("\"f32\""),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Signature>(&text).unwrap(), sig);
    }
}
