/*
 * pool.cuh - Pooling (max, avg, sum; 1-D to 3-D; valid/full conventions;
 * count_include_pad; global) on the GPU, the twin of runtime/cpu/pool.c
 * bit for bit, in one CUDA C++17 source for nvcc (pool.cu builds it after
 * layout.cuh's helpers) and the emulator (the same pool.cu in libampcemu.a;
 * tests/runtime/test_cuda_layout_emu.c).
 *
 * Forward: one thread per output, the window and its arithmetic exactly
 * pool.c's (the first maximum, an empty window 0; sums in double divided
 * by the float divisor in double, rounded once).  Backward as a gather:
 * one thread per input element adds, in increasing output order, what
 * each output whose window holds it sends (avg/sum: dy/div in fp32; max:
 * dy when the window's first maximum is this element).  pool.c scatters
 * output by output into an fp32 plane, so every input element receives
 * the same fp32 additions in the same order: the same bits, with no
 * atomics and no thread reading what another writes.
 * Max's backward evaluates each window once: a first launch writes every
 * window's argmax (the first maximum's in-plane index, -1 when empty) to the
 * workspace (rt_cuda_pool_workspace_bytes: 4 bytes an output), which the
 * gather then compares (before, each of the up to 4 windows of a 3x3
 * stride-2 pooling that hold an element was searched again for it).
 *
 * Layout: NCHW (element (n, c, s) at (n*C + c)*S + s) or NHWC
 * ((n*S + s)*C + c); the contract functions (rt_cuda_pool_*) take the
 * convolutions' layout for the dtype (plan.h).  Threads take elements in
 * the layout's own order (in NHWC the channel innermost), so a warp's
 * loads and stores are adjacent.
 */
#ifndef AMPC_CUDA_POOL_CUH
#define AMPC_CUDA_POOL_CUH

#include <math.h>

#ifndef AMPC_CUDA_LAYOUT_CUH
#error "include cuda/layout.cuh before cuda/pool.cuh"
#endif
#include "cuda/pool_geom.h"

static inline AMPC_HD size_t ampc_pool_at(const AmpcPoolGeom *g, size_t n, size_t c, size_t s,
                                          size_t plane)
{
    return g->nhwc ? (n * plane + s) * (size_t)g->c + c : (n * (size_t)g->c + c) * plane + s;
}

/* thread t's (n, c, s) in a plane of `plane` positions: t runs in the
 * layout's order (NHWC: the channel innermost), so adjacent threads touch
 * adjacent bytes */
static inline AMPC_HD void ampc_pool_split(const AmpcPoolGeom *g, size_t t, size_t plane, size_t *n,
                                           size_t *c, size_t *s)
{
    size_t C = (size_t)g->c;
    if (g->nhwc) {
        *c = t % C, *s = t / C % plane, *n = t / C / plane;
    } else {
        *s = t % plane, *c = t / plane % C, *n = t / plane / C;
    }
}

/* pool.c's window(): clipped bounds per axis and the avg divisor */
static inline AMPC_HD void ampc_pool_window(const AmpcPoolGeom *g, const int *o, int *lo, int *hi,
                                            float *div)
{
    long padded = 1, clipped = 1;
    for (int a = 0; a < 3; a++) {
        long s = (long)o[a] * g->S[a] - g->P[a];
        long e = s + g->K[a];
        if (e > (long)g->IS[a] + g->P[a])
            e = (long)g->IS[a] + g->P[a];
        padded *= e > s ? e - s : 1;
        if (s < 0)
            s = 0;
        if (e > g->IS[a])
            e = g->IS[a];
        if (e < s)
            e = s;
        clipped *= e - s;
        lo[a] = (int)s;
        hi[a] = (int)e;
    }
    *div = g->type == AMPC_POOL_SUM ? 1.0f
         : (float)(g->count_include_pad ? padded : (clipped > 0 ? clipped : 1));
}

