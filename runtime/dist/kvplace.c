/* kvplace.c - the `local` and `device` placements on one process's device
 * (coll.h; docs/kvstore.md, "local and device on a GPU").  Written against
 * device.h only, so `local` runs around the CPU device in make unit and
 * around the CUDA device in a CUDA program.
 *
 * `local` is MXNet's kvstore='local' on one device: after backward the
 * gradients are copied to host memory the device copies fastest
 * (rt_dev_host_alloc: pinned on CUDA), the CPU's fused optimizer
 * (optim.c's rt_optim_step2, the CPU device's own update) runs on host
 * copies of the fp32 masters and the optimizer state, and the weights the
 * steps read (the 16-bit shadow, or the fp32 weight) are copied back.  The
 * masters and the state then live on the host: a read of them through the
 * device (a checkpoint) is served from the host copy, a write to them (a
 * resume) goes to both.  The update's scalars are the inner device's
 * (device.h "the step without the host"): the learning rate lr_ahead wrote
 * for the update count, t = that count + 1, rescale_grad = 1 / (batch x
 * the step's scale) with the scale read from the step's state; a dynamic
 * scale's skipped step is skipped; so around the CPU device it trains to
 * the same bits as the CPU device alone (tests/runtime/test_kv_local.c).
 * Each step waits for the device once (the gradients and the scale) and
 * once more for the flag under a dynamic scale.
 *
 * `device` on one device is the device's own fused update: the inner
 * device itself.  On several devices (MXNet's CommDevice: reduce on the
 * devices, update, broadcast) the reduction is NCCL's (rt_nccl_wrap):
 * ampc's `nccl` placement, every device updating its copy.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "fwd.h"
#include "cpu/cpu.h" /* the host update: the CPU's fused optimizer */

/* A block of device memory and its host copy. */
typedef struct {
    char *dev;
    size_t bytes;
    char *host;
    bool owned; /* the host copy is the truth (masters, state): reads come from it */
} Region;

typedef struct {
    RtFwd f; /* first */
    RtDeviceOps ops;
    const RtModel *m;
    const RtCtx *ctx;
    Region *r;
    int nr, cap;
    bool loaded;         /* the host copies hold the device's values */
    float *const *st, *const *st2; /* the state arrays the copies were made for */
    void **hbuf;         /* host view of ctx->buf: gradients and weights */
    float **hmaster, **hstate, **hstate2;
    float *scale_host;   /* the step's scale, read back */
    /* the update's scalars (as the inner device's) */
    double batch;
    bool dynamic;
    int64_t num_update;
    int64_t steps;                        /* ls_update calls since ls_init */
    int64_t ring_updates[RT_DEV_LS_RING]; /* step k's num_update, at k % RT_DEV_LS_RING */
    float lr[RT_DEV_LS_RING + 1];
    int64_t lr_first;
    int lr_n;
    RtKvLocalStats stats;
} LocalDev;

static LocalDev *ld(RtDevice *d) { return (LocalDev *)d; }

/* ---- the host copies ---------------------------------------------------------------- */

static Region *find(LocalDev *l, const void *p, size_t bytes)
{
    const char *c = p;
    for (int i = 0; i < l->nr; i++)
        if (c >= l->r[i].dev && c < l->r[i].dev + l->r[i].bytes &&
            bytes <= (size_t)(l->r[i].dev + l->r[i].bytes - c))
            return &l->r[i];
    return NULL;
}

static void *add(LocalDev *l, void *dev, size_t bytes, bool owned, const char *what, char *err,
                 size_t errlen)
{
    if (!dev) {
        snprintf(err, errlen, "local: %s has no device memory", what);
        return NULL;
    }
    Region *have = find(l, dev, bytes);
    if (have && have->dev == (char *)dev)
        return have->host;
    if (l->nr == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        Region *r = realloc(l->r, sizeof *r * (size_t)cap);
        if (!r) {
            snprintf(err, errlen, "local: out of memory for the host copies");
            return NULL;
        }
        l->r = r;
        l->cap = cap;
    }
    RtDevice *in = fwd_in(&l->f.base);
    char *h = in->ops->host_alloc(in, bytes, what, err, errlen);
    if (!h)
        return NULL;
    l->r[l->nr++] = (Region){dev, bytes, h, owned};
    return h;
}

