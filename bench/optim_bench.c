/*
 * optim_bench.c - memory bandwidth of the fused multi-precision optimizer
 * updates of runtime/kernels/optim.h, against a copy in the same run.
 *
 * The parameters are ResNet-50 v1d's 167 trainable tensors (25,576,264
 * values; FACTS.md G), laid out one after another in flat arrays as the
 * runtime's buffers are: fp16 gradient in, fp32 master and state, fp16
 * shadow out.  Each update is one pass per tensor (per-tensor wd: 0 for
 * BatchNorm gamma/beta and the fc bias, as MXNet's rule gives for beta and
 * bias), with `--threads` threads splitting the flat range.
 *
 * Bytes counted per parameter (what the update must move; write-allocate
 * reads of the output lines are not counted, as STREAM does not count
 * them):
 *   sgd_mom mp: read grad 2 + master 4 + mom 4, write master 4 + mom 4 + shadow 2 = 20
 *   nag mp:     the same                                                          = 20
 *   adam mp:    read grad 2 + master 4 + mean 4 + var 4, write 4 + 4 + 4 + 2       = 28
 * and for the copy (a[i] = b[i] over 2 x 64 Mi floats, 64 bytes a step with
 * ordinary stores, kept from becoming a memcpy call): read 4 + write 4 = 8
 * per element; glibc's memcpy (non-temporal stores on large copies: no
 * read of the destination) is measured beside it.
 *
 * Loop variants (all give bit-identical results; the bench checks):
 *   elem:  one loop calling ampc_mp_*_update per element (what optim.c
 *          does).  half.h's conversions do not vectorise with gcc 12 at
 *          -O2 or -O3 (see below), so this loop is scalar.
 *   chunk: per chunk of 512 elements: ampc_half_to_float_n into a stack
 *          buffer, the fp32 ampc_*_update, ampc_float_to_half_n from the new
 *          master (the same bytes cross memory; the chunk stays in L1).
 *   vec:   one loop, per element: widen the gradient, the fp32 update,
 *          round the new master, with bench-local conversions (h2f, f2h
 *          below) written as bit-mask selects, which gcc 12 vectorises at
 *          -O3, and at -O2 too in blocks of a constant 512 elements; the
 *          clip test is hoisted out of the loop.
 *   lut:   one scalar loop: the gradient widened through a 65,536-entry
 *          table, the shadow rounded by half.h's normal-range formula
 *          behind a predictable branch (ampc_float_to_half otherwise).
 *   +chk:  the same with a fused finite check of the gradient (the
 *          dynamic-loss-scaling test), OR-ed into a flag in the same pass.
 *   f16c+chk: AVX2 + F16C, picked at run time (CPUID) through gcc/clang
 *          target attributes, so the file still builds for baseline x86-64
 *          at the runtime's flags: 8 elements a step, hardware conversions
 *          (exact, explicit round-to-nearest-even), the update in optim.h's
 *          operation order without FMA, with the finite check.
 * The check of the variants runs each on 100,003 values with inf and NaN
 * gradients, masters beyond the fp16 range and masters with subnormal
 * halves, with and without clipping, and compares every bit with elem.
 * The vec and lut conversions are checked bit-identical to half.h's at
 * start-up: every half; floats in steps of 61 over all 2^32 patterns; every
 * float around the subnormal and overflow boundaries, both signs.
 *
 * Why half.h's loops do not vectorise with gcc 12.2: in ampc_half_to_float
 * the subnormal value (a float multiply) is sunk into the one arm of the
 * select that uses it, and if-conversion will not speculate a trapping FP
 * operation (-fno-trapping-math lets it); in ampc_float_to_half the
 * subnormal path's per-lane variable shift has no SSE2 instruction and the
 * rounding test becomes _Bool arithmetic.  h2f/f2h select with masks
 * (nothing to sink) and do the subnormal rounding in fp32: |f| * 2^24 is
 * exact, truncation to int, and the exact remainder compared with 0.5 —
 * independent of the rounding mode and of FTZ/DAZ (a float subnormal input
 * rounds to 0 either way).
 *
 * Timings are printed, never asserted.  Usage:
 *   optim_bench [--reps N] [--threads LIST] [--only sgd|nag|adam] [--size N]
 *               [--no-convcheck]
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/optim.h"

#ifndef COMPILER_FLAGS
#define COMPILER_FLAGS "?"
#endif

/* ---- the tensors -------------------------------------------------------- */

#define MAX_TENSORS 200
typedef struct {
    int64_t off, n;
    float wd;
} Tensor;

static Tensor tensors[MAX_TENSORS];
static int ntensors;
static int64_t total;

static void add(int64_t n, float wd)
{
    tensors[ntensors].off = total;
    tensors[ntensors].n = n;
    tensors[ntensors].wd = wd;
    ntensors++;
    total += n;
}

static void conv(int o, int i, int k) { add((int64_t)o * i * k * k, 1e-4f); }
static void bn(int c)
{
    add(c, 0); /* gamma (MXNet decays _gamma; no difference to the traffic) */
    add(c, 0); /* beta */
}

/* ResNet-50 v1d: deep stem (3x3 convs 32, 32, 64), bottlenecks [3, 4, 6, 3],
 * average-pool downsampling with a 1x1 conv, fc 2048 -> 1000. */
