/* test_cuda_layout_emu.c - the kernels around the cuDNN and cuBLASLt calls
 * (runtime/cuda/layout.cuh) under the emulator (libampcemu.a; runtime/emu/),
 * under two scheduler seeds and the reversed order with every access
 * checked, in device buffers of exactly their size, against the CPU
 * runtime bit for bit: the channel padding round trip (NaN payloads kept,
 * padding zero), unpadding with accumulate against rt_elemwise_forward's
 * add, the bias add against the same add of an expanded bias, and the bias
 * gradient against rt_fc_backward_weight's dbias, in fp32, fp16 and bf16;
 * and pooling (pool.cuh) against rt_pool_forward / rt_pool_backward, NCHW
 * and NHWC, over max/avg/sum, 1-D to 3-D, both conventions, with and
 * without count_include_pad, global, and empty windows; and BatchNorm
 * (batchnorm.cuh) against rt_batchnorm_* (training, inference, backward with batch
 * and global statistics, fix_gamma, every accumulate flag). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/plan.c"
#include "cuda/rt_cuda.h"
#include "emu_test.h"
#include "rt.h"

/* every buffer of this test is device memory (the CPU twins use it too);
 * the emulation build caps the grids at 3 blocks, so the loops wrap */
static void *dmem(size_t bytes) { return dev(bytes, "buffer"); }
static void dfree(void *p) { ampc_emu_free(p); }

static uint64_t rng = 99;
static uint32_t next(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 32);
}

/* random values of dt, with a few specials (NaN with a payload, inf, -0,
 * subnormals) when specials */
static void *randbuf(size_t n, RtDType dt, bool specials)
{
    size_t es = rt_dtype_size(dt);
    float *f = dmem(n * sizeof *f);
    void *out = dmem(n * es);
    for (size_t i = 0; i < n; i++)
        f[i] = ((float)next() / 4294967296.0f * 2.0f - 1.0f) * 8.0f; /* full mantissas */
    rt_from_f32(out, f, n, dt);
    if (specials && n > 4) {
        if (dt == RT_F32) {
            ((uint32_t *)out)[0] = 0x7fc01234u;
            ((uint32_t *)out)[1] = 0x80000000u;
            ((uint32_t *)out)[2] = 0x00000003u;
        } else {
            ((uint16_t *)out)[0] = 0x7e12;
            ((uint16_t *)out)[1] = 0x8000;
            ((uint16_t *)out)[2] = 0x0003;
        }
    }
    dfree(f);
    return out;
}

static const RtDType dts[] = {RT_F32, RT_F16, RT_BF16};

/* a == b bit for bit, NaN as NaN where an operation made it */
static void same(const void *a, const void *b, size_t n, RtDType dt, bool nan_any, const char *w)
{
    float fa, fb;
    for (size_t i = 0; i < n; i++) {
        if (!memcmp((const char *)a + i * rt_dtype_size(dt), (const char *)b + i * rt_dtype_size(dt),
                    rt_dtype_size(dt)))
            continue;
        rt_to_f32(&fa, (const char *)a + i * rt_dtype_size(dt), 1, dt);
        rt_to_f32(&fb, (const char *)b + i * rt_dtype_size(dt), 1, dt);
        if (nan_any && fa != fa && fb != fb)
            continue;
        fail_msg("%s (%s): element %zu: %g vs %g", w, rt_dtype_name(dt), i, fa, fb);
    }
}

