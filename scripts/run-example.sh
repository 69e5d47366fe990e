#!/usr/bin/env bash
# Builds one example into a callable bundle, generates its deterministic inputs and an
# independent reference, runs it on the sim platform and checks the result.
#   usage: scripts/run-example.sh [vector_add|formula|gemm|softmax|axpy]   (default: gemm)
# Built with the release profile; SIMPLER_CARGO_PROFILE=NAME picks another cargo profile (CI
# passes `ci`, the profile its tests were built with, so the example reuses that build).
#
# Files go to target/examples/<name>/ (under $CARGO_TARGET_DIR if set), written by
# simpler-example-data:
#   <NAME>.npy      one per in/inout argument            -> --input NAME=<NAME>.npy
#   <NAME>.ref.npy  one per out/inout argument           -> --output NAME=<NAME>.out.npy
#                                                           --check  NAME=<NAME>.ref.npy
#   scalars.txt     NAME=VALUE lines, one per scalar     -> --scalar NAME=VALUE
#                   argument (only if the example has any)
set -euo pipefail
example="${1:-gemm}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
[ -f "examples/$example/simpler.toml" ] || { echo "error: no example named '$example' (see examples/)" >&2; exit 2; }

profile="${SIMPLER_CARGO_PROFILE:-release}"
echo "building simpler ($profile; the first build takes a minute or two)..." >&2
cargo build --profile "$profile" -p simpler-cli -p simpler-examples
target="${CARGO_TARGET_DIR:-$root/target}"
bin="$target/$profile"
out="$target/examples/$example"
mkdir -p "$out"
rm -f "$out"/*.npy "$out/scalars.txt" # files of an earlier version of the example

"$bin/simpler-example-data" "$example" "$out" >/dev/null
"$bin/simpler" build "examples/$example" -o "$out/$example.simpler"

inputs=(); checks=(); outputs=(); scalars=()
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
if [ -f "$out/scalars.txt" ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    [ -n "$line" ] && scalars+=(--scalar "$line")
  done < "$out/scalars.txt"
fi
cmd=("$bin/simpler" run "$out/$example.simpler" "${inputs[@]}" "${outputs[@]}" "${checks[@]}" ${scalars[@]+"${scalars[@]}"})
echo "+ ${cmd[*]}" >&2
exec "${cmd[@]}"
