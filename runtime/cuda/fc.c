/*
 * fc.c - FullyConnected through cuBLASLt: one matmul per pass, fp16 or
 * bf16 (or fp32) inputs and outputs with fp32 accumulation and fp32 scale
 * (CUBLAS_COMPUTE_32F: no TF32, so fp32 stays fp32 as on the CPU).  The
 * forward's bias is cuBLASLt's BIAS epilogue, added in fp32 before the one
 * rounding as rt_fc_forward does; the backward's accumulate is beta = 1.
 * The bias gradient is layout.cuh's bias_grad, bit for bit
 * rt_fc_backward_weight's double sum below 2,048 rows, a block a column
 * from there (within its rounding).
 *
 * The column-major views of the row-major tensors come from plan.c's
 * ampc_fc_gemm (unit-tested against rt_fc_*).  The algorithm is the
 * heuristic's first within the workspace limit, chosen once per shape and
 * cached (plan.h's key + bias + accumulate).  cuBLASLt is opened with
 * dlopen (libs.h).  The twin of runtime/cpu/fc.c.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/libs.h"
#include "cuda/plan.h"
#include "cuda/rt_cuda.h"

typedef struct {
    __typeof__(cublasLtGetVersion) *GetVersion;
    __typeof__(cublasLtCreate) *Create;
    __typeof__(cublasLtDestroy) *Destroy;
    __typeof__(cublasLtMatmulDescCreate) *MatmulDescCreate;
    __typeof__(cublasLtMatmulDescDestroy) *MatmulDescDestroy;
    __typeof__(cublasLtMatmulDescSetAttribute) *MatmulDescSetAttribute;
    __typeof__(cublasLtMatrixLayoutCreate) *MatrixLayoutCreate;
    __typeof__(cublasLtMatrixLayoutDestroy) *MatrixLayoutDestroy;
    __typeof__(cublasLtMatmulPreferenceCreate) *MatmulPreferenceCreate;
    __typeof__(cublasLtMatmulPreferenceDestroy) *MatmulPreferenceDestroy;
    __typeof__(cublasLtMatmulPreferenceSetAttribute) *MatmulPreferenceSetAttribute;
    __typeof__(cublasLtMatmulAlgoGetHeuristic) *MatmulAlgoGetHeuristic;
    __typeof__(cublasLtMatmul) *Matmul;
} BlasFns;

typedef struct GemmCheck GemmCheck;

/* cuBLASLt's part of a context (RtCudaCtx.blas): its functions, found by
 * name, the handle, the plans chosen per shape, the offline check's table. */
typedef struct RtCudaBlas {
    BlasFns L;
    cublasLtHandle_t lt; /* NULL in the offline check (no GPU, no handle) */
    RtCudaCtx *cx;       /* the context it is part of: its stream and options */
    AmpcPlanCache cache; /* FcPlan (or, offline, GemmCheck) by shape */
    GemmCheck **checks;  /* the offline check's distinct GEMMs, in order */
    size_t nchecks, checks_cap;
} Blas;

#define BLAS(call) AMPC_CHECK(AMPC_API_CUBLAS, call)

/* a GEMM's operation and matrix layouts: what cuBLASLt needs no handle for */
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
} GemmDescs;

typedef struct {
    AmpcGemm g;
    GemmDescs desc;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} FcPlan;

static void descs_free(Blas *bl, GemmDescs *gd)
{
    if (gd->a)
        BLAS(bl->L.MatrixLayoutDestroy(gd->a));
    if (gd->b)
        BLAS(bl->L.MatrixLayoutDestroy(gd->b));
    if (gd->d)
        BLAS(bl->L.MatrixLayoutDestroy(gd->d));
    if (gd->op)
        BLAS(bl->L.MatmulDescDestroy(gd->op));
    memset(gd, 0, sizeof *gd);
}

static void plan_free(void *blas, void *v)
{
    FcPlan *p = v;
    descs_free(blas, &p->desc);
    free(p);
}

static void check_free(void *blas, void *v)
{
    (void)blas;
    free(v);
}

