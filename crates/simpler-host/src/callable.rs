//! What a user registers: a [`CallableSpec`] — an orchestration, its kernels (each under a
//! func id, for one core type) and a [`Signature`]. Code comes either as shared-library image
//! bytes ([`CodeImage::Library`]) or as in-process functions, for Rust users and tests.

use simpler_abi::{CoreType, KernelEntry, OrchEntry};

use crate::Signature;

/// Where a piece of code comes from.
#[derive(Clone)]
pub enum CodeImage {
    /// A shared library's bytes and the name of the entry symbol to resolve in it.
    Library {
        /// The whole `.so` file.
        bytes: Vec<u8>,
        /// Exported symbol of the entry.
        entry: String,
    },
    /// An in-process kernel entry.
    Kernel(KernelEntry),
    /// An in-process orchestration entry.
    Orchestration(OrchEntry),
}

impl std::fmt::Debug for CodeImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodeImage::Library { bytes, entry } => f
                .debug_struct("Library")
                .field("bytes", &bytes.len())
                .field("entry", entry)
                .finish(),
            CodeImage::Kernel(p) => write!(f, "Kernel({:p})", *p as *const ()),
            CodeImage::Orchestration(p) => write!(f, "Orchestration({:p})", *p as *const ()),
        }
    }
}

/// One kernel of a callable.
#[derive(Clone, Debug)]
pub struct KernelSpec {
    /// Id the orchestration submits it under (`< MAX_FUNC_ID`, unique in the callable).
    pub func_id: u32,
    /// Core type it runs on.
    pub core_type: CoreType,
    /// Its code.
    pub image: CodeImage,
}

/// Everything needed to register a callable.
#[derive(Clone, Debug)]
pub struct CallableSpec {
    /// Name shown in messages.
    pub name: String,
    /// Positional arguments.
    pub signature: Signature,
    /// The orchestration ([`CodeImage::Library`] or [`CodeImage::Orchestration`]).
    pub orchestration: CodeImage,
    /// The kernels.
    pub kernels: Vec<KernelSpec>,
}
