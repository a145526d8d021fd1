/* conv.c - Convolution, 1-D to 3-D.
 *
 * Two implementations behind one API.  On x86 with AVX2+FMA or AVX-512 (the
 * usual case; rt__simd()), the SIMD engine at the end of this file: GEMM
 * micro-kernels of its own (conv_simd.h), with the im2col matrix built in
 * the micro-kernel's layout a panel at a time, or not built at all (implicit
 * GEMM), samples spread over the threads.  Elsewhere, or with
 * AMPC_RT_SIMD=0, the BLAS path that comes first: im2col and cblas_sgemm
 * per sample and group g (Cg = c/groups input channels, Kg = k/groups
 * filters, KK kernel taps, OUT output positions):
 *   forward          y_g [Kg, OUT]    = W_g [Kg, Cg*KK] . col [Cg*KK, OUT] (+ bias)
 *   backward data    col              = W_g^T . dy_g, scattered back by col2im
 *   backward weight  dW_g [Kg, Cg*KK] += dy_g . col^T, summed over the batch
 * col is the im2col matrix of the sample's group channels.  A pointwise
 * convolution (1x1, stride 1, no pad) needs no im2col: col is the input.
 * 16-bit tensors are widened (im2col converts while it gathers, the SIMD
 * engine widens a sample at a time), the GEMMs run in fp32 and the results
 * are rounded once.  Spatial axes are handled as three, padded in front with
 * size-1 axes, so 1-D, 2-D and 3-D share the code and the innermost loop
 * runs along the last real axis.
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

static size_t blas_workspace_bytes(const RtConvDims *d, RtDType dt, RtPass pass)
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

static void blas_forward(const RtConvDims *d, RtDType dt, const void *x, const void *w,
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

static void blas_backward_data(const RtConvDims *d, RtDType dt, const void *w, const void *dy,
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

static void blas_backward_weight(const RtConvDims *d, RtDType dt, const void *x,
                                 const void *dy, void *dw, void *dbias, bool accumulate,
                                 void *ws)
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

/* ==== the SIMD engine ===========================================================
 * Why not cblas_sgemm: OpenBLAS picks its kernels from a table of CPU
 * models and falls back to SSE3 ("Prescott") ones on a model it does not
 * know (0.3.21 on this project's Xeon, family 6 model 207), and per-sample
 * GEMMs of a few dozen rows gain little from its packing anyway.  Per
 * sample n and group (conv_simd.h has the layouts and the micro-kernels):
 *   forward          y = W . col(x), W packed once per call.  For the
 *                    geometries of im2col_fast (1-D/2-D, stride 1, as wide
 *                    as the input: "same" 3x3 and the like) col(x) is never
 *                    built: the micro-kernel loads its B rows from the input
 *                    plane through lane masks (implicit GEMM, gemm_imp);
 *                    otherwise one panel of col(x) at a time (L1-resident).
 *                    fp32 pointwise convolutions use W and x in place.
 *   backward data    stride 1: dx = W' . col(dy), W' the transposed filters
 *                    flipped in space, col(dy) padded by d(k-1)-p (the
 *                    adjoint of a stride-1 convolution is one), implicit
 *                    where the forward is, dx written (or added to)
 *                    directly; otherwise dcol = W^T . dy, then col2im.
 *   backward weight  dW^T += col(x) . dy^T: for the implicit geometries from
 *                    the sample copied into zero-bordered planes (bww_pad),
 *                    else from col(x) built a chunk of panels at a time,
 *                    which is already the layout of a packed A operand;
 *                    dy^T packed per sample (register transposes).
 * Samples are spread over rt__threads() threads, which take the next sample
 * (or block of samples) as they come free; the weight gradient sums fixed
 * blocks of samples separately and adds the blocks in order, so no result
 * depends on the thread count or on the scheduling.  That block sum (rows
 * of dW^T shared out, each element adding blocks 0, 1, 2... in order) and
 * the packing of the weights (a depth block of the packed A per item) run
 * on the threads too. */

/* im2col_prep's tables for the fast im2col (conv_simd.h) */
#define RT_FAST_PERIOD 64
#define RT_FAST_K 16
typedef struct {
    bool fast;
    int period, k1, k2;
    uint32_t pm[RT_FAST_K][RT_FAST_PERIOD];
    long vc0[RT_FAST_K], vc1[RT_FAST_K], sh[RT_FAST_K];
} Im2colTab;

/* A step of the implicit GEMM's depth: where its B row starts relative to
 * the panel's first column, and which lane masks apply (conv_simd.h) */
typedef struct {
    int32_t off, mi;
} ImStep;

#if RT_HAVE_X86_SIMD
#include <immintrin.h>

