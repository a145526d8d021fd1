/* rt.h - the ampc runtime: everything an emitted program calls.
 *
 * The code generator turns a scheduled graph into a straight list of calls
 * to the kernels below; the memory planner owns every buffer, so no kernel
 * allocates on the hot path.  Kernels that need scratch take a caller-owned
 * workspace `ws` of at least rt_<op>_workspace_bytes(...) bytes, aligned to
 * RT_WS_ALIGN (NULL is fine when the query returns 0).
 *
 * Conventions shared by every kernel (docs/backend-cpu.md says why):
 *   - Layout NCHW (generally: batch, channels, spatial...), row-major,
 *     contiguous.  Dimensions are passed explicitly (a small struct per op
 *     family); tensors as `const void *` / `void *` plus an RtDType.
 *   - Storage dtypes fp32, fp16 and bf16; arithmetic is always fp32, as on
 *     a GPU: 16-bit inputs are widened exactly, 16-bit outputs rounded once,
 *     to nearest even, through runtime/kernels/half.h (gradual underflow,
 *     overflow to inf, no flush to zero).  Long reductions (sums over a
 *     batch, BatchNorm statistics, bias gradients) accumulate in double.
 *   - Within one call every data tensor has the same dtype, the one given
 *     (AMP puts all inputs of an op in one dtype); BatchNorm's gamma, beta
 *     and statistics are always fp32; labels are fp32.
 *   - Backward kernels take an `accumulate` flag per gradient output: false
 *     overwrites, true adds (grad = grad + new, rounded once), for a value
 *     read by several consumers.  Where a backward has several gradient
 *     outputs, a NULL pointer means "not needed".
 *   - Elementwise forwards may run in place (y == x); the backwards of unary
 *     elementwise ops (Activation, LeakyReLU, Dropout, scalar ops,
 *     exp/log/sqrt) may write dx over dy.  Nothing else may alias.
 *   - Op enums follow the attribute enums of ir/ir.h (ACT_*, LRELU_*,
 *     POOL_*, SMO_NORM_*), so the code generator passes them through.
 *
 * Sections follow the source files in runtime/cpu/, after the step's state
 * (below), which two kernels read.
 */
#ifndef AMPC_RT_H
#define AMPC_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the step's state ------------------------------------------------------- */

/* The state of the step in progress, in the memory of the device the steps
 * run on (RtCtx.step_state: a device pointer), written by the device
 * (runtime/device.h: its loss scale, finite flag and update count) and read
 * on the device by the kernels whose work depends on it: the loss head's
 * backward (the scale), BatchNorm's moving update (a step whose flag a
 * dynamic loss scale skips changes nothing) and Dropout (the step's number,
 * its mask's counter).  NULL: scale 1, never skipped, the step RtCtx.step.
 * Nothing here is passed by value from the host per step, so a captured
 * CUDA graph of the step replays it unchanged (--cuda-graph). */
typedef struct RtStepState {
    float scale;        /* the loss scale this step's loss head multiplies its gradient by */
    int32_t flag;       /* the finite flag: nonzero once a checked value held inf or NaN */
    int64_t num_update; /* optimizer updates applied before this step */
    int32_t dynamic;    /* a dynamic loss scale: a step whose flag is set changes nothing */
    uint64_t step;      /* this step's number (ls_init's first, one more per ls_update) */
} RtStepState;

#include "kernels/unary.h"

/* ---- dtype.c: storage dtypes, conversion, finite checks, copies ---------- */

typedef enum { RT_F32, RT_F16, RT_BF16 } RtDType;

#define RT_WS_ALIGN 64 /* workspace pointers: aligned to this many bytes */
/* every buffer a program gives a kernel starts at a multiple of this (the
 * memory plan's promise: docs/codegen.md, "Memory plan"); a kernel reading
 * 16 bytes at a time may rely on it, and checks other callers' pointers */
#define RT_VEC_ALIGN 16
/* The runtime's version: part of the ranks' build id (rankcheck.h) and of a
 * cuDNN plan cache entry's key (cuda/tune.h); ampc's own, AMPC_VERSION of
 * ir/ir.h, while the two are released together. */
