/*
 * test_cuda_ops_emu.c - the CUDA twins of rt.h's other kernels
 * (runtime/cuda/'s family headers: dtype.cuh, elemwise.cuh, act.cuh,
 * reduce.cuh, loss.cuh, layout.cuh, math.cuh, batchnorm.cuh's moving update
 * and fused BatchNorm + relu)
 * under the emulator (libampcemu.a; runtime/emu/), through their rt_cuda_*
 * entry points, against the CPU twins (runtime/cpu/) bit for bit:
 *
 *   Activation (all five, forward and backward, overwrite and accumulate),
 *   LeakyReLU (leaky, elu, selu, prelu with dgamma), Dropout (the same mask,
 *   forward and backward), exp/log/sqrt and the other unary math of
 *   kernels/unary.h (sin ... rint), clip, casts and copies, the binary
 *   and scalar ops, Concat and slice, the layout conversion (against the
 *   permutation written out), broadcasting forward and backward (reduced
 *   sides, rows longer than a 512-element chunk, add/sub/mul), sum and mean,
 *   softmax and log_softmax (rows and strided lanes), SoftmaxOutput forward
 *   (16-bit logits) and backward (label smoothing, ignore_label, the three
 *   normalizations, a bound device loss scale, a 16-bit dx, accumulate),
 *   the moving-statistics update (a bound skip flag), BatchNorm + relu
 *   forward and backward.
 *
 * Data: odd sizes past the grid-stride edge (the grids are capped at 3
 * blocks), fp32/fp16/bf16, inf, NaN, -0 and subnormals, in device buffers
 * of exactly their size.  Every case runs under two scheduler seeds and the
 * reversed order, with every access checked.  NaN compares as NaN.
 * The libm kernels (math.cuh) are bit for bit here because the
 * emulation calls the same glibc as the CPU; on a GPU they are compared
 * with a tolerance (tests/runtime/cuda_kernels_gpu.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/rt_cuda.h"
#include "emu_test.h"
#include "kernels/half.h"
#include "rt.h"

/* the context every rt_cuda_* call takes: the emulator's default stream,
 * no library (the kernels here need none) */
static RtCudaCtx cx;

/* every buffer of this test is device memory (the CPU twins use it too) */
static void *dmem(size_t bytes) { return dev(bytes, "buffer"); }
static void dfree(void *p) { ampc_emu_free(p); }

/* ---- data ---------------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 32);
}
static float unit(void) { return (float)(next() >> 8) / 16777216.0f; }

/* mostly ordinary values in [-8, 8); with specials also inf, NaN (with a
 * payload), -0, fp32 and fp16 subnormals and values past fp16's range */
static float value(bool specials)
{
    unsigned r = next() % 100;
    float sign = (next() & 1) ? -1.0f : 1.0f;
    if (specials) {
        if (r < 3)
            return sign * INFINITY;
        if (r < 5)
            return ampc_bits_f32(0x7fc01234u | (next() & 0x80000000u));
        if (r < 7)
            return -0.0f;
        if (r < 9)
            return ampc_bits_f32(next() & 0x807fffffu);
        if (r < 11)
            return sign * unit() * 6.0e-5f;
        if (r < 13)
            return sign * (65504.0f + unit() * 100.0f);
    }
    return (unit() * 2.0f - 1.0f) * 8.0f;
}

static void *buf(size_t n, RtDType dt, bool specials)
{
    float *f = malloc((n + 1) * sizeof *f);
    void *out = dmem(n * rt_dtype_size(dt));
    for (size_t i = 0; i < n; i++)
        f[i] = value(specials);
    rt_from_f32(out, f, n, dt);
    free(f);
    return out;
}

/* values in [lo, hi) */
static void *range_buf(size_t n, RtDType dt, float lo, float hi)
{
    float *f = malloc((n + 1) * sizeof *f);
    void *out = dmem(n * rt_dtype_size(dt));
    for (size_t i = 0; i < n; i++)
        f[i] = lo + unit() * (hi - lo);
    rt_from_f32(out, f, n, dt);
    free(f);
    return out;
}

/* Large values and their exact negatives in every row of `row` elements
 * (row >= 700): the double sums then round at their scale, and the
 * rounding survives the cancellation, so the order of summation (the CPU's
 * chunks of 512) shows in the float result.  fp16 cannot hold them. */
static void plant(void *p, size_t n, RtDType dt, size_t row)
{
    static const size_t at[4] = {0, 300, 450, 650};
    if (dt == RT_F16 || row < 700)
        return;
    for (size_t r = 0; r + row <= n; r += row)
        for (int k = 0; k < 4; k++) {
            float v = k % 2 ? -0x1p50f : 0x1p50f;
            rt_from_f32((char *)p + (r + at[k]) * rt_dtype_size(dt), &v, 1, dt);
        }
}

static void *dup(const void *p, size_t n, RtDType dt)
{
    void *q = dmem(n * rt_dtype_size(dt));
    memcpy(q, p, n * rt_dtype_size(dt));
    return q;
}

static const RtDType dts[] = {RT_F32, RT_F16, RT_BF16};

static int compared; /* tensors compared, so a test cannot pass by comparing nothing */

