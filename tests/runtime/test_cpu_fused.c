/* test_cpu_fused.c - the fuse pass's kernels against the unfused pairs they
 * replace, bit for bit, in fp32, fp16 and bf16 (docs/codegen.md,
 * "Fusions"): BatchNorm + relu (training and inference forward; backward
 * with batch and global statistics, fix_gamma, accumulation), BatchNorm +
 * residual add + relu (the same, and written in place) and
 * elemwise_add + relu (forward, in place too; backward from y alone);
 * SoftmaxOutput reading 16-bit logits against the cast to fp32 and the fp32
 * kernel, and its backward writing a 16-bit gradient against the fp32
 * kernel and the cast to 16 bits.  Inputs include zeros, values that round
 * to -0, NaN and infinities, 16-bit subnormals, and shapes larger than a
 * chunk and than a channel group. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_cpu_util.h"

static const RtDType dtypes[] = {RT_F32, RT_F16, RT_BF16};
static const char *const dtype_names[] = {"f32", "f16", "bf16"};

/* dims: small; more than a chunk (512) per channel; more channels than a
 * group (64) */
static const RtBnDims shapes[] = {{.outer = 2, .c = 3, .inner = 5},
                                  {.outer = 3, .c = 2, .inner = 700},
                                  {.outer = 2, .c = 70, .inner = 9}};

/* n values in [-3, 3], with zeros, tiny values (which may round to -0 in
 * 16 bits) and, when `special`, a NaN and infinities */
static void *special_pack(size_t n, RtDType dt, bool special)
{
    double *x = tu_dalloc(n);
    tu_fill(x, n, -3, 3);
    for (size_t i = 0; i < n; i += 7)
        x[i] = 0.0;
    for (size_t i = 3; i < n; i += 11)
        x[i] = -1e-30;
    if (special && n > 20) {
        x[5] = NAN;
        x[13] = INFINITY;
        x[17] = -INFINITY;
    }
    void *p = tu_pack(x, n, dt);
    free(x);
    return p;
}

static void *buf(size_t n, RtDType dt)
{
    void *p = calloc(n ? n : 1, rt_dtype_size(dt));
    if (!p)
        abort();
    return p;
}

static float *params(int64_t c, double lo, double hi)
{
    float *p = tu_falloc((size_t)c);
    for (int64_t i = 0; i < c; i++)
        p[i] = (float)tu_uniform(lo, hi);
    return p;
}

static void same_bits(const char *what, const char *dt, const void *a, const void *b, size_t bytes)
{
    if (memcmp(a, b, bytes) != 0)
        fail_msg("%s (%s): the fused kernel's bits differ from the unfused pair's", what, dt);
}

/* relu of something: some outputs positive and some zero, so the
 * comparison is not of constants */
static void mixed(const char *what, const void *y, size_t n, RtDType dt)
{
    float *f = tu_unpack(y, n, dt);
    size_t pos = 0, zero = 0;
    for (size_t i = 0; i < n; i++)
        pos += f[i] > 0, zero += f[i] == 0;
    free(f);
    if (!pos || !zero)
        fail_msg("%s: %zu positive and %zu zero outputs: the test compares too little", what, pos,
                 zero);
}

/* a backward's outputs twice, unfused (1) and fused (2), from the same
 * garbage (dx) and the same parameters' gradients to accumulate into */
typedef struct {
    void *dx1, *dx2;
    float *dg1, *db1, *dg2, *db2;
} BwdOut;

static BwdOut bwd_out(size_t n, RtDType dt, int64_t c)
{
    size_t es = rt_dtype_size(dt), cb = (size_t)c * sizeof(float);
    BwdOut o = {special_pack(n, dt, false), malloc(n * es),       params(c, -1, 1),
                params(c, -1, 1),           tu_falloc((size_t)c), tu_falloc((size_t)c)};
    memcpy(o.dx2, o.dx1, n * es);
    memcpy(o.dg2, o.dg1, cb);
    memcpy(o.db2, o.db1, cb);
    return o;
}

