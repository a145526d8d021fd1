/* device.h - the device interface under the training loop (docs/training.md,
 * "Device interface").
 *
 * The training driver (train.c and the files it uses: trainer.c, hooks.c,
 * metrics.c, state.c, checkpoint.c) reaches the memory the steps run on only
 * through these calls, so that a device whose memory the host cannot read
 * (CUDA) implements this header and the loop does not change.  A "device
 * pointer" is what rt_dev_alloc returns, or a pointer into it (pointer
 * arithmetic on it is allowed, as with CUDA's device pointers); the driver
 * may keep and pass one but never reads or writes through it.  The CPU
 * device (runtime/cpu/device.c) is the only one today: there a device
 * pointer is a host pointer, and every call below is synchronous.
 *
 * One device is one RtDevice; the functions are a table of function
 * pointers (RtDeviceOps), so a second implementation is a second table
 * chosen when the device is opened, not an #ifdef in the loop.  Every call
 * is made from one host thread.
 *
 * The loss scale stays on the host: the loop reads the finite flag back once
 * per step anyway (the skip decision and the overflow log lines need it),
 * the scale reaches the train step as a kernel argument (ctx.loss_scale),
 * and its update is a few scalar operations (lossscale.c).  A device that
 * wants no read-back per step would move it here together with the logs'
 * per-step overflow lines.
 */
#ifndef AMPC_RT_DEVICE_H
#define AMPC_RT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "program.h"

typedef struct RtDevice RtDevice;
struct RtOptConfig; /* train.h */

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

typedef enum { RT_REDUCE_SUM, RT_REDUCE_MEAN } RtReduceOp;

#define RT_DEV_ALIGN 64 /* every rt_dev_alloc block starts at a multiple of this */

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
    /* n elements of dt set to value (rounded to dt once, as rt_from_f32) */
    void (*fill)(RtDevice *d, void *dst, RtDType dt, size_t n, float value);
    /* ---- per-run state made once ---- */
    /* Before the first step: records the model and its buffers (ctx.buf,
     * ctx.master must not move afterwards) and makes what every later call
     * reuses: the gradient bucket (CPU), descriptors and chosen algorithms
     * (cuDNN).  Calling it again with the same model and buffers changes
     * nothing; with other buffers it rebuilds. */
    bool (*setup)(RtDevice *d, const RtModel *m, const RtCtx *ctx, char *err, size_t errlen);
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
    void (*close)(RtDevice *d);
} RtDeviceOps;

/* What every implementation's RtDevice begins with. */
struct RtDevice {
    const RtDeviceOps *ops;
};

/* runtime/cpu/device.c: the CPU device (world size 1, rank 0).  NULL with a
 * message when out of memory. */
RtDevice *rt_device_cpu_open(char *err, size_t errlen);

/* The calls, through the table. */
static inline void *rt_dev_alloc(RtDevice *d, size_t bytes, const char *what, char *err,
                                 size_t errlen)
{
    return d->ops->alloc(d, bytes, what, err, errlen);
}
static inline void rt_dev_free(RtDevice *d, void *p) { d->ops->free(d, p); }
static inline void *rt_dev_host_alloc(RtDevice *d, size_t bytes, const char *what, char *err,
                                      size_t errlen)
{
    return d->ops->host_alloc(d, bytes, what, err, errlen);
}
static inline void rt_dev_host_free(RtDevice *d, void *p) { d->ops->host_free(d, p); }
static inline void rt_dev_to_device(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    d->ops->to_device(d, dst, src, bytes);
}
static inline void rt_dev_to_host(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    d->ops->to_host(d, dst, src, bytes);
}
static inline void rt_dev_fill(RtDevice *d, void *dst, RtDType dt, size_t n, float value)
{
    d->ops->fill(d, dst, dt, n, value);
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
static inline bool rt_dev_read_flag(RtDevice *d) { return d->ops->read_flag(d); }
static inline int rt_dev_first_nonfinite(RtDevice *d) { return d->ops->first_nonfinite(d); }
static inline void rt_dev_optim_step(RtDevice *d, float *const *state, float *const *state2,
                                     const struct RtOptConfig *c)
{
    d->ops->optim_step(d, state, state2, c);
}
static inline void rt_dev_event_record(RtDevice *d, RtDevEvent *e) { d->ops->event_record(d, e); }
static inline void rt_dev_event_wait(RtDevice *d, const RtDevEvent *e)
{
    d->ops->event_wait(d, e);
}
static inline bool rt_dev_event_done(RtDevice *d, const RtDevEvent *e)
{
    return d->ops->event_done(d, e);
}
static inline void rt_dev_synchronize(RtDevice *d) { d->ops->synchronize(d); }
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
static inline void rt_device_close(RtDevice *d)
{
    if (d)
        d->ops->close(d);
}

#endif
