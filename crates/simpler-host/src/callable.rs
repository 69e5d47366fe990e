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
    /// The name is only whitespace (it would show as a blank in traces and reports).
    #[error("kernel name {name:?} is only whitespace")]
    Blank {
        /// The name.
        name: String,
    },
    /// The name holds a control character (it would break trace and report lines).
    #[error("kernel name {name:?} holds the control character {}", code_point(*ch))]
    ControlCharacter {
        /// The name.
        name: String,
        /// The first control character in it.
        ch: char,
    },
    /// The name holds an invisible or text-direction character (zero-width characters, bidi
    /// controls: the list [`check_kernel_name`] gives): it would show invisibly, or reorder
    /// the text around it, in traces and reports.
    #[error(
        "kernel name {name:?} holds {}, an invisible or text-direction character, which is \
         not allowed",
        code_point(*ch)
    )]
    HiddenCharacter {
        /// The name.
        name: String,
        /// The first such character in it.
        ch: char,
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

/// `ch` as `U+XXXX` (at least four hex digits, upper case).
fn code_point(ch: char) -> String {
    format!("U+{:04X}", ch as u32)
}

/// The longest kernel name accepted, in UTF-8 bytes.
pub const MAX_KERNEL_NAME_BYTES: usize = 256;

/// Whether `ch` is invisible or changes the direction of the text around it, so that a
/// kernel name holding it would read wrong: the soft hyphen (U+00AD), the Arabic letter mark
/// (U+061C), the Mongolian vowel separator (U+180E), the zero-width characters and
/// left-to-right / right-to-left marks (U+200B..U+200F), the bidi embeddings and overrides
/// (U+202A..U+202E), the word joiner and invisible operators (U+2060..U+2064), the bidi
/// isolates (U+2066..U+2069) and the byte order mark / zero-width no-break space (U+FEFF).
fn is_hidden_char(ch: char) -> bool {
    matches!(
        ch,
        '\u{AD}'
            | '\u{61C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// Checks one kernel name: non-empty, not only whitespace, no control characters, no
/// invisible or text-direction characters (U+00AD, U+061C, U+180E, U+200B..U+200F,
/// U+202A..U+202E, U+2060..U+2064, U+2066..U+2069, U+FEFF), at most
/// [`MAX_KERNEL_NAME_BYTES`]. Letters of any script are fine (`qk_matmul`, `矩阵乘`).
///
/// # Errors
/// The [`KernelNameError`] saying what is wrong (for a character: the first one, as U+XXXX).
pub fn check_kernel_name(name: &str) -> Result<(), KernelNameError> {
    if name.is_empty() {
        return Err(KernelNameError::Empty);
    }
    if name.chars().all(char::is_whitespace) {
        return Err(KernelNameError::Blank { name: name.into() });
    }
    if let Some(ch) = name.chars().find(|c| c.is_control()) {
        return Err(KernelNameError::ControlCharacter {
            name: name.into(),
            ch,
        });
    }
    if let Some(ch) = name.chars().find(|&c| is_hidden_char(c)) {
        return Err(KernelNameError::HiddenCharacter {
            name: name.into(),
            ch,
        });
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
    use super::{check_kernel_name, resolve_kernel_names, KernelNameError, MAX_KERNEL_NAME_BYTES};

    #[test]
    fn names_of_any_script_pass_and_blank_hidden_or_long_ones_are_refused() {
        for ok in ["qk_matmul", "矩阵乘", "gemm tile", "é", "a-b.c (v2)"] {
            assert_eq!(check_kernel_name(ok), Ok(()), "{ok:?}");
        }
        assert_eq!(check_kernel_name(""), Err(KernelNameError::Empty));
        for blank in [" ", "\t \n", "\u{3000}"] {
            let e = check_kernel_name(blank).unwrap_err();
            assert!(
                matches!(e, KernelNameError::Blank { .. }),
                "{blank:?}: {e:?}"
            );
            assert!(e.to_string().contains("only whitespace"), "{e}");
        }
        let e = check_kernel_name("a\u{7}b").unwrap_err();
        assert_eq!(
            e,
            KernelNameError::ControlCharacter {
                name: "a\u{7}b".into(),
                ch: '\u{7}'
            }
        );
        assert!(e.to_string().contains("U+0007"), "{e}");
        for (name, code) in [
            ("qk\u{200B}matmul", "U+200B"),
            ("qk\u{200C}", "U+200C"),
            ("\u{200D}qk", "U+200D"),
            ("q\u{2060}k", "U+2060"),
            ("\u{FEFF}qk", "U+FEFF"),
            ("qk\u{202A}x", "U+202A"),
            ("qk\u{202E}lumtam", "U+202E"),
            ("qk\u{2066}x", "U+2066"),
            ("qk\u{2069}x", "U+2069"),
            ("soft\u{AD}hyphen", "U+00AD"),
        ] {
            let e = check_kernel_name(name).unwrap_err();
            assert!(
                matches!(&e, KernelNameError::HiddenCharacter { name: n, .. } if n == name),
                "{name:?}: {e:?}"
            );
            let msg = e.to_string();
            assert!(msg.contains(code), "{name:?}: {msg}");
            // The message shows the character escaped, never raw.
            assert!(!msg.contains(name), "{name:?}: {msg}");
        }
        let at_max = "k".repeat(MAX_KERNEL_NAME_BYTES);
        assert_eq!(check_kernel_name(&at_max), Ok(()));
        let e = check_kernel_name(&format!("{at_max}k")).unwrap_err();
        assert!(
            matches!(e, KernelNameError::TooLong { len, .. } if len == MAX_KERNEL_NAME_BYTES + 1)
        );
    }

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
