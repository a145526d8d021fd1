/* test_cpu_reduce.c - softmax and log_softmax along an axis, sum and mean
 * over axes, SoftmaxOutput (label smoothing, grad_scale, normalization,
 * ignore_label, loss scale) and the logging metrics; against naive
 * references and central differences. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_cpu_util.h"

/* ---- softmax / log_softmax ------------------------------------------------------- */

typedef struct {
    int64_t outer, len, inner;
    bool lg;
    double *x, *dy, *y;
} SmCtx;

#define AT(c, o, l, j) ((size_t)((((o) * (c)->len + (l)) * (c)->inner) + (j)))

static void ref_softmax(const SmCtx *c, double *y)
{
    for (int64_t o = 0; o < c->outer; o++)
        for (int64_t j = 0; j < c->inner; j++) {
            double m = -INFINITY, s = 0;
            for (int64_t l = 0; l < c->len; l++)
                m = fmax(m, c->x[AT(c, o, l, j)]);
            for (int64_t l = 0; l < c->len; l++)
                s += exp(c->x[AT(c, o, l, j)] - m);
            for (int64_t l = 0; l < c->len; l++) {
                double v = c->x[AT(c, o, l, j)] - m;
                y[AT(c, o, l, j)] = c->lg ? v - log(s) : exp(v) / s;
            }
        }
}

static double sm_loss(void *p)
{
    SmCtx *c = p;
    ref_softmax(c, c->y);
    return tu_dot(c->y, c->dy, (size_t)(c->outer * c->len * c->inner));
}

static size_t sm_run(int64_t outer, int64_t len, int64_t inner, bool lg, RtDType dt, bool fd)
{
    size_t n = (size_t)(outer * len * inner);
    SmCtx c = {outer, len, inner, lg, tu_dalloc(n), tu_dalloc(n), tu_dalloc(n)};
    tu_fill(c.x, n, -4, 4);
    c.x[0] += 30; /* a large logit: the max subtraction must keep exp finite */
    tu_fill(c.dy, n, -1, 1);
    tu_round_all(c.x, n, dt);
    tu_round_all(c.dy, n, dt);
    double *y = tu_dalloc(n), *dx = tu_dalloc(n);
    ref_softmax(&c, y);
    /* reference backward from the analytic Jacobian, in double */
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            double s = 0;
            for (int64_t l = 0; l < len; l++)
                s += lg ? c.dy[AT(&c, o, l, j)] : c.dy[AT(&c, o, l, j)] * y[AT(&c, o, l, j)];
            for (int64_t l = 0; l < len; l++) {
                size_t k = AT(&c, o, l, j);
                dx[k] = lg ? c.dy[k] - exp(y[k]) * s : y[k] * (c.dy[k] - s);
            }
        }
    void *xs = tu_pack(c.x, n, dt), *dys = tu_pack(c.dy, n, dt), *ys = tu_pack(y, n, dt),
         *dxs = tu_pack(dx, n, dt);
    size_t bad = 0;
    char nm[96];
    const char *name = lg ? "log_softmax" : "softmax";
    (lg ? rt_log_softmax_forward : rt_softmax_forward)(outer, len, inner, dt, xs, ys);
    snprintf(nm, sizeof nm, "%s [%lld,%lld,%lld] y", name, (long long)outer, (long long)len,
             (long long)inner);
    bad += tu_check(nm, ys, dt, y, n, tu_tol(dt, lg ? tu_maxabs(y, n) : 1));
    /* the backward reads the kernel's own y; with 16-bit y the reference
     * above uses the exact y, hence the 16-bit tolerance */
    memset(dxs, 0x55, n * rt_dtype_size(dt));
    (lg ? rt_log_softmax_backward : rt_softmax_backward)(outer, len, inner, dt, ys, dys, dxs,
                                                         false);
    snprintf(nm, sizeof nm, "%s dx", name);
    bad += tu_check(nm, dxs, dt, dx, n, tu_tol(dt, tu_maxabs(dx, n)));
    float *dx32 = tu_unpack(dxs, n, dt);
    (lg ? rt_log_softmax_backward : rt_softmax_backward)(outer, len, inner, dt, ys, dys, dxs,
                                                         true);
    for (size_t i = 0; i < n; i++)
        dx[i] *= 2;
    snprintf(nm, sizeof nm, "%s dx accumulate", name);
    bad += tu_check(nm, dxs, dt, dx, n, tu_tol(dt, tu_maxabs(dx, n)));
    if (fd)
        bad += tu_fd_check(name, c.x, n, dx32, sm_loss, &c, 20, 1e-4, 1e-5, 1e-4);
    free(c.x), free(c.dy), free(c.y), free(y), free(dx), free(dx32);
    free(xs), free(dys), free(ys), free(dxs);
    return bad;
}

