/* synthetic.cu - the synthetic batch made on the device (synthetic.cuh),
 * built by nvcc into libampccuda.a with kernels.cu's flags and by the
 * host's C++ compiler into libampcemu.a. */
#include "cuda/synthetic.cuh"
