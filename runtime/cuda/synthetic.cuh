/*
 * synthetic.cuh - the synthetic data source's batch made on the device
 * (runtime/data/synthetic.c's values, kernels/splitmix.h's arithmetic), so
 * that a throughput run neither draws 38.5 M numbers on one host thread per
 * ResNet-50 batch nor uploads them (issue 26): built by synthetic.cu into
 * libampccuda.a with kernels.cu's flags (no fma: the double subtraction
 * rounds as the CPU's does) and into libampcemu.a for the emulator
 * (tests/runtime/test_cuda_synthetic_emu.c checks it bit for bit against
 * the CPU source cast the same way).
 *
 *   ampc_cu_synthetic_batch  the batch of sample indices idx, written in the
 *                            first layer's dtype, layout and channel padding
 *                            (the padded channels zero), and its labels
 *
 * The sample is [c, inner] in the source's order (element e = ch * inner + p
 * of sample k is draw k * c * inner + e); NCHW writes [n][cp][inner], NHWC
 * [n][inner][cp], so a 16-bit NHWC stem's padded input needs neither the
 * cast, the layout conversion nor the padding kernel.  Each thread writes
 * its own elements; the thread of a sample's first element writes its label.
 */
#ifndef AMPC_CUDA_SYNTHETIC_CUH
#define AMPC_CUDA_SYNTHETIC_CUH

#define AMPC_LAY_HELPERS_ONLY
#include "cuda/layout.cuh"
#include "kernels/splitmix.h"

__global__ void ampc_k_synthetic_batch(size_t n, size_t c, size_t cp, size_t inner, int nhwc,
                                       int dt, uint64_t kx, uint64_t ky, uint64_t classes,
                                       ampc_dptr<const int64_t> idx, ampc_dptr<void> x,
                                       ampc_dptr<float> y)
{
    size_t per = cp * inner;
    AMPC_LAY_FOR(t, n * per)
    {
        size_t j = t / per, r = t % per;
        size_t ch = nhwc ? r % cp : r / inner, p = nhwc ? r / cp : r % inner;
        uint64_t k = (uint64_t)idx[j];
        float v = 0.0f;
        if (ch < c)
            v = ampc_synthetic_x(kx, k * (c * inner) + ch * inner + p);
        ampc_lay_store(x, t, dt, v, 0);
        if (r == 0 && y)
            y[j] = ampc_synthetic_y(ky, k, classes);
    }
}

AMPC_LAY_API int ampc_cu_synthetic_batch(AmpcStream s, const AmpcSynthBatch *b, const int64_t *idx,
                                         void *x, float *y)
{
    if (b->n == 0 || b->c == 0 || b->inner == 0)
        return 0;
    size_t total = b->n * b->cp * b->inner;
    AMPC_LAUNCH(ampc_k_synthetic_batch, ampc_lay_grid(total), AMPC_LAY_THREADS, s, b->n, b->c,
                b->cp, b->inner, b->nhwc, b->dt, b->key_x, b->key_y, b->classes, idx, x, y);
    return AMPC_LAUNCH_ERROR();
}

#endif /* AMPC_CUDA_SYNTHETIC_CUH */
