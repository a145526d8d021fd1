/* test_threads.c - the kernels that share their work out over the threads
 * give the same bits at every thread count (docs/backend-cpu.md, "Threads").
 *
 * Each kernel runs at 1 thread, then at 2 and 3 (the runtime's count is
 * OpenBLAS's, which --threads sets), and every output is compared with
 * memcmp against the 1-thread result: the optimizer over all parameters
 * (fp32 with and without the AVX2 path, fp16 and bf16 with masters, a mixed
 * case; SGD, SGD momentum, NAG, Adam, clipping), the finite checks, the
 * convolution's weight gradient (the block sum), its weight packing (forward
 * and both backward layouts) and pooling (max, avg, global; forward and
 * backward), in fp32, fp16 and bf16, with sizes that do not divide among
 * the threads.  Each also checks, through the pool's job counter, that it
 * did hand work to the pool at 2 threads, which the bit comparisons alone
 * cannot show (the serial code passes them).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cpu/cpu.h"
#include "kernels/optim.h"
#include "test_cpu_util.h"
#include "train.h"

void openblas_set_num_threads(int n);
unsigned long rt__parallel_jobs(void); /* runtime/cpu/parallel.c */
bool rt_optim_simd_active(void);
void rt_optim_simd_reread(void);

static const int thread_counts[] = {2, 3};

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    return p;
}

static void *xdup(const void *p, size_t n)
{
    void *q = xmalloc(n);
    memcpy(q, p, n);
    return q;
}

/* random storage-dtype values in [-1, 1] */
static void fill_dt(void *p, size_t n, RtDType dt)
{
    float *f = tu_falloc(n);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)tu_uniform(-1, 1);
    rt_from_f32(p, f, n, dt);
    free(f);
}

static void *alloc_dt(size_t n, RtDType dt)
{
    void *p = xmalloc(n * rt_dtype_size(dt));
    fill_dt(p, n, dt);
    return p;
}

static const RtDType dts[3] = {RT_F32, RT_F16, RT_BF16};

/* ---- convolution ------------------------------------------------------------
 */

typedef struct {
    const char *name;
    RtConvDims d;
} ConvCase;

/* batches of 7 and 5 (the weight gradient's sample blocks and the threads
 * do not divide them), channel counts that fill no SIMD panel */
static const ConvCase conv_cases[] = {
    {"3x3 same",
     {.n = 7,
      .c = 96,
      .k = 80,
      .groups = 1,
      .nsp = 2,
      .in = {6, 5},
      .kernel = {3, 3},
      .stride = {1, 1},
      .pad = {1, 1},
      .dilate = {1, 1}}},
    {"3x3 stride 2",
     {.n = 5,
      .c = 72,
      .k = 90,
      .groups = 1,
      .nsp = 2,
      .in = {9, 7},
      .kernel = {3, 3},
      .stride = {2, 2},
      .pad = {1, 1},
      .dilate = {1, 1}}},
    {"1x1",
     {.n = 7,
      .c = 256,
      .k = 160,
      .groups = 1,
      .nsp = 2,
      .in = {3, 5},
      .kernel = {1, 1},
      .stride = {1, 1},
      .pad = {0, 0},
      .dilate = {1, 1}}},
    {"grouped 1-D",
     {.n = 5,
      .c = 192,
      .k = 192,
      .groups = 3,
      .nsp = 1,
      .in = {11},
      .kernel = {5},
      .stride = {1},
      .pad = {2},
      .dilate = {1}}},
};

typedef struct {
    void *y, *dx, *dw, *db;
} ConvOut;

/* forward (with bias), data gradient (accumulating into dx0) and weight and
 * bias gradients (accumulating into dw0, db0), each with its workspace
 * queried at the current thread count */
