/*
 * test_gpucost_emu.c - the GPU cost model's kernel descriptions against the
 * kernels (issue 24; docs/gpucost.md, "The checks").  Every custom kernel
 * of runtime/cuda/ runs in the emulator (libampcemu.a) through the
 * launcher a program calls, at two sizes: fp32 with grids of at most 4096
 * blocks (every thread one element), and fp16 with accumulation and grids
 * of at most 3 blocks (the grid-stride loops wrap, the half decodes count).
 * The launches it makes must be, in order, the ones its GPUK, GPU_STEP or
 * GPU_AUX rows of ir/kernels.def describe (ir/gpu_kernels.c evaluated at
 * the same sizes), with the same threads, bytes read and written, serial
 * load count of the busiest thread and FLOPs of each kind as the emulator
 * counts them.  The last case checks that every kernel a row names ran
 * here at both sizes.
 *
 * The data takes the side of each per-element branch the rows count (the
 * costlier one: LeakyReLU's x <= 0, clip's inside, Dropout keeping every
 * element).  What the emulator cannot count is not compared: a row's
 * distinct bytes (ru) and loads in flight, and the library calls (cuDNN,
 * cuBLASLt) and copies, which the model prices from their shapes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/mt_table.h"
#include "cuda/plan.c"
#include "cuda/rt_cuda.h"
#include "emu_test.h"
#include "gpu_kernels.h"
#include "kernels/half.h"
#include "rt.h"

/* the context every rt_cuda_* call takes: the emulator's default stream,
 * no library (the kernels here need none) */
static RtCudaCtx cx;

/* ---- the two sizes ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    RtDType dt;
    bool acc;
    unsigned cap; /* the grids' cap, here and in the rows */
    double scale; /* the sizes of this pass relative to the first */
} Size;
static const Size sizes[2] = {{"fp32, grids to 4096", RT_F32, false, 4096, 1.0},
                              {"fp16, accumulate, grids of 3", RT_F16, true, 3, 0.8}};

static double esz(RtDType dt) { return (double)rt_dtype_size(dt); }

/* GkDims of an element-wise call of n elements in z's dtype */
static GkDims ew(double n, const Size *z)
{
    GkDims d;
    memset(&d, 0, sizeof d);
    d.n = n;
    d.s = d.s2 = esz(z->dt);
    d.h = d.h2 = z->dt == RT_F16;
    d.acc = z->acc;
    return d;
}

/* ---- the launches seen -------------------------------------------------------------- */

enum { MAX_SEEN = 64, MAX_NAMES = 96 };
static AmpcEmuCounts seen[MAX_SEEN];
static int nseen;

static void on_launch(const AmpcEmuCounts *c, void *ctx)
{
    (void)ctx;
    if (nseen < MAX_SEEN)
        seen[nseen] = *c;
    nseen++;
}

/* the kernels compared, and at which sizes (bit z) */
static struct {
    const char *name;
    unsigned at;
} checked[MAX_NAMES];
static int nchecked;

static void note_checked(const char *name, int z)
{
    for (int i = 0; i < nchecked; i++)
        if (strcmp(checked[i].name, name) == 0) {
            checked[i].at |= 1u << z;
            return;
        }
    assert_true(nchecked < MAX_NAMES);
    checked[nchecked].name = name;
    checked[nchecked++].at = 1u << z;
}

static int zi; /* the running size's index */

static void start(int z)
{
    zi = z;
    nseen = 0;
    ampc_emu_set_grid_cap(sizes[z].cap);
    gk_set_grid_cap(sizes[z].cap);
}

static int mismatches;

static void same(const char *what, const char *kernel, const char *field, double row, double got)
{
    if (row == got)
        return;
    print_message("%s (%s): %s: %s: the row says %.17g, the emulator counted %.17g\n", what,
                  sizes[zi].name, kernel, field, row, got);
    mismatches++;
}

/* With AMPC_GPUCOST_EMU_SHOW set, every comparison is printed: the row's
 * counts, then the emulator's (what a kernel's rewrite starts from). */
static void show(const char *what, const GkLaunch *l, int k, double threads, double rd, double wr,
                 double serial, const double *flops)
{
    print_message("%s (%s): %s\n  row: threads %.0f rd %.0f wr %.0f serial %g flops", what,
                  sizes[zi].name, l->kernel, k * l->blocks * l->block, l->rd, l->wr, l->serial);
    for (int f = 0; f < AMPC_EMU_NFLOP; f++)
        if (l->flops[f] != 0)
            print_message(" %s=%.0f", gk_flop_names[f], l->flops[f]);
    print_message("\n  emu: threads %.0f rd %.0f wr %.0f serial %g flops", threads, rd, wr, serial);
    for (int f = 0; f < AMPC_EMU_NFLOP; f++)
        if (flops[f] != 0)
            print_message(" %s=%.0f", gk_flop_names[f], flops[f]);
    print_message("\n");
}

/* The launches since start() against rows (n of them; library calls and
 * copies left out).  A row with count k stands for k alike launches: its
 * counts are their sums, its serial count one launch's. */
static void expect(const char *what, const GkLaunch *rows, int n)
{
    int j = 0;
    for (int i = 0; i < n; i++) {
        const GkLaunch *l = &rows[i];
        if (l->kind != GK_CUSTOM)
            continue;
        int k = l->count > 0 ? (int)l->count : 1;
        double threads = 0, rd = 0, wr = 0, serial = 0, flops[GK_NFLOP] = {0};
        for (int r = 0; r < k; r++, j++) {
            if (j >= nseen || j >= MAX_SEEN) {
                print_message("%s (%s): the rows describe a launch of %s the call did not make\n",
                              what, sizes[zi].name, l->kernel);
                mismatches++;
                return;
            }
            const AmpcEmuCounts *c = &seen[j];
            if (strcmp(c->kernel, l->kernel) != 0) {
                print_message("%s (%s): launch %d is %s, the rows say %s\n", what, sizes[zi].name,
                              j + 1, c->kernel, l->kernel);
                mismatches++;
                return;
            }
            threads += (double)c->threads;
            rd += (double)c->global_read_bytes;
            wr += (double)c->global_write_bytes;
            serial = fmax(serial, (double)c->max_thread_loads);
            for (int f = 0; f < AMPC_EMU_NFLOP; f++)
                flops[f] += (double)c->flops[f];
        }
        note_checked(l->kernel, zi);
        if (getenv("AMPC_GPUCOST_EMU_SHOW"))
            show(what, l, k, threads, rd, wr, serial, flops);
        same(what, l->kernel, "threads", k * l->blocks * l->block, threads);
        same(what, l->kernel, "bytes read", l->rd, rd);
        same(what, l->kernel, "bytes written", l->wr, wr);
        same(what, l->kernel, "serial loads", l->serial, serial);
        for (int f = 0; f < AMPC_EMU_NFLOP; f++)
            same(what, l->kernel, gk_flop_names[f], l->flops[f] + (f == GK_CVT) * l->cvt_const,
                 flops[f]);
    }
    if (j != nseen) {
        print_message("%s (%s): the call made %d launches, the rows describe %d (the first "
                      "undescribed: %s)\n",
                      what, sizes[zi].name, nseen, j, j < MAX_SEEN ? seen[j].kernel : "?");
        mismatches++;
    }
}

