/* pool.c - Pooling (max, avg, sum; valid/full conventions; global), 1-D to 3-D.
 *
 * MXNet's window rules (src/operator/nn/pool.h): a window starts at
 * o*stride - pad and ends kernel later, but not past in + pad; avg divides
 * by that (padded) window size when count_include_pad, else by the window
 * clipped to the input; max takes the first maximum of the clipped window
 * (an empty window, possible only with the full convention and stride >
 * kernel, gives 0).  Sums accumulate in double, so global average pooling
 * over 16-bit data loses nothing before the single rounding of the result.
 * 16-bit planes are widened into the workspace, one (n, c) plane at a time.
 */
#include <math.h>

#include "cpu.h"

typedef struct {
    int IS[3], K[3], S[3], P[3], O[3];
    size_t in, out;
} PGeom;

static void pgeom(const RtPoolDims *d, PGeom *g)
{
    int off = 3 - d->nsp;
    g->in = g->out = 1;
    for (int a = 0; a < 3; a++) {
        bool real = a >= off;
        g->IS[a] = real ? d->in[a - off] : 1;
        g->K[a] = real ? d->kernel[a - off] : 1;
        g->S[a] = real ? d->stride[a - off] : 1;
        g->P[a] = real ? d->pad[a - off] : 0;
        g->O[a] = real ? d->out[a - off] : 1;
        g->in *= (size_t)g->IS[a];
        g->out *= (size_t)g->O[a];
    }
}

bool rt_pool_dims_init(RtPoolDims *d)
{
    if (d->nsp < 1 || d->nsp > RT_MAX_SPATIAL || d->n < 1 || d->c < 1)
        return false;
    for (int a = 0; a < RT_MAX_SPATIAL; a++) {
        if (a >= d->nsp) {
            d->in[a] = d->kernel[a] = d->stride[a] = d->out[a] = 1;
            d->pad[a] = 0;
            continue;
        }
        if (d->in[a] < 1)
            return false;
        if (d->global) {
            d->kernel[a] = d->in[a];
            d->stride[a] = 1;
            d->pad[a] = 0;
        }
        if (d->kernel[a] < 1 || d->stride[a] < 1 || d->pad[a] < 0)
            return false;
        long span = (long)d->in[a] + 2L * d->pad[a] - d->kernel[a];
        if (span < 0)
            return false;
        d->out[a] = (int)((d->full_convention ? (span + d->stride[a] - 1) / d->stride[a]
                                              : span / d->stride[a]) + 1);
    }
    return true;
}

size_t rt_pool_workspace_bytes(const RtPoolDims *d, RtDType dt, RtPass pass)
{
    (void)pass;
    if (dt == RT_F32)
        return 0;
    PGeom g;
    pgeom(d, &g);
    size_t t = 0;
    rt__ws_add(&t, g.in * sizeof(float));  /* x plane (forward, max backward) */
    rt__ws_add(&t, g.out * sizeof(float)); /* y or dy plane */
    rt__ws_add(&t, g.in * sizeof(float));  /* dx plane (backward) */
    return t;
}

/* One window: the clipped bounds lo/hi per axis and the divisor for avg. */
typedef struct {
    int lo[3], hi[3];
    float div;
} Win;

static void window(const PGeom *g, const RtPoolDims *d, int o0, int o1, int o2, Win *w)
{
    int o[3] = {o0, o1, o2};
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
        w->lo[a] = (int)s;
        w->hi[a] = (int)e;
    }
    w->div = d->type == RT_POOL_SUM ? 1.0f
           : (float)(d->count_include_pad ? padded : (clipped > 0 ? clipped : 1));
}

#define FOR_WINDOW(g, w, idx)                                                         \
    for (int i0 = (w).lo[0]; i0 < (w).hi[0]; i0++)                                    \
        for (int i1 = (w).lo[1]; i1 < (w).hi[1]; i1++)                                \
            for (size_t idx = ((size_t)i0 * (g).IS[1] + i1) * (g).IS[2] + (w).lo[2],    \
                        end_ = idx + (size_t)((w).hi[2] - (w).lo[2]);                 \
                 idx < end_; idx++)

