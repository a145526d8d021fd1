#!/bin/bash
# make gpu-check (docs/backend-cuda.md, "The GPU check"): issue 11's GPU check
# as one script that prints one table.
#   (a) every CUDA kernel against its CPU twin (the programs of tests/runtime:
#       cuda_kernels_gpu, cuda_dnn_gpu, cuda_device_smoke; their lines folded in)
#   (b) one training step of digits_cnn and tests/gpu/resnet2.sym (fp32 and
#       float16) on the GPU against the CPU from the same weights and batch
#       (--dump-state): the loss and every parameter's gradient cosine
#   (c) examples/resnet50_v1d.sym, AMP, synthetic data, batch 256, 100 steps:
#       images/second, syncs per step, peak device memory; PyTorch's
#       ResNet-50 v1d (tests/gpu/torch_resnet50_v1d.py) in the same run; the ratio
#   (d) the fused optimizer over ResNet-50's parameters against a
#       device-to-device copy of the same bytes (tests/gpu/optim_bw.c)
#   (e) issue 12's seed on one GPU: resnet50_v1d with --kvstore=local (the
#       update on the host) against --kvstore=device, images/s and the ratio
#
#   gpu_check.sh [--dry] [--build-only] [--no-build] [BUILD]
#
# BUILD (default build) holds ampc, libampcrt.a, libampccuda.a and the test
# programs (make gpu-check-build).  The build phase writes everything the run
# needs into BUILD/gpu/: the compiled models (*.cpu, *.cuda), the test
# programs, the CPU reference states of (b) (ref/*.state), ampc --report's
# parameter counts and the shared libraries the programs load (lib/); the
# CPU programs that wrote the states go to BUILD/gpu-cpu/.  So the folder
# BUILD/gpu can be built here and copied to a machine with a GPU
# (--no-build there; make gpu-check-pack packs it into BUILD/gpu.tar.gz, which
# --no-build unpacks when it is newer than the folder).  --dry: no GPU; builds, runs the CPU halves (the CPU
# step of (b), the torch script on the CPU at a tiny batch, the parameter
# counts) and prints the table with "n/a (no GPU)" in the GPU cells
# (make check runs it, so the script cannot rot).
# Environment: PYTHON (python3), GPU_CHECK_STEPS (100), GPU_CHECK_BATCH (256),
# GPU_CHECK_TIMEOUT (seconds per program of (c), 80), AMPC_CUDA_LIB_PATH (the
# toolkit's lib64 where it is: docs/backend-cuda.md, "Library discovery").
# Exit 0 when every row passed (n/a and info rows pass), 1 otherwise, 2 on
# bad usage.
set -u
dry=0 build=1 run=1
while [ $# -gt 0 ]; do
    case $1 in
    --dry) dry=1 ;;
    --build-only) run=0 ;;
    --no-build) build=0 ;;
    -*) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
    shift
