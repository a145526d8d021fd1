/* device.h - the device interface under the training loop (docs/training.md,
 * "Device interface").
 *
 * The training driver (train.c and the files it uses: trainer.c, hooks.c,
 * metrics.c, state.c, checkpoint.c) reaches the memory the steps run on only
 * through these calls, so that a device whose memory the host cannot read
 * (CUDA) implements this header and the loop does not change.  A "device
 * pointer" is what rt_dev_alloc returns, or a pointer into it (pointer
 * arithmetic on it is allowed, as with CUDA's device pointers); the driver
 * may keep and pass one but never reads or writes through it.  The
 * implementations: the CPU device (runtime/cpu/device.c: a device pointer is
 * a host pointer, and every call below is synchronous), the CUDA device
 * (runtime/cuda/device.cu: a GPU's memory and one stream), and the engines
 * that wrap one of them with the collectives of several processes (dist/:
 * mpi.c's MPI engine, nccl_engine.c's NCCL engine).
 *
 * One device is one RtDevice; the functions are a table of function
 * pointers (RtDeviceOps), so a second implementation is a second table
 * chosen when the device is opened, not an #ifdef in the loop.  Every call
 * is made from one host thread.
 *
 * The dynamic loss scale lives on the device (docs/training.md, "What the
 * host reads"), in the step's state (rt.h's RtStepState, which the emitted
 * loss head and BatchNorm moving update read on the device through
 * RtCtx.step_state): the finite check writes the device's flag;
 * moving_update and train_update skip a non-finite step on it; ls_update applies
 * the rule (kernels/lossscale.h) to the device's scale and counts, and
 * keeps the step's record in a ring (its flag, the scale after the rule, the
 * update count); the learning rates of the next updates are written ahead
 * (lr_ahead) and picked by the device's own update count.  So a step needs
 * no read-back, and the device decides: the loop reads the device
 * (ls_read, the metrics' rows) only when it logs, checkpoints or the ring
 * is full, and formats its log lines and checkpoints from the records
 * (lossscale.c's rt_loss_scaler_report) without applying the rule itself.  Every call that makes the host wait
 * for the device is counted in RtDevice.syncs (the wrappers below count).
 */
#ifndef AMPC_RT_DEVICE_H
#define AMPC_RT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/data.h" /* RtIngestNorm: a raw batch's normalisation */
#include "kernels/lossscale.h"
#include "program.h"
#include "settings.h" /* RtOptKind: the optimizer= setting's kinds */

typedef struct RtDevice RtDevice;

/* The optimizer's update, as every device's optim_step and train_update
 * take it (the CPU's: runtime/cpu/optim.c; the CUDA's: one multi-tensor
 * launch). */
typedef struct RtOptConfig {
    RtOptKind kind;
    float lr, momentum, wd;
    float rescale_grad;  /* 1/(batch x loss_scale): unscaling folded in */
    float clip_gradient; /* < 0: off */
    float beta1, beta2, epsilon; /* adam */
    int64_t t;           /* adam: this update's count, 1 on the first (bias correction) */
} RtOptConfig;

/* Whether the optimizer keeps a state buffer (momentum != 0, or adam). */
static inline bool rt_optim_has_state(const RtOptConfig *c)
{
    return c->kind == RT_OPT_ADAM || c->momentum != 0.0f;
}
/* State tensors per trainable parameter: 0, 1 (momentum) or 2 (Adam's mean, var). */
static inline int rt_optim_nstate(const RtOptConfig *c)
{
    return c->kind == RT_OPT_ADAM ? 2 : c->momentum != 0.0f ? 1 : 0;
}

/* One tensor on the device: a device pointer, elements and their dtype. */
typedef struct {
    void *ptr;
    size_t n;
    RtDType dt;
} RtDevTensor;

/* A point in the device's stream of work (CUDA: an event).  Zero-initialised
 * means "never recorded", which counts as complete. */
typedef struct {
    uint64_t seq;
} RtDevEvent;

