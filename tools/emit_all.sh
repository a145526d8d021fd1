#!/bin/sh
# emit_all.sh [AMPC] DIR - the C that ampc emits for every example and test
# model (examples/, tests/e2e/models/, tests/gpu/), for the CPU and the CUDA
# target, with --amp off, float16 and bfloat16: DIR/MODEL.TARGET.AMP.c, or
# DIR/MODEL.TARGET.AMP.err with ampc's messages where it refuses one.  Two
# such folders compared (diff -r) show what a change to the compiler or the
# emitter changed in the programs; a refactor that should change nothing
# compares byte for byte (issue 23 keeps its before this way).
set -eu
if [ $# = 2 ]; then ampc=$1; shift; else ampc=build/ampc; fi
[ $# = 1 ] || { echo "usage: tools/emit_all.sh [AMPC] DIR" >&2; exit 2; }
dir=$1
[ -x "$ampc" ] || { echo "emit_all.sh: $ampc not found (make first)" >&2; exit 2; }
mkdir -p "$dir"
n=0 refused=0
for m in examples/*.sym tests/e2e/models/*.sym tests/gpu/*.sym; do
    base=$(basename "$m" .sym)
    for target in cpu cuda; do
        for amp in off float16 bfloat16; do
            out=$dir/$base.$target.$amp
            rm -f "$out.c" "$out.err"
            if "$ampc" "$m" --target=$target --amp=$amp -S -o "$out.c" 2>"$out.err"; then
                [ -s "$out.err" ] || rm -f "$out.err"
                n=$((n + 1))
            else
                rm -f "$out.c"
                refused=$((refused + 1))
            fi
        done
    done
done
echo "emit_all.sh: $n programs emitted into $dir, $refused refused (their .err files)"
