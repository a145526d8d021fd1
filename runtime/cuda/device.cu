/* device.cu - the CUDA device (runtime/device.h) on one GPU.
 *
 * NOT RUN YET: it compiles and links here (make cuda, make cuda-check's
 * smoke test), but these machines have no GPU, so only its error path has
 * run (docs/backend-cuda.md).
 *
 * Device memory is cudaMalloc'd (never managed memory) and zeroed; all work
 * goes onto one non-blocking stream in the order of the calls.  The
 * finite flag is an int32 in device memory that the custom kernels
 * (kernels.cuh through ampc_cuda.h) write and read; read_flag is the one
 * read-back.  The finite check and the optimizer run over multi-tensor
 * tables in device memory made by mt_table.h, as optim.c walks the model:
 * the gradients' table at setup, the optimizer's on its first step (and
 * again should its choice of states change).  Every CUDA call goes through
 * cu_check (CU_TRY / CU_MUST), which reports file:line, the call and
 * cudaGetErrorString; a failure outside alloc and open ends the program
 * (exit 1), since the device's state is then unknown.
 */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/ampc_cuda.h"
#include "cuda/device_cuda.h"
#include "cuda/mt_table.h"
#include "cuda/rt_cuda.h"

/* ---- the checking macro ------------------------------------------------------------ */

/* true when e is cudaSuccess; else the message "FILE:LINE: CALL: ERROR"
 * into err (or stderr when err is NULL) */
static bool cu_check(cudaError_t e, const char *call, const char *file, int line, char *err,
                     size_t errlen)
{
    if (e == cudaSuccess)
        return true;
    if (err)
        snprintf(err, errlen, "%s:%d: %s: %s", file, line, call, cudaGetErrorString(e));
    else
        fprintf(stderr, "cuda: %s:%d: %s: %s\n", file, line, call, cudaGetErrorString(e));
    return false;
}

/* a call whose failure the caller reports (into err) */
#define CU_TRY(call, err, errlen) \
    cu_check((cudaError_t)(call), #call, __FILE__, __LINE__, (err), (errlen))
/* a call that must not fail: on failure, the message and exit(1) */
#define CU_MUST(call)                                                                         \
    do {                                                                                      \
        if (!cu_check((cudaError_t)(call), #call, __FILE__, __LINE__, NULL, 0))               \
            exit(1);                                                                          \
    } while (0)

/* ---- the device ---------------------------------------------------------------------- */

enum { NEVENTS = 64 }; /* events in the ring (RtDevEvent.seq % NEVENTS) */
#define RING_BYTES (RT_DEV_LS_RING * sizeof(AmpcLossScaleStep)) /* the steps' records */

typedef struct {
    const AmpcMtTensor *tensors; /* device memory */
    const AmpcMtBlock *blocks;
    int64_t nblocks;
} DevTable;

/* The loss scale, the update count and the schedule's position, in device
 * memory (device.h, "the step without the host"; its kernels: step.cuh). */
typedef AmpcDevLs DevLs;

typedef struct {
    RtDevice base; /* first: an RtDevice * is a CudaDevice * */
    int ordinal;
    cudaStream_t stream;
    RtCudaCtx *kernels;  /* the run state of the kernels' libraries (rt_device_cuda_adopt) */
    int32_t *flag;       /* device, &ls->st.flag: 0 = every value checked was finite */
    int32_t *flag_host;  /* pinned: read_flag's copy */
    /* setup's model and buffers */
    const RtModel *m;
    const RtCtx *ctx;
    void **buf0;
    float **master0;
    DevTable grads;      /* every gradient (check_grads) */
    DevTable opt;        /* what optim_step updates */
    float *const *opt_state, *const *opt_state2;
    int opt_kind, opt_with_mom, opt_valid;
    /* events */
    cudaEvent_t ev[NEVENTS];
    uint64_t seq;
    /* the step without the host; ls->st is the step's state (RtCtx.step_state) */
    DevLs *ls;                 /* device */
    DevLs *ls_host;            /* pinned: ls_init's and ls_read's copy */
    AmpcLossScaleStep *ring, *ring_host; /* device, pinned: RT_DEV_LS_RING steps' records */
    AmpcMtStep *lr, *lr_host;  /* device, pinned: RT_DEV_LS_RING + 1 steps */
    AmpcMtStep *cur;           /* device: the step_dev of this update */
    AmpcLossScaleRule rule;
    double batch;              /* rescale_grad = 1 / (batch x the step's scale) */
    bool dynamic;
    cudaEvent_t lr_copied;     /* lr_host may be rewritten once it completes */
    /* --profile's timing points: events with timing, grown as marked, reused
     * after each time_reset */
    cudaEvent_t *timing;
    int64_t ntiming, used_timing;
    /* --cuda-graph 1: the captured step and its executable */
    cudaGraph_t graph;
    cudaGraphExec_t graph_exec;
    /* ingest's copy stream and the point its kernel last read the scratch
     * (made on the first ingest) */
    cudaStream_t copy;
    cudaEvent_t ingest_read;
} CudaDevice;

static CudaDevice *cu(RtDevice *d) { return (CudaDevice *)d; }

/* ---- memory ---------------------------------------------------------------------------- */

static void *cu_alloc(RtDevice *d, size_t bytes, const char *what, char *err, size_t errlen)
{
    CudaDevice *c = cu(d);
    size_t size = bytes ? bytes : RT_DEV_ALIGN;
    if (size > SIZE_MAX - (RT_DEV_ALIGN - 1)) {
        snprintf(err, errlen, "cuda: out of memory for %s (%zu bytes)", what ? what : "a buffer",
                 bytes);
        return NULL;
    }
    size = (size + RT_DEV_ALIGN - 1) / RT_DEV_ALIGN * RT_DEV_ALIGN;
    void *p = NULL;
    char why[300];
    if (!CU_TRY(cudaMalloc(&p, size), why, sizeof why)) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        snprintf(err, errlen, "cuda: out of memory for %s (%zu bytes): %s",
                 what ? what : "a buffer", bytes, why);
        return NULL;
    }
    CU_MUST(cudaMemsetAsync(p, 0, size, c->stream)); /* cudaMalloc's blocks start at 256 B */
    return p;
}

static void cu_free(RtDevice *d, void *p)
{
    if (!p)
        return;
    CU_MUST(cudaStreamSynchronize(cu(d)->stream)); /* nothing queued may still use it */
    CU_MUST(cudaFree(p));
}

static void *cu_host_alloc(RtDevice *d, size_t bytes, const char *what, char *err, size_t errlen)
{
    (void)d;
    size_t size = bytes ? bytes : RT_DEV_ALIGN;
    void *p = NULL;
    char why[300];
    if (!CU_TRY(cudaHostAlloc(&p, size, cudaHostAllocDefault), why, sizeof why)) {
        (void)cudaGetLastError();
        snprintf(err, errlen, "cuda: out of pinned host memory for %s (%zu bytes): %s",
                 what ? what : "a buffer", bytes, why);
        return NULL;
    }
    memset(p, 0, size);
    return p;
}

static void cu_host_free(RtDevice *d, void *p)
{
    if (!p)
        return;
    CU_MUST(cudaStreamSynchronize(cu(d)->stream));
    CU_MUST(cudaFreeHost(p));
}

/* Asynchronous: from pageable memory cudaMemcpyAsync returns once the
 * source has been staged (the caller may reuse it); from pinned memory
 * (the loop's staging buffers) the loop orders reuse with events. */
static void cu_to_device(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        CU_MUST(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu(d)->stream));
}

/* Synchronous: the caller reads the host copy at once. */
static void cu_to_host(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    CU_MUST(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cu(d)->stream));
    CU_MUST(cudaStreamSynchronize(cu(d)->stream));
}

