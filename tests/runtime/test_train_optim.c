/*
 * test_train_optim.c - the optimizer over all parameters (runtime/cpu/optim.c)
 * against a naive reference, several steps: fp32 weights, fp16 and bf16
 * weights with fp32 masters (the 16-bit shadow must equal the rounded master
 * bit for bit, and the old shadow must not be read), 16-bit weights without
 * a master, an fp32 gradient of a 16-bit weight; the table's wd_mult (the
 * compiler emits MXNet's rule, 0 for biases) and lr_mult; SGD with and
 * without momentum and NAG, with a learning rate that changes every step and
 * with clip_gradient; the finite check fused into the update and the
 * separate one; the bytes moved; and the buffers rt_trainer_init allocates.
 * Adam (fp32 and multi-precision, with clipping) against the same kind of
 * reference, and bit for bit against optim.h's ampc_mp_adam_update.
 * The AVX2 + F16C path (runtime/cpu/optim_simd.c) and the per-element loops
 * (forced with AMPC_NO_SIMD=1) bit for bit against optim.h's ampc_mp_*
 * over every optimizer, fp16 and bf16, odd lengths, inf/NaN gradients and
 * masters beyond the fp16 range, clipping on and off.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/optim.h"
#include "train.h"
#include "cpu/cpu.h"
#include "rand.h"

enum { NP = 8 };
#define N 37

/* parameter i reads buffer i, its gradient is buffer NP + i */
static const RtParam params[NP] = {
    {"fc_weight", RT_PK_WEIGHT, RT_F32, false, 2, {37, 1}, N, "default", 1, 1, 0, NP + 0, RT_LAYOUT_NCHW},
    {"fc_bias", RT_PK_BIAS, RT_F32, false, 1, {37}, N, "default", 0, 2, 1, NP + 1, RT_LAYOUT_NCHW},
    {"conv_weight", RT_PK_WEIGHT, RT_F16, true, 2, {37, 1}, N, "default", 1, 0.5f, 2, NP + 2, RT_LAYOUT_NCHW},
    {"bn_gamma", RT_PK_GAMMA, RT_F32, false, 1, {37}, N, "default", 0.5f, 1, 3, NP + 3, RT_LAYOUT_NCHW},
    {"bf_weight", RT_PK_WEIGHT, RT_BF16, true, 2, {37, 1}, N, "default", 1, 1, 4, NP + 4, RT_LAYOUT_NCHW},
    {"bn_moving_mean", RT_PK_MOVING_MEAN, RT_F32, false, 1, {37}, N, "default", 0, 1, 5, -1, RT_LAYOUT_NCHW},
    {"h_weight", RT_PK_WEIGHT, RT_F16, false, 2, {37, 1}, N, "default", 1, 1, 6, NP + 6, RT_LAYOUT_NCHW},
    {"m_weight", RT_PK_WEIGHT, RT_F16, true, 2, {37, 1}, N, "default", 2, 1, 7, NP + 7, RT_LAYOUT_NCHW},
};

static const RtBuffer buffers[2 * NP + 3] = {
    {"fc_weight", RT_F32, N, 0, false, 0, 0}, {"fc_bias", RT_F32, N, 0, false, 0, 0}, {"conv_weight", RT_F16, N, 0, false, 0, 0},
    {"bn_gamma", RT_F32, N, 0, false, 0, 0},  {"bf_weight", RT_BF16, N, 0, false, 0, 0}, {"bn_moving_mean", RT_F32, N, 0, false, 0, 0},
    {"h_weight", RT_F16, N, 0, false, 0, 0},  {"m_weight", RT_F16, N, 0, false, 0, 0},
    {"g0", RT_F32, N, 0, false, 0, 0},        {"g1", RT_F32, N, 0, false, 0, 0},        {"g2", RT_F16, N, 0, false, 0, 0},
    {"g3", RT_F32, N, 0, false, 0, 0},        {"g4", RT_BF16, N, 0, false, 0, 0},       {"unused", RT_F32, N, 0, false, 0, 0},
    {"g6", RT_F16, N, 0, false, 0, 0},        {"g7", RT_F32, N, 0, false, 0, 0}, /* an fp32 gradient of an fp16 weight */
    {"data", RT_F32, 0, 4, false, 0, 0},      {"label", RT_F32, 0, 1, false, 0, 0},     {"prob", RT_F32, 0, 3, false, 0, 0},
};

static const RtModel model = {
    .name = "optim_test", .nparams = NP, .params = params, .nbuffers = 2 * NP + 3,
    .buffers = buffers, .data = 2 * NP, .label = 2 * NP + 1, .prob_train = 2 * NP + 2,
    .prob_infer = 2 * NP + 2, .data_rank = 1, .data_shape = {4}, .classes = 3,
};

static float to_f(const void *p, RtDType dt, int i)
{
    return dt == RT_F32 ? ((const float *)p)[i]
         : dt == RT_F16 ? ampc_half_to_float(((const ampc_half *)p)[i])
                        : ampc_bf16_to_float(((const ampc_bf16 *)p)[i]);
}

static void store(void *p, RtDType dt, int i, float v)
{
    if (dt == RT_F32)
        ((float *)p)[i] = v;
    else if (dt == RT_F16)
        ((ampc_half *)p)[i] = ampc_float_to_half(v);
    else
        ((ampc_bf16 *)p)[i] = ampc_float_to_bf16(v);
}

