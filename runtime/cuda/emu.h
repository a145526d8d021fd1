/*
 * emu.h - host emulation of the CUDA launch model, so that the custom
 * kernels of runtime/cuda/kernels.cuh compile as plain C (gcc, clang) and
 * run on the CPU in `make unit`, against their CPU twins (runtime/cpu/,
 * runtime/optim.c) bit for bit (tests/runtime/test_cuda_emu.c).
 *
 * Include this before kernels.cuh in a C file.  It defines what nvcc
 * provides: the execution-space keywords (__global__, __device__,
 * __host__: nothing), the built-in index variables (threadIdx, blockIdx,
 * blockDim, gridDim: file-scope structs) and the stream type, and
 * AMPC_LAUNCH, which kernels.cuh's launchers use for `k<<<g, b, 0, s>>>`:
 * here it runs the kernel once per (block, thread), block by block and
 * thread by thread, setting the indices before each call.
 *
 * Why that is faithful: running the threads of a grid one after another is
 * one of the schedules a GPU may pick, and for a kernel whose threads never
 * wait for each other (no __syncthreads, no shared memory, no warp
 * shuffles or votes) and never read what another thread of the same
 * launch writes, every schedule gives the same result.  Kernels that break
 * either rule cannot be emulated and need a GPU test instead
 * (docs/backend-cuda.md lists them).  To catch a kernel that leans on the
 * order anyway, ampc_emu_reverse = 1 runs blocks and threads last to first;
 * the tests run every kernel both ways.  ampc_emu_launches counts launches
 * (the tests assert "one launch for all tensors").
 *
 * What it cannot prove: the device's own arithmetic.  That is pinned down
 * separately: nvcc builds the kernels with -fmad=false and without
 * fast-math/FTZ (the PTX check fails on fma, .ftz and .approx), so each
 * fp32 operation is one IEEE round-to-nearest operation as on the host;
 * GPU arithmetic returns the canonical NaN (0x7fffffff) where x86 keeps a
 * payload, so NaN is compared as NaN, not by payload, on the GPU.
 */
#ifndef AMPC_CUDA_EMU_H
#define AMPC_CUDA_EMU_H

#ifdef __CUDACC__
#error "cuda/emu.h is for host builds of the kernels; nvcc builds them natively"
#endif

#include <stddef.h>
#include <stdint.h>

#define __global__
#define __device__
#define __host__

typedef struct {
    unsigned x, y, z;
} AmpcEmuDim3;

/* what nvcc calls cudaStream_t: an opaque pointer (NULL is the default stream) */
typedef struct CUstream_st *cudaStream_t;

__attribute__((unused)) static AmpcEmuDim3 threadIdx, blockIdx, blockDim, gridDim;
__attribute__((unused)) static int ampc_emu_reverse;   /* 1: blocks and threads last to first */
__attribute__((unused)) static long ampc_emu_launches; /* kernels launched so far */

/* k<<<grid, block, 0, stream>>>(args): one-dimensional grids and blocks */
#define AMPC_LAUNCH(k, grid, block, stream, ...)                                             \
    do {                                                                                     \
        unsigned g_ = (unsigned)(grid), b_ = (unsigned)(block);                              \
        (void)(stream);                                                                      \
        ampc_emu_launches++;                                                                 \
        gridDim.x = g_, gridDim.y = 1, gridDim.z = 1;                                        \
        blockDim.x = b_, blockDim.y = 1, blockDim.z = 1;                                     \
        blockIdx.y = blockIdx.z = threadIdx.y = threadIdx.z = 0;                             \
        for (unsigned bi_ = 0; bi_ < g_; bi_++) {                                            \
            blockIdx.x = ampc_emu_reverse ? g_ - 1 - bi_ : bi_;                              \
            for (unsigned ti_ = 0; ti_ < b_; ti_++) {                                        \
                threadIdx.x = ampc_emu_reverse ? b_ - 1 - ti_ : ti_;                         \
                k(__VA_ARGS__);                                                              \
            }                                                                                \
        }                                                                                    \
    } while (0)

/* the launch error (cudaGetLastError after k<<<...>>>): none here */
#define AMPC_LAUNCH_ERROR() 0

#endif /* AMPC_CUDA_EMU_H */