#define RT_RUNTIME_VERSION "0.1.0"

/* Which phase a workspace query is for. */
typedef enum {
    RT_PASS_FORWARD,
    RT_PASS_BACKWARD,        /* the data gradient (the only backward of most ops) */
    RT_PASS_BACKWARD_WEIGHT, /* Convolution/FullyConnected weight and bias gradients */
} RtPass;

size_t rt_dtype_size(RtDType dt);        /* bytes per element: 4 or 2 */
const char *rt_dtype_name(RtDType dt);   /* "float32", "float16", "bfloat16" */

/* Widens n elements to fp32 (exact) / narrows fp32 to dt (RNE); dst and src
 * must not overlap unless dt is RT_F32 and they are equal. */
void rt_to_f32(float *dst, const void *src, size_t n, RtDType dt);
void rt_from_f32(void *dst, const float *src, size_t n, RtDType dt);
/* dst = (accumulate ? dst : 0) + src, in fp32, rounded once to dt. */
void rt_store_f32(void *dst, const float *src, size_t n, RtDType dt, bool accumulate);

/* True when no element is inf or NaN (16-bit data is checked on its bits). */
bool rt_all_finite(const void *p, size_t n, RtDType dt);
/* The multi-tensor shape the optimizer and loss scaler use: one call over
 * many tensors (MXNet's multi_all_finite). */
typedef struct {
    const void *ptr;
    size_t n;      /* elements */
    RtDType dt;
} RtTensorRef;
bool rt_multi_all_finite(const RtTensorRef *t, int count);

/* Flatten and Reshape: a copy (nothing when x == y); backward copies the
 * gradient back (or adds it). */
void rt_copy(size_t n, RtDType dt, const void *x, void *y);
void rt_reshape_forward(size_t n, RtDType dt, const void *x, void *y);
void rt_reshape_backward(size_t n, RtDType dt, const void *dy, void *dx, bool accumulate);
static inline void rt_flatten_forward(size_t n, RtDType dt, const void *x, void *y)
{
    rt_reshape_forward(n, dt, x, y);
}
static inline void rt_flatten_backward(size_t n, RtDType dt, const void *dy, void *dx,
                                       bool accumulate)
{
    rt_reshape_backward(n, dt, dy, dx, accumulate);
}

/* Cast (and amp_cast): y = x converted from `from` to `to` through fp32.
 * The gradient of a cast is a cast back. */
void rt_cast_forward(size_t n, RtDType from, const void *x, RtDType to, void *y);
void rt_cast_backward(size_t n, RtDType ydt, const void *dy, RtDType xdt, void *dx,
                      bool accumulate);

/* ---- layout.c: memory layouts of image tensors -------------------------- */

/* The layout a convolution or pooling call's tensors are stored in.  NCHW
 * (zero, so a dims initializer that omits it is canonical) is the layout of
 * every other kernel and of every file.  NHWC puts the channels innermost:
 * x, y, dx, dy are [n, spatial..., c] ([N, H, W, C] for the 2-D case the
 * schedule uses) and a convolution's weight and weight gradient are
 * [k, kernel..., c/groups] (KRSC).  Bias, dbias and every other argument
 * are unchanged.  BatchNorm needs no flag: its NHWC view is
 * RtBnDims{.outer = N*H*W, .c = C, .inner = 1}.  docs/backend-cuda.md,
 * "Layouts". */
typedef enum { RT_LAYOUT_NCHW = 0, RT_LAYOUT_NHWC = 1 } RtLayout;

/* A pure permutation, bit exact (no arithmetic): to == RT_LAYOUT_NHWC reads
 * src as [n][c][hw] and writes dst as [n][hw][c]; to == RT_LAYOUT_NCHW is the
 * inverse.  A KRSC weight is the NHWC of OIHW with n = k, c = c/groups,
 * hw = the kernel's taps.  src and dst must not overlap. */
void rt_layout_convert(int64_t n, int64_t c, int64_t hw, RtDType dt, const void *src, void *dst,
                       RtLayout to);

