//! `simpler run`: running a callable once on `.npy` inputs. This module owns turning the
//! command line into a [`PreparedRun`] — the callable (built in memory from an example
//! directory, or read from a bundle file) and one [`ArgValue`] per signature argument, every
//! name, direction, dtype and shape checked against the signature before anything runs — and,
//! after the run, writing the outputs (atomically, only after a successful run) and comparing
//! them with reference files (`allclose`).
//!
//! Matching rules:
//! - every `in`/`inout` argument needs exactly one `--input NAME=FILE.npy`;
//! - an `out`/`inout` argument may have one `--output NAME=FILE.npy` and one
//!   `--check NAME=REFERENCE.npy`;
//! - every `scalar` argument needs exactly one `--scalar NAME=VALUE`;
//! - names must exist, suit the flag (an `out` argument given with `--input` is told to use
//!   `--output`/`--check`) and appear once per flag;
//! - a file's dtype and shape must equal the signature's (a signature without a shape accepts
//!   any rank 1..=5). A `bf16` argument takes a `uint16` file holding the raw bits;
//! - an `out` argument's shape is the signature's, else its `--check` reference's; with
//!   neither, the run is refused (the host must know what to allocate).
//!
//! Scalar values: integers in the argument's range (signed ones are sign-extended to 64
//! bits), floats for `f32`/`f16`/`bf16` (rounded to nearest even; the bits are
//! zero-extended), or `0x…` raw bits that fit the type's width.

use std::path::{Path, PathBuf};
use std::time::Duration;

use simpler_abi::DataType;
use simpler_host::{ArgDirection, ArgSpec, Bundle, BundleError, CallableSpec};

use crate::build::{self, BuildError};
use crate::npy::{self, NpyArray, NpyError};

/// What `simpler run` was asked to do, as parsed from the command line.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// A bundle file, or an example directory (or its `simpler.toml`).
    pub target: PathBuf,
    /// `--input NAME=FILE`.
    pub inputs: Vec<(String, PathBuf)>,
    /// `--output NAME=FILE`.
    pub outputs: Vec<(String, PathBuf)>,
    /// `--check NAME=FILE`.
    pub checks: Vec<(String, PathBuf)>,
    /// `--scalar NAME=VALUE`.
    pub scalars: Vec<(String, String)>,
    /// Relative tolerance of `--check`.
    pub rtol: f64,
    /// Absolute tolerance of `--check`.
    pub atol: f64,
}

/// One argument's value, positional with the signature.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgValue {
    /// A tensor: for `in`/`inout` the input file's data, for `out` zeroes of the output's
    /// shape. Its dtype is the signature's. After the run, `out`/`inout` hold the results.
    Tensor(NpyArray),
    /// A scalar's 64 raw bits.
    Scalar(u64),
}

/// A run ready to execute: everything checked, every file read.
#[derive(Debug)]
pub struct PreparedRun {
    /// The callable.
    pub spec: CallableSpec,
    /// One value per signature argument, in signature order.
    pub args: Vec<ArgValue>,
    /// Argument index and file of every `--output`.
    pub outputs: Vec<(usize, PathBuf)>,
    /// Argument index, file and loaded reference of every `--check`.
    pub checks: Vec<(usize, PathBuf, NpyArray)>,
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

/// What the execution reports.
#[derive(Debug, Clone, Copy)]
pub struct RunReport {
    /// From the call to the return, staging and copy-back included.
    pub total_time: Duration,
    /// From the launch of the first kernel to the proof that both finished.
    pub device_time: Duration,
}

/// The error a [`RunError::Load`] or [`RunError::Execute`] carries: whatever the worker
/// reports.
pub type ExecError = Box<dyn std::error::Error + Send + Sync>;

/// Why `simpler run` failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The target is neither a file nor a directory.
    #[error("`{}` is neither a bundle file nor an example directory", path.display())]
    NoTarget {
        /// The target given.
        path: PathBuf,
    },
    /// Building the example directory failed.
    #[error("cannot build `{}`", path.display())]
    Build {
        /// The example.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<BuildError>,
    },
    /// Reading the bundle failed.
    #[error("cannot load bundle `{}`", path.display())]
    Bundle {
        /// The bundle file.
        path: PathBuf,
        /// Why.
        #[source]
        source: BundleError,
    },
    /// A flag names an argument the signature does not have.
    #[error("{flag} {name}: `{callable}` has no argument `{name}` (its arguments: {known})")]
    UnknownArg {
        /// The flag.
        flag: &'static str,
        /// The name given.
        name: String,
        /// The callable.
        callable: String,
        /// The signature's names.
        known: String,
    },
    /// A flag names an argument of the wrong direction.
    #[error("{flag} {name}: `{name}` is {article} `{direction}` argument: use {hint}, not {flag}")]
    WrongKind {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
        /// "a" or "an".
        article: &'static str,
        /// Its direction.
        direction: &'static str,
        /// The flags it takes instead.
        hint: &'static str,
    },
    /// A flag names the same argument twice.
    #[error("{flag} {name} is given more than once")]
    Duplicate {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
    },
    /// Required arguments have no value.
    #[error("missing {flag} for {}", list_names(names))]
    Missing {
        /// The flag they need.
        flag: &'static str,
        /// The arguments.
        names: Vec<String>,
    },
    /// A `.npy` file could not be used.
    #[error("{flag} {name}")]
    File {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
        /// Why.
        #[source]
        source: NpyError,
    },
    /// A file's dtype is not the argument's.
    #[error("{flag} {name}: wrong dtype: `{name}` expects {expected}, but `{}` holds {got}", path.display())]
    DtypeMismatch {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
        /// The file.
        path: PathBuf,
        /// The signature's dtype.
        expected: DataType,
        /// The file's.
        got: DataType,
    },
    /// A file's shape is not the argument's.
    #[error("{flag} {name}: wrong shape: `{name}` expects {}, but `{}` has shape {}", fmt_shape(expected), path.display(), fmt_shape(got))]
    ShapeMismatch {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
        /// The file.
        path: PathBuf,
        /// The expected shape.
        expected: Vec<u64>,
        /// The file's.
        got: Vec<u64>,
    },
    /// A file's rank is not 1..=5.
    #[error("{flag} {name}: `{}` has {ndims} dimensions; a tensor has 1 to 5", path.display())]
    BadRank {
        /// The flag.
        flag: &'static str,
        /// The argument.
        name: String,
        /// The file.
        path: PathBuf,
        /// Its rank.
        ndims: usize,
    },
    /// An `out` argument's shape cannot be known.
    #[error(
        "output `{name}` has no fixed shape in the signature, so its size is unknown; \
         give --check {name}=REFERENCE.npy (its shape is used) or fix the shape in the manifest"
    )]
    OutputShapeUnknown {
        /// The argument.
        name: String,
    },
    /// An `out` argument's shape is too large to allocate.
    #[error(
        "output `{name}` of shape {} is too large to allocate",
        fmt_shape(shape)
    )]
    OutputTooLarge {
        /// The argument.
        name: String,
        /// Its shape.
        shape: Vec<u64>,
    },
    /// A scalar value does not parse for its dtype.
    #[error("--scalar {name}={value}: {reason}")]
    BadScalar {
        /// The argument.
        name: String,
        /// The text given.
        value: String,
        /// Why.
        reason: String,
    },
    /// An output's directory does not exist.
    #[error("--output {name}: directory `{}` does not exist", dir.display())]
    OutputDir {
        /// The argument.
        name: String,
        /// The missing directory.
        dir: PathBuf,
    },
    /// Two outputs go to the same file.
    #[error("--output {first} and --output {second} both write `{}`", path.display())]
    SameOutput {
        /// One argument.
        first: String,
        /// The other.
        second: String,
        /// The file.
        path: PathBuf,
    },
    /// A tolerance is negative or not finite.
    #[error("--{which} must be a finite number >= 0, got {value}")]
    BadTolerance {
        /// "rtol" or "atol".
        which: &'static str,
        /// The value.
        value: f64,
    },
    /// The callable's code could not be registered: an image that does not load, an entry
    /// symbol it does not export, a malformed kernel table. Nothing ran.
    #[error("cannot load `{callable}`")]
    Load {
        /// The callable.
        callable: String,
        /// What the worker reported.
        #[source]
        source: ExecError,
    },
    /// The run itself failed.
    #[error("running `{callable}` failed")]
    Execute {
        /// The callable.
        callable: String,
        /// What the worker reported.
        #[source]
        source: ExecError,
    },
    /// An output file could not be written.
    #[error("cannot write output `{name}`")]
    WriteOutput {
        /// The argument.
        name: String,
        /// Why.
        #[source]
        source: NpyError,
    },
    /// One or more `--check`s failed.
    #[error("check failed for {}", list_names(names))]
    CheckFailed {
        /// The arguments that did not match.
        names: Vec<String>,
    },
}

