# Timed stages for the test scripts; sourced, never run. `stage NAME CMD…` runs CMD, prints
# a header before it and its wall-clock seconds after it, and appends `NAME SECONDS` to
# $SIMPLER_STAGE_LOG. `stage_table` prints every stage logged so far and their total, so a
# run that grows shows where the time went. A failing command fails its stage: the table so
# far is printed with the stage marked FAILED and the script exits with the command's status.
#
# .ci/run sets SIMPLER_STAGE_LOG so that the stages of scripts/test.sh and its own land in one
# table; a script run on its own gets a private log.

if [ -z "${SIMPLER_STAGE_LOG:-}" ]; then
    SIMPLER_STAGE_LOG="$(mktemp)"
    export SIMPLER_STAGE_LOG
fi

stage() {
    local name="$1" start rc=0
    shift
    echo "== [$name] $*"
    start=$(date +%s)
    "$@" || rc=$?
    local secs=$(($(date +%s) - start))
    if [ "$rc" -ne 0 ]; then
        echo "$name $secs FAILED" >>"$SIMPLER_STAGE_LOG"
        echo "error: stage '$name' failed (exit $rc): $*" >&2
        stage_table >&2
        exit "$rc"
    fi
    echo "$name $secs" >>"$SIMPLER_STAGE_LOG"
    echo "== [$name] ${secs}s"
}

stage_table() {
    awk 'BEGIN { printf "%-14s %8s\n", "stage", "seconds" }
         { printf "%-14s %8d%s\n", $1, $2, ($3 ? "  " $3 : ""); total += $2 }
         END { printf "%-14s %8d  (%dm%02ds)\n", "total", total, total / 60, total % 60 }' \
        "$SIMPLER_STAGE_LOG"
}

# `reuse_mark` notes the time; `reuse_check LABEL [CRATE…]` fails when anything was compiled
# into target/$SIMPLER_CARGO_PROFILE since the mark, other than the crates named (library or
# binary names, e.g. pyo3 simpler_py). It is how CI proves that every step after the one build
# reuses it: a dependency whose features differ between two cargo invocations shows up here by
# name (the fix is in crates/simpler-workspace-hack: `cargo hakari generate`).
reuse_mark() {
    REUSE_STAMP="$(mktemp)"
    sleep 1 # mtimes have a granularity; anything written from now on is newer than the mark
}

reuse_check() {
    local label="$1" dir="${CARGO_TARGET_DIR:-target}/${SIMPLER_CARGO_PROFILE:-ci}"
    shift
    local allowed=" $* " new=() f crate
    while IFS= read -r f; do
        crate="$(basename "$f")"
        crate="${crate#lib}"
        crate="${crate%%-*}"
        crate="${crate%%.*}"
        case "$allowed" in *" $crate "*) ;; *) new+=("$crate") ;; esac
    done < <(find "$dir/deps" -maxdepth 1 -newer "$REUSE_STAMP" -type f \
        \( -name '*.rlib' -o -name '*.rmeta' -o -name '*.so' \) 2>/dev/null)
    if [ "${#new[@]}" -gt 0 ]; then
        echo "error: $label compiled again what the one build had built:" \
            "$(printf '%s\n' "${new[@]}" | sort -u | tr '\n' ' ')" >&2
        echo "(features differ between cargo invocations: run \`cargo hakari generate\`)" >&2
        return 1
    fi
    echo "== $label reused the build (nothing new compiled${*:+ but: $*})"
}