/* the two sides the same, then freed */
static void bwd_same(const char *what, const char *dn, BwdOut *o, size_t n, RtDType dt, int64_t c)
{
    char w[128];
    snprintf(w, sizeof w, "%s backward dx", what);
    same_bits(w, dn, o->dx1, o->dx2, n * rt_dtype_size(dt));
    snprintf(w, sizeof w, "%s backward dgamma", what);
    same_bits(w, dn, o->dg1, o->dg2, (size_t)c * sizeof(float));
    snprintf(w, sizeof w, "%s backward dbeta", what);
    same_bits(w, dn, o->db1, o->db2, (size_t)c * sizeof(float));
    free(o->dx1), free(o->dx2), free(o->dg1), free(o->db1), free(o->dg2), free(o->db2);
}

static void check_bn(RtDType dt, const char *dn, const RtBnDims *d, bool fix_gamma, bool global)
{
    size_t n = (size_t)(d->outer * d->c * d->inner), es = rt_dtype_size(dt), c = (size_t)d->c;
    void *x = special_pack(n, dt, false), *dy = special_pack(n, dt, true);
    float *gamma = params(d->c, 0.5, 2), *beta = params(d->c, -1, 1);
    float *mm = params(d->c, -0.5, 0.5), *mv = params(d->c, 0.5, 2);
    void *t = buf(n, dt), *y1 = buf(n, dt), *y2 = buf(n, dt);
    float *m1 = tu_falloc(c), *s1 = tu_falloc(c), *m2 = tu_falloc(c), *s2 = tu_falloc(c);
    /* forward: BatchNorm then relu, and the fused kernel */
    if (global) {
        rt_batchnorm_forward_inference(d, dt, x, gamma, beta, mm, mv, 1e-5f, fix_gamma, t, m1, s1);
        rt_batchnorm_relu_forward_inference(d, dt, x, gamma, beta, mm, mv, 1e-5f, fix_gamma, y2,
                                            m2, s2);
    } else {
        rt_batchnorm_forward_train(d, dt, x, gamma, beta, 1e-5f, fix_gamma, t, m1, s1);
        rt_batchnorm_relu_forward_train(d, dt, x, gamma, beta, 1e-5f, fix_gamma, y2, m2, s2);
    }
    rt_activation_forward(RT_ACT_RELU, n, dt, t, y1);
    mixed("BatchNorm + relu forward", y1, n, dt);
    same_bits("BatchNorm + relu forward", dn, y1, y2, n * es);
    same_bits("BatchNorm + relu saved mean", dn, m1, m2, c * sizeof(float));
    same_bits("BatchNorm + relu saved 1/std", dn, s1, s2, c * sizeof(float));
    /* backward, overwriting and accumulating into dx and the parameters */
    for (int acc = 0; acc < 2; acc++) {
        void *dr = buf(n, dt);
        BwdOut o = bwd_out(n, dt, d->c);
        rt_activation_backward(RT_ACT_RELU, n, dt, t, y1, dy, dr, false);
        rt_batchnorm_backward(d, dt, x, dr, gamma, m1, s1, fix_gamma, global, o.dx1, o.dg1, o.db1,
                              acc, acc);
        rt_batchnorm_relu_backward(d, dt, x, y1, dy, gamma, m1, s1, fix_gamma, global, o.dx2, o.dg2,
                                   o.db2, acc, acc);
        bwd_same("BatchNorm + relu", dn, &o, n, dt, d->c);
        free(dr);
    }
    free(x), free(dy), free(gamma), free(beta), free(mm), free(mv), free(t), free(y1), free(y2);
    free(m1), free(s1), free(m2), free(s2);
}

/* BatchNorm + residual add + relu against BatchNorm, elemwise_add and relu
 * (and their backwards), and written in place as the memory plan may: y
 * over the shortcut; the relu's gradient over dy, dx over y or x. */