impl RunError {
    /// 2 for problems with the command line or its files (nothing ran), 1 for a failed run,
    /// output write or check.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Execute { .. }
            | RunError::WriteOutput { .. }
            | RunError::CheckFailed { .. } => 1,
            _ => 2,
        }
    }
}

fn list_names(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `[512, 512]` style.
pub fn fmt_shape(shape: &[u64]) -> String {
    format!("{shape:?}")
}

fn article(direction: ArgDirection) -> &'static str {
    match direction {
        ArgDirection::Scalar => "a",
        ArgDirection::In | ArgDirection::Out | ArgDirection::InOut => "an",
    }
}

/// Loads the callable named by `target`: an example directory (or manifest) is built in
/// memory, a file is read as a bundle.
///
/// # Errors
/// [`RunError::NoTarget`], [`RunError::Build`] or [`RunError::Bundle`].
pub fn load_callable(target: &Path) -> Result<CallableSpec, RunError> {
    let is_manifest = target.is_file() && target.extension().is_some_and(|e| e == "toml");
    if target.is_dir() || is_manifest {
        let built = build::build(target).map_err(|source| RunError::Build {
            path: target.to_path_buf(),
            source: Box::new(source),
        })?;
        build::print_diagnostics(&built);
        eprintln!(
            "built `{}` from {} in memory ({} sources)",
            built.bundle.name,
            built.manifest.path.display(),
            built.units.len()
        );
        Ok(built.bundle.into_spec())
    } else if target.is_file() {
        let bundle = Bundle::read(target).map_err(|source| RunError::Bundle {
            path: target.to_path_buf(),
            source,
        })?;
        Ok(bundle.into_spec())
    } else {
        Err(RunError::NoTarget {
            path: target.to_path_buf(),
        })
    }
}

/// Loads the callable and matches the request against its signature.
///
/// # Errors
/// A [`RunError`] with [`RunError::exit_code`] 2 naming the offending flag and argument.
pub fn prepare(req: &RunRequest) -> Result<PreparedRun, RunError> {
    let spec = load_callable(&req.target)?;
    prepare_with(spec, req)
}

/// Where one flag may go, for the kind checks.
struct FlagRule {
    flag: &'static str,
    accepts: fn(ArgDirection) -> bool,
}

const INPUT: FlagRule = FlagRule {
    flag: "--input",
    accepts: ArgDirection::copies_in,
};
const OUTPUT: FlagRule = FlagRule {
    flag: "--output",
    accepts: ArgDirection::copies_back,
};
const CHECK: FlagRule = FlagRule {
    flag: "--check",
    accepts: ArgDirection::copies_back,
};
const SCALAR: FlagRule = FlagRule {
    flag: "--scalar",
    accepts: |d| d == ArgDirection::Scalar,
};

/// The flags an argument of `direction` takes, for [`RunError::WrongKind`].
fn hint_for(direction: ArgDirection) -> &'static str {
    match direction {
        ArgDirection::In => "--input",
        ArgDirection::Out => "--output (and --check)",
        ArgDirection::InOut => "--input (and --output/--check for its result)",
        ArgDirection::Scalar => "--scalar NAME=VALUE",
    }
}

/// Resolves the names of one flag's values to argument indices, checking names, kinds and
/// duplicates (in that order, value by value). Every name is checked, so a flag can never be
/// given more often than the signature has arguments of its kind.
fn resolve<T>(
    spec: &CallableSpec,
    rule: &FlagRule,
    given: &[(String, T)],
) -> Result<Vec<usize>, RunError> {
    let args = &spec.signature.args;
    let mut out = Vec::with_capacity(given.len());
    for (name, _) in given {
        let Some(idx) = spec.signature.position(name) else {
            let known: Vec<String> = args.iter().map(|a| a.name.clone()).collect();
            return Err(RunError::UnknownArg {
                flag: rule.flag,
                name: name.clone(),
                callable: spec.name.clone(),
                known: if known.is_empty() {
                    "none".into()
                } else {
                    list_names(&known)
                },
            });
        };
        let a = &args[idx];
        if !(rule.accepts)(a.direction) {
            return Err(RunError::WrongKind {
                flag: rule.flag,
                name: name.clone(),
                article: article(a.direction),
                direction: a.direction.name(),
                hint: hint_for(a.direction),
            });
        }
        if out.contains(&idx) {
            return Err(RunError::Duplicate {
                flag: rule.flag,
                name: name.clone(),
            });
        }
        out.push(idx);
    }
    Ok(out)
}

