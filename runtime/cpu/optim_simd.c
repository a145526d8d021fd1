/* optim_simd.c - the AVX2 + F16C body of the fused optimizer
 * (runtime/cpu/optim.c) for multi-precision and for fp32 parameters, picked at
 * run time.
 *
 * 8 elements a step: the 16-bit gradient widened (vcvtph2ps for fp16, a
 * shift for bf16), the fp32 master and state updated in the operation order
 * of kernels/optim.h's ampc_mp_* (each product and sum rounded on its own:
 * the functions' target is "avx2,f16c" without "fma", so nothing can be
 * contracted, whatever -ffp-contract says), the shadow rounded from the new
 * master (vcvtps2ph with explicit round-to-nearest-even, or bf16's integer
 * rounding as half.h's), and the finite check of the gradient bits ORed in.
 * fp32 parameters (no master: the weight is updated in place, no shadow)
 * take the same body with an fp32 gradient load and an fp32 exponent check.
 * The hardware conversions are exact IEEE conversions that quiet NaN and keep
 * the top payload bits, as half.h's do; vcvtph2ps ignores DAZ and vcvtps2ph
 * ignores FTZ, and a float subnormal rounds to a half zero either way.  So
 * the bits equal the per-element functions' (tests/runtime/test_train_optim.c
 * compares them over every optimizer, both 16-bit types, clip on and off,
 * with inf/NaN gradients, masters beyond the fp16 range and subnormal
 * shadows).  One exception, also true of two scalar builds: when two
 * different NaN payloads meet in a commutative operation (a NaN gradient
 * on top of an already NaN master or state) either payload may come out.
 *
 * The file builds for baseline x86-64 at the runtime's flags (no -march):
 * only these functions carry the target attribute, and rt_optim_simd_mp
 * runs them only where CPUID says AVX2 and F16C are there and AMPC_NO_SIMD
 * is unset (or "0"; the environment is read once, on the first update).
 * Elsewhere (or on other architectures) it does nothing and optim.c's
 * per-element loops do all the work.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu/cpu.h" /* its functions, declared for optim.c */
#include "kernels/optim.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#define SIMD __attribute__((target("avx2,f16c")))
#define SIMD_INLINE __attribute__((target("avx2,f16c"), always_inline)) static inline

/* 8 gradients or shadows: fp16 through F16C, bf16 as half.h's bit code */
SIMD_INLINE __m256 load16(const uint16_t *p, bool bf)
{
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    if (!bf)
        return _mm256_cvtph_ps(h);
    __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
    return _mm256_castsi256_ps(
        _mm256_or_si256(x, _mm256_and_si256(nan, _mm256_set1_epi32(0x00400000))));
}

SIMD_INLINE void store16(uint16_t *p, __m256 f, bool bf)
{
    __m128i r;
    if (!bf) {
        r = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
        /* (x + 0x7fff + ((x >> 16) & 1)) >> 16; NaN: (x >> 16) | 0x40 */
        __m256i x = _mm256_castps_si256(f);
        __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
        __m256i rounded = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
        __m256i nanv = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
        __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
        __m256i isnan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
        __m256i y = _mm256_blendv_epi8(rounded, nanv, isnan); /* every lane < 0x10000 */
        r = _mm_packus_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
    }
    _mm_storeu_si128((__m128i *)(void *)p, r);
}

/* lanes whose exponent is all ones (inf or NaN), ORed into acc */
SIMD_INLINE __m128i nonfinite8(__m128i acc, const uint16_t *p, bool bf)
{
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i e = _mm_set1_epi16(bf ? 0x7f80 : 0x7c00);
    return _mm_or_si128(acc, _mm_cmpeq_epi16(_mm_and_si128(h, e), e));
}

/* ampc_clip: x > b ? b : (x < -b ? -b : x); NaN passes */
SIMD_INLINE __m256 clip8(__m256 x, __m256 b, __m256 nb)
{
    __m256 r = _mm256_blendv_ps(x, nb, _mm256_cmp_ps(x, nb, _CMP_LT_OQ));
    return _mm256_blendv_ps(r, b, _mm256_cmp_ps(x, b, _CMP_GT_OQ));
}

#define V(x) _mm256_set1_ps(x)
#define LD(p) _mm256_loadu_ps(p)
#define ST(p, x) _mm256_storeu_ps(p, x)
#define ADD _mm256_add_ps
#define SUB _mm256_sub_ps
#define MUL _mm256_mul_ps