static void resnet50_v1d(void)
{
    conv(32, 3, 3), bn(32), conv(32, 32, 3), bn(32), conv(64, 32, 3), bn(64);
    int in = 64;
    static const int blocks[4] = {3, 4, 6, 3};
    for (int s = 0; s < 4; s++) {
        int w = 64 << s;
        for (int b = 0; b < blocks[s]; b++) {
            conv(w, in, 1), bn(w), conv(w, w, 3), bn(w), conv(4 * w, w, 1), bn(4 * w);
            if (b == 0)
                conv(4 * w, in, 1), bn(4 * w);
            in = 4 * w;
        }
    }
    add(1000 * 2048, 1e-4f);
    add(1000, 0);
}

/* ---- the update loops ------------------------------------------------- */

typedef enum { OPT_SGD, OPT_NAG, OPT_ADAM } Opt;
static const char *const opt_name[3] = {"sgd_mom", "nag", "adam"};
static const int opt_bytes[3] = {20, 20, 28};

typedef enum { V_ELEM, V_ELEM_CHK, V_CHUNK, V_VEC, V_LUT, V_LUT_CHK, V_F16C, NVARIANTS } Variant;
static const char *const variant_name[NVARIANTS] = {"elem", "elem+chk", "chunk", "vec",
                                                    "lut", "lut+chk", "f16c+chk"};

typedef struct {
    ampc_half *g, *s; /* gradient in, shadow out */
    float *w, *m, *v; /* master, momentum or mean, var */
} Arrays;

#define CHUNK 512

/* Per-element: the loops optim.c runs.  The finite check ORs the
 * exponent-all-ones test of each gradient into `bad`. */
#define ELEM_LOOP(NAME, CHECK, BODY)                                                         \
    static unsigned NAME(const ampc_half *restrict g, float *restrict w, float *restrict m,  \
                         float *restrict v, ampc_half *restrict s, int64_t n, AmpcOptParam p) \
    {                                                                                        \
        unsigned bad = 0;                                                                    \
        (void)m;                                                                             \
        (void)v;                                                                             \
        for (int64_t i = 0; i < n; i++) {                                                    \
            if (CHECK)                                                                       \
                bad |= (g[i] & 0x7c00u) == 0x7c00u;                                          \
            BODY;                                                                            \
        }                                                                                    \
        return bad;                                                                          \
    }

ELEM_LOOP(sgd_elem, 0, s[i] = ampc_mp_sgd_mom_update(&w[i], &m[i], g[i], p))
ELEM_LOOP(sgd_elem_chk, 1, s[i] = ampc_mp_sgd_mom_update(&w[i], &m[i], g[i], p))
ELEM_LOOP(nag_elem, 0, s[i] = ampc_mp_nag_mom_update(&w[i], &m[i], g[i], p))
ELEM_LOOP(nag_elem_chk, 1, s[i] = ampc_mp_nag_mom_update(&w[i], &m[i], g[i], p))
ELEM_LOOP(adam_elem, 0, s[i] = ampc_mp_adam_update(&w[i], &m[i], &v[i], g[i], p))
ELEM_LOOP(adam_elem_chk, 1, s[i] = ampc_mp_adam_update(&w[i], &m[i], &v[i], g[i], p))

/* Chunked: bulk-convert the gradient, update in fp32, bulk-convert the new
 * masters to the shadow. */
#define CHUNK_LOOP(NAME, CHECK, BODY)                                                        \
    static unsigned NAME(const ampc_half *restrict g, float *restrict w, float *restrict m,  \
                         float *restrict v, ampc_half *restrict s, int64_t n, AmpcOptParam p) \
    {                                                                                        \
        float gf[CHUNK];                                                                     \
        unsigned bad = 0;                                                                    \
        (void)m;                                                                             \
        (void)v;                                                                             \
        for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {                                          \
            int64_t cn = n - c0 < CHUNK ? n - c0 : CHUNK;                                    \
            const ampc_half *gc = g + c0;                                                    \
            if (CHECK)                                                                       \
                for (int64_t i = 0; i < cn; i++)                                             \
                    bad |= (gc[i] & 0x7c00u) == 0x7c00u;                                     \
            ampc_half_to_float_n(gf, gc, (size_t)cn);                                        \
            float *wc = w + c0;                                                              \
            float *mc = m ? m + c0 : NULL;                                                   \
            float *vc = v + c0;                                                              \
            (void)vc;                                                                        \
            for (int64_t i = 0; i < cn; i++)                                                 \
                BODY;                                                                        \
            ampc_float_to_half_n(s + c0, wc, (size_t)cn);                                    \
        }                                                                                    \
        return bad;                                                                          \
    }

CHUNK_LOOP(sgd_chunk, 0, ampc_sgd_mom_update(&wc[i], &mc[i], gf[i], p))
CHUNK_LOOP(nag_chunk, 0, ampc_nag_mom_update(&wc[i], &mc[i], gf[i], p))
CHUNK_LOOP(adam_chunk, 0, ampc_adam_update(&wc[i], &mc[i], &vc[i], gf[i], p))

