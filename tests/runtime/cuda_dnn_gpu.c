/* cuda_dnn_gpu.c - make gpu-check: cuDNN convolutions (forward,
 * backward-data, backward-filter with the bias gradient) and cuBLASLt
 * FullyConnected (forward with bias, backward-data, backward-weight with
 * the bias gradient), each with and without accumulate, against their CPU
 * twins (rt_conv_*, rt_fc_*) on random data in fp32, fp16 and bf16.
 *
 * The error of an output is max |gpu - cpu| / max |cpu| (relative to the
 * tensor's largest value, so a value near 0 does not blow it up); stated
 * tolerances: fp32 1e-5 (fp32 math, TF32 engines refused, only the order
 * of the sums differs), fp16 2e-3 and bf16 1.6e-2 (one rounding of the
 * output, 2^-10 and 2^-7 relative, can fall either way, plus the
 * accumulate's second rounding).  16-bit convolutions run NHWC/KRSC
 * (the test converts), with the RGB-like 3- and 5-channel inputs padded.
 * Pooling and BatchNorm (custom kernels, pool.cuh and batchnorm.cuh) must equal
 * rt_pool_* and rt_batchnorm_* bit for bit (tolerance 0).  The convolution
 * fused with BatchNorm's statistics (built behind --fuse=conv_bn_stats, off by default) runs where this
 * device's cuDNN has an engine for it (stats_case; an info line otherwise).  Prints one line per op and dtype; exits 1 on a failure, 3 without a GPU.
 * AMPC_CUDNN_AUTOTUNE=1 times the candidate plans; AMPC_CUDNN_FP32=exact|tf32|fast
 * sets the fp32 engine rule (default exact, as the programs'), and every
 * plan's engine and numerical notes are printed ("engine" lines, one per
 * convolution, pass and accumulate flag); under exact an fp32 plan on a
 * tensor-core engine is a failure whatever its error (the first-run kit also
 * runs this under NVIDIA_TF32_OVERRIDE=0, which turns TF32 off in the
 * libraries: equal results there and not here point at the engine rule). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/plan.h"
#include "cuda/rt_cuda.h"

static cudaStream_t stream;
static RtCudaCtx *cx; /* the libraries on stream */
static int failures;
static AmpcFp32Mode fp32_mode = AMPC_FP32_EXACT;

/* the plan a call of this shape ran: its engine and notes, and under exact no
 * tensor core for fp32 */
static void engine_line(const char *shape, const RtConvDims *d, RtDType dt, RtPass pass, bool acc)
{
    long engine = rt_cuda_conv_engine(cx, d, dt, pass, acc),
         notes = rt_cuda_conv_notes(cx, d, dt, pass, acc);
    if (engine < 0)
        return; /* not planned: a padded shape plans no accumulating variant */
    char names[128];
    bool tc = notes >= 0 && (notes & AMPC_NOTE_TENSOR_CORE);
    bool bad = dt == RT_F32 && fp32_mode == AMPC_FP32_EXACT && tc;
    printf("engine %-9s %-28s %-15s%s engine %ld notes %s%s\n", rt_dtype_name(dt), shape,
           pass == RT_PASS_FORWARD    ? "forward"
           : pass == RT_PASS_BACKWARD ? "backward-data"
                                      : "backward-filter",
           acc ? " acc" : "    ", engine, ampc_note_names((unsigned)notes, names, sizeof names),
           bad ? "  FAIL (a tensor-core engine under --cudnn-fp32=exact)" : "");
    failures += bad;
}

