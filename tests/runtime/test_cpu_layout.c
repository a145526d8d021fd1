/* test_cpu_layout.c - the NHWC (channels-last, KRSC weight) convolution and
 * pooling kernels, rt_layout_convert, and BatchNorm's NHWC view (inner = 1).
 *
 * The NHWC kernels must give, bit for bit, the NCHW kernels' results on the
 * permuted tensors (they run the same arithmetic in the same order): every
 * case runs the NCHW kernel, permutes its inputs and outputs with a naive
 * permutation written here (not rt_layout_convert, so a wrong conversion
 * cannot hide itself), runs the NHWC kernel and compares the bytes.  BatchNorm
 * over [N*H*W, C, 1] sums in another order than over [N, C, H*W], so it is
 * compared within a tolerance (below).  fp32, fp16 and bf16; odd sizes,
 * groups, stride, pad, dilation, 1-D to 3-D; overwrite and accumulate. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_cpu_util.h"

static const RtDType dts[] = {RT_F32, RT_F16, RT_BF16};

/* ---- the reference permutation --------------------------------------------- */

/* [n][c][hw] -> [n][hw][c] (to_nhwc) or back, element by element */
static void *perm(const void *src, size_t n, size_t c, size_t hw, RtDType dt, bool to_nhwc)
{
    size_t esz = rt_dtype_size(dt), bytes = n * c * hw * esz;
    char *dst = malloc(bytes ? bytes : 1);
    if (!dst)
        abort();
    for (size_t i = 0; i < n; i++)
        for (size_t ch = 0; ch < c; ch++)
            for (size_t p = 0; p < hw; p++) {
                size_t a = (i * c + ch) * hw + p, b = (i * hw + p) * c + ch;
                if (to_nhwc)
                    memcpy(dst + b * esz, (const char *)src + a * esz, esz);
                else
                    memcpy(dst + a * esz, (const char *)src + b * esz, esz);
            }
    return dst;
}

/* n values in [-1, 1] stored in dt */
static void *rnd(size_t n, RtDType dt)
{
    double *d = tu_dalloc(n);
    tu_fill(d, n, -1, 1);
    void *p = tu_pack(d, n, dt);
    free(d);
    return p;
}

static void *dup_bytes(const void *p, size_t bytes)
{
    void *q = malloc(bytes ? bytes : 1);
    if (!q)
        abort();
    memcpy(q, p, bytes);
    return q;
}

/* exactly equal bytes, or the first differing element printed */
static size_t same(const char *what, const void *got, const void *want, size_t n, RtDType dt)
{
    size_t esz = rt_dtype_size(dt);
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * esz, (const char *)want + i * esz, esz)) {
            float g, w;
            rt_to_f32(&g, (const char *)got + i * esz, 1, dt);
            rt_to_f32(&w, (const char *)want + i * esz, 1, dt);
            print_error("%s (%s): element %zu of %zu: %.9g, NCHW kernel %.9g\n", what,
                        rt_dtype_name(dt), i, n, g, w);
            return 1;
        }
    return 0;
}

/* ---- rt_layout_convert ---------------------------------------------------------- */

static void test_convert(void **state)
{
    (void)state;
    /* tile edges (32), planes of one pixel or one channel, one image */
    static const size_t shapes[][3] = {{3, 37, 45}, {2, 64, 49}, {1, 3, 1}, {2, 1, 33},
                                       {5, 7, 1},   {1, 1, 1},   {4, 33, 65}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t t = 0; t < 3; t++) {
            size_t n = shapes[s][0], c = shapes[s][1], hw = shapes[s][2], tot = n * c * hw;
            RtDType dt = dts[t];
            size_t bytes = tot * rt_dtype_size(dt);
            /* any bit pattern (NaN payloads, subnormals) must survive */
            unsigned char *src = malloc(bytes), *nhwc = malloc(bytes), *back = malloc(bytes);
            assert_non_null(src);
            assert_non_null(nhwc);
            assert_non_null(back);
            for (size_t i = 0; i < bytes; i++)
                src[i] = (unsigned char)tu_next();
            rt_layout_convert((int64_t)n, (int64_t)c, (int64_t)hw, dt, src, nhwc, RT_LAYOUT_NHWC);
            void *want = perm(src, n, c, hw, dt, true);
            assert_int_equal(same("to NHWC", nhwc, want, tot, dt), 0);
            rt_layout_convert((int64_t)n, (int64_t)c, (int64_t)hw, dt, nhwc, back, RT_LAYOUT_NCHW);
            assert_memory_equal(back, src, bytes);
            free(want);
            free(src);
            free(nhwc);
            free(back);
        }
}

