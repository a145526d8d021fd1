/* mpi.c - the engine for several processes on the CPU (mpi_rt.h; docs/kvstore.md,
 * "Running on several processes").  Compiled with mpicc into ampcmpi.o and
 * linked only into a program built with `ampc --mpi`; its definitions replace
 * the weak ones of runtime/mpi_none.c.
 *
 * One process per rank, launched by mpirun.  The device of a rank is the CPU
 * device wrapped: every call is forwarded, except
 *   - allreduce: the gradients, in buckets of --mpi-bucket-mb MiB of fp32, in
 *     the order backward completes them (the reverse of the parameter table:
 *     the last layer's gradients first).  Each bucket is packed into fp32
 *     (16-bit gradients widened exactly), handed to MPI_Iallreduce(MPI_SUM) at
 *     once, so that packing the next bucket overlaps the reduction of the ones
 *     before, and written back (rounded to the gradient's dtype once) after
 *     all have completed.  The reduction runs after the train step, not
 *     during backward: the step is one emitted function, and its after-node
 *     hook names a node's first output only (a fused BatchNorm backward
 *     writes dgamma and dbeta as others), so the runtime cannot tell when a
 *     gradient is final.  With two ranks every element is one IEEE addition,
 *     a + b == b + a, so both ranks hold the same bits.
 *   - check_grads: the finite flag is reduced (MPI_MIN), so an overflow on one
 *     rank skips the step on every rank.
 *   - broadcast: MPI_Ibcast of the bytes, in chunks below INT_MAX.
 *   - world_size, rank.
 * The hang guard: every collective first posts an 8-byte "arrived" message
 * to each other rank and a receive from each; the requests are polled (never
 * a blocking MPI call) until --mpi-timeout seconds pass; then the rank prints
 * which ranks have not arrived at that collective and calls MPI_Abort, which
 * ends the job (mpirun kills a stopped rank too).  The arrival messages cost
 * 2 (P - 1) small messages per collective: fine for the tens of ranks this
 * engine is for.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../mpi_rt.h"
#include "../rt.h"

enum { TAG_ARRIVE = 7001, TAG_PING, TAG_PONG };

static bool g_started;
static int g_rank, g_world = 1;
static double g_timeout = 60;
static size_t g_bucket_elems = (size_t)1 << 20; /* 4 MiB of fp32 */
static int64_t g_step = -1;

typedef struct {
    RtDevice base; /* first */
    RtDevice *in;  /* the CPU device */
    bool have_flag, flag;
    float *stage;  /* the packed fp32 gradients */
    size_t stage_n;
    uint64_t seq;  /* collectives so far */
    int64_t *arrived;
    MPI_Request *req;
    int nreq_cap;
} MpiDev;

static MpiDev *md(RtDevice *d) { return (MpiDev *)d; }
static RtDevice *in(RtDevice *d) { return md(d)->in; }

bool rt_mpi_linked(void) { return true; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool rt_mpi_start(const RtMpiConfig *c, int *rank, int *world, char *err, size_t errlen)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        snprintf(err, errlen, "mpi: MPI_Init failed");
        return false;
    }
    g_started = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    g_timeout = c->timeout_s > 0 ? c->timeout_s : 60;
    double elems = c->bucket_mb * 1048576.0 / sizeof(float);
    g_bucket_elems = c->bucket_mb <= 0 ? SIZE_MAX : elems < 1 ? 1 : (size_t)elems;
    *rank = g_rank;
    *world = g_world;
    return true;
}

void rt_mpi_set_step(int64_t step) { g_step = step; }

int rt_mpi_finish(int rc)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return rc;
    if (rc == 0) {
        MPI_Finalize();
        return 0;
    }
    if (g_world > 1) {
        fprintf(stderr, "mpi: rank %d of %d: exiting with status %d: aborting the job\n", g_rank,
                g_world, rc);
        fflush(stderr);
    }
    MPI_Abort(MPI_COMM_WORLD, rc);
    return rc;
}