/* ---- AVX-512 ---- */
#define SFX(n) n##_avx512
#define ATTR __attribute__((target("avx512f,avx2,fma")))
#define V __m512
#define VL 16
#define MR2 8
#define MR1 16
static inline ATTR __mmask16 rt__m16(int lo, int hi)
{
    return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
#define VZERO() _mm512_setzero_ps()
#define VLD(p) _mm512_loadu_ps(p)
#define VST(p, v) _mm512_storeu_ps(p, v)
#define VBC(p) _mm512_set1_ps(*(p))
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VLDM(p, lo, hi) _mm512_maskz_loadu_ps(rt__m16(lo, hi), p)
#define VSTN(p, v, n) _mm512_mask_storeu_ps(p, rt__m16(0, n), v)
#define VLDB(p, bits) _mm512_maskz_loadu_ps((__mmask16)(bits), p)
#define VLDBP(p, m) _mm512_maskz_loadu_ps(*(const __mmask16 *)(m), p)
static inline ATTR __m512 rt__lds2_512(const float *p, int lo, int hi)
{
    uint32_t m = (uint32_t)(((1ull << (2 * hi - 1)) - 1) & ~((1ull << (2 * lo)) - 1));
    __m512 a = _mm512_maskz_loadu_ps((__mmask16)m, p);
    __m512 b = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), p + 16);
    __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(a, idx, b);
}
#define VLDS2(p, lo, hi) rt__lds2_512(p, lo, hi)
static inline ATTR void rt__tr16(__m512 *r)
{
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4)
        for (int k = 0; k < 2; k++) {
            __m512d a = _mm512_castps_pd(t[i + k]), b = _mm512_castps_pd(t[i + k + 2]);
            r[i + k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
            r[i + k + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        }
    /* r[4g + x[m]] holds rows 4g..4g+3 of columns {m, m+4, m+8, m+12} in its four
     * 128-bit quarters (x = 0, 2, 1, 3); combine the quarters across groups g */
    static const int x[4] = {0, 2, 1, 3};
    for (int m = 0; m < 4; m++) {
        __m512 a0 = _mm512_shuffle_f32x4(r[x[m]], r[4 + x[m]], 0x44);
        __m512 a1 = _mm512_shuffle_f32x4(r[x[m]], r[4 + x[m]], 0xee);
        __m512 b0 = _mm512_shuffle_f32x4(r[8 + x[m]], r[12 + x[m]], 0x44);
        __m512 b1 = _mm512_shuffle_f32x4(r[8 + x[m]], r[12 + x[m]], 0xee);
        t[m] = _mm512_shuffle_f32x4(a0, b0, 0x88);
        t[4 + m] = _mm512_shuffle_f32x4(a0, b0, 0xdd);
        t[8 + m] = _mm512_shuffle_f32x4(a1, b1, 0x88);
        t[12 + m] = _mm512_shuffle_f32x4(a1, b1, 0xdd);
    }
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}
#define VTRANSPOSE(r) rt__tr16(r)
#include "conv_simd.h"
#include "conv_simd_end.h"

/* ---- AVX2 ---- */
#define SFX(n) n##_avx2
#define ATTR __attribute__((target("avx2,fma")))
#define V __m256
#define VL 8
#define MR2 6
#define MR1 12
static inline ATTR __m256i rt__m8(int lo, int hi)
{
    __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(lo - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i));
}
#define VZERO() _mm256_setzero_ps()
#define VLD(p) _mm256_loadu_ps(p)
#define VST(p, v) _mm256_storeu_ps(p, v)
#define VBC(p) _mm256_broadcast_ss(p)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VLDM(p, lo, hi) _mm256_maskload_ps(p, rt__m8(lo, hi))
#define VSTN(p, v, n) _mm256_maskstore_ps(p, rt__m8(0, n), v)
static inline ATTR __m256i rt__m8b(uint32_t bits)
{
    __m256i b = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), b), b);
}
#define VLDB(p, bits) _mm256_maskload_ps(p, rt__m8b(bits))
#define VLDBP(p, m) _mm256_maskload_ps(p, rt__m8b(*(m)))
static inline ATTR __m256 rt__lds2_256(const float *p, int lo, int hi)
{
    uint32_t m = (uint32_t)(((1ull << (2 * hi - 1)) - 1) & ~((1ull << (2 * lo)) - 1));
    __m256 a = _mm256_maskload_ps(p, rt__m8b(m & 0xffu));
    __m256 b = _mm256_maskload_ps(p + 8, rt__m8b(m >> 8));
    __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    return _mm256_blend_ps(_mm256_permutevar8x32_ps(a, idx), _mm256_permutevar8x32_ps(b, idx),
                           0xf0);
}
#define VLDS2(p, lo, hi) rt__lds2_256(p, lo, hi)
static inline ATTR void rt__tr8(__m256 *r)
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4)
        for (int k = 0; k < 2; k++) {
            u[i + k] = _mm256_shuffle_ps(t[i + k], t[i + k + 2], 0x44);
            u[i + k + 2] = _mm256_shuffle_ps(t[i + k], t[i + k + 2], 0xee);
        }
    /* u[4g + x[m]]: rows 4g..4g+3 of columns m (low half) and m+4 (high half),
     * x = 0, 2, 1, 3 */
    static const int x[4] = {0, 2, 1, 3};
    for (int m = 0; m < 4; m++) {
        r[m] = _mm256_permute2f128_ps(u[x[m]], u[4 + x[m]], 0x20);
        r[4 + m] = _mm256_permute2f128_ps(u[x[m]], u[4 + x[m]], 0x31);
    }
}
#define VTRANSPOSE(r) rt__tr8(r)
#include "conv_simd.h"
#include "conv_simd_end.h"
#endif /* RT_HAVE_X86_SIMD */

typedef struct {
    int vl, mr2, mr1;
    void (*gemm)(int nv, int M, int N, int kd, const float *a, size_t abs, const float *b,
                 size_t bps, float *c, size_t ldc, bool add);
    void (*im2col_prep)(const Geom *g, Im2colTab *t);
    void (*im2col)(const Geom *g, const Im2colTab *t, const float *x, float *p, size_t rows_p,
                   size_t j0, size_t j1);
    void (*gemmu)(int M, int N, int kd, const float *a, size_t lda, const float *b, size_t ldb,
                  float *c, size_t ldc, bool add);
    void (*gemm_imp)(const Im2colTab *t, size_t j, int M, int nn, int kd, const float *a,
                     size_t abs, const float *x, const ImStep *st, float *c, size_t ldc,
                     bool add);
    void (*pack_dyt)(const float *dy, int kg, size_t out, int nrw, float *q);
    void (*pad_planes)(const Geom *g, const float *x, float *xp);
    void (*bww_pad)(const Geom *g, const float *xp, const float *q, int nv, float *acc,
                    size_t ldw, bool add);
} Isa;

#if RT_HAVE_X86_SIMD
static const Isa isa_avx512 = {16, 8, 16, gemm_avx512, im2col_prep_avx512, im2col_p_avx512,
                                    gemmu_avx512, gemm_imp_avx512, pack_dyt_avx512,
                                    pad_planes_avx512, bww_pad_avx512};
static const Isa isa_avx2 = {8, 6, 12, gemm_avx2, im2col_prep_avx2, im2col_p_avx2, gemmu_avx2,
                                  gemm_imp_avx2, pack_dyt_avx2, pad_planes_avx2,
                                  bww_pad_avx2};
#endif

static const Isa *simd_isa(void)
{
#if RT_HAVE_X86_SIMD
    switch (rt__simd()) {
    case RT_SIMD_AVX512: return &isa_avx512;
    case RT_SIMD_AVX2: return &isa_avx2;
    }
#endif
    return NULL;
}

