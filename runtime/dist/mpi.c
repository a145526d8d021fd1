/* mpi.c - the engine for several processes on the CPU (mpi_rt.h; docs/kvstore.md,
 * "Running on several processes").  Compiled with mpicc into ampcmpi.o and
 * linked only into a program built with `ampc --mpi`; its definitions replace
 * the weak ones of runtime/dist/mpi_none.c.
 *
 * One process per rank, launched by mpirun.  The device of a rank is the CPU
 * device wrapped: every call is forwarded, except
 *   - allreduce: the gradients, during backward.  The emitted train step
 *     calls RtCtx.grad_ready(k) right after the call that completes
 *     parameter k's gradient (ampc knows the last writer of each gradient
 *     buffer, a fused BatchNorm backward's dgamma and dbeta included); the
 *     gradient is widened into an fp32 stage there, and each bucket is
 *     handed to MPI_Iallreduce(MPI_SUM) as soon as its last gradient is
 *     final, in bucket order, overlapping the rest of backward.  The buckets
 *     are the program's (the kvstore pass's, RtModel.kv_*, when ampc placed
 *     it with dist_sync) or else cut every --mpi-bucket-mb MiB of fp32 in
 *     the order the gradients become final.  The trainer's all-reduce after
 *     the step waits for all of them and writes the sums back (rounded to the
 *     gradient's dtype once) before the optimizer.  With two ranks every
 *     element is one IEEE addition, a + b == b + a, so both ranks hold the
 *     same bits, whatever the buckets.
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

#include "mpi_rt.h"
#include "rt.h"

enum { TAG_ARRIVE = 7001, TAG_PING, TAG_PONG, TAG_CHECK };

static bool g_started, g_agreed;
static int g_rank, g_world = 1;
static double g_timeout = 60;
static size_t g_bucket_elems = (size_t)1 << 20; /* 4 MiB of fp32 */
static int64_t g_step = -1;

/* The model's gradients as the train step completes them (set up by
 * m_setup; docs/kvstore.md, "Running on several processes"). */
typedef struct {
    int np;            /* the model's parameters; the arrays below are by parameter */
    bool *has;         /* it has a gradient */
    RtDevTensor *t;    /* its gradient */
    size_t *pos;       /* where it sits in the stage (fp32 elements) */
    bool *ready;       /* final this step */
    int *order;        /* this step's final gradients, in the order they came */
    int ng;            /* parameters with a gradient */
    bool table;        /* the program's kvstore buckets (else --mpi-bucket-mb's) */
    int nb;            /* buckets */
    size_t *end;       /* bucket b is the stage's [b ? end[b - 1] : 0, end[b]) */
    int *bucket_of;    /* table: by parameter */
    int *size, *left;  /* table: gradients per bucket, and not yet final this step */
    size_t total, at;  /* elements; own rule: where the next final gradient goes */
    int nready, started, early; /* this step: final gradients, buckets started,
                                 * of those before the step ended */
    int nr;            /* requests posted this step, the arrivals first */
    bool open;         /* this step's arrivals are posted */
    bool in_reduce;    /* m_allreduce is finishing the step */
    bool again;        /* a gradient announced twice before the all-reduce (the
                        * train step ran twice: --sim-ranks in one process) */
    bool debug;        /* $AMPC_MPI_DEBUG: rank 0 prints the first step's buckets */
    int64_t steps;
} Grads;

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
    const RtModel *model;
    Grads g;       /* set when m_setup ran */
} MpiDev;

static MpiDev *g_dev; /* the one device, for the train step's grad_ready hook */

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
int64_t rt_mpi_step(void) { return g_step; }
double rt_mpi_timeout(void) { return g_timeout; }

int rt_mpi_finish(int rc)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return rc;
    if (rc == 0 || g_agreed) { /* every rank ends here, with this status */
        MPI_Finalize();
        return rc;
    }
    if (g_world > 1) {
        fprintf(stderr, "mpi: rank %d of %d: exiting with status %d: aborting the job\n", g_rank,
                g_world, rc);
        fflush(stderr);
    }
    MPI_Abort(MPI_COMM_WORLD, rc);
    return rc;
}