/* ---- the hang guard --------------------------------------------------------------- */

/* Room for n collective requests and the 2 (P - 1) arrival requests. */
static bool reserve(MpiDev *m, int n, char *err, size_t errlen)
{
    int need = n + 2 * g_world;
    if (need <= m->nreq_cap)
        return true;
    MPI_Request *r = realloc(m->req, sizeof *r * (size_t)need);
    if (!r) {
        snprintf(err, errlen, "mpi: out of memory for %d requests", need);
        return false;
    }
    m->req = r;
    m->nreq_cap = need;
    return true;
}

/* Posts this collective's arrival messages into req[0 .. 2 (P - 1)):
 * receives first (req[k] for the k-th other rank), then sends. */
static int arrive(MpiDev *m)
{
    m->seq++;
    int n = 0;
    for (int p = 0; p < g_world; p++)
        if (p != g_rank)
            MPI_Irecv(&m->arrived[p], 1, MPI_INT64_T, p, TAG_ARRIVE, MPI_COMM_WORLD, &m->req[n++]);
    for (int p = 0; p < g_world; p++)
        if (p != g_rank)
            MPI_Isend(&m->seq, 1, MPI_INT64_T, p, TAG_ARRIVE, MPI_COMM_WORLD, &m->req[n++]);
    return n;
}

/* A ping from a rank that gives up, answered from every rank's wait loop:
 * how it tells a rank that waits like itself from one that is stopped. */
static void answer_pings(void)
{
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_PING, MPI_COMM_WORLD, &flag, &st);
        if (!flag)
            return;
        int64_t v;
        MPI_Recv(&v, 1, MPI_INT64_T, st.MPI_SOURCE, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Request r;
        MPI_Isend(&v, 1, MPI_INT64_T, st.MPI_SOURCE, TAG_PONG, MPI_COMM_WORLD, &r);
        MPI_Request_free(&r); /* a buffered 8 bytes: nothing to wait for */
    }
}

/* Every rank arrived but the collective does not complete: one stopped
 * inside it.  Pings each other rank and names those that do not answer
 * within min(--mpi-timeout, 5 s). */