/* The reference: MXNet's formulas in double, from the same (rounded)
 * gradients; the weight is rounded to its storage where it has no master. */
typedef struct {
    double w[NP][N], m[NP][N];
} Ref;

static void run_clip(RtOptKind kind, float momentum, int steps, float clip)
{
    RtTrainer t;
    char err[256];
    bool with_state = momentum != 0;
    assert_true(rt_trainer_init(&t, &model, 4, with_state, NULL, err, sizeof err));
    RtOptConfig c = {.kind = kind, .lr = 0.1f, .momentum = momentum, .wd = 0.01f,
                     .rescale_grad = 1.0f / 8, .clip_gradient = clip};
    Ref ref;
    memset(&ref, 0, sizeof ref);
    uint64_t seed = 17;
    /* initial weights */
    for (int i = 0; i < NP; i++) {
        const RtParam *p = &params[i];
        for (int e = 0; e < N; e++) {
            float v = (float)(2 * rt_rand_uniform(seed, (uint64_t)i, (uint64_t)e) - 1);
            if (p->has_master) {
                t.ctx.master[i][e] = v;
                store(t.ctx.buf[p->buffer], p->dtype, e, v);
            } else {
                store(t.ctx.buf[p->buffer], p->dtype, e, v);
                v = to_f(t.ctx.buf[p->buffer], p->dtype, e);
            }
            ref.w[i][e] = v;
        }
    }
    for (int s = 0; s < steps; s++) {
        c.lr = 0.1f / (float)(s + 1); /* a changing lr: it sits inside the momentum */
        for (int i = 0; i < NP; i++) {
            const RtParam *p = &params[i];
            if (p->grad < 0)
                continue;
            RtDType gdt = buffers[p->grad].dtype;
            for (int e = 0; e < N; e++)
                store(t.ctx.buf[p->grad], gdt, e,
                      (float)(8 * rt_rand_normal(seed + 1 + (uint64_t)s, (uint64_t)i, (uint64_t)e)));
            /* the old 16-bit shadow must not be read */
            if (p->has_master)
                memset(t.ctx.buf[p->buffer], 0xff, N * rt_dtype_size(p->dtype));
        }
        assert_true(rt_optim_step(&model, &t.ctx, t.state, &c)); /* all finite */
        for (int i = 0; i < NP; i++) {
            const RtParam *p = &params[i];
            if (p->grad < 0)
                continue;
            double lr = (double)c.lr * p->lr_mult;
            double wd = (double)c.wd * p->wd_mult; /* the table's, as is */
            double mu = momentum;
            for (int e = 0; e < N; e++) {
                double g = (double)c.rescale_grad * to_f(t.ctx.buf[p->grad], buffers[p->grad].dtype, e);
                if (clip >= 0)
                    g = g > clip ? clip : g < -clip ? -clip : g;
                double *w = &ref.w[i][e], *m = &ref.m[i][e];
                if (momentum == 0) {
                    *w = (1 - lr * wd) * *w - lr * g;
                } else if (kind == RT_OPT_NAG) {
                    double G = g + wd * *w;
                    *m = mu * *m - lr * G;
                    *w = *w + mu * *m - lr * G;
                } else {
                    *m = mu * *m - lr * wd * *w - lr * g;
                    *w = *w + *m;
                }
            }
        }
        /* compare */
        for (int i = 0; i < NP; i++) {
            const RtParam *p = &params[i];
            for (int e = 0; e < N; e++) {
                float got = p->has_master ? t.ctx.master[i][e] : to_f(t.ctx.buf[p->buffer], p->dtype, e);
                double want = ref.w[i][e];
                double tol = p->has_master || p->dtype == RT_F32
                                 ? 1e-5 * (1 + fabs(want))
                                 : (p->dtype == RT_F16 ? 1e-3 : 8e-3) * (1 + fabs(want)) * (s + 1);
                if (fabs(got - want) > tol)
                    fail_msg("step %d %s[%d]: %.9g, reference %.9g", s, p->name, e, (double)got, want);
                if (p->has_master) {
                    /* the shadow is the master rounded, bit for bit */
                    uint16_t sh = ((const uint16_t *)t.ctx.buf[p->buffer])[e];
                    uint16_t r = p->dtype == RT_F16 ? ampc_float_to_half(got) : ampc_float_to_bf16(got);
                    if (sh != r)
                        fail_msg("step %d %s[%d]: shadow 0x%04x, rounded master 0x%04x", s,
                                 p->name, e, sh, r);
                }
                if (!p->has_master && p->dtype != RT_F32)
                    ref.w[i][e] = got; /* no master: the next step starts from the stored value */
                if (p->grad < 0)
                    assert_true(got == (float)ref.w[i][e]); /* untouched */
            }
            if (with_state && p->grad >= 0)
                for (int e = 0; e < N; e++)
                    assert_true(fabs(t.state[i][e] - ref.m[i][e]) <= 1e-5 * (1 + fabs(ref.m[i][e])) ||
                                (!p->has_master && p->dtype != RT_F32));
        }
    }
    rt_trainer_free(&t);
}

static void run(RtOptKind kind, float momentum, int steps) { run_clip(kind, momentum, steps, -1); }

static void test_sgd_momentum(void **state)
{
    (void)state;
    run(RT_OPT_SGD, 0.9f, 6);
}