static void conv_run(const RtConvDims *d, RtDType dt, const void *x, const void *w, const void *b,
                     const void *dy, const void *dx0, const void *dw0, const void *db0, ConvOut *o)
{
    size_t es = rt_dtype_size(dt), yn = (size_t)d->n * d->k, xn = (size_t)d->n * d->c;
    for (int a = 0; a < d->nsp; a++)
        yn *= (size_t)d->out[a], xn *= (size_t)d->in[a];
    size_t wn = (size_t)d->k * (d->c / d->groups);
    for (int a = 0; a < d->nsp; a++)
        wn *= (size_t)d->kernel[a];
    o->y = xmalloc(yn * es);
    o->dx = xdup(dx0, xn * es);
    o->dw = xdup(dw0, wn * es);
    o->db = xdup(db0, (size_t)d->k * es);
    void *ws = tu_walloc(rt_conv_workspace_bytes(d, dt, RT_PASS_FORWARD));
    rt_conv_forward(d, dt, x, w, b, o->y, ws);
    free(ws);
    ws = tu_walloc(rt_conv_workspace_bytes(d, dt, RT_PASS_BACKWARD));
    rt_conv_backward_data(d, dt, w, dy, o->dx, true, ws);
    free(ws);
    ws = tu_walloc(rt_conv_workspace_bytes(d, dt, RT_PASS_BACKWARD_WEIGHT));
    rt_conv_backward_weight(d, dt, x, dy, o->dw, o->db, true, ws);
    free(ws);
}

static void conv_free(ConvOut *o)
{
    free(o->y), free(o->dx), free(o->dw), free(o->db);
}

static void test_conv_threads(void **state)
{
    (void)state;
    if (rt__simd() == RT_SIMD_NONE) {
        /* the BLAS path: OpenBLAS's sgemm does not give the same bits at
         * every thread count (docs/backend-cpu.md, "Threads") */
        print_message("conv: no AVX2 (or AMPC_RT_SIMD=0): the BLAS path is not checked\n");
        return;
    }
    for (size_t ci = 0; ci < sizeof conv_cases / sizeof conv_cases[0]; ci++)
        for (int di = 0; di < 3; di++) {
            RtDType dt = dts[di];
            RtConvDims d = conv_cases[ci].d;
            assert_true(rt_conv_dims_init(&d));
            size_t yn = (size_t)d.n * d.k, xn = (size_t)d.n * d.c,
                   wn = (size_t)d.k * (d.c / d.groups);
            for (int a = 0; a < d.nsp; a++) {
                yn *= (size_t)d.out[a], xn *= (size_t)d.in[a];
                wn *= (size_t)d.kernel[a];
            }
            tu_seed(100 + ci * 3 + (size_t)di);
            void *x = alloc_dt(xn, dt), *w = alloc_dt(wn, dt), *b = alloc_dt((size_t)d.k, dt);
            void *dy = alloc_dt(yn, dt), *dx0 = alloc_dt(xn, dt), *dw0 = alloc_dt(wn, dt);
            void *db0 = alloc_dt((size_t)d.k, dt);
            size_t es = rt_dtype_size(dt);
            openblas_set_num_threads(1);
            ConvOut ref;
            conv_run(&d, dt, x, w, b, dy, dx0, dw0, db0, &ref);
            for (size_t t = 0; t < sizeof thread_counts / sizeof thread_counts[0]; t++) {
                openblas_set_num_threads(thread_counts[t]);
                ConvOut o;
                unsigned long jobs = rt__parallel_jobs();
                conv_run(&d, dt, x, w, b, dy, dx0, dw0, db0, &o);
                /* forward, data and weight passes: one job each, plus the
                 * packing of the data pass's weights and the block sum (and
                 * of the forward's, but for an fp32 1x1) */
                if (rt__parallel_jobs() - jobs < 5)
                    fail_msg("conv %s %s: %lu jobs shared at %d threads", conv_cases[ci].name,
                             rt_dtype_name(dt), rt__parallel_jobs() - jobs, thread_counts[t]);
                if (memcmp(o.y, ref.y, yn * es) || memcmp(o.dx, ref.dx, xn * es) ||
                    memcmp(o.dw, ref.dw, wn * es) || memcmp(o.db, ref.db, (size_t)d.k * es))
                    fail_msg("conv %s %s: %d threads differ from 1 (y %d dx %d dw %d db %d)",
                             conv_cases[ci].name, rt_dtype_name(dt), thread_counts[t],
                             memcmp(o.y, ref.y, yn * es) != 0, memcmp(o.dx, ref.dx, xn * es) != 0,
                             memcmp(o.dw, ref.dw, wn * es) != 0,
                             memcmp(o.db, ref.db, (size_t)d.k * es) != 0);
                conv_free(&o);
            }
            conv_free(&ref);
            free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0);
        }
    openblas_set_num_threads(1);
}

/* ---- pooling ----------------------------------------------------------------
 */

