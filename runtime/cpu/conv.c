/* conv.c - Convolution, 1-D to 3-D, by im2col and cblas_sgemm.
 *
 * Per sample and group g (Cg = c/groups input channels, Kg = k/groups
 * filters, KK kernel taps, OUT output positions):
 *   forward          y_g [Kg, OUT]    = W_g [Kg, Cg*KK] . col [Cg*KK, OUT] (+ bias)
 *   backward data    col              = W_g^T . dy_g, scattered back by col2im
 *   backward weight  dW_g [Kg, Cg*KK] += dy_g . col^T, summed over the batch
 * col is the im2col matrix of the sample's group channels.  A pointwise
 * convolution (1x1, stride 1, no pad) needs no im2col: col is the input.
 * 16-bit tensors are widened (im2col converts while it gathers), the GEMMs
 * run in fp32 and the results are rounded once.  Spatial axes are handled
 * as three, padded in front with size-1 axes, so 1-D, 2-D and 3-D share the
 * code and the innermost loop runs along the last real axis.
 */
#include <cblas.h>

#include "cpu.h"

/* Geometry with three spatial axes (dummies first). */
typedef struct {
    int IS[3], K[3], S[3], P[3], D[3], O[3];
    size_t in, out, kk;   /* products of I, O, K */
    int cg, kg;           /* channels and filters per group */
    bool pointwise;       /* 1x1, stride 1, pad 0: col == input */
} Geom;

static void geom(const RtConvDims *d, Geom *g)
{
    int off = 3 - d->nsp;
    g->in = g->out = g->kk = 1;
    g->pointwise = true;
    for (int a = 0; a < 3; a++) {
        bool real = a >= off;
        g->IS[a] = real ? d->in[a - off] : 1;
        g->K[a] = real ? d->kernel[a - off] : 1;
        g->S[a] = real ? d->stride[a - off] : 1;
        g->P[a] = real ? d->pad[a - off] : 0;
        g->D[a] = real ? d->dilate[a - off] : 1;
        g->O[a] = real ? d->out[a - off] : 1;
        g->in *= (size_t)g->IS[a];
        g->out *= (size_t)g->O[a];
        g->kk *= (size_t)g->K[a];
        g->pointwise &= g->K[a] == 1 && g->S[a] == 1 && g->P[a] == 0;
    }
    g->cg = d->c / d->groups;
    g->kg = d->k / d->groups;
}

bool rt_conv_dims_init(RtConvDims *d)
{
    if (d->nsp < 1 || d->nsp > RT_MAX_SPATIAL || d->n < 1 || d->c < 1 || d->k < 1 ||
        d->groups < 1 || d->c % d->groups || d->k % d->groups)
        return false;
    for (int a = 0; a < RT_MAX_SPATIAL; a++) {
        if (a >= d->nsp) {
            d->in[a] = d->kernel[a] = d->stride[a] = d->dilate[a] = d->out[a] = 1;
            d->pad[a] = 0;
            continue;
        }
        if (d->in[a] < 1 || d->kernel[a] < 1 || d->stride[a] < 1 || d->pad[a] < 0 ||
            d->dilate[a] < 1)
            return false;
        long span = (long)d->dilate[a] * (d->kernel[a] - 1) + 1;
        long room = (long)d->in[a] + 2L * d->pad[a];
        if (room < span)
            return false;
        d->out[a] = (int)((room - span) / d->stride[a] + 1);
    }
    return true;
}

/* ceil(a / b) for b > 0 and any a */
static inline long ceil_div(long a, long b) { return a <= 0 ? -((-a) / b) : (a + b - 1) / b; }

/* The output positions o in [lo, hi) along axis a whose input o*S - P + k*D
 * lies inside [0, I). */
static inline void valid_range(const Geom *g, int a, int k, int *lo, int *hi)
{
    long first = (long)g->P[a] - (long)k * g->D[a];
    long l = ceil_div(first, g->S[a]);
    long h = ceil_div((long)g->IS[a] + first, g->S[a]);
    l = l < 0 ? 0 : l > g->O[a] ? g->O[a] : l;
    h = h < l ? l : h > g->O[a] ? g->O[a] : h;
    *lo = (int)l;
    *hi = (int)h;
}

