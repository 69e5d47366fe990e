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
    /// The name traces, summaries, crash reports and errors show it under
    /// ([`KernelSpec::display_name`]); unique in the callable, non-empty. `None`: the entry
    /// symbol of a [`CodeImage::Library`], `func N` for an in-process kernel.
    pub name: Option<String>,
}

impl KernelSpec {
    /// A kernel without a name of its own ([`KernelSpec::name`] `None`).
    pub fn new(func_id: u32, core_type: CoreType, image: CodeImage) -> KernelSpec {
        KernelSpec {
            func_id,
            core_type,
            image,
            name: None,
        }
    }

    /// The same kernel named `name` (see [`KernelSpec::name`]).
    pub fn with_name(mut self, name: impl Into<String>) -> KernelSpec {
        self.name = Some(name.into());
        self
    }

    /// The kernel's name: [`KernelSpec::name`] if given, else the entry symbol of a library
    /// image, else `func N`.
    pub fn display_name(&self) -> String {
        match (&self.name, &self.image) {
            (Some(name), _) => name.clone(),
            (None, CodeImage::Library { entry, .. }) => entry.clone(),
            (None, _) => format!("func {}", self.func_id),
        }
    }
}

/// Why a kernel name is refused: the one rule for manifests, bundles, Rust and Python.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KernelNameError {
    /// The name is empty.
    #[error("kernel name is empty")]
    Empty,
    /// The name holds a control character (it would break trace and report lines).
    #[error("kernel name {name:?} holds a control character")]
    ControlCharacter {
        /// The name.
        name: String,
    },
    /// The name is longer than [`MAX_KERNEL_NAME_BYTES`].
    #[error("kernel name `{name}` is {len} bytes long; at most {max} are allowed")]
    TooLong {
        /// The name.
        name: String,
        /// Its length in bytes.
        len: usize,
        /// [`MAX_KERNEL_NAME_BYTES`].
        max: usize,
    },
}

/// The longest kernel name accepted, in UTF-8 bytes.
pub const MAX_KERNEL_NAME_BYTES: usize = 256;

/// Checks one kernel name: non-empty, no control characters, at most
/// [`MAX_KERNEL_NAME_BYTES`].
///
/// # Errors
/// The [`KernelNameError`] saying what is wrong.
pub fn check_kernel_name(name: &str) -> Result<(), KernelNameError> {
    if name.is_empty() {
        return Err(KernelNameError::Empty);
    }
    if name.chars().any(char::is_control) {
        return Err(KernelNameError::ControlCharacter { name: name.into() });
    }
    if name.len() > MAX_KERNEL_NAME_BYTES {
        return Err(KernelNameError::TooLong {
            name: name.into(),
            len: name.len(),
            max: MAX_KERNEL_NAME_BYTES,
        });
    }
    Ok(())
}

/// The names kernels go by in one callable: each kernel's given name, else its default
/// (its entry symbol, `func N`); a default that another kernel's name or default shares is
/// qualified with the func id, "kernel_entry (func 1)", so every kernel still has a name of
/// its own in traces and errors (callables whose kernels all use one entry symbol, and
/// bundles written without names, stay valid). Items: (func id, given name, default), in
/// kernel order.
///
/// # Errors
/// `(name, first, second)`, positions of the first two kernels *given* the same name.
pub fn resolve_kernel_names(
    kernels: &[(u32, Option<&str>, String)],
) -> Result<Vec<String>, (String, usize, usize)> {
    if let Some((name, first, second)) = duplicate_kernel_name(kernels.iter().filter_map(|k| k.1)) {
        // Positions among the given names → positions among all kernels.
        let given: Vec<usize> = (0..kernels.len())
            .filter(|&i| kernels[i].1.is_some())
            .collect();
        return Err((name, given[first], given[second]));
    }
    let base: Vec<&str> = kernels.iter().map(|k| k.1.unwrap_or(&k.2)).collect();
    Ok(kernels
        .iter()
        .enumerate()
        .map(|(i, (func_id, given, default))| {
            let shared = base
                .iter()
                .enumerate()
                .any(|(j, b)| j != i && *b == default);
            match given {
                Some(name) => (*name).to_string(),
                None if shared => format!("{default} (func {func_id})"),
                None => default.clone(),
            }
        })
        .collect())
}