/* A timing point in the device's stream of work (--profile's per-call
 * times; CUDA: an event with timing, from a pool; CPU: the host clock). */
typedef struct {
    int64_t slot;  /* the device's own (CUDA: its pool index) */
    double host_s; /* the CPU device's: the host clock when recorded */
} RtDevTime;

typedef enum { RT_REDUCE_SUM, RT_REDUCE_MEAN } RtReduceOp;

#define RT_DEV_ALIGN 64 /* every rt_dev_alloc block starts at a multiple of this */

/* Steps whose records (AmpcLossScaleStep) the device keeps between two
 * ls_read calls, and so the learning rates lr_ahead writes (one more than
 * this). */
#define RT_DEV_LS_RING 1024

/* The device's loss scale and update counter, set once per run. */
typedef struct {
    bool dynamic;           /* the rule applies and a non-finite step is skipped */
    AmpcLossScale s;        /* the scale of the first step, and its tracker */
    AmpcLossScaleRule rule;
    double batch;           /* rescale_grad = (float)(1 / (batch x the step's scale)) */
    int64_t num_update;     /* updates applied before (a resumed run) */
    /* The first step's number (RtStepState.step, which each ls_update
     * advances: Dropout's counter, read on the device) */
    int64_t step;
    /* --inject-inf-at-step decided on the device: when inject_inf, step_begin
     * of step inject_inf_at makes the scale inf (the host passes nothing per
     * step, so a captured CUDA graph injects it too) */
    bool inject_inf;
    int64_t inject_inf_at;
} RtDevLsInit;

/* What ls_read returns: the state after the last ls_update. */
typedef struct {
    AmpcLossScale s;        /* the scale the next step uses */
    int64_t steps;          /* ls_update calls since ls_init */
    int64_t skipped;        /* non-finite steps under a dynamic scale (skipped) */
    int64_t nonfinite;      /* non-finite steps otherwise (applied) */
    int64_t num_update;     /* updates applied, ls_init's included */
} RtDevLsState;

/* The form a batch is written in on the device (synthetic_batch, ingest):
 * the first layer's (program.h's RtInputForm: the dtype and layout the
 * steps' first calls would cast and lay the data input out to, which the
 * step then skips) or, all zero, the data input's own (fp32, [n, sample]).
 * A sample is c channels of `sample / c` elements (c 0: one channel). */
typedef struct {
    size_t c;
    RtDType dt;
    bool nhwc;
} RtDevForm;

/* A synthetic batch made on the device (synthetic_batch): data/synthetic.c's
 * values of n samples of `sample` elements each (a sample's element e is
 * draw k * sample + e of the split's data stream, key_x), written in `form`,
 * and their labels in [0, classes) (key_y): rt_synthetic_keys's keys. */
typedef struct {
    size_t n, sample;
    uint64_t key_x, key_y, classes;
    RtDevForm form; /* of x */
} RtDevSynth;

/* A batch of a source's raw samples uploaded and normalised on the device
 * (ingest; issue 26, point 2): n samples of `sample` bytes at host_raw and
 * n fp32 labels at host_y (host_alloc's memory, which the caller leaves
 * alone until `copied` is done), copied through `scratch` (device memory of
 * rt_dev_ingest_scratch_bytes) into x, each byte v of channel ch (the
 * sample's [norm's channels][inner] order) as kernels/ingest.h's
 * ((float)v / div - mean[ch]) / std[ch] written in `form`, and the labels
 * into y (may be NULL). */
typedef struct {
    size_t n, sample;
    const uint8_t *host_raw;
    const float *host_y;
    void *scratch, *x;
    float *y;
    RtIngestNorm norm; /* the source's (data.h): channels 1, or form.c */
    RtDevForm form;
} RtDevIngest;

/* the device memory an ingest of n samples of `sample` bytes copies through:
 * the bytes, then the labels at a multiple of 16 bytes */