/// Reads a tensor file for `arg` and checks it against the argument's dtype and, when
/// `expected_shape` is given, its shape.
fn read_tensor(
    flag: &'static str,
    arg: &ArgSpec,
    path: &Path,
    expected_shape: Option<&[u64]>,
) -> Result<NpyArray, RunError> {
    let mut a = npy::read(path).map_err(|source| RunError::File {
        flag,
        name: arg.name.clone(),
        source,
    })?;
    let dtype_ok =
        a.dtype == arg.dtype || (arg.dtype == DataType::Bfloat16 && a.dtype == DataType::Uint16);
    if !dtype_ok {
        return Err(RunError::DtypeMismatch {
            flag,
            name: arg.name.clone(),
            path: path.to_path_buf(),
            expected: arg.dtype,
            got: a.dtype,
        });
    }
    a.dtype = arg.dtype;
    if let Some(want) = expected_shape {
        if a.shape != want {
            return Err(RunError::ShapeMismatch {
                flag,
                name: arg.name.clone(),
                path: path.to_path_buf(),
                expected: want.to_vec(),
                got: a.shape,
            });
        }
    }
    if a.shape.is_empty() || a.shape.len() > simpler_abi::MAX_TENSOR_DIMS {
        return Err(RunError::BadRank {
            flag,
            name: arg.name.clone(),
            path: path.to_path_buf(),
            ndims: a.shape.len(),
        });
    }
    Ok(a)
}

/// [`prepare`] for an already loaded callable.
///
/// # Errors
/// As [`prepare`].
pub fn prepare_with(spec: CallableSpec, req: &RunRequest) -> Result<PreparedRun, RunError> {
    for (which, value) in [("rtol", req.rtol), ("atol", req.atol)] {
        if !(value.is_finite() && value >= 0.0) {
            return Err(RunError::BadTolerance { which, value });
        }
    }
    let in_idx = resolve(&spec, &INPUT, &req.inputs)?;
    let scalar_idx = resolve(&spec, &SCALAR, &req.scalars)?;
    let out_idx = resolve(&spec, &OUTPUT, &req.outputs)?;
    let check_idx = resolve(&spec, &CHECK, &req.checks)?;
    let args = &spec.signature.args;

    let missing = |rule: &FlagRule, have: &[usize]| -> Result<(), RunError> {
        let names: Vec<String> = args
            .iter()
            .enumerate()
            .filter(|(i, a)| (rule.accepts)(a.direction) && !have.contains(i))
            .map(|(_, a)| a.name.clone())
            .collect();
        if names.is_empty() {
            Ok(())
        } else {
            Err(RunError::Missing {
                flag: rule.flag,
                names,
            })
        }
    };
    missing(&INPUT, &in_idx)?;
    missing(&SCALAR, &scalar_idx)?;

    let mut values: Vec<Option<ArgValue>> = vec![None; args.len()];
    for (&i, (_, path)) in in_idx.iter().zip(&req.inputs) {
        let a = read_tensor(INPUT.flag, &args[i], path, args[i].shape.as_deref())?;
        values[i] = Some(ArgValue::Tensor(a));
    }
    for (&i, (name, text)) in scalar_idx.iter().zip(&req.scalars) {
        let bits = parse_scalar(text, args[i].dtype).map_err(|reason| RunError::BadScalar {
            name: name.clone(),
            value: text.clone(),
            reason,
        })?;
        values[i] = Some(ArgValue::Scalar(bits));
    }
    let mut checks = Vec::with_capacity(check_idx.len());
    for (&i, (_, path)) in check_idx.iter().zip(&req.checks) {
        // The shape a result will have: fixed by the signature, or by the input of an inout.
        let known = args[i].shape.clone().or_else(|| match &values[i] {
            Some(ArgValue::Tensor(t)) => Some(t.shape.clone()),
            _ => None,
        });
        let r = read_tensor(CHECK.flag, &args[i], path, known.as_deref())?;
        checks.push((i, path.clone(), r));
    }
    // Allocate every `out` argument.
    for (i, a) in args.iter().enumerate() {
        if a.direction != ArgDirection::Out {
            continue;
        }
        let shape = match (&a.shape, checks.iter().find(|c| c.0 == i)) {
            (Some(s), _) => s.clone(),
            (None, Some((_, _, r))) => r.shape.clone(),
            (None, None) => {
                return Err(RunError::OutputShapeUnknown {
                    name: a.name.clone(),
                })
            }
        };
        let n = npy::numel(&shape)
            .and_then(|n| n.checked_mul(a.dtype.size_bytes() as u64))
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| RunError::OutputTooLarge {
                name: a.name.clone(),
                shape: shape.clone(),
            })?;
        // Allocate fallibly: an absurd shape must be an error, not an abort.
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(n)
            .map_err(|_| RunError::OutputTooLarge {
                name: a.name.clone(),
                shape: shape.clone(),
            })?;
        bytes.resize(n, 0);
        values[i] = Some(ArgValue::Tensor(NpyArray {
            shape,
            dtype: a.dtype,
            bytes,
        }));
    }
    let mut outputs: Vec<(usize, PathBuf)> = Vec::with_capacity(out_idx.len());
    for (&i, (name, path)) in out_idx.iter().zip(&req.outputs) {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(RunError::OutputDir {
                name: name.clone(),
                dir: dir.to_path_buf(),
            });
        }
        if let Some((j, _)) = outputs.iter().find(|(_, p)| p == path) {
            return Err(RunError::SameOutput {
                first: args[*j].name.clone(),
                second: name.clone(),
                path: path.clone(),
            });
        }
        outputs.push((i, path.clone()));
    }
    let args = values
        .into_iter()
        .map(|v| v.expect("every argument has a value after matching"))
        .collect();
    Ok(PreparedRun {
        spec,
        args,
        outputs,
        checks,
        rtol: req.rtol,
        atol: req.atol,
    })
}

