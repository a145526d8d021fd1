/* nccl_fake.c - the in-process fake of the collectives' transport (coll.h):
 * threads as ranks, for the tests of the NCCL engine (tests/runtime/
 * test_nccl_fake.c).  Each collective is a rendezvous: every rank posts its
 * buffers, the last to arrive computes the result for all, in rank order,
 * and wakes the others.  A sum of 16-bit values is rounded to the dtype
 * after every addition (rank 0's + rank 1's, rounded, + rank 2's, ...), the
 * partial sums of a ring all-reduce on a 16-bit wire; for two ranks that is
 * one addition in fp32 rounded once.  "Streams" are the calling thread, so
 * every call completes before it returns; inside a group (group_start ..
 * group_end) the calls are queued and run at group_end, in order, as
 * NCCL's.  Every call that runs is logged ("r1 ncclAllReduce n=37 f16
 * sum"), per rank in call order.  For the engine's deadline a rank can be
 * made to stall (its collectives return at once but never complete: its
 * stream_query says RT_COLL_PENDING until comm_abort) and a comm to report
 * an asynchronous error. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "nccl_fake.h"
#include "rt.h"

enum { K_INIT, K_ALLREDUCE, K_BCAST, K_BOOT };

typedef struct {
    int kind;
    const void *send;
    void *recv;
    size_t count;
    int dt, op, root;
    RtCollId id;
} FakeOp;

struct RtCollComm {
    RtCollFake *f;
    int rank, nranks;
};

struct RtCollFake {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    RtCollOps ops;
    uint64_t gen;
    int arrived, result;
    FakeOp *slot;
    int ids;
    char fail_call[64];
    int fail_rank, fail_rc;
    char *log;
    size_t len, cap;
    struct FakeBoot *boot; /* rank r's bootstrap state */
    bool *stalled;         /* rank r's collectives never complete (a peer stalled) */
    bool *pending;         /* rank r has such a collective outstanding */
    int *async;            /* rank r's comm's asynchronous error */
};

/* The calling thread's rank (set by its comm calls) and its open group. */
static _Thread_local int t_rank = -1;
static _Thread_local int t_depth;
static _Thread_local FakeOp *t_q;
static _Thread_local RtCollComm **t_qc;
static _Thread_local int t_qn, t_qcap;

static void vlog(RtCollFake *f, const char *fmt, va_list ap)
{
    char line[512];
    int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n < 0)
        return;
    size_t k = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    pthread_mutex_lock(&f->mu);
    if (f->len + k + 2 > f->cap) {
        size_t cap = (f->cap + k + 2) * 2;
        char *l = realloc(f->log, cap);
        if (!l) {
            pthread_mutex_unlock(&f->mu);
            return;
        }
        f->log = l;
        f->cap = cap;
    }
    memcpy(f->log + f->len, line, k);
    f->len += k;
    f->log[f->len++] = '\n';
    f->log[f->len] = 0;
    pthread_mutex_unlock(&f->mu);
}

void rt_coll_fake_log(RtCollFake *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(f, fmt, ap);
    va_end(ap);
}

const char *rt_coll_fake_log_text(RtCollFake *f) { return f->log ? f->log : ""; }
int rt_coll_fake_ids_made(const RtCollFake *f) { return f->ids; }

void rt_coll_fake_fail(RtCollFake *f, const char *call, int rank, int rc)
{
    pthread_mutex_lock(&f->mu);
    snprintf(f->fail_call, sizeof f->fail_call, "%s", call);
    f->fail_rank = rank;
    f->fail_rc = rc;
    pthread_mutex_unlock(&f->mu);
}

/* rc when `call` by `rank` is the one to fail (once), else 0 */
static int failing(RtCollFake *f, const char *call, int rank)
{
    pthread_mutex_lock(&f->mu);
    int rc = 0;
    if (f->fail_call[0] && strcmp(f->fail_call, call) == 0 &&
        (f->fail_rank < 0 || f->fail_rank == rank)) {
        rc = f->fail_rc;
        f->fail_call[0] = 0;
    }
    pthread_mutex_unlock(&f->mu);
    if (rc)
        rt_coll_fake_log(f, "r%d %s -> error %d", rank, call, rc);
    return rc;
}

static const char *dt_name(int dt)
{
    static const char *const n[] = {"f32", "f16", "bf16", "i32"};
    return dt >= 0 && dt <= 3 ? n[dt] : "?";
}

static size_t dt_size(int dt) { return dt == RT_COLL_F16 || dt == RT_COLL_BF16 ? 2 : 4; }

