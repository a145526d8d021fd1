/* program_cuda.h - the device of a program ampc built for a GPU (ampc
 * --target=cuda): the emitted RtModel's open_device (runtime/program.h).
 * In libampccuda.a (runtime/cuda/program.c). */
#ifndef AMPC_PROGRAM_CUDA_H
#define AMPC_PROGRAM_CUDA_H

#include <stddef.h>

#include "program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens GPU $AMPC_CUDA_DEVICE (default 0) with runtime/cuda/device.cu, opens
 * cuDNN and cuBLASLt on its stream with the device options dc
 * (--cudnn-autotune, --cudnn-workspace-mb, ...) into the context the device
 * owns, and reserves the BatchNorm scratch for m's widest BatchNorm there.
 * NULL with a message ("no CUDA device: ...", or naming the library or call
 * that failed). */
struct RtDevice *rt_cuda_open_device(const RtModel *m, const RtDeviceConfig *dc, char *err,
                                     size_t errlen);
/* --cudnn-check, no GPU needed: the emitted RtModel's check_device (program.h) */
int rt_cuda_check_model(const RtModel *m, const RtDeviceConfig *dc, int64_t batch, FILE *out,
                        FILE *err);

#ifdef __cplusplus
}
#endif

#endif