static void test_softmax(void **state)
{
    (void)state;
    tu_seed(50);
    size_t bad = 0;
    for (int lg = 0; lg < 2; lg++) {
        bad += sm_run(4, 10, 1, lg, RT_F32, true);
        bad += sm_run(2, 1100, 1, lg, RT_F32, true); /* rows longer than a chunk */
        bad += sm_run(3, 5, 7, lg, RT_F32, true);    /* along a middle axis */
        bad += sm_run(1, 4, 600, lg, RT_F32, true);  /* lane blocks */
        bad += sm_run(4, 10, 1, lg, RT_F16, false);
        bad += sm_run(3, 5, 7, lg, RT_F16, false);
        bad += sm_run(4, 10, 1, lg, RT_BF16, false);
    }
    assert_int_equal(bad, 0);
}

/* ---- sum / mean -------------------------------------------------------------------- */

typedef struct {
    const RtReduceDims *d;
    bool mean;
    double *x, *dy, *y;
    size_t nx, ny;
} RdCtx;

/* Output offset of input element i (reduced axes dropped). */
static size_t rd_out(const RtReduceDims *d, size_t i)
{
    size_t o = 0, s = 1;
    for (int a = d->rank - 1; a >= 0; a--) {
        size_t k = i % (size_t)d->in[a];
        i /= (size_t)d->in[a];
        if (!d->reduce[a]) {
            o += k * s;
            s *= (size_t)d->in[a];
        }
    }
    return o;
}

static void ref_reduce(const RdCtx *c, double *y)
{
    memset(y, 0, c->ny * sizeof *y);
    for (size_t i = 0; i < c->nx; i++)
        y[rd_out(c->d, i)] += c->x[i];
    if (c->mean)
        for (size_t i = 0; i < c->ny; i++)
            y[i] /= (double)(c->nx / c->ny);
}

static double rd_loss(void *p)
{
    RdCtx *c = p;
    ref_reduce(c, c->y);
    return tu_dot(c->y, c->dy, c->ny);
}

static size_t rd_run(RtReduceDims d, bool mean, RtDType dt, bool fd)
{
    size_t nx = 1, ny = 1;
    for (int a = 0; a < d.rank; a++) {
        nx *= (size_t)d.in[a];
        ny *= d.reduce[a] ? 1 : (size_t)d.in[a];
    }
    RdCtx c = {&d, mean, tu_dalloc(nx), tu_dalloc(ny), tu_dalloc(ny), nx, ny};
    tu_fill(c.x, nx, -1, 1);
    tu_fill(c.dy, ny, -1, 1);
    tu_round_all(c.x, nx, dt);
    tu_round_all(c.dy, ny, dt);
    double *y = tu_dalloc(ny), *dx = tu_dalloc(nx);
    ref_reduce(&c, y);
    for (size_t i = 0; i < nx; i++)
        dx[i] = c.dy[rd_out(&d, i)] / (mean ? (double)(nx / ny) : 1.0);
    void *xs = tu_pack(c.x, nx, dt), *dys = tu_pack(c.dy, ny, dt), *ys = tu_pack(y, ny, dt),
         *dxs = tu_pack(dx, nx, dt);
    void *ws = tu_walloc(rt_reduce_workspace_bytes(&d, dt, RT_PASS_FORWARD));
    size_t bad = 0;
    const char *name = mean ? "mean" : "sum";
    (mean ? rt_mean_forward : rt_sum_forward)(&d, dt, xs, ys, ws);
    bad += tu_check(name, ys, dt, y, ny, tu_tol(dt, tu_maxabs(y, ny) + 1));
    memset(dxs, 0x55, nx * rt_dtype_size(dt));
    (mean ? rt_mean_backward : rt_sum_backward)(&d, dt, dys, dxs, false);
    bad += tu_check(name, dxs, dt, dx, nx, tu_tol(dt, tu_maxabs(dx, nx)));
    float *dx32 = tu_unpack(dxs, nx, dt);
    (mean ? rt_mean_backward : rt_sum_backward)(&d, dt, dys, dxs, true);
    for (size_t i = 0; i < nx; i++)
        dx[i] *= 2;
    bad += tu_check(name, dxs, dt, dx, nx, tu_tol(dt, tu_maxabs(dx, nx)));
    if (fd)
        bad += tu_fd_check(name, c.x, nx, dx32, rd_loss, &c, 20, 1e-3, 1e-6, 1e-4);
    free(ws), free(c.x), free(c.dy), free(c.y), free(y), free(dx), free(dx32);
    free(xs), free(dys), free(ys), free(dxs);
    return bad;
}

