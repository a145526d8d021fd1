/*
 * layout.cuh - the small kernels around the cuDNN and cuBLASLt calls
 * (runtime/cuda/conv.c, fc.c), in one CUDA C++17 source for nvcc
 * (layout.cu) and for the emulator (the same layout.cu in libampcemu.a;
 * tests/runtime/test_cuda_layout_emu.c), and the element helpers that
 * pool.cuh and batchnorm.cuh share (pool.cu and batchnorm.cu take only
 * those):
 *
 *   ampc_cu_pad_channels    [rows, c] -> [rows, cp], zero filled (the RGB
 *                           input of a 16-bit NHWC convolution padded to 4 or 8)
 *   ampc_cu_unpad_channels  [rows, cp] -> [rows, c], overwriting or adding
 *   ampc_cu_bias_add        y[o, ch, i] += bias[ch] (a convolution's bias)
 *   ampc_cu_bias_grad       dbias[ch] (+)= sum over o, i of dy[o, ch, i],
 *                           summed in double: a thread a channel in
 *                           rt_fc_backward_weight's order (its bits), or
 *                           where a channel sums AMPC_LAY_BLOCK_MIN terms
 *                           or more a block a channel (block.cuh's tree)
 *
 * Same rules as kernels.cuh: device memory through ampc_dptr
 * (cuda/kernel_api.cuh), no thread reads what another writes; the block
 * bias gradient alone uses shared memory, barriers and warp shuffles
 * (ampc_cu_block_sum).
 */
#ifndef AMPC_CUDA_LAYOUT_CUH
#define AMPC_CUDA_LAYOUT_CUH

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/kernel_api.cuh"

#include "cuda/ampc_cuda.h"
#include "cuda/block.cuh"
#include "cuda/rt_cuda.h"
#include "kernels/half.h"

#define AMPC_LAY_API AMPC_API

#define AMPC_LAY_THREADS 256
#ifndef AMPC_LAY_GRID_CAP
#ifdef __CUDACC__
#define AMPC_LAY_GRID_CAP 4096
#else
#define AMPC_LAY_GRID_CAP ampc_emu_grid_cap() /* small, so the tests' loops wrap */
#endif
#endif

static inline __device__ float ampc_lay_load(ampc_dptr<const void> p, size_t i, int dt)
{
    if (dt == AMPC_DT_F32)
        return ampc_dcast<const float>(p)[i];
    if (dt == AMPC_DT_F16)
        return ampc_half_to_float(ampc_dcast<const ampc_half>(p)[i]);
    return ampc_bf16_to_float(ampc_dcast<const ampc_bf16>(p)[i]);
}

/* dst = (acc ? dst : 0) + v in fp32, rounded once (rt__set) */
static inline __device__ void ampc_lay_store(ampc_dptr<void> p, size_t i, int dt, float v, int acc)
{
    if (acc)
        v = ampc_lay_load(p, i, dt) + v;
    if (dt == AMPC_DT_F32)
        ampc_dcast<float>(p)[i] = v;
    else if (dt == AMPC_DT_F16)
        ampc_dcast<ampc_half>(p)[i] = ampc_float_to_half(v);
    else
        ampc_dcast<ampc_bf16>(p)[i] = ampc_float_to_bf16(v);
}

static inline __device__ void ampc_lay_copy(ampc_dptr<void> dst, size_t j, ampc_dptr<const void> src,
                                            size_t i, int dt)
{
    if (dt == AMPC_DT_F32)
        ampc_dcast<uint32_t>(dst)[j] = ampc_dcast<const uint32_t>(src)[i];
    else
        ampc_dcast<uint16_t>(dst)[j] = ampc_dcast<const uint16_t>(src)[i];
}

static inline unsigned ampc_lay_grid(size_t n)
{
    size_t g = (n + AMPC_LAY_THREADS - 1) / AMPC_LAY_THREADS;
    return (unsigned)(g < AMPC_LAY_GRID_CAP ? (g ? g : 1) : AMPC_LAY_GRID_CAP);
}

