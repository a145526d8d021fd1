/* test_cpu_dtype.c - storage dtypes: bulk conversion (RNE, subnormals,
 * overflow), accumulate-and-round stores, finite checks over one and many
 * tensors, Flatten/Reshape copies and Cast between fp32/fp16/bf16 with its
 * cast-back gradient. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_cpu_util.h"

static void test_dtype_basics(void **state)
{
    (void)state;
    assert_int_equal(rt_dtype_size(RT_F32), 4);
    assert_int_equal(rt_dtype_size(RT_F16), 2);
    assert_int_equal(rt_dtype_size(RT_BF16), 2);
    assert_string_equal(rt_dtype_name(RT_F16), "float16");
    assert_string_equal(rt_dtype_name(RT_BF16), "bfloat16");
}

/* Rounding at the edges, through the bulk paths the kernels use. */
static void test_conversions(void **state)
{
    (void)state;
    float in[8] = {
        1.0f + 1.0f / 2048,       /* fp16 tie between 1 and 1+2^-10: even, 1 */
        1.0f + 3.0f / 2048,       /* tie: rounds up to the even 1+2^-9 */
        5.9604644775390625e-8f,   /* 2^-24: the smallest fp16 subnormal */
        2.9802322387695312e-8f,   /* 2^-25: a tie with 0, to even: 0 */
        65504.0f,                 /* fp16 max */
        65520.0f,                 /* rounds to inf */
        -1e-3f,
        3.0e38f,
    };
    uint16_t h[8];
    float back[8];
    rt_from_f32(h, in, 8, RT_F16);
    rt_to_f32(back, h, 8, RT_F16);
    assert_true(back[0] == 1.0f);
    assert_true(back[1] == 1.0f + 1.0f / 512);
    assert_true(back[2] == 5.9604644775390625e-8f);
    assert_true(back[3] == 0.0f);
    assert_true(back[4] == 65504.0f);
    assert_true(isinf(back[5]) && back[5] > 0);
    assert_float_equal(back[6], -1e-3, 1e-6);
    assert_true(isinf(back[7]));
    rt_from_f32(h, in, 8, RT_BF16);
    rt_to_f32(back, h, 8, RT_BF16);
    assert_true(back[0] == 1.0f); /* 1 + 2^-11 is below bf16's half ulp */
    assert_float_equal(back[7], 3.0e38, 3.0e38 * 4e-3);
    float big = 3.4e38f;
    rt_from_f32(h, &big, 1, RT_BF16);
    rt_to_f32(back, h, 1, RT_BF16);
    assert_true(isinf(back[0])); /* rounds past the largest bf16 */
}

static void test_store_accumulate(void **state)
{
    (void)state;
    float a[3] = {1, 2, 3}, b[3] = {0.5f, 0.25f, -3};
    float f[3] = {1, 2, 3};
    rt_store_f32(f, b, 3, RT_F32, true);
    assert_true(f[0] == 1.5f && f[1] == 2.25f && f[2] == 0);
    uint16_t h[3];
    rt_from_f32(h, a, 3, RT_F16);
    rt_store_f32(h, b, 3, RT_F16, true);
    float r[3];
    rt_to_f32(r, h, 3, RT_F16);
    assert_true(r[0] == 1.5f && r[1] == 2.25f && r[2] == 0);
    /* one rounding: 2048 + 1 + 1 in fp16 would stick at 2048 if rounded
     * twice; here a single add of 1.5 rounds 2049.5 to 2050 */
    float big = 2048, add = 1.5f;
    rt_from_f32(h, &big, 1, RT_F16);
    rt_store_f32(h, &add, 1, RT_F16, true);
    rt_to_f32(r, h, 1, RT_F16);
    assert_true(r[0] == 2050.0f);
}

static void test_all_finite(void **state)
{
    (void)state;
    RtDType dts[] = TU_DTYPES;
    for (int t = 0; t < 3; t++) {
        RtDType dt = dts[t];
        size_t n = 1000;
        float *f = tu_falloc(n);
        for (size_t i = 0; i < n; i++)
            f[i] = (float)i - 500.0f;
        void *p = malloc(n * rt_dtype_size(dt));
        rt_from_f32(p, f, n, dt);
        assert_true(rt_all_finite(p, n, dt));
        assert_true(rt_all_finite(p, 0, dt));
        float bad[3] = {INFINITY, -INFINITY, NAN};
        for (int k = 0; k < 3; k++) {
            rt_from_f32((char *)p + 777 * rt_dtype_size(dt), &bad[k], 1, dt);
            assert_false(rt_all_finite(p, n, dt));
            assert_true(rt_all_finite(p, 777, dt)); /* before the bad element */
            rt_from_f32((char *)p + 777 * rt_dtype_size(dt), &f[777], 1, dt);
        }
        /* fp16 overflow of a finite fp32 value is caught on the 16-bit side */
        if (dt == RT_F16) {
            float v = 70000.0f;
            rt_from_f32(p, &v, 1, dt);
            assert_false(rt_all_finite(p, n, dt));
        }
        free(p);
        free(f);
    }
    float a[4] = {1, 2, 3, 4}, b[2] = {5, NAN};
    uint16_t h[3] = {0x3c00, 0x7c00, 0}; /* 1, inf, 0 in fp16 */
    RtTensorRef ok[2] = {{a, 4, RT_F32}, {b, 1, RT_F32}};
    assert_true(rt_multi_all_finite(ok, 2));
    RtTensorRef nan[2] = {{a, 4, RT_F32}, {b, 2, RT_F32}};
    assert_false(rt_multi_all_finite(nan, 2));
    RtTensorRef inf16[2] = {{a, 4, RT_F32}, {h, 3, RT_F16}};
    assert_false(rt_multi_all_finite(inf16, 2));
    assert_true(rt_multi_all_finite(inf16, 1));
    assert_true(rt_multi_all_finite(NULL, 0));
}

