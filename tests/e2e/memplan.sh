#!/usr/bin/env bash
# memplan.sh - the memory plan changes no bit (docs/codegen.md, "Memory
# plan").  Every example is compiled three ways: planned (the default: shared
# arena, in-place writes), --no-inplace, and --no-memplan (every value its own
# zeroed buffer, the layout before the planner).  Then:
#   - the small examples, fp32, float16 and bfloat16: 3 training steps at
#     batch 8 on synthetic data, then validation (the inference step, which
#     shares the training step's arena); the checkpoints (parameters,
#     optimizer state, BatchNorm statistics, loss scale) and the log's losses
#     and accuracies are byte-identical across the three;
#   - every example, fp32 and float16: one step at batch 2 with --dump-state
#     (the step's gradients, output and inputs, bit for bit); for
#     ResNet-50 v1d this is the step the issue asks for, and the peak RSS of
#     each run is printed (information, never asserted).
#   - every planned run prints its Memory line and its workspace, sized at
#     start-up by the program's workspace_bytes, never grows;
#   - a model the schedule pass reorders trains bit-identically with and
#     without --no-schedule.
# A kernel that leaves part of its output unwritten, or reads a value the
# plan has already given to another, shows up here as a difference.
# usage: memplan.sh AMPC
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/lib.sh"
start=$(date +%s)
modes="plan noinplace nomemplan"
flag() { case $1 in plan) ;; noinplace) echo --no-inplace ;; nomemplan) echo --no-memplan ;; esac; }

# peak RSS (MiB) of a command, from the kernel's accounting of the child
peak_run() {
    python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], "w"), stderr=subprocess.STDOUT)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
sys.exit(r.returncode)' "$@"
}

compile() { # model amp mode -> $tmp/<base>_<amp>_<mode>
    local base; base=$(basename "$1" .sym)
    # shellcheck disable=SC2046
    "$ampc" "$1" --amp="$2" $(flag "$3") -o "$tmp/${base}_$2_$3" >"$tmp/log" 2>&1
}

# 1. training steps and validation, three dtypes
for m in examples/mlp.sym examples/digits_cnn.sym examples/fashion_cnn.sym \
         examples/resnet20_cifar.sym examples/resnext_mini.sym; do
    base=$(basename "$m" .sym)
    for amp in off float16 bfloat16; do
        same=1
        for mode in $modes; do
            if ! compile "$m" $amp $mode; then bad "compiling $base --amp=$amp ($mode)"; same=0; continue; fi
            mkdir -p "$tmp/ck_$mode"
            rm -f "$tmp/ck_$mode"/*
            if ! "$tmp/${base}_${amp}_$mode" --data synthetic --batch-size 8 --epochs 1 --max-steps 3 \
                    --log-interval 1 --save-dir "$tmp/ck_$mode" >"$tmp/out_$mode" 2>&1; then
                cp "$tmp/out_$mode" "$tmp/log"; bad "training $base --amp=$amp ($mode)"; same=0; continue
            fi
            grep -E 'Train-|Validation-' "$tmp/out_$mode" | sed 's/Time cost=.*//' >"$tmp/metrics_$mode"
        done
        [ $same = 1 ] || continue
        # the workspace was sized at start-up: it never grew during the run
        if grep -q '^Memory: arena' "$tmp/out_plan" && ! grep -q 'workspace grew' "$tmp/out_plan"; then
            ok "$base --amp=$amp: the Memory line, and a workspace sized once at start-up"
        else
            cp "$tmp/out_plan" "$tmp/log"; bad "$base --amp=$amp: no Memory line, or the workspace grew"
        fi
        for mode in noinplace nomemplan; do
            if cmp -s "$tmp"/ck_plan/*.ckpt "$tmp"/ck_$mode/*.ckpt &&
               cmp -s "$tmp/metrics_plan" "$tmp/metrics_$mode" && [ -s "$tmp/metrics_plan" ]; then
                ok "$base --amp=$amp: planned and $mode train bit-identically"
            else
                diff "$tmp/metrics_plan" "$tmp/metrics_$mode" >"$tmp/log" 2>&1
                bad "$base --amp=$amp: planned and $mode differ"
            fi
        done
    done
done

# 2. one step's gradients, every example (ResNet-50 v1d at batch 2)
for m in examples/*.sym; do
    base=$(basename "$m" .sym)
    for amp in off float16; do
        same=1
        for mode in plan nomemplan; do
            if ! compile "$m" $amp $mode; then bad "compiling $base --amp=$amp ($mode)"; same=0; continue; fi
            if ! rss=$(peak_run "$tmp/log" "$tmp/${base}_${amp}_$mode" --data synthetic --batch-size 2 \
                        --dump-state "$tmp/state_$mode"); then
                bad "one step of $base --amp=$amp ($mode)"; same=0; continue
            fi
            echo "     $base --amp=$amp batch 2 ($mode): peak RSS $rss MiB"
        done
        [ $same = 1 ] || continue
        if cmp -s "$tmp/state_plan" "$tmp/state_nomemplan"; then
            ok "$base --amp=$amp: one step's gradients bit-identical with and without the plan"
        else
            : >"$tmp/log"; bad "$base --amp=$amp: the step's gradients differ with the plan"
        fi
    done
done
# 3. the schedule reorders a model with two wide branches (its golden test
# shows the order): the program differs, the training does not
m=tests/golden/schedule/branches.sym
for amp in off float16; do
    "$ampc" $m --amp=$amp -S -o "$tmp/sched.c" >"$tmp/log" 2>&1 &&
        "$ampc" $m --amp=$amp --no-schedule -S -o "$tmp/nosched.c" >>"$tmp/log" 2>&1 ||
        bad "compiling branches --amp=$amp to C"
    # (in fp32; with AMP each branch's cast to fp32 ties with the other
    # branch, and the tie keeps the order: the greedy looks one node ahead)
    if [ $amp = off ] && cmp -s "$tmp/sched.c" "$tmp/nosched.c"; then
        : >"$tmp/log"; bad "branches --amp=$amp: the schedule changed nothing (the test needs it to)"
    fi
    for mode in sched nosched; do
        flags=; [ $mode = nosched ] && flags=--no-schedule
        rm -rf "$tmp/ck_$mode"; mkdir -p "$tmp/ck_$mode"
        "$ampc" $m --amp=$amp $flags -o "$tmp/branches_$mode" >"$tmp/log" 2>&1 &&
            "$tmp/branches_$mode" --data synthetic --batch-size 8 --epochs 1 --max-steps 3 \
                --save-dir "$tmp/ck_$mode" >"$tmp/out_$mode" 2>&1 ||
            { cp "$tmp/out_$mode" "$tmp/log" 2>/dev/null; bad "training branches --amp=$amp ($mode)"; }
        grep -E 'Train-|Validation-' "$tmp/out_$mode" | sed 's/Time cost=.*//' >"$tmp/metrics_$mode"
    done
    if cmp -s "$tmp"/ck_sched/*.ckpt "$tmp"/ck_nosched/*.ckpt &&
       cmp -s "$tmp/metrics_sched" "$tmp/metrics_nosched" && [ -s "$tmp/metrics_sched" ]; then
        ok "branches --amp=$amp: scheduled and --no-schedule train bit-identically"
    else
        : >"$tmp/log"; bad "branches --amp=$amp: scheduled and --no-schedule differ"
    fi
done
echo "memplan: $pass passed, $fail failed ($(( $(date +%s) - start )) s)"
[ "$fail" -eq 0 ]
