/*
 * rt_cuda.h - the CUDA twins of rt.h's Convolution and FullyConnected
 * kernels (cuDNN's graph API, runtime/cuda/conv.c; cuBLASLt, fc.c), the
 * checking macro every CUDA, cuDNN and cuBLAS(Lt) call goes through
 * (check.c), and the kernels around them (layout.cuh).
 *
 * Same shapes as the CPU contract (rt.h): the same dims structs, dtypes and
 * accumulate flags, workspace sizers, NULL bias / dbias.  Pointers are
 * device memory; every call takes the device's context first (RtCudaCtx,
 * below: RtCtx.cuda in an emitted program) and runs on its stream,
 * asynchronously.  Layouts: convolutions and pooling follow their dims'
 * layout field (RtConvDims.layout, RtPoolDims.layout): NCHW with OIHW
 * filters, or NHWC (x, y) with KRSC filters (plan.h), whatever the dtype.
 * FullyConnected is row-major [n, in] as on the CPU.  The other kernels
 * (one header per family beside runtime/cpu/'s: dtype.cuh, elemwise.cuh,
 * act.cuh, reduce.cuh, loss.cuh, layout.cuh, batchnorm.cuh; math.cuh: those
 * that call libm) take rt.h's arguments unchanged after the context.
 *
 * A failing call prints "ampc: FILE:LINE: CALL: ERROR" and exits with
 * status 1 (the contract's functions return nothing); set-up errors
 * (rt_cuda_open) return NULL or false with the message.  One host thread
 * calls these with a context (the emitted program's), as with the CPU
 * kernels: its plan caches are not locked.
 */
#ifndef AMPC_RT_CUDA_H
#define AMPC_RT_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda/ampc_cuda.h"
#include "cuda/pool_geom.h"
#include "rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the checking macro (check.c) -------------------------------------------- */

typedef enum { AMPC_API_CUDA, AMPC_API_CUDNN, AMPC_API_CUBLAS } AmpcApi;

/* status 0 is success in all three APIs.  Otherwise the message
 * "FILE:LINE: CALL: NAME (STATUS)[: detail]" with the library's own error
 * string; fatal prints it and exits 1, else it is kept for
 * ampc_api_last_error() and false returned. */
bool ampc_api_check(AmpcApi api, long status, const char *call, const char *file, int line,
                    bool fatal);