static float get(const void *p, size_t i, int dt)
{
    float v;
    rt_to_f32(&v, (const char *)p + i * dt_size(dt), 1, (RtDType)dt);
    return v;
}

/* One element of rank order's reduction (rounded to dt after each step). */
static void reduce_elem(RtCollFake *f, size_t i)
{
    const FakeOp *s = f->slot;
    int dt = s[0].dt;
    if (dt == RT_COLL_I32) {
        int32_t acc = ((const int32_t *)s[0].send)[i];
        for (int r = 1; r < f->n; r++) {
            int32_t v = ((const int32_t *)s[r].send)[i];
            acc = s[0].op == RT_COLL_MAX ? (v > acc ? v : acc) : acc + v;
        }
        for (int r = 0; r < f->n; r++)
            ((int32_t *)s[r].recv)[i] = acc;
        return;
    }
    float acc = get(s[0].send, i, dt);
    for (int r = 1; r < f->n; r++) {
        float v = get(s[r].send, i, dt);
        acc = s[0].op == RT_COLL_MAX ? (v > acc ? v : acc) : acc + v;
        char tmp[4];
        rt_from_f32(tmp, &acc, 1, (RtDType)dt); /* the wire's partial sum */
        acc = get(tmp, 0, dt);
    }
    if (s[0].op == RT_COLL_AVG)
        acc /= (float)f->n;
    for (int r = 0; r < f->n; r++)
        rt_from_f32((char *)s[r].recv + i * dt_size(dt), &acc, 1, (RtDType)dt);
}

/* The last rank to arrive: checks that the ranks agree, then runs it. */
static int compute(RtCollFake *f)
{
    const FakeOp *s = f->slot;
    for (int r = 1; r < f->n; r++)
        if (s[r].kind != s[0].kind || s[r].count != s[0].count || s[r].dt != s[0].dt ||
            s[r].op != s[0].op || s[r].root != s[0].root)
            return 5; /* ncclInvalidUsage: the ranks called different collectives */
    switch (s[0].kind) {
    case K_INIT:
        for (int r = 1; r < f->n; r++)
            if (memcmp(&s[r].id, &s[0].id, sizeof s[0].id) != 0)
                return 5;
        return 0;
    case K_ALLREDUCE:
        for (size_t i = 0; i < s[0].count; i++)
            reduce_elem(f, i);
        return 0;
    case K_BCAST:
    case K_BOOT: {
        size_t bytes = s[0].count * (s[0].kind == K_BOOT ? 1 : dt_size(s[0].dt));
        for (int r = 0; r < f->n; r++)
            if (r != s[0].root)
                memcpy(s[r].recv, s[s[0].root].send, bytes);
        if (s[s[0].root].recv != s[s[0].root].send)
            memmove(s[s[0].root].recv, s[s[0].root].send, bytes);
        return 0;
    }
    }
    return 3;
}

