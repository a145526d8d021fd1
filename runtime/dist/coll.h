/* coll.h - the GPU engines' collectives behind two small tables, and the
 * engines built on them (docs/kvstore.md, "The NCCL engine", "local and
 * device on a GPU").
 *
 * RtCollOps is the transport: NCCL's calls (ncclGetUniqueId,
 * ncclCommInitRank, ncclCommInitAll, ncclGroupStart/End, ncclAllReduce,
 * ncclBroadcast, ncclCommDestroy, ncclGetErrorString) and the three stream
 * operations that order them against the device's compute stream (CUDA
 * streams and events).  Two implementations:
 *   - the real one (runtime/cuda/nccl_transport.c, in libampccuda.a): NCCL resolved
 *     with dlsym from the handle runtime/cuda/libs.c opens (no link-time
 *     NCCL), cudart's streams and events;
 *   - an in-process fake for the tests (tests/runtime/nccl_fake.c, never in
 *     libampcrt.a): threads as ranks, a "stream" is the calling thread
 *     (every call synchronous), sums in rank order, a log of every call,
 *     errors on request.
 * RtCollBoot is how the ranks of one-GPU-per-process runs share NCCL's
 * unique id: rank 0's broadcast over MPI (rt_coll_boot_device: the
 * broadcast of the MPI-wrapped CPU device, runtime/dist/mpi.c, with its
 * hang guard), or the fake's bcast in the tests.
 *
 * The engine (runtime/dist/nccl_engine.c) is written against device.h and these
 * tables only, so it runs around the CPU device in make unit.
 */
#ifndef AMPC_DIST_COLL_H
#define AMPC_DIST_COLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"

/* NCCL's ncclUniqueId: 128 opaque bytes. */
typedef struct {
    char internal[128];
} RtCollId;

/* The element types on the wire: RtDType's three, and the flag's int32. */
typedef enum { RT_COLL_F32 = 0, RT_COLL_F16 = 1, RT_COLL_BF16 = 2, RT_COLL_I32 = 3 } RtCollType;
typedef enum { RT_COLL_SUM, RT_COLL_MAX, RT_COLL_AVG } RtCollOp;

typedef struct RtCollComm RtCollComm; /* ncclComm_t */

/* Every call returns 0 on success, else a code error_string explains.
 * `self` is the table's own state (the fake's world); stream arguments are
 * the transport's streams (cudaStream_t), made by stream_create or given by
 * the device (the compute stream). */
typedef struct RtCollOps {
    const char *name; /* "nccl", "fake" */
    void *self;
    int (*get_unique_id)(void *self, RtCollId *id);
    int (*comm_init_rank)(void *self, RtCollComm **comm, int nranks, const RtCollId *id,
                          int rank);
    int (*comm_init_all)(void *self, RtCollComm **comms, int ndev, const int *devlist);
    int (*group_start)(void *self);
    int (*group_end)(void *self);
    int (*all_reduce)(void *self, const void *send, void *recv, size_t count, RtCollType dt,
                      RtCollOp op, RtCollComm *comm, void *stream);
    int (*broadcast)(void *self, const void *send, void *recv, size_t count, RtCollType dt,
                     int root, RtCollComm *comm, void *stream);
    int (*comm_destroy)(void *self, RtCollComm *comm);
    /* the message for rc returned by `call` (NCCL's or CUDA's string) */
    const char *(*error_string)(void *self, const char *call, int rc);
    /* ---- ordering (CUDA: streams and events; the fake: nothing to do) ---- */
    int (*stream_create)(void *self, int device, void **stream);
    int (*stream_destroy)(void *self, void *stream);
    /* work queued on `waiter` after this call starts after the work queued
     * on `after` before it (an event recorded on after, waited for by
     * waiter; the host does not wait) */
    int (*stream_wait)(void *self, void *waiter, void *after);
    int (*stream_sync)(void *self, void *stream); /* the host waits */
    /* ---- the deadline (docs/kvstore.md, "The NCCL engine's deadline") ---- */
    /* whether the work queued on `stream` is done, without waiting: 0 done,
     * RT_COLL_PENDING not yet, else an error (CUDA's code) */
    int (*stream_query)(void *self, void *stream);
    /* a marker in a stream (a CUDA event): made once, recorded after a
     * bucket's group, queried as stream_query (done once the work queued
     * before its record is) */
    int (*event_create)(void *self, void **event);
    int (*event_destroy)(void *self, void *event);
    int (*event_record)(void *self, void *event, void *stream);
    int (*event_query)(void *self, void *event);
    /* *async: the comm's asynchronous error (ncclCommGetAsyncError: 0 none,
     * NCCL's code when a rank's collective failed); the call's own rc */
    int (*comm_async_error)(void *self, RtCollComm *comm, int *async);
    /* ends the comm's outstanding collectives and frees it (ncclCommAbort) */
    int (*comm_abort)(void *self, RtCollComm *comm);
} RtCollOps;

