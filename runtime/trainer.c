/* trainer.c - the memory of a run: every buffer of the model at one batch
 * size (64-byte aligned, zeroed), the fp32 masters of 16-bit parameters, the
 * optimizer state, the parameters' initial values, and the workspace that
 * kernels grow through rt_ctx_ws.  All of it but the workspace and the
 * host staging buffers is device memory (device.h), allocated, written and
 * read through the device only.  Apart from the loop so that tests (and
 * rt_dump_state) can build a trainer without running one.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "dist/mpi_rt.h"
#include "init.h"
#include "train.h"

/* ---- buffers ------------------------------------------------------------------- */

static int64_t buffer_elems(const RtBuffer *b, int64_t batch)
{
    if (b->fixed < 0 || b->per_sample < 0 ||
        (b->per_sample > 0 && batch > (INT64_MAX / 8 - b->fixed) / b->per_sample))
        return -1;
    return b->fixed + b->per_sample * batch;
}

int64_t rt_buffer_elems(const RtModel *m, int b, int64_t batch)
{
    return b >= 0 && b < m->nbuffers ? buffer_elems(&m->buffers[b], batch) : -1;
}

void rt_trainer_free(RtTrainer *t)
{
    RtDevice *d = t->dev;
    if (d && t->ctx.buf)
        for (int i = 0; i < t->m->nbuffers; i++)
            if (!t->m->buffers[i].in_arena)
                rt_dev_free(d, t->ctx.buf[i]);
    if (d) {
        if (t->ctx.ws_device) {
            rt_dev_free(d, t->ctx.ws);
            t->ctx.ws = NULL;
        }
        rt_dev_free(d, t->arena);
        for (int i = 0; i < t->m->nparams; i++) {
            rt_dev_free(d, t->ctx.master ? t->ctx.master[i] : NULL);
            rt_dev_free(d, t->state ? t->state[i] : NULL);
            rt_dev_free(d, t->state2 ? t->state2[i] : NULL);
        }
        for (int s = 0; s < 2; s++) {
            rt_dev_host_free(d, t->x_slot[s]);
            rt_dev_host_free(d, t->y_slot[s]);
            rt_dev_host_free(d, t->raw_slot[s]);
        }
        rt_dev_free(d, t->raw_dev);
        rt_dev_host_free(d, t->prob_host);
        rt_device_close(d);
    }
    free(t->grads);
    free(t->ctx.buf);
    free(t->ctx.master);
    free(t->state);
    free(t->state2);
    free(t->ctx.ws);
    memset(t, 0, sizeof *t);
}

static bool check_buffer(const RtModel *m, int b, RtDType dt, int64_t need, int64_t batch,
                         const char *what, char *err, size_t errlen)
{
    if (b < 0 || b >= m->nbuffers) {
        snprintf(err, errlen, "model %s: %s is buffer %d of %d", m->name, what, b, m->nbuffers);
        return false;
    }
    if (m->buffers[b].dtype != dt) {
        snprintf(err, errlen, "model %s: %s (buffer %d) is %s, expected %s", m->name, what, b,
                 rt_dtype_name(m->buffers[b].dtype), rt_dtype_name(dt));
        return false;
    }
    if (buffer_elems(&m->buffers[b], batch) < need) {
        snprintf(err, errlen, "model %s: %s (buffer %d) holds %lld elements, needs %lld", m->name,
                 what, b, (long long)buffer_elems(&m->buffers[b], batch), (long long)need);
        return false;
    }
    return true;
}

/* a + b * batch, or -1 when negative or it overflows */
static int64_t lin_bytes(int64_t a, int64_t b, int64_t batch)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(b, batch, &r) || __builtin_add_overflow(r, a, &r))
        return -1;
    return r;
}

/* The arena of the planned buffers, and their pointers into it: each must
 * lie inside it and be 64-byte aligned (the table comes from the compiler,
 * but a bad one is an error here, not a write out of bounds). */
