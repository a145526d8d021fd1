/* test_cuda_plan.c - the host logic of the cuDNN and cuBLASLt calls
 * (runtime/cuda/plan.c): layouts and channel padding, the tensor
 * descriptors (checked by running a convolution that indexes memory only
 * through them against rt_conv_forward), the plan keys and cache, and the
 * FullyConnected GEMMs (a column-major GEMM driven by them against rt_fc_*).
 * No GPU, no CUDA header. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cuda/plan.c"
#include "test_cpu_util.h"

static void test_layout_and_padding(void **state)
{
    (void)state;
    assert_int_equal(ampc_conv_layout(RT_F32), AMPC_NCHW);
    assert_int_equal(ampc_conv_layout(RT_F16), AMPC_NHWC);
    assert_int_equal(ampc_conv_layout(RT_BF16), AMPC_NHWC);
    RtConvDims d = {.n = 1, .k = 8, .groups = 1, .nsp = 2};
    static const int want[] = {0, 4, 4, 4, 4, 8, 8, 8, 8, 9, 10};
    for (int c = 1; c <= 10; c++) {
        d.c = c;
        assert_int_equal(ampc_conv_padded_c(&d, AMPC_NHWC), want[c]);
        assert_int_equal(ampc_conv_padded_c(&d, AMPC_NCHW), c);
    }
    d.c = 3, d.groups = 3;
    assert_int_equal(ampc_conv_padded_c(&d, AMPC_NHWC), 3); /* grouped: never padded */
    assert_int_equal(ampc_padded_bytes(10, 4, RT_F16), 256);
    assert_int_equal(ampc_padded_bytes(100, 4, RT_F16), 1024);
    assert_int_equal(ampc_padded_bytes(0, 4, RT_F16), 0);
    assert_int_equal(ampc_padded_bytes(INT64_MAX / 2, 4, RT_F16), 0);
}

/* element offset of a cuDNN tensor through its descriptor */
static int64_t at(const AmpcTensorDesc *t, const int64_t *idx)
{
    int64_t o = 0;
    for (int i = 0; i < t->nd; i++)
        o += idx[i] * t->strides[i];
    return o;
}

/* what cuDNN computes from the descriptors alone (cross-correlation, groups
 * = x channels / w channels), in double */
static void desc_conv(const AmpcConvGeom *g, const float *x, const float *w, double *y)
{
    int64_t groups = g->x.dims[1] / g->w.dims[1], kpg = g->w.dims[0] / groups;
    int nsp = g->nsp;
    int64_t o[3] = {0}, r[3] = {0};
    int64_t on = 1, rn = 1;
    for (int s = 0; s < nsp; s++)
        on *= g->y.dims[2 + s], rn *= g->w.dims[2 + s];
    for (int64_t n = 0; n < g->y.dims[0]; n++)
        for (int64_t k = 0; k < g->y.dims[1]; k++)
            for (int64_t oi = 0; oi < on; oi++) {
                for (int s = nsp - 1, q = (int)oi; s >= 0; s--)
                    o[s] = q % g->y.dims[2 + s], q /= (int)g->y.dims[2 + s];
                double acc = 0;
                for (int64_t c = 0; c < g->w.dims[1]; c++)
                    for (int64_t ri = 0; ri < rn; ri++) {
                        for (int s = nsp - 1, q = (int)ri; s >= 0; s--)
                            r[s] = q % g->w.dims[2 + s], q /= (int)g->w.dims[2 + s];
                        int64_t xi[5] = {n, (k / kpg) * g->w.dims[1] + c}, wi[5] = {k, c};
                        bool inside = true;
                        for (int s = 0; s < nsp; s++) {
                            int64_t p = o[s] * g->stride[s] - g->pad[s] + r[s] * g->dilate[s];
                            inside &= p >= 0 && p < g->x.dims[2 + s];
                            xi[2 + s] = p, wi[2 + s] = r[s];
                        }
                        if (inside)
                            acc += (double)x[at(&g->x, xi)] * w[at(&g->w, wi)];
                    }
                int64_t yi[5] = {n, k};
                for (int s = 0; s < nsp; s++)
                    yi[2 + s] = o[s];
                y[at(&g->y, yi)] = acc;
            }
}

static int64_t prod(const int *v, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        p *= v[i];
    return p;
}

/* NCHW [a, c, s] -> channels-last [a, s, cp], zero padded (plan.h's NHWC
 * and KRSC, written out by hand) */