/* a == b bit for bit, NaN as NaN */
static void same(const void *a, const void *b, size_t n, RtDType dt, const char *what)
{
    size_t es = rt_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        if (!memcmp((const char *)a + i * es, (const char *)b + i * es, es))
            continue;
        float fa, fb;
        rt_to_f32(&fa, (const char *)a + i * es, 1, dt);
        rt_to_f32(&fb, (const char *)b + i * es, 1, dt);
        if (fa != fa && fb != fb)
            continue;
        fail_msg("%s (%s, schedule %s): element %zu of %zu: %a vs %a (CPU)", what,
                 rt_dtype_name(dt), ampc_emu_schedule_name(), i, n, fa, fb);
    }
    compared++;
}

#define BOTH_ORDERS EMU_PASSES /* two seeds and reversed */

/* ---- activations, LeakyReLU, Dropout, unary, clip ------------------------------------ */

static void test_activation(void **st)
{
    (void)st;
    size_t sizes[] = {1, 5, 1031};
    BOTH_ORDERS for (int t = 0; t < 3; t++) for (int s = 0; s < 3; s++) for (int a = 0; a < 5; a++)
    {
        RtDType dt = dts[t];
        size_t n = sizes[s];
        void *x = buf(n, dt, true), *dy = buf(n, dt, true), *acc0 = buf(n, dt, true);
        void *yg = buf(n, dt, false), *yc = buf(n, dt, false);
        rt_cuda_activation_forward(&cx, (RtAct)a, n, dt, x, yg);
        rt_activation_forward((RtAct)a, n, dt, x, yc);
        same(yg, yc, n, dt, "activation forward");
        for (int acc = 0; acc < 2; acc++) {
            void *dg = dup(acc0, n, dt), *dc = dup(acc0, n, dt);
            rt_cuda_activation_backward(&cx, (RtAct)a, n, dt, x, yc, dy, dg, acc);
            rt_activation_backward((RtAct)a, n, dt, x, yc, dy, dc, acc);
            same(dg, dc, n, dt, "activation backward");
            dfree(dg), dfree(dc);
        }
        /* dx over dy */
        void *dg = dup(dy, n, dt), *dc = buf(n, dt, false);
        rt_cuda_activation_backward(&cx, (RtAct)a, n, dt, x, yc, dg, dg, false);
        rt_activation_backward((RtAct)a, n, dt, x, yc, dy, dc, false);
        same(dg, dc, n, dt, "activation backward in place");
        dfree(x), dfree(dy), dfree(acc0), dfree(yg), dfree(yc), dfree(dg), dfree(dc);
    }
    assert_int_equal(compared, 3 * 3 * 3 * 5 * 4);
}

static void test_leaky_relu(void **st)
{
    (void)st;
    int64_t shapes[][3] = {{2, 3, 5}, {3, 4, 300}, {1, 1, 1}};
    compared = 0;
    BOTH_ORDERS for (int t = 0; t < 3; t++) for (int s = 0; s < 3; s++) for (int k = 0; k < 4; k++)
    {
        RtDType dt = dts[t];
        int64_t o = shapes[s][0], c = shapes[s][1], in = shapes[s][2];
        size_t n = (size_t)(o * c * in);
        void *x = buf(n, dt, true), *dy = buf(n, dt, true), *gamma = range_buf((size_t)c, dt, 0, 1);
        void *yg = buf(n, dt, false), *yc = buf(n, dt, false);
        rt_cuda_leaky_relu_forward(&cx, (RtLeaky)k, o, c, in, dt, x, gamma, 0.25f, yg);
        rt_leaky_relu_forward((RtLeaky)k, o, c, in, dt, x, gamma, 0.25f, yc);
        same(yg, yc, n, dt, "leaky_relu forward");
        for (int acc = 0; acc < 2; acc++) {
            void *dg = buf(n, dt, false), *dc = dup(dg, n, dt);
            void *gg = range_buf((size_t)c, dt, -1, 1), *gc = dup(gg, (size_t)c, dt);
            rt_cuda_leaky_relu_backward(&cx, (RtLeaky)k, o, c, in, dt, x, gamma, 0.25f, dy, dg, gg,
                                        acc, !acc);
            rt_leaky_relu_backward((RtLeaky)k, o, c, in, dt, x, gamma, 0.25f, dy, dc, gc, acc,
                                   !acc);
            same(dg, dc, n, dt, "leaky_relu backward dx");
            same(gg, gc, (size_t)c, dt, "leaky_relu backward dgamma");
            dfree(dg), dfree(dc), dfree(gg), dfree(gc);
        }
        dfree(x), dfree(dy), dfree(gamma), dfree(yg), dfree(yc);
    }
    assert_int_equal(compared, 3 * 3 * 3 * 4 * 5);
}

