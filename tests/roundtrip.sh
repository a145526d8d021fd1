#!/usr/bin/env bash
# The IR text dump reads back to the same graph (DESIGN.md section 3).
#
#   tests/roundtrip.sh build/ampc
#
# For every example and every pass checked:
#   same    dump after PASS, read it back with --from-ir, dump PASS again:
#           the two files are identical byte for byte;
#   resume  read the dump after PASS and run on to each later pass checked:
#           the dump equals the one made straight from the .sym file (the
#           reader kept everything later passes need).
# Then the reader must refuse a dump with an unknown op and one with an
# unknown attribute, naming the file, line and column.
#
# Every pass `ampc --help` lists is checked (autodiff dumps carry the
# inference graph after the training graph, and it reads back too); set
# ROUNDTRIP_PASSES to a list of --dump names to check fewer.  AMPC_VERIFY=1 runs the IR verifier after every pass.
set -u
if [ $# -ne 1 ]; then
    echo "usage: $0 path/to/ampc" >&2
    exit 2
fi
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
export AMPC_VERIFY=1

passes=${ROUNDTRIP_PASSES:-all}
if [ "$passes" = all ]; then
    passes=$("$ampc" --help | sed -n 's/^passes (--dump names)://p')
fi
read -r -a passes <<< "$passes"
if [ ${#passes[@]} -eq 0 ]; then
    echo "roundtrip: no passes to check" >&2
    exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    echo "FAIL $1"
    [ -s "$tmp/err" ] && sed 's/^/    /' "$tmp/err" | head -20
    return 0
}

for ex in examples/*.sym; do
    name=$(basename "$ex" .sym)
    for p in "${passes[@]}"; do
        direct=$tmp/$name.$p.ir
        if ! "$ampc" "$ex" --dump="$p" > "$direct" 2> "$tmp/err"; then
            bad "$name: dump after $p"
            continue
        fi
    done
    for i in "${!passes[@]}"; do
        p=${passes[$i]}
        direct=$tmp/$name.$p.ir
        [ -s "$direct" ] || continue
        # same pass: the dump reads back to itself
        if "$ampc" --from-ir "$direct" --dump="$p" > "$tmp/again.ir" 2> "$tmp/err" &&
            diff -u "$direct" "$tmp/again.ir" > "$tmp/err"; then
            ok
        else
            bad "$name: --from-ir dump after $p, --dump=$p differs"
        fi
        # later passes: resuming from the dump gives what the pipeline gives
        for q in "${passes[@]:$((i + 1))}"; do
            [ -s "$tmp/$name.$q.ir" ] || continue
            if "$ampc" --from-ir "$direct" --dump="$q" > "$tmp/resumed.ir" 2> "$tmp/err" &&
                diff -u "$tmp/$name.$q.ir" "$tmp/resumed.ir" > "$tmp/err"; then
                ok
            else
                bad "$name: --from-ir dump after $p, --dump=$q differs from the direct dump"
            fi
        done
    done
done

# The reader refuses what it does not know, with file:line:col.  The mutated
# line is the first Activation of the MLP's dump.
"$ampc" examples/mlp.sym --dump=elaborate > "$tmp/good.ir"
line=$(grep -n ' = Activation(' "$tmp/good.ir" | head -1 | cut -d: -f1)
refuse() { # what, sed expression, expected message with LINE:COL
    local what=$1 expr=$2 want=$3
    sed "${line}s/$expr" "$tmp/good.ir" > "$tmp/bad.ir"
    : > "$tmp/err"
    if "$ampc" --from-ir "$tmp/bad.ir" > /dev/null 2> "$tmp/out"; then
        echo "ampc accepted the dump" > "$tmp/err"
        bad "reader: $what"
    elif [ "$(head -1 "$tmp/out")" != "$tmp/bad.ir:$want" ]; then
        { echo "expected: $tmp/bad.ir:$want"; echo "got:"; cat "$tmp/out"; } > "$tmp/err"
        bad "reader: $what"
    else
        ok
    fi
}
column() { sed -n "${line}p" "$tmp/good.ir" | awk -v s="$1" '{ print index($0, s) }'; }
refuse "unknown op" '= Activation(/= Activaton(/' \
    "$line:$(column 'Activation('): error: unknown op 'Activaton'"
refuse "unknown attribute" 'act_type=/act_typo=/' \
    "$line:$(column 'act_type='): error: Activation has no attribute 'act_typo'"

echo "roundtrip: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
