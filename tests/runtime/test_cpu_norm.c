/* test_cpu_norm.c - BatchNorm: training forward (batch statistics), the
 * moving-statistics update (unbiased variance), inference forward, and the
 * backward with batch and with global statistics, fix_gamma, accumulation,
 * in the CPU's order and in the GPU's (RtBnDims.order); against a naive
 * double reference and central differences. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_cpu_util.h"

#define IDX(dd, o, cc, i) \
    (((size_t)(o) * (size_t)(dd).c + (size_t)(cc)) * (size_t)(dd).inner + (size_t)(i))

typedef struct {
    RtBnDims d;
    double *x, *gamma, *beta, *dy, *y, *mean, *var; /* mean/var: moving (global) or NULL */
    double eps;
    bool fix_gamma;
} BnCtx;

/* y from batch statistics (mean == NULL) or from the given statistics. */
static void ref_bn(const BnCtx *c, double *y, double *bmean, double *bvar)
{
    const RtBnDims d = c->d;
    double m = (double)d.outer * (double)d.inner;
    for (int64_t ch = 0; ch < d.c; ch++) {
        double mu, var;
        if (c->mean) {
            mu = c->mean[ch];
            var = c->var[ch];
        } else {
            double s = 0, q = 0;
            for (int64_t o = 0; o < d.outer; o++)
                for (int64_t i = 0; i < d.inner; i++)
                    s += c->x[IDX(d, o, ch, i)];
            mu = s / m;
            for (int64_t o = 0; o < d.outer; o++)
                for (int64_t i = 0; i < d.inner; i++)
                    q += (c->x[IDX(d, o, ch, i)] - mu) * (c->x[IDX(d, o, ch, i)] - mu);
            var = q / m;
        }
        if (bmean)
            bmean[ch] = mu;
        if (bvar)
            bvar[ch] = var;
        double g = c->fix_gamma ? 1.0 : c->gamma[ch];
        for (int64_t o = 0; o < d.outer; o++)
            for (int64_t i = 0; i < d.inner; i++)
                y[IDX(d, o, ch, i)] =
                    g * (c->x[IDX(d, o, ch, i)] - mu) / sqrt(var + c->eps) + c->beta[ch];
    }
}

static double bn_loss(void *p)
{
    BnCtx *c = p;
    ref_bn(c, c->y, NULL, NULL);
    return tu_dot(c->y, c->dy, (size_t)(c->d.outer * c->d.c * c->d.inner));
}

/* The textbook backward, in double. */
static void ref_bn_backward(const BnCtx *c, double *dx, double *dgamma, double *dbeta)
{
    const RtBnDims d = c->d;
    double m = (double)d.outer * (double)d.inner;
    double *mu = tu_dalloc(d.c), *var = tu_dalloc(d.c), *y = tu_dalloc(d.outer * d.c * d.inner);
    ref_bn(c, y, mu, var);
    for (int64_t ch = 0; ch < d.c; ch++) {
        double is = 1.0 / sqrt(var[ch] + c->eps), g = c->fix_gamma ? 1.0 : c->gamma[ch];
        double sdy = 0, sdyx = 0;
        for (int64_t o = 0; o < d.outer; o++)
            for (int64_t i = 0; i < d.inner; i++) {
                size_t k = IDX(d, o, ch, i);
                sdy += c->dy[k];
                sdyx += c->dy[k] * (c->x[k] - mu[ch]) * is;
            }
        dbeta[ch] = sdy;
        dgamma[ch] = c->fix_gamma ? 0.0 : sdyx;
        for (int64_t o = 0; o < d.outer; o++)
            for (int64_t i = 0; i < d.inner; i++) {
                size_t k = IDX(d, o, ch, i);
                double xh = (c->x[k] - mu[ch]) * is;
                dx[k] = c->mean ? g * is * c->dy[k]
                                : g * is * (c->dy[k] - sdy / m - xh * sdyx / m);
            }
    }
    free(mu), free(var), free(y);
}

