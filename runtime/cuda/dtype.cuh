/*
 * dtype.cuh - the twins of runtime/cpu/dtype.c: the finite flag (its set,
 * the one-tensor and multi-tensor finite checks: rt_all_finite and
 * rt_multi_all_finite as a device flag), the casts and copies (rt_cast_*,
 * rt_copy, rt_reshape_*), the device's fill.  Built by kernels.cu.
 */
#ifndef AMPC_CUDA_DTYPE_CUH
#define AMPC_CUDA_DTYPE_CUH

#ifndef AMPC_CUDA_KERNELS_CUH
#error "include cuda/kernels.cuh before cuda/dtype.cuh"
#endif

__global__ void ampc_k_set_flag(ampc_dptr<int32_t> flag, int32_t value)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *flag = value;
}

/* from == to without acc is a copy of the bits (rt_copy: a NaN's payload
 * and a signalling NaN survive); anything else goes through fp32. */
__global__ void ampc_k_cast(size_t n, int from, ampc_dptr<const void> x, int to, ampc_dptr<void> y,
                            int acc, int vec)
{
    for (size_t q = ampc_cu_first(); q < AMPC_CU_VECS(n, vec); q += ampc_cu_stride()) {
        if (from == to && !acc) { /* the bits: one or two 16-byte copies */
            for (size_t k = 0; k < (to == AMPC_DT_F32 ? 2u : 1u); k++)
                ampc_dcast<uint4>(y)[q * (to == AMPC_DT_F32 ? 2 : 1) + k] =
                    ampc_dcast<const uint4>(x)[q * (to == AMPC_DT_F32 ? 2 : 1) + k];
            continue;
        }
        float v[AMPC_V8], old[AMPC_V8];
        ampc_v8_load(x, q, from, v);
        if (acc) {
            ampc_v8_load(y, q, to, old);
            for (int j = 0; j < AMPC_V8; j++)
                v[j] = old[j] + v[j];
        }
        ampc_v8_store(y, q, to, v);
    }
    for (size_t i = AMPC_CU_TAIL(n, vec); i < n; i += ampc_cu_stride()) {
        if (from == to && !acc) {
            if (to == AMPC_DT_F32)
                ampc_dcast<uint32_t>(y)[i] = ampc_dcast<const uint32_t>(x)[i];
            else
                ampc_dcast<uint16_t>(y)[i] = ampc_dcast<const uint16_t>(x)[i];
        } else {
            ampc_cu_store_acc(y, i, to, ampc_cu_load(x, i, from), acc);
        }
    }
}

/* bits: the value rounded to the dtype once, on the host */
__global__ void ampc_k_fill(ampc_dptr<void> dst, int dt, size_t n, uint32_t bits)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        if (dt == AMPC_DT_F32)
            ampc_dcast<uint32_t>(dst)[i] = bits;
        else
            ampc_dcast<uint16_t>(dst)[i] = (uint16_t)bits;
    }
}

__global__ void ampc_k_finite(ampc_dptr<const void> p, size_t n, int dt, ampc_dptr<int32_t> found)
{
    int bad = 0;
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride())
        bad |= ampc_cu_nonfinite(p, i, dt);
    if (bad)
        ampc_cu_raise(found);
}

__global__ void ampc_k_mt_finite(ampc_dptr<const AmpcMtTensor> tensors,
                                 ampc_dptr<const AmpcMtBlock> blocks, int64_t chunk,
                                 ampc_dptr<int32_t> found)
{
    size_t lo, hi;
    AmpcMtTensor t = ampc_cu_mt_range(tensors, blocks, chunk, &lo, &hi);
    ampc_dptr<const void> g = t.grad;
    int dt = t.gdt, bad = 0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
        bad |= ampc_cu_nonfinite(g, i, dt);
    if (bad)
        ampc_cu_raise(found);
}

AMPC_CU_API int ampc_cu_set_flag(AmpcStream s, int32_t *flag, int32_t value)
{
    AMPC_LAUNCH(ampc_k_set_flag, 1, 1, s, flag, value);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_cast(AmpcStream s, size_t n, int from, const void *x, int to, void *y,
                             int acc)
{
    if (n == 0 || (from == to && !acc && x == y))
        return 0;
    int v = ampc_cu_vec(n, x, y, NULL);
    AMPC_LAUNCH(ampc_k_cast, ampc_cu_vgrid(n, v), AMPC_CU_THREADS, s, n, from, x, to, y, acc, v);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_fill(AmpcStream s, void *dst, int dt, size_t n, float value)
{
    if (n == 0)
        return 0;
    uint32_t bits = dt == AMPC_DT_F32 ? ampc_f32_bits(value)
                  : dt == AMPC_DT_F16 ? ampc_float_to_half(value)
                                      : ampc_float_to_bf16(value);
    AMPC_LAUNCH(ampc_k_fill, ampc_cu_grid(n), AMPC_CU_THREADS, s, dst, dt, n, bits);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_finite(AmpcStream s, const void *p, size_t n, int dt, int32_t *found)
{
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_finite, ampc_cu_grid(n), AMPC_CU_THREADS, s, p, n, dt, found);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_mt_finite(AmpcStream s, const AmpcMtTensor *tensors,
                                  const AmpcMtBlock *blocks, int64_t nblocks, int64_t chunk,
                                  int32_t *found)
{
    if (nblocks <= 0)
        return 0;
    AMPC_LAUNCH(ampc_k_mt_finite, nblocks, AMPC_MT_THREADS, s, tensors, blocks, chunk, found);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API void rt_cuda_copy(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, void *y)
{
    AMPC_CU_RUN(ampc_cu_cast(cx->stream, n, (int)dt, x, (int)dt, y, 0));
}

AMPC_CU_API void rt_cuda_reshape_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, void *y)
{
    AMPC_CU_RUN(ampc_cu_cast(cx->stream, n, (int)dt, x, (int)dt, y, 0));
}

AMPC_CU_API void rt_cuda_reshape_backward(RtCudaCtx *cx, size_t n, RtDType dt, const void *dy, void *dx,
                                          bool accumulate)
{
    AMPC_CU_RUN(ampc_cu_cast(cx->stream, n, (int)dt, dy, (int)dt, dx, accumulate));
}

AMPC_CU_API void rt_cuda_cast_forward(RtCudaCtx *cx, size_t n, RtDType from, const void *x, RtDType to, void *y)
{
    AMPC_CU_RUN(ampc_cu_cast(cx->stream, n, (int)from, x, (int)to, y, 0));
}

AMPC_CU_API void rt_cuda_cast_backward(RtCudaCtx *cx, size_t n, RtDType ydt, const void *dy, RtDType xdt,
                                       void *dx, bool accumulate)
{
    AMPC_CU_RUN(ampc_cu_cast(cx->stream, n, (int)ydt, dy, (int)xdt, dx, accumulate));
}

#endif /* AMPC_CUDA_DTYPE_CUH */
