/* dtype.c - storage dtypes: bulk conversion, finite checks, copies and casts.
 *
 * The conversions are defined by runtime/kernels/half.h (shared with the
 * CUDA kernels).  The bulk converters here (rt__h2f and friends, which the
 * chunk views and commits of cpu.h use) give the same bits faster where the
 * machine allows: fp16 by the hardware conversions (F16C, AVX-512; round
 * to nearest even, subnormals kept, overflow to inf, NaN quieted with its
 * top payload bits, which is half.h's definition), bf16 by half.h's integer
 * formulas on 8 or 16 lanes.  They were checked against half.h on all 2^32
 * floats and all 2^16 halves/bf16 values. */
#include "cpu.h"

#if RT_HAVE_X86_SIMD
#include <immintrin.h>

#define A512 __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))
#define A256 __attribute__((target("avx2,fma,f16c")))

static A512 void h2f_512(float *d, const uint16_t *s, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
    ampc_half_to_float_n(d + i, s + i, n - i);
}

static A512 void f2h_512(uint16_t *d, const float *s, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    ampc_float_to_half_n(d + i, s + i, n - i);
}

static A512 void b2f_512(float *d, const uint16_t *s, size_t n)
{
    const __m512i nanmin = _mm512_set1_epi32(0x7f800000), absm = _mm512_set1_epi32(0x7fffffff),
                  quiet = _mm512_set1_epi32(0x00400000);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i))), 16);
        __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, absm), nanmin);
        x = _mm512_mask_or_epi32(x, nan, x, quiet);
        _mm512_storeu_ps(d + i, _mm512_castsi512_ps(x));
    }
    ampc_bf16_to_float_n(d + i, s + i, n - i);
}

static A512 void f2b_512(uint16_t *d, const float *s, size_t n)
{
    const __m512i nanmin = _mm512_set1_epi32(0x7f800000), absm = _mm512_set1_epi32(0x7fffffff),
                  bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1),
                  qbit = _mm512_set1_epi32(0x0040);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_castps_si512(_mm512_loadu_ps(s + i));
        __m512i hi = _mm512_srli_epi32(x, 16);
        __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(_mm512_add_epi32(x, bias), _mm512_and_si512(hi, one)), 16);
        __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, absm), nanmin);
        r = _mm512_mask_or_epi32(r, nan, hi, qbit);
        _mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtepi32_epi16(r));
    }
    ampc_float_to_bf16_n(d + i, s + i, n - i);
}

static A256 void h2f_256(float *d, const uint16_t *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    ampc_half_to_float_n(d + i, s + i, n - i);
}

static A256 void f2h_256(uint16_t *d, const float *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    ampc_float_to_half_n(d + i, s + i, n - i);
}

static A256 void b2f_256(float *d, const uint16_t *s, size_t n)
{
    const __m256i nanmin = _mm256_set1_epi32(0x7f800000), absm = _mm256_set1_epi32(0x7fffffff),
                  quiet = _mm256_set1_epi32(0x00400000);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i))), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, absm), nanmin);
        x = _mm256_or_si256(x, _mm256_and_si256(nan, quiet));
        _mm256_storeu_ps(d + i, _mm256_castsi256_ps(x));
    }
    ampc_bf16_to_float_n(d + i, s + i, n - i);
}

static A256 void f2b_256(uint16_t *d, const float *s, size_t n)
{
    const __m256i nanmin = _mm256_set1_epi32(0x7f800000), absm = _mm256_set1_epi32(0x7fffffff),
                  bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1),
                  qbit = _mm256_set1_epi32(0x0040);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_castps_si256(_mm256_loadu_ps(s + i));
        __m256i hi = _mm256_srli_epi32(x, 16);
        __m256i r = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_add_epi32(x, bias), _mm256_and_si256(hi, one)), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, absm), nanmin);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, qbit), nan);
        /* 8 x 32 -> 8 x 16 (values < 2^16, so the saturating pack is exact) */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
        _mm_storeu_si128((__m128i *)(d + i), _mm256_castsi256_si128(p));
    }
    ampc_float_to_bf16_n(d + i, s + i, n - i);
}
#endif /* RT_HAVE_X86_SIMD */

