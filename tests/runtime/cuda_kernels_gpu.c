/*
 * cuda_kernels_gpu.c - the GPU test of the custom kernels (make gpu-check,
 * part (a) for the kernels of runtime/cuda/kernels.cuh): each kernel run on
 * the device against its CPU twin in libampcrt.a, on the cases of the
 * emulation test (tests/runtime/test_cuda_emu.c): every dtype, odd sizes
 * and the grid-stride edges, subnormals, -0, values past the fp16 range,
 * inf and NaN.  Bit for bit, with NaN compared as NaN (the GPU returns the
 * canonical NaN where the host keeps a payload).  Prints one table row per
 * kernel: cases run, elements compared, mismatches.
 *
 * Then the other rt.h twins (runtime/cuda/'s family headers, math.cuh and the
 * fused BatchNorm + relu), through their rt_cuda_* entry points, against
 * rt_* on the same inputs in fp32, fp16 and bf16: bit for bit (tolerance
 * 0) where the kernel calls no libm, else within a stated tolerance on the
 * relative error |gpu - cpu| / max(|cpu|, 2^-16): CUDA's expf, logf, tanhf,
 * log1pf, expm1f and double log differ from glibc's by an ulp or two, and
 * a 16-bit result can then round to the neighbouring value.  Tolerances:
 * 1e-5 in fp32 (about 80 fp32 ulps), 2e-3 in fp16 and 1.6e-2 in bf16 (two
 * ulps of the dtype); non-finite values must be the same class (NaN as
 * NaN, inf with its sign).  Each row prints its largest relative error
 * and "bits" or "libm" (the tolerances above).
 *
 * Exit 0 when all agree, 1 on a mismatch, 3 without a usable GPU (the
 * message names the CUDA call and its error).  make cuda-check builds and
 * links it everywhere (so it cannot rot); it runs only where a GPU is.
 */
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/ampc_cuda.h"
#include "cuda/rt_cuda.h"
#include "kernels/half.h"
#include "rt.h"
#include "train.h"
#include "lossscale.h"

/* the context every rt_cuda_* call takes: the default stream, no library */
static RtCudaCtx cx;

#define CHECK(call)                                                                           \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            printf("cuda_kernels_gpu: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,            \
                   cudaGetErrorString(e_));                                                   \
            exit(e_ == cudaErrorNoDevice || e_ == cudaErrorInsufficientDriver ? 3 : 1);       \
        }                                                                                     \
    } while (0)

static const size_t sizes[] = {1, 7, 255, 256, 257, 1000, 3001, 1048577, 2 * 1048576 + 5};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };

typedef struct {
    const char *name;
    long cases, elems, bad;
    double maxrel, tol; /* the other ops: largest relative error, its bound (0: bits) */
} Row;
static Row rows[96];
static int nrows;

