#!/usr/bin/env bash
# Runs every check and test of the project. This is the test command written in README.md;
# .ci/run calls it. Needs the Rust toolchain, a C compiler (`cc`, or $CC) and Python 3 with
# pip (the Python tests install maturin, numpy and pytest into a private virtualenv).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cc >/dev/null || [ -n "${CC:-}" ] || { echo "error: no C compiler (cc) found; tests compile C kernels" >&2; exit 1; }
cargo fmt --all -- --check
# No crate's modules import each other in a cycle (the runtime's aicpu/devmem pair excepted:
# devmem hands the run state out through its state word).
python3 scripts/check-module-cycles.py crates/simpler-host/src crates/simpler-device/src \
    crates/simpler-toolchain/src crates/simpler-py/src crates/simpler-abi/src crates/simpler-bench/src \
    crates/simpler-examples/src
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
# The 1,000,000-task flat graph, ignored by default (about 30 s in this debug build; a
# release build of the test and its dev-dependencies would cost more than it saves).
cargo test -p simpler-host --test flat_graphs -- --ignored --exact a_flat_graph_of_1m_tasks_runs_in_the_default_window
# The loom models of the lock-free pieces (completion fence tokens, fault-notice ring; the
# device threads' doorbell).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
    cargo test -p simpler-host --lib --release loom
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
    cargo test -p simpler-device --lib --release loom
# The Python package: pip install . into target/py-venv, then pytest python/tests.
./scripts/test-python.sh
