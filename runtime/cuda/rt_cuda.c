/*
 * rt_cuda.c - the CUDA runtime library's run state (rt_cuda.h): a context
 * per device, with cuDNN and cuBLASLt open on the device's stream, or, for
 * the offline check (--cudnn-check), without a GPU; closed, with the
 * BatchNorm scratch, before the stream it was made on.  The device that runs
 * the program owns it (runtime/cuda/program.c hands it to device.cu).
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda/rt_cuda.h"

RtCudaCtx *rt_cuda_ctx_new(const RtCudaConfig *cfg)
{
    RtCudaCtx *cx = calloc(1, sizeof *cx);
    if (!cx)
        return NULL;
    cx->cfg = *cfg;
    cx->stream = cfg->stream;
    return cx;
}

void rt_cuda_need_init(const RtCudaCtx *cx, const char *fn)
{
    if (!cx || cx->offline) {
        fprintf(stderr, "ampc: %s: called %s\n", fn,
                cx ? "in the offline check (no GPU)" : "without a context (rt_cuda_open)");
        exit(1);
    }
}

/* cuBLASLt then cuDNN into a new context (offline: for the check) */
static RtCudaCtx *open_libraries(const RtCudaConfig *cfg, bool offline, char *err, size_t errlen)
{
    RtCudaCtx *cx = rt_cuda_ctx_new(cfg);
    if (!cx) {
        snprintf(err, errlen, "out of host memory for the CUDA libraries' context");
        return NULL;
    }
    cx->offline = offline;
    bool ok = offline ? rt_cuda_blas_check_open(cx, err, errlen) &&
                            rt_cuda_dnn_check_open(cx, err, errlen)
                      : rt_cuda_blas_init(cx, err, errlen) && rt_cuda_dnn_init(cx, err, errlen);
    if (!ok) {
        rt_cuda_close(cx);
        return NULL;
    }
    return cx;
}

RtCudaCtx *rt_cuda_open(const RtCudaConfig *cfg, char *err, size_t errlen)
{
    return open_libraries(cfg, false, err, errlen);
}

RtCudaCtx *rt_cuda_check_open(const RtCudaConfig *cfg, char *err, size_t errlen)
{
    return open_libraries(cfg, true, err, errlen);
}

void rt_cuda_close(RtCudaCtx *cx)
{
    if (!cx)
        return;
    rt_cuda_bn_release(cx);
    rt_cuda_dnn_shutdown(cx);
    rt_cuda_blas_shutdown(cx);
    free(cx);
}

int rt_cuda_check_report(RtCudaCtx *cx, FILE *out, FILE *err)
{
    return rt_cuda_dnn_check_report(cx, out, err) + rt_cuda_blas_check_report(cx, out, err);
}
