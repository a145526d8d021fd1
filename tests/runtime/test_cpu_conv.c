/* test_cpu_conv.c - Convolution (1-D, 2-D, 3-D; groups, stride, pad,
 * dilation, bias, the pointwise fast path) and FullyConnected, forward and
 * backward, against naive double references and central differences. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_cpu_util.h"

/* ---- naive reference ------------------------------------------------------- */

/* Spatial axes padded at the END with size-1 axes (the kernel pads in front,
 * so the two index differently). */
typedef struct {
    int I[3], K[3], S[3], P[3], D[3], O[3];
    size_t in, out, kk;
} RGeom;

static RGeom rgeom(const RtConvDims *d)
{
    RGeom g;
    g.in = g.out = g.kk = 1;
    for (int a = 0; a < 3; a++) {
        bool r = a < d->nsp;
        g.I[a] = r ? d->in[a] : 1;
        g.K[a] = r ? d->kernel[a] : 1;
        g.S[a] = r ? d->stride[a] : 1;
        g.P[a] = r ? d->pad[a] : 0;
        g.D[a] = r ? d->dilate[a] : 1;
        g.O[a] = r ? (g.I[a] + 2 * g.P[a] - g.D[a] * (g.K[a] - 1) - 1) / g.S[a] + 1 : 1;
        g.in *= (size_t)g.I[a];
        g.out *= (size_t)g.O[a];
        g.kk *= (size_t)g.K[a];
    }
    return g;
}

/* Forward (y, when not NULL) and backward (dx, dw, db from dy, when dy is
 * not NULL; zeroed here).  Every (n, k, output, c', tap) term once. */
static void ref_conv(const RtConvDims *d, const double *x, const double *w, const double *b,
                     double *y, const double *dy, double *dx, double *dw, double *db)
{
    RGeom g = rgeom(d);
    int cg = d->c / d->groups, kg = d->k / d->groups;
    if (dy) {
        memset(dx, 0, (size_t)d->n * d->c * g.in * sizeof *dx);
        memset(dw, 0, (size_t)d->k * cg * g.kk * sizeof *dw);
        if (db)
            memset(db, 0, (size_t)d->k * sizeof *db);
    }
    for (int n = 0; n < d->n; n++)
        for (int k = 0; k < d->k; k++) {
            int grp = k / kg;
            for (int o0 = 0; o0 < g.O[0]; o0++)
                for (int o1 = 0; o1 < g.O[1]; o1++)
                    for (int o2 = 0; o2 < g.O[2]; o2++) {
                        size_t oi = (((size_t)n * d->k + k) * g.O[0] + o0) * g.O[1] * g.O[2] +
                                    (size_t)o1 * g.O[2] + o2;
                        double acc = b ? b[k] : 0.0;
                        for (int cc = 0; cc < cg; cc++) {
                            int c = grp * cg + cc;
                            for (int a0 = 0; a0 < g.K[0]; a0++)
                                for (int a1 = 0; a1 < g.K[1]; a1++)
                                    for (int a2 = 0; a2 < g.K[2]; a2++) {
                                        int i0 = o0 * g.S[0] - g.P[0] + a0 * g.D[0];
                                        int i1 = o1 * g.S[1] - g.P[1] + a1 * g.D[1];
                                        int i2 = o2 * g.S[2] - g.P[2] + a2 * g.D[2];
                                        if (i0 < 0 || i0 >= g.I[0] || i1 < 0 || i1 >= g.I[1] ||
                                            i2 < 0 || i2 >= g.I[2])
                                            continue;
                                        size_t xi = (((size_t)n * d->c + c) * g.I[0] + i0) *
                                                        g.I[1] * g.I[2] +
                                                    (size_t)i1 * g.I[2] + i2;
                                        size_t wi = (((size_t)k * cg + cc) * g.K[0] + a0) *
                                                        g.K[1] * g.K[2] +
                                                    (size_t)a1 * g.K[2] + a2;
                                        if (y)
                                            acc += w[wi] * x[xi];
                                        if (dy) {
                                            dx[xi] += w[wi] * dy[oi];
                                            dw[wi] += x[xi] * dy[oi];
                                        }
                                    }
                        }
                        if (y)
                            y[oi] = acc;
                        if (dy && db)
                            db[k] += dy[oi];
                    }
        }
}

