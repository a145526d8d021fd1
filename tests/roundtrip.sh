#!/usr/bin/env bash
# The IR text dump reads back to the same graph (DESIGN.md section 3), and a
# dump holds to the rules of the passes it has been through.
#
#   tests/roundtrip.sh build/ampc
#
# For every example, with AMP off and with --amp=float16 and --amp=bfloat16,
# and every pass checked:
#   same    dump after PASS, read it back with --from-ir, dump PASS again:
#           the two files are identical byte for byte;
#   resume  read the dump after PASS and run on to each later pass checked:
#           the dump equals the one made straight from the .sym file (the
#           reader kept everything later passes need).
# Reading a dump re-runs the shape and type rules on it and, after autodiff,
# derives the backward graph again, so `same` after cast-elide is also the
# invariant of docs/amp.md: the AMP rewrite's output passes infer-types'
# rules unchanged.  That invariant (same after cast-elide and after
# train-cast-elide, and resuming from cast-elide) is then checked on every
# golden .sym case that compiles (AMP off, float16, and the AMP flags of each
# of its RUN lines: --amp-exclude, --amp-fp16, ...) and on random models
# (tests/random_models.py: AMP off, float16, bfloat16, and float16 with a
# convolution that shares its weight excluded).
# A dump with --dump-ids=names (values by name) reads back to the same graph
# as the default form (values by position).  The `# provenance:` line says
# how each dump was made (its input, its flags), so it is left out of every
# comparison.
# Then the reader must refuse a dump with an unknown op and one with an
# unknown attribute, naming the file, line and column.
#
# Every pass `ampc --help` lists is checked (autodiff dumps carry the
# inference graph after the training graph, and it reads back too); set
# ROUNDTRIP_PASSES to a list of --dump names to check fewer, and
# ROUNDTRIP_RANDOM to the number of random models (default 30; 0 for none).
# AMPC_VERIFY=1 runs the IR verifier after every pass.
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
pass=0 fail=0 compiled=0

ok() { pass=$((pass + 1)); }
# ampc ARGS... with the provenance line of its dump dropped (its exit status kept)
dump() {
    "$ampc" "$@" > "$tmp/raw" || return
    sed '/^# provenance: /d' "$tmp/raw"
}
bad() {
    fail=$((fail + 1))
    echo "FAIL $1"
    [ -s "$tmp/err" ] && sed 's/^/    /' "$tmp/err" | head -20
    return 0
}

# full MODEL LABEL FLAGS...: every pass, read back (same) and resumed.
full() {
    local ex=$1 name=$2
    shift 2
    local p q i direct
    for p in "${passes[@]}"; do
        direct=$tmp/$name.$p.ir
        if ! dump "$ex" "$@" --dump="$p" > "$direct" 2> "$tmp/err"; then
            bad "$name: dump after $p"
            continue
        fi
    done
    # values by name: every pass in one run, three of them read back (the
    # forward graph, the training graph and its inference graph, layouts)
    rm -rf "$tmp/names"
    if "$ampc" "$ex" "$@" --dump=all --dump-ids=names --dump-dir="$tmp/names" 2> "$tmp/err"; then
        for p in elaborate cast-elide schedule; do
            [ -s "$tmp/$name.$p.ir" ] || continue
            if dump --from-ir "$tmp"/names/??."$p".ir "$@" --dump="$p" > "$tmp/again.ir" 2> "$tmp/err" &&
                diff -u "$tmp/$name.$p.ir" "$tmp/again.ir" > "$tmp/err"; then
                ok
            else
                bad "$name: --dump-ids=names after $p does not read back to the same graph"
            fi
        done
    else
        bad "$name: --dump=all --dump-ids=names"
    fi
    for i in "${!passes[@]}"; do
        p=${passes[$i]}
        direct=$tmp/$name.$p.ir
        [ -s "$direct" ] || continue
        # same pass: the dump reads back to itself
        if dump --from-ir "$direct" "$@" --dump="$p" > "$tmp/again.ir" 2> "$tmp/err" &&
            diff -u "$direct" "$tmp/again.ir" > "$tmp/err"; then
            ok
        else
            bad "$name: --from-ir dump after $p, --dump=$p differs"
        fi
        # later passes: resuming from the dump gives what the pipeline gives
        for q in "${passes[@]:$((i + 1))}"; do
            [ -s "$tmp/$name.$q.ir" ] || continue
            if dump --from-ir "$direct" "$@" --dump="$q" > "$tmp/resumed.ir" 2> "$tmp/err" &&
                diff -u "$tmp/$name.$q.ir" "$tmp/resumed.ir" > "$tmp/err"; then
                ok
            else
                bad "$name: --from-ir dump after $p, --dump=$q differs from the direct dump"
            fi
        done
    done
}