/* dst[j] = src[start + j*stride] widened, j < cnt */
static void load_strided(float *dst, const void *src, size_t start, int stride, int cnt,
                         RtDType dt)
{
    switch (dt) {
    case RT_F32: {
        const float *s = (const float *)src + start;
        if (stride == 1)
            memcpy(dst, s, (size_t)cnt * sizeof *dst);
        else
            for (int j = 0; j < cnt; j++)
                dst[j] = s[(size_t)j * stride];
        return;
    }
    case RT_F16: {
        const ampc_half *s = (const ampc_half *)src + start;
        for (int j = 0; j < cnt; j++)
            dst[j] = ampc_half_to_float(s[(size_t)j * stride]);
        return;
    }
    case RT_BF16: {
        const ampc_bf16 *s = (const ampc_bf16 *)src + start;
        for (int j = 0; j < cnt; j++)
            dst[j] = ampc_bf16_to_float(s[(size_t)j * stride]);
        return;
    }
    }
}

/* col [cg*KK, OUT] from the cg channels of x starting at element xoff. */
static void im2col(const Geom *g, const void *x, size_t xoff, RtDType dt, float *col)
{
    const int O1 = g->O[1], O2 = g->O[2];
    size_t row = 0;
    for (int c = 0; c < g->cg; c++)
        for (int k0 = 0; k0 < g->K[0]; k0++)
            for (int k1 = 0; k1 < g->K[1]; k1++)
                for (int k2 = 0; k2 < g->K[2]; k2++, row++) {
                    float *dst = col + row * g->out;
                    int lo, hi;
                    valid_range(g, 2, k2, &lo, &hi);
                    long i2first = (long)lo * g->S[2] - g->P[2] + (long)k2 * g->D[2];
                    for (int o0 = 0; o0 < g->O[0]; o0++) {
                        long i0 = (long)o0 * g->S[0] - g->P[0] + (long)k0 * g->D[0];
                        for (int o1 = 0; o1 < O1; o1++) {
                            float *drow = dst + ((size_t)o0 * O1 + o1) * O2;
                            long i1 = (long)o1 * g->S[1] - g->P[1] + (long)k1 * g->D[1];
                            if (i0 < 0 || i0 >= g->IS[0] || i1 < 0 || i1 >= g->IS[1] ||
                                lo >= hi) {
                                memset(drow, 0, (size_t)O2 * sizeof *drow);
                                continue;
                            }
                            size_t base =
                                xoff + (((size_t)c * g->IS[0] + i0) * g->IS[1] + i1) * g->IS[2];
                            memset(drow, 0, (size_t)lo * sizeof *drow);
                            load_strided(drow + lo, x, base + (size_t)i2first, g->S[2], hi - lo,
                                         dt);
                            memset(drow + hi, 0, (size_t)(O2 - hi) * sizeof *drow);
                        }
                    }
                }
}

/* dx [cg, in] += col scattered back (the adjoint of im2col). */
static void col2im(const Geom *g, const float *col, float *dx)
{
    const int O1 = g->O[1], O2 = g->O[2];
    size_t row = 0;
    for (int c = 0; c < g->cg; c++)
        for (int k0 = 0; k0 < g->K[0]; k0++)
            for (int k1 = 0; k1 < g->K[1]; k1++)
                for (int k2 = 0; k2 < g->K[2]; k2++, row++) {
                    const float *src = col + row * g->out;
                    int lo, hi;
                    valid_range(g, 2, k2, &lo, &hi);
                    if (lo >= hi)
                        continue;
                    long i2first = (long)lo * g->S[2] - g->P[2] + (long)k2 * g->D[2];
                    for (int o0 = 0; o0 < g->O[0]; o0++) {
                        long i0 = (long)o0 * g->S[0] - g->P[0] + (long)k0 * g->D[0];
                        if (i0 < 0 || i0 >= g->IS[0])
                            continue;
                        for (int o1 = 0; o1 < O1; o1++) {
                            long i1 = (long)o1 * g->S[1] - g->P[1] + (long)k1 * g->D[1];
                            if (i1 < 0 || i1 >= g->IS[1])
                                continue;
                            const float *srow = src + ((size_t)o0 * O1 + o1) * O2;
                            float *drow = dx + (((size_t)c * g->IS[0] + i0) * g->IS[1] + i1) *
                                                   g->IS[2] + i2first;
                            int s = g->S[2];
                            for (int o2 = lo; o2 < hi; o2++)
                                drow[(size_t)(o2 - lo) * s] += srow[o2];
                        }
                    }
                }
}

