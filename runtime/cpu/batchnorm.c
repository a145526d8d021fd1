/* batchnorm.c - BatchNorm over [outer, c, inner] (NCHW with axis 1: N, C, H*W).
 *
 * Training: per channel, mean and biased variance over the m = outer*inner
 * elements (one pass of shifted moments, double accumulators; see
 * bn_train_range), save_mean and save_invstd =
 * 1/sqrt(var + eps) for the backward, y = x*scale + shift in fp32 with
 * scale = gamma*invstd and shift = beta - mean*scale.  The moving statistics
 * are updated by a separate call (rt_batchnorm_update_moving) with the
 * unbiased variance, as cuDNN does (MXNet's CPU path uses the biased one;
 * see docs/backend-cpu.md).  Backward with batch statistics:
 *   dbeta = sum dy,  dgamma = sum dy*xhat,
 *   dx = gamma*invstd * (dy - dbeta/m - xhat*dgamma/m)
 * and with global statistics (constants) dx = gamma*invstd*dy.
 *
 * The sums' order: the CPU's own below (channel groups, segments, four
 * lanes), or with RtBnDims.order = RT_BN_ORDER_TILED the GPU's two-level
 * tree (kernels/bn_tree.h), element by element: the CPU twin of
 * runtime/cuda's BatchNorm, bit for bit, which the tests compare it with.
 * Everything but the sums is the same in both orders.
 */
#include <math.h>

#include "cpu.h"
#include "kernels/act.h"
#include "kernels/bn_tree.h"

/* The kernels walk groups of channels (RT_BN_GROUP at most; the threads
 * take groups as they come free), and each group image by image, so memory
 * is read in order: for image o, the group's channels are adjacent.
 * body(c, v, m, off) runs on each chunk of the group's segments, with v a
 * fp32 view of x[off, off+m) of channel c. */
#define RT_BN_GROUP 64
#define FOR_GROUP_CHUNKS(d, c0, c1, x, dt, buf, c, v, m, off, body)                      \
    for (int64_t o_ = 0; o_ < (d)->outer; o_++)                                         \
        for (int64_t c = (c0); c < (c1); c++) {                                         \
            size_t base_ = ((size_t)o_ * (size_t)(d)->c + (size_t)c) * (size_t)(d)->inner; \
            for (size_t j_ = 0; j_ < (size_t)(d)->inner; j_ += RT_CHUNK) {              \
                size_t m = (size_t)(d)->inner - j_ < RT_CHUNK ? (size_t)(d)->inner - j_ : RT_CHUNK; \
                size_t off = base_ + j_;                                                \
                const float *v = rt__view(x, off, m, dt, buf);                          \
                body                                                                    \
            }                                                                           \
        }

/* ---- the per-segment loops, four lanes at a time (cpu.h) ----
 * Sums are in double, as the scalar loops had them; only their order
 * changes.  The elementwise formulas are the scalar ones, operation for
 * operation (no FMA contraction in ISO C mode), so the two instantiations
 * below, baseline and AVX2 (which holds the double accumulators in
 * registers), give the same bits. */

