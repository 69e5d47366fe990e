#!/usr/bin/env bash
# Prints what sim memcheck (SIMPLER_SIM_MEMCHECK=1: every device allocation against a guard
# page) costs one run of an example, `gemm` by default: the median, over RUNS runs of
# `simpler run` each way (default 10), of the run as `simpler run` reports it (staging,
# device, copy-back), of its device time, and of the whole process (start, loading,
# allocating the 256 MiB heap, run, check), without and with memcheck, and the ratios.
# It reports numbers; it never judges them.
#   usage: scripts/bench-memcheck.sh [vector_add|formula|gemm|softmax|axpy] [RUNS]
# Files go to target/bench-memcheck/<example>/ (under $CARGO_TARGET_DIR if set).
set -euo pipefail
example="${1:-gemm}"
runs="${2:-10}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
[ -f "examples/$example/simpler.toml" ] || { echo "error: no example named '$example' (see examples/)" >&2; exit 2; }
case "$runs" in ''|*[!0-9]*|0) echo "error: RUNS must be a whole number >= 1, got '$runs'" >&2; exit 2 ;; esac

echo "building simpler (release)..." >&2
cargo build --quiet --release -p simpler-cli -p simpler-examples
target="${CARGO_TARGET_DIR:-$root/target}"
bin="$target/release"
out="$target/bench-memcheck/$example"
mkdir -p "$out"
rm -f "$out"/*.npy "$out/scalars.txt"
"$bin/simpler-example-data" "$example" "$out" >/dev/null
"$bin/simpler" build "examples/$example" -o "$out/$example.simpler" >/dev/null

args=()
for f in "$out"/*.npy; do
  name="$(basename "$f" .npy)"
  case "$name" in
    *.ref|*.out) ;;
    *) args+=(--input "$name=$f") ;;
  esac
done
for f in "$out"/*.ref.npy; do
  name="$(basename "$f" .ref.npy)"
  args+=(--output "$name=$out/$name.out.npy" --check "$name=$f")
done
if [ -f "$out/scalars.txt" ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    [ -n "$line" ] && args+=(--scalar "$line")
  done < "$out/scalars.txt"
fi

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# One mode: prints "run_ms device_ms process_ms" medians.
measure() {
  local mode="$1" log="$out/runs-$1.txt"
  : > "$log"
  for _ in $(seq "$runs"); do
    local t0 t1 line
    t0=$(date +%s%N)
    line=$(SIMPLER_SIM_MEMCHECK="$mode" "$bin/simpler" run "$out/$example.simpler" "${args[@]}" | grep '^ran ')
    t1=$(date +%s%N)
    # "ran `gemm` in 12.345 ms (6.789 ms on the device)"
    echo "$line" | awk -v p="$(( (t1 - t0) / 1000 ))" '{ gsub(/\(/, ""); print $4, $6, p / 1000 }' >> "$log"
  done
  printf '%s %s %s\n' \
    "$(cut -d' ' -f1 "$log" | median)" "$(cut -d' ' -f2 "$log" | median)" "$(cut -d' ' -f3 "$log" | median)"
}

read -r off_run off_dev off_proc < <(measure 0)
read -r on_run on_dev on_proc < <(measure 1)
echo "sim memcheck cost on $example, median of $runs runs each ($(nproc) host CPUs)"
printf '%-22s %12s %12s %8s\n' "" "memcheck off" "memcheck on" "on/off"
for row in "run (ms) $off_run $on_run" "device (ms) $off_dev $on_dev" "process (ms) $off_proc $on_proc"; do
  set -- $row
  printf '%-22s %12.3f %12.3f %8.2f\n' "$1 $2" "$3" "$4" "$(awk -v a="$3" -v b="$4" 'BEGIN { print (a > 0 ? b / a : 0) }')"
done