typedef struct {
    const char *name;
    RtPoolDims d;
} PoolCase;

/* 65 and 35 planes: no thread count here divides them */
static const PoolCase pool_cases[] = {
    {"max 3x3 s2",
     {.n = 5,
      .c = 13,
      .nsp = 2,
      .in = {29, 31},
      .kernel = {3, 3},
      .stride = {2, 2},
      .pad = {1, 1},
      .type = RT_POOL_MAX}},
    {"avg 2x2 s2",
     {.n = 5,
      .c = 13,
      .nsp = 2,
      .in = {29, 31},
      .kernel = {2, 2},
      .stride = {2, 2},
      .type = RT_POOL_AVG,
      .full_convention = true}},
    {"avg 3x3 pad",
     {.n = 5,
      .c = 13,
      .nsp = 2,
      .in = {29, 31},
      .kernel = {3, 3},
      .stride = {1, 1},
      .pad = {1, 1},
      .type = RT_POOL_AVG,
      .count_include_pad = true}},
    {"global avg", {.n = 7, .c = 5, .nsp = 2, .in = {41, 43}, .type = RT_POOL_AVG, .global = true}},
};

static void pool_run(const RtPoolDims *d, RtDType dt, const void *x, const void *dy,
                     const void *dx0, size_t yn, size_t xn, void **y, void **dx)
{
    size_t es = rt_dtype_size(dt);
    *y = xmalloc(yn * es);
    *dx = xdup(dx0, xn * es);
    void *ws = tu_walloc(rt_pool_workspace_bytes(d, dt, RT_PASS_FORWARD));
    rt_pool_forward(d, dt, x, *y, ws);
    free(ws);
    ws = tu_walloc(rt_pool_workspace_bytes(d, dt, RT_PASS_BACKWARD));
    rt_pool_backward(d, dt, x, dy, *dx, true, ws);
    free(ws);
}

static void test_pool_threads(void **state)
{
    (void)state;
    for (size_t ci = 0; ci < sizeof pool_cases / sizeof pool_cases[0]; ci++)
        for (int di = 0; di < 3; di++) {
            RtDType dt = dts[di];
            RtPoolDims d = pool_cases[ci].d;
            assert_true(rt_pool_dims_init(&d));
            size_t xn = (size_t)d.n * d.c, yn = xn, es = rt_dtype_size(dt);
            for (int a = 0; a < d.nsp; a++)
                xn *= (size_t)d.in[a], yn *= (size_t)d.out[a];
            tu_seed(200 + ci * 3 + (size_t)di);
            void *x = alloc_dt(xn, dt), *dy = alloc_dt(yn, dt), *dx0 = alloc_dt(xn, dt);
            openblas_set_num_threads(1);
            void *ry, *rdx;
            pool_run(&d, dt, x, dy, dx0, yn, xn, &ry, &rdx);
            for (size_t t = 0; t < sizeof thread_counts / sizeof thread_counts[0]; t++) {
                openblas_set_num_threads(thread_counts[t]);
                void *y, *dx;
                unsigned long jobs = rt__parallel_jobs();
                pool_run(&d, dt, x, dy, dx0, yn, xn, &y, &dx);
                if (rt__parallel_jobs() - jobs < 2)
                    fail_msg("pool %s %s: %lu jobs shared", pool_cases[ci].name, rt_dtype_name(dt),
                             rt__parallel_jobs() - jobs);
                if (memcmp(y, ry, yn * es) || memcmp(dx, rdx, xn * es))
                    fail_msg("pool %s %s: %d threads differ from 1", pool_cases[ci].name,
                             rt_dtype_name(dt), thread_counts[t]);
                free(y), free(dx);
            }
            free(ry), free(rdx), free(x), free(dy), free(dx0);
        }
    openblas_set_num_threads(1);
}

/* ---- finite checks
 * ------------------------------------------------------------ */