/* Host copies of every tensor the update reads or writes, made once for
 * these state arrays, filled from the device at the first update. */
static bool copies(LocalDev *l, float *const *state, float *const *state2, char *err,
                   size_t errlen)
{
    const RtModel *m = l->m;
    if (l->hbuf && l->st == state && l->st2 == state2)
        return true;
    if (l->hbuf) {
        snprintf(err, errlen, "local: the optimizer's state moved after the first update");
        return false;
    }
    l->hbuf = calloc((size_t)m->nbuffers + 1, sizeof *l->hbuf);
    l->hmaster = calloc((size_t)m->nparams + 1, sizeof *l->hmaster);
    l->hstate = calloc((size_t)m->nparams + 1, sizeof *l->hstate);
    l->hstate2 = calloc((size_t)m->nparams + 1, sizeof *l->hstate2);
    if (!l->hbuf || !l->hmaster || !l->hstate || !l->hstate2) {
        snprintf(err, errlen, "local: out of memory for the host copies");
        return false;
    }
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (p->grad < 0)
            continue;
        size_t n = (size_t)p->numel;
        size_t gb = n * rt_dtype_size(m->buffers[p->grad].dtype);
        size_t wb = n * rt_dtype_size(p->dtype);
        if (!(l->hbuf[p->grad] = add(l, l->ctx->buf[p->grad], gb, false, p->name, err, errlen)) ||
            !(l->hbuf[p->buffer] = add(l, l->ctx->buf[p->buffer], wb, false, p->name, err,
                                       errlen)))
            return false;
        float *dm = p->has_master && l->ctx->master ? l->ctx->master[i] : NULL;
        float *ds = state ? state[i] : NULL, *ds2 = state2 ? state2[i] : NULL;
        if ((dm && !(l->hmaster[i] = add(l, dm, n * 4, true, p->name, err, errlen))) ||
            (ds && !(l->hstate[i] = add(l, ds, n * 4, true, p->name, err, errlen))) ||
            (ds2 && !(l->hstate2[i] = add(l, ds2, n * 4, true, p->name, err, errlen))))
            return false;
    }
    l->st = state;
    l->st2 = state2;
    return true;
}

/* The first update: every host copy from the device (one wait). */
static void load(LocalDev *l)
{
    RtDevice *in = fwd_in(&l->f.base);
    for (int i = 0; i < l->nr; i++) {
        in->ops->to_host_async(in, l->r[i].host, l->r[i].dev, l->r[i].bytes);
        l->stats.d2h_bytes += l->r[i].bytes;
    }
    in->ops->synchronize(in);
    l->f.base.syncs++;
    l->loaded = true;
}

/* ---- the update on the host --------------------------------------------------------- */

