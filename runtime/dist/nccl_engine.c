/* nccl_engine.c - the NCCL engine's host logic (coll.h; docs/kvstore.md, "The NCCL
 * engine").  Written against device.h and the transport table only: in a
 * CUDA program the transport is NCCL (runtime/cuda/nccl_transport.c), in make unit
 * the fake (nccl_fake.c, threads as ranks) around the CPU device.
 *
 * The device of a rank forwards to its inner device (the GPU's), except:
 *   - the gradients: the emitted train step calls RtCtx.grad_ready(k) right
 *     after the call that completes parameter k's gradient.  There the
 *     engine counts it into its bucket, and a complete bucket is launched:
 *     the comm stream waits for an event of the compute stream (the kernel
 *     that completed the gradient is before it), then one NCCL group of an
 *     in-place ncclAllReduce(sum) per gradient, in the gradient's own dtype,
 *     on the comm stream, overlapping the rest of backward.  Buckets launch
 *     in the same order on every rank (NCCL requires it): the program's
 *     (the kvstore pass's, RtModel.kv_*) in bucket order, each once all its
 *     gradients are final; else the size rule cuts them in the order the
 *     gradients become final, a bucket closing once it holds
 *     RtNcclConfig.bucket_mb MiB.  The trainer's all-reduce after the step
 *     flushes the open bucket (and announces a gradient the step did not),
 *     then makes the compute stream wait for the comm stream, so that the
 *     finite check and the update read the sums; the host never waits.
 *   - check_grads: the inner check, then the flag reduced in place in the
 *     device's step state (max of 0/1 over the ranks, an int32 all-reduce
 *     on the compute stream), so an overflow on one rank skips the step and
 *     backs off the scale on every rank.  The host reads nothing (before
 *     issue 26 it read the flag and the maximum back: two waits per step
 *     under a dynamic scale).
 *   - train_update: a step whose buckets were not waited for is finished
 *     first (no update before its reductions), then the inner device's own
 *     fused update runs, the same on every rank on the same sums.
 *   - broadcast: one group of ncclBroadcast on the compute stream.
 * The wire: each gradient in its dtype.  NCCL sums fp16/bf16 in fp32 per
 * addition and rounds each partial sum to the dtype (a ring of D ranks
 * rounds D - 1 times); for two ranks that is the MPI engine's fp32 sum
 * rounded once, bit for bit.  An overflow becomes inf on every rank (NCCL
 * hands every rank the same result), which the reduced flag skips.
 * The deadline, off the host's path (issue 26): the step's end hands the
 * events recorded after each bucket's group (and check_grads the event
 * after the flag's all-reduce) to a watchdog thread, one per engine, and
 * returns; the device orders the update after the reductions (the compute
 * stream waits for the comm stream).  The watchdog polls the oldest step's
 * events and the comm's asynchronous error, sleeping between polls, for at
 * most the run's --mpi-timeout from the hand-over.  A reduction still not
 * done then (a rank stopped, hung or dead) or an asynchronous error aborts
 * the comm (ncclCommAbort) and ends the job with "nccl: rank R: step S: the
 * all-reduce of bucket B (of N) did not complete within T s (a rank stalled
 * or died)" (rt_mpi_finish(1): MPI_Abort ends every rank).  The events of
 * WATCH_SLOTS steps are in flight at once; a step whose slot is still
 * watched waits for it (counted: RtNcclStats.host_waits; never in the
 * steady state, where the device is less than a few steps behind).  Closing
 * the device waits for the watched steps.  A broadcast and the start-up
 * check (once per run) still poll on the host, within the same deadline.
 * One mutex orders the host's collective calls and the watchdog's polls and
 * abort (an aborted comm is gone).
 * A failing call is reported as "nccl: rank R of W: CALL failed at
 * FILE:LINE: NCCL's string (error N)"; one inside grad_ready (which cannot
 * return an error) is kept and returned by the trainer's all-reduce, and no
 * further bucket is launched.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll.h"
#include "fwd.h"
#include "mpi_rt.h"
#include "rt.h"

enum { WATCH_SLOTS = 4 }; /* steps whose reductions the watchdog holds at once */

/* What the watchdog waits for: events of one step, each done in order */
typedef struct {
    bool active;
    long long step;
    void **ev;
    int n, done;
    bool flag; /* the finite flag's all-reduce (else the buckets') */
    double deadline;
} Watch;

typedef struct {
    RtFwd f; /* first */
    RtDeviceOps ops;
    const RtCollOps *t;
    RtCollComm *comm;
    int rank, world;
    RtNcclConfig cfg;
    void *cstream, *kstream; /* compute (the inner device's), comm (ours) */
    const RtModel *m;
    RtCtx *ctx;
    /* the gradients, by parameter */
    int np, ng;
    bool *has, *ready;
    RtDevTensor *g;
    /* the program's buckets */
    bool table;
    int nb;            /* table: buckets */
    int *bucket_of, *left, *size, *members; /* members: table order, bucket by bucket */
    int *first;        /* first[b]: bucket b's start in members */
    int next;          /* table: the next bucket to launch */
    /* this step */
    int *order, nready; /* final gradients, in the order they came */
    int open_from;      /* size rule: the open bucket is order[open_from .. nready) */
    size_t open_bytes, cap_bytes;
    int *launch, nlaunch, *lstart, nlb; /* launched: params in order, buckets' starts */
    int early;
    bool in_finish, pending;
    /* the last finished step */
    int *last, *last_start, last_nb, last_early;
    int64_t steps;
    /* ev[s * nev + b]: recorded on the comm stream after bucket b's group of a
     * step in watch slot s; nev (np + 1) per slot */
    void **ev;
    int nev;
    void *fev[WATCH_SLOTS]; /* after the finite flag's all-reduce, per slot (compute stream) */
    bool failed;
    char err[512];
    /* the watchdog (above): w[kind * WATCH_SLOTS + slot], kind 0 the buckets, 1 the flag */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t watchdog;
    bool watching, stop;
    Watch w[2 * WATCH_SLOTS];
    int64_t host_waits;
} NcclDev;

