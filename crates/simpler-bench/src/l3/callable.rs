//! The level-3 sweep's no-op chip callable: an orchestration compiled from a few lines of C
//! that submits no task, with no kernels and no arguments. A shared-library image, so chips
//! in child processes can load it too (`docs/l3-worker.md` §5); every chip row and the L2
//! floor run this same callable. This module compiles through the caller's
//! [`Compiler`] and touches nothing else.

use std::path::Path;

use simpler_host::{CallableSpec, CodeImage, Signature};
use simpler_toolchain::build::{Compiler, Target};

use super::L3BenchError;

/// The callable's name.
pub const NOOP_CALLABLE: &str = "l3_noop";

/// The orchestration's entry symbol.
const ENTRY: &str = "aicpu_orchestration_entry";

/// The orchestration: returns at once, submitting nothing.
const NOOP_ORCHESTRATION_C: &str = r#"#include "simpler/orchestration.h"

SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,
                                                        const SimplerOrchArgs *args) {
    (void)ops;
    (void)args;
    return 0;
}
"#;

/// Compiles the no-op orchestration with `compiler` (through its kernel cache) in a
/// temporary directory and returns the callable: no arguments, no kernels, the
/// orchestration as a library image.
///
/// # Errors
/// [`L3BenchError::Io`] when the source cannot be written; [`L3BenchError::Compile`] when
/// the compiler is missing or refuses it.
pub fn noop_chip_callable(compiler: &Compiler) -> Result<CallableSpec, L3BenchError> {
    let dir = tempfile::tempdir().map_err(|source| L3BenchError::Io {
        what: "a temporary directory for the no-op orchestration".into(),
        source,
    })?;
    let source = dir.path().join("l3_noop_orchestration.c");
    write(&source)?;
    let compiled = compiler.compile_target(&source, Target::Orchestration)?;
    Ok(CallableSpec {
        name: NOOP_CALLABLE.into(),
        signature: Signature::new(Vec::new()).expect("an empty signature is valid"),
        orchestration: CodeImage::Library {
            bytes: compiled.image,
            entry: ENTRY.into(),
        },
        kernels: Vec::new(),
        runtime: None,
    })
}

fn write(path: &Path) -> Result<(), L3BenchError> {
    std::fs::write(path, NOOP_ORCHESTRATION_C).map_err(|source| L3BenchError::Io {
        what: format!("`{}`", path.display()),
        source,
    })
}
