/*
 * ampc_cuda.h - the custom CUDA kernels of the CUDA runtime library
 * (build/libampccuda.a), as C functions that launch them on a stream.
 *
 * Every kernel is built from the per-element math the CPU kernels use
 * (runtime/kernels/) and is the device twin of a CPU function, bit for
 * bit (docs/backend-cuda.md, "What is proven where"):
 *
 *   ampc_cu_cast          rt_cast_forward / rt_cast_backward (acc)
 *   ampc_cu_binary        rt_elemwise_forward (add, sub, mul)
 *   ampc_cu_binary_backward  rt_elemwise_backward
 *   ampc_cu_scalar        rt_scalar_forward (x+s, x-s, s-x, x*s, x/s, s/x)
 *   ampc_cu_scalar_backward  rt_scalar_backward
 *   ampc_cu_add_relu      rt_add_relu_forward
 *   ampc_cu_relu          rt_activation_forward(RT_ACT_RELU)
 *   ampc_cu_relu_backward rt_activation_backward(RT_ACT_RELU)
 *   ampc_cu_fill          the CPU device's fill (rt_from_f32 once, then copies)
 *   ampc_cu_finite        rt_all_finite, as a device flag
 *   ampc_cu_mt_finite     rt_multi_all_finite over a multi-tensor table
 *   ampc_cu_mt_optim      rt_optim_step2: SGD, SGD with momentum, NAG, Adam,
 *                         multi-precision, all tensors in one launch
 *   ampc_cu_loss_scale    rt_loss_scaler_update's rule (kernels/lossscale.h)
 *   ampc_cu_ingest        a raw batch normalised (kernels/ingest.h) in the
 *                         first layer's dtype, layout and channel padding
 *   ampc_cu_synthetic_batch  the synthetic source's batch (data/synthetic.c,
 *                         kernels/splitmix.h) cast to the first layer's dtype,
 *                         in its layout and channel padding
 *
 * The flag: an int32 in device memory, 0 = all finite.  The checks only
 * ever store 1 into it (clear it first with ampc_cu_set_flag), so the
 * host never has to read it for the optimizer to skip a step.
 *
 * dtypes are RtDType's values (0 fp32, 1 fp16, 2 bf16); n counts elements.
 * Each function returns 0 or the launch's cudaError_t.  The stream is
 * cudaStream_t (a struct CUstream_st *; NULL is the default stream).
 * C and C++; host code only (the kernels themselves are in the family headers:
 * dtype.cuh, elemwise.cuh, act.cuh, optim.cuh, step.cuh, layout.cuh, pool.cuh,
 * batchnorm.cuh, synthetic.cuh, ingest.cuh).
 */
#ifndef AMPC_CUDA_H
#define AMPC_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/lossscale.h"
#include "rt.h" /* RtStepState */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *AmpcStream;

enum { AMPC_DT_F32 = 0, AMPC_DT_F16 = 1, AMPC_DT_BF16 = 2 };  /* RtDType */
enum { AMPC_BIN_ADD = 0, AMPC_BIN_SUB = 1, AMPC_BIN_MUL = 2 }; /* RtBinOp */
enum { AMPC_OPT_SGD = 0, AMPC_OPT_NAG = 1, AMPC_OPT_ADAM = 2 }; /* RtOptKind */
enum {                                                          /* RtScalarOp */
    AMPC_SCALAR_PLUS, AMPC_SCALAR_MINUS, AMPC_SCALAR_RMINUS, AMPC_SCALAR_MUL, AMPC_SCALAR_DIV,
    AMPC_SCALAR_RDIV
};

/* Threads per block of the multi-tensor kernels, and the default chunk: one
 * block updates one chunk of one tensor (PyTorch's multi_tensor_apply:
 * 512 threads, 65,536-element chunks). */
#define AMPC_MT_THREADS 512
#define AMPC_MT_CHUNK 65536

/* One tensor of a multi-tensor table (64 bytes).  The finite check reads
 * grad only; the optimizer updates element i as optim.c's update_tensor:
 * the gradient widened from gdt, the fp32 master (or, without one, the
 * weight widened from wdt) updated with the state, the weight buffer
 * written back rounded to wdt (the 16-bit shadow, or the fp32 weight). */
