/*
 * rt_cuda.c - the CUDA runtime library's set-up (rt_cuda.h): cuDNN and
 * cuBLASLt opened on the device's stream, or, for the offline check
 * (--cudnn-check), without a GPU; and shut down, with the BatchNorm
 * scratch, before the stream they were made on.
 */
#include <stdio.h>

#include "cuda/rt_cuda.h"

static AmpcStream stream; /* the stream rt_cuda_init was given */

AmpcStream rt_cuda_stream(void) { return stream; }

bool rt_cuda_init(const RtCudaConfig *c, char *err, size_t errlen)
{
    stream = c->stream;
    return rt_cuda_blas_init(c, err, errlen) && rt_cuda_dnn_init(c, err, errlen);
}

void rt_cuda_shutdown(void)
{
    rt_cuda_bn_release();
    rt_cuda_dnn_shutdown();
    rt_cuda_blas_shutdown();
}

bool rt_cuda_check_open(const RtCudaConfig *c, char *err, size_t errlen)
{
    return rt_cuda_blas_check_open(c, err, errlen) && rt_cuda_dnn_check_open(c, err, errlen);
}

int rt_cuda_check_report(FILE *out, FILE *err)
{
    return rt_cuda_dnn_check_report(out, err) + rt_cuda_blas_check_report(out, err);
}

void rt_cuda_check_close(void) { rt_cuda_shutdown(); }