/* Vectorisable conversions, bit-identical to half.h's (see the top). */
static inline uint32_t msk(int c) { return 0u - (uint32_t)c; }

static inline float h2f(ampc_half h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t normal = ((e + 112u) << 23) | (m << 13);
    uint32_t special = 0x7f800000u | (m << 13) | (msk(m != 0) & 0x00400000u);
    uint32_t sub = ampc_f32_bits((float)m * 5.9604644775390625e-8f); /* exact */
    uint32_t z = msk(e == 0), s = msk(e == 31);
    return ampc_bits_f32(sign | (sub & z) | (special & s) | (normal & ~(z | s)));
}

static inline ampc_half f2h(float f)
{
    uint32_t x = ampc_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    uint32_t nb = a - 0x38000000u;
    uint32_t normal = (nb + 0x0fffu + ((nb >> 13) & 1u)) >> 13;
    /* below 2^-14: round |f| * 2^24 (exact, < 2^10) to an integer, ties even */
    uint32_t is_sub = msk(a < 0x38800000u);
    float y = ampc_bits_f32(a & is_sub) * 16777216.0f;
    int32_t t = (int32_t)y;
    float fr = y - (float)t; /* exact */
    uint32_t gt = msk(fr > 0.5f), eq = msk(fr == 0.5f), odd = 0u - ((uint32_t)t & 1u);
    uint32_t sub = (uint32_t)t - (gt | (eq & odd));
    uint32_t nan = 0x7e00u | ((a >> 13) & 0x03ffu);
    uint32_t is_nan = msk(a > 0x7f800000u), is_big = msk(a >= 0x477ff000u);
    uint32_t r = (nan & is_nan) | (0x7c00u & is_big & ~is_nan) | (normal & ~is_big & ~is_sub) |
                 (sub & is_sub);
    return (ampc_half)(sign | r);
}

/* Fused: blocks of a constant FB elements (gcc's -O2 cost model vectorises
 * only loops that need no epilogue), then the rest; the clip test is
 * hoisted (q.clip_gradient < 0 is then a constant inside). */
#define FB 512
#define FUSED_LOOP(NAME, CHECK, BODY)                                                         \
    static inline unsigned NAME##_n(const ampc_half *restrict g, float *restrict w,          \
                                    float *restrict m, float *restrict v,                    \
                                    ampc_half *restrict s, int64_t n, AmpcOptParam q)        \
    {                                                                                         \
        unsigned bad = 0;                                                                     \
        (void)m;                                                                              \
        (void)v;                                                                              \
        int64_t b = 0;                                                                        \
        for (; b + FB <= n; b += FB) {                                                        \
            const ampc_half *gb = g + b;                                                      \
            float *wb = w + b, *mb = m + b, *vb = v + b;                                      \
            ampc_half *sb = s + b;                                                            \
            (void)mb;                                                                         \
            (void)vb;                                                                         \
            for (int i = 0; i < FB; i++) {                                                    \
                if (CHECK)                                                                    \
                    bad |= (gb[i] & 0x7c00u) == 0x7c00u;                                      \
                float gf = h2f(gb[i]);                                                        \
                BODY;                                                                         \
                sb[i] = f2h(wb[i]);                                                           \
            }                                                                                 \
        }                                                                                     \
        const ampc_half *gb = g + b;                                                          \
        float *wb = w + b, *mb = m + b, *vb = v + b;                                          \
        ampc_half *sb = s + b;                                                                \
        (void)mb;                                                                             \
        (void)vb;                                                                             \
        for (int64_t i = 0; i < n - b; i++) {                                                 \
            if (CHECK)                                                                        \
                bad |= (gb[i] & 0x7c00u) == 0x7c00u;                                          \
            float gf = h2f(gb[i]);                                                            \
            BODY;                                                                             \
            sb[i] = f2h(wb[i]);                                                               \
        }                                                                                     \
        return bad;                                                                           \
    }                                                                                         \
    static unsigned NAME(const ampc_half *restrict g, float *restrict w, float *restrict m,   \
                         float *restrict v, ampc_half *restrict s, int64_t n, AmpcOptParam p)  \
    {                                                                                         \
        if (p.clip_gradient < 0.0f) {                                                         \
            AmpcOptParam q = p;                                                               \
            q.clip_gradient = -1.0f;                                                          \
            return NAME##_n(g, w, m, v, s, n, q);                                             \
        }                                                                                     \
        return NAME##_n(g, w, m, v, s, n, p);                                                 \
    }

/* sgd and nag never touch v; callers pass m there, never NULL. */
FUSED_LOOP(sgd_vec, 0, ampc_sgd_mom_update(&wb[i], &mb[i], gf, q))
FUSED_LOOP(nag_vec, 0, ampc_nag_mom_update(&wb[i], &mb[i], gf, q))
FUSED_LOOP(adam_vec, 0, ampc_adam_update(&wb[i], &mb[i], &vb[i], gf, q))

/* Scalar, with cheap conversions: the gradient through a 65,536-entry
 * table built from ampc_half_to_float (256 KiB: L2-resident), the shadow
 * through a branch whose common side (the new master is a normal half) is
 * half.h's own normal-range rounding, and half.h's ampc_float_to_half
 * otherwise.  Bit-identical by construction. */
