/* reduce.c - softmax and log_softmax along an axis, sum and mean over axes.
 *
 * Softmax works on x viewed as [outer, len, inner] in fp32 with the maximum
 * subtracted; the sum of exponentials accumulates in double.  Contiguous
 * rows (inner = 1) are walked in chunks; otherwise a block of up to
 * RT_CHUNK neighbouring lanes is walked together, one contiguous strip per
 * position along the axis.  sum/mean scatter x into double accumulators of
 * the output's size (the workspace); the backward broadcasts dy back.
 */
#include <math.h>

#include "cpu.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* ---- softmax / log_softmax ---------------------------------------------------- */

/* One contiguous row of len elements starting at off; x in xdt, y in dt
 * (they differ only for SoftmaxOutput reading 16-bit logits, loss.c). */
static void softmax_row(const void *x, RtDType xdt, void *y, size_t off, size_t len, RtDType dt,
                        bool lg)
{
    float xb[RT_CHUNK], yb[RT_CHUNK];
    float mx = -INFINITY;
    for (size_t j = 0; j < len; j += RT_CHUNK) {
        size_t m = MIN(len - j, (size_t)RT_CHUNK);
        const float *v = rt__view(x, off + j, m, xdt, xb);
        for (size_t i = 0; i < m; i++)
            mx = v[i] > mx ? v[i] : mx;
    }
    double s = 0.0;
    for (size_t j = 0; j < len; j += RT_CHUNK) {
        size_t m = MIN(len - j, (size_t)RT_CHUNK);
        const float *v = rt__view(x, off + j, m, xdt, xb);
        for (size_t i = 0; i < m; i++)
            s += (double)expf(v[i] - mx);
    }
    float inv = (float)(1.0 / s), lse = (float)log(s);
    for (size_t j = 0; j < len; j += RT_CHUNK) {
        size_t m = MIN(len - j, (size_t)RT_CHUNK);
        const float *v = rt__view(x, off + j, m, xdt, xb);
        float *r = rt__out(y, off + j, dt, false, yb);
        if (lg)
            for (size_t i = 0; i < m; i++)
                r[i] = v[i] - mx - lse;
        else
            for (size_t i = 0; i < m; i++)
                r[i] = expf(v[i] - mx) * inv;
        rt__commit(y, off + j, r, m, dt, false);
    }
}

/* A block of m lanes (m <= RT_CHUNK): lane i's element l is at
 * off + l*inner + i. */
static void softmax_block(const void *x, RtDType xdt, void *y, size_t off, size_t len,
                          size_t inner, size_t m, RtDType dt, bool lg)
{
    float xb[RT_CHUNK], yb[RT_CHUNK], mx[RT_CHUNK], fac[RT_CHUNK];
    double s[RT_CHUNK];
    for (size_t i = 0; i < m; i++) {
        mx[i] = -INFINITY;
        s[i] = 0.0;
    }
    for (size_t l = 0; l < len; l++) {
        const float *v = rt__view(x, off + l * inner, m, xdt, xb);
        for (size_t i = 0; i < m; i++)
            mx[i] = v[i] > mx[i] ? v[i] : mx[i];
    }
    for (size_t l = 0; l < len; l++) {
        const float *v = rt__view(x, off + l * inner, m, xdt, xb);
        for (size_t i = 0; i < m; i++)
            s[i] += (double)expf(v[i] - mx[i]);
    }
    for (size_t i = 0; i < m; i++)
        fac[i] = lg ? (float)log(s[i]) : (float)(1.0 / s[i]);
    for (size_t l = 0; l < len; l++) {
        size_t o = off + l * inner;
        const float *v = rt__view(x, o, m, xdt, xb);
        float *r = rt__out(y, o, dt, false, yb);
        if (lg)
            for (size_t i = 0; i < m; i++)
                r[i] = v[i] - mx[i] - fac[i];
        else
            for (size_t i = 0; i < m; i++)
                r[i] = expf(v[i] - mx[i]) * fac[i];
        rt__commit(y, o, r, m, dt, false);
    }
}

static void softmax_fwd(int64_t outer, int64_t len, int64_t inner, RtDType xdt, const void *x,
                        RtDType dt, void *y, bool lg)
{
    size_t L = (size_t)len, I = (size_t)inner;
    for (int64_t o = 0; o < outer; o++) {
        size_t base = (size_t)o * L * I;
        if (I == 1)
            softmax_row(x, xdt, y, base, L, dt, lg);
        else
            for (size_t j = 0; j < I; j += RT_CHUNK)
                softmax_block(x, xdt, y, base + j, L, I, MIN(I - j, (size_t)RT_CHUNK), dt, lg);
    }
}

void rt__softmax_rows(int64_t n, int64_t k, RtDType xdt, const void *x, RtDType dt, void *y)
{
    softmax_fwd(n, k, 1, xdt, x, dt, y, false);
}