static bool alloc_arena(RtTrainer *t, const RtModel *m, int64_t batch, char *err, size_t errlen)
{
    int64_t size = lin_bytes(m->arena_fixed, m->arena_per_sample, batch);
    if (size < 0 || (uint64_t)size > SIZE_MAX - 64) {
        snprintf(err, errlen, "model %s: the arena of %lld + %lld * %lld bytes overflows", m->name,
                 (long long)m->arena_fixed, (long long)m->arena_per_sample, (long long)batch);
        return false;
    }
    t->arena_bytes = size;
    if (size > 0 && !(t->arena = rt_dev_alloc(t->dev, (size_t)size, "the arena", err, errlen))) {
        snprintf(err, errlen, "model %s: out of memory for the arena of %lld bytes at batch size "
                 "%lld", m->name, (long long)size, (long long)batch);
        return false;
    }
    for (int i = 0; i < m->nbuffers; i++) {
        const RtBuffer *b = &m->buffers[i];
        if (!b->in_arena)
            continue;
        int64_t off = lin_bytes(b->off_fixed, b->off_per_sample, batch);
        int64_t n = buffer_elems(b, batch), end;
        if (off < 0 || n < 0 || off % 64 || __builtin_mul_overflow(n, rt_dtype_size(b->dtype), &end) ||
            __builtin_add_overflow(end, off, &end) || end > size) {
            snprintf(err, errlen, "model %s: buffer %d (%s) at arena offset %lld + %lld * N does "
                     "not fit the arena of %lld bytes at N = %lld", m->name, i, b->name,
                     (long long)b->off_fixed, (long long)b->off_per_sample, (long long)size,
                     (long long)batch);
            return false;
        }
        t->ctx.buf[i] = (char *)t->arena + off;
    }
    return true;
}

/* The memory plan's promise (docs/codegen.md, "Memory plan"): every buffer a
 * kernel gets starts at a multiple of RT_VEC_ALIGN bytes, which the kernels
 * that read 16 bytes at a time rely on; a device whose allocations broke it
 * is refused here, naming the buffer. */
_Static_assert(RT_DEV_ALIGN % RT_VEC_ALIGN == 0, "device blocks keep the 16-byte promise");
static bool buffers_aligned(const RtTrainer *t, const RtModel *m, char *err, size_t errlen)
{
    for (int i = 0; i < m->nbuffers; i++)
        if ((uintptr_t)t->ctx.buf[i] % RT_VEC_ALIGN) {
            snprintf(err, errlen,
                     "model %s: buffer %d (%s) does not start at a multiple of %d bytes", m->name,
                     i, m->buffers[i].name, RT_VEC_ALIGN);
            return false;
        }
    for (int i = 0; i < m->nparams; i++)
        if ((uintptr_t)t->ctx.master[i] % RT_VEC_ALIGN || (uintptr_t)t->state[i] % RT_VEC_ALIGN ||
            (t->state2 && (uintptr_t)t->state2[i] % RT_VEC_ALIGN)) {
            snprintf(err, errlen,
                     "model %s: the master or state of %s does not start at a multiple "
                     "of %d bytes",
                     m->name, m->params[i].name, RT_VEC_ALIGN);
            return false;
        }
    return true;
}

/* A device's workspace: workspace_bytes(ctx, batch) (its sizers ask the
 * device's libraries, ctx.cuda, which open_device initialised), one block of
 * device memory. */
static bool alloc_device_ws(RtTrainer *t, const RtModel *m, int64_t batch, char *err,
                            size_t errlen)
{
    size_t bytes = m->workspace_bytes ? m->workspace_bytes(&t->ctx, batch) : 0;
    char derr[256];
    if (bytes > SIZE_MAX - RT_WS_ALIGN ||
        !(t->ctx.ws = rt_dev_alloc(t->dev, bytes, "the workspace", derr, sizeof derr))) {
        snprintf(err, errlen, "model %s: out of device memory for the workspace of %zu bytes at "
                 "batch size %lld", m->name, bytes, (long long)batch);
        return false;
    }
    t->ctx.ws_bytes = bytes;
    return true;
}

/* ---- the trainer ------------------------------------------------------------------- */