static void cu_fill(RtDevice *d, void *dst, RtDType dt, size_t n, float value)
{
    CU_MUST(ampc_cu_fill(cu(d)->stream, dst, (int)dt, n, value));
}

/* A batch kernel's shape and form (AmpcSynthBatch's, AmpcIngest's): n samples
 * of `sample` elements in form f (c 0: one channel), unpadded */
template <class Batch> static void batch_form(Batch *b, size_t n, size_t sample, const RtDevForm *f)
{
    b->n = n;
    b->c = b->cp = f->c ? f->c : 1;
    b->inner = sample / b->c;
    b->nhwc = f->nhwc;
    b->dt = (int)f->dt;
}

/* The synthetic batch by cuda/synthetic.cuh's kernel, in s->form (the data
 * input's own, fp32 [n, sample], or the first layer's) */
static void cu_synthetic_batch(RtDevice *d, const RtDevSynth *s, const int64_t *idx, void *x,
                               float *y)
{
    AmpcSynthBatch b = {};
    batch_form(&b, s->n, s->sample, &s->form);
    b.key_x = s->key_x;
    b.key_y = s->key_y;
    b.classes = s->classes;
    CU_MUST(ampc_cu_synthetic_batch(cu(d)->stream, &b, idx, x, y));
}

/* A raw batch (device.h's ingest): its bytes and labels copied on the copy
 * stream once the last ingest's kernel has read the scratch, `copied`
 * recorded there; the compute stream waits for the copy, then
 * cuda/ingest.cuh's kernel writes x and y in g->form.  So the upload of the
 * next batch overlaps the step before (the loop calls this before the
 * step's begin), and the host waits for neither. */