/* ---- conv.c: Convolution (im2col + sgemm), 1-D, 2-D and 3-D ------------- */

#define RT_MAX_SPATIAL 3

/* x [n, c, in...], w [k, c/groups, kernel...], bias [k], y [n, k, out...]
 * (with layout NHWC: x [n, in..., c], w [k, kernel..., c/groups], y
 * [n, out..., k]; the workspace then also holds NCHW copies).  Unused spatial axes (beyond nsp) are ignored by rt_conv_dims_init, which
 * fills out[] (MXNet: floor((in + 2*pad - dilate*(kernel-1) - 1)/stride) + 1). */
typedef struct {
    int n, c, k, groups;   /* batch, input channels, num_filter, num_group */
    int nsp;               /* spatial rank: 1, 2 or 3 */
    int in[RT_MAX_SPATIAL], kernel[RT_MAX_SPATIAL], stride[RT_MAX_SPATIAL],
        pad[RT_MAX_SPATIAL], dilate[RT_MAX_SPATIAL];
    int out[RT_MAX_SPATIAL]; /* set by rt_conv_dims_init */
    RtLayout layout;       /* of x, y, dx, dy and w, dw (above); 0 = NCHW */
    const char *node;      /* the node's name, for messages (NULL: unnamed) */
} RtConvDims;

/* Fills out[] and normalises unused axes; false if the dims are invalid
 * (zero sizes, c or k not divisible by groups, a window larger than the
 * padded input). */
bool rt_conv_dims_init(RtConvDims *d);
size_t rt_conv_workspace_bytes(const RtConvDims *d, RtDType dt, RtPass pass);
void rt_conv_forward(const RtConvDims *d, RtDType dt, const void *x, const void *w,
                     const void *bias, void *y, void *ws);
void rt_conv_backward_data(const RtConvDims *d, RtDType dt, const void *w, const void *dy,
                           void *dx, bool accumulate, void *ws);
/* The forward without bias that also writes y's statistics as BatchNorm
 * over axis 1 sums them (rt_batchnorm_stats: stats[0, k) the sums,
 * stats[k, 2k) the sums of squares), the CPU twin of rt_cuda.h's
 * rt_cuda_conv_forward_stats (the conv_bn_stats fusion); its workspace is
 * the forward's. */
size_t rt_conv_stats_workspace_bytes(const RtConvDims *d, RtDType dt);
void rt_conv_forward_stats(const RtConvDims *d, RtDType dt, const void *x, const void *w, void *y,
                           float *stats, void *ws);
/* dbias may be NULL (no_bias); accumulate applies to dw and dbias. */
void rt_conv_backward_weight(const RtConvDims *d, RtDType dt, const void *x, const void *dy,
                             void *dw, void *dbias, bool accumulate, void *ws);

/* ---- fc.c: FullyConnected (flatten semantics) ---------------------------- */

/* x [n, in] (any trailing dims flattened), w [hidden, in], bias [hidden],
 * y [n, hidden] = x w^T + bias. */
typedef struct {
    int n, in, hidden;
    const char *node; /* the node's name, for messages (NULL: unnamed) */
} RtFcDims;

size_t rt_fc_workspace_bytes(const RtFcDims *d, RtDType dt, RtPass pass);
void rt_fc_forward(const RtFcDims *d, RtDType dt, const void *x, const void *w,
                   const void *bias, void *y, void *ws);
void rt_fc_backward_data(const RtFcDims *d, RtDType dt, const void *w, const void *dy, void *dx,
                         bool accumulate, void *ws);
void rt_fc_backward_weight(const RtFcDims *d, RtDType dt, const void *x, const void *dy,
                           void *dw, void *dbias, bool accumulate, void *ws);

/* ---- batchnorm.c: BatchNorm ------------------------------------------------ */

/* x viewed as [outer, c, inner]: for NCHW and axis 1, outer = N, inner = H*W.
 * gamma, beta, save_mean, save_invstd, moving_mean, moving_var: fp32 [c].
 * order: how a channel's sums are ordered (the results differ by rounding):
 * RT_BN_ORDER_CPU (0, what a program asks for) the CPU's own, channel
 * groups walked segment by segment; RT_BN_ORDER_TILED the GPU's two-level
 * tree (runtime/kernels/bn_tree.h), the CPU twin of runtime/cuda's
 * BatchNorm bit for bit (the CUDA functions always sum so). */