static void l_train_update(RtDevice *d, float *const *state, float *const *state2,
                           const RtOptConfig *oc)
{
    LocalDev *l = ld(d);
    RtDevice *in = fwd_in(d);
    const RtModel *m = l->m;
    if (!m)
        return;
    if (l->dynamic) { /* the check's flag (check_grads ran on the device) */
        d->syncs++;
        if (!in->ops->read_flag(in))
            return;
    }
    char err[256];
    if (!copies(l, state, state2, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    if (!l->loaded)
        load(l);
    /* the gradients and the step's scale to the host: one wait */
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (p->grad < 0)
            continue;
        size_t bytes = (size_t)p->numel * rt_dtype_size(m->buffers[p->grad].dtype);
        in->ops->to_host_async(in, l->hbuf[p->grad], l->ctx->buf[p->grad], bytes);
        l->stats.d2h_bytes += bytes;
    }
    in->ops->to_host_async(in, l->scale_host, &in->ops->step_state(in)->scale, sizeof(float));
    l->stats.d2h_bytes += sizeof(float);
    in->ops->synchronize(in);
    d->syncs++;
    /* the CPU device's scalars (runtime/cpu/device.c, cpu_train_update) */
    RtOptConfig u = *oc;
    int64_t k = l->num_update - l->lr_first;
    u.lr = k >= 0 && k < l->lr_n ? l->lr[k] : NAN;
    u.t = l->num_update + 1;
    u.rescale_grad = (float)(1.0 / (l->batch * (double)*l->scale_host));
    RtCtx h = *l->ctx;
    h.buf = l->hbuf;
    h.master = l->hmaster;
    bool finite = rt_optim_step2(m, &h, l->hstate, state2 ? l->hstate2 : NULL, &u);
    l->num_update++;
    l->stats.updates++;
    /* the weights the steps read, back to the device */
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (p->grad < 0)
            continue;
        size_t bytes = (size_t)p->numel * rt_dtype_size(p->dtype);
        in->ops->to_device(in, l->ctx->buf[p->buffer], l->hbuf[p->buffer], bytes);
        l->stats.h2d_bytes += bytes;
    }
    /* the update's fused check is the flag, as the device's own update */
    if (!l->dynamic)
        in->ops->set_flag(in, finite);
}

/* ---- the scalars, mirrored from the loop's calls -------------------------------------- */

static bool l_ls_init(RtDevice *d, const RtDevLsInit *c, char *err, size_t errlen)
{
    LocalDev *l = ld(d);
    if (!fwd_ls_init(d, c, err, errlen))
        return false;
    l->dynamic = c->dynamic;
    l->batch = c->batch;
    l->num_update = c->num_update;
    l->steps = 0;
    l->lr_n = 0;
    return true;
}

/* the step's update count, which the host ran, for the inner ring's record */
static void l_ls_update(RtDevice *d)
{
    LocalDev *l = ld(d);
    fwd_ls_update(d);
    l->ring_updates[l->steps++ % RT_DEV_LS_RING] = l->num_update;
}

static void l_lr_ahead(RtDevice *d, const RtOptConfig *oc, const float *lr, int64_t first, int n)
{
    LocalDev *l = ld(d);
    fwd_lr_ahead(d, oc, lr, first, n);
    n = n < 0 ? 0 : n > RT_DEV_LS_RING + 1 ? RT_DEV_LS_RING + 1 : n;
    memcpy(l->lr, lr, (size_t)n * sizeof *lr);
    l->lr_first = first;
    l->lr_n = n;
}

/* the device counts no update (it ran none): the host's count, in the
 * state and in each step's record */
static void l_ls_read(RtDevice *d, RtDevLsState *st, AmpcLossScaleStep *steps, int64_t from)
{
    LocalDev *l = ld(d);
    fwd_ls_read(d, st, steps, from);
    st->num_update = l->num_update;
    int64_t lo = from > st->steps - RT_DEV_LS_RING ? from : st->steps - RT_DEV_LS_RING;
    for (int64_t k = lo < 0 ? 0 : lo; steps && k < st->steps; k++)
        steps[k - from].num_update = l->ring_updates[k % RT_DEV_LS_RING];
}

/* ---- reads and writes of the host-owned tensors --------------------------------------- */

static void l_to_host(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    LocalDev *l = ld(d);
    Region *r = l->loaded ? find(l, src, bytes) : NULL;
    if (r && r->owned)
        memcpy(dst, r->host + ((const char *)src - r->dev), bytes);
    else
        fwd_to_host(d, dst, src, bytes);
}

static void l_to_host_async(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    LocalDev *l = ld(d);
    Region *r = l->loaded ? find(l, src, bytes) : NULL;
    if (r && r->owned)
        memcpy(dst, r->host + ((const char *)src - r->dev), bytes);
    else
        fwd_to_host_async(d, dst, src, bytes);
}

