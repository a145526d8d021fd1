/*
 * plan.h - the host-side logic of the cuDNN and cuBLASLt calls
 * (runtime/cuda/conv.c, fc.c, pool.c), kept free of every CUDA header so that it
 * compiles with any C compiler and is unit-tested everywhere
 * (tests/runtime/test_cuda_plan.c), GPU or not:
 *
 *   - the layout a convolution runs in: its dims' layout field (rt.h's
 *     RtConvDims.layout, which the schedule sets: NHWC for fp16 and bf16,
 *     as tensor cores want channels innermost), with a small input
 *     channel count (the 3 of an RGB image) padded to 4 or 8 in NHWC;
 *   - the cuDNN tensor descriptors (dims and strides) of x, w and y from
 *     RtConvDims in that layout, and the convolution descriptor's
 *     per-axis attributes (1-D convolutions become 2-D with a unit axis);
 *   - the key that caches the execution plan chosen for a shape: the dims
 *     struct, dtype, layout and pass, as a flat array of int64s;
 *   - a small cache from such keys to plans;
 *   - the cuBLASLt matrix layouts of FullyConnected's three GEMMs from
 *     RtFcDims (column-major views of row-major tensors).
 *
 * Tensors a CUDA convolution reads and writes are in its dims' layout:
 * NCHW, or NHWC (x, y) and KRSC (w: [k, kernel..., c/groups]), always
 * with the caller's channel count; the padding to 4 or 8 channels happens
 * inside, through the workspace.  Never chosen by the dtype.
 */
#ifndef AMPC_CUDA_PLAN_H
#define AMPC_CUDA_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/pool_geom.h"
#include "rt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { AMPC_NCHW, AMPC_NHWC } AmpcLayout;

/* the layout the schedule gives a convolution of dtype dt (NHWC for 16-bit);
 * the kernels follow the dims' own layout field (ampc_dims_layout), never
 * the dtype */
AmpcLayout ampc_conv_layout(RtDType dt);
/* RtConvDims.layout / RtPoolDims.layout as the plan's layout */
AmpcLayout ampc_dims_layout(RtLayout l);
/* the channel count cuDNN sees for an input of c channels: c, or 4 / 8
 * for 1..4 / 5..7 channels in NHWC without groups */
int ampc_conv_padded_c(const RtConvDims *d, AmpcLayout lay);

#define AMPC_DESC_MAX_DIMS 5 /* n, c and at most 3 spatial axes */

/* one cuDNN tensor: dims in cuDNN's order (n, c, spatial...) whatever the
 * memory layout, strides in elements describing that layout */
typedef struct {
    int nd;
    int64_t dims[AMPC_DESC_MAX_DIMS], strides[AMPC_DESC_MAX_DIMS];
} AmpcTensorDesc;

/* everything the cuDNN graph needs for one convolution */
typedef struct AmpcConvGeom {
    AmpcLayout layout;
    int c;     /* channels as cuDNN sees them (padded) */
    int nsp;   /* spatial axes as cuDNN sees them: 2 or 3 */
    AmpcTensorDesc x, w, y;
    /* y's per-channel statistics as a fused generation of statistics writes
     * them (rt_cuda_conv_forward_stats): [1, k, 1...] fp32, packed in the
     * layout, one for the sum and one for the sum of squares */
    AmpcTensorDesc stats;
    int64_t pad[3], stride[3], dilate[3];
    /* padding buffers carved from the front of the workspace (0: none):
     * the padded x (forward, backward-filter), w (forward, backward-data),
     * dx (backward-data) or dw (backward-filter), in bytes */
    size_t pad_bytes;
} AmpcConvGeom;

/* false (and a message) when the dims are invalid or a size overflows */
bool ampc_conv_geom(const RtConvDims *d, RtDType dt, RtPass pass, AmpcConvGeom *g, char *err,
                    size_t errlen);

/* false with a message unless t's strides are the packed strides of its
 * dims in layout lay (what the kernels and the memory plan assume; cuDNN
 * itself accepts overlapping strides such as a 0) */
bool ampc_desc_check(const AmpcTensorDesc *t, AmpcLayout lay, char *err, size_t errlen);

/* false with a message unless g->stats is what a generation of y's
 * statistics writes: [1, k, 1...] of y's rank, k y's channels, packed in
 * g->layout.  cuDNN's own finalize and heuristics accept any dims there
 * without a GPU (cuda_dnn_offline shows it), so the offline check asks this. */
bool ampc_stats_check(const AmpcConvGeom *g, char *err, size_t errlen);

/* the plan-cache key: dims, dtype, layout, pass, one int64 each */
#define AMPC_KEY_LEN 24
typedef struct {
    int64_t v[AMPC_KEY_LEN];
} AmpcPlanKey;

void ampc_conv_key(const RtConvDims *d, RtDType dt, RtPass pass, AmpcPlanKey *k);
/* FullyConnected's key (for cuBLASLt's chosen algorithm) */
void ampc_fc_key(const RtFcDims *d, RtDType dt, RtPass pass, AmpcPlanKey *k);
bool ampc_key_equal(const AmpcPlanKey *a, const AmpcPlanKey *b);
uint64_t ampc_key_hash(const AmpcPlanKey *k);

