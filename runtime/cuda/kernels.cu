/* kernels.cu - the custom kernels that call no libm, one header per family
 * beside runtime/cpu/'s (dtype, elemwise, act, reduce, loss, optim) and the
 * step's one-thread kernels (step.cuh): built by nvcc into libampccuda.a
 * with -fmad=false and no fast math or flush-to-zero (docs/backend-cuda.md),
 * its PTX free of fma (tests/runtime/cuda_ptx_check.sh), and by the host's
 * C++ compiler into libampcemu.a (the emulator).  ampc_cuda.h and rt_cuda.h
 * declare what it exports. */
#include "cuda/kernels.cuh"
#include "cuda/dtype.cuh"
#include "cuda/elemwise.cuh"
#include "cuda/act.cuh"
#include "cuda/reduce.cuh"
#include "cuda/loss.cuh"
#include "cuda/optim.cuh"
#include "cuda/step.cuh"