/* lanes of 8 fp32 gradients whose exponent is all ones, ORed into acc */
SIMD_INLINE __m256i nonfinite8_f32(__m256i acc, const float *p)
{
    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i e = _mm256_set1_epi32(0x7f800000);
    return _mm256_or_si256(acc, _mm256_cmpeq_epi32(_mm256_and_si256(x, e), e));
}

/* One kernel for every (op, dtype, clip): op, gt and clip are constants at
 * each call site below, so each instance is specialised.  gt: GT_F16 or
 * GT_BF16 (16-bit gradient g16, shadow s written from the new master w) or
 * GT_F32 (fp32 gradient g32, w the weight itself, no shadow: the fp32
 * parameters of optim.c's per-element loop, in the same operation order). */
enum { GT_F16, GT_BF16, GT_F32 };
SIMD_INLINE size_t mp_body(int op, int gt, bool clip, const uint16_t *restrict g16,
                           const float *restrict g32, float *restrict w, float *restrict m,
                           float *restrict v, uint16_t *restrict s, size_t n,
                           const AmpcOptParam *q, unsigned *bad)
{
    const bool bf = gt == GT_BF16;
    const AmpcOptParam p = *q;
    __m256 cb = V(p.clip_gradient), cnb = V(-p.clip_gradient);
    __m256 rs = V(p.rescale_grad), lr = V(p.lr), wd = V(p.wd), mo = V(p.momentum);
    __m256 lw = V(p.lr * p.wd), lrs = V(p.lr * p.rescale_grad), one_lw = V(1.f - p.lr * p.wd);
    __m256 b1 = V(p.beta1), c1 = V(1.f - p.beta1), b2 = V(p.beta2), c2 = V(1.f - p.beta2);
    __m256 ep = V(p.epsilon);
    __m128i acc = _mm_setzero_si128();
    __m256i acc32 = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gf;
        if (gt == GT_F32) {
            acc32 = nonfinite8_f32(acc32, g32 + i);
            gf = LD(g32 + i);
        } else {
            acc = nonfinite8(acc, g16 + i, bf);
            gf = load16(g16 + i, bf);
        }
        __m256 wv = LD(w + i);
        switch (op) {
        case RT_SIMD_SGD: /* (1 - lr*wd)*w - (lr*rs)*g, or - lr*clip(rs*g) */
            wv = SUB(MUL(one_lw, wv), clip ? MUL(lr, clip8(MUL(rs, gf), cb, cnb)) : MUL(lrs, gf));
            break;
        case RT_SIMD_SGD_MOM: { /* m = mo*m - (lr*wd)*w - (lr*rs)*g (or lr*clip(rs*g)); w += m */
            __m256 mv = SUB(SUB(MUL(mo, LD(m + i)), MUL(lw, wv)),
                            clip ? MUL(lr, clip8(MUL(rs, gf), cb, cnb)) : MUL(lrs, gf));
            wv = ADD(wv, mv);
            ST(m + i, mv);
            break;
        }
        case RT_SIMD_NAG: { /* G = clip(rs*g) + wd*w; m = mo*m - lr*G; w = w + mo*m - lr*G */
            __m256 G = MUL(rs, gf);
            if (clip)
                G = clip8(G, cb, cnb);
            G = ADD(G, MUL(wd, wv));
            __m256 mv = SUB(MUL(mo, LD(m + i)), MUL(lr, G));
            wv = SUB(ADD(wv, MUL(mo, mv)), MUL(lr, G));
            ST(m + i, mv);
            break;
        }
        default: { /* adam: G = clip(g*rs + w*wd); mean = b1*mean + (1-b1)*G;
                    * var = b2*var + ((1-b2)*G)*G; w = w - (lr*mean) / (sqrt(var) + eps) */
            __m256 G = ADD(MUL(gf, rs), MUL(wv, wd));
            if (clip)
                G = clip8(G, cb, cnb);
            __m256 mv = ADD(MUL(b1, LD(m + i)), MUL(c1, G));
            __m256 vv = ADD(MUL(b2, LD(v + i)), MUL(MUL(c2, G), G));
            wv = SUB(wv, _mm256_div_ps(MUL(lr, mv), ADD(_mm256_sqrt_ps(vv), ep)));
            ST(m + i, mv);
            ST(v + i, vv);
            break;
        }
        }
        ST(w + i, wv);
        if (gt != GT_F32)
            store16(s + i, wv, bf);
    }
    *bad |= !_mm_testz_si128(acc, acc) || !_mm256_testz_si256(acc32, acc32);
    return i;
}