/* ---- one configuration -------------------------------------------------------- */

typedef struct {
    RtConvDims d;
    bool bias;
    const char *name;
} ConvCase;

typedef struct {
    const RtConvDims *d;
    double *x, *w, *b, *dy, *y;
    size_t yn;
} ConvCtx;

static double conv_loss(void *p)
{
    ConvCtx *c = p;
    ref_conv(c->d, c->x, c->w, c->b, c->y, NULL, NULL, NULL, NULL);
    return tu_dot(c->y, c->dy, c->yn);
}

static size_t conv_run(ConvCase cc, RtDType dt, bool fd)
{
    RtConvDims d = cc.d;
    assert_true(rt_conv_dims_init(&d));
    RGeom g = rgeom(&d);
    for (int a = 0; a < d.nsp; a++)
        assert_int_equal(d.out[a], g.O[a]);
    size_t xn = (size_t)d.n * d.c * g.in, wn = (size_t)d.k * (d.c / d.groups) * g.kk,
           yn = (size_t)d.n * d.k * g.out, bn = (size_t)d.k;
    double *x = tu_dalloc(xn), *w = tu_dalloc(wn), *b = tu_dalloc(bn), *dy = tu_dalloc(yn);
    tu_fill(x, xn, -1, 1);
    tu_fill(w, wn, -1, 1);
    tu_fill(b, bn, -1, 1);
    tu_fill(dy, yn, -1, 1);
    tu_round_all(x, xn, dt);
    tu_round_all(w, wn, dt);
    tu_round_all(b, bn, dt);
    tu_round_all(dy, yn, dt);
    double *bb = cc.bias ? b : NULL;

    double *y = tu_dalloc(yn), *dx = tu_dalloc(xn), *dw = tu_dalloc(wn), *db = tu_dalloc(bn);
    ref_conv(&d, x, w, bb, y, dy, dx, dw, bb ? db : NULL);

    void *xs = tu_pack(x, xn, dt), *ws_ = tu_pack(w, wn, dt), *bs = tu_pack(b, bn, dt),
         *dys = tu_pack(dy, yn, dt);
    void *ys = tu_pack(y, yn, dt), *dxs = tu_pack(dx, xn, dt), *dws = tu_pack(dw, wn, dt),
         *dbs = tu_pack(db, bn, dt);
    size_t bad = 0;
    char nm[128];

    /* forward */
    void *wsp = tu_walloc(rt_conv_workspace_bytes(&d, dt, RT_PASS_FORWARD));
    rt_conv_forward(&d, dt, xs, ws_, cc.bias ? bs : NULL, ys, wsp);
    free(wsp);
    snprintf(nm, sizeof nm, "conv %s y", cc.name);
    bad += tu_check(nm, ys, dt, y, yn, tu_tol(dt, tu_maxabs(y, yn)));

    /* backward data, overwrite then accumulate onto a prefilled gradient */
    wsp = tu_walloc(rt_conv_workspace_bytes(&d, dt, RT_PASS_BACKWARD));
    memset(dxs, 0x7f, xn * rt_dtype_size(dt)); /* garbage: must be overwritten */
    rt_conv_backward_data(&d, dt, ws_, dys, dxs, false, wsp);
    snprintf(nm, sizeof nm, "conv %s dx", cc.name);
    TuTol tdx = tu_tol(dt, tu_maxabs(dx, xn));
    bad += tu_check(nm, dxs, dt, dx, xn, tdx);
    float *dx32 = tu_unpack(dxs, xn, dt);
    double *pre = tu_dalloc(xn), *sum = tu_dalloc(xn);
    tu_fill(pre, xn, -1, 1);
    tu_round_all(pre, xn, dt);
    for (size_t i = 0; i < xn; i++)
        sum[i] = pre[i] + dx[i];
    void *acc = tu_pack(pre, xn, dt);
    rt_conv_backward_data(&d, dt, ws_, dys, acc, true, wsp);
    snprintf(nm, sizeof nm, "conv %s dx accumulate", cc.name);
    bad += tu_check(nm, acc, dt, sum, xn, tu_tol(dt, tu_maxabs(sum, xn)));
    free(acc);
    free(pre);
    free(sum);
    free(wsp);

    /* backward weight (+ bias) */
    wsp = tu_walloc(rt_conv_workspace_bytes(&d, dt, RT_PASS_BACKWARD_WEIGHT));
    rt_conv_backward_weight(&d, dt, xs, dys, dws, cc.bias ? dbs : NULL, false, wsp);
    snprintf(nm, sizeof nm, "conv %s dw", cc.name);
    bad += tu_check(nm, dws, dt, dw, wn, tu_tol(dt, tu_maxabs(dw, wn)));
    if (cc.bias) {
        snprintf(nm, sizeof nm, "conv %s dbias", cc.name);
        bad += tu_check(nm, dbs, dt, db, bn, tu_tol(dt, tu_maxabs(db, bn)));
    }
    float *dw32 = tu_unpack(dws, wn, dt), *db32 = tu_unpack(dbs, bn, dt);
    /* accumulate: dw twice = 2*dw */
    rt_conv_backward_weight(&d, dt, xs, dys, dws, cc.bias ? dbs : NULL, true, wsp);
    double *dw2 = tu_dalloc(wn), *db2 = tu_dalloc(bn);
    for (size_t i = 0; i < wn; i++)
        dw2[i] = 2 * dw[i];
    for (size_t i = 0; i < bn; i++)
        db2[i] = 2 * db[i];
    snprintf(nm, sizeof nm, "conv %s dw accumulate", cc.name);
    bad += tu_check(nm, dws, dt, dw2, wn, tu_tol(dt, tu_maxabs(dw2, wn)));
    if (cc.bias) {
        snprintf(nm, sizeof nm, "conv %s dbias accumulate", cc.name);
        bad += tu_check(nm, dbs, dt, db2, bn, tu_tol(dt, tu_maxabs(db2, bn)));
    }
    free(dw2);
    free(db2);
    free(wsp);

    if (fd) {
        ConvCtx c = {&d, x, w, bb, dy, tu_dalloc(yn), yn};
        double s = tu_maxabs(dx, xn);
        snprintf(nm, sizeof nm, "conv %s x", cc.name);
        bad += tu_fd_check(nm, x, xn, dx32, conv_loss, &c, 20, 1e-3, 1e-4 * (s + 1), 1e-4);
        snprintf(nm, sizeof nm, "conv %s w", cc.name);
        bad += tu_fd_check(nm, w, wn, dw32, conv_loss, &c, 20, 1e-3,
                           1e-4 * (tu_maxabs(dw, wn) + 1), 1e-4);
        if (cc.bias) {
            snprintf(nm, sizeof nm, "conv %s bias", cc.name);
            bad += tu_fd_check(nm, b, bn, db32, conv_loss, &c, 20, 1e-3,
                               1e-4 * (tu_maxabs(db, bn) + 1), 1e-4);
        }
        free(c.y);
    }
    free(dx32);
    free(dw32);
    free(db32);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
    free(xs), free(ws_), free(bs), free(dys), free(ys), free(dxs), free(dws), free(dbs);
    return bad;
}

