/* nccl_transport.c - the real transport of the NCCL engine (runtime/dist/coll.h): NCCL's
 * functions resolved with dlsym from the handle libs.c opens (no link-time
 * NCCL: a program runs without NCCL until it needs it), and cudart's
 * streams and events (the program links the static cudart).  In
 * libampccuda.a.
 *
 * NOT RUN: it compiles and links here; no machine of this project has had
 * two GPUs (docs/kvstore.md, "The NCCL engine").
 *
 * NCCL's ABI is declared here from nccl.h (2.x; the values are stable
 * since 2.0, bfloat16 since 2.10, ncclAvg since 2.10); where the toolkit's
 * nccl.h is on the include path the declarations are checked against it. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda/libs.h"
#include "dist/coll.h"

typedef struct ncclComm *AmpcNcclComm;
typedef struct {
    char internal[128];
} AmpcNcclId;
typedef int AmpcNcclResult; /* ncclSuccess = 0 */
enum { NCCL_INT32 = 2, NCCL_FLOAT16 = 6, NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9 };
enum { NCCL_SUM = 0, NCCL_MAX = 2, NCCL_AVG = 4 };

#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
_Static_assert((int)ncclInt32 == NCCL_INT32 && (int)ncclFloat16 == NCCL_FLOAT16 &&
               (int)ncclFloat32 == NCCL_FLOAT32 && (int)ncclBfloat16 == NCCL_BFLOAT16,
               "nccl.h's data types");
_Static_assert((int)ncclSum == NCCL_SUM && (int)ncclMax == NCCL_MAX && (int)ncclAvg == NCCL_AVG,
               "nccl.h's reductions");
_Static_assert(sizeof(ncclUniqueId) == sizeof(AmpcNcclId), "ncclUniqueId is 128 bytes");
_Static_assert(sizeof(ncclResult_t) == sizeof(AmpcNcclResult), "ncclResult_t is an int");
#endif
#endif
_Static_assert(sizeof(AmpcNcclId) == sizeof(RtCollId), "the unique id is 128 bytes");

/* The functions, by name (the order of the table below). */
typedef struct {
    AmpcNcclResult (*get_unique_id)(AmpcNcclId *);
    AmpcNcclResult (*comm_init_rank)(AmpcNcclComm *, int, AmpcNcclId, int);
    AmpcNcclResult (*comm_init_all)(AmpcNcclComm *, int, const int *);
    AmpcNcclResult (*group_start)(void);
    AmpcNcclResult (*group_end)(void);
    AmpcNcclResult (*all_reduce)(const void *, void *, size_t, int, int, AmpcNcclComm, cudaStream_t);
    AmpcNcclResult (*broadcast)(const void *, void *, size_t, int, int, AmpcNcclComm, cudaStream_t);
    AmpcNcclResult (*comm_destroy)(AmpcNcclComm);
    const char *(*get_error_string)(AmpcNcclResult);
    AmpcNcclResult (*comm_abort)(AmpcNcclComm);
    AmpcNcclResult (*comm_get_async_error)(AmpcNcclComm, AmpcNcclResult *);
} NcclFns;

static NcclFns fns;

static const int type_of[] = {[RT_COLL_F32] = NCCL_FLOAT32, [RT_COLL_F16] = NCCL_FLOAT16,
                              [RT_COLL_BF16] = NCCL_BFLOAT16, [RT_COLL_I32] = NCCL_INT32};
static const int op_of[] = {[RT_COLL_SUM] = NCCL_SUM, [RT_COLL_MAX] = NCCL_MAX,
                            [RT_COLL_AVG] = NCCL_AVG};

static int r_get_unique_id(void *self, RtCollId *id)
{
    (void)self;
    AmpcNcclId u;
    int rc = fns.get_unique_id(&u);
    memcpy(id, &u, sizeof u);
    return rc;
}

static int r_comm_init_rank(void *self, RtCollComm **comm, int nranks, const RtCollId *id,
                            int rank)
{
    (void)self;
    AmpcNcclId u;
    memcpy(&u, id, sizeof u);
    return fns.comm_init_rank((AmpcNcclComm *)comm, nranks, u, rank);
}

static int r_comm_init_all(void *self, RtCollComm **comms, int ndev, const int *devlist)
{
    (void)self;
    return fns.comm_init_all((AmpcNcclComm *)comms, ndev, devlist);
}

static int r_group_start(void *self)
{
    (void)self;
    return fns.group_start();
}

static int r_group_end(void *self)
{
    (void)self;
    return fns.group_end();
}

static int r_all_reduce(void *self, const void *send, void *recv, size_t count, RtCollType dt,
                        RtCollOp op, RtCollComm *comm, void *stream)
{
    (void)self;
    if ((unsigned)dt > RT_COLL_I32 || (unsigned)op > RT_COLL_AVG)
        return 4; /* ncclInvalidArgument */
    return fns.all_reduce(send, recv, count, type_of[dt], op_of[op], (AmpcNcclComm)comm,
                          (cudaStream_t)stream);
}

static int r_broadcast(void *self, const void *send, void *recv, size_t count, RtCollType dt,
                       int root, RtCollComm *comm, void *stream)
{
    (void)self;
    if ((unsigned)dt > RT_COLL_I32)
        return 4;
    return fns.broadcast(send, recv, count, type_of[dt], root, (AmpcNcclComm)comm,
                         (cudaStream_t)stream);
}

static int r_comm_destroy(void *self, RtCollComm *comm)
{
    (void)self;
    return fns.comm_destroy((AmpcNcclComm)comm);
}

