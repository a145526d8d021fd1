/* kernels.cu - the custom kernels (kernels.cuh) and the other rt.h twins
 * (ops.cuh) built for the GPU into libampccuda.a; ampc_cuda.h and rt_cuda.h
 * declare what it exports.  The Makefile builds it with -fmad=false and no
 * fast math or flush-to-zero (docs/backend-cuda.md). */
#include "cuda/kernels.cuh"
#include "cuda/ops.cuh"
