# lib.sh - the harness the end-to-end scripts share (sourced, never run):
# the repository root as the working directory ($root), a scratch directory
# removed on exit ($tmp), and the pass/fail counters with `ok WHAT` and
# `bad WHAT`; a failure shows the last E2E_LOG_LINES (20) lines of $tmp/log.
# A script resolves its arguments' paths before sourcing it (it cd's).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass+1)); echo "PASS $1"; }
bad() {
    fail=$((fail+1))
    echo "FAIL $1"
    [ -f "$tmp/log" ] && tail -"${E2E_LOG_LINES:-20}" "$tmp/log" | sed 's/^/    /'
    return 0
}

# build_example NAME MODEL FLAGS...: examples/MODEL.sym compiled with FLAGS by
# $ampc into $tmp/NAME (the program) and $tmp/NAME.c (its source)
build_example() {
    local name=$1 model=$2
    shift 2
    "$ampc" "examples/$model.sym" "$@" -S -o "$tmp/$name.c" >"$tmp/log" 2>&1 &&
        "$ampc" "examples/$model.sym" "$@" -o "$tmp/$name" >"$tmp/log" 2>&1
}

# build_ckptcmp SCRIPT: tests/e2e/ckptcmp.c as $tmp/ckptcmp, linked with the
# runtime beside $ampc; on failure SCRIPT's summary line and exit 1
build_ckptcmp() {
    cc -std=c11 -Wall -Wextra -Werror -Iruntime tests/e2e/ckptcmp.c \
        "$(dirname "$ampc")/libampcrt.a" -lopenblas -lz -lm -o "$tmp/ckptcmp" >"$tmp/log" 2>&1 &&
        return 0
    bad "building tests/e2e/ckptcmp.c"
    echo "$1: $pass passed, $fail failed"
    exit 1
}
