/*
 * batchnorm.c - BatchNorm's contract functions (rt_cuda.h): the launches of
 * the custom kernels of batchnorm.cuh, bit for bit
 * runtime/cpu/batchnorm.c in its tiled order, with the per-channel
 * constants and the partial sums in a device scratch (the contract has no
 * workspace), reserved at set-up for the model's widest BatchNorm.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/rt_cuda.h"

static int idt(RtDType dt) { return (int)dt; }

/* ---- BatchNorm: custom kernels (batchnorm.cuh), batchnorm.c's tiled order ---------------- */

/* the scratch for every BatchNorm of up to max_c channels, whatever its size */
bool rt_cuda_bn_reserve(RtCudaCtx *cx, int64_t max_c, char *err, size_t errlen)
{
    rt_cuda_need_init(cx, "BatchNorm");
    if (max_c < 1 || max_c > INT32_MAX) {
        snprintf(err, errlen, "BatchNorm: %lld channels", (long long)max_c);
        return false;
    }
    size_t bytes = ampc_batchnorm_ws_max((int)max_c);
    if (bytes <= cx->bn_ws_bytes)
        return true;
    if (cx->bn_ws) {
        AMPC_CHECK(AMPC_API_CUDA, cudaStreamSynchronize(cx->stream));
        AMPC_CHECK(AMPC_API_CUDA, cudaFree(cx->bn_ws));
        cx->bn_ws = NULL, cx->bn_ws_bytes = 0;
    }
    if (!AMPC_TRY(AMPC_API_CUDA, cudaMalloc(&cx->bn_ws, bytes))) {
        snprintf(err, errlen, "BatchNorm's scratch of %zu bytes: %s", bytes, ampc_api_last_error());
        return false;
    }
    cx->bn_ws_bytes = bytes;
    return true;
}

static void *bn_scratch(RtCudaCtx *cx, int64_t c)
{
    char err[512];
    if (!rt_cuda_bn_reserve(cx, c, err, sizeof err)) {
        fprintf(stderr, "ampc: %s\n", err);
        exit(1);
    }
    return cx->bn_ws;
}

static void bn_dims_ok(const RtBnDims *d)
{
    if (d->outer < 1 || d->c < 1 || d->inner < 1 || d->c > INT32_MAX) {
        fprintf(stderr, "ampc: BatchNorm: invalid dims (outer %lld, c %lld, inner %lld)\n",
                (long long)d->outer, (long long)d->c, (long long)d->inner);
        exit(1);
    }
}

/* the training forward: sc the residual add's other input (or NULL), relu */
static void bn_train(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x, const void *sc,
                     bool relu, const float *gamma, const float *beta, float eps, bool fix_gamma,
                     void *y, float *save_mean, float *save_invstd)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA,
               ampc_cu_batchnorm_forward_train(
                   cx->stream, (size_t)d->outer, (int)d->c, (size_t)d->inner, idt(dt), x, sc, relu,
                   gamma, beta, eps, fix_gamma, y, save_mean, save_invstd, bn_scratch(cx, d->c)));
}

static void bn_infer(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x, const void *sc,
                     bool relu, const float *gamma, const float *beta, const float *moving_mean,
                     const float *moving_var, float eps, bool fix_gamma, void *y, float *save_mean,
                     float *save_invstd)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA, ampc_cu_batchnorm_forward_inference(
                                  cx->stream, (size_t)d->outer, (int)d->c, (size_t)d->inner,
                                  idt(dt), x, sc, relu, gamma, beta, moving_mean, moving_var, eps,
                                  fix_gamma, y, save_mean, save_invstd, bn_scratch(cx, d->c)));
}

/* the backward: ry the fused relu's y, dsc its gradient written too */
static void bn_grad(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x, const void *ry,
                    const void *dy, void *dsc, const float *gamma, const float *save_mean,
                    const float *save_invstd, bool fix_gamma, bool use_global_stats, void *dx,
                    float *dgamma, float *dbeta, bool acc_dx, bool acc_param)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA,
               ampc_cu_batchnorm_backward(cx->stream, (size_t)d->outer, (int)d->c, (size_t)d->inner,
                                          idt(dt), x, ry, dy, dsc, gamma, save_mean, save_invstd,
                                          fix_gamma, use_global_stats, dx, dgamma, dbeta, acc_dx,
                                          acc_param, bn_scratch(cx, d->c)));
}

void rt_cuda_batchnorm_forward_train(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x,
                                     const float *gamma, const float *beta, float eps,
                                     bool fix_gamma, void *y, float *save_mean, float *save_invstd)
{
    bn_train(cx, d, dt, x, NULL, false, gamma, beta, eps, fix_gamma, y, save_mean, save_invstd);
}

