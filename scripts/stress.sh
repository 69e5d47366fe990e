#!/usr/bin/env bash
# Reruns chosen tests many times, optionally while CPU burners load the machine, to tell a
# flaky test from a broken one and to catch hangs.
#
#   scripts/stress.sh TEST... [--times N] [--hogs K] [--timeout S] [--budget S]
#
# TEST is either
#   - a pytest node id or path (python/tests/test_x.py, python/tests/test_x.py::test_y,
#     anything whose part before the first ':' ends in .py or is an existing path): run as
#     `target/py-venv/bin/python -m pytest -q -p no:cacheprovider TEST` (the venv comes from
#     scripts/test-python.sh, which must have run once); or
#   - a Rust test CRATE:TARGET[:FILTER] (simpler-host:it:balance::): the test binary of
#     `cargo test --profile ci -p CRATE --test TARGET` is built once, before the loop, and then
#     run directly with FILTER (as `cargo test ... -- FILTER` would), from the crate's
#     directory, so an iteration costs no cargo time. A run in which FILTER matched no test
#     counts as failed (as pytest fails a run that collected nothing).
#
# Options:
#   --times N    runs of each test (default 10); the tests take turns, one run each per round
#   --hogs K     busy-loop processes started for the whole loop (default 0); they are killed
#                when the script ends in any way (also Ctrl-C, a failure, or the script being
#                killed: each hog stops by itself once the script is gone)
#   --timeout S  seconds one run may take before it counts as hung (default 300): its thread
#                backtraces (gdb, else py-spy, else /proc/PID/task/*/stack and wchan) are
#                saved to its log and its process group is killed
#   --budget S   stop starting rounds after S seconds (default: no limit); the summary says
#                how many runs each test got
#
# Prints one line per test, `TEST: N passed, M failed, H hung`, and exits 1 if any run
# failed or hung (2 for bad usage or a build that failed). The logs of failed and hung runs
# are kept under target/stress/<start time>/; passing runs leave none.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
    exit 2
}

TIMES=10
HOGS=0
TIMEOUT=300
BUDGET=0
TESTS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --times | --hogs | --timeout | --budget)
            [ $# -ge 2 ] || { echo "error: $1 needs a whole number" >&2; exit 2; }
            case "$1" in
                --times) TIMES=$2 ;;
                --hogs) HOGS=$2 ;;
                --timeout) TIMEOUT=$2 ;;
                --budget) BUDGET=$2 ;;
            esac
            shift 2
            ;;
        -h | --help) usage ;;
        --*) echo "error: unknown option $1" >&2; usage ;;
        *) TESTS+=("$1"); shift ;;
    esac
done
for n in "$TIMES" "$HOGS" "$TIMEOUT" "$BUDGET"; do
    case "$n" in
        '' | *[!0-9]*) echo "error: --times, --hogs, --timeout and --budget take whole numbers, got '$n'" >&2; exit 2 ;;
    esac