#define BN_SEGS(SFX, ATTR)                                                                  \
    /* *s1 += sum (v - k), *s2 += sum (v - k)^2, in double */                               \
    static ATTR void seg_moments##SFX(const float *v, size_t m, double k, double *s1,      \
                                      double *s2)                                          \
    {                                                                                       \
        const rt_v4d kk = {k, k, k, k};                                                     \
        rt_v4d a0 = {0, 0, 0, 0}, a1 = a0, q0 = a0, q1 = a0;                                \
        size_t i = 0;                                                                       \
        for (; i + 8 <= m; i += 8) {                                                        \
            rt_v4d e0 = __builtin_convertvector(rt__ld4(v + i), rt_v4d) - kk;               \
            rt_v4d e1 = __builtin_convertvector(rt__ld4(v + i + 4), rt_v4d) - kk;           \
            a0 += e0;                                                                       \
            a1 += e1;                                                                       \
            q0 += e0 * e0;                                                                  \
            q1 += e1 * e1;                                                                  \
        }                                                                                   \
        rt_v4d a = a0 + a1, q = q0 + q1;                                                    \
        double t1 = (a[0] + a[1]) + (a[2] + a[3]), t2 = (q[0] + q[1]) + (q[2] + q[3]);      \
        for (; i < m; i++) {                                                                \
            double e = (double)v[i] - k;                                                    \
            t1 += e;                                                                        \
            t2 += e * e;                                                                    \
        }                                                                                   \
        *s1 += t1;                                                                          \
        *s2 += t2;                                                                          \
    }                                                                                       \
    /* r = v*scale + shift */                                                               \
    static ATTR void seg_affine##SFX(float *r, const float *v, size_t m, float scale,       \
                                     float shift)                                          \
    {                                                                                       \
        const rt_v4 a = rt__splat4(scale), b = rt__splat4(shift);                           \
        size_t i = 0;                                                                       \
        for (; i + 8 <= m; i += 8) {                                                        \
            rt__st4(r + i, rt__ld4(v + i) * a + b);                                         \
            rt__st4(r + i + 4, rt__ld4(v + i + 4) * a + b);                                 \
        }                                                                                   \
        for (; i < m; i++)                                                                  \
            r[i] = v[i] * scale + shift;                                                    \
    }                                                                                       \
    /* *sdy += sum g, *sdyx += sum g * ((v - mean)*invstd) */                               \
    static ATTR void seg_bwd_sums##SFX(const float *g, const float *v, size_t m, float mean, \
                                       float invstd, double *sdy, double *sdyx)            \
    {                                                                                       \
        const rt_v4 mu = rt__splat4(mean), is = rt__splat4(invstd);                         \
        rt_v4d a0 = {0, 0, 0, 0}, a1 = a0, b0 = a0, b1 = a0;                                \
        size_t i = 0;                                                                       \
        for (; i + 8 <= m; i += 8) {                                                        \
            rt_v4d g0 = __builtin_convertvector(rt__ld4(g + i), rt_v4d);                    \
            rt_v4d g1 = __builtin_convertvector(rt__ld4(g + i + 4), rt_v4d);                \
            rt_v4d x0 = __builtin_convertvector((rt__ld4(v + i) - mu) * is, rt_v4d);        \
            rt_v4d x1 = __builtin_convertvector((rt__ld4(v + i + 4) - mu) * is, rt_v4d);    \
            a0 += g0;                                                                       \
            a1 += g1;                                                                       \
            b0 += g0 * x0;                                                                  \
            b1 += g1 * x1;                                                                  \
        }                                                                                   \
        rt_v4d a = a0 + a1, b = b0 + b1;                                                    \
        double s = (a[0] + a[1]) + (a[2] + a[3]), t = (b[0] + b[1]) + (b[2] + b[3]);        \
        for (; i < m; i++) {                                                                \
            s += g[i];                                                                      \
            t += (double)g[i] * (double)((v[i] - mean) * invstd);                           \
        }                                                                                   \
        *sdy += s;                                                                          \
        *sdyx += t;                                                                         \
    }                                                                                       \
    /* r = k*(g - mdy - (v - mean)*invstd*mdyx) */                                          \
    static ATTR void seg_bwd_dx##SFX(float *r, const float *g, const float *v, size_t m,    \
                                     float k, float mdy, float mean, float invstd,         \
                                     float mdyx)                                           \
    {                                                                                       \
        const rt_v4 kk = rt__splat4(k), md = rt__splat4(mdy), mu = rt__splat4(mean),        \
                    is = rt__splat4(invstd), mx = rt__splat4(mdyx);                         \
        size_t i = 0;                                                                       \
        for (; i + 8 <= m; i += 8) {                                                        \
            rt__st4(r + i, kk * (rt__ld4(g + i) - md - (rt__ld4(v + i) - mu) * is * mx));   \
            rt__st4(r + i + 4,                                                              \
                    kk * (rt__ld4(g + i + 4) - md - (rt__ld4(v + i + 4) - mu) * is * mx));  \
        }                                                                                   \
        for (; i < m; i++)                                                                  \
            r[i] = k * (g[i] - mdy - (v[i] - mean) * invstd * mdyx);                        \
    }

BN_SEGS(_gen, )
#if RT_HAVE_X86_SIMD
BN_SEGS(_avx2, __attribute__((target("avx2,fma"))))
#endif

typedef struct {
    void (*moments)(const float *v, size_t m, double k, double *s1, double *s2);
    void (*affine)(float *r, const float *v, size_t m, float scale, float shift);
    void (*bwd_sums)(const float *g, const float *v, size_t m, float mean, float invstd,
                     double *sdy, double *sdyx);
    void (*bwd_dx)(float *r, const float *g, const float *v, size_t m, float k, float mdy,
                   float mean, float invstd, float mdyx);
} BnSegs;

