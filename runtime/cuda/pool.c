/*
 * pool.c - Pooling's contract functions (rt_cuda.h): the geometry of a
 * call (plan.c's ampc_pool_geom) and the launch of the custom kernels of
 * pool.cuh, bit for bit runtime/cpu/pool.c.  The backward of max pooling
 * takes a workspace of 4 bytes an output (each window's argmax).
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda/plan.h"
#include "cuda/rt_cuda.h"

static int idt(RtDType dt) { return (int)dt; }

/* ---- Pooling: custom kernels (pool.cuh), bit for bit pool.c --------------------------- */

static void pool_geom(const RtCudaCtx *cx, const RtPoolDims *d, RtDType dt, AmpcPoolGeom *g)
{
    char err[256];
    rt_cuda_need_init(cx, "pooling");
    (void)dt;
    if (!ampc_pool_geom(d, ampc_dims_layout(d->layout), g, err, sizeof err)) {
        fprintf(stderr, "ampc: %s\n", err);
        exit(1);
    }
}

size_t rt_cuda_pool_workspace_bytes(RtCudaCtx *cx, const RtPoolDims *d, RtDType dt, RtPass pass)
{
    AmpcPoolGeom g;
    char err[256];
    (void)cx, (void)dt;
    if (!ampc_pool_geom(d, ampc_dims_layout(d->layout), &g, err, sizeof err))
        return 0; /* the call itself reports it */
    return ampc_pool_ws_bytes(&g, pass != RT_PASS_FORWARD);
}

void rt_cuda_pool_forward(RtCudaCtx *cx, const RtPoolDims *d, RtDType dt, const void *x, void *y,
                          void *ws)
{
    AmpcPoolGeom g;
    (void)ws;
    pool_geom(cx, d, dt, &g);
    AMPC_CHECK(AMPC_API_CUDA, ampc_cu_pool_forward(cx->stream, &g, idt(dt), x, y));
}

void rt_cuda_pool_backward(RtCudaCtx *cx, const RtPoolDims *d, RtDType dt, const void *x,
                           const void *dy, void *dx, bool accumulate, void *ws)
{
    AmpcPoolGeom g;
    pool_geom(cx, d, dt, &g);
    AMPC_CHECK(AMPC_API_CUDA,
               ampc_cu_pool_backward(cx->stream, &g, idt(dt), x, dy, dx, accumulate, ws));
}