done
[ $# -le 1 ] || { echo "usage: gpu_check.sh [--dry] [--build-only] [--no-build] [BUILD]" >&2; exit 2; }
B=${1:-build}
G=$B/gpu     # what the run needs: copy this folder to a GPU machine
C=$B/gpu-cpu # the CPU programs of (b), which wrote G/ref
here=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
STEPS=${GPU_CHECK_STEPS:-100}
BATCH=${GPU_CHECK_BATCH:-256}
LIMIT=${GPU_CHECK_TIMEOUT:-80}
WARM=20 # steps of (c) not timed
# every log of the run, and the table, go to GPU_CHECK_LOGS (default: the
# device tool's $OUT, whose files come back even when the tool cuts the run
# off), else to a temporary folder
logs=${GPU_CHECK_LOGS:-${OUT:-}}
if [ -n "$logs" ]; then
    mkdir -p "$logs" || exit 1
    tmp=$logs
    rm -f "$tmp/table"
else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi

# (b)'s cases: name, model, ampc flags, run flags
CASES="digits_cnn|examples/digits_cnn.sym||--loss-scale 256
resnet2|tests/gpu/resnet2.sym||
resnet2_f16|tests/gpu/resnet2.sym|--amp=float16|--loss-scale 256"
STEP_FLAGS="--data synthetic --batch-size 16 --seed 7 --log-interval 0"

fail=0
# ---- build: BUILD/gpu/ --------------------------------------------------------
build_all() {
    local ampc=$B/ampc cuda=0 name model aflags rflags
    [ -x "$ampc" ] || { echo "gpu_check.sh: $ampc not found (make BUILD=$B first)" >&2; return 1; }
    [ -f "$B/libampccuda.a" ] && cuda=1
    mkdir -p "$G/ref" "$G/lib" "$C" || return 1
    rm -f "$C"/*.cpu "$G"/*.cuda "$G"/ref/* "$G"/lib/*
    while IFS='|' read -r name model aflags rflags; do
        # shellcheck disable=SC2086 # flags are words
        "$ampc" $aflags "$here/$model" -o "$C/$name.cpu" || return 1
        # shellcheck disable=SC2086
        if [ $cuda = 1 ]; then "$ampc" --target=cuda $aflags "$here/$model" -o "$G/$name.cuda" || return 1; fi
        # shellcheck disable=SC2086
        "$C/$name.cpu" $STEP_FLAGS $rflags --dump-state "$G/ref/$name.state" >"$tmp/log" 2>&1 ||
            { cat "$tmp/log"; echo "gpu_check.sh: the CPU step of $name failed" >&2; return 1; }
    done <<<"$CASES"
    if [ $cuda = 1 ]; then
        "$ampc" --target=cuda "$here/examples/resnet50_v1d.sym" -o "$G/resnet50_v1d.cuda" || return 1
        # (e): the seed's two placements on one GPU (issue 12)
        local kv
        for kv in local device; do
            "$ampc" --target=cuda --kvstore=$kv "$here/examples/resnet50_v1d.sym" \
                -o "$G/resnet50_v1d_$kv.cuda" 2>"$tmp/kv.log" || { cat "$tmp/kv.log"; return 1; }
        done
    else
        echo "SKIPPED: gpu_check.sh: the CUDA programs (no $B/libampccuda.a: no nvcc)"
    fi
    "$ampc" --report "$here/examples/resnet50_v1d.sym" >"$G/ref/resnet50_v1d.report" || return 1
    local f
    for f in cuda/cuda_kernels_gpu cuda/cuda_dnn_gpu cuda/cuda_device_smoke cuda/cuda_libs_smoke e2e/statcmp; do
        if [ -x "$B/$f" ]; then cp "$B/$f" "$G/" || return 1; fi
    done
    # what runs on the GPU machine, without its debug information (the copy
    # is smaller), and the shared libraries it needs beyond glibc, for a
    # machine without the Debian packages
    for f in "$G"/*; do
        if [ -f "$f" ] && [ -x "$f" ]; then strip --strip-debug "$f" || return 1; fi
    done
    for f in "$G"/*; do
        if [ ! -f "$f" ] || [ ! -x "$f" ]; then continue; fi
        ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
    done | sort -u | while read -r f; do
        case ${f##*/} in libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux*) ;;
        *) cp -L "$f" "$G/lib/" ;;
        esac
    done
    echo "gpu_check.sh: built $G ($(du -sh "$G" | cut -f1))"
}

# ---- the table ------------------------------------------------------------------
table=$tmp/table
row() { # part, check, result, verdict
    printf '%-4s %-50s %-52s %s\n' "$1" "$2" "$3" "$4" >>"$table"
    [ "$4" = FAIL ] && fail=1
    return 0
}
fold() { tail -n "${2:-40}" "$1" | sed 's/^/         | /' >>"$table"; } # a log's last lines
NA="n/a (no GPU)"
# missing GPU programs: a failure, unless this is a dry run where nvcc is not
missing() { # part, check
    if [ $dry = 1 ] && [ ! -f "$B/libampccuda.a" ]; then row "$1" "$2" "SKIPPED: not built (no nvcc)" n/a
    else row "$1" "$2" "not built" FAIL; fi
}
# where the toolkit is, its cuDNN and cuBLAS are the ones the programs load
# first (libs.c; else the system's, else the nvidia-*-cu13 wheels of python3)
if [ -z "${AMPC_CUDA_LIB_PATH:-}" ] && [ -d /usr/local/cuda/lib64 ]; then
    export AMPC_CUDA_LIB_PATH=/usr/local/cuda/lib64