static cudaDataType_t lt_type(RtDType dt)
{
    return dt == RT_F16 ? CUDA_R_16F : dt == RT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* fp32 accumulation and scale (CUBLAS_COMPUTE_32F: no TF32), the transposes,
 * the bias epilogue; false (nothing left) with the library's message in
 * ampc_api_last_error() */
#define TRY(call) (ok = ok && AMPC_TRY(AMPC_API_CUBLAS, call))
static bool gemm_descs(Blas *bl, const AmpcGemm *g, RtDType dt, bool bias, GemmDescs *gd)
{
    bool ok = true;
    cudaDataType_t ty = lt_type(dt);
    memset(gd, 0, sizeof *gd);
    TRY(bl->L.MatmulDescCreate(&gd->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                      tb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    TRY(bl->L.MatmulDescSetAttribute(gd->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    TRY(bl->L.MatmulDescSetAttribute(gd->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (bias) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        TRY(bl->L.MatmulDescSetAttribute(gd->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
        TRY(bl->L.MatmulDescSetAttribute(gd->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &ty,
                                         sizeof ty));
    }
    TRY(bl->L.MatrixLayoutCreate(&gd->a, ty, (uint64_t)g->rowsa, (uint64_t)g->colsa, g->lda));
    TRY(bl->L.MatrixLayoutCreate(&gd->b, ty, (uint64_t)g->rowsb, (uint64_t)g->colsb, g->ldb));
    TRY(bl->L.MatrixLayoutCreate(&gd->d, ty, (uint64_t)g->m, (uint64_t)g->n, g->ldd));
    if (!ok)
        descs_free(bl, gd);
    return ok;
}
#undef TRY

static const char *node_name(const char *node) { return node ? node : "(unnamed)"; }

/* cx's cuBLASLt, for a call that runs a plan */
static Blas *blas_of(RtCudaCtx *cx)
{
    rt_cuda_need_init(cx, "cuBLASLt FullyConnected");
    if (!cx->blas) {
        fprintf(stderr,
                "ampc: cuBLASLt FullyConnected: the context has no cuBLASLt (rt_cuda_open)\n");
        exit(1);
    }
    return cx->blas;
}

static FcPlan *fc_plan(Blas *bl, const RtFcDims *d, RtDType dt, RtPass pass, bool bias, bool acc)
{
    AmpcPlanKey key;
    ampc_fc_key(d, dt, pass, &key);
    key.v[AMPC_KEY_LEN - 2] = bias, key.v[AMPC_KEY_LEN - 1] = acc; /* slots the key leaves 0 */
    FcPlan *p = ampc_cache_get(&bl->cache, &key);
    if (p)
        return p;
    char err[256];
    p = calloc(1, sizeof *p);
    if (!p || !ampc_fc_gemm(d, pass, &p->g, err, sizeof err)) {
        fprintf(stderr, "ampc: node '%s': %s\n", node_name(d->node), p ? err : "out of memory");
        exit(1);
    }
    if (!gemm_descs(bl, &p->g, dt, bias, &p->desc)) {
        fprintf(stderr, "ampc: node '%s': cuBLASLt's descriptors: %s\n", node_name(d->node),
                ampc_api_last_error());
        exit(1);
    }
    cublasLtMatmulPreference_t pref;
    BLAS(bl->L.MatmulPreferenceCreate(&pref));
    uint64_t limit = bl->cx->cfg.workspace_limit;
    BLAS(bl->L.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit,
                                            sizeof limit));
    /* the memory planner aligns tensors to RT_WS_ALIGN, not to the 256 bytes the
     * heuristic assumes by default; 16 (cuDNN's here too) is what the algorithm
     * may rely on */
    uint32_t align = 16;
    static const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        BLAS(bl->L.MatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align));
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    memset(&r, 0, sizeof r);
    const GemmDescs *gd = &p->desc;
    BLAS(bl->L.MatmulAlgoGetHeuristic(bl->lt, gd->op, gd->a, gd->b, gd->d, gd->d, pref, 1, &r,
                                      &found));
    BLAS(bl->L.MatmulPreferenceDestroy(pref));
    if (found < 1 || r.state != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr,
                "ampc: node '%s': cuBLASLt has no algorithm for FullyConnected (n %d, in %d, "
                "hidden %d, %s, pass %d) within %zu bytes of workspace\n",
                node_name(d->node), d->n, d->in, d->hidden, rt_dtype_name(dt), (int)pass,
                bl->cx->cfg.workspace_limit);
        exit(1);
    }
    p->algo = r.algo;
    p->ws = r.workspaceSize;
    (void)cudaGetLastError(); /* nothing the heuristic left is the next kernel's error */
    if (!ampc_cache_put(&bl->cache, &key, p)) {
        fprintf(stderr, "ampc: out of memory caching a cuBLASLt plan\n");
        exit(1);
    }
    return p;
}

static void run(Blas *bl, FcPlan *p, const void *const *by, const void *bias, void *out, bool acc,
                void *ws)
{
    float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
    const GemmDescs *gd = &p->desc;
    if (bias)
        BLAS(bl->L.MatmulDescSetAttribute(gd->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                          sizeof bias));
    BLAS(bl->L.Matmul(bl->lt, gd->op, &alpha, by[p->g.a], gd->a, by[p->g.b], gd->b, &beta, out,
                      gd->d, out, gd->d, &p->algo, ws, p->ws, bl->cx->stream));
}

/* ---- the offline check (--cudnn-check: no GPU, no handle) -------------------------- */

struct GemmCheck {
    char node[96], what[160];
    bool ok;
    char err[384];
};

bool rt_cuda_blas_check_gemm(RtCudaCtx *cx, const char *node, const AmpcGemm *g, RtDType dt,
                             bool bias, char *err, size_t errlen)
{
    char why[256];
    Blas *bl = cx ? cx->blas : NULL;
    if (!bl) {
        snprintf(err, errlen, "node '%s': cuBLASLt is not open", node_name(node));
        return false;
    }
    if (!ampc_gemm_check(g, why, sizeof why)) {
        snprintf(err, errlen, "node '%s': %s", node_name(node), why);
        return false;
    }
    GemmDescs gd;
    if (!gemm_descs(bl, g, dt, bias, &gd)) {
        snprintf(err, errlen, "node '%s': cuBLASLt refuses the GEMM's descriptors: %s",
                 node_name(node), ampc_api_last_error());
        return false;
    }
    descs_free(bl, &gd);
    return true;
}

/* the sizer's job in the offline check: each distinct GEMM once */
static void check_fc(Blas *bl, const RtFcDims *d, RtDType dt, RtPass pass, bool bias, bool acc)
{
    AmpcPlanKey key;
    ampc_fc_key(d, dt, pass, &key);
    key.v[AMPC_KEY_LEN - 2] = bias, key.v[AMPC_KEY_LEN - 1] = acc;
    if (ampc_cache_get(&bl->cache, &key))
        return;
    GemmCheck *c = calloc(1, sizeof *c);
    if (bl->nchecks == bl->checks_cap) {
        size_t cap = bl->checks_cap ? 2 * bl->checks_cap : 16;
        GemmCheck **grown = realloc(bl->checks, cap * sizeof *grown);
        if (grown)
            bl->checks = grown, bl->checks_cap = cap;
    }
    if (!c || bl->nchecks == bl->checks_cap || !ampc_cache_put(&bl->cache, &key, c)) {
        fprintf(stderr, "ampc: out of memory in the cuBLASLt check\n");
        exit(1);
    }
    bl->checks[bl->nchecks++] = c;
    snprintf(c->node, sizeof c->node, "%s", node_name(d->node));
    AmpcGemm g;
    char why[256];
    c->ok = ampc_fc_gemm(d, pass, &g, why, sizeof why);
    if (!c->ok)
        snprintf(c->err, sizeof c->err, "node '%s': %s", c->node, why);
    static const char *const pass_name[] = {"forward", "backward-data", "backward-weight"};
    snprintf(c->what, sizeof c->what, "%s %s m %lld n %lld k %lld%s%s",
             (unsigned)pass < 3 ? pass_name[pass] : "?", rt_dtype_name(dt), (long long)g.m, (long long)g.n, (long long)g.k,
             bias ? " bias" : "", acc ? " (accumulate)" : "");
    if (c->ok)
        c->ok = rt_cuda_blas_check_gemm(bl->cx, d->node, &g, dt, bias, c->err, sizeof c->err);
}

int rt_cuda_blas_check_report(RtCudaCtx *cx, FILE *out, FILE *err)
{
    const Blas *bl = cx->blas;
    int bad = 0;
    for (size_t i = 0; bl && i < bl->nchecks; i++) {
        const GemmCheck *c = bl->checks[i];
        if (c->ok)
            fprintf(out, "cudnn-check: gemm %s: %s: descriptors made\n", c->node, c->what);
        else {
            fprintf(err, "cudnn-check: FAIL: %s\n", c->err);
            bad++;
        }
    }
    return bad;
}

size_t rt_cuda_blas_check_count(RtCudaCtx *cx) { return cx->blas ? cx->blas->nchecks : 0; }

size_t rt_cuda_fc_workspace_bytes(RtCudaCtx *cx, const RtFcDims *d, RtDType dt, RtPass pass)
{
    Blas *bl = cx->blas;
    if (cx->offline && bl) { /* the variants the sizer plans below */
        check_fc(bl, d, dt, pass, false, false);
        check_fc(bl, d, dt, pass, pass == RT_PASS_FORWARD, pass != RT_PASS_FORWARD);
        return 0;
    }
    bl = blas_of(cx);
    size_t a = fc_plan(bl, d, dt, pass, false, false)->ws, b;
    if (pass == RT_PASS_FORWARD)
        b = fc_plan(bl, d, dt, pass, true, false)->ws;
    else
        b = fc_plan(bl, d, dt, pass, false, true)->ws;
    return a > b ? a : b;
}

void rt_cuda_fc_forward(RtCudaCtx *cx, const RtFcDims *d, RtDType dt, const void *x, const void *w,
                        const void *bias, void *y, void *ws)
{
    Blas *bl = blas_of(cx);
    const void *by[] = {[AMPC_OP_X] = x, [AMPC_OP_W] = w, [AMPC_OP_DY] = NULL};
    run(bl, fc_plan(bl, d, dt, RT_PASS_FORWARD, bias != NULL, false), by, bias, y, false, ws);
}

void rt_cuda_fc_backward_data(RtCudaCtx *cx, const RtFcDims *d, RtDType dt, const void *w,
                              const void *dy, void *dx, bool accumulate, void *ws)
{
    Blas *bl = blas_of(cx);
    const void *by[] = {[AMPC_OP_X] = NULL, [AMPC_OP_W] = w, [AMPC_OP_DY] = dy};
    run(bl, fc_plan(bl, d, dt, RT_PASS_BACKWARD, false, accumulate), by, NULL, dx, accumulate, ws);
}

void rt_cuda_fc_backward_weight(RtCudaCtx *cx, const RtFcDims *d, RtDType dt, const void *x,
                                const void *dy, void *dw, void *dbias, bool accumulate, void *ws)
{
    Blas *bl = blas_of(cx);
    const void *by[] = {[AMPC_OP_X] = x, [AMPC_OP_W] = NULL, [AMPC_OP_DY] = dy};
    run(bl, fc_plan(bl, d, dt, RT_PASS_BACKWARD_WEIGHT, false, accumulate), by, NULL, dw,
        accumulate, ws);
    if (dbias)
        AMPC_CHECK(AMPC_API_CUDA, ampc_cu_bias_grad(cx->stream, (size_t)d->n, d->hidden, 1, (int)dt,
                                                    dy, dbias, accumulate));
}

/* ---- set-up ------------------------------------------------------------------------------ */

#define LOAD(f)                                                                                    \
    do {                                                                                           \
        *(void **)&bl->L.f = dlsym(h, "cublasLt" #f);                                              \
        if (!bl->L.f) {                                                                            \
            snprintf(err, errlen, "%s (%s) has no cublasLt" #f,                                    \
                     ampc_lib_soname(AMPC_LIB_CUBLASLT), ampc_lib_where(AMPC_LIB_CUBLASLT));       \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

/* cuBLASLt's functions, found by name in the library libs.c opens */
static bool load(Blas *bl, char *err, size_t errlen)
{
    void *h = ampc_lib_open(AMPC_LIB_CUBLASLT, err, errlen);
    if (!h)
        return false;
    LOAD(GetVersion);
    LOAD(Create);
    LOAD(Destroy);
    LOAD(MatmulDescCreate);
    LOAD(MatmulDescDestroy);
    LOAD(MatmulDescSetAttribute);
    LOAD(MatrixLayoutCreate);
    LOAD(MatrixLayoutDestroy);
    LOAD(MatmulPreferenceCreate);
    LOAD(MatmulPreferenceDestroy);
    LOAD(MatmulPreferenceSetAttribute);
    LOAD(MatmulAlgoGetHeuristic);
    LOAD(Matmul);
    return true;
}

/* cuBLASLt's part of cx (its functions, and a handle unless offline); false
 * with a message */
static bool blas_open(RtCudaCtx *cx, bool offline, char *err, size_t errlen)
{
    Blas *bl = calloc(1, sizeof *bl);
    if (!bl) {
        snprintf(err, errlen, "cuBLASLt: out of host memory");
        return false;
    }
    bl->cx = cx;
    if (!load(bl, err, errlen)) {
        free(bl);
        return false;
    }
    if (!offline && !AMPC_TRY(AMPC_API_CUBLAS, bl->L.Create(&bl->lt))) {
        snprintf(err, errlen, "%s", ampc_api_last_error());
        free(bl);
        return false;
    }
    cx->blas = bl;
    return true;
}

bool rt_cuda_blas_init(RtCudaCtx *cx, char *err, size_t errlen)
{
    return blas_open(cx, false, err, errlen);
}

bool rt_cuda_blas_check_open(RtCudaCtx *cx, char *err, size_t errlen)
{
    return blas_open(cx, true, err, errlen);
}

void rt_cuda_blas_shutdown(RtCudaCtx *cx)
{
    Blas *bl = cx->blas;
    if (!bl)
        return;
    ampc_cache_free(&bl->cache, cx->offline ? check_free : plan_free, bl);
    free(bl->checks);
    if (bl->lt)
        BLAS(bl->L.Destroy(bl->lt));
    free(bl);
    cx->blas = NULL;
}
