/* test_cpu_fused.c - the fuse pass's kernels against the unfused pairs they
 * replace, bit for bit, in fp32, fp16 and bf16 (docs/codegen.md,
 * "Fusions"): BatchNorm + relu (training and inference forward; backward
 * with batch and global statistics, fix_gamma, accumulation) and
 * elemwise_add + relu (forward, in place too; backward from y alone).
 * Inputs include zeros, values that round to -0, NaN and infinities, and
 * shapes larger than a chunk and than a channel group. */
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
static const RtBnDims shapes[] = {{2, 3, 5}, {3, 2, 700}, {2, 70, 9}};

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
        void *dr = buf(n, dt), *dx1 = special_pack(n, dt, false), *dx2 = malloc(n * es);
        float *dg1 = params(d->c, -1, 1), *db1 = params(d->c, -1, 1);
        float *dg2 = tu_falloc(c), *db2 = tu_falloc(c);
        memcpy(dx2, dx1, n * es);
        memcpy(dg2, dg1, c * sizeof(float));
        memcpy(db2, db1, c * sizeof(float));
        rt_activation_backward(RT_ACT_RELU, n, dt, t, y1, dy, dr, false);
        rt_batchnorm_backward(d, dt, x, dr, gamma, m1, s1, fix_gamma, global, dx1, dg1, db1, acc,
                              acc);
        rt_batchnorm_relu_backward(d, dt, x, y1, dy, gamma, m1, s1, fix_gamma, global, dx2, dg2,
                                   db2, acc, acc);
        same_bits("BatchNorm + relu backward dx", dn, dx1, dx2, n * es);
        same_bits("BatchNorm + relu backward dgamma", dn, dg1, dg2, c * sizeof(float));
        same_bits("BatchNorm + relu backward dbeta", dn, db1, db2, c * sizeof(float));
        free(dr), free(dx1), free(dx2), free(dg1), free(db1), free(dg2), free(db2);
    }
    free(x), free(dy), free(gamma), free(beta), free(mm), free(mv), free(t), free(y1), free(y2);
    free(m1), free(s1), free(m2), free(s2);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bn_relu),
        cmocka_unit_test(test_add_relu),
    };
    return cmocka_run_group_tests_name("cpu_fused", tests, NULL, NULL);
}