/* the (op, entry) pairs compared, and at which sizes (bit z) */
static unsigned op_checked[OP_COUNT][GE_COUNT];

static void expect_op(const char *what, OpKind op, GkEntry e, const GkDims *d)
{
    GkLaunch rows[GK_MAX_LAUNCHES];
    int n = gk_describe(op, e, d, rows);
    assert_true(n > 0);
    op_checked[op][e] |= 1u << zi;
    expect(what, rows, n);
}

static void expect_aux(const char *what, const char *kernel, const GkDims *d)
{
    GkLaunch row;
    assert_int_equal(gk_describe_aux(kernel, d, &row), 1);
    expect(what, &row, 1);
}

static void done(void)
{
    int m = mismatches;
    mismatches = 0;
    assert_int_equal(m, 0);
}

/* ---- data --------------------------------------------------------------------------- */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float unit(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(rng >> 40) / 16777216.0f;
}

/* n values in [lo, hi) in dt, in device memory */
static void *data(size_t n, RtDType dt, float lo, float hi)
{
    void *p = dev(n * rt_dtype_size(dt) + 1, "data");
    for (size_t i = 0; i < n; i++) {
        float v = lo + unit() * (hi - lo);
        rt_from_f32((char *)p + i * rt_dtype_size(dt), &v, 1, dt);
    }
    return p;
}

static float *fdata(size_t n, float lo, float hi) { return data(n, RT_F32, lo, hi); }

static void release(void **p, int n)
{
    for (int i = 0; i < n; i++)
        ampc_emu_free(p[i]);
}

/* ---- element-wise kernels ----------------------------------------------------------- */

static size_t ew_n(int z) { return z == 0 ? 3001 : 2500; }

static void test_activation(void **st)
{
    (void)st;
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        size_t n = ew_n(z);
        void *b[4] = {data(n, s->dt, -3, 3), data(n, s->dt, 0.1f, 3), data(n, s->dt, -3, 3),
                      data(n, s->dt, -3, 3)};
        for (int a = RT_ACT_RELU; a <= RT_ACT_SOFTSIGN; a++) {
            GkDims d = ew((double)n, s);
            d.mode = a;
            d.acc = 0;
            start(z);
            rt_cuda_activation_forward(&cx, (RtAct)a, n, s->dt, b[0], b[3]);
            expect_op("Activation", OP_Activation, GE_MAIN, &d);
            d.acc = s->acc;
            start(z);
            rt_cuda_activation_backward(&cx, (RtAct)a, n, s->dt, b[0], b[1], b[2], b[3], s->acc);
            expect_op("_backward_Activation", OP__backward_Activation, GE_MAIN, &d);
        }
        GkDims d = ew((double)n, s);
        d.acc = 0;
        start(z);
        rt_cuda_add_relu_forward(&cx, n, s->dt, b[0], b[2], b[3]);
        expect_op("_fused_add_relu", OP__fused_add_relu, GE_MAIN, &d);
        d.acc = s->acc;
        d.mode = ACT_RELU;
        start(z);
        rt_cuda_activation_backward(&cx, RT_ACT_RELU, n, s->dt, NULL, b[1], b[2], b[3], s->acc);
        expect_op("_backward_fused_add_relu", OP__backward_fused_add_relu, GE_MAIN, &d);
        release(b, 4);
    }
    done();
}

/* LeakyReLU at x <= 0 (the exp of elu and selu); prelu's gamma per channel */
static void test_leaky_relu(void **st)
{
    (void)st;
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        int64_t outer = z ? 3 : 4, c = z ? 7 : 5, inner = z ? 110 : 150;
        size_t n = (size_t)(outer * c * inner);
        void *b[5] = {data(n, s->dt, -3, -0.1f), data((size_t)c, s->dt, 0.1f, 1),
                      data(n, s->dt, -3, 3), data(n, s->dt, -3, 3), data((size_t)c, s->dt, -1, 1)};
        for (int t = RT_LRELU_LEAKY; t <= RT_LRELU_PRELU; t++) {
            GkDims d = ew((double)n, s);
            d.mode = t;
            d.c = (double)c, d.outer = (double)(outer * inner), d.inner = 1;
            d.acc = 0;
            start(z);
            rt_cuda_leaky_relu_forward(&cx, (RtLeaky)t, outer, c, inner, s->dt, b[0], b[1], 0.25f,
                                       b[3]);
            expect_op("LeakyReLU", OP_LeakyReLU, GE_MAIN, &d);
            d.acc = s->acc;
            d.dx = 1;
            d.dgamma = t == RT_LRELU_PRELU;
            start(z);
            rt_cuda_leaky_relu_backward(&cx, (RtLeaky)t, outer, c, inner, s->dt, b[0], b[1], 0.25f,
                                        b[2], b[3], d.dgamma ? b[4] : NULL, s->acc, s->acc);
            expect_op("_backward_LeakyReLU", OP__backward_LeakyReLU, GE_MAIN, &d);
        }
        release(b, 5);
    }
    done();
}

/* Dropout keeping every element (p = 0): the rows' (1 - p) share exactly */
static void test_dropout(void **st)
{
    (void)st;
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        size_t n = ew_n(z);
        void *b[3] = {data(n, s->dt, -3, 3), data(n, s->dt, -3, 3), dev(sizeof(uint64_t), "step")};
        *(uint64_t *)b[2] = 3; /* the step's number, in device memory */
        GkDims d = ew((double)n, s);
        d.acc = 0;
        start(z);
        rt_cuda_dropout_forward(&cx, n, s->dt, b[0], 0.0f, 7, b[2], 1, b[1]);
        expect_op("Dropout", OP_Dropout, GE_MAIN, &d);
        d.acc = s->acc;
        start(z);
        rt_cuda_dropout_backward(&cx, n, s->dt, b[0], 0.0f, 7, b[2], 1, b[1], s->acc);
        expect_op("_backward_Dropout", OP__backward_Dropout, GE_MAIN, &d);
        release(b, 3);
    }
    done();
}

static const OpKind scalar_ops[] = {OP__plus_scalar, OP__minus_scalar, OP__rminus_scalar,
                                    OP__mul_scalar,  OP__div_scalar,   OP__rdiv_scalar};