static void test_dropout(void **st)
{
    (void)st;
    size_t sizes[] = {1, 6, 2051};
    compared = 0;
    BOTH_ORDERS for (int t = 0; t < 3; t++) for (int s = 0; s < 3; s++)
    {
        RtDType dt = dts[t];
        size_t n = sizes[s];
        uint64_t seed = 0x123456789abcull + (uint64_t)s, step = (uint64_t)7 << 33 | 5;
        void *x = buf(n, dt, true), *yg = buf(n, dt, false), *yc = buf(n, dt, false);
        /* the device reads the step's number from its memory (RtStepState.step) */
        uint64_t *sd = dmem(2 * sizeof *sd);
        sd[0] = step;
        sd[1] = step + 1;
        rt_cuda_dropout_forward(&cx, n, dt, x, 0.3f, seed, sd, 0xdeadbeefu, yg);
        rt_dropout_forward(n, dt, x, 0.3f, seed, step, 0xdeadbeefu, yc);
        same(yg, yc, n, dt, "dropout forward");
        for (int acc = 0; acc < 2; acc++) {
            void *dg = buf(n, dt, true), *dc = dup(dg, n, dt);
            rt_cuda_dropout_backward(&cx, n, dt, x, 0.5f, seed, sd + 1, 3, dg, acc);
            rt_dropout_backward(n, dt, x, 0.5f, seed, step + 1, 3, dc, acc);
            same(dg, dc, n, dt, "dropout backward");
            dfree(dg), dfree(dc);
        }
        dfree(x), dfree(yg), dfree(yc), dfree(sd);
    }
    assert_int_equal(compared, 3 * 3 * 3 * 3);
}

static void test_unary_clip(void **st)
{
    (void)st;
    size_t n = 1031;
    compared = 0;
    BOTH_ORDERS for (int t = 0; t < 3; t++)
    {
        RtDType dt = dts[t];
        void *x = buf(n, dt, true), *dy = buf(n, dt, true);
        for (int op = 0; op < RT_UNARY_COUNT; op++) {
            void *yg = buf(n, dt, false), *yc = buf(n, dt, false);
            rt_cuda_unary_forward(&cx, (RtUnaryOp)op, n, dt, x, yg);
            rt_unary_forward((RtUnaryOp)op, n, dt, x, yc);
            same(yg, yc, n, dt, "unary forward");
            for (int acc = 0; acc < 2; acc++) {
                void *dg = buf(n, dt, false), *dc = dup(dg, n, dt);
                rt_cuda_unary_backward(&cx, (RtUnaryOp)op, n, dt, x, yc, dy, dg, acc);
                rt_unary_backward((RtUnaryOp)op, n, dt, x, yc, dy, dc, acc);
                same(dg, dc, n, dt, "unary backward");
                dfree(dg), dfree(dc);
            }
            dfree(yg), dfree(yc);
        }
        void *yg = buf(n, dt, false), *yc = buf(n, dt, false);
        rt_cuda_clip_forward(&cx, n, dt, x, -2.5f, 3.0f, yg);
        rt_clip_forward(n, dt, x, -2.5f, 3.0f, yc);
        same(yg, yc, n, dt, "clip forward");
        for (int acc = 0; acc < 2; acc++) {
            void *dg = buf(n, dt, false), *dc = dup(dg, n, dt);
            rt_cuda_clip_backward(&cx, n, dt, x, -2.5f, 3.0f, dy, dg, acc);
            rt_clip_backward(n, dt, x, -2.5f, 3.0f, dy, dc, acc);
            same(dg, dc, n, dt, "clip backward");
            dfree(dg), dfree(dc);
        }
        dfree(x), dfree(dy), dfree(yg), dfree(yc);
    }
    assert_int_equal(compared, 3 * 3 * (RT_UNARY_COUNT * 3 + 3));
}

/* ---- the wrappers of kernels.cuh's launchers ------------------------------------------ */

static void test_wrappers(void **st)
{
    (void)st;
    size_t n = 777;
    compared = 0;
    BOTH_ORDERS for (int t = 0; t < 3; t++)
    {
        RtDType dt = dts[t];
        void *a = buf(n, dt, true), *b = buf(n, dt, true), *yg = buf(n, dt, false);
        void *yc = buf(n, dt, false);
        for (int op = 0; op < 3; op++) {
            rt_cuda_elemwise_forward(&cx, (RtBinOp)op, n, dt, a, b, yg);
            rt_elemwise_forward((RtBinOp)op, n, dt, a, b, yc);
            same(yg, yc, n, dt, "elemwise forward");
        }
        rt_cuda_add_relu_forward(&cx, n, dt, a, b, yg);
        rt_add_relu_forward(n, dt, a, b, yc);
        same(yg, yc, n, dt, "add_relu");
        for (int op = 0; op < 6; op++) {
            rt_cuda_scalar_forward(&cx, (RtScalarOp)op, n, dt, a, 1.5f, yg);
            rt_scalar_forward((RtScalarOp)op, n, dt, a, 1.5f, yc);
            same(yg, yc, n, dt, "scalar forward");
            memcpy(yg, b, n * rt_dtype_size(dt)), memcpy(yc, b, n * rt_dtype_size(dt));
            rt_cuda_scalar_backward(&cx, (RtScalarOp)op, n, dt, a, 1.5f, b, yg, true);
            rt_scalar_backward((RtScalarOp)op, n, dt, a, 1.5f, b, yc, true);
            same(yg, yc, n, dt, "scalar backward");
        }
        rt_cuda_reshape_forward(&cx, n, dt, a, yg);
        rt_reshape_forward(n, dt, a, yc);
        same(yg, yc, n, dt, "reshape forward");
        rt_cuda_reshape_backward(&cx, n, dt, b, yg, true);
        rt_reshape_backward(n, dt, b, yc, true);
        same(yg, yc, n, dt, "reshape backward");
        rt_cuda_copy(&cx, n, dt, b, yg);
        rt_copy(n, dt, b, yc);
        same(yg, yc, n, dt, "copy");
        for (int u = 0; u < 3; u++) {
            void *cg = buf(n, dts[u], false), *cc = dup(cg, n, dts[u]);
            rt_cuda_cast_forward(&cx, n, dt, a, dts[u], cg);
            rt_cast_forward(n, dt, a, dts[u], cc);
            same(cg, cc, n, dts[u], "cast forward");
            rt_cuda_cast_backward(&cx, n, dt, b, dts[u], cg, true);
            rt_cast_backward(n, dt, b, dts[u], cc, true);
            same(cg, cc, n, dts[u], "cast backward");
            dfree(cg), dfree(cc);
        }
        dfree(a), dfree(b), dfree(yg), dfree(yc);
    }
    assert_int_equal(compared, 3 * 3 * (3 + 1 + 12 + 3 + 6));
}

