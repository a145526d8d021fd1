/* test_cpu_pool.c - Pooling: max, avg (count_include_pad on and off), sum,
 * the valid and full conventions, padding, global pooling, 1-D to 3-D;
 * forward and backward against a naive reference and central differences. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_cpu_util.h"

/* ---- naive reference (MXNet's pool.h rules, axes padded at the end) ----------- */

typedef struct {
    int I[3], K[3], S[3], P[3], O[3];
    size_t in, out;
} PG;

static PG pg(const RtPoolDims *d)
{
    PG g;
    g.in = g.out = 1;
    for (int a = 0; a < 3; a++) {
        bool r = a < d->nsp;
        g.I[a] = r ? d->in[a] : 1;
        g.K[a] = r ? (d->global ? d->in[a] : d->kernel[a]) : 1;
        g.S[a] = r && !d->global ? d->stride[a] : 1;
        g.P[a] = r && !d->global ? d->pad[a] : 0;
        int span = g.I[a] + 2 * g.P[a] - g.K[a];
        g.O[a] = (d->full_convention ? (span + g.S[a] - 1) / g.S[a] : span / g.S[a]) + 1;
        g.in *= (size_t)g.I[a];
        g.out *= (size_t)g.O[a];
    }
    return g;
}

/* y from x, and (dy != NULL) dx from dy. */
static void ref_pool(const RtPoolDims *d, const double *x, double *y, const double *dy, double *dx)
{
    PG g = pg(d);
    if (dy)
        memset(dx, 0, (size_t)d->n * d->c * g.in * sizeof *dx);
    for (size_t pl = 0; pl < (size_t)d->n * d->c; pl++) {
        const double *xp = x + pl * g.in;
        for (int o0 = 0; o0 < g.O[0]; o0++)
            for (int o1 = 0; o1 < g.O[1]; o1++)
                for (int o2 = 0; o2 < g.O[2]; o2++) {
                    size_t oi = pl * g.out + ((size_t)o0 * g.O[1] + o1) * g.O[2] + o2;
                    int o[3] = {o0, o1, o2}, lo[3], hi[3];
                    long padded = 1, clipped = 1;
                    for (int a = 0; a < 3; a++) {
                        int s = o[a] * g.S[a] - g.P[a];
                        int e = s + g.K[a] < g.I[a] + g.P[a] ? s + g.K[a] : g.I[a] + g.P[a];
                        padded *= e - s;
                        lo[a] = s < 0 ? 0 : s;
                        hi[a] = e > g.I[a] ? g.I[a] : e;
                        clipped *= hi[a] - lo[a];
                    }
                    double acc = 0, best = -INFINITY;
                    size_t arg = 0;
                    bool any = false;
                    for (int i0 = lo[0]; i0 < hi[0]; i0++)
                        for (int i1 = lo[1]; i1 < hi[1]; i1++)
                            for (int i2 = lo[2]; i2 < hi[2]; i2++) {
                                size_t xi = ((size_t)i0 * g.I[1] + i1) * g.I[2] + i2;
                                acc += xp[xi];
                                if (!any || xp[xi] > best) {
                                    best = xp[xi];
                                    arg = xi;
                                }
                                any = true;
                            }
                    double div = d->type == RT_POOL_SUM ? 1
                               : d->count_include_pad ? (double)padded : (double)clipped;
                    /* a window with no input element (full convention, stride >
                     * kernel) gives 0: ampc's choice, MXNet would divide 0 by 0 */
                    if (y)
                        y[oi] = !any ? 0.0 : d->type == RT_POOL_MAX ? best : acc / div;
                    if (!dy || !any)
                        continue;
                    if (d->type == RT_POOL_MAX) {
                        dx[pl * g.in + arg] += dy[oi];
                    } else {
                        for (int i0 = lo[0]; i0 < hi[0]; i0++)
                            for (int i1 = lo[1]; i1 < hi[1]; i1++)
                                for (int i2 = lo[2]; i2 < hi[2]; i2++)
                                    dx[pl * g.in + ((size_t)i0 * g.I[1] + i1) * g.I[2] + i2] +=
                                        dy[oi] / div;
                    }
                }
    }
}

typedef struct {
    const RtPoolDims *d;
    double *x, *dy, *y;
    size_t yn;
} PoolCtx;

static double pool_loss(void *p)
{
    PoolCtx *c = p;
    ref_pool(c->d, c->x, c->y, NULL, NULL);
    return tu_dot(c->y, c->dy, c->yn);
}