const char *ampc_api_last_error(void);
#define AMPC_CHECK(api, call) \
    ((void)ampc_api_check((api), (long)(call), #call, __FILE__, __LINE__, true))
#define AMPC_TRY(api, call) ampc_api_check((api), (long)(call), #call, __FILE__, __LINE__, false)

/* ---- the run state: a context per device -------------------------------------------- */

typedef struct {
    AmpcStream stream;       /* every call runs on it */
    size_t workspace_limit;  /* the most workspace one convolution or GEMM may use */
    bool autotune;           /* time the candidate cuDNN plans (MXNET_CUDNN_AUTOTUNE_DEFAULT=1)
                                instead of taking the heuristic's first that fits */
    int fp32;                /* the fp32 engine rule: plan.h's AmpcFp32Mode (0: exact) */
    bool nondeterministic;   /* engines noted nondeterministic allowed */
    int autotune_max;        /* candidates timed per convolution at most (tune.h) */
    bool runtime_compiled;   /* runtime-compiled engines considered */
    const char *plan_cache;  /* the plan cache file (tune.h), or NULL */
} RtCudaConfig;

struct RtCudaDnn;  /* conv.c's: cuDNN's functions, handle, plan cache, offline checks */
struct RtCudaBlas; /* fc.c's: cuBLASLt's */

/* Everything the library keeps between calls, for one device: the stream,
 * the options, each library's handle and plans (or, opened for the offline
 * check, its table of checked descriptors) and BatchNorm's scratch.  The
 * device that runs the program owns it (runtime/cuda/device.cu; RtCtx.cuda
 * passes it to the emitted calls), so two devices in a process, or a CUDA
 * graph capture, share no state; nothing in runtime/cuda/ keeps any of its
 * own (tests/runtime/cuda_state_check.sh).  Not locked: one host thread
 * calls with a context. */
typedef struct RtCudaCtx {
    AmpcStream stream; /* cfg.stream */
    RtCudaConfig cfg;
    bool offline;            /* opened by rt_cuda_check_open: no GPU, no handle */
    struct RtCudaDnn *dnn;   /* NULL: cuDNN not open */
    struct RtCudaBlas *blas; /* NULL: cuBLASLt not open */
    void *bn_ws;             /* batchnorm.c's constants and partial sums, device */
    size_t bn_ws_bytes;
} RtCudaCtx;

/* A context on cfg's stream with cuDNN and cuBLASLt open (libs.h) and their
 * handles made; NULL and a message naming the library or call on failure.
 * Plans are chosen per shape on first use (or by the workspace sizer, at
 * set-up) and cached in it. */
RtCudaCtx *rt_cuda_open(const RtCudaConfig *cfg, char *err, size_t errlen);
/* Frees what the context holds (plans, handles, the BatchNorm scratch) and
 * the context; NULL: nothing. */
void rt_cuda_close(RtCudaCtx *cx);
/* A context without a library (cx->dnn, cx->blas NULL): the kernels of
 * this header that need none (every one but the convolutions and the
 * GEMMs) run with it, as the emulator's tests do; NULL when out of memory. */
RtCudaCtx *rt_cuda_ctx_new(const RtCudaConfig *cfg);
/* each library alone, into cx (a model without convolutions needs no cuDNN) */
bool rt_cuda_dnn_init(RtCudaCtx *cx, char *err, size_t errlen);
void rt_cuda_dnn_shutdown(RtCudaCtx *cx);
bool rt_cuda_blas_init(RtCudaCtx *cx, char *err, size_t errlen);
void rt_cuda_blas_shutdown(RtCudaCtx *cx);
/* before a call that needs cx's libraries: exits with a message naming fn
 * when they are not open, or open for the offline check only */
void rt_cuda_need_init(const RtCudaCtx *cx, const char *fn);

/* ---- Convolution (cuDNN graph API) ----------------------------------------------- */

size_t rt_cuda_conv_workspace_bytes(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, RtPass pass);
void rt_cuda_conv_forward(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, const void *x,
                          const void *w, const void *bias, void *y, void *ws);
void rt_cuda_conv_backward_data(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, const void *w,
                                const void *dy, void *dx, bool accumulate, void *ws);
void rt_cuda_conv_backward_weight(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, const void *x,
                                  const void *dy, void *dw, void *dbias, bool accumulate, void *ws);
/* The forward fused with the generation of y's per-channel statistics in one
 * cuDNN operation graph (GEN_STATS, SUM_SQSUM, fp32): y as
 * rt_cuda_conv_forward writes it (no bias), stats[0, k) the sum of each
 * channel's elements of y, stats[k, 2k) the sum of their squares, in fp32 and
 * in cuDNN's order.  BatchNorm's training forward from these sums
 * (rt_cuda_batchnorm_forward_train_sums) then reads y once instead of twice.
 * Off unless asked: only a program built with --fuse=conv_bn_stats calls it
 * (docs/backend-cuda.md, "The convolution with BatchNorm's statistics"); its
 * descriptors are checked offline (cuda_dnn_offline).  The sizer, which a
 * program calls at set-up, probes first (below) and stops the program,
 * naming the node and the flag, where the device's cuDNN has no engine. */
size_t rt_cuda_conv_stats_workspace_bytes(RtCudaCtx *cx, const RtConvDims *d, RtDType dt);
void rt_cuda_conv_forward_stats(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, const void *x,
                                const void *w, void *y, float *stats, void *ws);
/* whether cuDNN on this device has an engine for it (its plan then made and
 * cached): false with cuDNN's message, where the two calls above would stop
 * the program; the GPU test asks it first (cuda_dnn_gpu) */
bool rt_cuda_conv_stats_probe(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, char *err,
                              size_t errlen);
/* which engine the cached plan of a shape uses (-1 when none yet), for logs */
long rt_cuda_conv_engine(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, RtPass pass,
                         bool accumulate);
/* that engine's numerical notes (plan.h's AMPC_NOTE_* bits; -1 when no plan yet) */
long rt_cuda_conv_notes(RtCudaCtx *cx, const RtConvDims *d, RtDType dt, RtPass pass,
                        bool accumulate);

/* ---- the offline check (--cudnn-check; no GPU) ----------------------------------- */

struct AmpcConvGeom; /* plan.h */
struct AmpcGemm;

/* cuDNN and cuBLASLt opened without a device: no handle is made (cudnnCreate
 * and cublasLtCreate need a GPU), but descriptors, cuDNN's operation graphs
 * and its heuristic query need none.  With a context so opened the workspace
 * sizers check each distinct convolution and GEMM (the first node asking
 * names it) instead of choosing a plan, and return 0; the kernels must not
 * be called.  NULL with a message when a library is missing; rt_cuda_close
 * closes it. */
RtCudaCtx *rt_cuda_check_open(const RtCudaConfig *cfg, char *err, size_t errlen);
/* one line per distinct descriptor to out, each failure (naming its node) to
 * err; the number of failures */
int rt_cuda_check_report(RtCudaCtx *cx, FILE *out, FILE *err);
/* each library's half (rt_cuda_check_* call them) */
bool rt_cuda_dnn_check_open(RtCudaCtx *cx, char *err, size_t errlen);
int rt_cuda_dnn_check_report(RtCudaCtx *cx, FILE *out, FILE *err);
size_t rt_cuda_dnn_check_count(RtCudaCtx *cx);
bool rt_cuda_blas_check_open(RtCudaCtx *cx, char *err, size_t errlen);
int rt_cuda_blas_check_report(RtCudaCtx *cx, FILE *out, FILE *err);
size_t rt_cuda_blas_check_count(RtCudaCtx *cx);
/* One convolution of geometry g (plan.h) checked as the sizer checks it: its
 * operation graph built and finalized, the heuristics' proposals counted into
 * candidates[0] (mode A) and [1] (fallback; -1 where a query failed).  False
 * with a message naming node when cuDNN refuses a descriptor or neither
 * heuristic proposes an engine.  Tests plant broken geometries here. */
bool rt_cuda_dnn_check_geom(RtCudaCtx *cx, const char *node, const struct AmpcConvGeom *g,
                            RtDType dt, RtPass pass, bool acc, int64_t candidates[2], char *err,
                            size_t errlen);
/* the same for the forward with statistics (rt_cuda_conv_forward_stats):
 * the convolution and its GEN_STATS over y into g->stats, one graph */
bool rt_cuda_dnn_check_stats_geom(RtCudaCtx *cx, const char *node, const struct AmpcConvGeom *g,
                                  RtDType dt, int64_t candidates[2], char *err, size_t errlen);
/* One GEMM (plan.h's AmpcGemm) checked: its shape against itself
 * (ampc_gemm_check) and cuBLASLt's matmul and matrix layout descriptors
 * created and set.  False with a message naming node. */
bool rt_cuda_blas_check_gemm(RtCudaCtx *cx, const char *node, const struct AmpcGemm *g, RtDType dt,
                             bool bias, char *err, size_t errlen);
/* autotune's counts so far: candidates timed, plans the plan cache file gave */
void rt_cuda_dnn_tune_counts(RtCudaCtx *cx, long *timed, long *from_file);
/* the loaded cuDNN's version (cudnnGetVersion), 0 before it is opened */
size_t rt_cuda_dnn_version(RtCudaCtx *cx);

/* ---- FullyConnected (cuBLASLt) ---------------------------------------------------- */

size_t rt_cuda_fc_workspace_bytes(RtCudaCtx *cx, const RtFcDims *d, RtDType dt, RtPass pass);
void rt_cuda_fc_forward(RtCudaCtx *cx, const RtFcDims *d, RtDType dt, const void *x, const void *w,
                        const void *bias, void *y, void *ws);
void rt_cuda_fc_backward_data(RtCudaCtx *cx, const RtFcDims *d, RtDType dt, const void *w,
                              const void *dy, void *dx, bool accumulate, void *ws);
void rt_cuda_fc_backward_weight(RtCudaCtx *cx, const RtFcDims *d, RtDType dt, const void *x,
                                const void *dy, void *dw, void *dbias, bool accumulate, void *ws);

/* ---- Pooling (custom kernels, pool.cuh) -------------------------------------------- */

/* in d->layout (NCHW or NHWC); the backward of max pooling takes a workspace
 * of 4 bytes an output (each window's argmax, evaluated once) */
size_t rt_cuda_pool_workspace_bytes(RtCudaCtx *cx, const RtPoolDims *d, RtDType dt, RtPass pass);
void rt_cuda_pool_forward(RtCudaCtx *cx, const RtPoolDims *d, RtDType dt, const void *x, void *y,
                          void *ws);
void rt_cuda_pool_backward(RtCudaCtx *cx, const RtPoolDims *d, RtDType dt, const void *x,
                           const void *dy, void *dx, bool accumulate, void *ws);

/* ---- BatchNorm (custom kernels, batchnorm.cuh) ------------------------------------- */

/* rt.h's contract, bit for bit runtime/cpu/batchnorm.c with d->order =
 * RT_BN_ORDER_TILED (whatever d->order says: the GPU sums in its tree); x as
 * [outer, c, inner] (NHWC: outer = N*H*W, inner = 1).  gamma, beta, the
 * statistics: fp32 device arrays.  The per-channel constants and the
 * partial sums go to the context's device scratch (ampc_batchnorm_ws_max of
 * the widest BatchNorm, at most a few MiB), grown on first use;
 * rt_cuda_bn_reserve(cx, max_c) allocates it at set-up (a first-use
 * allocation would stall a step). */
bool rt_cuda_bn_reserve(RtCudaCtx *cx, int64_t max_c, char *err, size_t errlen);
/* the scratch freed (rt_cuda_close) */
void rt_cuda_bn_release(RtCudaCtx *cx);
void rt_cuda_batchnorm_forward_train(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x,
                                     const float *gamma, const float *beta, float eps,
                                     bool fix_gamma, void *y, float *save_mean, float *save_invstd);
void rt_cuda_batchnorm_forward_inference(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                         const void *x, const float *gamma, const float *beta,
                                         const float *moving_mean, const float *moving_var,
                                         float eps, bool fix_gamma, void *y, float *save_mean,
                                         float *save_invstd);
void rt_cuda_batchnorm_backward(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x,
                                const void *dy, const float *gamma, const float *save_mean,
                                const float *save_invstd, bool fix_gamma, bool use_global_stats,
                                void *dx, float *dgamma, float *dbeta, bool acc_dx, bool acc_param);

/* BatchNorm + relu (the fuse pass's): the relu applied as y is written,
 * after BatchNorm's value is rounded to dt; the backward masks dy by y > 0 as
 * it reads it.  Bit for bit rt_batchnorm_relu_* in the tiled order. */
void rt_cuda_batchnorm_relu_forward_train(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                          const void *x, const float *gamma, const float *beta,
                                          float eps, bool fix_gamma, void *y, float *save_mean,
                                          float *save_invstd);
void rt_cuda_batchnorm_relu_forward_inference(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                              const void *x, const float *gamma, const float *beta,
                                              const float *moving_mean, const float *moving_var,
                                              float eps, bool fix_gamma, void *y, float *save_mean,
                                              float *save_invstd);
void rt_cuda_batchnorm_relu_backward(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x,
                                     const void *y, const void *dy, const float *gamma,
                                     const float *save_mean, const float *save_invstd,
                                     bool fix_gamma, bool use_global_stats, void *dx, float *dgamma,
                                     float *dbeta, bool acc_dx, bool acc_param);
/* The training forward from the statistics rt_cuda_conv_forward_stats wrote
 * (stats: sums [c], then sums of squares [c]): rt.h's
 * rt_batchnorm_forward_train_sums, sc the residual add (then relu), relu the
 * relu; y read once.  Prepared, not enabled (docs/backend-cuda.md). */
void rt_cuda_batchnorm_forward_train_sums(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                          const void *x, const void *sc, bool relu,
                                          const float *stats, const float *gamma, const float *beta,
                                          float eps, bool fix_gamma, void *y, float *save_mean,
                                          float *save_invstd);
/* BatchNorm + residual add + relu (the fuse pass's): one kernel writes y, and
 * in the backward the one that sums dy writes the relu's gradient dsc. */
void rt_cuda_batchnorm_add_relu_forward_train(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                              const void *x, const void *sc, const float *gamma,
                                              const float *beta, float eps, bool fix_gamma, void *y,
                                              float *save_mean, float *save_invstd);
void rt_cuda_batchnorm_add_relu_forward_inference(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                                  const void *x, const void *sc, const float *gamma,
                                                  const float *beta, const float *moving_mean,
                                                  const float *moving_var, float eps,
                                                  bool fix_gamma, void *y, float *save_mean,
                                                  float *save_invstd);
void rt_cuda_batchnorm_add_relu_backward(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                         const void *x, const void *y, const void *dy,
                                         const float *gamma, const float *save_mean,
                                         const float *save_invstd, bool fix_gamma,
                                         bool use_global_stats, void *dsc, void *dx, float *dgamma,
                                         float *dbeta, bool acc_dx, bool acc_param);

/* ---- the other kernels (the family headers built by kernels.cu, math.cu,
 * layout.cu and batchnorm.cu) ---------------------------------------------------------- */

void rt_cuda_copy(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, void *y);
void rt_cuda_reshape_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, void *y);
void rt_cuda_reshape_backward(RtCudaCtx *cx, size_t n, RtDType dt, const void *dy, void *dx,
                              bool accumulate);
void rt_cuda_cast_forward(RtCudaCtx *cx, size_t n, RtDType from, const void *x, RtDType to,
                          void *y);
void rt_cuda_cast_backward(RtCudaCtx *cx, size_t n, RtDType ydt, const void *dy, RtDType xdt,
                           void *dx, bool accumulate);
void rt_cuda_layout_convert(RtCudaCtx *cx, int64_t n, int64_t c, int64_t hw, RtDType dt,
                            const void *src, void *dst, RtLayout to);
void rt_cuda_activation_forward(RtCudaCtx *cx, RtAct act, size_t n, RtDType dt, const void *x,
                                void *y);
void rt_cuda_activation_backward(RtCudaCtx *cx, RtAct act, size_t n, RtDType dt, const void *x,
                                 const void *y, const void *dy, void *dx, bool accumulate);
void rt_cuda_leaky_relu_forward(RtCudaCtx *cx, RtLeaky t, int64_t outer, int64_t c, int64_t inner,
                                RtDType dt, const void *x, const void *gamma, float slope, void *y);
void rt_cuda_leaky_relu_backward(RtCudaCtx *cx, RtLeaky t, int64_t outer, int64_t c, int64_t inner,
                                 RtDType dt, const void *x, const void *gamma, float slope,
                                 const void *dy, void *dx, void *dgamma, bool acc_dx,
                                 bool acc_dgamma);
/* step: the step's number in device memory (RtStepState.step), read by the kernel */
void rt_cuda_dropout_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, float p,
                             uint64_t seed, const uint64_t *step, uint32_t stream, void *y);