bool rt_trainer_init(RtTrainer *t, const RtModel *m, int64_t batch, int nstate,
                     const RtDeviceOpen *how, char *err, size_t errlen)
{
    bool with_state = nstate >= 1;
    memset(t, 0, sizeof *t);
    t->m = m;
    t->batch = batch;
    t->ctx.batch = batch;
    int64_t sample = 1;
    for (int i = 0; i < m->data_rank; i++)
        sample *= m->data_shape[i];
    if (m->classes < 1 || m->data_rank < 0 || m->data_rank > RT_MAX_RANK || batch < 1) {
        snprintf(err, errlen, "model %s: %lld classes, input rank %d, batch %lld", m->name,
                 (long long)m->classes, m->data_rank, (long long)batch);
        return false;
    }
    /* a model without a train step (no loss head: it only predicts) has no
     * label and no train-step output */
    if (!check_buffer(m, m->data, RT_F32, sample * batch, batch, "the data input", err, errlen) ||
        (m->train_step &&
         (!check_buffer(m, m->label, RT_F32, batch, batch, "the label input", err, errlen) ||
          !check_buffer(m, m->prob_train, RT_F32, m->classes * batch, batch,
                        "the train step's output", err, errlen))) ||
        !check_buffer(m, m->prob_infer, RT_F32, m->classes * batch, batch,
                      "the inference step's output", err, errlen))
        return false;
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        char what[160];
        snprintf(what, sizeof what, "parameter %s", p->name);
        if (!check_buffer(m, p->buffer, p->dtype, p->numel, batch, what, err, errlen))
            return false;
        if (p->grad >= 0) {
            snprintf(what, sizeof what, "the gradient of %s", p->name);
            if (p->grad >= m->nbuffers) {
                snprintf(err, errlen, "model %s: %s is buffer %d of %d", m->name, what, p->grad,
                         m->nbuffers);
                return false;
            }
            if (!check_buffer(m, p->grad, m->buffers[p->grad].dtype, p->numel, batch, what, err,
                              errlen))
                return false;
        }
    }
    /* the model's own device (a CUDA program's), else the CPU's: under MPI (a
     * program built with ampc --mpi, once rt_mpi_start ran) wrapped with the
     * collectives of runtime/dist/mpi.c */
    RtDeviceConfig dc = how && how->config ? *how->config : rt_device_config_default();
    bool lagging = how && how->lagging;
    if (m->open_device && lagging) {
        snprintf(err, errlen, "model %s: the lagging mode is the CPU device's, and this program "
                 "opens its own device", m->name);
        return false;
    }
    if (m->open_device) {
        if (!(t->dev = m->open_device(m, &dc, err, errlen)))
            return false;
        t->ctx.ws_device = true;
    } else if (!(t->dev = rt_device_cpu_open(err, errlen))) {
        return false;
    } else {
        rt_device_cpu_lagging(t->dev, lagging);
        if (!(t->dev = rt_mpi_wrap(t->dev, err, errlen)))
            return false;
    }
    /* --sim-ranks: its ranks computed in turn around either (dist/sim.c) */
    if (how && how->sim_ranks > 1) {
        RtDevice *one = t->dev;
        if (!(t->dev = rt_sim_wrap(one, how->sim_ranks, err, errlen))) {
            rt_device_close(one);
            return false;
        }
    }
    /* what the emitted steps read of the device: its step state (the loss
     * head's scale, the flag BatchNorm's moving update skips on) and the
     * context its kernels' calls take */
    t->ctx.step_state = rt_dev_step_state(t->dev);
    t->ctx.cuda = rt_dev_kernel_ctx(t->dev);
    t->ctx.buf = calloc((size_t)m->nbuffers + 1, sizeof *t->ctx.buf);
    t->ctx.master = calloc((size_t)m->nparams + 1, sizeof *t->ctx.master);
    t->state = calloc((size_t)m->nparams + 1, sizeof *t->state);
    t->grads = calloc((size_t)m->nparams + 1, sizeof *t->grads);
    if (nstate >= 2)
        t->state2 = calloc((size_t)m->nparams + 1, sizeof *t->state2);
    bool ok = t->ctx.buf && t->ctx.master && t->state && t->grads && (nstate < 2 || t->state2);
    if (ok && !alloc_arena(t, m, batch, err, errlen)) {
        rt_trainer_free(t);
        return false;
    }
    /* the workspace, once: the largest any call of either step asks for at
     * this batch size (a program without the function grows it on demand,
     * on the host; on a device it is all there is) */
    if (ok && t->ctx.ws_device && !alloc_device_ws(t, m, batch, err, errlen)) {
        rt_trainer_free(t);
        return false;
    }
    if (ok && !t->ctx.ws_device && m->workspace_bytes)
        rt_ctx_ws(&t->ctx, m->workspace_bytes(&t->ctx, batch));
    t->ws_start = t->ctx.ws_bytes;
    RtDevice *d = t->dev;
    char derr[256]; /* the device's message; the trainer's says which batch size */
    for (int i = 0; ok && i < m->nbuffers; i++) {
        const RtBuffer *bf = &m->buffers[i];
        int64_t n = buffer_elems(bf, batch);
        if (!bf->in_arena) {
            ok = n >= 0 && (t->ctx.buf[i] = rt_dev_alloc(d, (size_t)n * rt_dtype_size(bf->dtype),
                                                          bf->name, derr, sizeof derr));
            t->own_bytes += ok ? n * (int64_t)rt_dtype_size(bf->dtype) : 0;
        }
    }
    for (int i = 0; ok && i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        size_t bytes = (size_t)p->numel * sizeof(float);
        t->state_bytes += (int64_t)bytes * ((p->has_master ? 1 : 0) +
                                            (p->grad >= 0 ? (nstate >= 2 ? 2 : with_state) : 0));
        if (p->has_master)
            ok = (t->ctx.master[i] = rt_dev_alloc(d, bytes, p->name, derr, sizeof derr)) != NULL;
        if (ok && with_state && p->grad >= 0)
            ok = (t->state[i] = rt_dev_alloc(d, bytes, p->name, derr, sizeof derr)) != NULL;
        if (ok && nstate >= 2 && p->grad >= 0)
            ok = (t->state2[i] = rt_dev_alloc(d, bytes, p->name, derr, sizeof derr)) != NULL;
        if (ok && p->grad >= 0)
            t->grads[t->ngrads++] = (RtDevTensor){t->ctx.buf[p->grad], (size_t)p->numel,
                                                  m->buffers[p->grad].dtype};
    }
    if (ok && !buffers_aligned(t, m, err, errlen)) {
        rt_trainer_free(t);
        return false;
    }
    size_t prob = (size_t)m->classes * (size_t)batch * sizeof(float);
    for (int s = 0; s < 2; s++)
        ok = ok &&
             (t->x_slot[s] = rt_dev_host_alloc(d, (size_t)(sample * batch) * sizeof(float),
                                               "the batch", derr, sizeof derr)) &&
             (t->y_slot[s] = rt_dev_host_alloc(d, (size_t)batch * sizeof(float), "the labels",
                                               derr, sizeof derr));
    ok = ok &&
         (t->prob_host = rt_dev_host_alloc(d, prob, "the loss head's output", derr, sizeof derr));
    t->x_host = t->x_slot[0];
    t->y_host = t->y_slot[0];
    if (!ok) {
        snprintf(err, errlen, "model %s: out of memory for the buffers at batch size %lld",
                 m->name, (long long)batch);
        rt_trainer_free(t);
        return false;
    }
    return true;
}