static void cu_ingest(RtDevice *d, const RtDevIngest *g, RtDevEvent *copied)
{
    CudaDevice *c = cu(d);
    if (!c->copy) {
        CU_MUST(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
        CU_MUST(cudaEventCreateWithFlags(&c->ingest_read, cudaEventDisableTiming));
    }
    uint8_t *raw = (uint8_t *)g->scratch;
    float *labels = (float *)(void *)(raw + rt_dev_ingest_labels_at(g->n, g->sample));
    CU_MUST(cudaStreamWaitEvent(c->copy, c->ingest_read, 0));
    if (g->n && g->sample)
        CU_MUST(
            cudaMemcpyAsync(raw, g->host_raw, g->n * g->sample, cudaMemcpyHostToDevice, c->copy));
    if (g->n)
        CU_MUST(cudaMemcpyAsync(labels, g->host_y, g->n * sizeof(float), cudaMemcpyHostToDevice,
                                c->copy));
    uint64_t s = ++c->seq;
    CU_MUST(cudaEventRecord(c->ev[s % NEVENTS], c->copy));
    copied->seq = s;
    CU_MUST(cudaStreamWaitEvent(c->stream, c->ev[s % NEVENTS], 0));
    AmpcIngest b = {};
    batch_form(&b, g->n, g->sample, &g->form);
    b.norm.channels = g->norm.channels;
    b.norm.div = g->norm.div;
    for (int i = 0; i < 4; i++) {
        b.norm.mean[i] = g->norm.mean[i];
        b.norm.std[i] = g->norm.std[i];
    }
    CU_MUST(ampc_cu_ingest(c->stream, &b, raw, labels, g->x, g->y));
    CU_MUST(cudaEventRecord(c->ingest_read, c->stream));
}

/* ---- the multi-tensor tables ----------------------------------------------------------- */

static void table_free(DevTable *t)
{
    if (t->tensors)
        CU_MUST(cudaFree((void *)t->tensors));
    if (t->blocks)
        CU_MUST(cudaFree((void *)t->blocks));
    memset(t, 0, sizeof *t);
}

/* Uploads nt tensors and their block table (chunks of AMPC_MT_CHUNK). */
static bool table_upload(CudaDevice *c, DevTable *t, const AmpcMtTensor *host, int nt, char *err,
                         size_t errlen)
{
    CU_MUST(cudaStreamSynchronize(c->stream)); /* the old table may be in use */
    table_free(t);
    int64_t nb = ampc_mt_count_blocks(host, nt, AMPC_MT_CHUNK);
    if (nb < 0) {
        snprintf(err, errlen, "cuda: a parameter table of %d tensors needs more than 2^31 blocks",
                 nt);
        return false;
    }
    if (nb == 0)
        return true;
    AmpcMtBlock *blocks = (AmpcMtBlock *)malloc((size_t)nb * sizeof *blocks);
    if (!blocks) {
        snprintf(err, errlen, "cuda: out of host memory for a table of %lld blocks", (long long)nb);
        return false;
    }
    ampc_mt_fill_blocks(host, nt, AMPC_MT_CHUNK, blocks);
    void *dt = NULL, *db = NULL;
    bool ok = CU_TRY(cudaMalloc(&dt, (size_t)nt * sizeof *host), err, errlen) &&
              CU_TRY(cudaMalloc(&db, (size_t)nb * sizeof *blocks), err, errlen) &&
              /* on the device's stream, which does not wait for the legacy
               * one (cudaStreamNonBlocking), and finished before the kernels
               * that read the tables are queued behind it */
              CU_TRY(cudaMemcpyAsync(dt, host, (size_t)nt * sizeof *host, cudaMemcpyHostToDevice,
                                     c->stream), err, errlen) &&
              CU_TRY(cudaMemcpyAsync(db, blocks, (size_t)nb * sizeof *blocks,
                                     cudaMemcpyHostToDevice, c->stream), err, errlen) &&
              CU_TRY(cudaStreamSynchronize(c->stream), err, errlen);
    free(blocks);
    if (!ok) {
        (void)cudaGetLastError();
        if (dt)
            CU_MUST(cudaFree(dt));
        if (db)
            CU_MUST(cudaFree(db));
        return false;
    }
    t->tensors = (const AmpcMtTensor *)dt;
    t->blocks = (const AmpcMtBlock *)db;
    t->nblocks = nb;
    return true;
}

/* ---- setup ------------------------------------------------------------------------------ */

static bool same_buffers(const CudaDevice *c, const RtModel *m, const RtCtx *ctx)
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

static bool cu_setup(RtDevice *d, const RtModel *m, const RtCtx *ctx, char *err, size_t errlen)
{
    CudaDevice *c = cu(d);
    if (c->m && same_buffers(c, m, ctx))
        return true;
    free(c->buf0);
    free(c->master0);
    c->m = NULL;
    c->opt_valid = 0;
    c->buf0 = (void **)calloc((size_t)m->nbuffers + 1, sizeof *c->buf0);
    c->master0 = (float **)calloc((size_t)m->nparams + 1, sizeof *c->master0);
    AmpcMtTensor *t = (AmpcMtTensor *)calloc((size_t)m->nparams + 1, sizeof *t);
    if (!c->buf0 || !c->master0 || !t) {
        free(t);
        snprintf(err, errlen, "cuda: out of host memory for the setup of model %s", m->name);
        return false;
    }
    memcpy(c->buf0, ctx->buf, (size_t)m->nbuffers * sizeof *c->buf0);
    if (ctx->master)
        memcpy(c->master0, ctx->master, (size_t)m->nparams * sizeof *c->master0);
    int nt = ampc_mt_grads_from_model(m, ctx->buf, t);
    bool ok = table_upload(c, &c->grads, t, nt, err, errlen);
    free(t);
    if (!ok)
        return false;
    c->m = m;
    c->ctx = ctx;
    return true;
}

/* ---- the finite flag -------------------------------------------------------------------- */

static void cu_check_grads(RtDevice *d)
{
    CudaDevice *c = cu(d);
    CU_MUST(ampc_cu_set_flag(c->stream, c->flag, 0));
    CU_MUST(ampc_cu_mt_finite(c->stream, c->grads.tensors, c->grads.blocks, c->grads.nblocks,
                              AMPC_MT_CHUNK, c->flag));
}

static void cu_check_finite(RtDevice *d, const void *p, size_t n, RtDType dt)
{
    CudaDevice *c = cu(d);
    CU_MUST(ampc_cu_set_flag(c->stream, c->flag, 0));
    CU_MUST(ampc_cu_finite(c->stream, p, n, (int)dt, c->flag));
}

static bool cu_read_flag(RtDevice *d)
{
    CudaDevice *c = cu(d);
    CU_MUST(cudaMemcpyAsync(c->flag_host, c->flag, sizeof *c->flag, cudaMemcpyDeviceToHost,
                            c->stream));
    CU_MUST(cudaStreamSynchronize(c->stream));
    return *c->flag_host == 0;
}

/* Only after a non-finite step with --check-numerics: a read-back per tensor. */
static int cu_first_nonfinite(RtDevice *d)
{
    CudaDevice *c = cu(d);
    if (!c->m)
        return -1;
    for (int i = 0; i < c->m->nparams; i++) {
        const RtParam *p = &c->m->params[i];
        if (p->grad < 0 || p->numel <= 0)
            continue;
        cu_check_finite(d, c->ctx->buf[p->grad], (size_t)p->numel, c->m->buffers[p->grad].dtype);
        if (!cu_read_flag(d))
            return i;
    }
    return -1;
}

static bool cu_ls_init(RtDevice *d, const RtDevLsInit *in, char *err, size_t errlen)
{
    CudaDevice *c = cu(d);
    if (!(in->batch > 0) || in->num_update < 0) {
        snprintf(err, errlen, "cuda: loss scale: batch %g, %lld updates before", in->batch,
                 (long long)in->num_update);
        return false;
    }
    /* the pinned copy may still feed an earlier copy */
    if (!CU_TRY(cudaStreamSynchronize(c->stream), err, errlen))
        return false;
    memset(c->ls_host, 0, sizeof *c->ls_host);
    c->ls_host->ls = in->s;
    c->ls_host->st.scale = in->s.scale;
    c->ls_host->st.num_update = in->num_update;
    c->ls_host->st.dynamic = in->dynamic;
    c->ls_host->st.step = (uint64_t)in->step;
    c->ls_host->inject = in->inject_inf;
    c->ls_host->inject_at = in->inject_inf_at;
    c->rule = in->rule;
    c->batch = in->batch;
    c->dynamic = in->dynamic;
    return CU_TRY(cudaMemcpyAsync(c->ls, c->ls_host, sizeof *c->ls, cudaMemcpyHostToDevice,
                                  c->stream), err, errlen) &&
           CU_TRY(cudaMemsetAsync(c->ring, 0, RING_BYTES, c->stream), err, errlen) &&
           CU_TRY(cudaStreamSynchronize(c->stream), err, errlen);
}

/* The loss head's kernel reads c->ls->st.scale on the device. */
static void cu_step_begin(RtDevice *d, bool inject_inf)
{
    CudaDevice *c = cu(d);
    CU_MUST(ampc_cu_step_begin(c->stream, c->ls, inject_inf ? 1 : 0));
}

static const RtStepState *cu_step_state(RtDevice *d) { return &cu(d)->ls->st; }

static RtCudaCtx *cu_kernel_ctx(RtDevice *d) { return cu(d)->kernels; }

/* The steps are built on the host (Adam's correction by the host's pow, as
 * the CPU's) into pinned memory and copied without waiting; the pinned
 * copy is rewritten only once the previous copy is done (the loop writes
 * after ls_read, which waited already). */
static void cu_lr_ahead(RtDevice *d, const RtOptConfig *oc, const float *lr, int64_t first, int n)
{
    CudaDevice *c = cu(d);
    n = n < 0 ? 0 : n > RT_DEV_LS_RING + 1 ? RT_DEV_LS_RING + 1 : n;
    CU_MUST(cudaEventSynchronize(c->lr_copied));
    RtOptConfig u = *oc;
    for (int i = 0; i < n; i++) {
        u.lr = lr[i];
        u.t = first + 1 + i;
        c->lr_host[i] = ampc_mt_step_from_config(&u);
        c->lr_host[i].batch = c->batch; /* the kernel forms rescale_grad from the step's scale */
    }
    /* the position rides in the pinned DevLs copy's two fields */
    CU_MUST(cudaMemcpyAsync(c->lr, c->lr_host, (size_t)n * sizeof *c->lr, cudaMemcpyHostToDevice,
                            c->stream));
    DevLs *h = c->ls_host;
    h->lr_first = first;
    h->lr_n = n;
    CU_MUST(cudaMemcpyAsync(&c->ls->lr_first, &h->lr_first, sizeof h->lr_first,
                            cudaMemcpyHostToDevice, c->stream));
    CU_MUST(cudaMemcpyAsync(&c->ls->lr_n, &h->lr_n, sizeof h->lr_n, cudaMemcpyHostToDevice,
                            c->stream));
    CU_MUST(cudaEventRecord(c->lr_copied, c->stream));
}

/* Without the host: the BatchNorm commit's kernels
 * (rt_cuda_batchnorm_update_moving) read the step's state and do nothing on
 * a step it skips. */
static void cu_moving_update(RtDevice *d, void (*fn)(RtCtx *), RtCtx *ctx)
{
    (void)d;
    if (fn)
        fn(ctx);
}

static void cu_optim_table(CudaDevice *c, float *const *state, float *const *state2,
                           const RtOptConfig *oc);

static void cu_train_update(RtDevice *d, float *const *state, float *const *state2,
                            const RtOptConfig *oc)
{
    CudaDevice *c = cu(d);
    if (!c->m)
        return;
    cu_optim_table(c, state, state2, oc);
    CU_MUST(ampc_cu_step_pick(c->stream, c->ls, c->lr, c->cur));
    /* dynamic: skipped on the check's flag; else the check fused, as optim_step */
    if (!c->dynamic)
        CU_MUST(ampc_cu_set_flag(c->stream, c->flag, 0));
    CU_MUST(ampc_cu_mt_optim(c->stream, c->opt.tensors, c->opt.blocks, c->opt.nblocks,
                             AMPC_MT_CHUNK, NULL, c->cur, c->dynamic ? c->flag : NULL,
                             c->dynamic ? NULL : c->flag, &c->ls->st.scale));
    CU_MUST(ampc_cu_step_count(c->stream, c->ls, c->flag));
}

static void cu_ls_update(RtDevice *d)
{
    CudaDevice *c = cu(d);
    if (c->dynamic)
        CU_MUST(ampc_cu_loss_scale(c->stream, &c->ls->ls, c->flag, c->rule, &c->ls->stats));
    CU_MUST(ampc_cu_step_ring(c->stream, c->ls, c->flag, c->ring, RT_DEV_LS_RING));
}

static void cu_ls_read(RtDevice *d, RtDevLsState *st, AmpcLossScaleStep *steps, int64_t from)
{
    CudaDevice *c = cu(d);
    CU_MUST(cudaMemcpyAsync(c->ls_host, c->ls, sizeof *c->ls, cudaMemcpyDeviceToHost, c->stream));
    CU_MUST(cudaMemcpyAsync(c->ring_host, c->ring, RING_BYTES, cudaMemcpyDeviceToHost,
                            c->stream));
    CU_MUST(cudaStreamSynchronize(c->stream));
    const DevLs *h = c->ls_host;
    st->s = h->ls;
    st->steps = h->steps;
    st->skipped = h->stats.skipped;
    st->nonfinite = h->nonfinite;
    st->num_update = h->st.num_update;
    int64_t lo = from > st->steps - RT_DEV_LS_RING ? from : st->steps - RT_DEV_LS_RING;
    for (int64_t k = lo < 0 ? 0 : lo; steps && k < st->steps; k++)
        steps[k - from] = c->ring_host[k % RT_DEV_LS_RING];
}

static void cu_set_flag(RtDevice *d, bool finite)
{
    CU_MUST(ampc_cu_set_flag(cu(d)->stream, cu(d)->flag, finite ? 0 : 1));
}

/* queued into pinned memory (host_alloc): complete once the host waits */
static void cu_to_host_async(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        CU_MUST(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cu(d)->stream));
}