static float h2f_table[65536];

static void h2f_table_init(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        h2f_table[h] = ampc_half_to_float((ampc_half)h);
}

static inline ampc_half f2h_fast(float f)
{
    uint32_t x = ampc_f32_bits(f);
    uint32_t a = x & 0x7fffffffu;
    if (__builtin_expect(a - 0x38800000u < 0x477ff000u - 0x38800000u, 1)) {
        uint32_t nb = a - 0x38000000u; /* as in ampc_float_to_half */
        return (ampc_half)(((x >> 16) & 0x8000u) | ((nb + 0x0fffu + ((nb >> 13) & 1u)) >> 13));
    }
    return ampc_float_to_half(f);
}

#define LUT_LOOP(NAME, CHECK, BODY)                                                          \
    static inline unsigned NAME##_n(const ampc_half *restrict g, float *restrict w,         \
                                    float *restrict m, float *restrict v,                   \
                                    ampc_half *restrict s, int64_t n, AmpcOptParam q)       \
    {                                                                                        \
        unsigned bad = 0;                                                                    \
        (void)m;                                                                             \
        (void)v;                                                                             \
        for (int64_t i = 0; i < n; i++) {                                                    \
            if (CHECK)                                                                       \
                bad |= (g[i] & 0x7c00u) == 0x7c00u;                                          \
            float gf = h2f_table[g[i]];                                                      \
            BODY;                                                                            \
            s[i] = f2h_fast(w[i]);                                                           \
        }                                                                                    \
        return bad;                                                                          \
    }                                                                                        \
    static unsigned NAME(const ampc_half *restrict g, float *restrict w, float *restrict m,  \
                         float *restrict v, ampc_half *restrict s, int64_t n, AmpcOptParam p) \
    {                                                                                        \
        if (p.clip_gradient < 0.0f) {                                                        \
            AmpcOptParam q = p;                                                              \
            q.clip_gradient = -1.0f;                                                         \
            return NAME##_n(g, w, m, v, s, n, q);                                            \
        }                                                                                    \
        return NAME##_n(g, w, m, v, s, n, p);                                                \
    }

LUT_LOOP(sgd_lut, 0, ampc_sgd_mom_update(&w[i], &m[i], gf, q))
LUT_LOOP(sgd_lut_chk, 1, ampc_sgd_mom_update(&w[i], &m[i], gf, q))
LUT_LOOP(nag_lut, 0, ampc_nag_mom_update(&w[i], &m[i], gf, q))
LUT_LOOP(nag_lut_chk, 1, ampc_nag_mom_update(&w[i], &m[i], gf, q))
LUT_LOOP(adam_lut, 0, ampc_adam_update(&w[i], &m[i], &v[i], gf, q))
LUT_LOOP(adam_lut_chk, 1, ampc_adam_update(&w[i], &m[i], &v[i], gf, q))

/* F16C + AVX2, chosen at run time (x86-64 with gcc or clang only): 8
 * elements a step, the conversions by vcvtph2ps / vcvtps2ph with explicit
 * round-to-nearest-even (exact IEEE conversions, independent of MXCSR; NaN
 * handling as half.h's: quieted, top payload bits kept), the update as
 * half.h's scalar code's exact operation order (no FMA: each product is
 * rounded, as under -std=c11), with the finite check.  The clip case and
 * the tail go through the lut loops.  Checked bit-identical at start-up. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_F16C_PATH 1
#define F16C_FN __attribute__((target("avx2,f16c")))

F16C_FN static inline __m256 ld_h(const ampc_half *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}
F16C_FN static inline void st_h(ampc_half *p, __m256 x)
{
    _mm_storeu_si128((__m128i *)(void *)p,
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
F16C_FN static inline unsigned nonfinite8(const ampc_half *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i e = _mm_and_si128(h, _mm_set1_epi16(0x7c00));
    return (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi16(e, _mm_set1_epi16(0x7c00))) != 0;
}
#define V(x) _mm256_set1_ps(x)

F16C_FN static int64_t sgd_f16c_body(const ampc_half *restrict g, float *restrict w,
                                     float *restrict m, ampc_half *restrict s, int64_t n,
                                     AmpcOptParam p, unsigned *bad)
{
    /* m = momentum*m - (lr*wd)*w - (lr*rescale)*g;  w = w + m */
    __m256 mo = V(p.momentum), lw = V(p.lr * p.wd), lr = V(p.lr * p.rescale_grad);
    unsigned b = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        b |= nonfinite8(g + i);
        __m256 gf = ld_h(g + i), wv = _mm256_loadu_ps(w + i), mv = _mm256_loadu_ps(m + i);
        mv = _mm256_sub_ps(_mm256_sub_ps(_mm256_mul_ps(mo, mv), _mm256_mul_ps(lw, wv)),
                           _mm256_mul_ps(lr, gf));
        wv = _mm256_add_ps(wv, mv);
        _mm256_storeu_ps(m + i, mv);
        _mm256_storeu_ps(w + i, wv);
        st_h(s + i, wv);
    }
    *bad |= b;
    return i;
}

