/* device.c - the CPU device (device.h): device memory is host memory, every
 * call is synchronous, so events and synchronisation only keep count, and
 * a run has one device, so the collectives are the identity.  The finite
 * flag and the optimizer are the CPU kernels (rt_multi_all_finite,
 * optim.c's rt_optim_step2) over the buffers setup recorded.  The loss
 * scale, the update count, the records of the steps since the last ls_read
 * and the learning rates ahead are this device's memory too (the CUDA
 * device's twin: the loss-scale kernel), so the loop reads them only
 * through ls_read.  This is the only file of the training driver that reads
 * or writes the memory the steps run on.
 *
 * The lagging mode (rt_device_cpu_lagging, a test mode) makes the waits a
 * GPU would make visible on the CPU: the device counts as running one step
 * behind the host, so an event recorded during the host's step k completes
 * only when the host has ended step k + 1 (ls_update) or waited for it
 * (event_wait, synchronize, or a call that reads the device back).  The
 * work itself still runs at once: only event_done, and so the waits that
 * RtDevice.syncs counts, change.
 *
 * A CUDA graph (graph_begin .. graph_end, graph_replay: --cuda-graph 1) is
 * emulated faithfully enough to test without a GPU that a graph of the step
 * would be right: between graph_begin and graph_end the step's calls are
 * recorded, not run, with their arguments as a graph would freeze them (the
 * values, and copies of the host memory the calls read through pointers:
 * the RtCtx the emitted step reads, the optimizer's settings, the state
 * tables); graph_end runs the recording once and graph_replay again.  A
 * replay first compares what it froze with the host's memory now: anything
 * the host changed since the capture (a value it would have passed by
 * value, which a real graph would replay stale) is an error naming it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h" /* the optimizer (optim.c) */
#include "device.h"
#include "kernels/splitmix.h" /* the synthetic source's draws */
#include "rt.h"               /* the cast and layout calls of a batch's form */

/* One recorded call of a captured step (the graph's node), its arguments
 * frozen: by value, and what the host's pointers showed at the capture. */
typedef enum {
    REC_STEP_BEGIN,
    REC_LAUNCH,
    REC_MOVING,
    REC_TRAIN_UPDATE,
    REC_LS_UPDATE,
    REC_CHECK_GRADS,
    REC_CHECK_FINITE,
    REC_OPTIM_STEP,
    REC_FILL,
    REC_COPY,
} RecKind;

typedef struct {
    RecKind kind;
    bool inject;                  /* step_begin */
    void (*fn)(RtCtx *);          /* launch, moving_update: fn(ctx) */
    RtCtx *ctx;
    RtCtx ctx_at;                 /* *ctx at the capture */
    float *const *state, *const *state2; /* train_update, optim_step */
    const RtOptConfig *ocp;
    RtOptConfig oc;               /* *ocp at the capture */
    void *dst;                    /* fill, copies, check_finite */
    const void *src;
    size_t n;
    RtDType dt;
    float value;
} Rec;

typedef struct {
    RtDevice base;        /* first: an RtDevice * is a CpuDevice * */
    const RtModel *m;     /* setup's model and buffers (NULL before setup) */
    const RtCtx *ctx;
    void **buf0;          /* ctx->buf and ctx->master as setup saw them */
    float **master0;
    RtTensorRef *grads;   /* the gradient bucket of the finite check */
    int ngrads;
    uint64_t seq;         /* events recorded */
    bool lagging;         /* the test mode above */
    uint64_t done;        /* lagging: the events up to this one are complete */
    uint64_t step_end;    /* lagging: the last event recorded when the last step ended */
    /* the step's state (rt.h; RtCtx.step_state points here): the scale of
     * the step in progress, the finite flag, the update count, whether the
     * scale is dynamic */
    RtStepState step;
    /* the step without the host (device.h, ls_init) */
    AmpcLossScale ls;     /* the scale the next step uses */
    AmpcLossScaleRule rule;
    double batch;
    RtDevLsState st; /* counters (st.s unused: ls is the state; st.num_update: step's) */
    AmpcLossScaleStep ring[RT_DEV_LS_RING]; /* step k at k % RT_DEV_LS_RING */
    float lr[RT_DEV_LS_RING + 1]; /* the learning rate of update lr_first + 1 + i */
    int64_t lr_first;
    int lr_n;
    RtOptConfig oc;       /* lr_ahead's other values */
    bool inject;          /* ls_init's: step inject_at's scale is inf */
    int64_t inject_at;
    /* the emulated CUDA graph (above): the recorded calls, whether a
     * capture is under way, whether a graph was made; the host memory the
     * recorded calls read through pointers, as at the capture */
    Rec *rec;
    int nrec, caprec;
    bool recording, graph, rec_lost; /* rec_lost: a call not recorded (memory) */
    Rec rec_spare;
    void **buf_at;        /* ctx->buf[0 .. nbuffers) */
    void **master_at;     /* ctx->master[0 .. nparams) */
    void **state_at, **state2_at; /* the optimizer's state tables */
    void *scratch;        /* synthetic_batch's and ingest's values before their form */
    size_t scratch_bytes;
} CpuDevice;

