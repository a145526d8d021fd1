/* mpi_rt.h - the seam between the training driver and the engine for several
 * processes (docs/kvstore.md, "Running on several processes").
 *
 * A program built with `ampc --mpi` links runtime/dist/mpi.c (compiled with
 * mpicc into ampcmpi.o beside libampcrt.a) and Open MPI; every other program
 * links the defaults of runtime/dist/mpi_none.c, which are weak: world size 1,
 * rank 0, no MPI call, no MPI library.  Chosen at link time, so a program
 * that is not built for MPI neither links nor initialises it.
 */
#ifndef AMPC_RT_MPI_RT_H
#define AMPC_RT_MPI_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"

typedef struct {
    double timeout_s; /* how long a collective waits for the slowest rank */
    double bucket_mb; /* fp32 MiB per MPI_Iallreduce; 0: one bucket */
} RtMpiConfig;

/* True in a program built for MPI. */
bool rt_mpi_linked(void);
/* Initialises MPI once (MPI_Init) and says this process's rank and the
 * number of processes; without MPI: rank 0 of 1.  False with a message. */
bool rt_mpi_start(const RtMpiConfig *c, int *rank, int *world, char *err, size_t errlen);
/* The device of this rank: inner itself without MPI (or before
 * rt_mpi_start); under MPI a device that forwards to inner (the CPU
 * device) and makes world_size, rank, allreduce, broadcast and the
 * dynamic loss scale's finite flag collective.  NULL with a message (inner
 * is closed then). */
RtDevice *rt_mpi_wrap(RtDevice *inner, char *err, size_t errlen);
/* The step the next collectives belong to (for the hang guard's message). */
void rt_mpi_set_step(int64_t step);
/* That step (-1 before the first), and the run's --mpi-timeout in seconds
 * (60 without MPI or before rt_mpi_start): the NCCL engine's deadline and
 * message use them. */
int64_t rt_mpi_step(void);
double rt_mpi_timeout(void);
/* The end of the process: rc 0 finalises MPI, any other rc aborts the job
 * (MPI_Abort), so that one rank's error never leaves the others waiting,
 * unless every rank agreed to end (rt_mpi_agreed).  Returns rc. */
int rt_mpi_finish(int rc);
/* Every rank knows the run ends here with the same status (the start-up
 * check found a mismatch): rt_mpi_finish finalises instead of aborting. */
void rt_mpi_agreed(void);
/* The start-up check's exchange (rankcheck.h, RtGatherFn): an all-gather of
 * bytes from every rank, under the hang guard (a rank that does not arrive
 * within --mpi-timeout is named and the job aborted).  Without MPI: mine
 * copied.  self is unused. */
bool rt_mpi_allgather(void *self, const void *mine, void *all, size_t bytes, char *err,
                      size_t errlen);

/* launcher.c: how many processes the launcher that started this process
 * runs (mpirun's, hydra's, PMIx's or srun's variables), 1 when none did or
 * for one process; which variable said so goes to which ("PMI_SIZE=4"). */
int rt_launcher_size(char *which, size_t cap);

/* Rank r's Dropout seed: the run's seed on rank 0 (a single process is
 * unchanged), a mix of both elsewhere, so that ranks draw different masks. */
uint64_t rt_rank_seed(uint64_t seed, int r);

/* --sim-ranks K (runtime/dist/sim.c): a device around inner whose world is
 * K simulated ranks, computed in turn by one process (its rank: the one
 * whose micro-batch the loop runs now), each with its own BatchNorm
 * statistics; the all-reduce after each rank's train step sums their
 * gradients as the MPI engine does (fp32, rank 0's + rank 1's + ...,
 * rounded to the gradient's dtype once), the reference tests/e2e/mpi.sh
 * compares mpirun with.  It owns inner (closing it closes inner); NULL with
 * a message. */
RtDevice *rt_sim_wrap(RtDevice *inner, int nsim, char *err, size_t errlen);

#endif
