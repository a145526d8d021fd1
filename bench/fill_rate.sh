#!/bin/sh
# fill_rate.sh - ns per element of the synthetic data source's fill on this
# machine (bench/fill_rate.c): the GPU cost model's fill_ns constant is this
# machine's figure, labelled so (docs/gpucost.md).  Not in make check.
#
#   bench/fill_rate.sh [BATCH [REPS]]      (default 32 and 7; make build/libampcrt.a first)
set -e
cd "$(dirname "$0")/.."
out=${BENCH_BUILD:-build/bench}
mkdir -p "$out"
${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -Iruntime -o "$out/fill_rate" \
    bench/fill_rate.c build/libampcrt.a -lopenblas -lz -lm
"$out/fill_rate" "$@"