/* the binary, scalar, unary and clip ops, casts and copies */
static void test_elementwise(void **st)
{
    (void)st;
    static const OpKind bin[] = {OP_elemwise_add, OP_elemwise_sub, OP_elemwise_mul};
#define UNARY_OP(N, name) OP_##name,
#define UNARY_NAME(N, name) #name,
    static const OpKind un[] = {AMPC_UNARY_LIST(UNARY_OP)};
    static const char *const un_name[] = {AMPC_UNARY_LIST(UNARY_NAME)};
#undef UNARY_OP
#undef UNARY_NAME
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        size_t n = ew_n(z);
        void *b[4] = {data(n, s->dt, 0.5f, 2), data(n, s->dt, 0.5f, 2), data(n, s->dt, -1, 1),
                      data(n, s->dt, -1, 1)};
        GkDims d = ew((double)n, s), da = d;
        d.acc = 0;
        for (int o = 0; o < 3; o++) {
            start(z);
            rt_cuda_elemwise_forward(&cx, (RtBinOp)o, n, s->dt, b[0], b[1], b[3]);
            expect_op("elemwise", bin[o], GE_MAIN, &d);
        }
        for (int o = RT_SCALAR_PLUS; o <= RT_SCALAR_RDIV; o++) {
            start(z);
            rt_cuda_scalar_forward(&cx, (RtScalarOp)o, n, s->dt, b[0], 1.5f, b[3]);
            expect_op("scalar", scalar_ops[o], GE_MAIN, &d);
        }
        start(z);
        rt_cuda_scalar_backward(&cx, RT_SCALAR_RDIV, n, s->dt, b[0], 1.5f, b[2], b[3], s->acc);
        expect_op("_backward_rdiv_scalar", OP__backward_rdiv_scalar, GE_MAIN, &da);
        for (int o = 0; o < AMPC_UNARY_COUNT; o++) { /* exp ... rint */
            start(z);
            rt_cuda_unary_forward(&cx, (RtUnaryOp)o, n, s->dt, b[2], b[3]);
            expect_op(un_name[o], un[o], GE_MAIN, &d);
        }
        /* _backward_unary: every op but exp, log and sqrt, through x */
        for (int o = RT_UNARY_SQRT + 1; o < AMPC_UNARY_COUNT; o++) {
            GkDims du = da;
            du.mode = o;
            start(z);
            rt_cuda_unary_backward(&cx, (RtUnaryOp)o, n, s->dt, b[2], NULL, b[1], b[3], s->acc);
            expect_op(un_name[o], OP__backward_unary, GE_MAIN, &du);
        }
        start(z);
        rt_cuda_unary_backward(&cx, RT_UNARY_LOG, n, s->dt, b[0], NULL, b[2], b[3], s->acc);
        expect_op("_backward_log", OP__backward_log, GE_MAIN, &da);
        start(z);
        rt_cuda_unary_backward(&cx, RT_UNARY_SQRT, n, s->dt, NULL, b[1], b[2], b[3], s->acc);
        expect_op("_backward_sqrt", OP__backward_sqrt, GE_MAIN, &da);
        /* clip: every x inside [lo, hi] */
        start(z);
        rt_cuda_clip_forward(&cx, n, s->dt, b[2], -1.5f, 1.5f, b[3]);
        expect_op("clip", OP_clip, GE_MAIN, &d);
        start(z);
        rt_cuda_clip_backward(&cx, n, s->dt, b[2], -1.5f, 1.5f, b[0], b[3], s->acc);
        expect_op("_backward_clip", OP__backward_clip, GE_MAIN, &da);
        /* copies (the reshape family) and sum's and mean's backward */
        start(z);
        rt_cuda_reshape_forward(&cx, n, s->dt, b[0], b[3]);
        expect_op("Reshape", OP_Reshape, GE_MAIN, &d);
        expect_op("Flatten", OP_Flatten, GE_MAIN, &d);
        release(b, 4);
    }
    done();
}

/* casts both ways between fp32 and the 16-bit type, and a same-dtype copy */
static void test_cast(void **st)
{
    (void)st;
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        size_t n = ew_n(z);
        RtDType other = z ? RT_F32 : RT_F16;
        void *b[2] = {data(n, s->dt, -3, 3), data(n, other, -3, 3)};
        GkDims d = ew((double)n, s);
        d.s2 = esz(other), d.h2 = other == RT_F16;
        d.acc = 0;
        start(z);
        rt_cuda_cast_forward(&cx, n, s->dt, b[0], other, b[1]);
        expect_op("Cast", OP_Cast, GE_MAIN, &d);
        /* the backward: the gradient from `other` back into s->dt */
        GkDims back = ew((double)n, s);
        back.s = esz(other), back.h = other == RT_F16;
        start(z);
        rt_cuda_cast_backward(&cx, n, other, b[1], s->dt, b[0], s->acc);
        expect_op("amp_cast", OP_amp_cast, GE_MAIN, &back);
        release(b, 2);
    }
    done();
}

/* ---- rows: softmax, the loss head, reductions, broadcasting, Concat, layout ----------- */

static void test_softmax(void **st)
{
    (void)st;
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        int64_t outer = z ? 9 : 30, len = z ? 37 : 100, inner = 1;
        size_t n = (size_t)(outer * len);
        void *b[4] = {data(n, s->dt, -3, 3), data(n, s->dt, 0.01f, 0.2f), data(n, s->dt, -1, 1),
                      data(n, s->dt, -1, 1)};
        GkDims d = ew((double)n, s);
        d.len = (double)len, d.c = (double)(outer * inner);
        d.acc = 0;
        for (int lg = 0; lg < 2; lg++) {
            start(z);
            (lg ? rt_cuda_log_softmax_forward : rt_cuda_softmax_forward)(&cx, outer, len, inner,
                                                                         s->dt, b[0], b[3]);
            expect_op("softmax", lg ? OP_log_softmax : OP_softmax, GE_MAIN, &d);
        }
        GkDims da = d;
        da.acc = s->acc;
        for (int lg = 0; lg < 2; lg++) {
            start(z);
            (lg ? rt_cuda_log_softmax_backward : rt_cuda_softmax_backward)(
                &cx, outer, len, inner, s->dt, b[1], b[2], b[3], s->acc);
            expect_op("softmax backward", lg ? OP__backward_log_softmax : OP__backward_softmax,
                      GE_MAIN, &da);
        }
        release(b, 4);
    }
    done();
}

/* SoftmaxOutput: 16-bit logits into fp32 probabilities and the fp32
 * probabilities' gradient into 16 bits (the folded casts: the plain and the
 * fused ops' rows) at the second size; the backward with the step state's
 * device scale, each normalization */
