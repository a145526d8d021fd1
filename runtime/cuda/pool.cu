/* pool.cu - Pooling's kernels (pool.cuh, with layout.cuh's element helpers),
 * built by nvcc into libampccuda.a with kernels.cu's flags, and by the
 * host's C++ compiler into libampcemu.a; pool.c launches them. */
#define AMPC_LAY_HELPERS_ONLY
#include "cuda/layout.cuh"
#include "cuda/pool.cuh"