/* the flat in-plane index of the window's first maximum, or -1 when empty */
static inline __device__ long ampc_pool_argmax(const AmpcPoolGeom *g, ampc_dptr<const void> x,
                                               size_t n, size_t c, const int *lo, const int *hi,
                                               int dt, float *m_out)
{
    size_t plane = (size_t)g->IS[0] * g->IS[1] * g->IS[2];
    float m = -INFINITY;
    long best = -1;
    for (int i0 = lo[0]; i0 < hi[0]; i0++)
        for (int i1 = lo[1]; i1 < hi[1]; i1++)
            for (int i2 = lo[2]; i2 < hi[2]; i2++) {
                size_t s = ((size_t)i0 * g->IS[1] + i1) * g->IS[2] + i2;
                float v = ampc_lay_load(x, ampc_pool_at(g, n, c, s, plane), dt);
                if (best < 0 || v > m)
                    m = v, best = (long)s;
            }
    *m_out = m;
    return best;
}

__global__ void ampc_k_pool_forward(AmpcPoolGeom g, int dt, ampc_dptr<const void> x,
                                    ampc_dptr<void> y)
{
    size_t oplane = (size_t)g.O[0] * g.O[1] * g.O[2], iplane = (size_t)g.IS[0] * g.IS[1] * g.IS[2];
    AMPC_LAY_FOR(t, (size_t)g.n * g.c * oplane)
    {
        size_t n, c, os;
        ampc_pool_split(&g, t, oplane, &n, &c, &os);
        int o[3] = {(int)(os / ((size_t)g.O[1] * g.O[2])), (int)(os / g.O[2] % g.O[1]),
                    (int)(os % g.O[2])};
        int lo[3], hi[3];
        float div, r;
        ampc_pool_window(&g, o, lo, hi, &div);
        if (g.type == AMPC_POOL_MAX) {
            float m;
            r = ampc_pool_argmax(&g, x, n, c, lo, hi, dt, &m) < 0 ? 0.0f : m;
        } else {
            double s = 0.0;
            for (int i0 = lo[0]; i0 < hi[0]; i0++)
                for (int i1 = lo[1]; i1 < hi[1]; i1++)
                    for (int i2 = lo[2]; i2 < hi[2]; i2++)
                        s += ampc_lay_load(
                            x, ampc_pool_at(&g, n, c, ((size_t)i0 * g.IS[1] + i1) * g.IS[2] + i2, iplane),
                            dt);
            r = (float)(s / div);
        }
        ampc_lay_store(y, ampc_pool_at(&g, n, c, os, oplane), dt, r, 0);
    }
}

/* the outputs along one axis whose (unclipped) window starts at or before
 * i and ends after it: o*S - P <= i < o*S - P + K, within [0, O) */
static inline AMPC_HD void ampc_pool_range(const AmpcPoolGeom *g, int a, int i, int *first,
                                           int *last)
{
    long num = (long)i + g->P[a] - g->K[a] + 1; /* o*S >= num */
    long f = num <= 0 ? 0 : (num + g->S[a] - 1) / g->S[a];
    long l = ((long)i + g->P[a]) / g->S[a];   /* o*S <= i + P */
    if (l > g->O[a] - 1)
        l = g->O[a] - 1;
    *first = (int)f;
    *last = (int)l;
}

/* max's backward, first: every window's argmax (its first maximum's flat
 * in-plane index, -1 when empty), one thread per output */
__global__ void ampc_k_pool_argmax(AmpcPoolGeom g, int dt, ampc_dptr<const void> x,
                                   ampc_dptr<int32_t> arg)
{
    size_t oplane = (size_t)g.O[0] * g.O[1] * g.O[2];
    AMPC_LAY_FOR(t, (size_t)g.n * g.c * oplane)
    {
        size_t n, c, os;
        ampc_pool_split(&g, t, oplane, &n, &c, &os);
        int o[3] = {(int)(os / ((size_t)g.O[1] * g.O[2])), (int)(os / g.O[2] % g.O[1]),
                    (int)(os % g.O[2])};
        int lo[3], hi[3];
        float div, m;
        ampc_pool_window(&g, o, lo, hi, &div);
        arg[ampc_pool_at(&g, n, c, os, oplane)] =
            (int32_t)ampc_pool_argmax(&g, x, n, c, lo, hi, dt, &m);
    }
}

/* the gather: dy of each window that holds this element, max's where the
 * window's argmax (arg) is this element */