/* Backward of a block of m lanes (m = 1 with inner = 1 is a plain row, but
 * rows get their own chunked walk below):
 *   softmax      dx = y * (dy - sum(dy*y))
 *   log_softmax  dx = dy - exp(y) * sum(dy) */
static void softmax_bwd_block(const void *y, const void *dy, void *dx, size_t off, size_t len,
                              size_t inner, size_t m, RtDType dt, bool lg, bool acc)
{
    float yb[RT_CHUNK], gb[RT_CHUNK], ob[RT_CHUNK], sf[RT_CHUNK];
    double s[RT_CHUNK];
    for (size_t i = 0; i < m; i++)
        s[i] = 0.0;
    for (size_t l = 0; l < len; l++) {
        const float *g = rt__view(dy, off + l * inner, m, dt, gb);
        if (lg) {
            for (size_t i = 0; i < m; i++)
                s[i] += g[i];
        } else {
            const float *v = rt__view(y, off + l * inner, m, dt, yb);
            for (size_t i = 0; i < m; i++)
                s[i] += (double)(g[i] * v[i]);
        }
    }
    for (size_t i = 0; i < m; i++)
        sf[i] = (float)s[i];
    for (size_t l = 0; l < len; l++) {
        size_t o = off + l * inner;
        const float *g = rt__view(dy, o, m, dt, gb);
        const float *v = rt__view(y, o, m, dt, yb);
        float *r = rt__out(dx, o, dt, acc, ob);
        if (lg)
            for (size_t i = 0; i < m; i++)
                r[i] = g[i] - expf(v[i]) * sf[i];
        else
            for (size_t i = 0; i < m; i++)
                r[i] = v[i] * (g[i] - sf[i]);
        rt__commit(dx, o, r, m, dt, acc);
    }
}

static void softmax_bwd_row(const void *y, const void *dy, void *dx, size_t off, size_t len,
                            RtDType dt, bool lg, bool acc)
{
    float yb[RT_CHUNK], gb[RT_CHUNK], ob[RT_CHUNK];
    double s = 0.0;
    for (size_t j = 0; j < len; j += RT_CHUNK) {
        size_t m = MIN(len - j, (size_t)RT_CHUNK);
        const float *g = rt__view(dy, off + j, m, dt, gb);
        if (lg) {
            for (size_t i = 0; i < m; i++)
                s += g[i];
        } else {
            const float *v = rt__view(y, off + j, m, dt, yb);
            for (size_t i = 0; i < m; i++)
                s += (double)(g[i] * v[i]);
        }
    }
    float sf = (float)s;
    for (size_t j = 0; j < len; j += RT_CHUNK) {
        size_t m = MIN(len - j, (size_t)RT_CHUNK);
        const float *g = rt__view(dy, off + j, m, dt, gb);
        const float *v = rt__view(y, off + j, m, dt, yb);
        float *r = rt__out(dx, off + j, dt, acc, ob);
        if (lg)
            for (size_t i = 0; i < m; i++)
                r[i] = g[i] - expf(v[i]) * sf;
        else
            for (size_t i = 0; i < m; i++)
                r[i] = v[i] * (g[i] - sf);
        rt__commit(dx, off + j, r, m, dt, acc);
    }
}

static void softmax_bwd(int64_t outer, int64_t len, int64_t inner, RtDType dt, const void *y,
                        const void *dy, void *dx, bool lg, bool acc)
{
    size_t L = (size_t)len, I = (size_t)inner;
    for (int64_t o = 0; o < outer; o++) {
        size_t base = (size_t)o * L * I;
        if (I == 1)
            softmax_bwd_row(y, dy, dx, base, L, dt, lg, acc);
        else
            for (size_t j = 0; j < I; j += RT_CHUNK)
                softmax_bwd_block(y, dy, dx, base + j, L, I, MIN(I - j, (size_t)RT_CHUNK), dt,
                                  lg, acc);
    }
}

void rt_softmax_forward(int64_t outer, int64_t len, int64_t inner, RtDType dt, const void *x,
                        void *y)
{
    softmax_fwd(outer, len, inner, dt, x, dt, y, false);
}

void rt_softmax_backward(int64_t outer, int64_t len, int64_t inner, RtDType dt, const void *y,
                         const void *dy, void *dx, bool accumulate)
{
    softmax_bwd(outer, len, inner, dt, y, dy, dx, false, accumulate);
}

void rt_log_softmax_forward(int64_t outer, int64_t len, int64_t inner, RtDType dt,
                            const void *x, void *y)
{
    softmax_fwd(outer, len, inner, dt, x, dt, y, true);
}

void rt_log_softmax_backward(int64_t outer, int64_t len, int64_t inner, RtDType dt,
                             const void *y, const void *dy, void *dx, bool accumulate)
{
    softmax_bwd(outer, len, inner, dt, y, dy, dx, true, accumulate);
}

