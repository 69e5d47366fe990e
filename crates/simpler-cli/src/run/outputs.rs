//! Where `simpler run` may write, checked for every `--output` before anything runs (the
//! write itself, after a successful run, is `finish`'s): the output's directory exists; the
//! output is not the same file ([`crate::files::same_file`]: the same path, a hard link or
//! a symbolic link to it) as any file the run reads — an `--input`, a `--check` reference,
//! the bundle or the manifest — nor as another `--output`; and an existing output is a
//! regular file ([`refuse_non_regular`], the rule the atomic write applies later). So a run
//! never replaces its own input or reference, and `--check` only ever compares with a file
//! the run leaves alone. This module only looks at paths; it reads and writes nothing.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use simpler_host::fsio::refuse_non_regular;

use super::error::RunError;
use crate::files::{parent_dir, same_file};

/// A file the run reads: what reads it (`--input x`, `--check y`, `the bundle`) and its path.
pub struct ReadFile<'a> {
    /// What reads it, as the error names it.
    pub what: String,
    /// Its path.
    pub path: Cow<'a, Path>,
}

/// The files a run of `target` reads besides its `--input`s and `--check`s: the bundle, or
/// the manifest of an example (the manifest itself, or `simpler.toml` in its directory).
pub fn target_files(target: &Path) -> Vec<ReadFile<'static>> {
    let (what, path) = if target.is_dir() {
        (
            "the manifest",
            target.join(simpler_toolchain::manifest::MANIFEST_FILE),
        )
    } else if target.extension().is_some_and(|e| e == "toml") {
        ("the manifest", target.to_path_buf())
    } else {
        ("the bundle", target.to_path_buf())
    };
    vec![ReadFile {
        what: what.into(),
        path: Cow::Owned(path),
    }]
}

/// Checks every output `(argument name, path)` against `reads` and against the outputs
/// before it, in order.
///
/// # Errors
/// [`RunError::OutputDir`], [`RunError::OutputIsRead`], [`RunError::SameOutput`] or
/// [`RunError::OutputNotRegular`], for the first output at fault.
pub fn check(outputs: &[(String, PathBuf)], reads: &[ReadFile<'_>]) -> Result<(), RunError> {
    for (k, (name, path)) in outputs.iter().enumerate() {
        let dir = parent_dir(path);
        if !dir.is_dir() {
            return Err(RunError::OutputDir {
                name: name.clone(),
                dir: dir.to_path_buf(),
            });
        }
        if let Some(r) = reads.iter().find(|r| same_file(path, &r.path)) {
            return Err(RunError::OutputIsRead {
                name: name.clone(),
                path: path.clone(),
                what: r.what.clone(),
                other: r.path.to_path_buf(),
            });
        }
        if let Some((first, _)) = outputs[..k].iter().find(|(_, p)| same_file(path, p)) {
            return Err(RunError::SameOutput {
                first: first.clone(),
                second: name.clone(),
                path: path.clone(),
            });
        }
        refuse_non_regular(path).map_err(|source| RunError::OutputNotRegular {
            name: name.clone(),
            source,
        })?;
    }
    Ok(())
}