static const ConvCase conv_cases[] = {
    /* 2-D, 2 groups, stride 2, pad 1, bias */
    {{.n = 2, .c = 4, .k = 6, .groups = 2, .nsp = 2, .in = {7, 6}, .kernel = {3, 3},
      .stride = {2, 2}, .pad = {1, 1}, .dilate = {1, 1}}, true, "2d-g2-s2-p1"},
    /* 2-D, dilation 2, asymmetric kernel, pad 2 */
    {{.n = 2, .c = 3, .k = 4, .groups = 1, .nsp = 2, .in = {8, 7}, .kernel = {3, 2},
      .stride = {1, 1}, .pad = {2, 1}, .dilate = {2, 3}}, true, "2d-d2-p2"},
    /* 2-D, stride 2 and dilation 2 and 3 groups, no bias */
    {{.n = 1, .c = 6, .k = 3, .groups = 3, .nsp = 2, .in = {9, 9}, .kernel = {3, 3},
      .stride = {2, 3}, .pad = {2, 0}, .dilate = {2, 1}}, false, "2d-g3-s2x3-d2"},
    /* 1-D depthwise with dilation, no bias */
    {{.n = 2, .c = 4, .k = 4, .groups = 4, .nsp = 1, .in = {11}, .kernel = {3}, .stride = {1},
      .pad = {1}, .dilate = {2}}, false, "1d-depthwise-d2"},
    /* 1-D, stride 2 */
    {{.n = 3, .c = 2, .k = 5, .groups = 1, .nsp = 1, .in = {10}, .kernel = {4}, .stride = {2},
      .pad = {1}, .dilate = {1}}, true, "1d-s2"},
    /* pointwise (the no-im2col fast path) */
    {{.n = 2, .c = 8, .k = 5, .groups = 1, .nsp = 2, .in = {5, 4}, .kernel = {1, 1},
      .stride = {1, 1}, .pad = {0, 0}, .dilate = {1, 1}}, true, "2d-1x1"},
    /* pointwise with groups */
    {{.n = 2, .c = 8, .k = 4, .groups = 2, .nsp = 2, .in = {3, 3}, .kernel = {1, 1},
      .stride = {1, 1}, .pad = {0, 0}, .dilate = {1, 1}}, false, "2d-1x1-g2"},
    /* 1x1 stride 2 (a ResNet downsample: im2col path) */
    {{.n = 2, .c = 4, .k = 6, .groups = 1, .nsp = 2, .in = {6, 7}, .kernel = {1, 1},
      .stride = {2, 2}, .pad = {0, 0}, .dilate = {1, 1}}, true, "2d-1x1-s2"},
    /* 3-D with everything */
    {{.n = 1, .c = 2, .k = 4, .groups = 2, .nsp = 3, .in = {4, 5, 4}, .kernel = {2, 3, 2},
      .stride = {1, 2, 1}, .pad = {1, 0, 1}, .dilate = {1, 1, 2}}, true, "3d-g2"},
};
#define NCONV (sizeof conv_cases / sizeof conv_cases[0])

