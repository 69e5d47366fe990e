//! The content-hash kernel cache: compiled shared libraries stored under the SHA-256 of
//! everything that decides their bytes, so an unchanged source is never compiled twice, in
//! one process or across processes. This module owns where the cache is, the key, and
//! reading and storing entries; running the compiler is [`crate::build`]'s job.
//!
//! **Where.** The first of: the directory the caller names; `$SIMPLER_CACHE_DIR`;
//! `$XDG_CACHE_HOME/simpler/kernels`; `$HOME/.cache/simpler/kernels` (empty variables count
//! as unset; with no `$HOME` either, `<temp dir>/simpler/kernels`).
//!
//! **Key.** SHA-256 of: a format tag, the compiler's `--version` banner, the compiler
//! command's words, every flag (include directories included), the source's bytes, and the
//! bytes of every header the source includes (as the compiler's `-MM` lists them), taken by
//! content rather than path. Editing a source or any header it includes, or changing a flag
//! or the compiler, misses; anything else hits.
//!
//! **Entries.** `<key>.so` holds the library, `<key>.log` what the compiler printed (only
//! when it printed something, so that a hit repeats the warnings). Both are written to a
//! private temporary directory inside the cache and renamed into place, so a concurrent
//! reader sees a whole entry or none, and a failed compile leaves nothing. See
//! `docs/toolchain.md` §3.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

/// Tag hashed into every key; bump it when the entry layout changes.
pub const CACHE_FORMAT: &str = "simpler-kernel-cache-v1";

/// The first bytes of every library the cache accepts as an entry.
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";

/// Why the cache could not be used.
#[derive(Debug, thiserror::Error)]
#[error(
    "kernel cache `{}`: cannot {op} (set SIMPLER_CACHE_DIR to use another directory)",
    path.display()
)]
pub struct CacheError {
    /// What was attempted: "create the directory", "store an entry"...
    pub op: &'static str,
    /// The path involved.
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

/// Hit and miss counts of one [`KernelCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found an entry.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
}

/// A cache key: 64 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey(String);

impl CacheKey {
    /// The hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a key is computed from (see the module doc).
#[derive(Debug, Clone, Copy)]
pub struct KeyInputs<'a> {
    /// The compiler command's words.
    pub compiler: &'a [String],
    /// The compiler's `--version` output.
    pub banner: &'a str,
    /// Every flag passed to the compiler.
    pub args: &'a [String],
    /// The source's bytes.
    pub source: &'a [u8],
}

/// A library found in or stored into the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedImage {
    /// The shared library.
    pub image: Vec<u8>,
    /// What the compiler printed when it was built (warnings), possibly empty.
    pub diagnostics: String,
}

/// A kernel cache directory with this process's hit and miss counts.
#[derive(Debug)]
pub struct KernelCache {
    dir: PathBuf,
    hits: AtomicU64,
    misses: AtomicU64,
}

fn non_empty(v: Option<OsString>) -> Option<OsString> {
    v.filter(|v| !v.is_empty())
}

