/* program.h - the contract between a program ampc emits and the runtime's
 * training driver (runtime/train.c).
 *
 * The emitted C file defines one `const RtModel ampc_model` describing the
 * model's tensors and two step functions; the runtime owns everything else:
 * the command line, data, parameter initialisation, buffers, the optimizer,
 * loss scaling, logs and checkpoints.  Generated code never allocates.
 *
 * Buffers are numbered; a buffer's size is `fixed + per_sample * batch`
 * elements of its dtype.  Parameters live in buffers too (the train and
 * inference steps read them from the same place); each trainable
 * parameter's gradient is one buffer of the train step.
 *
 * The compiler's memory plan (passes/memplan.c) places the steps' other
 * values in one arena of `arena_fixed + arena_per_sample * batch` bytes: a
 * buffer with in_arena starts `off_fixed + off_per_sample * batch`
 * bytes into it (both parts multiples of 64), for the largest batch the run
 * uses; buffers that are never live at the same time share bytes, so a
 * step's kernels write every element of their outputs and nothing outside
 * the step may read an arena buffer except the train step's results (its
 * loss head's output, the gradients, what moving_update reads) between that
 * step and the next call of any step.  A buffer not in_arena
 * (parameters, inputs; every buffer under --no-memplan) has memory of its
 * own, zeroed.
 */
#ifndef AMPC_PROGRAM_H
#define AMPC_PROGRAM_H

#include <stdio.h>

#include "rt.h"

/* Parameter kinds, as the compiler's PK_* (weight decay and initialiser
 * defaults go by kind). */
typedef enum {
    RT_PK_WEIGHT, RT_PK_BIAS, RT_PK_GAMMA, RT_PK_BETA, RT_PK_MOVING_MEAN, RT_PK_MOVING_VAR,
    RT_PK_OTHER,
} RtParamKind;

typedef struct {
    const char *name;     /* "stage1_conv1_weight" */
    RtParamKind kind;
    RtDType dtype;        /* what the steps read: the 16-bit shadow, or fp32 */
    bool has_master;      /* an fp32 master the optimizer updates (AMP, multi_precision) */
    int rank;
    int64_t shape[RT_MAX_RANK];
    int64_t numel;
    const char *init;     /* "default" (by kind, MXNet's rule) or an initialiser call */
    float wd_mult, lr_mult;
    int buffer;           /* where the steps read it */
    int grad;             /* the buffer of its gradient in the train step, -1 for none */
    /* How it is stored on the device, and with it its gradient, fp32 master
     * and optimizer state (the optimizer is elementwise, so they agree):
     * RT_LAYOUT_NHWC on a 4-D convolution weight means KRSC ([k, r, s, c]),
     * shape[] staying the canonical OIHW.  Everything that crosses the host
     * boundary (initialisation, checkpoints, predict's weights, .params)
     * converts, so files always hold the canonical layout.  Last, so tables
     * that omit it (positional initializers) are canonical. */
    RtLayout layout;
} RtParam;

typedef struct {
    const char *name;     /* the value's node name, for --check-numerics */
    RtDType dtype;
    int64_t fixed, per_sample;     /* elements */
    bool in_arena;                 /* false: memory of its own (zero-initialised tables say so) */
    int64_t off_fixed, off_per_sample; /* bytes into the arena when in_arena */
} RtBuffer;

struct RtCudaCtx; /* runtime/cuda/rt_cuda.h: the CUDA kernels' run state */

