/*
 * splitmix.h - the runtime's counter-based generator (runtime/rand.c's
 * rt_mix64, rt_rand_u64, rt_rand_uniform) and the synthetic data source's
 * values drawn from it (runtime/data/synthetic.c), in one header that gcc,
 * clang and nvcc all build, as philox.h is Dropout's: the CUDA kernel that
 * makes a synthetic batch on the device (runtime/cuda/synthetic.cuh) computes
 * exactly what the CPU source computes.  Philox is Dropout's generator, not
 * this one.
 *
 * splitmix64's finaliser over a mixed counter: every value a pure function
 * of (seed, stream, index).  The integer part is the same bits everywhere;
 * the uniform is (u >> 11) * 2^-53 (exact in double), and a synthetic
 * element is (float)(2.0 * u - 1.0): one exact doubling, one subtraction
 * rounded in double, one rounding to float, with no fused multiply-add on
 * either compiler (C11's -ffp-contract=off; nvcc's -fmad=false).
 */
#ifndef AMPC_KERNELS_SPLITMIX_H
#define AMPC_KERNELS_SPLITMIX_H

#include "kernels/half.h" /* AMPC_HD */

static inline AMPC_HD uint64_t ampc_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* the key of (seed, stream): what every index of that stream shares */
static inline AMPC_HD uint64_t ampc_rand_key(uint64_t seed, uint64_t stream)
{
    return ampc_mix64(seed + 0x9E3779B97F4A7C15ull) ^ ampc_mix64(stream ^ 0xD1B54A32D192ED03ull);
}

static inline AMPC_HD uint64_t ampc_rand_keyed(uint64_t key, uint64_t i)
{
    return ampc_mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
}

static inline AMPC_HD uint64_t ampc_rand_u64(uint64_t seed, uint64_t stream, uint64_t i)
{
    return ampc_rand_keyed(ampc_rand_key(seed, stream), i);
}

/* [0, 1), 53 bits */
static inline AMPC_HD double ampc_rand_unit(uint64_t r)
{
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

/* element i of a synthetic split's data stream (key = ampc_rand_key(seed,
 * the split's stream)): U(-1, 1) rounded to float */
static inline AMPC_HD float ampc_synthetic_x(uint64_t key, uint64_t i)
{
    return (float)(2.0 * ampc_rand_unit(ampc_rand_keyed(key, i)) - 1.0);
}

/* the label of sample k (key of the split's label stream), in [0, classes) */
static inline AMPC_HD float ampc_synthetic_y(uint64_t key, uint64_t k, uint64_t classes)
{
    return (float)(ampc_rand_keyed(key, k) % classes);
}

#endif /* AMPC_KERNELS_SPLITMIX_H */