/// Executes the prepared run on a fresh [`ChipWorker`](simpler_host::ChipWorker) (default
/// configuration: the sim device), leaving the results in the `out`/`inout` tensors of
/// `prepared.args`.
///
/// # Errors
/// [`RunError::Load`] when the callable's code cannot be registered (exit code 2: the bundle
/// or manifest is at fault, nothing ran), [`RunError::Execute`] for whatever else the worker
/// reports (bring-up, the run).
pub fn execute(prepared: &mut PreparedRun) -> Result<RunReport, RunError> {
    use simpler_host::{ChipWorker, HostArg, HostTensor, WorkerConfig};
    let callable = prepared.spec.name.clone();
    let failed = |source: simpler_host::HostError| RunError::Execute {
        callable: callable.clone(),
        source: source.into(),
    };
    let worker = ChipWorker::new(WorkerConfig::default()).map_err(failed)?;
    let id = worker
        .register(&prepared.spec)
        .map_err(|source| RunError::Load {
            callable: callable.clone(),
            source: source.into(),
        })?;
    let mut args: Vec<HostArg<'_>> = prepared
        .args
        .iter_mut()
        .map(|a| match a {
            ArgValue::Tensor(t) => HostArg::Tensor(HostTensor {
                bytes: &mut t.bytes,
                shape: t.shape.clone(),
                dtype: t.dtype,
            }),
            ArgValue::Scalar(v) => HostArg::Scalar(*v),
        })
        .collect();
    let report = worker.run(id, &mut args).map_err(failed)?;
    Ok(RunReport {
        total_time: report.total_time,
        device_time: report.device_time,
    })
}

/// How one output compares with its reference.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOutcome {
    /// Number of elements compared.
    pub total: usize,
    /// Number not within tolerance.
    pub mismatches: usize,
    /// Largest `|actual - expected|` over pairs where neither is NaN (0 if none).
    pub max_abs_err: f64,
    /// First element not within tolerance: flat index, actual, expected.
    pub first_mismatch: Option<(usize, f64, f64)>,
}

impl CheckOutcome {
    /// True when every element is within tolerance.
    pub fn passed(&self) -> bool {
        self.mismatches == 0
    }
}

/// IEEE binary16 bits to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    if exp == 0 {
        let v = man as f32 * f32::powi(2.0, -24);
        return if sign != 0 { -v } else { v };
    }
    let bits = if exp == 0x1f {
        sign | 0x7f80_0000 | (man << 13)
    } else {
        sign | ((exp + 112) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

/// f32 to IEEE binary16 bits, rounding to nearest even (overflow gives infinity).
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    let round = |m: u32, shift: u32| -> u32 {
        if shift > 31 {
            return 0;
        }
        let r = m >> shift;
        let rem = m & ((1u32 << shift) - 1);
        let half = 1u32 << (shift - 1);
        if rem > half || (rem == half && r & 1 == 1) {
            r + 1
        } else {
            r
        }
    };
    if e <= 0 {
        if exp == 0 {
            return sign; // f32 subnormals are far below the f16 range
        }
        return sign | round(man | 0x80_0000, (14 - e) as u32) as u16;
    }
    // A carry out of the mantissa correctly bumps the exponent (up to infinity).
    sign | round(((e as u32) << 23) | man, 13) as u16
}

/// f32 to bfloat16 bits, rounding to nearest even.
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) as u16) | 0x40;
    }
    let lsb = (b >> 16) & 1;
    ((b + 0x7fff + lsb) >> 16) as u16
}

/// Parses `text` as a scalar of `dtype` into the 64 bits passed to the orchestration.
///
/// # Errors
/// A message saying why the text is not a value of `dtype`.
pub fn parse_scalar(text: &str, dtype: DataType) -> Result<u64, String> {
    let t = text.trim();
    let width = dtype.size_bytes() * 8;
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        let v = u64::from_str_radix(hex, 16).map_err(|e| format!("bad hex bits: {e}"))?;
        if width < 64 && v >> width != 0 {
            return Err(format!("raw bits {t} do not fit in {width}-bit {dtype}"));
        }
        return Ok(v);
    }
    let float = || -> Result<f32, String> {
        let v: f64 = t
            .parse()
            .map_err(|_| format!("`{t}` is not a number ({dtype} expected)"))?;
        // Explicit infinities pass; a finite number beyond f32 is out of range, not inf.
        if v.is_finite() && v.abs() > f32::MAX as f64 {
            return Err(format!(
                "{t} is out of range for {dtype} (|x| <= {:e})",
                f32::MAX
            ));
        }
        Ok(v as f32)
    };
    let out_of_range = |e: std::num::ParseIntError| match e.kind() {
        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
            format!("{t} is out of range for {dtype}")
        }
        _ => format!("`{t}` is not an integer ({dtype} expected)"),
    };
    let signed = |min: i64, max: i64| -> Result<u64, String> {
        let v: i64 = t.parse().map_err(out_of_range)?;
        if v < min || v > max {
            return Err(format!("{v} is out of range for {dtype} ({min}..={max})"));
        }
        Ok(v as u64)
    };
    let unsigned = |max: u64| -> Result<u64, String> {
        let v: u64 = t.parse().map_err(|e: std::num::ParseIntError| {
            if t.starts_with('-')
                && !t[1..].is_empty()
                && t[1..].bytes().all(|b| b.is_ascii_digit())
            {
                format!("{t} is out of range for {dtype} (it is unsigned)")
            } else {
                out_of_range(e)
            }
        })?;
        if v > max {
            return Err(format!("{v} is out of range for {dtype} (0..={max})"));
        }
        Ok(v)
    };
    match dtype {
        DataType::Float32 => Ok(float()?.to_bits() as u64),
        DataType::Float16 => {
            let v = float()?;
            let h = f32_to_f16(v);
            if v.is_finite() && h & 0x7c00 == 0x7c00 {
                return Err(format!("{v} is out of range for f16 (|x| <= 65504)"));
            }
            Ok(h as u64)
        }
        DataType::Bfloat16 => {
            let v = float()?;
            let h = f32_to_bf16(v);
            if v.is_finite() && h & 0x7f80 == 0x7f80 {
                return Err(format!("{v} is out of range for bf16"));
            }
            Ok(h as u64)
        }
        DataType::Int8 => signed(i8::MIN.into(), i8::MAX.into()),
        DataType::Int16 => signed(i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => signed(i32::MIN.into(), i32::MAX.into()),
        DataType::Int64 => signed(i64::MIN, i64::MAX),
        DataType::Uint8 => unsigned(u8::MAX.into()),
        DataType::Uint16 => unsigned(u16::MAX.into()),
        DataType::Uint32 => unsigned(u32::MAX.into()),
        DataType::Uint64 => unsigned(u64::MAX),
    }
}