static float *to_last(const float *src, int64_t a, int64_t c, int64_t s, int64_t cp)
{
    float *d = calloc((size_t)(a * s * cp), sizeof *d);
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < c; j++)
            for (int64_t q = 0; q < s; q++)
                d[(i * s + q) * cp + j] = src[(i * c + j) * s + q];
    return d;
}

static void check_geom(RtConvDims d, RtDType dt)
{
    assert_true(rt_conv_dims_init(&d));
    AmpcConvGeom g;
    char err[256];
    /* the CUDA dims carry the schedule's layout for dt (the kernels follow
     * it); the CPU reference below stays NCHW */
    RtConvDims dl = d;
    dl.layout = ampc_conv_layout(dt) == AMPC_NHWC ? RT_LAYOUT_NHWC : RT_LAYOUT_NCHW;
    assert_true(ampc_conv_geom(&dl, dt, RT_PASS_FORWARD, &g, err, sizeof err));
    int64_t S = prod(d.in, d.nsp), R = prod(d.kernel, d.nsp), O = prod(d.out, d.nsp);
    int64_t cg = d.c / d.groups;
    size_t xn = (size_t)(d.n * d.c * S), wn = (size_t)(d.k * cg * R), yn = (size_t)(d.n * d.k * O);
    float *x = malloc(xn * 4), *w = malloc(wn * 4), *y = malloc(yn * 4);
    for (size_t i = 0; i < xn; i++)
        x[i] = (float)tu_uniform(-1, 1);
    for (size_t i = 0; i < wn; i++)
        w[i] = (float)tu_uniform(-1, 1);
    void *cws = aligned_alloc(RT_WS_ALIGN, rt_conv_workspace_bytes(&d, RT_F32, RT_PASS_FORWARD) / RT_WS_ALIGN * RT_WS_ALIGN + RT_WS_ALIGN);
    rt_conv_forward(&d, RT_F32, x, w, NULL, y, cws);
    free(cws);
    double *yd = calloc(yn, sizeof *yd);
    const float *xs = x, *ws = w;
    float *xl = NULL, *wl = NULL;
    if (g.layout == AMPC_NHWC) {
        xs = xl = to_last(x, d.n, d.c, S, g.c);
        ws = wl = to_last(w, d.k, cg, R, g.w.dims[1]);
        assert_int_equal(g.x.strides[1], 1);
    } else {
        assert_int_equal(g.x.strides[g.x.nd - 1], 1);
        assert_int_equal(g.pad_bytes, 0);
    }
    desc_conv(&g, xs, ws, yd);
    for (size_t i = 0; i < yn; i++) {
        /* y in the layout: NHWC y[(n*O + o)*K + k] vs NCHW y[(n*K + k)*O + o] */
        size_t ref = i;
        if (g.layout == AMPC_NHWC) {
            size_t n = i / (size_t)(d.k * O), k = i / (size_t)O % (size_t)d.k, o = i % (size_t)O;
            ref = (n * (size_t)O + o) * (size_t)d.k + k;
        }
        if (fabs(yd[ref] - y[i]) > 1e-4 * (1 + fabs(y[i])))
            fail_msg("conv %d-D c %d groups %d dt %d: y[%zu] = %g, the descriptors give %g",
                     d.nsp, d.c, d.groups, dt, i, y[i], yd[ref]);
    }
    free(x), free(w), free(y), free(yd), free(xl), free(wl);
}

static void test_descriptors_against_cpu_conv(void **state)
{
    (void)state;
    tu_seed(7);
    RtDType dts[] = {RT_F32, RT_F16};
    for (int t = 0; t < 2; t++) {
        /* 2-D, the RGB case (padded to 4 in NHWC) with stride and pad */
        check_geom((RtConvDims){.n = 2, .c = 3, .k = 5, .groups = 1, .nsp = 2, .in = {7, 6},
                                .kernel = {3, 3}, .stride = {2, 1}, .pad = {1, 0},
                                .dilate = {1, 2}}, dts[t]);
        /* grouped, 6 channels (not padded), dilated */
        check_geom((RtConvDims){.n = 1, .c = 6, .k = 4, .groups = 2, .nsp = 2, .in = {5, 5},
                                .kernel = {2, 3}, .stride = {1, 1}, .pad = {0, 1},
                                .dilate = {2, 1}}, dts[t]);
        /* 1-D (a unit axis in front), 5 channels (padded to 8) */
        check_geom((RtConvDims){.n = 2, .c = 5, .k = 3, .groups = 1, .nsp = 1, .in = {9},
                                .kernel = {3}, .stride = {2}, .pad = {1}, .dilate = {1}}, dts[t]);
        /* 3-D */
        check_geom((RtConvDims){.n = 1, .c = 2, .k = 2, .groups = 1, .nsp = 3, .in = {3, 4, 5},
                                .kernel = {2, 2, 3}, .stride = {1, 2, 1}, .pad = {1, 0, 1},
                                .dilate = {1, 1, 1}}, dts[t]);
    }
}