static void test_conv_f32(void **state)
{
    (void)state;
    tu_seed(1);
    size_t bad = 0;
    for (size_t i = 0; i < NCONV; i++)
        bad += conv_run(conv_cases[i], RT_F32, true);
    assert_int_equal(bad, 0);
}

static void test_conv_f16(void **state)
{
    (void)state;
    tu_seed(2);
    size_t bad = 0;
    for (size_t i = 0; i < NCONV; i++)
        bad += conv_run(conv_cases[i], RT_F16, false);
    assert_int_equal(bad, 0);
}

static void test_conv_bf16(void **state)
{
    (void)state;
    tu_seed(3);
    size_t bad = conv_run(conv_cases[0], RT_BF16, false) + conv_run(conv_cases[5], RT_BF16, false);
    assert_int_equal(bad, 0);
}

/* A ResNet-like stem layer: checks the workspace query and the output size. */
static void test_conv_dims(void **state)
{
    (void)state;
    RtConvDims d = {.n = 2, .c = 3, .k = 32, .groups = 1, .nsp = 2, .in = {224, 224},
                    .kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}, .dilate = {1, 1}};
    assert_true(rt_conv_dims_init(&d));
    assert_int_equal(d.out[0], 112);
    assert_int_equal(d.out[1], 112);
    assert_int_equal(d.out[2], 1);
    /* im2col [27, 112*112] floats */
    assert_true(rt_conv_workspace_bytes(&d, RT_F32, RT_PASS_FORWARD) >= 27u * 112 * 112 * 4);
    /* pointwise fp32: no scratch */
    RtConvDims p = {.n = 1, .c = 4, .k = 4, .groups = 1, .nsp = 2, .in = {3, 3},
                    .kernel = {1, 1}, .stride = {1, 1}, .pad = {0, 0}, .dilate = {1, 1}};
    assert_true(rt_conv_dims_init(&p));
    assert_int_equal(rt_conv_workspace_bytes(&p, RT_F32, RT_PASS_FORWARD), 0);
    /* invalid: channels not divisible by groups, window larger than input */
    RtConvDims bad = d;
    bad.groups = 2;
    assert_false(rt_conv_dims_init(&bad));
    bad = d;
    bad.in[0] = 1;
    bad.pad[0] = 0;
    assert_false(rt_conv_dims_init(&bad));
}

