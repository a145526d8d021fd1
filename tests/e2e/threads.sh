#!/usr/bin/env bash
# threads.sh - the thread count changes no bit (docs/backend-cpu.md,
# "Threads"), end to end: digits_cnn and resnet20_cifar, fp32, --amp=float16
# and --amp=bfloat16, train 3 steps at batch 8 on synthetic data with --threads 1
# and with --threads 2; the checkpoints (parameters, optimizer state,
# BatchNorm moving statistics, loss scale) are byte for byte the same.
# On a machine without AVX2 the convolutions take the BLAS path, whose
# results OpenBLAS does not keep across thread counts: skipped there.
# usage: threads.sh AMPC
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/lib.sh"
if ! grep -qw avx2 /proc/cpuinfo 2>/dev/null || [ "${AMPC_RT_SIMD:-}" = 0 ]; then
    echo "SKIP threads.sh: no AVX2 (the BLAS path is not bit-stable across threads)"
    exit 0
fi

for m in digits_cnn resnet20_cifar; do
    for amp in off float16 bfloat16; do
        name="${m}_$amp"
        if ! "$ampc" "examples/$m.sym" --amp=$amp -o "$tmp/$name" >"$tmp/log" 2>&1; then
            bad "compiling $name"
            continue
        fi
        for t in 1 2; do
            mkdir -p "$tmp/$name.ck$t"
            "$tmp/$name" --data synthetic --batch-size 8 --max-steps 3 --epochs 1 \
                --log-interval 0 --threads $t --save-dir "$tmp/$name.ck$t" >"$tmp/log" 2>&1 ||
                { bad "$name --threads $t: training"; continue 2; }
        done
        files=$(cd "$tmp/$name.ck1" && ls)
        if [ -z "$files" ]; then
            bad "$name: no checkpoint written"
            continue
        fi
        same=1
        for f in $files; do
            cmp -s "$tmp/$name.ck1/$f" "$tmp/$name.ck2/$f" || { same=0; echo "    $f differs"; }
        done
        [ $same = 1 ] && ok "$name: --threads 1 and 2 checkpoints identical" ||
            bad "$name: --threads 1 and 2 checkpoints differ"
    done
done
echo "threads.sh: $pass passed, $fail failed"
[ $fail = 0 ]
