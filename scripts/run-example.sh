#!/usr/bin/env bash
# Builds one example into a callable bundle, generates its deterministic inputs and an
# independent reference, runs it on the sim platform and checks the result.
#   usage: scripts/run-example.sh [vector_add|formula|gemm|softmax]   (default: gemm)
set -euo pipefail
example="${1:-gemm}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
[ -f "examples/$example/simpler.toml" ] || { echo "error: no example named '$example' (see examples/)" >&2; exit 2; }

cargo build --release --quiet -p simpler-cli -p simpler-examples
target="${CARGO_TARGET_DIR:-$root/target}"
bin="$target/release"
out="$target/examples/$example"
mkdir -p "$out"

"$bin/simpler-example-data" "$example" "$out" >/dev/null
"$bin/simpler" build "examples/$example" -o "$out/$example.simpler"

inputs=(); checks=(); outputs=()
for f in "$out"/*.npy; do
  name="$(basename "$f" .npy)"
  case "$name" in
    *.ref|*.out) ;;
    *) inputs+=(--input "$name=$f") ;;
  esac
done
for f in "$out"/*.ref.npy; do
  name="$(basename "$f" .ref.npy)"
  outputs+=(--output "$name=$out/$name.out.npy")
  checks+=(--check "$name=$f")
done
exec "$bin/simpler" run "$out/$example.simpler" "${inputs[@]}" "${outputs[@]}" "${checks[@]}"