/* ---- the optimizer ------------------------------------------------------------------------ */

/* The optimizer's table, built and uploaded when its choice of states changes. */
static void cu_optim_table(CudaDevice *c, float *const *state, float *const *state2,
                           const RtOptConfig *oc)
{
    int with_mom = oc->kind == RT_OPT_ADAM || oc->momentum != 0.0f;
    if (!c->opt_valid || c->opt_state != state || c->opt_state2 != state2 ||
        c->opt_kind != (int)oc->kind || c->opt_with_mom != with_mom) {
        AmpcMtTensor *t = (AmpcMtTensor *)calloc((size_t)c->m->nparams + 1, sizeof *t);
        char err[300];
        if (!t) {
            fprintf(stderr, "cuda: out of host memory for the optimizer's table\n");
            exit(1);
        }
        int nt = ampc_mt_optim_from_model(c->m, c->ctx->buf, c->ctx->master, state, state2, oc, t);
        bool ok = table_upload(c, &c->opt, t, nt, err, sizeof err);
        free(t);
        if (!ok) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
        c->opt_state = state;
        c->opt_state2 = state2;
        c->opt_kind = (int)oc->kind;
        c->opt_with_mom = with_mom;
        c->opt_valid = 1;
    }
}

static void cu_optim_step(RtDevice *d, float *const *state, float *const *state2,
                          const RtOptConfig *oc)
{
    CudaDevice *c = cu(d);
    if (!c->m)
        return;
    cu_optim_table(c, state, state2, oc);
    AmpcMtStep step = ampc_mt_step_from_config(oc);
    /* the update cannot be skipped here (the loop decided): the check is
     * fused into it, as optim.c's */
    CU_MUST(ampc_cu_set_flag(c->stream, c->flag, 0));
    CU_MUST(ampc_cu_mt_optim(c->stream, c->opt.tensors, c->opt.blocks, c->opt.nblocks,
                             AMPC_MT_CHUNK, &step, NULL, NULL, c->flag, NULL));
}

