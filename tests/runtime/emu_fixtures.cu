/*
 * emu_fixtures.cu - kernels for the emulator's own test (test_emu_checker.c),
 * in cuda/kernel_api.cuh's spelling: nvcc compiles this file too (make
 * cuda-check), so the API issue 25's kernels will use is proven on both
 * sides.
 *
 *   fx_block_sum      a correct tiled reduction: 16-byte vector loads, a
 *                     shared-memory tree with __syncthreads, the last warp
 *                     with __shfl_down_sync, one partial per block, then
 *                     fx_combine adds the partials in block order (fixed)
 *   the planted defects, each of which the emulator must report:
 *     fx_no_syncthreads   the tree without its __syncthreads
 *     fx_warp_no_syncwarp a warp reduction through shared memory, no __syncwarp
 *     fx_two_blocks       thread 0 of every block stores out[0]
 *     fx_shared_past_end  s[threadIdx.x + 1] of a blockDim-sized array
 *     fx_misaligned_vec   a 16-byte load at x + 1
 *     fx_divergent_sync   threads >= 200 return before __syncthreads
 *     fx_atomic_order     float atomicAdd of values of mixed magnitude
 *     fx_shared_unwritten reads a shared element no thread wrote
 *     fx_shared_across_blocks  block 1 reads what block 0 wrote to shared
 *     fx_shared_too_big   52,000 bytes of __shared__ (emulation only: nvcc
 *                         refuses it)
 *     fx_global_past_end  y[n] stored
 *     fx_shfl_outside     a shuffle reading a lane not in its mask
 *     fx_syncwarp_two_sites  half a warp at one __syncwarp, half at another
 *     fx_raw_pointer      a raw pointer smuggled in a struct, dereferenced
 *   the counters' fixtures (hand-computed counts in the test):
 *     fx_copy_scalar, fx_copy_vec4, fx_channel_sum
 *   fx_atomic_exact (integers in float atomics: order-free) and
 *   fx_atomic_nondet (AMPC_NONDETERMINISTIC) must pass.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cuda/kernel_api.cuh"

#define FX_API AMPC_API

/* ---- a correct block reduction (the shape of issue 25's BatchNorm sums) ---------- */

#define FX_THREADS 128

/* the block's sum of x[0, n) over its grid-stride share, in a fixed tree */
static __device__ float fx_block_reduce(float v, ampc_dptr<float> part)
{
    unsigned t = threadIdx.x;
    part[t] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s >= 32; s /= 2) {
        if (t < s)
            part[t] = part[t] + part[t + s];
        __syncthreads();
    }
    float w = 0.0f;
    if (t < 32) {
        w = part[t];
        for (int off = 16; off > 0; off /= 2)
            w = w + __shfl_down_sync(0xffffffffu, w, off);
    }
    return w;
}

/* n4 float4s of x (16-byte aligned): each block's tree sum into partial[block] */
__global__ void fx_block_sum(size_t n4, ampc_dptr<const float> x, ampc_dptr<float> partial)
{
    AMPC_SHARED(float, part, FX_THREADS);
    float v = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 q = ampc_dcast<const float4>(x)[i];
        v = v + ((q.x + q.y) + (q.z + q.w));
    }
    float s = fx_block_reduce(v, part);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

/* one thread: the partials in block order */
__global__ void fx_combine(unsigned nb, ampc_dptr<const float> partial, ampc_dptr<float> out)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    float s = 0.0f;
    for (unsigned b = 0; b < nb; b++)
        s = s + partial[b];
    *out = s;
}

FX_API int fx_run_block_sum(size_t n4, const float *x, float *partial, float *out, unsigned grid)
{
    AMPC_LAUNCH(fx_block_sum, grid, FX_THREADS, 0, n4, x, partial);
    int e = AMPC_LAUNCH_ERROR();
    if (e)
        return e;
    AMPC_LAUNCH(fx_combine, 1, 32, 0, grid, partial, out);
    return AMPC_LAUNCH_ERROR();
}

/* ---- planted defects ---------------------------------------------------------------- */