#define AMPC_LAY_FOR(i, n)                                                                   \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                  \
         i += (size_t)gridDim.x * blockDim.x)

/* A translation unit that needs only the helpers above (pool.cu, batchnorm.cu)
 * defines AMPC_LAY_HELPERS_ONLY: the kernels and launchers below are
 * layout.cu's alone. */
#ifndef AMPC_LAY_HELPERS_ONLY

__global__ void ampc_k_pad_channels(size_t rows, int c, int cp, int dt, ampc_dptr<const void> src,
                                    ampc_dptr<void> dst)
{
    AMPC_LAY_FOR(i, rows * (size_t)cp)
    {
        size_t r = i / (size_t)cp, j = i % (size_t)cp;
        if (j < (size_t)c)
            ampc_lay_copy(dst, i, src, r * (size_t)c + j, dt);
        else if (dt == AMPC_DT_F32)
            ampc_dcast<uint32_t>(dst)[i] = 0;
        else
            ampc_dcast<uint16_t>(dst)[i] = 0;
    }
}

__global__ void ampc_k_unpad_channels(size_t rows, int c, int cp, int dt,
                                      ampc_dptr<const void> src, ampc_dptr<void> dst, int acc)
{
    AMPC_LAY_FOR(i, rows * (size_t)c)
    {
        size_t r = i / (size_t)c, j = i % (size_t)c, from = r * (size_t)cp + j;
        if (acc)
            ampc_lay_store(dst, i, dt, ampc_lay_load(src, from, dt), 1);
        else
            ampc_lay_copy(dst, i, src, from, dt);
    }
}

__global__ void ampc_k_bias_add(size_t outer, int c, size_t inner, int dt, ampc_dptr<void> y,
                                ampc_dptr<const void> bias)
{
    AMPC_LAY_FOR(i, outer * (size_t)c * inner)
    {
        size_t ch = i / inner % (size_t)c;
        ampc_lay_store(y, i, dt, ampc_lay_load(y, i, dt) + ampc_lay_load(bias, ch, dt), 0);
    }
}

__global__ void ampc_k_bias_grad(size_t outer, int c, size_t inner, int dt,
                                 ampc_dptr<const void> dy, ampc_dptr<void> dbias, int acc)
{
    AMPC_LAY_FOR(ch, (size_t)c)
    {
        double s = 0.0;
        for (size_t o = 0; o < outer; o++)
            for (size_t i = 0; i < inner; i++)
                s += ampc_lay_load(dy, (o * (size_t)c + ch) * inner + i, dt);
        ampc_lay_store(dbias, ch, dt, (float)s, acc);
    }
}

/* A block a channel (blocks grid-stride over the channels): thread t adds
 * the channel's terms t, t + 256, ... (o-major: term j is dy[o = j / inner,
 * ch, i = j % inner]) in order in double, then ampc_cu_block_sum's tree:
 * an order of the sizes alone, within rounding of the CPU's (the tests'
 * twin follows it bit for bit). */
#define AMPC_LAY_BLOCK_MIN 2048
__global__ void ampc_k_bias_grad_block(size_t outer, int c, size_t inner, int dt,
                                       ampc_dptr<const void> dy, ampc_dptr<void> dbias, int acc)
{
    AMPC_SHARED(double, part, AMPC_BLOCK_WARPS);
    size_t terms = outer * inner;
    for (size_t ch = blockIdx.x; ch < (size_t)c; ch += gridDim.x) {
        double s = 0.0;
        for (size_t j = threadIdx.x; j < terms; j += blockDim.x)
            s += ampc_lay_load(dy, (j / inner * (size_t)c + ch) * inner + j % inner, dt);
        s = ampc_cu_block_sum<double>(s, part);
        if (threadIdx.x == 0)
            ampc_lay_store(dbias, ch, dt, (float)s, acc);
    }
}

/* ---- launchers: 0 or the launch's cudaError_t ----------------------------------------- */

