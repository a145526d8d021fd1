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
 * (batchnorm.cuh) against rt_batchnorm_* in its tiled order
 * (training, inference, backward with batch and global statistics,
 * fix_gamma, every accumulate flag; plain, with its relu, with the
 * residual add and relu; in place; 16 bytes at a time and per element). */
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

/* layout.cuh's ampc_k_bias_grad_block in C: channel ch's terms (o-major)
 * dealt to 256 threads in turn, each thread's double sum in order, then
 * block.cuh's tree (each warp's lanes pairwise, h = 16..1, then the 8
 * warps'), rounded once, acc adding */
static void bias_block_twin(size_t outer, size_t c, size_t inner, RtDType dt, const void *dy,
                            void *dbias, int acc)
{
    size_t es = rt_dtype_size(dt);
    for (size_t ch = 0; ch < c; ch++) {
        double t[256] = {0}, w8[8];
        for (size_t j = 0; j < outer * inner; j++) {
            float v;
            rt_to_f32(&v, (const char *)dy + ((j / inner * c + ch) * inner + j % inner) * es, 1,
                      dt);
            t[j % 256] += v;
        }
        for (int w = 0; w < 8; w++) {
            for (int h = 16; h >= 1; h /= 2)
                for (int i = 0; i < h; i++)
                    t[32 * w + i] = t[32 * w + i] + t[32 * w + i + h];
            w8[w] = t[32 * w];
        }
        for (int h = 4; h >= 1; h /= 2)
            for (int i = 0; i < h; i++)
                w8[i] = w8[i] + w8[i + h];
        float old = 0.0f, r = (float)w8[0];
        if (acc)
            rt_to_f32(&old, (const char *)dbias + ch * es, 1, dt), r = old + r;
        rt_from_f32((char *)dbias + ch * es, &r, 1, dt);
    }
}

/* a channel of 2,048 terms or more: a block each, against the twin bit for
 * bit; FullyConnected's rows (inner 1) and NCHW's planes, with values of
 * 2^40 and their negatives planted so that another order of the double
 * sums shows (fp16 cannot hold them) */
