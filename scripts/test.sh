#!/usr/bin/env bash
# Runs every check and test of the project. This is the test command written in README.md;
# .ci/run calls it. Needs the Rust toolchain, a C compiler (`cc`, or $CC) and Python 3 with
# pip (the Python tests install maturin, numpy and pytest into a private virtualenv).
#
# Everything is compiled once, with the `ci` profile (release optimisation with debug
# assertions and overflow checks; root Cargo.toml): the Rust tests, the 1M-task graph, the
# Python extension and the CLI all reuse that one build, which `reuse_check` proves after
# each step (crates/simpler-workspace-hack keeps every invocation's features the same). Each
# stage's seconds are printed in a table at the end (scripts/stages.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/stages.sh
. scripts/stages.sh
export SIMPLER_CARGO_PROFILE=ci
command -v cc >/dev/null || [ -n "${CC:-}" ] || { echo "error: no C compiler (cc) found; tests compile C kernels" >&2; exit 1; }

stage fmt cargo fmt --all -- --check
# No modules import each other in a cycle: every crate under crates/ (at every level of its
# module tree), and the Python package; then the checker's own self-test.
cycles() {
    python3 scripts/check-module-cycles.py
    python3 scripts/check-module-cycles.py --python python/simpler
    python3 scripts/check-module-cycles.py --self-test
}
stage cycles cycles
stage clippy cargo clippy --workspace --all-targets --profile ci -- -D warnings
# The one build: every test binary, every binary and library (the Python extension is built
# by maturin below, over the same dependencies).
build_all() {
    cargo test --workspace --profile ci --no-run
    cargo build --workspace --exclude simpler-py --profile ci
}
stage build build_all
reuse_mark
stage rust-tests cargo test --workspace --profile ci
# The 1,000,000-task flat graph, ignored by default. `--workspace`, as every invocation here:
# one selection of crates resolves one set of features (`-p simpler-host` would rebuild the
# benchmarks' criterion and with it the test binary); the other crates' `it` binaries match
# no test.
stage 1m-graph cargo test --workspace --profile ci --test it -- --ignored --exact \
    flat_graphs::a_flat_graph_of_1m_tasks_runs_in_the_default_window
# The Python package: pip install . into target/py-venv (the extension built with the `ci`
# profile), then pytest python/tests (with the CLI of the one build).
./scripts/test-python.sh
# Nothing above compiled anything again but the extension and PyO3 (which only it uses).
stage reuse reuse_check "the tests after the build" pyo3 pyo3_build_config pyo3_ffi pyo3_macros \
    pyo3_macros_backend simpler_py
# The loom models of the lock-free pieces (completion fence tokens, fault-notice ring; the
# device threads' doorbell and the pool's park/wake protocol). The `loom` feature recompiles
# only the two modelled crates (and loom itself the first time).
loom_models() {
    # Bounded as tokio and crossbeam bound theirs: enough preemptions to find ordering bugs,
    # few enough that the models finish in seconds.
    export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
    cargo test --profile ci -p simpler-host --lib --features loom loom
    cargo test --profile ci -p simpler-device --lib --features loom loom
}
stage loom loom_models
stage_table
