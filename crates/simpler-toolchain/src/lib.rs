//! # simpler-toolchain — from a user's files to a run's arguments, and back to a verdict
//!
//! The one implementation, shared by the `simpler` CLI, `simpler-examples` and the Python
//! extension (`simpler-py`), of everything around a run that is not the run itself:
//!
//! - [`manifest`]: the example manifest `simpler.toml` (the one parser, strict, typed errors);
//! - [`build`]: compiling kernels and orchestrations with the C compiler (one flag set),
//!   checking that each library loads and exports its entry symbol, and assembling a whole
//!   example into a [`Bundle`](simpler_host::Bundle);
//! - [`cache`]: the content-hash kernel cache [`build`] compiles through;
//! - [`npy`]: NumPy `.npy` files in and out;
//! - [`compare`]: `allclose` with NumPy's semantics and a report of the worst element;
//! - [`scalar`]: a scalar of a dtype parsed from text into the 64 raw bits a run passes
//!   (encoded by the host's one scalar encoding), and element bits decoded back.
//!
//! It uses `simpler-host` read-only (signatures, the scalar encoding, bundles, the code
//! loader, atomic file writes) and never starts a worker or touches a device. The formats
//! and rules are described in `docs/toolchain.md`.

pub mod build;
pub mod cache;
pub mod compare;
pub mod manifest;
pub mod npy;
pub mod scalar;

/// `<message>` followed by one `: <cause>` per underlying cause not already part of the
/// message before it: an error with its whole chain on one line, for callers (the Python
/// extension) that carry a single message.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_chain_joins_causes_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer {
            #[source]
            source: std::io::Error,
        }
        #[derive(Debug, thiserror::Error)]
        #[error("outer: {source}")]
        struct Repeats {
            source: std::io::Error,
        }
        let e = Outer {
            source: std::io::Error::other("inner"),
        };
        assert_eq!(super::error_chain(&e), "outer: inner");
        let e = Repeats {
            source: std::io::Error::other("inner"),
        };
        assert_eq!(super::error_chain(&e), "outer: inner");
    }
}
