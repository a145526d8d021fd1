#!/usr/bin/env bash
# The conv_bn_stats fusion (--fuse=conv_bn_stats; docs/backend-cuda.md, "The
# convolution with BatchNorm's statistics"), end to end without a GPU: the
# CUDA plan run on the CPU runtime (--target=cuda --kernels=cpu, as
# cuda_plan_cpu.sh) with --amp=float16, with and without the flag:
#   - the fused C calls rt_conv_forward_stats and rt_batchnorm_forward_train_sums
#     for every BatchNorm that reads a convolution, the unfused C neither;
#   - digits_cnn (conv-bn-relu) trains 5 steps at batch 4 on synthetic data,
#     no step skipped: the logged losses agree within a relative 1e-3 and the
#     checkpoints' parameters within 1e-3 of each tensor's largest magnitude
#     (ckptcmp, cuda_plan_cpu.sh's 16-bit tolerance);
#   - resnet20_cifar (conv-bn-relu, conv-bn + add + relu, the shortcut's plain
#     conv-bn) takes one step at batch 2 (--dump-state): the loss within a
#     relative 1e-3, every gradient's cosine at least 0.98 (statcmp).
# Not bit for bit: the fused BatchNorm takes its statistics as sums about 0
# (rt_batchnorm_stats), the unfused one sums about each channel's first
# element, so save_invstd differs in its last bits (about 1e-7) and a few
# elements of each fp16 y round the other way (0 to 6 of 32,768 here); over
# ResNet-20's 21 BatchNorms at batch 2 that moves the gradients by about 1%
# (cosines 0.98-0.9999), where in fp32 (the rule forced on by hand) they
# agree to a cosine of 1.000000.  After 5 steps ResNet-20's parameters
# drift apart too far for a useful tolerance, so it is checked on one step.
# And the flag changes no byte of the C emitted for --target=cpu (a warning
# says it applies to CUDA only), nor of the fp32 CUDA plan (each pair refused
# with a warning: 16-bit only); the CUDA program built with it passes the
# offline cuDNN check with its convolutions' statistics graphs (no GPU).
# usage: conv_bn_stats.sh AMPC STATCMP
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
statcmp=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
. "$(dirname "$0")/lib.sh"
tol=1e-3

build_ckptcmp conv_bn_stats


# train NAME: 5 steps at batch 4, each step's loss logged, the checkpoint in
# $tmp/NAME.ck; no step skipped
train() {
    local name=$1
    mkdir -p "$tmp/$name.ck"
    "$tmp/$name" --data synthetic --batch-size 4 --max-steps 5 --epochs 1 --log-interval 1 \
        --loss-scale 128 --save-dir "$tmp/$name.ck" >"$tmp/$name.log" 2>&1 &&
        grep -q "Skipped-steps=0" "$tmp/$name.log"
}

# the per-step cross-entropies of a training log, one a line
losses() { grep -o 'Batch \[[0-9-]*\].*cross-entropy=[0-9.e+-]*' "$1" | sed 's/.*cross-entropy=//'; }

