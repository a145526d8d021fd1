/*
 * blas.c - FullyConnected through cuBLASLt: one matmul per pass, fp16 or
 * bf16 (or fp32) inputs and outputs with fp32 accumulation and fp32 scale
 * (CUBLAS_COMPUTE_32F: no TF32, so fp32 stays fp32 as on the CPU).  The
 * forward's bias is cuBLASLt's BIAS epilogue, added in fp32 before the one
 * rounding as rt_fc_forward does; the backward's accumulate is beta = 1.
 * The bias gradient is layout.cuh's bias_grad, bit for bit
 * rt_fc_backward_weight's double sum.
 *
 * The column-major views of the row-major tensors come from plan.c's
 * ampc_fc_gemm (unit-tested against rt_fc_*).  The algorithm is the
 * heuristic's first within the workspace limit, chosen once per shape and
 * cached (plan.h's key + bias + accumulate).  cuBLASLt is opened with
 * dlopen (libs.h).
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

static struct {
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
} L;

static cublasLtHandle_t lt;
static RtCudaConfig cfg;
static AmpcPlanCache cache;
static bool ready;

#define BLAS(call) AMPC_CHECK(AMPC_API_CUBLAS, call)

typedef struct {
    AmpcGemm g;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} FcPlan;

static void plan_free(void *v)
{
    FcPlan *p = v;
    BLAS(L.MatrixLayoutDestroy(p->a));
    BLAS(L.MatrixLayoutDestroy(p->b));
    BLAS(L.MatrixLayoutDestroy(p->d));
    BLAS(L.MatmulDescDestroy(p->op));
    free(p);
}

static cudaDataType_t lt_type(RtDType dt)
{
    return dt == RT_F16 ? CUDA_R_16F : dt == RT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static FcPlan *fc_plan(const RtFcDims *d, RtDType dt, RtPass pass, bool bias, bool acc)
{
    if (!ready) {
        fprintf(stderr, "ampc: cuBLASLt FullyConnected: called before rt_cuda_init\n");
        exit(1);
    }
    AmpcPlanKey key;
    ampc_fc_key(d, dt, pass, &key);
    key.v[AMPC_KEY_LEN - 2] = bias, key.v[AMPC_KEY_LEN - 1] = acc; /* slots the key leaves 0 */
    FcPlan *p = ampc_cache_get(&cache, &key);
    if (p)
        return p;
    char err[256];
    p = calloc(1, sizeof *p);
    if (!p || !ampc_fc_gemm(d, pass, &p->g, err, sizeof err)) {
        fprintf(stderr, "ampc: %s\n", p ? err : "out of memory");
        exit(1);
    }
    const AmpcGemm *g = &p->g;
    cudaDataType_t ty = lt_type(dt);
    BLAS(L.MatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                      tb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    BLAS(L.MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    BLAS(L.MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (bias) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        BLAS(L.MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
        BLAS(L.MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &ty,
                                      sizeof ty));
    }
    BLAS(L.MatrixLayoutCreate(&p->a, ty, (uint64_t)g->rowsa, (uint64_t)g->colsa, g->lda));
    BLAS(L.MatrixLayoutCreate(&p->b, ty, (uint64_t)g->rowsb, (uint64_t)g->colsb, g->ldb));
    BLAS(L.MatrixLayoutCreate(&p->d, ty, (uint64_t)g->m, (uint64_t)g->n, g->ldd));
    cublasLtMatmulPreference_t pref;
    BLAS(L.MatmulPreferenceCreate(&pref));
    uint64_t limit = cfg.workspace_limit;
    BLAS(L.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit,
                                        sizeof limit));
    /* the memory planner aligns tensors to RT_WS_ALIGN, not to the 256 bytes the
     * heuristic assumes by default; 16 (cuDNN's here too) is what the algorithm
     * may rely on */
    uint32_t align = 16;
    static const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        BLAS(L.MatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align));
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    memset(&r, 0, sizeof r);
    BLAS(L.MatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->d, p->d, pref, 1, &r, &found));
    BLAS(L.MatmulPreferenceDestroy(pref));
    if (found < 1 || r.state != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr,
                "ampc: cuBLASLt has no algorithm for FullyConnected (n %d, in %d, hidden %d, %s, "
                "pass %d) within %zu bytes of workspace\n",
                d->n, d->in, d->hidden, rt_dtype_name(dt), (int)pass, cfg.workspace_limit);
        exit(1);
    }
    p->algo = r.algo;
    p->ws = r.workspaceSize;
    (void)cudaGetLastError(); /* nothing the heuristic left is the next kernel's error */
    if (!ampc_cache_put(&cache, &key, p)) {
        fprintf(stderr, "ampc: out of memory caching a cuBLASLt plan\n");
        exit(1);
    }
    return p;
}

