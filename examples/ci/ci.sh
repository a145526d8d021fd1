#!/usr/bin/env bash
# examples/ci/ci.sh: the CI check of a model repository (docs/ci.md).
#
#   examples/ci/ci.sh [--ampc PATH] [--update] MODELS GOLDEN [NAME...]
#
# For every GOLDEN/NAME.flags (or the NAMEs given), compiles MODELS/NAME.sym
# with the flags on that file's first line and checks, in order:
#   1. ampc diff GOLDEN/NAME.json MODELS/NAME.sym: the graph after schedule is
#      the golden one (nodes, casts, dtypes, shapes, attributes, parameters,
#      fusions; renamed nodes are paired, provenance is not compared);
#   2. ampc --expect GOLDEN/NAME.expect: the report's fields hold (the memory
#      plan, the parameter count, the placement, dtypes by node name).
# Prints `ok NAME` or `FAIL NAME: <the first line of the reason>` per model
# and exits 1 when any failed, 2 on a broken setup.  With --update it accepts
# the current output instead: rewrites GOLDEN/NAME.json and the exact values
# of GOLDEN/NAME.expect (bounds stay), for a reviewer to read as a diff.
set -u
ampc=${AMPC:-ampc}
update=
while [ $# -gt 0 ]; do
    case $1 in
    --ampc) ampc=$2; shift 2 ;;
    --update) update=1; shift ;;
    *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "usage: $0 [--ampc PATH] [--update] MODELS GOLDEN [NAME...]" >&2
    exit 2
fi
models=$1 golden=$2
shift 2
if [ $# -eq 0 ]; then
    set -- $(cd "$golden" && ls *.flags 2>/dev/null | sed 's/\.flags$//')
fi
[ $# -gt 0 ] || { echo "$0: no GOLDEN/*.flags in '$golden'" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
for name in "$@"; do
    model=$models/$name.sym
    read -r -a flags < "$golden/$name.flags"
    # --target is pinned in the flags: auto would change with the machine
    if [ -n "$update" ]; then
        "$ampc" "$model" "${flags[@]}" --dump=schedule --dump-format=json >"$tmp/new.json" &&
            cp "$tmp/new.json" "$golden/$name.json" &&
            "$ampc" "$model" "${flags[@]}" --expect "$golden/$name.expect" --expect-update ||
            { echo "FAIL $name: could not update (above)"; failed=1; continue; }
        echo "updated $name"
        continue
    fi
    if ! "$ampc" diff "$golden/$name.json" "$model" "${flags[@]}" >"$tmp/out" 2>&1 ||
       ! "$ampc" "$model" "${flags[@]}" --expect "$golden/$name.expect" >"$tmp/out" 2>&1; then
        echo "FAIL $name: $(grep -m1 . "$tmp/out")"
        failed=1
    else
        echo "ok $name"
    fi
done
exit $failed
