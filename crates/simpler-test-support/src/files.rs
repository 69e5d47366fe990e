//! Paths that are not regular files, for tests of readers that must refuse them at open
//! (without blocking on a FIFO that has no writer).

use std::path::{Path, PathBuf};

/// Makes a FIFO at `path` (`mkfifo`); panics if it cannot.
pub fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mkfifo {} failed", path.display());
}

/// Three paths that are not regular files, each with what a refusal calls it: `/dev/zero`
/// ("a character device"), a new FIFO `dir/name` ("a FIFO", no writer ever opens it) and
/// `dir` itself ("a directory").
pub fn non_regular(dir: &Path, name: &str) -> [(PathBuf, &'static str); 3] {
    let fifo = dir.join(name);
    mkfifo(&fifo);
    [
        (PathBuf::from("/dev/zero"), "a character device"),
        (fifo, "a FIFO"),
        (dir.to_path_buf(), "a directory"),
    ]
}