/* ---- Concat, slice, the layout conversion ----------------------------------------------- */

static void test_concat_layout(void **st)
{
    (void)st;
    compared = 0;
    BOTH_ORDERS for (int t = 0; t < 3; t++)
    {
        RtDType dt = dts[t];
        size_t es = rt_dtype_size(dt);
        int64_t len[3] = {2, 5, 1}, outer = 3, inner = 7, tot = 8;
        size_t n = (size_t)(outer * tot * inner);
        void *x[3], *dg[3], *dc[3];
        for (int i = 0; i < 3; i++)
            x[i] = buf((size_t)(outer * len[i] * inner), dt, true);
        void *yg = buf(n, dt, false), *yc = buf(n, dt, false);
        rt_cuda_concat_forward(&cx, 3, (const void *const *)x, len, outer, inner, dt, yg);
        rt_concat_forward(3, (const void *const *)x, len, outer, inner, dt, yc);
        same(yg, yc, n, dt, "concat forward");
        bool acc[3] = {false, true, false};
        for (int i = 0; i < 3; i++) {
            size_t m = (size_t)(outer * len[i] * inner);
            dg[i] = buf(m, dt, true), dc[i] = dup(dg[i], m, dt);
        }
        void *skip_g[3] = {dg[0], NULL, dg[2]}, *skip_c[3] = {dc[0], NULL, dc[2]};
        rt_cuda_concat_backward(&cx, 3, yc, len, outer, inner, dt, skip_g, acc);
        rt_concat_backward(3, yc, len, outer, inner, dt, skip_c, acc);
        rt_cuda_concat_backward(&cx, 3, yc, len, outer, inner, dt, dg, acc);
        rt_concat_backward(3, yc, len, outer, inner, dt, dc, acc);
        for (int i = 0; i < 3; i++)
            same(dg[i], dc[i], (size_t)(outer * len[i] * inner), dt, "concat backward");
        /* the layout conversion against the permutation written out */
        int64_t N = 3, C = 5, HW = 7;
        void *src = buf(n, dt, true), *nhwc = buf(n, dt, false), *back = buf(n, dt, false);
        void *want = dmem(n * es);
        for (int64_t i = 0; i < N; i++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t p = 0; p < HW; p++)
                    memcpy((char *)want + (size_t)((i * HW + p) * C + c) * es,
                           (char *)src + (size_t)((i * C + c) * HW + p) * es, es);
        size_t nl = (size_t)(N * C * HW);
        rt_cuda_layout_convert(&cx, N, C, HW, dt, src, nhwc, RT_LAYOUT_NHWC);
        assert_memory_equal(nhwc, want, nl * es); /* bit copies: NaN payloads too */
        rt_cuda_layout_convert(&cx, N, C, HW, dt, nhwc, back, RT_LAYOUT_NCHW);
        assert_memory_equal(back, src, nl * es);
        compared += 2;
        for (int i = 0; i < 3; i++)
            dfree(x[i]), dfree(dg[i]), dfree(dc[i]);
        dfree(yg), dfree(yc), dfree(src), dfree(nhwc), dfree(back), dfree(want);
    }
    assert_int_equal(compared, 3 * 3 * (1 + 3 + 2));
}

/* ---- broadcasting, sum, mean ------------------------------------------------------------ */

/* the dims of a op b, and the elements of out, a and b */
static RtBcastDims bcast_dims(int ra, const int64_t *sa, int rb, const int64_t *sb, size_t *no,
                              size_t *na, size_t *nb)
{
    RtBcastDims d;
    assert_true(rt_broadcast_dims_init(&d, ra, sa, rb, sb));
    *no = *na = *nb = 1;
    for (int i = 0; i < d.rank; i++)
        *no *= (size_t)d.out[i], *na *= (size_t)d.a[i], *nb *= (size_t)d.b[i];
    return d;
}