static NcclDev *nd(RtDevice *d) { return (NcclDev *)d; }

/* ---- errors ----------------------------------------------------------------------- */

static bool coll_ok(NcclDev *m, int rc, const char *call, const char *file, int line)
{
    if (rc == 0)
        return true;
    if (!m->failed)
        snprintf(m->err, sizeof m->err, "nccl: rank %d of %d: %s failed at %s:%d: %s (error %d)",
                 m->rank, m->world, call, file, line, m->t->error_string(m->t->self, call, rc),
                 rc);
    m->failed = true;
    return false;
}
#define COLL(m, call, name) coll_ok((m), (call), (name), __FILE__, __LINE__)

static bool boot_ok(const RtCollOps *t, int rc, int rank, const char *call, const char *file,
                    int line, char *err, size_t errlen)
{
    if (rc == 0)
        return true;
    snprintf(err, errlen, "nccl: rank %d: %s failed at %s:%d: %s (error %d)", rank, call, file,
             line, t->error_string(t->self, call, rc), rc);
    return false;
}
#define BOOT(t, call, rank, name, err, errlen) \
    boot_ok((t), (call), (rank), (name), __FILE__, __LINE__, (err), (errlen))

/* ---- the deadline ------------------------------------------------------------------ */

static void end_job_default(const char *msg)
{
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
    exit(rt_mpi_finish(1)); /* MPI_Abort: the other ranks end too */
}

static void (*_Atomic g_end_job)(const char *msg) = end_job_default;