void rt_mpi_agreed(void) { g_agreed = true; }

/* ---- the hang guard --------------------------------------------------------------- */

/* The ranks whose arrival receive (recv[k] for the k-th other rank) is
 * still pending, as "1, 3" into names; how many. */
static int pending_ranks(MPI_Request *recv, char *names, size_t cap)
{
    size_t at = 0;
    int k = 0, missing = 0;
    names[0] = 0;
    for (int p = 0; p < g_world; p++) {
        if (p == g_rank)
            continue;
        int done = 0;
        MPI_Test(&recv[k++], &done, MPI_STATUS_IGNORE);
        if (!done && at < cap - 16) {
            at += (size_t)snprintf(names + at, cap - at, "%s%d", missing ? ", " : "", p);
            missing++;
        }
    }
    return missing;
}

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
    missing = pending_ranks(r, names, cap); /* their pong has not come */
    free(r); /* the job is aborted next: the pending requests go with it */
    free(pong);
    return missing;
}

/* Aborts the job naming the ranks whose arrival for this collective has
 * not come (their receive is still pending), or, when all arrived, those
 * that do not answer a ping. */
static void give_up(MpiDev *m, const char *what)
{
    char names[512];
    int missing = pending_ranks(m->req, names, sizeof names);
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

/* The start-up check's all-gather (mpi_rt.h): its own arrival messages
 * (TAG_CHECK) to and from every other rank, then MPI_Iallgather, polled
 * until --mpi-timeout; a rank that has not arrived by then is named and the
 * job aborted (a rank that fails before it aborts the job itself). */
bool rt_mpi_allgather(void *self, const void *mine, void *all, size_t bytes, char *err,
                      size_t errlen)
{
    (void)self;
    if (!g_started || g_world == 1) {
        memcpy(all, mine, bytes);
        return true;
    }
    if (bytes > INT_MAX) {
        snprintf(err, errlen, "mpi: an all-gather of %zu bytes", bytes);
        return false;
    }
    int n = g_world - 1;
    MPI_Request *r = calloc((size_t)(2 * n + 1), sizeof *r);
    int64_t *in = calloc((size_t)n + 1, sizeof *in), one = 1;
    if (!r || !in) {
        free(r);
        free(in);
        snprintf(err, errlen, "mpi: out of memory for the start-up check");
        return false;
    }
    for (int p = 0, k = 0; p < g_world; p++)
        if (p != g_rank) {
            MPI_Irecv(&in[k], 1, MPI_INT64_T, p, TAG_CHECK, MPI_COMM_WORLD, &r[k]);
            MPI_Isend(&one, 1, MPI_INT64_T, p, TAG_CHECK, MPI_COMM_WORLD, &r[n + k]);
            k++;
        }
    MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD,
                   &r[2 * n]);
    double deadline = now_s() + g_timeout;
    long nap = 1000; /* ns */
    for (int done = 0; !done;) {
        MPI_Testall(2 * n + 1, r, &done, MPI_STATUSES_IGNORE);
        if (done)
            break;
        if (now_s() > deadline) {
            char names[512];
            int missing = pending_ranks(r, names, sizeof names);
            if (missing)
                fprintf(stderr, "mpi: rank %d: error: rank%s %s did not arrive at the start-up "
                        "check within --mpi-timeout=%g s (not started, stopped or dead, or "
                        "another program): aborting the job\n", g_rank, missing > 1 ? "s" : "",
                        names, g_timeout);
            else
                fprintf(stderr, "mpi: rank %d: error: the start-up check did not complete "
                        "within --mpi-timeout=%g s though every rank arrived: aborting the "
                        "job\n", g_rank, g_timeout);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 3);
            exit(3);
        }
        struct timespec ts = {0, nap};
        nanosleep(&ts, NULL);
        nap = nap < 1000000 ? nap * 2 : 1000000;
    }
    free(r);
    free(in);
    return true;
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

/* Any tensors, after the fact: packed in the order backward completes the
 * parameters' gradients (the last tensor first), cut every --mpi-bucket-mb. */