typedef struct {
    double *x, *dy;
    size_t n;
    RtDType to;
} CastCtx;

/* Cast forward in double is the identity up to rounding: the loss is
 * linear, its gradient dy (rounded to the source dtype by the kernel). */
static double cast_loss(void *p)
{
    CastCtx *c = p;
    return tu_dot(c->x, c->dy, c->n);
}

/* Flatten/Reshape: a copy forward (nothing in place), the gradient back. */
static void test_reshape(void **state)
{
    (void)state;
    tu_seed(60);
    RtDType dts[] = TU_DTYPES;
    for (int t = 0; t < 3; t++) {
        RtDType dt = dts[t];
        size_t n = 1500, esz = rt_dtype_size(dt);
        double *x = tu_dalloc(n), *g = tu_dalloc(n), *sum = tu_dalloc(n);
        tu_fill(x, n, -1, 1);
        tu_fill(g, n, -1, 1);
        tu_round_all(x, n, dt);
        tu_round_all(g, n, dt);
        void *xs = tu_pack(x, n, dt), *ys = tu_pack(g, n, dt), *gs = tu_pack(g, n, dt),
             *dxs = tu_pack(x, n, dt);
        rt_reshape_forward(n, dt, xs, ys);
        assert_memory_equal(xs, ys, n * esz);
        rt_flatten_forward(n, dt, xs, xs); /* in place: nothing */
        assert_memory_equal(xs, ys, n * esz);
        rt_flatten_backward(n, dt, gs, dxs, false);
        assert_memory_equal(gs, dxs, n * esz);
        rt_reshape_backward(n, dt, gs, dxs, true);
        for (size_t i = 0; i < n; i++)
            sum[i] = 2 * g[i];
        assert_int_equal(tu_check("reshape dx accumulate", dxs, dt, sum, n, tu_tol(dt, 2)), 0);
        if (dt == RT_F32) {
            /* the identity: d(sum x*g)/dx = g, the overwritten gradient */
            float *g32 = tu_unpack(gs, n, dt);
            CastCtx c = {x, g, n, dt};
            assert_int_equal(tu_fd_check("reshape x", x, n, g32, cast_loss, &c, 20, 1e-3, 1e-6, 1e-5), 0);
            free(g32);
        }
        free(x), free(g), free(sum), free(xs), free(ys), free(gs), free(dxs);
    }
}

static void test_cast(void **state)
{
    (void)state;
    tu_seed(61);
    RtDType dts[] = TU_DTYPES;
    size_t n = 1300;
    double *x = tu_dalloc(n), *y = tu_dalloc(n), *dy = tu_dalloc(n), *dx = tu_dalloc(n);
    size_t bad = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            RtDType from = dts[a], to = dts[b];
            tu_fill(x, n, -3, 3);
            x[0] = 1e-6; /* an fp16 subnormal */
            x[1] = 7e4;  /* overflows fp16 */
            tu_fill(dy, n, -1, 1);
            tu_round_all(x, n, from);
            tu_round_all(dy, n, to);
            for (size_t i = 0; i < n; i++) {
                y[i] = tu_round(x[i], to);
                dx[i] = tu_round(dy[i], from);
            }
            void *xs = tu_pack(x, n, from), *ys = tu_pack(y, n, to), *dys = tu_pack(dy, n, to),
                 *dxs = tu_pack(dx, n, from);
            rt_cast_forward(n, from, xs, to, ys);
            /* exact: one rounding of an exact value, so bit equality */
            void *want = tu_pack(y, n, to);
            if (memcmp(ys, want, n * rt_dtype_size(to))) {
                fprintf(stderr, "cast %s -> %s differs\n", rt_dtype_name(from), rt_dtype_name(to));
                bad++;
            }
            rt_cast_backward(n, to, dys, from, dxs, false);
            void *wantdx = tu_pack(dx, n, from);
            if (memcmp(dxs, wantdx, n * rt_dtype_size(from))) {
                fprintf(stderr, "cast backward %s -> %s differs\n", rt_dtype_name(to),
                        rt_dtype_name(from));
                bad++;
            }
            float *dx32 = tu_unpack(dxs, n, from);
            rt_cast_backward(n, to, dys, from, dxs, true);
            double *dx2 = tu_dalloc(n);
            for (size_t i = 0; i < n; i++)
                dx2[i] = 2 * dx[i];
            bad += tu_check("cast dx accumulate", dxs, from, dx2, n, tu_tol(from, 2));
            if (from == RT_F32 && to == RT_F32) {
                CastCtx c = {x, dy, n, to};
                bad += tu_fd_check("cast x", x, n, dx32, cast_loss, &c, 20, 1e-3, 1e-6, 1e-5);
            }
            free(dx2), free(dx32), free(want), free(wantdx);
            free(xs), free(ys), free(dys), free(dxs);
        }
    free(x), free(y), free(dy), free(dx);
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_basics),
        cmocka_unit_test(test_conversions),
        cmocka_unit_test(test_store_accumulate),
        cmocka_unit_test(test_all_finite),
        cmocka_unit_test(test_reshape),
        cmocka_unit_test(test_cast),
    };
    return cmocka_run_group_tests_name("cpu_dtype", tests, NULL, NULL);
}