/// The cache directory from explicit values of the variables (see the module doc).
pub fn default_dir(
    simpler_cache_dir: Option<OsString>,
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> PathBuf {
    if let Some(d) = non_empty(simpler_cache_dir) {
        return PathBuf::from(d);
    }
    let base = match (non_empty(xdg_cache_home), non_empty(home)) {
        (Some(xdg), _) => PathBuf::from(xdg),
        (None, Some(home)) => PathBuf::from(home).join(".cache"),
        (None, None) => std::env::temp_dir(),
    };
    base.join("simpler").join("kernels")
}

impl KernelCache {
    /// A cache in `dir` (created on the first store).
    pub fn new(dir: impl Into<PathBuf>) -> KernelCache {
        KernelCache {
            dir: dir.into(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The cache in `dir` if given, else where the environment says (see the module doc).
    pub fn locate(dir: Option<PathBuf>) -> KernelCache {
        KernelCache::new(dir.unwrap_or_else(|| {
            default_dir(
                std::env::var_os("SIMPLER_CACHE_DIR"),
                std::env::var_os("XDG_CACHE_HOME"),
                std::env::var_os("HOME"),
            )
        }))
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The hits and misses counted so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    /// The key of `inputs` and of the headers the source includes, given as their paths
    /// (a header that cannot be read is hashed by its path instead).
    pub fn key(inputs: &KeyInputs<'_>, headers: &[PathBuf]) -> CacheKey {
        let mut h = Sha256::new();
        for part in [
            CACHE_FORMAT,
            inputs.banner,
            &inputs.compiler.join("\0"),
            &inputs.args.join("\0"),
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        h.update(inputs.source);
        let mut headers: Vec<&PathBuf> = headers.iter().collect();
        headers.sort();
        headers.dedup();
        for header in headers {
            match std::fs::read(header) {
                Ok(bytes) => h.update(&bytes),
                Err(_) => h.update(header.as_os_str().as_encoded_bytes()),
            }
            h.update([0]);
        }
        CacheKey(
            h.finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        )
    }

    /// Where the library of `key` is (or would be) stored.
    pub fn entry_path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.so", key.as_str()))
    }

    fn log_path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.log", key.as_str()))
    }

    /// The SHA-256 of the stored library, hex, beside it: a lookup whose library does not
    /// match it (truncated or overwritten by hand, half-copied) is a miss.
    fn digest_path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.sha256", key.as_str()))
    }

    /// The entry of `key`, counting a hit, or `None`, counting a miss. A library that is not
    /// exactly what was stored (its digest differs, or it has none: truncated, corrupted,
    /// or written by something else) is a miss and is replaced by the next store.
    pub fn lookup(&self, key: &CacheKey) -> Option<CachedImage> {
        let digest = std::fs::read_to_string(self.digest_path(key)).ok();
        let found = std::fs::read(self.entry_path(key)).ok().filter(|image| {
            image.starts_with(ELF_MAGIC) && digest.as_deref().map(str::trim) == Some(&hex(image))
        });
        match found {
            Some(image) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                let diagnostics = std::fs::read_to_string(self.log_path(key)).unwrap_or_default();
                Some(CachedImage { image, diagnostics })
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Stores the entry of `key`: `produce` is given a path inside a private temporary
    /// directory of the cache, writes the library there and returns what the compiler
    /// printed; the library (and that text, if any) is then renamed into place. Nothing is
    /// stored when `produce` fails.
    ///
    /// # Errors
    /// `produce`'s error, or a [`CacheError`] (converted by `From`) when the cache directory
    /// cannot be created or written.
    pub fn store<E: From<CacheError>>(
        &self,
        key: &CacheKey,
        produce: impl FnOnce(&Path) -> Result<String, E>,
    ) -> Result<CachedImage, E> {
        let fail = |op, path: &Path| {
            let path = path.to_path_buf();
            move |source| E::from(CacheError { op, path, source })
        };
        std::fs::create_dir_all(&self.dir).map_err(fail("create the directory", &self.dir))?;
        let tmp = tempfile::Builder::new()
            .prefix(".build-")
            .tempdir_in(&self.dir)
            .map_err(fail("create a temporary directory", &self.dir))?;
        let out = tmp.path().join("image.so");
        let diagnostics = produce(&out)?;
        let image = std::fs::read(&out).map_err(fail("read the compiled library", &out))?;
        if !diagnostics.trim().is_empty() {
            let log = tmp.path().join("image.log");
            std::fs::write(&log, &diagnostics).map_err(fail("store an entry", &log))?;
            let dest = self.log_path(key);
            std::fs::rename(&log, &dest).map_err(fail("store an entry", &dest))?;
        }
        let sum = tmp.path().join("image.sha256");
        std::fs::write(&sum, hex(&image)).map_err(fail("store an entry", &sum))?;
        let dest = self.digest_path(key);
        std::fs::rename(&sum, &dest).map_err(fail("store an entry", &dest))?;
        let dest = self.entry_path(key);
        std::fs::rename(&out, &dest).map_err(fail("store an entry", &dest))?;
        Ok(CachedImage { image, diagnostics })
    }
}

/// The SHA-256 of `bytes`, lower-case hex.
fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_rules() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(
            default_dir(os("/c"), os("/x"), os("/h")),
            PathBuf::from("/c")
        );
        assert_eq!(
            default_dir(os(""), os("/x"), os("/h")),
            PathBuf::from("/x/simpler/kernels")
        );
        assert_eq!(
            default_dir(None, os(""), os("/h")),
            PathBuf::from("/h/.cache/simpler/kernels")
        );
        assert_eq!(
            default_dir(None, None, None),
            std::env::temp_dir().join("simpler/kernels")
        );
        let c = KernelCache::locate(Some("/given".into()));
        assert_eq!(c.dir(), Path::new("/given"));
    }

    #[test]
    fn keys_change_with_every_ingredient() {
        let dir = tempfile::tempdir().unwrap();
        let header = dir.path().join("k.h");
        std::fs::write(&header, "#define A 1\n").unwrap();
        let cc = vec!["cc".to_string()];
        let args = vec!["-O2".to_string()];
        let base = KeyInputs {
            compiler: &cc,
            banner: "cc 1.0",
            args: &args,
            source: b"int x;",
        };
        let key = |i: &KeyInputs<'_>| KernelCache::key(i, std::slice::from_ref(&header));
        let k0 = key(&base);
        assert_eq!(k0, key(&base), "deterministic");
        assert_eq!(k0.as_str().len(), 64);
        let cc2 = vec!["gcc".to_string()];
        let args2 = vec!["-O3".to_string()];
        for other in [
            KeyInputs {
                compiler: &cc2,
                ..base
            },
            KeyInputs {
                banner: "cc 2.0",
                ..base
            },
            KeyInputs {
                args: &args2,
                ..base
            },
            KeyInputs {
                source: b"int y;",
                ..base
            },
        ] {
            assert_ne!(key(&other), k0);
        }
        std::fs::write(&header, "#define A 2\n").unwrap();
        assert_ne!(key(&base), k0, "a header is hashed by content");
        // Header order does not matter.
        let other = dir.path().join("j.h");
        std::fs::write(&other, "").unwrap();
        assert_eq!(
            KernelCache::key(&base, &[header.clone(), other.clone()]),
            KernelCache::key(&base, &[other, header])
        );
    }

    #[derive(Debug)]
    enum TestError {
        Cache,
        Produce,
    }

    impl From<CacheError> for TestError {
        fn from(_: CacheError) -> TestError {
            TestError::Cache
        }
    }

    #[test]
    fn store_then_hit_and_failed_stores_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::new(dir.path().join("cache"));
        let key = CacheKey("ab".repeat(32));
        assert!(cache.lookup(&key).is_none());
        assert_eq!(cache.stats(), CacheStats { hits: 0, misses: 1 });
        let failed: Result<CachedImage, TestError> = cache.store(&key, |out| {
            std::fs::write(out, b"partial").unwrap();
            Err(TestError::Produce)
        });
        assert!(matches!(failed, Err(TestError::Produce)));
        assert_eq!(std::fs::read_dir(cache.dir()).unwrap().count(), 0);
        let stored: CachedImage = cache
            .store::<TestError>(&key, |out| {
                std::fs::write(out, b"\x7fELF-image").unwrap();
                Ok("warning: x\n".into())
            })
            .unwrap();
        assert_eq!(stored.image, b"\x7fELF-image");
        let hit = cache.lookup(&key).unwrap();
        assert_eq!(hit, stored);
        assert_eq!(cache.stats(), CacheStats { hits: 1, misses: 1 });
        // Only the entry and its log: no temporary directory left behind.
        let mut names: Vec<String> = std::fs::read_dir(cache.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                format!("{}.log", key.0),
                format!("{}.sha256", key.0),
                format!("{}.so", key.0)
            ]
        );
        // A file that is not a library is a miss.
        std::fs::write(cache.entry_path(&key), b"junk").unwrap();
        assert!(cache.lookup(&key).is_none());
        // So is a truncated library: it still starts like one, but its digest differs.
        std::fs::write(cache.entry_path(&key), b"\x7fELF-im").unwrap();
        assert!(cache.lookup(&key).is_none());
        // The next store replaces it, and it hits again.
        cache
            .store::<TestError>(&key, |out| {
                std::fs::write(out, b"\x7fELF-image").unwrap();
                Ok(String::new())
            })
            .unwrap();
        assert_eq!(cache.lookup(&key).unwrap().image, b"\x7fELF-image");
    }

    #[test]
    fn an_unusable_cache_directory_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "").unwrap();
        let cache = KernelCache::new(file.join("cache"));
        let e = cache
            .store::<CacheError>(&CacheKey("0".repeat(64)), |_| Ok(String::new()))
            .unwrap_err();
        assert_eq!(e.op, "create the directory");
        assert!(e.to_string().contains("SIMPLER_CACHE_DIR"), "{e}");
    }
}
