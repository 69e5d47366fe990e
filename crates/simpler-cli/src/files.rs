//! File identity for the output checks of `simpler run` and `simpler build`: whether two
//! paths name the same file, so that a command never replaces a file it reads. This module
//! only looks at paths and metadata; it never opens, reads or writes a file, and the rule for
//! what may be replaced at all (a regular file or nothing) stays
//! [`simpler_host::fsio::refuse_non_regular`]'s, the one the atomic write applies.

use std::fs::Metadata;
use std::path::{Path, PathBuf};

/// What identifies a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileKey {
    /// An existing file (symbolic links followed): its device and inode numbers, so that a
    /// hard link or a symbolic link to a file is the file.
    Inode {
        /// Device number.
        dev: u64,
        /// Inode number.
        ino: u64,
    },
    /// A path with no file behind it (or, off Unix, an existing one): its directory's
    /// canonical path joined with its name, so that `out.npy` and `./out.npy` are one file.
    Path(PathBuf),
}

#[cfg(unix)]
fn inode(m: &Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Some((m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn inode(_: &Metadata) -> Option<(u64, u64)> {
    None
}

/// The directory a file named by `path` lives in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The identity of the file at `path`, or `None` when it cannot be told (the path has no
/// file name, or its directory does not exist).
pub fn key(path: &Path) -> Option<FileKey> {
    if let Ok(m) = std::fs::metadata(path) {
        if let Some((dev, ino)) = inode(&m) {
            return Some(FileKey::Inode { dev, ino });
        }
        return std::fs::canonicalize(path).ok().map(FileKey::Path);
    }
    let name = path.file_name()?;
    let dir = std::fs::canonicalize(parent_dir(path)).ok()?;
    Some(FileKey::Path(dir.join(name)))
}

/// Whether `a` and `b` name the same file (see [`FileKey`]); `false` when either identity
/// cannot be told.
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (key(a), key(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_links_and_new_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let a = p.join("a.npy");
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(p.join("b.npy"), b"a").unwrap();
        std::fs::hard_link(&a, p.join("hard.npy")).unwrap();
        std::os::unix::fs::symlink(&a, p.join("soft.npy")).unwrap();
        std::fs::create_dir(p.join("sub")).unwrap();
        assert!(same_file(&a, &p.join("sub/../a.npy")));
        assert!(
            same_file(&a, &p.join("hard.npy")),
            "a hard link is the file"
        );
        assert!(
            same_file(&p.join("soft.npy"), &a),
            "a symbolic link is its target"
        );
        assert!(
            !same_file(&a, &p.join("b.npy")),
            "equal bytes, another file"
        );
        // Files not there yet compare by their canonical path.
        assert!(same_file(&p.join("new.npy"), &p.join("sub/../new.npy")));
        assert!(!same_file(&p.join("new.npy"), &p.join("sub/new.npy")));
        assert!(!same_file(
            &p.join("no/such/dir.npy"),
            &p.join("no/such/dir.npy")
        ));
        assert_eq!(parent_dir(Path::new("x.npy")), Path::new("."));
        assert_eq!(parent_dir(Path::new("d/x.npy")), Path::new("d"));
    }
}