static float *to_f(const double *x, size_t n)
{
    float *f = tu_falloc(n);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)x[i];
    return f;
}

static size_t check_f(const char *name, const float *got, const double *ref, size_t n, TuTol t)
{
    return tu_check(name, got, RT_F32, ref, n, t);
}

static size_t bn_run(RtBnDims d, RtDType dt, bool fix_gamma, bool global, bool fd)
{
    size_t n = (size_t)(d.outer * d.c * d.inner), C = (size_t)d.c;
    BnCtx c = {.d = d, .eps = 1e-5, .fix_gamma = fix_gamma};
    c.x = tu_dalloc(n);
    c.dy = tu_dalloc(n);
    c.y = tu_dalloc(n);
    c.gamma = tu_dalloc(C);
    c.beta = tu_dalloc(C);
    /* channels with different means and spreads */
    for (int64_t ch = 0; ch < d.c; ch++) {
        double mu = tu_uniform(-2, 2), sp = tu_uniform(0.5, 2);
        for (int64_t o = 0; o < d.outer; o++)
            for (int64_t i = 0; i < d.inner; i++)
                c.x[IDX(d, o, ch, i)] = mu + sp * tu_uniform(-1, 1);
    }
    tu_fill(c.dy, n, -1, 1);
    tu_fill(c.gamma, C, 0.5, 1.5);
    tu_fill(c.beta, C, -1, 1);
    tu_round_all(c.x, n, dt);
    tu_round_all(c.dy, n, dt);
    tu_round_all(c.gamma, C, RT_F32);
    tu_round_all(c.beta, C, RT_F32);
    double *mm = tu_dalloc(C), *mv = tu_dalloc(C);
    tu_fill(mm, C, -1, 1);
    tu_fill(mv, C, 0.5, 2);
    tu_round_all(mm, C, RT_F32);
    tu_round_all(mv, C, RT_F32);
    if (global) {
        c.mean = mm;
        c.var = mv;
    }

    double *y = tu_dalloc(n), *bmean = tu_dalloc(C), *bvar = tu_dalloc(C);
    ref_bn(&c, y, bmean, bvar);
    double *dx = tu_dalloc(n), *dg = tu_dalloc(C), *dbt = tu_dalloc(C);
    ref_bn_backward(&c, dx, dg, dbt);

    void *xs = tu_pack(c.x, n, dt), *dys = tu_pack(c.dy, n, dt), *ys = tu_pack(y, n, dt),
         *dxs = tu_pack(dx, n, dt);
    float *g32 = to_f(c.gamma, C), *b32 = to_f(c.beta, C), *mm32 = to_f(mm, C),
          *mv32 = to_f(mv, C), *smean = tu_falloc(C), *sinv = tu_falloc(C),
          *dg32 = tu_falloc(C), *db32 = tu_falloc(C);
    size_t bad = 0;
    char nm[128];
    const char *mode = global ? "global" : fix_gamma ? "fix_gamma" : "batch";

    if (global) {
        rt_batchnorm_forward_inference(&d, dt, xs, fix_gamma ? NULL : g32, b32, mm32, mv32,
                                       (float)c.eps, fix_gamma, ys, smean, sinv);
    } else {
        rt_batchnorm_forward_train(&d, dt, xs, fix_gamma ? NULL : g32, b32, (float)c.eps,
                                   fix_gamma, ys, smean, sinv);
    }
    snprintf(nm, sizeof nm, "bn %s y", mode);
    bad += tu_check(nm, ys, dt, y, n, tu_tol(dt, tu_maxabs(y, n)));
    double *is = tu_dalloc(C);
    for (size_t i = 0; i < C; i++)
        is[i] = 1.0 / sqrt(bvar[i] + c.eps);
    bad += check_f("bn save_mean", smean, bmean, C, tu_tol(RT_F32, 1));
    bad += check_f("bn save_invstd", sinv, is, C, tu_tol(RT_F32, 1));

    if (!global) {
        /* moving statistics: momentum on the old value, unbiased variance */
        float momentum = 0.9f;
        double m = (double)(d.outer * d.inner);
        double *em = tu_dalloc(C), *ev = tu_dalloc(C);
        for (size_t i = 0; i < C; i++) {
            em[i] = mm[i] * momentum + bmean[i] * (1 - momentum);
            ev[i] = mv[i] * momentum + bvar[i] * m / (m - 1) * (1 - momentum);
        }
        rt_batchnorm_update_moving(d.c, d.outer * d.inner, smean, sinv, (float)c.eps, momentum,
                                   mm32, mv32, NULL);
        bad += check_f("bn moving_mean", mm32, em, C, tu_tol(RT_F32, 1));
        bad += check_f("bn moving_var", mv32, ev, C, tu_tol(RT_F32, 1));
        free(em), free(ev);
    }

    /* backward: dx overwritten (garbage first), params overwritten */
    memset(dxs, 0x55, n * rt_dtype_size(dt));
    for (size_t i = 0; i < C; i++)
        dg32[i] = db32[i] = 123.0f;
    rt_batchnorm_backward(&d, dt, xs, dys, fix_gamma ? NULL : g32, smean, sinv, fix_gamma,
                          global, dxs, dg32, db32, false, false);
    snprintf(nm, sizeof nm, "bn %s dx", mode);
    bad += tu_check(nm, dxs, dt, dx, n, tu_tol(dt, tu_maxabs(dx, n)));
    /* 16-bit data: the sums see the rounded x and dy, so fp16 tolerance */
    TuTol tp = tu_tol(dt, tu_maxabs(dbt, C) + tu_maxabs(dg, C));
    snprintf(nm, sizeof nm, "bn %s dgamma", mode);
    bad += check_f(nm, dg32, dg, C, tp);
    snprintf(nm, sizeof nm, "bn %s dbeta", mode);
    bad += check_f(nm, db32, dbt, C, tp);
    float *dx32 = tu_unpack(dxs, n, dt);
    float *dgf = tu_falloc(C), *dbf = tu_falloc(C);
    memcpy(dgf, dg32, C * sizeof(float));
    memcpy(dbf, db32, C * sizeof(float));

    /* accumulate: dx and the parameters twice */
    rt_batchnorm_backward(&d, dt, xs, dys, fix_gamma ? NULL : g32, smean, sinv, fix_gamma,
                          global, dxs, dg32, db32, true, true);
    for (size_t i = 0; i < n; i++)
        dx[i] *= 2;
    for (size_t i = 0; i < C; i++)
        dg[i] *= 2, dbt[i] *= 2;
    snprintf(nm, sizeof nm, "bn %s dx accumulate", mode);
    bad += tu_check(nm, dxs, dt, dx, n, tu_tol(dt, tu_maxabs(dx, n)));
    bad += check_f("bn dgamma accumulate", dg32, dg, C, tp);
    bad += check_f("bn dbeta accumulate", db32, dbt, C, tp);

    if (fd) {
        snprintf(nm, sizeof nm, "bn %s x", mode);
        bad += tu_fd_check(nm, c.x, n, dx32, bn_loss, &c, 20, 1e-4, 1e-4, 1e-3);
        snprintf(nm, sizeof nm, "bn %s gamma", mode);
        bad += tu_fd_check(nm, c.gamma, C, dgf, bn_loss, &c, 20, 1e-4, 1e-4, 1e-3);
        snprintf(nm, sizeof nm, "bn %s beta", mode);
        bad += tu_fd_check(nm, c.beta, C, dbf, bn_loss, &c, 20, 1e-4, 1e-4, 1e-3);
    }
    free(dx32), free(dgf), free(dbf), free(is);
    free(c.x), free(c.dy), free(c.y), free(c.gamma), free(c.beta), free(mm), free(mv);
    free(y), free(bmean), free(bvar), free(dx), free(dg), free(dbt);
    free(xs), free(dys), free(ys), free(dxs);
    free(g32), free(b32), free(mm32), free(mv32), free(smean), free(sinv), free(dg32), free(db32);
    return bad;
}