void rt_nccl_set_end_job(void (*end_job)(const char *msg))
{
    g_end_job = end_job ? end_job : end_job_default;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The trainer's step (rt_mpi_set_step), else the engine's count. */
static long long step_no(const NcclDev *m)
{
    int64_t s = rt_mpi_step();
    return s >= 0 ? (long long)s : (long long)m->steps;
}

/* Under m->mu: the comm is gone: abort it and keep why (the caller ends
 * the job once it has let go of the lock: end_job). */
static void give_up(NcclDev *m, long long step, const char *what, const char *why)
{
    if (m->comm)
        m->t->comm_abort(m->t->self, m->comm);
    m->comm = NULL;
    snprintf(m->err, sizeof m->err, "nccl: rank %d: step %lld: %s %s", m->rank, step, what, why);
    m->failed = true;
}

/* The job ends with m's message (a test's hook returns: the engine has
 * failed then, and launches nothing more).  m->err no longer changes once
 * failed: read without the lock. */
static void end_job(NcclDev *m) { g_end_job(m->err); }

static double limit_s(const NcclDev *m) { return m->cfg.timeout_s > 0 ? m->cfg.timeout_s : 60; }

/* One poll of `obj` (an event, else a stream), under m->mu: 1 done, 0 not
 * yet, -1 failed (the comm's asynchronous error given up: *gave set; or a
 * failed query). */
static int poll_once(NcclDev *m, bool event, void *obj, long long step, const char *what,
                     bool *gave)
{
    if (m->failed || !m->comm)
        return -1;
    const RtCollOps *t = m->t;
    int async = 0;
    if (!COLL(m, t->comm_async_error(t->self, m->comm, &async), "ncclCommGetAsyncError"))
        return -1;
    if (async != 0 && async != 7 /* ncclInProgress: a non-blocking comm's */) {
        char why[256];
        snprintf(why, sizeof why,
                 "failed: NCCL reported an asynchronous error: %s (error "
                 "%d; a rank stalled or died)",
                 t->error_string(t->self, "ncclAllReduce", async), async);
        give_up(m, step, what, why);
        *gave = true;
        return -1;
    }
    int rc = event ? t->event_query(t->self, obj) : t->stream_query(t->self, obj);
    if (rc == 0)
        return 1;
    if (rc != RT_COLL_PENDING)
        return COLL(m, rc, event ? "cudaEventQuery" : "cudaStreamQuery") ? 1 : -1;
    return 0;
}

/* A deadline passed: given up, *gave set */
static void too_late(NcclDev *m, long long step, const char *what, bool *gave)
{
    char why[128];
    snprintf(why, sizeof why, "did not complete within %g s (a rank stalled or died)", limit_s(m));
    give_up(m, step, what, why);
    *gave = true;
}

static void nap(long *ns)
{
    struct timespec ts = {0, *ns};
    nanosleep(&ts, NULL);
    *ns = *ns < 1000000 ? *ns * 2 : 1000000;
}

/* The host polls `obj` until its work is done, the comm reports an
 * asynchronous error or the deadline passes (then the job ends).  Sleeps
 * 1 us doubling to 1 ms between polls, so that a waiting rank leaves the
 * CPU to the others.  Only where the run needs the result on the host
 * (a broadcast, the start-up check); a step's reductions are the
 * watchdog's. */
static bool wait_until(NcclDev *m, bool event, void *obj, double deadline, const char *what)
{
    long ns = 1000;
    for (;;) {
        bool gave = false;
        pthread_mutex_lock(&m->mu);
        long long step = step_no(m);
        int r = poll_once(m, event, obj, step, what, &gave);
        if (r == 0 && now_s() > deadline)
            too_late(m, step, what, &gave), r = -1;
        pthread_mutex_unlock(&m->mu);
        if (gave)
            end_job(m);
        if (r != 0)
            return r > 0;
        nap(&ns);
    }
}

/* The work queued on `stream` so far, within the deadline. */
static bool wait_done(NcclDev *m, void *stream, const char *what)
{
    return wait_until(m, false, stream, now_s() + limit_s(m), what);
}

/* ---- the watchdog -------------------------------------------------------------------- */

/* the watched step furthest behind (the earliest deadline), or NULL */
static Watch *oldest(NcclDev *m)
{
    Watch *o = NULL;
    for (int i = 0; i < 2 * WATCH_SLOTS; i++)
        if (m->w[i].active && (!o || m->w[i].deadline < o->deadline))
            o = &m->w[i];
    return o;
}

static void watch_what(const Watch *w, char *what, size_t len)
{
    if (w->flag)
        snprintf(what, len, "the all-reduce of the finite flag");
    else
        snprintf(what, len, "the all-reduce of bucket %d (of %d)", w->done, w->n);
}

/* Polls the oldest watched step's events (under m->mu): true when it has
 * made progress or ended (no nap before the next poll) */
static bool watch_step(NcclDev *m, Watch *w, bool *gave)
{
    char what[96];
    int r = 1;
    while (w->done < w->n) {
        watch_what(w, what, sizeof what);
        if ((r = poll_once(m, true, w->ev[w->done], w->step, what, gave)) != 1)
            break;
        w->done++;
    }
    if (w->done == w->n) {
        w->active = false;
        return true;
    }
    if (r == 0 && now_s() > w->deadline)
        too_late(m, w->step, what, gave);
    return m->failed;
}

static void *watchdog_main(void *arg)
{
    NcclDev *m = arg;
    long ns = 1000;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        Watch *w = oldest(m);
        if (!w) {
            if (m->stop)
                break;
            pthread_cond_wait(&m->cv, &m->mu);
            ns = 1000;
            continue;
        }
        bool gave = false;
        bool moved = watch_step(m, w, &gave);
        if (m->failed) /* nothing more completes: every step let go */
            for (int i = 0; i < 2 * WATCH_SLOTS; i++)
                m->w[i].active = false;
        if (moved || m->failed) {
            pthread_cond_broadcast(&m->cv);
            ns = 1000;
        }
        pthread_mutex_unlock(&m->mu);
        if (gave)
            end_job(m);
        else if (!moved && !m->failed)
            nap(&ns);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* Under m->mu: waits until watch slot i is free (its step confirmed, or the
 * engine failed), counting a wait.  Its events are queried first (without
 * blocking): the watchdog may simply not have run since they completed. */
static void slot_free(NcclDev *m, int i)
{
    Watch *w = &m->w[i];
    while (w->active && !m->failed && w->done < w->n &&
           m->t->event_query(m->t->self, w->ev[w->done]) == 0)
        w->done++;
    if (w->active && w->done == w->n)
        w->active = false;
    if (m->w[i].active)
        m->host_waits++;
    while (m->w[i].active && !m->failed)
        pthread_cond_wait(&m->cv, &m->mu);
}

/* Under m->mu: the watchdog takes over n events of this step */
static void watch(NcclDev *m, int i, void **ev, int n, bool flag)
{
    m->w[i] = (Watch){true, step_no(m), ev, n, 0, flag, now_s() + limit_s(m)};
    pthread_cond_broadcast(&m->cv);
}

static int slot_of(const NcclDev *m) { return (int)(m->steps % WATCH_SLOTS); }

/* ---- bootstrap ---------------------------------------------------------------------- */

bool rt_nccl_bootstrap(const RtCollOps *t, const RtCollBoot *boot, RtCollComm **comm, char *err,
                       size_t errlen)
{
    RtCollId id;
    memset(&id, 0, sizeof id);
    if (boot->world < 1 || boot->rank < 0 || boot->rank >= boot->world) {
        snprintf(err, errlen, "nccl: bootstrap: rank %d of %d", boot->rank, boot->world);
        return false;
    }
    /* rank 0 makes the id; a failure there still broadcasts (zeros), so
     * that no rank waits for it, and every rank reports */
    int rc = boot->rank == 0 ? t->get_unique_id(t->self, &id) : 0;
    int32_t status = rc;
    char buf[sizeof id + sizeof status];
    memcpy(buf, &id, sizeof id);
    memcpy(buf + sizeof id, &status, sizeof status);
    if (!boot->bcast(boot->self, buf, sizeof buf, 0, err, errlen))
        return false;
    memcpy(&id, buf, sizeof id);
    memcpy(&status, buf + sizeof id, sizeof status);
    if (!BOOT(t, rc, boot->rank, "ncclGetUniqueId", err, errlen))
        return false;
    if (status != 0) {
        snprintf(err, errlen, "nccl: rank %d: rank 0 could not make NCCL's unique id (error %d)",
                 boot->rank, (int)status);
        return false;
    }
    return BOOT(t, t->comm_init_rank(t->self, comm, boot->world, &id, boot->rank), boot->rank,
                "ncclCommInitRank", err, errlen);
}

bool rt_nccl_init_all(const RtCollOps *t, int ndev, const int *devlist, RtCollComm **comms,
                      char *err, size_t errlen)
{
    if (ndev < 1) {
        snprintf(err, errlen, "nccl: %d devices in one process", ndev);
        return false;
    }
    return BOOT(t, t->comm_init_all(t->self, comms, ndev, devlist), 0, "ncclCommInitAll", err,
                errlen);
}

/* ---- the hook's registry: RtCtx -> device (several ranks may share a process) ---- */

enum { MAX_RANKS_IN_PROCESS = 64 };
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const RtCtx *ctx;
    NcclDev *dev;
} reg[MAX_RANKS_IN_PROCESS];

static bool reg_add(const RtCtx *ctx, NcclDev *m)
{
    pthread_mutex_lock(&reg_mu);
    int at = -1;
    for (int i = 0; i < MAX_RANKS_IN_PROCESS && at < 0; i++)
        if (reg[i].ctx == ctx)
            at = i;
    for (int i = 0; i < MAX_RANKS_IN_PROCESS && at < 0; i++)
        if (!reg[i].ctx)
            at = i;
    if (at >= 0)
        reg[at].ctx = ctx, reg[at].dev = m;
    pthread_mutex_unlock(&reg_mu);
    return at >= 0;
}

static void reg_remove(NcclDev *m)
{
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < MAX_RANKS_IN_PROCESS; i++)
        if (reg[i].dev == m)
            reg[i].ctx = NULL, reg[i].dev = NULL;
    pthread_mutex_unlock(&reg_mu);
}