static inline size_t rt_dev_ingest_labels_at(size_t n, size_t sample)
{
    return (n * sample + 15) / 16 * 16;
}
static inline size_t rt_dev_ingest_scratch_bytes(size_t n, size_t sample)
{
    return rt_dev_ingest_labels_at(n, sample) + n * sizeof(float);
}

typedef struct {
    const char *name; /* "cpu" */
    /* ---- memory ---- */
    /* bytes of device memory, RT_DEV_ALIGN-aligned and zeroed (0 bytes: a
     * valid block of RT_DEV_ALIGN); NULL with "out of memory ..." naming
     * what in err */
    void *(*alloc)(RtDevice *d, size_t bytes, const char *what, char *err, size_t errlen);
    void (*free)(RtDevice *d, void *p); /* NULL: nothing */
    /* host memory the copies read and write fastest (CUDA: pinned), aligned
     * and zeroed like alloc; the loop's staging buffers */
    void *(*host_alloc)(RtDevice *d, size_t bytes, const char *what, char *err, size_t errlen);
    void (*host_free)(RtDevice *d, void *p);
    void (*to_device)(RtDevice *d, void *dst, const void *host_src, size_t bytes);
    void (*to_host)(RtDevice *d, void *host_dst, const void *src, size_t bytes);
    /* queued: host_dst (from host_alloc) holds the bytes once the host has
     * waited for the device (synchronize, ls_read); no wait here */
    void (*to_host_async)(RtDevice *d, void *host_dst, const void *src, size_t bytes);
    /* n elements of dt set to value (rounded to dt once, as rt_from_f32) */
    void (*fill)(RtDevice *d, void *dst, RtDType dt, size_t n, float value);
    /* Optional (NULL: the loop fills the batch on the host and copies it):
     * the synthetic batch of the n sample indices at idx (device memory) into
     * x (in s->form) and y [n] (fp32; may be NULL), device memory, without
     * the host, queued (CUDA: cuda/synthetic.cuh's kernel; CPU: the same
     * draws, then the program's own cast and layout calls) */
    void (*synthetic_batch)(RtDevice *d, const RtDevSynth *s, const int64_t *idx, void *x,
                            float *y);
    /* Optional (NULL: the loop normalises on the host and copies floats):
     * g's raw batch copied to the device (CUDA: on a copy stream, after the
     * previous ingest's kernel has read the scratch, so it overlaps the step
     * before) and normalised into g->x and g->y on the compute stream once
     * copied; `copied` recorded where the host's buffers may be refilled.
     * Queued: no wait. */
    void (*ingest)(RtDevice *d, const RtDevIngest *g, RtDevEvent *copied);
    /* ---- per-run state made once ---- */
    /* Before the first step: records the model and its buffers (ctx.buf,
     * ctx.master must not move afterwards) and makes what every later call
     * reuses: the gradient bucket (CPU), descriptors and chosen algorithms
     * (cuDNN).  Calling it again with the same model and buffers changes
     * nothing; with other buffers it rebuilds. */
    bool (*setup)(RtDevice *d, const RtModel *m, const RtCtx *ctx, char *err, size_t errlen);
    /* ---- the step without the host: loss scale, update count, schedule ---- */
    /* The loss scale's state, the rule and the update count; the ring
     * emptied.  After setup, before the first step. */
    bool (*ls_init)(RtDevice *d, const RtDevLsInit *c, char *err, size_t errlen);
    /* The step's loss scale := the device's scale (inf with inject_inf, or
     * at ls_init's inject_inf_at: --inject-inf-at-step), in the step's state
     * (step_state), where the loss head's backward reads it; no read-back. */
    void (*step_begin)(RtDevice *d, bool inject_inf);
    /* A device pointer to the step's state (rt.h's RtStepState: the scale,
     * the finite flag, the update count), valid from open to close: what the
     * trainer puts in RtCtx.step_state for the emitted steps' kernels. */
    const RtStepState *(*step_state)(RtDevice *d);
    /* The context every call of the device's kernels takes (RtCtx.cuda:
     * the CUDA device's run state of its libraries, which the device owns);
     * NULL on the CPU, whose kernels need none. */
    struct RtCudaCtx *(*kernel_ctx)(RtDevice *d);
    /* lr[i]: the learning rate of update first + 1 + i, i < n <= RT_DEV_LS_RING
     * + 1 (the schedule, lr.c), with oc's other values (Adam's correction
     * follows from the update's count).  Written without waiting; the values
     * of updates before `first` may be dropped. */
    void (*lr_ahead)(RtDevice *d, const struct RtOptConfig *oc, const float *lr, int64_t first,
                     int n);
    /* fn(ctx): the model's moving_update (BatchNorm statistics), whose
     * kernels read the step's state and write nothing on a step a dynamic
     * scale's flag skips */
    void (*moving_update)(RtDevice *d, void (*fn)(RtCtx *), RtCtx *ctx);
    /* The step's update: none when a dynamic scale's flag is set; else
     * optim_step with the learning rate lr_ahead gave for the device's next
     * update, t = that count, rescale_grad from the step's scale, the flag
     * fused as optim_step's; the update count then grows. */
    void (*train_update)(RtDevice *d, float *const *state, float *const *state2,
                         const struct RtOptConfig *oc);
    /* After the step's update: dynamic: the rule applied to the scale, a
     * skip counted; else a non-finite step counted; then the step's record
     * into the ring (its flag, the scale and tracker after the rule, the
     * update count). */
    void (*ls_update)(RtDevice *d);
    /* The state, and steps[k - from] the record of step k for steps from ..
     * st->steps - 1 (at most RT_DEV_LS_RING of them; steps may be NULL):
     * waits for the work before it. */
    void (*ls_read)(RtDevice *d, RtDevLsState *st, AmpcLossScaleStep *steps, int64_t from);
    /* flag := finite (the MPI engine's reduced flag; tests) */
    void (*set_flag)(RtDevice *d, bool finite);
    /* ---- the finite flag, kept on the device ---- */
    /* flag = every gradient of every trainable parameter is finite (the
     * dynamic loss scale's check before any update) */
    void (*check_grads)(RtDevice *d);
    /* flag = n elements at p are finite (--check-numerics per node) */
    void (*check_finite)(RtDevice *d, const void *p, size_t n, RtDType dt);
    /* the flag, read back to the host (waits for the work before it) */
    bool (*read_flag)(RtDevice *d);
    /* diagnostics after a non-finite step: the first parameter whose
     * gradient holds inf/NaN, or -1 */
    int (*first_nonfinite)(RtDevice *d);
    /* ---- the optimizer ---- */
    /* One fused update of every parameter with a gradient (optim.c's
     * rt_optim_step2 semantics); flag = every gradient it read was finite.
     * state2 may be NULL (sgd, nag). */
    void (*optim_step)(RtDevice *d, float *const *state, float *const *state2,
                       const struct RtOptConfig *c);
    /* ---- ordering ---- */
    void (*event_record)(RtDevice *d, RtDevEvent *e);
    void (*event_wait)(RtDevice *d, const RtDevEvent *e); /* the host waits for e */
    bool (*event_done)(RtDevice *d, const RtDevEvent *e);
    void (*synchronize)(RtDevice *d); /* the host waits for all work */
    /* ---- timing (--profile's per-call times; NULL where a device has none) ---- */
    /* marks after this reuse the device's timing slots (the earlier marks
     * must have been read) */
    void (*time_reset)(RtDevice *d);
    /* a point after the work queued so far; false when no slot is left */
    bool (*time_mark)(RtDevice *d, RtDevTime *t);
    /* seconds of device work from a to b (marks since the same reset); waits
     * for b (the caller counts that wait as its own) */
    double (*time_elapsed)(RtDevice *d, const RtDevTime *a, const RtDevTime *b);
    /* ---- collectives over the devices of a run ---- */
    int (*world_size)(const RtDevice *d);
    int (*rank)(const RtDevice *d);
    /* In place on every device: each tensor of the bucket becomes the sum
     * (or mean) of that tensor over all devices.  False with a message for
     * a bad request (n < 0, a NULL tensor with elements). */
    bool (*allreduce)(RtDevice *d, const RtDevTensor *bucket, int n, RtReduceOp op, char *err,
                      size_t errlen);
    /* In place: every device's tensors become root's. */
    bool (*broadcast)(RtDevice *d, const RtDevTensor *bucket, int n, int root, char *err,
                      size_t errlen);
    /* ---- the step as one CUDA graph (--cuda-graph 1; docs/backend-cuda.md) ---- */
    /* Optional (NULL: the emitted step's kernels are called at once): fn(ctx),
     * the emitted train step's kernels queued on the device's stream (the
     * CPU device records it while a graph is captured) */
    void (*launch)(RtDevice *d, void (*fn)(RtCtx *), RtCtx *ctx);
    /* Optional, all three or none.  graph_begin: the calls from here to the
     * step's end (ls_update) are captured, not run.  graph_end: the captured
     * calls made into the device's graph, then launched once (the step ran);
     * false with why: no graph (the step did not run; the loop runs it
     * eagerly).  graph_replay: the captured step run again, with what it
     * captured (the host's calls skipped); false with why (the step's state
     * is then unknown).  CUDA: cudaStreamBeginCapture, EndCapture,
     * GraphInstantiate, GraphLaunch; CPU: a recording of the calls, replayed
     * (a value the host passes by value that changed since is an error). */
    bool (*graph_begin)(RtDevice *d, char *err, size_t errlen);
    bool (*graph_end)(RtDevice *d, char *err, size_t errlen);
    bool (*graph_replay)(RtDevice *d, char *err, size_t errlen);
    void (*close)(RtDevice *d);
} RtDeviceOps;

