/* trainer.c - the memory of a run: every buffer of the model at one batch
 * size (64-byte aligned, zeroed), the fp32 masters of 16-bit parameters, the
 * optimizer state, the parameters' initial values, and the workspace that
 * kernels grow through rt_ctx_ws.  Apart from the loop so that tests (and
 * rt_dump_state) can build a trainer without running one.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "train.h"

/* ---- the workspace ---------------------------------------------------------- */

void *rt_ctx_ws(RtCtx *ctx, size_t bytes)
{
    if (bytes <= ctx->ws_bytes && ctx->ws)
        return ctx->ws;
    size_t size = (bytes + RT_WS_ALIGN - 1) / RT_WS_ALIGN * RT_WS_ALIGN;
    void *p = aligned_alloc(RT_WS_ALIGN, size ? size : RT_WS_ALIGN);
    if (!p) {
        fprintf(stderr, "error: out of memory for a workspace of %zu bytes\n", bytes);
        exit(1);
    }
    free(ctx->ws);
    ctx->ws = p;
    ctx->ws_bytes = size;
    return p;
}

/* ---- buffers ------------------------------------------------------------------- */

static void *alloc64(size_t bytes)
{
    size_t size = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, size ? size : 64);
    if (p)
        memset(p, 0, size ? size : 64);
    return p;
}

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
    if (t->ctx.buf)
        for (int i = 0; i < t->m->nbuffers; i++)
            if (!t->m->buffers[i].in_arena)
                free(t->ctx.buf[i]);
    free(t->arena);
    if (t->ctx.master)
        for (int i = 0; i < t->m->nparams; i++)
            free(t->ctx.master[i]);
    if (t->state)
        for (int i = 0; i < t->m->nparams; i++)
            free(t->state[i]);
    if (t->state2)
        for (int i = 0; i < t->m->nparams; i++)
            free(t->state2[i]);
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
    if (size > 0 && !(t->arena = alloc64((size_t)size))) {
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

bool rt_trainer_init(RtTrainer *t, const RtModel *m, int64_t batch, int nstate, char *err,
                     size_t errlen)
{
    bool with_state = nstate >= 1;
    memset(t, 0, sizeof *t);
    t->m = m;
    t->batch = batch;
    t->ctx.batch = batch;
    t->ctx.loss_scale = 1.0f;
    int64_t sample = 1;
    for (int i = 0; i < m->data_rank; i++)
        sample *= m->data_shape[i];
    if (m->classes < 1 || m->data_rank < 0 || m->data_rank > RT_MAX_RANK || batch < 1) {
        snprintf(err, errlen, "model %s: %lld classes, input rank %d, batch %lld", m->name,
                 (long long)m->classes, m->data_rank, (long long)batch);
        return false;
    }
    if (!check_buffer(m, m->data, RT_F32, sample * batch, batch, "the data input", err, errlen) ||
        !check_buffer(m, m->label, RT_F32, batch, batch, "the label input", err, errlen) ||
        !check_buffer(m, m->prob_train, RT_F32, m->classes * batch, batch,
                      "the train step's output", err, errlen) ||
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
    t->ctx.buf = calloc((size_t)m->nbuffers + 1, sizeof *t->ctx.buf);
    t->ctx.master = calloc((size_t)m->nparams + 1, sizeof *t->ctx.master);
    t->state = calloc((size_t)m->nparams + 1, sizeof *t->state);
    if (nstate >= 2)
        t->state2 = calloc((size_t)m->nparams + 1, sizeof *t->state2);
    bool ok = t->ctx.buf && t->ctx.master && t->state && (nstate < 2 || t->state2);
    if (ok && !alloc_arena(t, m, batch, err, errlen)) {
        rt_trainer_free(t);
        return false;
    }
    /* the workspace, once: the largest any call of either step asks for at
     * this batch size (a program without the function grows it on demand) */
    if (ok && m->workspace_bytes)
        rt_ctx_ws(&t->ctx, m->workspace_bytes(batch));
    for (int i = 0; ok && i < m->nbuffers; i++) {
        int64_t n = buffer_elems(&m->buffers[i], batch);
        if (!m->buffers[i].in_arena)
            ok = n >= 0 && (t->ctx.buf[i] = alloc64((size_t)n * rt_dtype_size(m->buffers[i].dtype)));
    }
    for (int i = 0; ok && i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (p->has_master)
            ok = (t->ctx.master[i] = alloc64((size_t)p->numel * sizeof(float))) != NULL;
        if (ok && with_state && p->grad >= 0)
            ok = (t->state[i] = alloc64((size_t)p->numel * sizeof(float))) != NULL;
        if (ok && nstate >= 2 && p->grad >= 0)
            ok = (t->state2[i] = alloc64((size_t)p->numel * sizeof(float))) != NULL;
    }
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
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        void *buf = t->ctx.buf[p->buffer];
        float *w32 = p->has_master ? t->ctx.master[i]
                   : p->dtype == RT_F32 ? buf : malloc((size_t)p->numel * sizeof(float));
        if (!w32) {
            snprintf(err, errlen, "out of memory");
            return false;
        }
        bool ok = rt_init_param(p, weight_init, seed, w32, err, errlen);
        if (ok && p->dtype == RT_F16)
            ampc_float_to_half_n(buf, w32, (size_t)p->numel);
        else if (ok && p->dtype == RT_BF16)
            ampc_float_to_bf16_n(buf, w32, (size_t)p->numel);
        else if (ok && p->has_master) /* an fp32 parameter with a master: keep both */
            memcpy(buf, w32, (size_t)p->numel * sizeof(float));
        if (w32 != buf && !p->has_master)
            free(w32);
        if (!ok)
            return false;
    }
    return true;
}
