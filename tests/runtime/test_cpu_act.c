/* test_cpu_act.c - Activation (relu, sigmoid, tanh, softrelu, softsign),
 * LeakyReLU (leaky, elu, selu, prelu with its gamma gradient) and Dropout
 * (Philox known answers, reproducibility, the regenerated mask). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_cpu_util.h"

/* ---- Activation ------------------------------------------------------------- */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double f_relu(double x, double a) { (void)a; return x > 0 ? x : 0; }
static double d_relu(double x, double a) { (void)a; return x > 0 ? 1 : 0; }
static double f_sigmoid(double x, double a) { (void)a; return sigm(x); }
static double d_sigmoid(double x, double a) { (void)a; return sigm(x) * (1 - sigm(x)); }
static double f_tanh(double x, double a) { (void)a; return tanh(x); }
static double d_tanh(double x, double a) { (void)a; return 1 - tanh(x) * tanh(x); }
static double f_softrelu(double x, double a) { (void)a; return log1p(exp(x)); }
static double d_softrelu(double x, double a) { (void)a; return sigm(x); }
static double f_softsign(double x, double a) { (void)a; return x / (1 + fabs(x)); }
static double d_softsign(double x, double a) { (void)a; return 1 / ((1 + fabs(x)) * (1 + fabs(x))); }

static void act_fwd(const TuUnary *u, size_t n, RtDType dt, const void *x, void *y)
{
    rt_activation_forward((RtAct)u->op, n, dt, x, y);
}

/* Passes only what the kernel documents it reads (the other is NULL). */
static void act_bwd(const TuUnary *u, size_t n, RtDType dt, const void *x, const void *y,
                    const void *dy, void *dx, bool acc)
{
    bool by_x = u->op == RT_ACT_SOFTSIGN;
    rt_activation_backward((RtAct)u->op, n, dt, by_x ? x : NULL, by_x ? NULL : y, dy, dx, acc);
}

static const TuUnary act_cases[] = {
    {"relu", f_relu, d_relu, act_fwd, act_bwd, 0.05, 3, false, 0, RT_ACT_RELU},
    {"sigmoid", f_sigmoid, d_sigmoid, act_fwd, act_bwd, 0.0, 4, false, 0, RT_ACT_SIGMOID},
    {"tanh", f_tanh, d_tanh, act_fwd, act_bwd, 0.0, 2, false, 0, RT_ACT_TANH},
    {"softrelu", f_softrelu, d_softrelu, act_fwd, act_bwd, 0.0, 4, false, 0, RT_ACT_SOFTRELU},
    {"softsign", f_softsign, d_softsign, act_fwd, act_bwd, 0.05, 4, false, 0, RT_ACT_SOFTSIGN},
};

static void test_activation(void **state)
{
    (void)state;
    tu_seed(20);
    /* 1300 elements: two full chunks and a partial one */
    assert_int_equal(tu_unary_all(act_cases, sizeof act_cases / sizeof act_cases[0], 1300), 0);
}

/* ---- LeakyReLU (leaky, elu, selu: no channels) --------------------------------- */

#define SELU_A 1.6732632423543772848170429916717
#define SELU_L 1.0507009873554804934193349852946
static double f_leaky(double x, double a) { return x > 0 ? x : a * x; }
static double d_leaky(double x, double a) { return x > 0 ? 1 : a; }
static double f_elu(double x, double a) { return x > 0 ? x : a * expm1(x); }
static double d_elu(double x, double a) { return x > 0 ? 1 : a * exp(x); }
static double f_selu(double x, double a) { (void)a; return SELU_L * (x > 0 ? x : SELU_A * expm1(x)); }
static double d_selu(double x, double a) { (void)a; return x > 0 ? SELU_L : SELU_L * SELU_A * exp(x); }

static void lrelu_fwd(const TuUnary *u, size_t n, RtDType dt, const void *x, void *y)
{
    rt_leaky_relu_forward((RtLeaky)u->op, (int64_t)n, 1, 1, dt, x, NULL, (float)u->a, y);
}

static void lrelu_bwd(const TuUnary *u, size_t n, RtDType dt, const void *x, const void *y,
                      const void *dy, void *dx, bool acc)
{
    (void)y;
    rt_leaky_relu_backward((RtLeaky)u->op, (int64_t)n, 1, 1, dt, x, NULL, (float)u->a, dy, dx,
                           NULL, acc, false);
}

static const TuUnary lrelu_cases[] = {
    {"leaky", f_leaky, d_leaky, lrelu_fwd, lrelu_bwd, 0.05, 3, false, 0.25, RT_LRELU_LEAKY},
    {"leaky-0.1", f_leaky, d_leaky, lrelu_fwd, lrelu_bwd, 0.05, 3, false, 0.1, RT_LRELU_LEAKY},
    {"elu", f_elu, d_elu, lrelu_fwd, lrelu_bwd, 0.05, 3, false, 1.0, RT_LRELU_ELU},
    {"elu-0.5", f_elu, d_elu, lrelu_fwd, lrelu_bwd, 0.05, 3, false, 0.5, RT_LRELU_ELU},
    {"selu", f_selu, d_selu, lrelu_fwd, lrelu_bwd, 0.05, 3, false, 0.0, RT_LRELU_SELU},
};