static void test_pad_unpad(void **state)
{
    (void)state;
    EMU_PASSES for (int t = 0; t < 3; t++) {
            RtDType dt = dts[t];
            size_t es = rt_dtype_size(dt);
            static const int cs[][2] = {{3, 4}, {1, 4}, {5, 8}, {7, 8}};
            for (int k = 0; k < 4; k++) {
                int c = cs[k][0], cp = cs[k][1];
                size_t rows = 517;
                void *x = randbuf(rows * c, dt, true);
                char *p = dmem(rows * cp * es);
                memset(p, 0x5a, rows * cp * es); /* garbage the kernel must overwrite */
                long before = ampc_emu_launches();
                assert_int_equal(ampc_cu_pad_channels(NULL, rows, c, cp, (int)dt, x, p), 0);
                assert_int_equal(ampc_emu_launches(), before + 1);
                for (size_t r = 0; r < rows; r++) {
                    assert_memory_equal(p + r * cp * es, (char *)x + r * c * es, c * es);
                    for (size_t j = (size_t)c * es; j < (size_t)cp * es; j++)
                        assert_int_equal(p[r * cp * es + j], 0);
                }
                void *back = dmem(rows * c * es);
                assert_int_equal(ampc_cu_unpad_channels(NULL, rows, c, cp, (int)dt, p, back, 0), 0);
                same(back, x, rows * c, dt, false, "unpad(pad(x))");
                /* accumulate: dst + x rounded once, as rt_elemwise_forward's add */
                void *dst = randbuf(rows * c, dt, false), *want = dmem(rows * c * es);
                rt_elemwise_forward(RT_BIN_ADD, rows * c, dt, dst, x, want);
                assert_int_equal(ampc_cu_unpad_channels(NULL, rows, c, cp, (int)dt, p, dst, 1), 0);
                same(dst, want, rows * c, dt, true, "unpad accumulate");
                dfree(x), dfree(p), dfree(back), dfree(dst), dfree(want);
            }
        }
}

static void test_bias_add(void **state)
{
    (void)state;
    EMU_PASSES for (int t = 0; t < 3; t++) {
        RtDType dt = dts[t];
        size_t es = rt_dtype_size(dt);
        /* NCHW [outer, c, inner] and NHWC [outer*inner, c, 1] */
        static const size_t shapes[][3] = {{3, 5, 49}, {147, 5, 1}, {1, 1, 1}, {2, 1000, 1}};
        for (int s = 0; s < 4; s++) {
            size_t outer = shapes[s][0], c = shapes[s][1], inner = shapes[s][2], n = outer * c * inner;
            void *y = randbuf(n, dt, true), *bias = randbuf(c, dt, false);
            char *bx = dmem(n * es);
            void *want = dmem(n * es);
            for (size_t i = 0; i < n; i++)
                memcpy(bx + i * es, (char *)bias + (i / inner % c) * es, es);
            rt_elemwise_forward(RT_BIN_ADD, n, dt, y, bx, want);
            assert_int_equal(ampc_cu_bias_add(NULL, outer, (int)c, inner, (int)dt, y, bias), 0);
            same(y, want, n, dt, true, "bias_add");
            dfree(y), dfree(bias), dfree(bx), dfree(want);
        }
    }
}

static void test_bias_grad_is_fc_dbias(void **state)
{
    (void)state;
    EMU_PASSES for (int t = 0; t < 3; t++)
            for (int acc = 0; acc < 2; acc++) {
                RtDType dt = dts[t];
                size_t es = rt_dtype_size(dt);
                RtFcDims d = {.n = 37, .in = 3, .hidden = 1001};
                void *x = randbuf((size_t)d.n * d.in, dt, false);
                void *dy = randbuf((size_t)d.n * d.hidden, dt, false);
                void *dw = dmem((size_t)d.hidden * d.in * es);
                void *want = randbuf((size_t)d.hidden, dt, false), *got = dmem(d.hidden * es);
                memcpy(got, want, d.hidden * es);
                size_t wsb = rt_fc_workspace_bytes(&d, dt, RT_PASS_BACKWARD_WEIGHT);
                void *ws = dmem((wsb / RT_WS_ALIGN + 1) * RT_WS_ALIGN);
                rt_fc_backward_weight(&d, dt, x, dy, dw, want, acc, ws);
                assert_int_equal(ampc_cu_bias_grad(NULL, (size_t)d.n, d.hidden, 1, (int)dt, dy, got, acc), 0);
                same(got, want, (size_t)d.hidden, dt, false, "bias_grad vs rt_fc_backward_weight");
                dfree(x), dfree(dy), dfree(dw), dfree(want), dfree(got), dfree(ws);
            }
}

