#!/usr/bin/env bash
# run.sh - replays the fuzz corpus, then fuzzes a target (docs/testing.md):
# fuzz_frontend (front end and passes) or fuzz_emit_c (the C backend).
#
#   tests/fuzz/run.sh BINARY check     replay, then a deterministic pass (make fuzz-check)
#   tests/fuzz/run.sh BINARY SECONDS   replay, then fuzz open-ended for SECONDS (make fuzz)
#
# BINARY is the libFuzzer target (make build/fuzz/fuzz_frontend).  The seed
# corpus is assembled in seeds-TARGET-MODE/ beside BINARY (build/fuzz/, remade
# each run; MODE is check or fuzz, so make fuzz and make fuzz-check can run at
# once) from examples/*.sym,
# tests/golden/**/*.{sym,ir} and tests/fuzz/corpus/* (regression inputs: every
# crash ever found, minimised), so nothing is kept twice in git, plus the
# dumps of the examples after every pass when build/ampc (or $AMPC) exists.
#
# check: -seed=1 and a fixed -runs=FUZZ_RUNS (30,000: about a minute on 2
# cores) from the seeds alone, without ASLR (setarch -R) or corpus reloads, so
# two runs on the same tree execute the same inputs.
# SECONDS: a random seed; what it learns is kept in tests/fuzz/corpus-work/TARGET/
# (ignored by git) and used as that target's seeds next time: each target's
# own, since one target's inputs (a DSL file) mean nothing to another's reader
# (a plan cache file) and only slow its start.
#
# A crash, leak, timeout (-timeout=10), out-of-memory (-rss_limit_mb=2048) or
# sanitizer report fails the run (exit 1) and says where the reproducer went
# (artifacts/ beside BINARY by default, FUZZ_ARTIFACTS to change).
set -u

usage() { echo "usage: $0 BINARY check|SECONDS" >&2; exit 2; }
[ $# -eq 2 ] || usage
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "$(dirname "$1")" 2>/dev/null && pwd)/$(basename "$1")
mode=$2
[ -x "$bin" ] || { echo "run.sh: $1 is not an executable (make build/fuzz/fuzz_frontend)" >&2; exit 2; }
fuzzdir=$(dirname "$bin") target=$(basename "$bin")
case $mode in
check) ;;
'' | *[!0-9]* | 0) usage ;; # libFuzzer takes -max_total_time=0 as "forever"
esac

