#!/bin/sh
# train_outputs.sh [AMPC] DIR - what training writes, for every example, in
# runs short enough to repeat: each example (examples/*.sym) built with
# --target=cpu at --amp off, float16 and bfloat16, and with --target=cuda
# --kernels=cpu (the CUDA plan on the CPU runtime) at float16; each program
# trains a few steps with a checkpoint, the text log and the JSON log, then
# resumes from its checkpoint for a few more.  digits_cnn and mlp also run
# the loss scale's corners: an injected overflow, a static scale whose
# gradients overflow, Adam, --sim-ranks 2, --check-numerics.  The ResNet-50
# examples, whose validation pass alone takes minutes on a CPU, take one step
# at batch 2 with --dump-state instead (the step's parameters, gradients and
# loss: RUN.state).  Into DIR:
# RUN.log, RUN.jsonl and RUN.ckpt/ per run, with the timing fields (the
# Speedometer's speed, the set-up and epoch times, the JSON log's time,
# setup_ms, device_setup_ms, samples_per_sec, time_cost) replaced by "T".
# Two such folders compared (diff -r) show whether a change to the runtime or
# the emitter changed what a run computes or reports; a refactor compares
# byte for byte (issue 23 kept its before this way).
set -eu
if [ $# = 2 ]; then ampc=$1; shift; else ampc=build/ampc; fi
[ $# = 1 ] || { echo "usage: tools/train_outputs.sh [AMPC] DIR" >&2; exit 2; }
dir=$1
[ -x "$ampc" ] || { echo "train_outputs.sh: $ampc not found (make first)" >&2; exit 2; }
[ -n "${AMPC_DATA_DIR:-}" ] || AMPC_DATA_DIR=$(cd "$(dirname "$ampc")" && pwd)/data
export AMPC_DATA_DIR
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0

# the timing fields of the text and JSON logs, made equal
untime() {
    sed -E -e 's/Speed: [0-9.e+-]+ samples\/sec/Speed: T samples\/sec/' \
        -e 's/Time cost=[0-9.e+-]+/Time cost=T/' \
        -e 's/^Set-up: .*/Set-up: T/' -e '/^Validation .*: [0-9]+ of [0-9]+ samples, /d' \
        -e 's/"(time|setup_ms|device_setup_ms|samples_per_sec|time_cost)":[0-9.e+-]+/"\1":T/g' "$1"
}

# run NAME PROGRAM FLAGS...: one run's log, JSON log and checkpoints into DIR
run() {
    local name=$1 prog=$2
    shift 2
    rm -rf "$dir/$name.ckpt" "$tmp/ck"
    mkdir -p "$tmp/ck"
    if "$prog" --save-dir "$tmp/ck" --json-log "$tmp/j" "$@" >"$tmp/log" 2>&1; then
        echo "exit 0" >>"$tmp/log"
    else
        echo "exit $?" >>"$tmp/log"
    fi
    untime "$tmp/log" | sed "s|$tmp/|TMP/|g" >"$dir/$name.log"
    if [ -f "$tmp/j" ]; then untime "$tmp/j" | sed "s|$tmp/|TMP/|g" >"$dir/$name.jsonl"; fi
    rm -f "$tmp/j"
    cp -r "$tmp/ck" "$dir/$name.ckpt"
    n=$((n + 1))
}

# train NAME PROGRAM DATA FLAGS...: a run, then one resumed from its last checkpoint
train() {
    local name=$1 prog=$2 data=$3
    shift 3
    run "$name" "$prog" $data "$@"
    local ck
    ck=$(ls "$dir/$name.ckpt"/*.ckpt 2>/dev/null | tail -1)
    [ -n "$ck" ] || return 0
    cp "$ck" "$tmp/resume.ckpt"
    run "$name.resumed" "$prog" $data "$@" --resume "$tmp/resume.ckpt" --overwrite
}

for m in examples/*.sym; do
    model=$(basename "$m" .sym)
    case $model in
    digits*|mlp) data="--data digits --batch-size 100"; steps=18 ;;
    resnet50*) data="--data synthetic --batch-size 2"; steps=1 ;;
    *) data="--data synthetic --batch-size 8"; steps=4 ;;
    esac
    flags="--max-steps $steps --epochs 2 --log-interval 3"
    for v in cpu.off cpu.float16 cpu.bfloat16 cuda.float16; do
        target=${v%%.*} amp=${v#*.}
        kernels=
        [ "$target" = cuda ] && kernels=--kernels=cpu
        "$ampc" "$m" --target="$target" $kernels --amp="$amp" -o "$tmp/prog" 2>"$tmp/err" || {
            cat "$tmp/err" >&2; exit 1; }
        case $model in
        resnet50*)
            run "$model.$v" "$tmp/prog" $data --log-interval 0 --dump-state "$tmp/state"
            mv "$tmp/state" "$dir/$model.$v.state"
            continue ;;
        esac
        train "$model.$v" "$tmp/prog" "$data" $flags
        case $model.$v in
        digits_cnn.cpu.float16|mlp.cpu.float16|digits_cnn.cuda.float16)
            train "$model.$v.inject" "$tmp/prog" "$data" $flags --inject-inf-at-step 9
            run "$model.$v.static" "$tmp/prog" $data $flags --loss-scale 1e30
            run "$model.$v.adam" "$tmp/prog" $data $flags --optimizer 'adam(wd=0.0001)'
            run "$model.$v.sim" "$tmp/prog" $data $flags --sim-ranks 2 --batch-size 50
            run "$model.$v.numerics" "$tmp/prog" $data --max-steps 4 --check-numerics \
                --log-interval 1 ;;
        esac
    done
done
echo "train_outputs.sh: $n runs into $dir"