/* [a, c, s] -> [a, s, c] of es-byte elements (and back with c and s swapped) */
static void *permute(const void *src, size_t a, size_t c, size_t s, size_t es)
{
    char *d = dmem(a * c * s * es);
    for (size_t i = 0; i < a; i++)
        for (size_t j = 0; j < c; j++)
            for (size_t q = 0; q < s; q++)
                memcpy(d + ((i * s + q) * c + j) * es, (const char *)src + ((i * c + j) * s + q) * es,
                       es);
    return d;
}

static void pool_case(RtPoolDims d, int *cases)
{
    assert_true(rt_pool_dims_init(&d));
    size_t S = 1, O = 1;
    for (int a = 0; a < d.nsp; a++)
        S *= (size_t)d.in[a], O *= (size_t)d.out[a];
    size_t xn = (size_t)d.n * d.c * S, yn = (size_t)d.n * d.c * O;
    for (int t = 0; t < 3; t++)
        for (int lay = 0; lay < 2; lay++) {
            RtDType dt = dts[t];
            size_t es = rt_dtype_size(dt);
            AmpcPoolGeom g;
            char err[128];
            assert_true(ampc_pool_geom(&d, lay ? AMPC_NHWC : AMPC_NCHW, &g, err, sizeof err));
            void *x = randbuf(xn, dt, false), *dy = randbuf(yn, dt, false);
            /* ties, so the first maximum matters */
            memcpy((char *)x + es, x, es);
            void *ws = dmem((rt_pool_workspace_bytes(&d, dt, RT_PASS_BACKWARD) /
                                                   RT_WS_ALIGN + 1) * RT_WS_ALIGN);
            void *want = dmem(xn * es + yn * es), *got = dmem(xn * es + yn * es);
            rt_pool_forward(&d, dt, x, want, ws);
            void *xl = lay ? permute(x, (size_t)d.n, (size_t)d.c, S, es) : x;
            void *dyl = lay ? permute(dy, (size_t)d.n, (size_t)d.c, O, es) : dy;
            assert_int_equal(ampc_cu_pool_forward(NULL, &g, (int)dt, xl, got), 0);
            void *back = lay ? permute(got, (size_t)d.n, O, (size_t)d.c, es) : got;
            same(back, want, yn, dt, true, "pool forward");
            if (lay)
                dfree(back);
            for (int acc = 0; acc < 2; acc++) {
                void *dx0 = randbuf(xn, dt, false);
                memcpy(want, dx0, xn * es);
                rt_pool_backward(&d, dt, x, dy, want, acc, ws);
                void *dxl = lay ? permute(dx0, (size_t)d.n, (size_t)d.c, S, es) : dx0;
                assert_int_equal(ampc_cu_pool_backward(NULL, &g, (int)dt, xl, dyl, dxl, acc), 0);
                back = lay ? permute(dxl, (size_t)d.n, S, (size_t)d.c, es) : dxl;
                same(back, want, xn, dt, true, "pool backward");
                if (lay)
                    dfree(back), dfree(dxl);
                dfree(dx0);
                ++*cases;
            }
            if (lay)
                dfree(xl), dfree(dyl);
            dfree(x), dfree(dy), dfree(ws), dfree(want), dfree(got);
        }
}