runs=${FUZZ_RUNS:-30000}
artifacts=${FUZZ_ARTIFACTS:-$fuzzdir/artifacts}
mkdir -p "$artifacts"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ampc-fuzz.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The corpus folders have fixed paths (libFuzzer's run depends on them, so a
# random temporary name would make check mode vary); they are remade each run.
kind=$([ "$mode" = check ] && echo check || echo fuzz)
seeds=$fuzzdir/seeds-$target-$kind
work=$fuzzdir/check-corpus-$target
rm -rf "$seeds" "$work"
mkdir -p "$seeds" "$work"

# ---- the seed corpus -------------------------------------------------------
cd "$root" || exit 2
# A reader of a binary format (fuzz_mxparams, fuzz_npy) starts from its own
# corpus alone, tests/fuzz/corpus_NAME/ (NAME: the target without fuzz_),
# without the model files, the IR dumps and the DSL dictionary.
# Or, for a binary format, from the seeds tests/fuzz/gen_corpus_NAME.py
# writes now (no binary file is kept in the repository).
own=tests/fuzz/corpus_${target#fuzz_}
gen=tests/fuzz/gen_corpus_${target#fuzz_}.py
if [ -f "$gen" ]; then
    own=$tmp/gen_corpus
    python3 "$gen" "$own" || { echo "fuzz: $gen failed"; exit 2; }
fi
[ -d "$own" ] || own=
n=0
while IFS= read -r f; do
    # flatten the path into a name: tests/golden/errors/x.sym -> tests_golden_errors_x.sym
    cp "$f" "$seeds/${f//\//_}"
    n=$((n + 1))
done < <( if [ -n "$own" ]; then find "$own" -type f ! -name 'README*'; else
            ls examples/*.sym 2>/dev/null
            find tests/golden -type f \( -name '*.sym' -o -name '*.ir' \) 2>/dev/null
            find tests/fuzz/corpus -type f ! -name 'README*' 2>/dev/null; fi | sort)
# IR seeds: the dump of every example after every pass, when the compiler
# is built (AMPC, default build/ampc), so that the reader starts from real dumps.
ampc=${AMPC:-$root/build/ampc}
nir=0
if [ -x "$ampc" ] && [ -z "$own" ]; then
    for f in examples/*.sym; do
        d=$tmp/dumps/$(basename "$f" .sym)
        mkdir -p "$d"
        "$ampc" "$f" --dump=all --dump-dir="$d" >/dev/null 2>&1 || continue
        for ir in "$d"/*.ir; do
            [ -e "$ir" ] || continue
            cp "$ir" "$seeds/dump_$(basename "$f" .sym)_${ir##*/}"
            nir=$((nir + 1))
        done
    done
fi
if [ -n "$own" ]; then
    echo "fuzz: $n seed inputs from $own"
else
    echo "fuzz: $((n + nir)) seed inputs ($n from examples, golden tests and tests/fuzz/corpus," \
         "$nir dumps of the examples$([ -x "$ampc" ] || echo ": no $ampc to make them"))"
fi
n=$((n + nir))

# Diagnostics go to /dev/null inside the target; the sanitizers abort on the
# first report so that nothing is only printed.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1"
common=(-timeout=10 -rss_limit_mb=2048 -max_len=4096
        "-artifact_prefix=$artifacts/")

# Prints where libFuzzer wrote the reproducer and how to use it.
report() {
    local log=$1 what=$2
    echo "fuzz: FAILED ($what)"
    local art
    art=$(grep -oE "(Test unit written to|artifact_prefix.*Test unit written to) [^ ]+" "$log" |
          awk '{print $NF}' | tail -1)
    if [ -n "$art" ]; then
        echo "fuzz: reproducer: $art"
        echo "fuzz:   run it:      $bin $art"
        echo "fuzz:   minimise it: $bin -minimize_crash=1 -runs=100000 -exact_artifact_path=$art.min $art"
        echo "fuzz:   then fix the bug and add the input to tests/fuzz/corpus/ under a descriptive name"
    fi
    grep -m1 -E "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|fuzz_[a-z_]*:|internal error|DEADLY SIGNAL|==[0-9]+== ERROR" "$log" |
        sed 's/^/fuzz:   /'
}

# ---- 1. replay every seed --------------------------------------------------
# One process per input, so that the input at fault is named in the log.
log=$tmp/replay.log
fail=0
for f in "$seeds"/*; do
    if ! "$bin" "${common[@]}" "$f" </dev/null >"$log" 2>&1; then
        echo "fuzz: replay of ${f##*/} failed:"
        tail -40 "$log" | sed 's/^/    /'
        report "$log" "replay of ${f##*/}"
        fail=1
    fi
done
[ $fail = 0 ] || exit 1
echo "fuzz: replay: $n inputs passed"

# ---- 2. fuzz ---------------------------------------------------------------
flags=("${common[@]}" -use_value_profile=1 -print_final_stats=1)
[ -n "$own" ] || flags+=("-dict=$root/tests/fuzz/dsl.dict")
run=("$bin")
if [ "$mode" = check ]; then
    # Value profiling sees the values of pointer comparisons, so heap and
    # stack addresses steer the run: without address randomisation (setarch
    # -R) and corpus reloads, the same tree gives the same run.
    flags+=(-seed=1 "-runs=$runs" -reload=0)
    if setarch "$(uname -m)" -R true 2>/dev/null; then
        run=(setarch "$(uname -m)" -R "$bin")
        echo "fuzz: deterministic pass: -seed=1 -runs=$runs, no ASLR"
    else
        echo "fuzz: deterministic pass: -seed=1 -runs=$runs (setarch -R unavailable: ASLR on," \
             "so value profiling may vary the run a little)"
    fi
    dirs=("$work" "$seeds")
else
    keep=$root/tests/fuzz/corpus-work/$target
    mkdir -p "$keep"
    flags+=("-max_total_time=$mode")
    echo "fuzz: fuzzing for ${mode}s (new inputs kept in tests/fuzz/corpus-work/$target/)"
    dirs=("$keep" "$seeds")
fi
log=$tmp/fuzz.log
start=$(date +%s)
"${run[@]}" "${flags[@]}" "${dirs[@]}" </dev/null >"$log" 2>&1
rc=$?
end=$(date +%s)
grep -E "^#[0-9]+.*(INITED|DONE)|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)" "$log" |
    sed 's/^/fuzz:   /'
if [ $rc -ne 0 ]; then
    tail -60 "$log" | sed 's/^/    /'
    report "$log" "fuzzing, exit $rc"
    exit 1
fi
echo "fuzz: passed ($((end - start))s, no crash, leak, timeout or sanitizer report)"