/// One element decoded for comparison.
#[derive(Clone, Copy)]
enum Elem {
    F(f64),
    I(i128),
}

impl Elem {
    fn as_f64(self) -> f64 {
        match self {
            Elem::F(v) => v,
            Elem::I(v) => v as f64,
        }
    }
}

fn elem(bytes: &[u8], dtype: DataType, i: usize) -> Elem {
    let n = dtype.size_bytes();
    let b = &bytes[i * n..(i + 1) * n];
    match dtype {
        DataType::Float32 => Elem::F(f32::from_le_bytes(b.try_into().expect("4")) as f64),
        DataType::Float16 => Elem::F(f16_to_f32(u16::from_le_bytes([b[0], b[1]])) as f64),
        DataType::Bfloat16 => {
            Elem::F(f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16) as f64)
        }
        DataType::Int8 => Elem::I(b[0] as i8 as i128),
        DataType::Uint8 => Elem::I(b[0] as i128),
        DataType::Int16 => Elem::I(i16::from_le_bytes([b[0], b[1]]) as i128),
        DataType::Uint16 => Elem::I(u16::from_le_bytes([b[0], b[1]]) as i128),
        DataType::Int32 => Elem::I(i32::from_le_bytes(b.try_into().expect("4")) as i128),
        DataType::Uint32 => Elem::I(u32::from_le_bytes(b.try_into().expect("4")) as i128),
        DataType::Int64 => Elem::I(i64::from_le_bytes(b.try_into().expect("8")) as i128),
        DataType::Uint64 => Elem::I(u64::from_le_bytes(b.try_into().expect("8")) as i128),
    }
}

/// NumPy `allclose` semantics, element by element: `|a - e| <= atol + rtol * |e|`; NaN is
/// never close to anything; infinities are close only to themselves. Both arrays are read as
/// `dtype` and must have the same number of elements.
pub fn allclose(
    actual: &[u8],
    expected: &[u8],
    dtype: DataType,
    rtol: f64,
    atol: f64,
) -> CheckOutcome {
    assert_eq!(
        actual.len(),
        expected.len(),
        "allclose on arrays of different sizes"
    );
    let total = actual.len() / dtype.size_bytes();
    let mut out = CheckOutcome {
        total,
        mismatches: 0,
        max_abs_err: 0.0,
        first_mismatch: None,
    };
    for i in 0..total {
        let (a, e) = (elem(actual, dtype, i), elem(expected, dtype, i));
        let (close, err) = match (a, e) {
            (Elem::I(a), Elem::I(e)) => {
                let err = (a - e).unsigned_abs() as f64;
                (err <= atol + rtol * (e.unsigned_abs() as f64), err)
            }
            _ => {
                let (a, e) = (a.as_f64(), e.as_f64());
                if a.is_nan() || e.is_nan() {
                    (false, f64::NAN)
                } else if a.is_infinite() || e.is_infinite() {
                    (a == e, if a == e { 0.0 } else { f64::INFINITY })
                } else {
                    let err = (a - e).abs();
                    (err <= atol + rtol * e.abs(), err)
                }
            }
        };
        if !err.is_nan() && err > out.max_abs_err {
            out.max_abs_err = err;
        }
        if !close {
            out.mismatches += 1;
            if out.first_mismatch.is_none() {
                out.first_mismatch = Some((i, a.as_f64(), e.as_f64()));
            }
        }
    }
    out
}

/// An element value as its dtype would print it (floats at their own precision).
fn fmt_value(v: f64, dtype: DataType) -> String {
    match dtype {
        DataType::Float32 | DataType::Float16 | DataType::Bfloat16 => format!("{}", v as f32),
        _ => format!("{}", v as i128),
    }
}

/// A flat index as a multi-dimensional one, `[i, j, k]`.
pub fn unravel(mut flat: usize, shape: &[u64]) -> String {
    let mut idx = vec![0u64; shape.len()];
    for d in (0..shape.len()).rev() {
        let n = shape[d].max(1) as usize;
        idx[d] = (flat % n) as u64;
        flat /= n;
    }
    format!("{idx:?}")
}