static CpuDevice *cpu(RtDevice *d) { return (CpuDevice *)d; }

/* While a graph is captured: the call's record (the caller fills it)
 * instead of the call; NULL otherwise, and the call runs.  Out of memory
 * for the record: the call is dropped all the same, and graph_end refuses
 * the recording. */
static Rec *recorded(CpuDevice *c, RecKind kind)
{
    if (!c->recording)
        return NULL;
    if (c->nrec == c->caprec) {
        int cap = c->caprec ? 2 * c->caprec : 32;
        Rec *r = realloc(c->rec, (size_t)cap * sizeof *r);
        if (!r) {
            c->rec_lost = true;
            return &c->rec_spare;
        }
        c->rec = r;
        c->caprec = cap;
    }
    Rec *r = &c->rec[c->nrec++];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    return r;
}

/* the finite flag of the step's state: 0 while every value checked was finite */
static bool flag_finite(const CpuDevice *c) { return c->step.flag == 0; }
static void set_finite(CpuDevice *c, bool ok) { c->step.flag = ok ? 0 : 1; }

/* The host waited for every event recorded so far (lagging mode's count). */
static void waited_all(CpuDevice *c) { c->done = c->seq; }

/* ---- memory ------------------------------------------------------------------------ */

static void *cpu_alloc(RtDevice *d, size_t bytes, const char *what, char *err, size_t errlen)
{
    (void)d;
    size_t size = bytes ? bytes : RT_DEV_ALIGN;
    void *p = NULL;
    if (size <= SIZE_MAX - (RT_DEV_ALIGN - 1)) {
        size = (size + RT_DEV_ALIGN - 1) / RT_DEV_ALIGN * RT_DEV_ALIGN;
        p = aligned_alloc(RT_DEV_ALIGN, size);
    }
    if (!p) {
        snprintf(err, errlen, "cpu: out of memory for %s (%zu bytes)", what ? what : "a buffer",
                 bytes);
        return NULL;
    }
    memset(p, 0, size);
    return p;
}

static void cpu_free(RtDevice *d, void *p)
{
    (void)d;
    free(p);
}

