/* layout.cu - the kernels around the cuDNN and cuBLASLt calls (layout.cuh)
 * pooling (pool.cuh) and BatchNorm (bn.cuh) built for the GPU into libampccuda.a, with
 * kernels.cu's flags. */
#include <cuda_runtime.h>

#include "cuda/layout.cuh"
#include "cuda/pool.cuh"
#include "cuda/bn.cuh"
