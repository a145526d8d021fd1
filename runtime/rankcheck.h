/* rankcheck.h - the ranks of a data-parallel run checked against each other
 * at start-up, before the first collective (runtime/rankcheck.c;
 * docs/kvstore.md, "The start-up check").
 *
 * Two processes of one mpirun that run different programs, or the same
 * program with different settings, would meet in collectives that do not
 * match (a crash inside MPI, an MPI error, a deadline) or, worse, train to
 * exit 0 on sums that mean nothing.  So each rank describes its run in one
 * record, every rank gets every record (an all-gather: MPI's, or the NCCL
 * engine's), and every rank compares each record with rank 0's in the same
 * order: all reach the same verdict, and a mismatch stops every rank with
 * one message naming the rank, the field and both values.
 *
 * The record is fixed-size and versioned: magic, version and size first,
 * then named fields whose values are text, so that two different programs
 * (another build, another version of the runtime) still compare it field by
 * field by name; every rank sends RT_RANK_WIRE bytes, whatever its version.
 */
#ifndef AMPC_RANKCHECK_H
#define AMPC_RANKCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "rt.h"
#include "data/data.h"

#define RT_RANK_MAGIC 0x4b4e5241u /* "ARNK" */
#define RT_RANK_VERSION 1u
#define RT_RANK_NFIELDS 48
#define RT_RANK_NAME 32
#define RT_RANK_VALUE 96
#define RT_RANK_WIRE 8192 /* bytes each rank sends (a record fits; a later one must too) */
/* RT_RUNTIME_VERSION (rt.h), the runtime's version, is part of the build id. */

typedef struct {
    char name[RT_RANK_NAME];   /* "loss scale" */
    char value[RT_RANK_VALUE]; /* "dynamic(init=65536, ...)" */
} RtRankField;

typedef struct {
    uint32_t magic, version, size, nfields; /* size: sizeof(RtRankRecord) */
    RtRankField field[RT_RANK_NFIELDS];
} RtRankRecord;

/* An empty record (magic, version, size). */
void rt_rank_record_init(RtRankRecord *r);
/* Appends a field (a value longer than the room keeps its start and a hash
 * of the whole, so that two long values still differ). */
void rt_rank_field(RtRankRecord *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* What a rank's record describes. */
typedef struct {
    const RtModel *m;
    const RtTrainOptions *o;
    const RtDataset *ds;
    int world;
    int64_t batch, global_batch, steps_per_epoch;
    uint64_t seed;          /* the user's (or the resumed checkpoint's), not the rank's */
    const RtCheckpoint *ck; /* the checkpoint resumed from, NULL when none */
} RtRankInfo;
/* The record of a run, in the order the fields are compared: the program
 * (model, parameters, amp, multipliers, kvstore placement and buckets, kv
 * wire, build id), the world, the batch, the loss scale, the optimizer and
 * schedule, the seed, the data, the length of the run, --mpi-bucket-mb and
 * the resumed checkpoint. */
void rt_rank_record_make(const RtRankInfo *in, RtRankRecord *r);

/* An all-gather of bytes from every rank into all (world x bytes, rank r's
 * at r x bytes).  False with a message. */
typedef bool (*RtGatherFn)(void *self, const void *mine, void *all, size_t bytes, char *err,
                           size_t errlen);

/* The comparison alone, over world records of RT_RANK_WIRE bytes each in
 * all: -1 when every rank's record equals rank 0's, else the first rank
 * that differs, with the message in msg. */
int rt_rank_records_differ(const uint8_t *all, int world, char *msg, size_t cap);

/* Exchanges mine with every rank through gather and compares: 0 when the
 * ranks agree; 1 when they differ (msg: the one message, the same on every
 * rank); -1 when the exchange failed (msg: why). */
int rt_rank_check(const RtRankRecord *mine, int world, RtGatherFn gather, void *self, char *msg,
                  size_t cap);

#endif /* AMPC_RANKCHECK_H */
