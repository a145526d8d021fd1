/*
 * ingest.cuh - a data source's raw batch normalised on the device (issue 26,
 * point 2): the bytes the loop uploads (4x fewer than the floats) become
 * kernels/ingest.h's values, written in the first layer's dtype, layout and
 * channel padding, with the labels the same copy brought.  Built by
 * ingest.cu into libampccuda.a with kernels.cu's flags (no fma, IEEE
 * division) and into libampcemu.a for the emulator
 * (tests/runtime/test_cuda_ingest_emu.c checks it bit for bit against the
 * sources' own fill cast and laid out by the CPU's kernels).
 *
 *   ampc_cu_ingest  raw [n][c][inner] bytes -> x in dt, NCHW [n][cp][inner]
 *                   or NHWC [n][inner][cp] (channels c..cp-1 zero); labels
 *                   copied; a thread an element, as synthetic.cuh's
 */
#ifndef AMPC_CUDA_INGEST_CUH
#define AMPC_CUDA_INGEST_CUH

#define AMPC_LAY_HELPERS_ONLY
#include "cuda/layout.cuh"
#include "kernels/ingest.h"

__global__ void ampc_k_ingest(size_t n, size_t c, size_t cp, size_t inner, int nhwc, int dt,
                              AmpcIngestNorm g, ampc_dptr<const uint8_t> raw,
                              ampc_dptr<const float> labels, ampc_dptr<void> x, ampc_dptr<float> y)
{
    size_t per = cp * inner;
    AMPC_LAY_FOR(t, n * per)
    {
        size_t j = t / per, r = t % per;
        size_t ch = nhwc ? r % cp : r / inner, p = nhwc ? r / cp : r % inner;
        float v = 0.0f;
        if (ch < c) {
            /* the channel's mean and std (or the one), picked without
             * indexing the parameter by a variable: registers, no local
             * memory */
            size_t at = g.channels > 1 ? ch : 0;
            float mean = g.mean[0], std = g.std[0];
            for (int i = 1; i < 4; i++)
                if (at == (size_t)i)
                    mean = g.mean[i], std = g.std[i];
            v = ampc_ingest_value(raw[j * c * inner + ch * inner + p], g.div, mean, std);
        }
        ampc_lay_store(x, t, dt, v, 0);
        if (r == 0 && y)
            y[j] = labels[j];
    }
}

AMPC_LAY_API int ampc_cu_ingest(AmpcStream s, const AmpcIngest *b, const uint8_t *raw,
                                const float *labels, void *x, float *y)
{
    if (b->n == 0 || b->c == 0 || b->inner == 0)
        return 0;
    size_t total = b->n * b->cp * b->inner;
    AMPC_LAUNCH(ampc_k_ingest, ampc_lay_grid(total), AMPC_LAY_THREADS, s, b->n, b->c, b->cp,
                b->inner, b->nhwc, b->dt, b->norm, raw, labels, x, y);
    return AMPC_LAUNCH_ERROR();
}

#endif /* AMPC_CUDA_INGEST_CUH */