void rt_cuda_dropout_backward(RtCudaCtx *cx, size_t n, RtDType dt, const void *dy, float p,
                              uint64_t seed, const uint64_t *step, uint32_t stream, void *dx,
                              bool accumulate);
void rt_cuda_elemwise_forward(RtCudaCtx *cx, RtBinOp op, size_t n, RtDType dt, const void *a,
                              const void *b, void *y);
void rt_cuda_add_relu_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *a, const void *b,
                              void *y);
void rt_cuda_elemwise_backward(RtCudaCtx *cx, RtBinOp op, size_t n, RtDType dt, const void *dy,
                               const void *a, const void *b, void *da, void *db, bool acc_a,
                               bool acc_b);
size_t rt_cuda_broadcast_workspace_bytes(RtCudaCtx *cx, const RtBcastDims *d, RtDType dt,
                                         RtPass pass);
void rt_cuda_broadcast_forward(RtCudaCtx *cx, RtBinOp op, const RtBcastDims *d, RtDType dt,
                               const void *a, const void *b, void *y);
void rt_cuda_broadcast_backward(RtCudaCtx *cx, RtBinOp op, const RtBcastDims *d, RtDType dt,
                                const void *dy, const void *a, const void *b, void *da, void *db,
                                bool acc_a, bool acc_b, void *ws);
