/* layout.cu - the kernels around the cuDNN and cuBLASLt calls (layout.cuh)
 * pooling (pool.cuh) and BatchNorm (bn.cuh), built by nvcc into libampccuda.a
 * with kernels.cu's flags, and by the host's C++ compiler into libampcemu.a. */
#include "cuda/layout.cuh"
#include "cuda/pool.cuh"
#include "cuda/bn.cuh"