done
[ ${#TESTS[@]} -gt 0 ] || { echo "error: no test given" >&2; usage; }
[ "$TIMEOUT" -gt 0 ] || { echo "error: --timeout must be positive" >&2; exit 2; }
[ "$TIMES" -gt 0 ] || { echo "error: --times must be positive" >&2; exit 2; }
for t in "${TESTS[@]}"; do
    head=${t%%::*}
    case "$head" in
        *.py | */*) [ -e "$head" ] || { echo "error: no test file or folder '$head'" >&2; exit 2; } ;;
    esac
done

LOGS="$ROOT/target/stress/$(date +%Y%m%d-%H%M%S)-$$"
mkdir -p "$LOGS"

# --- cleanup: hogs and the run in flight, on every way out ---------------------------------
HOG_PIDS=()
CURRENT_PGID=""
cleanup() {
    trap - EXIT INT TERM
    if [ -n "$CURRENT_PGID" ]; then
        kill -KILL -- "-$CURRENT_PGID" 2>/dev/null || true
    fi
    for p in "${HOG_PIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

# --- the tests: kind and command -----------------------------------------------------------
VPY="$ROOT/target/py-venv/bin/python"
KIND=()   # py or rust
BIN=()    # rust: the test binary
DIR=()    # rust: the crate's directory
FILTER=() # rust: the filter (may be empty)
is_pytest() {
    local head=${1%%:*}
    case "$head" in *.py) return 0 ;; esac
    [ -e "$head" ]
}
for t in "${TESTS[@]}"; do
    if is_pytest "$t"; then
        if [ ! -x "$VPY" ]; then
            echo "error: $VPY is missing: run scripts/test-python.sh once first (it builds the venv and the extension)" >&2
            exit 2
        fi
        KIND+=(py); BIN+=(""); DIR+=(""); FILTER+=("")
        continue
    fi
    IFS=: read -r crate target filter <<<"$t"
    # A filter may itself hold colons (balance::x): everything after CRATE:TARGET: is it.
    filter=${t#"$crate:$target"}
    filter=${filter#:}
    if [ -z "$crate" ] || [ -z "$target" ]; then
        echo "error: '$t' is neither a pytest path nor CRATE:TARGET[:FILTER]" >&2
        exit 2
    fi
    echo "== building $crate --test $target (cargo test --profile ci --no-run)"
    json="$LOGS/build-$crate-$target.json"
    if ! cargo test --profile ci -p "$crate" --test "$target" --no-run --message-format=json >"$json"; then
        echo "error: building $crate --test $target failed" >&2
        exit 2
    fi
    found=$(python3 - "$json" "$target" <<'EOF'
import json, os, sys
path, target = sys.argv[1], sys.argv[2]
for line in open(path):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and m.get("executable") and t.get("name") == target \
            and "test" in t.get("kind", []):
        print(m["executable"])
        print(os.path.dirname(m["manifest_path"]))
        break
EOF
)
    exe=$(sed -n 1p <<<"$found")
    dir=$(sed -n 2p <<<"$found")
    if [ -z "$exe" ] || [ ! -x "$exe" ]; then
        echo "error: no test binary for $crate --test $target in cargo's output ($json)" >&2
        exit 2
    fi
    rm -f "$json"
    KIND+=(rust); BIN+=("$exe"); DIR+=("$dir"); FILTER+=("$filter")
done

# --- hogs ----------------------------------------------------------------------------------
SCRIPT_PID=$$
for _ in $(seq 1 "$HOGS"); do
    # A pure busy loop that looks for the script now and then, so it never outlives it.
    bash -c 'while kill -0 '"$SCRIPT_PID"' 2>/dev/null; do for ((i = 0; i < 200000; i++)); do :; done; done' &
    HOG_PIDS+=($!)
done
[ "$HOGS" -eq 0 ] || echo "== $HOGS CPU hog(s) running"

# --- one run -------------------------------------------------------------------------------
# Thread backtraces of every process of group $1 into $2.
dump_group() {
    local pgid=$1 log=$2 pid
    for pid in $(ps -e -o pid=,pgid= | awk -v g="$pgid" '$2 == g { print $1 }'); do
        {
            echo
            echo "===== hung: pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
            if command -v gdb >/dev/null; then
                timeout 60 gdb -p "$pid" -batch -ex 'set pagination off' -ex 'thread apply all bt' 2>&1 || true
            elif command -v py-spy >/dev/null; then
                timeout 60 py-spy dump --native --pid "$pid" 2>&1 || true
            fi
            local task
            for task in /proc/"$pid"/task/*; do
                echo "--- thread ${task##*/} ($(cat "$task/comm" 2>/dev/null)) wchan: $(cat "$task/wchan" 2>/dev/null)"
                cat "$task/stack" 2>/dev/null || true
            done
        } >>"$log" 2>&1
    done
}