static bool reduce_all(MpiDev *m, const RtDevTensor *b, int n, RtReduceOp op, char *err,
                       size_t errlen)
{
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

/* ---- the gradients, reduced while backward runs ------------------------------------- */

static bool grads_setup(MpiDev *m, const RtModel *mo, const RtCtx *ctx, char *err, size_t errlen)
{
    Grads *g = &m->g;
    int np = mo->nparams, nt = mo->kv_nbuckets;
    g->np = np;
    g->has = calloc((size_t)np + 1, sizeof *g->has);
    g->t = calloc((size_t)np + 1, sizeof *g->t);
    g->pos = calloc((size_t)np + 1, sizeof *g->pos);
    g->ready = calloc((size_t)np + 1, sizeof *g->ready);
    g->order = calloc((size_t)np + 1, sizeof *g->order);
    g->bucket_of = calloc((size_t)np + 1, sizeof *g->bucket_of);
    g->size = calloc((size_t)(nt > 0 ? nt : 0) + 1, sizeof *g->size);
    g->left = calloc((size_t)(nt > 0 ? nt : 0) + 1, sizeof *g->left);
    if (!g->has || !g->t || !g->pos || !g->ready || !g->order || !g->bucket_of || !g->size ||
        !g->left) {
        snprintf(err, errlen, "mpi: out of memory for the gradient table");
        return false;
    }
    for (int k = 0; k < np; k++) {
        const RtParam *p = &mo->params[k];
        if (p->grad < 0)
            continue;
        g->has[k] = true;
        g->t[k] = (RtDevTensor){ctx->buf[p->grad], (size_t)p->numel, mo->buffers[p->grad].dtype};
        if (g->t[k].n > SIZE_MAX / sizeof(float) - g->total) {
            snprintf(err, errlen, "mpi: the gradients overflow the size of memory");
            return false;
        }
        g->total += g->t[k].n;
        g->ng++;
    }
    size_t cap = g_bucket_elems < (size_t)INT_MAX ? g_bucket_elems : (size_t)INT_MAX;
    g->table = nt > 0;
    g->nb = g->table ? nt : g->total ? (int)((g->total + cap - 1) / cap) : 0;
    if (!g->table && (g->total + cap - 1) / cap > (size_t)INT_MAX / 2) {
        snprintf(err, errlen, "mpi: too many buckets: raise --mpi-bucket-mb");
        return false;
    }
    if (!(g->end = calloc((size_t)g->nb + 1, sizeof *g->end))) {
        snprintf(err, errlen, "mpi: out of memory for the gradient table");
        return false;
    }
    for (int b = 0; !g->table && b < g->nb; b++)
        g->end[b] = g->total - (size_t)b * cap <= cap ? g->total : (size_t)(b + 1) * cap;
    /* the program's buckets: every gradient in exactly one, each fitting an int */
    size_t at = 0;
    for (int b = 0; g->table && b < nt; b++) {
        int lo = mo->kv_bucket_start[b], hi = mo->kv_bucket_start[b + 1];
        if (lo > hi || (b == 0 && lo != 0)) {
            snprintf(err, errlen, "model %s: kvstore bucket %d: bad bounds", mo->name, b);
            return false;
        }
        size_t lo_at = at;
        for (int j = lo; j < hi; j++) {
            int k = mo->kv_bucket_params[j];
            if (k < 0 || k >= np || !g->has[k] || g->ready[k]) {
                snprintf(err, errlen, "model %s: kvstore bucket %d names parameter %d: not a "
                         "gradient, or one in two buckets", mo->name, b, k);
                return false;
            }
            g->ready[k] = true; /* seen (cleared below) */
            g->bucket_of[k] = b;
            g->pos[k] = at;
            at += g->t[k].n;
            g->size[b]++;
        }
        if (at - lo_at > (size_t)INT_MAX) {
            snprintf(err, errlen, "model %s: kvstore bucket %d holds more than INT_MAX values",
                     mo->name, b);
            return false;
        }
        g->end[b] = at;
    }
    for (int k = 0; g->table && k < np; k++)
        if (g->has[k] && !g->ready[k]) {
            snprintf(err, errlen, "model %s: the kvstore buckets leave out the gradient of %s",
                     mo->name, mo->params[k].name);
            return false;
        }
    memset(g->ready, 0, sizeof *g->ready * (size_t)np);
    memcpy(g->left, g->size, sizeof *g->left * (size_t)(nt > 0 ? nt : 0));
    if (g->total > m->stage_n) {
        free(m->stage);
        m->stage_n = 0;
        if (!(m->stage = malloc(g->total * sizeof(float)))) {
            snprintf(err, errlen, "mpi: out of memory for %zu fp32 gradient values", g->total);
            return false;
        }
        m->stage_n = g->total;
    }
    const char *dbg = getenv("AMPC_MPI_DEBUG");
    g->debug = dbg && *dbg && strcmp(dbg, "0") != 0;
    return reserve(m, g->nb, err, errlen);
}

static void grads_free(Grads *g)
{
    free(g->has);
    free(g->t);
    free(g->pos);
    free(g->ready);
    free(g->order);
    free(g->bucket_of);
    free(g->size);
    free(g->left);
    free(g->end);
}

static bool bucket_complete(const Grads *g, int b)
{
    return g->table ? g->left[b] == 0 : g->end[b] <= g->at;
}

/* Parameter k's gradient is final: into the stage (fp32), then every
 * bucket that is now complete starts, in bucket order (every rank posts the
 * same collectives in the same order). */
static void grad_final(MpiDev *m, int k)
{
    Grads *g = &m->g;
    if (k < 0 || k >= g->np || !g->has[k])
        return;
    if (g->ready[k]) {
        g->again |= !g->in_reduce;
        return;
    }
    if (!g->open) {
        g->nr = arrive(m);
        g->open = true;
    }
    g->ready[k] = true;
    g->order[g->nready++] = k;
    if (!g->table) {
        g->pos[k] = g->at;
        g->at += g->t[k].n;
    } else {
        g->left[g->bucket_of[k]]--;
    }
    rt_to_f32(m->stage + g->pos[k], g->t[k].ptr, g->t[k].n, g->t[k].dt);
    bool any = false;
    while (g->started < g->nb && bucket_complete(g, g->started)) {
        int b = g->started++;
        size_t lo = b ? g->end[b - 1] : 0;
        MPI_Iallreduce(MPI_IN_PLACE, m->stage + lo, (int)(g->end[b] - lo), MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD, &m->req[g->nr++]);
        g->early += !g->in_reduce;
        any = true;
    }
    if (any && !g->in_reduce) { /* Open MPI progresses inside its calls */
        int done = 0;
        MPI_Testall(g->nr, m->req, &done, MPI_STATUSES_IGNORE);
    }
}

/* RtCtx.grad_ready: called by the train step right after the call that
 * completes parameter k's gradient. */
static void m_grad_ready(RtCtx *ctx, int k)
{
    (void)ctx;
    if (g_dev)
        grad_final(g_dev, k);
}

/* $AMPC_MPI_DEBUG on rank 0, after the first step: the buckets as gradient
 * buffers in the order packed (the kvbucket lines of --dump=program), and
 * how many started before the train step returned. */
static void grads_debug(const MpiDev *m)
{
    const Grads *g = &m->g;
    fprintf(stderr, "mpi: %d buckets (%s), %d started during backward\n", g->nb,
            g->table ? "the program's kvstore buckets" : "--mpi-bucket-mb", g->early);
    for (int b = 0; b < g->nb; b++) {
        size_t lo = b ? g->end[b - 1] : 0;
        fprintf(stderr, "mpi: bucket %d grads=(", b);
        for (int i = 0, n = 0; i < g->nready; i++) {
            int k = g->order[i];
            if (g->pos[k] < g->end[b] && g->pos[k] + g->t[k].n > lo)
                fprintf(stderr, "%s%d", n++ ? "," : "", m->model->params[k].grad);
        }
        fputs(")\n", stderr);
    }
}

/* The step's end: the gradients backward did not announce (a program
 * without the hook) become final now, then every bucket's reduction is
 * waited for and the sums written back, rounded to the gradient's dtype. */
static bool grads_finish(MpiDev *m, const RtDevTensor *b, int n, RtReduceOp op, char *err,
                         size_t errlen)
{
    Grads *g = &m->g;
    g->in_reduce = true;
    for (int k = g->np - 1; k >= 0; k--)
        grad_final(m, k);
    g->in_reduce = false;
    if (!g->open) /* no gradient at all: still one collective, as every rank */
        g->nr = arrive(m);
    wait_all(m, g->nr, "gradient all-reduce");
    float scale = op == RT_REDUCE_MEAN ? 1.0f / (float)g_world : 1.0f;
    for (int k = 0; !g->again && k < g->np; k++)
        if (g->has[k])
            unpack(&g->t[k], 1, m->stage + g->pos[k], g->t[k].n, scale);
    if (g->debug && g->steps == 0 && g_rank == 0)
        grads_debug(m);
    g->steps++;
    memset(g->ready, 0, sizeof *g->ready * (size_t)g->np);
    if (g->table)
        memcpy(g->left, g->size, sizeof *g->left * (size_t)g->nb);
    g->at = 0;
    g->nready = g->started = g->early = g->nr = 0;
    g->open = false;
    /* the stage holds the first pass's gradients, not what the tensors hold
     * now (the passes' sum): reduced again, after the fact */
    bool again = g->again;
    g->again = false;
    return !again || reduce_all(m, b, n, op, err, errlen);
}

/* The model's gradients (the trainer's bucket, by parameter) go the way
 * the train step announced them; any other tensors are reduced at once. */
static bool is_model_grads(const MpiDev *m, const RtDevTensor *b, int n)
{
    const Grads *g = &m->g;
    if (!m->model || n != g->ng)
        return false;
    for (int k = 0, i = 0; k < g->np; k++)
        if (g->has[k] && (b[i].ptr != g->t[k].ptr || b[i].n != g->t[k].n || b[i++].dt != g->t[k].dt))
            return false;
    return true;
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
    if (is_model_grads(m, b, n))
        return grads_finish(m, b, n, op, err, errlen);
    if (m->g.open) {
        snprintf(err, errlen, "mpi: all-reduce of other tensors while the step's gradients are "
                 "being reduced");
        return false;
    }
    return reduce_all(m, b, n, op, err, errlen);
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
static void m_step_begin(RtDevice *d, bool inject_inf)
{
    in(d)->ops->step_begin(in(d), inject_inf);
}
static const RtStepState *m_step_state(RtDevice *d) { return in(d)->ops->step_state(in(d)); }
static struct RtCudaCtx *m_kernel_ctx(RtDevice *d) { return in(d)->ops->kernel_ctx(in(d)); }
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
static void m_ls_read(RtDevice *d, RtDevLsState *st, AmpcLossScaleStep *steps, int64_t from)
{
    in(d)->ops->ls_read(in(d), st, steps, from);
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
/* The CPU device's setup, then the gradient table, and the train step's
 * grad_ready hook (the trainer's context, set up once, before any step). */
static bool m_setup(RtDevice *d, const RtModel *mo, const RtCtx *ctx, char *err, size_t errlen)
{
    MpiDev *m = md(d);
    if (!in(d)->ops->setup(in(d), mo, ctx, err, errlen))
        return false;
    if (m->model == mo)
        return true;
    if (m->model) {
        snprintf(err, errlen, "mpi: the engine serves one model");
        return false;
    }
    m->model = mo;
    if (!grads_setup(m, mo, ctx, err, errlen))
        return false;
    g_dev = m;
    /* the context is the trainer's own (non-const) object; setup is where
     * the device learns it */
    ((RtCtx *)ctx)->grad_ready = m_grad_ready;
    return true;
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
    if (g_dev == m)
        g_dev = NULL;
    grads_free(&m->g);
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
    .step_state = m_step_state,
    .kernel_ctx = m_kernel_ctx,
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