typedef enum { RT_BN_ORDER_CPU = 0, RT_BN_ORDER_TILED = 1 } RtBnOrder;
typedef struct {
    int64_t outer, c, inner;
    RtBnOrder order;
} RtBnDims;

/* Training: batch statistics over outer and inner per channel; writes
 * save_mean and save_invstd = 1/sqrt(biased_var + eps) for the backward.
 * fix_gamma treats gamma as 1 (gamma may then be NULL). */
void rt_batchnorm_forward_train(const RtBnDims *d, RtDType dt, const void *x,
                                const float *gamma, const float *beta, float eps,
                                bool fix_gamma, void *y, float *save_mean, float *save_invstd);
/* The statistics a convolution fused with their generation writes (the
 * conv_bn_stats fusion; on the GPU cuDNN's GEN_STATS, rt_cuda.h's
 * rt_cuda_conv_forward_stats): stats[0, c) each channel's sum of x,
 * stats[c, 2c) its sum of squares, fp32 (here summed in double in the CPU's
 * order, each rounded once).  Then the training forward from them: mean =
 * sum/m and biased var = sqsum/m - mean^2 in double (clamped at 0), the rest
 * as rt_batchnorm_forward_train, with the relu (relu) or the residual add
 * and relu (sc non-NULL) fused as rt_batchnorm_relu_ / _add_relu_ do.  The
 * unshifted moments cancel where a channel's mean is large against its
 * spread, which the shifted ones of rt_batchnorm_forward_train do not:
 * results differ by rounding (docs/backend-cuda.md states the tolerance). */
void rt_batchnorm_stats(const RtBnDims *d, RtDType dt, const void *x, float *stats);
void rt_batchnorm_forward_train_sums(const RtBnDims *d, RtDType dt, const void *x, const void *sc,
                                     bool relu, const float *stats, const float *gamma,
                                     const float *beta, float eps, bool fix_gamma, void *y,
                                     float *save_mean, float *save_invstd);
/* moving = moving*momentum + batch*(1 - momentum), with the UNBIASED batch
 * variance (count/(count-1)) as cuDNN and PyTorch do; count = outer*inner
 * (the biased variance when count is 1).  Separate from the forward so a
 * skipped (overflow) step leaves the statistics alone: nothing is written
 * when step says so (its flag set under a dynamic scale; NULL: never). */
void rt_batchnorm_update_moving(int64_t c, int64_t count, const float *save_mean,
                                const float *save_invstd, float eps, float momentum,
                                float *moving_mean, float *moving_var, const RtStepState *step);
/* Inference (and use_global_stats): the moving statistics.  save_mean and
 * save_invstd, when not NULL, receive moving_mean and 1/sqrt(moving_var+eps)
 * for rt_batchnorm_backward with use_global_stats. */
void rt_batchnorm_forward_inference(const RtBnDims *d, RtDType dt, const void *x,
                                    const float *gamma, const float *beta,
                                    const float *moving_mean, const float *moving_var,
                                    float eps, bool fix_gamma, void *y, float *save_mean,
                                    float *save_invstd);
/* dx (dtype dt), dgamma and dbeta (fp32; any may be NULL).  With
 * use_global_stats the statistics are constants (dx = dy*gamma*invstd).
 * fix_gamma: dgamma is written as 0 (left alone when acc_param). */
void rt_batchnorm_backward(const RtBnDims *d, RtDType dt, const void *x, const void *dy,
                           const float *gamma, const float *save_mean, const float *save_invstd,
                           bool fix_gamma, bool use_global_stats, void *dx, float *dgamma,
                           float *dbeta, bool acc_dx, bool acc_param);
/* The fuse pass's BatchNorm + relu (docs/codegen.md, "Fusions"): y =
 * relu(BatchNorm(x)) with the BatchNorm's value rounded to dt before the
 * relu, where the unfused pair stores it, so y has the pair's bits; the
 * arguments are the unfused calls'. */