F16C_FN static int64_t nag_f16c_body(const ampc_half *restrict g, float *restrict w,
                                     float *restrict m, ampc_half *restrict s, int64_t n,
                                     AmpcOptParam p, unsigned *bad)
{
    /* G = rescale*grad + wd*w;  m = momentum*m - lr*G;  w = w + momentum*m - lr*G */
    __m256 rs = V(p.rescale_grad), wd = V(p.wd), mo = V(p.momentum), lr = V(p.lr);
    unsigned b = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        b |= nonfinite8(g + i);
        __m256 gf = ld_h(g + i), wv = _mm256_loadu_ps(w + i), mv = _mm256_loadu_ps(m + i);
        __m256 G = _mm256_add_ps(_mm256_mul_ps(rs, gf), _mm256_mul_ps(wd, wv));
        __m256 lG = _mm256_mul_ps(lr, G);
        mv = _mm256_sub_ps(_mm256_mul_ps(mo, mv), lG);
        wv = _mm256_sub_ps(_mm256_add_ps(wv, _mm256_mul_ps(mo, mv)), lG);
        _mm256_storeu_ps(m + i, mv);
        _mm256_storeu_ps(w + i, wv);
        st_h(s + i, wv);
    }
    *bad |= b;
    return i;
}

F16C_FN static int64_t adam_f16c_body(const ampc_half *restrict g, float *restrict w,
                                      float *restrict mean, float *restrict var,
                                      ampc_half *restrict s, int64_t n, AmpcOptParam p,
                                      unsigned *bad)
{
    /* G = grad*rescale + w*wd;  mean = b1*mean + (1-b1)*G;  var = b2*var + ((1-b2)*G)*G;
     * w = w - (lr*mean) / (sqrt(var) + eps) */
    __m256 rs = V(p.rescale_grad), wd = V(p.wd), b1 = V(p.beta1), c1 = V(1.f - p.beta1);
    __m256 b2 = V(p.beta2), c2 = V(1.f - p.beta2), lr = V(p.lr), ep = V(p.epsilon);
    unsigned b = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        b |= nonfinite8(g + i);
        __m256 gf = ld_h(g + i), wv = _mm256_loadu_ps(w + i);
        __m256 mv = _mm256_loadu_ps(mean + i), vv = _mm256_loadu_ps(var + i);
        __m256 G = _mm256_add_ps(_mm256_mul_ps(gf, rs), _mm256_mul_ps(wv, wd));
        mv = _mm256_add_ps(_mm256_mul_ps(b1, mv), _mm256_mul_ps(c1, G));
        vv = _mm256_add_ps(_mm256_mul_ps(b2, vv), _mm256_mul_ps(_mm256_mul_ps(c2, G), G));
        wv = _mm256_sub_ps(wv, _mm256_div_ps(_mm256_mul_ps(lr, mv),
                                             _mm256_add_ps(_mm256_sqrt_ps(vv), ep)));
        _mm256_storeu_ps(mean + i, mv);
        _mm256_storeu_ps(var + i, vv);
        _mm256_storeu_ps(w + i, wv);
        st_h(s + i, wv);
    }
    *bad |= b;
    return i;
}
#undef V
#endif

static bool have_f16c(void)
{
#ifdef HAVE_F16C_PATH
    unsigned a, b, c, d;
    __builtin_cpu_init();
    /* clang 14 knows no "f16c" feature string: CPUID.1:ECX bit 29 */
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
#else
    return false;
#endif
}

static unsigned sgd_f16c(const ampc_half *restrict g, float *restrict w, float *restrict m,
                         float *restrict v, ampc_half *restrict s, int64_t n, AmpcOptParam p)
{
    unsigned bad = 0;
    int64_t i = 0;
#ifdef HAVE_F16C_PATH
    if (p.clip_gradient < 0.0f && have_f16c())
        i = sgd_f16c_body(g, w, m, s, n, p, &bad);
#endif
    return bad | sgd_lut_chk(g + i, w + i, m + i, v + i, s + i, n - i, p);
}

static unsigned nag_f16c(const ampc_half *restrict g, float *restrict w, float *restrict m,
                         float *restrict v, ampc_half *restrict s, int64_t n, AmpcOptParam p)
{
    unsigned bad = 0;
    int64_t i = 0;
#ifdef HAVE_F16C_PATH
    if (p.clip_gradient < 0.0f && have_f16c())
        i = nag_f16c_body(g, w, m, s, n, p, &bad);
#endif
    return bad | nag_lut_chk(g + i, w + i, m + i, v + i, s + i, n - i, p);
}

static unsigned adam_f16c(const ampc_half *restrict g, float *restrict w, float *restrict m,
                          float *restrict v, ampc_half *restrict s, int64_t n, AmpcOptParam p)
{
    unsigned bad = 0;
    int64_t i = 0;
#ifdef HAVE_F16C_PATH
    if (p.clip_gradient < 0.0f && have_f16c())
        i = adam_f16c_body(g, w, m, v, s, n, p, &bad);
#endif
    return bad | adam_lut_chk(g + i, w + i, m + i, v + i, s + i, n - i, p);
}

typedef unsigned (*LoopFn)(const ampc_half *restrict, float *restrict, float *restrict,
                           float *restrict, ampc_half *restrict, int64_t, AmpcOptParam);