static void test_geom_errors(void **state)
{
    (void)state;
    char err[256];
    AmpcConvGeom g;
    RtConvDims bad = {.n = 1, .c = 3, .k = 4, .groups = 2, .nsp = 2, .in = {4, 4},
                      .kernel = {3, 3}, .stride = {1, 1}, .dilate = {1, 1}};
    assert_false(ampc_conv_geom(&bad, RT_F16, RT_PASS_FORWARD, &g, err, sizeof err));
    assert_non_null(strstr(err, "invalid dims"));
    RtConvDims huge = {.n = 1 << 30, .c = 3, .k = 1 << 30, .groups = 1, .nsp = 3,
                       .in = {1 << 20, 1 << 20, 1 << 20}, .kernel = {1, 1, 1},
                       .stride = {1, 1, 1}, .dilate = {1, 1, 1}};
    assert_false(ampc_conv_geom(&huge, RT_F16, RT_PASS_FORWARD, &g, err, sizeof err));
    assert_non_null(strstr(err, "2^63"));
    RtConvDims rgb = {.n = 2, .c = 3, .k = 8, .groups = 1, .nsp = 2, .in = {10, 10},
                      .kernel = {3, 3}, .stride = {1, 1}, .dilate = {1, 1},
                      .layout = RT_LAYOUT_NHWC};
    /* the layout is the dims', not the dtype's: NCHW bf16 and NHWC fp32 */
    rgb.layout = RT_LAYOUT_NCHW;
    assert_true(ampc_conv_geom(&rgb, RT_BF16, RT_PASS_FORWARD, &g, err, sizeof err));
    assert_int_equal(g.layout, AMPC_NCHW);
    assert_int_equal(g.c, 3);
    rgb.layout = RT_LAYOUT_NHWC;
    assert_true(ampc_conv_geom(&rgb, RT_F32, RT_PASS_FORWARD, &g, err, sizeof err));
    assert_int_equal(g.layout, AMPC_NHWC);
    assert_true(ampc_conv_geom(&rgb, RT_BF16, RT_PASS_BACKWARD_WEIGHT, &g, err, sizeof err));
    assert_int_equal(g.layout, AMPC_NHWC);
    assert_int_equal(g.c, 4);
    assert_int_equal(g.pad_bytes, ampc_padded_bytes(200, 4, RT_BF16) + ampc_padded_bytes(72, 4, RT_BF16));
}

/* the statistics a fused GEN_STATS writes: one fp32 sum per channel of y,
 * [1, k, 1, 1] packed in the layout (the first convolution's padded input
 * channels do not reach y) */
static void test_stats_desc(void **state)
{
    (void)state;
    char err[256];
    AmpcConvGeom g;
    RtConvDims rgb = {.n = 2,
                      .c = 3,
                      .k = 24,
                      .groups = 1,
                      .nsp = 2,
                      .in = {10, 10},
                      .kernel = {3, 3},
                      .stride = {1, 1},
                      .dilate = {1, 1},
                      .layout = RT_LAYOUT_NHWC};
    for (int l = 0; l < 2; l++) {
        rgb.layout = l ? RT_LAYOUT_NCHW : RT_LAYOUT_NHWC;
        assert_true(ampc_conv_geom(&rgb, RT_F16, RT_PASS_FORWARD, &g, err, sizeof err));
        assert_int_equal(g.stats.nd, 4);
        assert_int_equal(g.stats.dims[0], 1);
        assert_int_equal(g.stats.dims[1], 24);
        assert_int_equal(g.stats.dims[2] * g.stats.dims[3], 1);
        assert_int_equal(g.stats.strides[1], 1);
        assert_int_equal(g.stats.strides[0], 24);
        assert_true(ampc_stats_check(&g, err, sizeof err));
    }
    AmpcConvGeom bad = g;
    bad.stats.dims[1] = 12;
    assert_false(ampc_stats_check(&bad, err, sizeof err));
    assert_non_null(strstr(err, "not one sum per channel"));
    bad = g, bad.stats.dims[3] = 10; /* a sum per column */
    assert_false(ampc_stats_check(&bad, err, sizeof err));
    bad = g, bad.stats.nd = 3;
    assert_false(ampc_stats_check(&bad, err, sizeof err));
    bad = g, bad.stats.strides[1] = 2;
    assert_false(ampc_stats_check(&bad, err, sizeof err));
    assert_non_null(strstr(err, "packed NCHW strides"));
}