static void test_softmax_output(void **st)
{
    (void)st;
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        int64_t rows = z ? 13 : 40, k = z ? 600 : 10; /* 600 classes: a block a row */
        size_t n = (size_t)(rows * k);
        RtDType pdt = RT_F32;
        void *x = data(n, s->dt, -3, 3), *prob = data(n, pdt, 0, 1), *dx = data(n, s->dt, -1, 1);
        float *label = dev((size_t)rows * sizeof *label, "label");
        RtStepState *step = dev(sizeof *step, "step state");
        for (int64_t i = 0; i < rows; i++)
            label[i] = (float)(i % k);
        memset(step, 0, sizeof *step);
        step->scale = 1024.0f;
        GkDims d = ew((double)n, s);
        d.c = (double)rows, d.len = (double)k;
        d.s = esz(pdt), d.h = 0; /* y / prob */
        d.acc = 0;
        start(z);
        rt_cuda_softmax_output_forward(&cx, rows, k, s->dt, x, pdt, prob);
        expect_op("SoftmaxOutput", OP_SoftmaxOutput, GE_MAIN, &d);
        expect_op("_fused_cast_SoftmaxOutput", OP__fused_cast_SoftmaxOutput, GE_MAIN, &d);
        for (int norm = RT_SMO_NORM_NULL; norm <= RT_SMO_NORM_VALID; norm++) {
            RtSmoParams p = {1.0f, 0.0f, false, -1.0f, (RtSmoNorm)norm};
            d.acc = s->acc;
            d.mode = norm;
            start(z);
            rt_cuda_softmax_output_backward(&cx, rows, k, pdt, prob, label, &p, step, s->dt, dx,
                                            s->acc);
            expect_op("_backward_SoftmaxOutput", OP__backward_SoftmaxOutput, GE_MAIN, &d);
            expect_op("_backward_fused_SoftmaxOutput_cast", OP__backward_fused_SoftmaxOutput_cast,
                      GE_MAIN, &d);
        }
        void *b[5] = {x, prob, dx, label, step};
        release(b, 5);
    }
    done();
}

/* sum and mean over the last axis and over the first; their backward */
static void test_reduce(void **st)
{
    (void)st;
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        /* the last axis's sums of 2,300 and 2,100 terms take a block each */
        int64_t a0 = z ? 3 : 9, a1 = z ? 2100 : 2300;
        size_t n = (size_t)(a0 * a1);
        void *x = data(n, s->dt, -3, 3), *y = data(n, s->dt, -1, 1), *dx = data(n, s->dt, -1, 1);
        for (int ax = 0; ax < 2; ax++) {
            RtReduceDims rd = {2, {a0, a1}, {ax == 0, ax == 1}};
            size_t m = (size_t)(ax ? a0 : a1);
            GkDims d = ew((double)n, s);
            d.m = (double)m;
            d.chunks = ax ? (double)a0 * ceil((double)a1 / 512) : 0;
            d.acc = 0;
            void *ws =
                dev(rt_cuda_reduce_workspace_bytes(&cx, &rd, s->dt, RT_PASS_FORWARD) + 1, "ws");
            for (int mean = 0; mean < 2; mean++) {
                start(z);
                (mean ? rt_cuda_mean_forward : rt_cuda_sum_forward)(&cx, &rd, s->dt, x, y, ws);
                expect_op("sum", mean ? OP_mean : OP_sum, GE_MAIN, &d);
            }
            GkDims db = ew((double)n, s);
            db.m = (double)m;
            for (int mean = 0; mean < 2; mean++) {
                start(z);
                (mean ? rt_cuda_mean_backward : rt_cuda_sum_backward)(&cx, &rd, s->dt, y, dx,
                                                                      s->acc);
                expect_op("sum backward", mean ? OP__backward_mean : OP__backward_sum, GE_MAIN,
                          &db);
            }
            ampc_emu_free(ws);
        }
        void *b[3] = {x, y, dx};
        release(b, 3);
    }
    done();
}

/* a [N, C, HW] tensor and a per-channel [1, C, 1] one, add and mul; the
 * backward writes both gradients (one full, one reduced) */
static void test_broadcast(void **st)
{
    (void)st;
    static const OpKind fwd[2] = {OP_broadcast_add, OP_broadcast_mul};
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        int64_t N = z ? 3 : 4, C = z ? 9 : 5, HW = z ? 70 : 600; /* db: 2,400 terms a block */
        int64_t ashape[3] = {N, C, HW}, bshape[3] = {1, C, 1};
        RtBcastDims bd;
        assert_true(rt_broadcast_dims_init(&bd, 3, ashape, 3, bshape));
        size_t n = (size_t)(N * C * HW), m = (size_t)C;
        void *a = data(n, s->dt, -2, 2), *b = data(m, s->dt, -2, 2), *y = data(n, s->dt, -1, 1),
             *da = data(n, s->dt, -1, 1), *db = data(m, s->dt, -1, 1);
        void *ws =
            dev(rt_cuda_broadcast_workspace_bytes(&cx, &bd, s->dt, RT_PASS_BACKWARD) + 1, "ws");
        for (int mul = 0; mul < 2; mul++) {
            RtBinOp op = mul ? RT_BIN_MUL : RT_BIN_ADD;
            GkDims d = ew((double)n, s);
            d.m = (double)n, d.len = (double)m;
            d.acc = 0;
            start(z);
            rt_cuda_broadcast_forward(&cx, op, &bd, s->dt, a, b, y);
            expect_op("broadcast", fwd[mul], GE_MAIN, &d);
            d.acc = s->acc;
            d.mode = mul ? BCAST_MUL : BCAST_ADD;
            d.da = d.db = 1;
            d.chunks2 = (double)(N * C) * ceil((double)HW / 512); /* b is 1 along HW */
            start(z);
            rt_cuda_broadcast_backward(&cx, op, &bd, s->dt, y, a, b, da, db, s->acc, s->acc, ws);
            expect_op("_backward_broadcast", OP__backward_broadcast, GE_MAIN, &d);
        }
        void *f[6] = {a, b, y, da, db, ws};
        release(f, 6);
    }
    done();
}

/* Concat of three equal inputs along axis 1, and a slice of it back */
static void test_concat(void **st)
{
    (void)st;
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        int64_t outer = z ? 3 : 4, inner = z ? 50 : 64, len[3] = {5, 5, 5};
        size_t part = (size_t)(outer * 5 * inner), n = 3 * part;
        void *x[3] = {data(part, s->dt, -1, 1), data(part, s->dt, -1, 1), data(part, s->dt, -1, 1)};
        void *y = data(n, s->dt, -1, 1);
        GkDims d = ew((double)n, s);
        d.m = 3;
        d.acc = 0;
        start(z);
        rt_cuda_concat_forward(&cx, 3, (const void *const *)x, len, outer, inner, s->dt, y);
        expect_op("Concat", OP_Concat, GE_MAIN, &d);
        /* a slice: one input's gradient from the concatenation's */
        void *dx[3] = {x[0], NULL, NULL};
        GkDims sd = ew((double)part, s);
        sd.acc = 0;
        start(z);
        rt_cuda_concat_backward(&cx, 3, y, len, outer, inner, s->dt, dx, NULL);
        expect_op("_slice_axis", OP__slice_axis, GE_MAIN, &sd);
        release(x, 3);
        ampc_emu_free(y);
    }
    done();
}

