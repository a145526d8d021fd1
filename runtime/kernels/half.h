/*
 * half.h - IEEE 754 binary16 ("half") and bfloat16 storage, emulated in
 * software and bit-exact.
 *
 * Both backends store 16-bit tensors as raw uint16_t and do all arithmetic in
 * fp32; these are the only conversions.  Float -> 16 bit rounds to nearest,
 * ties to even (RNE), overflows to +-inf, keeps half subnormals (gradual
 * underflow, no flush to zero) and turns NaN into a quiet NaN of the same sign
 * (top payload bits kept).  16 bit -> float is exact; NaN comes back quiet.
 * The code is integer-only, so it does not depend on the FP environment
 * (rounding mode, FTZ/DAZ) and gives the same bits under gcc, clang and nvcc,
 * on the host and on the device.  The per-element functions are branch-free
 * selects, so the bulk loops below vectorise (gcc 12 at -O3, clang 14 at -O2;
 * gcc 12's -O2 cost model declines them).
 *
 * The header is C11 and CUDA C++17: every function is `static inline AMPC_HD`.
 * See docs/numerics.md.
 */
#ifndef AMPC_KERNELS_HALF_H
#define AMPC_KERNELS_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef AMPC_HD
#ifdef __CUDACC__
#define AMPC_HD __host__ __device__
#else
#define AMPC_HD
#endif
#endif

#ifndef AMPC_RESTRICT
#if defined(__cplusplus) || defined(__CUDACC__)
#define AMPC_RESTRICT __restrict__
#else
#define AMPC_RESTRICT restrict
#endif
#endif

typedef uint16_t ampc_half; /* IEEE binary16 bits: 1 sign, 5 exponent, 10 mantissa */
typedef uint16_t ampc_bf16; /* bfloat16 bits: the top half of an fp32 */

/* ---- fp32 bit access -------------------------------------------------- */

static inline AMPC_HD uint32_t ampc_f32_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

static inline AMPC_HD float ampc_bits_f32(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* True for every value that is neither inf nor NaN (works under -ffast-math). */
static inline AMPC_HD int ampc_isfinite(float f)
{
    return (ampc_f32_bits(f) & 0x7f800000u) != 0x7f800000u;
}

static inline AMPC_HD int ampc_half_isfinite(ampc_half h) { return (h & 0x7c00u) != 0x7c00u; }
static inline AMPC_HD int ampc_half_isnan(ampc_half h)
{
    return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
}
static inline AMPC_HD int ampc_bf16_isfinite(ampc_bf16 b) { return (b & 0x7f80u) != 0x7f80u; }
static inline AMPC_HD int ampc_bf16_isnan(ampc_bf16 b)
{
    return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0;
}

/* ---- binary16 --------------------------------------------------------- */

/* Exact.  Subnormal halves become normal floats; NaN is quieted. */
static inline AMPC_HD float ampc_half_to_float(ampc_half h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    uint32_t normal = ((e + 112u) << 23) | (m << 13);          /* rebias 15 -> 127 */
    uint32_t special = 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0u);
    /* zero or subnormal: m * 2^-24, exact in fp32 (m < 2^10, result normal or 0) */
    uint32_t sub = ampc_f32_bits((float)m * 5.9604644775390625e-8f);
    uint32_t r = e == 0 ? sub : (e == 31 ? special : normal);
    return ampc_bits_f32(sign | r);
}

/* Round to nearest even; |f| >= 65520 -> inf; subnormals kept; NaN -> quiet NaN. */
static inline AMPC_HD ampc_half ampc_float_to_half(float f)
{
    uint32_t x = ampc_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;

    /* normal range: rebias the exponent (127 -> 15) and round off 13 bits */
    uint32_t nb = a - 0x38000000u;
    uint32_t normal = (nb + 0x0fffu + ((nb >> 13) & 1u)) >> 13;

    /* below 2^-14: the value in units of 2^-24 is m >> (126 - e), rounded */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x007fffffu) | 0x00800000u;
    /* shift in [14, 31]: e > 112 takes the normal path; below 2^-25 the
     * result is 0 and any shift >= 25 gives it (m < 2^24 < halfway) */
    uint32_t sh = e > 112u ? 14u : (e < 102u ? 31u : 126u - e);
    uint32_t q = m >> sh;
    uint32_t rem = m & ((1u << sh) - 1u);
    uint32_t halfway = 1u << (sh - 1u);
    uint32_t sub = q + (rem > halfway || (rem == halfway && (q & 1u)));

    uint32_t nan = 0x7e00u | ((a >> 13) & 0x03ffu);
    uint32_t r = a > 0x7f800000u ? nan
               : a >= 0x477ff000u ? 0x7c00u    /* 65520 and above (and inf) */
               : a >= 0x38800000u ? normal     /* 2^-14 and above */
               : sub;
    return (ampc_half)(sign | r);
}

/* ---- bfloat16 --------------------------------------------------------- */

/* Exact (a shift); NaN is quieted. */
static inline AMPC_HD float ampc_bf16_to_float(ampc_bf16 b)
{
    uint32_t x = (uint32_t)b << 16;
    uint32_t quiet = ((b & 0x7f80u) == 0x7f80u && (b & 0x7fu)) ? 0x00400000u : 0u;
    return ampc_bits_f32(x | quiet);
}

/* Round to nearest even (overflow to inf falls out); NaN -> quiet NaN, sign kept. */
static inline AMPC_HD ampc_bf16 ampc_float_to_bf16(float f)
{
    uint32_t x = ampc_f32_bits(f);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x0040u;
    return (ampc_bf16)((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* ---- bulk conversions (no aliasing between dst and src) ---------------- */

static inline AMPC_HD void ampc_half_to_float_n(float *AMPC_RESTRICT dst,
                                                const ampc_half *AMPC_RESTRICT src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = ampc_half_to_float(src[i]);
}

static inline AMPC_HD void ampc_float_to_half_n(ampc_half *AMPC_RESTRICT dst,
                                                const float *AMPC_RESTRICT src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = ampc_float_to_half(src[i]);
}

static inline AMPC_HD void ampc_bf16_to_float_n(float *AMPC_RESTRICT dst,
                                                const ampc_bf16 *AMPC_RESTRICT src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = ampc_bf16_to_float(src[i]);
}

static inline AMPC_HD void ampc_float_to_bf16_n(ampc_bf16 *AMPC_RESTRICT dst,
                                                const float *AMPC_RESTRICT src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = ampc_float_to_bf16(src[i]);
}

#endif /* AMPC_KERNELS_HALF_H */