static void test_keys(void **state)
{
    (void)state;
    RtConvDims d = {.n = 2, .c = 3, .k = 5, .groups = 1, .nsp = 2, .in = {7, 6},
                    .kernel = {3, 3}, .stride = {2, 1}, .pad = {1, 0}, .dilate = {1, 2}};
    AmpcPlanKey a, b;
    ampc_conv_key(&d, RT_F16, RT_PASS_FORWARD, &a);
    RtConvDims e = d;
    e.in[2] = 99, e.kernel[2] = 42; /* an unused axis does not matter */
    ampc_conv_key(&e, RT_F16, RT_PASS_FORWARD, &b);
    assert_true(ampc_key_equal(&a, &b));
    assert_int_equal(ampc_key_hash(&a), ampc_key_hash(&b));
    /* every field that matters changes the key */
    int *fields[] = {&e.n, &e.c, &e.k, &e.groups, &e.in[0], &e.in[1], &e.kernel[0],
                     &e.kernel[1], &e.stride[0], &e.stride[1], &e.pad[0], &e.pad[1],
                     &e.dilate[0], &e.dilate[1], &e.nsp};
    for (size_t f = 0; f < sizeof fields / sizeof *fields; f++) {
        e = d;
        int *p = (int *)((char *)&e + ((char *)fields[f] - (char *)&e));
        (*p)++;
        ampc_conv_key(&e, RT_F16, RT_PASS_FORWARD, &b);
        assert_false(ampc_key_equal(&a, &b));
    }
    ampc_conv_key(&d, RT_BF16, RT_PASS_FORWARD, &b);
    assert_false(ampc_key_equal(&a, &b));
    e = d;
    e.layout = RT_LAYOUT_NHWC; /* d's is NCHW */
    ampc_conv_key(&e, RT_F16, RT_PASS_FORWARD, &b);
    assert_false(ampc_key_equal(&a, &b));
    ampc_conv_key(&d, RT_F16, RT_PASS_BACKWARD, &b);
    assert_false(ampc_key_equal(&a, &b));
    ampc_conv_key(&d, RT_F16, RT_PASS_BACKWARD_WEIGHT, &b);
    assert_false(ampc_key_equal(&a, &b));
    RtFcDims f = {.n = 4, .in = 5, .hidden = 6};
    ampc_fc_key(&f, RT_F16, RT_PASS_FORWARD, &b);
    assert_false(ampc_key_equal(&a, &b));
    AmpcPlanKey c;
    f.in = 6, f.hidden = 5;
    ampc_fc_key(&f, RT_F16, RT_PASS_FORWARD, &c);
    assert_false(ampc_key_equal(&b, &c));
}

static int dropped;
/* ctx: the count of drops seen with the cache's context */
static void drop(void *ctx, void *v)
{
    dropped += (int)(intptr_t)v != 0;
    *(int *)ctx += 1;
}

static void test_cache(void **state)
{
    (void)state;
    AmpcPlanCache c = {0};
    AmpcPlanKey k;
    RtFcDims f = {.n = 1, .in = 1, .hidden = 1};
    for (int i = 1; i <= 1000; i++) {
        f.n = i;
        ampc_fc_key(&f, RT_F32, (RtPass)(i % 3), &k);
        assert_null(ampc_cache_get(&c, &k));
        assert_true(ampc_cache_put(&c, &k, (void *)(intptr_t)i));
    }
    for (int i = 1; i <= 1000; i++) {
        f.n = i;
        ampc_fc_key(&f, RT_F32, (RtPass)(i % 3), &k);
        assert_int_equal((intptr_t)ampc_cache_get(&c, &k), i);
        ampc_fc_key(&f, RT_F32, (RtPass)((i + 1) % 3), &k);
        assert_null(ampc_cache_get(&c, &k));
    }
    assert_int_equal(c.count, 1000);
    int seen = 0;
    ampc_cache_free(&c, drop, &seen);
    assert_int_equal(dropped, 1000);
    assert_int_equal(seen, 1000);
    assert_null(ampc_cache_get(&c, &k));
}