static void test_bias_grad_block(void **state)
{
    (void)state;
    static const size_t shapes[2][3] = {{2100, 5, 1}, {3, 4, 700}};
    EMU_PASSES for (int t = 0; t < 3; t++) for (int k = 0; k < 4; k++)
    {
        RtDType dt = dts[t];
        int acc = k & 1;
        const size_t *sh = shapes[k >> 1];
        size_t outer = sh[0], c = sh[1], inner = sh[2], n = outer * c * inner;
        size_t es = rt_dtype_size(dt);
        void *dy = randbuf(n, dt, false);
        for (size_t i = 0; dt != RT_F16 && i + 600 < n; i += 997) {
            float big[2] = {0x1p40f, -0x1p40f};
            rt_from_f32((char *)dy + i * es, &big[0], 1, dt);
            rt_from_f32((char *)dy + (i + 600) * es, &big[1], 1, dt);
        }
        void *got = randbuf(c, dt, false), *want = dmem(c * es);
        memcpy(want, got, c * es);
        assert_int_equal(ampc_cu_bias_grad(NULL, outer, (int)c, inner, (int)dt, dy, got, acc), 0);
        bias_block_twin(outer, c, inner, dt, dy, want, acc);
        same(got, want, c, dt, false, "bias_grad, a block a channel");
        dfree(dy), dfree(got), dfree(want);
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
                void *arg = dmem(ampc_pool_ws_bytes(&g, 1) + 1); /* max's argmax */
                assert_int_equal(ampc_cu_pool_backward(NULL, &g, (int)dt, xl, dyl, dxl, acc, arg),
                                 0);
                dfree(arg);
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

/* the fusions a BatchNorm case runs: plain, with its relu, with the add and relu */
enum { BN_PLAIN, BN_RELU, BN_ADD, BN_FUSIONS };

/* The CPU twin of the case's forward, in the GPU's order (d->order). */
static void bn_cpu_forward(const RtBnDims *d, RtDType dt, int fuse, bool infer, const void *x,
                           const void *sc, const float *gamma, const float *beta, const float *mm,
                           const float *mv, bool fix, void *y, float *sm, float *si)
{
    if (infer && fuse == BN_ADD)
        rt_batchnorm_add_relu_forward_inference(d, dt, x, sc, gamma, beta, mm, mv, 1e-3f, fix, y,
                                                sm, si);
    else if (infer)
        (fuse == BN_RELU ? rt_batchnorm_relu_forward_inference : rt_batchnorm_forward_inference)(
            d, dt, x, gamma, beta, mm, mv, 1e-3f, fix, y, sm, si);
    else if (fuse == BN_ADD)
        rt_batchnorm_add_relu_forward_train(d, dt, x, sc, gamma, beta, 1e-5f, fix, y, sm, si);
    else
        (fuse == BN_RELU ? rt_batchnorm_relu_forward_train : rt_batchnorm_forward_train)(
            d, dt, x, gamma, beta, 1e-5f, fix, y, sm, si);
}

static void bn_gpu_forward(const RtBnDims *d, RtDType dt, int fuse, bool infer, const void *x,
                           const void *sc, const float *gamma, const float *beta, const float *mm,
                           const float *mv, bool fix, void *y, float *sm, float *si, void *ws)
{
    size_t o = (size_t)d->outer, in = (size_t)d->inner;
    const void *s = fuse == BN_ADD ? sc : NULL;
    int relu = fuse != BN_PLAIN, e;
    if (infer)
        e = ampc_cu_batchnorm_forward_inference(NULL, o, (int)d->c, in, (int)dt, x, s, relu, gamma,
                                                beta, mm, mv, 1e-3f, fix, y, sm, si, ws);
    else
        e = ampc_cu_batchnorm_forward_train(NULL, o, (int)d->c, in, (int)dt, x, s, relu, gamma,
                                            beta, 1e-5f, fix, y, sm, si, ws);
    assert_int_equal(e, 0);
}

/* The backward's twins: ry the forward's y (the fused relu's), dsc the add's */
static void bn_cpu_backward(const RtBnDims *d, RtDType dt, int fuse, const void *x, const void *ry,
                            const void *dy, const float *gamma, const float *sm, const float *si,
                            bool fix, bool glob, void *dsc, void *dx, float *dg, float *db,
                            bool accx, bool accp)
{
    if (fuse == BN_ADD)
        rt_batchnorm_add_relu_backward(d, dt, x, ry, dy, gamma, sm, si, fix, glob, dsc, dx, dg, db,
                                       accx, accp);
    else if (fuse == BN_RELU)
        rt_batchnorm_relu_backward(d, dt, x, ry, dy, gamma, sm, si, fix, glob, dx, dg, db, accx,
                                   accp);
    else
        rt_batchnorm_backward(d, dt, x, dy, gamma, sm, si, fix, glob, dx, dg, db, accx, accp);
}

static void bn_gpu_backward(const RtBnDims *d, RtDType dt, int fuse, const void *x, const void *ry,
                            const void *dy, const float *gamma, const float *sm, const float *si,
                            bool fix, bool glob, void *dsc, void *dx, float *dg, float *db,
                            bool accx, bool accp, void *ws)
{
    assert_int_equal(ampc_cu_batchnorm_backward(NULL, (size_t)d->outer, (int)d->c, (size_t)d->inner,
                                                (int)dt, x, fuse == BN_PLAIN ? NULL : ry, dy,
                                                fuse == BN_ADD ? dsc : NULL, gamma, sm, si, fix,
                                                glob, dx, dg, db, accx, accp, ws),
                     0);
}

static void *dcopy(const void *p, size_t bytes)
{
    void *q = dmem(bytes);
    memcpy(q, p, bytes);
    return q;
}

/* The backward against the CPU twin, with batch statistics overwriting dx,
 * dgamma and dbeta, and with global ones adding to them (the forward's y as the
 * fused relu's; saved statistics from the forward, or, with glob, any);
 * with the add, also written in place as the memory plan may (the relu's
 * gradient over dy, dx over y), which must give the same bits. */
static void bn_backward_cases(const RtBnDims *d, RtDType dt, int fuse, const void *x, const void *y,
                              const void *dy, const float *gamma, const float *sm, const float *si,
                              bool fix, void *ws, int *cases)
{
    size_t n = (size_t)(d->outer * d->c * d->inner), es = rt_dtype_size(dt), C = (size_t)d->c;
    for (int glob = 0; glob < 2; glob++) {
        bool accx = glob, accp = glob;
        float *dg0 = fbuf(C, -1, 1), *dg1 = dcopy(dg0, C * 4), *db0 = fbuf(C, -1, 1),
              *db1 = dcopy(db0, C * 4);
        void *dx0 = randbuf(n, dt, false), *dx1 = dcopy(dx0, n * es);
        void *ds0 = dmem(n * es), *ds1 = dmem(n * es);
        bn_cpu_backward(d, dt, fuse, x, y, dy, gamma, sm, si, fix, glob, ds0, dx0, dg0, db0, accx,
                        accp);
        bn_gpu_backward(d, dt, fuse, x, y, dy, gamma, sm, si, fix, glob, ds1, dx1, dg1, db1, accx,
                        accp, ws);
        same(dx1, dx0, n, dt, true, "batchnorm backward dx");
        same_f(dg1, dg0, C, "dgamma"), same_f(db1, db0, C, "dbeta");
        if (fuse == BN_ADD)
            same(ds1, ds0, n, dt, true, "batchnorm + add backward: the relu's gradient");
        if (fuse == BN_ADD && !accx && !glob) {
            /* in place: dsc over dy, dx over y, on both sides */
            void *ip0 = dcopy(dy, n * es), *ip1 = dcopy(dy, n * es);
            void *iy0 = dcopy(y, n * es), *iy1 = dcopy(y, n * es);
            bn_cpu_backward(d, dt, fuse, x, iy0, ip0, gamma, sm, si, fix, false, ip0, iy0, dg0, db0,
                            false, accp);
            bn_gpu_backward(d, dt, fuse, x, iy1, ip1, gamma, sm, si, fix, false, ip1, iy1, dg1, db1,
                            false, accp, ws);
            same(ip1, ds0, n, dt, true, "in place: the relu's gradient over dy");
            same(ip0, ds0, n, dt, true, "in place on the CPU: the relu's gradient");
            same(iy1, dx0, n, dt, true, "in place: dx over y");
            same(iy0, dx0, n, dt, true, "in place on the CPU: dx over y");
            dfree(ip0), dfree(ip1), dfree(iy0), dfree(iy1);
        }
        dfree(dg0), dfree(dg1), dfree(db0), dfree(db1), dfree(dx0), dfree(dx1);
        dfree(ds0), dfree(ds1);
        ++*cases;
    }
}

/* BatchNorm (batchnorm.cuh) against rt_batchnorm_* in the
 * GPU's order (RtBnDims.order = RT_BN_ORDER_TILED), bit for bit: training
 * and inference forward (y also over the shortcut, in place), the backward;
 * misaligned: x and everything after one element past a 16-byte boundary
 * (the kernels' scalar path). */
static void bn_case(int64_t outer, int64_t c, int64_t inner, RtDType dt, int fuse, bool misaligned,
                    int *cases)
{
    RtBnDims d = {.outer = outer, .c = c, .inner = inner, .order = RT_BN_ORDER_TILED};
    size_t n = (size_t)(outer * c * inner), es = rt_dtype_size(dt), C = (size_t)c, off = misaligned;
    char *xb = widebuf(n + off, dt), *dyb = widebuf(n + off, dt), *scb = randbuf(n + off, dt, true);
    void *x = xb + off * es, *dy = dyb + off * es, *sc = scb + off * es;
    float *gamma = fbuf(C, 0.5f, 2.0f), *beta = fbuf(C, -1, 1), *mm = fbuf(C, -1, 1),
          *mv = fbuf(C, 0.1f, 3.0f);
    void *ws = dmem(ampc_batchnorm_ws_bytes((size_t)outer, (int)c, (size_t)inner));
    char *yb0 = dmem((n + off) * es), *yb1 = dmem((n + off) * es);
    void *y0 = yb0 + off * es, *y1 = yb1 + off * es;
    float *sm0 = dmem(C * 4), *si0 = dmem(C * 4), *sm1 = dmem(C * 4), *si1 = dmem(C * 4);
    for (int fix = 0; fix < 2; fix++) {
        if (fix && fuse != BN_PLAIN)
            continue; /* fix_gamma is the same code whatever the fusion */
        for (int infer = 1; infer >= 0; infer--) {
            bn_cpu_forward(&d, dt, fuse, infer, x, sc, gamma, beta, mm, mv, fix, y0, sm0, si0);
            bn_gpu_forward(&d, dt, fuse, infer, x, sc, gamma, beta, mm, mv, fix, y1, sm1, si1, ws);
            same_f(sm1, sm0, C, infer ? "inference save_mean" : "save_mean");
            same_f(si1, si0, C, infer ? "inference save_invstd" : "save_invstd");
            same(y1, y0, n, dt, true, infer ? "batchnorm forward inference" : "batchnorm forward");
        }
        if (fuse == BN_ADD) { /* y over the shortcut, in place */
            void *s1 = dcopy(sc, n * es);
            bn_gpu_forward(&d, dt, fuse, false, x, s1, gamma, beta, mm, mv, fix, s1, sm1, si1, ws);
            same(s1, y0, n, dt, true, "batchnorm + add forward in place over the shortcut");
            dfree(s1);
        }
        bn_backward_cases(&d, dt, fuse, x, y0, dy, gamma, sm0, si0, fix, ws, cases);
    }
    dfree(xb), dfree(dyb), dfree(scb), dfree(gamma), dfree(beta), dfree(mm), dfree(mv);
    dfree(yb0), dfree(yb1), dfree(ws), dfree(sm0), dfree(si0), dfree(sm1), dfree(si1);
}

static void test_batchnorm(void **state)
{
    (void)state;
    int cases = 0, k = 0;
    /* [outer, c, inner]: NCHW with tiles and a short one; tiny (rows of a tile
     * empty); NHWC's view with 3, 4 and 5 channels (not a multiple of 8:
     * per element); NCHW with inner a multiple of 8; NHWC with 64 and 24
     * channels (16-byte rows), outer not a multiple of the tile */
    static const int64_t shapes[][3] = {{3, 5, 1037}, {2, 3, 7},   {700, 4, 1},  {300, 3, 1},
                                        {97, 5, 1},   {4, 64, 24}, {517, 64, 1}, {300, 24, 1}};
    enum { NSHAPES = sizeof shapes / sizeof shapes[0] };
    EMU_PASSES
    {
        wide_pattern = emu_pass_ % 2;
        for (int t = 0; t < 3; t++)
            for (int s = 0; s < NSHAPES; s++, k++)
                bn_case(shapes[s][0], shapes[s][1], shapes[s][2], dts[t], k % BN_FUSIONS,
                        s == NSHAPES - 1 && t == 1, &cases);
    }
    assert_true(cases >= 3 * 3 * NSHAPES * 2);
}

/* More tiles than the second level's 32 lanes (36 and 33: the lanes wrap),
 * fp16 and bf16, a fusion each, per element (3 channels) and 16 bytes at a
 * time (8), one size per schedule (they take the longest). */
static void test_batchnorm_many_tiles(void **state)
{
    (void)state;
    int cases = 0;
    EMU_PASSES
    {
        wide_pattern = emu_pass_ % 2;
        if (emu_pass_ == 1)
            bn_case(9001, 3, 1, RT_BF16, BN_RELU, false, &cases);
        else
            bn_case(8250, 8, 1, RT_F16, emu_pass_ ? BN_PLAIN : BN_ADD, false, &cases);
    }
    assert_true(cases >= 4);
}

/* BatchNorm's training forward from statistics given (the conv_bn_stats
 * fusion's, batchnorm.cuh's ampc_cu_batchnorm_forward_train_sums) against
 * rt_batchnorm_forward_train_sums, bit for bit, from rt_batchnorm_stats's
 * sums, plain, with the relu and with the add (in place over the shortcut
 * too); and near the shifted statistics of rt_batchnorm_forward_train on
 * data whose mean is small against its spread (the unshifted sums cancel
 * otherwise: docs/backend-cuda.md's tolerance) */
static void bn_sums_case(int64_t outer, int64_t c, int64_t inner, RtDType dt, int fuse,
                         bool misaligned)
{
    RtBnDims d = {.outer = outer, .c = c, .inner = inner};
    size_t n = (size_t)(outer * c * inner), es = rt_dtype_size(dt), C = (size_t)c, off = misaligned;
    char *xb = randbuf(n + off, dt, false), *scb = randbuf(n + off, dt, true);
    void *x = xb + off * es, *sc = scb + off * es, *s = fuse == BN_ADD ? sc : NULL;
    float *gamma = fbuf(C, 0.5f, 2.0f), *beta = fbuf(C, -1, 1), *stats = dmem(2 * C * 4);
    void *ws = dmem(ampc_batchnorm_ws_bytes((size_t)outer, (int)c, (size_t)inner));
    void *y0 = dmem(n * es), *y1 = dmem(n * es);
    float *sm0 = dmem(C * 4), *si0 = dmem(C * 4), *sm1 = dmem(C * 4), *si1 = dmem(C * 4);
    float *sm2 = dmem(C * 4), *si2 = dmem(C * 4);
    rt_batchnorm_stats(&d, dt, x, stats);
    for (int fix = 0; fix < 2; fix++) {
        rt_batchnorm_forward_train_sums(&d, dt, x, s, fuse == BN_RELU, stats, gamma, beta, 1e-5f,
                                        fix, y0, sm0, si0);
        assert_int_equal(ampc_cu_batchnorm_forward_train_sums(
                             NULL, (size_t)outer, (int)c, (size_t)inner, (int)dt, x, s,
                             fuse != BN_PLAIN, stats, gamma, beta, 1e-5f, fix, y1, sm1, si1, ws),
                         0);
        same_f(sm1, sm0, C, "save_mean from sums");
        same_f(si1, si0, C, "save_invstd from sums");
        same(y1, y0, n, dt, true, "batchnorm forward from sums");
        bn_cpu_forward(&d, dt, fuse, false, x, sc, gamma, beta, NULL, NULL, fix, y1, sm2, si2);
        for (size_t i = 0; i < C; i++) /* the shifted sums' statistics, to rounding */
            if (fabsf(sm2[i] - sm0[i]) > 1e-5f || fabsf(si2[i] / si0[i] - 1.0f) > 1e-5f)
                fail_msg("channel %zu: mean %.9g vs %.9g, invstd %.9g vs %.9g from sums", i, sm2[i],
                         sm0[i], si2[i], si0[i]);
    }
    if (fuse == BN_ADD) { /* y over the shortcut, in place */
        void *s1 = dcopy(sc, n * es);
        assert_int_equal(ampc_cu_batchnorm_forward_train_sums(
                             NULL, (size_t)outer, (int)c, (size_t)inner, (int)dt, x, s1, 1, stats,
                             gamma, beta, 1e-5f, 1, s1, sm1, si1, ws),
                         0);
        same(s1, y0, n, dt, true, "batchnorm + add from sums in place over the shortcut");
        dfree(s1);
    }
    dfree(xb), dfree(scb), dfree(gamma), dfree(beta), dfree(stats), dfree(ws), dfree(y0);
    dfree(y1), dfree(sm0), dfree(si0), dfree(sm1), dfree(si1), dfree(sm2), dfree(si2);
}

static void test_batchnorm_from_sums(void **state)
{
    (void)state;
    static const int64_t shapes[][3] = {{3, 5, 103}, {200, 3, 1}, {97, 4, 1}, {60, 24, 1}};
    int k = 0;
    EMU_PASSES
    {
        for (int t = 0; t < 3; t++)
            for (int s = 0; s < 4; s++, k++)
                bn_sums_case(shapes[s][0], shapes[s][1], shapes[s][2], dts[t], k % BN_FUSIONS,
                             s == 3 && t == 1);
    }
    assert_true(k >= 12);
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
        cmocka_unit_test(test_bias_grad_block),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_batchnorm_many_tiles),
        cmocka_unit_test(test_batchnorm_from_sums),
    };
    if (getenv("EMU_TEST_FILTER")) /* one test, by name pattern */
        cmocka_set_test_filter(getenv("EMU_TEST_FILTER"));
    return cmocka_run_group_tests(tests, emu_test_setup, emu_test_teardown);
}