bool rt_trainer_init_params(RtTrainer *t, const char *weight_init, uint64_t seed, char *err,
                            size_t errlen)
{
    const RtModel *m = t->m;
    int64_t maxn = 1;
    for (int i = 0; i < m->nparams; i++)
        maxn = m->params[i].numel > maxn ? m->params[i].numel : maxn;
    /* made on the host, in fp32 and in the storage dtype, then copied */
    float *w32 = malloc((size_t)maxn * sizeof(float));
    uint16_t *w16 = malloc((size_t)maxn * sizeof(uint16_t));
    bool ok = w32 && w16;
    if (!ok)
        snprintf(err, errlen, "out of memory");
    for (int i = 0; ok && i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        size_t n = (size_t)p->numel;
        if (!(ok = rt_init_param(p, weight_init, seed, w32, err, errlen)))
            break;
        if (p->has_master)
            rt_dev_to_device(t->dev, t->ctx.master[i], w32, n * sizeof(float));
        if (p->dtype == RT_F16)
            ampc_float_to_half_n(w16, w32, n);
        else if (p->dtype == RT_BF16)
            ampc_float_to_bf16_n(w16, w32, n);
        if (p->dtype == RT_F32)
            rt_dev_to_device(t->dev, t->ctx.buf[p->buffer], w32, n * sizeof(float));
        else
            rt_dev_to_device(t->dev, t->ctx.buf[p->buffer], w16, n * sizeof(uint16_t));
    }
    free(w32);
    free(w16);
    return ok;
}

