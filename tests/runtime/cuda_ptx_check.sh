#!/bin/sh
# cuda_ptx_check.sh NVCC CUDA_BUILD_DIR - what the CUDA kernels compile to
# (make cuda-check; docs/backend-cuda.md, "What is proven where").
#
# 1. Rounding: the PTX nvcc kept while building libampccuda.a (every
#    kernels.cu, sm_80 and sm_90) holds no fma (nvcc contracts a*b+c into
#    one fma.rn.f32 unless -fmad=false; the CPU twins never fuse, so an fma
#    would round differently), no .ftz (flush-to-zero: the CPU keeps
#    subnormals) and no .approx (fast-math division, sqrt, exp).  To show
#    the grep can fail, the same source compiled without -fmad=false must
#    contain fma.
# 2. Registers: ptxas -v (the build's log) reports no spill stores or loads
#    for any kernel, and the optimizer, finite-check and loss-scale kernels
#    (and some of the other families') are there for both architectures.
# 3. math.cu (math.cuh, the twins that call CUDA's libm: its fma and
#    ex2.approx are the library's, so 1 does not apply) has no spills either.  The parser is first run on a
#    made-up log with a spill, which it must reject.
set -eu
NVCC=$1
DIR=$2
fail=0

for arch in 80 90; do
    ptx=$DIR/keep/kernels/kernels.compute_$arch.ptx
    [ -s "$ptx" ] || { echo "cuda_ptx_check: $ptx missing (build libampccuda.a first)"; exit 1; }
    for pat in 'fma\.' '\.ftz' '\.approx'; do
        if grep -n "$pat" "$ptx" >/dev/null; then
            echo "cuda_ptx_check: FAIL: $ptx contains '$pat' (the CPU twins round each operation):"
            grep -n "$pat" "$ptx" | head -5
            fail=1
        fi
    done
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$NVCC" -std=c++17 -Iruntime -arch=sm_80 -ptx runtime/cuda/kernels.cu -o "$tmp/contracted.ptx"
if ! grep -q 'fma\.rn\.f32' "$tmp/contracted.ptx"; then
    echo "cuda_ptx_check: FAIL: without -fmad=false the kernels compile to no fma.rn.f32, so the"
    echo "  fma check above proves nothing; make a kernel contract again or rework this check"
    fail=1
fi

# spills LOG: prints "kernel arch stores loads" for each kernel with a spill;
# exits 1 if there is one
spills() {
    awk '
        /Compiling entry function/ { split($0, a, "'\''"); fn = a[2]; arch = a[4] }
        /bytes spill stores/ {
            st = $0; sub(/ bytes spill stores.*/, "", st); sub(/.*, /, "", st)
            ld = $0; sub(/ bytes spill loads.*/, "", ld); sub(/.*stores, /, "", ld)
            if (st + 0 > 0 || ld + 0 > 0) { print fn, arch, st, ld; bad = 1 }
        }
        END { exit bad }' "$1"
}

cat >"$tmp/fake.log" <<'EOF'
ptxas info    : Compiling entry function '_Z15ampc_k_mt_optimPK12AmpcMtTensor' for 'sm_80'
ptxas info    : Function properties for _Z15ampc_k_mt_optimPK12AmpcMtTensor
    8 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
EOF
if spills "$tmp/fake.log" >/dev/null; then
    echo "cuda_ptx_check: FAIL: the spill parser passed a log with a spill"
    fail=1
fi

log=$DIR/kernels.ptxas.log
[ -s "$log" ] || { echo "cuda_ptx_check: $log missing (build libampccuda.a first)"; exit 1; }
if ! out=$(spills "$log"); then
    echo "cuda_ptx_check: FAIL: register spills (kernel, arch, bytes stored, bytes loaded):"
    echo "$out"
    fail=1
fi
# the optimizer, finite-check and loss-scale kernels, and other families' (the
# rt.h twins without libm, which kernels.cu builds so the checks above cover them)
for k in ampc_k_mt_optim ampc_k_mt_finite ampc_k_finite ampc_k_loss_scale ampc_k_dropout \
         ampc_k_bcast_reduce ampc_k_smo_grad ampc_k_concat; do
    for arch in sm_80 sm_90; do
        if ! grep "Compiling entry function" "$log" | grep "$k" | grep -q "'$arch'"; then
            echo "cuda_ptx_check: FAIL: ptxas reported nothing for $k on $arch"
            fail=1
        fi
    done
done

# math.cu (math.cuh: the twins that call CUDA's libm, whose fma and
# ex2.approx are its own and not checked above) must not spill either
mlog=$DIR/math.ptxas.log
[ -s "$mlog" ] || { echo "cuda_ptx_check: $mlog missing (build libampccuda.a first)"; exit 1; }
if ! out=$(spills "$mlog"); then
    echo "cuda_ptx_check: FAIL: register spills in math.cu (kernel, arch, bytes stored, loaded):"
    echo "$out"
    fail=1
fi
for k in ampc_k_act_fwd ampc_k_softmax; do
    grep "Compiling entry function" "$mlog" | grep -q "$k" ||
        { echo "cuda_ptx_check: FAIL: ptxas reported nothing for $k in $mlog"; fail=1; }
done

[ $fail = 0 ] && echo "cuda_ptx_check: no fma/ftz/approx in kernels.cu's PTX (sm_80, sm_90), no register spills (kernels.cu, math.cu)"
exit $fail