fi
# programs of the build run with its libraries; python with its own
runp() { LD_LIBRARY_PATH="$G/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }

# a GPU program's verdict from its exit status
verdict() { case $1 in 0) echo ok ;; 3) echo FAIL ;; *) echo FAIL ;; esac; }

part_a() {
    local p rc
    for p in cuda_libs_smoke cuda_kernels_gpu cuda_dnn_gpu cuda_device_smoke; do
        if [ ! -x "$G/$p" ]; then missing "(a)" "$p"; continue; fi
        if [ $dry = 1 ]; then row "(a)" "$p" "$NA" n/a; continue; fi
        runp timeout 60 "$G/$p" >"$tmp/$p.log" 2>&1
        rc=$?
        row "(a)" "$p" "exit $rc$([ $rc = 3 ] && echo ' (no usable GPU)')" "$(verdict $rc)"
        fold "$tmp/$p.log" 200
    done
}

# (b): statcmp's loss line and worst cosine, with the tolerances of the dtype
part_b() {
    local name model aflags rflags lt ct cpu=
    while IFS='|' read -r name model aflags rflags; do
        case $aflags in *float16*) lt=5e-3 ct=0.999 ;; *) lt=1e-5 ct=0.9999 ;; esac
        [ "$name" = digits_cnn ] && lt=5e-3 ct=0.999 # its train block: amp = float16
        cpu=$G/ref/$name.state
        if [ ! -s "$cpu" ]; then row "(b)" "$name: CPU step" "no reference state" FAIL; continue; fi
        if [ $dry = 1 ]; then
            [ -x "$G/$name.cuda" ] || missing "(b)" "$name: CUDA program"
            # the CPU half, and statcmp on it (a state against itself: cosine 1)
            if runp "$G/statcmp" "$cpu" "$cpu" --loss-rtol 0 --min-cosine 0.999999 >"$tmp/cmp" 2>&1; then
                row "(b)" "$name: CPU step, loss" "$(sed -n 's/^statcmp: loss \([^ ]*\) .*/\1/p' "$tmp/cmp")" ok
            else
                row "(b)" "$name: CPU step" "statcmp fails on the CPU state" FAIL; fold "$tmp/cmp"
            fi
            row "(b)" "$name: GPU loss, worst gradient cosine" "$NA" n/a
            continue
        fi
        if [ ! -x "$G/$name.cuda" ]; then row "(b)" "$name" "no CUDA program" FAIL; continue; fi
        # shellcheck disable=SC2086
        if ! runp timeout 30 "$G/$name.cuda" $STEP_FLAGS $rflags --dump-state "$tmp/$name.gpu" \
            >"$tmp/$name.log" 2>&1; then
            row "(b)" "$name: GPU step" "failed" FAIL; fold "$tmp/$name.log"; continue
        fi
        runp "$G/statcmp" "$cpu" "$tmp/$name.gpu" --loss-rtol $lt --min-cosine $ct >"$tmp/cmp" 2>&1
        local rc=$? loss worst
        loss=$(sed -n 's/^statcmp: loss \([^ ]*\) vs \([^:]*\): relative difference \([^ ]*\) .*/\1 vs \2 (rel \3)/p' "$tmp/cmp")
        worst=$(sort -k3 -g "$tmp/cmp" | awk '$2 == "cosine" {print $3, $1; exit}')
        row "(b)" "$name: loss CPU vs GPU (tol $lt)" "${loss:-?}" "$([ $rc = 0 ] && echo ok || echo FAIL)"
        row "(b)" "$name: worst gradient cosine (min $ct)" "${worst:-?}" "$([ $rc = 0 ] && echo ok || echo FAIL)"
        [ $rc = 0 ] || fold "$tmp/cmp"
    done <<<"$CASES"
}