static size_t conv_kk(const RtConvDims *d)
{
    size_t kk = 1;
    for (int a = 0; a < d->nsp; a++)
        kk *= (size_t)d->kernel[a];
    return kk;
}

static inline size_t round_up(size_t a, size_t b) { return (a + b - 1) / b * b; }
static inline size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }

/* Workspace carving that also measures: with base NULL it only adds up. */
typedef struct {
    char *base;
    size_t total;
} Carve;

static float *carve(Carve *c, size_t floats)
{
    float *p = c->base ? (float *)(c->base + c->total) : NULL;
    c->total += rt__round(floats * sizeof(float));
    return p;
}

/* The stride-1 adjoint: the geometry of the convolution of dy that gives dx
 * (input = the output planes, pad d(k-1)-p, output = the input planes), or
 * false when the conv is strided or padded beyond its kernel extent. */
static bool flip_geom(const Geom *g, Geom *f)
{
    *f = *g;
    for (int a = 0; a < 3; a++) {
        int pp = g->D[a] * (g->K[a] - 1) - g->P[a];
        if (g->S[a] != 1 || pp < 0)
            return false;
        f->IS[a] = g->O[a];
        f->O[a] = g->IS[a];
        f->P[a] = pp;
    }
    f->in = g->out;
    f->out = g->in;
    f->cg = g->kg;
    f->kg = g->cg;
    f->pointwise = false;
    return true;
}

/* The identity geometry over planes of `out` positions (1x1, stride 1): its
 * im2col is the plain panel-format copy. */
static void ident_geom(const Geom *g, int channels, Geom *f)
{
    *f = *g;
    for (int a = 0; a < 3; a++) {
        f->IS[a] = f->O[a] = g->O[a];
        f->K[a] = f->S[a] = f->D[a] = 1;
        f->P[a] = 0;
    }
    f->in = f->out = g->out;
    f->kk = 1;
    f->cg = channels;
    f->pointwise = true;
}

/* A-blocked packing of an A operand [M, kd] (rows padded to mp, depth to a
 * multiple of nrp, with zeros): element (r, t) = src[r*rs + t*cs], or with
 * flip_kk the filters' taps reversed: (r, t = k*kk + q) =
 * src[k*rs' + r*kk + (kk-1-q)] where rs' = cs.  Only the depth blocks
 * [b0, b1) of nrp columns (the threads share the blocks out). */
static void pack_a(const float *src, size_t rs, size_t cs, int M, int kd, size_t mp, int nrp,
                   size_t flip_kk, size_t b0, size_t b1, float *dst)
{
    for (size_t b = b0; b < b1; b++)
        for (size_t r = 0; r < mp; r++) {
            float *d = dst + (b * mp + r) * (size_t)nrp;
            for (int q = 0; q < nrp; q++) {
                size_t t = b * (size_t)nrp + (size_t)q;
                float v = 0.0f;
                if (r < (size_t)M && t < (size_t)kd) {
                    if (flip_kk)
                        v = src[(t / flip_kk) * cs + r * flip_kk + (flip_kk - 1 - t % flip_kk)];
                    else
                        v = src[r * rs + t * cs];
                }
                d[q] = v;
            }
        }
}

/* ---- the layouts (one function per pass measures and carves) ---- */

/* The weight gradient sums the batch in this many contiguous blocks of
 * samples (fewer for a smaller batch), each into its own accumulator, and
 * adds the blocks in order: threads take blocks as they come free, and the
 * result does not depend on the thread count. */
#define RT_WBLOCKS 8

typedef struct {
    const Isa *isa;
    Geom g, f;       /* f: the geometry of the im2col this pass builds */
    Im2colTab tab;   /* f's */
    int nt;          /* threads */
    bool half, flip;
    bool direct;     /* fp32 pointwise forward: W and x used in place */
    bool imp;        /* implicit GEMM (no im2col buffer): tab.fast geometries */
    ImStep *st;      /* its step table */
    int nrp;         /* panel width: 2*VL */
    size_t ap;       /* A operand rows, padded */
    size_t abs;      /* A block stride (floats) */
    size_t agrp;     /* A operand floats per group */
    size_t prows;    /* im2col rows */
    size_t npan;     /* im2col panels */
    size_t chunk;    /* weight gradient: im2col panels built at a time */
    int nv, nrw;     /* weight gradient: vectors per panel, columns per panel */
    size_t ldw;      /* weight gradient accumulator row length */
    /* carved */
    float *a;                     /* packed A (forward, backward data) */
    float *b32;                   /* bias in fp32 (16-bit forward) */
    float *p[RT_MAX_THREADS];     /* im2col panels */
    float *xs[RT_MAX_THREADS];    /* 16-bit: one sample's input (or dy) in fp32 */
    float *ys[RT_MAX_THREADS];    /* 16-bit: one sample's output (or dx) in fp32 */
    float *q[RT_MAX_THREADS];     /* weight gradient: dy^T panels; data: dcol */
    int nblk;                     /* weight gradient: sample blocks */
    float *acc[RT_WBLOCKS];       /* weight gradient: dW^T of each sample block */
    double *bsum[RT_WBLOCKS];     /* bias gradient: sums of each sample block */
    size_t total;                 /* workspace bytes */
} Plan;

/* The weight gradient builds this many im2col panels at a time (a depth of
 * 8*NRP, the GEMM's pass depth) and the other passes one. */
#define RT_WCHUNK 8

static int plan_threads(const RtConvDims *d)
{
    int nt = rt__threads();
    return nt < d->n ? nt : d->n;
}