static void test_sum_mean(void **state)
{
    (void)state;
    tu_seed(51);
    static const RtReduceDims cases[] = {
        {4, {2, 3, 4, 5}, {false, false, true, true}}, /* spatial: global average */
        {4, {2, 3, 4, 5}, {true, false, true, false}}, /* interleaved */
        {3, {3, 4, 600}, {false, false, true}},        /* long rows */
        {3, {2, 3, 4}, {true, true, true}},            /* everything (axis=()) */
        {2, {5, 6}, {true, false}},                    /* over the batch */
        {2, {5, 6}, {false, false}},                   /* nothing: a copy */
    };
    size_t bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int m = 0; m < 2; m++) {
            bad += rd_run(cases[i], m, RT_F32, true);
            bad += rd_run(cases[i], m, RT_F16, false);
        }
    bad += rd_run(cases[0], true, RT_BF16, false);
    assert_int_equal(bad, 0);
}

/* ---- SoftmaxOutput ----------------------------------------------------------------- */

typedef struct {
    int64_t n, k;
    double *x;
    const float *label;
    RtSmoParams p;
    double scale; /* grad_scale / valid * loss_scale */
} SmoCtx;

/* The loss whose gradient SoftmaxOutput's backward is: scale * sum over
 * non-ignored rows of the cross-entropy against the smoothed target. */
static double smo_loss(void *q)
{
    SmoCtx *c = q;
    double L = 0;
    for (int64_t i = 0; i < c->n; i++) {
        int lab = (int)c->label[i];
        if (c->p.use_ignore && lab == (int)c->p.ignore_label)
            continue;
        const double *r = c->x + i * c->k;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < c->k; j++)
            m = fmax(m, r[j]);
        for (int64_t j = 0; j < c->k; j++)
            s += exp(r[j] - m);
        for (int64_t j = 0; j < c->k; j++) {
            double t = j == lab ? 1 - c->p.smooth_alpha : c->p.smooth_alpha / (double)(c->k - 1);
            L -= t * (r[j] - m - log(s));
        }
    }
    return c->scale * L;
}

