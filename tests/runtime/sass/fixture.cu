/* fixture.cu - planted defects for the SASS check (tests/runtime/cuda_sass_check.sh).
 * Built twice: with -fmad=true, where fixture_fma's and fixture_fma_div's a*b+c
 * contract to an FFMA the check must report (fixture_fma_div's division keeps
 * its own FMA chain, which the check must allow); and with -fmad=false, where
 * nothing may be reported.  fixture_scalar_copy, named as vectorized, must
 * be reported for its 4-byte loads; fixture_vector_copy, named too, passes
 * with its 16-byte ones. */
#include <stddef.h>

__global__ void fixture_fma(float *y, const float *a, const float *b, const float *c, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a[i] * b[i] + c[i];
}

__global__ void fixture_fma_div(float *y, const float *a, const float *b, const float *c,
                                size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = (a[i] * b[i] + c[i]) / (c[i] + 2.0f);
}

__global__ void fixture_div(float *y, const float *a, const float *b, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a[i] / b[i] + sqrtf(b[i]) + 1.0f / a[i];
}

__global__ void fixture_scalar_copy(float *y, const float *x, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i];
}

__global__ void fixture_vector_copy(float4 *y, const float4 *x, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i];
}