static void test_finite_threads(void **state)
{
    (void)state;
    /* one tensor of 300,007 elements with one inf or NaN at a time, at the
     * start, the middle and the last element */
    size_t n = 300007, at[3] = {0, 150001, 300006};
    for (int di = 0; di < 3; di++) {
        RtDType dt = dts[di];
        size_t es = rt_dtype_size(dt);
        tu_seed(300 + (size_t)di);
        char *p = alloc_dt(n, dt);
        for (int t = 1; t <= 3; t++) {
            openblas_set_num_threads(t);
            unsigned long jobs = rt__parallel_jobs();
            assert_true(rt_all_finite(p, n, dt));
            if (t > 1 && rt__parallel_jobs() == jobs)
                fail_msg("rt_all_finite %s: not shared at %d threads", rt_dtype_name(dt), t);
            for (int k = 0; k < 3; k++)
                for (int s = 0; s < 2; s++) {
                    char save[4];
                    memcpy(save, p + at[k] * es, es);
                    float v = s ? NAN : -INFINITY;
                    rt_from_f32(p + at[k] * es, &v, 1, dt);
                    assert_false(rt_all_finite(p, n, dt));
                    memcpy(p + at[k] * es, save, es);
                }
        }
        free(p);
    }
    /* 70 tensors (more than one group of 64) of odd sizes, mixed dtypes,
     * one NaN in tensor 67's last element */
    RtTensorRef refs[70];
    for (int i = 0; i < 70; i++) {
        RtDType dt = dts[i % 3];
        size_t m = 1 + (size_t)(i * 7919) % 40000;
        refs[i] = (RtTensorRef){alloc_dt(m, dt), m, dt};
    }
    for (int t = 1; t <= 3; t++) {
        openblas_set_num_threads(t);
        unsigned long jobs = rt__parallel_jobs();
        assert_true(rt_multi_all_finite(refs, 70));
        if (t > 1 && rt__parallel_jobs() == jobs)
            fail_msg("rt_multi_all_finite: not shared at %d threads", t);
        float v = NAN;
        size_t es = rt_dtype_size(refs[67].dt), last = refs[67].n - 1;
        char *q = (char *)refs[67].ptr + last * es, save[4];
        memcpy(save, q, es);
        rt_from_f32(q, &v, 1, refs[67].dt);
        assert_false(rt_multi_all_finite(refs, 70));
        assert_true(rt_multi_all_finite(refs, 67));
        memcpy(q, save, es);
    }
    for (int i = 0; i < 70; i++)
        free((void *)refs[i].ptr);
    openblas_set_num_threads(1);
}

/* ---- the optimizer
 * ------------------------------------------------------------ */

/* Parameters of every storage case, sizes that are no multiple of 8 or of
 * the optimizer's blocks: fp32 (no master), fp16 and bf16 shadows with fp32
 * masters and 16-bit gradients, an fp16 parameter without a master (the
 * widening loop) and an fp32 parameter with an fp16 gradient. */
#define OP 7
static const struct {
    RtDType w, g;
    bool master;
    int64_t n;
} ocase[OP] = {
    {RT_F32, RT_F32, false, 70001},  {RT_F32, RT_F32, false, 13},    {RT_F16, RT_F16, true, 50003},
    {RT_BF16, RT_BF16, true, 40009}, {RT_F16, RT_F16, false, 20011}, {RT_F32, RT_F16, false, 9},
    {RT_F32, RT_F32, false, 33333},
};

typedef struct {
    RtParam p[OP];
    RtBuffer b[2 * OP];
    RtModel m;
    void *buf[2 * OP];
    float *master[OP], *st[OP], *st2[OP];
} OptModel;

static void opt_model(OptModel *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; i < OP; i++) {
        size_t n = (size_t)ocase[i].n;
        o->p[i] = (RtParam){"p",
                            RT_PK_WEIGHT,
                            ocase[i].w,
                            ocase[i].master,
                            1,
                            {ocase[i].n},
                            ocase[i].n,
                            "default",
                            i == 1 ? 0.0f : 1.0f,
                            1.0f,
                            i,
                            OP + i,
                            RT_LAYOUT_NCHW};
        o->b[i] = (RtBuffer){"p", ocase[i].w, ocase[i].n, 0, false, 0, 0};
        o->b[OP + i] = (RtBuffer){"g", ocase[i].g, ocase[i].n, 0, false, 0, 0};
        o->buf[i] = alloc_dt(n, ocase[i].w);
        o->buf[OP + i] = alloc_dt(n, ocase[i].g);
        o->master[i] = ocase[i].master ? tu_falloc(n) : NULL;
        if (o->master[i]) {
            rt_to_f32(o->master[i], o->buf[i], n, ocase[i].w);
            for (size_t e = 0; e < n; e++)
                o->master[i][e] += (float)tu_uniform(-1e-3, 1e-3);
        }
        o->st[i] = tu_falloc(n);
        o->st2[i] = tu_falloc(n);
        for (size_t e = 0; e < n; e++) {
            o->st[i][e] = (float)tu_uniform(-0.1, 0.1);
            o->st2[i][e] = (float)tu_uniform(0, 0.1);
        }
    }
    o->m = (RtModel){
        .name = "threads", .nparams = OP, .params = o->p, .nbuffers = 2 * OP, .buffers = o->b};
}