void rt_batchnorm_relu_forward_train(const RtBnDims *d, RtDType dt, const void *x,
                                     const float *gamma, const float *beta, float eps,
                                     bool fix_gamma, void *y, float *save_mean,
                                     float *save_invstd);
void rt_batchnorm_relu_forward_inference(const RtBnDims *d, RtDType dt, const void *x,
                                         const float *gamma, const float *beta,
                                         const float *moving_mean, const float *moving_var,
                                         float eps, bool fix_gamma, void *y, float *save_mean,
                                         float *save_invstd);
/* Their backward: rt_batchnorm_backward of dy masked by y > 0 (the relu's
 * output), rounded to dt as the unfused relu backward stores it. */
void rt_batchnorm_relu_backward(const RtBnDims *d, RtDType dt, const void *x, const void *y,
                                const void *dy, const float *gamma, const float *save_mean,
                                const float *save_invstd, bool fix_gamma, bool use_global_stats,
                                void *dx, float *dgamma, float *dbeta, bool acc_dx,
                                bool acc_param);
/* The fuse pass's BatchNorm + residual add + relu: y = relu(BatchNorm(x) +
 * sc), BatchNorm's value and the sum each rounded to dt where the unfused
 * ops store them (sc has x's dims and dtype; y may be sc). */
void rt_batchnorm_add_relu_forward_train(const RtBnDims *d, RtDType dt, const void *x,
                                         const void *sc, const float *gamma, const float *beta,
                                         float eps, bool fix_gamma, void *y, float *save_mean,
                                         float *save_invstd);
void rt_batchnorm_add_relu_forward_inference(const RtBnDims *d, RtDType dt, const void *x,
                                             const void *sc, const float *gamma, const float *beta,
                                             const float *moving_mean, const float *moving_var,
                                             float eps, bool fix_gamma, void *y, float *save_mean,
                                             float *save_invstd);
/* Their backward: dsc = dy * (y > 0) rounded to dt (the relu's gradient,
 * which the shortcut receives; overwritten, may be dy itself; NULL: not
 * kept), then rt_batchnorm_backward of it, as rt_batchnorm_relu_backward. */
void rt_batchnorm_add_relu_backward(const RtBnDims *d, RtDType dt, const void *x, const void *y,
                                    const void *dy, const float *gamma, const float *save_mean,
                                    const float *save_invstd, bool fix_gamma, bool use_global_stats,
                                    void *dsc, void *dx, float *dgamma, float *dbeta, bool acc_dx,
                                    bool acc_param);

/* ---- act.c: Activation, LeakyReLU, Dropout -------------------------------- */

/* In the order of ir.h's ACT_* */
typedef enum { RT_ACT_RELU, RT_ACT_SIGMOID, RT_ACT_TANH, RT_ACT_SOFTRELU, RT_ACT_SOFTSIGN } RtAct;

void rt_activation_forward(RtAct act, size_t n, RtDType dt, const void *x, void *y);
/* As MXNet: relu, sigmoid, tanh and softrelu differentiate through the
 * output y (x may be NULL); softsign through the input x (y may be NULL). */
void rt_activation_backward(RtAct act, size_t n, RtDType dt, const void *x, const void *y,
                            const void *dy, void *dx, bool accumulate);

/* In the order of ir.h's LRELU_* */
typedef enum { RT_LRELU_LEAKY, RT_LRELU_ELU, RT_LRELU_SELU, RT_LRELU_PRELU } RtLeaky;

/* x viewed as [outer, c, inner]; prelu has one slope per channel, gamma [c]
 * in dtype dt; the others use `slope` (selu ignores it) and c is free. */
void rt_leaky_relu_forward(RtLeaky t, int64_t outer, int64_t c, int64_t inner, RtDType dt,
                           const void *x, const void *gamma, float slope, void *y);
/* Differentiates through x.  dgamma (prelu, dtype dt, may be NULL) sums
 * dy*x over x <= 0 per channel. */