void rt__h2f(float *d, const uint16_t *s, size_t n)
{
#if RT_HAVE_X86_SIMD
    switch (rt__simd()) {
    case RT_SIMD_AVX512: h2f_512(d, s, n); return;
    case RT_SIMD_AVX2: h2f_256(d, s, n); return;
    }
#endif
    ampc_half_to_float_n(d, s, n);
}

void rt__f2h(uint16_t *d, const float *s, size_t n)
{
#if RT_HAVE_X86_SIMD
    switch (rt__simd()) {
    case RT_SIMD_AVX512: f2h_512(d, s, n); return;
    case RT_SIMD_AVX2: f2h_256(d, s, n); return;
    }
#endif
    ampc_float_to_half_n(d, s, n);
}

void rt__b2f(float *d, const uint16_t *s, size_t n)
{
#if RT_HAVE_X86_SIMD
    switch (rt__simd()) {
    case RT_SIMD_AVX512: b2f_512(d, s, n); return;
    case RT_SIMD_AVX2: b2f_256(d, s, n); return;
    }
#endif
    ampc_bf16_to_float_n(d, s, n);
}

void rt__f2b(uint16_t *d, const float *s, size_t n)
{
#if RT_HAVE_X86_SIMD
    switch (rt__simd()) {
    case RT_SIMD_AVX512: f2b_512(d, s, n); return;
    case RT_SIMD_AVX2: f2b_256(d, s, n); return;
    }
#endif
    ampc_float_to_bf16_n(d, s, n);
}

void rt_to_f32(float *dst, const void *src, size_t n, RtDType dt)
{
    switch (dt) {
    case RT_F32:
        if ((const void *)dst != src)
            memcpy(dst, src, n * sizeof *dst);
        return;
    case RT_F16: rt__h2f(dst, (const ampc_half *)src, n); return;
    case RT_BF16: rt__b2f(dst, (const ampc_bf16 *)src, n); return;
    }
}

void rt_from_f32(void *dst, const float *src, size_t n, RtDType dt)
{
    rt__commit(dst, 0, src, n, dt, false);
}

void rt_store_f32(void *dst, const float *src, size_t n, RtDType dt, bool accumulate)
{
    rt__commit(dst, 0, src, n, dt, accumulate);
}

/* Nonzero when an element of p[lo, hi) is inf or NaN: an OR of a
 * per-element flag, no early exit, so the loops vectorise. */
static unsigned nonfinite(const void *p, size_t lo, size_t hi, RtDType dt)
{
    unsigned bad = 0;
    switch (dt) {
    case RT_F32: {
        const uint32_t *u = p;
        for (size_t i = lo; i < hi; i++)
            bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
        break;
    }
    case RT_F16: {
        const ampc_half *h = p;
        for (size_t i = lo; i < hi; i++)
            bad |= (h[i] & 0x7c00u) == 0x7c00u;
        break;
    }
    case RT_BF16: {
        const ampc_bf16 *b = p;
        for (size_t i = lo; i < hi; i++)
            bad |= (b[i] & 0x7f80u) == 0x7f80u;
        break;
    }
    }
    return bad;
}

/* The finite checks on the threads: the tensors cut into blocks of
 * FIN_BLOCK elements that the threads take as they come free, each OR-ing
 * what it saw into the job's flag (an OR: no thread count changes it). */
enum { FIN_BLOCK = 65536 };

typedef struct {
    const RtTensorRef *t;
    int count;
    size_t *first; /* block index of each tensor's first block */
    unsigned bad;
} FinJob;