static void test_pool(void **state)
{
    (void)state;
    int cases = 0;
    EMU_PASSES for (int type = 0; type < 3; type++)
        for (int full = 0; full < 2; full++)
            for (int cip = 0; cip < 2; cip++) {
                RtPoolType ty = (RtPoolType)type;
                /* ResNet's 3x3 stride 2 pad 1 */
                pool_case((RtPoolDims){.n = 2, .c = 3, .nsp = 2, .in = {9, 8}, .kernel = {3, 3},
                                       .stride = {2, 2}, .pad = {1, 1}, .type = ty,
                                       .full_convention = full, .count_include_pad = cip},
                          &cases);
                /* stride > kernel with the full convention: empty windows */
                pool_case((RtPoolDims){.n = 1, .c = 2, .nsp = 2, .in = {7, 5}, .kernel = {2, 1},
                                       .stride = {3, 4}, .pad = {1, 0}, .type = ty,
                                       .full_convention = full, .count_include_pad = cip},
                          &cases);
                /* 1-D and 3-D */
                pool_case((RtPoolDims){.n = 2, .c = 2, .nsp = 1, .in = {11}, .kernel = {4},
                                       .stride = {3}, .pad = {2}, .type = ty,
                                       .full_convention = full, .count_include_pad = cip},
                          &cases);
                pool_case((RtPoolDims){.n = 1, .c = 2, .nsp = 3, .in = {4, 5, 3},
                                       .kernel = {2, 3, 2}, .stride = {2, 1, 2}, .pad = {1, 1, 0},
                                       .type = ty, .full_convention = full,
                                       .count_include_pad = cip},
                          &cases);
                /* global */
                pool_case((RtPoolDims){.n = 3, .c = 5, .nsp = 2, .in = {7, 7}, .type = ty,
                                       .global = true, .full_convention = full,
                                       .count_include_pad = cip},
                          &cases);
            }
    assert_int_equal(cases, 3 * 3 * 2 * 2 * 5 * 3 * 2 * 2);
    char err[128];
    AmpcPoolGeom g;
    RtPoolDims bad = {.n = 1, .c = 1, .nsp = 2, .in = {2, 2}, .kernel = {3, 3}, .stride = {1, 1}};
    assert_false(ampc_pool_geom(&bad, AMPC_NCHW, &g, err, sizeof err));
    assert_non_null(strstr(err, "invalid dims"));
}

static float *fbuf(size_t n, float lo, float hi)
{
    float *f = dmem(n * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = lo + (hi - lo) * ((float)next() / 4294967296.0f);
    return f;
}

static void same_f(const float *a, const float *b, size_t n, const char *w)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) && !(a[i] != a[i] && b[i] != b[i]))
            fail_msg("%s: [%zu] %.9g vs %.9g", w, i, a[i], b[i]);
}

/* values over a wide range of exponents, so that double sums round and
 * their order shows in the bits (fp32 and bf16; fp16's range is too narrow) */
static int wide_pattern; /* 0: large, its negative, tiny; 1: halves that cancel late */
static void *widebuf(size_t n, RtDType dt)
{
    float *f = dmem(n * sizeof *f);
    void *out = dmem(n * rt_dtype_size(dt));
    /* large values with their exact negatives, and tiny ones: the sums
     * cancel, so their rounding errors (which depend on the order) reach
     * the float results */
    for (size_t i = 0; i < n; i++) {
        float r = (float)next() / 4294967296.0f * 2.0f - 1.0f;
        bool big = next() % 2;
        if (wide_pattern == 0)
            f[i] = i % 3 == 0 ? ldexpf(r, 12) : i % 3 == 1 ? -f[i - 1] : ldexpf(r, -30);
        else
            f[i] = i >= n / 2 && fabsf(f[i - n / 2]) > 1.0f ? -f[i - n / 2]
                 : big ? ldexpf(r, 12) : ldexpf(r, -30);
    }
    rt_from_f32(out, f, n, dt);
    dfree(f);
    return out;
}