/* Posts rank's op and waits for every rank's; the collective's result. */
static int rendezvous(RtCollFake *f, int rank, const FakeOp *op)
{
    pthread_mutex_lock(&f->mu);
    f->slot[rank] = *op;
    uint64_t g = f->gen;
    int rc;
    if (++f->arrived == f->n) {
        f->result = compute(f);
        f->arrived = 0;
        f->gen++;
        pthread_cond_broadcast(&f->cv);
    } else {
        while (f->gen == g)
            pthread_cond_wait(&f->cv, &f->mu);
    }
    rc = f->result;
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static const char *op_name(int op)
{
    return op == RT_COLL_SUM ? "sum" : op == RT_COLL_MAX ? "max" : "avg";
}

void rt_coll_fake_stall(RtCollFake *f, int rank)
{
    pthread_mutex_lock(&f->mu);
    if (rank >= 0 && rank < f->n)
        f->stalled[rank] = true;
    pthread_mutex_unlock(&f->mu);
}

void rt_coll_fake_async_error(RtCollFake *f, int rank, int rc)
{
    pthread_mutex_lock(&f->mu);
    if (rank >= 0 && rank < f->n)
        f->async[rank] = rc;
    pthread_mutex_unlock(&f->mu);
}

/* A stalled rank's collective: queued, never done (no rendezvous, the
 * buffers untouched). */
static bool stalls(RtCollFake *f, int rank)
{
    pthread_mutex_lock(&f->mu);
    bool st = f->stalled[rank];
    if (st)
        f->pending[rank] = true;
    pthread_mutex_unlock(&f->mu);
    return st;
}

static int run_op(RtCollComm *c, const FakeOp *op)
{
    RtCollFake *f = c->f;
    if ((op->kind == K_ALLREDUCE || op->kind == K_BCAST) && stalls(f, c->rank)) {
        rt_coll_fake_log(f, "r%d %s n=%zu -> never completes", c->rank,
                         op->kind == K_ALLREDUCE ? "ncclAllReduce" : "ncclBroadcast", op->count);
        return 0;
    }
    int rc = rendezvous(f, c->rank, op);
    if (op->kind == K_ALLREDUCE)
        rt_coll_fake_log(f, "r%d ncclAllReduce n=%zu %s %s%s", c->rank, op->count,
                         dt_name(op->dt), op_name(op->op), rc ? " -> mismatch" : "");
    else
        rt_coll_fake_log(f, "r%d ncclBroadcast n=%zu %s root=%d", c->rank, op->count,
                         dt_name(op->dt), op->root);
    return rc;
}

/* ---- the table ------------------------------------------------------------------- */

static int f_get_unique_id(void *self, RtCollId *id)
{
    RtCollFake *f = self;
    int rc = failing(f, "ncclGetUniqueId", t_rank);
    if (rc)
        return rc;
    pthread_mutex_lock(&f->mu);
    int k = ++f->ids;
    pthread_mutex_unlock(&f->mu);
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "fake-nccl-id-%d", k);
    for (size_t i = 32; i < sizeof id->internal; i++)
        id->internal[i] = (char)(i * 7 + (size_t)k);
    rt_coll_fake_log(f, "r%d ncclGetUniqueId %s", t_rank, id->internal);
    return 0;
}

static int f_comm_init_rank(void *self, RtCollComm **comm, int nranks, const RtCollId *id,
                            int rank)
{
    RtCollFake *f = self;
    t_rank = rank;
    int rc = failing(f, "ncclCommInitRank", rank);
    if (rc)
        return rc;
    if (nranks != f->n || rank < 0 || rank >= nranks)
        return 4; /* ncclInvalidArgument */
    FakeOp op = {.kind = K_INIT, .id = *id};
    if ((rc = rendezvous(f, rank, &op)) != 0)
        return rc;
    RtCollComm *c = calloc(1, sizeof *c);
    if (!c)
        return 2;
    *c = (RtCollComm){f, rank, nranks};
    *comm = c;
    rt_coll_fake_log(f, "r%d ncclCommInitRank %d/%d id=%.16s", rank, rank, nranks, id->internal);
    return 0;
}

static int f_comm_init_all(void *self, RtCollComm **comms, int ndev, const int *devlist)
{
    RtCollFake *f = self;
    int rc = failing(f, "ncclCommInitAll", -1);
    if (rc)
        return rc;
    if (ndev != f->n)
        return 4;
    for (int i = 0; i < ndev; i++) {
        if (!(comms[i] = calloc(1, sizeof *comms[i]))) {
            while (i-- > 0)
                free(comms[i]);
            return 2;
        }
        *comms[i] = (RtCollComm){f, i, ndev};
    }
    rt_coll_fake_log(f, "ncclCommInitAll ndev=%d devlist[0]=%d", ndev, devlist ? devlist[0] : 0);
    return 0;
}

static int f_group_start(void *self)
{
    int rc = failing(self, "ncclGroupStart", t_rank);
    if (!rc)
        t_depth++;
    return rc;
}

static int f_group_end(void *self)
{
    RtCollFake *f = self;
    int rc = failing(f, "ncclGroupEnd", t_rank);
    if (rc || t_depth == 0)
        return rc ? rc : 5;
    if (--t_depth > 0)
        return 0;
    /* the group's calls, in order (each a rendezvous with the other ranks') */
    int n = t_qn;
    t_qn = 0;
    rt_coll_fake_log(f, "r%d ncclGroupEnd ops=%d", t_rank, n);
    for (int i = 0; i < n && !rc; i++)
        rc = run_op(t_qc[i], &t_q[i]);
    /* the queue is the thread's: freed here, since its thread may end next */
    free(t_q);
    free(t_qc);
    t_q = NULL;
    t_qc = NULL;
    t_qcap = 0;
    return rc;
}

