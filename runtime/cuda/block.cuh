/*
 * block.cuh - block reductions in a fixed order (issue 25), in
 * cuda/kernel_api.cuh's spelling for nvcc and the emulator: a value
 * combined over a block of AMPC_BLOCK_THREADS threads by warp shuffles and
 * one shared-memory exchange, the order a function of the block's size
 * alone, so the result never depends on timing or on the order of the
 * blocks.  The families that sum many terms use it (elemwise.cuh's
 * broadcast reductions, loss.cuh, math.cuh's loss-head softmax,
 * layout.cuh's bias gradient); their tests' C twins follow the same tree.
 */
#ifndef AMPC_CUDA_BLOCK_CUH
#define AMPC_CUDA_BLOCK_CUH

#include "cuda/kernel_api.cuh"

#define AMPC_BLOCK_THREADS 256
#define AMPC_BLOCK_WARPS (AMPC_BLOCK_THREADS / 32)

/* the block reductions' operations: a + b, and the larger (b > a ? b : a,
 * the CPU's running maximum: a NaN never wins) */
struct AmpcCuAdd {
    template <class T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct AmpcCuMax {
    template <class T> __device__ T operator()(T a, T b) const { return b > a ? b : a; }
};

/* v combined by op over a block of AMPC_BLOCK_THREADS threads, in an order
 * fixed by that size alone (never by timing): each warp's lanes pairwise by
 * __shfl_down_sync (lane l = op(lane l, lane l + h), h = 16, ..., 1), then
 * warp 0's lane w takes warp w's result and the same tree for h =
 * AMPC_BLOCK_WARPS/2, ..., 1.  Every thread gets the result.  part:
 * AMPC_BLOCK_WARPS elements of the kernel's shared memory, free again on
 * return; every thread of the block calls it (it holds barriers). */
template <class T, class Op>
static inline __device__ T ampc_cu_block_reduce(T v, ampc_dptr<T> part, Op op)
{
    unsigned lane = threadIdx.x % 32u, warp = threadIdx.x / 32u;
    for (int h = 16; h >= 1; h /= 2)
        v = op(v, __shfl_down_sync(0xffffffffu, v, h));
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = part[lane % AMPC_BLOCK_WARPS]; /* lanes past the warps: unused below */
        for (int h = AMPC_BLOCK_WARPS / 2; h >= 1; h /= 2)
            v = op(v, __shfl_down_sync(0xffffffffu, v, h));
    }
    __syncthreads(); /* warp 0 has read every part before lane 0 writes */
    if (threadIdx.x == 0)
        part[0] = v;
    __syncthreads();
    T total = part[0];
    __syncthreads(); /* read by all before the caller's next use */
    return total;
}

template <class T> static inline __device__ T ampc_cu_block_sum(T v, ampc_dptr<T> part)
{
    return ampc_cu_block_reduce<T>(v, part, AmpcCuAdd());
}

#endif /* AMPC_CUDA_BLOCK_CUH */