static void test_layout(void **st)
{
    (void)st;
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        int64_t N = z ? 2 : 3, C = z ? 19 : 16, HW = z ? 49 : 64;
        size_t n = (size_t)(N * C * HW);
        void *b[2] = {data(n, s->dt, -1, 1), data(n, s->dt, -1, 1)};
        GkDims d = ew((double)n, s);
        d.acc = 0;
        for (int to = 0; to < 2; to++) {
            start(z);
            rt_cuda_layout_convert(&cx, N, C, HW, s->dt, b[to], b[1 - to], (RtLayout)(1 - to));
            expect_op("_layout", OP__layout, GE_MAIN, &d);
        }
        release(b, 2);
    }
    done();
}

/* ---- BatchNorm and the convolution's own kernels ---------------------------------- */

typedef struct {
    int64_t outer, c, inner;
} BnSize;

static GkDims bn_dims(const BnSize *b, const Size *s)
{
    GkDims d = ew((double)(b->outer * b->c * b->inner), s);
    d.outer = (double)b->outer, d.c = (double)b->c, d.inner = (double)b->inner;
    return d;
}

/* the training forward from given statistics (the conv_bn_stats fusion's,
 * no op yet): GPU_AUX's ampc_k_bn_final_sums (the statistics, sums then sums
 * of squares, are mm and mv's 2c floats), then the op's own ampc_k_bn_apply row */
static void sums_forward(int z, const BnSize *b, const GkDims *d, const void *x, const void *add,
                         int relu, const float *gamma, const float *beta, void *y, float *sm,
                         float *si, void *ws)
{
    const Size *s = &sizes[z];
    float *stats = fdata(2 * (size_t)b->c, 1, 2);
    GkDims f = ew((double)b->c, s);
    f.da = !d->fix;
    GkLaunch rows[GK_MAX_LAUNCHES];
    assert_int_equal(gk_describe_aux("ampc_k_bn_final_sums", &f, &rows[0]), 1);
    int n = gk_describe(add    ? OP__fused_BatchNorm_add_relu
                        : relu ? OP__fused_BatchNorm_relu
                               : OP_BatchNorm,
                        GE_TRAIN, d, rows + 1);
    assert_string_equal(rows[n].kernel, "ampc_k_bn_apply");
    rows[1] = rows[n];
    start(z);
    assert_int_equal(ampc_cu_batchnorm_forward_train_sums(
                         NULL, (size_t)b->outer, (int)b->c, (size_t)b->inner, (int)s->dt, x, add,
                         relu, stats, gamma, beta, 1e-5f, (int)d->fix, y, sm, si, ws),
                     0);
    expect("BatchNorm training from sums", rows, 2);
    ampc_emu_free(stats);
}

/* training and inference forward (plain, with the fused relu, with the
 * fused add and relu), the backward (batch and global statistics,
 * fix_gamma, the fusions; the add's with and without its shortcut gradient
 * kept), the moving update under a static and a dynamic scale (the step
 * state's flag read too) */
static void bn_size(int z, const BnSize *b)
{
    const Size *s = &sizes[z];
    size_t n = (size_t)(b->outer * b->c * b->inner), C = (size_t)b->c;
    void *x = data(n, s->dt, -2, 2), *y = data(n, s->dt, -1, 1), *dy = data(n, s->dt, -1, 1),
         *dx = data(n, s->dt, -1, 1), *sc = data(n, s->dt, -1, 1), *dsc = data(n, s->dt, -1, 1);
    float *gamma = fdata(C, 0.5f, 2), *beta = fdata(C, -1, 1), *mm = fdata(C, -1, 1),
          *mv = fdata(C, 0.1f, 2), *sm = fdata(C, -1, 1), *si = fdata(C, 0.5f, 2),
          *dg = fdata(C, -1, 1), *dbeta = fdata(C, -1, 1);
    void *ws = dev(ampc_batchnorm_ws_bytes((size_t)b->outer, (int)C, (size_t)b->inner), "ws");
    RtStepState *step = dev(sizeof *step, "step state");
    memset(step, 0, sizeof *step);
    step->scale = 1.0f;
    static const OpKind fwd[3] = {OP_BatchNorm, OP__fused_BatchNorm_relu,
                                  OP__fused_BatchNorm_add_relu};
    static const OpKind bwd[3] = {OP__backward_BatchNorm, OP__backward_fused_BatchNorm_relu,
                                  OP__backward_fused_BatchNorm_add_relu};
    for (int fix = 0; fix < 2; fix++)
        for (int f = 0; f < 3; f++) {
            GkDims d = bn_dims(b, s);
            d.acc = 0, d.fix = fix, d.saves = 1;
            const void *add = f == 2 ? sc : NULL;
            start(z);
            ampc_cu_batchnorm_forward_train(NULL, (size_t)b->outer, (int)C, (size_t)b->inner,
                                            (int)s->dt, x, add, f > 0, gamma, beta, 1e-5f, fix, y,
                                            sm, si, ws);
            expect_op("BatchNorm training", fwd[f], GE_TRAIN, &d);
            start(z);
            ampc_cu_batchnorm_forward_inference(NULL, (size_t)b->outer, (int)C, (size_t)b->inner,
                                                (int)s->dt, x, add, f > 0, gamma, beta, mm, mv,
                                                1e-3f, fix, y, sm, si, ws);
            expect_op("BatchNorm inference", fwd[f], GE_INFER, &d);
            sums_forward(z, b, &d, x, add, f > 0, gamma, beta, y, sm, si, ws);
            for (int glob = 0; glob < 2; glob++)
                for (int keep = 0; keep < 1 + (f == 2); keep++) {
                    GkDims g = bn_dims(b, s);
                    g.fix = fix, g.glob = glob, g.dx = 1, g.dgamma = 1, g.dbeta = 1;
                    g.dsc = f == 2 && !keep;
                    start(z);
                    ampc_cu_batchnorm_backward(NULL, (size_t)b->outer, (int)C, (size_t)b->inner,
                                               (int)s->dt, x, f ? y : NULL, dy, g.dsc ? dsc : NULL,
                                               gamma, sm, si, fix, glob, dx, dg, dbeta, s->acc,
                                               s->acc, ws);
                    expect_op("BatchNorm backward", bwd[f], GE_MAIN, &g);
                }
        }
    for (int skip = 0; skip < 2; skip++) {
        GkDims d = bn_dims(b, s);
        d.skip = skip;
        step->dynamic = skip;
        start(z);
        rt_cuda_batchnorm_update_moving(&cx, (int64_t)C, (int64_t)(n / C), sm, si, 1e-5f, 0.9f, mm,
                                        mv, step);
        expect_op("bn_moving_update", OP_bn_moving_update, GE_MAIN, &d);
    }
    void *fr[16] = {x, y, dy, dx, sc, dsc, gamma, beta, mm, mv, sm, si, dg, dbeta, ws, step};
    release(fr, 16);
}