static int submit(RtCollComm *c, const FakeOp *op)
{
    t_rank = c->rank;
    if (t_depth == 0)
        return run_op(c, op);
    if (t_qn == t_qcap) {
        int cap = t_qcap ? 2 * t_qcap : 16;
        FakeOp *q = realloc(t_q, sizeof *q * (size_t)cap);
        if (!q)
            return 2;
        t_q = q;
        RtCollComm **qc = realloc(t_qc, sizeof *qc * (size_t)cap);
        if (!qc)
            return 2;
        t_qc = qc;
        t_qcap = cap;
    }
    t_qc[t_qn] = c;
    t_q[t_qn++] = *op;
    return 0;
}

static int f_all_reduce(void *self, const void *send, void *recv, size_t count, RtCollType dt,
                        RtCollOp op, RtCollComm *comm, void *stream)
{
    (void)stream;
    int rc = failing(self, "ncclAllReduce", comm->rank);
    if (rc)
        return rc;
    FakeOp o = {.kind = K_ALLREDUCE, .send = send, .recv = recv, .count = count, .dt = (int)dt,
                .op = (int)op};
    return submit(comm, &o);
}

static int f_broadcast(void *self, const void *send, void *recv, size_t count, RtCollType dt,
                       int root, RtCollComm *comm, void *stream)
{
    (void)stream;
    int rc = failing(self, "ncclBroadcast", comm->rank);
    if (rc)
        return rc;
    if (root < 0 || root >= comm->nranks)
        return 4;
    FakeOp o = {.kind = K_BCAST, .send = send, .recv = recv, .count = count, .dt = (int)dt,
                .root = root};
    return submit(comm, &o);
}

static int f_comm_destroy(void *self, RtCollComm *comm)
{
    int rc = failing(self, "ncclCommDestroy", comm ? comm->rank : -1);
    if (!rc)
        free(comm);
    return rc;
}

/* NCCL's own strings (ncclGetErrorString, NCCL 2.x) */
static const char *f_error_string(void *self, const char *call, int rc)
{
    (void)self, (void)call;
    static const char *const s[] = {
        "no error",
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "internal error - please report this issue to the NCCL developers",
        "invalid argument (run with NCCL_DEBUG=WARN for details)",
        "invalid usage (run with NCCL_DEBUG=WARN for details)",
        "remote process exited or there was a network error",
        "NCCL operation in progress",
    };
    return rc >= 0 && rc <= 7 ? s[rc] : "unknown result code";
}

static char fake_stream; /* a non-NULL stream; the work runs on the calling thread */

static int f_stream_create(void *self, int device, void **stream)
{
    (void)device;
    int rc = failing(self, "cudaStreamCreateWithFlags", t_rank);
    if (!rc)
        *stream = &fake_stream;
    return rc;
}

static int f_stream_destroy(void *self, void *stream)
{
    (void)self, (void)stream;
    return 0;
}

static int f_stream_wait(void *self, void *waiter, void *after)
{
    RtCollFake *f = self;
    int rc = failing(f, "cudaStreamWaitEvent", t_rank);
    if (!rc)
        rt_coll_fake_log(f, "r%d wait %s after %s", t_rank,
                         waiter == &fake_stream ? "comm" : "compute",
                         after == &fake_stream ? "comm" : "compute");
    return rc;
}

static int f_stream_sync(void *self, void *stream)
{
    (void)stream;
    return failing(self, "cudaStreamSynchronize", t_rank);
}

/* The calling rank's streams: pending once a stalled collective was queued
 * (the fake cannot tell its streams apart: the work is the thread's). */
static int f_stream_query(void *self, void *stream)
{
    RtCollFake *f = self;
    (void)stream;
    int rc = failing(f, "cudaStreamQuery", t_rank);
    if (rc || t_rank < 0 || t_rank >= f->n)
        return rc;
    pthread_mutex_lock(&f->mu);
    bool p = f->pending[t_rank];
    pthread_mutex_unlock(&f->mu);
    return p ? RT_COLL_PENDING : 0;
}

/* An event: whether its rank had a stalled collective queued when it was
 * recorded (then pending until comm_abort). */
typedef struct {
    int rank;
    bool stalled;
} FakeEvent;

static int f_event_create(void *self, void **event)
{
    int rc = failing(self, "cudaEventCreateWithFlags", t_rank);
    FakeEvent *e = rc ? NULL : calloc(1, sizeof *e);
    if (!rc && !e)
        return 2; /* cudaErrorMemoryAllocation */
    *event = e;
    return rc;
}

static int f_event_destroy(void *self, void *event)
{
    (void)self;
    free(event);
    return 0;
}

