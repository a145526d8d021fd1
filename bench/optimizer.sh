#!/bin/sh
# optimizer.sh - achieved memory bandwidth of the fused multi-precision
# SGD-momentum, NAG and Adam updates (runtime/kernels/optim.h) over
# ResNet-50 v1d's 25.6 M parameters, against a copy measured in the same run,
# with 1 and 2 threads, built at the runtime's flags (-std=c11 -O2) and at
# -O3 (and with clang -O2 when clang is installed; O2nme, O3nme: with
# -fno-math-errno, which Adam's sqrtf needs to vectorise).  Prints; asserts
# nothing.  About 1.5 minutes a build on 2 cores.
#
#   bench/optimizer.sh [optim_bench args...]     e.g. --reps 9 --only adam
#   CC=gcc BUILDS="O2 O3 O2dyn clang" bench/optimizer.sh
#
# bench/optim_bench.c says what is counted.  Goal: >= 80% of the copy.
set -e
cd "$(dirname "$0")/.."
out=${BENCH_BUILD:-build/bench}
mkdir -p "$out"
CC=${CC:-cc}
base="-std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iruntime -g"
builds=${BUILDS:-"O2 O3 clang"}
for b in $builds; do
    case $b in
        O2) cc=$CC; flags="-O2" ;;
        O3) cc=$CC; flags="-O3" ;;
        O2nme) cc=$CC; flags="-O2 -fno-math-errno" ;;
        O3nme) cc=$CC; flags="-O3 -fno-math-errno" ;;
        O2dyn) cc=$CC; flags="-O2 -fvect-cost-model=dynamic" ;;
        clang) command -v clang >/dev/null 2>&1 || { echo "== clang not installed: skipped"; continue; }
               cc=clang; flags="-O2" ;;
        *) echo "optimizer.sh: unknown build $b (O2, O3, O2nme, O3nme, O2dyn, clang)" >&2; exit 2 ;;
    esac
    bin="$out/optim_bench_$b"
    $cc $base $flags -DCOMPILER_FLAGS="\"$($cc --version | head -1 | sed 's/ (.*)//') $flags\"" \
        -o "$bin" bench/optim_bench.c -pthread -lm
    echo "== $b: $cc $flags"
    "$bin" "$@"
done
