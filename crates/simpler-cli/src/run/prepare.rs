//! Matching a `simpler run` command line against the callable's signature: every name,
//! direction, dtype and shape checked, every file read and every output path checked
//! (`outputs`) before anything runs (the rules are listed in the [`run`](super) module
//! doc). The signature itself comes from `simpler_host`
//! ([`Signature::position`](simpler_host::Signature::position),
//! [`ArgDirection::copies_in`]); the worker checks the final arguments again when it runs.

use std::path::{Path, PathBuf};

use simpler_abi::DataType;
use simpler_host::{ArgDirection, ArgSpec, CallableSpec};
use simpler_toolchain::compare::Tolerance;
use simpler_toolchain::npy::{self, NpyArray};
use simpler_toolchain::scalar;

use super::error::{article, list_names, RunError};
use super::outputs::{self, target_files, ReadFile};
use super::{load_callable, ArgValue, PreparedRun, RunRequest};

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
    Tolerance::new(req.rtol, req.atol)
        .validate()
        .map_err(|source| RunError::BadTolerance { source })?;
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
        let bits = scalar::parse(text, args[i].dtype).map_err(|source| RunError::BadScalar {
            name: name.clone(),
            value: text.clone(),
            source,
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
    // Every file the run reads, so that no output replaces one of them.
    let mut reads = target_files(&req.target);
    for (flag, files) in [(INPUT.flag, &req.inputs), (CHECK.flag, &req.checks)] {
        reads.extend(files.iter().map(|(name, path)| ReadFile {
            what: format!("{flag} {name}"),
            path: path.as_path().into(),
        }));
    }
    outputs::check(&req.outputs, &reads)?;
    super::trace_out::check(&req.trace, &req.outputs, &reads)?;
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
    let outputs: Vec<(usize, PathBuf)> = out_idx
        .iter()
        .zip(&req.outputs)
        .map(|(&i, (_, path))| (i, path.clone()))
        .collect();
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
        trace: req.trace.clone(),
    })
}
