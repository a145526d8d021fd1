#!/usr/bin/env bash
# The program for a GPU, end to end on a machine without one
# (docs/backend-cuda.md, "Building and running a GPU program"):
# - every example x --amp {off, float16, bfloat16} with --target=cuda -o:
#   either it builds (an executable that links libampccuda.a and cudart;
#   the model's object compiles warning-free and calls rt_cuda_* and no CPU kernel or
#   sizer; run here it exits non-zero with the no-device message, never a
#   crash), or ampc refuses it, every error naming an op whose cuda column in
#   ir/kernels.def is NULL (so the test holds while the column is filled,
#   and fails if an op with a CUDA kernel is refused);
# - a GPU program's run without a GPU, whatever the table holds: a CPU
#   program's C with open_device = rt_cuda_open_device, linked as
#   codegen/build.c links one, exits 1 with "no CUDA device: ... --target=cuda",
#   also with --cudnn-autotune=0 and --cudnn-workspace-mb, and with
#   --cudnn-autotune-max, --cudnn-runtime-compiled and --cudnn-plan-cache
#   (no plan file written before a device opens); a bad AMPC_CUDA_DEVICE is
#   named;
# - --target=auto here (no GPU) builds a CPU program, and --report says why;
# - --target=cuda --kernels=cpu builds a CPU-runtime program that trains,
#   and its --profile prints the device->host syncs per step;
# - the placements local, device and nccl build (nccl linking MPI) and say
#   which in the C;
# - a CPU program refuses --cudnn-autotune, --cudnn-workspace-mb,
#   --cudnn-autotune-max and --cudnn-plan-cache.
# Without libampccuda.a beside ampc (no nvcc at build time) it prints one
# SKIPPED line.
# usage: cuda_build.sh AMPC
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
build=$(dirname "$ampc")
. "$(dirname "$0")/lib.sh"
if [ ! -f "$build/libampccuda.a" ]; then
    echo "SKIPPED: tests/e2e/cuda_build.sh: no $build/libampccuda.a (this build had no nvcc; make cuda says why)"
    exit 0