# True while process $1 exists and is not a zombie.
alive() {
    local stat
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# Runs test $1 (index) as run $2; sets OUTCOME to pass, fail or hung. Runs in this shell
# (not a subshell), so the traps know the run's process group.
run_once() {
    local i=$1 n=$2 name log pid start rc
    name=$(tr -c 'A-Za-z0-9_.-' '_' <<<"${TESTS[$i]}")
    log="$LOGS/${name%_}-$n.log"
    LAST_LOG=$log
    if [ "${KIND[$i]}" = py ]; then
        SIMPLER_CLI=${SIMPLER_CLI:-$ROOT/target/ci/simpler} \
            setsid "$VPY" -m pytest -q -p no:cacheprovider "${TESTS[$i]}" >"$log" 2>&1 </dev/null &
    else
        # As cargo runs a test binary: from the crate's directory, with its manifest dir set.
        # shellcheck disable=SC2086 # an empty filter is no argument
        (cd "${DIR[$i]}" && CARGO_MANIFEST_DIR="${DIR[$i]}" \
            exec setsid "${BIN[$i]}" ${FILTER[$i]:+"${FILTER[$i]}"}) >"$log" 2>&1 </dev/null &
    fi
    pid=$!
    CURRENT_PGID=$pid
    start=$SECONDS
    while alive "$pid"; do
        if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
            echo "===== stress.sh: still running after ${TIMEOUT} s; backtraces follow" >>"$log"
            dump_group "$pid" "$log"
            kill -KILL -- "-$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
            CURRENT_PGID=""
            OUTCOME=hung
            return
        fi
        sleep 0.2
    done
    rc=0
    wait "$pid" || rc=$?
    # Whatever the run left in its group (a child it started) goes with it.
    kill -KILL -- "-$pid" 2>/dev/null || true
    CURRENT_PGID=""
    if [ "$rc" -eq 0 ] && [ "${KIND[$i]}" = rust ] && grep -q '^running 0 tests$' "$log"; then
        # A filter that matches nothing passes vacuously (pytest fails such a run itself).
        echo "===== stress.sh: the filter '${FILTER[$i]}' matched no test" >>"$log"
        rc=1
    fi
    if [ "$rc" -eq 0 ]; then
        rm -f "$log"
        OUTCOME=pass
    else
        echo "===== stress.sh: exit status $rc" >>"$log"
        OUTCOME=fail
    fi
}

# --- the loop ------------------------------------------------------------------------------
PASS=(); FAIL=(); HUNG=()
for i in "${!TESTS[@]}"; do PASS[i]=0; FAIL[i]=0; HUNG[i]=0; done
T0=$SECONDS
for n in $(seq 1 "$TIMES"); do
    if [ "$BUDGET" -gt 0 ] && [ $((SECONDS - T0)) -ge "$BUDGET" ]; then
        echo "== budget of $BUDGET s spent after $((n - 1)) round(s)"
        break
    fi
    for i in "${!TESTS[@]}"; do
        run_once "$i" "$n"
        case "$OUTCOME" in
            pass) PASS[i]=$((PASS[i] + 1)) ;;
            fail) FAIL[i]=$((FAIL[i] + 1)); echo "FAILED: ${TESTS[$i]} (run $n): $LAST_LOG" ;;
            hung) HUNG[i]=$((HUNG[i] + 1)); echo "HUNG: ${TESTS[$i]} (run $n): $LAST_LOG" ;;
        esac
    done
done

echo "== $((SECONDS - T0)) s, $HOGS hog(s), logs of failures: $LOGS"
bad=0
for i in "${!TESTS[@]}"; do
    echo "${TESTS[$i]}: ${PASS[i]} passed, ${FAIL[i]} failed, ${HUNG[i]} hung"
    [ "${FAIL[i]}" -eq 0 ] && [ "${HUNG[i]}" -eq 0 ] || bad=1
done
rmdir "$LOGS" 2>/dev/null || true
exit "$bad"