static int f_event_record(void *self, void *event, void *stream)
{
    RtCollFake *f = self;
    FakeEvent *e = event;
    (void)stream;
    int rc = failing(f, "cudaEventRecord", t_rank);
    if (rc || t_rank < 0 || t_rank >= f->n)
        return rc;
    pthread_mutex_lock(&f->mu);
    e->rank = t_rank;
    e->stalled = f->pending[t_rank];
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static int f_event_query(void *self, void *event)
{
    RtCollFake *f = self;
    FakeEvent *e = event;
    int rc = failing(f, "cudaEventQuery", t_rank);
    if (rc)
        return rc;
    pthread_mutex_lock(&f->mu);
    bool p = e->stalled && f->pending[e->rank];
    pthread_mutex_unlock(&f->mu);
    return p ? RT_COLL_PENDING : 0;
}

static int f_comm_async_error(void *self, RtCollComm *comm, int *async)
{
    RtCollFake *f = self;
    int rc = failing(f, "ncclCommGetAsyncError", comm->rank);
    pthread_mutex_lock(&f->mu);
    *async = rc ? 0 : f->async[comm->rank];
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int f_comm_abort(void *self, RtCollComm *comm)
{
    RtCollFake *f = self;
    rt_coll_fake_log(f, "r%d ncclCommAbort", comm->rank);
    pthread_mutex_lock(&f->mu);
    f->pending[comm->rank] = false; /* the outstanding collectives end */
    pthread_mutex_unlock(&f->mu);
    free(comm);
    return 0;
}

/* ---- the bootstrap ------------------------------------------------------------------ */

typedef struct FakeBoot {
    RtCollFake *f;
    int rank;
} FakeBoot;

static bool f_bcast(void *self, void *buf, size_t bytes, int root, char *err, size_t errlen)
{
    FakeBoot *b = self;
    FakeOp o = {.kind = K_BOOT, .send = buf, .recv = buf, .count = bytes, .root = root};
    int rc = rendezvous(b->f, b->rank, &o);
    rt_coll_fake_log(b->f, "r%d MPI_Bcast %zu bytes root=%d", b->rank, bytes, root);
    if (rc)
        snprintf(err, errlen, "fake MPI_Bcast: the ranks disagree");
    return rc == 0;
}

RtCollBoot rt_coll_fake_boot(RtCollFake *f, int rank)
{
    FakeBoot *b = &f->boot[rank < 0 || rank >= f->n ? 0 : rank];
    t_rank = rank; /* called on the rank's own thread */
    b->f = f;
    b->rank = rank;
    return (RtCollBoot){rank, f->n, b, f_bcast};
}

RtCollFake *rt_coll_fake_new(int nranks)
{
    if (nranks < 1)
        return NULL;
    RtCollFake *f = calloc(1, sizeof *f);
    if (!f || !(f->slot = calloc((size_t)nranks, sizeof *f->slot)) ||
        !(f->boot = calloc((size_t)nranks, sizeof *f->boot)) ||
        !(f->stalled = calloc((size_t)nranks, sizeof *f->stalled)) ||
        !(f->pending = calloc((size_t)nranks, sizeof *f->pending)) ||
        !(f->async = calloc((size_t)nranks, sizeof *f->async))) {
        if (f) {
            free(f->slot);
            free(f->boot);
            free(f->stalled);
            free(f->pending);
        }
        free(f);
        return NULL;
    }
    f->n = nranks;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->ops = (RtCollOps){
        .name = "fake", .self = f, .get_unique_id = f_get_unique_id,
        .comm_init_rank = f_comm_init_rank, .comm_init_all = f_comm_init_all,
        .group_start = f_group_start, .group_end = f_group_end, .all_reduce = f_all_reduce,
        .broadcast = f_broadcast, .comm_destroy = f_comm_destroy,
        .error_string = f_error_string, .stream_create = f_stream_create,
        .stream_destroy = f_stream_destroy, .stream_wait = f_stream_wait,
        .stream_sync = f_stream_sync, .stream_query = f_stream_query,
        .event_create = f_event_create, .event_destroy = f_event_destroy,
        .event_record = f_event_record, .event_query = f_event_query,
        .comm_async_error = f_comm_async_error, .comm_abort = f_comm_abort,
    };
    return f;
}

const RtCollOps *rt_coll_fake_ops(RtCollFake *f) { return &f->ops; }

void rt_coll_fake_free(RtCollFake *f)
{
    if (!f)
        return;
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f->slot);
    free(f->boot);
    free(f->stalled);
    free(f->pending);
    free(f->async);
    free(f->log);
    free(f);
}