/* the tree with no barrier between its levels */
__global__ void fx_no_syncthreads(ampc_dptr<const float> x, ampc_dptr<float> out)
{
    AMPC_SHARED(float, part, FX_THREADS);
    unsigned t = threadIdx.x;
    part[t] = x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2)
        if (t < s)
            part[t] = part[t] + part[t + s]; /* no __syncthreads: a race */
    if (t == 0)
        out[blockIdx.x] = part[0];
}

/* one warp sums through shared memory, trusting lockstep */
__global__ void fx_warp_no_syncwarp(ampc_dptr<const float> x, ampc_dptr<float> out)
{
    AMPC_SHARED(float, lanes, 32);
    unsigned l = threadIdx.x % 32;
    lanes[l] = x[l];
    __syncwarp();
    for (unsigned off = 16; off > 0; off /= 2)
        if (l < off)
            lanes[l] = lanes[l] + lanes[l + off]; /* needs __syncwarp() per level */
    if (l == 0)
        out[0] = lanes[0];
}

__global__ void fx_two_blocks(ampc_dptr<int> out)
{
    if (threadIdx.x == 0)
        out[0] = (int)blockIdx.x;
}

__global__ void fx_shared_past_end(ampc_dptr<float> out)
{
    AMPC_SHARED(float, s, FX_THREADS);
    s[threadIdx.x + 1] = 1.0f; /* thread 127 stores s[128] */
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}

__global__ void fx_misaligned_vec(ampc_dptr<const float> x, ampc_dptr<float> out)
{
    if (threadIdx.x == 0) {
        float4 q = ampc_dcast<const float4>(x + 1)[0];
        out[0] = q.x;
    }
}

__global__ void fx_divergent_sync(ampc_dptr<float> out)
{
    AMPC_SHARED(float, s, FX_THREADS);
    if (threadIdx.x >= 100)
        return;
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % 100];
}

__global__ void fx_atomic_order(size_t n, ampc_dptr<const float> x, ampc_dptr<float> sum)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        atomicAdd(&sum[0], x[i]);
}

__global__ void fx_atomic_nondet(size_t n, ampc_dptr<const float> x, ampc_dptr<float> sum)
{
    AMPC_NONDETERMINISTIC();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        atomicAdd(&sum[0], x[i]);
}

__global__ void fx_shared_unwritten(ampc_dptr<float> out)
{
    AMPC_SHARED(float, s, FX_THREADS);
    unsigned t = threadIdx.x;
    if (t % 2 == 0)
        s[t] = 2.0f;
    __syncthreads();
    out[t] = s[t ^ 1]; /* even threads read odd elements, never written */
}

__global__ void fx_global_past_end(size_t n, ampc_dptr<float> y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i <= n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = 0.0f; /* i == n: one past the end */
}

__global__ void fx_shfl_outside(ampc_dptr<float> out)
{
    float v = (float)threadIdx.x;
    if (threadIdx.x < 16) /* lanes 0-15 read lane + 16, which is not in the mask */
        v = __shfl_sync(0x0000ffffu, v, (int)threadIdx.x + 16, 32);
    out[threadIdx.x] = v;
}

/* the lanes of a warp at two __syncwarp call sites: on sm_70 that is
 * undefined; in the emulator a rendezvous that never completes */
__global__ void fx_syncwarp_two_sites(ampc_dptr<float> out)
{
    if (threadIdx.x < 16)
        __syncwarp();
    else
        __syncwarp();
    out[threadIdx.x] = 1.0f;
}

/* block 0 writes its shared array; every block reads it: shared memory is
 * the block's own, so block 1 reads bytes never written */
__global__ void fx_shared_across_blocks(ampc_dptr<float> out)
{
    AMPC_SHARED(float, s, FX_THREADS);
    if (blockIdx.x == 0)
        s[threadIdx.x] = 3.0f;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[threadIdx.x];
}

#ifndef __CUDACC__ /* nvcc refuses it at compile time */
__global__ void fx_shared_too_big(ampc_dptr<float> out)
{
    AMPC_SHARED(float, big, 13000); /* 52,000 bytes */
    big[threadIdx.x] = 1.0f;
    out[threadIdx.x] = big[threadIdx.x];
}
#endif

typedef struct {
    float *p; /* a raw device pointer the launch cannot see as one */
} FxSmuggled;