/* stream_query's "not done yet" (no CUDA error code is negative) */
enum { RT_COLL_PENDING = -1 };

/* The bootstrap: this process's rank among world, and a broadcast of bytes
 * from root to every rank (in place). */
typedef struct {
    int rank, world;
    void *self;
    bool (*bcast)(void *self, void *buf, size_t bytes, int root, char *err, size_t errlen);
} RtCollBoot;

/* The bootstrap over a host device's broadcast (rt_mpi_wrap of the CPU
 * device under mpirun: MPI_Ibcast with the hang guard).  host must be a
 * device whose pointers are host pointers (the CPU device, wrapped). */
RtCollBoot rt_coll_boot_device(RtDevice *host);

/* ---- the real transport (runtime/cuda/nccl_transport.c, in libampccuda.a) -------------------- */

/* NCCL opened through libs.c and every function resolved; NULL with a
 * message naming the library or the missing symbol. */
const RtCollOps *rt_coll_nccl(char *err, size_t errlen);

/* ---- the NCCL engine (runtime/dist/nccl_engine.c) ---------------------------------------- */

/* How the engine reaches the inner device's compute stream (CUDA: its
 * cudaStream_t; the fake: NULL, the calling thread) and its GPU. */
typedef struct {
    void *(*compute_stream)(RtDevice *inner);
    int device; /* the GPU the comm stream is made on; < 0: the current one (the
                 * device the program opened, whose context the comm was made in) */
    double bucket_mb; /* the size rule when the program carries no buckets: a
                       * bucket closes once it holds this many MiB on the wire
                       * (0: one bucket) */
    double timeout_s; /* the deadline of a wait for the step's reductions (the run's
                       * --mpi-timeout); <= 0: 60 s */
} RtNcclConfig;

/* How the engine ends the job when a reduction misses its deadline or NCCL
 * reports an asynchronous error, after ncclCommAbort: msg is the message
 * ("nccl: rank R: step S: ... did not complete within T s ...").  The
 * default prints it and exits through rt_mpi_finish(1) (MPI_Abort ends
 * every rank); a test installs one that records it and returns (the engine
 * then fails the call).  NULL: the default. */
void rt_nccl_set_end_job(void (*end_job)(const char *msg));

/* One GPU per process: rank 0 gets the unique id, boot broadcasts it, every
 * rank calls comm_init_rank(world, id, rank).  False with a message naming
 * the call, file:line and the transport's error string. */
bool rt_nccl_bootstrap(const RtCollOps *t, const RtCollBoot *boot, RtCollComm **comm, char *err,
                       size_t errlen);
/* Several GPUs in one process: comm_init_all over devlist (one comm each,
 * rank i = devlist[i]); each rank is then driven by its own thread. */
bool rt_nccl_init_all(const RtCollOps *t, int ndev, const int *devlist, RtCollComm **comms,
                      char *err, size_t errlen);

/* The device of one rank: inner with the gradients all-reduced in buckets
 * during backward (RtCtx.grad_ready), the finite flag reduced (max), the
 * broadcast through NCCL.  The comm becomes the device's (destroyed at
 * close).  NULL with a message (inner is left open then). */