/* ---- the device calls of the loop ---------------------------------------------- */

bool rt_trainer_setup(RtTrainer *t, char *err, size_t errlen)
{
    return rt_dev_setup(t->dev, t->m, &t->ctx, err, errlen);
}

void rt_trainer_staging_ready(RtTrainer *t)
{
    t->slot ^= 1;
    t->x_host = t->x_slot[t->slot];
    t->y_host = t->y_slot[t->slot];
    t->raw_host = t->raw_slot[t->slot];
    rt_dev_event_wait(t->dev, &t->copied[t->slot]);
}

void rt_trainer_load_batch(RtTrainer *t)
{
    const RtModel *m = t->m;
    int64_t sample = 1;
    for (int i = 0; i < m->data_rank; i++)
        sample *= m->data_shape[i];
    rt_dev_to_device(t->dev, t->ctx.buf[m->data], t->x_host,
                     (size_t)(sample * t->batch) * sizeof(float));
    if (m->label >= 0 && m->label < m->nbuffers) /* none without a loss head */
        rt_dev_to_device(t->dev, t->ctx.buf[m->label], t->y_host,
                         (size_t)t->batch * sizeof(float));
    rt_dev_event_record(t->dev, &t->copied[t->slot]);
    t->ctx.input_formed = false;
}

static int64_t sample_elems(const RtModel *m)
{
    int64_t sample = 1;
    for (int i = 0; i < m->data_rank; i++)
        sample *= m->data_shape[i];
    return sample;
}

void rt_trainer_form(RtTrainer *t, bool formed) { t->formed = formed; }

/* Where a batch the device writes for step `infer` goes, and in what form:
 * the first layer's buffer, dtype and layout (rt_trainer_form), else the
 * data buffer's fp32 [n, sample]; ctx.input_formed says which.  An image's
 * channels either way (a normalisation's per-channel order). */
static void *batch_form(RtTrainer *t, bool infer, RtDevForm *f)
{
    const RtModel *m = t->m;
    const RtInputForm *in = &m->input_form[infer ? 1 : 0];
    *f = (RtDevForm){.c = m->data_rank == 3 ? (size_t)m->data_shape[0] : 1, .dt = RT_F32};
    t->ctx.input_formed = t->formed && in->set && in->buffer >= 0 && in->buffer < m->nbuffers;
    if (!t->ctx.input_formed)
        return t->ctx.buf[m->data];
    f->dt = in->dtype;
    f->nhwc = in->nhwc;
    return t->ctx.buf[in->buffer];
}

void rt_trainer_synthetic_batch(RtTrainer *t, const RtDevSynth *s, const int64_t *idx)
{
    const RtModel *m = t->m;
    RtDevSynth formed = *s;
    void *x = batch_form(t, false, &formed.form);
    rt_dev_synthetic_batch(t->dev, &formed, idx, x, t->ctx.buf[m->label]);
}