static void run(FcPlan *p, const void *const *by, const void *bias, void *out, bool acc,
                void *ws)
{
    float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
    if (bias)
        BLAS(L.MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                      sizeof bias));
    BLAS(L.Matmul(lt, p->op, &alpha, by[p->g.a], p->a, by[p->g.b], p->b, &beta, out, p->d, out,
                  p->d, &p->algo, ws, p->ws, cfg.stream));
}

size_t rt_cuda_fc_workspace_bytes(const RtFcDims *d, RtDType dt, RtPass pass)
{
    size_t a = fc_plan(d, dt, pass, false, false)->ws, b;
    if (pass == RT_PASS_FORWARD)
        b = fc_plan(d, dt, pass, true, false)->ws;
    else
        b = fc_plan(d, dt, pass, false, true)->ws;
    return a > b ? a : b;
}

void rt_cuda_fc_forward(const RtFcDims *d, RtDType dt, const void *x, const void *w,
                        const void *bias, void *y, void *ws)
{
    const void *by[] = {[AMPC_OP_X] = x, [AMPC_OP_W] = w, [AMPC_OP_DY] = NULL};
    run(fc_plan(d, dt, RT_PASS_FORWARD, bias != NULL, false), by, bias, y, false, ws);
}

void rt_cuda_fc_backward_data(const RtFcDims *d, RtDType dt, const void *w, const void *dy,
                              void *dx, bool accumulate, void *ws)
{
    const void *by[] = {[AMPC_OP_X] = NULL, [AMPC_OP_W] = w, [AMPC_OP_DY] = dy};
    run(fc_plan(d, dt, RT_PASS_BACKWARD, false, accumulate), by, NULL, dx, accumulate, ws);
}

void rt_cuda_fc_backward_weight(const RtFcDims *d, RtDType dt, const void *x, const void *dy,
                                void *dw, void *dbias, bool accumulate, void *ws)
{
    const void *by[] = {[AMPC_OP_X] = x, [AMPC_OP_W] = NULL, [AMPC_OP_DY] = dy};
    run(fc_plan(d, dt, RT_PASS_BACKWARD_WEIGHT, false, accumulate), by, NULL, dw, accumulate,
        ws);
    if (dbias)
        AMPC_CHECK(AMPC_API_CUDA, ampc_cu_bias_grad(cfg.stream, (size_t)d->n, d->hidden, 1,
                                                    (int)dt, dy, dbias, accumulate));
}

/* ---- set-up ------------------------------------------------------------------------------ */

#define LOAD(f)                                                                               \
    do {                                                                                      \
        *(void **)&L.f = dlsym(h, "cublasLt" #f);                                             \
        if (!L.f) {                                                                           \
            snprintf(err, errlen, "%s (%s) has no cublasLt" #f,                               \
                     ampc_lib_soname(AMPC_LIB_CUBLASLT), ampc_lib_where(AMPC_LIB_CUBLASLT));  \
            return false;                                                                     \
        }                                                                                     \
    } while (0)

bool rt_cuda_blas_init(const RtCudaConfig *c, char *err, size_t errlen)
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
    cfg = *c;
    if (!AMPC_TRY(AMPC_API_CUBLAS, L.Create(&lt))) {
        snprintf(err, errlen, "%s", ampc_api_last_error());
        return false;
    }
    ready = true;
    return true;
}

void rt_cuda_blas_shutdown(void)
{
    if (!ready)
        return;
    ampc_cache_free(&cache, plan_free);
    BLAS(L.Destroy(lt));
    ready = false;
}

bool rt_cuda_init(const RtCudaConfig *c, char *err, size_t errlen)
{
    return rt_cuda_blas_init(c, err, errlen) && rt_cuda_dnn_init(c, err, errlen);
}

void rt_cuda_shutdown(void)
{
    rt_cuda_dnn_shutdown();
    rt_cuda_blas_shutdown();
}