static const RtBnDims bn_shapes[] = {
    {.outer = 3, .c = 4, .inner = 10},  /* NCHW */
    {.outer = 8, .c = 5, .inner = 1},   /* [N, C] after a dense layer */
    {.outer = 2, .c = 2, .inner = 700}, /* planes longer than a chunk */
};

static void test_bn_f32(void **state)
{
    (void)state;
    tu_seed(10);
    size_t bad = 0;
    for (int s = 0; s < 3; s++) {
        bad += bn_run(bn_shapes[s], RT_F32, false, false, true);
        bad += bn_run(bn_shapes[s], RT_F32, true, false, true);
        bad += bn_run(bn_shapes[s], RT_F32, false, true, true);
    }
    assert_int_equal(bad, 0);
}

static void test_bn_f16(void **state)
{
    (void)state;
    tu_seed(11);
    size_t bad = 0;
    for (int s = 0; s < 3; s++) {
        bad += bn_run(bn_shapes[s], RT_F16, false, false, false);
        bad += bn_run(bn_shapes[s], RT_F16, false, true, false);
    }
    bad += bn_run(bn_shapes[0], RT_F16, true, false, false);
    assert_int_equal(bad, 0);
}

static void test_bn_bf16(void **state)
{
    (void)state;
    tu_seed(12);
    assert_int_equal(bn_run(bn_shapes[0], RT_BF16, false, false, false), 0);
}

