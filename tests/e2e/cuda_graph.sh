#!/usr/bin/env bash
# --cuda-graph 1 on the CPU device, whose graph is an emulation
# (runtime/cpu/device.c: the captured step's calls recorded with what they
# read frozen, then replayed, a value the host changed since the capture an
# error): a run that replays the step captured at its second step ends with
# the same checkpoint, byte for byte (parameters, masters, optimizer state,
# BatchNorm statistics, the loss scale's state and counts), as the same run
# with --cuda-graph 0, and it says how many steps the replay ran (counted:
# N - 2 of N).  digits_cnn (BatchNorm, Dropout: its mask's counter read from
# the device's step state) under a dynamic fp16 loss scale with an injected
# overflow (a skipped step) across an epoch's end; mlp with Adam on the
# synthetic source (the batch made by the device, outside the captured
# range); the CUDA plan (--target=cuda --kernels=cpu) of digits_cnn.  Then
# the per-node hooks turn the graph off, saying so once.
# usage: cuda_graph.sh AMPC DATA_DIR
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$2
. "$(dirname "$0")/lib.sh"
lib=$(dirname "$ampc")/libampcrt.a
export AMPC_DATA_DIR=$data

# build NAME MODEL AMPC_FLAGS...: $tmp/NAME
build() {
    local name=$1 model=$2; shift 2
    "$ampc" "examples/$model.sym" "$@" -S -o "$tmp/$name.c" >"$tmp/log" 2>&1 &&
        cc -O2 -std=c11 -I runtime "$tmp/$name.c" "$lib" -lopenblas -lz -lm -o "$tmp/$name" \
            >>"$tmp/log" 2>&1
}

# same NAME STEPS FLAGS...: --cuda-graph 0 and 1 end with the same checkpoint
same() {
    local name=$1 steps=$2; shift 2
    local what="--cuda-graph 1 = 0 after $steps steps: $name $*"
    local ck=step$(printf %06d "$steps").ckpt
    rm -f "$tmp/log"
    for g in 0 1; do
        if ! "$tmp/$name" --max-steps "$steps" --log-interval 10 --save-dir "$tmp/$name-$g" \
                --cuda-graph $g "$@" >"$tmp/out$g" 2>&1; then
            cp "$tmp/out$g" "$tmp/log"
            bad "$what (the run with --cuda-graph $g)"; return
        fi
    done
    local want="CUDA graph: step 1 captured, replayed $((steps - 2)) times"
    if ! grep -qx "$want" "$tmp/out1" || grep -q "CUDA graph" "$tmp/out0"; then
        cp "$tmp/out1" "$tmp/log"
        bad "$what (expected '$want' with 1 only)"; return
    fi
    if cmp -s "$tmp/$name-0/"*"-$ck" "$tmp/$name-1/"*"-$ck"; then
        ok "$what: the same checkpoint bytes, $want"
    else
        echo "checkpoints differ: $(cmp "$tmp/$name-0/"*"-$ck" "$tmp/$name-1/"*"-$ck" 2>&1)" \
            >"$tmp/log"
        bad "$what"
    fi
}

if build cnn digits_cnn --amp=float16 && build mlp mlp --amp=off &&
   build cnn_cuda digits_cnn --target=cuda --kernels=cpu --amp=float16; then
    same cnn 50 --data digits --loss-scale=dynamic --inject-inf-at-step 20
    same mlp 50 --data synthetic --optimizer='adam(wd=0.0001)' --batch-size 16
    same cnn_cuda 12 --data digits --batch-size 64 --loss-scale=dynamic --inject-inf-at-step 5
else
    bad "building digits_cnn and mlp"
fi

# hook FLAG...: the graph off, said once, and the run as eager as without
hook() {
    local what="--cuda-graph 1 $*: off, said once"
    rm -f "$tmp/log"
    if ! "$tmp/mlp" --data synthetic --max-steps 4 --log-interval 0 --cuda-graph 1 "$@" \
            >"$tmp/log" 2>&1; then
        bad "$what (the run)"
    elif [ "$(grep -c '^CUDA graph: off' "$tmp/log")" = 1 ] && ! grep -q "captured" "$tmp/log"; then
        ok "$what: $(grep '^CUDA graph' "$tmp/log")"
    else
        bad "$what"
    fi
}
hook --profile
hook --check-numerics
hook --inject-nan softmax_output1:9
hook --sim-ranks 2
rm -f "$tmp/log"
if "$tmp/mlp" --data synthetic --max-steps 2 --cuda-graph 2 >"$tmp/log" 2>&1; then
    bad "--cuda-graph 2 refused (it ran)"
elif grep -q "cuda-graph" "$tmp/log"; then
    ok "--cuda-graph 2 refused: $(grep -m1 cuda-graph "$tmp/log")"
else
    bad "--cuda-graph 2 refused"
fi
echo "cuda_graph: $pass passed, $fail failed"
[ "$fail" = 0 ]