static void opt_model_copy(OptModel *dst, const OptModel *src)
{
    *dst = *src;
    dst->m.params = dst->p;
    dst->m.buffers = dst->b;
    for (int i = 0; i < OP; i++) {
        size_t n = (size_t)ocase[i].n;
        dst->buf[i] = xdup(src->buf[i], n * rt_dtype_size(ocase[i].w));
        dst->buf[OP + i] = xdup(src->buf[OP + i], n * rt_dtype_size(ocase[i].g));
        dst->master[i] = src->master[i] ? xdup(src->master[i], n * 4) : NULL;
        dst->st[i] = xdup(src->st[i], n * 4);
        dst->st2[i] = xdup(src->st2[i], n * 4);
    }
}

static void opt_model_free(OptModel *o)
{
    for (int i = 0; i < OP; i++) {
        free(o->buf[i]), free(o->buf[OP + i]);
        free(o->master[i]), free(o->st[i]), free(o->st2[i]);
    }
}

/* two steps of the optimizer on a copy of o0; returns the finite flag */
static bool opt_steps(const OptModel *o0, const RtOptConfig *c, OptModel *o)
{
    opt_model_copy(o, o0);
    RtCtx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.buf = o->buf;
    ctx.master = o->master;
    bool ok = rt_optim_step2(&o->m, &ctx, o->st, o->st2, c);
    ok &= rt_optim_step2(&o->m, &ctx, o->st, o->st2, c);
    return ok;
}

static bool opt_same(const OptModel *a, const OptModel *b)
{
    for (int i = 0; i < OP; i++) {
        size_t n = (size_t)ocase[i].n;
        if (memcmp(a->buf[i], b->buf[i], n * rt_dtype_size(ocase[i].w)) ||
            (a->master[i] && memcmp(a->master[i], b->master[i], n * 4)) ||
            memcmp(a->st[i], b->st[i], n * 4) || memcmp(a->st2[i], b->st2[i], n * 4))
            return false;
    }
    return true;
}

static const struct {
    const char *name;
    RtOptKind kind;
    float momentum, clip;
} opts[] = {
    {"sgd", RT_OPT_SGD, 0, -1},
    {"sgd_mom", RT_OPT_SGD, 0.9f, -1},
    {"sgd_mom clip", RT_OPT_SGD, 0.9f, 0.05f},
    {"nag", RT_OPT_NAG, 0.9f, -1},
    {"adam", RT_OPT_ADAM, 0, -1},
    {"adam clip", RT_OPT_ADAM, 0, 0.05f},
};

static RtOptConfig opt_config(int k)
{
    return (RtOptConfig){.kind = opts[k].kind,
                         .lr = 0.1f,
                         .momentum = opts[k].momentum,
                         .wd = 1e-4f,
                         .rescale_grad = 0.125f,
                         .clip_gradient = opts[k].clip,
                         .beta1 = 0.9f,
                         .beta2 = 0.999f,
                         .epsilon = 1e-8f,
                         .t = 3};
}