void rt_leaky_relu_backward(RtLeaky t, int64_t outer, int64_t c, int64_t inner, RtDType dt,
                            const void *x, const void *gamma, float slope, const void *dy,
                            void *dx, void *dgamma, bool acc_dx, bool acc_dgamma);

/* Dropout with a counter-based RNG: element i of a tensor keeps its value
 * (scaled by 1/(1-p)) iff rt_dropout_uniform(seed, step, stream, i) >= p.
 * The mask is a pure function of (seed, step, stream, i), so runs are
 * reproducible and the backward regenerates it instead of storing it.
 * stream tells tensors apart (the node id); step is the training step. */
float rt_dropout_uniform(uint64_t seed, uint64_t step, uint32_t stream, uint64_t i);
void rt_dropout_forward(size_t n, RtDType dt, const void *x, float p, uint64_t seed,
                        uint64_t step, uint32_t stream, void *y);
void rt_dropout_backward(size_t n, RtDType dt, const void *dy, float p, uint64_t seed,
                         uint64_t step, uint32_t stream, void *dx, bool accumulate);
/* Philox-4x32-10 (Salmon et al. 2011), exposed for tests. */
void rt_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* ---- pool.c: Pooling --------------------------------------------------------- */

typedef enum { RT_POOL_MAX, RT_POOL_AVG, RT_POOL_SUM } RtPoolType; /* ir.h's POOL_* */

/* x [n, c, in...], y [n, c, out...] (NHWC: [n, in..., c], [n, out..., c];
 * the workspace then also holds NCHW copies).  MXNet's rules: the "valid"
 * convention floors the output size, "full" takes the ceiling; windows are
 * clipped to the input; avg divides by the window clipped to the padded
 * input (count_include_pad) or to the input.  global pools whole planes. */
typedef struct {
    int n, c, nsp;         /* nsp: spatial rank 1..3 */
    int in[RT_MAX_SPATIAL], kernel[RT_MAX_SPATIAL], stride[RT_MAX_SPATIAL],
        pad[RT_MAX_SPATIAL];
    int out[RT_MAX_SPATIAL]; /* set by rt_pool_dims_init */
    RtPoolType type;
    bool full_convention, count_include_pad, global;
    RtLayout layout;       /* of x, y, dx, dy (above); 0 = NCHW */
} RtPoolDims;

bool rt_pool_dims_init(RtPoolDims *d);
size_t rt_pool_workspace_bytes(const RtPoolDims *d, RtDType dt, RtPass pass);
void rt_pool_forward(const RtPoolDims *d, RtDType dt, const void *x, void *y, void *ws);
/* Max pooling recomputes the argmax from x (the first maximum of a window);
 * avg and sum do not read x (it may be NULL). */
void rt_pool_backward(const RtPoolDims *d, RtDType dt, const void *x, const void *dy, void *dx,
                      bool accumulate, void *ws);

/* ---- elemwise.c: binary, broadcast, scalar and unary ops, Concat ---------- */

typedef enum { RT_BIN_ADD, RT_BIN_SUB, RT_BIN_MUL } RtBinOp;

/* elemwise_add/sub/mul: a, b, y of n elements (y may alias a or b). */
void rt_elemwise_forward(RtBinOp op, size_t n, RtDType dt, const void *a, const void *b,
                         void *y);
/* The fuse pass's elemwise_add + relu: y = relu(a + b), the sum rounded to
 * dt before the relu, as the unfused pair stores it (y may alias a or b). */
void rt_add_relu_forward(size_t n, RtDType dt, const void *a, const void *b, void *y);
/* a and b are read only by mul.  da == db is allowed (y = x op x). */
void rt_elemwise_backward(RtBinOp op, size_t n, RtDType dt, const void *dy, const void *a,
                          const void *b, void *da, void *db, bool acc_a, bool acc_b);

/* broadcast_add/mul (and sub): numpy broadcasting.  rank is the output's;
 * a[] and b[] are the inputs' shapes padded with leading 1s. */
#define RT_MAX_RANK 8
typedef struct {
    int rank;
    int64_t out[RT_MAX_RANK], a[RT_MAX_RANK], b[RT_MAX_RANK];
} RtBcastDims;