# nvidia-smi's per-process used_memory, sampled every 200 ms while one
# program runs; the peak is the largest sample of any process (the program
# runs under timeout, and a container's pids need not be the driver's: the
# check runs one GPU program at a time)
smi_start() { # file
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 200 >"$1" 2>/dev/null &
        echo $!
    fi
}
smi_peak() { awk -F', *' '$2 + 0 > m {m = $2 + 0} END {print m ? m " MiB" : "?"}' "$1"; }

# a median of numbers on stdin
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }

part_c() {
    local ref=$G/ref/resnet50_v1d.report ampc_params torch_params
    ampc_params=$(sed -n 's/^trainable parameters: \([0-9]*\) .*/\1/p' "$ref" 2>/dev/null)
    # the torch script: its parameter count against ampc --report, and a run
    if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
        echo "SKIPPED: (c) PyTorch: $PYTHON cannot import torch"
        row "(c)" "torch resnet50_v1d" "SKIPPED: $PYTHON has no torch" "$([ $dry = 1 ] && echo n/a || echo FAIL)"
        torch_params=
    else
        torch_params=$("$PYTHON" "$here/tests/gpu/torch_resnet50_v1d.py" --params-only | sed 's/[^0-9]//g')
        row "(c)" "parameters: ampc --report, torch" "$ampc_params, $torch_params" \
            "$([ -n "$ampc_params" ] && [ "$ampc_params" = "$torch_params" ] && echo ok || echo FAIL)"
    fi
    if [ $dry = 1 ]; then
        if [ -n "$torch_params" ]; then
            if "$PYTHON" "$here/tests/gpu/torch_resnet50_v1d.py" --device cpu --batch 2 --steps 2 \
                --warmup 1 --image-size 64 --amp on >"$tmp/torch.json" 2>"$tmp/torch.err"; then
                row "(c)" "torch on the CPU (AMP, batch 2, 64x64, 2 steps)" \
                    "loss $(sed 's/.*"loss": \([^,]*\),.*/\1/' "$tmp/torch.json")" ok
            else
                row "(c)" "torch on the CPU (batch 2, 2 steps)" "failed" FAIL; fold "$tmp/torch.err"
            fi
        fi
        [ -x "$G/resnet50_v1d.cuda" ] || missing "(c)" "ampc resnet50_v1d (CUDA program)"
        row "(c)" "ampc resnet50_v1d AMP b$BATCH: images/s" "$NA" n/a
        row "(c)" "ampc: syncs per step (quiet steps)" "$NA" n/a
        row "(c)" "ampc: peak device memory" "$NA" n/a
        row "(c)" "torch resnet50_v1d AMP b$BATCH: images/s" "$NA" n/a
        row "(c)" "ampc / torch images/s (target >= 1.2)" "$NA" n/a
        return
    fi
    local prog=$G/resnet50_v1d.cuda smi pid rc ips='' tips=
    if [ ! -x "$prog" ]; then
        row "(c)" "ampc resnet50_v1d" "no CUDA program" FAIL
    else
        # the timed run: Speedometer windows of 10 steps ("step": steps done
        # at the window's end); those wholly after the first WARM steps are
        # timed, and their median is the images/second
        runp timeout "$LIMIT" "$prog" --data synthetic --batch-size "$BATCH" --max-steps "$STEPS" \
            --log-interval 10 --json-log "$tmp/r50.jsonl" >"$tmp/r50.log" 2>&1 &
        pid=$!
        smi=$(smi_start "$tmp/r50.smi")
        wait $pid
        rc=$?
        [ -n "$smi" ] && kill "$smi" 2>/dev/null
        ips=$(grep '"event":"speedometer"' "$tmp/r50.jsonl" 2>/dev/null |
            sed -n 's/.*"step":\([0-9]*\),"samples_per_sec":\([0-9.e+-]*\).*/\1 \2/p' |
            awk -v w=$WARM '$1 >= w + 10 {print $2}' | median)
        local windows
        windows=$(grep -c '"event":"speedometer"' "$tmp/r50.jsonl" 2>/dev/null || true)
        windows=${windows:-0}
        row "(c)" "ampc resnet50_v1d AMP b$BATCH: images/s" \
            "${ips:-?} (median of the 10-step windows after step $WARM; $windows in all$([ $rc = 124 ] && echo ", timed out at ${LIMIT}s"))" \
            "$([ -n "$ips" ] && echo info || echo FAIL)"
        [ -n "$ips" ] || fold "$tmp/r50.log"
        local planned
        planned=$(sed -n 's/^Memory: //p' "$tmp/r50.log" | grep -o '[0-9.]* MiB' | awk '{s += $1} END {if (NR) printf "%.0f MiB", s}')
        row "(c)" "ampc: peak device memory" "$([ -f "$tmp/r50.smi" ] && smi_peak "$tmp/r50.smi" || echo "? (no nvidia-smi)") (planned ${planned:-?})" info
        # the syncs: a short --profile run (its own waits are not counted)
        runp timeout $((LIMIT / 2)) "$prog" --data synthetic --batch-size "$BATCH" --max-steps 12 \
            --log-interval 5 --profile --json-log "$tmp/prof.jsonl" >"$tmp/prof.log" 2>&1
        local syncs
        syncs=$(grep '"event":"profile"' "$tmp/prof.jsonl" 2>/dev/null |
            sed -n 's/.*"syncs_per_step":\([0-9.e+-]*\).*"syncs_per_quiet_step":\([0-9.e+-]*\).*/\1 per step, \2 per quiet step/p')
        row "(c)" "ampc: syncs per step (--profile, 12 steps)" "${syncs:-?}" "$([ -n "$syncs" ] && echo info || echo FAIL)"
        [ -n "$syncs" ] || fold "$tmp/prof.log"
    fi
    if [ -n "$torch_params" ]; then
        timeout "$LIMIT" "$PYTHON" "$here/tests/gpu/torch_resnet50_v1d.py" --device cuda --batch "$BATCH" \
            --steps "$STEPS" --warmup $WARM >"$tmp/torch.json" 2>"$tmp/torch.err" &
        pid=$!
        smi=$(smi_start "$tmp/torch.smi")
        wait $pid
        rc=$?
        [ -n "$smi" ] && kill "$smi" 2>/dev/null
        tips=$(sed -n 's/.*"images_per_sec": \([0-9.e+-]*\).*/\1/p' "$tmp/torch.json")
        row "(c)" "torch resnet50_v1d AMP b$BATCH: images/s" "${tips:-?} (median step after $WARM)" \
            "$([ -n "$tips" ] && echo info || echo FAIL)"
        [ -n "$tips" ] || fold "$tmp/torch.err"
        row "(c)" "torch: peak device memory" "$([ -f "$tmp/torch.smi" ] && smi_peak "$tmp/torch.smi" || echo "?") (allocated $(sed -n 's/.*"peak_alloc_mib": \([0-9]*\).*/\1/p' "$tmp/torch.json") MiB)" info
        if [ -n "$ips" ] && [ -n "$tips" ]; then
            row "(c)" "ampc / torch images/s (target >= 1.2)" "$(awk -v a="$ips" -v b="$tips" 'BEGIN {printf "%.3f", a / b}')" info
        fi
    fi
}