static void *dev(size_t bytes)
{
    void *p = NULL;
    AMPC_CHECK(AMPC_API_CUDA, cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}
static void up(void *d, const void *h, size_t b)
{
    AMPC_CHECK(AMPC_API_CUDA, cudaMemcpyAsync(d, h, b, cudaMemcpyHostToDevice, stream));
}
static void down(void *h, const void *d, size_t b)
{
    AMPC_CHECK(AMPC_API_CUDA, cudaMemcpyAsync(h, d, b, cudaMemcpyDeviceToHost, stream));
    AMPC_CHECK(AMPC_API_CUDA, cudaStreamSynchronize(stream));
}

static uint64_t rng = 12345;
static float uni(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

static void *rnd(size_t n, RtDType dt)
{
    float *f = malloc(n * sizeof *f);
    void *o = malloc(n * rt_dtype_size(dt) + 1);
    for (size_t i = 0; i < n; i++)
        f[i] = uni();
    rt_from_f32(o, f, n, dt);
    free(f);
    return o;
}

static void *ws_host(size_t b)
{
    return aligned_alloc(RT_WS_ALIGN, (b / RT_WS_ALIGN + 1) * RT_WS_ALIGN);
}

/* [a, c, s] <-> [a, s, c] (to_last) of es-byte elements */
static void *permute(const void *src, size_t a, size_t c, size_t s, size_t es, bool to_last)
{
    char *d = malloc(a * c * s * es + 1);
    const char *p = src;
    for (size_t i = 0; i < a; i++)
        for (size_t j = 0; j < c; j++)
            for (size_t q = 0; q < s; q++) {
                size_t first = (i * c + j) * s + q, last = (i * s + q) * c + j;
                memcpy(d + (to_last ? last : first) * es, p + (to_last ? first : last) * es, es);
            }
    return d;
}

static double err_of(const void *gpu, const void *cpu, size_t n, RtDType dt)
{
    float *g = malloc(n * 4), *c = malloc(n * 4);
    rt_to_f32(g, gpu, n, dt);
    rt_to_f32(c, cpu, n, dt);
    double mx = 0, e = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(c[i]));
    for (size_t i = 0; i < n; i++)
        e = fmax(e, isfinite(g[i]) ? fabs((double)g[i] - c[i]) : INFINITY);
    free(g), free(c);
    return mx > 0 ? e / mx : e;
}

static double tol(RtDType dt) { return dt == RT_F32 ? 1e-5 : dt == RT_F16 ? 2e-3 : 1.6e-2; }

typedef struct {
    const char *op;
    double worst;
    int cases;
} Row;

static void note(Row *r, double e) { r->worst = fmax(r->worst, e), r->cases++; }

static int64_t prod(const int *v, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        p *= v[i];
    return p;
}

/* The forward fused with BatchNorm's statistics (cuDNN's GEN_STATS;
 * off by default, --fuse=conv_bn_stats: docs/backend-cuda.md), where this device's cuDNN
 * has an engine for it (else an info line): st[0] y against rt_conv_forward
 * (tol(dt)); st[1] the sums and sums of squares against rt_batchnorm_stats of
 * the GPU's own y (relative to the largest, 1e-4: fp32 sums in cuDNN's
 * order); st[2] BatchNorm + relu from them against its CPU twin from the same
 * sums (bit for bit); st[3] that against the BatchNorm + relu that sums y
 * again (tol(dt) on y, save_mean and save_invstd). */
static void stats_case(const RtConvDims *d, const RtConvDims *dl, RtDType dt, const void *x,
                       const void *w, const void *X, const void *W, size_t O, Row *st)
{
    char why[1024];
    if (!rt_cuda_conv_stats_probe(cx, dl, dt, why, sizeof why)) {
        printf("info: conv+stats %s n%d c%d k%d g%d %dD: not run, no engine here: %s\n",
               rt_dtype_name(dt), d->n, d->c, d->k, d->groups, d->nsp, why);
        return;
    }
    bool last = dl->layout == RT_LAYOUT_NHWC;
    size_t es = rt_dtype_size(dt), K = (size_t)d->k, yn = (size_t)d->n * K * O;
    void *cpu = malloc(yn * es), *out = malloc(yn * es), *ty = malloc(yn * es),
         *ry = malloc(yn * es), *C = ws_host(rt_conv_workspace_bytes(d, dt, RT_PASS_FORWARD));
    void *Y = dev(yn * es), *Y2 = dev(yn * es),
         *G = dev(rt_cuda_conv_stats_workspace_bytes(cx, dl, dt));
    float *ST = dev(2 * K * 4), *P = dev(4 * K * 4), *gamma = rnd(K, RT_F32),
          *beta = rnd(K, RT_F32);
    float *gs = malloc(2 * K * 4), *cs = malloc(2 * K * 4), *gk = malloc(2 * K * 4),
          *tk = malloc(2 * K * 4), *rk = malloc(2 * K * 4);
    up(P, gamma, K * 4), up(P + K, beta, K * 4);
    rt_conv_forward(d, dt, x, w, NULL, cpu, C);
    rt_cuda_conv_forward_stats(cx, dl, dt, X, W, Y, ST, G);
    down(out, Y, yn * es), down(gs, ST, 2 * K * 4);
    void *o = last ? permute(out, d->n, O, K, es, true) : out;
    note(&st[0], err_of(o, cpu, yn, dt));
    if (last)
        free(o);
    /* y as BatchNorm sees it in its layout: NHWC [n*O, k, 1], NCHW [n, k, O] */
    RtBnDims bd = {
        .outer = last ? d->n * (int64_t)O : d->n, .c = d->k, .inner = last ? 1 : (int64_t)O};
    rt_batchnorm_stats(&bd, dt, out, cs);
    note(&st[1], fmax(err_of(gs, cs, K, RT_F32), err_of(gs + K, cs + K, K, RT_F32)));
    rt_cuda_batchnorm_forward_train_sums(cx, &bd, dt, Y, NULL, true, ST, P, P + K, 1e-5f, false, Y2,
                                         P + 2 * K, P + 3 * K);
    rt_batchnorm_forward_train_sums(&bd, dt, out, NULL, true, gs, gamma, beta, 1e-5f, false, ty, tk,
                                    tk + K);
    down(ry, Y2, yn * es), down(gk, P + 2 * K, 2 * K * 4);
    note(&st[2], fmax(err_of(ry, ty, yn, dt), err_of(gk, tk, 2 * K, RT_F32)));
    rt_batchnorm_relu_forward_train(&bd, dt, out, gamma, beta, 1e-5f, false, ry, rk, rk + K);
    note(&st[3], fmax(err_of(ty, ry, yn, dt),
                      fmax(err_of(tk, rk, K, RT_F32), err_of(tk + K, rk + K, K, RT_F32))));
    cudaFree(Y), cudaFree(Y2), cudaFree(G), cudaFree(ST), cudaFree(P);
    free(cpu), free(out), free(ty), free(ry), free(C), free(gamma), free(beta), free(gs);
    free(cs), free(gk), free(tk), free(rk);
}

/* one convolution shape, every pass, both accumulate flags; st: stats_case's rows */
static void conv_case(RtConvDims d, RtDType dt, Row *fwd, Row *bwd, Row *wgt, Row *st)
{
    rt_conv_dims_init(&d);
    /* the CUDA calls' dims: the schedule's layout for dt (the CPU's stay NCHW) */
    RtConvDims dl = d;
    dl.layout = ampc_conv_layout(dt) == AMPC_NHWC ? RT_LAYOUT_NHWC : RT_LAYOUT_NCHW;
    size_t es = rt_dtype_size(dt), S = prod(d.in, d.nsp), R = prod(d.kernel, d.nsp),
           O = prod(d.out, d.nsp), cg = d.c / d.groups;
    size_t xn = d.n * d.c * S, wn = d.k * cg * R, yn = d.n * d.k * O;
    bool last = ampc_conv_layout(dt) == AMPC_NHWC;
    void *x = rnd(xn, dt), *w = rnd(wn, dt), *dy = rnd(yn, dt), *b = rnd(d.k, dt);
    /* the device copies in the CUDA layout */
    void *xl = last ? permute(x, d.n, d.c, S, es, true) : x;
    void *wl = last ? permute(w, d.k, cg, R, es, true) : w;
    void *dyl = last ? permute(dy, d.n, d.k, O, es, true) : dy;
    void *X = dev(xn * es), *W = dev(wn * es), *Y = dev(yn * es), *B = dev(d.k * es);
    up(X, xl, xn * es), up(W, wl, wn * es), up(Y, dyl, yn * es), up(B, b, d.k * es);
    size_t gws = 0;
    for (int p = 0; p < 3; p++) {
        size_t s = rt_cuda_conv_workspace_bytes(cx, &dl, dt, (RtPass)p);
        gws = s > gws ? s : gws;
    }
    size_t cws = 0;
    for (int p = 0; p < 3; p++) {
        size_t s = rt_conv_workspace_bytes(&d, dt, (RtPass)p);
        cws = s > cws ? s : cws;
    }
    void *G = dev(gws), *C = ws_host(cws);
    void *out = malloc((xn > wn ? (xn > yn ? xn : yn) : (wn > yn ? wn : yn)) * es);
    void *cpu = malloc((xn > wn ? (xn > yn ? xn : yn) : (wn > yn ? wn : yn)) * es);
    void *OUT = dev((xn > wn ? (xn > yn ? xn : yn) : (wn > yn ? wn : yn)) * es),
         *DB = dev(d.k * es);
    void *cdb = malloc(d.k * es), *gdb = malloc(d.k * es);

    /* forward with bias */
    rt_conv_forward(&d, dt, x, w, b, cpu, C);
    rt_cuda_conv_forward(cx, &dl, dt, X, W, B, OUT, G);
    down(out, OUT, yn * es);
    void *o = last ? permute(out, d.n, O, d.k, es, true) : out; /* [n, O, k] -> [n, k, O] */
    note(fwd, err_of(o, cpu, yn, dt));
    if (last)
        free(o);
    stats_case(&d, &dl, dt, x, w, X, W, O, st);
    for (int acc = 0; acc < 2; acc++) {
        /* backward-data: dx starts as x (so accumulate adds to something) */
        memcpy(cpu, x, xn * es);
        up(OUT, xl, xn * es);
        rt_conv_backward_data(&d, dt, w, dy, cpu, acc, C);
        rt_cuda_conv_backward_data(cx, &dl, dt, W, Y, OUT, acc, G);
        down(out, OUT, xn * es);
        o = last ? permute(out, d.n, S, d.c, es, true) : out;
        note(bwd, err_of(o, cpu, xn, dt));
        if (last)
            free(o);
        /* backward-filter with the bias gradient, starting from w and b */
        memcpy(cpu, w, wn * es), memcpy(cdb, b, d.k * es);
        up(OUT, wl, wn * es), up(DB, b, d.k * es);
        rt_conv_backward_weight(&d, dt, x, dy, cpu, cdb, acc, C);
        rt_cuda_conv_backward_weight(cx, &dl, dt, X, Y, OUT, DB, acc, G);
        down(out, OUT, wn * es), down(gdb, DB, d.k * es);
        o = last ? permute(out, d.k, R, cg, es, true) : out;
        note(wgt, fmax(err_of(o, cpu, wn, dt), err_of(gdb, cdb, d.k, dt)));
        if (last)
            free(o);
    }
    cudaFree(X), cudaFree(W), cudaFree(Y), cudaFree(B), cudaFree(G), cudaFree(OUT), cudaFree(DB);
    free(x), free(w), free(dy), free(b), free(C), free(out), free(cpu), free(cdb), free(gdb);
    if (last)
        free(xl), free(wl), free(dyl);
    char shape[64];
    snprintf(shape, sizeof shape, "n%d c%d k%d g%d %dD k%d s%d", d.n, d.c, d.k, d.groups, d.nsp,
             d.kernel[0], d.stride[0]);
    for (int p = 0; p < 3; p++)
        for (int acc = 0; acc < 2; acc++)
            engine_line(shape, &dl, dt, (RtPass)p, acc && p > 0);
}

static void fc_case(RtFcDims d, RtDType dt, Row *fwd, Row *bwd, Row *wgt)
{
    size_t es = rt_dtype_size(dt), xn = (size_t)d.n * d.in, wn = (size_t)d.hidden * d.in,
           yn = (size_t)d.n * d.hidden, big = xn > wn ? (xn > yn ? xn : yn) : (wn > yn ? wn : yn);
    void *x = rnd(xn, dt), *w = rnd(wn, dt), *dy = rnd(yn, dt), *b = rnd(d.hidden, dt);
    void *X = dev(xn * es), *W = dev(wn * es), *Y = dev(yn * es), *B = dev(d.hidden * es);
    up(X, x, xn * es), up(W, w, wn * es), up(Y, dy, yn * es), up(B, b, d.hidden * es);
    size_t gws = 0, cws = 0;
    for (int p = 0; p < 3; p++) {
        size_t s = rt_cuda_fc_workspace_bytes(cx, &d, dt, (RtPass)p),
               t = rt_fc_workspace_bytes(&d, dt, (RtPass)p);
        gws = s > gws ? s : gws, cws = t > cws ? t : cws;
    }
    void *G = dev(gws), *C = ws_host(cws), *OUT = dev(big * es), *DB = dev(d.hidden * es);
    void *out = malloc(big * es), *cpu = malloc(big * es), *cdb = malloc(d.hidden * es),
         *gdb = malloc(d.hidden * es);
    rt_fc_forward(&d, dt, x, w, b, cpu, C);
    rt_cuda_fc_forward(cx, &d, dt, X, W, B, OUT, G);
    down(out, OUT, yn * es);
    note(fwd, err_of(out, cpu, yn, dt));
    for (int acc = 0; acc < 2; acc++) {
        memcpy(cpu, x, xn * es);
        up(OUT, x, xn * es);
        rt_fc_backward_data(&d, dt, w, dy, cpu, acc, C);
        rt_cuda_fc_backward_data(cx, &d, dt, W, Y, OUT, acc, G);
        down(out, OUT, xn * es);
        note(bwd, err_of(out, cpu, xn, dt));
        memcpy(cpu, w, wn * es), memcpy(cdb, b, d.hidden * es);
        up(OUT, w, wn * es), up(DB, b, d.hidden * es);
        rt_fc_backward_weight(&d, dt, x, dy, cpu, cdb, acc, C);
        rt_cuda_fc_backward_weight(cx, &d, dt, X, Y, OUT, DB, acc, G);
        down(out, OUT, wn * es), down(gdb, DB, d.hidden * es);
        note(wgt, fmax(err_of(out, cpu, wn, dt), err_of(gdb, cdb, d.hidden, dt)));
    }
    cudaFree(X), cudaFree(W), cudaFree(Y), cudaFree(B), cudaFree(G), cudaFree(OUT), cudaFree(DB);
    free(x), free(w), free(dy), free(b), free(C), free(out), free(cpu), free(cdb), free(gdb);
}

/* pooling: custom kernels, bit for bit pool.c (tolerance 0) */
static void pool_case(RtPoolDims d, RtDType dt, Row *fwd, Row *bwd)
{
    rt_pool_dims_init(&d);
    RtPoolDims dl = d; /* the CUDA calls' dims (the CPU's stay NCHW) */
    dl.layout = ampc_conv_layout(dt) == AMPC_NHWC ? RT_LAYOUT_NHWC : RT_LAYOUT_NCHW;
    size_t es = rt_dtype_size(dt), S = prod(d.in, d.nsp), O = prod(d.out, d.nsp);
    size_t xn = (size_t)d.n * d.c * S, yn = (size_t)d.n * d.c * O;
    bool last = ampc_conv_layout(dt) == AMPC_NHWC;
    void *x = rnd(xn, dt), *dy = rnd(yn, dt), *dx = rnd(xn, dt);
    void *xl = last ? permute(x, d.n, d.c, S, es, true) : x;
    void *dyl = last ? permute(dy, d.n, d.c, O, es, true) : dy;
    void *dxl = last ? permute(dx, d.n, d.c, S, es, true) : dx;
    void *X = dev(xn * es), *DY = dev(yn * es), *OUT = dev(xn * es + yn * es);
    void *C = ws_host(rt_pool_workspace_bytes(&d, dt, RT_PASS_BACKWARD));
    void *WS =
        dev(rt_cuda_pool_workspace_bytes(cx, &dl, dt, RT_PASS_BACKWARD) + 1); /* max's argmax */
    void *cpu = malloc(xn * es + yn * es), *out = malloc(xn * es + yn * es);
    up(X, xl, xn * es), up(DY, dyl, yn * es);
    rt_pool_forward(&d, dt, x, cpu, C);
    rt_cuda_pool_forward(cx, &dl, dt, X, OUT, NULL);
    down(out, OUT, yn * es);
    void *o = last ? permute(out, d.n, O, d.c, es, true) : out;
    note(fwd, err_of(o, cpu, yn, dt));
    if (last)
        free(o);
    for (int acc = 0; acc < 2; acc++) {
        memcpy(cpu, dx, xn * es);
        up(OUT, dxl, xn * es);
        rt_pool_backward(&d, dt, x, dy, cpu, acc, C);
        rt_cuda_pool_backward(cx, &dl, dt, X, DY, OUT, acc, WS);
        down(out, OUT, xn * es);
        o = last ? permute(out, d.n, S, d.c, es, true) : out;
        note(bwd, err_of(o, cpu, xn, dt));
        if (last)
            free(o);
    }
    cudaFree(X), cudaFree(DY), cudaFree(OUT), cudaFree(WS);
    free(x), free(dy), free(dx), free(C), free(cpu), free(out);
    if (last)
        free(xl), free(dyl), free(dxl);
}

/* BatchNorm: custom kernels, bit for bit batchnorm.c in their order of
 * summation (RT_BN_ORDER_TILED; tolerance 0), and within the dtype's
 * tolerance of the CPU program's own order (rows `order`) */
static void bn_case(RtBnDims d, RtDType dt, Row *fwd, Row *bwd, Row *order)
{
    size_t n = (size_t)(d.outer * d.c * d.inner), es = rt_dtype_size(dt), C = (size_t)d.c;
    void *x = rnd(n, dt), *dy = rnd(n, dt), *dx = rnd(n, dt);
    float *gamma = rnd(C, RT_F32), *beta = rnd(C, RT_F32), *mm = rnd(C, RT_F32),
          *mv = rnd(C, RT_F32), *dg = rnd(C, RT_F32);
    for (size_t i = 0; i < C; i++)
        mv[i] = mv[i] * mv[i] + 0.5f;
    void *X = dev(n * es), *DY = dev(n * es), *OUT = dev(n * es);
    float *P = dev(C * 4 * 8); /* gamma, beta, mm, mv, save_mean, save_invstd, dgamma, dbeta */
    up(X, x, n * es), up(DY, dy, n * es);
    up(P, gamma, C * 4), up(P + C, beta, C * 4), up(P + 2 * C, mm, C * 4), up(P + 3 * C, mv, C * 4);
    void *cpu = malloc(n * es), *out = malloc(n * es), *own = malloc(n * es);
    float *cs = malloc(C * 4 * 4), *gs = malloc(C * 4 * 4);
    RtBnDims dcpu = d;
    d.order = RT_BN_ORDER_TILED;
    rt_batchnorm_forward_train(&dcpu, dt, x, gamma, beta, 1e-5f, false, own, cs, cs + C);
    for (int inf = 0; inf < 2; inf++) {
        if (inf) {
            rt_batchnorm_forward_inference(&d, dt, x, gamma, beta, mm, mv, 1e-5f, false, cpu, cs,
                                           cs + C);
            rt_cuda_batchnorm_forward_inference(cx, &d, dt, X, P, P + C, P + 2 * C, P + 3 * C,
                                                1e-5f, false, OUT, P + 4 * C, P + 5 * C);
        } else {
            rt_batchnorm_forward_train(&d, dt, x, gamma, beta, 1e-5f, false, cpu, cs, cs + C);
            rt_cuda_batchnorm_forward_train(cx, &d, dt, X, P, P + C, 1e-5f, false, OUT, P + 4 * C,
                                            P + 5 * C);
        }
        down(out, OUT, n * es), down(gs, P + 4 * C, C * 8);
        note(fwd, fmax(err_of(out, cpu, n, dt), err_of(gs, cs, 2 * C, RT_F32)));
        if (!inf)
            note(order, err_of(out, own, n, dt));
    }
    for (int glob = 0; glob < 2; glob++)
        for (int acc = 0; acc < 2; acc++) {
            memcpy(cpu, dx, n * es), memcpy(cs + 2 * C, dg, C * 4), memcpy(cs + 3 * C, dg, C * 4);
            up(OUT, dx, n * es), up(P + 6 * C, dg, C * 4), up(P + 7 * C, dg, C * 4);
            rt_batchnorm_backward(&d, dt, x, dy, gamma, cs, cs + C, false, glob, cpu, cs + 2 * C,
                                  cs + 3 * C, acc, acc);
            rt_cuda_batchnorm_backward(cx, &d, dt, X, DY, P, P + 4 * C, P + 5 * C, false, glob, OUT,
                                       P + 6 * C, P + 7 * C, acc, acc);
            down(out, OUT, n * es), down(gs + 2 * C, P + 6 * C, C * 8);
            note(bwd, fmax(err_of(out, cpu, n, dt), err_of(gs + 2 * C, cs + 2 * C, 2 * C, RT_F32)));
        }
    free(own);
    cudaFree(X), cudaFree(DY), cudaFree(OUT), cudaFree(P);
    free(x), free(dy), free(dx), free(gamma), free(beta), free(mm), free(mv), free(dg);
    free(cpu), free(out), free(cs), free(gs);
}

static void report_tol(const Row *r, RtDType dt, double t)
{
    bool ok = r->worst <= t;
    printf("%-22s %-9s %5d %12.3e %10.1e  %s\n", r->op, rt_dtype_name(dt), r->cases, r->worst, t,
           ok ? "ok" : "FAIL");
    failures += !ok;
}

static void report(const Row *r, RtDType dt) { report_tol(r, dt, tol(dt)); }

int main(void)
{
    /* the CPU twins' generic path: the bit-for-bit reference of pooling and
     * BatchNorm whatever compiler built libampcrt.a (test_cuda_layout_emu.c) */
    setenv("AMPC_RT_SIMD", "0", 1);
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        fprintf(stderr, "cuda_dnn_gpu: no GPU: cudaGetDeviceCount: %s\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 3;
    }
    AMPC_CHECK(AMPC_API_CUDA, cudaStreamCreate(&stream));
    const char *at = getenv("AMPC_CUDNN_AUTOTUNE"), *mode = getenv("AMPC_CUDNN_FP32");
    if (mode && !ampc_fp32_mode_parse(mode, &fp32_mode)) {
        fprintf(stderr, "cuda_dnn_gpu: AMPC_CUDNN_FP32='%s' is not exact, tf32 or fast\n", mode);
        return 2;
    }
    const char *tf32 = getenv("NVIDIA_TF32_OVERRIDE");
    printf("cuda_dnn_gpu: --cudnn-fp32=%s, autotune %s, NVIDIA_TF32_OVERRIDE=%s\n",
           ampc_fp32_mode_name(fp32_mode), at && at[0] == '1' ? "on" : "off",
           tf32 ? tf32 : "unset");
    RtCudaConfig cfg = {.stream = stream,
                        .workspace_limit = (size_t)256 << 20,
                        .autotune = at && at[0] == '1',
                        .fp32 = fp32_mode};
    char err[4096];
    cx = rt_cuda_open(&cfg, err, sizeof err);
    if (!cx) {
        fprintf(stderr, "cuda_dnn_gpu: %s\n", err);
        return 1;
    }
    static const RtConvDims convs[] = {
        /* ResNet's stem: RGB (padded to 4 in NHWC), 7x7 stride 2 */
        {.n = 4,
         .c = 3,
         .k = 16,
         .groups = 1,
         .nsp = 2,
         .in = {32, 32},
         .kernel = {7, 7},
         .stride = {2, 2},
         .pad = {3, 3},
         .dilate = {1, 1}},
        /* a 3x3 block conv and a 1x1 projection with stride 2 */
        {.n = 8,
         .c = 32,
         .k = 32,
         .groups = 1,
         .nsp = 2,
         .in = {14, 14},
         .kernel = {3, 3},
         .stride = {1, 1},
         .pad = {1, 1},
         .dilate = {1, 1}},
        {.n = 8,
         .c = 32,
         .k = 64,
         .groups = 1,
         .nsp = 2,
         .in = {14, 14},
         .kernel = {1, 1},
         .stride = {2, 2},
         .pad = {0, 0},
         .dilate = {1, 1}},
        /* grouped and dilated; 5 channels (padded to 8); 1-D; 3-D */
        {.n = 2,
         .c = 16,
         .k = 16,
         .groups = 4,
         .nsp = 2,
         .in = {9, 11},
         .kernel = {3, 3},
         .stride = {1, 2},
         .pad = {2, 1},
         .dilate = {2, 1}},
        {.n = 3,
         .c = 5,
         .k = 8,
         .groups = 1,
         .nsp = 2,
         .in = {10, 10},
         .kernel = {3, 3},
         .stride = {1, 1},
         .pad = {1, 1},
         .dilate = {1, 1}},
        {.n = 4,
         .c = 8,
         .k = 16,
         .groups = 1,
         .nsp = 1,
         .in = {50},
         .kernel = {5},
         .stride = {2},
         .pad = {2},
         .dilate = {1}},
        {.n = 2,
         .c = 8,
         .k = 8,
         .groups = 1,
         .nsp = 3,
         .in = {6, 8, 8},
         .kernel = {3, 3, 3},
         .stride = {1, 1, 1},
         .pad = {1, 1, 1},
         .dilate = {1, 1, 1}},
    };
    static const RtFcDims fcs[] = {{.n = 32, .in = 100, .hidden = 10},
                                   {.n = 7, .in = 2048, .hidden = 1000},
                                   {.n = 64, .in = 512, .hidden = 512},
                                   {.n = 1, .in = 3, .hidden = 1}};
    static const RtDType dts[] = {RT_F32, RT_F16, RT_BF16};
    printf("%-22s %-9s %5s %12s %10s\n", "op", "dtype", "cases", "max rel err", "tolerance");
    for (int t = 0; t < 3; t++) {
        Row f = {"conv forward", 0, 0}, b = {"conv backward-data", 0, 0},
            w = {"conv backward-filter", 0, 0};
        Row st[4] = {{"conv+stats forward", 0, 0},
                     {"conv+stats sums", 0, 0},
                     {"bn from sums vs twin", 0, 0},
                     {"bn from sums vs bn", 0, 0}};
        for (size_t i = 0; i < sizeof convs / sizeof *convs; i++)
            conv_case(convs[i], dts[t], &f, &b, &w, st);
        report(&f, dts[t]), report(&b, dts[t]), report(&w, dts[t]);
        if (st[0].cases) /* off by default: only where cuDNN had an engine */
            report(&st[0], dts[t]), report_tol(&st[1], dts[t], 1e-4), report_tol(&st[2], dts[t], 0),
                report(&st[3], dts[t]);
        Row ff = {"fc forward", 0, 0}, fb = {"fc backward-data", 0, 0},
            fw = {"fc backward-weight", 0, 0};
        for (size_t i = 0; i < sizeof fcs / sizeof *fcs; i++)
            fc_case(fcs[i], dts[t], &ff, &fb, &fw);
        report(&ff, dts[t]), report(&fb, dts[t]), report(&fw, dts[t]);
        Row pf = {"pool forward", 0, 0}, pb = {"pool backward", 0, 0};
        for (int ty = 0; ty < 3; ty++) {
            RtPoolDims p3 = {.n = 8,
                             .c = 64,
                             .nsp = 2,
                             .in = {56, 56},
                             .kernel = {3, 3},
                             .stride = {2, 2},
                             .pad = {1, 1},
                             .type = (RtPoolType)ty};
            RtPoolDims gl = {
                .n = 8, .c = 256, .nsp = 2, .in = {7, 7}, .type = (RtPoolType)ty, .global = true};
            RtPoolDims full = {.n = 2,
                               .c = 8,
                               .nsp = 2,
                               .in = {13, 11},
                               .kernel = {3, 2},
                               .stride = {2, 3},
                               .pad = {1, 0},
                               .type = (RtPoolType)ty,
                               .full_convention = true,
                               .count_include_pad = ty == 1};
            pool_case(p3, dts[t], &pf, &pb), pool_case(gl, dts[t], &pf, &pb);
            pool_case(full, dts[t], &pf, &pb);
        }
        report_tol(&pf, dts[t], 0), report_tol(&pb, dts[t], 0);
        Row bf = {"batchnorm forward", 0, 0}, bb = {"batchnorm backward", 0, 0},
            bo = {"batchnorm vs CPU order", 0, 0};
        bn_case((RtBnDims){.outer = 8, .c = 64, .inner = 56 * 56}, dts[t], &bf, &bb,
                &bo); /* NCHW */
        bn_case((RtBnDims){.outer = 8 * 49, .c = 256, .inner = 1}, dts[t], &bf, &bb,
                &bo); /* NHWC */
        bn_case((RtBnDims){.outer = 3, .c = 5, .inner = 1037}, dts[t], &bf, &bb, &bo);
        report_tol(&bf, dts[t], 0), report_tol(&bb, dts[t], 0), report(&bo, dts[t]);
    }
    rt_cuda_close(cx);
    printf("cuda_dnn_gpu: %s\n", failures ? "FAILED" : "all within tolerance");
    return failures ? 1 : 0;
}
