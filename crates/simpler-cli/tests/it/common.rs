//! Helpers of the integration tests of the `simpler` binary: spawning the binary (with a
//! private kernel cache), comparing f32 results, and writing `.npy` files by hand,
//! independently of `simpler_toolchain::npy`.

use std::path::Path;
use std::process::{Command, Output};

/// The `simpler` binary Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_simpler");

/// The kernel cache the tests' builds use (not the user's).
pub fn cache_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernel-cache")
}

/// `simpler` as a command, with the tests' kernel cache.
pub fn command() -> Command {
    let mut c = Command::new(BIN);
    c.env("SIMPLER_CACHE_DIR", cache_dir());
    c
}

/// Runs `simpler <args>` in `cwd` and captures its exit status, stdout and stderr.
pub fn simpler(args: &[&str], cwd: &Path) -> Output {
    command()
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the simpler binary runs")
}

/// Whether `actual` is close to `expected` (rtol = atol = 1e-5); the report on failure.
pub fn close(actual: &[f32], expected: &[f32]) -> Result<(), String> {
    use simpler_toolchain::compare::{allclose_f32, Tolerance};
    match allclose_f32(actual, expected, Tolerance::new(1e-5, 1e-5)) {
        Ok(r) if r.passed() => Ok(()),
        Ok(r) => Err(r.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes an example array as an `f32` `.npy` file.
pub fn write_array(path: &Path, a: &simpler_examples::Array) {
    simpler_toolchain::npy::write(path, &a.to_npy()).unwrap();
}

/// (stdout, stderr) of a finished command, lossily decoded.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A path as `&str` (test paths are UTF-8).
pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Writes a `.npy` file (format 1.0) by hand: the header dict for `descr` (e.g. `<f4`,
/// `<i4`), C order and `shape`, padded to 64 bytes, then `data` as given. `data` need not
/// match the shape, so that malformed files can be made too.
pub fn write_npy_raw(path: &Path, descr: &str, shape: &[u64], data: &[u8]) {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape_txt = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_txt}, }}");
    let pad = (64 - (10 + header.len() + 1) % 64) % 64;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

/// Writes a little-endian f32 `.npy` file by hand (format 1.0).
pub fn write_f32_npy(path: &Path, shape: &[u64], values: &[f32]) {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    write_npy_raw(path, "<f4", shape, &data);
}

/// Runs `simpler <args>` in `cwd` with its stdout a pipe whose read end is closed before the
/// command prints anything (as `simpler … | true` leaves it), and captures its exit status
/// and stderr.
pub fn simpler_into_closed_pipe(args: &[&str], cwd: &Path) -> Output {
    use std::process::Stdio;
    let mut child = command()
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the simpler binary runs");
    drop(child.stdout.take());
    child.wait_with_output().expect("the simpler binary exits")
}