/// After a successful [`execute`]: writes every `--output` (atomically), then runs every
/// `--check`, printing PASS/FAIL lines.
///
/// # Errors
/// [`RunError::WriteOutput`] or [`RunError::CheckFailed`] (exit code 1).
pub fn finish(prepared: &PreparedRun) -> Result<(), RunError> {
    let args = &prepared.spec.signature.args;
    for (i, path) in &prepared.outputs {
        let ArgValue::Tensor(t) = &prepared.args[*i] else {
            unreachable!("outputs are tensors")
        };
        npy::write(path, t).map_err(|source| RunError::WriteOutput {
            name: args[*i].name.clone(),
            source,
        })?;
        println!(
            "wrote {} ({}{})",
            path.display(),
            t.dtype,
            fmt_shape(&t.shape)
        );
    }
    let mut failed = Vec::new();
    for (i, path, reference) in &prepared.checks {
        let ArgValue::Tensor(t) = &prepared.args[*i] else {
            unreachable!("checks are on tensors")
        };
        let name = &args[*i].name;
        let o = allclose(
            &t.bytes,
            &reference.bytes,
            t.dtype,
            prepared.rtol,
            prepared.atol,
        );
        let tol = format!("rtol={:e} atol={:e}", prepared.rtol, prepared.atol);
        if o.passed() {
            println!(
                "PASS {name}: {} elements match {} ({tol}, max abs error {:.3e})",
                o.total,
                path.display(),
                o.max_abs_err
            );
        } else {
            let (at, got, want) = o
                .first_mismatch
                .expect("a failed check has a first mismatch");
            println!(
                "FAIL {name}: {} of {} elements differ from {} ({tol}, max abs error {:.3e}); \
                 first mismatch at {}: got {}, expected {}",
                o.mismatches,
                o.total,
                path.display(),
                o.max_abs_err,
                unravel(at, &t.shape),
                fmt_value(got, t.dtype),
                fmt_value(want, t.dtype)
            );
            failed.push(name.clone());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(RunError::CheckFailed { names: failed })
    }
}

/// `simpler run`: prepare, execute, write outputs, check.
///
/// # Errors
/// [`RunError`]; see [`RunError::exit_code`].
pub fn command(req: &RunRequest) -> Result<(), RunError> {
    let mut prepared = prepare(req)?;
    let report = execute(&mut prepared)?;
    println!(
        "ran `{}` in {:.3} ms ({:.3} ms on the device)",
        prepared.spec.name,
        report.total_time.as_secs_f64() * 1e3,
        report.device_time.as_secs_f64() * 1e3
    );
    if let Some(note) = unused_result_note(&prepared) {
        println!("{note}");
    }
    finish(&prepared)
}

/// The note printed when the callable has results but the run neither writes nor checks
/// any of them (the work was done and thrown away).
pub fn unused_result_note(prepared: &PreparedRun) -> Option<&'static str> {
    let has_results = prepared
        .spec
        .signature
        .args
        .iter()
        .any(|a| a.direction.copies_back());
    (has_results && prepared.outputs.is_empty() && prepared.checks.is_empty())
        .then_some("(no --output or --check given: the result was not saved or checked)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use simpler_abi::CoreType;
    use simpler_host::{BundleCode, BundleKernel, Signature};

    fn arg(name: &str, direction: ArgDirection, dtype: DataType, shape: Option<&[u64]>) -> ArgSpec {
        ArgSpec {
            name: name.into(),
            direction,
            dtype,
            shape: shape.map(<[u64]>::to_vec),
        }
    }

    fn spec() -> CallableSpec {
        use ArgDirection::*;
        Bundle {
            name: "axpy".into(),
            signature: Signature::new(vec![
                arg("x", In, DataType::Float32, Some(&[2, 3])),
                arg("y", InOut, DataType::Float32, None),
                arg("z", Out, DataType::Float32, Some(&[2, 3])),
                arg("w", Out, DataType::Int32, None),
                arg("alpha", Scalar, DataType::Float32, None),
                arg("n", Scalar, DataType::Int64, None),
            ])
            .unwrap(),
            orchestration: BundleCode {
                entry: "o".into(),
                image: b"\x7fELF-fake".to_vec(),
            },
            kernels: vec![BundleKernel {
                func_id: 0,
                core_type: CoreType::Aiv,
                code: BundleCode {
                    entry: "k".into(),
                    image: b"\x7fELF-fake".to_vec(),
                },
            }],
        }
        .into_spec()
    }

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn new() -> Files {
            let f = Files {
                dir: tempfile::tempdir().unwrap(),
            };
            f.put("x.npy", &[2, 3], DataType::Float32);
            f.put("y.npy", &[4], DataType::Float32);
            f.put("w_ref.npy", &[5], DataType::Int32);
            f
        }
        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }
        fn put(&self, name: &str, shape: &[u64], dtype: DataType) -> PathBuf {
            let n = shape.iter().product::<u64>() as usize * dtype.size_bytes();
            let p = self.path(name);
            npy::write(
                &p,
                &NpyArray {
                    shape: shape.to_vec(),
                    dtype,
                    bytes: vec![1; n],
                },
            )
            .unwrap();
            p
        }
        fn request(&self) -> RunRequest {
            RunRequest {
                target: self.path("unused.simpler"),
                inputs: vec![
                    ("x".into(), self.path("x.npy")),
                    ("y".into(), self.path("y.npy")),
                ],
                outputs: vec![("z".into(), self.path("z.npy"))],
                checks: vec![("w".into(), self.path("w_ref.npy"))],
                scalars: vec![("alpha".into(), "0.5".into()), ("n".into(), "-3".into())],
                rtol: 1e-5,
                atol: 1e-5,
            }
        }
    }

    fn err(req: &RunRequest) -> RunError {
        let e = prepare_with(spec(), req).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e:?}");
        e
    }

    #[test]
    fn a_complete_request_is_prepared_positionally() {
        let f = Files::new();
        let p = prepare_with(spec(), &f.request()).unwrap();
        assert_eq!(p.args.len(), 6);
        match &p.args[1] {
            ArgValue::Tensor(t) => assert_eq!(t.shape, vec![4]),
            other => panic!("{other:?}"),
        }
        match &p.args[2] {
            ArgValue::Tensor(t) => assert_eq!((t.shape.clone(), t.bytes.len()), (vec![2, 3], 24)),
            other => panic!("{other:?}"),
        }
        // `w` has no shape in the signature and takes its reference's.
        match &p.args[3] {
            ArgValue::Tensor(t) => {
                assert_eq!((t.shape.clone(), t.dtype), (vec![5], DataType::Int32))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(p.args[4], ArgValue::Scalar(0.5f32.to_bits() as u64));
        assert_eq!(p.args[5], ArgValue::Scalar(-3i64 as u64));
        assert_eq!(p.outputs, vec![(2, f.path("z.npy"))]);
        assert_eq!(p.checks.len(), 1);
        assert_eq!(p.checks[0].0, 3);
    }

    #[test]
    fn missing_input() {
        let f = Files::new();
        let mut r = f.request();
        r.inputs.remove(0);
        let e = err(&r);
        assert!(
            matches!(&e, RunError::Missing { flag: "--input", names } if names == &["x"]),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "missing --input for `x`");
    }

    #[test]
    fn missing_scalar() {
        let f = Files::new();
        let mut r = f.request();
        r.scalars.clear();
        let e = err(&r);
        assert_eq!(e.to_string(), "missing --scalar for `alpha`, `n`");
    }

    #[test]
    fn unknown_name() {
        let f = Files::new();
        let mut r = f.request();
        r.inputs[1].0 = "q".into();
        let e = err(&r);
        assert!(matches!(e, RunError::UnknownArg { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("no argument `q`") && msg.contains("`alpha`"),
            "{msg}"
        );
    }

    #[test]
    fn wrong_kind() {
        let f = Files::new();
        let mut r = f.request();
        r.inputs[1] = ("z".into(), f.path("x.npy"));
        let e = err(&r);
        assert!(matches!(e, RunError::WrongKind { .. }), "{e:?}");
        assert!(e.to_string().contains("`z` is an `out` argument"), "{e}");
        let mut r = f.request();
        r.outputs = vec![("x".into(), f.path("o.npy"))];
        assert!(err(&r).to_string().contains("`x` is an `in` argument"));
        let mut r = f.request();
        r.scalars[0].0 = "x".into();
        assert_eq!(
            err(&r).to_string(),
            "--scalar x: `x` is an `in` argument: use --input, not --scalar"
        );
    }

    #[test]
    fn duplicate_flag() {
        let f = Files::new();
        let mut r = f.request();
        r.inputs[1].0 = "x".into();
        let e = err(&r);
        assert!(matches!(e, RunError::Duplicate { .. }), "{e:?}");
    }

    /// Every name is checked before anything is counted: an extra value is reported by its
    /// name, not as "given N times".
    #[test]
    fn extra_values_are_named() {
        let f = Files::new();
        let mut r = f.request();
        r.inputs.push(("z".into(), f.path("x.npy")));
        assert_eq!(
            err(&r).to_string(),
            "--input z: `z` is an `out` argument: use --output (and --check), not --input"
        );
        let mut r = f.request();
        r.inputs.push(("q".into(), f.path("x.npy")));
        assert!(
            matches!(&err(&r), RunError::UnknownArg { name, .. } if name == "q"),
            "{r:?}"
        );
        let mut r = f.request();
        r.scalars.push(("n".into(), "1".into()));
        assert_eq!(err(&r).to_string(), "--scalar n is given more than once");
    }

    #[test]
    fn wrong_shape() {
        let f = Files::new();
        f.put("x.npy", &[3, 2], DataType::Float32);
        let e = err(&f.request());
        assert!(matches!(e, RunError::ShapeMismatch { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("`x` expects [2, 3]") && msg.contains("has shape [3, 2]"),
            "{msg}"
        );
        // A reference must match the inout input's shape.
        let f = Files::new();
        let mut r = f.request();
        f.put("y_ref.npy", &[5], DataType::Float32);
        r.checks.push(("y".into(), f.path("y_ref.npy")));
        let e = err(&r);
        assert!(e.to_string().contains("--check y: wrong shape"), "{e}");
    }

    #[test]
    fn wrong_rank() {
        let f = Files::new();
        f.put("y.npy", &[1, 1, 1, 1, 1, 2], DataType::Float32);
        let e = err(&f.request());
        assert!(matches!(e, RunError::BadRank { ndims: 6, .. }), "{e:?}");
    }

    #[test]
    fn wrong_dtype() {
        let f = Files::new();
        f.put("y.npy", &[4], DataType::Int32);
        let e = err(&f.request());
        assert!(matches!(e, RunError::DtypeMismatch { .. }), "{e:?}");
        assert!(e.to_string().contains("`y` expects f32, but"), "{e}");
        assert!(e.to_string().contains("holds i32"), "{e}");
    }

    #[test]
    fn bf16_takes_raw_u16_files() {
        let s = Bundle {
            name: "b".into(),
            signature: Signature::new(vec![arg("h", ArgDirection::In, DataType::Bfloat16, None)])
                .unwrap(),
            orchestration: BundleCode {
                entry: "o".into(),
                image: b"\x7fELF".to_vec(),
            },
            kernels: vec![],
        }
        .into_spec();
        let f = Files::new();
        let p = f.put("h.npy", &[3], DataType::Uint16);
        let r = RunRequest {
            inputs: vec![("h".into(), p)],
            outputs: vec![],
            checks: vec![],
            scalars: vec![],
            ..f.request()
        };
        let prepared = prepare_with(s, &r).unwrap();
        match &prepared.args[0] {
            ArgValue::Tensor(t) => assert_eq!(t.dtype, DataType::Bfloat16),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn input_file_errors_name_the_flag_and_file() {
        let f = Files::new();
        std::fs::write(f.path("x.npy"), b"garbage").unwrap();
        let e = err(&f.request());
        let chain = crate::error_chain(&e);
        assert!(
            chain.contains("--input x") && chain.contains("not a .npy file"),
            "{chain}"
        );
        std::fs::remove_file(f.path("x.npy")).unwrap();
        let chain = crate::error_chain(&err(&f.request()));
        assert!(chain.contains("x.npy` does not exist"), "{chain}");
    }

    #[test]
    fn output_shape_must_be_known() {
        let f = Files::new();
        let mut r = f.request();
        r.checks.clear();
        let e = err(&r);
        assert!(matches!(e, RunError::OutputShapeUnknown { .. }), "{e:?}");
        assert!(e.to_string().contains("output `w`"), "{e}");
    }

    #[test]
    fn output_dir_must_exist_and_outputs_must_differ() {
        let f = Files::new();
        let mut r = f.request();
        r.outputs[0].1 = f.path("nope/z.npy");
        assert!(matches!(err(&r), RunError::OutputDir { .. }));
        let mut r = f.request();
        r.outputs.push(("y".into(), f.path("z.npy")));
        assert!(matches!(err(&r), RunError::SameOutput { .. }));
    }

    #[test]
    fn bad_scalar_and_tolerance() {
        let f = Files::new();
        let mut r = f.request();
        r.scalars[1].1 = "1.5".into();
        let e = err(&r);
        assert!(
            e.to_string()
                .contains("--scalar n=1.5: `1.5` is not an integer"),
            "{e}"
        );
        let mut r = f.request();
        r.rtol = -1.0;
        assert!(matches!(
            err(&r),
            RunError::BadTolerance { which: "rtol", .. }
        ));
    }

    #[test]
    fn a_run_without_output_or_check_gets_a_note() {
        let f = Files::new();
        let p = prepare_with(spec(), &f.request()).unwrap();
        assert_eq!(unused_result_note(&p), None);
        // `w` has no fixed shape and needs its reference; give it one through the signature.
        let mut s = spec();
        s.signature = simpler_host::Signature::new(
            s.signature
                .args
                .iter()
                .filter(|a| a.name != "w")
                .cloned()
                .collect(),
        )
        .unwrap();
        let r = RunRequest {
            outputs: vec![],
            checks: vec![],
            ..f.request()
        };
        let p = prepare_with(s, &r).unwrap();
        assert!(unused_result_note(&p)
            .unwrap()
            .contains("not saved or checked"));
    }

    #[test]
    fn missing_target() {
        let f = Files::new();
        let e = prepare(&f.request()).unwrap_err();
        assert!(matches!(e, RunError::NoTarget { .. }), "{e:?}");
    }

    #[test]
    fn scalars_parse_per_dtype() {
        assert_eq!(parse_scalar("-1", DataType::Int32), Ok(u64::MAX));
        assert_eq!(parse_scalar("255", DataType::Uint8), Ok(255));
        assert!(parse_scalar("256", DataType::Uint8)
            .unwrap_err()
            .contains("out of range"));
        assert!(parse_scalar("-129", DataType::Int8).is_err());
        assert_eq!(parse_scalar("1.0", DataType::Float32), Ok(0x3f80_0000));
        assert_eq!(parse_scalar("1.0", DataType::Float16), Ok(0x3c00));
        assert_eq!(parse_scalar("1.0", DataType::Bfloat16), Ok(0x3f80));
        assert!(parse_scalar("70000", DataType::Float16).is_err());
        assert_eq!(parse_scalar("0x3c00", DataType::Float16), Ok(0x3c00));
        assert!(parse_scalar("0x10000", DataType::Float16).is_err());
        assert_eq!(
            parse_scalar("0xffffffffffffffff", DataType::Uint64),
            Ok(u64::MAX)
        );
        assert_eq!(
            parse_scalar("18446744073709551615", DataType::Uint64),
            Ok(u64::MAX)
        );
        assert!(parse_scalar("x", DataType::Float32).is_err());
        // Values beyond the type are out of range, never silently inf or "not a number".
        for (text, dtype) in [
            ("1e39", DataType::Float32),
            ("18446744073709551616", DataType::Uint64),
            ("9223372036854775808", DataType::Int64),
            ("-1", DataType::Uint32),
        ] {
            let err = parse_scalar(text, dtype).unwrap_err();
            assert!(err.contains("out of range"), "{text} as {dtype}: {err}");
        }
        assert_eq!(
            parse_scalar("inf", DataType::Float32),
            Ok(f32::INFINITY.to_bits() as u64)
        );
    }

    #[test]
    fn f16_conversion_round_trips_every_value() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f32_to_f16(f) & 0x7c00 == 0x7c00 && f32_to_f16(f) & 0x3ff != 0);
                continue;
            }
            assert_eq!(f32_to_f16(f), h, "{h:#06x} -> {f}");
        }
        // Ties round to even; values just past the top round to infinity.
        assert_eq!(f32_to_f16(1.0 + f32::powi(2.0, -11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * f32::powi(2.0, -11)), 0x3c02);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
        assert_eq!(f32_to_f16(f32::powi(2.0, -25)), 0);
        assert_eq!(f32_to_f16(f32::powi(2.0, -25) * 1.5), 1);
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(-2.5), 0xc020);
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn allclose_follows_numpy() {
        let o = allclose(
            &f32s(&[1.0, 2.0, 3.0]),
            &f32s(&[1.0, 2.00001, 3.0]),
            DataType::Float32,
            1e-5,
            1e-5,
        );
        assert!(o.passed(), "{o:?}");
        assert!(o.max_abs_err > 0.0 && o.max_abs_err < 2e-5);
        // |a-e| <= atol + rtol*|e| is asymmetric in e, like NumPy.
        let o = allclose(
            &f32s(&[0.0, 10.0]),
            &f32s(&[0.0, 10.5]),
            DataType::Float32,
            0.05,
            0.0,
        );
        assert!(o.passed());
        let o = allclose(
            &f32s(&[0.0, 10.5]),
            &f32s(&[0.0, 10.0]),
            DataType::Float32,
            0.049,
            0.0,
        );
        assert!(!o.passed());
        // NaN is never equal, not even to NaN; inf equals only inf.
        let o = allclose(
            &f32s(&[f32::NAN, 1.0]),
            &f32s(&[f32::NAN, 1.0]),
            DataType::Float32,
            1.0,
            1.0,
        );
        assert_eq!((o.mismatches, o.first_mismatch.map(|m| m.0)), (1, Some(0)));
        let o = allclose(
            &f32s(&[f32::INFINITY]),
            &f32s(&[f32::INFINITY]),
            DataType::Float32,
            0.0,
            0.0,
        );
        assert!(o.passed());
        let o = allclose(
            &f32s(&[f32::INFINITY]),
            &f32s(&[f32::NEG_INFINITY]),
            DataType::Float32,
            1.0,
            1.0,
        );
        assert!(!o.passed());
        // First mismatch and max error.
        let o = allclose(
            &f32s(&[1.0, 5.0, 2.0, 9.0]),
            &f32s(&[1.0, 4.0, 2.0, 1.0]),
            DataType::Float32,
            0.0,
            0.5,
        );
        assert_eq!(o.mismatches, 2);
        assert_eq!(o.first_mismatch, Some((1, 5.0, 4.0)));
        assert_eq!(o.max_abs_err, 8.0);
        // Integers compare exactly with zero tolerance, even near i64::MAX.
        let a: Vec<u8> = [i64::MAX, -1]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let e: Vec<u8> = [i64::MAX - 1, -1]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let o = allclose(&a, &e, DataType::Int64, 0.0, 0.0);
        assert_eq!(o.mismatches, 1);
    }

    #[test]
    fn unravel_indices() {
        assert_eq!(unravel(5, &[2, 3]), "[1, 2]");
        assert_eq!(unravel(0, &[4]), "[0]");
        assert_eq!(unravel(23, &[2, 3, 4]), "[1, 2, 3]");
    }

    #[test]
    fn finish_writes_outputs_and_reports_checks() {
        let f = Files::new();
        let mut p = prepare_with(spec(), &f.request()).unwrap();
        // Pretend the run produced w = the reference exactly and z = twos.
        if let ArgValue::Tensor(t) = &mut p.args[3] {
            t.bytes = vec![1; t.bytes.len()];
        }
        if let ArgValue::Tensor(t) = &mut p.args[2] {
            t.bytes = f32s(&[2.0; 6]);
        }
        finish(&p).unwrap();
        let z = npy::read(&f.path("z.npy")).unwrap();
        assert_eq!(z.bytes, f32s(&[2.0; 6]));
        // A mismatch fails with exit code 1.
        if let ArgValue::Tensor(t) = &mut p.args[3] {
            t.bytes[7] = 9; // the top byte of element 1
        }
        let e = finish(&p).unwrap_err();
        assert!(matches!(e, RunError::CheckFailed { .. }), "{e:?}");
        assert_eq!(e.exit_code(), 1);
    }
}