for model in digits_cnn resnet20_cifar; do
    base=${model}_f16
    if ! build_example "$base.off" "$model" --amp=float16 --target=cuda --kernels=cpu ||
        ! build_example "$base.on" "$model" --amp=float16 --target=cuda --kernels=cpu \
            --fuse=conv_bn_stats; then
        bad "$model: compiling the CUDA plan for the CPU runtime"
        continue
    fi
    bns=$(grep -cE "rt_batchnorm(_relu|_add_relu)?_forward_train\(" "$tmp/$base.off.c")
    convs=$(grep -c "rt_conv_forward_stats(" "$tmp/$base.on.c")
    sums=$(grep -c "rt_batchnorm_forward_train_sums(" "$tmp/$base.on.c")
    if [ "$convs" -gt 0 ] && [ "$convs" = "$sums" ] && [ "$sums" = "$bns" ] &&
            ! grep -qE "rt_conv_forward_stats|_train_sums" "$tmp/$base.off.c"; then
        ok "$model: the fused plan computes every one of its $bns BatchNorms' statistics in its convolution"
    else
        : >"$tmp/log"
        bad "$model: the fused plan's calls: $convs convolutions with statistics, $sums BatchNorms from them, of $bns"
    fi
    if [ "$model" = resnet20_cifar ]; then
        for v in off on; do
            "$tmp/$base.$v" --data synthetic --batch-size 2 --log-interval 0 --loss-scale 128 \
                --dump-state "$tmp/$base.$v.state" >"$tmp/log" 2>&1 || bad "$model: one step ($v)"
        done
        if "$statcmp" "$tmp/$base.off.state" "$tmp/$base.on.state" --loss-rtol $tol \
                --min-cosine 0.98 >"$tmp/log" 2>&1; then
            ok "$model: one step's loss and gradients agree ($(grep -o 'worst cosine [0-9.]*' "$tmp/log"))"
        else
            bad "$model: one step's loss or gradients differ"
        fi
        continue
    fi
    if ! train "$base.off" || ! train "$base.on"; then
        cp "$tmp/$base.on.log" "$tmp/log" 2>/dev/null
        bad "$model: training 5 steps (or a step was skipped)"
        continue
    fi
    losses "$tmp/$base.off.log" >"$tmp/a"
    losses "$tmp/$base.on.log" >"$tmp/b"
    if [ -s "$tmp/a" ] && [ "$(wc -l <"$tmp/a")" = "$(wc -l <"$tmp/b")" ] &&
            paste "$tmp/a" "$tmp/b" | awk -v t=$tol '
            { d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1
              if (d > t * m) { print "step " NR ": " $1 " against " $2; bad = 1 } }
            END { exit bad }' >"$tmp/log"; then
        ok "$model: the $(wc -l <"$tmp/a") logged losses agree within a relative $tol"
    else
        bad "$model: the losses differ by more than a relative $tol"
    fi
    if cmp -s "$tmp/$base.off.ck"/*.ckpt "$tmp/$base.on.ck"/*.ckpt; then
        ok "$model: the checkpoints are bit for bit the same"
    elif "$tmp/ckptcmp" "$tmp/$base.off.ck"/*.ckpt "$tmp/$base.on.ck"/*.ckpt $tol >"$tmp/log" 2>&1; then
        ok "$model: the parameters agree within $tol: $(cat "$tmp/log")"
    else
        bad "$model: the parameters differ by more than $tol"
    fi
done

# where the rule does not apply, the flag changes no byte of the program
for flags in "--amp=float16 --target=cpu" "--amp=off --target=cuda"; do
    # shellcheck disable=SC2086
    if "$ampc" examples/digits_cnn.sym $flags -S -o "$tmp/plain.c" >"$tmp/log" 2>&1 &&
            "$ampc" examples/digits_cnn.sym $flags --fuse=conv_bn_stats -S -o "$tmp/flag.c" \
                >"$tmp/log" 2>&1 && grep -q "warning: --fuse=conv_bn_stats" "$tmp/log" &&
            cmp -s "$tmp/plain.c" "$tmp/flag.c"; then
        ok "digits_cnn $flags: --fuse=conv_bn_stats warns and changes no byte of the C"
    else
        bad "digits_cnn $flags: --fuse=conv_bn_stats changed the C, or did not warn"
    fi
done

# the CUDA program built with the flag: the offline check (--cudnn-check, no
# GPU) builds each convolution's graph with its statistics and finds candidates;
# the toolkit's libraries found as cuda_build.sh finds them (a fresh machine's
# loader cache does not list the toolkit's lib64)
cudalib=${AMPC_CUDA_HOME:+$AMPC_CUDA_HOME/lib64}
cudalib=${cudalib:-$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")/../lib64}
if [ ! -f "$(dirname "$ampc")/libampccuda.a" ]; then
    echo "SKIPPED: the CUDA program's --cudnn-check: no libampccuda.a (this build had no nvcc)"
elif "$ampc" examples/digits_cnn.sym --target=cuda --fuse=conv_bn_stats -o "$tmp/cu" >"$tmp/log" 2>&1 &&
        AMPC_CUDA_LIB_PATH=${AMPC_CUDA_LIB_PATH:-$cudalib} "$tmp/cu" --cudnn-check >"$tmp/log" 2>&1 &&
        [ "$(grep -c 'forward (with statistics) float16 nhwc.*graph finalized' "$tmp/log")" = 2 ]; then
    ok "digits_cnn --target=cuda --fuse=conv_bn_stats: --cudnn-check builds both convolutions' graphs with statistics"
else
    bad "digits_cnn --target=cuda --fuse=conv_bn_stats: --cudnn-check"
fi

echo "conv_bn_stats: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