/* ---- ordering: a ring of CUDA events ------------------------------------------------------ */

static void cu_event_record(RtDevice *d, RtDevEvent *e)
{
    CudaDevice *c = cu(d);
    uint64_t s = ++c->seq;
    CU_MUST(cudaEventRecord(c->ev[s % NEVENTS], c->stream));
    e->seq = s;
}

/* A slot reused by a later record waits for that later point: longer, never
 * shorter. */
static void cu_event_wait(RtDevice *d, const RtDevEvent *e)
{
    if (e->seq)
        CU_MUST(cudaEventSynchronize(cu(d)->ev[e->seq % NEVENTS]));
}

static bool cu_event_done(RtDevice *d, const RtDevEvent *e)
{
    if (!e->seq)
        return true;
    cudaError_t r = cudaEventQuery(cu(d)->ev[e->seq % NEVENTS]);
    if (r == cudaErrorNotReady) {
        /* not an error, but the runtime may keep it as the thread's last
         * error, which the next launch check would then report */
        (void)cudaGetLastError();
        return false;
    }
    CU_MUST(r);
    return true;
}

static void cu_synchronize(RtDevice *d) { CU_MUST(cudaStreamSynchronize(cu(d)->stream)); }

/* ---- timing (--profile): events with timing, recorded between calls ------------------ */