/// The first two kernels (by position) that share a name, as `(name, first, second)`
/// positions into `names`; `None` when every name is unique.
pub fn duplicate_kernel_name<'a, I>(names: I) -> Option<(String, usize, usize)>
where
    I: IntoIterator<Item = &'a str>,
{
    let mut seen = std::collections::HashMap::new();
    for (i, name) in names.into_iter().enumerate() {
        if let Some(&first) = seen.get(name) {
            return Some((name.to_string(), first, i));
        }
        seen.insert(name, i);
    }
    None
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
    /// The runtime variant its runs use unless their [`CallConfig`](crate::CallConfig)
    /// names one; `None` = the worker's ([`WorkerConfig::runtime`](crate::WorkerConfig)).
    pub runtime: Option<Runtime>,
}

/// The two runtime variants (`docs/chip-runtime.md` §17). A run uses its
/// [`CallConfig::runtime`](crate::CallConfig), else its callable's
/// [`CallableSpec::runtime`], else the worker's [`WorkerConfig::runtime`](crate::WorkerConfig).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// `tensormap_and_ringbuffer`: the orchestration runs on an AICPU thread while the
    /// graph is scheduled (four rings, reclaimed as tasks finish).
    #[default]
    TensormapAndRingbuffer,
    /// `host_build_graph`: the host runs the orchestration to completion before launch and
    /// uploads the graph; every AICPU thread is a scheduler; one forward-only ring. A graph
    /// can be recorded once and replayed without the orchestration
    /// ([`ChipWorker::record`](crate::ChipWorker::record)).
    HostBuildGraph,
}

impl Runtime {
    /// Every variant, as named in manifests, the CLI and Python.
    pub const ALL: [Runtime; 2] = [Runtime::TensormapAndRingbuffer, Runtime::HostBuildGraph];

    /// The variant's name: `"tensormap_and_ringbuffer"` or `"host_build_graph"`.
    pub const fn name(self) -> &'static str {
        match self {
            Runtime::TensormapAndRingbuffer => "tensormap_and_ringbuffer",
            Runtime::HostBuildGraph => "host_build_graph",
        }
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Runtime {
    type Err = String;

    /// Parses a variant's [`name`](Runtime::name); the error lists the names.
    fn from_str(s: &str) -> Result<Runtime, String> {
        Runtime::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                format!("unknown runtime `{s}`; the runtimes are tensormap_and_ringbuffer and host_build_graph")
            })
    }
}

#[cfg(test)]
mod name_tests {
    use super::resolve_kernel_names;

    #[test]
    fn shared_defaults_are_qualified_and_given_names_must_differ() {
        let k =
            |id: u32, given: Option<&'static str>, default: &str| (id, given, default.to_string());
        let names = resolve_kernel_names(&[
            k(0, None, "kernel_entry"),
            k(1, None, "kernel_entry"),
            k(2, Some("softmax"), "kernel_entry"),
            k(3, None, "gemm_entry"),
        ])
        .unwrap();
        assert_eq!(
            names,
            [
                "kernel_entry (func 0)",
                "kernel_entry (func 1)",
                "softmax",
                "gemm_entry"
            ]
        );
        // A default that a given name takes is qualified too.
        let names = resolve_kernel_names(&[k(0, Some("add"), "e"), k(4, None, "add")]).unwrap();
        assert_eq!(names, ["add", "add (func 4)"]);
        assert_eq!(
            resolve_kernel_names(&[k(0, Some("x"), "e"), k(1, None, "e"), k(2, Some("x"), "f")]),
            Err(("x".to_string(), 0, 2)),
            "positions are among all kernels"
        );
    }
}