static void bcast_case(int ra, const int64_t *sa, int rb, const int64_t *sb, RtDType dt)
{
    size_t no, na, nb;
    RtBcastDims d = bcast_dims(ra, sa, rb, sb, &no, &na, &nb);
    void *a = buf(na, dt, true), *b = buf(nb, dt, true), *dy = buf(no, dt, false);
    void *yg = buf(no, dt, false), *yc = buf(no, dt, false);
    plant(dy, no, dt, (size_t)d.out[d.rank - 1]);
    void *ws = dmem(rt_broadcast_workspace_bytes(&d, dt, RT_PASS_BACKWARD) + 64);
    assert_int_equal(rt_cuda_broadcast_workspace_bytes(&cx, &d, dt, RT_PASS_BACKWARD), 0);
    for (int op = 0; op < 3; op++) {
        rt_cuda_broadcast_forward(&cx, (RtBinOp)op, &d, dt, a, b, yg);
        rt_broadcast_forward((RtBinOp)op, &d, dt, a, b, yc);
        same(yg, yc, no, dt, "broadcast forward");
        for (int acc = 0; acc < 2; acc++) {
            void *dag = buf(na, dt, false), *dac = dup(dag, na, dt);
            void *dbg = buf(nb, dt, false), *dbc = dup(dbg, nb, dt);
            rt_cuda_broadcast_backward(&cx, (RtBinOp)op, &d, dt, dy, a, b, dag, dbg, acc, !acc,
                                       NULL);
            rt_broadcast_backward((RtBinOp)op, &d, dt, dy, a, b, dac, dbc, acc, !acc, ws);
            same(dag, dac, na, dt, "broadcast backward da");
            same(dbg, dbc, nb, dt, "broadcast backward db");
            dfree(dag), dfree(dac), dfree(dbg), dfree(dbc);
        }
    }
    dfree(a), dfree(b), dfree(dy), dfree(yg), dfree(yc), dfree(ws);
}

static void test_broadcast(void **st)
{
    (void)st;
    const int64_t a1[] = {2, 3, 4}, b1[] = {1, 3, 1};
    const int64_t a2[] = {5, 1}, b2[] = {1, 7};
    const int64_t a3[] = {3, 1100}, b3[] = {1100};
    const int64_t a4[] = {2, 1, 700}, b4[] = {2, 5, 1};
    const int64_t a5[] = {4}, b5[] = {1};
    const int64_t a6[] = {2, 3, 1, 4}, b6[] = {3, 5, 1};
    const int64_t a7[] = {3, 1}, b7[] = {3, 1100};
    compared = 0;
    BOTH_ORDERS for (int t = 0; t < 3; t++)
    {
        bcast_case(3, a1, 3, b1, dts[t]);
        bcast_case(2, a2, 2, b2, dts[t]);
        bcast_case(2, a3, 1, b3, dts[t]);
        bcast_case(3, a4, 3, b4, dts[t]);
        bcast_case(1, a5, 1, b5, dts[t]);
        bcast_case(4, a6, 3, b6, dts[t]);
        bcast_case(2, a7, 2, b7, dts[t]);
    }
    assert_int_equal(compared, 3 * 3 * 7 * 3 * 5);
}

static void reduce_case(int rank, const int64_t *in, const bool *red, RtDType dt)
{
    RtReduceDims d;
    memset(&d, 0, sizeof d);
    d.rank = rank;
    size_t nx = 1, ny = 1;
    for (int i = 0; i < rank; i++) {
        d.in[i] = in[i], d.reduce[i] = red[i];
        nx *= (size_t)in[i], ny *= red[i] ? 1 : (size_t)in[i];
    }
    void *x = buf(nx, dt, in[rank - 1] < 700), *dy = buf(ny, dt, true);
    plant(x, nx, dt, (size_t)in[rank - 1]);
    void *ws = dmem(rt_reduce_workspace_bytes(&d, dt, RT_PASS_FORWARD) + 64);
    for (int mean = 0; mean < 2; mean++) {
        void *yg = buf(ny, dt, false), *yc = buf(ny, dt, false);
        (mean ? rt_cuda_mean_forward : rt_cuda_sum_forward)(&cx, &d, dt, x, yg, NULL);
        (mean ? rt_mean_forward : rt_sum_forward)(&d, dt, x, yc, ws);
        same(yg, yc, ny, dt, mean ? "mean forward" : "sum forward");
        void *dg = buf(nx, dt, true), *dc = dup(dg, nx, dt);
        (mean ? rt_cuda_mean_backward : rt_cuda_sum_backward)(&cx, &d, dt, dy, dg, true);
        (mean ? rt_mean_backward : rt_sum_backward)(&d, dt, dy, dc, true);
        same(dg, dc, nx, dt, mean ? "mean backward" : "sum backward");
        dfree(yg), dfree(yc), dfree(dg), dfree(dc);
    }
    dfree(x), dfree(dy), dfree(ws);
}

static void test_sum_mean(void **st)
{
    (void)st;
    const int64_t s1[] = {3, 4, 5}, s2[] = {2, 1100}, s3[] = {7};
    const bool r1a[] = {false, true, false}, r1b[] = {true, false, true}, r2[] = {false, true},
               r2b[] = {true, false}, r3[] = {true};
    compared = 0;
    BOTH_ORDERS for (int t = 0; t < 3; t++)
    {
        reduce_case(3, s1, r1a, dts[t]);
        reduce_case(3, s1, r1b, dts[t]);
        reduce_case(2, s2, r2, dts[t]);
        reduce_case(2, s2, r2b, dts[t]);
        reduce_case(1, s3, r3, dts[t]);
    }
    assert_int_equal(compared, 3 * 3 * 5 * 4);
}

/* ---- block reductions: elemwise.cuh's order, in C ------------------------------------- */

/* ampc_cu_block_reduce's tree over 256 threads' values: each warp's lanes
 * pairwise (lane l = op(lane l, lane l + h), h = 16..1), then the 8 warps'
 * the same; op a + b, or with max the larger (b > a ? b : a) */