static void test_sgd(void **state)
{
    (void)state;
    run(RT_OPT_SGD, 0, 6);
}

static void test_nag(void **state)
{
    (void)state;
    run(RT_OPT_NAG, 0.9f, 6);
}

static void test_clip_gradient(void **state)
{
    (void)state;
    run_clip(RT_OPT_SGD, 0.9f, 4, 0.5f); /* gradients ~8/8: many clipped */
    run_clip(RT_OPT_NAG, 0.9f, 4, 0.5f);
}

static void test_nag_momentum0_is_sgd(void **state)
{
    (void)state;
    run(RT_OPT_NAG, 0, 3);
}

/* The multi-precision path is optim.h's ampc_mp_sgd_mom_update exactly. */
static void test_mp_matches_shared_kernel(void **state)
{
    (void)state;
    RtTrainer t;
    char err[256];
    assert_true(rt_trainer_init(&t, &model, 4, true, NULL, err, sizeof err));
    RtOptConfig c = {.kind = RT_OPT_SGD, .lr = 0.05f, .momentum = 0.9f, .wd = 1e-4f,
                     .rescale_grad = 1.0f / 32, .clip_gradient = -1};
    float w32[N], mom[N];
    ampc_half *g = t.ctx.buf[NP + 2];
    for (int e = 0; e < N; e++) {
        w32[e] = t.ctx.master[2][e] = (float)rt_rand_normal(5, 2, (uint64_t)e);
        mom[e] = 0;
    }
    for (int s = 0; s < 4; s++) {
        for (int e = 0; e < N; e++)
            g[e] = ampc_float_to_half((float)rt_rand_normal(6 + (uint64_t)s, 2, (uint64_t)e));
        rt_optim_step(&model, &t.ctx, t.state, &c);
        AmpcOptParam q = {.lr = c.lr * 0.5f, .wd = c.wd, .momentum = c.momentum,
                          .rescale_grad = c.rescale_grad, .clip_gradient = -1};
        for (int e = 0; e < N; e++) {
            ampc_half sh = ampc_mp_sgd_mom_update(&w32[e], &mom[e], g[e], q);
            assert_memory_equal(&w32[e], &t.ctx.master[2][e], sizeof(float));
            assert_memory_equal(&mom[e], &t.state[2][e], sizeof(float));
            assert_int_equal(sh, ((ampc_half *)t.ctx.buf[2])[e]);
        }
    }
    rt_trainer_free(&t);
}

/* Adam against a naive reference in double over several steps, with a
 * changing lr: MXNet's AdamUpdateKernel (wd inside the gradient and the
 * clip) with the bias correction in the lr (Python Adam.update): lr_t =
 * lr x lr_mult x sqrt(1 - beta2^t) / (1 - beta1^t).  fp32 weights, fp16
 * and bf16 masters (the shadow is the rounded master bit for bit and the
 * old shadow is never read), a 16-bit weight without a master, an fp32
 * gradient of an fp16 weight. */
static void run_adam(float clip, int steps)
{
    RtTrainer t;
    char err[256];
    assert_true(rt_trainer_init(&t, &model, 4, 2, NULL, err, sizeof err));
    assert_non_null(t.state2);
    RtOptConfig c = {.kind = RT_OPT_ADAM, .lr = 0.01f, .wd = 0.01f, .rescale_grad = 1.0f / 8,
                     .clip_gradient = clip, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f};
    assert_int_equal(rt_optim_nstate(&c), 2);
    static double w[NP][N], mean[NP][N], var[NP][N];
    memset(mean, 0, sizeof mean);
    memset(var, 0, sizeof var);
    for (int i = 0; i < NP; i++) {
        const RtParam *p = &params[i];
        for (int e = 0; e < N; e++) {
            float v = (float)(2 * rt_rand_uniform(23, (uint64_t)i, (uint64_t)e) - 1);
            if (p->has_master)
                t.ctx.master[i][e] = v;
            store(t.ctx.buf[p->buffer], p->dtype, e, v);
            w[i][e] = p->has_master ? v : to_f(t.ctx.buf[p->buffer], p->dtype, e);
        }
    }
    for (int s = 0; s < steps; s++) {
        c.lr = 0.01f / (float)(s + 1);
        c.t = s + 1;
        for (int i = 0; i < NP; i++) {
            const RtParam *p = &params[i];
            if (p->grad < 0)
                continue;
            for (int e = 0; e < N; e++)
                store(t.ctx.buf[p->grad], buffers[p->grad].dtype, e,
                      (float)(8 * rt_rand_normal(99 + (uint64_t)s, (uint64_t)i, (uint64_t)e)));
            if (p->has_master)
                memset(t.ctx.buf[p->buffer], 0xff, N * rt_dtype_size(p->dtype));
        }
        assert_true(rt_optim_step2(&model, &t.ctx, t.state, t.state2, &c));
        for (int i = 0; i < NP; i++) {
            const RtParam *p = &params[i];
            double lr_t = (double)c.lr * p->lr_mult * sqrt(1 - pow(0.999, s + 1)) /
                          (1 - pow(0.9, s + 1));
            double wd = (double)c.wd * p->wd_mult;
            for (int e = 0; e < N; e++) {
                float got = p->has_master ? t.ctx.master[i][e]
                                          : to_f(t.ctx.buf[p->buffer], p->dtype, e);
                if (p->grad < 0) {
                    assert_true(got == (float)w[i][e]);
                    continue;
                }
                double g = (double)c.rescale_grad *
                               to_f(t.ctx.buf[p->grad], buffers[p->grad].dtype, e) +
                           wd * w[i][e];
                if (clip >= 0)
                    g = g > clip ? clip : g < -clip ? -clip : g;
                mean[i][e] = 0.9 * mean[i][e] + 0.1 * g;
                var[i][e] = 0.999 * var[i][e] + 0.001 * g * g;
                w[i][e] -= lr_t * mean[i][e] / (sqrt(var[i][e]) + 1e-8);
                double tol = p->has_master || p->dtype == RT_F32
                                 ? 1e-5 * (1 + fabs(w[i][e]))
                                 : (p->dtype == RT_F16 ? 1e-3 : 8e-3) * (1 + fabs(w[i][e]));
                if (fabs(got - w[i][e]) > tol)
                    fail_msg("adam step %d %s[%d]: %.9g, reference %.9g", s, p->name, e,
                             (double)got, w[i][e]);
                if (fabs(t.state[i][e] - mean[i][e]) > 1e-5 * (1 + fabs(mean[i][e])) ||
                    fabs(t.state2[i][e] - var[i][e]) > 1e-5 * (1 + fabs(var[i][e])))
                    fail_msg("adam step %d %s[%d]: mean %.9g var %.9g, reference %.9g %.9g", s,
                             p->name, e, (double)t.state[i][e], (double)t.state2[i][e],
                             mean[i][e], var[i][e]);
                if (p->has_master) {
                    uint16_t sh = ((const uint16_t *)t.ctx.buf[p->buffer])[e];
                    uint16_t r = p->dtype == RT_F16 ? ampc_float_to_half(got)
                                                    : ampc_float_to_bf16(got);
                    if (sh != r)
                        fail_msg("adam step %d %s[%d]: shadow 0x%04x, rounded master 0x%04x", s,
                                 p->name, e, sh, r);
                }
                if (!p->has_master && p->dtype != RT_F32)
                    w[i][e] = got;
            }
        }
    }
    rt_trainer_free(&t);
}

