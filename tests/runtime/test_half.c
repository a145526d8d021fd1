/*
 * test_half.c - runtime/kernels/half.h against an independent reference.
 *
 * The reference knows nothing of bit tricks: it lists every finite
 * non-negative half (bfloat16) as a double computed from its definition,
 * plus the value the next pattern would have if the exponent went on
 * (2^16 for half, 2^128 for bf16: that is where IEEE rounding overflows to
 * inf), and rounds |f| to the nearest entry by binary search, ties to the
 * even pattern.  Checked: all 65,536 patterns of each format round-trip,
 * every midpoint between neighbours and the floats on either side of it,
 * named edge cases, and a few million random floats.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/half.h"

/* ---- the reference --------------------------------------------------------- */

#define HALF_N 0x7c01 /* 0x0000..0x7bff finite, 0x7c00 stands for 2^16 */
#define BF16_N 0x7f81 /* 0x0000..0x7f7f finite, 0x7f80 stands for 2^128 */

static double half_val[HALF_N];
static double bf16_val[BF16_N];

static double half_def(unsigned b) /* value of a non-negative finite pattern */
{
    unsigned e = b >> 10, m = b & 0x3ff;
    return e == 0 ? ldexp((double)m, -24) : ldexp((double)(1024 + m), (int)e - 25);
}

static double bf16_def(unsigned b)
{
    unsigned e = b >> 7, m = b & 0x7f;
    return e == 0 ? ldexp((double)m, -133) : ldexp((double)(128 + m), (int)e - 134);
}

static void ref_init(void)
{
    static int done;
    if (done)
        return;
    for (unsigned b = 0; b < HALF_N; b++)
        half_val[b] = half_def(b); /* 0x7c00 -> (1024)*2^(31-25) = 2^16 */
    for (unsigned b = 0; b < BF16_N; b++)
        bf16_val[b] = bf16_def(b); /* 0x7f80 -> 128*2^(255-134) = 2^128 */
    done = 1;
}

/* index of the nearest table entry to a >= 0, ties to the even index */
static unsigned nearest(const double *v, unsigned n, double a)
{
    if (a >= v[n - 1])
        return n - 1;
    unsigned lo = 0, hi = n - 1; /* v[lo] <= a < v[hi] */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (v[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - v[lo], dh = v[hi] - a;
    if (dl < dh)
        return lo;
    if (dh < dl)
        return hi;
    return (lo & 1) ? hi : lo;
}

static int isnan_f(float f) { return f != f; }

static uint16_t ref_float_to_half(float f) /* for non-NaN f */
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    return (uint16_t)(sign | (isinf(f) ? 0x7c00 : nearest(half_val, HALF_N, a)));
}

static uint16_t ref_float_to_bf16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    return (uint16_t)(sign | (isinf(f) ? 0x7f80 : nearest(bf16_val, BF16_N, a)));
}

static float f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* xorshift64*: a fixed, portable random stream */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static int check_half(float f)
{
    uint16_t got = ampc_float_to_half(f);
    if (isnan_f(f)) {
        int ok = ampc_half_isnan(got) && (got & 0x8000) == ((bits(f) >> 16) & 0x8000) &&
                 (got & 0x0200);
        if (!ok)
            fprintf(stderr, "half(NaN %08x) = %04x\n", bits(f), got);
        return ok;
    }
    uint16_t want = ref_float_to_half(f);
    if (got != want)
        fprintf(stderr, "half(%.9g = %08x): got %04x, want %04x\n", (double)f, bits(f), got, want);
    return got == want;
}

static int check_bf16(float f)
{
    uint16_t got = ampc_float_to_bf16(f);
    if (isnan_f(f)) {
        int ok = ampc_bf16_isnan(got) && (got & 0x8000) == ((bits(f) >> 16) & 0x8000) &&
                 (got & 0x0040);
        if (!ok)
            fprintf(stderr, "bf16(NaN %08x) = %04x\n", bits(f), got);
        return ok;
    }
    uint16_t want = ref_float_to_bf16(f);
    if (got != want)
        fprintf(stderr, "bf16(%.9g = %08x): got %04x, want %04x\n", (double)f, bits(f), got, want);
    return got == want;
}