static double tree256(double *v, bool max)
{
    double w8[8];
    for (int w = 0; w < 8; w++) {
        double *l = v + 32 * w;
        for (int h = 16; h >= 1; h /= 2)
            for (int i = 0; i < h; i++)
                l[i] = max ? (l[i + h] > l[i] ? l[i + h] : l[i]) : l[i] + l[i + h];
        w8[w] = l[0];
    }
    for (int h = 4; h >= 1; h /= 2)
        for (int i = 0; i < h; i++)
            w8[i] = max ? (w8[i + h] > w8[i] ? w8[i + h] : w8[i]) : w8[i] + w8[i + h];
    return w8[0];
}

static float ld(const void *p, size_t i, RtDType dt)
{
    float v;
    rt_to_f32(&v, (const char *)p + i * rt_dtype_size(dt), 1, dt);
    return v;
}

/* ampc_k_bcast_reduce_block's result for element idx of side (a: 0, b: 1):
 * its items (each term where the side runs along the last axis, else each
 * row's 512-wide chunks summed first from 0) in out's order, dealt to 256
 * threads in turn, each thread's sum in order, then tree256; times scale,
 * rounded once, acc adding what dst holds */
static void block_twin(const RtBcastDims *d, int side, RtDType dt, const void *dy,
                       const void *other, float sign, double scale, void *dst, size_t idx, bool acc)
{
    const int64_t *xs = side ? d->b : d->a, *os = side ? d->a : d->b;
    int r = d->rank;
    size_t no = 1, len = (size_t)d->out[r - 1], item = 0, key = SIZE_MAX;
    for (int i = 0; i < r; i++)
        no *= (size_t)d->out[i];
    double t[256] = {0}, cur = 0.0;
    bool open = false;
    for (size_t e = 0; e < no; e++) {
        size_t rem = e, xo = 0, oo = 0, xst = 1, ost = 1;
        for (int i = r - 1; i >= 0; i--) {
            size_t k = rem % (size_t)d->out[i];
            rem /= (size_t)d->out[i];
            xo += (xs[i] == 1 ? 0 : k) * xst, oo += (os[i] == 1 ? 0 : k) * ost;
            xst *= (size_t)xs[i], ost *= (size_t)os[i];
        }
        if (xo != idx)
            continue;
        float g = ld(dy, e, dt), term = other ? g * ld(other, oo, dt) : sign * g;
        size_t k = xs[r - 1] != 1 || len == 1 ? e : e / len * len + e % len / 512 * 512;
        if (open && k != key)
            t[item++ % 256] += cur, cur = 0.0;
        key = k, open = true;
        cur += (double)term;
    }
    if (open)
        t[item % 256] += cur;
    float v = (float)(tree256(t, false) * scale);
    if (acc)
        v = ld(dst, idx, dt) + v;
    rt_from_f32((char *)dst + idx * rt_dtype_size(dt), &v, 1, dt);
}

/* every element of a side whose elements take the block path, against the
 * twin, bit for bit (planted data: another order of the sums shows) */
static void block_case(int ra, const int64_t *sa, int rb, const int64_t *sb, RtDType dt)
{
    size_t no, na, nb;
    RtBcastDims d = bcast_dims(ra, sa, rb, sb, &no, &na, &nb);
    void *a = buf(na, dt, false), *b = buf(nb, dt, false), *dy = buf(no, dt, false);
    plant(dy, no, dt, (size_t)d.out[d.rank - 1]);
    for (int op = 0; op < 3; op++)
        for (int acc = 0; acc < 2; acc++) {
            void *dag = buf(na, dt, false), *dat = dup(dag, na, dt);
            void *dbg = buf(nb, dt, false), *dbt = dup(dbg, nb, dt);
            rt_cuda_broadcast_backward(&cx, (RtBinOp)op, &d, dt, dy, a, b, dag, dbg, acc, acc,
                                       NULL);
            for (int side = 0; side < 2; side++) {
                size_t nx = side ? nb : na;
                if (nx == no)
                    continue;
                const void *other = op == RT_BIN_MUL ? (side ? a : b) : NULL;
                float sign = side && op == RT_BIN_SUB ? -1.0f : 1.0f;
                for (size_t i = 0; i < nx; i++)
                    block_twin(&d, side, dt, dy, other, sign, 1.0, side ? dbt : dat, i, acc);
                same(side ? dbg : dag, side ? dbt : dat, nx, dt, "block reduction");
            }
            dfree(dag), dfree(dat), dfree(dbg), dfree(dbt);
        }
    dfree(a), dfree(b), dfree(dy);
}

/* sum and mean where an element sums 2,048 terms or more: one output of
 * 2,200 terms (a row's chunks), three of 2,300 rows' terms (the threads'
 * items wrap), sum over [5, 700] (3,500 terms, chunks, planted) */
