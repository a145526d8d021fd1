/*
 * bn_tree.h - the order in which the GPU's BatchNorm sums a channel
 * (runtime/cuda/batchnorm.cuh), shared by the CUDA kernels (nvcc)
 * and the CPU twin's ordered mode (runtime/cpu/batchnorm.c, RtBnDims.order
 * = RT_BN_ORDER_TILED), so that the two give the same bits: a fixed tree
 * that depends on the sizes alone, never on the grid, the device or the
 * order in which blocks run (docs/backend-cuda.md, "BatchNorm").
 *
 * A channel's R = outer*inner elements, in the order e = o*inner + i
 * (element (o, ch, i) of the [outer, c, inner] view), are cut into tiles of
 * ampc_bn_tile(R, c) elements (the last one shorter).  Within a tile, row r
 * (0 <= r < AMPC_BN_ROWS) sums the elements e = start + r + AMPC_BN_ROWS*j in
 * increasing e, in double from 0.0; the rows are then combined pairwise,
 * row r += row r + h for h = 16, 8, 4, 2, 1 (a warp's shuffle-down tree):
 * the tile's partial is row 0.  The partials of the tiles are combined
 * the same way: lane l (0 <= l < 32) sums tiles l, l + 32, ... in
 * increasing order from 0.0, then the lanes by the same pairwise tree.
 * Empty rows and lanes add their 0.0 too, on both sides.
 *
 * The tile's size aims at about AMPC_BN_BLOCKS blocks of 256 threads for
 * the channels in groups of 64: enough to fill a GPU, few enough partials
 * (at most max(AMPC_BN_BLOCKS * 64, c) per sum) for the second level.
 */
#ifndef AMPC_KERNELS_BN_TREE_H
#define AMPC_KERNELS_BN_TREE_H

#include <stdint.h>

/* self-contained: ir/gpu_kernels.c (the cost model's rows) reads it too */
#ifndef AMPC_HD
#if defined(__CUDACC__)
#define AMPC_HD __host__ __device__
#else
#define AMPC_HD
#endif
#endif

#define AMPC_BN_ROWS 32      /* rows of a tile: one per thread of a channel slot */
#define AMPC_BN_LANES 32     /* lanes of the second level: one warp per channel */
#define AMPC_BN_MIN_TILE 256 /* a tile's elements at least (8 a row) */
#define AMPC_BN_BLOCKS 2048  /* tiles x 64-channel groups aimed at */
#define AMPC_BN_GROUP 64     /* channels of a group, for the tile's size only */

/* the elements of a channel one tile takes: a multiple of AMPC_BN_ROWS */
static inline AMPC_HD int64_t ampc_bn_tile(int64_t r, int64_t c)
{
    int64_t groups = (c + AMPC_BN_GROUP - 1) / AMPC_BN_GROUP;
    int64_t tmax = groups > 0 && groups < AMPC_BN_BLOCKS ? AMPC_BN_BLOCKS / groups : 1;
    int64_t te = (r + tmax - 1) / tmax;
    te = (te + AMPC_BN_ROWS - 1) / AMPC_BN_ROWS * AMPC_BN_ROWS;
    return te < AMPC_BN_MIN_TILE ? AMPC_BN_MIN_TILE : te;
}

/* the tiles of a channel of r elements (at least 1) */
static inline AMPC_HD int64_t ampc_bn_tiles(int64_t r, int64_t c)
{
    int64_t te = ampc_bn_tile(r, c);
    int64_t t = (r + te - 1) / te;
    return t > 0 ? t : 1;
}

/* partial sums per sum kind the second level reads: tiles x channels, at
 * most max(AMPC_BN_BLOCKS * AMPC_BN_GROUP, c) whatever r */
static inline AMPC_HD int64_t ampc_bn_partials(int64_t r, int64_t c)
{
    return ampc_bn_tiles(r, c) * c;
}

#endif /* AMPC_KERNELS_BN_TREE_H */
