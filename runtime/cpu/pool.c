/* pool.c - Pooling (max, avg, sum; valid/full conventions; global), 1-D to 3-D.
 *
 * MXNet's window rules (src/operator/nn/pool.h): a window starts at
 * o*stride - pad and ends kernel later, but not past in + pad; avg divides
 * by that (padded) window size when count_include_pad, else by the window
 * clipped to the input; max takes the first maximum of the clipped window
 * (an empty window, possible only with the full convention and stride >
 * kernel, gives 0).  Sums accumulate in double, so global average pooling
 * over 16-bit data loses nothing before the single rounding of the result.
 * 16-bit planes are widened into the workspace, one (n, c) plane at a time
 * per thread; the threads share the planes out (see "threads" below).
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

/* ---- threads ----
 * The (n, c) planes are independent (a window never leaves its plane), so
 * the threads take pieces of consecutive planes as they come free and each
 * plane is computed as on one thread: the bits do not depend on the thread
 * count.  16-bit planes are widened into per-thread scratch, one set per
 * thread the kernels may use (rt__threads(), read by the query and the
 * kernels alike, so the workspace stays as sized). */
static int pool_threads(void) { return rt__threads(); }

/* one thread's scratch: x plane (forward, max backward), y or dy plane, dx
 * plane (backward) */
static size_t scratch_bytes(const PGeom *g)
{
    size_t t = 0;
    rt__ws_add(&t, g->in * sizeof(float));
    rt__ws_add(&t, g->out * sizeof(float));
    rt__ws_add(&t, g->in * sizeof(float));
    return t;
}

static size_t nhwc_ws_bytes(const RtPoolDims *d, RtDType dt, RtPass pass);

