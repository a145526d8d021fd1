/* rand.c - counter-based random numbers (rand.h): splitmix64's finaliser
 * over a mixed counter; normals from Box-Muller (cosine branch) on two
 * uniforms. */
#include <math.h>

#include "rand.h"

uint64_t rt_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t rt_rand_u64(uint64_t seed, uint64_t stream, uint64_t i)
{
    uint64_t key =
        rt_mix64(seed + 0x9E3779B97F4A7C15ull) ^ rt_mix64(stream ^ 0xD1B54A32D192ED03ull);
    return rt_mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
}

double rt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t i)
{
    return (double)(rt_rand_u64(seed, stream, i) >> 11) * (1.0 / 9007199254740992.0);
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
