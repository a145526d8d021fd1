#!/usr/bin/env bash
# End-to-end tests of compiled programs on the CPU (make e2e):
#   1. every example compiles to C that builds with -Wall -Wextra -Werror;
#   2. gradients of whole compiled models against finite differences of a
#      float64 reference (refcheck.c), on a fixed batch;
#   3. AMP numerics: digits_cnn with --amp=float16 against fp32 on the same
#      batch and weights: the loss within 5e-3, every gradient's cosine
#      similarity above 0.999 (statcmp.c);
#   4. training: digits_cnn reaches 90% validation accuracy in fp32, fp16 and
#      bf16; the loss falls for every other example on synthetic data;
#   5. ampc honours CC/CFLAGS (a program built with ASan+UBSan trains clean),
#      and an installed ampc works from another directory;
#   6. AMP dtype rules: BatchNorm slots fed by model inputs, a parameter
#      shared by an fp16 op and a BatchNorm slot.
# usage: run.sh AMPC REFCHECK STATCMP DATA_DIR
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
refcheck=$2 statcmp=$3 data=$4
. "$(dirname "$0")/lib.sh"
export AMPC_DATA_DIR=$data

# 1. the generated C is warning-free
for m in examples/*.sym; do
    n=$(basename "$m" .sym)
    if "$ampc" "$m" -S -o "$tmp/$n.c" >"$tmp/log" 2>&1 &&
       cc -std=c11 -Wall -Wextra -Werror -Iruntime -c "$tmp/$n.c" -o "$tmp/$n.o" >"$tmp/log" 2>&1 &&
       "$ampc" "$m" --amp=float16 -S -o "$tmp/$n.16.c" >"$tmp/log" 2>&1 &&
       cc -std=c11 -Wall -Wextra -Werror -Iruntime -c "$tmp/$n.16.c" -o "$tmp/$n.16.o" >"$tmp/log" 2>&1; then
        ok "generated C for $n (fp32 and AMP) compiles with -Wall -Wextra -Werror"
    else
        bad "generated C for $n"
    fi
done

# 2. whole-model gradients against a float64 reference
gradcheck() { # name model-file data batch samples [ampc flags...]
    local name=$1 file=$2 src=$3 batch=$4 samples=$5
    shift 5
    if "$ampc" "$file" "$@" --amp=off -o "$tmp/$name" >"$tmp/log" 2>&1 &&
       "$ampc" "$file" "$@" --amp=off --dump=infer-types >"$tmp/$name.ir" 2>"$tmp/log" &&
       "$tmp/$name" --data "$src" --batch-size "$batch" --dump-state "$tmp/$name.state" >"$tmp/log" 2>&1 &&
       "$refcheck" "$tmp/$name.ir" "$tmp/$name.state" --samples "$samples" >"$tmp/log" 2>&1; then
        ok "gradients of $name match finite differences ($(grep -o 'worst relative error [^ ]*' "$tmp/log"))"
    else
        bad "gradients of $name"
    fi
}
gradcheck mlp examples/mlp.sym digits 16 20
gradcheck digits_cnn examples/digits_cnn.sym digits 8 20
gradcheck resnet_2block tests/e2e/models/resnet_2block.sym synthetic 4 10 --model=resnet_2block
gradcheck resnext_small tests/e2e/models/resnext_small.sym synthetic 4 6 --model=resnext_small
gradcheck clip_small tests/e2e/models/clip_small.sym digits 8 20
gradcheck unary_small tests/e2e/models/unary_small.sym digits 8 20

# 3. AMP numerics against fp32
if "$ampc" examples/digits_cnn.sym --amp=off -o "$tmp/d32" >"$tmp/log" 2>&1 &&
   "$ampc" examples/digits_cnn.sym --amp=float16 -o "$tmp/d16" >"$tmp/log" 2>&1 &&
   "$tmp/d32" --data digits --batch-size 32 --dump-state "$tmp/s32" >"$tmp/log" 2>&1 &&
   "$tmp/d16" --data digits --batch-size 32 --loss-scale 1024 --dump-state "$tmp/s16" >"$tmp/log" 2>&1 &&
   "$statcmp" "$tmp/s32" "$tmp/s16" --loss-rtol 5e-3 --min-cosine 0.999 >"$tmp/log" 2>&1; then
    ok "AMP fp16 matches fp32 on one step ($(grep -o 'relative difference [^ ]*' "$tmp/log"), $(grep -o 'worst cosine [^ ]*' "$tmp/log"))"
else
    bad "AMP numerics"
fi

# 4. training
for amp in off float16 bfloat16; do
    if "$ampc" examples/digits_cnn.sym --amp=$amp -o "$tmp/dt_$amp" >"$tmp/log" 2>&1 &&
       "$tmp/dt_$amp" --data digits --epochs 4 --log-interval 0 >"$tmp/log" 2>&1; then
        acc=$(sed -n 's/^Final validation-accuracy=//p' "$tmp/log")
        if awk -v a="$acc" 'BEGIN { exit !(a >= 0.90) }'; then
            ok "digits_cnn --amp=$amp trains to $acc validation accuracy (>= 0.90)"
        else
            bad "digits_cnn --amp=$amp reached only $acc"
        fi
    else
        bad "digits_cnn --amp=$amp training run"
    fi
done
for m in mlp resnet20_cifar resnext_mini; do
    src=synthetic; [ $m = mlp ] && src=digits
    if "$ampc" examples/$m.sym --amp=float16 -o "$tmp/$m" >"$tmp/log" 2>&1 &&
       "$tmp/$m" --data $src --batch-size 16 --max-steps 40 --log-interval 10 --lr 0.05 >"$tmp/log" 2>&1; then
        first=$(grep -o 'cross-entropy=[0-9.]*' "$tmp/log" | head -1 | cut -d= -f2)
        last=$(grep -o 'cross-entropy=[0-9.]*' "$tmp/log" | sed -n 3p | cut -d= -f2)
        if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'; then
            ok "$m (AMP) loss falls: $first -> $last"
        else
            bad "$m loss did not fall: $first -> $last"
        fi
    else
        bad "$m (AMP) build or run"
    fi
done

# 5. CC/CFLAGS, and an installed ampc used from elsewhere
if CC=clang CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all" \
       "$ampc" examples/digits_cnn.sym --amp=float16 -o "$tmp/dasan" >"$tmp/log" 2>&1 &&
   "$tmp/dasan" --data digits --max-steps 30 --log-interval 10 >"$tmp/log" 2>&1; then
    ok "a program built with CC=clang CFLAGS=-fsanitize=address,undefined runs clean"
else
    bad "sanitized program"
fi
if make -s install PREFIX="$tmp/prefix" BUILD="$(dirname "$ampc")" >"$tmp/log" 2>&1 &&
   (cd "$tmp" && cp "$root/examples/mlp.sym" . && "$tmp/prefix/bin/ampc" mlp.sym -o mlp_inst &&
    ./mlp_inst --data digits --max-steps 5 --log-interval 0) >"$tmp/log" 2>&1; then
    ok "an installed ampc compiles and the program runs from another directory"
else
    bad "make install"
fi

# 6. AMP dtype rules (docs/amp.md): BatchNorm's gamma and beta given as model
# inputs stay fp32 and the program runs clean under ASan+UBSan; a parameter
# read as an fp16 FullyConnected bias and as a BatchNorm beta (through its
# fp32 master) trains in fp16 as in fp32: same seed, static loss scale (no
# skipped steps), validation cross-entropy within 0.02 after 2 epochs (it was
# 0.41 against 0.91 when BatchNorm read the fp16 shadow).
if CC=clang CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all" \
       "$ampc" tests/e2e/models/amp_rules.sym --model=bn_inputs --amp=float16 -o "$tmp/bnin" \
       >"$tmp/log" 2>&1 &&
   "$tmp/bnin" --data synthetic --max-steps 2 --log-interval 0 >"$tmp/log" 2>&1; then
    ok "AMP: BatchNorm with model inputs as gamma and beta builds and runs clean (ASan+UBSan)"
else
    bad "AMP: BatchNorm with model inputs as gamma and beta"
fi
declare -A sce
for amp in off float16; do
    "$ampc" tests/e2e/models/amp_rules.sym --model=shared_param --amp=$amp -o "$tmp/shared_$amp" \
        >"$tmp/log" 2>&1 &&
        "$tmp/shared_$amp" --data digits --epochs 2 --seed 1 --loss-scale 128 --log-interval 0 \
            >"$tmp/log" 2>&1
    sce[$amp]=$(sed -n 's/^Epoch\[1\] Validation-cross-entropy=//p' "$tmp/log")
done
if awk -v a="${sce[off]:-x}" -v b="${sce[float16]:-y}" \
       'BEGIN { d = a - b; exit !(a == a + 0 && b == b + 0 && d < 0.02 && d > -0.02) }'; then
    ok "AMP: a parameter shared by an fp16 op and a BatchNorm slot trains as in fp32 (cross-entropy ${sce[float16]} vs ${sce[off]})"
else
    bad "AMP: shared parameter: fp16 cross-entropy ${sce[float16]:-none} vs fp32 ${sce[off]:-none}"
fi

echo "e2e: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