/* What every implementation's RtDevice begins with. */
struct RtDevice {
    const RtDeviceOps *ops;
    uint64_t syncs; /* calls that made the host wait for the device (the wrappers count) */
    /* The capture mode (rt_dev_capture_mode): between a step's begin
     * (step_begin) and its end (ls_update) the step must be one a CUDA graph
     * can hold, so every call below that waits for the device (a wait, a
     * synchronisation, a read-back: the only way the host can branch on a
     * device value), allocates or frees, or writes a value the host decided
     * (set_flag) is an error: counted, the first one's name kept.  The
     * wrappers check; a wrapping engine's own calls to its inner device are
     * not seen (MPI's flag round trip is a host read: not capture-safe). */
    bool capture, in_step;
    uint64_t capture_errors;
    const char *capture_what; /* the first error's call */
    bool graphing; /* between graph_begin and graph_end: the same rules as capture */
    uint64_t graph_replays; /* graph_replay calls that ran the step (counted, never timed) */
};

static inline void rt_dev_capture_mode(RtDevice *d, bool on)
{
    d->capture = on;
    d->in_step = false;
    d->capture_errors = 0;
    d->capture_what = NULL;
}
/* what a call that a captured step may not make does first */
static inline void rt_dev_uncapturable(RtDevice *d, const char *what)
{
    if ((d->capture || d->graphing) && d->in_step && d->capture_errors++ == 0)
        d->capture_what = what;
}