static size_t smo_run(int64_t n, int64_t k, RtSmoParams p, float loss_scale, RtDType dt, bool fd)
{
    size_t nk = (size_t)(n * k);
    double *x = tu_dalloc(nk), *prob = tu_dalloc(nk), *dx = tu_dalloc(nk);
    float *label = tu_falloc((size_t)n);
    tu_fill(x, nk, -3, 3);
    tu_round_all(x, nk, dt);
    int64_t valid = 0;
    for (int64_t i = 0; i < n; i++) {
        label[i] = (float)tu_index((size_t)k);
        /* with use_ignore, some rows ignored; otherwise every label in
         * range (MXNet's gradient of an out-of-range label is p - a/(K-1)
         * everywhere, not the gradient of any loss) */
        if (p.use_ignore && i % 3 == 1)
            label[i] = p.ignore_label;
        valid += (int)label[i] != (int)p.ignore_label;
    }
    double norm = p.normalization == RT_SMO_NORM_BATCH ? (double)n
                : p.normalization == RT_SMO_NORM_VALID ? (valid ? (double)valid : 1.0) : 1.0;
    SmoCtx c = {n, k, x, label, p, (double)p.grad_scale / norm * (double)loss_scale};
    for (int64_t i = 0; i < n; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < k; j++)
            m = fmax(m, x[i * k + j]);
        for (int64_t j = 0; j < k; j++)
            s += exp(x[i * k + j] - m);
        int lab = (int)label[i];
        bool ign = p.use_ignore && lab == (int)p.ignore_label;
        for (int64_t j = 0; j < k; j++) {
            double pr = exp(x[i * k + j] - m) / s;
            double t = j == lab ? 1 - p.smooth_alpha : p.smooth_alpha / (double)(k - 1);
            prob[i * k + j] = pr;
            dx[i * k + j] = ign ? 0 : (pr - t) * c.scale;
        }
    }
    void *xs = tu_pack(x, nk, dt), *ps = tu_pack(prob, nk, dt), *dxs = tu_pack(dx, nk, dt);
    size_t bad = 0;
    rt_softmax_output_forward(n, k, dt, xs, dt, ps);
    bad += tu_check("SoftmaxOutput prob", ps, dt, prob, nk, tu_tol(dt, 1));
    memset(dxs, 0x55, nk * rt_dtype_size(dt));
    RtStepState st = {.scale = loss_scale};
    rt_softmax_output_backward(n, k, dt, ps, label, &p, &st, dt, dxs, false);
    bad += tu_check("SoftmaxOutput dx", dxs, dt, dx, nk, tu_tol(dt, tu_maxabs(dx, nk)));
    float *dx32 = tu_unpack(dxs, nk, dt);
    rt_softmax_output_backward(n, k, dt, ps, label, &p, &st, dt, dxs, true);
    for (size_t i = 0; i < nk; i++)
        dx[i] *= 2;
    bad += tu_check("SoftmaxOutput dx accumulate", dxs, dt, dx, nk, tu_tol(dt, tu_maxabs(dx, nk)));
    if (fd)
        bad += tu_fd_check("SoftmaxOutput x", x, nk, dx32, smo_loss, &c, 20, 1e-4,
                           1e-5 * (c.scale + 1), 1e-4);
    free(x), free(prob), free(dx), free(label), free(dx32), free(xs), free(ps), free(dxs);
    return bad;
}

static void test_softmax_output(void **state)
{
    (void)state;
    tu_seed(52);
    RtSmoParams plain = {.grad_scale = 1, .smooth_alpha = 0, .ignore_label = -1,
                         .normalization = RT_SMO_NORM_NULL};
    RtSmoParams smooth = {.grad_scale = 1, .smooth_alpha = 0.1f, .ignore_label = -1,
                          .normalization = RT_SMO_NORM_NULL};
    RtSmoParams batch = {.grad_scale = 2, .smooth_alpha = 0.1f, .ignore_label = -1,
                         .normalization = RT_SMO_NORM_BATCH};
    RtSmoParams valid = {.grad_scale = 1, .smooth_alpha = 0.2f, .use_ignore = true,
                         .ignore_label = 0, .normalization = RT_SMO_NORM_VALID};
    RtSmoParams ignore_null = {.grad_scale = 0.5f, .smooth_alpha = 0, .use_ignore = true,
                               .ignore_label = 2, .normalization = RT_SMO_NORM_NULL};
    size_t bad = 0;
    bad += smo_run(6, 10, plain, 1.0f, RT_F32, true);
    bad += smo_run(6, 10, smooth, 1.0f, RT_F32, true);
    bad += smo_run(7, 5, batch, 1.0f, RT_F32, true);
    bad += smo_run(9, 6, valid, 1.0f, RT_F32, true);
    bad += smo_run(9, 6, ignore_null, 1.0f, RT_F32, true);
    bad += smo_run(3, 1000, smooth, 1.0f, RT_F32, true); /* ImageNet-sized rows */
    /* the dynamic loss scale multiplies the seed; 2^16 stays finite in fp16
     * for probabilities below ~1 */
    bad += smo_run(6, 10, smooth, 1024.0f, RT_F32, true);
    bad += smo_run(6, 10, smooth, 1.0f, RT_F16, false);
    bad += smo_run(9, 6, valid, 256.0f, RT_F16, false);
    bad += smo_run(6, 10, batch, 1.0f, RT_BF16, false);
    assert_int_equal(bad, 0);
}