fi
cudalib=${AMPC_CUDA_HOME:+$AMPC_CUDA_HOME/lib64}
cudalib=${cudalib:-$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")/../lib64}

# the ops whose cuda column is NULL, and every function of the cpu column
# (stems included: a prefix match) and its workspace sizers
null_ops=" $(sed -n 's/^KERNEL( *\([A-Za-z0-9_]*\), *[^,]*,[^,]*,[^,]*,[^,]*, *NULL,.*/\1/p' ir/kernels.def | tr '\n' ' ')"
cpu_fns=$(sed -n 's/^KERNEL([^,]*,[^,]*, *"\([a-z0-9_]*\)", *"\{0,1\}\([a-z0-9_A-Z]*\)"\{0,1\},.*/\1 \2/p' ir/kernels.def |
    tr ' ' '\n' | grep -v '^NULL$' | grep . | sort -u)
[ -n "$cpu_fns" ] || bad "read the cpu column of ir/kernels.def"

# refused LOG: every error is the refusal of an op whose cuda column is NULL
refused_ok() {
    local log=$1 n=0 op
    grep -q 'error:' "$log" || return 1
    while IFS= read -r line; do
        op=$(sed -n 's/.* error: --target=cuda: no CUDA kernel for \([A-Za-z0-9_]*\) (ir\/kernels.def.s cuda column); compile for the CPU (--target=cpu)$/\1/p' <<<"$line")
        [ -n "$op" ] && [[ "$null_ops" == *" $op "* ]] || { echo "unexpected: $line"; return 1; }
        n=$((n + 1))
    done < <(grep 'error:' "$log")
    [ "$n" -gt 0 ]
}

# calls_cuda_only C: the model's object (C compiled here, warning-free) calls rt_cuda_*
# and no function of the cpu column
calls_cuda_only() {
    local c=$1 o=${1%.c}.o f
    cc -std=c11 -O0 -Wall -Wextra -Werror -I runtime -c "$c" -o "$o" 2>>"$tmp/log" || return 1
    nm -u "$o" | grep -q ' rt_cuda_[a-z]' || { echo "no rt_cuda_ call in $o"; return 1; }
    for f in $cpu_fns; do
        if nm -u "$o" | awk '{print $2}' | grep -q "^$f"; then
            echo "$o calls the CPU's $f"
            return 1
        fi
    done
}

# no_device PROG ARGS...: exits 1 (never a signal) with the no-device message
no_device() {
    local prog=$1 rc
    shift
    "$prog" --data synthetic --max-steps 1 --log-interval 0 "$@" >"$tmp/run" 2>&1
    rc=$?
    cat "$tmp/run" >>"$tmp/log"
    [ "$rc" = 1 ] && grep -q 'no CUDA device: GPU 0 cannot be opened: .*the program was built with --target=cuda' "$tmp/run"
}

# cudnn_check WHAT PROG: --cudnn-check (no GPU needed) builds the cuDNN graph
# of every convolution (each pass, the layout the schedule chose) and the
# cuBLASLt descriptors of every GEMM at the train block's batch size, and
# cuDNN's heuristic proposes at least one engine for each; the descriptor
# lines (node names dropped) are collected to count the distinct ones of
# all programs
: >"$tmp/descs"
cudnn_check() {
    local what=$1 prog=$2
    if AMPC_CUDA_LIB_PATH=${AMPC_CUDA_LIB_PATH:-$cudalib} "$prog" --cudnn-check --data synthetic \
        >"$tmp/check" 2>"$tmp/check.err" &&
        grep -q '^cudnn-check: model .*every descriptor built, every convolution has candidates$' \
            "$tmp/check"; then
        sed -n 's/^cudnn-check: \(conv\|gemm\) [^:]*: /\1 /p' "$tmp/check" >>"$tmp/descs"
    else
        cat "$tmp/check" "$tmp/check.err" >>"$tmp/log"
        bad "$what: --cudnn-check: $(head -1 "$tmp/check.err")"
    fi
}

built=0 refused=0
for f in examples/*.sym; do
    m=$(basename "$f" .sym)
    for amp in off float16 bfloat16; do
        what="$m --amp=$amp --target=cuda"
        rm -f "$tmp/p" "$tmp/p.c"
        "$ampc" "$f" --amp=$amp --target=cuda -o "$tmp/p" >"$tmp/log" 2>&1
        rc=$?
        if [ "$rc" = 0 ]; then
            built=$((built + 1))
            if ! "$ampc" "$f" --amp=$amp --target=cuda -S -o "$tmp/p.c" >>"$tmp/log" 2>&1 ||
                ! grep -q 'program for an NVIDIA GPU' "$tmp/p.c" ||
                ! grep -q '\.open_device = rt_cuda_open_device' "$tmp/p.c"; then
                bad "$what: -S is not a GPU program"
            elif ! calls_cuda_only "$tmp/p.c" >>"$tmp/log" 2>&1; then
                bad "$what: the model's object"
            elif [ ! -x "$tmp/p" ]; then
                bad "$what: no executable"
            elif "$tmp/p" --data synthetic --max-steps 1 --log-interval 0 >"$tmp/run" 2>&1; then
                ok "$what: builds, calls rt_cuda_* only, and trained a step (a GPU is here)"
            elif no_device "$tmp/p"; then
                ok "$what: builds, calls rt_cuda_* only, no GPU here: exit 1, the no-device message"
                cudnn_check "$what" "$tmp/p"
            else
                bad "$what: the run without a GPU"
            fi
        elif [ "$rc" = 1 ] && [ ! -e "$tmp/p" ] && refused_ok "$tmp/log" >>"$tmp/log"; then
            refused=$((refused + 1))
            ok "$what: refused at the ops without a CUDA kernel ($(grep -o 'no CUDA kernel for [A-Za-z0-9_]*' "$tmp/log" | sed 's/no CUDA kernel for //' | sort -u | head -3 | tr '\n' ' ')...)"
        else
            bad "$what: exit $rc, neither a program nor the refusal"
        fi
    done
done
echo "    (examples x amp: $built built for the GPU, $refused refused: ops without a CUDA kernel:$null_ops)"
nconv=$(grep '^conv ' "$tmp/descs" | sort -u | wc -l)
ngemm=$(grep '^gemm ' "$tmp/descs" | sort -u | wc -l)
if [ "$built" -gt 0 ] && [ "$nconv" -gt 0 ] && [ "$ngemm" -gt 0 ] &&
    [ "$(grep -c ' heuristic proposes 0 (mode A), 0 (fallback)$' "$tmp/descs")" = 0 ]; then
    ok "--cudnn-check over the $built GPU programs: $nconv distinct convolution descriptors (each pass, dtype and layout) built with heuristic candidates, $ngemm distinct GEMMs' descriptors made"
else
    bad "--cudnn-check over the $built GPU programs: $nconv convolutions, $ngemm GEMMs"
fi
if [ "$null_ops" = " " ] && [ "$refused" -gt 0 ]; then
    bad "every op has a CUDA kernel, yet $refused programs were refused"
fi

# A GPU program's device without a GPU, whatever the table holds: the CPU
# program's C with the CUDA device, linked as codegen/build.c links one.
: >"$tmp/log"
if "$ampc" examples/mlp.sym -S -o "$tmp/g.c" >>"$tmp/log" 2>&1 &&
    sed -i 's|^    \.infer_step = infer_step,$|&\n    .open_device = rt_cuda_open_device,|; s|^#include "program.h"$|&\n#include "cuda/program_cuda.h"|' "$tmp/g.c" &&
    grep -q 'open_device = rt_cuda_open_device' "$tmp/g.c" &&
    cc -std=c11 -O1 -I runtime "$tmp/g.c" "$build/libampccuda.a" "$build/libampcrt.a" -L "$cudalib" \
        -lcudart_static -ldl -lpthread -lrt -lstdc++ -lopenblas -lz -lm -o "$tmp/g" >>"$tmp/log" 2>&1; then
    no_device "$tmp/g" && ok "a GPU program without a GPU: exit 1, 'no CUDA device: ... --target=cuda'" ||
        bad "a GPU program without a GPU"
    no_device "$tmp/g" --cudnn-autotune=0 --cudnn-workspace-mb 64 &&
        ok "a GPU program takes --cudnn-autotune and --cudnn-workspace-mb" ||
        bad "a GPU program with --cudnn-autotune=0 --cudnn-workspace-mb 64"
    no_device "$tmp/g" --cudnn-autotune-max 2 --cudnn-runtime-compiled --cudnn-plan-cache "$tmp/plans" &&
        [ ! -e "$tmp/plans" ] &&
        ok "a GPU program takes --cudnn-autotune-max, --cudnn-runtime-compiled and --cudnn-plan-cache (no file written without a device)" ||
        bad "a GPU program with --cudnn-autotune-max 2 --cudnn-runtime-compiled --cudnn-plan-cache"
    AMPC_CUDA_DEVICE=x "$tmp/g" --data synthetic >"$tmp/run" 2>&1
    rc=$?
    [ "$rc" = 1 ] && grep -q "AMPC_CUDA_DEVICE='x' is not a GPU number" "$tmp/run" &&
        ok "a bad AMPC_CUDA_DEVICE is named" || bad "AMPC_CUDA_DEVICE=x: exit $rc: $(head -1 "$tmp/run")"
    "$tmp/g" --help | grep -q -- '--cudnn-autotune 0|1' && "$tmp/g" --help | grep -q -- '--cudnn-workspace-mb N' &&
        "$tmp/g" --help | grep -q -- '--cudnn-autotune-max K  a GPU program: time at most K candidate plans per' &&
        "$tmp/g" --help | grep -q -- '--cudnn-plan-cache FILE' &&
        ok "--help lists the cuDNN flags" || bad "--help lists the cuDNN flags"
else
    bad "linking a program with the CUDA device"
fi

# --target=auto on a machine without a GPU: a CPU program, and --report says why
: >"$tmp/log"
if "$ampc" examples/mlp.sym --target=auto --report >"$tmp/rep" 2>>"$tmp/log" &&
    "$ampc" examples/mlp.sym --target=auto -S -o "$tmp/a.c" >>"$tmp/log" 2>&1; then
    if grep -q '^target: cuda$' "$tmp/rep"; then
        grep -q 'program for an NVIDIA GPU' "$tmp/a.c" && ok "--target=auto: a GPU is here, a GPU program" ||
            bad "--target=auto: --report says cuda, -S is not a GPU program"
    elif grep -q '^target: cpu (--target=auto: .*)$' "$tmp/rep" && grep -q 'program for the CPU' "$tmp/a.c" &&
        ! grep -q open_device "$tmp/a.c"; then
        ok "--target=auto without a GPU: a CPU program ($(grep '^target:' "$tmp/rep"))"
    else
        bad "--target=auto: $(grep '^target:' "$tmp/rep")"
    fi
else
    bad "--target=auto"
fi

# --target=cuda --kernels=cpu: the CUDA plan on the CPU runtime, trained
: >"$tmp/log"
if "$ampc" examples/digits_cnn.sym --amp=float16 --target=cuda --kernels=cpu -o "$tmp/k" >>"$tmp/log" 2>&1 &&
    "$ampc" examples/digits_cnn.sym --amp=float16 --target=cuda --kernels=cpu -S -o "$tmp/k.c" >>"$tmp/log" 2>&1 &&
    "$ampc" examples/digits_cnn.sym --amp=float16 --target=cuda --kernels=cpu --report >"$tmp/rep" 2>>"$tmp/log"; then
    if grep -q 'rt_cuda_\|open_device' "$tmp/k.c" || ! grep -q 'program for the CPU' "$tmp/k.c"; then
        bad "--kernels=cpu: the C names the CUDA runtime"
    elif ! grep -q "^target: cuda, calling the CPU runtime's kernels (--kernels=cpu)$" "$tmp/rep"; then
        bad "--kernels=cpu: --report says $(grep '^target:' "$tmp/rep")"
    elif ! "$tmp/k" --data synthetic --batch-size 8 --max-steps 4 --log-interval 2 --profile >"$tmp/run" 2>&1; then
        cat "$tmp/run" >>"$tmp/log"
        bad "--kernels=cpu: the program does not train"
    elif ! grep -q 'device->host syncs per step: [0-9.]*; in the [0-9]* steps that did not log: 0.00' "$tmp/run"; then
        cat "$tmp/run" >>"$tmp/log"
        bad "--kernels=cpu: --profile prints no syncs per step (0 in a step that does not log)"
    else
        ok "--target=cuda --kernels=cpu: a CPU-runtime program trains; --profile: $(grep -o 'syncs per step: [0-9.]*' "$tmp/run")"
    fi
else
    bad "--target=cuda --kernels=cpu"
fi

# The gradient placements of a GPU program (docs/kvstore.md): local and
# device on one GPU (the default machine, one H200), nccl on 8 GPUs (one
# process each under mpirun: it links the MPI engine); the C says which, the
# program holds the placement's device (rt_kv_open) and the NCCL engine
# (rt_coll_nccl), and without a GPU it stops with the no-device message.
for kv in local device "nccl --devices=8"; do
    : >"$tmp/log"
    rm -f "$tmp/k" "$tmp/k.c"
    name=${kv%% *}
    # shellcheck disable=SC2086 # kv holds the flag and its --devices
    if ! "$ampc" examples/digits_cnn.sym --amp=float16 --target=cuda --kvstore=$kv -S -o "$tmp/k.c" >>"$tmp/log" 2>&1 ||
        ! "$ampc" examples/digits_cnn.sym --amp=float16 --target=cuda --kvstore=$kv -o "$tmp/k" >>"$tmp/log" 2>&1; then
        bad "--target=cuda --kvstore=$kv: $(grep -m1 error "$tmp/log")"
    elif ! grep -q "\.kv_place = [0-9], /\* $name \*/" "$tmp/k.c"; then
        bad "--target=cuda --kvstore=$kv: the C names no kv_place $name"
    elif ! nm "$tmp/k" | grep -q ' T rt_kv_open$' || ! nm "$tmp/k" | grep -q ' T rt_coll_nccl$'; then
        bad "--target=cuda --kvstore=$kv: the program has no rt_kv_open or NCCL engine"
    elif [ "$name" = nccl ] && ! nm "$tmp/k" | grep -q ' U MPI_Init'; then
        bad "--target=cuda --kvstore=$kv: a program for mpirun that does not link MPI"
    elif [ "$name" != nccl ] && nm "$tmp/k" | grep -q ' U MPI_Init'; then
        bad "--target=cuda --kvstore=$kv: a one-process program links MPI"
    elif no_device "$tmp/k"; then
        ok "--target=cuda --kvstore=$kv: builds with its placement, no GPU here: the no-device message"
    else
        bad "--target=cuda --kvstore=$kv: the run without a GPU: $(head -2 "$tmp/run")"
    fi
done

# --mpi alone would start ranks that each train alone on one GPU: refused
: >"$tmp/log"
rm -f "$tmp/k"
if "$ampc" examples/digits_cnn.sym --target=cuda --mpi -o "$tmp/k" >"$tmp/log" 2>&1; then
    bad "--target=cuda --mpi without an NCCL placement built a program"
elif [ ! -e "$tmp/k" ] && grep -q 'error: --mpi with --target=cuda: .*--kvstore=nccl' "$tmp/log"; then
    ok "--target=cuda --mpi without an NCCL placement: refused, naming --kvstore=nccl"
else
    bad "--target=cuda --mpi: $(head -1 "$tmp/log")"
fi

# a CPU program refuses the GPU's flags
: >"$tmp/log"
if "$ampc" examples/mlp.sym -o "$tmp/c" >>"$tmp/log" 2>&1; then
    for flag in --cudnn-autotune=1 --cudnn-workspace-mb=64 --cudnn-autotune-max=2 \
        --cudnn-plan-cache="$tmp/plans"; do
        "$tmp/c" --data synthetic --max-steps 1 "$flag" >"$tmp/run" 2>&1
        rc=$?
        [ "$rc" = 2 ] && grep -q -- "${flag%%=*} applies to a program built for a GPU (ampc --target=cuda)" "$tmp/run" &&
            ok "a CPU program refuses $flag" || bad "a CPU program with $flag: exit $rc: $(head -1 "$tmp/run")"
    done
else
    bad "building mlp for the CPU"
fi

echo "cuda_build: $pass passed, $fail failed"
[ "$fail" = 0 ]