__global__ void fx_raw_pointer(FxSmuggled s)
{
    if (threadIdx.x == 0)
        s.p[0] = 1.0f;
}

/* ---- the counters' fixtures ------------------------------------------------------------ */

__global__ void fx_copy_scalar(size_t n, ampc_dptr<const float> x, ampc_dptr<float> y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[i];
}

__global__ void fx_copy_vec4(size_t n4, ampc_dptr<const float> x, ampc_dptr<float> y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x)
        ampc_dcast<float4>(y)[i] = ampc_dcast<const float4>(x)[i];
}

/* one thread per channel of [outer, c, inner], walking its outer*inner elements */
__global__ void fx_channel_sum(size_t outer, size_t c, size_t inner, ampc_dptr<const float> x,
                               ampc_dptr<float> y)
{
    size_t ch = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    double s = 0.0;
    for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < inner; i++)
            s += x[(o * c + ch) * inner + i];
    y[ch] = (float)s;
}

/* ---- launchers: 0, or the launch's error ------------------------------------------------ */

FX_API int fx_run(const char *which, unsigned grid, unsigned block, size_t n, float *x, float *y)
{
#define FX_IS(name) (!strcmp(which, #name))
    if (FX_IS(no_syncthreads))
        AMPC_LAUNCH(fx_no_syncthreads, grid, FX_THREADS, 0, x, y);
    else if (FX_IS(warp_no_syncwarp))
        AMPC_LAUNCH(fx_warp_no_syncwarp, 1, 32, 0, x, y);
    else if (FX_IS(two_blocks))
        AMPC_LAUNCH(fx_two_blocks, grid, 32, 0, (int *)y);
    else if (FX_IS(shared_past_end))
        AMPC_LAUNCH(fx_shared_past_end, 1, FX_THREADS, 0, y);
    else if (FX_IS(misaligned_vec))
        AMPC_LAUNCH(fx_misaligned_vec, 1, 32, 0, x, y);
    else if (FX_IS(divergent_sync))
        AMPC_LAUNCH(fx_divergent_sync, 1, FX_THREADS, 0, y);
    else if (FX_IS(atomic_order))
        AMPC_LAUNCH(fx_atomic_order, grid, block, 0, n, x, y);
    else if (FX_IS(atomic_nondet))
        AMPC_LAUNCH(fx_atomic_nondet, grid, block, 0, n, x, y);
    else if (FX_IS(shared_unwritten))
        AMPC_LAUNCH(fx_shared_unwritten, 1, FX_THREADS, 0, y);
    else if (FX_IS(global_past_end))
        AMPC_LAUNCH(fx_global_past_end, grid, block, 0, n, y);
    else if (FX_IS(syncwarp_two_sites))
        AMPC_LAUNCH(fx_syncwarp_two_sites, 1, 32, 0, y);
    else if (FX_IS(shared_across_blocks))
        AMPC_LAUNCH(fx_shared_across_blocks, grid, FX_THREADS, 0, y);
#ifndef __CUDACC__
    else if (FX_IS(shared_too_big))
        AMPC_LAUNCH(fx_shared_too_big, 1, 32, 0, y);
#endif
    else if (FX_IS(shfl_outside))
        AMPC_LAUNCH(fx_shfl_outside, 1, 32, 0, y);
    else if (FX_IS(raw_pointer)) {
        FxSmuggled s = {y};
        AMPC_LAUNCH(fx_raw_pointer, 1, 32, 0, s);
    } else if (FX_IS(copy_scalar))
        AMPC_LAUNCH(fx_copy_scalar, grid, block, 0, n, x, y);
    else if (FX_IS(copy_vec4))
        AMPC_LAUNCH(fx_copy_vec4, grid, block, 0, n, x, y);
    else
        return -2;
#undef FX_IS
    return AMPC_LAUNCH_ERROR();
}

FX_API int fx_run_channel_sum(unsigned grid, unsigned block, size_t outer, size_t c, size_t inner,
                              const float *x, float *y)
{
    AMPC_LAUNCH(fx_channel_sum, grid, block, 0, outer, c, inner, x, y);
    return AMPC_LAUNCH_ERROR();
}