/* The numbers of FACTS 4.5 by hand: target 1-a on the label, a/(K-1) elsewhere. */
static void test_softmax_output_values(void **state)
{
    (void)state;
    float prob[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.25f, 0.25f, 0.25f, 0.25f}, label[2] = {1, 3};
    float dx[8];
    RtSmoParams p = {.grad_scale = 1, .smooth_alpha = 0.3f, .ignore_label = -1,
                     .normalization = RT_SMO_NORM_NULL};
    rt_softmax_output_backward(2, 4, RT_F32, prob, label, &p, NULL, RT_F32, dx, false);
    float want[8] = {0.1f - 0.1f, 0.2f - 0.7f, 0.3f - 0.1f, 0.4f - 0.1f,
                     0.25f - 0.1f, 0.25f - 0.1f, 0.25f - 0.1f, 0.25f - 0.7f};
    for (int i = 0; i < 8; i++)
        assert_float_equal(dx[i], want[i], 1e-6);
    /* batch normalization, grad_scale and the loss scale multiply */
    p.normalization = RT_SMO_NORM_BATCH;
    p.grad_scale = 3;
    RtStepState big = {.scale = 65536.0f};
    rt_softmax_output_backward(2, 4, RT_F32, prob, label, &p, &big, RT_F32, dx, false);
    for (int i = 0; i < 8; i++)
        assert_float_equal(dx[i], want[i] * 3 / 2 * 65536, 1e-6 * 65536 * 2);
    /* valid with every row ignored divides by 1, and the rows are zero */
    float ign[2] = {5, 5};
    p = (RtSmoParams){.grad_scale = 1, .use_ignore = true, .ignore_label = 5,
                      .normalization = RT_SMO_NORM_VALID};
    rt_softmax_output_backward(2, 4, RT_F32, prob, ign, &p, NULL, RT_F32, dx, false);
    for (int i = 0; i < 8; i++)
        assert_true(dx[i] == 0.0f);
    /* without use_ignore an out-of-range label has no true class: p - a/(K-1) */
    float out[2] = {-1, 9};
    p = (RtSmoParams){.grad_scale = 1, .smooth_alpha = 0.3f, .ignore_label = -1,
                      .normalization = RT_SMO_NORM_NULL};
    rt_softmax_output_backward(2, 4, RT_F32, prob, out, &p, NULL, RT_F32, dx, false);
    for (int i = 0; i < 8; i++)
        assert_float_equal(dx[i], prob[i] - 0.1f, 1e-6);
}

static void test_metrics(void **state)
{
    (void)state;
    /* 3 rows, 4 classes */
    float prob[12] = {0.1f, 0.6f, 0.2f, 0.1f, /* argmax 1 */
                      0.3f, 0.3f, 0.3f, 0.1f, /* ties: first maximum, 0 */
                      0.0f, 0.0f, 0.0f, 1.0f};
    float label[3] = {1, 2, 3};
    assert_int_equal(rt_accuracy_count(3, 4, RT_F32, prob, label), 2);
    int64_t cnt = 0;
    double ce = rt_cross_entropy_sum(3, 4, RT_F32, prob, label, &cnt);
    assert_int_equal(cnt, 3);
    double want = -log(0.6f + 1e-12) - log(0.3f + 1e-12) - log(1.0 + 1e-12);
    assert_float_equal(ce, want, 1e-5);
    /* fp16 probabilities: same answers */
    uint16_t h[12];
    rt_from_f32(h, prob, 12, RT_F16);
    assert_int_equal(rt_accuracy_count(3, 4, RT_F16, h, label), 2);
    /* an out-of-range label is not counted in the loss */
    label[2] = 7;
    rt_cross_entropy_sum(3, 4, RT_F32, prob, label, &cnt);
    assert_int_equal(cnt, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_sum_mean),
        cmocka_unit_test(test_softmax_output),
        cmocka_unit_test(test_softmax_output_values),
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests_name("cpu_reduce", tests, NULL, NULL);
}