static const BnSegs *segs(void)
{
    static const BnSegs gen = {seg_moments_gen, seg_affine_gen, seg_bwd_sums_gen,
                               seg_bwd_dx_gen};
#if RT_HAVE_X86_SIMD
    static const BnSegs avx2 = {seg_moments_avx2, seg_affine_avx2, seg_bwd_sums_avx2,
                                seg_bwd_dx_avx2};
    if (rt__simd() >= RT_SIMD_AVX2)
        return &avx2;
#endif
    return &gen;
}

/* r = k*g */
static void seg_scale(float *r, const float *g, size_t m, float k)
{
    const rt_v4 kk = rt__splat4(k);
    size_t i = 0;
    for (; i + 4 <= m; i += 4)
        rt__st4(r + i, kk * rt__ld4(g + i));
    for (; i < m; i++)
        r[i] = k * g[i];
}

typedef struct {
    const RtBnDims *d;
    RtDType dt;
    const void *x, *dy;
    const float *gamma, *beta, *mean_in, *var_in, *save_mean_in, *save_invstd_in;
    float eps;
    bool fix_gamma, use_global_stats, acc_dx, acc_param;
    bool relu;        /* the fused BatchNorm + relu: y = relu(bn(x)) */
    const void *ry;   /* its backward: the relu's output, dy is masked by ry > 0 */
    const void *sc;   /* BatchNorm + add + relu: y = relu(bn(x) + sc) */
    void *dsc;        /* its backward: the masked dy, which the shortcut receives */
    const float *sums; /* the statistics given: sum [c] then sum of squares [c] */
    float *sums_out;   /* rt_batchnorm_stats's: written so */
    void *y;
    float *save_mean, *save_invstd, *dgamma, *dbeta;
    int64_t gs; /* channels a group */
    const BnSegs *f;
} BnJob;

/* The relu of the fused BatchNorm + relu, on BatchNorm's fp32 values r:
 * first rounded to dt, where the unfused BatchNorm stores them and the relu
 * reads them back, then ampc_relu (the unfused relu's values, NaN -> 0). */
static void relu_rounded(float *r, size_t m, RtDType dt)
{
    rt__round_through(r, m, dt);
    /* four lanes at a time, branch-free (a relu's sign is data, so a branch
     * mispredicts half the time): act.c's relu_f32, the same bits */
    const rt_v4 z = rt__splat4(0.0f);
    size_t i = 0;
    for (; i + 4 <= m; i += 4) {
        rt_v4 a = rt__ld4(r + i);
        rt__st4(r + i, rt__and4(a, a > z));
    }
    for (; i < m; i++)
        r[i] = ampc_relu(r[i]);
}

/* The fused backward's dy: dy * ampc_relu_grad_y(y) into mb, rounded to dt
 * as the unfused relu backward stores it; dy itself when not fused. */
static const float *relu_masked(const BnJob *j, const float *g, size_t off, size_t m, float *mb,
                                float *yb)
{
    if (!j->ry)
        return g;
    const float *yv = rt__view(j->ry, off, m, j->dt, yb);
    /* branch-free, as act.c's relu_grad_f32 (the same bits) */
    const rt_v4 z = rt__splat4(0.0f), one = rt__splat4(1.0f);
    size_t i = 0;
    for (; i + 4 <= m; i += 4)
        rt__st4(mb + i, rt__ld4(g + i) * rt__and4(one, rt__ld4(yv + i) > z));
    for (; i < m; i++)
        mb[i] = g[i] * ampc_relu_grad_y(yv[i]);
    rt__round_through(mb, m, j->dt);
    return mb;
}

/* r[0, m) += sc[off, off+m): the residual add, on BatchNorm's value rounded
 * to dt where the unfused BatchNorm stores it (the sum is rounded by the
 * relu after, where the unfused add stores it) */
static void add_rounded(float *r, const BnJob *j, size_t off, size_t m, float *buf)
{
    rt__round_through(r, m, j->dt);
    const float *s = rt__view(j->sc, off, m, j->dt, buf);
    size_t i = 0;
    for (; i + 4 <= m; i += 4)
        rt__st4(r + i, rt__ld4(r + i) + rt__ld4(s + i));
    for (; i < m; i++)
        r[i] += s[i];
}

