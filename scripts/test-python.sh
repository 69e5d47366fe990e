#!/usr/bin/env bash
# Builds and installs the `simpler` Python package (`pip install .`, a maturin/PyO3 abi3
# extension) into a private virtualenv, target/py-venv, and runs the Python tests
# (python/tests) with pytest. The level-4 tests over Ray share one local Ray cluster (3 nodes on
# 127.0.0.1); with SIMPLER_REQUIRE_RAY=1 (as .ci/run sets) they fail instead of skipping when
# Ray cannot be imported. Extra arguments go to pytest, e.g. `--rounds 3`; when the first
# one is a test path rather than an option, the paths given replace python/tests, so
# `scripts/test-python.sh python/tests/test_l3_worker.py -k group` runs that file only.
# Needs python3 (with venv and pip), the Rust toolchain and a C compiler; torch is optional
# (its tests skip without it). mypy checks the native module's stub (python/tests/test_stub.py
# runs `python -m mypy.stubtest simpler._native`). Any failure stops the script with a
# non-zero status.
set -euo pipefail
cd "$(dirname "$0")/.."
trap 'echo "error: scripts/test-python.sh failed (line $LINENO)" >&2' ERR

PYTHON=${PYTHON:-python3}
# The cargo profile of the extension and the CLI: `ci` (release optimisation with debug
# assertions; root Cargo.toml), so they reuse the build of scripts/test.sh.
SIMPLER_CARGO_PROFILE=${SIMPLER_CARGO_PROFILE:-ci}
VENV=target/py-venv

command -v "$PYTHON" >/dev/null || { echo "error: $PYTHON not found" >&2; exit 1; }
command -v cc >/dev/null || [ -n "${CC:-}" ] || { echo "error: no C compiler (cc) found; the tests compile C kernels" >&2; exit 1; }

# shellcheck source=scripts/stages.sh
. scripts/stages.sh
VPY="$VENV/bin/python"
# The build backend runs the venv's `maturin` by name.
export PATH="$PWD/$VENV/bin:$PATH"
# cloudpickle is a dependency of the package (level-3 workers pickle Python sub callables
# with it); ray is its optional `[ray]` extra (level-4 remote children), which the level-4
# tests need; `pip install --no-deps .` below brings neither, so they are installed here.
py_tools() {
    [ -x "$VPY" ] || "$PYTHON" -m venv "$VENV"
    "$VPY" -m pip install --quiet --disable-pip-version-check "maturin>=1.9.4,<2" "numpy>=1.22" \
        "cloudpickle>=2" "ray>=2.40" "pytest>=7" "mypy>=1.8"
}
stage py-tools py_tools
# The extension (maturin) and the CLI, which one test runs to write a bundle.
py_build() {
    MATURIN_PEP517_ARGS="--profile $SIMPLER_CARGO_PROFILE" "$VPY" -m pip install --quiet \
        --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps .
    cargo build --quiet --profile "$SIMPLER_CARGO_PROFILE" -p simpler-cli
}
stage py-build py_build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then TESTS=(); else TESTS=(python/tests); fi
# --durations: the slowest tests, so a slow addition is seen where it lands.
CLI="${CARGO_TARGET_DIR:-$PWD/target}/$SIMPLER_CARGO_PROFILE/simpler"
stage pytest env SIMPLER_CLI="$CLI" "$VPY" -m pytest "${TESTS[@]}" -q -p no:cacheprovider \
    --durations=15 "$@"