bool rt_trainer_raw_staging(RtTrainer *t, char *err, size_t errlen)
{
    size_t n = (size_t)t->batch, sample = (size_t)sample_elems(t->m);
    char derr[256];
    bool ok = (t->raw_dev = rt_dev_alloc(t->dev, rt_dev_ingest_scratch_bytes(n, sample),
                                         "the raw batch", derr, sizeof derr)) != NULL;
    for (int s = 0; ok && s < 2; s++)
        ok = (t->raw_slot[s] = rt_dev_host_alloc(t->dev, n * sample, "the raw batch", derr,
                                                 sizeof derr)) != NULL;
    t->raw_host = t->raw_slot[t->slot];
    if (!ok)
        snprintf(err, errlen, "model %s: out of memory for the raw batch at batch size %lld",
                 t->m->name, (long long)t->batch);
    return ok;
}

void rt_trainer_ingest_batch(RtTrainer *t, const RtIngestNorm *norm, bool infer)
{
    const RtModel *m = t->m;
    RtDevIngest g = {.n = (size_t)t->batch,
                     .sample = (size_t)sample_elems(m),
                     .host_raw = t->raw_host,
                     .host_y = t->y_host,
                     .scratch = t->raw_dev,
                     .norm = *norm};
    g.x = batch_form(t, infer, &g.form);
    g.y = m->label >= 0 && m->label < m->nbuffers ? t->ctx.buf[m->label] : NULL;
    rt_dev_ingest(t->dev, &g, &t->copied[t->slot]);
}

const void *rt_trainer_read_rows(const RtTrainer *t, int prob, int64_t n)
{
    const RtModel *m = t->m;
    n = n < t->batch ? n : t->batch;
    rt_dev_to_host(t->dev, t->prob_host, t->ctx.buf[prob],
                   (size_t)(n * m->classes) * rt_dtype_size(m->buffers[prob].dtype));
    return t->prob_host;
}

size_t rt_trainer_rows_bytes(const RtTrainer *t, int prob)
{
    return (size_t)t->m->classes * (size_t)t->batch * rt_dtype_size(t->m->buffers[prob].dtype);
}

void rt_trainer_queue_rows(RtTrainer *t, int prob, void *dst)
{
    rt_dev_to_host_async(t->dev, dst, t->ctx.buf[prob], rt_trainer_rows_bytes(t, prob));
}

void rt_trainer_read_f32(const RtTrainer *t, float *dst, const void *src, size_t n, RtDType dt)
{
    enum { CH = 4096 };
    uint16_t tmp[CH];
    if (dt == RT_F32)
        rt_dev_to_host(t->dev, dst, src, n * sizeof(float));
    for (size_t i = 0; dt != RT_F32 && i < n; i += CH) {
        size_t k = n - i < CH ? n - i : CH;
        rt_dev_to_host(t->dev, tmp, (const uint16_t *)src + i, k * sizeof(uint16_t));
        rt_to_f32(dst + i, tmp, k, dt);
    }
}

bool rt_trainer_reduce_grads(RtTrainer *t, char *err, size_t errlen)
{
    return rt_dev_allreduce(t->dev, t->grads, t->ngrads, RT_REDUCE_SUM, err, errlen);
}

bool rt_trainer_broadcast_params(RtTrainer *t, char *err, size_t errlen)
{
    const RtModel *m = t->m;
    RtDevTensor *b = calloc((size_t)m->nparams * 4 + 1, sizeof *b);
    int n = 0;
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        size_t k = (size_t)p->numel;
        b[n++] = (RtDevTensor){t->ctx.buf[p->buffer], k, p->dtype};
        float *more[3] = {t->ctx.master[i], t->state[i], t->state2 ? t->state2[i] : NULL};
        for (int j = 0; j < 3; j++)
            if (more[j])
                b[n++] = (RtDevTensor){more[j], k, RT_F32};
    }
    bool ok = rt_dev_broadcast(t->dev, b, n, 0, err, errlen);
    free(b);
    return ok;
}

float rt_trainer_step_scale(const RtTrainer *t)
{
    float s = 1.0f;
    rt_dev_to_host(t->dev, &s, &t->ctx.step_state->scale, sizeof s);
    return s;
}