static void bn_case(int64_t outer, int64_t c, int64_t inner, RtDType dt, int *cases)
{
    RtBnDims d = {outer, c, inner};
    size_t n = (size_t)(outer * c * inner), es = rt_dtype_size(dt), C = (size_t)c;
    void *x = widebuf(n, dt), *dy = widebuf(n, dt);
    float *gamma = fbuf(C, 0.5f, 2.0f), *beta = fbuf(C, -1, 1), *mm = fbuf(C, -1, 1),
          *mv = fbuf(C, 0.1f, 3.0f), *ws = dmem(3 * C * 4);
    void *y0 = dmem(n * es), *y1 = dmem(n * es);
    float *sm0 = dmem(C * 4), *si0 = dmem(C * 4), *sm1 = dmem(C * 4), *si1 = dmem(C * 4);
    assert_true(c <= 64);
    for (int fix = 0; fix < 2; fix++) {
        rt_batchnorm_forward_train(&d, dt, x, gamma, beta, 1e-5f, fix, y0, sm0, si0);
        assert_int_equal(ampc_cu_bn_forward_train(NULL, (size_t)outer, (int)c, (size_t)inner,
                                                  (int)dt, x, gamma, beta, 1e-5f, fix, y1, sm1,
                                                  si1, ws), 0);
        same_f(sm1, sm0, C, "save_mean"), same_f(si1, si0, C, "save_invstd");
        same(y1, y0, n, dt, true, "batchnorm forward train");
        rt_batchnorm_forward_inference(&d, dt, x, gamma, beta, mm, mv, 1e-3f, fix, y0, sm0, si0);
        assert_int_equal(ampc_cu_bn_forward_inference(NULL, (size_t)outer, (int)c, (size_t)inner,
                                                      (int)dt, x, gamma, beta, mm, mv, 1e-3f,
                                                      fix, y1, sm1, si1, ws), 0);
        same_f(sm1, sm0, C, "inference save_mean"), same_f(si1, si0, C, "inference invstd");
        same(y1, y0, n, dt, true, "batchnorm forward inference");
        for (int glob = 0; glob < 2; glob++)
            for (int accx = 0; accx < 2; accx++)
                for (int accp = 0; accp < 2; accp++) {
                    float dg0[64], db0[64], *dg1 = dmem(C * 4), *db1 = dmem(C * 4);
                    float *start = fbuf(C, -1, 1);
                    memcpy(dg0, start, C * 4), memcpy(dg1, start, C * 4);
                    memcpy(db0, gamma, C * 4), memcpy(db1, gamma, C * 4);
                    void *dx0 = randbuf(n, dt, false), *dx1 = dmem(n * es);
                    memcpy(dx1, dx0, n * es);
                    rt_batchnorm_backward(&d, dt, x, dy, gamma, si0 /* any stats */, sm0, fix,
                                          glob, dx0, dg0, db0, accx, accp);
                    assert_int_equal(ampc_cu_bn_backward(NULL, (size_t)outer, (int)c,
                                                         (size_t)inner, (int)dt, x, dy, gamma,
                                                         si0, sm0, fix, glob, dx1, dg1, db1,
                                                         accx, accp, ws), 0);
                    same(dx1, dx0, n, dt, true, "batchnorm backward dx");
                    same_f(dg1, dg0, C, "dgamma"), same_f(db1, db0, C, "dbeta");
                    dfree(start), dfree(dx0), dfree(dx1), dfree(dg1), dfree(db1);
                    ++*cases;
                }
    }
    dfree(x), dfree(dy), dfree(gamma), dfree(beta), dfree(mm), dfree(mv), dfree(y0), dfree(y1);
    dfree(ws), dfree(sm0), dfree(si0), dfree(sm1), dfree(si1);
}

static void test_batchnorm(void **state)
{
    (void)state;
    int cases = 0;
    EMU_PASSES for (wide_pattern = 0; wide_pattern < 2; wide_pattern++)
        for (int t = 0; t < 3; t++) {
            bn_case(3, 5, 1037, dts[t], &cases); /* two full chunks of 512, a tail of 13 */
            bn_case(2, 3, 7, dts[t], &cases);    /* the tail only */
            bn_case(700, 4, 1, dts[t], &cases);  /* NHWC's view: inner 1 */
            bn_case(4, 64, 24, dts[t], &cases);  /* lanes of 8 and a tail; 64 channels */
        }
    assert_int_equal(cases, 3 * 2 * 3 * 4 * 2 * 8);
}

int main(void)
{
    /* The reference is the CPU twins' default path: AVX2 where the machine
     * has it.  batchnorm.c's AVX2 path gives the generic path's bits only
     * because the runtime is built with -ffp-contract=off: clang (the ASan
     * build) otherwise contracts its x*scale + shift into an FMA (its target
     * includes "fma"), an ulp away from these kernels, which this test then
     * catches.  AMPC_RT_SIMD=0 in the environment tests the generic path. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pad_unpad),
        cmocka_unit_test(test_bias_add),
        cmocka_unit_test(test_bias_grad_is_fc_dbias),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_batchnorm),
    };
    return cmocka_run_group_tests(tests, emu_test_setup, emu_test_teardown);
}