static int silent_ranks(char *names, size_t cap)
{
    int n = g_world - 1, missing = 0;
    MPI_Request *r = calloc((size_t)n * 2 + 1, sizeof *r);
    int64_t *pong = calloc((size_t)n + 1, sizeof *pong), ping = 1;
    if (!r || !pong) {
        free(r);
        free(pong);
        return 0;
    }
    for (int p = 0, k = 0; p < g_world; p++)
        if (p != g_rank) {
            MPI_Irecv(&pong[k], 1, MPI_INT64_T, p, TAG_PONG, MPI_COMM_WORLD, &r[k]);
            MPI_Isend(&ping, 1, MPI_INT64_T, p, TAG_PING, MPI_COMM_WORLD, &r[n + k]);
            k++;
        }
    double deadline = now_s() + (g_timeout < 5 ? g_timeout : 5);
    int done = 0;
    while (!done && now_s() < deadline) {
        answer_pings();
        MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    size_t at = 0;
    for (int p = 0, k = 0; p < g_world; p++) {
        if (p == g_rank)
            continue;
        int got = 0;
        MPI_Test(&r[k++], &got, MPI_STATUS_IGNORE);
        if (!got && at < cap - 16) {
            at += (size_t)snprintf(names + at, cap - at, "%s%d", missing ? ", " : "", p);
            missing++;
        }
    }
    free(r); /* the job is aborted next: the pending requests go with it */
    free(pong);
    return missing;
}

/* Aborts the job naming the ranks whose arrival for this collective has
 * not come (their receive is still pending), or, when all arrived, those
 * that do not answer a ping. */
static void give_up(MpiDev *m, const char *what)
{
    char names[512] = "";
    size_t at = 0;
    int k = 0, missing = 0;
    for (int p = 0; p < g_world; p++) {
        if (p == g_rank)
            continue;
        int done = 0;
        MPI_Test(&m->req[k++], &done, MPI_STATUS_IGNORE);
        if (!done && at < sizeof names - 16) {
            at += (size_t)snprintf(names + at, sizeof names - at, "%s%d", missing ? ", " : "", p);
            missing++;
        }
    }
    if (missing)
        fprintf(stderr, "mpi: rank %d: error: rank%s %s did not arrive at the %s of step %lld "
                "within --mpi-timeout=%g s (stopped, hung or dead): aborting the job\n", g_rank,
                missing > 1 ? "s" : "", names, what, (long long)g_step, g_timeout);
    else if ((missing = silent_ranks(names, sizeof names)) > 0)
        fprintf(stderr, "mpi: rank %d: error: rank%s %s did not arrive at the end of the %s of "
                "step %lld within --mpi-timeout=%g s and do%s not answer (stopped or hung): "
                "aborting the job\n", g_rank, missing > 1 ? "s" : "", names, what,
                (long long)g_step, g_timeout, missing > 1 ? "" : "es");
    else
        fprintf(stderr, "mpi: rank %d: error: the %s of step %lld did not complete within "
                "--mpi-timeout=%g s though every rank arrived and answers: aborting the job\n",
                g_rank, what, (long long)g_step, g_timeout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3); /* MPI_Abort does not return; in case it does */
}

/* Polls the n requests (arrivals included) until all complete or the
 * deadline passes; sleeps between polls (up to 1 ms) so that a waiting rank
 * leaves the cores to the others. */
static void wait_all(MpiDev *m, int n, const char *what)
{
    double deadline = now_s() + g_timeout;
    long nap = 1000; /* ns */
    for (;;) {
        int done = 0;
        MPI_Testall(n, m->req, &done, MPI_STATUSES_IGNORE);
        if (done)
            break;
        if (now_s() > deadline)
            give_up(m, what);
        if (g_world > 1)
            answer_pings(); /* a rank that gives up asks who is alive */
        struct timespec ts = {0, nap};
        nanosleep(&ts, NULL);
        nap = nap < 1000000 ? nap * 2 : 1000000;
    }
    for (int p = 0; p < g_world; p++)
        if (p != g_rank && m->arrived[p] != (int64_t)m->seq) {
            fprintf(stderr, "mpi: rank %d: error: rank %d is at collective %lld, this rank at "
                    "%llu (the ranks run different steps): aborting the job\n", g_rank, p,
                    (long long)m->arrived[p], (unsigned long long)m->seq);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
}

/* ---- the collectives -------------------------------------------------------------- */

static bool check_bucket(const RtDevTensor *b, int n, const char *call, char *err, size_t errlen)
{
    if (n < 0 || (n > 0 && !b)) {
        snprintf(err, errlen, "mpi: %s of %d tensors", call, n);
        return false;
    }
    for (int i = 0; i < n; i++)
        if ((!b[i].ptr && b[i].n) || (unsigned)b[i].dt > RT_BF16) {
            snprintf(err, errlen, "mpi: %s: tensor %d of the bucket has no memory or no dtype",
                     call, i);
            return false;
        }
    return true;
}

/* Elements [lo, hi) of the concatenation of the tensors in backward order
 * (the last tensor first) to or from dst/src in fp32. */
static void pack(const RtDevTensor *b, int n, size_t lo, size_t hi, float *dst)
{
    size_t at = 0;
    for (int i = n - 1; i >= 0 && at < hi; i--) {
        size_t s = at, e = at + b[i].n;
        at = e;
        if (e <= lo)
            continue;
        size_t from = s < lo ? lo - s : 0, to = (e < hi ? e : hi) - s;
        rt_to_f32(dst + (s + from - lo), (const char *)b[i].ptr + from * rt_dtype_size(b[i].dt),
                  to - from, b[i].dt);
    }
}

static void unpack(const RtDevTensor *b, int n, const float *src, size_t total, float scale)
{
    size_t at = total;
    for (int i = 0; i < n; i++) {
        at -= b[i].n;
        const float *s = src + at;
        if (b[i].dt == RT_F32) {
            float *d = b[i].ptr;
            for (size_t j = 0; j < b[i].n; j++)
                d[j] = s[j] * scale;
        } else if (scale == 1.0f) {
            rt_from_f32(b[i].ptr, s, b[i].n, b[i].dt);
        } else {
            enum { CH = 1024 };
            float tmp[CH];
            for (size_t j = 0; j < b[i].n; j += CH) {
                size_t k = b[i].n - j < CH ? b[i].n - j : CH;
                for (size_t q = 0; q < k; q++)
                    tmp[q] = s[j + q] * scale;
                rt_from_f32((char *)b[i].ptr + j * rt_dtype_size(b[i].dt), tmp, k, b[i].dt);
            }
        }
    }
}

static bool m_allreduce(RtDevice *d, const RtDevTensor *b, int n, RtReduceOp op, char *err,
                        size_t errlen)
{
    MpiDev *m = md(d);
    if (op != RT_REDUCE_SUM && op != RT_REDUCE_MEAN) {
        snprintf(err, errlen, "mpi: all-reduce: unknown reduction %d", (int)op);
        return false;
    }
    if (!check_bucket(b, n, "all-reduce", err, errlen))
        return false;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (b[i].n > SIZE_MAX / sizeof(float) - total) {
            snprintf(err, errlen, "mpi: all-reduce: the gradients overflow the size of memory");
            return false;
        }
        total += b[i].n;
    }
    if (total > m->stage_n) {
        free(m->stage);
        m->stage_n = 0;
        if (!(m->stage = malloc(total * sizeof(float)))) {
            snprintf(err, errlen, "mpi: out of memory for %zu fp32 gradient values", total);
            return false;
        }
        m->stage_n = total;
    }
    /* buckets of at most cap elements (and of an int's count) */
    size_t cap = g_bucket_elems < (size_t)INT_MAX ? g_bucket_elems : (size_t)INT_MAX;
    size_t nb = total ? (total + cap - 1) / cap : 0;
    if (nb > (size_t)INT_MAX / 2 || !reserve(m, (int)nb, err, errlen))
        return false;
    int nr = arrive(m);
    for (size_t k = 0; k < nb; k++) {
        size_t lo = k * cap, hi = total - lo < cap ? total : lo + cap;
        pack(b, n, lo, hi, m->stage + lo);
        MPI_Iallreduce(MPI_IN_PLACE, m->stage + lo, (int)(hi - lo), MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD, &m->req[nr++]);
    }
    wait_all(m, nr, "gradient all-reduce");
    unpack(b, n, m->stage, total, op == RT_REDUCE_MEAN ? 1.0f / (float)g_world : 1.0f);
    return true;
}

static bool m_broadcast(RtDevice *d, const RtDevTensor *b, int n, int root, char *err,
                        size_t errlen)
{
    MpiDev *m = md(d);
    if (root < 0 || root >= g_world) {
        snprintf(err, errlen, "mpi: broadcast from rank %d of %d", root, g_world);
        return false;
    }
    if (!check_bucket(b, n, "broadcast", err, errlen))
        return false;
    enum { CHUNK = 1 << 30 };
    size_t nmsg = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = b[i].n * rt_dtype_size(b[i].dt);
        nmsg += (bytes + CHUNK - 1) / CHUNK;
    }
    if (nmsg > (size_t)INT_MAX / 2 || !reserve(m, (int)nmsg, err, errlen))
        return false;
    int nr = arrive(m);
    for (int i = 0; i < n; i++) {
        size_t bytes = b[i].n * rt_dtype_size(b[i].dt);
        for (size_t at = 0; at < bytes; at += CHUNK) {
            int k = (int)(bytes - at < CHUNK ? bytes - at : CHUNK);
            MPI_Ibcast((char *)b[i].ptr + at, k, MPI_BYTE, root, MPI_COMM_WORLD, &m->req[nr++]);
        }
    }
    wait_all(m, nr, "parameter broadcast");
    return true;
}

