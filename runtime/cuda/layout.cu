/* layout.cu - the kernels around the cuDNN and cuBLASLt calls (layout.cuh:
 * the channel padding of 16-bit NHWC convolutions, the bias), built by nvcc
 * into libampccuda.a with kernels.cu's flags, and by the host's C++ compiler
 * into libampcemu.a. */
#include "cuda/layout.cuh"
