/*
 * elem.h - all the per-element math the CPU and CUDA backends share, in
 * headers that compile as C11 (gcc, clang) and as CUDA C++17 (nvcc):
 *
 *   half.h       fp16 / bf16 storage, bit-exact RNE conversions, ampc_isfinite
 *   act.h        activations and their derivatives
 *   loss.h       SoftmaxOutput gradient with label smoothing, cross-entropy
 *   optim.h      sgd, sgd_mom, nag, adam (MXNet semantics), multi-precision
 *   lossscale.h  the dynamic loss-scale rule (PyTorch's), unscaling
 *   philox.h     Dropout's random numbers (Philox-4x32-10)
 *
 * Every function is `static inline AMPC_HD`; kernels/tolerance.h (host only)
 * holds the checker that compares a kernel to its CPU twin.
 */
#ifndef AMPC_KERNELS_ELEM_H
#define AMPC_KERNELS_ELEM_H

#include "kernels/half.h"
#include "kernels/act.h"
#include "kernels/loss.h"
#include "kernels/optim.h"
#include "kernels/lossscale.h"
#include "kernels/philox.h"

#endif /* AMPC_KERNELS_ELEM_H */
