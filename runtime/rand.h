/* rand.h - counter-based random numbers (rand.c): every value a pure
 * function of (seed, stream, index), so runs are reproducible and a draw
 * never depends on the draws before it.  Shared by the parameter
 * initialisers (init.c), the epoch's shuffle (datasrc.c), the data sources'
 * augmentation (data/) and each rank's Dropout seed (dist/sim.c).
 */
#ifndef AMPC_RT_RAND_H
#define AMPC_RT_RAND_H

#include <stdint.h>

/* splitmix64's finaliser; rt_rand_u64 is a pure function of its arguments
 * (kernels/splitmix.h holds the arithmetic, shared with the CUDA kernels). */
uint64_t rt_mix64(uint64_t z);
uint64_t rt_rand_u64(uint64_t seed, uint64_t stream, uint64_t i);
double rt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t i); /* [0, 1), 53 bits */
/* N(0, 1) by Box-Muller (the cosine branch) from counters 2i and 2i+1. */
double rt_rand_normal(uint64_t seed, uint64_t stream, uint64_t i);
uint64_t rt_hash_name(const char *s); /* FNV-1a 64: the stream of a named tensor */

#endif
