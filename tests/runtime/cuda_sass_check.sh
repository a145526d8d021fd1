#!/bin/sh
# cuda_sass_check.sh NVCC CUDA_BUILD_DIR TOOLS LISTER - the SASS of
# libampccuda.a's kernels (make cuda-check; docs/backend-cuda.md, "What is
# proven where"), read with cuobjdump and nvdisasm from TOOLS (make sass-env:
# the PyPI wheels, as the toolkit here ships neither); LISTER prints
# ir/kernels.def's vectorized column (tests/runtime/sass/kernel_vectorized.c).
#
# 1. kernels.o, layout.o, pool.o, batchnorm.o, synthetic.o, ingest.o, device.o and math.o hold
#    SASS for sm_80 and sm_90;
#    no kernel touches local memory without a stack frame in ptxas's report;
#    no fused multiply-add outside the correctly rounded division, reciprocal
#    and square-root sequences (math.o exempt: CUDA libm's own fma); every
#    kernel the vectorized column names issues 128-bit global loads; the
#    registers per thread of every kernel are printed.
# 2. The checks can fail: tests/runtime/sass/fixture.cu built with -fmad=true
#    is reported for fixture_fma and fixture_fma_div's contracted a*b+c (and
#    not for fixture_div's division, reciprocal and sqrt); built with
#    -fmad=false, nothing is; fixture_scalar_copy named vectorized is
#    reported, fixture_vector_copy named vectorized is not.
set -eu
NVCC=$1
DIR=$2
TOOLS=$3
LISTER=$4
here=$(dirname "$0")
check="python3 $here/cuda_sass_check.py --tools $TOOLS"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

vec=""
for k in $("$LISTER"); do vec="$vec --vectorized $k"; done
logs=""
objs=""
for o in kernels layout pool batchnorm synthetic ingest device math; do
    logs="$logs --ptxas-log $DIR/$o.ptxas.log"
    objs="$objs $DIR/$o.o"
done
# shellcheck disable=SC2086 # lists of words
if ! $check --fma-exempt "$DIR/math.o" $logs $vec $objs >"$tmp/real" 2>&1; then
    cat "$tmp/real"
    fail=1
else
    cat "$tmp/real"
    echo "cuda_sass_check: registers per thread: $(grep -c ': registers ' "$tmp/real") kernel x arch entries; the most: $(awk '/: registers /{print $NF, $(NF-1), $(NF-2)}' "$tmp/real" | sort -n | tail -1)"
fi

for fmad in true false; do
    "$NVCC" -std=c++17 -O3 -fmad=$fmad -gencode arch=compute_80,code=sm_80 \
        -gencode arch=compute_90,code=sm_90 -c "$here/sass/fixture.cu" -o "$tmp/fix_$fmad.o"
done
$check "$tmp/fix_true.o" >"$tmp/planted" 2>&1 || true
for k in fixture_fma fixture_fma_div; do
    for arch in sm_80 sm_90; do
        if ! grep -q "FAIL: fix_true.o $arch $k: FFMA .* a fused multiply-add outside division/sqrt" "$tmp/planted"; then
            echo "cuda_sass_check.sh: FAIL: -fmad=true's $k ($arch) was not reported:"
            cat "$tmp/planted"
            fail=1
        fi
    done
done
if grep -q "fixture_div:" "$tmp/planted"; then
    echo "cuda_sass_check.sh: FAIL: the division, reciprocal and sqrt of fixture_div were reported:"
    grep "fixture_div:" "$tmp/planted"
    fail=1
fi
if ! $check "$tmp/fix_false.o" >"$tmp/clean" 2>&1; then
    echo "cuda_sass_check.sh: FAIL: the fixture built with -fmad=false was reported:"
    cat "$tmp/clean"
    fail=1
fi
$check --vectorized fixture_scalar_copy --vectorized fixture_vector_copy "$tmp/fix_false.o" \
    >"$tmp/vec" 2>&1 || true
if ! grep -q "FAIL: fix_false.o sm_80 fixture_scalar_copy: marked vectorized, but no 128-bit" "$tmp/vec" ||
    ! grep -q "FAIL: fix_false.o sm_90 fixture_scalar_copy: marked vectorized" "$tmp/vec" ||
    grep -q "FAIL: .*fixture_vector_copy" "$tmp/vec"; then
    echo "cuda_sass_check.sh: FAIL: the vectorized rule on the scalar and vector copies:"
    cat "$tmp/vec"
    fail=1
fi
[ $fail = 0 ] && echo "cuda_sass_check.sh: the kernels' SASS passed, and each planted defect was reported"
exit $fail