static void test_adam(void **state)
{
    (void)state;
    run_adam(-1, 6);
    run_adam(0.05f, 4); /* with wd inside the clip */
}

/* The multi-precision Adam path is optim.h's ampc_mp_adam_update exactly,
 * with ampc_adam_lr's bias correction. */
static void test_adam_mp_matches_shared_kernel(void **state)
{
    (void)state;
    RtTrainer t;
    char err[256];
    assert_true(rt_trainer_init(&t, &model, 4, 2, NULL, err, sizeof err));
    RtOptConfig c = {.kind = RT_OPT_ADAM, .lr = 0.002f, .wd = 1e-4f, .rescale_grad = 1.0f / 32,
                     .clip_gradient = -1, .beta1 = 0.8f, .beta2 = 0.99f, .epsilon = 1e-6f};
    float w32[N], mean[N], var[N];
    ampc_half *g = t.ctx.buf[NP + 2];
    for (int e = 0; e < N; e++) {
        w32[e] = t.ctx.master[2][e] = (float)rt_rand_normal(5, 2, (uint64_t)e);
        mean[e] = var[e] = 0;
    }
    for (int s = 0; s < 5; s++) {
        for (int e = 0; e < N; e++)
            g[e] = ampc_float_to_half((float)rt_rand_normal(6 + (uint64_t)s, 2, (uint64_t)e));
        c.t = s + 1;
        rt_optim_step2(&model, &t.ctx, t.state, t.state2, &c);
        AmpcOptParam q = {.lr = ampc_adam_lr((double)c.lr * 0.5, 0.8f, 0.99f, s + 1),
                          .wd = c.wd, .rescale_grad = c.rescale_grad, .clip_gradient = -1,
                          .beta1 = 0.8f, .beta2 = 0.99f, .epsilon = 1e-6f};
        for (int e = 0; e < N; e++) {
            ampc_half sh = ampc_mp_adam_update(&w32[e], &mean[e], &var[e], g[e], q);
            assert_memory_equal(&w32[e], &t.ctx.master[2][e], sizeof(float));
            assert_memory_equal(&mean[e], &t.state[2][e], sizeof(float));
            assert_memory_equal(&var[e], &t.state2[2][e], sizeof(float));
            assert_int_equal(sh, ((ampc_half *)t.ctx.buf[2])[e]);
        }
    }
    /* 28 bytes per parameter for multi-precision Adam (MXNet 1.x: 40, in
     * three kernels); 30 with dynamic loss scaling's separate check */
    assert_int_equal(rt_optim_bytes_per_param(&params[2], RT_F16, &c, false), 28);
    assert_int_equal(rt_optim_bytes_per_param(&params[2], RT_F16, &c, true), 30);
    assert_int_equal(rt_optim_bytes_per_param(&params[0], RT_F32, &c, false), 28); /* 4+4+8 read, 4+8 written */
    rt_trainer_free(&t);
}

