//! One feature set for the workspace's third-party dependencies, whichever crates a cargo
//! invocation selects. Every workspace crate depends on this one, and its `Cargo.toml` names
//! each dependency that two builds would otherwise compile with different features (`syn`,
//! `serde`, ...), with the union of those features. That is what lets every step of the test
//! command (`cargo test --workspace`, maturin's `-p simpler-py`, `cargo build -p
//! simpler-cli`) reuse one build instead of recompiling the proc-macros and every crate above
//! them.
//!
//! It has no code. Its dependency list is written by `cargo hakari generate` (configuration:
//! `.config/hakari.toml`), to be rerun after a change to any crate's dependencies; CI's
//! reuse check (`reuse_check` in scripts/stages.sh) fails when it is stale.