static size_t pool_run(RtPoolDims d, const char *name, RtDType dt, bool fd)
{
    assert_true(rt_pool_dims_init(&d));
    PG g = pg(&d);
    for (int a = 0; a < d.nsp; a++)
        assert_int_equal(d.out[a], g.O[a]);
    size_t xn = (size_t)d.n * d.c * g.in, yn = (size_t)d.n * d.c * g.out;
    double *x = tu_dalloc(xn), *dy = tu_dalloc(yn), *y = tu_dalloc(yn), *dx = tu_dalloc(xn);
    /* distinct values 0.01 apart in a random order: no ties within a window,
     * so max pooling is differentiable at every sample */
    for (size_t i = 0; i < xn; i++)
        x[i] = -2.0 + 4.0 * (double)i / (double)xn;
    for (size_t i = xn; i > 1; i--) {
        size_t j = tu_index(i);
        double t = x[i - 1];
        x[i - 1] = x[j];
        x[j] = t;
    }
    tu_fill(dy, yn, -1, 1);
    tu_round_all(x, xn, dt);
    tu_round_all(dy, yn, dt);
    ref_pool(&d, x, y, dy, dx);
    void *xs = tu_pack(x, xn, dt), *dys = tu_pack(dy, yn, dt), *ys = tu_pack(y, yn, dt),
         *dxs = tu_pack(dx, xn, dt);
    size_t bad = 0;
    char nm[128];
    void *ws = tu_walloc(rt_pool_workspace_bytes(&d, dt, RT_PASS_FORWARD));
    rt_pool_forward(&d, dt, xs, ys, ws);
    free(ws);
    snprintf(nm, sizeof nm, "pool %s y", name);
    bad += tu_check(nm, ys, dt, y, yn, tu_tol(dt, tu_maxabs(y, yn)));
    ws = tu_walloc(rt_pool_workspace_bytes(&d, dt, RT_PASS_BACKWARD));
    memset(dxs, 0x55, xn * rt_dtype_size(dt));
    rt_pool_backward(&d, dt, d.type == RT_POOL_MAX ? xs : NULL, dys, dxs, false, ws);
    snprintf(nm, sizeof nm, "pool %s dx", name);
    bad += tu_check(nm, dxs, dt, dx, xn, tu_tol(dt, tu_maxabs(dx, xn)));
    float *dx32 = tu_unpack(dxs, xn, dt);
    rt_pool_backward(&d, dt, d.type == RT_POOL_MAX ? xs : NULL, dys, dxs, true, ws);
    double *dx2 = tu_dalloc(xn);
    for (size_t i = 0; i < xn; i++)
        dx2[i] = 2 * dx[i];
    snprintf(nm, sizeof nm, "pool %s dx accumulate", name);
    bad += tu_check(nm, dxs, dt, dx2, xn, tu_tol(dt, tu_maxabs(dx2, xn)));
    free(ws);
    if (fd) {
        PoolCtx c = {&d, x, dy, tu_dalloc(yn), yn};
        snprintf(nm, sizeof nm, "pool %s x", name);
        bad += tu_fd_check(nm, x, xn, dx32, pool_loss, &c, 20, 1e-4, 1e-5, 1e-4);
        free(c.y);
    }
    free(x), free(dy), free(y), free(dx), free(dx2), free(dx32);
    free(xs), free(dys), free(ys), free(dxs);
    return bad;
}

#define P2(t, k0, k1, s0, s1, p0, p1, full, cip)                                            \
    {.n = 2, .c = 3, .nsp = 2, .in = {9, 8}, .kernel = {k0, k1}, .stride = {s0, s1},         \
     .pad = {p0, p1}, .type = t, .full_convention = full, .count_include_pad = cip}

static const struct {
    RtPoolDims d;
    const char *name;
} pool_cases[] = {
    {P2(RT_POOL_MAX, 3, 3, 2, 2, 1, 1, false, true), "max-3x3-s2-p1"},
    {P2(RT_POOL_MAX, 3, 3, 2, 2, 1, 1, true, true), "max-3x3-s2-p1-full"},
    {P2(RT_POOL_AVG, 2, 2, 2, 2, 0, 0, false, true), "avg-2x2-s2"},
    {P2(RT_POOL_AVG, 3, 3, 2, 2, 1, 1, false, true), "avg-3x3-p1-incl"},
    {P2(RT_POOL_AVG, 3, 3, 2, 2, 1, 1, false, false), "avg-3x3-p1-excl"},
    {P2(RT_POOL_AVG, 3, 2, 2, 3, 1, 1, true, true), "avg-full-incl"},
    {P2(RT_POOL_AVG, 3, 2, 2, 3, 1, 1, true, false), "avg-full-excl"},
    {P2(RT_POOL_SUM, 2, 3, 1, 2, 1, 0, false, true), "sum-2x3-p1x0"},
    {P2(RT_POOL_SUM, 3, 3, 2, 2, 1, 1, true, true), "sum-full"},
    {{.n = 2, .c = 2, .nsp = 1, .in = {10}, .kernel = {3}, .stride = {2}, .pad = {1},
      .type = RT_POOL_MAX, .full_convention = true}, "max-1d-full"},
    {{.n = 2, .c = 2, .nsp = 1, .in = {11}, .kernel = {4}, .stride = {3}, .pad = {2},
      .type = RT_POOL_AVG, .count_include_pad = false}, "avg-1d-excl"},
    {{.n = 1, .c = 2, .nsp = 3, .in = {4, 5, 6}, .kernel = {2, 3, 2}, .stride = {2, 1, 2},
      .pad = {1, 1, 0}, .type = RT_POOL_AVG, .count_include_pad = true}, "avg-3d"},
    {{.n = 1, .c = 2, .nsp = 3, .in = {4, 5, 6}, .kernel = {2, 2, 3}, .stride = {1, 2, 2},
      .pad = {0, 1, 1}, .type = RT_POOL_MAX}, "max-3d"},
    {{.n = 2, .c = 3, .nsp = 2, .in = {7, 7}, .type = RT_POOL_AVG, .global = true}, "global-avg"},
    {{.n = 2, .c = 3, .nsp = 2, .in = {7, 7}, .type = RT_POOL_MAX, .global = true}, "global-max"},
    {{.n = 1, .c = 2, .nsp = 2, .in = {40, 30}, .type = RT_POOL_SUM, .global = true}, "global-sum"},
};
#define NPOOL (sizeof pool_cases / sizeof pool_cases[0])