/* ---- convolution -------------------------------------------------------------- */

typedef struct {
    const char *name;
    int n, c, k, groups, nsp;
    int in[3], kernel[3], stride[3], pad[3], dilate[3];
    bool bias;
} ConvCase;

static const ConvCase conv_cases[] = {
    {"3x3 pad 1", 2, 5, 7, 1, 2, {9, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
    {"stem 7x7 s2 c3", 2, 3, 8, 1, 2, {15, 13}, {7, 7}, {2, 2}, {3, 3}, {1, 1}, false},
    {"1x1 pointwise", 3, 17, 9, 1, 2, {5, 6}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, true},
    {"1x1 stride 2", 2, 6, 10, 1, 2, {7, 9}, {1, 1}, {2, 2}, {0, 0}, {1, 1}, false},
    {"groups 3, dilate 2", 2, 6, 9, 3, 2, {11, 10}, {3, 2}, {1, 2}, {2, 1}, {2, 2}, true},
    {"depthwise", 1, 8, 8, 8, 2, {6, 5}, {3, 3}, {2, 1}, {1, 0}, {1, 1}, false},
    {"1-D", 2, 4, 5, 1, 1, {13}, {3}, {2}, {1}, {1}, true},
    {"3-D", 1, 3, 4, 1, 3, {4, 5, 3}, {2, 3, 1}, {1, 2, 1}, {0, 1, 0}, {1, 1, 1}, true},
};

static size_t prod(const int *v, int nsp)
{
    size_t p = 1;
    for (int a = 0; a < nsp; a++)
        p *= (size_t)v[a];
    return p;
}

static void *ws_for(const RtConvDims *d, RtDType dt, RtPass pass)
{
    return tu_walloc(rt_conv_workspace_bytes(d, dt, pass));
}

static size_t conv_case(const ConvCase *cc, RtDType dt)
{
    RtConvDims d = {.n = cc->n, .c = cc->c, .k = cc->k, .groups = cc->groups, .nsp = cc->nsp};
    for (int a = 0; a < cc->nsp; a++) {
        d.in[a] = cc->in[a];
        d.kernel[a] = cc->kernel[a];
        d.stride[a] = cc->stride[a];
        d.pad[a] = cc->pad[a];
        d.dilate[a] = cc->dilate[a];
    }
    assert_true(rt_conv_dims_init(&d));
    RtConvDims h = d;
    h.layout = RT_LAYOUT_NHWC;
    size_t N = (size_t)d.n, C = (size_t)d.c, K = (size_t)d.k, CG = C / (size_t)d.groups;
    size_t IN = prod(d.in, d.nsp), OUT = prod(d.out, d.nsp), KK = prod(d.kernel, d.nsp);
    size_t xn = N * C * IN, yn = N * K * OUT, wn = K * CG * KK, esz = rt_dtype_size(dt);
    void *x = rnd(xn, dt), *w = rnd(wn, dt), *b = rnd(K, dt), *dy = rnd(yn, dt);
    void *xh = perm(x, N, C, IN, dt, true), *wh = perm(w, K, CG, KK, dt, true);
    void *dyh = perm(dy, N, K, OUT, dt, true);
    size_t bad = 0;
    char nm[160];

    /* forward */
    void *y = malloc(yn * esz), *yh = malloc(yn * esz);
    assert_true(y && yh);
    void *ws = ws_for(&d, dt, RT_PASS_FORWARD);
    rt_conv_forward(&d, dt, x, w, cc->bias ? b : NULL, y, ws);
    free(ws);
    ws = ws_for(&h, dt, RT_PASS_FORWARD);
    rt_conv_forward(&h, dt, xh, wh, cc->bias ? b : NULL, yh, ws);
    free(ws);
    void *want = perm(y, N, K, OUT, dt, true);
    snprintf(nm, sizeof nm, "conv %s y", cc->name);
    bad += same(nm, yh, want, yn, dt);
    free(want);

    /* backward data: overwrite (over garbage), then accumulate onto it */
    for (int acc = 0; acc < 2; acc++) {
        void *dx = acc ? rnd(xn, dt) : malloc(xn * esz);
        assert_non_null(dx);
        if (!acc)
            memset(dx, 0x7f, xn * esz);
        void *dxh = perm(dx, N, C, IN, dt, true);
        ws = ws_for(&d, dt, RT_PASS_BACKWARD);
        rt_conv_backward_data(&d, dt, w, dy, dx, acc, ws);
        free(ws);
        ws = ws_for(&h, dt, RT_PASS_BACKWARD);
        rt_conv_backward_data(&h, dt, wh, dyh, dxh, acc, ws);
        free(ws);
        want = perm(dx, N, C, IN, dt, true);
        snprintf(nm, sizeof nm, "conv %s dx%s", cc->name, acc ? " accumulate" : "");
        bad += same(nm, dxh, want, xn, dt);
        free(want);
        free(dx);
        free(dxh);
    }

    /* backward weight and bias: overwrite, then accumulate */
    for (int acc = 0; acc < 2; acc++) {
        void *dw = rnd(wn, dt), *db = rnd(K, dt);
        void *dwh = perm(dw, K, CG, KK, dt, true), *dbh = dup_bytes(db, K * esz);
        ws = ws_for(&d, dt, RT_PASS_BACKWARD_WEIGHT);
        rt_conv_backward_weight(&d, dt, x, dy, dw, cc->bias ? db : NULL, acc, ws);
        free(ws);
        ws = ws_for(&h, dt, RT_PASS_BACKWARD_WEIGHT);
        rt_conv_backward_weight(&h, dt, xh, dyh, dwh, cc->bias ? dbh : NULL, acc, ws);
        free(ws);
        want = perm(dw, K, CG, KK, dt, true);
        snprintf(nm, sizeof nm, "conv %s dw (KRSC)%s", cc->name, acc ? " accumulate" : "");
        bad += same(nm, dwh, want, wn, dt);
        snprintf(nm, sizeof nm, "conv %s dbias%s", cc->name, acc ? " accumulate" : "");
        bad += same(nm, dbh, db, K, dt);
        free(want);
        free(dw);
        free(db);
        free(dwh);
        free(dbh);
    }
    free(x), free(w), free(b), free(dy), free(xh), free(wh), free(dyh), free(y), free(yh);
    return bad;
}

static void test_conv_nhwc(void **state)
{
    (void)state;
    size_t bad = 0;
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++)
        for (size_t t = 0; t < 3; t++)
            bad += conv_case(&conv_cases[i], dts[t]);
    assert_int_equal(bad, 0);
}

/* The NHWC workspace holds the NCHW one and the three copies, each rounded. */
static void test_conv_ws(void **state)
{
    (void)state;
    RtConvDims d = {.n = 2, .c = 5, .k = 7, .groups = 1, .nsp = 2, .in = {9, 7},
                    .kernel = {3, 3}, .stride = {1, 1}, .pad = {1, 1}, .dilate = {1, 1}};
    assert_true(rt_conv_dims_init(&d));
    RtConvDims h = d;
    h.layout = RT_LAYOUT_NHWC;
    size_t x = 2 * 5 * 63 * 4, y = 2 * 7 * 63 * 4, w = 7 * 5 * 9 * 4;
    size_t r = RT_WS_ALIGN;
#define RND(b) (((b) + r - 1) / r * r)
    assert_int_equal(rt_conv_workspace_bytes(&h, RT_F32, RT_PASS_FORWARD),
                     RND(rt_conv_workspace_bytes(&d, RT_F32, RT_PASS_FORWARD)) + RND(x) + RND(w) +
                         RND(y));
    assert_int_equal(rt_conv_workspace_bytes(&h, RT_F32, RT_PASS_BACKWARD_WEIGHT),
                     RND(rt_conv_workspace_bytes(&d, RT_F32, RT_PASS_BACKWARD_WEIGHT)) + RND(x) +
                         RND(y) + RND(w));
#undef RND
    /* sizes whose copies overflow size_t say so with SIZE_MAX */
    RtConvDims big = {.n = 1 << 30, .c = 1 << 20, .k = 1 << 20, .groups = 1, .nsp = 2,
                      .in = {1 << 20, 1 << 20}, .kernel = {1, 1}, .stride = {1, 1},
                      .pad = {0, 0}, .dilate = {1, 1}, .layout = RT_LAYOUT_NHWC};
    assert_true(rt_conv_dims_init(&big));
    assert_int_equal(rt_conv_workspace_bytes(&big, RT_F16, RT_PASS_FORWARD), SIZE_MAX);
}

/* ---- pooling ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    int n, c, nsp;
    int in[3], kernel[3], stride[3], pad[3];
    RtPoolType type;
    bool full, cip, global;
} PoolCase;

static const PoolCase pool_cases[] = {
    {"max 3x3 s2 p1", 2, 5, 2, {9, 8}, {3, 3}, {2, 2}, {1, 1}, RT_POOL_MAX, false, false, false},
    {"max full, empty windows", 1, 3, 2, {7, 5}, {1, 2}, {3, 3}, {0, 0}, RT_POOL_MAX, true, false,
     false},
    {"avg pad, cip", 2, 7, 2, {6, 7}, {3, 2}, {2, 1}, {1, 1}, RT_POOL_AVG, false, true, false},
    {"avg pad, no cip, full", 2, 4, 2, {7, 7}, {3, 3}, {2, 2}, {1, 1}, RT_POOL_AVG, true, false,
     false},
    {"sum", 1, 6, 2, {5, 6}, {2, 2}, {2, 2}, {0, 0}, RT_POOL_SUM, false, false, false},
    {"global avg", 3, 33, 2, {7, 5}, {1, 1}, {1, 1}, {0, 0}, RT_POOL_AVG, false, false, true},
    {"1-D max", 2, 3, 1, {11}, {3}, {2}, {1}, RT_POOL_MAX, false, false, false},
    {"3-D avg", 1, 4, 3, {4, 5, 3}, {2, 2, 2}, {1, 2, 1}, {1, 0, 1}, RT_POOL_AVG, false, true,
     false},
};

static size_t pool_case(const PoolCase *pc, RtDType dt)
{
    RtPoolDims d = {.n = pc->n, .c = pc->c, .nsp = pc->nsp, .type = pc->type,
                    .full_convention = pc->full, .count_include_pad = pc->cip,
                    .global = pc->global};
    for (int a = 0; a < pc->nsp; a++) {
        d.in[a] = pc->in[a];
        d.kernel[a] = pc->kernel[a];
        d.stride[a] = pc->stride[a];
        d.pad[a] = pc->pad[a];
    }
    assert_true(rt_pool_dims_init(&d));
    RtPoolDims h = d;
    h.layout = RT_LAYOUT_NHWC;
    size_t N = (size_t)d.n, C = (size_t)d.c, IN = prod(d.in, d.nsp), OUT = prod(d.out, d.nsp);
    size_t xn = N * C * IN, yn = N * C * OUT, esz = rt_dtype_size(dt);
    void *x = rnd(xn, dt), *dy = rnd(yn, dt);
    if (pc->type == RT_POOL_MAX) /* ties: "the first maximum" must agree */
        for (size_t i = 1; i < xn; i += 3)
            memcpy((char *)x + i * esz, (char *)x + (i - 1) * esz, esz);
    void *xh = perm(x, N, C, IN, dt, true), *dyh = perm(dy, N, C, OUT, dt, true);
    size_t bad = 0;
    char nm[160];

    void *y = malloc(yn * esz), *yh = malloc(yn * esz);
    assert_true(y && yh);
    void *ws = tu_walloc(rt_pool_workspace_bytes(&d, dt, RT_PASS_FORWARD));
    rt_pool_forward(&d, dt, x, y, ws);
    free(ws);
    ws = tu_walloc(rt_pool_workspace_bytes(&h, dt, RT_PASS_FORWARD));
    rt_pool_forward(&h, dt, xh, yh, ws);
    free(ws);
    void *want = perm(y, N, C, OUT, dt, true);
    snprintf(nm, sizeof nm, "pool %s y", pc->name);
    bad += same(nm, yh, want, yn, dt);
    free(want);

    bool max = pc->type == RT_POOL_MAX;
    for (int acc = 0; acc < 2; acc++) {
        void *dx = rnd(xn, dt);
        void *dxh = perm(dx, N, C, IN, dt, true);
        ws = tu_walloc(rt_pool_workspace_bytes(&d, dt, RT_PASS_BACKWARD));
        rt_pool_backward(&d, dt, max ? x : NULL, dy, dx, acc, ws);
        free(ws);
        ws = tu_walloc(rt_pool_workspace_bytes(&h, dt, RT_PASS_BACKWARD));
        rt_pool_backward(&h, dt, max ? xh : NULL, dyh, dxh, acc, ws);
        free(ws);
        want = perm(dx, N, C, IN, dt, true);
        snprintf(nm, sizeof nm, "pool %s dx%s", pc->name, acc ? " accumulate" : "");
        bad += same(nm, dxh, want, xn, dt);
        free(want);
        free(dx);
        free(dxh);
    }
    free(x), free(dy), free(xh), free(dyh), free(y), free(yh);
    return bad;
}