/* runtime/cpu/device.c: the CPU device (world size 1, rank 0).  NULL with a
 * message when out of memory. */
RtDevice *rt_device_cpu_open(char *err, size_t errlen);
/* The CPU device's lagging mode (a test mode; d from rt_device_cpu_open):
 * event_done is false for an event until the host has ended the step after
 * the one it was recorded in (ls_update) or waited for it, as on a GPU that
 * runs a step behind the host, so that rt_dev_event_wait counts the waits
 * such a device makes in RtDevice.syncs (docs/training.md, "What the host
 * reads").  The work itself still runs at once. */
void rt_device_cpu_lagging(RtDevice *d, bool on);

/* The calls, through the table. */
static inline void *rt_dev_alloc(RtDevice *d, size_t bytes, const char *what, char *err,
                                 size_t errlen)
{
    rt_dev_uncapturable(d, "alloc");
    return d->ops->alloc(d, bytes, what, err, errlen);
}
static inline void rt_dev_free(RtDevice *d, void *p)
{
    rt_dev_uncapturable(d, "free");
    d->ops->free(d, p);
}
static inline void *rt_dev_host_alloc(RtDevice *d, size_t bytes, const char *what, char *err,
                                      size_t errlen)
{
    rt_dev_uncapturable(d, "host_alloc");
    return d->ops->host_alloc(d, bytes, what, err, errlen);
}
static inline void rt_dev_host_free(RtDevice *d, void *p)
{
    rt_dev_uncapturable(d, "host_free");
    d->ops->host_free(d, p);
}
static inline void rt_dev_to_device(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    d->ops->to_device(d, dst, src, bytes);
}
static inline void rt_dev_to_host(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    rt_dev_uncapturable(d, "to_host");
    d->syncs++;
    d->ops->to_host(d, dst, src, bytes);
}
static inline void rt_dev_to_host_async(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    d->ops->to_host_async(d, dst, src, bytes);
}
static inline void rt_dev_fill(RtDevice *d, void *dst, RtDType dt, size_t n, float value)
{
    d->ops->fill(d, dst, dt, n, value);
}
static inline bool rt_dev_has_synthetic(const RtDevice *d) { return d->ops->synthetic_batch; }
static inline void rt_dev_synthetic_batch(RtDevice *d, const RtDevSynth *s, const int64_t *idx,
                                          void *x, float *y)
{
    d->ops->synthetic_batch(d, s, idx, x, y);
}
static inline bool rt_dev_has_ingest(const RtDevice *d) { return d->ops->ingest; }
static inline void rt_dev_ingest(RtDevice *d, const RtDevIngest *g, RtDevEvent *copied)
{
    d->ops->ingest(d, g, copied);
}
static inline bool rt_dev_setup(RtDevice *d, const RtModel *m, const RtCtx *ctx, char *err,
                                size_t errlen)
{
    return d->ops->setup(d, m, ctx, err, errlen);
}
static inline void rt_dev_check_grads(RtDevice *d) { d->ops->check_grads(d); }
static inline void rt_dev_check_finite(RtDevice *d, const void *p, size_t n, RtDType dt)
{
    d->ops->check_finite(d, p, n, dt);
}
static inline bool rt_dev_read_flag(RtDevice *d)
{
    rt_dev_uncapturable(d, "read_flag");
    d->syncs++;
    return d->ops->read_flag(d);
}
static inline int rt_dev_first_nonfinite(RtDevice *d)
{
    rt_dev_uncapturable(d, "first_nonfinite");
    d->syncs++;
    return d->ops->first_nonfinite(d);
}
static inline bool rt_dev_ls_init(RtDevice *d, const RtDevLsInit *c, char *err, size_t errlen)
{
    return d->ops->ls_init(d, c, err, errlen);
}
/* the step's begin (the capture mode's) */
static inline void rt_dev_step_begin(RtDevice *d, bool inject_inf)
{
    d->ops->step_begin(d, inject_inf);
    d->in_step = d->capture || d->graphing;
}
static inline const RtStepState *rt_dev_step_state(RtDevice *d) { return d->ops->step_state(d); }
static inline struct RtCudaCtx *rt_dev_kernel_ctx(RtDevice *d) { return d->ops->kernel_ctx(d); }
static inline void rt_dev_lr_ahead(RtDevice *d, const struct RtOptConfig *oc, const float *lr,
                                   int64_t first, int n)
{
    d->ops->lr_ahead(d, oc, lr, first, n);
}
static inline void rt_dev_moving_update(RtDevice *d, void (*fn)(RtCtx *), RtCtx *ctx)
{
    d->ops->moving_update(d, fn, ctx);
}
static inline void rt_dev_train_update(RtDevice *d, float *const *state, float *const *state2,
                                       const struct RtOptConfig *oc)
{
    d->ops->train_update(d, state, state2, oc);
}
/* the step's end (the capture mode's) */
static inline void rt_dev_ls_update(RtDevice *d)
{
    d->ops->ls_update(d);
    d->in_step = false;
}
static inline void rt_dev_ls_read(RtDevice *d, RtDevLsState *st, AmpcLossScaleStep *steps,
                                  int64_t from)
{
    rt_dev_uncapturable(d, "ls_read");
    d->syncs++;
    d->ops->ls_read(d, st, steps, from);
}
static inline void rt_dev_set_flag(RtDevice *d, bool finite)
{
    rt_dev_uncapturable(d, "set_flag");
    d->ops->set_flag(d, finite);
}
static inline void rt_dev_optim_step(RtDevice *d, float *const *state, float *const *state2,
                                     const struct RtOptConfig *c)
{
    d->ops->optim_step(d, state, state2, c);
}
static inline void rt_dev_event_record(RtDevice *d, RtDevEvent *e) { d->ops->event_record(d, e); }
/* counted only when the host really waits (the event is not complete) */
static inline void rt_dev_event_wait(RtDevice *d, const RtDevEvent *e)
{
    rt_dev_uncapturable(d, "event_wait");
    if (!d->ops->event_done(d, e))
        d->syncs++;
    d->ops->event_wait(d, e);
}
static inline bool rt_dev_has_timing(const RtDevice *d)
{
    return d->ops->time_mark && d->ops->time_elapsed && d->ops->time_reset;
}
static inline bool rt_dev_event_done(RtDevice *d, const RtDevEvent *e)
{
    return d->ops->event_done(d, e);
}
static inline void rt_dev_synchronize(RtDevice *d)
{
    rt_dev_uncapturable(d, "synchronize");
    d->syncs++;
    d->ops->synchronize(d);
}
static inline int rt_dev_world_size(const RtDevice *d) { return d->ops->world_size(d); }
static inline int rt_dev_rank(const RtDevice *d) { return d->ops->rank(d); }
static inline bool rt_dev_allreduce(RtDevice *d, const RtDevTensor *bucket, int n, RtReduceOp op,
                                    char *err, size_t errlen)
{
    return d->ops->allreduce(d, bucket, n, op, err, errlen);
}
static inline bool rt_dev_broadcast(RtDevice *d, const RtDevTensor *bucket, int n, int root,
                                    char *err, size_t errlen)
{
    return d->ops->broadcast(d, bucket, n, root, err, errlen);
}
/* the emitted train step on the device (launch, else called at once) */
static inline void rt_dev_launch(RtDevice *d, void (*fn)(RtCtx *), RtCtx *ctx)
{
    if (d->ops->launch)
        d->ops->launch(d, fn, ctx);
    else
        fn(ctx);
}
static inline bool rt_dev_has_graph(const RtDevice *d)
{
    return d->ops->launch && d->ops->graph_begin && d->ops->graph_end && d->ops->graph_replay;
}
static inline bool rt_dev_graph_begin(RtDevice *d, char *err, size_t errlen)
{
    d->graphing = d->ops->graph_begin(d, err, errlen);
    return d->graphing;
}
static inline bool rt_dev_graph_end(RtDevice *d, char *err, size_t errlen)
{
    d->graphing = false;
    return d->ops->graph_end(d, err, errlen);
}
static inline bool rt_dev_graph_replay(RtDevice *d, char *err, size_t errlen)
{
    bool ok = d->ops->graph_replay(d, err, errlen);
    d->graph_replays += ok;
    return ok;
}
static inline void rt_device_close(RtDevice *d)
{
    if (d)
        d->ops->close(d);
}

#endif