/* y = x*scale[c] + shift[c] over channels [c0, c1) (then the relu, or the
 * add and the relu) */
static void group_affine(const BnJob *j, int64_t c0, const float *scale, const float *shift,
                         int64_t c1)
{
    float in[RT_CHUNK], out[RT_CHUNK], sb[RT_CHUNK];
    FOR_GROUP_CHUNKS(j->d, c0, c1, j->x, j->dt, in, c, v, m, off, {
        /* with the add, y may be sc itself: computed apart, stored last */
        float *r = j->sc ? out : rt__out(j->y, off, j->dt, false, out);
        j->f->affine(r, v, m, scale[c - c0], shift[c - c0]);
        if (j->sc)
            add_rounded(r, j, off, m, sb);
        if (j->relu)
            relu_rounded(r, m, j->dt);
        if (r == out)
            rt__commit(j->y, off, out, m, j->dt, false);
    })
}

/* ---- the GPU's order (kernels/bn_tree.h), element by element ---------------- */

/* row r += row r + h for h = 16, ..., 1: a warp's shuffle-down tree */
static double tree_fold(double *a)
{
    for (int h = AMPC_BN_ROWS / 2; h >= 1; h /= 2)
        for (int r = 0; r < h; r++)
            a[r] += a[r + h];
    return a[0];
}

static size_t elem_at(const RtBnDims *d, int64_t ch, int64_t e)
{
    int64_t o = e / d->inner, i = e - o * d->inner;
    return ((size_t)o * (size_t)d->c + (size_t)ch) * (size_t)d->inner + (size_t)i;
}

static float round_to(float v, RtDType dt)
{
    rt__round_through(&v, 1, dt);
    return v;
}

/* The tree's two sums of channel ch: f(e) gives element e's two terms. */
typedef void TreeTerms(const BnJob *j, int64_t ch, int64_t e, double *t1, double *t2);

static void tree_sums(const BnJob *j, int64_t ch, TreeTerms *f, double *s1, double *s2)
{
    const RtBnDims *d = j->d;
    int64_t r = d->outer * d->inner, te = ampc_bn_tile(r, d->c), nt = ampc_bn_tiles(r, d->c);
    double l1[AMPC_BN_LANES] = {0}, l2[AMPC_BN_LANES] = {0};
    for (int64_t t = 0; t < nt; t++) {
        double a1[AMPC_BN_ROWS], a2[AMPC_BN_ROWS];
        int64_t end = (t + 1) * te < r ? (t + 1) * te : r;
        for (int row = 0; row < AMPC_BN_ROWS; row++) {
            a1[row] = a2[row] = 0.0;
            for (int64_t e = t * te + row; e < end; e += AMPC_BN_ROWS) {
                double t1, t2;
                f(j, ch, e, &t1, &t2);
                a1[row] += t1;
                a2[row] += t2;
            }
        }
        l1[t % AMPC_BN_LANES] += tree_fold(a1);
        l2[t % AMPC_BN_LANES] += tree_fold(a2);
    }
    *s1 = tree_fold(l1);
    *s2 = tree_fold(l2);
}

/* the statistics' terms: v - k and its square, k the channel's first element */
static void moment_terms(const BnJob *j, int64_t ch, int64_t e, double *t1, double *t2)
{
    double k = rt__get(j->x, elem_at(j->d, ch, 0), j->dt);
    double v = (double)rt__get(j->x, elem_at(j->d, ch, e), j->dt) - k;
    *t1 = v;
    *t2 = v * v;
}

/* the backward's dy (the relu's gradient where fused: dsc once written, else
 * dy masked by ry and rounded, as relu_masked) */
static float bwd_dy(const BnJob *j, size_t at)
{
    if (j->dsc)
        return rt__get(j->dsc, at, j->dt);
    float g = rt__get(j->dy, at, j->dt);
    return j->ry ? round_to(g * ampc_relu_grad_y(rt__get(j->ry, at, j->dt)), j->dt) : g;
}

/* the backward's terms: g and g * xhat, xhat = (x - mean)*invstd in fp32 */
static void bwd_terms(const BnJob *j, int64_t ch, int64_t e, double *t1, double *t2)
{
    size_t at = elem_at(j->d, ch, e);
    float g = bwd_dy(j, at);
    float xh = (rt__get(j->x, at, j->dt) - j->save_mean_in[ch]) * j->save_invstd_in[ch];
    *t1 = g;
    *t2 = (double)g * (double)xh;
}