static NcclDev *reg_find(const RtCtx *ctx)
{
    NcclDev *m = NULL;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < MAX_RANKS_IN_PROCESS && !m; i++)
        if (reg[i].ctx == ctx)
            m = reg[i].dev;
    pthread_mutex_unlock(&reg_mu);
    return m;
}

/* ---- the buckets -------------------------------------------------------------------- */

static RtCollType coll_type(RtDType dt) { return (RtCollType)dt; }

/* One bucket: the comm stream after the compute stream, then one group. */
static void launch_locked(NcclDev *m, const int *params, int n)
{
    if (m->failed || n == 0)
        return;
    if (m->nlb >= m->np + 1)
        return;      /* cannot happen: at most one bucket per gradient */
    if (m->nlb == 0) /* the step's events: its slot's, once the watchdog let go of them */
        slot_free(m, slot_of(m));
    m->lstart[m->nlb++] = m->nlaunch;
    for (int i = 0; i < n; i++)
        m->launch[m->nlaunch++] = params[i];
    m->early += !m->in_finish;
    m->pending = true;
    const RtCollOps *t = m->t;
    if (!COLL(m, t->stream_wait(t->self, m->kstream, m->cstream), "cudaStreamWaitEvent") ||
        !COLL(m, t->group_start(t->self), "ncclGroupStart"))
        return;
    for (int i = 0; i < n; i++) {
        const RtDevTensor *g = &m->g[params[i]];
        if (!COLL(m, t->all_reduce(t->self, g->ptr, g->ptr, g->n, coll_type(g->dt), RT_COLL_SUM,
                                   m->comm, m->kstream), "ncclAllReduce"))
            break;
    }
    if (COLL(m, t->group_end(t->self), "ncclGroupEnd") && m->nlb <= m->nev)
        COLL(m, t->event_record(t->self, m->ev[slot_of(m) * m->nev + m->nlb - 1], m->kstream),
             "cudaEventRecord");
}

static void launch(NcclDev *m, const int *params, int n)
{
    pthread_mutex_lock(&m->mu);
    launch_locked(m, params, n);
    pthread_mutex_unlock(&m->mu);
}

static size_t grad_bytes(const NcclDev *m, int k) { return m->g[k].n * rt_dtype_size(m->g[k].dt); }

/* Parameter k's gradient is final. */
static void grad_final(NcclDev *m, int k)
{
    if (k < 0 || k >= m->np || !m->has[k] || m->ready[k])
        return;
    m->ready[k] = true;
    m->order[m->nready++] = k;
    if (m->table) {
        m->left[m->bucket_of[k]]--;
        while (m->next < m->nb && m->left[m->next] == 0) {
            int b = m->next++;
            launch(m, m->members + m->first[b], m->first[b + 1] - m->first[b]);
        }
        return;
    }
    m->open_bytes += grad_bytes(m, k);
    if (m->cap_bytes && m->open_bytes >= m->cap_bytes) {
        launch(m, m->order + m->open_from, m->nready - m->open_from);
        m->open_from = m->nready;
        m->open_bytes = 0;
    }
}

static void on_grad_ready(RtCtx *ctx, int k)
{
    NcclDev *m = reg_find(ctx);
    if (m)
        grad_final(m, k);
}

/* The step's end: every gradient final, the last bucket launched, the
 * compute stream after the comm stream. */
static bool finish(NcclDev *m, char *err, size_t errlen)
{
    m->in_finish = true;
    for (int k = m->np - 1; k >= 0; k--)
        grad_final(m, k);
    if (!m->table && m->open_from < m->nready) {
        launch(m, m->order + m->open_from, m->nready - m->open_from);
        m->open_from = m->nready;
    }
    m->in_finish = false;
    /* the device orders what follows after the reductions; the watchdog
     * holds their deadline, bucket by bucket (its message names the first
     * one not done), one deadline for all */
    pthread_mutex_lock(&m->mu);
    if (m->pending &&
        COLL(m, m->t->stream_wait(m->t->self, m->cstream, m->kstream), "cudaStreamWaitEvent"))
        watch(m, slot_of(m), m->ev + slot_of(m) * m->nev, m->nlb < m->nev ? m->nlb : m->nev, false);
    bool failed = m->failed;
    pthread_mutex_unlock(&m->mu);
    /* the record of this step, for the stats */
    memcpy(m->last, m->launch, sizeof *m->last * (size_t)m->nlaunch);
    memcpy(m->last_start, m->lstart, sizeof *m->last_start * (size_t)m->nlb);
    m->last_start[m->nlb] = m->nlaunch;
    m->last_nb = m->nlb;
    m->last_early = m->early;
    m->steps++;
    memset(m->ready, 0, sizeof *m->ready * (size_t)m->np);
    if (m->table)
        memcpy(m->left, m->size, sizeof *m->left * (size_t)m->nb);
    m->next = m->nready = m->open_from = m->nlaunch = m->nlb = m->early = 0;
    m->open_bytes = 0;
    m->pending = false;
    if (failed) {
        snprintf(err, errlen, "%s", m->err);
        return false;
    }
    return true;
}

