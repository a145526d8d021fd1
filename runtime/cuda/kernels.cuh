/*
 * kernels.cuh - what every element-wise kernel source of runtime/cuda/
 * shares: element access in any dtype, the grid-stride loop, the launch of
 * an rt_cuda_* twin on its context's stream, the finite flag's store, a
 * multi-tensor block's range.  The kernels themselves are in one header per
 * family, beside the CPU's (dtype.cuh, elemwise.cuh, act.cuh, reduce.cuh,
 * loss.cuh, optim.cuh, step.cuh; math.cuh: the twins that call libm; layout.cuh,
 * pool.cuh, batchnorm.cuh), each one CUDA C++17 source that nvcc compiles
 * for the GPU (kernels.cu and math.cu, into libampccuda.a) and the host's
 * C++ compiler for the emulator (the same .cu files, into libampcemu.a;
 * cuda/emu_cuda.h), so the code the GPU runs is the code checked against
 * the CPU twins in `make check` (tests/runtime/test_cuda_emu.c,
 * test_cuda_ops_emu.c), under the emulator's scheduler and memory checks.
 *
 * Kernels use cuda/kernel_api.cuh's spelling: device memory only through
 * ampc_dptr<T>.  The element-wise kernels the memory plan feeds (cast,
 * binary, add+relu, relu and its backward) take 8 elements a thread through
 * 16-byte loads and stores when their launcher finds every pointer 16-byte
 * aligned (vec), then the last n % 8 one at a time; else one at a time
 * (cuda/vec.cuh).  None of these uses shared memory, a barrier or a warp
 * primitive; no thread reads what another thread of its launch writes
 * (the emulator would report the race).  The one store several threads
 * may make to the same word is the flag's 1 (the same value whoever wins,
 * as PyTorch's found_inf): a write-write race the emulator reports too,
 * so the flag is set with atomicOr.
 *
 * The per-element math is runtime/kernels/ (half.h, act.h, optim.h,
 * lossscale.h), in the CPU kernels' order of operations; nvcc builds this
 * with -fmad=false and without fast math or flush-to-zero, so each
 * operation rounds as on the host (the PTX check,
 * tests/runtime/cuda_ptx_check.sh).
 */
#ifndef AMPC_CUDA_KERNELS_CUH
#define AMPC_CUDA_KERNELS_CUH

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cuda/kernel_api.cuh"

#include "cuda/ampc_cuda.h"
#include "cuda/block.cuh"
#include "cuda/rt_cuda.h"
#include "cuda/vec.cuh"
#include "kernels/act.h"
#include "kernels/half.h"
#include "kernels/lossscale.h"
#include "kernels/optim.h"

#define AMPC_CU_API AMPC_API

/* Threads per block and the most blocks of the grid-stride (element-wise)
 * kernels; the tests make the cap small to exercise the stride. */
#define AMPC_CU_THREADS 256
#ifndef AMPC_CU_GRID_CAP
#ifdef __CUDACC__
#define AMPC_CU_GRID_CAP 4096
#else
#define AMPC_CU_GRID_CAP ampc_emu_grid_cap() /* small, so the tests' loops wrap */
#endif
#endif

/* ---- element access ---------------------------------------------------------- */

static inline __device__ float ampc_cu_load(ampc_dptr<const void> p, size_t i, int dt)
{
    if (dt == AMPC_DT_F32)
        return ampc_dcast<const float>(p)[i];
    if (dt == AMPC_DT_F16)
        return ampc_half_to_float(ampc_dcast<const ampc_half>(p)[i]);
    return ampc_bf16_to_float(ampc_dcast<const ampc_bf16>(p)[i]);
}

static inline __device__ void ampc_cu_store(ampc_dptr<void> p, size_t i, int dt, float v)
{
    if (dt == AMPC_DT_F32)
        ampc_dcast<float>(p)[i] = v;
    else if (dt == AMPC_DT_F16)
        ampc_dcast<ampc_half>(p)[i] = ampc_float_to_half(v);
    else
        ampc_dcast<ampc_bf16>(p)[i] = ampc_float_to_bf16(v);
}

/* rt__commit's rule: dst = (acc ? dst : 0) + v in fp32, rounded once */
static inline __device__ void ampc_cu_store_acc(ampc_dptr<void> p, size_t i, int dt, float v,
                                                int acc)
{
    if (acc)
        v = ampc_cu_load(p, i, dt) + v;
    ampc_cu_store(p, i, dt, v);
}

