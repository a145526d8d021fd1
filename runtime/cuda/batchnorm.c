/*
 * batchnorm.c - BatchNorm's contract functions (rt_cuda.h): the launches of
 * the custom kernels of batchnorm.cuh, bit for bit runtime/cpu/batchnorm.c,
 * with the per-channel constants in a device scratch of 3*c floats (the
 * contract has no workspace), reserved at set-up for the model's widest
 * BatchNorm.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/rt_cuda.h"

static int idt(RtDType dt) { return (int)dt; }

/* ---- BatchNorm: custom kernels (batchnorm.cuh), bit for bit batchnorm.c ------------------------ */

bool rt_cuda_bn_reserve(RtCudaCtx *cx, int64_t max_c, char *err, size_t errlen)
{
    rt_cuda_need_init(cx, "BatchNorm");
    if (max_c <= cx->bn_ws_c)
        return true;
    if (max_c > INT64_MAX / 12) {
        snprintf(err, errlen, "BatchNorm: %lld channels", (long long)max_c);
        return false;
    }
    if (cx->bn_ws) {
        AMPC_CHECK(AMPC_API_CUDA, cudaStreamSynchronize(cx->stream));
        AMPC_CHECK(AMPC_API_CUDA, cudaFree(cx->bn_ws));
        cx->bn_ws = NULL, cx->bn_ws_c = 0;
    }
    if (!AMPC_TRY(AMPC_API_CUDA,
                  cudaMalloc((void **)&cx->bn_ws, (size_t)max_c * 3 * sizeof(float)))) {
        snprintf(err, errlen, "BatchNorm's scratch of %lld bytes: %s", (long long)max_c * 12,
                 ampc_api_last_error());
        return false;
    }
    cx->bn_ws_c = max_c;
    return true;
}

static float *bn_scratch(RtCudaCtx *cx, int64_t c)
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

void rt_cuda_batchnorm_forward_train(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x,
                                     const float *gamma, const float *beta, float eps,
                                     bool fix_gamma, void *y, float *save_mean, float *save_invstd)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA,
               ampc_cu_bn_forward_train(cx->stream, (size_t)d->outer, (int)d->c, (size_t)d->inner,
                                        idt(dt), x, gamma, beta, eps, fix_gamma, y, save_mean,
                                        save_invstd, bn_scratch(cx, d->c)));
}

void rt_cuda_batchnorm_forward_inference(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                         const void *x, const float *gamma, const float *beta,
                                         const float *moving_mean, const float *moving_var,
                                         float eps, bool fix_gamma, void *y, float *save_mean,
                                         float *save_invstd)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA, ampc_cu_bn_forward_inference(
                                  cx->stream, (size_t)d->outer, (int)d->c, (size_t)d->inner,
                                  idt(dt), x, gamma, beta, moving_mean, moving_var, eps, fix_gamma,
                                  y, save_mean, save_invstd, bn_scratch(cx, d->c)));
}

void rt_cuda_batchnorm_backward(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x,
                                const void *dy, const float *gamma, const float *save_mean,
                                const float *save_invstd, bool fix_gamma, bool use_global_stats,
                                void *dx, float *dgamma, float *dbeta, bool acc_dx, bool acc_param)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA,
               ampc_cu_bn_backward(cx->stream, (size_t)d->outer, (int)d->c, (size_t)d->inner,
                                   idt(dt), x, dy, gamma, save_mean, save_invstd, fix_gamma,
                                   use_global_stats, dx, dgamma, dbeta, acc_dx, acc_param,
                                   bn_scratch(cx, d->c)));
}

/* BatchNorm + relu: the plain forward, then the relu over its stored value in
 * place (batchnorm.c rounds to dt before the relu at the same place) */
static void bn_relu_after(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, void *y)
{
    size_t n = (size_t)d->outer * (size_t)d->c * (size_t)d->inner;
    AMPC_CHECK(AMPC_API_CUDA, ampc_cu_relu(cx->stream, n, idt(dt), y, y));
}

void rt_cuda_batchnorm_relu_forward_train(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                          const void *x, const float *gamma, const float *beta,
                                          float eps, bool fix_gamma, void *y, float *save_mean,
                                          float *save_invstd)
{
    rt_cuda_batchnorm_forward_train(cx, d, dt, x, gamma, beta, eps, fix_gamma, y, save_mean,
                                    save_invstd);
    bn_relu_after(cx, d, dt, y);
}

void rt_cuda_batchnorm_relu_forward_inference(RtCudaCtx *cx, const RtBnDims *d, RtDType dt,
                                              const void *x, const float *gamma, const float *beta,
                                              const float *moving_mean, const float *moving_var,
                                              float eps, bool fix_gamma, void *y, float *save_mean,
                                              float *save_invstd)
{
    rt_cuda_batchnorm_forward_inference(cx, d, dt, x, gamma, beta, moving_mean, moving_var, eps,
                                        fix_gamma, y, save_mean, save_invstd);
    bn_relu_after(cx, d, dt, y);
}

void rt_cuda_batchnorm_relu_backward(RtCudaCtx *cx, const RtBnDims *d, RtDType dt, const void *x,
                                     const void *y, const void *dy, const float *gamma,
                                     const float *save_mean, const float *save_invstd,
                                     bool fix_gamma, bool use_global_stats, void *dx, float *dgamma,
                                     float *dbeta, bool acc_dx, bool acc_param)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA,
               ampc_cu_bn_relu_backward(cx->stream, (size_t)d->outer, (int)d->c, (size_t)d->inner,
                                        idt(dt), x, y, dy, gamma, save_mean, save_invstd, fix_gamma,
                                        use_global_stats, dx, dgamma, dbeta, acc_dx, acc_param,
                                        bn_scratch(cx, d->c)));
}

/* rt_cuda_close's: the scratch freed */
void rt_cuda_bn_release(RtCudaCtx *cx)
{
    if (cx->bn_ws)
        AMPC_CHECK(AMPC_API_CUDA, cudaFree(cx->bn_ws));
    cx->bn_ws = NULL, cx->bn_ws_c = 0;
}
