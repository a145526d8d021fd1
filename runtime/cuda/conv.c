/*
 * conv.c - Convolution forward, backward-data and backward-filter through
 * cuDNN's graph (backend) API: tensor, convolution and operation
 * descriptors, an operation graph, engine heuristics, execution plans and
 * a variant pack per call.  No legacy (deprecated) cuDNN call is used.
 *
 * A plan is chosen once per shape, on first use or when the workspace
 * sizer asks (the memory planner does, at set-up), and cached under
 * plan.h's key (+ whether the output accumulates: alpha and beta are part
 * of a cuDNN operation).  The candidates are the heuristic's engine
 * configurations (mode A, then the fallback list) whose plans finalize and
 * fit the workspace limit; fp32 refuses engines that down-convert their
 * inputs (TF32), 16-bit takes tensor-op engines.  tune.h chooses: without
 * autotune the heuristic's first candidate wins; with it, at most
 * --cudnn-autotune-max of them (runtime-compiled engines skipped unless
 * --cudnn-runtime-compiled) are timed, one warm-up and one timed run each
 * on the context's one shared scratch, and the fastest wins, as MXNet's
 * MXNET_CUDNN_AUTOTUNE_DEFAULT=1 and PyTorch's cudnn.benchmark do; with
 * --cudnn-plan-cache the file's choice is taken untimed and what was
 * chosen is saved into it when the context closes.  Each plan builds a
 * call site's variant pack once (its pointers: the arena's buffers).
 *
 * cuDNN is opened with dlopen (libs.h), so its functions are pointers.
 * Layouts, descriptors and padding come from plan.c (unit-tested); the
 * padding and bias kernels from layout.cuh (emulation-tested).  The twin
 * of runtime/cpu/conv.c (cuda/<family> beside cpu/<family>.c:
 * docs/backend-cuda.md, "Files").
 */
#include <cuda_runtime.h>
#include <cudnn_graph.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/libs.h"
#include "cuda/plan.h"
#include "cuda/rt_cuda.h"
#include "cuda/tune.h"

typedef struct {
    __typeof__(cudnnGetVersion) *GetVersion;
    __typeof__(cudnnCreate) *Create;
    __typeof__(cudnnDestroy) *Destroy;
    __typeof__(cudnnSetStream) *SetStream;
    __typeof__(cudnnBackendCreateDescriptor) *CreateDescriptor;
    __typeof__(cudnnBackendDestroyDescriptor) *DestroyDescriptor;
    __typeof__(cudnnBackendSetAttribute) *SetAttribute;
    __typeof__(cudnnBackendGetAttribute) *GetAttribute;
    __typeof__(cudnnBackendFinalize) *Finalize;
    __typeof__(cudnnBackendExecute) *Execute;
} DnnFns;

typedef cudnnBackendDescriptor_t Desc;

typedef struct ConvCheck ConvCheck;

/* cuDNN's part of a context (RtCudaCtx.dnn): its functions, found by name,
 * the handle, the plans chosen per shape, the offline check's table. */
typedef struct RtCudaDnn {
    DnnFns F;
    cudnnHandle_t handle; /* NULL in the offline check (no GPU, no handle) */
    RtCudaCtx *cx;        /* the context it is part of: its stream and options */
    AmpcPlanCache cache;  /* ConvPlan (or, offline, ConvCheck) by shape */
    ConvCheck **checks;   /* the offline check's distinct convolutions, in order */
    size_t nchecks, checks_cap;
    /* autotune's one shared scratch (x, w, y, workspace, statistics), grown to the
     * largest asked */
    void *scratch[5];
    size_t scratch_bytes[5];
    AmpcPlanFile *plans;   /* --cudnn-plan-cache; NULL without */
    AmpcTuneEnv env;       /* what the file's entries are valid for */
    long timed, from_file; /* candidates timed; plans the file gave */
} Dnn;

/* The handle attributes of the graph and the plan are marked deprecated
 * in cuDNN 9.19's header (the handle now also comes with the execution);
 * 9.0 to 9.19 all still read them, so they are set by number.  The graph
 * finalizes without one (the offline check relies on it). */
#define ATTR_OPERATIONGRAPH_HANDLE ((cudnnBackendAttributeName_t)800)
#define ATTR_EXECUTION_PLAN_HANDLE ((cudnnBackendAttributeName_t)400)

/* the statistics' sum and sum of squares: one buffer of 2 x k floats */
enum { UID_X = 1, UID_W = 2, UID_Y = 3, UID_SUM = 4, UID_SQSUM = 5, MAX_CANDIDATES = 16 };

static const char *pass_name(RtPass pass)
{
    return pass == RT_PASS_FORWARD ? "forward"
           : pass == RT_PASS_BACKWARD ? "backward-data"
                                      : "backward-filter";
}

/* ---- descriptors, every call checked ---------------------------------------------- */

/* A descriptor build stops at its first failed call: later calls are skipped,
 * and ok says whether it got through (ampc_api_last_error() says why not).
 * Nothing here needs a handle or a GPU. */
typedef struct {
    bool ok;
    const DnnFns *F;
} Build;

