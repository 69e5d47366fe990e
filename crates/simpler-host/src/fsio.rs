//! Atomic file output: a file is written to a temporary file in the destination's directory,
//! flushed to disk and renamed over the destination, so a reader sees the old file or the
//! whole new one and a failure leaves no partial output. Only a regular file (or nothing) is
//! ever replaced: renaming over a device node, FIFO, socket, directory or symbolic link would
//! destroy it.

use std::io::Write;
use std::path::Path;

/// Refuses a destination that exists and is not a regular file.
///
/// # Errors
/// `AlreadyExists`, naming the path and what it is.
pub fn refuse_non_regular(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => {
            let kind = if m.file_type().is_symlink() {
                "a symbolic link"
            } else if m.is_dir() {
                "a directory"
            } else {
                "a device, FIFO or socket"
            };
            Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "refusing to replace `{}`: it is {kind}, not a regular file",
                    path.display()
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Writes `bytes` to `path` atomically (mode 0644 on Unix).
///
/// # Errors
/// Any I/O error, or [`refuse_non_regular`]'s; the destination is then untouched.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    refuse_non_regular(path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // NamedTempFile is created 0600; outputs are ordinary files.
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // Make the rename itself durable; failing to is not worth failing the write for.
    #[cfg(unix)]
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_files_but_never_links_dirs_or_fifos() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        write_atomic(&file, b"one").unwrap();
        write_atomic(&file, b"two").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let err = write_atomic(&link, b"x").unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(write_atomic(dir.path(), b"x")
            .unwrap_err()
            .to_string()
            .contains("directory"));
        let fifo = dir.path().join("p");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        assert!(write_atomic(&fifo, b"x")
            .unwrap_err()
            .to_string()
            .contains("FIFO"));
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            3,
            "no temporary file left"
        );
    }
}