static void test_block_reduce(void **st)
{
    (void)st;
    const int64_t a1[] = {2, 1100}, b1[] = {1};
    const int64_t a2[] = {2300, 3}, b2[] = {1, 3};
    compared = 0;
    BOTH_ORDERS for (int t = 0; t < 3; t++)
    {
        block_case(2, a1, 1, b1, dts[t]);
        block_case(2, a2, 2, b2, dts[t]);
        RtReduceDims rd = {2, {5, 700}, {true, true}};
        RtBcastDims bd;
        const int64_t in[2] = {5, 700}, one[2] = {1, 1};
        assert_true(rt_broadcast_dims_init(&bd, 2, in, 2, one));
        void *x = buf(3500, dts[t], false), *yg = buf(1, dts[t], false), *yt = dup(yg, 1, dts[t]);
        plant(x, 3500, dts[t], 700);
        for (int mean = 0; mean < 2; mean++) {
            (mean ? rt_cuda_mean_forward : rt_cuda_sum_forward)(&cx, &rd, dts[t], x, yg, NULL);
            /* sum's view: b all 1s, the a side reduced (reduce.cuh) */
            bd.a[0] = bd.a[1] = 1;
            block_twin(&bd, 0, dts[t], x, NULL, 1.0f, mean ? 1.0 / 3500.0 : 1.0, yt, 0, false);
            same(yg, yt, 1, dts[t], mean ? "block mean" : "block sum");
        }
        dfree(x), dfree(yg), dfree(yt);
    }
    assert_int_equal(compared, 3 * 3 * (2 * 3 * 2 + 2));
}

/* ---- softmax, the loss head ------------------------------------------------------------- */

static void test_softmax(void **st)
{
    (void)st;
    int64_t shapes[][3] = {{3, 7, 1}, {2, 600, 1}, {2, 5, 3}, {1, 4, 700}};
    compared = 0;
    BOTH_ORDERS for (int t = 0; t < 3; t++) for (int s = 0; s < 4; s++)
        for (int lg = 0; lg < 2; lg++)
    {
        RtDType dt = dts[t];
        int64_t o = shapes[s][0], l = shapes[s][1], in = shapes[s][2];
        size_t n = (size_t)(o * l * in);
        void *x = buf(n, dt, s == 0), *dy = buf(n, dt, s == 0);
        void *yg = buf(n, dt, false), *yc = buf(n, dt, false);
        (lg ? rt_cuda_log_softmax_forward : rt_cuda_softmax_forward)(&cx, o, l, in, dt, x, yg);
        (lg ? rt_log_softmax_forward : rt_softmax_forward)(o, l, in, dt, x, yc);
        same(yg, yc, n, dt, "softmax forward");
        void *dg = buf(n, dt, false), *dc = dup(dg, n, dt);
        (lg ? rt_cuda_log_softmax_backward : rt_cuda_softmax_backward)(&cx, o, l, in, dt, yc, dy,
                                                                       dg, s & 1);
        (lg ? rt_log_softmax_backward : rt_softmax_backward)(o, l, in, dt, yc, dy, dc, s & 1);
        same(dg, dc, n, dt, "softmax backward");
        dfree(x), dfree(dy), dfree(yg), dfree(yc), dfree(dg), dfree(dc);
    }
    assert_int_equal(compared, 3 * 3 * 4 * 2 * 2);
}

static void test_softmax_output(void **st)
{
    (void)st;
    int64_t n = 37, k = 11;
    size_t nk = (size_t)(n * k);
    float *label = dmem(37 * sizeof *label);
    for (int64_t i = 0; i < n; i++)
        label[i] = i % 5 == 0 ? -1.0f : (float)(next() % (unsigned)k);
    label[3] = (float)k; /* out of range: no class is the label */
    RtStepState *step = dmem(sizeof *step);
    memset(step, 0, sizeof *step);
    step->scale = 1024.0f;
    compared = 0;
    BOTH_ORDERS for (int xt = 0; xt < 3; xt++) for (int t = 0; t < 3; t++)
    {
        RtDType xdt = dts[xt], dt = dts[t];
        void *x = buf(nk, xdt, xt == 0), *pg = buf(nk, dt, false), *pc = buf(nk, dt, false);
        rt_cuda_softmax_output_forward(&cx, n, k, xdt, x, dt, pg);
        rt_softmax_output_forward(n, k, xdt, x, dt, pc);
        same(pg, pc, nk, dt, "softmax_output forward");
        for (int norm = 0; norm < 3; norm++)
            for (int ign = 0; ign < 2; ign++) {
                RtSmoParams p = {0.5f, ign ? 0.1f : 0.0f, ign != 0, -1.0f, (RtSmoNorm)norm};
                RtDType dxdt = dts[(t + norm) % 3];
                int acc = ign;
                void *dg = buf(nk, dxdt, false), *dc = dup(dg, nk, dxdt);
                /* the step state's scale, read on the device (1 without one) */
                const RtStepState *sst = norm == 1 ? NULL : step;
                rt_cuda_softmax_output_backward(&cx, n, k, dt, pc, label, &p, sst, dxdt, dg, acc);
                rt_softmax_output_backward(n, k, dt, pc, label, &p, sst, dxdt, dc, acc);
                same(dg, dc, nk, dxdt, "softmax_output backward");
                dfree(dg), dfree(dc);
            }
        dfree(x), dfree(pg), dfree(pc);
    }
    dfree(label), dfree(step);
    assert_int_equal(compared, 3 * 9 * 7);
}

/* math.cuh's ampc_k_softmax_row in C: thread t's maximum and double sum
 * of its classes t, t + 256, ... in order, each combined by tree256 */