size_t rt_pool_workspace_bytes(const RtPoolDims *d, RtDType dt, RtPass pass)
{
    if (d->layout == RT_LAYOUT_NHWC)
        return nhwc_ws_bytes(d, dt, pass);
    if (dt == RT_F32)
        return 0;
    PGeom g;
    pgeom(d, &g);
    return scratch_bytes(&g) * (size_t)pool_threads();
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

typedef struct {
    const RtPoolDims *d;
    PGeom g;
    RtDType dt;
    const void *x, *dy;
    void *y; /* y (forward) or dx (backward) */
    char *ws;
    bool backward, acc;
    size_t planes, piece;
    size_t next; /* the next plane (threads take pieces as they come free) */
} PoolJob;

static void fwd_plane(const PGeom *g, const RtPoolDims *d, const float *xp, float *yp)
{
    size_t oi = 0;
    for (int o0 = 0; o0 < g->O[0]; o0++)
        for (int o1 = 0; o1 < g->O[1]; o1++)
            for (int o2 = 0; o2 < g->O[2]; o2++, oi++) {
                Win w;
                window(g, d, o0, o1, o2, &w);
                if (d->type == RT_POOL_MAX) {
                    float m = -INFINITY;
                    bool any = false;
                    FOR_WINDOW(*g, w, i) {
                        any = true;
                        if (xp[i] > m)
                            m = xp[i];
                    }
                    yp[oi] = any ? m : 0.0f;
                } else {
                    double s = 0.0;
                    FOR_WINDOW(*g, w, i) s += xp[i];
                    yp[oi] = (float)(s / w.div);
                }
            }
}

/* dxp += the gradient of one plane (xp read by max only) */
static void bwd_plane(const PGeom *g, const RtPoolDims *d, const float *xp, const float *dyp,
                      float *dxp)
{
    size_t oi = 0;
    for (int o0 = 0; o0 < g->O[0]; o0++)
        for (int o1 = 0; o1 < g->O[1]; o1++)
            for (int o2 = 0; o2 < g->O[2]; o2++, oi++) {
                Win w;
                window(g, d, o0, o1, o2, &w);
                if (d->type == RT_POOL_MAX) {
                    float m = -INFINITY;
                    size_t best = SIZE_MAX;
                    FOR_WINDOW(*g, w, i) {
                        if (best == SIZE_MAX || xp[i] > m) {
                            m = xp[i];
                            best = i;
                        }
                    }
                    if (best != SIZE_MAX)
                        dxp[best] += dyp[oi];
                } else {
                    float v = dyp[oi] / w.div;
                    FOR_WINDOW(*g, w, i) dxp[i] += v;
                }
            }
}

static void fwd_planes(const PoolJob *j, char *scratch, size_t lo, size_t hi)
{
    const PGeom *g = &j->g;
    bool half = j->dt != RT_F32;
    size_t esz = rt_dtype_size(j->dt);
    char *p = scratch;
    float *xbuf = half ? rt__ws_take(&p, g->in * sizeof(float)) : NULL;
    float *ybuf = half ? rt__ws_take(&p, g->out * sizeof(float)) : NULL;
    for (size_t pl = lo; pl < hi; pl++) {
        const float *xp;
        float *yp;
        if (half) {
            rt_to_f32(xbuf, (const char *)j->x + pl * g->in * esz, g->in, j->dt);
            xp = xbuf;
            yp = ybuf;
        } else {
            xp = (const float *)j->x + pl * g->in;
            yp = (float *)j->y + pl * g->out;
        }
        fwd_plane(g, j->d, xp, yp);
        if (half)
            rt_from_f32((char *)j->y + pl * g->out * esz, ybuf, g->out, j->dt);
    }
}

static void bwd_planes(const PoolJob *j, char *scratch, size_t lo, size_t hi)
{
    const PGeom *g = &j->g;
    bool half = j->dt != RT_F32, max = j->d->type == RT_POOL_MAX;
    size_t esz = rt_dtype_size(j->dt);
    char *p = scratch;
    float *xbuf = half ? rt__ws_take(&p, g->in * sizeof(float)) : NULL;
    float *dybuf = half ? rt__ws_take(&p, g->out * sizeof(float)) : NULL;
    float *dxbuf = half ? rt__ws_take(&p, g->in * sizeof(float)) : NULL;
    for (size_t pl = lo; pl < hi; pl++) {
        const float *xp = NULL, *dyp;
        float *dxp;
        char *dx = (char *)j->y + pl * g->in * esz;
        if (half) {
            if (max) {
                rt_to_f32(xbuf, (const char *)j->x + pl * g->in * esz, g->in, j->dt);
                xp = xbuf;
            }
            rt_to_f32(dybuf, (const char *)j->dy + pl * g->out * esz, g->out, j->dt);
            dyp = dybuf;
            dxp = dxbuf;
            if (j->acc)
                rt_to_f32(dxp, dx, g->in, j->dt);
        } else {
            if (max)
                xp = (const float *)j->x + pl * g->in;
            dyp = (const float *)j->dy + pl * g->out;
            dxp = (float *)dx;
        }
        if (!j->acc)
            memset(dxp, 0, g->in * sizeof *dxp);
        bwd_plane(g, j->d, xp, dyp, dxp);
        if (half)
            rt_from_f32(dx, dxp, g->in, j->dt);
    }
}

static void pool_job(void *arg, int tid, int nt)
{
    (void)nt;
    PoolJob *j = arg;
    char *scratch = j->ws ? j->ws + (size_t)tid * scratch_bytes(&j->g) : NULL;
    for (;;) {
        size_t lo = __atomic_fetch_add(&j->next, j->piece, __ATOMIC_RELAXED);
        if (lo >= j->planes)
            return;
        size_t hi = lo + j->piece < j->planes ? lo + j->piece : j->planes;
        if (j->backward)
            bwd_planes(j, scratch, lo, hi);
        else
            fwd_planes(j, scratch, lo, hi);
    }
}

/* About four pieces per thread; one thread when the work (every window
 * element read once, roughly in + out per plane) is small. */
static void pool_run(PoolJob *j)
{
    j->planes = (size_t)j->d->n * (size_t)j->d->c;
    int nt = pool_threads();
    size_t work = j->planes * (j->g.in + j->g.out);
    if ((size_t)nt > work / RT_PAR_MIN)
        nt = (int)(work / RT_PAR_MIN);
    if ((size_t)nt > j->planes)
        nt = (int)j->planes;
    if (nt < 1)
        nt = 1;
    j->piece = (j->planes + 4 * (size_t)nt - 1) / (4 * (size_t)nt);
    j->next = 0;
    rt__parallel(nt, pool_job, j);
}

/* ---- NHWC: x, y [n, spatial..., c] ----
 * As conv.c: NCHW copies carved after the NCHW kernel's workspace
 * ([its workspace][x][y] forward, [its workspace][x][dy][dx] backward), the
 * NCHW kernel, the result converted back; the bits are the NCHW kernel's. */
static size_t psp(const RtPoolDims *d, const int *v)
{
    size_t p = 1;
    for (int a = 0; a < d->nsp; a++)
        p *= (size_t)v[a];
    return p;
}

static RtPoolDims pool_nchw(const RtPoolDims *d)
{
    RtPoolDims c = *d;
    c.layout = RT_LAYOUT_NCHW;
    return c;
}

static size_t nhwc_ws_bytes(const RtPoolDims *d, RtDType dt, RtPass pass)
{
    RtPoolDims c = pool_nchw(d);
    size_t t = rt__round(rt_pool_workspace_bytes(&c, dt, pass));
    size_t nc = (size_t)d->n * (size_t)d->c;
    rt__nhwc_add(&t, nc, psp(d, d->in), dt);
    rt__nhwc_add(&t, nc, psp(d, d->out), dt);
    if (pass != RT_PASS_FORWARD)
        rt__nhwc_add(&t, nc, psp(d, d->in), dt);
    return t;
}

/* NCHW copies: p[0] x, p[1] y or dy, p[2] dx (backward) */
static void nhwc_carve(const RtPoolDims *d, RtDType dt, RtPass pass, void *ws, void *p[3])
{
    RtPoolDims c = pool_nchw(d);
    char *q = (char *)ws + rt__round(rt_pool_workspace_bytes(&c, dt, pass));
    size_t nc = (size_t)d->n * (size_t)d->c, esz = rt_dtype_size(dt);
    p[0] = rt__ws_take(&q, nc * psp(d, d->in) * esz);
    p[1] = rt__ws_take(&q, nc * psp(d, d->out) * esz);
    p[2] = pass == RT_PASS_FORWARD ? NULL : rt__ws_take(&q, nc * psp(d, d->in) * esz);
}

static void nhwc_convert(const RtPoolDims *d, RtDType dt, const int *sp, const void *src,
                         void *dst, RtLayout to)
{
    rt_layout_convert(d->n, d->c, (int64_t)psp(d, sp), dt, src, dst, to);
}

static void nhwc_forward(const RtPoolDims *d, RtDType dt, const void *x, void *y, void *ws)
{
    RtPoolDims c = pool_nchw(d);
    void *p[3];
    nhwc_carve(d, dt, RT_PASS_FORWARD, ws, p);
    nhwc_convert(d, dt, d->in, x, p[0], RT_LAYOUT_NCHW);
    rt_pool_forward(&c, dt, p[0], p[1], ws);
    nhwc_convert(d, dt, d->out, p[1], y, RT_LAYOUT_NHWC);
}

static void nhwc_backward(const RtPoolDims *d, RtDType dt, const void *x, const void *dy,
                          void *dx, bool accumulate, void *ws)
{
    RtPoolDims c = pool_nchw(d);
    void *p[3];
    nhwc_carve(d, dt, RT_PASS_BACKWARD, ws, p);
    if (x) /* avg and sum do not read it */
        nhwc_convert(d, dt, d->in, x, p[0], RT_LAYOUT_NCHW);
    nhwc_convert(d, dt, d->out, dy, p[1], RT_LAYOUT_NCHW);
    if (accumulate)
        nhwc_convert(d, dt, d->in, dx, p[2], RT_LAYOUT_NCHW);
    rt_pool_backward(&c, dt, x ? p[0] : NULL, p[1], p[2], accumulate, ws);
    nhwc_convert(d, dt, d->in, p[2], dx, RT_LAYOUT_NHWC);
}

void rt_pool_forward(const RtPoolDims *d, RtDType dt, const void *x, void *y, void *ws)
{
    if (d->layout == RT_LAYOUT_NHWC) {
        nhwc_forward(d, dt, x, y, ws);
        return;
    }
    PoolJob j = {.d = d, .dt = dt, .x = x, .y = y, .ws = ws};
    pgeom(d, &j.g);
    pool_run(&j);
}

void rt_pool_backward(const RtPoolDims *d, RtDType dt, const void *x, const void *dy, void *dx,
                      bool accumulate, void *ws)
{
    if (d->layout == RT_LAYOUT_NHWC) {
        nhwc_backward(d, dt, x, dy, dx, accumulate, ws);
        return;
    }
    PoolJob j = {.d = d, .dt = dt, .x = x, .dy = dy, .y = dx, .ws = ws, .backward = true,
                 .acc = accumulate};
    pgeom(d, &j.g);
    pool_run(&j);
}