typedef struct AmpcMtTensor {
    const void *grad;
    void *weight;   /* the buffer the steps read (wdt) */
    float *master;  /* fp32 master, or NULL */
    float *mom;     /* momentum, or Adam's mean; NULL: plain SGD */
    float *var;     /* Adam's var, or NULL */
    int64_t n;      /* elements */
    float lr_mult, wd_mult;
    int32_t gdt, wdt;
} AmpcMtTensor;

/* Block b of a launch does chunk `chunk` (elements [chunk*size, +size)) of
 * tensor `tensor`. */
typedef struct AmpcMtBlock {
    int32_t tensor, chunk;
} AmpcMtBlock;

/* Blocks a table needs with chunks of `chunk` elements; -1 when a count
 * does not fit an int32 (a grid of 2^31 blocks). */
int64_t ampc_mt_count_blocks(const AmpcMtTensor *t, int nt, int64_t chunk);
/* Writes the block table (ampc_mt_count_blocks entries, tensors in order,
 * empty tensors skipped); returns the count or -1. */
int64_t ampc_mt_fill_blocks(const AmpcMtTensor *t, int nt, int64_t chunk, AmpcMtBlock *out);

/* What one optimizer step needs besides the table: optim.c's AmpcOptParam
 * before the per-tensor multipliers.  rescale_grad is used as it is when
 * the launch gets no loss scale; with one (a float in device memory) each
 * block forms (float)(1 / (batch * scale)) in double, as train.c does, so
 * the scale never has to come back to the host. */
typedef struct AmpcMtStep {
    int32_t kind;                     /* AMPC_OPT_* */
    float lr, wd, momentum, clip_gradient, beta1, beta2, epsilon, rescale_grad;
    double batch;                     /* with a device loss scale */
    double adam_corr;                 /* ampc_adam_corr(beta1, beta2, t) */
} AmpcMtStep;

/* The loss scaler's counters, kept on the device next to its state. */
typedef struct AmpcLossScaleStats {
    int64_t steps, skipped, grown, backed_off;
} AmpcLossScaleStats;

/* The CUDA device's loss scale, update count and schedule position, in
 * device memory (device.cu; device.h, "the step without the host"). */
typedef struct AmpcDevLs {
    AmpcLossScale ls;         /* the scale the next step uses */
    RtStepState st;           /* the step in progress (RtCtx.step_state): the scale the loss
                               * head multiplies by, the finite flag, the update count, whether
                               * the scale is dynamic */
    AmpcLossScaleStats stats; /* ampc_cu_loss_scale's counters (dynamic) */
    int64_t steps, nonfinite;
    int64_t lr_first; /* lr[i] is update lr_first + 1 + i */
    int32_t lr_n;
    int32_t inject;    /* --inject-inf-at-step: step inject_at's scale is inf */
    int64_t inject_at;
} AmpcDevLs;

int ampc_cu_set_flag(AmpcStream s, int32_t *flag, int32_t value);
int ampc_cu_cast(AmpcStream s, size_t n, int from, const void *x, int to, void *y, int acc);
int ampc_cu_binary(AmpcStream s, int op, size_t n, int dt, const void *a, const void *b, void *y);
/* da, db may be NULL (not needed) or equal (y = x op x); a, b read by mul only */
int ampc_cu_binary_backward(AmpcStream s, int op, size_t n, int dt, const void *dy, const void *a,
                            const void *b, void *da, void *db, int acc_a, int acc_b);
int ampc_cu_scalar(AmpcStream s, int op, size_t n, int dt, const void *x, float scalar, void *y);
/* x read by rdiv only; dx may be dy */
int ampc_cu_scalar_backward(AmpcStream s, int op, size_t n, int dt, const void *x, float scalar,
                            const void *dy, void *dx, int acc);
int ampc_cu_add_relu(AmpcStream s, size_t n, int dt, const void *a, const void *b, void *y);
int ampc_cu_relu(AmpcStream s, size_t n, int dt, const void *x, void *y);
int ampc_cu_relu_backward(AmpcStream s, size_t n, int dt, const void *y, const void *dy, void *dx,
                          int acc);
