/*
 * vec.cuh - eight elements at a time through 16-byte accesses: the helpers
 * of the vectorized kernels (batchnorm.cuh, dtype.cuh, elemwise.cuh, act.cuh), in
 * cuda/kernel_api.cuh's spelling for nvcc and the emulator.
 *
 * Eight elements of one dtype are one 16-byte access in fp16 and bf16 and
 * two in fp32 (float4s), at an element index that is a multiple of 8 of a
 * 16-byte aligned pointer: the memory plan places every buffer so
 * (docs/codegen.md, "Memory plan"), and the launchers check the pointers
 * they are given (ampc_v8_aligned) and take their scalar path when one is
 * not.  The values are fp32 in registers, decoded and rounded by
 * kernels/half.h as one element at a time would be: the same bits.
 */
#ifndef AMPC_CUDA_VEC_CUH
#define AMPC_CUDA_VEC_CUH

#include <stddef.h>
#include <stdint.h>

#include "cuda/kernel_api.cuh"

#include "cuda/ampc_cuda.h"
#include "kernels/half.h"

#define AMPC_V8 8 /* elements of one vector */

/* whether p can be read and written eight elements at a time (NULL can:
 * an absent operand) */
static inline bool ampc_v8_aligned(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* the two 16-bit elements of a 32-bit word, low first (little-endian) */
static inline __device__ float ampc_v8_half(uint32_t w, int hi, int dt)
{
    uint16_t b = (uint16_t)(hi ? w >> 16 : w & 0xffffu);
    return dt == AMPC_DT_F16 ? ampc_half_to_float(b) : ampc_bf16_to_float(b);
}

static inline __device__ uint32_t ampc_v8_pack(float lo, float hi, int dt)
{
    uint32_t a = dt == AMPC_DT_F16 ? ampc_float_to_half(lo) : ampc_float_to_bf16(lo);
    uint32_t b = dt == AMPC_DT_F16 ? ampc_float_to_half(hi) : ampc_float_to_bf16(hi);
    return a | b << 16;
}

/* v[0, 8) = p[8q, 8q + 8) as fp32 */
static inline __device__ void ampc_v8_load(ampc_dptr<const void> p, size_t q, int dt, float *v)
{
    if (dt == AMPC_DT_F32) {
        float4 a = ampc_dcast<const float4>(p)[2 * q], b = ampc_dcast<const float4>(p)[2 * q + 1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        return;
    }
    uint4 u = ampc_dcast<const uint4>(p)[q];
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
    for (int k = 0; k < 4; k++) {
        v[2 * k] = ampc_v8_half(w[k], 0, dt);
        v[2 * k + 1] = ampc_v8_half(w[k], 1, dt);
    }
}

/* p[8q, 8q + 8) = v rounded to dt */
static inline __device__ void ampc_v8_store(ampc_dptr<void> p, size_t q, int dt, const float *v)
{
    if (dt == AMPC_DT_F32) {
        ampc_dcast<float4>(p)[2 * q] = make_float4(v[0], v[1], v[2], v[3]);
        ampc_dcast<float4>(p)[2 * q + 1] = make_float4(v[4], v[5], v[6], v[7]);
        return;
    }
    ampc_dcast<uint4>(p)[q] =
        make_uint4(ampc_v8_pack(v[0], v[1], dt), ampc_v8_pack(v[2], v[3], dt),
                   ampc_v8_pack(v[4], v[5], dt), ampc_v8_pack(v[6], v[7], dt));
}

/* v[0, 8) of an fp32 array (a kernel's per-channel constants) */
static inline __device__ void ampc_v8_load_f32(ampc_dptr<const float> p, size_t q, float *v)
{
    ampc_v8_load(p, q, AMPC_DT_F32, v);
}

/* v rounded to dt and back: where an unfused op stores its value and the
 * next reads it (nothing in fp32) */
static inline __device__ float ampc_v8_round(float v, int dt)
{
    if (dt == AMPC_DT_F16)
        return ampc_half_to_float(ampc_float_to_half(v));
    if (dt == AMPC_DT_BF16)
        return ampc_bf16_to_float(ampc_float_to_bf16(v));
    return v;
}

#endif /* AMPC_CUDA_VEC_CUH */