/* NCCL's string for an NCCL call, CUDA's for a CUDA call */
static const char *r_error_string(void *self, const char *call, int rc)
{
    (void)self;
    if (strncmp(call, "cuda", 4) == 0)
        return cudaGetErrorString((cudaError_t)rc);
    return fns.get_error_string(rc);
}

static int r_stream_create(void *self, int device, void **stream)
{
    (void)self;
    int rc = device >= 0 ? cudaSetDevice(device) : 0; /* < 0: the current device */
    if (rc)
        return rc;
    /* the comm stream at the highest priority, so that a bucket's
     * all-reduce is not queued behind backward's kernels */
    int lo = 0, hi = 0;
    if ((rc = cudaDeviceGetStreamPriorityRange(&lo, &hi)) != 0)
        return rc;
    return cudaStreamCreateWithPriority((cudaStream_t *)stream, cudaStreamNonBlocking, hi);
}

static int r_stream_destroy(void *self, void *stream)
{
    (void)self;
    return cudaStreamDestroy((cudaStream_t)stream);
}

/* An event recorded on after, waited for by waiter; the event is released
 * at once (CUDA keeps it until the wait is done). */
static int r_stream_wait(void *self, void *waiter, void *after)
{
    (void)self;
    cudaEvent_t e;
    int rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (rc)
        return rc;
    rc = cudaEventRecord(e, (cudaStream_t)after);
    if (!rc)
        rc = cudaStreamWaitEvent((cudaStream_t)waiter, e, 0);
    int rd = cudaEventDestroy(e);
    return rc ? rc : rd;
}

static int r_stream_sync(void *self, void *stream)
{
    (void)self;
    return cudaStreamSynchronize((cudaStream_t)stream);
}

/* cudaErrorNotReady is RT_COLL_PENDING; the runtime may keep it as the last
 * error, which the next launch check would report as fatal: cleared. */
static int r_stream_query(void *self, void *stream)
{
    (void)self;
    cudaError_t rc = cudaStreamQuery((cudaStream_t)stream);
    if (rc == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return RT_COLL_PENDING;
    }
    return (int)rc;
}

static int r_event_create(void *self, void **event)
{
    (void)self;
    return cudaEventCreateWithFlags((cudaEvent_t *)event, cudaEventDisableTiming);
}

static int r_event_destroy(void *self, void *event)
{
    (void)self;
    return cudaEventDestroy((cudaEvent_t)event);
}

static int r_event_record(void *self, void *event, void *stream)
{
    (void)self;
    return cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
}

/* as r_stream_query */
static int r_event_query(void *self, void *event)
{
    (void)self;
    cudaError_t rc = cudaEventQuery((cudaEvent_t)event);
    if (rc == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return RT_COLL_PENDING;
    }
    return (int)rc;
}

static int r_comm_async_error(void *self, RtCollComm *comm, int *async)
{
    (void)self;
    AmpcNcclResult a = 0;
    int rc = fns.comm_get_async_error((AmpcNcclComm)comm, &a);
    *async = rc ? 0 : a;
    return rc;
}

static int r_comm_abort(void *self, RtCollComm *comm)
{
    (void)self;
    return fns.comm_abort((AmpcNcclComm)comm);
}

static const RtCollOps real_ops = {
    .name = "nccl", .self = NULL, .get_unique_id = r_get_unique_id,
    .comm_init_rank = r_comm_init_rank, .comm_init_all = r_comm_init_all,
    .group_start = r_group_start, .group_end = r_group_end, .all_reduce = r_all_reduce,
    .broadcast = r_broadcast, .comm_destroy = r_comm_destroy, .error_string = r_error_string,
    .stream_create = r_stream_create, .stream_destroy = r_stream_destroy,
    .stream_wait = r_stream_wait, .stream_sync = r_stream_sync,
    .stream_query = r_stream_query, .event_create = r_event_create,
    .event_destroy = r_event_destroy, .event_record = r_event_record,
    .event_query = r_event_query, .comm_async_error = r_comm_async_error,
    .comm_abort = r_comm_abort,
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static bool resolved;

const RtCollOps *rt_coll_nccl(char *err, size_t errlen)
{
    static const char *const names[] = {
        "ncclGetUniqueId", "ncclCommInitRank", "ncclCommInitAll", "ncclGroupStart",
        "ncclGroupEnd",    "ncclAllReduce",    "ncclBroadcast",   "ncclCommDestroy",
        "ncclGetErrorString", "ncclCommAbort",    "ncclCommGetAsyncError",
    };
    pthread_mutex_lock(&mu);
    bool ok = resolved;
    void *h = ok ? NULL : ampc_lib_open(AMPC_LIB_NCCL, err, errlen);
    if (!ok && h) {
        NcclFns f;
        void **slot = (void **)&f;
        _Static_assert(sizeof f == sizeof names / sizeof names[0] * sizeof(void *),
                       "one name per function");
        ok = true;
        for (size_t i = 0; ok && i < sizeof names / sizeof names[0]; i++) {
            void *p = dlsym(h, names[i]);
            if (!p) {
                snprintf(err, errlen, "%s (from %s) has no %s: NCCL 2.10 or later is needed",
                         ampc_lib_name(AMPC_LIB_NCCL), ampc_lib_where(AMPC_LIB_NCCL), names[i]);
                ok = false;
            }
            memcpy(&slot[i], &p, sizeof p); /* a data pointer into a function pointer's slot */
        }
        if (ok) {
            fns = f;
            resolved = true;
        }
    }
    pthread_mutex_unlock(&mu);
    return ok ? &real_ops : NULL;
}
