#!/usr/bin/env bash
# The CUDA target's plan, run on the CPU runtime (docs/codegen.md, "Layouts";
# issue 11: "the plan the GPU will run is not first run on a GPU").  Every
# example (examples/*.sym), in fp32 and with --amp=float16, compiled with
# --target=cuda --kernels=cpu (its layouts: NHWC 16-bit convolutions with
# KRSC weights and the _layout conversions; its fusions; its memory plan,
# calling the CPU runtime's kernels) against the same model compiled with
# --target=cpu:
#   - the small examples train 5 steps at batch 4 on synthetic data with a
#     static loss scale of 128 (no step skipped, checked), and their
#     checkpoints' parameters (canonical on disk whatever the layout) must
#     agree: bit for bit in fp32 (no layouts there, and fusions change no
#     bit), within 1e-3 of each tensor's largest magnitude with AMP (the CPU
#     NHWC convolution and pooling are the NCHW kernels' bits; BatchNorm over
#     the NHWC view [N*H*W, C, 1] sums in another order);
#   - the ResNet-50 v1d examples take one step at batch 2 (--dump-state):
#     the step's states must be the same bytes, or else agree by statcmp
#     (loss within 1e-3, every gradient's cosine at least 0.9999).
# The 16-bit convolution models' CUDA plans must hold NHWC layouts (and the
# CPU plans none), so that the comparison compares something.
# usage: cuda_plan_cpu.sh AMPC STATCMP
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
statcmp=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
. "$(dirname "$0")/lib.sh"
tol16=1e-3

build_ckptcmp cuda_plan_cpu


# train NAME: 5 steps at batch 4, checkpoint in $tmp/NAME.ck; no step skipped
train() {
    local name=$1
    mkdir -p "$tmp/$name.ck"
    "$tmp/$name" --data synthetic --batch-size 4 --max-steps 5 --epochs 1 --log-interval 0 \
        --loss-scale 128 --save-dir "$tmp/$name.ck" >"$tmp/log" 2>&1 &&
        grep -q "Skipped-steps=0" "$tmp/log"
}

for m in examples/*.sym; do
    model=$(basename "$m" .sym)
    big=0
    case $model in resnet50*) big=1 ;; esac
    for amp in off float16; do
        base=${model}_$amp
        if ! build_example "$base.cpu" "$model" --amp=$amp --target=cpu ||
            ! build_example "$base.cuda" "$model" --amp=$amp --target=cuda --kernels=cpu; then
            bad "$model --amp=$amp: compiling"
            continue
        fi
        # a 16-bit convolution is NHWC in the CUDA plan, never in the CPU one
        if grep -q "RT_LAYOUT_NHWC" "$tmp/$base.cpu.c"; then
            : >"$tmp/log"; bad "$model --amp=$amp: the CPU plan holds an NHWC layout"
        fi
        want=0
        grep -Eq "rt_conv_forward\(&d, RT_B?F16" "$tmp/$base.cpu.c" && want=1
        has=0
        grep -q "\.layout = RT_LAYOUT_NHWC" "$tmp/$base.cuda.c" && has=1
        if [ $want != $has ]; then
            : >"$tmp/log"; bad "$model --amp=$amp: the CUDA plan's NHWC layouts: $has, want $want"
        fi
        tol=0
        [ $has = 1 ] && tol=$tol16
        if [ $big = 1 ]; then
            if ! "$tmp/$base.cpu" --data synthetic --batch-size 2 --log-interval 0 --loss-scale 128 \
                    --dump-state "$tmp/$base.cpu.state" >"$tmp/log" 2>&1 ||
                ! "$tmp/$base.cuda" --data synthetic --batch-size 2 --log-interval 0 \
                    --loss-scale 128 --dump-state "$tmp/$base.cuda.state" >"$tmp/log" 2>&1; then
                bad "$model --amp=$amp: one step at batch 2"
            elif cmp -s "$tmp/$base.cpu.state" "$tmp/$base.cuda.state"; then
                ok "$model --amp=$amp: the CUDA plan's step on the CPU runtime is the CPU plan's, bit for bit (NHWC: $has)"
            elif [ $tol != 0 ] && "$statcmp" "$tmp/$base.cpu.state" "$tmp/$base.cuda.state" \
                    --loss-rtol 1e-3 --min-cosine 0.9999 >"$tmp/log" 2>&1; then
                ok "$model --amp=$amp: the CUDA plan's step on the CPU runtime agrees (statcmp; NHWC: $has)"
            else
                bad "$model --amp=$amp: the CUDA plan's step differs from the CPU plan's (NHWC: $has)"
            fi
            rm -f "$tmp/$base".*.state "$tmp/$base.cpu" "$tmp/$base.cuda"
            continue
        fi
        if ! train "$base.cpu" || ! train "$base.cuda"; then
            bad "$model --amp=$amp: training (or a step was skipped)"
            continue
        fi
        if "$tmp/ckptcmp" "$tmp/$base.cpu.ck"/*.ckpt "$tmp/$base.cuda.ck"/*.ckpt $tol \
                >"$tmp/log" 2>&1; then
            ok "$model --amp=$amp: the CUDA plan trains to the CPU plan's parameters (tolerance $tol): $(cat "$tmp/log")"
        else
            bad "$model --amp=$amp: the CUDA plan's parameters differ from the CPU plan's (tolerance $tol)"
        fi
    done
done
echo "cuda_plan_cpu: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
