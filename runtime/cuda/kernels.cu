/* kernels.cu - the custom kernels (kernels.cuh), the other rt.h twins
 * (ops.cuh) and the step's one-thread kernels (step.cuh): built by nvcc
 * into libampccuda.a with -fmad=false and no fast math or flush-to-zero
 * (docs/backend-cuda.md), and by the host's C++ compiler into libampcemu.a
 * (the emulator).  ampc_cuda.h and rt_cuda.h declare what it exports. */
#include "cuda/kernels.cuh"
#include "cuda/ops.cuh"
#include "cuda/step.cuh"
