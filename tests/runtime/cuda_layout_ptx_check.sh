#!/bin/sh
# cuda_layout_ptx_check.sh CUDA_BUILD_DIR - the PTX of layout.cu, pool.cu,
# batchnorm.cu, synthetic.cu and ingest.cu (the layout, pooling, BatchNorm,
# synthetic batch and raw batch kernels: layout.cuh, pool.cuh, batchnorm.cuh,
# synthetic.cuh, ingest.cuh, each its own nvcc object) holds no fma, .ftz or .approx, and ptxas reports no spills,
# as cuda_ptx_check.sh checks for kernels.cu: their CPU twins
# round each operation, so these must too (make cuda-check;
# docs/backend-cuda.md).
set -eu
DIR=$1
fail=0
total=0
# TU: the kernels its ptxas log must report
for unit in "layout ampc_k_bias_grad ampc_k_pad_channels ampc_k_layout" "pool ampc_k_pool_backward" \
            "batchnorm ampc_k_bn_tiles ampc_k_bn_grad_tiles ampc_k_bn_moving" \
            "synthetic ampc_k_synthetic_batch" "ingest ampc_k_ingest"; do
    set -- $unit
    tu=$1
    shift
    for arch in 80 90; do
        ptx=$DIR/keep/$tu/$tu.compute_$arch.ptx
        [ -s "$ptx" ] || { echo "cuda_layout_ptx_check: $ptx missing (build libampccuda.a first)"; exit 1; }
        for pat in 'fma\.' '\.ftz' '\.approx'; do
            if grep -n "$pat" "$ptx" >/dev/null; then
                echo "cuda_layout_ptx_check: FAIL: $ptx contains '$pat':"
                grep -n "$pat" "$ptx" | head -5
                fail=1
            fi
        done
    done
    log=$DIR/$tu.ptxas.log
    n=$(grep -c 'bytes spill stores' "$log" || true)
    bad=$(grep 'bytes spill stores' "$log" | grep -vc ' 0 bytes spill stores, 0 bytes spill loads' || true)
    if [ "$n" -lt 2 ] || [ "$bad" -ne 0 ]; then
        echo "cuda_layout_ptx_check: FAIL: $log: $n kernel reports, $bad with spills"
        fail=1
    fi
    total=$((total + n))
    for k in "$@"; do
        grep -q "$k" "$log" || { echo "cuda_layout_ptx_check: FAIL: $k not in $log"; fail=1; }
    done
done
[ $fail = 0 ] && echo "cuda_layout_ptx_check: layout.cu, pool.cu, batchnorm.cu, synthetic.cu, ingest.cu: no fma/ftz/approx (sm_80, sm_90), no spills ($total reports)"
exit $fail