/* The local check, then the flag of every rank: finite only when finite
 * everywhere. */
static void m_check_grads(RtDevice *d)
{
    MpiDev *m = md(d);
    in(d)->ops->check_grads(in(d));
    int v = in(d)->ops->read_flag(in(d)) ? 1 : 0;
    char err[128];
    if (!reserve(m, 1, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int nr = arrive(m);
    MPI_Iallreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &m->req[nr++]);
    wait_all(m, nr, "finite-flag all-reduce");
    m->flag = v != 0;
    m->have_flag = true;
    /* the device's own flag too: its update, BatchNorm commit and loss
     * scale (device.h) skip on every rank or on none */
    in(d)->ops->set_flag(in(d), m->flag);
}

static bool m_read_flag(RtDevice *d)
{
    return md(d)->have_flag ? md(d)->flag : in(d)->ops->read_flag(in(d));
}

static void m_check_finite(RtDevice *d, const void *p, size_t n, RtDType dt)
{
    md(d)->have_flag = false;
    in(d)->ops->check_finite(in(d), p, n, dt);
}

static void m_optim_step(RtDevice *d, float *const *state, float *const *state2,
                         const struct RtOptConfig *c)
{
    md(d)->have_flag = false;
    in(d)->ops->optim_step(in(d), state, state2, c);
}

/* The step without the host (device.h): the inner device's, the flag
 * check_grads reduced already in it. */
static bool m_ls_init(RtDevice *d, const RtDevLsInit *c, char *err, size_t errlen)
{
    return in(d)->ops->ls_init(in(d), c, err, errlen);
}
static void m_step_begin(RtDevice *d, RtCtx *ctx, bool inject_inf)
{
    in(d)->ops->step_begin(in(d), ctx, inject_inf);
}
static const float *m_loss_scale_dev(RtDevice *d) { return in(d)->ops->loss_scale_dev(in(d)); }
static void m_lr_ahead(RtDevice *d, const struct RtOptConfig *oc, const float *lr, int64_t first,
                       int n)
{
    in(d)->ops->lr_ahead(in(d), oc, lr, first, n);
}
static void m_moving_update(RtDevice *d, void (*fn)(RtCtx *), RtCtx *ctx)
{
    in(d)->ops->moving_update(in(d), fn, ctx);
}
static void m_train_update(RtDevice *d, float *const *state, float *const *state2,
                           const struct RtOptConfig *c)
{
    md(d)->have_flag = false;
    in(d)->ops->train_update(in(d), state, state2, c);
}
static void m_ls_update(RtDevice *d) { in(d)->ops->ls_update(in(d)); }
static void m_ls_read(RtDevice *d, RtDevLsState *st, uint8_t *finite, int64_t from)
{
    in(d)->ops->ls_read(in(d), st, finite, from);
}
static void m_set_flag(RtDevice *d, bool finite)
{
    md(d)->have_flag = false;
    in(d)->ops->set_flag(in(d), finite);
}
static void m_to_host_async(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    in(d)->ops->to_host_async(in(d), dst, src, bytes);
}

static int m_world_size(const RtDevice *d)
{
    (void)d;
    return g_world;
}

static int m_rank(const RtDevice *d)
{
    (void)d;
    return g_rank;
}

/* ---- forwarded to the CPU device ------------------------------------------------- */

static void *m_alloc(RtDevice *d, size_t bytes, const char *what, char *err, size_t errlen)
{
    return in(d)->ops->alloc(in(d), bytes, what, err, errlen);
}
static void m_free(RtDevice *d, void *p) { in(d)->ops->free(in(d), p); }
static void *m_host_alloc(RtDevice *d, size_t bytes, const char *what, char *err, size_t errlen)
{
    return in(d)->ops->host_alloc(in(d), bytes, what, err, errlen);
}
static void m_host_free(RtDevice *d, void *p) { in(d)->ops->host_free(in(d), p); }
static void m_to_device(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    in(d)->ops->to_device(in(d), dst, src, bytes);
}
static void m_to_host(RtDevice *d, void *dst, const void *src, size_t bytes)
{
    in(d)->ops->to_host(in(d), dst, src, bytes);
}
static void m_fill(RtDevice *d, void *dst, RtDType dt, size_t n, float value)
{
    in(d)->ops->fill(in(d), dst, dt, n, value);
}
static bool m_setup(RtDevice *d, const RtModel *mo, const RtCtx *ctx, char *err, size_t errlen)
{
    return in(d)->ops->setup(in(d), mo, ctx, err, errlen);
}
static int m_first_nonfinite(RtDevice *d) { return in(d)->ops->first_nonfinite(in(d)); }
static void m_event_record(RtDevice *d, RtDevEvent *e) { in(d)->ops->event_record(in(d), e); }
static void m_event_wait(RtDevice *d, const RtDevEvent *e) { in(d)->ops->event_wait(in(d), e); }
static bool m_event_done(RtDevice *d, const RtDevEvent *e)
{
    return in(d)->ops->event_done(in(d), e);
}
static void m_synchronize(RtDevice *d) { in(d)->ops->synchronize(in(d)); }

static void m_close(RtDevice *d)
{
    MpiDev *m = md(d);
    rt_device_close(m->in);
    free(m->stage);
    free(m->arrived);
    free(m->req);
    free(m);
}

static const RtDeviceOps mpi_ops = {
    .name = "cpu+mpi",
    .alloc = m_alloc,
    .free = m_free,
    .host_alloc = m_host_alloc,
    .host_free = m_host_free,
    .to_device = m_to_device,
    .to_host = m_to_host,
    .fill = m_fill,
    .setup = m_setup,
    .check_grads = m_check_grads,
    .check_finite = m_check_finite,
    .read_flag = m_read_flag,
    .first_nonfinite = m_first_nonfinite,
    .optim_step = m_optim_step,
    .ls_init = m_ls_init,
    .step_begin = m_step_begin,
    .loss_scale_dev = m_loss_scale_dev,
    .lr_ahead = m_lr_ahead,
    .moving_update = m_moving_update,
    .train_update = m_train_update,
    .ls_update = m_ls_update,
    .ls_read = m_ls_read,
    .set_flag = m_set_flag,
    .to_host_async = m_to_host_async,
    .event_record = m_event_record,
    .event_wait = m_event_wait,
    .event_done = m_event_done,
    .synchronize = m_synchronize,
    .world_size = m_world_size,
    .rank = m_rank,
    .allreduce = m_allreduce,
    .broadcast = m_broadcast,
    .close = m_close,
};

RtDevice *rt_mpi_wrap(RtDevice *inner, char *err, size_t errlen)
{
    if (!g_started || !inner)
        return inner;
    /* the collectives read and write the buffers through host pointers */
    if (strcmp(inner->ops->name, "cpu") != 0) {
        snprintf(err, errlen, "mpi: the MPI engine runs on the CPU device, not '%s'",
                 inner->ops->name);
        rt_device_close(inner);
        return NULL;
    }
    MpiDev *m = calloc(1, sizeof *m);
    int64_t *arrived = calloc((size_t)g_world, sizeof *arrived);
    if (!m || !arrived) {
        free(m);
        free(arrived);
        snprintf(err, errlen, "mpi: out of memory for the device");
        rt_device_close(inner);
        return NULL;
    }
    m->base.ops = &mpi_ops;
    m->in = inner;
    m->arrived = arrived;
    return &m->base;
}