static void test_wd_mult_and_bytes(void **state)
{
    (void)state;
    /* the table's wd_mult as is: the compiler emits MXNet's rule */
    assert_float_equal(rt_optim_wd_mult(&params[0]), 1, 0);   /* fc_weight */
    assert_float_equal(rt_optim_wd_mult(&params[1]), 0, 0);   /* fc_bias: 0 in the table */
    assert_float_equal(rt_optim_wd_mult(&params[3]), 0.5, 0); /* bn_gamma, wd_mult 0.5 */
    RtParam odd = params[1];
    odd.wd_mult = 3; /* an explicit wd_mult on a bias is honoured (no name rule) */
    assert_float_equal(rt_optim_wd_mult(&odd), 3, 0);
    RtOptConfig mom = {.momentum = 0.9f}, plain = {.momentum = 0};
    /* mp SGD momentum: read grad 2 + master 4 + momentum 4, write 4 + 4 + shadow 2;
     * MXNet's mp_sgd_mom_update moves the same 20, its multi_all_finite 2 more */
    assert_int_equal(rt_optim_bytes_per_param(&params[2], RT_F16, &mom, false), 20);
    assert_int_equal(rt_optim_bytes_per_param(&params[2], RT_F16, &mom, true), 22);
    assert_int_equal(rt_optim_bytes_per_param(&params[2], RT_F16, &plain, false), 12);
    assert_int_equal(rt_optim_bytes_per_param(&params[0], RT_F32, &mom, false), 20);
    assert_int_equal(rt_optim_bytes_per_param(&params[0], RT_F32, &mom, true), 24);
    assert_int_equal(rt_optim_bytes_per_param(&params[0], RT_F32, &plain, false), 12);
}

/* The finite check: the separate one (rt_multi_all_finite over every
 * gradient) and the one fused into the update, for each gradient dtype. */
static void test_finite_check(void **state)
{
    (void)state;
    RtTrainer t;
    char err[256];
    assert_true(rt_trainer_init(&t, &model, 4, true, NULL, err, sizeof err));
    RtOptConfig c = {.kind = RT_OPT_SGD, .lr = 0.1f, .momentum = 0.9f, .wd = 0,
                     .rescale_grad = 1, .clip_gradient = -1};
    assert_true(rt_optim_grads_finite(&model, &t.ctx));
    assert_int_equal(rt_optim_first_nonfinite(&model, &t.ctx), -1);
    assert_true(rt_optim_step(&model, &t.ctx, t.state, &c));
    static const struct { int param; float v; } cases[] = {
        {0, INFINITY}, {1, NAN}, {2, -INFINITY}, {4, NAN}, {6, INFINITY}, {7, NAN},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int i = cases[k].param;
        RtDType gdt = buffers[params[i].grad].dtype;
        memset(t.ctx.buf[params[i].grad], 0, N * rt_dtype_size(gdt));
        store(t.ctx.buf[params[i].grad], gdt, 30, cases[k].v);
        assert_false(rt_optim_grads_finite(&model, &t.ctx));
        assert_int_equal(rt_optim_first_nonfinite(&model, &t.ctx), i);
        assert_false(rt_optim_step(&model, &t.ctx, t.state, &c)); /* fused: applied, reported */
        store(t.ctx.buf[params[i].grad], gdt, 30, 65504.0f); /* large but finite */
        assert_true(rt_optim_grads_finite(&model, &t.ctx));
        memset(t.ctx.buf[params[i].grad], 0, N * rt_dtype_size(gdt));
    }
    /* the moving statistics have no gradient: never checked */
    store(t.ctx.buf[NP + 5], RT_F32, 0, NAN);
    assert_true(rt_optim_grads_finite(&model, &t.ctx));
    rt_trainer_free(&t);
}

static void test_trainer_buffers(void **state)
{
    (void)state;
    RtTrainer t;
    char err[256];
    assert_true(rt_trainer_init(&t, &model, 5, true, NULL, err, sizeof err));
    for (int b = 0; b < model.nbuffers; b++) {
        assert_int_equal((uintptr_t)t.ctx.buf[b] % 64, 0);
        size_t n = (size_t)(buffers[b].fixed + buffers[b].per_sample * 5) * rt_dtype_size(buffers[b].dtype);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(((unsigned char *)t.ctx.buf[b])[k], 0);
    }
    for (int i = 0; i < NP; i++) {
        assert_true((t.ctx.master[i] != NULL) == params[i].has_master);
        assert_true((t.state[i] != NULL) == (params[i].grad >= 0));
    }
    assert_int_equal(t.ctx.batch, 5);
    assert_float_equal(t.ctx.step_state->scale, 1, 0); /* the CPU device's, host memory */
    /* parameters: masters in fp32, shadows rounded from them */
    assert_true(rt_trainer_init_params(&t, "xavier(rnd_type=\"gaussian\")", 3, err, sizeof err));
    for (int e = 0; e < N; e++) {
        assert_int_equal(((ampc_half *)t.ctx.buf[2])[e], ampc_float_to_half(t.ctx.master[2][e]));
        assert_int_equal(((ampc_bf16 *)t.ctx.buf[4])[e], ampc_float_to_bf16(t.ctx.master[4][e]));
        assert_float_equal(((float *)t.ctx.buf[1])[e], 0, 0);  /* bias */
        assert_float_equal(((float *)t.ctx.buf[3])[e], 1, 0);  /* gamma */
    }
    assert_true(fabs(t.ctx.master[2][0]) > 0);
    /* the workspace grows and stays aligned */
    void *w = rt_ctx_ws(&t.ctx, 100);
    assert_int_equal((uintptr_t)w % RT_WS_ALIGN, 0);
    assert_ptr_equal(rt_ctx_ws(&t.ctx, 64), w);
    assert_true(t.ctx.ws_bytes >= 100);
    w = rt_ctx_ws(&t.ctx, 1000);
    assert_int_equal((uintptr_t)w % RT_WS_ALIGN, 0);
    rt_trainer_free(&t);
    /* a bad table */
    RtParam bad[1] = {params[0]};
    bad[0].numel = 1000;
    RtModel m = model;
    m.nparams = 1;
    m.params = bad;
    assert_false(rt_trainer_init(&t, &m, 4, true, NULL, err, sizeof err));
    assert_non_null(strstr(err, "parameter fc_weight (buffer 0) holds 37 elements, needs 1000"));
    bad[0] = params[2];
    bad[0].dtype = RT_BF16;
    assert_false(rt_trainer_init(&t, &m, 4, true, NULL, err, sizeof err));
    assert_non_null(strstr(err, "is float16, expected bfloat16"));
    m = model;
    m.data = 99;
    assert_false(rt_trainer_init(&t, &m, 4, true, NULL, err, sizeof err));
    assert_non_null(strstr(err, "the data input is buffer 99"));
}