static void cpu_copy(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    Rec *r = recorded(cpu(d), REC_COPY);
    if (r) {
        *r = (Rec){.kind = REC_COPY, .dst = dst, .src = src, .n = bytes};
        return;
    }
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

/* a read-back waits for the work before it */
static void cpu_to_host(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    waited_all(cpu(d));
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

static void cpu_event_record(RtDevice *d, RtDevEvent *e);

/* The scratch the batches below are formed in (grown, kept to close). */
static void *cpu_scratch(CpuDevice *c, size_t bytes)
{
    if (bytes > c->scratch_bytes) {
        free(c->scratch);
        c->scratch_bytes = 0;
        if (!(c->scratch = malloc(bytes))) {
            fprintf(stderr, "cpu: out of memory for a batch's scratch (%zu bytes)\n", bytes);
            exit(1); /* a queued call has no error to return, as the CUDA device's */
        }
        c->scratch_bytes = bytes;
    }
    return c->scratch;
}

/* Where a batch's fp32 values [n, sample] go before they take form f: x
 * itself for the data input's own form, else the scratch. */
static float *form_values(CpuDevice *c, const RtDevForm *f, size_t n, size_t sample, void *x)
{
    if (f->dt == RT_F32 && !f->nhwc)
        return x;
    return cpu_scratch(c, n * sample * (sizeof(float) + rt_dtype_size(f->dt)));
}

/* The values v (form_values') into x in form f, by the calls the steps'
 * first nodes would make (amp_cast: rt_cast_forward; _layout:
 * rt_layout_convert), so a step that skips them reads the same bits. */
static void put_form(const RtDevForm *f, size_t n, size_t sample, const float *v, void *x)
{
    size_t ch = f->c ? f->c : 1, total = n * sample;
    if ((const void *)v == x)
        return;
    if (!f->nhwc) {
        rt_cast_forward(total, RT_F32, v, f->dt, x);
        return;
    }
    void *cast = (char *)(void *)v + total * sizeof(float);
    rt_cast_forward(total, RT_F32, v, f->dt, cast);
    rt_layout_convert((int64_t)n, (int64_t)ch, (int64_t)(sample / ch), f->dt, cast, x,
                      RT_LAYOUT_NHWC);
}

/* The synthetic source's batch (data/synthetic.c's synthetic_fill, the same
 * draws in the same order) written straight into the device's buffers, in
 * s->form: what cuda/synthetic.cuh's kernel does, so the loop neither fills
 * a staging buffer nor waits for one. */
static void cpu_synthetic_batch(RtDevice *d, const RtDevSynth *s, const int64_t *idx, void *x,
                                float *y)
{
    float *v = form_values(cpu(d), &s->form, s->n, s->sample, x);
    for (size_t j = 0; j < s->n; j++) {
        uint64_t k = (uint64_t)idx[j];
        float *row = v + j * s->sample;
        for (size_t e = 0; e < s->sample; e++)
            row[e] = ampc_synthetic_x(s->key_x, k * s->sample + e);
        if (y)
            y[j] = ampc_synthetic_y(s->key_y, k, s->classes);
    }
    put_form(&s->form, s->n, s->sample, v, x);
}

/* A raw batch normalised (data/ingest.c's rt_ingest_floats: the sources'
 * own fill) into g->x in g->form, through the scratch as the CUDA device
 * copies through it; `copied` recorded once the host's buffers are read. */
static void cpu_ingest(RtDevice *d, const RtDevIngest *g, RtDevEvent *copied)
{
    CpuDevice *c = cpu(d);
    uint8_t *raw = g->scratch;
    float *labels = (float *)(void *)(raw + rt_dev_ingest_labels_at(g->n, g->sample));
    memcpy(raw, g->host_raw, g->n * g->sample);
    memcpy(labels, g->host_y, g->n * sizeof *labels);
    cpu_event_record(d, copied);
    float *v = form_values(c, &g->form, g->n, g->sample, g->x);
    rt_ingest_floats(&g->norm, raw, (int64_t)g->n, (int64_t)g->sample, v);
    put_form(&g->form, g->n, g->sample, v, g->x);
    if (g->y)
        memcpy(g->y, labels, g->n * sizeof *labels);
}

static void cpu_fill(RtDevice *d, void *dst, RtDType dt, size_t n, float value)
{
    Rec *r = recorded(cpu(d), REC_FILL);
    if (r) {
        *r = (Rec){.kind = REC_FILL, .dst = dst, .dt = dt, .n = n, .value = value};
        return;
    }
    if (dt == RT_F32) {
        float *p = dst;
        for (size_t i = 0; i < n; i++)
            p[i] = value;
        return;
    }
    uint16_t bits;
    rt_from_f32(&bits, &value, 1, dt);
    uint16_t *p = dst;
    for (size_t i = 0; i < n; i++)
        p[i] = bits;
}

/* ---- setup ------------------------------------------------------------------------- */

static bool same_buffers(const CpuDevice *c, const RtModel *m, const RtCtx *ctx)
{
    if (c->m != m || c->ctx != ctx)
        return false;
    for (int i = 0; i < m->nbuffers; i++)
        if (c->buf0[i] != ctx->buf[i])
            return false;
    for (int i = 0; ctx->master && i < m->nparams; i++)
        if (c->master0[i] != ctx->master[i])
            return false;
    return true;
}

static bool cpu_setup(RtDevice *d, const RtModel *m, const RtCtx *ctx, char *err, size_t errlen)
{
    CpuDevice *c = cpu(d);
    if (c->m && same_buffers(c, m, ctx))
        return true;
    free(c->buf0);
    free(c->master0);
    free(c->grads);
    c->m = NULL;
    c->ngrads = 0;
    c->buf0 = calloc((size_t)m->nbuffers + 1, sizeof *c->buf0);
    c->master0 = calloc((size_t)m->nparams + 1, sizeof *c->master0);
    c->grads = calloc((size_t)m->nparams + 1, sizeof *c->grads);
    if (!c->buf0 || !c->master0 || !c->grads) {
        snprintf(err, errlen, "cpu: out of memory for the setup of model %s", m->name);
        return false;
    }
    memcpy(c->buf0, ctx->buf, (size_t)m->nbuffers * sizeof *c->buf0);
    if (ctx->master)
        memcpy(c->master0, ctx->master, (size_t)m->nparams * sizeof *c->master0);
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (p->grad >= 0)
            c->grads[c->ngrads++] =
                (RtTensorRef){ctx->buf[p->grad], (size_t)p->numel, m->buffers[p->grad].dtype};
    }
    c->m = m;
    c->ctx = ctx;
    set_finite(c, true);
    return true;
}

/* ---- the finite flag -------------------------------------------------------------- */

/* rt_multi_all_finite takes a bounded number of tensors per call (optim.c
 * passes 64 at a time too) */
enum { CHUNK = 64 };

static void cpu_check_grads(RtDevice *d)
{
    CpuDevice *c = cpu(d);
    if (recorded(c, REC_CHECK_GRADS))
        return;
    bool ok = true;
    for (int i = 0; i < c->ngrads; i += CHUNK)
        ok &= rt_multi_all_finite(c->grads + i, c->ngrads - i < CHUNK ? c->ngrads - i : CHUNK);
    set_finite(c, ok);
}

static void cpu_check_finite(RtDevice *d, const void *p, size_t n, RtDType dt)
{
    Rec *r = recorded(cpu(d), REC_CHECK_FINITE);
    if (r) {
        *r = (Rec){.kind = REC_CHECK_FINITE, .src = p, .n = n, .dt = dt};
        return;
    }
    set_finite(cpu(d), n == 0 || rt_all_finite(p, n, dt));
}

static bool cpu_read_flag(RtDevice *d)
{
    waited_all(cpu(d));
    return flag_finite(cpu(d));
}

static int cpu_first_nonfinite(RtDevice *d)
{
    CpuDevice *c = cpu(d);
    waited_all(c);
    return c->m ? rt_optim_first_nonfinite(c->m, c->ctx) : -1;
}

static void cpu_optim_step(RtDevice *d, float *const *state, float *const *state2,
                           const RtOptConfig *oc)
{
    CpuDevice *c = cpu(d);
    Rec *r = recorded(c, REC_OPTIM_STEP);
    if (r) {
        *r = (Rec){.kind = REC_OPTIM_STEP, .state = state, .state2 = state2, .ocp = oc, .oc = *oc};
        return;
    }
    if (!c->m)
        return;
    set_finite(c, rt_optim_step2(c->m, c->ctx, state, state2, oc));
}

/* ---- the step without the host ---------------------------------------------------- */

static bool cpu_ls_init(RtDevice *d, const RtDevLsInit *in, char *err, size_t errlen)
{
    CpuDevice *c = cpu(d);
    if (!(in->batch > 0) || in->num_update < 0) {
        snprintf(err, errlen, "cpu: loss scale: batch %g, %lld updates before", in->batch,
                 (long long)in->num_update);
        return false;
    }
    c->step.dynamic = in->dynamic;
    c->ls = in->s;
    c->rule = in->rule;
    c->batch = in->batch;
    c->step.scale = in->s.scale;
    c->step.num_update = in->num_update;
    c->step.step = (uint64_t)in->step;
    c->inject = in->inject_inf;
    c->inject_at = in->inject_inf_at;
    memset(&c->st, 0, sizeof c->st);
    c->lr_n = 0;
    return true;
}

static void cpu_step_begin(RtDevice *d, bool inject_inf)
{
    CpuDevice *c = cpu(d);
    Rec *r = recorded(c, REC_STEP_BEGIN);
    if (r) {
        r->inject = inject_inf;
        return;
    }
    bool at = c->inject && (int64_t)c->step.step == c->inject_at;
    c->step.scale = inject_inf || at ? INFINITY : c->ls.scale;
}

static const RtStepState *cpu_step_state(RtDevice *d) { return &cpu(d)->step; }

/* the CPU's kernels take no context */
static struct RtCudaCtx *cpu_kernel_ctx(RtDevice *d)
{
    (void)d;
    return NULL;
}

static void cpu_lr_ahead(RtDevice *d, const RtOptConfig *oc, const float *lr, int64_t first,
                         int n)
{
    CpuDevice *c = cpu(d);
    n = n < 0 ? 0 : n > RT_DEV_LS_RING + 1 ? RT_DEV_LS_RING + 1 : n;
    memcpy(c->lr, lr, (size_t)n * sizeof *lr);
    c->lr_first = first;
    c->lr_n = n;
    c->oc = *oc;
}

static void record_ctx(CpuDevice *c, RecKind kind, void (*fn)(RtCtx *), RtCtx *ctx);

/* fn(ctx) now, or its record while a graph is captured */
static void call_or_record(RtDevice *d, RecKind kind, void (*fn)(RtCtx *), RtCtx *ctx)
{
    if (cpu(d)->recording)
        record_ctx(cpu(d), kind, fn, ctx);
    else if (fn)
        fn(ctx);
}

/* the kernels read the step's state: a skipped step's statistics stay */
static void cpu_moving_update(RtDevice *d, void (*fn)(RtCtx *), RtCtx *ctx)
{
    call_or_record(d, REC_MOVING, fn, ctx);
}

/* the emitted train step: its kernels are the CPU's, called at once */
static void cpu_launch(RtDevice *d, void (*fn)(RtCtx *), RtCtx *ctx)
{
    call_or_record(d, REC_LAUNCH, fn, ctx);
}

static void cpu_train_update(RtDevice *d, float *const *state, float *const *state2,
                             const RtOptConfig *oc)
{
    CpuDevice *c = cpu(d);
    Rec *r = recorded(c, REC_TRAIN_UPDATE);
    if (r) {
        *r = (Rec){.kind = REC_TRAIN_UPDATE, .state = state, .state2 = state2, .ocp = oc,
                   .oc = *oc};
        return;
    }
    if (!c->m || (c->step.dynamic && !flag_finite(c)))
        return;
    RtOptConfig u = *oc;
    int64_t i = c->step.num_update - c->lr_first;
    /* a schedule not written ahead this far is the loop's bug: NaN shows it */
    u.lr = i >= 0 && i < c->lr_n ? c->lr[i] : NAN;
    u.t = c->step.num_update + 1;
    u.rescale_grad = (float)(1.0 / (c->batch * (double)c->step.scale));
    set_finite(c, rt_optim_step2(c->m, c->ctx, state, state2, &u));
    c->step.num_update++;
}

static void cpu_ls_update(RtDevice *d)
{
    CpuDevice *c = cpu(d);
    if (recorded(c, REC_LS_UPDATE))
        return;
    /* the step's end: lagging, the device has now finished the step before */
    c->done = c->step_end > c->done ? c->step_end : c->done;
    c->step_end = c->seq;
    bool ok = flag_finite(c);
    if (!c->step.dynamic) {
        c->st.nonfinite += !ok;
    } else {
        c->st.skipped += !ok;
        c->ls = ampc_loss_scale_update(c->ls, !ok, c->rule);
    }
    c->ring[c->st.steps % RT_DEV_LS_RING] =
        (AmpcLossScaleStep){.s = c->ls, .num_update = c->step.num_update, .finite = ok};
    c->st.steps++;
    c->step.step++;
}

static void cpu_ls_read(RtDevice *d, RtDevLsState *st, AmpcLossScaleStep *steps, int64_t from)
{
    CpuDevice *c = cpu(d);
    waited_all(c);
    *st = c->st;
    st->s = c->ls;
    st->num_update = c->step.num_update;
    /* steps older than the ring are gone (the loop reads before it wraps) */
    int64_t lo = from > st->steps - RT_DEV_LS_RING ? from : st->steps - RT_DEV_LS_RING;
    for (int64_t k = lo < 0 ? 0 : lo; steps && k < st->steps; k++)
        steps[k - from] = c->ring[k % RT_DEV_LS_RING];
}

static void cpu_set_flag(RtDevice *d, bool ok) { set_finite(cpu(d), ok); }

/* ---- the emulated CUDA graph (above) ------------------------------------------------- */

/* a copy of the n pointers at src (NULL for none; out of memory: NULL and
 * *lost set) */
static void **copy_ptrs(const void *src, int n, bool *lost)
{
    if (!src || n <= 0)
        return NULL;
    void **p = malloc((size_t)n * sizeof *p);
    if (p)
        memcpy(p, src, (size_t)n * sizeof *p);
    *lost |= !p;
    return p;
}

static void record_ctx(CpuDevice *c, RecKind kind, void (*fn)(RtCtx *), RtCtx *ctx)
{
    Rec *r = recorded(c, kind);
    if (!r || r == &c->rec_spare)
        return;
    r->fn = fn;
    r->ctx = ctx;
    r->ctx_at = *ctx;
    int nb = c->m ? c->m->nbuffers : 0, np = c->m ? c->m->nparams : 0;
    if (!c->buf_at && !c->master_at) {
        c->buf_at = copy_ptrs(ctx->buf, nb, &c->rec_lost);
        c->master_at = copy_ptrs(ctx->master, np, &c->rec_lost);
    }
}

static bool cpu_graph_begin(RtDevice *d, char *err, size_t errlen)
{
    CpuDevice *c = cpu(d);
    if (c->recording) {
        snprintf(err, errlen, "cpu: graph_begin while a graph is captured");
        return false;
    }
    c->nrec = 0;
    c->graph = c->rec_lost = false;
    free(c->buf_at);
    free(c->master_at);
    free(c->state_at);
    free(c->state2_at);
    c->buf_at = c->master_at = c->state_at = c->state2_at = NULL;
    c->recording = true;
    return true;
}

/* The host memory a recorded call reads through a pointer, as the capture
 * saw it: the first difference named in err, else true. */
#define SAME_FIELD(f)                                                                              \
    if (memcmp(&now->f, &at->f, sizeof now->f) != 0) {                                            \
        snprintf(err, errlen, "RtCtx.%s", #f);                                                     \
        return false;                                                                              \
    }
static bool same_ctx(const CpuDevice *c, const RtCtx *now, const RtCtx *at, char *err,
                     size_t errlen)
{
    SAME_FIELD(batch) SAME_FIELD(buf) SAME_FIELD(master) SAME_FIELD(step_state)
    SAME_FIELD(cuda) SAME_FIELD(seed) SAME_FIELD(step) SAME_FIELD(ws) SAME_FIELD(ws_bytes)
    SAME_FIELD(check_node) SAME_FIELD(after_node) SAME_FIELD(grad_ready) SAME_FIELD(ws_device)
    for (int i = 0; c->buf_at && c->m && i < c->m->nbuffers; i++)
        if (now->buf[i] != c->buf_at[i]) {
            snprintf(err, errlen, "RtCtx.buf[%d]", i);
            return false;
        }
    for (int i = 0; c->master_at && c->m && i < c->m->nparams; i++)
        if (now->master[i] != c->master_at[i]) {
            snprintf(err, errlen, "RtCtx.master[%d]", i);
            return false;
        }
    return true;
}
#undef SAME_FIELD

static bool same_tables(const CpuDevice *c, const Rec *r, char *err, size_t errlen)
{
    int np = c->m ? c->m->nparams : 0;
    if (memcmp(r->ocp, &r->oc, sizeof r->oc) != 0) {
        snprintf(err, errlen, "the optimizer's settings (RtOptConfig)");
        return false;
    }
    if ((r->state && c->state_at && memcmp(r->state, c->state_at, (size_t)np * sizeof(float *))) ||
        (r->state2 && c->state2_at &&
         memcmp(r->state2, c->state2_at, (size_t)np * sizeof(float *)))) {
        snprintf(err, errlen, "the optimizer's state table");
        return false;
    }
    return true;
}

/* Every recorded call's frozen arguments against the host's memory now. */
static bool graph_unchanged(CpuDevice *c, char *err, size_t errlen)
{
    char what[96] = "";
    for (int i = 0; i < c->nrec; i++) {
        const Rec *r = &c->rec[i];
        bool ok = true;
        if (r->kind == REC_LAUNCH || r->kind == REC_MOVING)
            ok = same_ctx(c, r->ctx, &r->ctx_at, what, sizeof what);
        else if (r->kind == REC_TRAIN_UPDATE || r->kind == REC_OPTIM_STEP)
            ok = same_tables(c, r, what, sizeof what);
        if (!ok) {
            snprintf(err, errlen, "cpu: the captured step's call %d reads %s, which the host "
                     "changed since the capture: a CUDA graph would replay the value it "
                     "captured (move it into the step's state on the device)", i + 1, what);
            return false;
        }
    }
    return true;
}

/* The recording run, call by call, with what it froze. */
static void graph_run(RtDevice *d)
{
    CpuDevice *c = cpu(d);
    for (int i = 0; i < c->nrec; i++) {
        Rec *r = &c->rec[i];
        switch (r->kind) {
        case REC_STEP_BEGIN: cpu_step_begin(d, r->inject); break;
        case REC_LAUNCH: cpu_launch(d, r->fn, r->ctx); break;
        case REC_MOVING: cpu_moving_update(d, r->fn, r->ctx); break;
        case REC_TRAIN_UPDATE: cpu_train_update(d, r->state, r->state2, &r->oc); break;
        case REC_LS_UPDATE: cpu_ls_update(d); break;
        case REC_CHECK_GRADS: cpu_check_grads(d); break;
        case REC_CHECK_FINITE: cpu_check_finite(d, r->src, r->n, r->dt); break;
        case REC_OPTIM_STEP: cpu_optim_step(d, r->state, r->state2, &r->oc); break;
        case REC_FILL: cpu_fill(d, r->dst, r->dt, r->n, r->value); break;
        case REC_COPY: cpu_copy(d, r->dst, r->src, r->n); break;
        }
    }
}

static bool cpu_graph_replay(RtDevice *d, char *err, size_t errlen)
{
    CpuDevice *c = cpu(d);
    if (!c->graph) {
        snprintf(err, errlen, "cpu: graph_replay without a captured graph");
        return false;
    }
    if (!graph_unchanged(c, err, errlen))
        return false;
    graph_run(d);
    return true;
}

static bool cpu_graph_end(RtDevice *d, char *err, size_t errlen)
{
    CpuDevice *c = cpu(d);
    bool ends = false;
    int np = c->m ? c->m->nparams : 0;
    c->recording = false;
    for (int i = 0; i < c->nrec; i++) {
        const Rec *r = &c->rec[i];
        ends |= r->kind == REC_LS_UPDATE;
        if ((r->kind == REC_TRAIN_UPDATE || r->kind == REC_OPTIM_STEP) && !c->state_at &&
            !c->state2_at) {
            c->state_at = copy_ptrs(r->state, np, &c->rec_lost);
            c->state2_at = copy_ptrs(r->state2, np, &c->rec_lost);
        }
    }
    if (c->rec_lost || !ends) {
        snprintf(err, errlen, "cpu: %s", c->rec_lost ? "out of memory for the graph's record"
                                                      : "the captured calls hold no step's end");
        c->nrec = 0;
        return false;
    }
    c->graph = true;
    graph_run(d); /* launched once: the captured step runs */
    return true;
}

/* ---- ordering: every call above has finished when it returns ---------------------- */

static void cpu_event_record(RtDevice *d, RtDevEvent *e) { e->seq = ++cpu(d)->seq; }
/* in order, as a stream: waiting for e completes every event before it */
static void cpu_event_wait(RtDevice *d, const RtDevEvent *e)
{
    CpuDevice *c = cpu(d);
    c->done = e->seq > c->done ? e->seq : c->done;
}
/* the lagging mode's only effect (above); else every recorded event is done */
static bool cpu_event_done(RtDevice *d, const RtDevEvent *e)
{
    const CpuDevice *c = cpu(d);
    return e->seq <= (c->lagging ? c->done : c->seq);
}
static void cpu_synchronize(RtDevice *d) { waited_all(cpu(d)); }

/* the CPU runs each call before returning: a mark is the host clock */
static void cpu_time_reset(RtDevice *d) { (void)d; }
static bool cpu_time_mark(RtDevice *d, RtDevTime *t)
{
    (void)d;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t->slot = 0;
    t->host_s = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return true;
}
static double cpu_time_elapsed(RtDevice *d, const RtDevTime *a, const RtDevTime *b)
{
    waited_all(cpu(d));
    return b->host_s - a->host_s;
}

/* ---- collectives: one device --------------------------------------------------------- */

static int cpu_world_size(const RtDevice *d)
{
    (void)d;
    return 1;
}
static int cpu_rank(const RtDevice *d)
{
    (void)d;
    return 0;
}

static bool check_bucket(const RtDevTensor *bucket, int n, const char *call, char *err,
                         size_t errlen)
{
    if (n < 0 || (n > 0 && !bucket)) {
        snprintf(err, errlen, "cpu: %s of %d tensors", call, n);
        return false;
    }
    for (int i = 0; i < n; i++)
        if ((!bucket[i].ptr && bucket[i].n) || (unsigned)bucket[i].dt > RT_BF16) {
            snprintf(err, errlen, "cpu: %s: tensor %d of the bucket has no memory or no dtype",
                     call, i);
            return false;
        }
    return true;
}

/* The sum over one device is its own value and the mean divides by 1: the
 * bucket is left as it is, bit for bit (a NaN payload included). */
static bool cpu_allreduce(RtDevice *d, const RtDevTensor *bucket, int n, RtReduceOp op, char *err,
                          size_t errlen)
{
    (void)d;
    if (op != RT_REDUCE_SUM && op != RT_REDUCE_MEAN) {
        snprintf(err, errlen, "cpu: all-reduce: unknown reduction %d", (int)op);
        return false;
    }
    return check_bucket(bucket, n, "all-reduce", err, errlen);
}

static bool cpu_broadcast(RtDevice *d, const RtDevTensor *bucket, int n, int root, char *err,
                          size_t errlen)
{
    if (root < 0 || root >= cpu_world_size(d)) {
        snprintf(err, errlen, "cpu: broadcast from device %d of %d", root, cpu_world_size(d));
        return false;
    }
    return check_bucket(bucket, n, "broadcast", err, errlen);
}

static void cpu_close(RtDevice *d)
{
    CpuDevice *c = cpu(d);
    free(c->buf0);
    free(c->master0);
    free(c->grads);
    free(c->rec);
    free(c->buf_at);
    free(c->master_at);
    free(c->state_at);
    free(c->state2_at);
    free(c->scratch);
    free(c);
}

static const RtDeviceOps cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .to_device = cpu_copy,
    .to_host = cpu_to_host,
    .to_host_async = cpu_copy,
    .fill = cpu_fill,
    .synthetic_batch = cpu_synthetic_batch,
    .ingest = cpu_ingest,
    .setup = cpu_setup,
    .check_grads = cpu_check_grads,
    .check_finite = cpu_check_finite,
    .read_flag = cpu_read_flag,
    .first_nonfinite = cpu_first_nonfinite,
    .optim_step = cpu_optim_step,
    .ls_init = cpu_ls_init,
    .step_begin = cpu_step_begin,
    .step_state = cpu_step_state,
    .kernel_ctx = cpu_kernel_ctx,
    .lr_ahead = cpu_lr_ahead,
    .moving_update = cpu_moving_update,
    .train_update = cpu_train_update,
    .ls_update = cpu_ls_update,
    .ls_read = cpu_ls_read,
    .set_flag = cpu_set_flag,
    .event_record = cpu_event_record,
    .event_wait = cpu_event_wait,
    .event_done = cpu_event_done,
    .synchronize = cpu_synchronize,
    .time_reset = cpu_time_reset,
    .time_mark = cpu_time_mark,
    .time_elapsed = cpu_time_elapsed,
    .world_size = cpu_world_size,
    .rank = cpu_rank,
    .allreduce = cpu_allreduce,
    .broadcast = cpu_broadcast,
    .launch = cpu_launch,
    .graph_begin = cpu_graph_begin,
    .graph_end = cpu_graph_end,
    .graph_replay = cpu_graph_replay,
    .close = cpu_close,
};

RtDevice *rt_device_cpu_open(char *err, size_t errlen)
{
    CpuDevice *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "cpu: out of memory for the device");
        return NULL;
    }
    c->base.ops = &cpu_ops;
    c->ls.scale = c->step.scale = 1.0f; /* no loss scale until ls_init */
    c->rule = ampc_loss_scale_rule_default();
    c->batch = 1.0;
    return &c->base;
}

void rt_device_cpu_lagging(RtDevice *d, bool on)
{
    CpuDevice *c = cpu(d);
    c->lagging = on;
    c->done = c->step_end = c->seq;
}
