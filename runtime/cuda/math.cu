/* math.cu - the rt.h twins that call libm (math.cuh), built for the GPU
 * into libampccuda.a with kernels.cu's flags, apart from it: CUDA's libm
 * compiles to fma and ex2.approx, which kernels.cu's PTX must not hold
 * (tests/runtime/cuda_ptx_check.sh).  kernels.cuh holds only the helpers
 * every kernel source shares. */
#include "cuda/kernels.cuh"
#include "cuda/math.cuh"
