//! Files a user names: reading them and writing them.
//!
//! **Input.** Every reader of a user's file (`.npy` inputs, bundles, manifests, trace files,
//! the C ABI's `simpler_register_callable_file`) opens it through [`open_regular`] or
//! [`read_regular`]: the file is opened non-blocking, so a FIFO with no writer cannot block
//! the open, then `fstat`ed, and anything but a regular file (a directory, FIFO, socket or
//! device such as `/dev/zero`) is refused before a byte is read. A symbolic link is followed:
//! what it names is checked. Non-blocking mode changes nothing for a regular file, so the file
//! is then read as it is. [`read_regular`] reads at most the limit its caller states and
//! refuses a file larger than that ([`ReadFileError::TooLarge`]); a reader whose header
//! declares its length ([`open_regular`]'s callers) reads no more than that.
//!
//! **Output.** A file is written to a temporary file in the destination's directory,
//! flushed to disk and renamed over the destination, so a reader sees the old file or the
//! whole new one and a failure leaves no partial output. Only a regular file (or nothing) is
//! ever replaced: renaming over a device node, FIFO, socket, directory or symbolic link would
//! destroy it.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Why a user's file could not be opened or read. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReadFileError {
    /// The file does not exist.
    #[error("`{}` does not exist", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The path names something other than a regular file.
    #[error("`{}` is {kind}, not a regular file", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is: "a directory", "a FIFO", "a socket", "a character device" or
        /// "a block device".
        kind: &'static str,
    },
    /// The file holds more bytes than the reader accepts.
    #[error("`{}` is {size} bytes, more than the {limit} bytes {what} may hold", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes (at least `limit + 1` for a file that grew while being read).
        size: u64,
        /// The most bytes accepted.
        limit: u64,
        /// What kind of file it is ("a bundle", "a trace file", ...).
        what: &'static str,
    },
    /// Opening, `fstat` or reading failed.
    #[error("cannot read `{}`", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// What a non-regular file is, for [`ReadFileError::NotRegular`].
fn kind_of(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// Opens `path` for reading without blocking (a FIFO with no writer is refused at once, not
/// waited on) and checks that it is a regular file; returns the file and its size in bytes.
///
/// # Errors
/// [`ReadFileError::Missing`], [`ReadFileError::NotRegular`] or [`ReadFileError::Io`],
/// naming `path`.
pub fn open_regular(path: &Path) -> Result<(File, u64), ReadFileError> {
    let io = |source| ReadFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking only for the open: it does not change how a regular file reads.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = match options.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReadFileError::Missing {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io(e)),
    };
    let meta = file.metadata().map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(ReadFileError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        });
    }
    Ok((file, meta.len()))
}

/// Reads up to `limit` bytes from `file` (opened by [`open_regular`] from `path`, `size`
/// bytes long at the time): the whole file when it fits.
///
/// # Errors
/// [`ReadFileError::TooLarge`] when the file holds more than `limit` bytes (checked before
/// reading and again while reading, for a file that grows), [`ReadFileError::Io`].
pub fn read_limited(
    mut file: File,
    path: &Path,
    size: u64,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, ReadFileError> {
    let too_large = |size| ReadFileError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit,
        what,
    };
    if size > limit {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    (&mut file)
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| ReadFileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Reads the regular file at `path` whole, refusing it if it holds more than `limit` bytes;
/// `what` names the kind of file in that error ("a bundle").
///
/// # Errors
/// As [`open_regular`] and [`read_limited`].
pub fn read_regular(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, ReadFileError> {
    let (file, size) = open_regular(path)?;
    read_limited(file, path, size, limit, what)
}

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
        simpler_test_support::files::mkfifo(&fifo);
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

    #[test]
    fn reads_refuse_devices_fifos_and_directories_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        // The FIFO has no writer: a blocking open would wait forever (the test would hang).
        for (path, kind) in simpler_test_support::files::non_regular(dir.path(), "p") {
            let e = read_regular(&path, 1 << 20, "a test file").unwrap_err();
            assert!(
                matches!(&e, ReadFileError::NotRegular { kind: k, .. } if *k == kind),
                "{e:?}"
            );
            assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
        }
        let e = read_regular(&dir.path().join("none"), 1 << 20, "a test file").unwrap_err();
        assert!(matches!(e, ReadFileError::Missing { .. }), "{e:?}");
        // A link to a regular file is read through.
        let file = dir.path().join("f");
        std::fs::write(&file, b"abc").unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link, 3, "a test file").unwrap(), b"abc");
    }

    #[test]
    fn reads_stop_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, vec![7u8; 100]).unwrap();
        assert_eq!(read_regular(&file, 100, "a test file").unwrap().len(), 100);
        let e = read_regular(&file, 99, "a test file").unwrap_err();
        assert!(
            matches!(
                e,
                ReadFileError::TooLarge {
                    size: 100,
                    limit: 99,
                    ..
                }
            ),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("100 bytes") && msg.contains("99 bytes") && msg.contains("a test file"),
            "{msg}"
        );
        // The size fstat reports is not trusted alone: a file that claims less is cut at the
        // limit all the same.
        let (f, _) = open_regular(&file).unwrap();
        let e = read_limited(f, &file, 10, 50, "a test file").unwrap_err();
        assert!(
            matches!(
                e,
                ReadFileError::TooLarge {
                    size: 51,
                    limit: 50,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