# (e) issue 12's seed on one GPU: ResNet-50 v1d AMP with multi-precision NAG,
# the optimizer on the host (MXNet's kvstore 'local': gradients copied down,
# the CPU's fused update, weights copied up) against on the device
# ('device'), images/s of each and their ratio (MXNet's report: 650 and 800)
part_e() {
    local kv ips prog
    declare -A got
    for kv in local device; do
        prog=$G/resnet50_v1d_$kv.cuda
        if [ ! -x "$prog" ]; then missing "(e)" "resnet50_v1d --kvstore=$kv (CUDA program)"; continue; fi
        if [ $dry = 1 ]; then
            row "(e)" "resnet50_v1d --kvstore=$kv AMP b$BATCH: images/s" "$NA" n/a
            continue
        fi
        runp timeout $((LIMIT / 2)) "$prog" --data synthetic --batch-size "$BATCH" --max-steps 30 \
            --log-interval 5 --json-log "$tmp/kv_$kv.jsonl" >"$tmp/kv_$kv.log" 2>&1
        ips=$(grep '"event":"speedometer"' "$tmp/kv_$kv.jsonl" 2>/dev/null |
            sed -n 's/.*"step":\([0-9]*\),"samples_per_sec":\([0-9.e+-]*\).*/\1 \2/p' |
            awk '$1 >= 15 {print $2}' | median)
        got[$kv]=$ips
        row "(e)" "resnet50_v1d --kvstore=$kv AMP b$BATCH: images/s" \
            "${ips:-?} (median of the 5-step windows after step 10)" "$([ -n "$ips" ] && echo info || echo FAIL)"
        [ -n "$ips" ] || fold "$tmp/kv_$kv.log"
    done
    if [ -n "${got[local]:-}" ] && [ -n "${got[device]:-}" ]; then
        row "(e)" "device/local images/s (MXNet report 800/650=1.23)" \
            "$(awk -v a="${got[device]}" -v b="${got[local]}" 'BEGIN {printf "%.3f", a / b}')" info
    elif [ $dry = 1 ]; then
        row "(e)" "device/local images/s (MXNet report 800/650=1.23)" "$NA" n/a
    fi
}

