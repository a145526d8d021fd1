#!/bin/bash
# make gpu-check (docs/backend-cuda.md, "The first GPU run"): builds the pack
# the first-run kit runs from, then runs the kit (tests/gpu/first_run.sh
# --full: every row of the kit plus issue 12's placements, under one
# deadline, the same three output files).
#
#   gpu_check.sh [--dry] [--build-only] [--no-build] [BUILD]
#
# BUILD (default build) holds ampc, libampcrt.a, libampccuda.a and the test
# programs (make gpu-check-build).  The build phase writes everything the run
# needs into BUILD/gpu/, the pack: the GPU programs (*.cuda), the CPU
# reference states of the kit's step rows (ref/*.state), ampc --report's
# parameter counts, the test programs, the kit itself (first_run.sh,
# rows.sh, the torch script) and the shared libraries the programs load
# (lib/); the CPU programs that wrote the states go to BUILD/gpu-cpu/.
# make gpu-check-pack packs BUILD/gpu into BUILD/gpu.tar.gz for a GPU
# machine, where `tar -xzf gpu.tar.gz && gpu/first_run.sh gpu.tar.gz OUT`
# runs with nothing compiled.  --dry: no GPU (make check runs it:
# tests/gpu/first_run_dry.sh).
# Environment: GPU_CHECK_LOGS (the kit's output folder), GPU_CHECK_DEADLINE
# (570 s: the device tool's 600 s per command, less the kill grace and the
# unpacking), PYTHON, AMPC_CUDA_LIB_PATH (docs/backend-cuda.md, "Library
# discovery").  Exit 0 when no row failed, 1 otherwise, 2 on bad usage.
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
C=$B/gpu-cpu # the CPU programs of the step rows, which wrote G/ref
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the step rows' cases: name, model, ampc flags, run flags
CASES="digits_cnn|examples/digits_cnn.sym||--loss-scale 256
resnet2|tests/gpu/resnet2.sym||
resnet2_f16|tests/gpu/resnet2.sym|--amp=float16|--loss-scale 256"
STEP_FLAGS="--data synthetic --batch-size 16 --seed 7 --log-interval 0"

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
        # issue 25 item 6: the convolutions writing BatchNorm's statistics (off by default)
        "$ampc" --target=cuda --fuse=conv_bn_stats "$here/examples/resnet50_v1d.sym" \
            -o "$G/resnet50_v1d_conv_bn_stats.cuda" || return 1
    else
        echo "SKIPPED: gpu_check.sh: the CUDA programs (no $B/libampccuda.a: no nvcc)"
    fi
    "$ampc" --report "$here/examples/resnet50_v1d.sym" >"$G/ref/resnet50_v1d.report" || return 1
    local f
    for f in cuda/cuda_kernels_gpu cuda/cuda_dnn_gpu cuda/cuda_device_smoke cuda/cuda_libs_smoke \
        gpu/optim_bw e2e/statcmp; do
        if [ -x "$B/$f" ] && [ "$B/$f" != "$G/${f##*/}" ]; then cp "$B/$f" "$G/" || return 1; fi
    done
    # the kit itself, so that a pack runs on a machine without the checkout
    cp "$here/tests/gpu/first_run.sh" "$here/tests/gpu/rows.sh" \
        "$here/tests/gpu/torch_resnet50_v1d.py" "$G/" || return 1
    # what runs on the GPU machine, without its debug information (the copy
    # is smaller), and the shared libraries it needs beyond glibc, for a
    # machine without the Debian packages
    is_elf() { [ -f "$1" ] && [ -x "$1" ] && [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = 177ELF ]; }
    for f in "$G"/*; do
        if is_elf "$f"; then strip --strip-debug "$f" || return 1; fi
    done
    for f in "$G"/*; do
        if ! is_elf "$f"; then continue; fi
        ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
    done | sort -u | while read -r f; do
        case ${f##*/} in libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux*) ;;
        *) cp -L "$f" "$G/lib/" ;;
        esac
    done
    echo "gpu_check.sh: built $G ($(du -sh "$G" | cut -f1))"
}

if [ $build = 1 ]; then
    build_all || exit 1
fi
[ $run = 1 ] || exit 0
[ -d "$G/ref" ] || { echo "gpu_check.sh: $G/ref missing: build first (make BUILD=$B gpu-check-build)" >&2; exit 1; }
# shellcheck disable=SC2046 # the flags are words
exec "$here/tests/gpu/first_run.sh" --full $([ $dry = 1 ] && echo --dry) \
    --deadline "${GPU_CHECK_DEADLINE:-570}" "$G" ${GPU_CHECK_LOGS:+"$GPU_CHECK_LOGS"}