static void test_pool_nhwc(void **state)
{
    (void)state;
    size_t bad = 0;
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++)
        for (size_t t = 0; t < 3; t++)
            bad += pool_case(&pool_cases[i], dts[t]);
    assert_int_equal(bad, 0);
}

/* ---- BatchNorm's NHWC view ------------------------------------------------------
 * [N*H*W, C, 1] on the NHWC tensor against [N, C, H*W] on the NCHW one.  The
 * per-channel sums are in double either way and only their order differs, so
 * the fp32 statistics agree to a few ulp and each stored element is the same
 * fp32 formula on them: within 2^-21 (4 fp32 ulp) plus one rounding step
 * of the storage dtype (2^-21 for fp32, 2^-10 fp16, 2^-7 bf16: an fp32
 * difference may cross a 16-bit rounding boundary), relative to the
 * tensor's largest magnitude. */
static double ulp_rel(RtDType dt)
{
    return dt == RT_F32 ? 0x1p-21 : dt == RT_F16 ? 0x1p-10 : 0x1p-7;
}

static size_t near(const char *what, const void *got, const void *want, size_t n, RtDType dt)
{
    float *g = tu_unpack(got, n, dt), *w = tu_unpack(want, n, dt);
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)w[i]));
    double tol = (ulp_rel(dt) + 0x1p-21) * (scale > 0 ? scale : 1);
    size_t bad = 0;
    for (size_t i = 0; i < n && !bad; i++)
        if (!(fabs((double)g[i] - (double)w[i]) <= tol)) {
            print_error("%s (%s): element %zu: %.9g, NCHW %.9g (tolerance %.3g)\n", what,
                        rt_dtype_name(dt), i, g[i], w[i], tol);
            bad++;
        }
    free(g);
    free(w);
    return bad;
}