part_d() {
    local ref=$G/ref/resnet50_v1d.report want got
    if [ ! -x "$G/optim_bw" ]; then missing "(d)" "optim_bw"; return; fi
    # its parameter sizes are ResNet-50 v1d's: the counts ampc --report gives
    want="$(sed -n 's/^trainable parameters: \([0-9]*\) in \([0-9]*\) tensors/\1 \2/p' "$ref") $(sed -n 's/^ *stored as fp32 master + float16 shadow: \([0-9]*\) in \([0-9]*\) tensors/\1 \2/p' "$ref")"
    got=$(runp "$G/optim_bw" --sizes | sed -n 's/.*: \([0-9]*\) trainable values in \([0-9]*\) tensors, \([0-9]*\) in \([0-9]*\) with.*/\1 \2 \3 \4/p')
    row "(d)" "tensor sizes = ampc --report's" "$got" "$([ "$got" = "$want" ] && echo ok || echo FAIL)"
    if [ $dry = 1 ]; then
        row "(d)" "optimizer GB/s, copy GB/s, percent" "$NA" n/a
        return
    fi
    runp timeout 60 "$G/optim_bw" >"$tmp/bw.log" 2>&1
    local rc=$? line
    line=$(sed -n 's/^optim_bw: optimizer \(.*\) (median.*/\1/p' "$tmp/bw.log")
    row "(d)" "optimizer vs copy, 20 B/param (target 80%)" "${line:-exit $rc}" "$([ $rc = 0 ] && echo info || echo FAIL)"
    [ $rc = 0 ] || fold "$tmp/bw.log"
}

if [ $build = 1 ]; then
    build_all || exit 1
fi
[ $run = 1 ] || exit 0
# a packed BUILD/gpu (make gpu-check-pack: what is copied to a GPU machine)
# is unpacked when it is newer than the folder
if [ -f "$B/gpu.tar.gz" ] && { [ ! -d "$G/ref" ] || [ "$B/gpu.tar.gz" -nt "$G/ref" ]; }; then
    rm -rf "$G" && tar -xzf "$B/gpu.tar.gz" -C "$B" && touch "$G/ref" || exit 1
    echo "gpu_check.sh: unpacked $B/gpu.tar.gz"
fi
[ -d "$G/ref" ] || { echo "gpu_check.sh: $G/ref missing: build first (make BUILD=$B gpu-check-build)" >&2; exit 1; }
gpu=$NA
if [ $dry = 0 ]; then
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
    gpu=${gpu:-"nvidia-smi not found"}
fi
start=$(date +%s)
part_a
part_b
part_c
part_d
part_e
{
    echo "== make gpu-check$([ $dry = 1 ] && echo ' --dry'): $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), GPU: $gpu, $(($(date +%s) - start)) s"
    printf '%-4s %-50s %-52s %s\n' part check result verdict
    cat "$table"
    echo "gpu-check: $([ $fail = 0 ] && echo "every row passed" || echo FAILED)"
} | tee "$tmp/gpu_check_table.txt"
[ -z "$logs" ] || echo "gpu_check.sh: the table and the logs are in $logs"
exit $fail