static void test_batchnorm(void **st)
{
    (void)st;
    /* NCHW with inner not a multiple of 8 (per element) and a multiple (8
     * elements a thread); NHWC's inner of 1 with 9 channels (per element)
     * and 16 (8 channels a load); several tiles at the first size */
    static const BnSize bs[2][2] = {{{3, 5, 700}, {130, 16, 1}}, {{40, 9, 1}, {5, 8, 24}}};
    for (int z = 0; z < 2; z++)
        for (int k = 0; k < 2; k++)
            bn_size(z, &bs[z][k]);
    done();
}

/* The custom launches around a convolution's cuDNN call (the stem's channel
 * padding and its undoing, the bias and its gradient) and a dense layer's
 * bias gradient, as conv.c and fc.c make them */
static void test_conv_kernels(void **st)
{
    (void)st;
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        /* the bias gradient's 2,100 terms a channel at the first size: a block each */
        int64_t N = z ? 2 : 3, C = 3, K = z ? 7 : 8, RS = 9, HW = z ? 100 : 2800, PQ = HW / 4;
        int cp = 4;
        size_t xn = (size_t)(N * HW * cp), wn = (size_t)(K * RS * cp), yn = (size_t)(N * PQ * K);
        void *x = data(xn, s->dt, -1, 1), *xp = data(xn, s->dt, -1, 1), *w = data(wn, s->dt, -1, 1),
             *wp = data(wn, s->dt, -1, 1), *y = data(yn, s->dt, -1, 1),
             *bias = data((size_t)K, s->dt, -1, 1), *dbias = data((size_t)K, s->dt, -1, 1);
        GkDims d = ew(0, s);
        d.N = (double)N, d.C = (double)C, d.K = (double)K, d.G = 1, d.cp = cp;
        d.HW = (double)HW, d.PQ = (double)PQ, d.RS = (double)RS, d.stride = 2;
        d.pad = 1, d.bias = 1;
        d.acc = 0;
        /* forward: x and w padded, (cuDNN), the bias added (NHWC: inner 1) */
        start(z);
        ampc_cu_pad_channels(NULL, (size_t)(N * HW), (int)C, cp, (int)s->dt, x, xp);
        ampc_cu_pad_channels(NULL, (size_t)(K * RS), (int)C, cp, (int)s->dt, w, wp);
        ampc_cu_bias_add(NULL, (size_t)(N * PQ), (int)K, 1, (int)s->dt, y, bias);
        expect_op("Convolution", OP_Convolution, GE_MAIN, &d);
        d.acc = s->acc;
        /* data gradient: w padded, (cuDNN), the first C channels out */
        start(z);
        ampc_cu_pad_channels(NULL, (size_t)(K * RS), (int)C, cp, (int)s->dt, w, wp);
        ampc_cu_unpad_channels(NULL, (size_t)(N * HW), (int)C, cp, (int)s->dt, xp, x, s->acc);
        expect_op("_backward_Convolution data", OP__backward_Convolution, GE_DATA, &d);
        /* weight gradient: x padded, (cuDNN), dw out, the bias gradient */
        start(z);
        ampc_cu_pad_channels(NULL, (size_t)(N * HW), (int)C, cp, (int)s->dt, x, xp);
        ampc_cu_unpad_channels(NULL, (size_t)(K * RS), (int)C, cp, (int)s->dt, wp, w, s->acc);
        ampc_cu_bias_grad(NULL, (size_t)(N * PQ), (int)K, 1, (int)s->dt, y, dbias, s->acc);
        expect_op("_backward_Convolution weight", OP__backward_Convolution, GE_WEIGHT, &d);
        /* FullyConnected's bias gradient: [N, K] rows */
        GkDims f = ew(0, s);
        f.N = (double)(N * PQ), f.C = 16, f.K = (double)K, f.bias = 1, f.acc = s->acc;
        start(z);
        ampc_cu_bias_grad(NULL, (size_t)(N * PQ), (int)K, 1, (int)s->dt, y, dbias, s->acc);
        expect_op("_backward_FullyConnected", OP__backward_FullyConnected, GE_WEIGHT, &f);
        void *b[7] = {x, xp, w, wp, y, bias, dbias};
        release(b, 7);
    }
    done();
}

/* ---- pooling ------------------------------------------------------------------------- */

/* pool_view's window counts (passes/gpucost.c), counted here by brute force
 * over every output and input of each axis */
static void pool_windows(const RtPoolDims *p, GkDims *d)
{
    d->win = d->wmax = d->cover = d->cmax = 1;
    for (int a = 0; a < p->nsp; a++) {
        int k = p->global ? p->in[a] : p->kernel[a], st = p->global ? 1 : p->stride[a],
            pad = p->global ? 0 : p->pad[a];
        double taps = 0, cover = 0, most = 0;
        for (int o = 0; o < p->out[a]; o++)
            for (int e = 0; e < p->in[a]; e++)
                taps += e >= o * st - pad && e < o * st - pad + k;
        for (int e = 0; e < p->in[a]; e++) {
            double c = 0;
            for (int o = 0; o < p->out[a]; o++)
                c += e >= o * st - pad && e < o * st - pad + k;
            cover += c, most = fmax(most, c);
        }
        d->win *= taps / p->out[a];
        d->wmax *= k;
        d->cover *= cover / p->in[a];
        d->cmax *= most;
    }
}