void rt_cuda_scalar_forward(RtCudaCtx *cx, RtScalarOp op, size_t n, RtDType dt, const void *x,
                            float s, void *y);
void rt_cuda_scalar_backward(RtCudaCtx *cx, RtScalarOp op, size_t n, RtDType dt, const void *x,
                             float s, const void *dy, void *dx, bool accumulate);
void rt_cuda_clip_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, float lo, float hi,
                          void *y);
void rt_cuda_clip_backward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, float lo, float hi,
                           const void *dy, void *dx, bool accumulate);
void rt_cuda_unary_forward(RtCudaCtx *cx, RtUnaryOp op, size_t n, RtDType dt, const void *x,
                           void *y);
void rt_cuda_unary_backward(RtCudaCtx *cx, RtUnaryOp op, size_t n, RtDType dt, const void *x,
                            const void *y, const void *dy, void *dx, bool accumulate);
/* x and dx: host arrays of device pointers */
void rt_cuda_concat_forward(RtCudaCtx *cx, int nin, const void *const *x, const int64_t *len,
                            int64_t outer, int64_t inner, RtDType dt, void *y);
void rt_cuda_concat_backward(RtCudaCtx *cx, int nin, const void *dy, const int64_t *len,
                             int64_t outer, int64_t inner, RtDType dt, void *const *dx,
                             const bool *accumulate);