static void check_bn_add(RtDType dt, const char *dn, const RtBnDims *d, bool fix_gamma, bool global)
{
    size_t n = (size_t)(d->outer * d->c * d->inner), es = rt_dtype_size(dt), c = (size_t)d->c;
    void *x = special_pack(n, dt, false), *sc = special_pack(n, dt, true),
         *dy = special_pack(n, dt, true);
    float *gamma = params(d->c, 0.5, 2), *beta = params(d->c, -1, 1);
    float *mm = params(d->c, -0.5, 0.5), *mv = params(d->c, 0.5, 2);
    void *t = buf(n, dt), *s = buf(n, dt), *y1 = buf(n, dt), *y2 = buf(n, dt), *y3 = malloc(n * es);
    float *m1 = tu_falloc(c), *s1 = tu_falloc(c), *m2 = tu_falloc(c), *s2 = tu_falloc(c);
    memcpy(y3, sc, n * es);
    if (global) {
        rt_batchnorm_forward_inference(d, dt, x, gamma, beta, mm, mv, 1e-5f, fix_gamma, t, m1, s1);
        rt_batchnorm_add_relu_forward_inference(d, dt, x, sc, gamma, beta, mm, mv, 1e-5f, fix_gamma,
                                                y2, m2, s2);
        rt_batchnorm_add_relu_forward_inference(d, dt, x, y3, gamma, beta, mm, mv, 1e-5f, fix_gamma,
                                                y3, m2, s2);
    } else {
        rt_batchnorm_forward_train(d, dt, x, gamma, beta, 1e-5f, fix_gamma, t, m1, s1);
        rt_batchnorm_add_relu_forward_train(d, dt, x, sc, gamma, beta, 1e-5f, fix_gamma, y2, m2,
                                            s2);
        rt_batchnorm_add_relu_forward_train(d, dt, x, y3, gamma, beta, 1e-5f, fix_gamma, y3, m2,
                                            s2);
    }
    rt_elemwise_forward(RT_BIN_ADD, n, dt, t, sc, s);
    rt_activation_forward(RT_ACT_RELU, n, dt, s, y1);
    mixed("BatchNorm + add + relu forward", y1, n, dt);
    same_bits("BatchNorm + add + relu forward", dn, y1, y2, n * es);
    same_bits("BatchNorm + add + relu forward over the shortcut", dn, y1, y3, n * es);
    same_bits("BatchNorm + add + relu saved mean", dn, m1, m2, c * sizeof(float));
    same_bits("BatchNorm + add + relu saved 1/std", dn, s1, s2, c * sizeof(float));
    for (int acc = 0; acc < 2; acc++) {
        void *dr = buf(n, dt), *ds = buf(n, dt);
        BwdOut o = bwd_out(n, dt, d->c);
        rt_activation_backward(RT_ACT_RELU, n, dt, s, y1, dy, dr, false);
        rt_batchnorm_backward(d, dt, x, dr, gamma, m1, s1, fix_gamma, global, o.dx1, o.dg1, o.db1,
                              acc, acc);
        rt_batchnorm_add_relu_backward(d, dt, x, y1, dy, gamma, m1, s1, fix_gamma, global, ds,
                                       o.dx2, o.dg2, o.db2, acc, acc);
        same_bits("BatchNorm + add + relu backward: the relu's gradient", dn, dr, ds, n * es);
        if (!acc) /* in place: the relu's gradient over dy, dx over y, then over x */
            for (int over_x = 0; over_x < 2; over_x++) {
                void *ip = malloc(n * es), *iy = malloc(n * es), *ix = malloc(n * es);
                memcpy(ip, dy, n * es), memcpy(iy, y1, n * es), memcpy(ix, x, n * es);
                rt_batchnorm_add_relu_backward(d, dt, ix, iy, ip, gamma, m1, s1, fix_gamma, global,
                                               ip, over_x ? ix : iy, o.dg2, o.db2, false, false);
                same_bits("in place: the relu's gradient over dy", dn, dr, ip, n * es);
                same_bits("in place: dx over y or x", dn, o.dx1, over_x ? ix : iy, n * es);
                free(ip), free(iy), free(ix);
            }
        bwd_same("BatchNorm + add + relu", dn, &o, n, dt, d->c);
        free(dr), free(ds);
    }
    free(x), free(sc), free(dy), free(gamma), free(beta), free(mm), free(mv), free(t), free(s);
    free(y1), free(y2), free(y3), free(m1), free(s1), free(m2), free(s2);
}

static void test_bn_add_relu(void **state)
{
    (void)state;
    tu_seed(14);
    for (int k = 0; k < 3; k++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int v = 0; v < 4; v++) {
                RtBnDims d = shapes[s];
                d.order = s == 0 ? RT_BN_ORDER_TILED : RT_BN_ORDER_CPU; /* both orders */
                check_bn_add(dtypes[k], dtype_names[k], &d, v & 1, v & 2);
            }
}