static void test_pool(void **st)
{
    (void)st;
    /* overlapping padded windows (ResNet's stem pool), and disjoint ones */
    static const RtPoolDims shapes[2] = {
        {.n = 2, .c = 3, .nsp = 2, .in = {9, 8}, .kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}},
        {.n = 3, .c = 2, .nsp = 2, .in = {6, 8}, .kernel = {2, 2}, .stride = {2, 2}}};
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        for (int t = RT_POOL_MAX; t <= RT_POOL_SUM; t++)
            for (int lay = 0; lay < 2; lay++) {
                RtPoolDims p = shapes[z];
                p.type = (RtPoolType)t;
                p.layout = (RtLayout)lay;
                assert_true(rt_pool_dims_init(&p));
                AmpcPoolGeom g;
                char err[128];
                assert_true(ampc_pool_geom(&p, lay ? AMPC_NHWC : AMPC_NCHW, &g, err, sizeof err));
                size_t xn = (size_t)(p.n * p.c * p.in[0] * p.in[1]),
                       yn = (size_t)(p.n * p.c * p.out[0] * p.out[1]);
                /* distinct values: max's first maximum is then the only one */
                void *x = data(xn, s->dt, -2, 2), *y = data(yn, s->dt, -1, 1),
                     *dx = data(xn, s->dt, -1, 1);
                GkDims d = ew((double)yn, s);
                d.m = (double)xn, d.mode = t;
                pool_windows(&p, &d);
                d.acc = 0;
                start(z);
                ampc_cu_pool_forward(NULL, &g, (int)s->dt, x, y);
                expect_op("Pooling", OP_Pooling, GE_MAIN, &d);
                d.acc = s->acc;
                start(z);
                void *arg = dev(ampc_pool_ws_bytes(&g, 1) + 1, "arg");
                ampc_cu_pool_backward(NULL, &g, (int)s->dt, x, y, dx, s->acc, arg);
                expect_op("_backward_Pooling", OP__backward_Pooling, GE_MAIN, &d);
                void *b[4] = {x, y, dx, arg};
                release(b, 4);
            }
    }
    done();
}

/* ---- the step's own launches ------------------------------------------------------- */

static void *to_dev(const void *p, size_t bytes, const char *name)
{
    void *d = dev(bytes, name);
    memcpy(d, p, bytes);
    return d;
}

enum { NT = 5 };

/* A table of NT tensors (16-bit weights with fp32 masters, and fp32 ones) for
 * optimizer `kind` with ns states; its GkStepDims; the device copies */
typedef struct {
    AmpcMtTensor t[NT];
    AmpcMtBlock blocks[64];
    int64_t nb, chunk;
    AmpcMtTensor *td;
    AmpcMtBlock *bd;
    GkStepDims sd;
    void *mem[5 * NT];
    int nmem;
} Table;

static void table_make(Table *tb, int z, RtOptKind kind, int ns)
{
    static const int64_t n[2][NT] = {{1000, 2500, 7, 1300, 640}, {900, 1201, 64, 3, 2000}};
    memset(tb, 0, sizeof *tb);
    tb->chunk = z ? 512 : 1000;
    for (int i = 0; i < NT; i++) {
        AmpcMtTensor *t = &tb->t[i];
        bool half = i % 2 == 0;
        RtDType wdt = half ? sizes[z].dt == RT_F16 ? RT_F16 : RT_BF16 : RT_F32;
        t->n = n[z][i];
        t->gdt = t->wdt = (int32_t)wdt;
        t->grad = tb->mem[tb->nmem++] = data((size_t)t->n, wdt, -1, 1);
        t->weight = tb->mem[tb->nmem++] = data((size_t)t->n, wdt, -1, 1);
        if (half)
            t->master = tb->mem[tb->nmem++] = fdata((size_t)t->n, -1, 1);
        if (ns >= 1)
            t->mom = tb->mem[tb->nmem++] = fdata((size_t)t->n, -1, 1);
        if (ns >= 2)
            t->var = tb->mem[tb->nmem++] = fdata((size_t)t->n, 0, 1);
        t->lr_mult = t->wd_mult = 1.0f;
        *(half ? &tb->sd.e16 : &tb->sd.e32) += (double)t->n;
        tb->sd.chunk0 = fmax(tb->sd.chunk0, fmin((double)tb->chunk, (double)t->n));
    }
    tb->nb = ampc_mt_fill_blocks(tb->t, NT, tb->chunk, tb->blocks);
    assert_true(tb->nb > 0 && tb->nb <= 64);
    tb->td = to_dev(tb->t, sizeof tb->t, "tensors");
    tb->bd = to_dev(tb->blocks, (size_t)tb->nb * sizeof *tb->blocks, "blocks");
    tb->sd.nblk = (double)tb->nb;
    tb->sd.h16 = sizes[z].dt == RT_F16;
    tb->sd.nstate = ns;
    tb->sd.adam = kind == RT_OPT_ADAM;
    tb->sd.nag = kind == RT_OPT_NAG;
}

static void table_free(Table *tb)
{
    release(tb->mem, tb->nmem);
    ampc_emu_free(tb->td), ampc_emu_free(tb->bd);
}

/* The step's launches as device.cu makes them (no copies): the scale, the
 * check (dynamic), the update's scalars, the update, its count, the loss
 * scale (dynamic), the ring; for each optimizer, static and dynamic */
static void test_step(void **st)
{
    (void)st;
    static const struct {
        RtOptKind kind;
        float momentum;
        int ns;
    } opts[4] = {
        {RT_OPT_SGD, 0, 0}, {RT_OPT_SGD, 0.9f, 1}, {RT_OPT_NAG, 0.9f, 1}, {RT_OPT_ADAM, 0, 2}};
    for (int z = 0; z < 2; z++)
        for (int o = 0; o < 4; o++)
            for (int dyn = 0; dyn < 2; dyn++) {
                Table tb;
                table_make(&tb, z, opts[o].kind, opts[o].ns);
                tb.sd.dyn = dyn;
                RtOptConfig c;
                memset(&c, 0, sizeof c);
                c.kind = opts[o].kind, c.momentum = opts[o].momentum, c.lr = 0.1f, c.wd = 1e-4f;
                c.clip_gradient = -1, c.rescale_grad = 1, c.beta1 = 0.9f, c.beta2 = 0.999f;
                c.epsilon = 1e-8f, c.t = 1;
                AmpcMtStep step = ampc_mt_step_from_config(&c);
                step.batch = 8;
                AmpcDevLs ls0;
                memset(&ls0, 0, sizeof ls0);
                ls0.ls.scale = 1024.0f;
                ls0.lr_n = 1, ls0.st.dynamic = dyn;
                AmpcDevLs *ls = to_dev(&ls0, sizeof ls0, "ls");
                AmpcMtStep *table = to_dev(&step, sizeof step, "lr table"),
                           *cur = to_dev(&step, sizeof step, "cur");
                int32_t *flag = &ls->st.flag; /* the step state's, as device.cu's */
                AmpcLossScaleStep *ring = dev(RT_DEV_LS_RING * sizeof *ring, "ring");
                AmpcLossScaleRule rule = {2.0f, 0.5f, 2000, 1.0f, 65536.0f * 65536.0f};
                start(z);
                ampc_cu_step_begin(NULL, ls, 0);
                if (dyn) {
                    ampc_cu_set_flag(NULL, flag, 0);
                    ampc_cu_mt_finite(NULL, tb.td, tb.bd, tb.nb, tb.chunk, flag);
                }
                ampc_cu_step_pick(NULL, ls, table, cur);
                if (!dyn)
                    ampc_cu_set_flag(NULL, flag, 0);
                ampc_cu_mt_optim(NULL, tb.td, tb.bd, tb.nb, tb.chunk, NULL, cur, dyn ? flag : NULL,
                                 dyn ? NULL : flag, &ls->st.scale);
                ampc_cu_step_count(NULL, ls, flag);
                if (dyn)
                    ampc_cu_loss_scale(NULL, &ls->ls, flag, rule, &ls->stats);
                ampc_cu_step_ring(NULL, ls, flag, ring, RT_DEV_LS_RING);
                GkLaunch rows[GK_MAX_STEP];
                const char *names[GK_MAX_STEP];
                int nr = gk_describe_step(&tb.sd, rows, names);
                expect("the step", rows, nr);
                void *b[4] = {ls, table, cur, ring};
                release(b, 4);
                table_free(&tb);
            }
    done();
}