void rt_cuda_softmax_forward(RtCudaCtx *cx, int64_t outer, int64_t len, int64_t inner, RtDType dt,
                             const void *x, void *y);
void rt_cuda_softmax_backward(RtCudaCtx *cx, int64_t outer, int64_t len, int64_t inner, RtDType dt,
                              const void *y, const void *dy, void *dx, bool accumulate);
void rt_cuda_log_softmax_forward(RtCudaCtx *cx, int64_t outer, int64_t len, int64_t inner,
                                 RtDType dt, const void *x, void *y);
void rt_cuda_log_softmax_backward(RtCudaCtx *cx, int64_t outer, int64_t len, int64_t inner,
                                  RtDType dt, const void *y, const void *dy, void *dx,
                                  bool accumulate);
size_t rt_cuda_reduce_workspace_bytes(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt,
                                      RtPass pass);
void rt_cuda_sum_forward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *x, void *y,
                         void *ws);
void rt_cuda_sum_backward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *dy,
                          void *dx, bool accumulate);
void rt_cuda_mean_forward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *x, void *y,
                          void *ws);
void rt_cuda_mean_backward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *dy,
                           void *dx, bool accumulate);
void rt_cuda_softmax_output_forward(RtCudaCtx *cx, int64_t n, int64_t k, RtDType xdt, const void *x,
                                    RtDType dt, void *prob);