static void set_(Build *b, Desc d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                 int64_t n, const void *v, const char *call, int line)
{
    if (b->ok && d)
        b->ok = ampc_api_check(AMPC_API_CUDNN, (long)b->F->SetAttribute(d, a, t, n, v), call,
                               __FILE__, line, false);
}
#define SET(b, d, a, t, n, v) \
    set_((b), (d), (a), (t), (n), (v), "cudnnBackendSetAttribute(" #a ")", __LINE__)

static Desc make(Build *b, cudnnBackendDescriptorType_t t)
{
    Desc d = NULL;
    if (b->ok)
        b->ok = AMPC_TRY(AMPC_API_CUDNN, b->F->CreateDescriptor(t, &d));
    return b->ok ? d : NULL;
}

static void finalize(Build *b, Desc d)
{
    if (b->ok && d)
        b->ok = AMPC_TRY(AMPC_API_CUDNN, b->F->Finalize(d));
}

static void drop(Dnn *dn, Desc d)
{
    if (d)
        AMPC_CHECK(AMPC_API_CUDNN, dn->F.DestroyDescriptor(d));
}

static cudnnDataType_t dnn_type(RtDType dt)
{
    return dt == RT_F16 ? CUDNN_DATA_HALF : dt == RT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

static Desc tensor(Build *b, const AmpcTensorDesc *t, int64_t uid, RtDType dt)
{
    Desc d = make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    cudnnDataType_t ty = dnn_type(dt);
    int64_t align = 16;
    SET(b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ty);
    SET(b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, t->nd, t->dims);
    SET(b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, t->nd, t->strides);
    SET(b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET(b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    finalize(b, d);
    return d;
}

static Desc conv_desc(Build *b, const AmpcConvGeom *g)
{
    Desc d = make(b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT; /* fp32 accumulation for every dtype */
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t nsp = g->nsp;
    SET(b, d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    SET(b, d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    SET(b, d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsp);
    SET(b, d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, nsp, g->dilate);
    SET(b, d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, nsp, g->stride);
    SET(b, d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, nsp, g->pad);
    SET(b, d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, nsp, g->pad);
    finalize(b, d);
    return d;
}

/* the operation of a pass: y = conv(x, w), dx = conv^T(dy, w), dw = conv'(x, dy);
 * beta 1 adds to the output (accumulate), 0 overwrites */
static Desc operation(Build *b, RtPass pass, Desc x, Desc w, Desc y, Desc conv, float beta)
{
    static const cudnnBackendDescriptorType_t kind[] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    /* x, w, y, conv, alpha, beta attributes of each kind */
    static const cudnnBackendAttributeName_t at[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
    float alpha = 1.0f;
    Desc op = make(b, kind[pass]);
    SET(b, op, at[pass][0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(b, op, at[pass][1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    SET(b, op, at[pass][2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    SET(b, op, at[pass][3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
    SET(b, op, at[pass][4], CUDNN_TYPE_FLOAT, 1, &alpha);
    SET(b, op, at[pass][5], CUDNN_TYPE_FLOAT, 1, &beta);
    finalize(b, op);
    return op;
}

/* The generation of y's per-channel statistics (cuDNN's GEN_STATS in
 * SUM_SQSUM mode, fp32 arithmetic): sum and sqsum of every element of a
 * channel, what BatchNorm's training forward would otherwise read y again for */
static Desc gen_stats(Build *b, Desc y, Desc sum, Desc sqsum)
{
    Desc op = make(b, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    SET(b, op, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode);
    SET(b, op, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    SET(b, op, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    SET(b, op, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum);
    SET(b, op, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sqsum);
    finalize(b, op);
    return op;
}

/* One convolution's operation graph and what it is made of: the
 * convolution, and for a forward with statistics (rt_cuda_conv_forward_stats)
 * the generation of y's statistics after it, in one graph.  Built without a
 * handle (none exists in the offline check); the handle is attached when one
 * exists, as cuDNN 9.0's graphs still expected. */
typedef struct {
    Desc x, w, y, conv, op, graph;
    Desc sum, sqsum, stats; /* NULL without statistics */
} ConvGraph;

static void conv_graph_drop(Dnn *dn, ConvGraph *cg)
{
    drop(dn, cg->graph), drop(dn, cg->stats), drop(dn, cg->op), drop(dn, cg->conv), drop(dn, cg->x),
        drop(dn, cg->w), drop(dn, cg->y), drop(dn, cg->sum), drop(dn, cg->sqsum);
    memset(cg, 0, sizeof *cg);
}

/* false (nothing left allocated) with the library's message in
 * ampc_api_last_error(); stats: the forward with y's statistics (g->stats) */
static bool conv_graph(Dnn *dn, const AmpcConvGeom *g, RtDType dt, RtPass pass, bool acc,
                       bool stats, ConvGraph *cg)
{
    Build b = {true, &dn->F};
    memset(cg, 0, sizeof *cg);
    cg->x = tensor(&b, &g->x, UID_X, dt), cg->w = tensor(&b, &g->w, UID_W, dt);
    cg->y = tensor(&b, &g->y, UID_Y, dt), cg->conv = conv_desc(&b, g);
    /* the operation's x/w/y are the pass's: dx for backward-data, dw for backward-filter */
    cg->op = operation(&b, pass, cg->x, cg->w, cg->y, cg->conv, acc);
    Desc ops[2] = {cg->op, NULL};
    if (stats) {
        cg->sum = tensor(&b, &g->stats, UID_SUM, RT_F32);
        cg->sqsum = tensor(&b, &g->stats, UID_SQSUM, RT_F32);
        ops[1] = cg->stats = gen_stats(&b, cg->y, cg->sum, cg->sqsum);
    }
    cg->graph = make(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (dn->handle)
        SET(&b, cg->graph, ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dn->handle);
    SET(&b, cg->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, stats ? 2 : 1,
        ops);
    finalize(&b, cg->graph);
    if (!b.ok)
        conv_graph_drop(dn, cg);
    return b.ok;
}

/* A heuristic of one mode over the graph, finalized (NULL when cuDNN has
 * none for it). */
static Desc heuristic(Dnn *dn, Desc graph, cudnnBackendHeurMode_t mode)
{
    Build b = {true, &dn->F};
    Desc heur = make(&b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    SET(&b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &graph);
    SET(&b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    finalize(&b, heur);
    if (!b.ok) {
        drop(dn, heur);
        return NULL;
    }
    return heur;
}

/* How many engine configurations the heuristic of this mode proposes, before
 * cuDNN's own check of each against the device (which, without a GPU,
 * leaves none): -1 when the query fails. */
static int64_t heuristic_count(Dnn *dn, Desc graph, cudnnBackendHeurMode_t mode)
{
    Desc heur = heuristic(dn, graph, mode);
    int64_t n = -1;
    if (heur &&
        !AMPC_TRY(AMPC_API_CUDNN, dn->F.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL)))
        n = -1;
    drop(dn, heur);
    return n;
}

/* ---- plans ---------------------------------------------------------------------------- */

typedef struct {
    AmpcConvGeom g;
    Desc plan;
    size_t ws;         /* cuDNN's workspace, after the padding regions */
    size_t xbytes;     /* the padded x region (the rest of g.pad_bytes is w's) */
    int64_t xrows, wrows, yinner, engine;
    unsigned notes;      /* the engine's numerical notes (plan.h's AMPC_NOTE_*) */
    AmpcSiteTable sites; /* a variant pack per call site (its pointers) */
} ConvPlan;

static void drop_value(void *dnn, void *d) { drop(dnn, d); }

static void plan_free(void *dnn, void *p)
{
    ConvPlan *c = p;
    ampc_site_free(&c->sites, drop_value, dnn);
    drop(dnn, c->plan);
    free(c);
}

static void check_free(void *dnn, void *p)
{
    (void)dnn;
    free(p);
}

static unsigned note_bit(cudnnBackendNumericalNote_t n)
{
    switch (n) {
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: return AMPC_NOTE_TENSOR_CORE;
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: return AMPC_NOTE_DOWN_CONVERT;
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: return AMPC_NOTE_REDUCED_REDUCTION;
    case CUDNN_NUMERICAL_NOTE_FFT: return AMPC_NOTE_FFT;
    case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: return AMPC_NOTE_NONDETERMINISTIC;
    case CUDNN_NUMERICAL_NOTE_WINOGRAD:
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: return AMPC_NOTE_WINOGRAD;
    case CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP: return AMPC_NOTE_STRICT_NAN;
    default: return 0; /* a note newer than this file: informative */
    }
}

/* The engine of an engine configuration: its global index and numerical
 * notes.  false when it cannot describe itself (skipped, not fatal). */
static bool engine_notes(Dnn *dn, Desc ecfg, int64_t *index, unsigned *bits, bool *rtc)
{
    Build b = {true, &dn->F};
    Desc eng = make(&b, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    bool ok =
        b.ok &&
        AMPC_TRY(AMPC_API_CUDNN, dn->F.GetAttribute(ecfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng)) &&
        AMPC_TRY(AMPC_API_CUDNN, dn->F.GetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                                    CUDNN_TYPE_INT64, 1, &n, index));
    n = 0;
    ok = ok &&
         AMPC_TRY(AMPC_API_CUDNN, dn->F.GetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                                     CUDNN_TYPE_NUMERICAL_NOTE,
                                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
    *bits = 0;
    for (int64_t i = 0; ok && i < n; i++)
        *bits |= note_bit(notes[i]);
    /* the behaviour notes: runtime compilation (seconds per engine) */
    cudnnBackendBehaviorNote_t beh[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    n = 0;
    *rtc = false;
    if (ok && AMPC_TRY(AMPC_API_CUDNN, dn->F.GetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                                                          CUDNN_TYPE_BEHAVIOR_NOTE,
                                                          CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, beh)))
        for (int64_t i = 0; i < n; i++)
            *rtc |= beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    drop(dn, eng);
    return ok;
}

/* A variant pack of x, w, y (in the operation's roles: dx or dw is an
 * output, const only here), the statistics (sum then sqsum, k floats each;
 * NULL: none) and the workspace; NULL when cuDNN refuses it */
static Desc variant_pack(Dnn *dn, const void *x, const void *w, const void *y, float *stats,
                         int64_t k, void *ws)
{
    int64_t uids[5] = {UID_X, UID_W, UID_Y, UID_SUM, UID_SQSUM};
    void *ptrs[5] = {(void *)x, (void *)w, (void *)y, stats, stats ? stats + k : NULL};
    int64_t n = stats ? 5 : 3;
    Build b = {true, &dn->F};
    Desc vp = make(&b, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    SET(&b, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    SET(&b, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    SET(&b, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    finalize(&b, vp);
    if (!b.ok) {
        drop(dn, vp);
        return NULL;
    }
    return vp;
}

/* runs the plan with vp; a failure is fatal unless `tried` (autotune's
 * timing runs: a plan can finalize and still fail to run), where false is
 * returned */
static bool run_plan(Dnn *dn, Desc plan, Desc vp, bool tried)
{
    bool ok = vp && AMPC_TRY(AMPC_API_CUDNN, dn->F.Execute(dn->handle, plan, vp));
    if (!ok && !tried) {
        fprintf(stderr, "ampc: %s\n", ampc_api_last_error());
        exit(1);
    }
    if (!ok)
        (void)cudaGetLastError(); /* not left for the next launch check to report */
    return ok;
}

static size_t desc_bytes(const AmpcTensorDesc *t, RtDType dt)
{
    size_t n = rt_dtype_size(dt);
    for (int i = 0; i < t->nd; i++)
        n *= (size_t)t->dims[i];
    return n;
}

/* the shared scratch buffer i (x, w, y, workspace) of at least bytes,
 * zeroed when (re)allocated: one allocation per growth, not per plan */
static void *scratch(Dnn *dn, int i, size_t bytes)
{
    if (bytes > dn->scratch_bytes[i] || !dn->scratch[i]) {
        AMPC_CHECK(AMPC_API_CUDA, cudaStreamSynchronize(dn->cx->stream));
        AMPC_CHECK(AMPC_API_CUDA, cudaFree(dn->scratch[i]));
        dn->scratch[i] = NULL;
        AMPC_CHECK(AMPC_API_CUDA, cudaMalloc(&dn->scratch[i], bytes ? bytes : 1));
        AMPC_CHECK(AMPC_API_CUDA,
                   cudaMemsetAsync(dn->scratch[i], 0, bytes ? bytes : 1, dn->cx->stream));
        dn->scratch_bytes[i] = bytes;
    }
    return dn->scratch[i];
}

/* runs plan p at the call site of these pointers: its variant pack made
 * on the site's first call, then reused (a pack per call costs host time
 * on every one of a step's calls) */
static void execute_stats(Dnn *dn, ConvPlan *p, const void *x, const void *w, const void *y,
                          float *stats, void *ws)
{
    const void *site[AMPC_SITE_PTRS] = {x, w, y, ws, stats};
    Desc vp = ampc_site_get(&p->sites, site);
    if (!vp) {
        if (!(vp = variant_pack(dn, x, w, y, stats, p->g.stats.dims[1], ws)) ||
            !ampc_site_put(&p->sites, site, vp)) {
            fprintf(stderr, "ampc: cuDNN variant pack: %s\n",
                    vp ? "out of memory" : ampc_api_last_error());
            exit(1);
        }
    }
    run_plan(dn, p->plan, vp, false);
}

static void execute(Dnn *dn, ConvPlan *p, const void *x, const void *w, const void *y, void *ws)
{
    execute_stats(dn, p, x, w, y, NULL, ws);
}

/* one warm-up run and one timed run on the scratch, in ms (inf when a run fails) */
static float time_plan(Dnn *dn, Desc plan, const AmpcConvGeom *g, RtDType dt, bool stats, size_t ws)
{
    void *x = scratch(dn, 0, desc_bytes(&g->x, dt)), *w = scratch(dn, 1, desc_bytes(&g->w, dt));
    void *y = scratch(dn, 2, desc_bytes(&g->y, dt)), *wsp = scratch(dn, 3, ws);
    int64_t k = g->stats.dims[1];
    float *st = stats ? scratch(dn, 4, 2 * desc_bytes(&g->stats, RT_F32)) : NULL;
    Desc vp = variant_pack(dn, x, w, y, st, k, wsp);
    if (!run_plan(dn, plan, vp, true)) { /* warm-up */
        drop(dn, vp);
        return INFINITY;
    }
    cudaEvent_t a, b;
    AMPC_CHECK(AMPC_API_CUDA, cudaEventCreate(&a));
    AMPC_CHECK(AMPC_API_CUDA, cudaEventCreate(&b));
    AMPC_CHECK(AMPC_API_CUDA, cudaEventRecord(a, dn->cx->stream));
    bool ok = run_plan(dn, plan, vp, true);
    AMPC_CHECK(AMPC_API_CUDA, cudaEventRecord(b, dn->cx->stream));
    AMPC_CHECK(AMPC_API_CUDA, cudaEventSynchronize(b));
    float ms = 0;
    AMPC_CHECK(AMPC_API_CUDA, cudaEventElapsedTime(&ms, a, b));
    AMPC_CHECK(AMPC_API_CUDA, cudaEventDestroy(a));
    AMPC_CHECK(AMPC_API_CUDA, cudaEventDestroy(b));
    drop(dn, vp);
    return ok ? ms : INFINITY;
}

/* What pick found: the plan, or why there is none. */
typedef struct {
    Desc plan;
    size_t ws;
    int64_t engine;
    unsigned notes;
    int proposed, refused; /* candidates, and those the engine rule refused */
    unsigned refused_notes; /* the notes that refused them */
} Pick;

/* tune.h's callbacks over one heuristic list: cfgs[i]'s plan built into plans[i] */
typedef struct {
    Dnn *dn;
    Desc *cfgs, *plans;
    const AmpcConvGeom *g;
    RtDType dt;
    bool stats; /* the graph generates y's statistics too */
} Tuning;

static bool tune_build(void *ctx, int i, size_t *ws)
{
    Tuning *t = ctx;
    Dnn *dn = t->dn;
    Build pb = {true, &dn->F};
    Desc plan = make(&pb, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    SET(&pb, plan, ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &dn->handle);
    SET(&pb, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &t->cfgs[i]);
    finalize(&pb, plan);
    int64_t one = 0, bytes = 0;
    if (!pb.ok ||
        !AMPC_TRY(AMPC_API_CUDNN, dn->F.GetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                     CUDNN_TYPE_INT64, 1, &one, &bytes)) ||
        bytes < 0) {
        drop(dn, plan);
        return false;
    }
    t->plans[i] = plan, *ws = (size_t)bytes;
    return true;
}

static float tune_time(void *ctx, int i)
{
    Tuning *t = ctx;
    int64_t one = 0, bytes = 0;
    AMPC_CHECK(AMPC_API_CUDNN,
               t->dn->F.GetAttribute(t->plans[i], CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &one, &bytes));
    return time_plan(t->dn, t->plans[i], t->g, t->dt, t->stats, (size_t)bytes);
}

static void tune_drop(void *ctx, int i)
{
    Tuning *t = ctx;
    drop(t->dn, t->plans[i]);
    t->plans[i] = NULL;
}

/* The candidates of one heuristic mode (0: A, 1: the fallback list) for the
 * convolution of key: the chosen plan (p->plan NULL when none), through the
 * plan cache file when there is one. */
static void pick(Dnn *dn, Desc graph, int mode, const AmpcConvGeom *g, RtDType dt, bool stats,
                 const AmpcPlanKey *key, Pick *p)
{
    Desc heur = heuristic(dn, graph, mode ? CUDNN_HEUR_MODE_FALLBACK : CUDNN_HEUR_MODE_A);
    if (!heur)
        return;
    int64_t n = 0;
    AMPC_CHECK(AMPC_API_CUDNN, dn->F.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL));
    if (n > MAX_CANDIDATES)
        n = MAX_CANDIDATES;
    Desc cfgs[MAX_CANDIDATES], usable[MAX_CANDIDATES], plans[MAX_CANDIDATES] = {0};
    Build b = {true, &dn->F};
    for (int64_t i = 0; i < n; i++)
        cfgs[i] = make(&b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    if (n > 0 && b.ok)
        AMPC_CHECK(AMPC_API_CUDNN,
                   dn->F.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfgs));
    /* the configurations that describe their engine, in the heuristic's order */
    AmpcCandidate cand[MAX_CANDIDATES];
    int nc = 0;
    for (int64_t i = 0; i < got; i++)
        if (engine_notes(dn, cfgs[i], &cand[nc].engine, &cand[nc].notes,
                         &cand[nc].runtime_compiled))
            usable[nc++] = cfgs[i];
    const RtCudaConfig *c = &dn->cx->cfg;
    const AmpcTunePolicy policy = {{(AmpcFp32Mode)c->fp32, c->nondeterministic},
                                   c->autotune,
                                   c->autotune_max > 0 ? c->autotune_max : AMPC_TUNE_MAX_DEFAULT,
                                   c->runtime_compiled,
                                   c->workspace_limit};
    const AmpcTuneEntry *hit = dn->plans ? ampc_planfile_find(dn->plans, key, &dn->env) : NULL;
    if (hit && hit->mode != mode)
        hit = NULL;
    Tuning t = {dn, usable, plans, g, dt, stats};
    const AmpcTuneOps ops = {tune_build, tune_time, tune_drop};
    AmpcTuneResult r;
    ampc_tune_choose(cand, nc, dt, &policy, &ops, &t, hit ? (int)hit->candidate : -1,
                     hit ? hit->engine : -1, &r);
    p->proposed += r.proposed, p->refused += r.refused, p->refused_notes |= r.refused_notes;
    dn->timed += r.timed, dn->from_file += r.cached;
    if (r.chosen >= 0) {
        p->plan = plans[r.chosen], p->ws = r.ws, p->engine = cand[r.chosen].engine;
        p->notes = cand[r.chosen].notes;
        AmpcTuneEntry e = {*key, dn->env, mode, r.chosen, p->engine};
        if (dn->plans && !r.cached && c->autotune && !ampc_planfile_add(dn->plans, &e)) {
            fprintf(stderr, "ampc: out of memory noting a cuDNN plan\n");
            exit(1);
        }
    }
    for (int64_t i = 0; i < n; i++)
        drop(dn, cfgs[i]);
    drop(dn, heur);
    /* a candidate refused above may have left a CUDA error behind: not
     * for the next custom kernel's launch check to report as its own */
    (void)cudaGetLastError();
}

/* cx's cuDNN, for a call that runs a plan */
static Dnn *dnn_of(RtCudaCtx *cx)
{
    rt_cuda_need_init(cx, "cuDNN convolution");
    if (!cx->dnn) {
        fprintf(stderr, "ampc: cuDNN convolution: the context has no cuDNN (rt_cuda_open)\n");
        exit(1);
    }
    return cx->dnn;
}

static const char *node_name(const char *node) { return node ? node : "(unnamed)"; }

/* the plan-cache key of a convolution's variant: accumulating, or a forward
 * generating y's statistics too (in the last slot, which ampc_conv_key
 * leaves 0) */
static void variant_key(const RtConvDims *d, RtDType dt, RtPass pass, bool acc, bool stats,
                        AmpcPlanKey *key)
{
    ampc_conv_key(d, dt, pass, key);
    key->v[AMPC_KEY_LEN - 1] = (int64_t)acc | (int64_t)stats << 1;
}

static const char *variant_name(RtPass pass, bool stats)
{
    return stats ? "forward (with statistics)" : pass_name(pass);
}

/* the cached plan of a shape, chosen now when it is new */
/* a plan that cannot be made: a stop naming the node, or with why (a probe)
 * the message there and NULL */
static ConvPlan *no_plan(ConvPlan *p, char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ConvPlan *no_plan(ConvPlan *p, char *why, size_t whylen, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    free(p);
    if (!why) {
        fprintf(stderr, "ampc: %s\n", msg);
        exit(1);
    }
    snprintf(why, whylen, "%s", msg);
    return NULL;
}

/* the cached plan of a shape, chosen now when it is new; why: NULL (a
 * failure stops the program) or where a probe's failure is told */
static ConvPlan *conv_plan_of(Dnn *dn, const RtConvDims *d, RtDType dt, RtPass pass, bool acc,
                              bool stats, char *why, size_t whylen)
{
    AmpcPlanKey key;
    variant_key(d, dt, pass, acc, stats, &key);
    ConvPlan *p = ampc_cache_get(&dn->cache, &key);
    if (p)
        return p;
    p = calloc(1, sizeof *p);
    char err[256];
    if (!p || !ampc_conv_geom(d, dt, pass, &p->g, err, sizeof err))
        return no_plan(p, why, whylen, "node '%s': %s", node_name(d->node),
                       p ? err : "out of memory");
    RtConvDims n = *d;
    rt_conv_dims_init(&n);
    p->xrows = n.n, p->wrows = n.k, p->yinner = 1;
    for (int i = 0; i < n.nsp; i++)
        p->xrows *= n.in[i], p->wrows *= n.kernel[i], p->yinner *= n.out[i];
    p->xbytes = p->g.pad_bytes ? ampc_padded_bytes(p->xrows, p->g.c, dt) : 0;

    ConvGraph cg;
    if (!conv_graph(dn, &p->g, dt, pass, acc, stats, &cg))
        return no_plan(p, why, whylen, "node '%s': the %s convolution's cuDNN graph: %s",
                       node_name(d->node), variant_name(pass, stats), ampc_api_last_error());
    Pick a = {0}, fb = {0};
    pick(dn, cg.graph, 0, &p->g, dt, stats, &key, &a);
    if (!a.plan) /* none left: the fallback list, then a stop naming the node */
        pick(dn, cg.graph, 1, &p->g, dt, stats, &key, &fb);
    conv_graph_drop(dn, &cg);
    Pick *got = a.plan ? &a : &fb;
    if (!got->plan) {
        char notes[160];
        return no_plan(
            p, why, whylen,
            "node '%s': cuDNN has no engine for the %s convolution (n %d, c %d, k %d, "
            "groups %d, %d-D, %s) within the workspace limit of %zu bytes: %d candidates "
            "proposed, %d refused by the engine rule (%s; --cudnn-fp32=%s%s)%s%s",
            node_name(d->node), variant_name(pass, stats), d->n, d->c, d->k, d->groups, d->nsp,
            rt_dtype_name(dt), dn->cx->cfg.workspace_limit, a.proposed + fb.proposed,
            a.refused + fb.refused,
            ampc_note_names(a.refused_notes | fb.refused_notes, notes, sizeof notes),
            ampc_fp32_mode_name((AmpcFp32Mode)dn->cx->cfg.fp32),
            dn->cx->cfg.nondeterministic ? ", --cudnn-nondeterministic" : "",
            ampc_api_last_error()[0] ? "; last error: " : "", ampc_api_last_error());
    }
    p->plan = got->plan, p->ws = got->ws, p->engine = got->engine, p->notes = got->notes;
    if (!ampc_cache_put(&dn->cache, &key, p)) {
        fprintf(stderr, "ampc: out of memory caching a cuDNN plan\n");
        exit(1);
    }
    return p;
}

static ConvPlan *conv_plan(Dnn *dn, const RtConvDims *d, RtDType dt, RtPass pass, bool acc)
{
    return conv_plan_of(dn, d, dt, pass, acc, false, NULL, 0);
}

/* ---- the offline check (--cudnn-check: no GPU, no handle) -------------------------- */

/* One distinct convolution checked: the first node that asked for it. */
struct ConvCheck {
    char node[96], what[224];
    int64_t cand_a, cand_fallback; /* the heuristics' proposals, -1: the query failed */
    bool ok;
    char err[384];
};

static void check_describe(const AmpcConvGeom *g, RtDType dt, RtPass pass, bool acc, bool stats,
                           char *out, size_t len)
{
    const AmpcTensorDesc *t[3] = {&g->x, &g->w, &g->y};
    int at = snprintf(out, len, "%s%s %s %s", variant_name(pass, stats), acc ? " (accumulate)" : "",
                      rt_dtype_name(dt), g->layout == AMPC_NHWC ? "nhwc" : "nchw");
    for (int k = 0; k < 3 && at > 0 && (size_t)at < len; k++) {
        at += snprintf(out + at, len - (size_t)at, " %c[", "xwy"[k]);
        for (int i = 0; i < t[k]->nd && (size_t)at < len; i++)
            at += snprintf(out + at, len - (size_t)at, "%s%lld", i ? "," : "",
                           (long long)t[k]->dims[i]);
        if ((size_t)at < len)
            at += snprintf(out + at, len - (size_t)at, "]");
    }
    for (int i = 0; i < g->nsp && at > 0 && (size_t)at < len; i++)
        at += snprintf(out + at, len - (size_t)at, "%s%lld/%lld/%lld", i ? "," : " stride/pad/dil ",
                       (long long)g->stride[i], (long long)g->pad[i], (long long)g->dilate[i]);
}

static bool check_geom(RtCudaCtx *cx, const char *node, const AmpcConvGeom *g, RtDType dt,
                       RtPass pass, bool acc, bool stats, int64_t candidates[2], char *err,
                       size_t errlen)
{
    candidates[0] = candidates[1] = -1;
    Dnn *dn = cx ? cx->dnn : NULL;
    if (!dn) {
        snprintf(err, errlen, "node '%s': cuDNN is not open", node_name(node));
        return false;
    }
    const AmpcTensorDesc *t[4] = {&g->x, &g->w, &g->y, &g->stats};
    static const char *const names[4] = {"x", "w", "y", "statistics"};
    char why[256];
    for (int k = 0; k < (stats ? 4 : 3); k++)
        if (!(k < 3 ? ampc_desc_check(t[k], g->layout, why, sizeof why)
                    : ampc_stats_check(g, why, sizeof why))) {
            snprintf(err, errlen, "node '%s': the %s convolution's %s: %s", node_name(node),
                     variant_name(pass, stats), names[k], why);
            return false;
        }
    ConvGraph cg;
    if (!conv_graph(dn, g, dt, pass, acc, stats, &cg)) {
        snprintf(err, errlen, "node '%s': the %s convolution's cuDNN graph is refused: %s",
                 node_name(node), variant_name(pass, stats), ampc_api_last_error());
        return false;
    }
    candidates[0] = heuristic_count(dn, cg.graph, CUDNN_HEUR_MODE_A);
    candidates[1] = heuristic_count(dn, cg.graph, CUDNN_HEUR_MODE_FALLBACK);
    conv_graph_drop(dn, &cg);
    if (candidates[0] < 1 && candidates[1] < 1) {
        snprintf(err, errlen,
                 "node '%s': cuDNN's heuristics propose no engine for the %s "
                 "convolution%s%s",
                 node_name(node), variant_name(pass, stats), ampc_api_last_error()[0] ? ": " : "",
                 ampc_api_last_error());
        return false;
    }
    return true;
}

bool rt_cuda_dnn_check_geom(RtCudaCtx *cx, const char *node, const AmpcConvGeom *g, RtDType dt,
                            RtPass pass, bool acc, int64_t candidates[2], char *err, size_t errlen)
{
    return check_geom(cx, node, g, dt, pass, acc, false, candidates, err, errlen);
}

bool rt_cuda_dnn_check_stats_geom(RtCudaCtx *cx, const char *node, const AmpcConvGeom *g,
                                  RtDType dt, int64_t candidates[2], char *err, size_t errlen)
{
    return check_geom(cx, node, g, dt, RT_PASS_FORWARD, false, true, candidates, err, errlen);
}

/* the sizer's job in the offline check: each distinct convolution once */
static void check_conv(Dnn *dn, const RtConvDims *d, RtDType dt, RtPass pass, bool acc, bool stats)
{
    AmpcPlanKey key;
    variant_key(d, dt, pass, acc, stats, &key);
    if (ampc_cache_get(&dn->cache, &key))
        return;
    ConvCheck *c = calloc(1, sizeof *c);
    if (dn->nchecks == dn->checks_cap) {
        size_t cap = dn->checks_cap ? 2 * dn->checks_cap : 64;
        ConvCheck **grown = realloc(dn->checks, cap * sizeof *grown);
        if (grown)
            dn->checks = grown, dn->checks_cap = cap;
    }
    if (!c || dn->nchecks == dn->checks_cap) {
        fprintf(stderr, "ampc: out of memory in the cuDNN check\n");
        exit(1);
    }
    snprintf(c->node, sizeof c->node, "%s", node_name(d->node));
    AmpcConvGeom g;
    int64_t cand[2] = {-1, -1};
    char why[256];
    c->ok = ampc_conv_geom(d, dt, pass, &g, why, sizeof why);
    if (c->ok) {
        check_describe(&g, dt, pass, acc, stats, c->what, sizeof c->what);
        c->ok = check_geom(dn->cx, d->node, &g, dt, pass, acc, stats, cand, c->err, sizeof c->err);
    } else {
        snprintf(c->what, sizeof c->what, "%s %s", variant_name(pass, stats), rt_dtype_name(dt));
        snprintf(c->err, sizeof c->err, "node '%s': %s", c->node, why);
    }
    c->cand_a = cand[0], c->cand_fallback = cand[1];
    dn->checks[dn->nchecks++] = c;
    if (!ampc_cache_put(&dn->cache, &key, c)) {
        fprintf(stderr, "ampc: out of memory in the cuDNN check\n");
        exit(1);
    }
}

int rt_cuda_dnn_check_report(RtCudaCtx *cx, FILE *out, FILE *err)
{
    const Dnn *dn = cx->dnn;
    int bad = 0;
    for (size_t i = 0; dn && i < dn->nchecks; i++) {
        const ConvCheck *c = dn->checks[i];
        if (!c->ok) {
            fprintf(err, "cudnn-check: FAIL: %s\n", c->err);
            bad++;
            continue;
        }
        fprintf(out, "cudnn-check: conv %s: %s: graph finalized; heuristic proposes %lld (mode A), "
                "%lld (fallback)\n", c->node, c->what, (long long)c->cand_a,
                (long long)c->cand_fallback);
    }
    return bad;
}

size_t rt_cuda_dnn_check_count(RtCudaCtx *cx) { return cx->dnn ? cx->dnn->nchecks : 0; }

/* ---- the contract ------------------------------------------------------------------------ */

size_t rt_cuda_conv_workspace_bytes(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, RtPass pass)
{
    Dnn *dn = cx->dnn;
    if (cx->offline && dn) {
        check_conv(dn, d, dt, pass, false, false);
        RtConvDims n = *d;
        AmpcConvGeom g;
        char e[64];
        /* the sizer plans the accumulating variant where no padding intervenes */
        if (pass != RT_PASS_FORWARD && rt_conv_dims_init(&n) &&
            ampc_conv_geom(&n, dt, pass, &g, e, sizeof e) && !g.pad_bytes)
            check_conv(dn, d, dt, pass, true, false);
        return 0;
    }
    dn = dnn_of(cx);
    ConvPlan *a = conv_plan(dn, d, dt, pass, false);
    size_t ws = a->ws;
    if (pass != RT_PASS_FORWARD && !a->g.pad_bytes) {
        ConvPlan *b = conv_plan(dn, d, dt, pass, true); /* the accumulating variant */
        ws = b->ws > ws ? b->ws : ws;
    }
    return a->g.pad_bytes + ws;
}

static ConvPlan *cached_plan(Dnn *dn, const RtConvDims *d, RtDType dt, RtPass pass, bool accumulate)
{
    AmpcPlanKey key;
    variant_key(d, dt, pass, accumulate, false, &key);
    return dn && !dn->cx->offline ? ampc_cache_get(&dn->cache, &key) : NULL;
}

long rt_cuda_conv_engine(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, RtPass pass,
                         bool accumulate)
{
    ConvPlan *p = cached_plan(cx->dnn, d, dt, pass, accumulate);
    return p ? (long)p->engine : -1;
}

long rt_cuda_conv_notes(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, RtPass pass,
                        bool accumulate)
{
    ConvPlan *p = cached_plan(cx->dnn, d, dt, pass, accumulate);
    return p ? (long)p->notes : -1;
}

static int idt(RtDType dt) { return (int)dt; }

/* the bias as the layout stores y: NCHW [n, k, out], NHWC [n*out, k, 1] */
static void bias_shape(const ConvPlan *p, const RtConvDims *d, size_t *outer, size_t *inner)
{
    bool last = p->g.layout == AMPC_NHWC;
    *outer = last ? (size_t)d->n * (size_t)p->yinner : (size_t)d->n;
    *inner = last ? 1 : (size_t)p->yinner;
}

/* the forward's x and w: the channel-padded copies at the front of ws when
 * the plan pads */
static void forward_inputs(RtCudaCtx *cx, const ConvPlan *p, const RtConvDims *d, RtDType dt,
                           const void **x, const void **w, char *pad)
{
    if (!p->g.pad_bytes)
        return;
    AMPC_CHECK(AMPC_API_CUDA,
               ampc_cu_pad_channels(cx->stream, (size_t)p->xrows, d->c, p->g.c, idt(dt), *x, pad));
    AMPC_CHECK(AMPC_API_CUDA, ampc_cu_pad_channels(cx->stream, (size_t)p->wrows, d->c, p->g.c,
                                                   idt(dt), *w, pad + p->xbytes));
    *x = pad, *w = pad + p->xbytes;
}

void rt_cuda_conv_forward(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, const void *x,
                          const void *w, const void *bias, void *y, void *ws)
{
    Dnn *dn = dnn_of(cx);
    ConvPlan *p = conv_plan(dn, d, dt, RT_PASS_FORWARD, false);
    char *pad = ws;
    forward_inputs(cx, p, d, dt, &x, &w, pad);
    execute(dn, p, x, w, y, pad + p->g.pad_bytes);
    if (bias) {
        size_t outer, inner;
        bias_shape(p, d, &outer, &inner);
        AMPC_CHECK(AMPC_API_CUDA,
                   ampc_cu_bias_add(cx->stream, outer, d->k, inner, idt(dt), y, bias));
    }
}

/* ---- the convolution with its statistics (--fuse=conv_bn_stats: docs/backend-cuda.md) ---- */

size_t rt_cuda_conv_stats_workspace_bytes(RtCudaCtx *cx, const RtConvDims *d, RtDType dt)
{
    Dnn *dn = cx->dnn;
    if (cx->offline && dn) {
        check_conv(dn, d, dt, RT_PASS_FORWARD, false, true);
        return 0;
    }
    /* a program's sizers run at set-up, before its first step: a device
     * whose cuDNN has no engine for the graph stops the program here,
     * naming the node, not in a step */
    char why[1024];
    if (!rt_cuda_conv_stats_probe(cx, d, dt, why, sizeof why)) {
        fprintf(stderr,
                "ampc: %s\nampc: this program was built with --fuse=conv_bn_stats (the "
                "convolution writing BatchNorm's statistics), which this device's cuDNN cannot "
                "run: build it again without that flag\n",
                why);
        exit(1);
    }
    ConvPlan *p = conv_plan_of(dnn_of(cx), d, dt, RT_PASS_FORWARD, false, true, NULL, 0);
    return p->g.pad_bytes + p->ws;
}

bool rt_cuda_conv_stats_probe(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, char *err,
                              size_t errlen)
{
    if (!cx->dnn || cx->offline) {
        snprintf(err, errlen, "node '%s': %s", node_name(d->node),
                 cx->offline ? "cuDNN is open for the offline check only" : "cuDNN is not open");
        return false;
    }
    return conv_plan_of(cx->dnn, d, dt, RT_PASS_FORWARD, false, true, err, errlen) != NULL;
}

void rt_cuda_conv_forward_stats(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, const void *x,
                                const void *w, void *y, float *stats, void *ws)
{
    Dnn *dn = dnn_of(cx);
    ConvPlan *p = conv_plan_of(dn, d, dt, RT_PASS_FORWARD, false, true, NULL, 0);
    char *pad = ws;
    forward_inputs(cx, p, d, dt, &x, &w, pad);
    execute_stats(dn, p, x, w, y, stats, pad + p->g.pad_bytes);
}

void rt_cuda_conv_backward_data(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, const void *w,
                                const void *dy, void *dx, bool accumulate, void *ws)
{
    Dnn *dn = dnn_of(cx);
    ConvPlan *p = conv_plan(dn, d, dt, RT_PASS_BACKWARD, false);
    char *pad = ws;
    if (!p->g.pad_bytes) {
        if (accumulate)
            p = conv_plan(dn, d, dt, RT_PASS_BACKWARD, true);
        execute(dn, p, dx, w, dy, pad);
        return;
    }
    /* padded: dx of cp channels into the x region, then its first c channels */
    AMPC_CHECK(AMPC_API_CUDA, ampc_cu_pad_channels(cx->stream, (size_t)p->wrows, d->c, p->g.c,
                                                   idt(dt), w, pad + p->xbytes));
    execute(dn, p, pad, pad + p->xbytes, dy, pad + p->g.pad_bytes);
    AMPC_CHECK(AMPC_API_CUDA, ampc_cu_unpad_channels(cx->stream, (size_t)p->xrows, d->c, p->g.c,
                                                     idt(dt), pad, dx, accumulate));
}

void rt_cuda_conv_backward_weight(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, const void *x,
                                  const void *dy, void *dw, void *dbias, bool accumulate, void *ws)
{
    Dnn *dn = dnn_of(cx);
    ConvPlan *p = conv_plan(dn, d, dt, RT_PASS_BACKWARD_WEIGHT, false);
    char *pad = ws;
    if (!p->g.pad_bytes) {
        if (accumulate)
            p = conv_plan(dn, d, dt, RT_PASS_BACKWARD_WEIGHT, true);
        execute(dn, p, x, dw, dy, pad);
    } else {
        AMPC_CHECK(AMPC_API_CUDA, ampc_cu_pad_channels(cx->stream, (size_t)p->xrows, d->c, p->g.c,
                                                       idt(dt), x, pad));
        execute(dn, p, pad, pad + p->xbytes, dy, pad + p->g.pad_bytes);
        AMPC_CHECK(AMPC_API_CUDA, ampc_cu_unpad_channels(cx->stream, (size_t)p->wrows, d->c, p->g.c,
                                                         idt(dt), pad + p->xbytes, dw, accumulate));
    }
    if (dbias) {
        size_t outer, inner;
        bias_shape(p, d, &outer, &inner);
        AMPC_CHECK(AMPC_API_CUDA, ampc_cu_bias_grad(cx->stream, outer, d->k, inner, idt(dt), dy,
                                                    dbias, accumulate));
    }
}

/* ---- set-up ---------------------------------------------------------------------------- */

#define LOAD(f)                                                                                    \
    do {                                                                                           \
        *(void **)&dn->F.f = dlsym(h, "cudnn" #f);                                                 \
        if (!dn->F.f) {                                                                            \
            snprintf(err, errlen, "%s (%s) has no cudnn" #f, ampc_lib_soname(AMPC_LIB_CUDNN),      \
                     ampc_lib_where(AMPC_LIB_CUDNN));                                              \
            return false;                                                                          \
        }                                                                                          \
    } while (0)
#define LOADB(f)                                                                                   \
    do {                                                                                           \
        *(void **)&dn->F.f = dlsym(h, "cudnnBackend" #f);                                          \
        if (!dn->F.f) {                                                                            \
            snprintf(err, errlen, "%s (%s) has no cudnnBackend" #f,                                \
                     ampc_lib_soname(AMPC_LIB_CUDNN), ampc_lib_where(AMPC_LIB_CUDNN));             \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

/* cuDNN's functions, found by name in the library libs.c opens */
static bool load(Dnn *dn, char *err, size_t errlen)
{
    void *h = ampc_lib_open(AMPC_LIB_CUDNN, err, errlen);
    if (!h)
        return false;
    LOAD(GetVersion);
    LOAD(Create);
    LOAD(Destroy);
    LOAD(SetStream);
    LOADB(CreateDescriptor);
    LOADB(DestroyDescriptor);
    LOADB(SetAttribute);
    LOADB(GetAttribute);
    LOADB(Finalize);
    LOADB(Execute);
    if (dn->F.GetVersion() < 90000) {
        snprintf(err, errlen, "%s (%s) is cuDNN %zu; the graph API here needs 9.0 or later",
                 ampc_lib_soname(AMPC_LIB_CUDNN), ampc_lib_where(AMPC_LIB_CUDNN),
                 dn->F.GetVersion());
        return false;
    }
    return true;
}

/* What a plan chosen here is valid for (tune.h's AmpcTuneEnv), and the
 * plan cache file when --cudnn-plan-cache names one: a file not of ours is
 * refused (never overwritten); a damaged one of ours a warning */
static bool plans_open(Dnn *dn, char *err, size_t errlen)
{
    const RtCudaConfig *c = &dn->cx->cfg;
    int dev = 0, major = 0, minor = 0, sms = 0, rtv = 0;
    AMPC_CHECK(AMPC_API_CUDA, cudaGetDevice(&dev));
    AMPC_CHECK(AMPC_API_CUDA,
               cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    AMPC_CHECK(AMPC_API_CUDA,
               cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    AMPC_CHECK(AMPC_API_CUDA, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    AMPC_CHECK(AMPC_API_CUDA, cudaRuntimeGetVersion(&rtv));
    dn->env = (AmpcTuneEnv){major,
                            minor,
                            sms,
                            (int64_t)dn->F.GetVersion(),
                            rtv,
                            c->fp32,
                            c->nondeterministic,
                            c->runtime_compiled,
                            (int64_t)c->workspace_limit,
                            RT_WS_ALIGN,
                            (int64_t)ampc_planfile_hash(
                                RT_RUNTIME_VERSION, sizeof RT_RUNTIME_VERSION - 1, AMPC_FNV_START)};
    if (!c->plan_cache)
        return true;
    char warn[640];
    if (!(dn->plans = calloc(1, sizeof *dn->plans)) ||
        !ampc_planfile_open(dn->plans, c->plan_cache, warn, sizeof warn, err, errlen)) {
        if (!dn->plans)
            snprintf(err, errlen, "cuDNN: out of host memory");
        free(dn->plans);
        dn->plans = NULL;
        return false;
    }
    if (warn[0])
        fprintf(stderr, "ampc: warning: %s\n", warn);
    return true;
}

/* cuDNN's part of cx (its functions, and a handle on cx's stream unless
 * offline); false with a message */
static bool dnn_open(RtCudaCtx *cx, bool offline, char *err, size_t errlen)
{
    Dnn *dn = calloc(1, sizeof *dn);
    if (!dn) {
        snprintf(err, errlen, "cuDNN: out of host memory");
        return false;
    }
    dn->cx = cx;
    if (!load(dn, err, errlen)) {
        free(dn);
        return false;
    }
    if (!offline && (!AMPC_TRY(AMPC_API_CUDNN, dn->F.Create(&dn->handle)) ||
                     !AMPC_TRY(AMPC_API_CUDNN, dn->F.SetStream(dn->handle, cx->stream)))) {
        snprintf(err, errlen, "%s", ampc_api_last_error());
        if (dn->handle)
            AMPC_CHECK(AMPC_API_CUDNN, dn->F.Destroy(dn->handle));
        free(dn);
        return false;
    }
    if (!offline && !plans_open(dn, err, errlen)) {
        AMPC_CHECK(AMPC_API_CUDNN, dn->F.Destroy(dn->handle));
        free(dn);
        return false;
    }
    cx->dnn = dn;
    return true;
}

bool rt_cuda_dnn_init(RtCudaCtx *cx, char *err, size_t errlen)
{
    return dnn_open(cx, false, err, errlen);
}

bool rt_cuda_dnn_check_open(RtCudaCtx *cx, char *err, size_t errlen)
{
    return dnn_open(cx, true, err, errlen);
}

void rt_cuda_dnn_tune_counts(RtCudaCtx *cx, long *timed, long *from_file)
{
    *timed = cx->dnn ? cx->dnn->timed : 0;
    *from_file = cx->dnn ? cx->dnn->from_file : 0;
}

size_t rt_cuda_dnn_version(RtCudaCtx *cx)
{
    return cx->dnn && cx->dnn->F.GetVersion ? cx->dnn->F.GetVersion() : 0;
}

void rt_cuda_dnn_shutdown(RtCudaCtx *cx)
{
    Dnn *dn = cx->dnn;
    if (!dn)
        return;
    ampc_cache_free(&dn->cache, cx->offline ? check_free : plan_free, dn);
    free(dn->checks);
    if (dn->plans) { /* what this run chose, for the next start */
        char err[640];
        if (!ampc_planfile_save(dn->plans, err, sizeof err))
            fprintf(stderr, "ampc: warning: %s\n", err);
        ampc_planfile_free(dn->plans);
        free(dn->plans);
    }
    if (dn->handle)
        AMPC_CHECK(AMPC_API_CUDA, cudaStreamSynchronize(cx->stream));
    for (int i = 0; i < 5; i++)
        if (dn->scratch[i])
            AMPC_CHECK(AMPC_API_CUDA, cudaFree(dn->scratch[i]));
    if (dn->handle)
        AMPC_CHECK(AMPC_API_CUDNN, dn->F.Destroy(dn->handle));
    free(dn);
    cx->dnn = NULL;
}
