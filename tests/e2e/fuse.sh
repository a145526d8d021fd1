#!/usr/bin/env bash
# Fusions change no bit (docs/codegen.md, "Fusions"), end to end: for
# digits_cnn (conv-bn-relu) and resnet20_cifar (conv-bn-relu and residual
# bn-add-relu), in fp32 and with --amp=float16 and --amp=bfloat16, the program
# compiled with every fusion and the one compiled with --no-fuse=all (and,
# in fp32, with each fusion off alone) train 3 steps at batch 4 on synthetic
# data: their checkpoints (parameters, optimizer state, BatchNorm moving
# statistics) and the first step's gradients (--dump-state) are byte for
# byte the same; in fp32 the fused program on 2 threads too (the fused
# kernels split channels and elements over threads as the unfused ones do).  The fused C source must call the fused kernels, and the
# unfused one none, so that the comparison compares something.  The cast
# fusions (AMP only) on every example: see the last section.
# usage: fuse.sh AMPC
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/lib.sh"
fused_calls='rt_batchnorm_relu_forward_train|rt_batchnorm_relu_backward|rt_batchnorm_add_relu_forward_train|rt_batchnorm_add_relu_backward'


# train NAME [RUN [THREADS]]: program NAME, 3 steps at batch 4 on THREADS
# threads (1); the checkpoint and the state under the name RUN (NAME)
train() {
    local name=$1 run=${2:-$1} threads=${3:-1}
    mkdir -p "$tmp/$run.ck"
    "$tmp/$name" --data synthetic --batch-size 4 --max-steps 3 --epochs 1 --log-interval 0 \
        --threads "$threads" --save-dir "$tmp/$run.ck" >"$tmp/log" 2>&1 &&
        "$tmp/$name" --data synthetic --batch-size 4 --threads "$threads" --log-interval 0 \
            --dump-state "$tmp/$run.state" >"$tmp/log" 2>&1
}