static size_t bn_case(int N, int C, int HW, RtDType dt, bool relu)
{
    size_t n = (size_t)N * (size_t)C * (size_t)HW, esz = rt_dtype_size(dt);
    RtBnDims dc = {.outer = N, .c = C, .inner = HW},
             dh = {.outer = (int64_t)N * HW, .c = C, .inner = 1};
    /* an offset mean, so the shifted moments matter */
    double *xd = tu_dalloc(n);
    for (size_t i = 0; i < n; i++)
        xd[i] = 3.0 + tu_uniform(-2, 2);
    void *x = tu_pack(xd, n, dt), *dy = rnd(n, dt);
    free(xd);
    void *xh = perm(x, (size_t)N, (size_t)C, (size_t)HW, dt, true);
    void *dyh = perm(dy, (size_t)N, (size_t)C, (size_t)HW, dt, true);
    float *gamma = tu_falloc((size_t)C), *beta = tu_falloc((size_t)C);
    float *mean[2], *invstd[2], *dg[2], *dbt[2], *mm = tu_falloc((size_t)C),
                                                  *mv = tu_falloc((size_t)C);
    for (int c = 0; c < C; c++) {
        gamma[c] = (float)tu_uniform(0.5, 1.5);
        beta[c] = (float)tu_uniform(-1, 1);
        mm[c] = (float)tu_uniform(2, 4);
        mv[c] = (float)tu_uniform(0.5, 2);
    }
    void *y[2], *dx[2], *yi[2];
    for (int v = 0; v < 2; v++) {
        mean[v] = tu_falloc((size_t)C), invstd[v] = tu_falloc((size_t)C);
        dg[v] = tu_falloc((size_t)C), dbt[v] = tu_falloc((size_t)C);
        y[v] = malloc(n * esz), dx[v] = malloc(n * esz), yi[v] = malloc(n * esz);
        assert_true(y[v] && dx[v] && yi[v]);
        const RtBnDims *d = v ? &dh : &dc;
        const void *xv = v ? xh : x, *dyv = v ? dyh : dy;
        if (relu) {
            rt_batchnorm_relu_forward_train(d, dt, xv, gamma, beta, 1e-5f, false, y[v], mean[v],
                                            invstd[v]);
            rt_batchnorm_relu_backward(d, dt, xv, y[v], dyv, gamma, mean[v], invstd[v], false,
                                       false, dx[v], dg[v], dbt[v], false, false);
            rt_batchnorm_relu_forward_inference(d, dt, xv, gamma, beta, mm, mv, 1e-5f, false,
                                                yi[v], NULL, NULL);
        } else {
            rt_batchnorm_forward_train(d, dt, xv, gamma, beta, 1e-5f, false, y[v], mean[v],
                                       invstd[v]);
            rt_batchnorm_backward(d, dt, xv, dyv, gamma, mean[v], invstd[v], false, false, dx[v],
                                  dg[v], dbt[v], false, false);
            rt_batchnorm_forward_inference(d, dt, xv, gamma, beta, mm, mv, 1e-5f, false, yi[v],
                                           NULL, NULL);
        }
    }
    size_t bad = 0;
    char nm[96];
    const char *k = relu ? "bn+relu" : "bn";
    snprintf(nm, sizeof nm, "%s [%d,%d,%d] save_mean", k, N, C, HW);
    bad += near(nm, mean[1], mean[0], (size_t)C, RT_F32);
    snprintf(nm, sizeof nm, "%s [%d,%d,%d] save_invstd", k, N, C, HW);
    bad += near(nm, invstd[1], invstd[0], (size_t)C, RT_F32);
    void *w = perm(y[0], (size_t)N, (size_t)C, (size_t)HW, dt, true);
    snprintf(nm, sizeof nm, "%s [%d,%d,%d] y", k, N, C, HW);
    bad += near(nm, y[1], w, n, dt);
    free(w);
    /* inference has no reduction: the same bits */
    w = perm(yi[0], (size_t)N, (size_t)C, (size_t)HW, dt, true);
    snprintf(nm, sizeof nm, "%s [%d,%d,%d] inference y", k, N, C, HW);
    bad += same(nm, yi[1], w, n, dt);
    free(w);
    w = perm(dx[0], (size_t)N, (size_t)C, (size_t)HW, dt, true);
    snprintf(nm, sizeof nm, "%s [%d,%d,%d] dx", k, N, C, HW);
    bad += near(nm, dx[1], w, n, dt);
    free(w);
    snprintf(nm, sizeof nm, "%s [%d,%d,%d] dgamma", k, N, C, HW);
    bad += near(nm, dg[1], dg[0], (size_t)C, RT_F32);
    snprintf(nm, sizeof nm, "%s [%d,%d,%d] dbeta", k, N, C, HW);
    bad += near(nm, dbt[1], dbt[0], (size_t)C, RT_F32);
    for (int v = 0; v < 2; v++) {
        free(mean[v]), free(invstd[v]), free(dg[v]), free(dbt[v]);
        free(y[v]), free(dx[v]), free(yi[v]);
    }
    free(x), free(dy), free(xh), free(dyh), free(gamma), free(beta), free(mm), free(mv);
    return bad;
}

static void test_bn_nhwc_view(void **state)
{
    (void)state;
    static const int shapes[][3] = {{2, 5, 37}, {3, 64, 49}, {1, 3, 1100}, {4, 7, 1}};
    size_t bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t t = 0; t < 3; t++)
            for (int relu = 0; relu < 2; relu++)
                bad += bn_case(shapes[s][0], shapes[s][1], shapes[s][2], dts[t], relu);
    assert_int_equal(bad, 0);
}

int main(void)
{
    tu_seed(11);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_convert),   cmocka_unit_test(test_conv_nhwc),
        cmocka_unit_test(test_conv_ws),   cmocka_unit_test(test_pool_nhwc),
        cmocka_unit_test(test_bn_nhwc_view),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