static const LoopFn loops[3][NVARIANTS] = {
    {sgd_elem, sgd_elem_chk, sgd_chunk, sgd_vec, sgd_lut, sgd_lut_chk, sgd_f16c},
    {nag_elem, nag_elem_chk, nag_chunk, nag_vec, nag_lut, nag_lut_chk, nag_f16c},
    {adam_elem, adam_elem_chk, adam_chunk, adam_vec, adam_lut, adam_lut_chk, adam_f16c},
};

static AmpcOptParam params(Opt o)
{
    AmpcOptParam p = {.lr = 0.1f, .wd = 0, .momentum = 0.9f, .rescale_grad = 1.0f / 256,
                      .clip_gradient = -1, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f};
    if (o == OPT_ADAM)
        p.lr = ampc_adam_lr(0.001, 0.9, 0.999, 10);
    return p;
}

/* One thread's share: the flat range [lo, hi) over the tensors it meets. */
typedef struct {
    Opt opt;
    Variant var;
    const Arrays *a;
    int64_t lo, hi;
    unsigned bad;
} Job;

static void *run_job(void *arg)
{
    Job *j = arg;
    LoopFn fn = loops[j->opt][j->var];
    AmpcOptParam base = params(j->opt);
    const Arrays *a = j->a;
    unsigned bad = 0;
    for (int t = 0; t < ntensors; t++) {
        int64_t b = tensors[t].off > j->lo ? tensors[t].off : j->lo;
        int64_t e = tensors[t].off + tensors[t].n < j->hi ? tensors[t].off + tensors[t].n : j->hi;
        if (b >= e)
            continue;
        AmpcOptParam p = base;
        p.wd = tensors[t].wd;
        bad |= fn(a->g + b, a->w + b, a->m + b, a->v ? a->v + b : a->m + b, a->s + b, e - b, p);
    }
    j->bad = bad;
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Splits [0, n) into nt contiguous ranges (64-element aligned) and runs fn
 * on each in its own thread (the calling thread takes the first). */
static double run_threads(int nt, void *(*fn)(void *), void *jobs, size_t jobsize)
{
    pthread_t th[64];
    double t0 = now();
    for (int k = 1; k < nt; k++)
        pthread_create(&th[k], NULL, fn, (char *)jobs + (size_t)k * jobsize);
    fn(jobs);
    for (int k = 1; k < nt; k++)
        pthread_join(th[k], NULL);
    return now() - t0;
}

static int64_t split_at(int64_t n, int k, int nt)
{
    return k == nt ? n : (n / nt * k) & ~(int64_t)63;
}

static double time_update(Opt o, Variant var, const Arrays *a, int nt, unsigned *bad)
{
    Job jobs[64];
    for (int k = 0; k < nt; k++)
        jobs[k] = (Job){o, var, a, split_at(total, k, nt), split_at(total, k + 1, nt), 0};
    double t = run_threads(nt, run_job, jobs, sizeof jobs[0]);
    *bad = 0;
    for (int k = 0; k < nt; k++)
        *bad |= jobs[k].bad;
    return t;
}

/* ---- the copy ------------------------------------------------------------ */

typedef struct {
    float *dst;
    const float *src;
    int64_t lo, hi;
    bool use_memcpy;
} CopyJob;

/* A STREAM-style copy with ordinary (write-allocating) stores, 64 bytes a
 * step through fixed-size memcpy calls that every compiler inlines as
 * vector moves, so it is the same loop at -O2 and -O3 and never becomes a
 * call to the library's memcpy (which switches to non-temporal stores on
 * large copies; measured separately). */
static void copy_loop(float *restrict dst, const float *restrict src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        memcpy(dst + i, src + i, 64);
#if defined(__GNUC__)
        __asm__ volatile("" : : "r"(dst + i) : "memory"); /* no loop-to-memcpy idiom */
#endif
    }
    for (; i < n; i++)
        dst[i] = src[i];
}

static void *run_copy(void *arg)
{
    CopyJob *j = arg;
    if (j->use_memcpy)
        memcpy(j->dst + j->lo, j->src + j->lo, (size_t)(j->hi - j->lo) * sizeof(float));
    else
        copy_loop(j->dst + j->lo, j->src + j->lo, j->hi - j->lo);
    return NULL;
}

static double time_copy(float *dst, const float *src, int64_t n, int nt, bool use_memcpy)
{
    CopyJob jobs[64];
    for (int k = 0; k < nt; k++)
        jobs[k] = (CopyJob){dst, src, split_at(n, k, nt), split_at(n, k + 1, nt), use_memcpy};
    return run_threads(nt, run_copy, jobs, sizeof jobs[0]);
}

/* ---- setup and checks ----------------------------------------------------- */

static void *xalloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "optim_bench: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Gradient: fp16 values over the whole normal range a scaled gradient
 * takes (|g| in about [2^-14, 2^6], either sign) plus some subnormals and
 * zeros; master weights N(0, ~0.05)-like; state zero or small. */