/* ---- the AVX2 + F16C path (runtime/cpu/optim_simd.c) against the per-element
 * functions (cpu/cpu.h declares them) ------------------------------------ */

/* Odd lengths, so the 8-wide body and the per-element remainder both run
 * (3: remainder only; 8: body only); per-tensor lr_mult and wd_mult. */
enum { SP = 6 };
static const RtParam sparams[SP] = {
    {"a_weight", RT_PK_WEIGHT, RT_F16, true, 1, {1001}, 1001, "default", 1, 0.5f, 0, SP + 0, RT_LAYOUT_NCHW},
    {"b_weight", RT_PK_WEIGHT, RT_BF16, true, 1, {4099}, 4099, "default", 0.25f, 2, 1, SP + 1, RT_LAYOUT_NCHW},
    {"c_weight", RT_PK_WEIGHT, RT_F16, true, 1, {3}, 3, "default", 1, 1, 2, SP + 2, RT_LAYOUT_NCHW},
    {"d_bias", RT_PK_BIAS, RT_BF16, true, 1, {17}, 17, "default", 0, 1, 3, SP + 3, RT_LAYOUT_NCHW},
    {"e_weight", RT_PK_WEIGHT, RT_F16, true, 1, {8}, 8, "default", 3, 1, 4, SP + 4, RT_LAYOUT_NCHW},
    {"f_gamma", RT_PK_GAMMA, RT_F16, true, 1, {777}, 777, "default", 0, 1.5f, 5, SP + 5, RT_LAYOUT_NCHW},
};
static const RtBuffer sbuffers[2 * SP + 3] = {
    {"a_weight", RT_F16, 1001, 0, false, 0, 0}, {"b_weight", RT_BF16, 4099, 0, false, 0, 0}, {"c_weight", RT_F16, 3, 0, false, 0, 0},
    {"d_bias", RT_BF16, 17, 0, false, 0, 0},    {"e_weight", RT_F16, 8, 0, false, 0, 0},     {"f_gamma", RT_F16, 777, 0, false, 0, 0},
    {"ga", RT_F16, 1001, 0, false, 0, 0},       {"gb", RT_BF16, 4099, 0, false, 0, 0},       {"gc", RT_F16, 3, 0, false, 0, 0},
    {"gd", RT_BF16, 17, 0, false, 0, 0},        {"ge", RT_F16, 8, 0, false, 0, 0},           {"gf", RT_F16, 777, 0, false, 0, 0},
    {"data", RT_F32, 0, 4, false, 0, 0},        {"label", RT_F32, 0, 1, false, 0, 0},        {"prob", RT_F32, 0, 3, false, 0, 0},
};
static const RtModel smodel = {
    .name = "optim_simd_test", .nparams = SP, .params = sparams, .nbuffers = 2 * SP + 3,
    .buffers = sbuffers, .data = 2 * SP, .label = 2 * SP + 1, .prob_train = 2 * SP + 2,
    .prob_infer = 2 * SP + 2, .data_rank = 1, .data_shape = {4}, .classes = 3,
};

static uint64_t smix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A 16-bit gradient: normal values over |g| in [2^-14, 2^6] of either sign,
 * some subnormals and zeros, and every 23rd or so an inf or a NaN (quiet,
 * signalling, with payloads, both signs); with specials false, none. */
static uint16_t sgrad(uint64_t r, bool bf, bool specials)
{
    static const uint16_t hs[] = {0x7c00, 0xfc00, 0x7e01, 0x7d00, 0xfe3f, 0x7fff, 0x0001, 0x8000};
    static const uint16_t bs[] = {0x7f80, 0xff80, 0x7fc1, 0x7f81, 0xffa5, 0x7fff, 0x0001, 0x8000};
    if (specials && r % 23 == 0)
        return bf ? bs[(r >> 8) % 8] : hs[(r >> 8) % 8];
    if ((r >> 12) % 40 == 0)
        return (uint16_t)((r >> 16) & (bf ? 0x807fu : 0x83ffu)); /* zero or subnormal */
    float v = ldexpf((float)((r >> 20) & 0xffff) / 65536.0f + 1.0f, (int)((r >> 40) % 21) - 14);
    if ((r >> 60) & 1)
        v = -v;
    return bf ? ampc_float_to_bf16(v) : ampc_float_to_half(v);
}