size_t rt_conv_workspace_bytes(const RtConvDims *d, RtDType dt, RtPass pass)
{
    Geom g;
    geom(d, &g);
    bool half = dt != RT_F32;
    size_t t = 0, f = sizeof(float);
    size_t wn = (size_t)d->k * g.cg * g.kk;
    size_t coln = (size_t)g.cg * g.kk * g.out;
    switch (pass) {
    case RT_PASS_FORWARD:
        if (!(g.pointwise && !half))
            rt__ws_add(&t, coln * f);
        if (half) {
            rt__ws_add(&t, wn * f);
            rt__ws_add(&t, (size_t)d->k * g.out * f);
            rt__ws_add(&t, (size_t)d->k * f);
        }
        break;
    case RT_PASS_BACKWARD:
        if (!g.pointwise)
            rt__ws_add(&t, coln * f);
        if (half) {
            rt__ws_add(&t, wn * f);
            rt__ws_add(&t, (size_t)d->k * g.out * f);
            rt__ws_add(&t, (size_t)d->c * g.in * f);
        }
        break;
    case RT_PASS_BACKWARD_WEIGHT:
        if (!(g.pointwise && !half))
            rt__ws_add(&t, coln * f);
        if (half) {
            rt__ws_add(&t, (size_t)d->k * g.out * f);
            rt__ws_add(&t, wn * f);
        }
        rt__ws_add(&t, (size_t)d->k * sizeof(double));
        break;
    }
    return t;
}

void rt_conv_forward(const RtConvDims *d, RtDType dt, const void *x, const void *w,
                     const void *bias, void *y, void *ws)
{
    Geom g;
    geom(d, &g);
    bool half = dt != RT_F32;
    char *p = ws;
    size_t ckk = (size_t)g.cg * g.kk;
    float *col = g.pointwise && !half ? NULL : rt__ws_take(&p, ckk * g.out * sizeof(float));
    const float *w32 = rt__whole_view(w, (size_t)d->k * ckk, dt, &p);
    float *y32buf = half ? rt__ws_take(&p, (size_t)d->k * g.out * sizeof(float)) : NULL;
    const float *b32 = bias ? rt__whole_view(bias, (size_t)d->k, dt, &p) : NULL;

    for (int n = 0; n < d->n; n++) {
        float *y32 = half ? y32buf : (float *)y + (size_t)n * d->k * g.out;
        if (b32)
            for (int k = 0; k < d->k; k++)
                for (size_t o = 0; o < g.out; o++)
                    y32[(size_t)k * g.out + o] = b32[k];
        for (int gi = 0; gi < d->groups; gi++) {
            size_t xoff = ((size_t)n * d->c + (size_t)gi * g.cg) * g.in;
            const float *b;
            if (col) {
                im2col(&g, x, xoff, dt, col);
                b = col;
            } else {
                b = (const float *)x + xoff;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.kg, (int)g.out, (int)ckk,
                        1.0f, w32 + (size_t)gi * g.kg * ckk, (int)ckk, b, (int)g.out,
                        b32 ? 1.0f : 0.0f, y32 + (size_t)gi * g.kg * g.out, (int)g.out);
        }
        if (half)
            rt_from_f32((char *)y + (size_t)n * d->k * g.out * 2, y32, (size_t)d->k * g.out, dt);
    }
}

