#!/bin/sh
# emu_check.sh CC KERNEL_LOG - two checks of the CUDA emulator (make emu-check):
#   1. every __global__ function of runtime/cuda/ ran under the emulator in the tests
#      whose launches KERNEL_LOG lists (AMPC_EMU_KERNEL_LOG), so no kernel escapes them;
#   2. what the emulation build forbids does not compile there (a raw pointer parameter,
#      a pre-Volta warp intrinsic, __shared__ written out, -> on a device pointer, a store
#      through a pointer to const), while the same snippet written correctly does.
set -u
cc=$1
log=$2
fail=0

# ---- 1. coverage ----
kernels=$(sed -n 's/^__global__ void \([A-Za-z_0-9]*\)(.*/\1/p' runtime/cuda/*.cuh | sort -u)
[ -n "$kernels" ] || { echo "emu_check: no __global__ found in runtime/cuda/*.cuh"; exit 1; }
[ -s "$log" ] || { echo "emu_check: no kernel ran ($log is empty)"; exit 1; }
n=0
for k in $kernels; do
    n=$((n + 1))
    if ! grep -qx "$k" "$log"; then
        echo "emu_check: $k (runtime/cuda/) never ran under the emulator's tests"
        fail=1
    fi
done
[ $fail = 0 ] && echo "emu_check: all $n kernels of runtime/cuda/ ran under the emulator"

# ---- 2. what does not compile ----
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prelude='#include "cuda/kernel_api.cuh"
typedef struct { float x; } Pair;'
# NAME EXPECTED-TEXT BODY: BODY must fail to compile with EXPECTED-TEXT in the diagnostics
refuse() {
    printf '%s\n%s\n' "$prelude" "$3" >"$tmp/$1.cu"
    if $cc -x c++ -std=c++17 -fsyntax-only -Iruntime "$tmp/$1.cu" >"$tmp/$1.log" 2>&1; then
        echo "emu_check: $1 compiled in the emulation build; it must not"
        fail=1
    elif ! grep -q -- "$2" "$tmp/$1.log"; then
        echo "emu_check: $1 failed to compile without saying \"$2\":"
        head -5 "$tmp/$1.log"
        fail=1
    fi
}
refuse raw_param "a kernel parameter is a raw pointer" '
__global__ void k(float *p) { p[0] = 1.0f; }
int run(float *p) { AMPC_LAUNCH(k, 1, 32, 0, p); return 0; }'
refuse shfl_down "poison" '
__global__ void k(ampc_dptr<float> p) { float v = p[0]; p[0] = __shfl_down(v, 1); }'
refuse ballot "poison" '
__global__ void k(ampc_dptr<unsigned> p) { p[0] = __ballot(1); }'
refuse shared_keyword "__shared__" '
__global__ void k(ampc_dptr<float> p) { __shared__ float s[4]; s[0] = p[0]; }'
refuse arrow "ampc_dptr" '
__global__ void k(ampc_dptr<Pair> p) { p->x = 1.0f; }'
refuse const_store "a store through a pointer to const" '
__global__ void k(ampc_dptr<const float> p) { p[0] = 1.0f; }'
# the control: the same kernels as the API spells them
printf '%s\n%s\n' "$prelude" '
__global__ void k(ampc_dptr<float> p, ampc_dptr<Pair> q)
{
    AMPC_SHARED(float, s, 32);
    s[threadIdx.x] = p[threadIdx.x];
    __syncwarp();
    float v = __shfl_down_sync(0xffffffffu, (float)s[threadIdx.x], 1);
    *AMPC_FIELD(q, x) = v;
}
int run(float *p, Pair *q) { AMPC_LAUNCH(k, 1, 32, 0, p, q); return AMPC_LAUNCH_ERROR(); }' >"$tmp/control.cu"
if ! $cc -x c++ -std=c++17 -fsyntax-only -Iruntime "$tmp/control.cu" >"$tmp/control.log" 2>&1; then
    echo "emu_check: the control snippet does not compile:"
    head -20 "$tmp/control.log"
    fail=1
fi
[ $fail = 0 ] && echo "emu_check: raw pointer parameters, pre-Volta warp intrinsics, __shared__, -> and stores through const are refused"
exit $fail