/* A master: mostly N(0, 0.1)-like, with values beyond the fp16 range, at
 * its rounding boundaries, whose shadows are fp16 subnormals or round to
 * zero, float subnormals, signed zeros and (with specials) infinities. */
static float smaster(uint64_t r, bool specials)
{
    static const float sp[] = {70000.0f, -65519.0f, 65520.0f, 65504.0f, -1e30f, 3e-6f,
                               2.98e-8f, -5.96e-8f, 1e-40f, -0.0f, 0.0f, 6.1e-5f,
                               3.3895e38f, INFINITY, -INFINITY};
    unsigned nsp = specials ? 15 : 13;
    if (r % 17 == 0)
        return sp[(r >> 8) % nsp];
    return (float)((double)((r >> 20) & 0xffff) / 65536.0 - 0.5) * 0.2f;
}

static bool f_isnan(float f) { return f != f; }

static bool same_f32(float a, float b, bool lenient)
{
    return memcmp(&a, &b, 4) == 0 || (lenient && f_isnan(a) && f_isnan(b));
}

/* One configuration: three steps of rt_optim_step2 over smodel, every
 * element checked bit for bit against optim.h's ampc_mp_* (fp16) and
 * ampc_mp_*_bf16 on copies of the same state, the fused finite check
 * against the gradient bits.  Exactness is relaxed in one case only: two
 * or more non-finite inputs of one element (a NaN or inf gradient on top of
 * a master or state made inf or NaN by an earlier step): when the result is
 * NaN either way, any NaN passes.  There two NaNs meet (inf - inf makes
 * one), and which payload and sign come out is the compiler's choice, in
 * scalar code too (clang and gcc differ).  A single special input (an inf
 * or NaN gradient, an inf master) must give the same bits. */
static void run_simd_case(RtOptKind kind, float momentum, float clip, bool specials)
{
    RtTrainer t;
    char err[256];
    int nstate = kind == RT_OPT_ADAM ? 2 : momentum != 0;
    assert_true(rt_trainer_init(&t, &smodel, 4, nstate, NULL, err, sizeof err));
    RtOptConfig c = {.kind = kind, .lr = 0.05f, .momentum = momentum, .wd = 1e-3f,
                     .rescale_grad = 1.0f / 96, .clip_gradient = clip, .beta1 = 0.9f,
                     .beta2 = 0.999f, .epsilon = 1e-8f};
    uint64_t seed = (uint64_t)kind * 1000 + (uint64_t)(momentum * 10) * 100 + (clip >= 0) * 10 +
                    specials;
    for (int i = 0; i < SP; i++)
        for (int64_t e = 0; e < sparams[i].numel; e++) {
            uint64_t r = smix(seed * 7919 + (uint64_t)i * 100003 + (uint64_t)e);
            t.ctx.master[i][e] = smaster(r, specials);
            if (nstate >= 1)
                t.state[i][e] = (float)((double)((r >> 8) & 0xff) / 256.0 - 0.5) * 1e-2f;
            if (nstate == 2)
                t.state2[i][e] = (float)((double)((r >> 16) & 0xff) / 256.0) * 1e-4f;
        }
    for (int s = 0; s < 3; s++) {
        c.lr = 0.05f / (float)(s + 1);
        c.t = s + 1;
        bool any_bad = false;
        for (int i = 0; i < SP; i++) {
            const RtParam *p = &sparams[i];
            bool bf = p->dtype == RT_BF16;
            uint16_t *g = t.ctx.buf[p->grad];
            for (int64_t e = 0; e < p->numel; e++) {
                g[e] = sgrad(smix(seed * 31 + (uint64_t)s * 1000003 + (uint64_t)i * 100003 +
                                  (uint64_t)e),
                             bf, specials);
                any_bad |= bf ? !ampc_bf16_isfinite(g[e]) : !ampc_half_isfinite(g[e]);
            }
            memset(t.ctx.buf[p->buffer], 0xa5, (size_t)p->numel * 2); /* never read */
        }
        /* the reference, on copies */
        static float rw[SP][4099], rm[SP][4099], rv[SP][4099];
        static uint16_t rs[SP][4099];
        static bool lenient[SP][4099];
        for (int i = 0; i < SP; i++) {
            const RtParam *p = &sparams[i];
            bool bf = p->dtype == RT_BF16;
            const uint16_t *g = t.ctx.buf[p->grad];
            AmpcOptParam q = {.lr = c.lr * p->lr_mult, .wd = c.wd * p->wd_mult,
                              .momentum = c.momentum, .rescale_grad = c.rescale_grad,
                              .clip_gradient = c.clip_gradient, .beta1 = c.beta1,
                              .beta2 = c.beta2, .epsilon = c.epsilon};
            if (kind == RT_OPT_ADAM)
                q.lr = ampc_adam_lr((double)c.lr * (double)p->lr_mult, c.beta1, c.beta2, c.t);
            for (int64_t e = 0; e < p->numel; e++) {
                float *w = &rw[i][e], *m = &rm[i][e], *v = &rv[i][e];
                *w = t.ctx.master[i][e];
                *m = nstate >= 1 ? t.state[i][e] : 0;
                *v = nstate == 2 ? t.state2[i][e] : 0;
                float gf = bf ? ampc_bf16_to_float(g[e]) : ampc_half_to_float(g[e]);
                lenient[i][e] = !ampc_isfinite(gf) + !ampc_isfinite(*w) + !ampc_isfinite(*m) +
                                    !ampc_isfinite(*v) >= 2;
                if (kind == RT_OPT_ADAM)
                    rs[i][e] = bf ? ampc_mp_adam_update_bf16(w, m, v, g[e], q)
                                  : ampc_mp_adam_update(w, m, v, g[e], q);
                else if (momentum == 0)
                    rs[i][e] = bf ? ampc_mp_sgd_update_bf16(w, g[e], q)
                                  : ampc_mp_sgd_update(w, g[e], q);
                else if (kind == RT_OPT_NAG)
                    rs[i][e] = bf ? ampc_mp_nag_mom_update_bf16(w, m, g[e], q)
                                  : ampc_mp_nag_mom_update(w, m, g[e], q);
                else
                    rs[i][e] = bf ? ampc_mp_sgd_mom_update_bf16(w, m, g[e], q)
                                  : ampc_mp_sgd_mom_update(w, m, g[e], q);
            }
        }
        bool ok = rt_optim_step2(&smodel, &t.ctx, t.state, t.state2, &c);
        assert_int_equal(ok, !any_bad);
        for (int i = 0; i < SP; i++) {
            const RtParam *p = &sparams[i];
            bool bf = p->dtype == RT_BF16;
            const uint16_t *sh = t.ctx.buf[p->buffer];
            for (int64_t e = 0; e < p->numel; e++) {
                bool len = lenient[i][e];
                bool shadow_ok = sh[e] == rs[i][e] ||
                                 (len && (bf ? ampc_bf16_isnan(sh[e]) && ampc_bf16_isnan(rs[i][e])
                                             : ampc_half_isnan(sh[e]) && ampc_half_isnan(rs[i][e])));
                if (!same_f32(t.ctx.master[i][e], rw[i][e], len) || !shadow_ok ||
                    (nstate >= 1 && !same_f32(t.state[i][e], rm[i][e], len)) ||
                    (nstate == 2 && !same_f32(t.state2[i][e], rv[i][e], len)))
                    fail_msg("kind %d mom %g clip %g step %d %s[%lld]: master %a/%a shadow "
                             "0x%04x/0x%04x state %a/%a var %a/%a (got/want; simd %d)",
                             (int)kind, (double)momentum, (double)clip, s, p->name, (long long)e,
                             (double)t.ctx.master[i][e], (double)rw[i][e], sh[e], rs[i][e],
                             nstate >= 1 ? (double)t.state[i][e] : 0.0, (double)rm[i][e],
                             nstate == 2 ? (double)t.state2[i][e] : 0.0, (double)rv[i][e],
                             (int)rt_optim_simd_active());
            }
        }
    }
    rt_trainer_free(&t);
}

