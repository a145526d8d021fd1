/* math.cu - the rt.h twins that call libm (ops_math.cuh), built for the GPU
 * into libampccuda.a with kernels.cu's flags, apart from it: CUDA's libm
 * compiles to fma and ex2.approx, which kernels.cu's PTX must not hold
 * (tests/runtime/cuda_ptx_check.sh).  kernels.cuh gives only its helpers
 * here; its kernels are kernels.cu's. */
#define AMPC_CU_HELPERS_ONLY
#include "cuda/kernels.cuh"
#include "cuda/ops_math.cuh"