static void plan(const RtConvDims *d, RtDType dt, RtPass pass, const Isa *isa, char *ws, Plan *pl)
{
    Carve cv = {ws, 0};
    geom(d, &pl->g);
    const Geom *g = &pl->g;
    pl->isa = isa;
    pl->nt = plan_threads(d);
    pl->half = dt != RT_F32;
    pl->nrp = 2 * isa->vl;
    pl->flip = false;
    pl->direct = false;
    pl->imp = false;
    pl->st = NULL;
    pl->nv = 2;
    pl->nrw = 0;
    pl->ldw = 0;
    pl->a = pl->b32 = NULL;
    size_t nrp = (size_t)pl->nrp, ckk = (size_t)g->cg * g->kk, mr1 = (size_t)isa->mr1;
    size_t xn = (size_t)d->c * g->in, yn = (size_t)d->k * g->out;
    pl->f = pl->g;
    switch (pass) {
    case RT_PASS_FORWARD:
        if (g->pointwise && !pl->half) {
            pl->direct = true;
            break;
        }
        pl->ap = round_up((size_t)g->kg, mr1);
        pl->abs = pl->ap * nrp;
        pl->agrp = div_up(ckk, nrp) * pl->abs;
        pl->prows = ckk;
        pl->npan = div_up(g->out, nrp);
        isa->im2col_prep(&pl->f, &pl->tab);
        pl->imp = pl->tab.fast && (size_t)g->cg * g->in < INT32_MAX;
        pl->a = carve(&cv, pl->agrp * (size_t)d->groups);
        pl->b32 = pl->half ? carve(&cv, (size_t)d->k) : NULL;
        pl->st = pl->imp ? (ImStep *)carve(&cv, pl->prows * 2) : NULL;
        for (int t = 0; t < pl->nt; t++) {
            pl->p[t] = pl->imp ? NULL : carve(&cv, pl->prows * nrp);
            pl->xs[t] = pl->half ? carve(&cv, xn) : NULL;
            pl->ys[t] = pl->half ? carve(&cv, yn) : NULL;
        }
        /* The query stays at least one sample's im2col matrix, what the
         * BLAS path needs and test_conv_dims expects, though the panels
         * above are all this path uses. */
        if (cv.total < rt__round(ckk * g->out * sizeof(float)))
            cv.total = rt__round(ckk * g->out * sizeof(float));
        break;
    case RT_PASS_BACKWARD:
        pl->flip = flip_geom(g, &pl->f);
        if (pl->flip) {
            size_t kd = (size_t)g->kg * g->kk;
            pl->ap = round_up((size_t)g->cg, mr1);
            pl->abs = pl->ap * nrp;
            pl->agrp = div_up(kd, nrp) * pl->abs;
            pl->prows = kd;
            pl->npan = div_up(g->in, nrp);
            isa->im2col_prep(&pl->f, &pl->tab);
            pl->imp = pl->tab.fast && (size_t)g->kg * g->out < INT32_MAX;
        } else {
            ident_geom(g, g->kg, &pl->f);
            pl->ap = round_up(ckk, mr1);
            pl->abs = pl->ap * nrp;
            pl->agrp = div_up((size_t)g->kg, nrp) * pl->abs;
            pl->prows = (size_t)g->kg;
            pl->npan = div_up(g->out, nrp);
        }
        pl->a = carve(&cv, pl->agrp * (size_t)d->groups);
        pl->st = pl->imp ? (ImStep *)carve(&cv, pl->prows * 2) : NULL;
        for (int t = 0; t < pl->nt; t++) {
            pl->p[t] = pl->imp ? NULL : carve(&cv, pl->prows * nrp);
            pl->q[t] = pl->flip ? NULL : carve(&cv, ckk * g->out);
            pl->xs[t] = pl->half ? carve(&cv, yn) : NULL;
            pl->ys[t] = pl->half ? carve(&cv, xn) : NULL;
        }
        break;
    case RT_PASS_BACKWARD_WEIGHT:
        pl->nv = g->kg > isa->vl ? 2 : 1;
        pl->nrw = pl->nv * isa->vl;
        pl->ldw = round_up((size_t)g->kg, (size_t)pl->nrw);
        pl->ap = round_up(ckk, mr1);
        pl->abs = pl->ap * nrp;
        pl->prows = pl->ap;
        pl->npan = div_up(g->out, nrp);
        pl->chunk = pl->npan < RT_WCHUNK ? pl->npan : RT_WCHUNK;
        pl->nblk = d->n < RT_WBLOCKS ? d->n : RT_WBLOCKS;
        if (pl->nt > pl->nblk)
            pl->nt = pl->nblk;
        /* the padded-plane path where im2col_fast applies (see bww_pad) */
        isa->im2col_prep(g, &pl->tab);
        pl->imp = pl->tab.fast;
        size_t padn = (size_t)g->cg * ((size_t)g->IS[1] + 2 * (size_t)g->P[1]) *
                      ((size_t)g->IS[2] + 2 * (size_t)g->P[2]);
        for (int t = 0; t < pl->nt; t++) {
            pl->p[t] = carve(&cv, pl->imp ? padn : pl->chunk * pl->prows * nrp);
            pl->q[t] = carve(&cv, pl->ldw * g->out);
            pl->xs[t] = pl->half ? carve(&cv, xn) : NULL;
            pl->ys[t] = pl->half ? carve(&cv, yn) : NULL;
        }
        for (int b = 0; b < pl->nblk; b++) {
            pl->acc[b] = carve(&cv, (size_t)d->groups * ckk * pl->ldw);
            pl->bsum[b] = (double *)carve(&cv, (size_t)d->k * 2); /* K doubles */
        }
        break;
    }
    pl->total = cv.total;
    if (ws && !pl->direct && !pl->imp)
        isa->im2col_prep(&pl->f, &pl->tab);
    if (ws && pl->imp && pass != RT_PASS_BACKWARD_WEIGHT) {
        /* step (c, k1, k2): channel c's plane shifted as im2col_fast does */
        const Geom *f = &pl->f;
        size_t t = 0;
        for (int c = 0; c < f->cg; c++)
            for (int k1 = 0; k1 < f->K[1]; k1++)
                for (int k2 = 0; k2 < f->K[2]; k2++, t++) {
                    pl->st[t].off = (int32_t)((long)c * (long)f->in + pl->tab.sh[k1] + k2);
                    pl->st[t].mi = k1 * f->K[2] + k2;
                }
    }
}

/* ---- the passes ---- */

typedef struct {
    const Plan *pl;
    const RtConvDims *d;
    RtDType dt;
    const void *in;   /* x (forward, weight gradient) or dy (data gradient) */
    const void *in2;  /* dy (weight gradient) */
    void *out;        /* y or dx */
    const float *bias;
    const float *w;   /* fp32 weights (the direct forward) */
    bool acc;
    int next;         /* the next sample (dynamic scheduling) */
} Job;

static int next_sample(Job *j)
{
    return __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
}

