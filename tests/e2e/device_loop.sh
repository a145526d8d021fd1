#!/usr/bin/env bash
# The training loop on the device interface (runtime/device.h) trains the
# examples bit for bit as the loop did before it: each compiled program runs
# a few steps on digits and saves a checkpoint; the same emitted C, linked
# with tests/e2e/loopref.c instead of the runtime's main, repeats the steps
# with the reference loop (tests/runtime/ref_loop.h: the CPU kernels on host
# pointers, no device calls) and compares every parameter, master and
# optimizer state bit for bit.  digits_cnn and mlp, fp32 and AMP (fp16,
# bf16), SGD momentum, NAG and Adam, a dynamic loss scale with a skipped
# overflow step and a static one with a non-finite step.
# Then the waits a GPU would make, on the CPU device's lagging mode
# (tests/e2e/lagcount.c): the CUDA plan (--target=cuda --kernels=cpu) never
# waits in a steady step (one that logs nothing after one that logged
# nothing): on digits the host fills runtime/trainer.c's two staging slots in
# turn (with one it waited once per step), and on the synthetic source the
# device makes the batch (device.h's synthetic_batch: no staging, no copy);
# digits' batches go up as bytes (device.h's ingest) and, as the synthetic
# ones, land in the first layer's form (the step's input cast skipped),
# which an fp32 program (no cast) does not use (lagcount counts the batches
# of each kind).  lagcount runs the steps in the device's capture mode
# (nothing between a step's begin and its end waits, reads back or
# allocates); --check-numerics, which reads each node's flag, is refused there by name.  With --cuda-graph 1 the steps after
# the second replay the captured one (the CPU device's emulated CUDA graph;
# tests/e2e/cuda_graph.sh compares its states), still without a wait.
# usage: device_loop.sh AMPC DATA_DIR
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$2
. "$(dirname "$0")/lib.sh"
lib=$(dirname "$ampc")/libampcrt.a
export AMPC_DATA_DIR=$data

# model amp steps flags...
check() {
    local model=$1 amp=$2 steps=$3; shift 3
    local c=$tmp/$model-$amp.c d=$tmp/ck-$model-$amp-$pass-$fail
    local what="device loop = reference loop: $model --amp=$amp $steps steps $*"
    rm -f "$tmp/log"
    if ! "$ampc" "examples/$model.sym" --amp="$amp" -S -o "$c" >"$tmp/log" 2>&1 ||
       ! cc -O2 -std=c11 -I runtime "$c" "$lib" -lopenblas -lz -lm -o "$tmp/prog" >>"$tmp/log" 2>&1 ||
       ! cc -O2 -std=c11 -D_GNU_SOURCE -I runtime -I tests/runtime "$c" tests/e2e/loopref.c "$lib" \
            -lopenblas -lz -lm -o "$tmp/ref" >>"$tmp/log" 2>&1; then
        bad "$what (build)"; return
    fi
    if ! "$tmp/prog" --data digits --max-steps "$steps" --log-interval 0 --save-dir "$d" "$@" \
            >"$tmp/log" 2>&1; then
        bad "$what (the program)"; return
    fi
    if "$tmp/ref" "$d/$model-$(printf step%06d "$steps").ckpt" "$steps" --data digits "$@" >"$tmp/log" 2>&1; then
        ok "$what"
    else
        bad "$what"
    fi
}

check digits_cnn off 6
check digits_cnn off 5 --optimizer='adam(wd=0.0001)'
check digits_cnn float16 6 --loss-scale=dynamic --inject-inf-at-step 2
check digits_cnn bfloat16 5 --optimizer='nag(momentum=0.9)'
check mlp off 6 --loss-scale=1e30
check mlp float16 5 --optimizer=adam
# model amp waits bytes formed flags...: the lagging device's waits per steady
# step, and how its batches came (bytes: all of them uploaded as the source's
# bytes, or none; formed: all written in the first layer's form, or none)
lag() {
    local model=$1 amp=$2 waits=$3 bytes=$4 formed=$5; shift 5
    local c=$tmp/lag-$model-$amp.c
    local what="lagging device: $model --target=cuda --kernels=cpu --amp=$amp waits $waits per steady step $*"
    rm -f "$tmp/log"
    if ! "$ampc" "examples/$model.sym" --target=cuda --kernels=cpu --amp="$amp" -S -o "$c" \
            >"$tmp/log" 2>&1 ||
       ! cc -O2 -std=c11 -I runtime "$c" tests/e2e/lagcount.c "$lib" -lopenblas -lz -lm \
            -o "$tmp/lag" >>"$tmp/log" 2>&1; then
        bad "$what (build)"; return
    fi
    if ! "$tmp/lag" "$waits" --data digits --log-interval 5 "$@" >"$tmp/log" 2>&1; then
        bad "$what"; return
    fi
    # lagcount: A of B batches uploaded as bytes, C in the first layer's form
    local got want
    got=$(sed -n "s/^lagcount: \([0-9]*\) of \([0-9]*\) batches uploaded as bytes, \([0-9]*\) in .*/\1 \2 \3/p" "$tmp/log")
    set -- $got
    want="$([ "$bytes" = all ] && echo "${2:-x}" || echo 0) ${2:-x} $([ "$formed" = all ] && echo "${2:-x}" || echo 0)"
    if [ -n "$got" ] && [ "${2:-0}" -gt 0 ] && [ "$got" = "$want" ]; then
        ok "$what: $(grep -o '[0-9]* waits .*' "$tmp/log"); $bytes of the batches as bytes, $formed formed"
    else
        bad "$what: batches '$got', expected '$want' (bytes $bytes, formed $formed)"
    fi
}

lag digits_cnn float16 0 all all --max-steps 12 --batch-size 32
lag mlp float16 0 all all --max-steps 12 --loss-scale=dynamic --inject-inf-at-step 7
lag digits_cnn float16 0 none all --max-steps 12 --batch-size 32 --data synthetic
lag mlp float16 0 none all --max-steps 12 --loss-scale=dynamic --inject-inf-at-step 7 --data synthetic
# fp32: no cast to skip
lag digits_cnn off 0 all none --max-steps 12 --batch-size 32
# --cuda-graph 1: the steps after the second replay the captured one (the capture mode's rules hold in it)
lag mlp float16 0 all all --max-steps 12 --loss-scale=dynamic --inject-inf-at-step 7 --cuda-graph 1
if grep -q "lagcount: 10 steps replayed the captured CUDA graph" "$tmp/log"; then
    ok "lagging device, --cuda-graph 1: steps 2 to 11 replayed the graph of step 1"
else
    bad "lagging device, --cuda-graph 1: steps 2 to 11 replayed the graph of step 1"
fi
# the capture mode names a step that reads the device back
rm -f "$tmp/log"
what="capture mode: mlp --check-numerics (a read-back per node) fails the step"
if "$tmp/lag" 0 --data synthetic --max-steps 3 --check-numerics >"$tmp/log" 2>&1; then
    bad "$what (it ran)"
elif grep -q "capture mode: step 0 called read_flag between its begin and its end" "$tmp/log"; then
    ok "$what"
else
    bad "$what"
fi
echo "device_loop: $pass passed, $fail failed"
[ "$fail" = 0 ]