RtDevice *rt_nccl_wrap(RtDevice *inner, const RtCollOps *t, RtCollComm *comm, int rank,
                       int world, const RtNcclConfig *c, char *err, size_t errlen);

/* Whether d is an NCCL engine's device (rt_nccl_wrap). */
bool rt_nccl_is(const RtDevice *d);
/* The start-up check's exchange through the engine (rankcheck.h's
 * RtGatherFn; self: the device): an all-gather of bytes (a multiple of 4)
 * over the comm, within the run's deadline.  False with a message. */
bool rt_nccl_allgather(void *self, const void *mine, void *all, size_t bytes, char *err,
                       size_t errlen);

/* What the engine did in its last step (the tests read it). */
typedef struct {
    int nbuckets;          /* buckets of the last step */
    int launched_early;    /* of those, launched during backward (by grad_ready) */
    int64_t steps;
    bool program_buckets;  /* the program's kvstore buckets (else the size rule) */
    int64_t host_waits;    /* steps that waited for the watchdog to let go of a slot (the
                              device WATCH_SLOTS steps behind); 0 in the steady state */
} RtNcclStats;
void rt_nccl_stats(RtDevice *d, RtNcclStats *st);
/* Bucket b of the last step as parameter indices, in launch order; the
 * count (at most cap written). */
int rt_nccl_bucket_params(RtDevice *d, int b, int *params, int cap);

/* ---- local and device (runtime/dist/kvplace.c) ------------------------------------- */

/* The placements (MXNet's names; the kvstore pass's KvPlacement + 1, 0 for
 * a program the pass did not place). */
typedef enum { RT_KV_NONE = 0, RT_KV_LOCAL, RT_KV_DEVICE, RT_KV_NCCL, RT_KV_DIST_SYNC } RtKvPlace;
const char *rt_kv_place_name(int place);

/* `local`: the gradients copied to host memory (rt_dev_host_alloc: pinned on
 * CUDA), the CPU's fused optimizer (optim.c) on host masters and state,
 * the weights copied back.  NULL with a message (inner is left open). */
RtDevice *rt_kv_local_wrap(RtDevice *inner, char *err, size_t errlen);
typedef struct {
    uint64_t d2h_bytes, h2d_bytes; /* copies made by the placement, all steps */
    int64_t updates;               /* host updates applied */
} RtKvLocalStats;
void rt_kv_local_stats(RtDevice *d, RtKvLocalStats *st);

/* The device for a placement on one process's devices: RT_KV_LOCAL wraps
 * with local; RT_KV_DEVICE on one device, RT_KV_NONE: inner itself (the
 * device's own fused update); others: an error (nccl and dist_sync need
 * rt_nccl_wrap's comm).  NULL with a message (inner is closed then). */
RtDevice *rt_kv_wrap(RtDevice *inner, int place, char *err, size_t errlen);

/* The GPU of this process among the ranks on its machine (Open MPI's
 * OMPI_COMM_WORLD_LOCAL_RANK, else MPI_LOCALRANKID, SLURM_LOCALID; 0). */
int rt_nccl_local_device(void);

/* The one call a program on a GPU makes after opening its device (the
 * trainer's hook; runtime/dist/nccl_engine.c): `local`, `device` and an unplaced
 * program as rt_kv_wrap; `nccl` and `dist_sync` in a process of an mpirun
 * job of more than one rank: the transport (coll_fn: rt_coll_nccl in a CUDA
 * program), the bootstrap over MPI (rt_coll_boot_device of the MPI-wrapped
 * CPU device, closed afterwards) and rt_nccl_wrap with the device's compute
 * stream, on GPU rt_nccl_local_device(); in a single process they are the
 * device itself (one GPU: nothing to reduce).  NULL with a message (gpu is
 * closed then). */
RtDevice *rt_kv_open(RtDevice *gpu, int place,
                     const RtCollOps *(*coll_fn)(char *err, size_t errlen),
                     void *(*compute_stream)(RtDevice *gpu), double bucket_mb, char *err,
                     size_t errlen);

#endif