static void softmax_row_twin(size_t rows, size_t len, RtDType xdt, const void *x, RtDType dt,
                             void *y)
{
    for (size_t r = 0; r < rows; r++) {
        double m[256], t[256] = {0};
        for (int i = 0; i < 256; i++)
            m[i] = -INFINITY;
        for (size_t l = 0; l < len; l++) {
            float v = ld(x, r * len + l, xdt), mt = (float)m[l % 256];
            m[l % 256] = v > mt ? v : mt;
        }
        float mx = (float)tree256(m, true);
        for (size_t l = 0; l < len; l++)
            t[l % 256] += (double)expf(ld(x, r * len + l, xdt) - mx);
        float fac = (float)(1.0 / tree256(t, false));
        for (size_t l = 0; l < len; l++) {
            float v = expf(ld(x, r * len + l, xdt) - mx) * fac;
            rt_from_f32((char *)y + (r * len + l) * rt_dtype_size(dt), &v, 1, dt);
        }
    }
}

/* the loss head's forward with 1,100 classes: a block a row, 5 rows (the
 * grid of 3 wraps), against the twin bit for bit, and on this data the
 * CPU's too */
static void test_softmax_output_rows(void **st)
{
    (void)st;
    size_t n = 5, k = 1100;
    compared = 0;
    BOTH_ORDERS for (int xt = 0; xt < 3; xt++) for (int t = 0; t < 3; t++)
    {
        void *x = buf(n * k, dts[xt], xt == 0), *pg = buf(n * k, dts[t], false);
        void *pt = dup(pg, n * k, dts[t]);
        rt_cuda_softmax_output_forward(&cx, (int64_t)n, (int64_t)k, dts[xt], x, dts[t], pg);
        softmax_row_twin(n, k, dts[xt], x, dts[t], pt);
        same(pg, pt, n * k, dts[t], "softmax_output forward, a block a row");
        /* the CPU's order too, here: the sum of positive exponentials moves
         * only in the double's last bits, which these floats do not show */
        rt_softmax_output_forward((int64_t)n, (int64_t)k, dts[xt], x, dts[t], pt);
        same(pg, pt, n * k, dts[t], "softmax_output forward, a block a row, the CPU's");
        dfree(x), dfree(pg), dfree(pt);
    }
    assert_int_equal(compared, 3 * 9 * 2);
}

/* ---- BatchNorm: the moving statistics, BatchNorm + relu ------------------------------------ */

static void test_bn_moving(void **st)
{
    (void)st;
    enum { C = 777 };
    float *mean = dmem(C * 4), *invstd = dmem(C * 4), *gm = dmem(C * 4), *gv = dmem(C * 4);
    float mm[C], mv[C];
    for (int i = 0; i < C; i++) {
        mean[i] = value(false), invstd[i] = 0.01f + unit() * 4.0f;
        mm[i] = value(false), mv[i] = unit() * 3.0f;
    }
    invstd[5] = 1.0e4f; /* the variance below eps: clamped to 0 */
    RtStepState *step = dmem(sizeof *step);
    memset(step, 0, sizeof *step);
    BOTH_ORDERS for (int count = 1; count < 3; count++)
    {
        /* no state, a static scale with its flag set, a dynamic one with it clear */
        for (int v = 0; v < 3; v++) {
            step->dynamic = v == 2, step->flag = v == 1;
            const RtStepState *sst = v ? step : NULL;
            memcpy(gm, mm, sizeof mm), memcpy(gv, mv, sizeof mv);
            float cm[C], cv[C];
            memcpy(cm, mm, sizeof mm), memcpy(cv, mv, sizeof mv);
            rt_cuda_batchnorm_update_moving(&cx, C, count * 50 - 49, mean, invstd, 1e-5f, 0.9f, gm,
                                            gv, sst);
            rt_batchnorm_update_moving(C, count * 50 - 49, mean, invstd, 1e-5f, 0.9f, cm, cv, sst);
            assert_memory_equal(gm, cm, sizeof cm);
            assert_memory_equal(gv, cv, sizeof cv);
            assert_memory_not_equal(gm, mm, sizeof mm);
        }
        /* a skipped step: nothing written, on either */
        step->dynamic = 1, step->flag = 1;
        memcpy(gm, mm, sizeof mm), memcpy(gv, mv, sizeof mv);
        rt_cuda_batchnorm_update_moving(&cx, C, 100, mean, invstd, 1e-5f, 0.9f, gm, gv, step);
        assert_memory_equal(gm, mm, sizeof mm);
        assert_memory_equal(gv, mv, sizeof mv);
        float cm[C], cv[C];
        memcpy(cm, mm, sizeof mm), memcpy(cv, mv, sizeof mv);
        rt_batchnorm_update_moving(C, 100, mean, invstd, 1e-5f, 0.9f, cm, cv, step);
        assert_memory_equal(cm, mm, sizeof mm);
        step->flag = 0;
    }
    dfree(mean), dfree(invstd), dfree(gm), dfree(gv), dfree(step);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activation),     cmocka_unit_test(test_leaky_relu),
        cmocka_unit_test(test_dropout),        cmocka_unit_test(test_unary_clip),
        cmocka_unit_test(test_wrappers),       cmocka_unit_test(test_concat_layout),
        cmocka_unit_test(test_broadcast),      cmocka_unit_test(test_sum_mean),
        cmocka_unit_test(test_block_reduce),   cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_softmax_output), cmocka_unit_test(test_softmax_output_rows),
        cmocka_unit_test(test_bn_moving),
    };
    return cmocka_run_group_tests(tests, emu_test_setup, emu_test_teardown);
}
