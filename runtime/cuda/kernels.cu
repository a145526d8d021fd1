/* kernels.cu - the custom kernels (kernels.cuh) built for the GPU into
 * libampccuda.a; ampc_cuda.h declares what it exports.  The Makefile
 * builds it with -fmad=false and no fast math or flush-to-zero
 * (docs/backend-cuda.md). */
#include "cuda/kernels.cuh"