void rt_cuda_batchnorm_forward_inference(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                         const void *x, const float *gamma, const float *beta,
                                         const float *moving_mean, const float *moving_var,
                                         float eps, bool fix_gamma, void *y, float *save_mean,
                                         float *save_invstd)
{
    bn_infer(cx, d, dt, x, NULL, false, gamma, beta, moving_mean, moving_var, eps, fix_gamma, y,
             save_mean, save_invstd);
}

void rt_cuda_batchnorm_backward(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x,
                                const void *dy, const float *gamma, const float *save_mean,
                                const float *save_invstd, bool fix_gamma, bool use_global_stats,
                                void *dx, float *dgamma, float *dbeta, bool acc_dx, bool acc_param)
{
    bn_grad(cx, d, dt, x, NULL, dy, NULL, gamma, save_mean, save_invstd, fix_gamma,
            use_global_stats, dx, dgamma, dbeta, acc_dx, acc_param);
}

void rt_cuda_batchnorm_relu_forward_train(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                          const void *x, const float *gamma, const float *beta,
                                          float eps, bool fix_gamma, void *y, float *save_mean,
                                          float *save_invstd)
{
    bn_train(cx, d, dt, x, NULL, true, gamma, beta, eps, fix_gamma, y, save_mean, save_invstd);
}

void rt_cuda_batchnorm_relu_forward_inference(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                              const void *x, const float *gamma, const float *beta,
                                              const float *moving_mean, const float *moving_var,
                                              float eps, bool fix_gamma, void *y, float *save_mean,
                                              float *save_invstd)
{
    bn_infer(cx, d, dt, x, NULL, true, gamma, beta, moving_mean, moving_var, eps, fix_gamma, y,
             save_mean, save_invstd);
}

void rt_cuda_batchnorm_relu_backward(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x,
                                     const void *y, const void *dy, const float *gamma,
                                     const float *save_mean, const float *save_invstd,
                                     bool fix_gamma, bool use_global_stats, void *dx, float *dgamma,
                                     float *dbeta, bool acc_dx, bool acc_param)
{
    bn_grad(cx, d, dt, x, y, dy, NULL, gamma, save_mean, save_invstd, fix_gamma, use_global_stats,
            dx, dgamma, dbeta, acc_dx, acc_param);
}

void rt_cuda_batchnorm_add_relu_forward_train(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                              const void *x, const void *sc, const float *gamma,
                                              const float *beta, float eps, bool fix_gamma, void *y,
                                              float *save_mean, float *save_invstd)
{
    bn_train(cx, d, dt, x, sc, true, gamma, beta, eps, fix_gamma, y, save_mean, save_invstd);
}

void rt_cuda_batchnorm_add_relu_forward_inference(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                                  const void *x, const void *sc, const float *gamma,
                                                  const float *beta, const float *moving_mean,
                                                  const float *moving_var, float eps,
                                                  bool fix_gamma, void *y, float *save_mean,
                                                  float *save_invstd)
{
    bn_infer(cx, d, dt, x, sc, true, gamma, beta, moving_mean, moving_var, eps, fix_gamma, y,
             save_mean, save_invstd);
}

void rt_cuda_batchnorm_add_relu_backward(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                         const void *x, const void *y, const void *dy,
                                         const float *gamma, const float *save_mean,
                                         const float *save_invstd, bool fix_gamma,
                                         bool use_global_stats, void *dsc, void *dx, float *dgamma,
                                         float *dbeta, bool acc_dx, bool acc_param)
{
    bn_grad(cx, d, dt, x, y, dy, dsc, gamma, save_mean, save_invstd, fix_gamma, use_global_stats,
            dx, dgamma, dbeta, acc_dx, acc_param);
}

void rt_cuda_batchnorm_forward_train_sums(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                          const void *x, const void *sc, bool relu,
                                          const float *stats, const float *gamma, const float *beta,
                                          float eps, bool fix_gamma, void *y, float *save_mean,
                                          float *save_invstd)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA, ampc_cu_batchnorm_forward_train_sums(
                                  cx->stream, (size_t)d->outer, (int)d->c, (size_t)d->inner,
                                  idt(dt), x, sc, relu || sc, stats, gamma, beta, eps, fix_gamma, y,
                                  save_mean, save_invstd, bn_scratch(cx, d->c)));
}

/* rt_cuda_close's: the scratch freed */
void rt_cuda_bn_release(RtCudaCtx *cx)
{
    if (cx->bn_ws)
        AMPC_CHECK(AMPC_API_CUDA, cudaFree(cx->bn_ws));
    cx->bn_ws = NULL, cx->bn_ws_bytes = 0;
}