/* the fill, the one-tensor finite check, the binary backward, the synthetic
 * batch, the raw batch normalised */
static void test_aux(void **st)
{
    (void)st;
    for (int z = 0; z < 2; z++) {
        const Size *s = &sizes[z];
        size_t n = ew_n(z);
        void *b[5] = {data(n, s->dt, -1, 1), data(n, s->dt, -1, 1), data(n, s->dt, -1, 1),
                      data(n, s->dt, -1, 1), data(n, s->dt, -1, 1)};
        int32_t *flag = dev(sizeof *flag, "flag");
        GkDims d = ew((double)n, s);
        d.acc = 0;
        start(z);
        ampc_cu_fill(NULL, b[0], (int)s->dt, n, 0.5f);
        expect_aux("fill", "ampc_k_fill", &d);
        *flag = 0;
        start(z);
        ampc_cu_finite(NULL, b[1], n, (int)s->dt, flag);
        expect_aux("finite", "ampc_k_finite", &d);
        for (int op = AMPC_BIN_ADD; op <= AMPC_BIN_MUL; op++) {
            GkDims g = ew((double)n, s);
            g.mode = op, g.da = 1, g.db = 1;
            start(z);
            ampc_cu_binary_backward(NULL, op, n, (int)s->dt, b[0], b[1], b[2], b[3], b[4], s->acc,
                                    s->acc);
            expect_aux("binary backward", "ampc_k_binary_backward", &g);
        }
        release(b, 5);
        ampc_emu_free(flag);
        /* the synthetic batch: 16-bit NHWC padded 3 -> 4, labels at the first size */
        int64_t ns = 2 + 6 * z;
        size_t cp = s->dt == RT_F32 ? 3 : 4, inner = n / ((size_t)ns * cp) + 1;
        int64_t *idx = dev((size_t)ns * sizeof *idx, "idx");
        for (int64_t j = 0; j < ns; j++)
            idx[j] = 17 * j + 3;
        GkDims g = ew((double)((size_t)ns * cp * inner), s);
        g.m = (double)((size_t)ns * 3 * inner), g.N = (double)ns, g.da = z == 0;
        void *x = dev((size_t)g.n * esz(s->dt), "x"), *y = dev((size_t)ns * 4, "y");
        AmpcSynthBatch sb = {(size_t)ns, 3, cp, inner, 1, (int)s->dt, 5, 6, 10};
        start(z);
        ampc_cu_synthetic_batch(NULL, &sb, idx, x, z == 0 ? y : NULL);
        expect_aux("synthetic batch", "ampc_k_synthetic_batch", &g);
        void *sbuf[3] = {idx, x, y};
        release(sbuf, 3);
        /* the raw batch normalised: the same form, CIFAR-10's three means */
        uint8_t *raw = dev((size_t)g.m, "raw");
        float *lab = dev((size_t)ns * 4, "labels");
        memset(raw, 7, (size_t)g.m);
        memset(lab, 0, (size_t)ns * 4);
        x = dev((size_t)g.n * esz(s->dt), "x"), y = dev((size_t)ns * 4, "y");
        AmpcIngest ib = {(size_t)ns,
                         3,
                         cp,
                         inner,
                         1,
                         (int)s->dt,
                         {3, 255.0f, {0.5f, 0.25f, 0.125f, 0}, {0.5f, 0.25f, 0.125f, 1}}};
        start(z);
        ampc_cu_ingest(NULL, &ib, raw, lab, x, z == 0 ? y : NULL);
        expect_aux("ingest", "ampc_k_ingest", &g);
        void *ibuf[4] = {raw, lab, x, y};
        release(ibuf, 4);
    }
    done();
}

/* ---- coverage ----------------------------------------------------------------------- */

/* every GPUK row of a custom kernel was compared above at both sizes (as
 * its op's call), and every GPU_STEP and GPU_AUX kernel */
static void test_every_row_checked(void **st)
{
    (void)st;
    static const struct {
        OpKind op;
        GkEntry e;
        const char *name, *kernel;
    } rows[] = {
#define GPUK(id, entry, kernel, ...) {OP_##id, entry, #id, #kernel},
#include "kernels.def"
#undef GPUK
    };
    static const char *const others[] = {
#define GPU_STEP(what, kernel, ...) #kernel,
#define GPU_AUX(kernel, ...) #kernel,
#include "kernels.def"
#undef GPU_STEP
#undef GPU_AUX
    };
    int missing = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (strncmp(rows[i].kernel, "ampc_k_", 7) != 0)
            continue; /* a library call */
        unsigned at = op_checked[rows[i].op][rows[i].e];
        if (at != 3u) {
            print_message("%s's row for %s%s: not compared at %s\n", rows[i].kernel, rows[i].name,
                          gk_entry_suffix[rows[i].e], at == 0 ? "any size" : "both sizes");
            missing++;
        }
    }
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        if (strncmp(others[i], "ampc_k_", 7) != 0)
            continue; /* a copy */
        unsigned at = 0;
        for (int j = 0; j < nchecked; j++)
            if (strcmp(checked[j].name, others[i]) == 0)
                at = checked[j].at;
        if (at != 3u) {
            print_message("%s: not compared at %s\n", others[i],
                          at == 0 ? "any size" : "both sizes");
            missing++;
        }
    }
    assert_int_equal(missing, 0);
}

/* ---- registered ----------------------------------------------------------------------- */

int main(void)
{
    ampc_emu_on_launch(on_launch, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activation),
        cmocka_unit_test(test_leaky_relu),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_cast),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_softmax_output),
        cmocka_unit_test(test_reduce),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_conv_kernels),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_step),
        cmocka_unit_test(test_aux),
        cmocka_unit_test(test_every_row_checked),
    };
    return cmocka_run_group_tests(tests, emu_test_setup, emu_test_teardown);
}