# same A B WHAT: the checkpoints and states of runs A and B are identical
same() {
    local a=$1 b=$2 what=$3 ca cb
    ca=$(ls "$tmp/$a.ck"/*.ckpt 2>/dev/null | head -1)
    cb=$(ls "$tmp/$b.ck"/*.ckpt 2>/dev/null | head -1)
    if [ -z "$ca" ] || [ -z "$cb" ]; then
        bad "$what: no checkpoint written"
    elif ! cmp -s "$ca" "$cb"; then
        bad "$what: the checkpoints differ ($(cmp "$ca" "$cb" 2>&1 | head -1))"
    elif ! cmp -s "$tmp/$a.state" "$tmp/$b.state"; then
        bad "$what: the first step's gradients (--dump-state) differ"
    else
        ok "$what: checkpoints and first-step gradients bit-identical"
    fi
}

for model in digits_cnn resnet20_cifar; do
    for amp in off float16 bfloat16; do
        base=${model}_$amp
        if ! build_example "$base" "$model" --amp=$amp || ! build_example "$base.nf" "$model" --amp=$amp --no-fuse=all
        then
            bad "$model --amp=$amp: compiling"
            continue
        fi
        if ! grep -Eq "$fused_calls" "$tmp/$base.c"; then
            bad "$model --amp=$amp: the fused program calls no fused kernel"
        elif grep -Eq "$fused_calls" "$tmp/$base.nf.c"; then
            bad "$model --amp=$amp: --no-fuse=all still calls a fused kernel"
        fi
        if ! train "$base" || ! train "$base.nf"; then
            bad "$model --amp=$amp: training"
            continue
        fi
        same "$base" "$base.nf" "$model --amp=$amp fused vs --no-fuse=all"
        [ "$amp" = off ] || continue
        if train "$base" "$base.t2" 2; then
            same "$base.t2" "$base.nf" "$model --amp=$amp fused on 2 threads vs --no-fuse=all on 1"
        else
            bad "$model --amp=$amp: training on 2 threads"
        fi
        for rule in bn_relu add_relu bn_add_relu; do
            if build_example "$base.no_$rule" "$model" --amp=$amp --no-fuse=$rule && train "$base.no_$rule"
            then
                same "$base" "$base.no_$rule" "$model --amp=$amp fused vs --no-fuse=$rule"
            else
                bad "$model --amp=$amp --no-fuse=$rule: compiling or training"
            fi
        done
    done
done
# resnet20 has the three: each flag removes its own kernels only (every
# residual add of resnet20 reads a BatchNorm first, so with every fusion on
# no add_relu is left; bn_add_relu builds on add_relu's nodes)
r20=$tmp/resnet20_cifar_off
if grep -q rt_batchnorm_add_relu_forward "$r20.no_bn_relu.c" &&
    ! grep -q rt_batchnorm_relu "$r20.no_bn_relu.c" &&
    grep -q rt_batchnorm_relu_backward "$r20.no_add_relu.c" &&
    ! grep -Eq "rt_add_relu_forward|rt_batchnorm_add_relu" "$r20.no_add_relu.c" &&
    grep -q rt_add_relu_forward "$r20.no_bn_add_relu.c" &&
    grep -q rt_batchnorm_relu_backward "$r20.no_bn_add_relu.c" &&
    ! grep -q rt_batchnorm_add_relu "$r20.no_bn_add_relu.c" &&
    ! grep -q rt_add_relu_forward "$r20.c"; then
    ok "resnet20_cifar: --no-fuse=bn_relu, add_relu and bn_add_relu each turn off their own fusion"
else
    bad "resnet20_cifar: --no-fuse=bn_relu / add_relu / bn_add_relu do not turn off exactly their fusion"
fi

# The cast fusions fold AMP's casts around the loss head into its kernels,
# so they exist only with AMP (fp32 has no such cast: nothing to fold, which
# tests/golden/fuse/ checks).  Every example, float16 and bfloat16, compiled
# with every fusion, with each cast fusion off alone and with both off: the
# small examples train 3 steps at batch 4 (checkpoints and first-step
# gradients compared); the ResNet-50 v1d examples, every fusion against both
# off, one step at batch 2 (--dump-state: the step's gradients, output and
# inputs).  The C must call the mixed-dtype kernels where a fusion is on and
# not where it is off.
cast_rules="cast_softmax_output softmax_output_bwd_cast"
mixed_fwd='rt_softmax_output_forward\([^,]+, [^,]+, RT_B?F16,'
mixed_bwd='step_state, RT_B?F16, '

# one_step NAME: the one-step state of program NAME at batch 2
one_step() {
    "$tmp/$1" --data synthetic --batch-size 2 --log-interval 0 --dump-state "$tmp/$1.state" \
        >"$tmp/log" 2>&1
}

for m in examples/*.sym; do
    model=$(basename "$m" .sym)
    big=0
    case $model in resnet50*) big=1 ;; esac
    for amp in float16 bfloat16; do
        base=cast_${model}_$amp
        variants="all no_both"
        [ $big = 1 ] || variants="all no_cast_softmax_output no_softmax_output_bwd_cast no_both"
        built=1
        for v in $variants; do
            case $v in
            all) flags= ;;
            no_both) flags=--no-fuse=cast_softmax_output,softmax_output_bwd_cast ;;
            *) flags=--no-fuse=${v#no_} ;;
            esac
            # shellcheck disable=SC2086
            build_example "$base.$v" "$model" --amp=$amp $flags || { bad "$model --amp=$amp $flags: compiling"; built=0; }
        done
        [ $built = 1 ] || continue
        # where each fusion is on, its mixed-dtype call is there; off, it is not
        # (resnet50_v1d_manual_fp16 widens its logits by its own Cast, which
        # no rule folds: only its gradient's cast is fused)
        fwd_expected=1
        [ $model = resnet50_v1d_manual_fp16 ] && fwd_expected=0
        calls_ok=1
        for v in $variants; do
            want_f=$fwd_expected want_b=1
            case $v in
            no_both) want_f=0 want_b=0 ;;
            no_cast_softmax_output) want_f=0 ;;
            no_softmax_output_bwd_cast) want_b=0 ;;
            esac
            has_f=0 has_b=0
            grep -Eq "$mixed_fwd" "$tmp/$base.$v.c" && has_f=1
            grep -Eq "$mixed_bwd" "$tmp/$base.$v.c" && has_b=1
            [ $has_f = $want_f ] && [ $has_b = $want_b ] || calls_ok=0
        done
        if [ $calls_ok = 1 ]; then
            ok "$model --amp=$amp: each cast fusion's mixed-dtype call is there exactly when it is on"
        else
            : >"$tmp/log"; bad "$model --amp=$amp: a cast fusion's mixed-dtype call is missing or left over"
        fi
        if [ $big = 1 ]; then
            if one_step "$base.all" && one_step "$base.no_both"; then
                if cmp -s "$tmp/$base.all.state" "$tmp/$base.no_both.state"; then
                    ok "$model --amp=$amp: one step's gradients bit-identical with and without the cast fusions"
                else
                    : >"$tmp/log"; bad "$model --amp=$amp: the step's gradients differ with the cast fusions"
                fi
            else
                bad "$model --amp=$amp: one step at batch 2"
            fi
            rm -f "$tmp/$base".*.state
            continue
        fi
        trained=1
        for v in $variants; do
            train "$base.$v" || { bad "$model --amp=$amp ($v): training"; trained=0; }
        done
        [ $trained = 1 ] || continue
        for v in $variants; do
            case $v in
            all) continue ;;
            no_both) off="both cast fusions off" ;;
            *) off="--no-fuse=${v#no_}" ;;
            esac
            same "$base.all" "$base.$v" "$model --amp=$amp every fusion vs $off"
        done
    done
done
echo "fuse: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
