/*
 * philox.h - Dropout's random numbers, shared by the CPU (runtime/cpu/act.c)
 * and CUDA (runtime/cuda/act.cuh) kernels so that both drop the same
 * elements: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy
 * as 1, 2, 3", SC 2011; the multipliers and Weyl constants of the paper),
 * four 32-bit outputs per call.  Integer-only: the same bits under gcc,
 * clang and nvcc, on the host and on the device.
 *
 * Elements 4q..4q+3 of a Dropout node share one call, with the counter
 * (q, stream ^ (q >> 32) * golden, step lo, step hi) and the key (seed lo,
 * seed hi): a mask is a function of (seed, step, node) alone.  The top 24
 * bits of an output make a float in [0, 1).
 */
#ifndef AMPC_KERNELS_PHILOX_H
#define AMPC_KERNELS_PHILOX_H

#include "kernels/half.h" /* AMPC_HD */

static inline AMPC_HD void ampc_philox4x32(const uint32_t ctr[4], const uint32_t key[2],
                                           uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* the four outputs for elements 4q..4q+3 of Dropout node `stream` */
static inline AMPC_HD void ampc_dropout_block(uint64_t seed, uint64_t step, uint32_t stream,
                                              uint64_t q, uint32_t out[4])
{
    uint32_t ctr[4] = {(uint32_t)q, stream ^ (uint32_t)(q >> 32) * 0x9E3779B9u, (uint32_t)step,
                       (uint32_t)(step >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    ampc_philox4x32(ctr, key, out);
}

/* an output's top 24 bits as a float in [0, 1) */
static inline AMPC_HD float ampc_u24(uint32_t r) { return (float)(r >> 8) * (1.0f / 16777216.0f); }

#endif /* AMPC_KERNELS_PHILOX_H */