/* What a step function sees. */
typedef struct RtCtx {
    int64_t batch;        /* N */
    void **buf;           /* buffer pointers, by number */
    float **master;       /* fp32 master of parameter i (NULL when it has none) */
    /* the step's state in the device's memory (rt.h; a device pointer, set
     * when the device is opened): the loss head's scale, the flag on which
     * BatchNorm's moving update does nothing */
    const RtStepState *step_state;
    /* the run state every rt_cuda_* call takes (stream, library handles,
     * plans), the CUDA device's; NULL on the CPU */
    struct RtCudaCtx *cuda;
    /* Dropout masks: a function of (seed, step, node).  The kernels take the
     * step from the device's step state (rt_ctx_step); step is the host's
     * copy (the hooks', and a harness's without a device) */
    uint64_t seed, step;
    void *ws;             /* workspace, grown by rt_ctx_ws */
    size_t ws_bytes;
    int check_node;       /* --check-numerics: called after each node when set */
    void (*after_node)(struct RtCtx *ctx, int node, const char *name, const char *op, int buffer);
    /* called, when set, right after the call of the train step that
     * completes parameter `param`'s gradient (its last writer: a fused
     * BatchNorm backward completes dgamma and dbeta at once), in the order
     * backward completes them (ties by gradient buffer); the MPI engine
     * starts a bucket's all-reduce there */
    void (*grad_ready)(struct RtCtx *ctx, int param);
    /* ws is device memory (a model with open_device), allocated once at
     * start-up from workspace_bytes: rt_ctx_ws cannot grow it */
    bool ws_device;
    /* the batch is already in the first layer's form (RtModel.input_form):
     * the step skips its data input's cast and layout calls (the trainer
     * sets it for the batch it wrote so) */
    bool input_formed;
} RtCtx;

/* A workspace of at least `bytes` (grows on the first step only; on a
 * device, asking for more than start-up allocated ends the program with a
 * message). */
void *rt_ctx_ws(RtCtx *ctx, size_t bytes);

/* The step's number a CPU kernel takes (Dropout's counter): the device's
 * (RtStepState.step, which a CUDA graph does not freeze; a CUDA kernel reads
 * it on the device), else the host's. */
static inline uint64_t rt_ctx_step(const RtCtx *ctx)
{
    return ctx->step_state ? ctx->step_state->step : ctx->step;
}

struct RtDevice;       /* device.h */
struct RtDeviceConfig; /* below: the device options a GPU program opens its device with */

/* The first layer's form of the data input in one step: where the step's
 * first calls (the data input's amp_cast, then its _layout, each read only
 * by the next) leave it, and how.  A device that writes a batch (device.h's
 * synthetic_batch, ingest) may write it there in that dtype and layout
 * instead of the data buffer, and set RtCtx.input_formed: the step then
 * skips those calls (their reads of the data buffer and their writes, which
 * no other call reads).  set false: none (the data buffer itself). */
typedef struct {
    bool set;
    int buffer; /* the chain's last buffer */
    int calls;  /* the first calls of the step the chain is (1 or 2) */
    RtDType dtype;
    bool nhwc;
} RtInputForm;

typedef struct RtModel {
    const char *name;                 /* the model */
    int nparams;
    const RtParam *params;
    int nbuffers;
    const RtBuffer *buffers;
    int64_t arena_fixed, arena_per_sample; /* bytes of the shared arena */
    int data, label;                  /* input buffers (fp32); label -1 without a loss head */
    int prob_train, prob_infer;       /* the loss head's output in each step (fp32 [N, classes]);
                                       * without a loss head (train_step NULL: the program only
                                       * predicts) prob_train is -1 and prob_infer the model's
                                       * output, [N, classes] with classes its per-sample size */
    int data_rank;                    /* per-sample input shape, e.g. [1, 8, 8] */
    int64_t data_shape[RT_MAX_RANK];
    int64_t classes;
    const char *amp;                  /* "off", "float16", "bfloat16" */
    const char *const *train_defaults; /* "key=value" run-time defaults from the train block, NULL-ended */
    /* the largest workspace a call of either step asks for at batch size
     * batch (one buffer, allocated at start-up), its sizers asking ctx's
     * kernel libraries (ctx->cuda); NULL: grown on demand */
    size_t (*workspace_bytes)(const struct RtCtx *ctx, int64_t batch);
    void (*train_step)(RtCtx *ctx);   /* forward and backward on the batch in data/label */
    void (*moving_update)(RtCtx *ctx);/* BatchNorm moving statistics (skipped on overflow) */
    void (*infer_step)(RtCtx *ctx);   /* inference forward (BatchNorm on moving statistics) */
    /* the kvstore pass's gradient buckets (dist_sync, docs/kvstore.md),
     * when it placed the program; 0 buckets: the MPI engine's own rule.
     * Bucket b holds parameters kv_bucket_params[kv_bucket_start[b] ..
     * kv_bucket_start[b + 1]), in the order backward completes them. */
    int kv_nbuckets;
    const int *kv_bucket_start;       /* kv_nbuckets + 1 entries */
    const int *kv_bucket_params;      /* parameter indices */
    /* the kvstore pass's placement (RtKvPlace of runtime/dist/coll.h: local
     * 1, device 2, nccl 3, dist_sync 4), 0 when it placed none;
     * rt_cuda_open_device opens a GPU program's device for it, the ranks'
     * start-up check compares it */
    int kv_place;
    /* The device the steps run on, opened by the trainer (runtime/trainer.c)
     * before any buffer is allocated, with the program's device options
     * (dc); NULL: the CPU device (under MPI, with its collectives).  A CUDA
     * program (ampc --target=cuda) sets rt_cuda_open_device
     * (runtime/cuda/program.c), whose memory is not the host's.  NULL with
     * a message in err when no device can be opened. */
    struct RtDevice *(*open_device)(const struct RtModel *m, const struct RtDeviceConfig *dc,
                                    char *err, size_t errlen);
    /* --cudnn-check (a program with open_device): every convolution's and
     * GEMM's library descriptors built and checked at batch size `batch`
     * without a GPU, one line per distinct one to out; 0 when all pass, 1
     * (with each failure, naming its node, on err) otherwise.
     * rt_cuda_check_model (runtime/cuda/program.c). */
    int (*check_device)(const struct RtModel *m, const struct RtDeviceConfig *dc, int64_t batch,
                        FILE *out, FILE *err);
    /* What the ranks of a data-parallel run compare at start-up
     * (runtime/rankcheck.h): a hash ampc stamps into the emitted C (of that C
     * and ampc's version; 0 in a hand-written model), and the kvstore pass's
     * wire dtype ("float16", "float32"; NULL when it placed nothing). */
    uint64_t build_id;
    const char *kv_wire;
    /* The program's --version: the release of the ampc that emitted it, the
     * SHA-256 of its model's files (the model and its imports, as read), and
     * ampc's command line without absolute paths (NULL in models written by
     * hand) */
    const char *ampc_version, *model_hash, *built_with;
    RtInputForm input_form[2]; /* the train step's [0], the inference step's [1] */
} RtModel;