/* ---- sum / mean ------------------------------------------------------------------ */

/* The reduction as a broadcast: out = x's shape, a = the kept shape (1 on
 * reduced axes); b unused (all 1s). */
static void reduce_view(const RtReduceDims *d, RtBcastDims *b, size_t *nx, size_t *ny)
{
    b->rank = d->rank > 0 ? d->rank : 1;
    *nx = *ny = 1;
    for (int i = 0; i < b->rank; i++) {
        int64_t s = d->rank > 0 ? d->in[i] : 1;
        b->out[i] = s;
        b->a[i] = d->rank > 0 && d->reduce[i] ? 1 : s;
        b->b[i] = 1;
        *nx *= (size_t)s;
        *ny *= (size_t)b->a[i];
    }
}

size_t rt_reduce_workspace_bytes(const RtReduceDims *d, RtDType dt, RtPass pass)
{
    (void)dt;
    if (pass != RT_PASS_FORWARD)
        return 0;
    RtBcastDims b;
    size_t nx, ny, t = 0;
    reduce_view(d, &b, &nx, &ny);
    rt__ws_add(&t, ny * sizeof(double));
    return t;
}

static void reduce_fwd(const RtReduceDims *d, RtDType dt, const void *x, void *y, void *ws,
                       bool mean)
{
    RtBcastDims b;
    size_t nx, ny;
    reduce_view(d, &b, &nx, &ny);
    RtBWalk w;
    rt__bwalk_init(&w, &b);
    char *p = ws;
    double *acc = rt__ws_take(&p, ny * sizeof(double));
    memset(acc, 0, ny * sizeof *acc);
    int64_t rs = w.sa[b.rank - 1];
    float xb[RT_CHUNK];
    for (size_t r = 0; r < w.rows; r++) {
        size_t oa, ob;
        rt__brow(&w, r, &oa, &ob);
        for (size_t j = 0; j < w.len; j += RT_CHUNK) {
            size_t m = MIN(w.len - j, (size_t)RT_CHUNK);
            const float *v = rt__view(x, r * w.len + j, m, dt, xb);
            if (rs) {
                for (size_t i = 0; i < m; i++)
                    acc[oa + j + i] += v[i];
            } else {
                double s = 0.0;
                for (size_t i = 0; i < m; i++)
                    s += v[i];
                acc[oa] += s;
            }
        }
    }
    double scale = mean && ny ? (double)ny / (double)nx : 1.0;
    float buf[RT_CHUNK];
    for (size_t j = 0; j < ny; j += RT_CHUNK) {
        size_t m = MIN(ny - j, (size_t)RT_CHUNK);
        for (size_t i = 0; i < m; i++)
            buf[i] = (float)(acc[j + i] * scale);
        rt__commit(y, j, buf, m, dt, false);
    }
}

static void reduce_bwd(const RtReduceDims *d, RtDType dt, const void *dy, void *dx, bool acc,
                       bool mean)
{
    RtBcastDims b;
    size_t nx, ny;
    reduce_view(d, &b, &nx, &ny);
    RtBWalk w;
    rt__bwalk_init(&w, &b);
    int64_t rs = w.sa[b.rank - 1];
    float scale = mean && nx ? (float)((double)ny / (double)nx) : 1.0f;
    float gb[RT_CHUNK], ob[RT_CHUNK];
    for (size_t r = 0; r < w.rows; r++) {
        size_t oa, ob2;
        rt__brow(&w, r, &oa, &ob2);
        for (size_t j = 0; j < w.len; j += RT_CHUNK) {
            size_t m = MIN(w.len - j, (size_t)RT_CHUNK);
            const float *g = rt__brow_vals(dy, oa + j * (size_t)rs, m, rs, dt, gb);
            float *o = rt__out(dx, r * w.len + j, dt, acc, ob);
            for (size_t i = 0; i < m; i++)
                o[i] = g[i] * scale;
            rt__commit(dx, r * w.len + j, o, m, dt, acc);
        }
    }
}

void rt_sum_forward(const RtReduceDims *d, RtDType dt, const void *x, void *y, void *ws)
{
    reduce_fwd(d, dt, x, y, ws, false);
}

void rt_sum_backward(const RtReduceDims *d, RtDType dt, const void *dy, void *dx,
                     bool accumulate)
{
    reduce_bwd(d, dt, dy, dx, accumulate, false);
}

void rt_mean_forward(const RtReduceDims *d, RtDType dt, const void *x, void *y, void *ws)
{
    reduce_fwd(d, dt, x, y, ws, true);
}

void rt_mean_backward(const RtReduceDims *d, RtDType dt, const void *dy, void *dx,
                      bool accumulate)
{
    reduce_bwd(d, dt, dy, dx, accumulate, true);
}
