/* fwd.h - a device that forwards to an inner device (device.h), the base of
 * the placements' wrappers (nccl_engine.c, kvplace.c).  A wrapper's struct begins
 * with RtFwd; rt_fwd_ops fills a table with forwarders, and the wrapper
 * replaces the calls it changes.  Static: each file gets its own copy. */
#ifndef AMPC_DIST_FWD_H
#define AMPC_DIST_FWD_H

#include "device.h"

typedef struct {
    RtDevice base; /* first */
    RtDevice *in;
} RtFwd;

static inline RtDevice *fwd_in(RtDevice *d) { return ((RtFwd *)d)->in; }
static inline const RtDevice *fwd_cin(const RtDevice *d) { return ((const RtFwd *)d)->in; }

static void *fwd_alloc(RtDevice *d, size_t bytes, const char *what, char *err, size_t errlen)
{
    return fwd_in(d)->ops->alloc(fwd_in(d), bytes, what, err, errlen);
}
static void fwd_free(RtDevice *d, void *p) { fwd_in(d)->ops->free(fwd_in(d), p); }
static void *fwd_host_alloc(RtDevice *d, size_t bytes, const char *what, char *err, size_t errlen)
{
    return fwd_in(d)->ops->host_alloc(fwd_in(d), bytes, what, err, errlen);
}
static void fwd_host_free(RtDevice *d, void *p) { fwd_in(d)->ops->host_free(fwd_in(d), p); }
static void fwd_to_device(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    fwd_in(d)->ops->to_device(fwd_in(d), dst, src, bytes);
}
static void fwd_to_host(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    fwd_in(d)->ops->to_host(fwd_in(d), dst, src, bytes);
}
static void fwd_to_host_async(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    fwd_in(d)->ops->to_host_async(fwd_in(d), dst, src, bytes);
}
static void fwd_fill(RtDevice *d, void *dst, RtDType dt, size_t n, float value)
{
    fwd_in(d)->ops->fill(fwd_in(d), dst, dt, n, value);
}
static bool fwd_setup(RtDevice *d, const RtModel *m, const RtCtx *ctx, char *err, size_t errlen)
{
    return fwd_in(d)->ops->setup(fwd_in(d), m, ctx, err, errlen);
}
static bool fwd_ls_init(RtDevice *d, const RtDevLsInit *c, char *err, size_t errlen)
{
    return fwd_in(d)->ops->ls_init(fwd_in(d), c, err, errlen);
}
static void fwd_step_begin(RtDevice *d, bool inject)
{
    fwd_in(d)->ops->step_begin(fwd_in(d), inject);
}
static const RtStepState *fwd_step_state(RtDevice *d)
{
    return fwd_in(d)->ops->step_state(fwd_in(d));
}
static struct RtCudaCtx *fwd_kernel_ctx(RtDevice *d)
{
    return fwd_in(d)->ops->kernel_ctx(fwd_in(d));
}
static void fwd_lr_ahead(RtDevice *d, const struct RtOptConfig *oc, const float *lr,
                         int64_t first, int n)
{
    fwd_in(d)->ops->lr_ahead(fwd_in(d), oc, lr, first, n);
}
static void fwd_moving_update(RtDevice *d, void (*fn)(RtCtx *), RtCtx *ctx)
{
    fwd_in(d)->ops->moving_update(fwd_in(d), fn, ctx);
}
static void fwd_train_update(RtDevice *d, float *const *state, float *const *state2,
                             const struct RtOptConfig *oc)
{
    fwd_in(d)->ops->train_update(fwd_in(d), state, state2, oc);
}
static void fwd_ls_update(RtDevice *d) { fwd_in(d)->ops->ls_update(fwd_in(d)); }
static void fwd_ls_read(RtDevice *d, RtDevLsState *st, AmpcLossScaleStep *steps, int64_t from)
{
    fwd_in(d)->ops->ls_read(fwd_in(d), st, steps, from);
}
static void fwd_set_flag(RtDevice *d, bool finite)
{
    fwd_in(d)->ops->set_flag(fwd_in(d), finite);
}
static void fwd_check_grads(RtDevice *d) { fwd_in(d)->ops->check_grads(fwd_in(d)); }
static void fwd_check_finite(RtDevice *d, const void *p, size_t n, RtDType dt)
{
    fwd_in(d)->ops->check_finite(fwd_in(d), p, n, dt);
}
static bool fwd_read_flag(RtDevice *d) { return fwd_in(d)->ops->read_flag(fwd_in(d)); }
static int fwd_first_nonfinite(RtDevice *d)
{
    return fwd_in(d)->ops->first_nonfinite(fwd_in(d));
}
static void fwd_optim_step(RtDevice *d, float *const *state, float *const *state2,
                           const struct RtOptConfig *c)
{
    fwd_in(d)->ops->optim_step(fwd_in(d), state, state2, c);
}
static void fwd_event_record(RtDevice *d, RtDevEvent *e)
{
    fwd_in(d)->ops->event_record(fwd_in(d), e);
}
static void fwd_event_wait(RtDevice *d, const RtDevEvent *e)
{
    fwd_in(d)->ops->event_wait(fwd_in(d), e);
}
static bool fwd_event_done(RtDevice *d, const RtDevEvent *e)
{
    return fwd_in(d)->ops->event_done(fwd_in(d), e);
}
static void fwd_synthetic_batch(RtDevice *d, const RtDevSynth *s, const int64_t *idx, void *x,
                                float *y)
{
    fwd_in(d)->ops->synthetic_batch(fwd_in(d), s, idx, x, y);
}
static void fwd_ingest(RtDevice *d, const RtDevIngest *g, RtDevEvent *copied)
{
    fwd_in(d)->ops->ingest(fwd_in(d), g, copied);
}
static void fwd_synchronize(RtDevice *d) { fwd_in(d)->ops->synchronize(fwd_in(d)); }
static void fwd_time_reset(RtDevice *d)
{
    if (fwd_in(d)->ops->time_reset)
        fwd_in(d)->ops->time_reset(fwd_in(d));
}
static bool fwd_time_mark(RtDevice *d, RtDevTime *t)
{
    return fwd_in(d)->ops->time_mark && fwd_in(d)->ops->time_mark(fwd_in(d), t);
}
static double fwd_time_elapsed(RtDevice *d, const RtDevTime *a, const RtDevTime *b)
{
    return fwd_in(d)->ops->time_elapsed(fwd_in(d), a, b);
}
static int fwd_world_size(const RtDevice *d) { return fwd_cin(d)->ops->world_size(fwd_cin(d)); }
static int fwd_rank(const RtDevice *d) { return fwd_cin(d)->ops->rank(fwd_cin(d)); }
static bool fwd_allreduce(RtDevice *d, const RtDevTensor *b, int n, RtReduceOp op, char *err,
                          size_t errlen)
{
    return fwd_in(d)->ops->allreduce(fwd_in(d), b, n, op, err, errlen);
}
static bool fwd_broadcast(RtDevice *d, const RtDevTensor *b, int n, int root, char *err,
                          size_t errlen)
{
    return fwd_in(d)->ops->broadcast(fwd_in(d), b, n, root, err, errlen);
}

