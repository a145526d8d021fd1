/* mpi_sim.c - each rank's Dropout seed (mpi_rt.h), the same under mpirun
 * and under --sim-ranks (whose device is sim.c). */
#include "mpi_rt.h"
#include "rand.h"

uint64_t rt_rank_seed(uint64_t seed, int r)
{
    return r == 0 ? seed : rt_mix64(seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)r));
}