static bool is_model_grads(const NcclDev *m, const RtDevTensor *b, int n)
{
    if (!m->m || n != m->ng)
        return false;
    for (int k = 0, i = 0; k < m->np; k++)
        if (m->has[k] && (b[i].ptr != m->g[k].ptr || b[i].n != m->g[k].n || b[i++].dt != m->g[k].dt))
            return false;
    return true;
}

static bool check_bucket(const RtDevTensor *b, int n, const char *call, char *err, size_t errlen)
{
    if (n < 0 || (n > 0 && !b)) {
        snprintf(err, errlen, "nccl: %s of %d tensors", call, n);
        return false;
    }
    for (int i = 0; i < n; i++)
        if ((!b[i].ptr && b[i].n) || (unsigned)b[i].dt > RT_BF16) {
            snprintf(err, errlen, "nccl: %s: tensor %d of the bucket has no memory or no dtype",
                     call, i);
            return false;
        }
    return true;
}

static bool n_allreduce(RtDevice *d, const RtDevTensor *b, int n, RtReduceOp op, char *err,
                        size_t errlen)
{
    NcclDev *m = nd(d);
    if (op != RT_REDUCE_SUM && op != RT_REDUCE_MEAN) {
        snprintf(err, errlen, "nccl: all-reduce: unknown reduction %d", (int)op);
        return false;
    }
    if (!check_bucket(b, n, "all-reduce", err, errlen))
        return false;
    if (is_model_grads(m, b, n)) {
        if (op != RT_REDUCE_SUM) {
            snprintf(err, errlen, "nccl: the gradients are summed during backward: a mean of "
                     "them is not supported (the update's rescale_grad divides)");
            return false;
        }
        return finish(m, err, errlen);
    }
    /* other tensors: at once, on the compute stream (in order with its work) */
    const RtCollOps *t = m->t;
    pthread_mutex_lock(&m->mu);
    if (!m->failed && COLL(m, t->group_start(t->self), "ncclGroupStart")) {
        for (int i = 0; i < n; i++)
            if (!COLL(m, t->all_reduce(t->self, b[i].ptr, b[i].ptr, b[i].n, coll_type(b[i].dt),
                                       op == RT_REDUCE_SUM ? RT_COLL_SUM : RT_COLL_AVG, m->comm,
                                       m->cstream), "ncclAllReduce"))
                break;
        COLL(m, t->group_end(t->self), "ncclGroupEnd");
    }
    bool failed = m->failed; /* the comm may be aborted */
    pthread_mutex_unlock(&m->mu);
    if (failed)
        snprintf(err, errlen, "%s", m->err);
    return !failed;
}

static bool n_broadcast(RtDevice *d, const RtDevTensor *b, int n, int root, char *err,
                        size_t errlen)
{
    NcclDev *m = nd(d);
    if (root < 0 || root >= m->world) {
        snprintf(err, errlen, "nccl: broadcast from rank %d of %d", root, m->world);
        return false;
    }
    if (!check_bucket(b, n, "broadcast", err, errlen))
        return false;
    const RtCollOps *t = m->t;
    pthread_mutex_lock(&m->mu);
    bool queued = !m->failed && COLL(m, t->group_start(t->self), "ncclGroupStart");
    if (queued) {
        for (int i = 0; i < n; i++)
            if (!COLL(m,
                      t->broadcast(t->self, b[i].ptr, b[i].ptr, b[i].n, coll_type(b[i].dt), root,
                                   m->comm, m->cstream),
                      "ncclBroadcast"))
                break;
        queued = COLL(m, t->group_end(t->self), "ncclGroupEnd");
    }
    pthread_mutex_unlock(&m->mu);
    if (queued) /* once per run: the host waits, within the deadline */
        wait_done(m, m->cstream, "the broadcast");
    if (m->failed)
        snprintf(err, errlen, "%s", m->err);
    return !m->failed;
}

/* The local check, then the maximum of every rank's "not finite", in
 * place in the device's step state (0 or 1: rt.h's RtStepState.flag), on
 * the compute stream: the update that follows reads it there.  The host
 * reads nothing; the watchdog holds the deadline. */
static void n_check_grads(RtDevice *d)
{
    NcclDev *m = nd(d);
    RtDevice *in = fwd_in(d);
    in->ops->check_grads(in);
    int32_t *flag = (int32_t *)&in->ops->step_state(in)->flag;
    int i = WATCH_SLOTS + slot_of(m);
    pthread_mutex_lock(&m->mu);
    slot_free(m, i);
    if (!m->failed &&
        COLL(m,
             m->t->all_reduce(m->t->self, flag, flag, 1, RT_COLL_I32, RT_COLL_MAX, m->comm,
                              m->cstream),
             "ncclAllReduce") &&
        COLL(m, m->t->event_record(m->t->self, m->fev[slot_of(m)], m->cstream), "cudaEventRecord"))
        watch(m, i, &m->fev[slot_of(m)], 1, true);
    bool failed = m->failed;
    pthread_mutex_unlock(&m->mu);
    /* a failed reduction must not let one rank update alone: not finite */
    if (failed)
        in->ops->set_flag(in, false);
}