static void l_to_device(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    LocalDev *l = ld(d);
    fwd_to_device(d, dst, src, bytes);
    Region *r = l->loaded ? find(l, dst, bytes) : NULL;
    if (r)
        memcpy(r->host + ((char *)dst - r->dev), src, bytes);
}

static void l_fill(RtDevice *d, void *dst, RtDType dt, size_t n, float value)
{
    LocalDev *l = ld(d);
    fwd_fill(d, dst, dt, n, value);
    Region *r = l->loaded && n ? find(l, dst, n * rt_dtype_size(dt)) : NULL;
    if (r) /* the device's bytes are the value's: the host copy takes them */
        fwd_to_host(d, r->host + ((char *)dst - r->dev), dst, n * rt_dtype_size(dt));
}

static bool l_setup(RtDevice *d, const RtModel *m, const RtCtx *ctx, char *err, size_t errlen)
{
    LocalDev *l = ld(d);
    if (!fwd_setup(d, m, ctx, err, errlen))
        return false;
    if (l->m && (l->m != m || l->ctx != ctx)) {
        snprintf(err, errlen, "local: the placement serves one model and one context");
        return false;
    }
    l->m = m;
    l->ctx = ctx;
    return true;
}

static void l_close(RtDevice *d)
{
    LocalDev *l = ld(d);
    RtDevice *in = fwd_in(d);
    for (int i = 0; i < l->nr; i++)
        in->ops->host_free(in, l->r[i].host);
    in->ops->host_free(in, l->scale_host);
    free(l->r);
    free(l->hbuf);
    free(l->hmaster);
    free(l->hstate);
    free(l->hstate2);
    free(l);
    rt_device_close(in);
}

RtDevice *rt_kv_local_wrap(RtDevice *inner, char *err, size_t errlen)
{
    LocalDev *l = calloc(1, sizeof *l);
    if (!l || !inner) {
        free(l);
        snprintf(err, errlen, "local: %s", inner ? "out of memory for the device" : "no device");
        return NULL;
    }
    l->ops = rt_fwd_ops("local", inner, l_close);
    l->ops.setup = l_setup;
    l->ops.train_update = l_train_update;
    l->ops.ls_init = l_ls_init;
    l->ops.ls_update = l_ls_update;
    l->ops.lr_ahead = l_lr_ahead;
    l->ops.ls_read = l_ls_read;
    l->ops.to_host = l_to_host;
    l->ops.to_host_async = l_to_host_async;
    l->ops.to_device = l_to_device;
    l->ops.fill = l_fill;
    l->f.base.ops = &l->ops;
    l->f.in = inner;
    if (!(l->scale_host = inner->ops->host_alloc(inner, sizeof(float), "the step's loss scale",
                                                 err, errlen))) {
        free(l);
        return NULL;
    }
    return &l->f.base;
}

void rt_kv_local_stats(RtDevice *d, RtKvLocalStats *st) { *st = ld(d)->stats; }

const char *rt_kv_place_name(int place)
{
    static const char *const n[] = {"none", "local", "device", "nccl", "dist_sync"};
    return place >= 0 && place <= RT_KV_DIST_SYNC ? n[place] : "?";
}

RtDevice *rt_kv_wrap(RtDevice *inner, int place, char *err, size_t errlen)
{
    if (!inner)
        return NULL;
    RtDevice *d = NULL;
    switch (place) {
    case RT_KV_NONE:
    case RT_KV_DEVICE: /* one device: its own fused update */
        return inner;
    case RT_KV_LOCAL:
        d = rt_kv_local_wrap(inner, err, errlen);
        break;
    default:
        snprintf(err, errlen, "kvstore: placement '%s' needs the NCCL engine's communicator "
                 "(rt_nccl_wrap), not rt_kv_wrap", rt_kv_place_name(place));
        break;
    }
    if (!d)
        rt_device_close(inner);
    return d;
}
