/* nccl_fake.h - the in-process fake of the collectives' transport
 * (runtime/dist/coll.h's RtCollOps; nccl_fake.c): threads as ranks, for the
 * tests of the NCCL engine.  Linked into the tests that use it only, never
 * into libampcrt.a (a program has no use for it).
 */
#ifndef AMPC_TESTS_NCCL_FAKE_H
#define AMPC_TESTS_NCCL_FAKE_H

#include "dist/coll.h"

typedef struct RtCollFake RtCollFake;
/* A world of nranks ranks (threads); NULL when out of memory. */
RtCollFake *rt_coll_fake_new(int nranks);
void rt_coll_fake_free(RtCollFake *f);
const RtCollOps *rt_coll_fake_ops(RtCollFake *f);
/* The bootstrap of rank r, on rank r's thread: bcast through the fake (every rank's call meets
 * the others', as MPI_Bcast). */
RtCollBoot rt_coll_fake_boot(RtCollFake *f, int rank);
/* The next call named `call` ("ncclAllReduce", "ncclCommInitRank", ...) by
 * rank `rank` (-1: any) returns rc instead of running. */
void rt_coll_fake_fail(RtCollFake *f, const char *call, int rank, int rc);
/* Appends a line to the world's log (the fake writes one per call it runs:
 * "r0 ncclAllReduce n=37 f16 sum", "r1 ncclCommInitRank 1/2 id=..."). */
void rt_coll_fake_log(RtCollFake *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The log so far, lines joined by '\n' (owned by the fake; valid until
 * the next call that logs). */
const char *rt_coll_fake_log_text(RtCollFake *f);
/* From now on rank `rank`'s all-reduces and broadcasts never complete (a
 * peer stalled: they return at once, no rendezvous, and its streams stay
 * RT_COLL_PENDING), as a rank whose peer was SIGSTOPped sees. */
void rt_coll_fake_stall(RtCollFake *f, int rank);
/* comm_async_error of rank `rank`'s comm reports rc from now on. */
void rt_coll_fake_async_error(RtCollFake *f, int rank, int rc);
/* How many times bcast ran, and the unique ids it handed out. */
int rt_coll_fake_ids_made(const RtCollFake *f);

#endif