/* Training statistics in one pass: per channel, the moments of x - k with
 * k = the channel's first element, so that var = S2/m - (S1/m)^2 does not
 * cancel (k is within the data's spread); in double. */
static void bn_train_range(void *p, size_t g0, size_t g1)
{
    const BnJob *j = p;
    const RtBnDims *d = j->d;
    double cnt = (double)d->outer * (double)d->inner;
    float buf[RT_CHUNK], scale[RT_BN_GROUP], shift[RT_BN_GROUP];
    double s1[RT_BN_GROUP], s2[RT_BN_GROUP], kk[RT_BN_GROUP];
    for (size_t gi = g0; gi < g1; gi++) {
        int64_t c0 = (int64_t)gi * j->gs, c1 = c0 + j->gs < d->c ? c0 + j->gs : d->c;
        for (int64_t c = c0; c < c1; c++) {
            s1[c - c0] = s2[c - c0] = 0.0;
            kk[c - c0] = j->sums ? 0.0 : rt__get(j->x, (size_t)c * (size_t)d->inner, j->dt);
        }
        if (j->sums) { /* given: the moments about 0 (rt_batchnorm_forward_train_sums) */
            for (int64_t c = c0; c < c1; c++)
                s1[c - c0] = j->sums[c], s2[c - c0] = j->sums[d->c + c];
        } else if (d->order == RT_BN_ORDER_TILED) {
            for (int64_t c = c0; c < c1; c++)
                tree_sums(j, c, moment_terms, &s1[c - c0], &s2[c - c0]);
        } else {
            FOR_GROUP_CHUNKS(d, c0, c1, j->x, j->dt, buf, c, v, m, off, {
                (void)off;
                j->f->moments(v, m, kk[c - c0], &s1[c - c0], &s2[c - c0]);
            })
        }
        for (int64_t c = c0; c < c1; c++) {
            double m1 = s1[c - c0] / cnt, var = s2[c - c0] / cnt - m1 * m1;
            double mean = kk[c - c0] + m1;
            var = var > 0.0 ? var : 0.0;
            float fmean = (float)mean, invstd = (float)(1.0 / sqrt(var + (double)j->eps));
            j->save_mean[c] = fmean;
            j->save_invstd[c] = invstd;
            scale[c - c0] = (j->fix_gamma ? 1.0f : j->gamma[c]) * invstd;
            shift[c - c0] = j->beta[c] - fmean * scale[c - c0];
        }
        group_affine(j, c0, scale, shift, c1);
    }
}

/* Groups of RT_BN_GROUP channels, or smaller ones so that every thread
 * gets about four: sets j->gs and returns the group count.  (The results
 * do not depend on the grouping.) */
static size_t bn_plan(const RtBnDims *d, BnJob *j)
{
    int nt = rt__threads();
    int64_t gs = RT_BN_GROUP;
    if (nt > 1) {
        int64_t want = (d->c + 4 * nt - 1) / (4 * nt);
        if (want < gs)
            gs = want < 1 ? 1 : want;
    }
    j->gs = gs;
    return (size_t)((d->c + gs - 1) / gs);
}

static void bn_run(const RtBnDims *d, BnJob *j, size_t passes,
                   void (*fn)(void *ctx, size_t lo, size_t hi))
{
    size_t ng = bn_plan(d, j);
    j->f = segs();
    rt__parallel_items(ng, (size_t)j->gs * (size_t)(d->outer * d->inner) * passes, fn, j);
}

void rt_batchnorm_forward_train(const RtBnDims *d, RtDType dt, const void *x,
                                const float *gamma, const float *beta, float eps,
                                bool fix_gamma, void *y, float *save_mean, float *save_invstd)
{
    BnJob j = {.d = d, .dt = dt, .x = x, .gamma = gamma, .beta = beta, .eps = eps,
               .fix_gamma = fix_gamma, .y = y, .save_mean = save_mean,
               .save_invstd = save_invstd};
    bn_run(d, &j, 2, bn_train_range);
}

/* ---- BatchNorm from statistics given (the conv_bn_stats fusion's) ---------- */

/* each channel's sum and sum of squares, in double in the CPU's order, each
 * rounded once to fp32 */