/* ---- FullyConnected ------------------------------------------------------------ */

typedef struct {
    RtFcDims d;
    double *x, *w, *b, *dy, *y;
} FcCtx;

static void ref_fc(const RtFcDims *d, const double *x, const double *w, const double *b,
                   double *y)
{
    for (int i = 0; i < d->n; i++)
        for (int h = 0; h < d->hidden; h++) {
            double s = b ? b[h] : 0.0;
            for (int k = 0; k < d->in; k++)
                s += x[(size_t)i * d->in + k] * w[(size_t)h * d->in + k];
            y[(size_t)i * d->hidden + h] = s;
        }
}

static double fc_loss(void *p)
{
    FcCtx *c = p;
    ref_fc(&c->d, c->x, c->w, c->b, c->y);
    return tu_dot(c->y, c->dy, (size_t)c->d.n * c->d.hidden);
}

static size_t fc_run(RtFcDims d, bool bias, RtDType dt, bool fd)
{
    size_t xn = (size_t)d.n * d.in, wn = (size_t)d.hidden * d.in, yn = (size_t)d.n * d.hidden;
    double *x = tu_dalloc(xn), *w = tu_dalloc(wn), *b = tu_dalloc(d.hidden), *dy = tu_dalloc(yn);
    tu_fill(x, xn, -1, 1);
    tu_fill(w, wn, -1, 1);
    tu_fill(b, d.hidden, -1, 1);
    tu_fill(dy, yn, -1, 1);
    tu_round_all(x, xn, dt);
    tu_round_all(w, wn, dt);
    tu_round_all(b, d.hidden, dt);
    tu_round_all(dy, yn, dt);
    double *y = tu_dalloc(yn), *dx = tu_dalloc(xn), *dw = tu_dalloc(wn), *db = tu_dalloc(d.hidden);
    ref_fc(&d, x, w, bias ? b : NULL, y);
    for (int i = 0; i < d.n; i++)
        for (int h = 0; h < d.hidden; h++) {
            double g = dy[(size_t)i * d.hidden + h];
            db[h] += g;
            for (int k = 0; k < d.in; k++) {
                dx[(size_t)i * d.in + k] += g * w[(size_t)h * d.in + k];
                dw[(size_t)h * d.in + k] += g * x[(size_t)i * d.in + k];
            }
        }
    void *xs = tu_pack(x, xn, dt), *wss = tu_pack(w, wn, dt), *bs = tu_pack(b, d.hidden, dt),
         *dys = tu_pack(dy, yn, dt), *ys = tu_pack(y, yn, dt), *dxs = tu_pack(x, xn, dt),
         *dws = tu_pack(w, wn, dt), *dbs = tu_pack(b, d.hidden, dt);
    size_t bad = 0;
    void *wsp = tu_walloc(rt_fc_workspace_bytes(&d, dt, RT_PASS_FORWARD));
    rt_fc_forward(&d, dt, xs, wss, bias ? bs : NULL, ys, wsp);
    free(wsp);
    bad += tu_check("fc y", ys, dt, y, yn, tu_tol(dt, tu_maxabs(y, yn)));
    wsp = tu_walloc(rt_fc_workspace_bytes(&d, dt, RT_PASS_BACKWARD));
    rt_fc_backward_data(&d, dt, wss, dys, dxs, false, wsp);
    bad += tu_check("fc dx", dxs, dt, dx, xn, tu_tol(dt, tu_maxabs(dx, xn)));
    float *dx32 = tu_unpack(dxs, xn, dt);
    rt_fc_backward_data(&d, dt, wss, dys, dxs, true, wsp);
    for (size_t i = 0; i < xn; i++)
        dx[i] *= 2;
    bad += tu_check("fc dx accumulate", dxs, dt, dx, xn, tu_tol(dt, tu_maxabs(dx, xn)));
    for (size_t i = 0; i < xn; i++)
        dx[i] /= 2;
    free(wsp);
    wsp = tu_walloc(rt_fc_workspace_bytes(&d, dt, RT_PASS_BACKWARD_WEIGHT));
    rt_fc_backward_weight(&d, dt, xs, dys, dws, bias ? dbs : NULL, false, wsp);
    bad += tu_check("fc dw", dws, dt, dw, wn, tu_tol(dt, tu_maxabs(dw, wn)));
    if (bias)
        bad += tu_check("fc dbias", dbs, dt, db, d.hidden, tu_tol(dt, tu_maxabs(db, d.hidden)));
    float *dw32 = tu_unpack(dws, wn, dt), *db32 = tu_unpack(dbs, d.hidden, dt);
    rt_fc_backward_weight(&d, dt, xs, dys, dws, bias ? dbs : NULL, true, wsp);
    for (size_t i = 0; i < wn; i++)
        dw[i] *= 2;
    for (int i = 0; i < d.hidden; i++)
        db[i] *= 2;
    bad += tu_check("fc dw accumulate", dws, dt, dw, wn, tu_tol(dt, tu_maxabs(dw, wn)));
    if (bias)
        bad += tu_check("fc dbias accumulate", dbs, dt, db, d.hidden,
                        tu_tol(dt, tu_maxabs(db, d.hidden)));
    free(wsp);
    if (fd) {
        FcCtx c = {d, x, w, bias ? b : NULL, dy, tu_dalloc(yn)};
        bad += tu_fd_check("fc x", x, xn, dx32, fc_loss, &c, 20, 1e-3, 1e-3, 1e-4);
        bad += tu_fd_check("fc w", w, wn, dw32, fc_loss, &c, 20, 1e-3, 1e-3, 1e-4);
        if (bias)
            bad += tu_fd_check("fc bias", b, d.hidden, db32, fc_loss, &c, 20, 1e-3, 1e-3, 1e-4);
        free(c.y);
    }
    free(dx32), free(dw32), free(db32);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
    free(xs), free(wss), free(bs), free(dys), free(ys), free(dxs), free(dws), free(dbs);
    return bad;
}

static void test_fc(void **state)
{
    (void)state;
    tu_seed(4);
    size_t bad = 0;
    RtFcDims a = {.n = 5, .in = 24, .hidden = 7}, b = {.n = 3, .in = 10, .hidden = 16};
    bad += fc_run(a, true, RT_F32, true);
    bad += fc_run(b, false, RT_F32, true);
    bad += fc_run(a, true, RT_F16, false);
    bad += fc_run(b, false, RT_F16, false);
    bad += fc_run(a, true, RT_BF16, false);
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_dims),
        cmocka_unit_test(test_conv_f32),
        cmocka_unit_test(test_conv_f16),
        cmocka_unit_test(test_conv_bf16),
        cmocka_unit_test(test_fc),
    };
    return cmocka_run_group_tests_name("cpu_conv", tests, NULL, NULL);
}