static void test_bn_relu(void **state)
{
    (void)state;
    tu_seed(11);
    for (int k = 0; k < 3; k++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int v = 0; v < 4; v++)
                check_bn(dtypes[k], dtype_names[k], &shapes[s], v & 1, v & 2);
}

static void test_add_relu(void **state)
{
    (void)state;
    tu_seed(12);
    for (int k = 0; k < 3; k++) {
        RtDType dt = dtypes[k];
        const char *dn = dtype_names[k];
        size_t es = rt_dtype_size(dt);
        for (size_t n = 1; n <= 4000; n = n * 7 + 3) {
            void *a = special_pack(n, dt, true), *b = special_pack(n, dt, true);
            void *s = buf(n, dt), *y1 = buf(n, dt), *y2 = buf(n, dt), *a2 = malloc(n * es);
            rt_elemwise_forward(RT_BIN_ADD, n, dt, a, b, s);
            rt_activation_forward(RT_ACT_RELU, n, dt, s, y1);
            rt_add_relu_forward(n, dt, a, b, y2);
            if (n > 100)
                mixed("add + relu forward", y1, n, dt);
            same_bits("add + relu forward", dn, y1, y2, n * es);
            /* in place over its first input, as the planner may put it */
            memcpy(a2, a, n * es);
            rt_add_relu_forward(n, dt, a2, b, a2);
            same_bits("add + relu forward in place", dn, y1, a2, n * es);
            /* backward: the relu's from y alone, without the sum */
            void *dy = special_pack(n, dt, true), *dx1 = buf(n, dt), *dx2 = buf(n, dt);
            rt_activation_backward(RT_ACT_RELU, n, dt, s, y1, dy, dx1, false);
            rt_activation_backward(RT_ACT_RELU, n, dt, NULL, y1, dy, dx2, false);
            same_bits("add + relu backward", dn, dx1, dx2, n * es);
            free(a), free(b), free(s), free(y1), free(y2), free(a2), free(dy), free(dx1), free(dx2);
        }
    }
}

/* ---- SoftmaxOutput with a cast folded in -------------------------------------- */

/* n*k logits in [-8, 8] with, when `special`, a NaN, +-inf, the largest
 * finite values, values in the 16-bit subnormal range (fp16: below 6.1e-5;
 * bf16: below 1.2e-38) and -0, then stored in dt */
static void *logits(size_t n, RtDType dt, bool special)
{
    double *x = tu_dalloc(n);
    tu_fill(x, n, -8, 8);
    static const double odd[] = {NAN,     INFINITY, -INFINITY, 65504,    -65504, 3e38,
                                 -3e38,   6e-8,     -3e-6,     2e-5,     1e-39,  -5e-41,
                                 -0.0,    0.0,      1e-45,     6.1e-5};
    for (size_t i = 0; special && i < sizeof odd / sizeof odd[0] && 3 * i + 1 < n; i++)
        x[3 * i + 1] = odd[i];
    void *p = tu_pack(x, n, dt);
    free(x);
    return p;
}

/* some outputs finite and strictly between the extremes, so the comparison
 * compares computed values, not only NaNs and zeros */
static void some_finite(const char *what, const void *v, size_t n, RtDType dt)
{
    float *f = tu_unpack(v, n, dt);
    size_t fin = 0;
    for (size_t i = 0; i < n; i++)
        fin += isfinite(f[i]) && f[i] != 0;
    free(f);
    if (fin < n / 4)
        fail_msg("%s: only %zu of %zu outputs finite and non-zero: the test compares too little",
                 what, fin, n);
}

/* The forward reading 16-bit logits against cast-to-fp32 + the fp32
 * forward; rows of 1, a few, more than a chunk; rows with NaN and infinities
 * and rows of subnormal-range values. */