static void bn_stats_range(void *p, size_t g0, size_t g1)
{
    const BnJob *j = p;
    const RtBnDims *d = j->d;
    float buf[RT_CHUNK];
    double s1[RT_BN_GROUP], s2[RT_BN_GROUP];
    for (size_t gi = g0; gi < g1; gi++) {
        int64_t c0 = (int64_t)gi * j->gs, c1 = c0 + j->gs < d->c ? c0 + j->gs : d->c;
        for (int64_t c = c0; c < c1; c++)
            s1[c - c0] = s2[c - c0] = 0.0;
        FOR_GROUP_CHUNKS(d, c0, c1, j->x, j->dt, buf, c, v, m, off, {
            (void)off;
            j->f->moments(v, m, 0.0, &s1[c - c0], &s2[c - c0]);
        })
        for (int64_t c = c0; c < c1; c++) {
            j->sums_out[c] = (float)s1[c - c0];
            j->sums_out[d->c + c] = (float)s2[c - c0];
        }
    }
}

void rt_batchnorm_stats(const RtBnDims *d, RtDType dt, const void *x, float *stats)
{
    BnJob j = {.d = d, .dt = dt, .x = x, .sums_out = stats};
    bn_run(d, &j, 1, bn_stats_range);
}

void rt_batchnorm_forward_train_sums(const RtBnDims *d, RtDType dt, const void *x, const void *sc,
                                     bool relu, const float *stats, const float *gamma,
                                     const float *beta, float eps, bool fix_gamma, void *y,
                                     float *save_mean, float *save_invstd)
{
    BnJob j = {.d = d,
               .dt = dt,
               .x = x,
               .gamma = gamma,
               .beta = beta,
               .eps = eps,
               .fix_gamma = fix_gamma,
               .y = y,
               .save_mean = save_mean,
               .save_invstd = save_invstd,
               .relu = relu || sc,
               .sc = sc,
               .sums = stats};
    bn_run(d, &j, 1, bn_train_range);
}

void rt_batchnorm_update_moving(int64_t c, int64_t count, const float *save_mean,
                                const float *save_invstd, float eps, float momentum,
                                float *moving_mean, float *moving_var, const RtStepState *step)
{
    if (step && step->dynamic && step->flag)
        return; /* a skipped step */
    for (int64_t i = 0; i < c; i++) {
        double is = save_invstd[i];
        double var = 1.0 / (is * is) - (double)eps;
        if (var < 0.0)
            var = 0.0;
        if (count > 1)
            var *= (double)count / (double)(count - 1);
        moving_mean[i] = moving_mean[i] * momentum + save_mean[i] * (1.0f - momentum);
        moving_var[i] = moving_var[i] * momentum + (float)var * (1.0f - momentum);
    }
}

static void bn_infer_range(void *p, size_t g0, size_t g1)
{
    const BnJob *j = p;
    float scale[RT_BN_GROUP], shift[RT_BN_GROUP];
    for (size_t gi = g0; gi < g1; gi++) {
        int64_t c0 = (int64_t)gi * j->gs, c1 = c0 + j->gs < j->d->c ? c0 + j->gs : j->d->c;
        for (int64_t c = c0; c < c1; c++) {
            float invstd = 1.0f / sqrtf(j->var_in[c] + j->eps);
            scale[c - c0] = (j->fix_gamma ? 1.0f : j->gamma[c]) * invstd;
            shift[c - c0] = j->beta[c] - j->mean_in[c] * scale[c - c0];
            if (j->save_mean)
                j->save_mean[c] = j->mean_in[c];
            if (j->save_invstd)
                j->save_invstd[c] = invstd;
        }
        group_affine(j, c0, scale, shift, c1);
    }
}

void rt_batchnorm_forward_inference(const RtBnDims *d, RtDType dt, const void *x,
                                    const float *gamma, const float *beta,
                                    const float *moving_mean, const float *moving_var,
                                    float eps, bool fix_gamma, void *y, float *save_mean,
                                    float *save_invstd)
{
    BnJob j = {.d = d, .dt = dt, .x = x, .gamma = gamma, .beta = beta, .mean_in = moving_mean,
               .var_in = moving_var, .eps = eps, .fix_gamma = fix_gamma, .y = y,
               .save_mean = save_mean, .save_invstd = save_invstd};
    bn_run(d, &j, 1, bn_infer_range);
}