#define INST(NAME, OP, GT, CLIP)                                                              \
    SIMD static size_t NAME(const void *g, float *w, float *m, float *v, uint16_t *s, size_t n, \
                            const AmpcOptParam *q, unsigned *bad)                             \
    {                                                                                         \
        return mp_body(OP, GT, CLIP, GT == GT_F32 ? NULL : (const uint16_t *)g,               \
                       GT == GT_F32 ? (const float *)g : NULL, w, m, v, s, n, q, bad);        \
    }
#define INST6(OP, NAME)                                                                       \
    INST(NAME##_h, OP, GT_F16, false)                                                         \
    INST(NAME##_hc, OP, GT_F16, true)                                                         \
    INST(NAME##_b, OP, GT_BF16, false)                                                        \
    INST(NAME##_bc, OP, GT_BF16, true)                                                        \
    INST(NAME##_f, OP, GT_F32, false)                                                         \
    INST(NAME##_fc, OP, GT_F32, true)
INST6(RT_SIMD_SGD, sgd)
INST6(RT_SIMD_SGD_MOM, sgd_mom)
INST6(RT_SIMD_NAG, nag)
INST6(RT_SIMD_ADAM, adam)

typedef size_t (*MpFn)(const void *, float *, float *, float *, uint16_t *, size_t,
                       const AmpcOptParam *, unsigned *);
static const MpFn mp_fns[4][6] = {
    {sgd_h, sgd_hc, sgd_b, sgd_bc, sgd_f, sgd_fc},
    {sgd_mom_h, sgd_mom_hc, sgd_mom_b, sgd_mom_bc, sgd_mom_f, sgd_mom_fc},
    {nag_h, nag_hc, nag_b, nag_bc, nag_f, nag_fc},
    {adam_h, adam_hc, adam_b, adam_bc, adam_f, adam_fc},
};

static bool cpu_has_avx2_f16c(void)
{
    unsigned a, b, c, d;
    __builtin_cpu_init();
    /* clang 14 knows no "f16c" for __builtin_cpu_supports: CPUID.1:ECX bit 29
     * (and "avx2" implies the OS saves the YMM state) */
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1u);
}
#else
static bool cpu_has_avx2_f16c(void) { return false; }
#endif

static int simd_state = -1; /* -1: not decided yet; 0: off; 1: on */

bool rt_optim_simd_active(void)
{
    int st = __atomic_load_n(&simd_state, __ATOMIC_RELAXED);
    if (st < 0) {
        const char *e = getenv("AMPC_NO_SIMD");
        bool off = e && *e && !(e[0] == '0' && e[1] == 0);
        st = !off && cpu_has_avx2_f16c();
        __atomic_store_n(&simd_state, st, __ATOMIC_RELAXED);
    }
    return st == 1;
}

void rt_optim_simd_reread(void) { __atomic_store_n(&simd_state, -1, __ATOMIC_RELAXED); }

/* Updates the first n - n % 8 elements (or none where the path is off) and
 * returns how many; the caller's per-element loop does the rest.  op is
 * RT_SIMD_*; v is Adam's var (unused otherwise), m unused by plain sgd. */
size_t rt_optim_simd_mp(int op, bool bf16, const uint16_t *g, float *w, float *m, float *v,
                        uint16_t *s, size_t n, const AmpcOptParam *q, unsigned *bad)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (op < 0 || op > 3 || n < 8 || !rt_optim_simd_active())
        return 0;
    int k = (bf16 ? 2 : 0) + (q->clip_gradient >= 0.0f ? 1 : 0);
    return mp_fns[op][k](g, w, m, v, s, n, q, bad);
#else
    (void)op, (void)bf16, (void)g, (void)w, (void)m, (void)v, (void)s, (void)n, (void)q,
        (void)bad;
    return 0;
#endif
}

/* The same for an fp32 parameter without a master: fp32 gradient g, fp32
 * weight w updated in place, no shadow. */
size_t rt_optim_simd_f32(int op, const float *g, float *w, float *m, float *v, size_t n,
                         const AmpcOptParam *q, unsigned *bad)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (op < 0 || op > 3 || n < 8 || !rt_optim_simd_active())
        return 0;
    int k = 4 + (q->clip_gradient >= 0.0f ? 1 : 0);
    return mp_fns[op][k](g, w, m, v, NULL, n, q, bad);
#else
    (void)op, (void)g, (void)w, (void)m, (void)v, (void)n, (void)q, (void)bad;
    return 0;
#endif
}