# invariant MODEL LABEL FLAGS...: for a model that compiles, the dumps after
# cast-elide and train-cast-elide read back unchanged, and resuming from
# cast-elide gives the training graph.  A model that does not compile is
# skipped (golden error cases, AMP-off models that mix dtypes), unless
# must_compile is set (random models with AMP on: every one must compile).
must_compile=
invariant() {
    local ex=$1 name=$2
    shift 2
    local fwd=$tmp/inv.fwd.ir trn=$tmp/inv.train.ir
    if ! dump "$ex" "$@" --dump=cast-elide > "$fwd" 2> "$tmp/err"; then
        [ -n "$must_compile" ] && bad "$name $*: does not compile"
        return 0
    fi
    compiled=$((compiled + 1))
    if dump --from-ir "$fwd" --dump=cast-elide > "$tmp/again.ir" 2> "$tmp/err" &&
        diff -u "$fwd" "$tmp/again.ir" > "$tmp/err"; then
        ok
    else
        bad "$name $*: the dump after cast-elide does not read back unchanged"
    fi
    dump "$ex" "$@" --dump=train-cast-elide > "$trn" 2> /dev/null || return 0
    if dump --from-ir "$trn" --dump=train-cast-elide > "$tmp/again.ir" 2> "$tmp/err" &&
        diff -u "$trn" "$tmp/again.ir" > "$tmp/err"; then
        ok
    else
        bad "$name $*: the dump after train-cast-elide does not read back unchanged"
    fi
    if dump --from-ir "$fwd" --dump=train-cast-elide > "$tmp/again.ir" 2> "$tmp/err" &&
        diff -u "$trn" "$tmp/again.ir" > "$tmp/err"; then
        ok
    else
        bad "$name $*: resuming from cast-elide gives another training graph"
    fi
}

for ex in examples/*.sym; do
    name=$(basename "$ex" .sym)
    full "$ex" "$name"
    full "$ex" "$name.fp16" --amp=float16
    full "$ex" "$name.bf16" --amp=bfloat16
done

if printf '%s\n' "${passes[@]}" | grep -qx cast-elide; then
    while IFS= read -r t; do
        invariant "$t" "$t"
        invariant "$t" "$t" --amp=float16
        # and with the AMP flags of each of its RUN lines that compile it
        while IFS= read -r flags; do
            read -r -a f <<< "$flags"
            [ "$flags" = --amp=float16 ] || invariant "$t" "$t" "${f[@]}"
        done < <(grep -E '^\s*# ?RUN: .*%ampc %s' "$t" | sed 's/|.*//' |
                 while IFS= read -r l; do
                     grep -oE -- '--amp(-[a-z0-9]+)?=[A-Za-z0-9_,.]+' <<< "$l" | paste -sd' '
                 done | sort -u | grep .)
    done < <(find tests/golden -name '*.sym' | sort)

    nrandom=${ROUNDTRIP_RANDOM:-30}
    if [ "$nrandom" -gt 0 ]; then
        mkdir -p "$tmp/random"
        python3 tests/random_models.py 1 "$nrandom" "$tmp/random" || exit 2
        for m in "$tmp"/random/*.sym; do
            name=$(basename "$m" .sym)
            invariant "$m" "$name"
            must_compile=1
            invariant "$m" "$name" --amp=float16
            invariant "$m" "$name" --amp=bfloat16
            excl=$(sed -n 's/^# exclude: //p' "$m")
            # (the named convolution may be dead code, and so not in the graph)
            if [ -n "$excl" ] && "$ampc" "$m" --dump=infer-types 2>/dev/null |
                    grep -qF "name=\"$excl\""; then
                invariant "$m" "$name" --amp=float16 --amp-exclude="$excl"
            fi
            must_compile=
        done
    fi
fi

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
    "$line:$(column 'act_type='): error: Activation has no attribute 'act_typo' (its attributes: act_type)"

echo "roundtrip: $pass passed, $fail failed ($compiled golden and random model builds checked)"
[ "$fail" -eq 0 ]
