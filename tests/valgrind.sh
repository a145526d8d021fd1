#!/usr/bin/env bash
# valgrind.sh - the compiler under valgrind memcheck (make valgrind-check).
#
#   tests/valgrind.sh AMPC
#
# Runs AMPC (a normal build: no sanitizers) under
#   valgrind --leak-check=full --errors-for-leak-kinds=all --error-exitcode=99
# on
#   - every examples/*.sym with --report --dump=all (output to /dev/null): exit 0;
#   - VALGRIND_ERRORS (default 8) inputs from tests/golden/errors/, spread over
#     the folder, that their RUN lines expect to fail (`not %ampc %s [FLAGS]`),
#     with those flags:
#     exit 1, and no valgrind error or leak on the error paths;
#   - --from-ir on a dump of each pass of examples/resnet50_v1d.sym;
#   - --from-mxnet on symbol files that import (with --emit-sym and
#     --emit-mxnet-json) and on ones refused (exit 1).
# A case fails on any valgrind report (exit 99), a crash, or an unexpected
# exit status.  Prints "valgrind: N passed, M failed"; exits 1 if M > 0.
set -u
[ $# -eq 1 ] || { echo "usage: $0 AMPC" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[ -x "$ampc" ] || { echo "valgrind.sh: $1 is not an executable" >&2; exit 2; }
if ! command -v valgrind >/dev/null; then
    echo "valgrind.sh: valgrind not found (apt-get install valgrind, or make deps-test)" >&2
    exit 1
fi
cd "$root" || exit 2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ampc-valgrind.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
vg=(valgrind -q --leak-check=full --show-leak-kinds=all --errors-for-leak-kinds=all
    --error-exitcode=99 --track-origins=yes)
export AMPC_VERIFY=1 # the IR verifier runs between passes: more code under valgrind
pass=0 fail=0

# check WANT_RC LABEL ARGS...: runs ampc ARGS under valgrind; stdout to /dev/null.
check() {
    local want=$1 label=$2
    shift 2
    local log=$tmp/log
    "${vg[@]}" "$ampc" "$@" >/dev/null 2>"$log"
    local rc=$?
    if [ $rc -eq "$want" ]; then
        pass=$((pass + 1))
        return
    fi
    fail=$((fail + 1))
    case $rc in
    99) echo "FAIL $label: valgrind reported errors" ;;
    *) echo "FAIL $label: exit $rc, expected $want" ;;
    esac
    head -40 "$log" | sed 's/^/    /'
}

# 1. every example, every pass dumped, the report
for f in examples/*.sym; do
    check 0 "$f" "$f" --report --dump=all
done
# the GPU cost model's dump and report on a CUDA program (docs/gpucost.md)
check 0 "gpu-cost" examples/resnet20_cifar.sym --target=cuda --machine=h100 --report --dump=gpu-cost

# 2. error paths: inputs the golden tests expect to fail, with their flags
# (spread evenly over the folder, so that lexer, parser, elaborate and pass
# errors all come up)
mapfile -t errs < <(grep -lE '^\s*(#|//) ?RUN: +not +%ampc +%s' tests/golden/errors/*.sym 2>/dev/null | sort)
want=${VALGRIND_ERRORS:-8}
step=$(( ${#errs[@]} > want ? ${#errs[@]} / want : 1 ))
nerr=0
for ((k = 0; k < ${#errs[@]} && nerr < want; k += step)); do
    f=${errs[k]}
    # the first `not %ampc %s FLAGS ...` RUN line; FLAGS stop at a pipe or redirection
    line=$(grep -m1 -E '^\s*(#|//) ?RUN: +not +%ampc +%s' "$f") || continue
    flags=$(sed -E 's/^.*not +%ampc +%s//; s/(2>|>|\|).*$//' <<<"$line")
    case $flags in *%*) continue ;; esac # needs other substitutions (%t, %S): skip
    # shellcheck disable=SC2086 # flags are words from the RUN line
    check 1 "$f$flags" "$f" $flags
    nerr=$((nerr + 1))
done
[ $nerr -gt 0 ] || echo "valgrind.sh: warning: no error inputs found in tests/golden/errors"

# 3. reading dumps back: a dump after each pass, compiled again from there
model=examples/resnet50_v1d.sym
if "$ampc" "$model" --dump=all --dump-dir="$tmp/dumps" >/dev/null 2>"$tmp/log"; then
    for d in "$tmp"/dumps/*.ir; do
        check 0 "--from-ir ${d##*/}" --from-ir "$d" --report --dump=all
    done
else
    fail=$((fail + 1))
    echo "FAIL $model --dump-dir: could not write the dumps"
    head -20 "$tmp/log" | sed 's/^/    /'
fi

# 4. MXNet symbol JSON (compiler/mxnet_json.c, json-c): imports that
# compile, written back as ampc source and as JSON, and refused files
for f in v1x old_08; do
    check 0 "--from-mxnet $f.json" --from-mxnet tests/golden/mxnet-import/inputs/$f.json \
        --emit-sym "$tmp/$f.sym" --emit-mxnet-json "$tmp/$f.json" --report --dump=all
done
for f in malformed truncated deconv gelu; do
    check 1 "--from-mxnet $f.json" --from-mxnet tests/golden/mxnet-import/inputs/$f.json
done

echo "valgrind: $pass passed, $fail failed"
[ $fail -eq 0 ]
