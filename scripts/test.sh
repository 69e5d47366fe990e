#!/usr/bin/env bash
# Runs every check and test of the project. This is the test command written in README.md;
# .ci/run calls it. Needs the Rust toolchain and a C compiler (`cc`, or $CC).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cc >/dev/null || [ -n "${CC:-}" ] || { echo "error: no C compiler (cc) found; tests compile C kernels" >&2; exit 1; }
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
