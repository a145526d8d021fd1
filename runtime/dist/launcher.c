/* launcher.c - how many processes the launcher that started this one runs
 * (mpi_rt.h; docs/kvstore.md, "A program built without MPI under a
 * launcher").  A program built without MPI trains alone in each process an
 * mpirun or srun starts, every copy writing the same checkpoints: the
 * trainer stops it unless --independent-runs says the copies are wanted.
 * Read from the environment the launchers set for their processes:
 *   - Open MPI's mpirun: OMPI_COMM_WORLD_SIZE;
 *   - MPICH's and Intel MPI's hydra, Slurm's PMI-2: PMI_SIZE;
 *   - a PMIx launcher (prterun, srun --mpi=pmix): PMIX_SIZE where set, else a
 *     PMIX_RANK above 0 (the job has more than one process);
 *   - Slurm's srun: SLURM_STEP_NUM_TASKS, only inside a step srun launched
 *     (SLURM_STEP_ID a step's number, not the batch or extern step), never
 *     SLURM_NTASKS alone: a batch script of one process sees that too.
 * A value that is not a plain decimal number is ignored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_rt.h"

/* The variable's value as a number >= 0, else -1. */
static long long env_count(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v || strlen(v) > 12 || strspn(v, "0123456789") != strlen(v))
        return -1;
    return strtoll(v, NULL, 10);
}

/* Slurm's special step ids (batch 0xfffffffe, extern 0xfffffffd, ...) are
 * at the top of the 32-bit range. */
static bool in_srun_step(void)
{
    long long id = env_count("SLURM_STEP_ID");
    if (id < 0)
        id = env_count("SLURM_STEPID");
    return id >= 0 && id < 0xfffffff0ll;
}

int rt_launcher_size(char *which, size_t cap)
{
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        long long n = env_count(sizes[k]);
        if (n > 1) {
            snprintf(which, cap, "%s=%lld", sizes[k], n);
            return n > 1 << 30 ? 1 << 30 : (int)n;
        }
    }
    long long r = env_count("PMIX_RANK");
    if (r > 0) { /* rank 1 or above: at least two processes */
        snprintf(which, cap, "PMIX_RANK=%lld", r);
        return 2;
    }
    long long t = env_count("SLURM_STEP_NUM_TASKS");
    if (t > 1 && in_srun_step()) {
        snprintf(which, cap, "SLURM_STEP_NUM_TASKS=%lld in an srun step", t);
        return t > 1 << 30 ? 1 << 30 : (int)t;
    }
    if (cap)
        which[0] = 0;
    return 1;
}