static void bn_bwd_range(void *p, size_t g0, size_t g1)
{
    const BnJob *j = p;
    const RtBnDims *d = j->d;
    RtDType dt = j->dt;
    bool fix_gamma = j->fix_gamma, acc_param = j->acc_param, acc_dx = j->acc_dx;
    double cnt = (double)d->outer * (double)d->inner;
    float xb[RT_CHUNK], dyb[RT_CHUNK], out[RT_CHUNK], mb[RT_CHUNK], yb[RT_CHUNK];
    double sdy[RT_BN_GROUP], sdyx[RT_BN_GROUP];
    float k[RT_BN_GROUP], mdy[RT_BN_GROUP], mdyx[RT_BN_GROUP];
    bool tree = d->order == RT_BN_ORDER_TILED;
    for (size_t gi = g0; gi < g1; gi++) {
        int64_t c0 = (int64_t)gi * j->gs, c1 = c0 + j->gs < d->c ? c0 + j->gs : d->c;
        for (int64_t c = c0; c < c1; c++)
            sdy[c - c0] = sdyx[c - c0] = 0.0;
        /* the masked dy into dsc (the add's fusion: the shortcut's gradient),
         * and the sums in the CPU's order */
        if (!tree || j->dsc)
            FOR_GROUP_CHUNKS(d, c0, c1, j->dy, dt, dyb, c, g, m, off, {
                g = relu_masked(j, g, off, m, mb, yb);
                if (j->dsc)
                    rt__commit(j->dsc, off, g, m, dt, false);
                if (!tree)
                    j->f->bwd_sums(g, rt__view(j->x, off, m, dt, xb), m, j->save_mean_in[c],
                                   j->save_invstd_in[c], &sdy[c - c0], &sdyx[c - c0]);
            })
        for (int64_t c = c0; tree && c < c1; c++)
            tree_sums(j, c, bwd_terms, &sdy[c - c0], &sdyx[c - c0]);
        for (int64_t c = c0; c < c1; c++) {
            if (j->dbeta)
                j->dbeta[c] = (acc_param ? j->dbeta[c] : 0.0f) + (float)sdy[c - c0];
            if (j->dgamma && !(fix_gamma && acc_param))
                j->dgamma[c] =
                    fix_gamma ? 0.0f : (acc_param ? j->dgamma[c] : 0.0f) + (float)sdyx[c - c0];
            k[c - c0] = (fix_gamma ? 1.0f : j->gamma[c]) * j->save_invstd_in[c];
            mdy[c - c0] = (float)(sdy[c - c0] / cnt);
            mdyx[c - c0] = (float)(sdyx[c - c0] / cnt);
        }
        if (!j->y)
            continue;
        /* dx from dsc, the masked dy, when it was written (no mask again) */
        FOR_GROUP_CHUNKS(d, c0, c1, j->dsc ? j->dsc : j->dy, dt, dyb, c, g, m, off, {
            float *r = rt__out(j->y, off, dt, acc_dx, out);
            if (!j->dsc)
                g = relu_masked(j, g, off, m, mb, yb);
            if (j->use_global_stats) {
                seg_scale(r, g, m, k[c - c0]);
            } else {
                const float *v = rt__view(j->x, off, m, dt, xb);
                j->f->bwd_dx(r, g, v, m, k[c - c0], mdy[c - c0], j->save_mean_in[c],
                           j->save_invstd_in[c], mdyx[c - c0]);
            }
            if (r == out)
                rt__commit(j->y, off, out, m, dt, acc_dx);
        })
    }
}

void rt_batchnorm_backward(const RtBnDims *d, RtDType dt, const void *x, const void *dy,
                           const float *gamma, const float *save_mean, const float *save_invstd,
                           bool fix_gamma, bool use_global_stats, void *dx, float *dgamma,
                           float *dbeta, bool acc_dx, bool acc_param)
{
    BnJob j = {.d = d, .dt = dt, .x = x, .dy = dy, .gamma = gamma, .save_mean_in = save_mean,
               .save_invstd_in = save_invstd, .fix_gamma = fix_gamma,
               .use_global_stats = use_global_stats, .acc_dx = acc_dx, .acc_param = acc_param,
               .y = dx, .dgamma = dgamma, .dbeta = dbeta};
    bn_run(d, &j, 2, bn_bwd_range);
}

/* ---- BatchNorm + relu (the fuse pass's) ------------------------------------ */