static void fwd_job(void *arg, int tid, int nt)
{
    (void)nt;
    Job *j = arg;
    const Plan *pl = j->pl;
    const Geom *g = &pl->g;
    const RtConvDims *d = j->d;
    size_t xn = (size_t)d->c * g->in, yn = (size_t)d->k * g->out, esz = rt_dtype_size(j->dt);
    size_t ckk = (size_t)g->cg * g->kk, nrp = (size_t)pl->nrp;
    for (int n; (n = next_sample(j)) < d->n;) {
        const float *xs;
        float *ys;
        if (pl->half) {
            rt_to_f32(pl->xs[tid], (const char *)j->in + (size_t)n * xn * esz, xn, j->dt);
            xs = pl->xs[tid];
            ys = pl->ys[tid];
        } else {
            xs = (const float *)j->in + (size_t)n * xn;
            ys = (float *)j->out + (size_t)n * yn;
        }
        if (j->bias)
            for (int k = 0; k < d->k; k++)
                for (size_t o = 0; o < g->out; o++)
                    ys[(size_t)k * g->out + o] = j->bias[k];
        for (int gi = 0; gi < d->groups; gi++) {
            if (pl->direct) {
                pl->isa->gemmu(g->kg, (int)g->out, g->cg, j->w + (size_t)gi * g->kg * ckk, ckk,
                               xs + (size_t)gi * g->cg * g->in, g->in,
                               ys + (size_t)gi * g->kg * g->out, g->out, j->bias != NULL);
                continue;
            }
            for (size_t jp = 0; jp < pl->npan; jp++) {
                size_t c0 = jp * nrp, nn = g->out - c0 < nrp ? g->out - c0 : nrp;
                if (pl->imp) {
                    pl->isa->gemm_imp(&pl->tab, jp, g->kg, (int)nn, (int)ckk,
                                      pl->a + (size_t)gi * pl->agrp, pl->abs,
                                      xs + (size_t)gi * g->cg * g->in, pl->st,
                                      ys + (size_t)gi * g->kg * g->out + c0, g->out,
                                      j->bias != NULL);
                    continue;
                }
                pl->isa->im2col(g, &pl->tab, xs + (size_t)gi * g->cg * g->in, pl->p[tid],
                                pl->prows, jp, jp + 1);
                pl->isa->gemm(2, g->kg, (int)nn, (int)ckk, pl->a + (size_t)gi * pl->agrp,
                              pl->abs, pl->p[tid], 0, ys + (size_t)gi * g->kg * g->out + c0,
                              g->out, j->bias != NULL);
            }
        }
        if (pl->half)
            rt_from_f32((char *)j->out + (size_t)n * yn * esz, ys, yn, j->dt);
    }
}

static void bwd_data_job(void *arg, int tid, int nt)
{
    (void)nt;
    Job *j = arg;
    const Plan *pl = j->pl;
    const Geom *g = &pl->g;
    const RtConvDims *d = j->d;
    size_t xn = (size_t)d->c * g->in, yn = (size_t)d->k * g->out, esz = rt_dtype_size(j->dt);
    size_t ckk = (size_t)g->cg * g->kk, nrp = (size_t)pl->nrp;
    for (int n; (n = next_sample(j)) < d->n;) {
        const float *dys;
        float *dxs;
        char *dxn = (char *)j->out + (size_t)n * xn * esz;
        if (pl->half) {
            rt_to_f32(pl->xs[tid], (const char *)j->in + (size_t)n * yn * esz, yn, j->dt);
            dys = pl->xs[tid];
            dxs = pl->ys[tid];
            if (j->acc)
                rt_to_f32(dxs, dxn, xn, j->dt);
        } else {
            dys = (const float *)j->in + (size_t)n * yn;
            dxs = (float *)dxn;
        }
        /* col2im adds: it needs the old gradient or zeros */
        if (!pl->flip && !j->acc)
            memset(dxs, 0, xn * sizeof *dxs);
        for (int gi = 0; gi < d->groups; gi++) {
            const float *dyg = dys + (size_t)gi * g->kg * g->out;
            float *dxg = dxs + (size_t)gi * g->cg * g->in;
            const float *a = pl->a + (size_t)gi * pl->agrp;
            /* the im2col of dy has pl->f.out columns: IN (flip) or OUT */
            for (size_t jp = 0; jp < pl->npan; jp++) {
                size_t c0 = jp * nrp, nn = pl->f.out - c0 < nrp ? pl->f.out - c0 : nrp;
                if (pl->imp) {
                    pl->isa->gemm_imp(&pl->tab, jp, g->cg, (int)nn, (int)pl->prows, a, pl->abs,
                                      dyg, pl->st, dxg + c0, g->in, j->acc);
                    continue;
                }
                pl->isa->im2col(&pl->f, &pl->tab, dyg, pl->p[tid], pl->prows, jp, jp + 1);
                if (pl->flip)
                    pl->isa->gemm(2, g->cg, (int)nn, (int)pl->prows, a, pl->abs, pl->p[tid], 0,
                                  dxg + c0, g->in, j->acc);
                else
                    pl->isa->gemm(2, (int)ckk, (int)nn, g->kg, a, pl->abs, pl->p[tid], 0,
                                  pl->q[tid] + c0, g->out, false);
            }
            if (!pl->flip)
                col2im(g, pl->q[tid], dxg);
        }
        if (pl->half)
            rt_from_f32(dxn, dxs, xn, j->dt);
    }
}

