//! Turns a [`CodeImage`] into an entry address the device can call.
//!
//! A library image is written to a private temporary file (mode 0600, unique name), opened
//! with `libloading`, its entry symbol resolved, and the file removed at once. Loading
//! happens once per registration, never per run. In-process functions need no loading.
//!
//! A loaded library is **never unmapped**, on purpose: a device thread may still be
//! executing its code after every host reference is gone — a kernel abandoned past its
//! op-execute timeout, an orchestration left looping (`docs/chip-runtime.md`, the two
//! clocks) — and unmapping code under a running thread crashes the process. Dropping a
//! [`LoadedCode`] forgets the library handle instead of closing it; the cost is the mapping
//! of each image loaded, kept until the process exits (the image cache shares equal images,
//! so registering the same code again while it is cached loads nothing).
//! Loaded code is named in the device's crash reports (`simpler_device::crash::name_code`)
//! while its [`LoadedCode`] lives.
//!
//! This module holds the host's only `unsafe` code for loading foreign libraries.

use std::io::Write;

use crate::CodeImage;

/// Why a code image could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Writing the image to its temporary file failed.
    #[error("cannot stage the {what} image in a temporary file: {source}")]
    Stage {
        /// What was being loaded.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The dynamic loader refused the image.
    #[error("cannot load the {what} image as a shared library: {reason}")]
    Open {
        /// What was being loaded.
        what: String,
        /// The loader's message.
        reason: String,
    },
    /// The entry symbol is not exported by the image.
    #[error("the {what} image does not export the entry symbol `{symbol}`")]
    MissingSymbol {
        /// What was being loaded.
        what: String,
        /// The symbol looked for.
        symbol: String,
    },
    /// An in-process entry of the wrong kind (kernel for orchestration or vice versa).
    #[error("the {what} was given an in-process entry of the wrong kind")]
    WrongKind {
        /// What was being loaded.
        what: String,
    },
}

/// Which entry a code image is expected to provide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// An orchestration entry.
    Orchestration,
    /// A kernel entry.
    Kernel,
}

/// Loaded code: the entry address, the library it lives in (never unmapped: see the module
/// doc) and its name in crash reports (`what`, and the entry symbol of a library).
pub struct LoadedCode {
    /// Address of the entry function.
    pub addr: u64,
    _name: simpler_device::crash::CodeName,
    _library: Option<std::mem::ManuallyDrop<libloading::Library>>,
}

impl std::fmt::Debug for LoadedCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadedCode({:#x})", self.addr)
    }
}

/// Loads `image`, expecting an entry of `kind`; `what` names it in errors
/// (e.g. "kernel func 3").
///
/// # Errors
/// [`LoadError`] naming `what` and the cause.
pub fn load(image: &CodeImage, kind: EntryKind, what: &str) -> Result<LoadedCode, LoadError> {
    let in_process = |addr: u64| LoadedCode {
        addr,
        _name: simpler_device::crash::name_code(addr, what),
        _library: None,
    };
    match (image, kind) {
        (CodeImage::Kernel(f), EntryKind::Kernel) => Ok(in_process(*f as usize as u64)),
        (CodeImage::Orchestration(f), EntryKind::Orchestration) => {
            Ok(in_process(*f as usize as u64))
        }
        (CodeImage::Library { bytes, entry }, _) => load_library(bytes, entry, what),
        _ => Err(LoadError::WrongKind { what: what.into() }),
    }
}

fn load_library(bytes: &[u8], symbol: &str, what: &str) -> Result<LoadedCode, LoadError> {
    let stage = |source| LoadError::Stage {
        what: what.into(),
        source,
    };
    let mut file = tempfile::Builder::new()
        .prefix("simpler-code-")
        .suffix(".so")
        .tempfile()
        .map_err(stage)?;
    file.write_all(bytes).map_err(stage)?;
    file.flush().map_err(stage)?;
    // SAFETY: loading a library runs its initializers. The image is the user's own code,
    // registered on purpose; simpler's contract is that registered code is trusted exactly as
    // a linked library would be. RTLD_NOW surfaces missing symbols here, not mid-run.
    let library = unsafe {
        libloading::os::unix::Library::open(
            Some(file.path()),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
        )
    }
    .map_err(|e| LoadError::Open {
        what: what.into(),
        reason: e.to_string(),
    })?;
    // The mapping survives the unlink; remove the file now.
    drop(file);
    let library = libloading::Library::from(library);
    // SAFETY: we only read the symbol's address; it is called later through the typed entry
    // contract (`KernelEntry` / `OrchEntry`) that the image promises to export.
    let addr = unsafe { library.get::<*const ()>(symbol.as_bytes()) }
        .map(|s| *s as usize as u64)
        .map_err(|_| LoadError::MissingSymbol {
            what: what.into(),
            symbol: symbol.into(),
        })?;
    if addr == 0 {
        return Err(LoadError::MissingSymbol {
            what: what.into(),
            symbol: symbol.into(),
        });
    }
    Ok(LoadedCode {
        addr,
        _name: simpler_device::crash::name_code(addr, &format!("{what} (entry `{symbol}`)")),
        _library: Some(std::mem::ManuallyDrop::new(library)),
    })
}