static Row *row(const char *name)
{
    for (int i = 0; i < nrows; i++)
        if (!strcmp(rows[i].name, name))
            return &rows[i];
    rows[nrows].name = name;
    return &rows[nrows++];
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static float value(void)
{
    unsigned r = (unsigned)(next() % 100);
    float sign = (next() & 1) ? -1.0f : 1.0f, u = (float)(next() >> 40) / 16777216.0f;
    if (r < 5) {
        uint32_t b = (uint32_t)(next() & 0x807fffffu);
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    if (r < 10)
        return sign * u * 6.0e-5f;
    if (r < 13)
        return sign * (65504.0f + u * 100.0f);
    if (r < 15)
        return -0.0f;
    if (r < 17)
        return sign * INFINITY;
    if (r < 19)
        return NAN;
    return sign * u * 8.0f;
}

static size_t es(int dt) { return dt == RT_F32 ? 4 : 2; }

static void fill(void *p, int dt, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = value();
        if (dt == RT_F32)
            ((float *)p)[i] = v;
        else if (dt == RT_F16)
            ((uint16_t *)p)[i] = ampc_float_to_half(v);
        else
            ((uint16_t *)p)[i] = ampc_float_to_bf16(v);
    }
}

static int isnan_at(const void *p, size_t i, int dt)
{
    if (dt == RT_F32) {
        float v = ((const float *)p)[i];
        return v != v;
    }
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == RT_F16 ? ampc_half_isnan(h) : ampc_bf16_isnan(h);
}

/* compares the device buffer d with the host result want */
static void compare(const char *name, const void *d, const void *want, size_t n, int dt)
{
    static unsigned char *got;
    if (!got && !(got = malloc(2 * 1048576 * 4 + 64))) {
        printf("cuda_kernels_gpu: out of memory\n");
        exit(1);
    }
    CHECK(cudaMemcpy(got, d, n * es(dt), cudaMemcpyDeviceToHost));
    Row *r = row(name);
    r->cases++;
    r->elems += (long)n;
    for (size_t i = 0; i < n; i++)
        if (memcmp(got + i * es(dt), (const char *)want + i * es(dt), es(dt)) &&
            !(isnan_at(got, i, dt) && isnan_at(want, i, dt))) {
            if (r->bad < 3)
                printf("  %s: dtype %d, n %zu, element %zu differs\n", name, dt, n, i);
            r->bad++;
        }
}

/* the GPU's result d against the CPU's want within tol (0: bit for bit,
 * NaN as NaN); the largest relative error is kept */
static void compare_tol(const char *name, const void *d, const void *want, size_t n, int dt,
                        double tol)
{
    unsigned char *got = malloc(n * es(dt) + 4);
    float *gf = malloc(n * 4 + 4), *wf = malloc(n * 4 + 4);
    if (!got || !gf || !wf) {
        printf("cuda_kernels_gpu: out of memory\n");
        exit(1);
    }
    CHECK(cudaMemcpy(got, d, n * es(dt), cudaMemcpyDeviceToHost));
    rt_to_f32(gf, got, n, (RtDType)dt);
    rt_to_f32(wf, want, n, (RtDType)dt);
    Row *r = row(name);
    r->cases++;
    r->elems += (long)n;
    r->tol = tol;
    for (size_t i = 0; i < n; i++) {
        float g = gf[i], w = wf[i];
        double rel;
        if (!memcmp(got + i * es(dt), (const char *)want + i * es(dt), es(dt)) ||
            (g != g && w != w))
            continue;
        if (!isfinite(g) || !isfinite(w))
            rel = INFINITY;
        else
            rel = fabs((double)g - (double)w) / fmax(fabs((double)w), 0x1p-16);
        if (rel > r->maxrel)
            r->maxrel = rel;
        if (tol == 0.0 || rel > tol) {
            if (r->bad < 3)
                printf("  %s: dtype %d, n %zu, element %zu: %a vs %a (CPU)\n", name, dt, n, i,
                       (double)g, (double)w);
            r->bad++;
        }
    }
    free(got), free(gf), free(wf);
}

static void *dev(const void *h, size_t bytes)
{
    void *d;
    CHECK(cudaMalloc(&d, bytes ? bytes : 4));
    if (h && bytes)
        CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

#define RUN(call) CHECK((cudaError_t)(call))

static void other_ops(void);

int main(void)
{
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    size_t big = sizes[NSIZES - 1];
    float *a = malloc(big * 4), *b = malloc(big * 4), *g = malloc(big * 4), *y = malloc(big * 4),
          *y2 = malloc(big * 4);
    if (!a || !b || !g || !y || !y2) {
        printf("cuda_kernels_gpu: out of memory\n");
        return 1;
    }
    for (int k = 0; k < NSIZES; k++)
        for (int dt = 0; dt < 3; dt++) {
            size_t n = sizes[k], bytes = n * es(dt);
            fill(a, dt, n), fill(b, dt, n), fill(g, dt, n), fill(y, dt, n);
            void *da = dev(a, bytes), *db = dev(b, bytes), *dg = dev(g, bytes);
            void *dy = dev(NULL, big * 4), *dz = dev(NULL, big * 4);
            for (int to = 0; to < 3; to++)
                for (int acc = 0; acc < 2; acc++) {
                    fill(y2, to, n);
                    CHECK(cudaMemcpy(dy, y2, n * es(to), cudaMemcpyHostToDevice));
                    if (acc)
                        rt_cast_backward(n, (RtDType)dt, a, (RtDType)to, y2, true);
                    else
                        rt_cast_forward(n, (RtDType)dt, a, (RtDType)to, y2);
                    RUN(ampc_cu_cast(NULL, n, dt, da, to, dy, acc));
                    compare("cast", dy, y2, n, to);
                }
            for (int op = 0; op < 3; op++) {
                rt_elemwise_forward((RtBinOp)op, n, (RtDType)dt, a, b, y);
                RUN(ampc_cu_binary(NULL, op, n, dt, da, db, dy));
                compare("binary", dy, y, n, dt);
                fill(y, dt, n), fill(y2, dt, n);
                CHECK(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
                CHECK(cudaMemcpy(dz, y2, bytes, cudaMemcpyHostToDevice));
                rt_elemwise_backward((RtBinOp)op, n, (RtDType)dt, g, a, b, y, y2, op != 1, true);
                RUN(ampc_cu_binary_backward(NULL, op, n, dt, dg, da, db, dy, dz, op != 1, 1));
                compare("binary_backward", dy, y, n, dt);
                compare("binary_backward", dz, y2, n, dt);
            }
            for (int op = 0; op < 6; op++) {
                float s = op == 4 ? 0.75f : op == 5 ? -3.0f : 1e-40f;
                rt_scalar_forward((RtScalarOp)op, n, (RtDType)dt, a, s, y);
                RUN(ampc_cu_scalar(NULL, op, n, dt, da, s, dy));
                compare("scalar", dy, y, n, dt);
                fill(y, dt, n);
                CHECK(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
                rt_scalar_backward((RtScalarOp)op, n, (RtDType)dt, a, s, g, y, true);
                RUN(ampc_cu_scalar_backward(NULL, op, n, dt, da, s, dg, dy, 1));
                compare("scalar_backward", dy, y, n, dt);
            }
            rt_add_relu_forward(n, (RtDType)dt, a, b, y);
            RUN(ampc_cu_add_relu(NULL, n, dt, da, db, dy));
            compare("add_relu", dy, y, n, dt);
            rt_activation_forward(RT_ACT_RELU, n, (RtDType)dt, a, y);
            RUN(ampc_cu_relu(NULL, n, dt, da, dy));
            compare("relu", dy, y, n, dt);
            fill(y, dt, n);
            CHECK(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
            rt_activation_backward(RT_ACT_RELU, n, (RtDType)dt, NULL, a, g, y, true);
            RUN(ampc_cu_relu_backward(NULL, n, dt, da, dg, dy, 1));
            compare("relu_backward", dy, y, n, dt);
            /* the finite check: its flag against rt_all_finite */
            int32_t *flag = dev(NULL, 4);
            RUN(ampc_cu_set_flag(NULL, flag, 0));
            RUN(ampc_cu_finite(NULL, da, n, dt, flag));
            int want = !rt_all_finite(a, n, (RtDType)dt);
            compare("finite", flag, &want, 1, RT_F32);
            CHECK(cudaFree(flag));
            CHECK(cudaFree(da));
            CHECK(cudaFree(db));
            CHECK(cudaFree(dg));
            CHECK(cudaFree(dy));
            CHECK(cudaFree(dz));
        }
    /* the loss scale: 1000 steps of random flags, the state after each */
    {
        RtLossScaleConfig cfg = {RT_LS_DYNAMIC, 65536.0f, 2.0f, 0.5f, 3, 0.0f, 16777216.0f};
        RtLossScaler ls;
        rt_loss_scaler_init(&ls, &cfg, "float16");
        AmpcLossScale *ds = dev(&ls.s, sizeof ls.s);
        int32_t *flag = dev(NULL, 4);
        for (int step = 0; step < 1000; step++) {
            int32_t f = next() % 100 < 20;
            CHECK(cudaMemcpy(flag, &f, 4, cudaMemcpyHostToDevice));
            RUN(ampc_cu_loss_scale(NULL, ds, flag, ls.rule, NULL));
            rt_loss_scaler_update(&ls, !f, NULL, NULL);
            compare("loss_scale", ds, &ls.s, 2, RT_F32); /* scale and tracker, as 2 words */
        }
        CHECK(cudaFree(ds));
        CHECK(cudaFree(flag));
    }
    other_ops();
    CHECK(cudaDeviceSynchronize());
    long bad = 0;
    printf("%-24s %8s %12s %10s %12s %10s\n", "kernel", "cases", "elements", "mismatches",
           "max rel err", "tolerance");
    for (int i = 0; i < nrows; i++) {
        printf("%-24s %8ld %12ld %10ld %12.3g %10s\n", rows[i].name, rows[i].cases,
               rows[i].elems, rows[i].bad, rows[i].maxrel,
               rows[i].tol > 0 ? "libm" : "bits");
        bad += rows[i].bad;
    }
    printf("cuda_kernels_gpu: %s\n", bad ? "FAILED"
                                         : "every kernel equals its CPU twin (bit for bit, or "
                                           "within its tolerance where it calls libm)");
    free(a), free(b), free(g), free(y), free(y2);
    return bad ? 1 : 0;
}

/* ---- the other rt.h twins (the family headers, math.cuh, BatchNorm + relu) --------------- */

static double libm_tol(int dt) { return dt == RT_F32 ? 1e-5 : dt == RT_F16 ? 2e-3 : 1.6e-2; }

/* n random elements of dt in host memory and a device copy */
static void *hrand(size_t n, int dt, bool specials)
{
    void *h = malloc(n * es(dt) + 4);
    float *f = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++)
        f[i] = specials ? value() : ((float)(next() >> 40) / 16777216.0f * 2.0f - 1.0f) * 8.0f;
    rt_from_f32(h, f, n, (RtDType)dt);
    free(f);
    return h;
}

static void *hdup(const void *h, size_t bytes)
{
    void *d = malloc(bytes + 4);
    memcpy(d, h, bytes);
    return d;
}

static void other_elementwise(size_t n, int dt)
{
    size_t b = n * es(dt);
    RtDType t = (RtDType)dt;
    void *x = hrand(n, dt, true), *dy = hrand(n, dt, true), *y = hrand(n, dt, false);
    void *o = hrand(n, dt, false);
    void *X = dev(x, b), *DY = dev(dy, b), *Y = dev(NULL, b), *O = dev(NULL, b);
    static const char *act[5] = {"act relu", "act sigmoid", "act tanh", "act softrelu",
                                 "act softsign"};
    static const char *actb[5] = {"act relu bwd", "act sigmoid bwd", "act tanh bwd",
                                  "act softrelu bwd", "act softsign bwd"};
    for (int a = 0; a < 5; a++) {
        rt_activation_forward((RtAct)a, n, t, x, y);
        rt_cuda_activation_forward(&cx, (RtAct)a, n, t, X, O);
        compare_tol(act[a], O, y, n, dt, a == 0 || a == 4 ? 0.0 : libm_tol(dt));
        CHECK(cudaMemcpy(Y, y, b, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(O, o, b, cudaMemcpyHostToDevice));
        void *w = hdup(o, b);
        rt_activation_backward((RtAct)a, n, t, x, y, dy, w, true);
        rt_cuda_activation_backward(&cx, (RtAct)a, n, t, X, Y, DY, O, true);
        compare_tol(actb[a], O, w, n, dt, a == 3 ? libm_tol(dt) : 0.0);
        free(w);
    }
#define UNARY_NAME(N, n) #n,
    static const char *un[] = {AMPC_UNARY_LIST(UNARY_NAME)};
#undef UNARY_NAME
    for (int u = 0; u < RT_UNARY_COUNT; u++) {
        /* exp, log, sqrt as before; the other unary math through libm on both sides */
        char what[64];
        rt_unary_forward((RtUnaryOp)u, n, t, x, y);
        rt_cuda_unary_forward(&cx, (RtUnaryOp)u, n, t, X, O);
        compare_tol(un[u], O, y, n, dt, u == RT_UNARY_SQRT ? 0.0 : libm_tol(dt));
        CHECK(cudaMemcpy(Y, y, b, cudaMemcpyHostToDevice));
        rt_unary_backward((RtUnaryOp)u, n, t, x, y, dy, o, false);
        rt_cuda_unary_backward(&cx, (RtUnaryOp)u, n, t, X, Y, DY, O, false);
        snprintf(what, sizeof what, "%s bwd", un[u]);
        compare_tol(what, O, o, n, dt, u <= RT_UNARY_SQRT ? 0.0 : libm_tol(dt));
    }
    rt_clip_forward(n, t, x, -2.5f, 3.0f, y);
    rt_cuda_clip_forward(&cx, n, t, X, -2.5f, 3.0f, O);
    compare_tol("clip", O, y, n, dt, 0.0);
    rt_clip_backward(n, t, x, -2.5f, 3.0f, dy, y, false);
    rt_cuda_clip_backward(&cx, n, t, X, -2.5f, 3.0f, DY, O, false);
    compare_tol("clip bwd", O, y, n, dt, 0.0);
    rt_dropout_forward(n, t, x, 0.3f, 42, 7, 11, y);
    uint64_t step7 = 7, *STEP = dev(&step7, sizeof step7); /* the step state's number */
    rt_cuda_dropout_forward(&cx, n, t, X, 0.3f, 42, STEP, 11, O);
    compare_tol("dropout", O, y, n, dt, 0.0);
    rt_dropout_backward(n, t, dy, 0.3f, 42, 7, 11, y, false);
    rt_cuda_dropout_backward(&cx, n, t, DY, 0.3f, 42, STEP, 11, O, false);
    CHECK(cudaFree(STEP));
    compare_tol("dropout bwd", O, y, n, dt, 0.0);
    /* LeakyReLU over [n/7 (at least 1), 7, ...]: outer x 7 channels x 1 */
    int64_t c = 7, outer = (int64_t)n / 7;
    if (outer > 0) {
        size_t m = (size_t)(outer * c);
        void *gam = hrand((size_t)c, dt, false), *GAM = dev(gam, (size_t)c * es(dt));
        void *dg = hrand((size_t)c, dt, false), *DG = dev(NULL, (size_t)c * es(dt));
        static const char *lr[4] = {"leaky", "elu", "selu", "prelu"},
                          *lrb[4] = {"leaky bwd", "elu bwd", "selu bwd", "prelu bwd"};
        for (int k = 0; k < 4; k++) {
            double tol = k == 1 || k == 2 ? libm_tol(dt) : 0.0;
            rt_leaky_relu_forward((RtLeaky)k, outer, c, 1, t, x, gam, 0.25f, y);
            rt_cuda_leaky_relu_forward(&cx, (RtLeaky)k, outer, c, 1, t, X, GAM, 0.25f, O);
            compare_tol(lr[k], O, y, m, dt, tol);
            rt_leaky_relu_backward((RtLeaky)k, outer, c, 1, t, x, gam, 0.25f, dy, y, dg, false,
                                   false);
            rt_cuda_leaky_relu_backward(&cx, (RtLeaky)k, outer, c, 1, t, X, GAM, 0.25f, DY, O, DG,
                                        false, false);
            compare_tol(lrb[k], O, y, m, dt, tol);
            if (k == 3)
                compare_tol("prelu dgamma", DG, dg, (size_t)c, dt, 0.0);
        }
        CHECK(cudaFree(GAM)); CHECK(cudaFree(DG));
        free(gam), free(dg);
    }
    CHECK(cudaFree(X)); CHECK(cudaFree(DY)); CHECK(cudaFree(Y)); CHECK(cudaFree(O));
    free(x), free(dy), free(y), free(o);
}

static void other_shaped(int dt)
{
    RtDType t = (RtDType)dt;
    /* broadcast: [64, 1, 300] op [64, 33, 1] and the reductions of a bias gradient */
    const int64_t sa[] = {64, 1, 300}, sb[] = {64, 33, 1};
    RtBcastDims d;
    rt_broadcast_dims_init(&d, 3, sa, 3, sb);
    size_t na = 64 * 300, nb = 64 * 33, no = 64 * 33 * 300;
    void *a = hrand(na, dt, false), *bb = hrand(nb, dt, false), *dy = hrand(no, dt, false);
    void *y = hrand(no, dt, false), *da = hrand(na, dt, false), *db = hrand(nb, dt, false);
    void *A = dev(a, na * es(dt)), *B = dev(bb, nb * es(dt)), *DY = dev(dy, no * es(dt));
    void *O = dev(NULL, no * es(dt)), *DA = dev(NULL, na * es(dt)), *DB = dev(NULL, nb * es(dt));
    void *ws = malloc(rt_broadcast_workspace_bytes(&d, t, RT_PASS_BACKWARD) + 64);
    for (int op = 0; op < 3; op++) {
        rt_broadcast_forward((RtBinOp)op, &d, t, a, bb, y);
        rt_cuda_broadcast_forward(&cx, (RtBinOp)op, &d, t, A, B, O);
        compare_tol("broadcast", O, y, no, dt, 0.0);
        rt_broadcast_backward((RtBinOp)op, &d, t, dy, a, bb, da, db, false, false, ws);
        rt_cuda_broadcast_backward(&cx, (RtBinOp)op, &d, t, DY, A, B, DA, DB, false, false, NULL);
        compare_tol("broadcast bwd", DA, da, na, dt, 0.0);
        compare_tol("broadcast bwd", DB, db, nb, dt, 0.0);
    }
    RtReduceDims r = {3, {64, 33, 300}, {true, false, true}};
    void *rws = malloc(rt_reduce_workspace_bytes(&r, t, RT_PASS_FORWARD) + 64);
    rt_mean_forward(&r, t, dy, db, rws);
    rt_cuda_mean_forward(&cx, &r, t, DY, DB, NULL);
    /* 19,200 terms an output: a block each (elemwise.cuh), another order of
     * the double sums than the CPU's, so within the rounding of the dtype
     * (test_cuda_ops_emu holds the block order to its twin bit for bit) */
    compare_tol("mean", DB, db, 33, dt, libm_tol(dt));
    rt_sum_backward(&r, t, db, y, false);
    rt_cuda_sum_backward(&cx, &r, t, DB, O, false);
    compare_tol("sum bwd", O, y, no, dt, 0.0);
    /* softmax over the middle axis of [64, 33, 300] and rows of 1000 */
    for (int lg = 0; lg < 2; lg++) {
        (lg ? rt_log_softmax_forward : rt_softmax_forward)(64, 33, 300, t, dy, y);
        (lg ? rt_cuda_log_softmax_forward : rt_cuda_softmax_forward)(&cx, 64, 33, 300, t, DY, O);
        compare_tol(lg ? "log_softmax" : "softmax", O, y, no, dt, libm_tol(dt));
        CHECK(cudaMemcpy(O, y, no * es(dt), cudaMemcpyHostToDevice));
        void *dx = hrand(no, dt, false), *DX = dev(NULL, no * es(dt));
        (lg ? rt_log_softmax_backward : rt_softmax_backward)(64, 33, 300, t, y, dy, dx, false);
        (lg ? rt_cuda_log_softmax_backward : rt_cuda_softmax_backward)(&cx, 64, 33, 300, t, O, DY,
                                                                       DX, false);
        compare_tol(lg ? "log_softmax bwd" : "softmax bwd", DX, dx, no, dt,
                    lg ? libm_tol(dt) : 0.0);
        CHECK(cudaFree(DX));
        free(dx);
    }
    /* the loss head: 256 rows of 1000 classes, logits in dt, prob in dt */
    int64_t n = 256, k = 1000;
    size_t nk = (size_t)(n * k);
    float *lab = malloc((size_t)n * 4), scale = 4096.0f;
    for (int64_t i = 0; i < n; i++)
        lab[i] = i % 9 == 0 ? -1.0f : (float)(next() % 1000);
    RtStepState st = {.scale = scale};
    float *LAB = dev(lab, (size_t)n * 4);
    RtStepState *STEP = dev(&st, sizeof st);
    void *xl = hrand(nk, dt, false), *XL = dev(xl, nk * es(dt));
    void *prob = hrand(nk, dt, false), *PROB = dev(NULL, nk * es(dt));
    rt_softmax_output_forward(n, k, t, xl, t, prob);
    rt_cuda_softmax_output_forward(&cx, n, k, t, XL, t, PROB);
    compare_tol("softmax_output", PROB, prob, nk, dt, libm_tol(dt));
    CHECK(cudaMemcpy(PROB, prob, nk * es(dt), cudaMemcpyHostToDevice));
    RtSmoParams p = {1.0f, 0.1f, true, -1.0f, RT_SMO_NORM_VALID};
    void *g = hrand(nk, dt, false), *G = dev(NULL, nk * es(dt));
    rt_softmax_output_backward(n, k, t, prob, lab, &p, &st, t, g, false);
    rt_cuda_softmax_output_backward(&cx, n, k, t, PROB, LAB, &p, STEP, t, G, false);
    compare_tol("softmax_output bwd", G, g, nk, dt, 0.0);
    CHECK(cudaFree(LAB));
    CHECK(cudaFree(STEP));
    CHECK(cudaFree(XL));
    CHECK(cudaFree(PROB));
    CHECK(cudaFree(G));
    free(lab), free(xl), free(prob), free(g);
    CHECK(cudaFree(A)); CHECK(cudaFree(B)); CHECK(cudaFree(DY)); CHECK(cudaFree(O));
    CHECK(cudaFree(DA)); CHECK(cudaFree(DB));
    free(a), free(bb), free(dy), free(y), free(da), free(db), free(ws), free(rws);
}

/* Concat, the layout conversion, BatchNorm + relu and + add + relu, the moving statistics */
static void other_layout_bn(int dt)
{
    RtDType t = (RtDType)dt;
    size_t e = es(dt);
    int64_t len[2] = {3, 5}, outer = 32, inner = 49;
    size_t n0 = (size_t)(outer * 3 * inner), n1 = (size_t)(outer * 5 * inner), n = n0 + n1;
    void *x0 = hrand(n0, dt, false), *x1 = hrand(n1, dt, false), *y = hrand(n, dt, false);
    void *X0 = dev(x0, n0 * e), *X1 = dev(x1, n1 * e), *Y = dev(NULL, n * e);
    const void *xs[2] = {x0, x1}, *XS[2] = {X0, X1};
    rt_concat_forward(2, xs, len, outer, inner, t, y);
    rt_cuda_concat_forward(&cx, 2, XS, len, outer, inner, t, Y);
    compare_tol("concat", Y, y, n, dt, 0.0);
    void *ds = hrand(n1, dt, false), *DS = dev(NULL, n1 * e);
    void *parts[2] = {NULL, ds}, *PARTS[2] = {NULL, DS};
    rt_concat_backward(2, y, len, outer, inner, t, parts, NULL);
    rt_cuda_concat_backward(&cx, 2, Y, len, outer, inner, t, PARTS, NULL);
    compare_tol("slice", DS, ds, n1, dt, 0.0);
    void *nhwc = hrand(n, dt, false), *NHWC = dev(NULL, n * e);
    rt_layout_convert(outer, 8, inner, t, y, nhwc, RT_LAYOUT_NHWC);
    rt_cuda_layout_convert(&cx, outer, 8, inner, t, Y, NHWC, RT_LAYOUT_NHWC);
    compare_tol("layout_convert", NHWC, nhwc, n, dt, 0.0);
    /* BatchNorm + relu, and + add + relu, on [32, 8, 49] and NHWC's [1568, 8, 1]
     * (8 channels a 16-byte load): the two-level sums against the CPU twin
     * in their order (RT_BN_ORDER_TILED), bit for bit; the masked backward,
     * and the add's with the relu's gradient written */
    size_t cb = 8 * sizeof(float);
    float gam[8], bet[8], sm[8], si[8], dgam[8], dbet[8], mm[8], mv[8];
    for (int i = 0; i < 8; i++)
        gam[i] = 0.5f + (float)i / 8, bet[i] = (float)i / 4 - 1, mm[i] = 0.1f * (float)i,
        mv[i] = 1.0f + (float)i;
    float *P = dev(NULL, 12 * cb);
    void *WS = dev(NULL, ampc_batchnorm_ws_max(8));
    CHECK(cudaMemcpy(P, gam, cb, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(P + 8, bet, cb, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(P + 32, mm, cb, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(P + 40, mv, cb, cudaMemcpyHostToDevice));
    void *dy = hrand(n, dt, false), *DY = dev(dy, n * e), *dx = hrand(n, dt, false);
    void *dsc = hrand(n, dt, false), *DX = dev(NULL, n * e), *DSC = dev(NULL, n * e);
    for (int k = 0; k < 4; k++) {
        int add = k & 1, nhwc_view = k >> 1;
        RtBnDims bd = {.outer = nhwc_view ? outer * inner : outer,
                       .c = 8,
                       .inner = nhwc_view ? 1 : inner,
                       .order = RT_BN_ORDER_TILED};
        const char *what = add ? "batchnorm_add_relu" : "batchnorm_relu";
        if (add)
            rt_batchnorm_add_relu_forward_train(&bd, t, y, y, gam, bet, 1e-5f, false, nhwc, sm, si);
        else
            rt_batchnorm_relu_forward_train(&bd, t, y, gam, bet, 1e-5f, false, nhwc, sm, si);
        RUN(ampc_cu_batchnorm_forward_train(NULL, (size_t)bd.outer, 8, (size_t)bd.inner, dt, Y,
                                            add ? Y : NULL, 1, P, P + 8, 1e-5f, 0, NHWC, P + 16,
                                            P + 24, WS));
        compare_tol(what, NHWC, nhwc, n, dt, 0.0);
        compare_tol(what, P + 16, sm, 8, RT_F32, 0.0);
        compare_tol(what, P + 24, si, 8, RT_F32, 0.0);
        CHECK(cudaMemcpy(NHWC, nhwc, n * e, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(P + 16, sm, cb, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(P + 24, si, cb, cudaMemcpyHostToDevice));
        if (add)
            rt_batchnorm_add_relu_backward(&bd, t, y, nhwc, dy, gam, sm, si, false, false, dsc, dx,
                                           dgam, dbet, false, false);
        else
            rt_batchnorm_relu_backward(&bd, t, y, nhwc, dy, gam, sm, si, false, false, dx, dgam,
                                       dbet, false, false);
        RUN(ampc_cu_batchnorm_backward(NULL, (size_t)bd.outer, 8, (size_t)bd.inner, dt, Y, NHWC, DY,
                                       add ? DSC : NULL, P, P + 16, P + 24, 0, 0, DX, P + 48,
                                       P + 56, 0, 0, WS));
        compare_tol(what, DX, dx, n, dt, 0.0);
        compare_tol(what, P + 48, dgam, 8, RT_F32, 0.0);
        compare_tol(what, P + 56, dbet, 8, RT_F32, 0.0);
        if (add)
            compare_tol(what, DSC, dsc, n, dt, 0.0);
    }
    /* the moving statistics: applied, then skipped by the step state (its
     * flag under a dynamic scale) */
    RtStepState skip = {.scale = 1.0f, .flag = 1, .dynamic = 1};
    RtStepState *FLAG = dev(&skip, sizeof skip);
    rt_batchnorm_update_moving(8, outer * inner, sm, si, 1e-5f, 0.9f, mm, mv, NULL);
    rt_cuda_batchnorm_update_moving(&cx, 8, outer * inner, P + 16, P + 24, 1e-5f, 0.9f, P + 32,
                                    P + 40, NULL);
    rt_cuda_batchnorm_update_moving(&cx, 8, outer * inner, P + 16, P + 24, 1e-5f, 0.9f, P + 32,
                                    P + 40, FLAG);
    compare_tol("bn_update_moving", P + 32, mm, 8, RT_F32, 0.0);
    compare_tol("bn_update_moving", P + 40, mv, 8, RT_F32, 0.0);
    CHECK(cudaFree(X0)); CHECK(cudaFree(X1)); CHECK(cudaFree(Y)); CHECK(cudaFree(DS));
    CHECK(cudaFree(NHWC)); CHECK(cudaFree(P)); CHECK(cudaFree(WS)); CHECK(cudaFree(DY));
    CHECK(cudaFree(DX));
    CHECK(cudaFree(DSC));
    CHECK(cudaFree(FLAG));
    free(x0), free(x1), free(y), free(ds), free(nhwc), free(dy), free(dx), free(dsc);
}

static void other_ops(void)
{
    static const size_t ns[] = {1, 257, 100003};
    for (int dt = 0; dt < 3; dt++) {
        for (int i = 0; i < 3; i++)
            other_elementwise(ns[i], dt);
        other_shaped(dt);
        other_layout_bn(dt);
    }
}