static void test_optim_threads(void **state)
{
    (void)state;
    tu_seed(400);
    OptModel o0;
    opt_model(&o0);
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
        RtOptConfig c = opt_config((int)k);
        openblas_set_num_threads(1);
        OptModel ref;
        assert_true(opt_steps(&o0, &c, &ref));
        for (size_t t = 0; t < sizeof thread_counts / sizeof thread_counts[0]; t++) {
            openblas_set_num_threads(thread_counts[t]);
            OptModel o;
            unsigned long jobs = rt__parallel_jobs();
            assert_true(opt_steps(&o0, &c, &o));
            if (rt__parallel_jobs() - jobs < 2)
                fail_msg("optimizer %s: not shared at %d threads", opts[k].name, thread_counts[t]);
            if (!opt_same(&o, &ref))
                fail_msg("optimizer %s: %d threads differ from 1", opts[k].name, thread_counts[t]);
            opt_model_free(&o);
        }
        opt_model_free(&ref);
    }
    /* a non-finite gradient in the last block of a tensor: the flag at
     * every thread count (and the same bits: the update still runs) */
    float inf = INFINITY;
    rt_from_f32((char *)o0.buf[OP + 3] + ((size_t)ocase[3].n - 1) * 2, &inf, 1, RT_BF16);
    RtOptConfig c = opt_config(1);
    openblas_set_num_threads(1);
    OptModel ref;
    assert_false(opt_steps(&o0, &c, &ref));
    for (int t = 2; t <= 3; t++) {
        openblas_set_num_threads(t);
        OptModel o;
        assert_false(opt_steps(&o0, &c, &o));
        assert_true(opt_same(&o, &ref));
        opt_model_free(&o);
    }
    opt_model_free(&ref);
    opt_model_free(&o0);
    openblas_set_num_threads(1);
}

/* The fp32 AVX2 body (optim_simd.c) against the per-element loop
 * (AMPC_NO_SIMD=1) and against optim.h's functions called here: every bit,
 * every optimizer, with infinite gradients in one tensor (the NaNs they
 * make are the machine's default NaN either way; NaN gradients are left to
 * test_train_optim.c's lenient comparison: two NaN payloads meeting may
 * give either). */
static void test_optim_f32_simd(void **state)
{
    (void)state;
    openblas_set_num_threads(1);
    tu_seed(500);
    OptModel o0;
    opt_model(&o0);
    float *g0 = o0.buf[OP + 6];
    g0[5] = INFINITY, g0[17] = -INFINITY, g0[33330] = INFINITY;
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
        RtOptConfig c = opt_config((int)k);
        setenv("AMPC_NO_SIMD", "1", 1);
        rt_optim_simd_reread();
        assert_false(rt_optim_simd_active());
        OptModel plain, simd;
        assert_false(opt_steps(&o0, &c, &plain));
        unsetenv("AMPC_NO_SIMD");
        rt_optim_simd_reread();
        assert_false(opt_steps(&o0, &c, &simd));
        if (!opt_same(&plain, &simd))
            fail_msg("optimizer %s: the fp32 AVX2 path differs from the per-element loop",
                     opts[k].name);
        /* parameter 0 (fp32, wd_mult 1) by optim.h's functions directly */
        AmpcOptParam q = {.lr = c.lr,
                          .wd = c.wd,
                          .momentum = c.momentum,
                          .rescale_grad = c.rescale_grad,
                          .clip_gradient = c.clip_gradient,
                          .beta1 = c.beta1,
                          .beta2 = c.beta2,
                          .epsilon = c.epsilon};
        if (c.kind == RT_OPT_ADAM)
            q.lr = ampc_adam_lr((double)c.lr, c.beta1, c.beta2, c.t);
        size_t n = (size_t)ocase[0].n;
        float *w = xdup(o0.buf[0], n * 4), *m = xdup(o0.st[0], n * 4), *v = xdup(o0.st2[0], n * 4);
        const float *g = o0.buf[OP];
        for (int step = 0; step < 2; step++)
            for (size_t i = 0; i < n; i++) {
                if (c.kind == RT_OPT_ADAM)
                    ampc_adam_update(&w[i], &m[i], &v[i], g[i], q);
                else if (c.momentum == 0)
                    ampc_sgd_update(&w[i], g[i], q);
                else if (c.kind == RT_OPT_NAG)
                    ampc_nag_mom_update(&w[i], &m[i], g[i], q);
                else
                    ampc_sgd_mom_update(&w[i], &m[i], g[i], q);
            }
        assert_memory_equal(w, simd.buf[0], n * 4);
        if (c.momentum != 0 || c.kind == RT_OPT_ADAM)
            assert_memory_equal(m, simd.st[0], n * 4);
        free(w), free(m), free(v);
        opt_model_free(&plain);
        opt_model_free(&simd);
    }
    opt_model_free(&o0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_threads),   cmocka_unit_test(test_pool_threads),
        cmocka_unit_test(test_finite_threads), cmocka_unit_test(test_optim_threads),
        cmocka_unit_test(test_optim_f32_simd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