static void test_pool_f32(void **state)
{
    (void)state;
    tu_seed(30);
    size_t bad = 0;
    for (size_t i = 0; i < NPOOL; i++)
        bad += pool_run(pool_cases[i].d, pool_cases[i].name, RT_F32, true);
    assert_int_equal(bad, 0);
}

static void test_pool_f16(void **state)
{
    (void)state;
    tu_seed(31);
    size_t bad = 0;
    for (size_t i = 0; i < NPOOL; i++)
        bad += pool_run(pool_cases[i].d, pool_cases[i].name, RT_F16, false);
    assert_int_equal(bad, 0);
}

static void test_pool_bf16(void **state)
{
    (void)state;
    tu_seed(32);
    size_t bad = pool_run(pool_cases[0].d, pool_cases[0].name, RT_BF16, false) +
                 pool_run(pool_cases[13].d, pool_cases[13].name, RT_BF16, false);
    assert_int_equal(bad, 0);
}

/* Global average pooling of fp16 data keeps the exact mean: 4096 values of
 * 1 + 2^-10 (one fp16 ulp above 1) average to exactly that, which an fp16
 * running sum could not reach. */
static void test_pool_global_avg_f16_accumulates_f32(void **state)
{
    (void)state;
    RtPoolDims d = {.n = 1, .c = 1, .nsp = 2, .in = {64, 64}, .type = RT_POOL_AVG, .global = true};
    assert_true(rt_pool_dims_init(&d));
    assert_int_equal(d.out[0], 1);
    assert_int_equal(d.kernel[0], 64);
    size_t n = 64 * 64;
    float *f = tu_falloc(n);
    for (size_t i = 0; i < n; i++)
        f[i] = 1.0f + 1.0f / 1024;
    uint16_t *h = malloc(n * 2), y;
    rt_from_f32(h, f, n, RT_F16);
    void *ws = tu_walloc(rt_pool_workspace_bytes(&d, RT_F16, RT_PASS_FORWARD));
    rt_pool_forward(&d, RT_F16, h, &y, ws);
    float r;
    rt_to_f32(&r, &y, 1, RT_F16);
    assert_true(r == 1.0f + 1.0f / 1024);
    free(ws), free(h), free(f);
}

static void test_pool_dims(void **state)
{
    (void)state;
    RtPoolDims v = {.n = 1, .c = 1, .nsp = 2, .in = {112, 112}, .kernel = {3, 3},
                    .stride = {2, 2}, .pad = {1, 1}, .type = RT_POOL_MAX};
    assert_true(rt_pool_dims_init(&v));
    assert_int_equal(v.out[0], 56); /* ResNet's stem pool */
    RtPoolDims f = {.n = 1, .c = 1, .nsp = 1, .in = {6}, .kernel = {3}, .stride = {2},
                    .type = RT_POOL_MAX};
    assert_true(rt_pool_dims_init(&f));
    assert_int_equal(f.out[0], 2); /* valid: floor(3/2)+1 */
    f.full_convention = true;
    assert_true(rt_pool_dims_init(&f));
    assert_int_equal(f.out[0], 3); /* full: ceil(3/2)+1 */
    RtPoolDims bad = {.n = 1, .c = 1, .nsp = 1, .in = {2}, .kernel = {3}, .stride = {1}};
    assert_false(rt_pool_dims_init(&bad));
    assert_int_equal(rt_pool_workspace_bytes(&v, RT_F32, RT_PASS_FORWARD), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_dims),
        cmocka_unit_test(test_pool_f32),
        cmocka_unit_test(test_pool_f16),
        cmocka_unit_test(test_pool_bf16),
        cmocka_unit_test(test_pool_global_avg_f16_accumulates_f32),
    };
    return cmocka_run_group_tests_name("cpu_pool", tests, NULL, NULL);
}