static void test_leaky_relu(void **state)
{
    (void)state;
    tu_seed(21);
    assert_int_equal(tu_unary_all(lrelu_cases, sizeof lrelu_cases / sizeof lrelu_cases[0], 1100), 0);
}

/* ---- prelu: one slope per channel and its gradient ------------------------------- */

typedef struct {
    int64_t outer, c, inner;
    double *x, *gamma, *dy;
} PreluCtx;

static double prelu_loss(void *p)
{
    PreluCtx *c = p;
    double s = 0;
    for (int64_t o = 0; o < c->outer; o++)
        for (int64_t ch = 0; ch < c->c; ch++)
            for (int64_t i = 0; i < c->inner; i++) {
                size_t k = (size_t)((o * c->c + ch) * c->inner + i);
                double x = c->x[k];
                s += (x > 0 ? x : c->gamma[ch] * x) * c->dy[k];
            }
    return s;
}

static size_t prelu_run(int64_t outer, int64_t C, int64_t inner, RtDType dt, bool fd)
{
    size_t n = (size_t)(outer * C * inner);
    PreluCtx c = {outer, C, inner, tu_dalloc(n), tu_dalloc((size_t)C), tu_dalloc(n)};
    tu_fill_away(c.x, n, 0.05, 2);
    tu_fill(c.gamma, (size_t)C, 0.05, 0.5);
    tu_fill(c.dy, n, -1, 1);
    tu_round_all(c.x, n, dt);
    tu_round_all(c.gamma, (size_t)C, dt);
    tu_round_all(c.dy, n, dt);
    double *y = tu_dalloc(n), *dx = tu_dalloc(n), *dg = tu_dalloc((size_t)C);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t i = 0; i < inner; i++) {
                size_t k = (size_t)((o * C + ch) * inner + i);
                double x = c.x[k];
                y[k] = x > 0 ? x : c.gamma[ch] * x;
                dx[k] = c.dy[k] * (x > 0 ? 1 : c.gamma[ch]);
                dg[ch] += x > 0 ? 0 : c.dy[k] * x;
            }
    void *xs = tu_pack(c.x, n, dt), *gs = tu_pack(c.gamma, (size_t)C, dt),
         *dys = tu_pack(c.dy, n, dt), *ys = tu_pack(y, n, dt), *dxs = tu_pack(dx, n, dt),
         *dgs = tu_pack(dg, (size_t)C, dt);
    size_t bad = 0;
    rt_leaky_relu_forward(RT_LRELU_PRELU, outer, C, inner, dt, xs, gs, 0.0f, ys);
    bad += tu_check("prelu y", ys, dt, y, n, tu_tol(dt, tu_maxabs(y, n)));
    rt_leaky_relu_backward(RT_LRELU_PRELU, outer, C, inner, dt, xs, gs, 0.0f, dys, dxs, dgs,
                           false, false);
    bad += tu_check("prelu dx", dxs, dt, dx, n, tu_tol(dt, tu_maxabs(dx, n)));
    bad += tu_check("prelu dgamma", dgs, dt, dg, (size_t)C, tu_tol(dt, tu_maxabs(dg, (size_t)C)));
    float *dx32 = tu_unpack(dxs, n, dt), *dg32 = tu_unpack(dgs, (size_t)C, dt);
    /* accumulate, and dgamma alone (dx NULL) */
    rt_leaky_relu_backward(RT_LRELU_PRELU, outer, C, inner, dt, xs, gs, 0.0f, dys, NULL, dgs,
                           false, true);
    for (int64_t i = 0; i < C; i++)
        dg[i] *= 2;
    bad += tu_check("prelu dgamma accumulate", dgs, dt, dg, (size_t)C,
                    tu_tol(dt, tu_maxabs(dg, (size_t)C)));
    if (fd) {
        bad += tu_fd_check("prelu x", c.x, n, dx32, prelu_loss, &c, 20, 1e-4, 1e-4, 1e-4);
        bad += tu_fd_check("prelu gamma", c.gamma, (size_t)C, dg32, prelu_loss, &c, 20, 1e-4,
                           1e-4, 1e-4);
    }
    free(c.x), free(c.gamma), free(c.dy), free(y), free(dx), free(dg), free(dx32), free(dg32);
    free(xs), free(gs), free(dys), free(ys), free(dxs), free(dgs);
    return bad;
}

static void test_prelu(void **state)
{
    (void)state;
    tu_seed(22);
    size_t bad = prelu_run(3, 4, 9, RT_F32, true) + prelu_run(2, 3, 600, RT_F32, true) +
                 prelu_run(3, 4, 9, RT_F16, false) + prelu_run(2, 3, 600, RT_F16, false) +
                 prelu_run(3, 4, 9, RT_BF16, false);
    assert_int_equal(bad, 0);
}