/* D = op(A) op(B), column-major, through the AmpcGemm only */
static void gemm(const AmpcGemm *g, const float *A, const float *B, float *D)
{
    assert_true(g->lda >= g->rowsa && g->ldb >= g->rowsb && g->ldd >= g->m);
    assert_int_equal(g->transa ? g->colsa : g->rowsa, g->m);
    assert_int_equal(g->transa ? g->rowsa : g->colsa, g->k);
    assert_int_equal(g->transb ? g->colsb : g->rowsb, g->k);
    assert_int_equal(g->transb ? g->rowsb : g->colsb, g->n);
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            double s = 0;
            for (int64_t p = 0; p < g->k; p++) {
                float a = g->transa ? A[p + i * g->lda] : A[i + p * g->lda];
                float b = g->transb ? B[j + p * g->ldb] : B[p + j * g->ldb];
                s += (double)a * b;
            }
            D[i + j * g->ldd] = (float)s;
        }
}

static void test_fc_gemms(void **state)
{
    (void)state;
    RtFcDims d = {.n = 5, .in = 7, .hidden = 3};
    size_t xn = 35, wn = 21, yn = 15;
    float x[35], w[21], dy[15], y[15], dx[35], dw[21], got[35];
    tu_seed(3);
    for (size_t i = 0; i < xn; i++)
        x[i] = (float)tu_uniform(-1, 1);
    for (size_t i = 0; i < wn; i++)
        w[i] = (float)tu_uniform(-1, 1);
    for (size_t i = 0; i < yn; i++)
        dy[i] = (float)tu_uniform(-1, 1);
    assert_int_equal(rt_fc_workspace_bytes(&d, RT_F32, RT_PASS_FORWARD) +
                         rt_fc_workspace_bytes(&d, RT_F32, RT_PASS_BACKWARD) +
                         rt_fc_workspace_bytes(&d, RT_F32, RT_PASS_BACKWARD_WEIGHT), 0);
    rt_fc_forward(&d, RT_F32, x, w, NULL, y, NULL);
    rt_fc_backward_data(&d, RT_F32, w, dy, dx, false, NULL);
    rt_fc_backward_weight(&d, RT_F32, x, dy, dw, NULL, false, NULL);
    const float *by[] = {[AMPC_OP_X] = x, [AMPC_OP_W] = w, [AMPC_OP_DY] = dy};
    const float *want[] = {y, dx, dw};
    size_t len[] = {yn, xn, wn};
    char err[128];
    for (int p = 0; p < 3; p++) {
        AmpcGemm g;
        assert_true(ampc_fc_gemm(&d, (RtPass)p, &g, err, sizeof err));
        assert_true(ampc_gemm_check(&g, err, sizeof err)); /* every pass's GEMM is consistent */
        gemm(&g, by[g.a], by[g.b], got);
        for (size_t i = 0; i < len[p]; i++)
            if (fabsf(got[i] - want[p][i]) > 1e-5f)
                fail_msg("pass %d: element %zu: %g, rt_fc gives %g", p, i, got[i], want[p][i]);
    }
    AmpcGemm g;
    /* what the offline check refuses: a leading dimension short of its rows,
     * a transpose flipped, an operand of the wrong size */
    assert_true(ampc_fc_gemm(&d, RT_PASS_FORWARD, &g, err, sizeof err));
    AmpcGemm bad = g;
    bad.lda = bad.rowsa - 1;
    assert_false(ampc_gemm_check(&bad, err, sizeof err));
    assert_non_null(strstr(err, "leading dimension"));
    bad = g, bad.transa = !bad.transa;
    assert_false(ampc_gemm_check(&bad, err, sizeof err));
    assert_non_null(strstr(err, "A is not m x k"));
    bad = g, bad.colsb++;
    assert_false(ampc_gemm_check(&bad, err, sizeof err));
    assert_non_null(strstr(err, "B is not k x n"));
    bad = g, bad.k = 0;
    assert_false(ampc_gemm_check(&bad, err, sizeof err));
    d.in = 0;
    assert_false(ampc_fc_gemm(&d, RT_PASS_FORWARD, &g, err, sizeof err));
    assert_non_null(strstr(err, "invalid dims"));
}