static void run_simd_all(void)
{
    static const struct { RtOptKind kind; float momentum; } opts[] = {
        {RT_OPT_SGD, 0.9f}, {RT_OPT_SGD, 0}, {RT_OPT_NAG, 0.9f}, {RT_OPT_ADAM, 0},
    };
    for (size_t k = 0; k < sizeof opts / sizeof *opts; k++)
        for (int sp = 0; sp < 2; sp++) {
            run_simd_case(opts[k].kind, opts[k].momentum, -1, sp);
            run_simd_case(opts[k].kind, opts[k].momentum, 0.02f, sp);
            run_simd_case(opts[k].kind, opts[k].momentum, 0, sp); /* clip to +-0 */
        }
}

/* Whatever path the CPU takes (AVX2 + F16C where it has them). */
static void test_simd_path_bit_identical(void **state)
{
    (void)state;
    unsetenv("AMPC_NO_SIMD");
    rt_optim_simd_reread();
    print_message("optim: AVX2+F16C path %s on this CPU\n",
                  rt_optim_simd_active() ? "active" : "not available");
    run_simd_all();
}

/* AMPC_NO_SIMD=1 forces the per-element loops (read once; reread for the
 * test), so both paths stay tested on any CPU. */
static void test_no_simd_fallback(void **state)
{
    (void)state;
    setenv("AMPC_NO_SIMD", "1", 1);
    rt_optim_simd_reread();
    assert_false(rt_optim_simd_active());
    run_simd_all();
    setenv("AMPC_NO_SIMD", "0", 1); /* "0" (or empty) leaves it on */
    rt_optim_simd_reread();
    bool on0 = rt_optim_simd_active();
    unsetenv("AMPC_NO_SIMD");
    rt_optim_simd_reread();
    assert_int_equal(on0, rt_optim_simd_active());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_nag),
        cmocka_unit_test(test_nag_momentum0_is_sgd),
        cmocka_unit_test(test_mp_matches_shared_kernel),
        cmocka_unit_test(test_clip_gradient),
        cmocka_unit_test(test_wd_mult_and_bytes),
        cmocka_unit_test(test_finite_check),
        cmocka_unit_test(test_trainer_buffers),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adam_mp_matches_shared_kernel),
        cmocka_unit_test(test_simd_path_bit_identical),
        cmocka_unit_test(test_no_simd_fallback),
    };
    return cmocka_run_group_tests_name("train_optim", tests, NULL, NULL);
}
