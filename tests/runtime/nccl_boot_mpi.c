/* nccl_boot_mpi.c - the NCCL engine's bootstrap over real MPI (make unit's
 * nccl-mpi-check, tests/runtime/nccl_boot_mpi.sh runs it under mpirun -np 2):
 * rank 0's unique id reaches every rank through rt_coll_boot_device (the
 * broadcast of the MPI-wrapped CPU device, runtime/dist/mpi.c) before its
 * comm init, and rt_kv_open (the trainer's one call) makes each rank's
 * nccl device; with --fail, rank 0 cannot make the id and every rank exits
 * non-zero with a message instead of waiting.  The transport is a stub that
 * records what comm_init_rank receives: no GPU, no NCCL. */
#include <stdio.h>
#include <string.h>

#include "dist/coll.h"
#include "dist/mpi_rt.h"

static RtCollId got;
static int got_rank = -1, got_world, made;
static int fail_id;
static char comm_token; /* the stub's communicator */

/* bytes that are NaNs, infinities and denormals as floats: the broadcast
 * must carry bits, not values */
static void pattern(RtCollId *id)
{
    for (size_t i = 0; i < sizeof id->internal; i++)
        id->internal[i] = (char)(i % 4 == 3 ? 0x7f + (i & 0x80) : 0xc0 + i * 13);
}

static int s_get_unique_id(void *self, RtCollId *id)
{
    (void)self;
    made++;
    if (fail_id)
        return 2;
    pattern(id);
    return 0;
}

static int s_comm_init_rank(void *self, RtCollComm **comm, int nranks, const RtCollId *id,
                            int rank)
{
    (void)self;
    got = *id;
    got_rank = rank;
    got_world = nranks;
    *comm = (RtCollComm *)&comm_token;
    return 0;
}

static const char *s_error_string(void *self, const char *call, int rc)
{
    (void)self, (void)call;
    return rc == 2 ? "unhandled system error (stub)" : "stub error";
}

static char stream_token;
static int s_stream_create(void *self, int device, void **stream)
{
    (void)self, (void)device;
    *stream = &stream_token;
    return 0;
}
static int s_stream_ok(void *self, void *stream)
{
    (void)self, (void)stream;
    return 0;
}
static int s_comm_destroy(void *self, RtCollComm *comm)
{
    (void)self, (void)comm;
    return 0;
}

static RtCollOps stub = {.name = "stub", .get_unique_id = s_get_unique_id,
                         .comm_init_rank = s_comm_init_rank, .error_string = s_error_string,
                         .stream_create = s_stream_create, .stream_destroy = s_stream_ok,
                         .stream_sync = s_stream_ok, .comm_destroy = s_comm_destroy};
static const RtCollOps *stub_fn(char *err, size_t errlen)
{
    (void)err, (void)errlen;
    return &stub;
}
static void *stub_stream(RtDevice *d)
{
    (void)d;
    return &stream_token;
}

/* The trainer's one call (rt_kv_open) for an `nccl` placement: a device of
 * this rank among all, its comm made from rank 0's id. */
static int check_open(int rank, int world)
{
    char err[512];
    made = 0;
    memset(&got, 0, sizeof got);
    RtDevice *gpu = rt_device_cpu_open(err, sizeof err);
    RtDevice *d = rt_kv_open(gpu, RT_KV_NCCL, stub_fn, stub_stream, 4, err, sizeof err);
    if (!d) {
        fprintf(stderr, "nccl_boot_mpi: rank %d: rt_kv_open: %s\n", rank, err);
        return 1;
    }
    RtCollId want;
    pattern(&want);
    int bad = strcmp(d->ops->name, "nccl") != 0 || rt_dev_rank(d) != rank ||
              rt_dev_world_size(d) != world || memcmp(&got, &want, sizeof want) != 0;
    if (bad)
        fprintf(stderr, "nccl_boot_mpi: rank %d: rt_kv_open made '%s', rank %d of %d\n", rank,
                d->ops->name, rt_dev_rank(d), rt_dev_world_size(d));
    else
        printf("nccl_boot_mpi: rank %d of %d: rt_kv_open made this rank's nccl device\n", rank,
               world);
    rt_device_close(d);
    return bad;
}

int main(int argc, char **argv)
{
    fail_id = argc > 1 && strcmp(argv[1], "--fail") == 0;
    RtMpiConfig mc = {.timeout_s = 20, .bucket_mb = 4};
    char err[512];
    int rank = 0, world = 1;
    if (!rt_mpi_start(&mc, &rank, &world, err, sizeof err)) {
        fprintf(stderr, "nccl_boot_mpi: %s\n", err);
        return 1;
    }
    RtDevice *cpu = rt_device_cpu_open(err, sizeof err);
    RtDevice *host = cpu ? rt_mpi_wrap(cpu, err, sizeof err) : NULL;
    if (!host) {
        fprintf(stderr, "nccl_boot_mpi: %s\n", err);
        return rt_mpi_finish(1);
    }
    RtCollBoot boot = rt_coll_boot_device(host);
    RtCollComm *comm;
    int rc = 0;
    if (!rt_nccl_bootstrap(&stub, &boot, &comm, err, sizeof err)) {
        fprintf(stderr, "nccl_boot_mpi: rank %d: %s\n", rank, err);
        rc = 1;
    } else {
        RtCollId want;
        pattern(&want);
        if (memcmp(&got, &want, sizeof want) != 0 || got_rank != rank || got_world != world ||
            made != (rank == 0)) {
            fprintf(stderr, "nccl_boot_mpi: rank %d: comm init got rank %d of %d, the id %s, "
                    "%d ids made here\n", rank, got_rank, got_world,
                    memcmp(&got, &want, sizeof want) ? "differs" : "matches", made);
            rc = 1;
        } else {
            printf("nccl_boot_mpi: rank %d of %d: rank 0's unique id arrived before comm init\n",
                   rank, world);
        }
        if (!rc && !fail_id)
            rc = check_open(rank, world);
    }
    fflush(stdout);
    fflush(stderr);
    /* every rank has said its line before any aborts: one more collective
     * (the MPI engine's waits for every rank's arrival) */
    float word = 0;
    RtDevTensor one = {&word, 1, RT_F32};
    (void)rt_dev_broadcast(host, &one, 1, 0, err, sizeof err);
    rt_device_close(host);
    return rt_mpi_finish(rc);
}