/* a cache from keys to caller-owned values (chained hash table, grows) */
typedef struct AmpcPlanEntry AmpcPlanEntry;
typedef struct {
    AmpcPlanEntry **bucket;
    size_t nbucket, count;
} AmpcPlanCache;

void *ampc_cache_get(const AmpcPlanCache *c, const AmpcPlanKey *k);
/* false on allocation failure; the key must not be in the cache yet */
bool ampc_cache_put(AmpcPlanCache *c, const AmpcPlanKey *k, void *value);
/* calls drop(ctx, value) for each entry (drop may be NULL), frees the table */
void ampc_cache_free(AmpcPlanCache *c, void (*drop)(void *ctx, void *value), void *ctx);

/* ---- FullyConnected as one column-major GEMM: D[m,n] = op(A) op(B) ------ */

typedef enum { AMPC_OP_X, AMPC_OP_W, AMPC_OP_DY } AmpcFcOperand;

typedef struct AmpcGemm {
    int64_t m, n, k;
    bool transa, transb;       /* op(A) = A^T when transa */
    int64_t rowsa, colsa, lda; /* A as stored: a column-major rowsa x colsa matrix */
    int64_t rowsb, colsb, ldb;
    int64_t ldd;               /* D: m x n, column-major */
    AmpcFcOperand a, b;        /* which tensor is A and which B */
} AmpcGemm;

/* the GEMM of a pass (forward: y; backward: dx; backward-weight: dw) */
bool ampc_fc_gemm(const RtFcDims *d, RtPass pass, AmpcGemm *g, char *err, size_t errlen);
/* false with a message unless g is one consistent GEMM: op(A) is m x k and
 * op(B) k x n as stored, every leading dimension covers its rows, sizes
 * positive and within cuBLASLt's int32 leading dimensions (what a wrong
 * stride or a swapped operand breaks; cuBLASLt's descriptors take it all) */
bool ampc_gemm_check(const AmpcGemm *g, char *err, size_t errlen);

/* ---- Pooling ------------------------------------------------------------------ */

/* the kernels' geometry (pool_geom.h) from dims that rt_pool_dims_init
 * accepted, in the layout (NCHW or NHWC); false and a message otherwise */
bool ampc_pool_geom(const RtPoolDims *d, AmpcLayout lay, AmpcPoolGeom *g, char *err,
                    size_t errlen);

/* ---- which cuDNN engines a convolution may run on ---------------------------- */

/* What fp32 convolutions may trade for speed (--cudnn-fp32): exact (the
 * default) refuses engines on tensor cores (TF32 on sm_80 and later), FFT and
 * Winograd, so an fp32 GPU program matches the CPU's within fp32 rounding;
 * tf32 allows tensor cores (PyTorch's allow_tf32, MXNet's
 * MXNET_CUDA_ALLOW_TENSOR_CORE_CONVERSION); fast allows all three. */
typedef enum { AMPC_FP32_EXACT, AMPC_FP32_TF32, AMPC_FP32_FAST } AmpcFp32Mode;

/* cuDNN's numerical notes of an engine, as bits (conv.c maps
 * cudnnBackendNumericalNote_t onto them; the Winograd tile notes are
 * AMPC_NOTE_WINOGRAD) */
enum {
    AMPC_NOTE_TENSOR_CORE = 1u << 0,
    AMPC_NOTE_DOWN_CONVERT = 1u << 1,      /* inputs converted to a narrower type */
    AMPC_NOTE_REDUCED_REDUCTION = 1u << 2, /* accumulates below fp32 */
    AMPC_NOTE_FFT = 1u << 3,
    AMPC_NOTE_NONDETERMINISTIC = 1u << 4,  /* results may change run to run */
    AMPC_NOTE_WINOGRAD = 1u << 5,
    AMPC_NOTE_STRICT_NAN = 1u << 6,        /* informative: never refused */
};

typedef struct {
    AmpcFp32Mode fp32;
    bool nondeterministic; /* --cudnn-nondeterministic: such engines allowed */
} AmpcEnginePolicy;

/* The notes that make an engine with `notes` unfit for a convolution of dt
 * under p (0: it may run).  Every dtype: down-converted inputs (as PyTorch's
 * filter) and, unless p allows them, nondeterministic engines; reduced-
 * precision reductions unless fp32 is fast (the CPU twins accumulate in
 * fp32).  fp32 also: tensor cores unless tf32 or fast, FFT and Winograd
 * unless fast. */
unsigned ampc_engine_refusal(unsigned notes, RtDType dt, const AmpcEnginePolicy *p);
/* the notes as words ("tensor_core,fft"; "none"), into buf */
const char *ampc_note_names(unsigned notes, char *buf, size_t len);
/* "exact", "tf32", "fast" -> mode; false for anything else */
bool ampc_fp32_mode_parse(const char *s, AmpcFp32Mode *mode);
const char *ampc_fp32_mode_name(AmpcFp32Mode mode);

/* ---- the channel padding, as index arithmetic (for the kernels and tests) */

/* bytes of a padded copy of m rows of cp channels of dt, 0 on overflow */
size_t ampc_padded_bytes(int64_t rows, int cp, RtDType dt);

#ifdef __cplusplus
}
#endif

#endif /* AMPC_CUDA_PLAN_H */