/* The engine rule of conv.c on lists of cuDNN's numerical notes (no GPU
 * returns engines here, so the rule is checked on the notes themselves). */
static void test_engine_policy(void **state)
{
    (void)state;
    const AmpcEnginePolicy exact = {AMPC_FP32_EXACT, false}, tf32 = {AMPC_FP32_TF32, false},
                           fast = {AMPC_FP32_FAST, false}, nondet = {AMPC_FP32_EXACT, true};
    const unsigned tc = AMPC_NOTE_TENSOR_CORE, wino = AMPC_NOTE_WINOGRAD, fft = AMPC_NOTE_FFT,
                   nd = AMPC_NOTE_NONDETERMINISTIC, dc = AMPC_NOTE_DOWN_CONVERT,
                   rr = AMPC_NOTE_REDUCED_REDUCTION, nan = AMPC_NOTE_STRICT_NAN;
    /* fp32 under exact: only engines of plain fp32 arithmetic */
    assert_int_equal(ampc_engine_refusal(0, RT_F32, &exact), 0);
    assert_int_equal(ampc_engine_refusal(nan, RT_F32, &exact), 0);
    assert_int_equal(ampc_engine_refusal(tc, RT_F32, &exact), tc);
    assert_int_equal(ampc_engine_refusal(tc | nan, RT_F32, &exact), tc);
    assert_int_equal(ampc_engine_refusal(fft, RT_F32, &exact), fft);
    assert_int_equal(ampc_engine_refusal(wino, RT_F32, &exact), wino);
    assert_int_equal(ampc_engine_refusal(dc | tc, RT_F32, &exact), dc | tc);
    /* tf32: tensor cores, but neither FFT nor Winograd nor down-conversion */
    assert_int_equal(ampc_engine_refusal(tc, RT_F32, &tf32), 0);
    assert_int_equal(ampc_engine_refusal(tc | wino, RT_F32, &tf32), wino);
    assert_int_equal(ampc_engine_refusal(fft, RT_F32, &tf32), fft);
    assert_int_equal(ampc_engine_refusal(dc, RT_F32, &tf32), dc);
    /* fast: all three, and reduced-precision reductions; never down-conversion */
    assert_int_equal(ampc_engine_refusal(tc | wino | fft | rr, RT_F32, &fast), 0);
    assert_int_equal(ampc_engine_refusal(dc, RT_F32, &fast), dc);
    /* nondeterministic engines: refused in every mode unless asked */
    assert_int_equal(ampc_engine_refusal(nd, RT_F32, &fast), nd);
    assert_int_equal(ampc_engine_refusal(nd, RT_F16, &exact), nd);
    assert_int_equal(ampc_engine_refusal(nd, RT_F32, &nondet), 0);
    assert_int_equal(ampc_engine_refusal(nd | tc, RT_F32, &nondet), tc);
    /* 16-bit: tensor cores, FFT and Winograd whatever --cudnn-fp32 says, but
     * fp32 accumulation and no down-conversion */
    for (int dt = RT_F16; dt <= RT_BF16; dt++) {
        assert_int_equal(ampc_engine_refusal(tc | wino | fft, (RtDType)dt, &exact), 0);
        assert_int_equal(ampc_engine_refusal(tc | rr, (RtDType)dt, &fast), rr);
        assert_int_equal(ampc_engine_refusal(tc | dc, (RtDType)dt, &tf32), dc);
    }
    char buf[128];
    assert_string_equal(ampc_note_names(tc | fft, buf, sizeof buf), "tensor_core,fft");
    assert_string_equal(ampc_note_names(0, buf, sizeof buf), "none");
    assert_string_equal(ampc_note_names(tc | wino, buf, 12), "tensor_core"); /* cut, terminated */
    AmpcFp32Mode m;
    assert_true(ampc_fp32_mode_parse("tf32", &m) && m == AMPC_FP32_TF32);
    assert_true(ampc_fp32_mode_parse("exact", &m) && m == AMPC_FP32_EXACT);
    assert_false(ampc_fp32_mode_parse("TF32", &m));
    assert_false(ampc_fp32_mode_parse("", &m));
    assert_string_equal(ampc_fp32_mode_name(AMPC_FP32_FAST), "fast");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_and_padding),
        cmocka_unit_test(test_descriptors_against_cpu_conv),
        cmocka_unit_test(test_geom_errors),
        cmocka_unit_test(test_stats_desc),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_fc_gemms),
        cmocka_unit_test(test_engine_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