static void bwd_weight_job(void *arg, int tid, int nt)
{
    (void)nt;
    Job *j = arg;
    const Plan *pl = j->pl;
    const Geom *g = &pl->g;
    const RtConvDims *d = j->d;
    size_t xn = (size_t)d->c * g->in, yn = (size_t)d->k * g->out, esz = rt_dtype_size(j->dt);
    size_t ckk = (size_t)g->cg * g->kk, nrp = (size_t)pl->nrp, lo, hi;
    for (int b; (b = next_sample(j)) < pl->nblk;) {
        rt__split((size_t)d->n, b, pl->nblk, &lo, &hi);
        double *bsum = pl->bsum[b];
        if (j->bias)
            for (int k = 0; k < d->k; k++)
                bsum[k] = 0.0;
        for (size_t n = lo; n < hi; n++) {
            const float *xs, *dys;
            if (pl->half) {
                rt_to_f32(pl->xs[tid], (const char *)j->in + n * xn * esz, xn, j->dt);
                rt_to_f32(pl->ys[tid], (const char *)j->in2 + n * yn * esz, yn, j->dt);
                xs = pl->xs[tid];
                dys = pl->ys[tid];
            } else {
                xs = (const float *)j->in + n * xn;
                dys = (const float *)j->in2 + n * yn;
            }
            for (int gi = 0; gi < d->groups; gi++) {
                const float *dyg = dys + (size_t)gi * g->kg * g->out;
                pl->isa->pack_dyt(dyg, g->kg, g->out, pl->nrw, pl->q[tid]);
                if (pl->imp) {
                    pl->isa->pad_planes(g, xs + (size_t)gi * g->cg * g->in, pl->p[tid]);
                    pl->isa->bww_pad(g, pl->p[tid], pl->q[tid], pl->nv,
                                     pl->acc[b] + (size_t)gi * ckk * pl->ldw, pl->ldw, n > lo);
                    continue;
                }
                for (size_t jp = 0; jp < pl->npan; jp += pl->chunk) {
                    size_t j1 = jp + pl->chunk < pl->npan ? jp + pl->chunk : pl->npan;
                    size_t c0 = jp * nrp, c1 = j1 * nrp < g->out ? j1 * nrp : g->out;
                    pl->isa->im2col(g, &pl->tab, xs + (size_t)gi * g->cg * g->in, pl->p[tid],
                                    pl->prows, jp, j1);
                    pl->isa->gemm(pl->nv, (int)ckk, g->kg, (int)(c1 - c0), pl->p[tid], pl->abs,
                                  pl->q[tid] + c0 * (size_t)pl->nrw, g->out * (size_t)pl->nrw,
                                  pl->acc[b] + (size_t)gi * ckk * pl->ldw, pl->ldw,
                                  n > lo || jp > 0);
                }
            }
            if (j->bias)
                for (int k = 0; k < d->k; k++) {
                    const float *r = dys + (size_t)k * g->out;
                    double s = 0.0;
                    for (size_t o = 0; o < g->out; o++)
                        s += r[o];
                    bsum[k] += s;
                }
        }
    }
}

/* ---- the weight gradient's block sum, on the threads ----
 * Row i of group gi of the accumulators (dW^T: ckk rows of ldw columns per
 * group) is the sum over the sample blocks, added in block order, then
 * written transposed into dW[gi*kg + k][i].  Rows are independent and each
 * element keeps its order of addition, so the bits do not depend on how the
 * rows are shared out. */
typedef struct {
    const Plan *pl;
    RtDType dt;
    void *dw;
    bool acc;
} WSum;

static void wsum_rows(void *ctx, size_t lo, size_t hi)
{
    const WSum *j = ctx;
    const Plan *pl = j->pl;
    const Geom *g = &pl->g;
    size_t ckk = (size_t)g->cg * g->kk, ldw = pl->ldw, kg = (size_t)g->kg;
    for (size_t r = lo; r < hi; r++) {
        float *s = pl->acc[0] + r * ldw; /* rows of a group are contiguous */
        for (int b = 1; b < pl->nblk; b++) {
            const float *a = pl->acc[b] + r * ldw;
            size_t i = 0;
            for (; i + 4 <= kg; i += 4)
                rt__st4(s + i, rt__ld4(s + i) + rt__ld4(a + i));
            for (; i < kg; i++)
                s[i] += a[i];
        }
    }
    /* transposed: dW[gi*kg + k][i] for the rows (gi, i) in [lo, hi) */
    for (size_t r = lo; r < hi;) {
        size_t gi = r / ckk, i0 = r % ckk, i1 = hi - r < ckk - i0 ? i0 + (hi - r) : ckk;
        const float *sg = pl->acc[0] + gi * ckk * ldw;
        for (size_t k = 0; k < kg; k++) {
            size_t o = (gi * kg + k) * ckk;
            if (j->dt == RT_F32) {
                float *w = (float *)j->dw + o;
                if (j->acc)
                    for (size_t i = i0; i < i1; i++)
                        w[i] += sg[i * ldw + k];
                else
                    for (size_t i = i0; i < i1; i++)
                        w[i] = sg[i * ldw + k];
            } else {
                for (size_t i = i0; i < i1; i++)
                    rt__set(j->dw, o + i, sg[i * ldw + k], j->dt, j->acc);
            }
        }
        r += i1 - i0;
    }
}

/* ---- weight packing, on the threads ----
 * 16-bit weights are widened into w32 (a range job), then each (group,
 * depth block) of the packed A is written by one thread (pack_a over that
 * block alone): every element is a copy, so nothing can depend on the
 * threads. */
typedef struct {
    const Plan *pl;
    RtPass pass;
    const float *wf;
    const void *w16;
    float *w32;
    RtDType dt;
    size_t nb; /* depth blocks per group */
} WPack;

static void widen_range(void *ctx, size_t lo, size_t hi)
{
    const WPack *j = ctx;
    rt_to_f32(j->w32 + lo, (const char *)j->w16 + lo * rt_dtype_size(j->dt), hi - lo, j->dt);
}

static void pack_blocks(void *ctx, size_t lo, size_t hi)
{
    const WPack *j = ctx;
    const Plan *pl = j->pl;
    const Geom *g = &pl->g;
    size_t ckk = (size_t)g->cg * g->kk;
    for (size_t it = lo; it < hi; it++) {
        size_t gi = it / j->nb, b = it % j->nb;
        const float *wg = j->wf + gi * (size_t)g->kg * ckk;
        float *a = pl->a + gi * pl->agrp;
        if (j->pass == RT_PASS_FORWARD)
            pack_a(wg, ckk, 1, g->kg, (int)ckk, pl->ap, pl->nrp, 0, b, b + 1, a);
        else if (pl->flip)
            pack_a(wg, 0, ckk, g->cg, g->kg * (int)g->kk, pl->ap, pl->nrp, g->kk, b, b + 1, a);
        else
            pack_a(wg, 1, ckk, (int)ckk, g->kg, pl->ap, pl->nrp, 0, b, b + 1, a);
    }
}