static void fin_blocks(void *ctx, size_t lo, size_t hi)
{
    FinJob *j = ctx;
    int a = 0, b = j->count - 1; /* the last tensor whose first block <= lo */
    while (a < b) {
        int mid = (a + b + 1) / 2;
        if (j->first[mid] <= lo)
            a = mid;
        else
            b = mid - 1;
    }
    unsigned bad = 0;
    for (size_t k = lo; k < hi; k++) {
        while (a + 1 < j->count && j->first[a + 1] <= k)
            a++;
        const RtTensorRef *t = &j->t[a];
        size_t off = (k - j->first[a]) * FIN_BLOCK;
        bad |= nonfinite(t->ptr, off, t->n - off < FIN_BLOCK ? t->n : off + FIN_BLOCK, t->dt);
    }
    if (bad)
        __atomic_fetch_or(&j->bad, 1u, __ATOMIC_RELAXED);
}

/* count tensors at most RT_FINITE_GROUP (the block table is on the stack) */
enum { RT_FINITE_GROUP = 64 };

static bool all_finite_group(const RtTensorRef *t, int count)
{
    size_t first[RT_FINITE_GROUP], nb = 0, elems = 0;
    for (int i = 0; i < count; i++) {
        first[i] = nb;
        nb += (t[i].n + FIN_BLOCK - 1) / FIN_BLOCK;
        elems += t[i].n;
    }
    if (nb == 0)
        return true;
    FinJob j = {t, count, first, 0};
    rt__parallel_items(nb, elems / nb, fin_blocks, &j);
    return !j.bad;
}

bool rt_all_finite(const void *p, size_t n, RtDType dt)
{
    RtTensorRef t = {p, n, dt};
    return all_finite_group(&t, 1);
}

bool rt_multi_all_finite(const RtTensorRef *t, int count)
{
    bool ok = true;
    for (int i = 0; i < count; i += RT_FINITE_GROUP)
        ok &= all_finite_group(t + i, count - i < RT_FINITE_GROUP ? count - i : RT_FINITE_GROUP);
    return ok;
}

void rt_copy(size_t n, RtDType dt, const void *x, void *y)
{
    if (x != y)
        memcpy(y, x, n * rt_dtype_size(dt));
}

void rt_reshape_forward(size_t n, RtDType dt, const void *x, void *y) { rt_copy(n, dt, x, y); }

void rt_reshape_backward(size_t n, RtDType dt, const void *dy, void *dx, bool accumulate)
{
    if (!accumulate) {
        rt_copy(n, dt, dy, dx);
        return;
    }
    float buf[RT_CHUNK];
    for (size_t off = 0; off < n; off += RT_CHUNK) {
        size_t m = n - off < RT_CHUNK ? n - off : RT_CHUNK;
        rt__commit(dx, off, rt__view(dy, off, m, dt, buf), m, dt, true);
    }
}

void rt_cast_forward(size_t n, RtDType from, const void *x, RtDType to, void *y)
{
    if (from == to) {
        rt_copy(n, to, x, y);
        return;
    }
    float buf[RT_CHUNK];
    for (size_t off = 0; off < n; off += RT_CHUNK) {
        size_t m = n - off < RT_CHUNK ? n - off : RT_CHUNK;
        rt__commit(y, off, rt__view(x, off, m, from, buf), m, to, false);
    }
}

void rt_cast_backward(size_t n, RtDType ydt, const void *dy, RtDType xdt, void *dx,
                      bool accumulate)
{
    if (!accumulate) {
        rt_cast_forward(n, ydt, dy, xdt, dx);
        return;
    }
    float buf[RT_CHUNK];
    for (size_t off = 0; off < n; off += RT_CHUNK) {
        size_t m = n - off < RT_CHUNK ? n - off : RT_CHUNK;
        rt__commit(dx, off, rt__view(dy, off, m, ydt, buf), m, xdt, true);
    }
}
