//! Shared by the C tests of this crate: the repository root, a scratch directory per test
//! process, and the system C compiler (`$CC`, default `cc`) run with the repository's
//! `include/` on the include path, failing the test with the compiler's diagnostics.
//! Every module's programs share the scratch directory, so each names its own files.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A scratch directory of this test process (`simpler-abi-<test binary>-<pid>` under the
/// system temporary directory), created if missing.
pub fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "simpler-abi-{}-{}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the C compiler as `$CC -I <root>/include <args>`; panics with its stderr, naming
/// `what`, when it fails.
pub fn build(what: &str, args: &[&OsStr]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg("-I")
        .arg(root().join("include"))
        .args(args)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "{what} failed to compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes `source` to `<scratch>/<name>.c` and compiles it into the executable
/// `<scratch>/<name>` as `$CC -I <root>/include <flags> <name>.c <extra_args> -o <name>`
/// (libraries go in `extra_args`, after the source, so that they link); returns the
/// executable's path. Panics with the compiler's stderr when it fails.
pub fn compile(name: &str, source: &str, flags: &[&str], extra_args: &[&OsStr]) -> PathBuf {
    let dir = scratch_dir();
    let (src, exe) = (dir.join(format!("{name}.c")), dir.join(name));
    std::fs::write(&src, source).unwrap();
    let mut args: Vec<&OsStr> = flags.iter().map(OsStr::new).collect();
    args.push(src.as_os_str());
    args.extend_from_slice(extra_args);
    args.extend([OsStr::new("-o"), exe.as_os_str()]);
    build(&format!("{name}.c"), &args);
    exe
}