static void simd_pack_weights(const Plan *pl, const RtConvDims *d, RtDType dt, const void *w,
                              RtPass pass, float *w32)
{
    const Geom *g = &pl->g;
    size_t ckk = (size_t)g->cg * g->kk, wn = (size_t)d->k * ckk;
    WPack j = {pl, pass, w, w, w32, dt, 0};
    if (dt != RT_F32) {
        /* the packed A is the only copy needed: widen into it first, then
         * pack from there into place would overlap, so widen into w32 */
        rt__parallel_range(wn, widen_range, &j);
        j.wf = w32;
    }
    /* the packed depth: ckk (forward), kg*kk (flip) or kg (backward data) */
    size_t kd = pass == RT_PASS_FORWARD ? ckk : pl->flip ? (size_t)g->kg * g->kk : (size_t)g->kg;
    j.nb = div_up(kd, (size_t)pl->nrp);
    rt__parallel_items((size_t)d->groups * j.nb, pl->ap * (size_t)pl->nrp, pack_blocks, &j);
}

/* fp32 copy of 16-bit weights: carved after the plan's own workspace */
static size_t w32_bytes(const RtConvDims *d, RtDType dt)
{
    if (dt == RT_F32)
        return 0;
    return rt__round((size_t)d->k * (size_t)(d->c / d->groups) * conv_kk(d) * sizeof(float));
}

/* ---- NHWC: x, y [n, spatial..., channels], w [k, kernel..., c/groups] ----
 * Converted into NCHW copies carved after the NCHW kernel's own workspace
 * ([its workspace][input 1][input 2][output], the order below), run as
 * NCHW and converted back (layout.c says why).  An accumulating output is
 * converted in first, so "old + new, rounded once" sees the same values. */
static size_t sp_prod(const RtConvDims *d, const int *v)
{
    size_t p = 1;
    for (int a = 0; a < d->nsp; a++)
        p *= (size_t)v[a];
    return p;
}

static RtConvDims nchw_dims(const RtConvDims *d)
{
    RtConvDims c = *d;
    c.layout = RT_LAYOUT_NCHW;
    return c;
}

/* elements of x (n*c*in), y (n*k*out) and w (k*(c/groups)*kk), each as a
 * pair of factors for rt__nhwc_add's overflow check */
typedef struct {
    size_t a, b;
} Elems;

static void nhwc_sizes(const RtConvDims *d, Elems *x, Elems *y, Elems *w)
{
    *x = (Elems){(size_t)d->n * (size_t)d->c, sp_prod(d, d->in)};
    *y = (Elems){(size_t)d->n * (size_t)d->k, sp_prod(d, d->out)};
    *w = (Elems){(size_t)d->k * (size_t)(d->c / d->groups), sp_prod(d, d->kernel)};
}

/* forward: x, w -> y; backward data: w, dy -> dx; backward weight: x, dy -> dw */
static void nhwc_roles(const RtConvDims *d, RtPass pass, Elems r[3])
{
    Elems x, y, w;
    nhwc_sizes(d, &x, &y, &w);
    r[0] = pass == RT_PASS_BACKWARD ? w : x;
    r[1] = pass == RT_PASS_FORWARD ? w : y;
    r[2] = pass == RT_PASS_FORWARD ? y : pass == RT_PASS_BACKWARD ? x : w;
}

static size_t nhwc_ws_bytes(const RtConvDims *d, RtDType dt, RtPass pass)
{
    RtConvDims c = nchw_dims(d);
    size_t t = rt__round(rt_conv_workspace_bytes(&c, dt, pass));
    Elems r[3];
    nhwc_roles(d, pass, r);
    for (int i = 0; i < 3; i++)
        rt__nhwc_add(&t, r[i].a, r[i].b, dt);
    return t;
}

/* The three NCHW copies of pass `pass`, carved as nhwc_ws_bytes adds them up,
 * after the NCHW kernel's own workspace (the start of ws). */
static void nhwc_carve(const RtConvDims *d, RtDType dt, RtPass pass, void *ws, void *p[3])
{
    RtConvDims c = nchw_dims(d);
    char *q = (char *)ws + rt__round(rt_conv_workspace_bytes(&c, dt, pass));
    Elems r[3];
    nhwc_roles(d, pass, r);
    for (int i = 0; i < 3; i++)
        p[i] = rt__ws_take(&q, r[i].a * r[i].b * rt_dtype_size(dt));
}

static void to_nchw(const RtConvDims *d, RtDType dt, const void *x, void *xs)
{
    rt_layout_convert(d->n, d->c, (int64_t)sp_prod(d, d->in), dt, x, xs, RT_LAYOUT_NCHW);
}

static void krsc_to_oihw(const RtConvDims *d, RtDType dt, const void *w, void *ws)
{
    rt_layout_convert(d->k, d->c / d->groups, (int64_t)sp_prod(d, d->kernel), dt, w, ws,
                      RT_LAYOUT_NCHW);
}

static void nhwc_forward(const RtConvDims *d, RtDType dt, const void *x, const void *w,
                         const void *bias, void *y, void *ws)
{
    RtConvDims c = nchw_dims(d);
    void *p[3];
    nhwc_carve(d, dt, RT_PASS_FORWARD, ws, p);
    to_nchw(d, dt, x, p[0]);
    krsc_to_oihw(d, dt, w, p[1]);
    rt_conv_forward(&c, dt, p[0], p[1], bias, p[2], ws);
    rt_layout_convert(d->n, d->k, (int64_t)sp_prod(d, d->out), dt, p[2], y, RT_LAYOUT_NHWC);
}

static void nhwc_backward_data(const RtConvDims *d, RtDType dt, const void *w, const void *dy,
                               void *dx, bool accumulate, void *ws)
{
    RtConvDims c = nchw_dims(d);
    void *p[3];
    nhwc_carve(d, dt, RT_PASS_BACKWARD, ws, p);
    krsc_to_oihw(d, dt, w, p[0]);
    rt_layout_convert(d->n, d->k, (int64_t)sp_prod(d, d->out), dt, dy, p[1], RT_LAYOUT_NCHW);
    if (accumulate)
        to_nchw(d, dt, dx, p[2]);
    rt_conv_backward_data(&c, dt, p[0], p[1], p[2], accumulate, ws);
    rt_layout_convert(d->n, d->c, (int64_t)sp_prod(d, d->in), dt, p[2], dx, RT_LAYOUT_NHWC);
}