static void n_train_update(RtDevice *d, float *const *state, float *const *state2,
                           const struct RtOptConfig *oc)
{
    NcclDev *m = nd(d);
    if (m->pending || m->nready) {
        char err[8];
        (void)finish(m, err, sizeof err); /* the error stays in m->err */
    }
    pthread_mutex_lock(&m->mu);
    bool failed = m->failed;
    pthread_mutex_unlock(&m->mu);
    if (failed) {
        fprintf(stderr, "%s\n", m->err);
        /* the ranks' weights would part: the job cannot go on (MPI_Abort
         * ends the other ranks too) */
        exit(rt_mpi_finish(1));
    }
    fwd_in(d)->ops->train_update(fwd_in(d), state, state2, oc);
}

/* ---- the start-up check (rankcheck.h) -------------------------------------------------- */

bool rt_nccl_is(const RtDevice *d) { return d && d->ops->allreduce == n_allreduce; }

/* The ranks' records through the comm: each rank's bytes in its own slot of
 * a zeroed world x bytes buffer, summed as int32 (every word is one rank's
 * and zeros), on the compute stream, within the deadline. */
bool rt_nccl_allgather(void *self, const void *mine, void *all, size_t bytes, char *err,
                       size_t errlen)
{
    RtDevice *d = self;
    if (!rt_nccl_is(d) || bytes % 4 != 0) {
        snprintf(err, errlen, "nccl: the start-up check needs the NCCL device and whole words");
        return false;
    }
    NcclDev *m = nd(d);
    RtDevice *in = fwd_in(d);
    size_t total = bytes * (size_t)m->world;
    memset(all, 0, total);
    memcpy((char *)all + bytes * (size_t)m->rank, mine, bytes);
    void *buf = in->ops->alloc(in, total, "the start-up check", err, errlen);
    if (!buf)
        return false;
    in->ops->to_device(in, buf, all, total);
    pthread_mutex_lock(&m->mu);
    bool queued = !m->failed && COLL(m,
                                     m->t->all_reduce(m->t->self, buf, buf, total / 4, RT_COLL_I32,
                                                      RT_COLL_SUM, m->comm, m->cstream),
                                     "ncclAllReduce");
    pthread_mutex_unlock(&m->mu);
    if (queued)
        wait_done(m, m->cstream, "the start-up check");
    if (!m->failed)
        in->ops->to_host(in, all, buf, total);
    in->ops->free(in, buf);
    if (m->failed)
        snprintf(err, errlen, "%s", m->err);
    return !m->failed;
}

static int n_world_size(const RtDevice *d) { return ((const NcclDev *)d)->world; }
static int n_rank(const RtDevice *d) { return ((const NcclDev *)d)->rank; }

/* ---- setup: the gradient table ------------------------------------------------------ */

static void grads_free(NcclDev *m)
{
    free(m->has);
    free(m->ready);
    free(m->g);
    free(m->bucket_of);
    free(m->left);
    free(m->size);
    free(m->members);
    free(m->first);
    free(m->order);
    free(m->launch);
    free(m->lstart);
    free(m->last);
    free(m->last_start);
}

static bool table_setup(NcclDev *m, const RtModel *mo, char *err, size_t errlen)
{
    int nt = mo->kv_nbuckets, np = mo->nparams;
    m->table = true;
    m->nb = nt;
    m->size = calloc((size_t)nt + 1, sizeof *m->size);
    m->left = calloc((size_t)nt + 1, sizeof *m->left);
    m->first = calloc((size_t)nt + 2, sizeof *m->first);
    m->members = calloc((size_t)np + 1, sizeof *m->members);
    if (!m->size || !m->left || !m->first || !m->members) {
        snprintf(err, errlen, "nccl: out of memory for the buckets");
        return false;
    }
    int at = 0;
    for (int b = 0; b < nt; b++) {
        int lo = mo->kv_bucket_start[b], hi = mo->kv_bucket_start[b + 1];
        if (lo > hi || (b == 0 && lo != 0)) {
            snprintf(err, errlen, "model %s: kvstore bucket %d: bad bounds", mo->name, b);
            return false;
        }
        m->first[b] = at;
        for (int j = lo; j < hi; j++) {
            int k = mo->kv_bucket_params[j];
            if (k < 0 || k >= np || !m->has[k] || m->ready[k]) {
                snprintf(err, errlen, "model %s: kvstore bucket %d names parameter %d: not a "
                         "gradient, or one in two buckets", mo->name, b, k);
                return false;
            }
            m->ready[k] = true; /* seen (cleared below) */
            m->bucket_of[k] = b;
            m->members[at++] = k;
            m->size[b]++;
        }
    }
    m->first[nt] = at;
    for (int k = 0; k < np; k++)
        if (m->has[k] && !m->ready[k]) {
            snprintf(err, errlen, "model %s: the kvstore buckets leave out the gradient of %s",
                     mo->name, mo->params[k].name);
            return false;
        }
    memset(m->ready, 0, sizeof *m->ready * (size_t)np);
    memcpy(m->left, m->size, sizeof *m->left * (size_t)nt);
    return true;
}