/* inf or NaN, on the stored bits (a 16-bit value is not widened) */
static inline __device__ int ampc_cu_nonfinite(ampc_dptr<const void> p, size_t i, int dt)
{
    if (dt == AMPC_DT_F32)
        return !ampc_isfinite(ampc_dcast<const float>(p)[i]);
    if (dt == AMPC_DT_F16)
        return !ampc_half_isfinite(ampc_dcast<const ampc_half>(p)[i]);
    return !ampc_bf16_isfinite(ampc_dcast<const ampc_bf16>(p)[i]);
}

/* grid-stride loops: the first element of this thread, and the stride */
static inline __device__ size_t ampc_cu_first(void)
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
static inline __device__ size_t ampc_cu_stride(void) { return (size_t)gridDim.x * blockDim.x; }

static inline unsigned ampc_cu_grid(size_t n)
{
    size_t b = (n + AMPC_CU_THREADS - 1) / AMPC_CU_THREADS;
    return b < AMPC_CU_GRID_CAP ? (unsigned)b : (unsigned)AMPC_CU_GRID_CAP;
}

/* An element-wise kernel's 8-element vectors (vec) and the grid over them:
 * the 16-byte path when every pointer allows it and there is a vector */
static inline int ampc_cu_vec(size_t n, const void *a, const void *b, const void *c)
{
    return n >= AMPC_V8 && ampc_v8_aligned(a) && ampc_v8_aligned(b) && ampc_v8_aligned(c);
}
static inline unsigned ampc_cu_vgrid(size_t n, int vec)
{
    return ampc_cu_grid(vec ? n / AMPC_V8 : n);
}

/* the vectors of a vec launch, and where its per-element loop starts */
#define AMPC_CU_VECS(n, vec) ((vec) ? (n) / AMPC_V8 : 0)
#define AMPC_CU_TAIL(n, vec) (AMPC_CU_VECS(n, vec) * AMPC_V8 + ampc_cu_first())

/* ---- block reductions: cuda/block.cuh -------------------------------------------------- */

#define AMPC_CU_WARPS AMPC_BLOCK_WARPS /* warps of an AMPC_CU_THREADS block */
static_assert(AMPC_CU_THREADS == AMPC_BLOCK_THREADS, "block.cuh's tree is of this block size");

/* ---- shared by the families ---------------------------------------------------- */

static inline __device__ void ampc_cu_copy(ampc_dptr<void> dst, size_t j, ampc_dptr<const void> src,
                                            size_t i, int dt)
{
    if (dt == AMPC_DT_F32)
        ampc_dcast<uint32_t>(dst)[j] = ampc_dcast<const uint32_t>(src)[i];
    else
        ampc_dcast<uint16_t>(dst)[j] = ampc_dcast<const uint16_t>(src)[i];
}

/* the flag's 1: atomic, since several threads may store it (the same value) */
static inline __device__ void ampc_cu_raise(ampc_dptr<int32_t> flag)
{
    atomicOr(ampc_dcast<int>(flag), 1);
}

/* The range of block blockIdx.x in a multi-tensor launch: [*lo, *hi) of
 * the tensor returned (its table entry, read once). */
static inline __device__ AmpcMtTensor ampc_cu_mt_range(ampc_dptr<const AmpcMtTensor> tensors,
                                                       ampc_dptr<const AmpcMtBlock> blocks,
                                                       int64_t chunk, size_t *lo, size_t *hi)
{
    AmpcMtBlock b = blocks[blockIdx.x];
    AmpcMtTensor t = tensors[b.tensor];
    size_t first = (size_t)b.chunk * (size_t)chunk;
    size_t n = (size_t)t.n;
    *lo = first;
    *hi = n - first < (size_t)chunk ? n : first + (size_t)chunk;
    return t;
}

/* An rt_cuda_* twin's launch of kernel k over n elements on its context's
 * stream (cx in scope; none when n is 0), and a launcher's call, each
 * checked (a failure ends the program: the contract returns nothing) */
#define AMPC_CU_GO(k, n, ...)                                                                \
    do {                                                                                      \
        if ((n) > 0) {                                                                        \
            AMPC_LAUNCH(k, ampc_cu_grid(n), AMPC_CU_THREADS, cx->stream, __VA_ARGS__);        \
            AMPC_CHECK(AMPC_API_CUDA, AMPC_LAUNCH_ERROR());                                   \
        }                                                                                     \
    } while (0)
#define AMPC_CU_RUN(call) AMPC_CHECK(AMPC_API_CUDA, (call))

#endif /* AMPC_CUDA_KERNELS_CUH */