/* label: device fp32; step: the step's state in device memory (its scale,
 * read by the kernel; NULL: 1) */
void rt_cuda_softmax_output_backward(RtCudaCtx *cx, int64_t n, int64_t k, RtDType dt,
                                     const void *prob, const float *label, const RtSmoParams *p,
                                     const RtStepState *step, RtDType dxdt, void *dx,
                                     bool accumulate);
/* writes nothing on a step step's flag skips (rt.h; read on the device) */
void rt_cuda_batchnorm_update_moving(RtCudaCtx *cx, int64_t c, int64_t count,
                                     const float *save_mean, const float *save_invstd, float eps,
                                     float momentum, float *moving_mean, float *moving_var,
                                     const RtStepState *step);

/* ---- the kernels of layout.cuh ------------------------------------------------------- */

int ampc_cu_pad_channels(AmpcStream s, size_t rows, int c, int cp, int dt, const void *src,
                         void *dst);
int ampc_cu_unpad_channels(AmpcStream s, size_t rows, int c, int cp, int dt, const void *src,
                           void *dst, int acc);
int ampc_cu_bias_add(AmpcStream s, size_t outer, int c, size_t inner, int dt, void *y,
                     const void *bias);
int ampc_cu_bias_grad(AmpcStream s, size_t outer, int c, size_t inner, int dt, const void *dy,
                      void *dbias, int acc);