void rt_pool_forward(const RtPoolDims *d, RtDType dt, const void *x, void *y, void *ws)
{
    PGeom g;
    pgeom(d, &g);
    bool half = dt != RT_F32;
    char *p = ws;
    float *xbuf = half ? rt__ws_take(&p, g.in * sizeof(float)) : NULL;
    float *ybuf = half ? rt__ws_take(&p, g.out * sizeof(float)) : NULL;
    size_t esz = rt_dtype_size(dt);
    for (size_t pl = 0; pl < (size_t)d->n * d->c; pl++) {
        const float *xp;
        float *yp;
        if (half) {
            rt_to_f32(xbuf, (const char *)x + pl * g.in * esz, g.in, dt);
            xp = xbuf;
            yp = ybuf;
        } else {
            xp = (const float *)x + pl * g.in;
            yp = (float *)y + pl * g.out;
        }
        size_t oi = 0;
        for (int o0 = 0; o0 < g.O[0]; o0++)
            for (int o1 = 0; o1 < g.O[1]; o1++)
                for (int o2 = 0; o2 < g.O[2]; o2++, oi++) {
                    Win w;
                    window(&g, d, o0, o1, o2, &w);
                    if (d->type == RT_POOL_MAX) {
                        float m = -INFINITY;
                        bool any = false;
                        FOR_WINDOW(g, w, i) {
                            any = true;
                            if (xp[i] > m)
                                m = xp[i];
                        }
                        yp[oi] = any ? m : 0.0f;
                    } else {
                        double s = 0.0;
                        FOR_WINDOW(g, w, i) s += xp[i];
                        yp[oi] = (float)(s / w.div);
                    }
                }
        if (half)
            rt_from_f32((char *)y + pl * g.out * esz, ybuf, g.out, dt);
    }
}

void rt_pool_backward(const RtPoolDims *d, RtDType dt, const void *x, const void *dy, void *dx,
                      bool accumulate, void *ws)
{
    PGeom g;
    pgeom(d, &g);
    bool half = dt != RT_F32, max = d->type == RT_POOL_MAX;
    char *p = ws;
    float *xbuf = half ? rt__ws_take(&p, g.in * sizeof(float)) : NULL;
    float *dybuf = half ? rt__ws_take(&p, g.out * sizeof(float)) : NULL;
    float *dxbuf = half ? rt__ws_take(&p, g.in * sizeof(float)) : NULL;
    size_t esz = rt_dtype_size(dt);
    for (size_t pl = 0; pl < (size_t)d->n * d->c; pl++) {
        const float *xp = NULL, *dyp;
        float *dxp;
        if (half) {
            if (max) {
                rt_to_f32(xbuf, (const char *)x + pl * g.in * esz, g.in, dt);
                xp = xbuf;
            }
            rt_to_f32(dybuf, (const char *)dy + pl * g.out * esz, g.out, dt);
            dyp = dybuf;
            dxp = dxbuf;
            if (accumulate)
                rt_to_f32(dxp, (const char *)dx + pl * g.in * esz, g.in, dt);
        } else {
            if (max)
                xp = (const float *)x + pl * g.in;
            dyp = (const float *)dy + pl * g.out;
            dxp = (float *)dx + pl * g.in;
        }
        if (!accumulate)
            memset(dxp, 0, g.in * sizeof *dxp);
        size_t oi = 0;
        for (int o0 = 0; o0 < g.O[0]; o0++)
            for (int o1 = 0; o1 < g.O[1]; o1++)
                for (int o2 = 0; o2 < g.O[2]; o2++, oi++) {
                    Win w;
                    window(&g, d, o0, o1, o2, &w);
                    if (max) {
                        float m = -INFINITY;
                        size_t best = SIZE_MAX;
                        FOR_WINDOW(g, w, i) {
                            if (best == SIZE_MAX || xp[i] > m) {
                                m = xp[i];
                                best = i;
                            }
                        }
                        if (best != SIZE_MAX)
                            dxp[best] += dyp[oi];
                    } else {
                        float v = dyp[oi] / w.div;
                        FOR_WINDOW(g, w, i) dxp[i] += v;
                    }
                }
        if (half)
            rt_from_f32((char *)dx + pl * g.in * esz, dxp, g.in, dt);
    }
}