static void nhwc_backward_weight(const RtConvDims *d, RtDType dt, const void *x, const void *dy,
                                 void *dw, void *dbias, bool accumulate, void *ws)
{
    RtConvDims c = nchw_dims(d);
    void *p[3];
    nhwc_carve(d, dt, RT_PASS_BACKWARD_WEIGHT, ws, p);
    to_nchw(d, dt, x, p[0]);
    rt_layout_convert(d->n, d->k, (int64_t)sp_prod(d, d->out), dt, dy, p[1], RT_LAYOUT_NCHW);
    if (accumulate)
        krsc_to_oihw(d, dt, dw, p[2]);
    rt_conv_backward_weight(&c, dt, p[0], p[1], p[2], dbias, accumulate, ws);
    rt_layout_convert(d->k, d->c / d->groups, (int64_t)sp_prod(d, d->kernel), dt, p[2], dw,
                      RT_LAYOUT_NHWC);
}

size_t rt_conv_workspace_bytes(const RtConvDims *d, RtDType dt, RtPass pass)
{
    if (d->layout == RT_LAYOUT_NHWC)
        return nhwc_ws_bytes(d, dt, pass);
    const Isa *isa = simd_isa();
    if (!isa)
        return blas_workspace_bytes(d, dt, pass);
    Plan pl;
    plan(d, dt, pass, isa, NULL, &pl);
    return pl.total + (pass == RT_PASS_BACKWARD_WEIGHT || pl.direct ? 0 : w32_bytes(d, dt));
}

void rt_conv_forward(const RtConvDims *d, RtDType dt, const void *x, const void *w,
                     const void *bias, void *y, void *ws)
{
    if (d->layout == RT_LAYOUT_NHWC) {
        nhwc_forward(d, dt, x, w, bias, y, ws);
        return;
    }
    const Isa *isa = simd_isa();
    if (!isa) {
        blas_forward(d, dt, x, w, bias, y, ws);
        return;
    }
    Plan pl;
    plan(d, dt, RT_PASS_FORWARD, isa, ws, &pl);
    if (!pl.direct)
        simd_pack_weights(&pl, d, dt, w, RT_PASS_FORWARD, (float *)((char *)ws + pl.total));
    const float *b32 = bias;
    if (bias && pl.half) {
        rt_to_f32(pl.b32, bias, (size_t)d->k, dt);
        b32 = pl.b32;
    }
    Job j = {&pl, d, dt, x, NULL, y, b32, w, false, 0};
    rt__parallel(pl.nt, fwd_job, &j);
}

void rt_conv_backward_data(const RtConvDims *d, RtDType dt, const void *w, const void *dy,
                           void *dx, bool accumulate, void *ws)
{
    if (d->layout == RT_LAYOUT_NHWC) {
        nhwc_backward_data(d, dt, w, dy, dx, accumulate, ws);
        return;
    }
    const Isa *isa = simd_isa();
    if (!isa) {
        blas_backward_data(d, dt, w, dy, dx, accumulate, ws);
        return;
    }
    Plan pl;
    plan(d, dt, RT_PASS_BACKWARD, isa, ws, &pl);
    simd_pack_weights(&pl, d, dt, w, RT_PASS_BACKWARD, (float *)((char *)ws + pl.total));
    Job j = {&pl, d, dt, dy, NULL, dx, NULL, NULL, accumulate, 0};
    rt__parallel(pl.nt, bwd_data_job, &j);
}

void rt_conv_backward_weight(const RtConvDims *d, RtDType dt, const void *x, const void *dy,
                             void *dw, void *dbias, bool accumulate, void *ws)
{
    if (d->layout == RT_LAYOUT_NHWC) {
        nhwc_backward_weight(d, dt, x, dy, dw, dbias, accumulate, ws);
        return;
    }
    const Isa *isa = simd_isa();
    if (!isa) {
        blas_backward_weight(d, dt, x, dy, dw, dbias, accumulate, ws);
        return;
    }
    Plan pl;
    plan(d, dt, RT_PASS_BACKWARD_WEIGHT, isa, ws, &pl);
    static const float one = 1.0f;
    Job j = {&pl, d, dt, x, dy, NULL, dbias ? &one : NULL, NULL, accumulate, 0};
    rt__parallel(pl.nt, bwd_weight_job, &j);

    WSum ws_job = {&pl, dt, dw, accumulate};
    rt__parallel_items((size_t)d->groups * pl.g.cg * pl.g.kk, (size_t)pl.nblk * pl.ldw, wsum_rows,
                       &ws_job);
    if (dbias)
        for (int k = 0; k < d->k; k++) {
            double s = 0.0;
            for (int b = 0; b < pl.nblk; b++)
                s += pl.bsum[b][k];
            rt__set(dbias, (size_t)k, (float)s, dt, accumulate);
        }
}

/* ---- the convolution with its value's statistics (conv_bn_stats) ------------ */

size_t rt_conv_stats_workspace_bytes(const RtConvDims *d, RtDType dt)
{
    return rt_conv_workspace_bytes(d, dt, RT_PASS_FORWARD);
}

/* y as rt_conv_forward writes it without bias, then its sums per output
 * channel as BatchNorm over axis 1 views it: [n, k, out...] in NCHW,
 * [n*out..., k, 1] in NHWC */
void rt_conv_forward_stats(const RtConvDims *d, RtDType dt, const void *x, const void *w, void *y,
                           float *stats, void *ws)
{
    rt_conv_forward(d, dt, x, w, NULL, y, ws);
    int64_t pixels = 1;
    for (int i = 0; i < d->nsp; i++)
        pixels *= d->out[i];
    bool nhwc = d->layout == RT_LAYOUT_NHWC;
    RtBnDims bd = {.outer = nhwc ? (int64_t)d->n * pixels : d->n,
                   .c = d->k,
                   .inner = nhwc ? 1 : pixels,
                   .order = RT_BN_ORDER_CPU};
    rt_batchnorm_stats(&bd, dt, y, stats);
}