static void cu_time_reset(RtDevice *d) { cu(d)->used_timing = 0; }

static bool cu_time_mark(RtDevice *d, RtDevTime *t)
{
    CudaDevice *c = cu(d);
    if (c->used_timing == c->ntiming) {
        int64_t n = c->ntiming ? 2 * c->ntiming : 256;
        if (n > (1 << 20))
            return false;
        cudaEvent_t *grown = (cudaEvent_t *)realloc(c->timing, (size_t)n * sizeof *grown);
        if (!grown)
            return false;
        c->timing = grown;
        for (; c->ntiming < n; c->ntiming++)
            CU_MUST(cudaEventCreate(&c->timing[c->ntiming]));
    }
    t->slot = c->used_timing++;
    t->host_s = 0;
    CU_MUST(cudaEventRecord(c->timing[t->slot], c->stream));
    return true;
}

static double cu_time_elapsed(RtDevice *d, const RtDevTime *a, const RtDevTime *b)
{
    CudaDevice *c = cu(d);
    float ms = 0;
    CU_MUST(cudaEventSynchronize(c->timing[b->slot]));
    CU_MUST(cudaEventElapsedTime(&ms, c->timing[a->slot], c->timing[b->slot]));
    return ms * 1e-3;
}

/* ---- collectives: one device (NCCL comes with several) ---------------------------------- */

static int cu_world_size(const RtDevice *d)
{
    (void)d;
    return 1;
}

static int cu_rank(const RtDevice *d)
{
    (void)d;
    return 0;
}

static bool check_bucket(const RtDevTensor *bucket, int n, const char *call, char *err,
                         size_t errlen)
{
    if (n < 0 || (n > 0 && !bucket)) {
        snprintf(err, errlen, "cuda: %s of %d tensors", call, n);
        return false;
    }
    for (int i = 0; i < n; i++)
        if ((!bucket[i].ptr && bucket[i].n) || (unsigned)bucket[i].dt > RT_BF16) {
            snprintf(err, errlen, "cuda: %s: tensor %d of the bucket has no memory or no dtype",
                     call, i);
            return false;
        }
    return true;
}

static bool cu_allreduce(RtDevice *d, const RtDevTensor *bucket, int n, RtReduceOp op, char *err,
                         size_t errlen)
{
    (void)d;
    if (op != RT_REDUCE_SUM && op != RT_REDUCE_MEAN) {
        snprintf(err, errlen, "cuda: all-reduce: unknown reduction %d", (int)op);
        return false;
    }
    return check_bucket(bucket, n, "all-reduce", err, errlen);
}

static bool cu_broadcast(RtDevice *d, const RtDevTensor *bucket, int n, int root, char *err,
                         size_t errlen)
{
    if (root < 0 || root >= cu_world_size(d)) {
        snprintf(err, errlen, "cuda: broadcast from device %d of %d", root, cu_world_size(d));
        return false;
    }
    return check_bucket(bucket, n, "broadcast", err, errlen);
}

/* ---- the step as one CUDA graph (--cuda-graph 1) ------------------------------------------ */

/* The emitted train step's kernels, queued on the device's stream (and so
 * captured with it). */
static void cu_launch(RtDevice *d, void (*fn)(RtCtx *), RtCtx *ctx)
{
    (void)d;
    if (fn)
        fn(ctx);
}