/* False if the shapes do not broadcast. */
bool rt_broadcast_dims_init(RtBcastDims *d, int ra, const int64_t *a, int rb, const int64_t *b);
size_t rt_broadcast_workspace_bytes(const RtBcastDims *d, RtDType dt, RtPass pass);
void rt_broadcast_forward(RtBinOp op, const RtBcastDims *d, RtDType dt, const void *a,
                          const void *b, void *y);
/* Reduces over the broadcast axes (in double). */
void rt_broadcast_backward(RtBinOp op, const RtBcastDims *d, RtDType dt, const void *dy,
                           const void *a, const void *b, void *da, void *db, bool acc_a,
                           bool acc_b, void *ws);

/* _plus_scalar ... _rdiv_scalar: y = x + s, x - s, s - x, x * s, x / s, s / x. */
typedef enum {
    RT_SCALAR_PLUS, RT_SCALAR_MINUS, RT_SCALAR_RMINUS, RT_SCALAR_MUL, RT_SCALAR_DIV,
    RT_SCALAR_RDIV,
} RtScalarOp;
void rt_scalar_forward(RtScalarOp op, size_t n, RtDType dt, const void *x, float s, void *y);
/* x is read only by rdiv (dx = -dy*s/x^2). */
void rt_scalar_backward(RtScalarOp op, size_t n, RtDType dt, const void *x, float s,
                        const void *dy, void *dx, bool accumulate);

/* clip: y = min(max(x, lo), hi); dx = dy where lo <= x <= hi, else 0
 * (MXNet's clip and its backward). */
void rt_clip_forward(size_t n, RtDType dt, const void *x, float lo, float hi, void *y);
void rt_clip_backward(size_t n, RtDType dt, const void *x, float lo, float hi, const void *dy,
                      void *dx, bool accumulate);

/* exp, log, sqrt and the unary math of MXNet's AMP lists (sin ... rint), in
 * the order of kernels/unary.h's list, whose element math both the CPU and
 * the CUDA kernels use (cpu/elemwise.c asserts the two agree). */
// clang-format off
typedef enum {
    RT_UNARY_EXP, RT_UNARY_LOG, RT_UNARY_SQRT, RT_UNARY_SIN, RT_UNARY_COS, RT_UNARY_TAN,
    RT_UNARY_ARCSIN, RT_UNARY_ARCCOS, RT_UNARY_ARCTAN, RT_UNARY_SINH, RT_UNARY_COSH,
    RT_UNARY_ARCSINH, RT_UNARY_ARCCOSH, RT_UNARY_ARCTANH, RT_UNARY_EXPM1, RT_UNARY_LOG1P,
    RT_UNARY_LOG2, RT_UNARY_LOG10, RT_UNARY_CBRT, RT_UNARY_RCBRT, RT_UNARY_RSQRT,
    RT_UNARY_RECIPROCAL, RT_UNARY_SQUARE, RT_UNARY_ABS, RT_UNARY_NEGATIVE, RT_UNARY_SIGN,
    RT_UNARY_ERF, RT_UNARY_DEGREES, RT_UNARY_RADIANS, RT_UNARY_FLOOR, RT_UNARY_CEIL,
    RT_UNARY_ROUND, RT_UNARY_TRUNC, RT_UNARY_FIX, RT_UNARY_RINT, RT_UNARY_COUNT
} RtUnaryOp;
// clang-format on
void rt_unary_forward(RtUnaryOp op, size_t n, RtDType dt, const void *x, void *y);
/* exp and sqrt differentiate through y, log and the others through x (the
 * one not read may be NULL). */
void rt_unary_backward(RtUnaryOp op, size_t n, RtDType dt, const void *x, const void *y,
                       const void *dy, void *dx, bool accumulate);

/* Concat of nin tensors viewed as [outer, len[i], inner] along the middle
 * axis; y is [outer, sum(len), inner].  Backward splits dy (dx[i] may be NULL;
 * accumulate[i] per input, or NULL for all false). */
void rt_concat_forward(int nin, const void *const *x, const int64_t *len, int64_t outer,
                       int64_t inner, RtDType dt, void *y);