/* The GPU's order (RT_BN_ORDER_TILED, kernels/bn_tree.h), which the CUDA
 * kernels follow bit for bit, is the same BatchNorm: against the double
 * reference and central differences, and with more tiles than 32 (the
 * second level's lanes wrap) and a short last tile. */
static void test_bn_tiled(void **state)
{
    (void)state;
    tu_seed(13);
    size_t bad = 0;
    for (int s = 0; s < 3; s++) {
        RtBnDims d = bn_shapes[s];
        d.order = RT_BN_ORDER_TILED;
        bad += bn_run(d, RT_F32, false, false, true);
        bad += bn_run(d, RT_F32, true, false, false);
        bad += bn_run(d, RT_F32, false, true, false);
        bad += bn_run(d, RT_F16, false, false, false);
    }
    RtBnDims many = {.outer = 9001, .c = 3, .inner = 1, .order = RT_BN_ORDER_TILED};
    bad += bn_run(many, RT_F32, false, false, false);
    bad += bn_run(many, RT_BF16, false, false, false);
    assert_int_equal(bad, 0);
}

/* A count of 1 uses the biased variance instead of dividing by 0; a step
 * the step's state skips (its flag set under a dynamic scale) leaves the
 * statistics alone, a flag without a dynamic scale does not. */
static void test_bn_moving_count1(void **state)
{
    (void)state;
    float mean = 2.0f, invstd = 1.0f / sqrtf(4.0f + 1e-5f), mm = 0.0f, mv = 1.0f;
    RtStepState skip = {.scale = 1, .flag = 1, .dynamic = 1};
    rt_batchnorm_update_moving(1, 1, &mean, &invstd, 1e-5f, 0.9f, &mm, &mv, &skip);
    assert_true(mm == 0.0f && mv == 1.0f);
    RtStepState fixed = {.scale = 1, .flag = 1, .dynamic = 0};
    rt_batchnorm_update_moving(1, 1, &mean, &invstd, 1e-5f, 0.9f, &mm, &mv, &fixed);
    assert_float_equal(mm, 0.2f, 1e-6);
    assert_float_equal(mv, 0.9f + 0.4f, 1e-5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bn_f32),           cmocka_unit_test(test_bn_f16),
        cmocka_unit_test(test_bn_bf16),          cmocka_unit_test(test_bn_tiled),
        cmocka_unit_test(test_bn_moving_count1),
    };
    return cmocka_run_group_tests_name("cpu_norm", tests, NULL, NULL);
}