/* ---- Dropout ------------------------------------------------------------------ */

/* Random123's known-answer vectors for philox4x32-10. */
static void test_philox_kat(void **state)
{
    (void)state;
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        rt_philox4x32(kat[t], kat[t] + 4, out);
        for (int i = 0; i < 4; i++)
            assert_int_equal(out[i], kat[t][6 + i]);
    }
}

typedef struct {
    double *x, *m, *dy; /* input, mask*scale, weights */
    size_t n;
} DropCtx;

static double drop_loss(void *p)
{
    DropCtx *c = p;
    double s = 0;
    for (size_t i = 0; i < c->n; i++)
        s += c->x[i] * c->m[i] * c->dy[i];
    return s;
}

static void test_dropout(void **state)
{
    (void)state;
    tu_seed(23);
    const size_t n = 20003;
    const float p = 0.3f;
    const uint64_t seed = 42, step = 7;
    const uint32_t stream = 5;
    double *x = tu_dalloc(n), *dy = tu_dalloc(n), *y = tu_dalloc(n), *dx = tu_dalloc(n);
    size_t bad = 0;
    RtDType dts[] = TU_DTYPES;
    for (int t = 0; t < 3; t++) {
        RtDType dt = dts[t];
        tu_fill(x, n, -2, 2);
        tu_fill(dy, n, -1, 1);
        tu_round_all(x, n, dt);
        tu_round_all(dy, n, dt);
        size_t kept = 0;
        double scale = 1.0 / (1.0 - (double)p);
        for (size_t i = 0; i < n; i++) {
            bool keep = rt_dropout_uniform(seed, step, stream, i) >= p;
            kept += keep;
            y[i] = keep ? x[i] * scale : 0.0;
            dx[i] = keep ? dy[i] * scale : 0.0;
        }
        /* the keep rate is 1 - p within 4 standard deviations */
        double rate = (double)kept / (double)n, sd = sqrt(p * (1 - p) / (double)n);
        assert_true(fabs(rate - (1 - p)) < 4 * sd);
        void *xs = tu_pack(x, n, dt), *dys = tu_pack(dy, n, dt), *ys = tu_pack(x, n, dt),
             *dxs = tu_pack(x, n, dt), *y2 = tu_pack(x, n, dt);
        rt_dropout_forward(n, dt, xs, p, seed, step, stream, ys);
        bad += tu_check("dropout y", ys, dt, y, n, tu_tol(dt, 2));
        /* reproducible; another step or stream draws another mask */
        rt_dropout_forward(n, dt, xs, p, seed, step, stream, y2);
        assert_memory_equal(ys, y2, n * rt_dtype_size(dt));
        rt_dropout_forward(n, dt, xs, p, seed, step + 1, stream, y2);
        assert_memory_not_equal(ys, y2, n * rt_dtype_size(dt));
        rt_dropout_forward(n, dt, xs, p, seed, step, stream + 1, y2);
        assert_memory_not_equal(ys, y2, n * rt_dtype_size(dt));
        /* the backward regenerates the same mask */
        rt_dropout_backward(n, dt, dys, p, seed, step, stream, dxs, false);
        bad += tu_check("dropout dx", dxs, dt, dx, n, tu_tol(dt, 2));
        rt_dropout_backward(n, dt, dys, p, seed, step, stream, dxs, true);
        for (size_t i = 0; i < n; i++)
            dx[i] *= 2;
        bad += tu_check("dropout dx accumulate", dxs, dt, dx, n, tu_tol(dt, 2));
        if (dt == RT_F32) {
            /* with its mask fixed the forward is linear in x; the kernel's
             * overwritten gradient is dx/2 (dx was doubled above) */
            float *g = tu_falloc(n);
            DropCtx c = {x, tu_dalloc(n), dy, n};
            for (size_t i = 0; i < n; i++) {
                g[i] = (float)(dx[i] / 2);
                c.m[i] = rt_dropout_uniform(seed, step, stream, i) >= p ? scale : 0.0;
            }
            bad += tu_fd_check("dropout x", x, n, g, drop_loss, &c, 20, 1e-3, 1e-5, 1e-4);
            free(g);
            free(c.m);
        }
        free(xs), free(dys), free(ys), free(dxs), free(y2);
    }
    /* p = 0 is the identity */
    float v[5] = {1, -2, 3, -4, 5}, w[5];
    rt_dropout_forward(5, RT_F32, v, 0.0f, 1, 1, 1, w);
    assert_memory_equal(v, w, sizeof v);
    free(x), free(dy), free(y), free(dx);
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activation),
        cmocka_unit_test(test_leaky_relu),
        cmocka_unit_test(test_prelu),
        cmocka_unit_test(test_philox_kat),
        cmocka_unit_test(test_dropout),
    };
    return cmocka_run_group_tests_name("cpu_act", tests, NULL, NULL);
}