/* ---- binary16 ----------------------------------------------------------------- */

static void test_half_all_patterns(void **state)
{
    (void)state;
    ref_init();
    unsigned finite = 0, nonnan = 0, nan = 0;
    for (uint32_t b = 0; b < 0x10000; b++) {
        ampc_half h = (ampc_half)b;
        float f = ampc_half_to_float(h);
        int is_nan = (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
        if (is_nan) {
            nan++;
            assert_true(isnan_f(f));
            assert_int_equal(signbit(f) != 0, (b & 0x8000) != 0);
            assert_true(bits(f) & 0x00400000u); /* quiet */
            ampc_half back = ampc_float_to_half(f);
            assert_true(ampc_half_isnan(back));
            assert_int_equal(back & 0x8000, b & 0x8000);
            continue;
        }
        nonnan++;
        /* exact value */
        double want = (b & 0x7c00) == 0x7c00 ? INFINITY : half_def(b & 0x7fff);
        if (b & 0x8000)
            want = -want;
        assert_true((double)f == want);
        assert_int_equal(signbit(f) != 0, (b & 0x8000) != 0); /* -0 too */
        /* round trip */
        assert_int_equal(ampc_float_to_half(f), b);
        if (ampc_half_isfinite(h))
            finite++;
    }
    assert_int_equal(nonnan, 63490);
    assert_int_equal(nan, 2046);
    assert_int_equal(finite, 63488);
}

/* every midpoint between neighbouring halves (so ties at every exponent,
 * subnormal ones included, and 65520 between 65504 and "65536" = inf), and
 * the floats just below and above each, both signs */
static void test_half_midpoints(void **state)
{
    (void)state;
    ref_init();
    long n = 0;
    for (unsigned b = 0; b + 1 < HALF_N; b++) {
        double mid = (half_val[b] + half_val[b + 1]) / 2;
        float m = (float)mid;
        assert_true((double)m == mid); /* 12 significant bits: exact */
        float cases[3] = {m, nextafterf(m, 0.0f), nextafterf(m, INFINITY)};
        for (int i = 0; i < 3; i++) {
            assert_true(check_half(cases[i]));
            assert_true(check_half(-cases[i]));
            n += 2;
        }
        /* the tie goes to the even pattern */
        assert_int_equal(ampc_float_to_half(m), (b & 1) ? b + 1 : b);
    }
    assert_int_equal(n, 6L * (HALF_N - 1));
}

static void test_half_edges(void **state)
{
    (void)state;
    ref_init();
    const float tiny = 5.9604644775390625e-8f; /* 2^-24, smallest subnormal */
    struct { float f; uint16_t want; } c[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {tiny, 0x0001},
        {tiny / 2, 0x0000},                       /* tie between 0 and 2^-24: even = 0 */
        {-tiny / 2, 0x8000},
        {nextafterf(tiny / 2, 1.0f), 0x0001},     /* just above half of it */
        {nextafterf(tiny / 2, 0.0f), 0x0000},
        {tiny * 1.5f, 0x0002},                    /* tie between 1 and 2 ulps: even = 2 */
        {tiny * 2.5f, 0x0002},
        {tiny * 3.5f, 0x0004},
        {1023.0f * tiny, 0x03ff},                 /* largest subnormal */
        {6.103515625e-05f, 0x0400},               /* 2^-14, smallest normal */
        {1023.5f * tiny, 0x0400},                 /* tie between them: even = 0x0400 */
        {nextafterf(1023.5f * tiny, 0.0f), 0x03ff},
        {1022.5f * tiny, 0x03fe},                 /* tie between 0x3fe and 0x3ff: even */
        {65504.0f, 0x7bff},
        {65519.99f, 0x7bff},
        {65520.0f, 0x7c00},                       /* tie with "65536": even = inf */
        {-65520.0f, 0xfc00},
        {1e6f, 0x7c00},
        {3.4028234663852886e38f, 0x7c00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {1e-30f, 0x0000},
        {-1e-30f, 0x8000},
        {1.4e-45f, 0x0000},                       /* float subnormal */
        {2049.0f, 0x6800},                        /* 2048 + 1: tie -> even 2048 */
        {2051.0f, 0x6802},                        /* 2050 + 1: tie -> even 2052 */
        {0.1f, 0x2e66},
        {1.0009765625f, 0x3c01},
        {1.00048828125f, 0x3c00},                 /* 1 + 2^-11: tie -> 1 */
        {1.00146484375f, 0x3c02},                 /* 1 + 3*2^-11: tie -> 1 + 2^-9 */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        uint16_t got = ampc_float_to_half(c[i].f);
        if (got != c[i].want)
            fprintf(stderr, "case %zu: half(%.9g) = %04x, want %04x\n", i, (double)c[i].f, got,
                    c[i].want);
        assert_int_equal(got, c[i].want);
        assert_true(check_half(c[i].f)); /* and the reference agrees */
    }
    /* NaN: sign kept, quiet, payload's top bits kept */
    float snan = f32(0x7f800001u), nsnan = f32(0xff800001u), qnan = f32(0x7fc00000u);
    assert_true(ampc_half_isnan(ampc_float_to_half(snan)));
    assert_true(ampc_float_to_half(snan) & 0x0200);
    assert_int_equal(ampc_float_to_half(nsnan) & 0x8000, 0x8000);
    assert_int_equal(ampc_float_to_half(qnan), 0x7e00);
    assert_int_equal(ampc_float_to_half(f32(0xffc02000u)), 0xfe01);
    assert_true(check_half(snan) && check_half(nsnan) && check_half(NAN));
    assert_true(ampc_isfinite(65504.0f) && !ampc_isfinite(INFINITY) && !ampc_isfinite(NAN));
}

static void test_half_random(void **state)
{
    (void)state;
    ref_init();
    long bad = 0;
    /* 2M uniformly random bit patterns: every exponent, NaN, inf, subnormals */
    for (int i = 0; i < 2000000; i++)
        bad += !check_half(f32(rnd32()));
    /* 2M more within and around the half range: exponents 2^-26 .. 2^17 */
    for (int i = 0; i < 2000000; i++) {
        uint32_t r = rnd32();
        uint32_t e = 101u + (r % 44u);
        bad += !check_half(f32((r & 0x80000000u) | (e << 23) | (rnd32() & 0x7fffffu)));
    }
    assert_int_equal(bad, 0);
}

static void test_half_bulk(void **state)
{
    (void)state;
    enum { N = 4099 };
    static float src[N], back[N];
    static ampc_half h[N], h2[N];
    for (int i = 0; i < N; i++)
        src[i] = f32(rnd32());
    ampc_float_to_half_n(h, src, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(h[i], ampc_float_to_half(src[i]));
    ampc_half_to_float_n(back, h, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(bits(back[i]), bits(ampc_half_to_float(h[i])));
    ampc_float_to_half_n(h2, back, N);
    for (int i = 0; i < N; i++)
        if (!ampc_half_isnan(h[i]))
            assert_int_equal(h2[i], h[i]);
}

/* ---- bfloat16 ------------------------------------------------------------------- */

static void test_bf16_all_patterns(void **state)
{
    (void)state;
    ref_init();
    unsigned nonnan = 0, nan = 0;
    for (uint32_t b = 0; b < 0x10000; b++) {
        float f = ampc_bf16_to_float((ampc_bf16)b);
        int is_nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f);
        if (is_nan) {
            nan++;
            assert_true(isnan_f(f));
            assert_int_equal(signbit(f) != 0, (b & 0x8000) != 0);
            assert_true(bits(f) & 0x00400000u);
            ampc_bf16 back = ampc_float_to_bf16(f);
            assert_true(ampc_bf16_isnan(back));
            assert_int_equal(back & 0x8000, b & 0x8000);
            continue;
        }
        nonnan++;
        double want = (b & 0x7f80) == 0x7f80 ? INFINITY : bf16_def(b & 0x7fff);
        if (b & 0x8000)
            want = -want;
        assert_true((double)f == want);
        assert_int_equal(signbit(f) != 0, (b & 0x8000) != 0);
        assert_int_equal(ampc_float_to_bf16(f), b);
    }
    assert_int_equal(nonnan, 65282);
    assert_int_equal(nan, 254);
}

static void test_bf16_midpoints(void **state)
{
    (void)state;
    ref_init();
    for (unsigned b = 0; b + 1 < BF16_N; b++) {
        double mid = (bf16_val[b] + bf16_val[b + 1]) / 2;
        float m = (float)mid;
        assert_true((double)m == mid);
        float cases[3] = {m, nextafterf(m, 0.0f), nextafterf(m, INFINITY)};
        for (int i = 0; i < 3; i++) {
            assert_true(check_bf16(cases[i]));
            assert_true(check_bf16(-cases[i]));
        }
        assert_int_equal(ampc_float_to_bf16(m), (b & 1) ? b + 1 : b);
    }
}

static void test_bf16_edges(void **state)
{
    (void)state;
    ref_init();
    struct { float f; uint16_t want; } c[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3f80},
        {f32(0x3f808000u), 0x3f80},               /* 1 + 2^-8: tie -> even 1 */
        {f32(0x3f818000u), 0x3f82},               /* tie -> even upward */
        {f32(0x3f808001u), 0x3f81},
        {f32(0x7f7f0000u), 0x7f7f},               /* largest finite bf16, 3.3895e38 */
        {f32(0x7f7f7fffu), 0x7f7f},
        {f32(0x7f7f8000u), 0x7f80},               /* tie with 2^128 -> inf */
        {3.4028234663852886e38f, 0x7f80},         /* FLT_MAX -> inf under RNE */
        {-3.4028234663852886e38f, 0xff80},
        {INFINITY, 0x7f80},
        {-INFINITY, 0xff80},
        {f32(0x00000001u), 0x0000},               /* smallest float subnormal */
        {f32(0x00008000u), 0x0000},               /* tie between 0 and 0x0001: even */
        {f32(0x00008001u), 0x0001},
        {f32(0x00018000u), 0x0002},
        {f32(0x00800000u), 0x0080},               /* FLT_MIN */
        {f32(0x007fffffu), 0x0080},               /* largest float subnormal rounds up */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        uint16_t got = ampc_float_to_bf16(c[i].f);
        if (got != c[i].want)
            fprintf(stderr, "case %zu: bf16(%.9g) = %04x, want %04x\n", i, (double)c[i].f, got,
                    c[i].want);
        assert_int_equal(got, c[i].want);
        assert_true(check_bf16(c[i].f));
    }
    float snan = f32(0x7f800001u), nsnan = f32(0xff800001u);
    assert_int_equal(ampc_float_to_bf16(snan), 0x7fc0);  /* quieted, payload's top bits 0 */
    assert_int_equal(ampc_float_to_bf16(nsnan), 0xffc0);
    assert_int_equal(ampc_float_to_bf16(f32(0x7fffffffu)), 0x7fff); /* no carry into the sign */
    assert_int_equal(ampc_float_to_bf16(f32(0xffffffffu)), 0xffff);
    assert_int_equal(ampc_float_to_bf16(f32(0x7f810000u)), 0x7fc1);
}

static void test_bf16_random(void **state)
{
    (void)state;
    ref_init();
    long bad = 0;
    for (int i = 0; i < 2000000; i++)
        bad += !check_bf16(f32(rnd32()));
    assert_int_equal(bad, 0);
}

static void test_bf16_bulk(void **state)
{
    (void)state;
    enum { N = 1031 };
    static float src[N], back[N];
    static ampc_bf16 b[N];
    for (int i = 0; i < N; i++)
        src[i] = f32(rnd32());
    ampc_float_to_bf16_n(b, src, N);
    ampc_bf16_to_float_n(back, b, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(b[i], ampc_float_to_bf16(src[i]));
        assert_int_equal(bits(back[i]), bits(ampc_bf16_to_float(b[i])));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_all_patterns),
        cmocka_unit_test(test_half_midpoints),
        cmocka_unit_test(test_half_edges),
        cmocka_unit_test(test_half_random),
        cmocka_unit_test(test_half_bulk),
        cmocka_unit_test(test_bf16_all_patterns),
        cmocka_unit_test(test_bf16_midpoints),
        cmocka_unit_test(test_bf16_edges),
        cmocka_unit_test(test_bf16_random),
        cmocka_unit_test(test_bf16_bulk),
    };
    return cmocka_run_group_tests_name("half", tests, NULL, NULL);
}