static void init_arrays(Arrays *a, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++) {
        uint64_t r = mix((uint64_t)i);
        uint16_t e = (uint16_t)(1 + r % 20);             /* exponents 1..20 */
        uint16_t h = (uint16_t)((r >> 8) & 0x83ffu) | (uint16_t)(e << 10);
        if ((r >> 40) % 50 == 0)
            h = (uint16_t)((r >> 16) & 0x83ffu);         /* zero or subnormal */
        a->g[i] = h;
        a->w[i] = (float)((double)((r >> 20) & 0xffff) / 65536.0 - 0.5) * 0.1f;
        a->m[i] = (float)((double)((r >> 36) & 0xff) / 256.0 - 0.5) * 1e-3f;
        if (a->v)
            a->v[i] = (float)((double)((r >> 44) & 0xff) / 256.0) * 1e-4f;
        a->s[i] = 0;
    }
}

typedef struct {
    Arrays *a;
    int64_t lo, hi;
} InitJob;

static void *run_init(void *arg)
{
    InitJob *j = arg;
    init_arrays(j->a, j->lo, j->hi);
    return NULL;
}

/* Specials every 997 elements: inf and NaN gradients (quiet and
 * signalling), masters past the fp16 range, and masters whose halves are
 * subnormal or round to zero. */
static void add_specials(Arrays *a, int64_t n)
{
    static const ampc_half sg[6] = {0x7c00, 0xfc00, 0x7e01, 0x7d00, 0xfe3f, 0x0001};
    for (int64_t i = 0; i + 997 < n; i += 997) {
        a->g[i] = sg[(i / 997) % 6];
        a->w[i + 1] = (i / 997) % 2 ? 70000.0f : -65519.0f;
        a->w[i + 2] = 3e-6f;
        a->w[i + 3] = 2.98e-8f;
    }
}

/* Every variant gives the same bits: run each on a copy of the first
 * `n` values and compare with elem. */
static bool check_variants(Opt o, int64_t n, float clip)
{
    Arrays ref, x;
    ampc_half *g = xalloc((size_t)n * 2);
    ref.g = x.g = g;
    ref.w = xalloc((size_t)n * 4), x.w = xalloc((size_t)n * 4);
    ref.m = xalloc((size_t)n * 4), x.m = xalloc((size_t)n * 4);
    ref.v = o == OPT_ADAM ? xalloc((size_t)n * 4) : NULL;
    x.v = o == OPT_ADAM ? xalloc((size_t)n * 4) : NULL;
    ref.s = xalloc((size_t)n * 2), x.s = xalloc((size_t)n * 2);
    init_arrays(&ref, 0, n);
    add_specials(&ref, n);
    AmpcOptParam p = params(o);
    p.wd = 1e-4f;
    p.clip_gradient = clip;
    loops[o][V_ELEM](ref.g, ref.w, ref.m, ref.v ? ref.v : ref.m, ref.s, n, p);
    bool same = true;
    for (int var = 1; var < NVARIANTS; var++) {
        init_arrays(&x, 0, n);
        add_specials(&x, n);
        loops[o][var](x.g, x.w, x.m, x.v ? x.v : x.m, x.s, n, p);
        same = same && memcmp(ref.w, x.w, (size_t)n * 4) == 0 &&
               memcmp(ref.m, x.m, (size_t)n * 4) == 0 &&
               memcmp(ref.s, x.s, (size_t)n * 2) == 0 &&
               (!x.v || memcmp(ref.v, x.v, (size_t)n * 4) == 0);
    }
    free(g), free(ref.w), free(x.w), free(ref.m), free(x.m), free(ref.v), free(x.v);
    free(ref.s), free(x.s);
    return same;
}

/* h2f and f2h against half.h: every half; floats in steps of 61 over all
 * 2^32 patterns; every float whose half is subnormal or the smallest
 * normal (|f| in [2^-26, 2^-14 + a bit]), both signs.  Returns the number
 * of mismatches. */