/* Every call forwarded; name and close are the wrapper's.  An optional
 * call (synthetic_batch, ingest) is forwarded where the inner device `in` has it. */
static inline RtDeviceOps rt_fwd_ops(const char *name, const RtDevice *in,
                                     void (*close)(RtDevice *))
{
    RtDeviceOps o = {
        .name = name,
        .alloc = fwd_alloc,
        .free = fwd_free,
        .host_alloc = fwd_host_alloc,
        .host_free = fwd_host_free,
        .to_device = fwd_to_device,
        .to_host = fwd_to_host,
        .to_host_async = fwd_to_host_async,
        .fill = fwd_fill,
        .synthetic_batch = in->ops->synthetic_batch ? fwd_synthetic_batch : NULL,
        .ingest = in->ops->ingest ? fwd_ingest : NULL,
        .setup = fwd_setup,
        .ls_init = fwd_ls_init,
        .step_begin = fwd_step_begin,
        .step_state = fwd_step_state,
        .kernel_ctx = fwd_kernel_ctx,
        .lr_ahead = fwd_lr_ahead,
        .moving_update = fwd_moving_update,
        .train_update = fwd_train_update,
        .ls_update = fwd_ls_update,
        .ls_read = fwd_ls_read,
        .set_flag = fwd_set_flag,
        .check_grads = fwd_check_grads,
        .check_finite = fwd_check_finite,
        .read_flag = fwd_read_flag,
        .first_nonfinite = fwd_first_nonfinite,
        .optim_step = fwd_optim_step,
        .event_record = fwd_event_record,
        .event_wait = fwd_event_wait,
        .event_done = fwd_event_done,
        .synchronize = fwd_synchronize,
        .world_size = fwd_world_size,
        .rank = fwd_rank,
        .time_reset = fwd_time_reset,
        .time_mark = fwd_time_mark,
        .time_elapsed = fwd_time_elapsed,
        .allreduce = fwd_allreduce,
        .broadcast = fwd_broadcast,
        .close = close,
    };
    return o;
}

#endif
