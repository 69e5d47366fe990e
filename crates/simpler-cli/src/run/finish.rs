//! After a successful run: writing every `--output` (atomically, first of all) and comparing
//! every `--check` with its reference through [`simpler_toolchain::compare::allclose`], printing
//! one PASS or FAIL line each.

use simpler_abi::DataType;
use simpler_toolchain::compare::{self, Tolerance};
use simpler_toolchain::npy;

use super::error::{fmt_shape, RunError};
use super::{ArgValue, PreparedRun};

/// An element value as its dtype would print it (floats at their own precision).
fn fmt_value(v: f64, dtype: DataType) -> String {
    match dtype {
        DataType::Float32 | DataType::Float16 | DataType::Bfloat16 => format!("{}", v as f32),
        _ => format!("{}", v as i128),
    }
}

/// After a successful [`execute`](super::execute), before anything else can fail: writes
/// every `--output` (atomically), stopping at the first that fails. Returns the line to print
/// for each file written, and the failure if there was one.
pub fn write_outputs(prepared: &PreparedRun) -> (Vec<String>, Option<RunError>) {
    let args = &prepared.spec.signature.args;
    let mut lines = Vec::new();
    for (i, path) in &prepared.outputs {
        let ArgValue::Tensor(t) = &prepared.args[*i] else {
            unreachable!("outputs are tensors")
        };
        if let Err(source) = npy::write(path, t) {
            let e = RunError::WriteOutput {
                name: args[*i].name.clone(),
                source,
            };
            return (lines, Some(e));
        }
        lines.push(format!(
            "wrote {} ({}{})",
            path.display(),
            t.dtype,
            fmt_shape(&t.shape)
        ));
    }
    (lines, None)
}

/// Runs every `--check` of a successful run, printing PASS/FAIL lines.
///
/// # Errors
/// [`RunError::CheckFailed`] (exit code 1) naming every argument that failed.
pub fn check(prepared: &PreparedRun) -> Result<(), RunError> {
    let args = &prepared.spec.signature.args;
    let mut failed = Vec::new();
    for (i, path, reference) in &prepared.checks {
        let ArgValue::Tensor(t) = &prepared.args[*i] else {
            unreachable!("checks are on tensors")
        };
        let name = &args[*i].name;
        let o = compare::allclose(
            &t.bytes,
            &reference.bytes,
            t.dtype,
            Tolerance::new(prepared.rtol, prepared.atol),
        )
        .expect("prepare checked the tolerances and the reference's dtype and shape");
        let tol = format!("rtol={:e} atol={:e}", prepared.rtol, prepared.atol);
        if o.passed() {
            outln!(
                "PASS {name}: {} elements match {} ({tol}, max abs error {:.3e})",
                o.total,
                path.display(),
                o.max_abs_err
            );
        } else {
            let first = o.first.expect("a failed check has a first mismatch");
            outln!(
                "FAIL {name}: {} of {} elements differ from {} ({tol}, max abs error {:.3e}); \
                 first mismatch at {:?}: got {}, expected {}",
                o.mismatches,
                o.total,
                path.display(),
                o.max_abs_err,
                compare::unravel(first.index, &t.shape),
                fmt_value(first.actual, t.dtype),
                fmt_value(first.expected, t.dtype)
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