static void graph_drop(CudaDevice *c)
{
    if (c->graph_exec)
        (void)cudaGraphExecDestroy(c->graph_exec);
    if (c->graph)
        (void)cudaGraphDestroy(c->graph);
    c->graph_exec = NULL;
    c->graph = NULL;
}

/* Thread-local capture: a CUDA call another thread makes meanwhile (the NCCL
 * watchdog's polls, a data source's copies) is not the capture's and does
 * not invalidate it; every call of the step is on this thread and stream. */
static bool cu_graph_begin(RtDevice *d, char *err, size_t errlen)
{
    CudaDevice *c = cu(d);
    graph_drop(c);
    return CU_TRY(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), err,
                  errlen);
}

/* The capture ended, instantiated and launched once; on any failure nothing
 * of the step ran (the loop runs it eagerly) and the error is cleared. */
static bool cu_graph_end(RtDevice *d, char *err, size_t errlen)
{
    CudaDevice *c = cu(d);
    bool ok = CU_TRY(cudaStreamEndCapture(c->stream, &c->graph), err, errlen);
    if (ok && !c->graph) {
        snprintf(err, errlen, "cuda: the capture made no graph");
        ok = false;
    }
    ok = ok && CU_TRY(cudaGraphInstantiateWithFlags(&c->graph_exec, c->graph, 0), err, errlen) &&
         CU_TRY(cudaGraphLaunch(c->graph_exec, c->stream), err, errlen);
    if (!ok) {
        (void)cudaGetLastError();
        graph_drop(c);
    }
    return ok;
}

static bool cu_graph_replay(RtDevice *d, char *err, size_t errlen)
{
    CudaDevice *c = cu(d);
    if (!c->graph_exec) {
        snprintf(err, errlen, "cuda: graph_replay without a captured graph");
        return false;
    }
    return CU_TRY(cudaGraphLaunch(c->graph_exec, c->stream), err, errlen);
}

/* ---- open and close --------------------------------------------------------------------- */

static void step_free_into(CudaDevice *c, char *more, size_t morelen);

static void cu_close(RtDevice *d)
{
    CudaDevice *c = cu(d);
    if (c->stream)
        CU_MUST(cudaStreamSynchronize(c->stream)); /* nothing queued may still use a plan */
    graph_drop(c);
    rt_cuda_close(c->kernels); /* before the stream and the device they were made on */
    table_free(&c->grads);
    table_free(&c->opt);
    for (int i = 0; i < NEVENTS; i++)
        if (c->ev[i])
            CU_MUST(cudaEventDestroy(c->ev[i]));
    char more[300] = "";
    step_free_into(c, more, sizeof more);
    if (more[0]) {
        fprintf(stderr, "cuda: %s\n", more);
        exit(1);
    }
    if (c->flag_host)
        CU_MUST(cudaFreeHost(c->flag_host));
    for (int64_t i = 0; i < c->ntiming; i++)
        CU_MUST(cudaEventDestroy(c->timing[i]));
    free(c->timing);
    if (c->stream)
        CU_MUST(cudaStreamDestroy(c->stream));
    if (c->ingest_read)
        CU_MUST(cudaEventDestroy(c->ingest_read));
    if (c->copy)
        CU_MUST(cudaStreamDestroy(c->copy));
    free(c->buf0);
    free(c->master0);
    free(c);
}

/* A constant expression (no constructor at load: the table is read-only data) */
static constexpr RtDeviceOps make_ops(void)
{
    RtDeviceOps o{};
    o.name = "cuda";
    o.alloc = cu_alloc;
    o.free = cu_free;
    o.host_alloc = cu_host_alloc;
    o.host_free = cu_host_free;
    o.to_device = cu_to_device;
    o.to_host = cu_to_host;
    o.fill = cu_fill;
    o.synthetic_batch = cu_synthetic_batch;
    o.ingest = cu_ingest;
    o.setup = cu_setup;
    o.check_grads = cu_check_grads;
    o.check_finite = cu_check_finite;
    o.read_flag = cu_read_flag;
    o.first_nonfinite = cu_first_nonfinite;
    o.optim_step = cu_optim_step;
    o.ls_init = cu_ls_init;
    o.step_begin = cu_step_begin;
    o.step_state = cu_step_state;
    o.kernel_ctx = cu_kernel_ctx;
    o.lr_ahead = cu_lr_ahead;
    o.moving_update = cu_moving_update;
    o.train_update = cu_train_update;
    o.ls_update = cu_ls_update;
    o.ls_read = cu_ls_read;
    o.set_flag = cu_set_flag;
    o.to_host_async = cu_to_host_async;
    o.event_record = cu_event_record;
    o.event_wait = cu_event_wait;
    o.event_done = cu_event_done;
    o.synchronize = cu_synchronize;
    o.time_reset = cu_time_reset;
    o.time_mark = cu_time_mark;
    o.time_elapsed = cu_time_elapsed;
    o.world_size = cu_world_size;
    o.rank = cu_rank;
    o.allreduce = cu_allreduce;
    o.broadcast = cu_broadcast;
    o.launch = cu_launch;
    o.graph_begin = cu_graph_begin;
    o.graph_end = cu_graph_end;
    o.graph_replay = cu_graph_replay;
    o.close = cu_close;
    return o;
}