AMPC_LAY_API int ampc_cu_pad_channels(AmpcStream s, size_t rows, int c, int cp, int dt,
                                      const void *src, void *dst)
{
    if (rows == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_pad_channels, ampc_lay_grid(rows * (size_t)cp), AMPC_LAY_THREADS, s, rows,
                c, cp, dt, src, dst);
    return AMPC_LAUNCH_ERROR();
}

AMPC_LAY_API int ampc_cu_unpad_channels(AmpcStream s, size_t rows, int c, int cp, int dt,
                                        const void *src, void *dst, int acc)
{
    if (rows == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_unpad_channels, ampc_lay_grid(rows * (size_t)c), AMPC_LAY_THREADS, s,
                rows, c, cp, dt, src, dst, acc);
    return AMPC_LAUNCH_ERROR();
}

AMPC_LAY_API int ampc_cu_bias_add(AmpcStream s, size_t outer, int c, size_t inner, int dt,
                                  void *y, const void *bias)
{
    size_t n = outer * (size_t)c * inner;
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_bias_add, ampc_lay_grid(n), AMPC_LAY_THREADS, s, outer, c, inner, dt, y,
                bias);
    return AMPC_LAUNCH_ERROR();
}

AMPC_LAY_API int ampc_cu_bias_grad(AmpcStream s, size_t outer, int c, size_t inner, int dt,
                                   const void *dy, void *dbias, int acc)
{
    if (c <= 0)
        return 0;
    if (outer * inner >= AMPC_LAY_BLOCK_MIN) {
        unsigned grid = (unsigned)c < AMPC_LAY_GRID_CAP ? (unsigned)c : (unsigned)AMPC_LAY_GRID_CAP;
        AMPC_LAUNCH(ampc_k_bias_grad_block, grid, AMPC_LAY_THREADS, s, outer, c, inner, dt, dy,
                    dbias, acc);
    } else {
        AMPC_LAUNCH(ampc_k_bias_grad, ampc_lay_grid((size_t)c), AMPC_LAY_THREADS, s, outer, c,
                    inner, dt, dy, dbias, acc);
    }
    return AMPC_LAUNCH_ERROR();
}

/* ---- the layout conversion (rt_layout_convert, runtime/cpu/layout.c) -------------------- */

/* to NHWC: dst [n][hw][c] from src [n][c][hw]; to NCHW the inverse (rt_layout_convert) */
__global__ void ampc_k_layout(size_t n, size_t c, size_t hw, int dt, ampc_dptr<const void> src,
                              ampc_dptr<void> dst, int to_nhwc)
{
    size_t total = n * c * hw;
    AMPC_LAY_FOR(e, total)
    {
        size_t img = e / (c * hw), r = e % (c * hw);
        size_t ch = r / hw, p = r % hw; /* e is [img][ch][p] in NCHW */
        size_t t = (img * hw + p) * c + ch;
        if (to_nhwc)
            ampc_lay_copy(dst, t, src, e, dt);
        else
            ampc_lay_copy(dst, e, src, t, dt);
    }
}

AMPC_LAY_API void rt_cuda_layout_convert(RtCudaCtx *cx, int64_t n, int64_t c, int64_t hw, RtDType dt,
                                        const void *src, void *dst, RtLayout to)
{
    if (n < 0 || c < 0 || hw < 0) {
        fprintf(stderr, "ampc: rt_cuda_layout_convert: negative dims (%lld, %lld, %lld)\n",
                (long long)n, (long long)c, (long long)hw);
        exit(1);
    }
    size_t total = (size_t)n * (size_t)c * (size_t)hw;
    if (total == 0)
        return;
    AMPC_LAUNCH(ampc_k_layout, ampc_lay_grid(total), AMPC_LAY_THREADS, cx->stream, (size_t)n,
                (size_t)c, (size_t)hw, (int)dt, src, dst, to == RT_LAYOUT_NHWC);
    AMPC_CHECK(AMPC_API_CUDA, AMPC_LAUNCH_ERROR());
}

#endif /* AMPC_LAY_HELPERS_ONLY */

#endif /* AMPC_CUDA_LAYOUT_CUH */