/* pool.cuh: rt_pool_forward / rt_pool_backward bit for bit, in g's layout;
 * the backward's ws: ampc_pool_ws_bytes(g, 1) bytes (max's argmax) */
int ampc_cu_pool_forward(AmpcStream s, const AmpcPoolGeom *g, int dt, const void *x, void *y);
size_t ampc_pool_ws_bytes(const AmpcPoolGeom *g, int backward);
int ampc_cu_pool_backward(AmpcStream s, const AmpcPoolGeom *g, int dt, const void *x,
                          const void *dy, void *dx, int acc, void *ws);
/* batchnorm.cuh: rt_batchnorm_* with RtBnDims.order = RT_BN_ORDER_TILED, bit
 * for bit: the training forward (sc: the residual add, relu: then the relu),
 * the inference forward, the backward (ry: the fused relu's y, dy masked by
 * it; dsc: the masked dy written too).  ws: ampc_batchnorm_ws_bytes of
 * device memory; ampc_batchnorm_ws_max(c) covers every size of c channels. */
size_t ampc_batchnorm_ws_bytes(size_t outer, int c, size_t inner);
size_t ampc_batchnorm_ws_max(int c);
int ampc_cu_batchnorm_forward_train(AmpcStream s, size_t outer, int c, size_t inner, int dt,
                                    const void *x, const void *sc, int relu, const float *gamma,
                                    const float *beta, float eps, int fix_gamma, void *y,
                                    float *save_mean, float *save_invstd, void *ws);
/* the training forward from statistics given (rt_batchnorm_forward_train_sums) */
int ampc_cu_batchnorm_forward_train_sums(AmpcStream s, size_t outer, int c, size_t inner, int dt,
                                         const void *x, const void *sc, int relu,
                                         const float *stats, const float *gamma, const float *beta,
                                         float eps, int fix_gamma, void *y, float *save_mean,
                                         float *save_invstd, void *ws);
int ampc_cu_batchnorm_forward_inference(AmpcStream s, size_t outer, int c, size_t inner, int dt,
                                        const void *x, const void *sc, int relu, const float *gamma,
                                        const float *beta, const float *moving_mean,
                                        const float *moving_var, float eps, int fix_gamma, void *y,
                                        float *save_mean, float *save_invstd, void *ws);
int ampc_cu_batchnorm_backward(AmpcStream s, size_t outer, int c, size_t inner, int dt,
                               const void *x, const void *ry, const void *dy, void *dsc,
                               const float *gamma, const float *save_mean, const float *save_invstd,
                               int fix_gamma, int use_global_stats, void *dx, float *dgamma,
                               float *dbeta, int acc_dx, int acc_param, void *ws);

#ifdef __cplusplus
}
#endif

#endif /* AMPC_RT_CUDA_H */