static bool grads_setup(NcclDev *m, const RtModel *mo, const RtCtx *ctx, char *err,
                        size_t errlen)
{
    int np = mo->nparams;
    size_t n1 = (size_t)(np > 0 ? np : 0) + 1;
    m->np = np;
    m->has = calloc(n1, sizeof *m->has);
    m->ready = calloc(n1, sizeof *m->ready);
    m->g = calloc(n1, sizeof *m->g);
    m->bucket_of = calloc(n1, sizeof *m->bucket_of);
    m->order = calloc(n1, sizeof *m->order);
    m->launch = calloc(n1, sizeof *m->launch);
    m->lstart = calloc(n1 + 1, sizeof *m->lstart);
    m->last = calloc(n1, sizeof *m->last);
    m->last_start = calloc(n1 + 1, sizeof *m->last_start);
    if (!m->has || !m->ready || !m->g || !m->bucket_of || !m->order || !m->launch ||
        !m->lstart || !m->last || !m->last_start) {
        snprintf(err, errlen, "nccl: out of memory for the gradient table");
        return false;
    }
    for (int k = 0; k < np; k++) {
        const RtParam *p = &mo->params[k];
        if (p->grad < 0)
            continue;
        m->has[k] = true;
        m->g[k] = (RtDevTensor){ctx->buf[p->grad], (size_t)p->numel, mo->buffers[p->grad].dtype};
        m->ng++;
    }
    if (mo->kv_nbuckets > 0)
        return table_setup(m, mo, err, errlen);
    double cap = m->cfg.bucket_mb * 1048576.0;
    m->cap_bytes = m->cfg.bucket_mb <= 0 ? 0 : cap < 1 ? 1 : cap > 1e18 ? (size_t)1 << 60
                                                                       : (size_t)cap;
    return true;
}

/* One event per possible bucket (at most one per gradient), made once. */
/* The events of WATCH_SLOTS steps (np + 1 buckets at most, and the flag)
 * and the watchdog that polls them */
static bool events_setup(NcclDev *m, char *err, size_t errlen)
{
    int n = m->np + 1;
    if (!(m->ev = calloc((size_t)n * WATCH_SLOTS, sizeof *m->ev))) {
        snprintf(err, errlen, "nccl: out of memory for the buckets' events");
        return false;
    }
    for (int i = 0; i < n * WATCH_SLOTS; i++)
        if (!boot_ok(m->t, m->t->event_create(m->t->self, &m->ev[i]), m->rank,
                     "cudaEventCreateWithFlags", __FILE__, __LINE__, err, errlen))
            return false;
    m->nev = n;
    for (int s = 0; s < WATCH_SLOTS; s++)
        if (!boot_ok(m->t, m->t->event_create(m->t->self, &m->fev[s]), m->rank,
                     "cudaEventCreateWithFlags", __FILE__, __LINE__, err, errlen))
            return false;
    if (pthread_create(&m->watchdog, NULL, watchdog_main, m) != 0) {
        snprintf(err, errlen, "nccl: rank %d: cannot start the watchdog thread", m->rank);
        return false;
    }
    m->watching = true;
    return true;
}

/* the watched steps done (or the engine failed: the deadline bounds the
 * wait), then the watchdog stopped */
static void watchdog_stop(NcclDev *m)
{
    if (!m->watching)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->watchdog, NULL);
    m->watching = false;
}

static bool n_setup(RtDevice *d, const RtModel *mo, const RtCtx *ctx, char *err, size_t errlen)
{
    NcclDev *m = nd(d);
    RtDevice *in = fwd_in(d);
    if (!in->ops->setup(in, mo, ctx, err, errlen))
        return false;
    if (m->m == mo && m->ctx == ctx)
        return true;
    if (m->m) {
        snprintf(err, errlen, "nccl: the engine serves one model and one context");
        return false;
    }
    if (!grads_setup(m, mo, ctx, err, errlen) || !events_setup(m, err, errlen))
        return false;
    if (!reg_add(ctx, m)) {
        snprintf(err, errlen, "nccl: more than %d ranks in one process", MAX_RANKS_IN_PROCESS);
        return false;
    }
    m->m = mo;
    /* the context is the trainer's own (non-const) object; setup is where
     * the device learns it (as the MPI engine's) */
    m->ctx = (RtCtx *)ctx;
    m->ctx->grad_ready = on_grad_ready;
    return true;
}

static void n_close(RtDevice *d)
{
    NcclDev *m = nd(d);
    RtDevice *in = fwd_in(d);
    const RtCollOps *t = m->t;
    reg_remove(m);
    watchdog_stop(m);
    /* the flag's all-reduce and broadcasts run on the compute stream: done
     * before the comm goes */
    if (m->comm) /* else aborted: the streams' NCCL kernels have ended */
        in->ops->synchronize(in);
    if (m->kstream) {
        if (m->comm)
            COLL(m, t->stream_sync(t->self, m->kstream), "cudaStreamSynchronize");
        COLL(m, t->stream_destroy(t->self, m->kstream), "cudaStreamDestroy");
    }
    for (int b = 0; m->ev && b < m->nev * WATCH_SLOTS; b++)
        if (m->ev[b])
            COLL(m, t->event_destroy(t->self, m->ev[b]), "cudaEventDestroy");
    for (int s = 0; s < WATCH_SLOTS; s++)
        if (m->fev[s])
            COLL(m, t->event_destroy(t->self, m->fev[s]), "cudaEventDestroy");
    free(m->ev);
    if (m->comm)
        COLL(m, t->comm_destroy(t->self, m->comm), "ncclCommDestroy");
    if (m->failed)
        fprintf(stderr, "%s\n", m->err);
    grads_free(m);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
    rt_device_close(in);
}

