/* ingest.cu - a raw batch normalised on the device (ingest.cuh), built by
 * nvcc into libampccuda.a with kernels.cu's flags and by the host's C++
 * compiler into libampcemu.a. */
#include "cuda/ingest.cuh"