void rt_conv_backward_data(const RtConvDims *d, RtDType dt, const void *w, const void *dy,
                           void *dx, bool accumulate, void *ws)
{
    Geom g;
    geom(d, &g);
    bool half = dt != RT_F32;
    char *p = ws;
    size_t ckk = (size_t)g.cg * g.kk;
    size_t esz = rt_dtype_size(dt);
    float *col = g.pointwise ? NULL : rt__ws_take(&p, ckk * g.out * sizeof(float));
    const float *w32 = rt__whole_view(w, (size_t)d->k * ckk, dt, &p);
    float *dy32buf = half ? rt__ws_take(&p, (size_t)d->k * g.out * sizeof(float)) : NULL;
    float *dx32buf = half ? rt__ws_take(&p, (size_t)d->c * g.in * sizeof(float)) : NULL;
    size_t xn = (size_t)d->c * g.in, yn = (size_t)d->k * g.out;

    for (int n = 0; n < d->n; n++) {
        const float *dy32;
        if (half) {
            rt_to_f32(dy32buf, (const char *)dy + n * yn * esz, yn, dt);
            dy32 = dy32buf;
        } else {
            dy32 = (const float *)dy + n * yn;
        }
        /* dx32 holds the old gradient (or 0) unless a pointwise fp32 GEMM
         * writes it with beta = 0 */
        float *dx32 = half ? dx32buf : (float *)dx + n * xn;
        bool beta0 = !half && !accumulate && g.pointwise;
        if (half && accumulate)
            rt_to_f32(dx32, (const char *)dx + n * xn * esz, xn, dt);
        else if (!accumulate && !beta0)
            memset(dx32, 0, xn * sizeof *dx32);
        for (int gi = 0; gi < d->groups; gi++) {
            const float *wg = w32 + (size_t)gi * g.kg * ckk;
            const float *dyg = dy32 + (size_t)gi * g.kg * g.out;
            float *dxg = dx32 + (size_t)gi * g.cg * g.in;
            if (g.pointwise) {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, g.cg, (int)g.out, g.kg,
                            1.0f, wg, (int)ckk, dyg, (int)g.out, beta0 ? 0.0f : 1.0f, dxg,
                            (int)g.out);
            } else {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ckk, (int)g.out, g.kg,
                            1.0f, wg, (int)ckk, dyg, (int)g.out, 0.0f, col, (int)g.out);
                col2im(&g, col, dxg);
            }
        }
        if (half)
            rt_from_f32((char *)dx + n * xn * esz, dx32, xn, dt);
    }
}

void rt_conv_backward_weight(const RtConvDims *d, RtDType dt, const void *x, const void *dy,
                             void *dw, void *dbias, bool accumulate, void *ws)
{
    Geom g;
    geom(d, &g);
    bool half = dt != RT_F32;
    char *p = ws;
    size_t ckk = (size_t)g.cg * g.kk;
    size_t esz = rt_dtype_size(dt);
    size_t wn = (size_t)d->k * ckk, yn = (size_t)d->k * g.out;
    float *col = g.pointwise && !half ? NULL : rt__ws_take(&p, ckk * g.out * sizeof(float));
    float *dy32buf = half ? rt__ws_take(&p, yn * sizeof(float)) : NULL;
    float *dw32 = half ? rt__ws_take(&p, wn * sizeof(float)) : dw;
    double *bsum = rt__ws_take(&p, (size_t)d->k * sizeof(double));

    /* 16-bit: dw32 starts as the old gradient or 0 and every GEMM adds */
    bool add = accumulate;
    if (half) {
        if (accumulate)
            rt_to_f32(dw32, dw, wn, dt);
        else
            memset(dw32, 0, wn * sizeof *dw32);
        add = true;
    }
    for (int k = 0; k < d->k; k++)
        bsum[k] = 0.0;

    for (int n = 0; n < d->n; n++) {
        const float *dy32;
        if (half) {
            rt_to_f32(dy32buf, (const char *)dy + n * yn * esz, yn, dt);
            dy32 = dy32buf;
        } else {
            dy32 = (const float *)dy + n * yn;
        }
        for (int gi = 0; gi < d->groups; gi++) {
            size_t xoff = ((size_t)n * d->c + (size_t)gi * g.cg) * g.in;
            const float *b;
            if (col) {
                im2col(&g, x, xoff, dt, col);
                b = col;
            } else {
                b = (const float *)x + xoff;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.kg, (int)ckk, (int)g.out,
                        1.0f, dy32 + (size_t)gi * g.kg * g.out, (int)g.out, b, (int)g.out,
                        add || n > 0 ? 1.0f : 0.0f, dw32 + (size_t)gi * g.kg * ckk, (int)ckk);
        }
        if (dbias)
            for (int k = 0; k < d->k; k++) {
                const float *r = dy32 + (size_t)k * g.out;
                double s = 0.0;
                for (size_t o = 0; o < g.out; o++)
                    s += r[o];
                bsum[k] += s;
            }
    }
    if (half)
        rt_from_f32(dw, dw32, wn, dt);
    if (dbias)
        for (int k = 0; k < d->k; k++)
            rt__set(dbias, (size_t)k, (float)bsum[k], dt, accumulate);
}