int ampc_cu_fill(AmpcStream s, void *dst, int dt, size_t n, float value);
/* ORs "some element is inf or NaN" into *found (never clears it) */
int ampc_cu_finite(AmpcStream s, const void *p, size_t n, int dt, int32_t *found);
/* The same over the gradients of a device table of nblocks blocks */
int ampc_cu_mt_finite(AmpcStream s, const AmpcMtTensor *tensors, const AmpcMtBlock *blocks,
                      int64_t nblocks, int64_t chunk, int32_t *found);
/* One optimizer step over a device table.  The step's scalars come from
 * the host (step, copied into the launch) or, when step_dev is not NULL,
 * from device memory (step may then be NULL): the learning-rate schedule
 * can then reach the kernel with no host sync and a captured CUDA graph
 * replays unchanged (as MXNet's preloaded_multi_sgd takes its lrs as a
 * tensor).  skip (may be NULL): when *skip is nonzero every block returns
 * before touching memory (the dynamic loss scale's skipped step).  found
 * (may be NULL; must not be skip): ORed with "some gradient read was inf
 * or NaN" (the check fused into the update when the step cannot be
 * skipped).  scale (may be NULL): the step's loss scale in device memory,
 * see AmpcMtStep. */
int ampc_cu_mt_optim(AmpcStream s, const AmpcMtTensor *tensors, const AmpcMtBlock *blocks,
                     int64_t nblocks, int64_t chunk, const AmpcMtStep *step,
                     const AmpcMtStep *step_dev, const int32_t *skip, int32_t *found,
                     const float *scale);
/* One thread: state = ampc_loss_scale_update(state, *found != 0, rule);
 * stats (may be NULL) counted. */
int ampc_cu_loss_scale(AmpcStream s, AmpcLossScale *state, const int32_t *found,
                       AmpcLossScaleRule rule, AmpcLossScaleStats *stats);

/* The step without the host (step.cuh), one thread each: ls->st.scale =
 * ls->ls.scale (inf when inject, or ls->inject at step ls->inject_at); *cur = table[st.num_update - lr_first] (a
 * NaN lr past the schedule written); st.num_update++ unless st.dynamic and
 * *flag; ring[steps++ % ring_len] = {ls, st.num_update, *flag == 0} (the
 * step's record, after the rule), nonfinite counted unless dynamic, and
 * st.step advanced (the next step's number). */
int ampc_cu_step_begin(AmpcStream s, AmpcDevLs *ls, int inject);
int ampc_cu_step_pick(AmpcStream s, const AmpcDevLs *ls, const AmpcMtStep *table, AmpcMtStep *cur);
int ampc_cu_step_count(AmpcStream s, AmpcDevLs *ls, const int32_t *flag);
int ampc_cu_step_ring(AmpcStream s, AmpcDevLs *ls, const int32_t *flag, AmpcLossScaleStep *ring,
                      int64_t ring_len);

/* A synthetic batch (synthetic.cuh): n samples of c channels of inner
 * elements each, written as dt (AMPC_DT_*) in NCHW ([n][cp][inner]) or NHWC
 * ([n][inner][cp]), channels c..cp-1 zero; key_x, key_y: the split's
 * generator keys (rt_synthetic_keys); idx: n sample indices in device
 * memory; y: n fp32 labels in [0, classes), or NULL. */
typedef struct {
    size_t n, c, cp, inner;
    int nhwc, dt;
    uint64_t key_x, key_y, classes;
} AmpcSynthBatch;
int ampc_cu_synthetic_batch(AmpcStream s, const AmpcSynthBatch *b, const int64_t *idx, void *x,
                            float *y);

/* A raw batch normalised (ingest.cuh): n samples of c channels of inner
 * bytes at raw (device memory), each byte v of channel ch becoming
 * kernels/ingest.h's ((float)v / div - mean[ch']) / std[ch'] (ch' = ch when
 * norm.channels > 1, else 0), written as dt in NCHW or NHWC with channels
 * c..cp-1 zero, as AmpcSynthBatch's; y[j] = labels[j] when y is not NULL. */
typedef struct {
    int channels;
    float div, mean[4], std[4];
} AmpcIngestNorm;
typedef struct {
    size_t n, c, cp, inner;
    int nhwc, dt;
    AmpcIngestNorm norm;
} AmpcIngest;
int ampc_cu_ingest(AmpcStream s, const AmpcIngest *b, const uint8_t *raw, const float *labels,
                   void *x, float *y);

#ifdef __cplusplus
}
#endif

#endif /* AMPC_CUDA_H */
