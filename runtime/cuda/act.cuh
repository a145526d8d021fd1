/*
 * act.cuh - the twins of runtime/cpu/act.c that call no libm: relu and its
 * backward, Dropout (the same Philox counter and key, kernels/philox.h).  The
 * other activations call libm: math.cuh.  Built by kernels.cu.
 */
#ifndef AMPC_CUDA_ACT_CUH
#define AMPC_CUDA_ACT_CUH

#ifndef AMPC_CUDA_KERNELS_CUH
#error "include cuda/kernels.cuh before cuda/act.cuh"
#endif

#include "kernels/philox.h"

__global__ void ampc_k_relu(size_t n, int dt, ampc_dptr<const void> x, ampc_dptr<void> y, int vec)
{
    for (size_t q = ampc_cu_first(); q < AMPC_CU_VECS(n, vec); q += ampc_cu_stride()) {
        float v[AMPC_V8];
        ampc_v8_load(x, q, dt, v);
        for (int j = 0; j < AMPC_V8; j++)
            v[j] = ampc_relu(v[j]);
        ampc_v8_store(y, q, dt, v);
    }
    for (size_t i = AMPC_CU_TAIL(n, vec); i < n; i += ampc_cu_stride())
        ampc_cu_store(y, i, dt, ampc_relu(ampc_cu_load(x, i, dt)));
}

/* dx = dy * relu'(y) (MXNet differentiates relu through its output) */
__global__ void ampc_k_relu_backward(size_t n, int dt, ampc_dptr<const void> y,
                                     ampc_dptr<const void> dy, ampc_dptr<void> dx, int acc, int vec)
{
    for (size_t q = ampc_cu_first(); q < AMPC_CU_VECS(n, vec); q += ampc_cu_stride()) {
        float g[AMPC_V8], v[AMPC_V8], old[AMPC_V8];
        ampc_v8_load(dy, q, dt, g);
        ampc_v8_load(y, q, dt, v);
        if (acc)
            ampc_v8_load(dx, q, dt, old);
        for (int j = 0; j < AMPC_V8; j++) {
            g[j] = g[j] * ampc_relu_grad_y(v[j]);
            if (acc)
                g[j] = old[j] + g[j];
        }
        ampc_v8_store(dx, q, dt, g);
    }
    for (size_t i = AMPC_CU_TAIL(n, vec); i < n; i += ampc_cu_stride()) {
        float g = ampc_cu_load(dy, i, dt) * ampc_relu_grad_y(ampc_cu_load(y, i, dt));
        ampc_cu_store_acc(dx, i, dt, g, acc);
    }
}

AMPC_CU_API int ampc_cu_relu(AmpcStream s, size_t n, int dt, const void *x, void *y)
{
    if (n == 0)
        return 0;
    int v = ampc_cu_vec(n, x, y, NULL);
    AMPC_LAUNCH(ampc_k_relu, ampc_cu_vgrid(n, v), AMPC_CU_THREADS, s, n, dt, x, y, v);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_relu_backward(AmpcStream s, size_t n, int dt, const void *y,
                                      const void *dy, void *dx, int acc)
{
    if (n == 0)
        return 0;
    int v = ampc_cu_vec(n, y, dy, dx);
    AMPC_LAUNCH(ampc_k_relu_backward, ampc_cu_vgrid(n, v), AMPC_CU_THREADS, s, n, dt, y, dy, dx,
                acc, v);
    return AMPC_LAUNCH_ERROR();
}

/* one thread per four elements (one Philox call): out = in * (kept ? 1/(1-p) : 0); the
 * step's number read on the device (the step state's: a CUDA graph replays it unfrozen) */
__global__ void ampc_k_dropout(size_t n, int dt, ampc_dptr<const void> in, float p, uint64_t seed,
                               ampc_dptr<const uint64_t> stepp, uint32_t stream,
                               ampc_dptr<void> out, int acc)
{
    uint64_t step = *stepp;
    float scale = 1.0f / (1.0f - p);
    size_t nq = n / 4 + (n % 4 != 0);
    for (size_t q = ampc_cu_first(); q < nq; q += ampc_cu_stride()) {
        uint32_t u[4];
        ampc_dropout_block(seed, step, stream, q, u);
        for (size_t k = 0; k < 4 && 4 * q + k < n; k++) {
            size_t i = 4 * q + k;
            float r = ampc_u24(u[k]) >= p ? ampc_cu_load(in, i, dt) * scale : 0.0f;
            ampc_cu_store_acc(out, i, dt, r, acc);
        }
    }
}

AMPC_CU_API void rt_cuda_dropout_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, float p,
                                         uint64_t seed, const uint64_t *step, uint32_t stream,
                                         void *y)
{
    AMPC_CU_GO(ampc_k_dropout, n / 4 + (n % 4 != 0), n, (int)dt, x, p, seed, step, stream, y, 0);
}

AMPC_CU_API void rt_cuda_dropout_backward(RtCudaCtx *cx, size_t n, RtDType dt, const void *dy, float p,
                                          uint64_t seed, const uint64_t *step, uint32_t stream,
                                          void *dx, bool accumulate)
{
    AMPC_CU_GO(ampc_k_dropout, n / 4 + (n % 4 != 0), n, (int)dt, dy, p, seed, step, stream, dx,
                (int)accumulate);
}

#endif /* AMPC_CUDA_ACT_CUH */
