/* pool_geom.h - a pooling's geometry as the kernels of pool.cuh take it
 * (by value): three spatial axes with unit axes in front for 1-D and 2-D,
 * as runtime/cpu/pool.c's PGeom.  Plain C (nvcc and cc); plan.c's
 * ampc_pool_geom builds it from RtPoolDims. */
#ifndef AMPC_CUDA_POOL_GEOM_H
#define AMPC_CUDA_POOL_GEOM_H

enum { AMPC_POOL_MAX = 0, AMPC_POOL_AVG = 1, AMPC_POOL_SUM = 2 }; /* RtPoolType */

typedef struct {
    int n, c;
    int IS[3], K[3], S[3], P[3], O[3];
    int type, count_include_pad, nhwc;
} AmpcPoolGeom;

#endif
