//! `simpler-example-data <example> <out-dir>`: writes an example's deterministic inputs as
//! `<out-dir>/<NAME>.npy` and its reference outputs as `<out-dir>/<NAME>.ref.npy`, and prints
//! each path written. The output directory is created if missing.
//!
//! An example with scalar arguments also gets `<out-dir>/scalars.txt`: one `NAME=VALUE` line
//! per scalar, in manifest order, each line exactly what `simpler run --scalar` takes
//! (`scripts/run-example.sh` turns every line into a `--scalar` flag). An example without
//! scalars gets no such file (a stale one is removed).
//!
//! Exit codes: 0 on success, 1 on an I/O error, 2 on a usage error (wrong arguments or an
//! unknown example).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use simpler_examples::{inputs, reference, scalars, Array, EXAMPLES};

/// The file listing the scalar arguments, one `NAME=VALUE` line each.
const SCALARS_FILE: &str = "scalars.txt";

fn usage() -> String {
    format!(
        "usage: simpler-example-data <example> <out-dir>\n  examples: {}",
        EXAMPLES.join(", ")
    )
}

fn write_all(example: &str, out_dir: &Path) -> Result<Vec<PathBuf>, String> {
    let ins = inputs(example).ok_or_else(|| format!("unknown example {example:?}"))?;
    let refs =
        reference(example, &ins).ok_or_else(|| format!("no reference for example {example:?}"))?;
    std::fs::create_dir_all(out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let files: Vec<(PathBuf, &Array)> = ins
        .iter()
        .map(|a| (out_dir.join(format!("{}.npy", a.name)), a))
        .chain(
            refs.iter()
                .map(|a| (out_dir.join(format!("{}.ref.npy", a.name)), a)),
        )
        .collect();
    let mut written = Vec::with_capacity(files.len() + 1);
    for (path, a) in files {
        simpler_toolchain::npy::write(&path, &a.to_npy())
            .map_err(|e| simpler_toolchain::error_chain(&e))?;
        written.push(path);
    }
    let sc = scalars(example).ok_or_else(|| format!("no scalars for example {example:?}"))?;
    let path = out_dir.join(SCALARS_FILE);
    if sc.is_empty() {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot remove {}: {e}", path.display())),
        }
    } else {
        let text: String = sc.iter().map(|s| s.flag_value() + "\n").collect();
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}", usage());
        return ExitCode::SUCCESS;
    }
    let [example, out_dir] = args.as_slice() else {
        eprintln!(
            "error: expected 2 arguments, got {}\n{}",
            args.len(),
            usage()
        );
        return ExitCode::from(2);
    };
    if !EXAMPLES.contains(&example.as_str()) {
        eprintln!("error: unknown example {example:?}\n{}", usage());
        return ExitCode::from(2);
    }
    match write_all(example, Path::new(out_dir)) {
        Ok(paths) => {
            for p in paths {
                println!("{}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::from(1)
        }
    }
}
