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

static float *bn_ws;
static int64_t bn_ws_c;

bool rt_cuda_bn_reserve(int64_t max_c, char *err, size_t errlen)
{
    rt_cuda_need_init("BatchNorm");
    if (max_c <= bn_ws_c)
        return true;
    if (max_c > INT64_MAX / 12) {
        snprintf(err, errlen, "BatchNorm: %lld channels", (long long)max_c);
        return false;
    }
    if (bn_ws) {
        AMPC_CHECK(AMPC_API_CUDA, cudaStreamSynchronize(rt_cuda_stream()));
        AMPC_CHECK(AMPC_API_CUDA, cudaFree(bn_ws));
        bn_ws = NULL, bn_ws_c = 0;
    }
    if (!AMPC_TRY(AMPC_API_CUDA, cudaMalloc((void **)&bn_ws, (size_t)max_c * 3 * sizeof(float)))) {
        snprintf(err, errlen, "BatchNorm's scratch of %lld bytes: %s", (long long)max_c * 12,
                 ampc_api_last_error());
        return false;
    }
    bn_ws_c = max_c;
    return true;
}

static float *bn_scratch(int64_t c)
{
    char err[512];
    if (!rt_cuda_bn_reserve(c, err, sizeof err)) {
        fprintf(stderr, "ampc: %s\n", err);
        exit(1);
    }
    return bn_ws;
}

static void bn_dims_ok(const RtBnDims *d)
{
    if (d->outer < 1 || d->c < 1 || d->inner < 1 || d->c > INT32_MAX) {
        fprintf(stderr, "ampc: BatchNorm: invalid dims (outer %lld, c %lld, inner %lld)\n",
                (long long)d->outer, (long long)d->c, (long long)d->inner);
        exit(1);
    }
}

void rt_cuda_batchnorm_forward_train(const RtBnDims *d, RtDType dt, const void *x,
                                     const float *gamma, const float *beta, float eps,
                                     bool fix_gamma, void *y, float *save_mean, float *save_invstd)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA,
               ampc_cu_bn_forward_train(rt_cuda_stream(), (size_t)d->outer, (int)d->c,
                                        (size_t)d->inner, idt(dt), x, gamma, beta, eps, fix_gamma,
                                        y, save_mean, save_invstd, bn_scratch(d->c)));
}

void rt_cuda_batchnorm_forward_inference(const RtBnDims *d, RtDType dt, const void *x,
                                         const float *gamma, const float *beta,
                                         const float *moving_mean, const float *moving_var,
                                         float eps, bool fix_gamma, void *y, float *save_mean,
                                         float *save_invstd)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA, ampc_cu_bn_forward_inference(
                                  rt_cuda_stream(), (size_t)d->outer, (int)d->c, (size_t)d->inner,
                                  idt(dt), x, gamma, beta, moving_mean, moving_var, eps, fix_gamma,
                                  y, save_mean, save_invstd, bn_scratch(d->c)));
}

void rt_cuda_batchnorm_backward(const RtBnDims *d, RtDType dt, const void *x, const void *dy,
                                const float *gamma, const float *save_mean,
                                const float *save_invstd, bool fix_gamma, bool use_global_stats,
                                void *dx, float *dgamma, float *dbeta, bool acc_dx, bool acc_param)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA,
               ampc_cu_bn_backward(rt_cuda_stream(), (size_t)d->outer, (int)d->c, (size_t)d->inner,
                                   idt(dt), x, dy, gamma, save_mean, save_invstd, fix_gamma,
                                   use_global_stats, dx, dgamma, dbeta, acc_dx, acc_param,
                                   bn_scratch(d->c)));
}

/* BatchNorm + relu: the plain forward, then the relu over its stored value in
 * place (batchnorm.c rounds to dt before the relu at the same place) */
static void bn_relu_after(const RtBnDims *d, RtDType dt, void *y)
{
    size_t n = (size_t)d->outer * (size_t)d->c * (size_t)d->inner;
    AMPC_CHECK(AMPC_API_CUDA, ampc_cu_relu(rt_cuda_stream(), n, idt(dt), y, y));
}

void rt_cuda_batchnorm_relu_forward_train(const RtBnDims *d, RtDType dt, const void *x,
                                          const float *gamma, const float *beta, float eps,
                                          bool fix_gamma, void *y, float *save_mean,
                                          float *save_invstd)
{
    rt_cuda_batchnorm_forward_train(d, dt, x, gamma, beta, eps, fix_gamma, y, save_mean,
                                    save_invstd);
    bn_relu_after(d, dt, y);
}

void rt_cuda_batchnorm_relu_forward_inference(const RtBnDims *d, RtDType dt, const void *x,
                                              const float *gamma, const float *beta,
                                              const float *moving_mean, const float *moving_var,
                                              float eps, bool fix_gamma, void *y, float *save_mean,
                                              float *save_invstd)
{
    rt_cuda_batchnorm_forward_inference(d, dt, x, gamma, beta, moving_mean, moving_var, eps,
                                        fix_gamma, y, save_mean, save_invstd);
    bn_relu_after(d, dt, y);
}

void rt_cuda_batchnorm_relu_backward(const RtBnDims *d, RtDType dt, const void *x, const void *y,
                                     const void *dy, const float *gamma, const float *save_mean,
                                     const float *save_invstd, bool fix_gamma,
                                     bool use_global_stats, void *dx, float *dgamma, float *dbeta,
                                     bool acc_dx, bool acc_param)
{
    bn_dims_ok(d);
    AMPC_CHECK(AMPC_API_CUDA,
               ampc_cu_bn_relu_backward(rt_cuda_stream(), (size_t)d->outer, (int)d->c,
                                        (size_t)d->inner, idt(dt), x, y, dy, gamma, save_mean,
                                        save_invstd, fix_gamma, use_global_stats, dx, dgamma, dbeta,
                                        acc_dx, acc_param, bn_scratch(d->c)));
}

void rt_cuda_bn_release(void)
{
    if (bn_ws)
        AMPC_CHECK(AMPC_API_CUDA, cudaFree(bn_ws));
    bn_ws = NULL, bn_ws_c = 0;
}
