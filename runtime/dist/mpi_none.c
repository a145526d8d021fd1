/* mpi_none.c - the program without MPI (mpi_rt.h): one process, rank 0.  Weak,
 * so that a program built with ampc --mpi gets runtime/dist/mpi.c's
 * definitions instead; nothing here calls or needs MPI. */
#include <string.h>

#include "mpi_rt.h"

__attribute__((weak)) bool rt_mpi_linked(void) { return false; }

__attribute__((weak)) bool rt_mpi_start(const RtMpiConfig *c, int *rank, int *world, char *err,
                                        size_t errlen)
{
    (void)c, (void)err, (void)errlen;
    *rank = 0;
    *world = 1;
    return true;
}

__attribute__((weak)) RtDevice *rt_mpi_wrap(RtDevice *inner, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    return inner;
}

static int64_t g_step = -1;

__attribute__((weak)) void rt_mpi_set_step(int64_t step) { g_step = step; }
__attribute__((weak)) int64_t rt_mpi_step(void) { return g_step; }
__attribute__((weak)) double rt_mpi_timeout(void) { return 60; }

__attribute__((weak)) int rt_mpi_finish(int rc) { return rc; }

__attribute__((weak)) void rt_mpi_agreed(void) {}

__attribute__((weak)) bool rt_mpi_allgather(void *self, const void *mine, void *all, size_t bytes,
                                            char *err, size_t errlen)
{
    (void)self, (void)err, (void)errlen;
    memcpy(all, mine, bytes);
    return true;
}