void rt_batchnorm_relu_forward_train(const RtBnDims *d, RtDType dt, const void *x,
                                     const float *gamma, const float *beta, float eps,
                                     bool fix_gamma, void *y, float *save_mean,
                                     float *save_invstd)
{
    BnJob j = {.d = d, .dt = dt, .x = x, .gamma = gamma, .beta = beta, .eps = eps,
               .fix_gamma = fix_gamma, .y = y, .save_mean = save_mean,
               .save_invstd = save_invstd, .relu = true};
    bn_run(d, &j, 2, bn_train_range);
}

void rt_batchnorm_relu_forward_inference(const RtBnDims *d, RtDType dt, const void *x,
                                         const float *gamma, const float *beta,
                                         const float *moving_mean, const float *moving_var,
                                         float eps, bool fix_gamma, void *y, float *save_mean,
                                         float *save_invstd)
{
    BnJob j = {.d = d, .dt = dt, .x = x, .gamma = gamma, .beta = beta, .mean_in = moving_mean,
               .var_in = moving_var, .eps = eps, .fix_gamma = fix_gamma, .y = y,
               .save_mean = save_mean, .save_invstd = save_invstd, .relu = true};
    bn_run(d, &j, 1, bn_infer_range);
}

void rt_batchnorm_relu_backward(const RtBnDims *d, RtDType dt, const void *x, const void *y,
                                const void *dy, const float *gamma, const float *save_mean,
                                const float *save_invstd, bool fix_gamma, bool use_global_stats,
                                void *dx, float *dgamma, float *dbeta, bool acc_dx,
                                bool acc_param)
{
    BnJob j = {.d = d, .dt = dt, .x = x, .dy = dy, .gamma = gamma, .save_mean_in = save_mean,
               .save_invstd_in = save_invstd, .fix_gamma = fix_gamma,
               .use_global_stats = use_global_stats, .acc_dx = acc_dx, .acc_param = acc_param,
               .y = dx, .dgamma = dgamma, .dbeta = dbeta, .ry = y};
    bn_run(d, &j, 2, bn_bwd_range);
}

/* ---- BatchNorm + residual add + relu (the fuse pass's) ----------------------- */

void rt_batchnorm_add_relu_forward_train(const RtBnDims *d, RtDType dt, const void *x,
                                         const void *sc, const float *gamma, const float *beta,
                                         float eps, bool fix_gamma, void *y, float *save_mean,
                                         float *save_invstd)
{
    BnJob j = {.d = d, .dt = dt, .x = x, .gamma = gamma, .beta = beta, .eps = eps,
               .fix_gamma = fix_gamma, .y = y, .save_mean = save_mean,
               .save_invstd = save_invstd, .relu = true, .sc = sc};
    bn_run(d, &j, 2, bn_train_range);
}

void rt_batchnorm_add_relu_forward_inference(const RtBnDims *d, RtDType dt, const void *x,
                                             const void *sc, const float *gamma,
                                             const float *beta, const float *moving_mean,
                                             const float *moving_var, float eps, bool fix_gamma,
                                             void *y, float *save_mean, float *save_invstd)
{
    BnJob j = {.d = d, .dt = dt, .x = x, .gamma = gamma, .beta = beta, .mean_in = moving_mean,
               .var_in = moving_var, .eps = eps, .fix_gamma = fix_gamma, .y = y,
               .save_mean = save_mean, .save_invstd = save_invstd, .relu = true, .sc = sc};
    bn_run(d, &j, 1, bn_infer_range);
}

void rt_batchnorm_add_relu_backward(const RtBnDims *d, RtDType dt, const void *x, const void *y,
                                    const void *dy, const float *gamma, const float *save_mean,
                                    const float *save_invstd, bool fix_gamma,
                                    bool use_global_stats, void *dsc, void *dx, float *dgamma,
                                    float *dbeta, bool acc_dx, bool acc_param)
{
    BnJob j = {.d = d, .dt = dt, .x = x, .dy = dy, .gamma = gamma, .save_mean_in = save_mean,
               .save_invstd_in = save_invstd, .fix_gamma = fix_gamma,
               .use_global_stats = use_global_stats, .acc_dx = acc_dx, .acc_param = acc_param,
               .y = dx, .dgamma = dgamma, .dbeta = dbeta, .ry = y, .dsc = dsc};
    bn_run(d, &j, 3, bn_bwd_range);
}