static void test_cast_softmax_output(void **state)
{
    (void)state;
    tu_seed(13);
    static const int64_t ks[] = {1, 3, 10, 700};
    for (int d = 1; d < 3; d++) {
        RtDType xdt = dtypes[d];
        for (size_t s = 0; s < sizeof ks / sizeof ks[0]; s++)
            for (int special = 0; special < 2; special++) {
                int64_t n = 9, k = ks[s];
                size_t nk = (size_t)(n * k);
                void *x = logits(nk, xdt, special), *t = buf(nk, RT_F32);
                void *p1 = buf(nk, RT_F32), *p2 = buf(nk, RT_F32);
                rt_cast_forward(nk, xdt, x, RT_F32, t);
                rt_softmax_output_forward(n, k, RT_F32, t, RT_F32, p1);
                memset(p2, 0x55, nk * sizeof(float));
                rt_softmax_output_forward(n, k, xdt, x, RT_F32, p2);
                if (k > 1 && !special)
                    some_finite("SoftmaxOutput from 16-bit logits", p1, nk, RT_F32);
                same_bits("SoftmaxOutput reading 16-bit logits", dtype_names[d], p1, p2,
                          nk * sizeof(float));
                free(x), free(t), free(p1), free(p2);
            }
    }
}

/* fp32 probabilities: a softmax's, or (`special`) with NaN, infinities,
 * values outside [0, 1] and fp32 subnormals mixed in */
static float *probs(int64_t n, int64_t k, bool special)
{
    size_t nk = (size_t)(n * k);
    void *x = logits(nk, RT_F32, false);
    float *p = tu_falloc(nk);
    rt_softmax_output_forward(n, k, RT_F32, x, RT_F32, p);
    static const float odd[] = {NAN, INFINITY, -INFINITY, 1e-40f, -1e-42f, 3e-8f, 2.0f, -0.0f};
    for (size_t i = 0; special && i < sizeof odd / sizeof odd[0] && 5 * i + 2 < nk; i++)
        p[5 * i + 2] = odd[i];
    free(x);
    return p;
}

/* The backward writing a 16-bit gradient against the fp32 backward + the
 * cast to 16 bits: every normalisation, ignored labels, smoothing, loss
 * scales that push values past fp16's range and grad_scales that bring them
 * into its subnormal range. */
static void test_softmax_output_bwd_cast(void **state)
{
    (void)state;
    tu_seed(14);
    static const int64_t ks[] = {1, 3, 10, 700};
    static const float scales[][2] = {{1, 1}, {1, 65536}, {1, 16777216}, {1e-6f, 1}, {3e-9f, 8}};
    for (int d = 1; d < 3; d++) {
        RtDType dxdt = dtypes[d];
        for (size_t s = 0; s < sizeof ks / sizeof ks[0]; s++)
            for (int v = 0; v < 12; v++) {
                int64_t n = 7, k = ks[s];
                size_t nk = (size_t)(n * k);
                const float *sc = scales[v % 5];
                RtSmoParams p = {.grad_scale = sc[0], .smooth_alpha = v & 1 ? 0.1f : 0,
                                 .use_ignore = v & 2, .ignore_label = 1,
                                 .normalization = (RtSmoNorm)(v % 3)};
                float *prob = probs(n, k, v >= 6), *label = tu_falloc((size_t)n);
                for (int64_t i = 0; i < n; i++)
                    label[i] = (float)(i % (k + 1)); /* k itself: out of range */
                void *d32 = buf(nk, RT_F32), *dx1 = buf(nk, dxdt), *dx2 = buf(nk, dxdt);
                RtStepState st = {.scale = sc[1]};
                rt_softmax_output_backward(n, k, RT_F32, prob, label, &p, &st, RT_F32, d32, false);
                rt_cast_forward(nk, RT_F32, d32, dxdt, dx1);
                memset(dx2, 0x55, nk * rt_dtype_size(dxdt));
                rt_softmax_output_backward(n, k, RT_F32, prob, label, &p, &st, dxdt, dx2, false);
                if (k > 1 && v < 6 && sc[0] == 1)
                    some_finite("SoftmaxOutput backward to 16 bits", dx1, nk, dxdt);
                same_bits("SoftmaxOutput backward writing 16 bits", dtype_names[d], dx1, dx2,
                          nk * rt_dtype_size(dxdt));
                free(prob), free(label), free(d32), free(dx1), free(dx2);
            }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bn_relu),
        cmocka_unit_test(test_bn_add_relu),
        cmocka_unit_test(test_add_relu),
        cmocka_unit_test(test_cast_softmax_output),
        cmocka_unit_test(test_softmax_output_bwd_cast),
    };
    return cmocka_run_group_tests_name("cpu_fused", tests, NULL, NULL);
}
