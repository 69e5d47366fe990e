//! Helpers shared by the integration tests of the `simpler` binary (`cli.rs`, `examples.rs`):
//! spawning the binary and writing `.npy` files by hand, independently of `src/npy.rs`.

// Each test crate uses a different subset of these helpers.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The `simpler` binary Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_simpler");

/// Runs `simpler <args>` in `cwd` and captures its exit status, stdout and stderr.
pub fn simpler(args: &[&str], cwd: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the simpler binary runs")
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
