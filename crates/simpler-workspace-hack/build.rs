//! Empty: a build script makes cargo honour this crate's `[build-dependencies]`, which unify
//! the features of the proc-macros' dependencies.

fn main() {}