void rt_concat_backward(int nin, const void *dy, const int64_t *len, int64_t outer,
                        int64_t inner, RtDType dt, void *const *dx, const bool *accumulate);

/* ---- reduce.c: softmax, log_softmax, sum, mean ---------------------------- */

/* x viewed as [outer, len, inner], softmax along len; fp32 with the maximum
 * subtracted.  Backward reads the forward output y. */
void rt_softmax_forward(int64_t outer, int64_t len, int64_t inner, RtDType dt, const void *x,
                        void *y);
void rt_softmax_backward(int64_t outer, int64_t len, int64_t inner, RtDType dt, const void *y,
                         const void *dy, void *dx, bool accumulate);
void rt_log_softmax_forward(int64_t outer, int64_t len, int64_t inner, RtDType dt,
                            const void *x, void *y);
void rt_log_softmax_backward(int64_t outer, int64_t len, int64_t inner, RtDType dt,
                             const void *y, const void *dy, void *dx, bool accumulate);

/* sum/mean: x of shape in[0..rank), reduced over the axes flagged in
 * reduce[] (keepdims only changes the shape, not the memory). */
typedef struct {
    int rank;
    int64_t in[RT_MAX_RANK];
    bool reduce[RT_MAX_RANK];
} RtReduceDims;

size_t rt_reduce_workspace_bytes(const RtReduceDims *d, RtDType dt, RtPass pass);
void rt_sum_forward(const RtReduceDims *d, RtDType dt, const void *x, void *y, void *ws);
void rt_sum_backward(const RtReduceDims *d, RtDType dt, const void *dy, void *dx,
                     bool accumulate);
void rt_mean_forward(const RtReduceDims *d, RtDType dt, const void *x, void *y, void *ws);
void rt_mean_backward(const RtReduceDims *d, RtDType dt, const void *dy, void *dx,
                      bool accumulate);

/* ---- loss.c: SoftmaxOutput and logging metrics ----------------------------- */

typedef enum { RT_SMO_NORM_NULL, RT_SMO_NORM_BATCH, RT_SMO_NORM_VALID } RtSmoNorm; /* SMO_NORM_* */

typedef struct {
    float grad_scale;    /* 1 */
    float smooth_alpha;  /* 0: target 1-a on the true class, a/(K-1) elsewhere */
    bool use_ignore;     /* false */
    float ignore_label;  /* -1 */
    RtSmoNorm normalization;
} RtSmoParams;

/* prob [n, k] (in dt) = softmax over the last axis (fp32 math, max
 * subtracted) of x (in xdt).  xdt differs from dt where the fuse pass folds
 * the cast of 16-bit logits into the call: x is widened on reading, exactly,
 * so prob is bit for bit what cast + softmax give. */
void rt_softmax_output_forward(int64_t n, int64_t k, RtDType xdt, const void *x, RtDType dt,
                               void *prob);
/* Ignores the head gradient (MXNet): dx = (prob - target) * grad_scale /
 * valid_cnt * loss_scale, rows with an ignored label zeroed, loss_scale the
 * step's (step->scale; 1 when step is NULL).  Labels are class indices
 * stored as fp32.  prob in dt, dx in dxdt: a 16-bit dx (the fuse pass
 * folding the cast of the fp32 gradient into the call) is each fp32 element
 * rounded once, as the cast rounds it. */
void rt_softmax_output_backward(int64_t n, int64_t k, RtDType dt, const void *prob,
                                const float *label, const RtSmoParams *p, const RtStepState *step,
                                RtDType dxdt, void *dx, bool accumulate);
/* Logging: the summed cross-entropy -log(prob[label] + 1e-12) over rows whose
 * label is in range (MXNet's CrossEntropy metric; divide by the count) and the
 * number of rows whose argmax (first maximum) equals the label. */
double rt_cross_entropy_sum(int64_t n, int64_t k, RtDType dt, const void *prob,
                            const float *label, int64_t *count);
int64_t rt_accuracy_count(int64_t n, int64_t k, RtDType dt, const void *prob,
                          const float *label);

#endif /* AMPC_RT_H */