static constexpr RtDeviceOps cuda_ops = make_ops();

/* The step's state and what the step without the host keeps (device.h),
 * made with the device so that RtCtx.step_state is valid from the start:
 * scale 1, flag clear, no update yet until ls_init. */
static bool step_alloc(CudaDevice *c, char *err, size_t errlen)
{
    bool ok =
        CU_TRY(cudaMalloc((void **)&c->ls, sizeof *c->ls), err, errlen) &&
        CU_TRY(cudaHostAlloc((void **)&c->ls_host, sizeof *c->ls_host, cudaHostAllocDefault), err,
               errlen) &&
        CU_TRY(cudaMalloc((void **)&c->ring, RING_BYTES), err, errlen) &&
        CU_TRY(cudaHostAlloc((void **)&c->ring_host, RING_BYTES, cudaHostAllocDefault), err,
               errlen) &&
        CU_TRY(cudaMalloc((void **)&c->lr, (RT_DEV_LS_RING + 1) * sizeof *c->lr), err, errlen) &&
        CU_TRY(cudaHostAlloc((void **)&c->lr_host, (RT_DEV_LS_RING + 1) * sizeof *c->lr_host,
                             cudaHostAllocDefault), err, errlen) &&
        CU_TRY(cudaMalloc((void **)&c->cur, sizeof *c->cur), err, errlen) &&
        CU_TRY(cudaEventCreateWithFlags(&c->lr_copied, cudaEventDisableTiming), err, errlen);
    if (!ok)
        return false;
    c->flag = &c->ls->st.flag;
    memset(c->ls_host, 0, sizeof *c->ls_host);
    c->ls_host->ls.scale = 1.0f;
    c->ls_host->st.scale = 1.0f;
    return CU_TRY(cudaMemcpyAsync(c->ls, c->ls_host, sizeof *c->ls, cudaMemcpyHostToDevice,
                                  c->stream), err, errlen) &&
           CU_TRY(cudaMemsetAsync(c->ring, 0, RING_BYTES, c->stream), err, errlen) &&
           CU_TRY(cudaStreamSynchronize(c->stream), err, errlen);
}

/* what step_alloc made (some of it, after a failure); errors to more */
static void step_free_into(CudaDevice *c, char *more, size_t morelen)
{
    if (c->ls)
        CU_TRY(cudaFree(c->ls), more, morelen);
    if (c->ls_host)
        CU_TRY(cudaFreeHost(c->ls_host), more, morelen);
    if (c->ring)
        CU_TRY(cudaFree(c->ring), more, morelen);
    if (c->ring_host)
        CU_TRY(cudaFreeHost(c->ring_host), more, morelen);
    if (c->lr)
        CU_TRY(cudaFree(c->lr), more, morelen);
    if (c->lr_host)
        CU_TRY(cudaFreeHost(c->lr_host), more, morelen);
    if (c->cur)
        CU_TRY(cudaFree(c->cur), more, morelen);
    if (c->lr_copied)
        CU_TRY(cudaEventDestroy(c->lr_copied), more, morelen);
    c->ls = NULL, c->ls_host = NULL, c->flag = NULL;
}

extern "C" RtDevice *rt_device_cuda_open(int ordinal, char *err, size_t errlen)
{
    CudaDevice *c = (CudaDevice *)calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "cuda: out of host memory for the device");
        return NULL;
    }
    c->base.ops = &cuda_ops;
    c->ordinal = ordinal;
    bool ok = CU_TRY(cudaSetDevice(ordinal), err, errlen) &&
              CU_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), err, errlen) &&
              CU_TRY(cudaHostAlloc((void **)&c->flag_host, sizeof *c->flag_host,
                                   cudaHostAllocDefault), err, errlen) &&
              step_alloc(c, err, errlen);
    for (int i = 0; ok && i < NEVENTS; i++)
        ok = CU_TRY(cudaEventCreateWithFlags(&c->ev[i], cudaEventDisableTiming), err, errlen);
    if (!ok) {
        /* undo what was made; err keeps the first failure's message */
        char more[300];
        (void)cudaGetLastError();
        for (int i = 0; i < NEVENTS; i++)
            if (c->ev[i])
                CU_TRY(cudaEventDestroy(c->ev[i]), more, sizeof more);
        step_free_into(c, more, sizeof more);
        if (c->flag_host)
            CU_TRY(cudaFreeHost(c->flag_host), more, sizeof more);
        if (c->stream)
            CU_TRY(cudaStreamDestroy(c->stream), more, sizeof more);
        free(c);
        return NULL;
    }
    return &c->base;
}

/* the stream every call of the device runs on, for the kernels' libraries
 * (rt_cuda_open): runtime/cuda/program.c */
extern "C" AmpcStream rt_device_cuda_stream(RtDevice *d) { return cu(d)->stream; }

extern "C" void rt_device_cuda_adopt(RtDevice *d, RtCudaCtx *kernels)
{
    CudaDevice *c = cu(d);
    rt_cuda_close(c->kernels);
    c->kernels = kernels;
}