__global__ void ampc_k_pool_backward(AmpcPoolGeom g, int dt, ampc_dptr<const int32_t> arg,
                                     ampc_dptr<const void> dy, ampc_dptr<void> dx, int acc)
{
    size_t oplane = (size_t)g.O[0] * g.O[1] * g.O[2], iplane = (size_t)g.IS[0] * g.IS[1] * g.IS[2];
    AMPC_LAY_FOR(t, (size_t)g.n * g.c * iplane)
    {
        size_t n, c, is;
        ampc_pool_split(&g, t, iplane, &n, &c, &is);
        int in[3] = {(int)(is / ((size_t)g.IS[1] * g.IS[2])), (int)(is / g.IS[2] % g.IS[1]),
                     (int)(is % g.IS[2])};
        size_t at = ampc_pool_at(&g, n, c, is, iplane);
        float v = acc ? ampc_lay_load(dx, at, dt) : 0.0f;
        int f[3], l[3];
        for (int a = 0; a < 3; a++)
            ampc_pool_range(&g, a, in[a], &f[a], &l[a]);
        for (int o0 = f[0]; o0 <= l[0]; o0++)
            for (int o1 = f[1]; o1 <= l[1]; o1++)
                for (int o2 = f[2]; o2 <= l[2]; o2++) {
                    int o[3] = {o0, o1, o2}, lo[3], hi[3];
                    float div;
                    ampc_pool_window(&g, o, lo, hi, &div);
                    /* the clipped window must hold this element */
                    if (in[0] < lo[0] || in[0] >= hi[0] || in[1] < lo[1] || in[1] >= hi[1] ||
                        in[2] < lo[2] || in[2] >= hi[2])
                        continue;
                    size_t os = ((size_t)o0 * g.O[1] + o1) * g.O[2] + o2;
                    size_t ot = ampc_pool_at(&g, n, c, os, oplane);
                    float d = ampc_lay_load(dy, ot, dt);
                    if (g.type != AMPC_POOL_MAX)
                        v += d / div;
                    else if (arg[ot] == (int32_t)is)
                        v += d;
                }
        ampc_lay_store(dx, at, dt, v, 0);
    }
}

/* the workspace of the backward: max's argmax, 4 bytes an output */
AMPC_LAY_API size_t ampc_pool_ws_bytes(const AmpcPoolGeom *g, int backward)
{
    if (!backward || g->type != AMPC_POOL_MAX)
        return 0;
    return (size_t)g->n * g->c * g->O[0] * g->O[1] * g->O[2] * sizeof(int32_t);
}

AMPC_LAY_API int ampc_cu_pool_forward(AmpcStream s, const AmpcPoolGeom *g, int dt, const void *x,
                                      void *y)
{
    size_t n = (size_t)g->n * g->c * g->O[0] * g->O[1] * g->O[2];
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_pool_forward, ampc_lay_grid(n), AMPC_LAY_THREADS, s, *g, dt, x, y);
    return AMPC_LAUNCH_ERROR();
}

/* ws: ampc_pool_ws_bytes(g, 1) of device memory (max's argmax) */
AMPC_LAY_API int ampc_cu_pool_backward(AmpcStream s, const AmpcPoolGeom *g, int dt, const void *x,
                                       const void *dy, void *dx, int acc, void *ws)
{
    size_t n = (size_t)g->n * g->c * g->IS[0] * g->IS[1] * g->IS[2];
    size_t no = (size_t)g->n * g->c * g->O[0] * g->O[1] * g->O[2];
    if (n == 0)
        return 0;
    if (g->type == AMPC_POOL_MAX && no > 0) {
        AMPC_LAUNCH(ampc_k_pool_argmax, ampc_lay_grid(no), AMPC_LAY_THREADS, s, *g, dt, x,
                    (int32_t *)ws);
        int e = AMPC_LAUNCH_ERROR();
        if (e)
            return e;
    }
    AMPC_LAUNCH(ampc_k_pool_backward, ampc_lay_grid(n), AMPC_LAY_THREADS, s, *g, dt,
                (const int32_t *)ws, dy, dx, acc);
    return AMPC_LAUNCH_ERROR();
}

#endif /* AMPC_CUDA_POOL_CUH */
