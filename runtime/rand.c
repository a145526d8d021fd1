/* rand.c - counter-based random numbers (rand.h): splitmix64's finaliser
 * over a mixed counter (kernels/splitmix.h, which the CUDA kernels build
 * too); normals from Box-Muller (cosine branch) on two uniforms. */
#include <math.h>

#include "kernels/splitmix.h"
#include "rand.h"

uint64_t rt_mix64(uint64_t z) { return ampc_mix64(z); }

uint64_t rt_rand_u64(uint64_t seed, uint64_t stream, uint64_t i)
{
    return ampc_rand_u64(seed, stream, i);
}

double rt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t i)
{
    return ampc_rand_unit(ampc_rand_u64(seed, stream, i));
}

double rt_rand_normal(uint64_t seed, uint64_t stream, uint64_t i)
{
    double u1 = 1.0 - rt_rand_uniform(seed, stream, 2 * i); /* (0, 1]: log is finite */
    double u2 = rt_rand_uniform(seed, stream, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t rt_hash_name(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}
