//! Turns a [`CodeImage`] into an entry address the device can call.
//!
//! A library image is written to a private temporary file (mode 0600, unique name), opened
//! with `libloading`, its entry symbol resolved, and the file removed at once. Loading
//! happens once per registration, never per run. In-process functions need no loading.
//!
//! A loaded library is unmapped when its last [`LoadedCode`] drops, unless a device thread
//! may still be executing it. That can only be a thread the host gave up on: a kernel
//! abandoned past its op-execute timeout, an orchestration left looping, a run past its
//! timeout (`docs/chip-runtime.md`, the two clocks) — and unmapping code under a running
//! thread crashes the process. Every such give-up marks the device unusable, and the lane
//! counts it on the device's [`UnloadGate`]: code loaded for a device remembers the gate's
//! count at its load, and on drop it is unmapped if the count is unchanged (no run since
//! its load was given up on), and kept mapped until the process exits otherwise. Code
//! loaded for no device ([`load`]: a build's check that the image loads) is always
//! unmapped. The image cache shares equal images, so registering the same code again while
//! it is cached loads nothing.
//! Loaded code is named in the device's crash reports (`simpler_device::crash::name_code`)
//! while its [`LoadedCode`] lives.
//!
//! This module holds the host's only `unsafe` code for loading foreign libraries.

use std::io::Write;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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

/// Whether a device may still be executing code loaded for it: the count of runs given up
/// on with a device thread possibly still inside user code (see the module doc). One per
/// lane; shared by the lane (which counts) and its image cache (whose code reads it).
#[derive(Debug, Default)]
pub struct UnloadGate {
    given_up: AtomicU64,
}

impl UnloadGate {
    /// A gate that has seen no give-up.
    pub fn new() -> Arc<UnloadGate> {
        Arc::new(UnloadGate::default())
    }

    /// Counts a run given up on: code loaded before now is never unmapped.
    pub fn give_up(&self) {
        self.given_up.fetch_add(1, Ordering::SeqCst);
    }

    /// Runs given up on so far.
    pub fn given_up(&self) -> u64 {
        self.given_up.load(Ordering::SeqCst)
    }
}

/// Loaded code: the entry address, the library it lives in (unmapped on drop when the
/// module doc's rule allows) and its name in crash reports (`what`, and the entry symbol of
/// a library).
pub struct LoadedCode {
    /// Address of the entry function.
    pub addr: u64,
    _name: simpler_device::crash::CodeName,
    library: Option<ManuallyDrop<libloading::Library>>,
    /// The device's gate and its count when this code was loaded; `None`: loaded for no
    /// device.
    gate: Option<(Arc<UnloadGate>, u64)>,
}

impl LoadedCode {
    /// True when dropping this code now unmaps its library (a library, and no run since its
    /// load was given up on).
    pub fn unmaps_on_drop(&self) -> bool {
        self.library.is_some()
            && self
                .gate
                .as_ref()
                .is_none_or(|(gate, at_load)| gate.given_up() == *at_load)
    }
}

impl Drop for LoadedCode {
    fn drop(&mut self) {
        let unmap = self.unmaps_on_drop();
        if let (true, Some(library)) = (unmap, self.library.as_mut()) {
            // SAFETY: the last reference to this code is gone, so no run can start it, and
            // the gate says no run since its load was given up on: every call into it
            // returned (a run ends only when its kernels and orchestration returned, or is
            // given up on). The library is dropped once; the field is never read again.
            unsafe { ManuallyDrop::drop(library) };
        }
        // Otherwise the library stays mapped until the process exits (the module doc).
    }
}

impl std::fmt::Debug for LoadedCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadedCode({:#x})", self.addr)
    }
}

/// Loads `image` for no device (a check that it loads and exports its entry), expecting an
/// entry of `kind`; `what` names it in errors (e.g. "kernel func 3"). The library is
/// unmapped when the code drops.
///
/// # Errors
/// [`LoadError`] naming `what` and the cause.
pub fn load(image: &CodeImage, kind: EntryKind, what: &str) -> Result<LoadedCode, LoadError> {
    load_gated(image, kind, what, None)
}

/// [`load`] for a device whose give-ups `gate` counts: the library is unmapped on drop only
/// if none happened since this load.
///
/// # Errors
/// As [`load`].
pub fn load_for_device(
    image: &CodeImage,
    kind: EntryKind,
    what: &str,
    gate: &Arc<UnloadGate>,
) -> Result<LoadedCode, LoadError> {
    load_gated(image, kind, what, Some(gate))
}

fn load_gated(
    image: &CodeImage,
    kind: EntryKind,
    what: &str,
    gate: Option<&Arc<UnloadGate>>,
) -> Result<LoadedCode, LoadError> {
    // Read before the load: a give-up counted while loading keeps the code mapped.
    let gate = gate.map(|g| (g.clone(), g.given_up()));
    let in_process = |addr: u64| LoadedCode {
        addr,
        _name: simpler_device::crash::name_code(addr, what),
        library: None,
        gate: None,
    };
    match (image, kind) {
        (CodeImage::Kernel(f), EntryKind::Kernel) => Ok(in_process(*f as usize as u64)),
        (CodeImage::Orchestration(f), EntryKind::Orchestration) => {
            Ok(in_process(*f as usize as u64))
        }
        (CodeImage::Library { bytes, entry }, _) => load_library(bytes, entry, what, gate),
        _ => Err(LoadError::WrongKind { what: what.into() }),
    }
}

fn load_library(
    bytes: &[u8],
    symbol: &str,
    what: &str,
    gate: Option<(Arc<UnloadGate>, u64)>,
) -> Result<LoadedCode, LoadError> {
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
        library: Some(ManuallyDrop::new(library)),
        gate,
    })
}
