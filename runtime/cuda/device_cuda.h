/* device_cuda.h - opening the CUDA device (runtime/cuda/device.cu), the
 * second implementation of runtime/device.h.  In libampccuda.a; a program
 * that uses it links that, libampcrt.a and cudart. */
#ifndef AMPC_DEVICE_CUDA_H
#define AMPC_DEVICE_CUDA_H

#include <stddef.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPU `ordinal` (0 for the first).  NULL with a message naming the failed
 * CUDA call and its error string when there is no usable GPU or driver. */
RtDevice *rt_device_cuda_open(int ordinal, char *err, size_t errlen);
/* The one stream the device's work goes on (a cudaStream_t): the kernels'
 * libraries run on it too (rt_cuda_open). */
struct CUstream_st *rt_device_cuda_stream(RtDevice *d);
/* The device owns kernels (rt_cuda.h's context, made on its stream) from
 * now on: its kernel_ctx (RtCtx.cuda), closed before the stream at close. */
struct RtCudaCtx;
void rt_device_cuda_adopt(RtDevice *d, struct RtCudaCtx *kernels);

#ifdef __cplusplus
}
#endif

#endif