RtDevice *rt_nccl_wrap(RtDevice *inner, const RtCollOps *t, RtCollComm *comm, int rank,
                       int world, const RtNcclConfig *c, char *err, size_t errlen)
{
    if (!inner || !t || !comm || world < 1 || rank < 0 || rank >= world) {
        snprintf(err, errlen, "nccl: no device, transport or communicator (rank %d of %d)", rank,
                 world);
        return NULL;
    }
    /* only the fake runs every call on the calling thread: a real transport
     * must order its streams against the device's */
    if (strcmp(t->name, "fake") != 0 && (!c || !c->compute_stream)) {
        snprintf(err, errlen, "nccl: rank %d: the device's compute stream is needed "
                 "(RtNcclConfig.compute_stream) to order the all-reduces after backward", rank);
        return NULL;
    }
    NcclDev *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "nccl: out of memory for the device");
        return NULL;
    }
    m->ops = rt_fwd_ops("nccl", inner, n_close);
    m->ops.setup = n_setup;
    m->ops.check_grads = n_check_grads;
    m->ops.train_update = n_train_update;
    m->ops.allreduce = n_allreduce;
    m->ops.broadcast = n_broadcast;
    m->ops.world_size = n_world_size;
    m->ops.rank = n_rank;
    m->f.base.ops = &m->ops;
    m->f.in = inner;
    m->t = t;
    m->rank = rank;
    m->world = world;
    m->cfg = *c;
    m->cstream = c->compute_stream ? c->compute_stream(inner) : NULL;
    int rc = t->stream_create(t->self, c->device, &m->kstream);
    if (!boot_ok(t, rc, rank, "cudaStreamCreateWithFlags", __FILE__, __LINE__, err, errlen)) {
        if (m->kstream)
            t->stream_destroy(t->self, m->kstream);
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    m->comm = comm;
    return &m->f.base;
}

void rt_nccl_stats(RtDevice *d, RtNcclStats *st)
{
    NcclDev *m = nd(d);
    st->nbuckets = m->last_nb;
    st->launched_early = m->last_early;
    st->steps = m->steps;
    st->program_buckets = m->table;
    pthread_mutex_lock(&m->mu);
    st->host_waits = m->host_waits;
    pthread_mutex_unlock(&m->mu);
}

int rt_nccl_bucket_params(RtDevice *d, int b, int *params, int cap)
{
    NcclDev *m = nd(d);
    if (b < 0 || b >= m->last_nb)
        return 0;
    int n = m->last_start[b + 1] - m->last_start[b];
    for (int i = 0; i < n && i < cap; i++)
        params[i] = m->last[m->last_start[b] + i];
    return n;
}

int rt_nccl_local_device(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                       "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r = v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && r >= 0 && r < INT_MAX)
            return (int)r;
    }
    return 0;
}

/* ---- the program's hook -------------------------------------------------------------- */

RtDevice *rt_kv_open(RtDevice *gpu, int place,
                     const RtCollOps *(*coll_fn)(char *err, size_t errlen),
                     void *(*compute_stream)(RtDevice *gpu), double bucket_mb, char *err,
                     size_t errlen)
{
    if (!gpu)
        return NULL;
    if (place != RT_KV_NCCL && place != RT_KV_DIST_SYNC)
        return rt_kv_wrap(gpu, place, err, errlen);
    /* the ranks as the MPI engine knows them (train.c started it, with the
     * run's --mpi-timeout; without MPI the CPU device alone: rank 0 of 1) */
    RtDevice *cpu = rt_device_cpu_open(err, errlen);
    RtDevice *host = cpu ? rt_mpi_wrap(cpu, err, errlen) : NULL;
    RtDevice *d = NULL;
    if (host && rt_dev_world_size(host) == 1) {
        rt_device_close(host);
        return gpu; /* one GPU: its own update, nothing to reduce */
    }
    const RtCollOps *t = host && coll_fn ? coll_fn(err, errlen) : NULL;
    if (host && !coll_fn)
        snprintf(err, errlen, "nccl: placement '%s' on %d ranks needs the NCCL transport (a "
                 "program built for CUDA)", rt_kv_place_name(place), rt_dev_world_size(host));
    RtCollBoot boot = host ? rt_coll_boot_device(host) : (RtCollBoot){0};
    RtCollComm *comm = NULL;
    if (t && rt_nccl_bootstrap(t, &boot, &comm, err, errlen)) {
        /* the comm stream on the GPU the program opened (its $AMPC_CUDA_DEVICE,
         * else the local rank's), the current device since it opened it */
        RtNcclConfig cfg = {.compute_stream = compute_stream, .device = -1,
                            .bucket_mb = bucket_mb, .timeout_s = rt_mpi_timeout()};
        if (!(d = rt_nccl_wrap(gpu, t, comm, boot.rank, boot.world, &cfg, err, errlen)))
            t->comm_destroy(t->self, comm);
    }
    rt_device_close(host); /* MPI stays up: the MPI engine's finish ends it */
    if (!d)
        rt_device_close(gpu);
    return d;
}

/* ---- the bootstrap over a host device's broadcast (MPI) ------------------------------ */

static bool dev_bcast(void *self, void *buf, size_t bytes, int root, char *err, size_t errlen)
{
    RtDevice *d = self;
    if (bytes % sizeof(float)) {
        snprintf(err, errlen, "nccl: bootstrap: %zu bytes is not a whole number of words", bytes);
        return false;
    }
    RtDevTensor t = {buf, bytes / sizeof(float), RT_F32}; /* bytes, carried as words */
    return rt_dev_broadcast(d, &t, 1, root, err, errlen);
}

RtCollBoot rt_coll_boot_device(RtDevice *host)
{
    return (RtCollBoot){rt_dev_rank(host), rt_dev_world_size(host), host, dev_bcast};
}