static int64_t check_conversions(void)
{
    int64_t bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = h2f((ampc_half)h), b = ampc_half_to_float((ampc_half)h);
        bad += memcmp(&a, &b, 4) != 0;
        bad += memcmp(&h2f_table[h], &b, 4) != 0;
    }
    for (uint64_t u = 0; u < ((uint64_t)1 << 32); u += 61) {
        float f = ampc_bits_f32((uint32_t)u);
        ampc_half want = ampc_float_to_half(f);
        bad += (f2h(f) != want) + (f2h_fast(f) != want);
    }
    for (uint32_t u = 0x32800000u; u < 0x38900000u; u++) {
        bad += f2h(ampc_bits_f32(u)) != ampc_float_to_half(ampc_bits_f32(u));
        bad += f2h_fast(ampc_bits_f32(u)) != ampc_float_to_half(ampc_bits_f32(u));
        bad += f2h(ampc_bits_f32(u | 0x80000000u)) !=
               ampc_float_to_half(ampc_bits_f32(u | 0x80000000u));
    }
    for (uint32_t u = 0x47700000u; u < 0x47900000u; u++) /* the overflow threshold */
        bad += (f2h(ampc_bits_f32(u)) != ampc_float_to_half(ampc_bits_f32(u))) +
               (f2h_fast(ampc_bits_f32(u)) != ampc_float_to_half(ampc_bits_f32(u)));
    return bad;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int reps = 5, threads[8] = {1, 2}, nthreads = 2;
    int only = -1;
    int64_t size = 0;
    bool convcheck = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-convcheck") == 0)
            convcheck = false;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            nthreads = 0;
            for (char *s = strtok(argv[++i], ","); s && nthreads < 8; s = strtok(NULL, ","))
                threads[nthreads++] = atoi(s);
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            const char *o = argv[++i];
            only = strcmp(o, "sgd") == 0 ? OPT_SGD : strcmp(o, "nag") == 0 ? OPT_NAG
                 : strcmp(o, "adam") == 0 ? OPT_ADAM : -2;
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
            size = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: optim_bench [--reps N] [--threads 1,2] [--only sgd|nag|adam] "
                            "[--size N (one tensor instead of ResNet-50 v1d)] [--no-convcheck]\n");
            return 2;
        }
    }
    if (reps < 1 || only == -2 || nthreads < 1)
        return 2;
    for (int k = 0; k < nthreads; k++)
        if (threads[k] < 1 || threads[k] > 64)
            return 2;
    if (size > 0)
        add(size, 1e-4f);
    else
        resnet50_v1d();
    printf("optim_bench: %s; %lld parameters in %d tensors; best and median of %d runs\n",
           COMPILER_FLAGS, (long long)total, ntensors, reps);
    h2f_table_init();
    if (convcheck) {
        int64_t bad = check_conversions();
        printf("vec and lut conversions bit-identical to half.h: %s\n",
               bad ? "NO" : "yes");
        if (bad)
            printf("  %lld mismatches\n", (long long)bad);
    }

    /* the copy reference: 2 x 64 Mi floats (512 MiB moved per pass), timed
     * in the same rounds as the updates: each round runs every variant and
     * the two copies once, so load from elsewhere hits them all alike */
    int64_t cn = (int64_t)64 << 20;
    float *src = xalloc((size_t)cn * 4), *dst = xalloc((size_t)cn * 4);
    for (int64_t i = 0; i < cn; i++)
        src[i] = (float)i, dst[i] = 0;
    enum { NT = NVARIANTS + 2 }; /* + copy loop, memcpy */
    double *t = malloc((size_t)NT * reps * sizeof *t);
    for (int o = 0; o < 3; o++) {
        if (only >= 0 && o != only)
            continue;
        bool same = check_variants((Opt)o, 100003, -1) && check_variants((Opt)o, 100003, 0.05f);
        Arrays a;
        a.g = xalloc((size_t)total * 2);
        a.s = xalloc((size_t)total * 2);
        a.w = xalloc((size_t)total * 4);
        a.m = xalloc((size_t)total * 4);
        a.v = o == OPT_ADAM ? xalloc((size_t)total * 4) : NULL;
        InitJob ij[2] = {{&a, 0, total / 2}, {&a, total / 2, total}};
        run_threads(2, run_init, ij, sizeof ij[0]); /* first touch by both threads */
        printf("%s mp (%d B/param): variants bit-identical: %s\n", opt_name[o], opt_bytes[o],
               same ? "yes" : "NO");
        for (int k = 0; k < nthreads; k++) {
            unsigned bad[NVARIANTS] = {0};
            for (int r = -1; r < reps; r++) /* round -1 warms up */
                for (int v = 0; v < NT; v++) {
                    unsigned b = 0;
                    double x = v < NVARIANTS
                                   ? time_update((Opt)o, (Variant)v, &a, threads[k], &b)
                                   : time_copy(dst, src, cn, threads[k], v == NVARIANTS + 1);
                    if (r >= 0)
                        t[v * reps + r] = x;
                    if (v < NVARIANTS)
                        bad[v] |= b;
                }
            for (int v = 0; v < NT; v++)
                qsort(t + v * reps, (size_t)reps, sizeof *t, cmp_double);
            double copy = 8.0 * (double)cn / t[NVARIANTS * reps] / 1e9;
            double mcpy = 8.0 * (double)cn / t[(NVARIANTS + 1) * reps] / 1e9;
            printf("  threads %d: copy loop %.2f GB/s, memcpy %.2f GB/s (best; medians %.2f, "
                   "%.2f)\n", threads[k], copy, mcpy,
                   8.0 * (double)cn / t[NVARIANTS * reps + reps / 2] / 1e9,
                   8.0 * (double)cn / t[(NVARIANTS + 1) * reps + reps / 2] / 1e9);
            for (int v = 0; v < NVARIANTS; v++) {
                double gbs = (double)opt_bytes[o] * (double)total / t[v * reps] / 1e9;
                printf("  %-7s %-9s threads %d: %7.2f ms %6.2f GB/s best, %6.2f median; "
                       "%4.0f%% of copy loop, %4.0f%% of memcpy%s\n",
                       opt_name[o], variant_name[v], threads[k], 1e3 * t[v * reps], gbs,
                       (double)opt_bytes[o] * (double)total / t[v * reps + reps / 2] / 1e9,
                       100.0 * gbs / copy, 100.0 * gbs / mcpy,
                       bad[v] ? "  (non-finite seen)" : "");
            }
        }
        free(a.g), free(a.s), free(a.w), free(a.m), free(a.v);
    }
    free(src);
    free(dst);
    free(t);
    return 0;
}