/* The device's run-time options (the program's --cudnn-* flags,
 * docs/backend-cuda.md), given to a CUDA program's open_device. */
typedef struct RtDeviceConfig {
    bool cudnn_autotune;         /* time cuDNN's candidate plans per shape at start-up
                                  * (MXNET_CUDNN_AUTOTUNE_DEFAULT=1), else take the
                                  * heuristic's first that fits */
    int64_t cudnn_workspace_mb;  /* the most workspace one convolution or GEMM may use */
    int cudnn_fp32;              /* fp32 convolutions: 0 exact (no tensor cores, FFT or
                                  * Winograd), 1 tf32, 2 fast (runtime/cuda/plan.h) */
    bool cudnn_nondeterministic; /* engines whose results may change run to run allowed */
    int cudnn_autotune_max;      /* candidates timed per convolution at most */
    bool cudnn_runtime_compiled; /* runtime-compiled engines allowed */
    const char *cudnn_plan_cache; /* the plan cache file (runtime/cuda/tune.h), or NULL */
} RtDeviceConfig;
#define RT_CUDNN_AUTOTUNE_MAX_DEFAULT 4
#define RT_CUDNN_WORKSPACE_MB_DEFAULT 1024 /* MXNet's Convolution workspace default */
/* The defaults: autotune on, RT_CUDNN_WORKSPACE_MB_DEFAULT, exact fp32,
 * deterministic engines. */
RtDeviceConfig rt_device_config_default(void);
/* The flags as given: < 0 where a flag was not given. */
typedef struct {
    int autotune;
    int64_t workspace_mb;
    int fp32;
    int nondeterministic;
    int autotune_max;
    int runtime_compiled;
    const char *plan_cache; /* NULL: not given */
} RtDeviceFlags;
/* dc: the defaults with the flags given applied, for model m.  False with a
 * message when m runs on the CPU (no open_device) and a flag was given: the
 * flags mean nothing there. */
bool rt_device_configure(const struct RtModel *m, const RtDeviceFlags *f, RtDeviceConfig *dc,
                         char *err, size_t errlen);
/* --cudnn-check: m's check_device with dc at batch size `batch`; 2 with a
 * message for a CPU program */
int rt_device_check(const struct RtModel *m, const RtDeviceConfig *dc, int64_t batch, FILE *out,
                    FILE *err);

extern const RtModel ampc_model;

#endif
