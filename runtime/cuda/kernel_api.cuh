/*
 * kernel_api.cuh - what a kernel source of runtime/cuda/ may use, spelt
 * once for nvcc and for the emulation build (emu_cuda.h; the host's C++
 * compiler, libampcemu.a; docs/backend-cuda.md, "The emulator").  The .cuh
 * files are CUDA C++17; everything below means the same on both sides:
 *
 *   ampc_dptr<T>            a device pointer: T * under nvcc; a checked,
 *                           counted pointer in the emulation.  Every kernel
 *                           parameter that points to device memory is one
 *                           (AMPC_LAUNCH refuses raw pointers there), and so
 *                           is every pointer a kernel reads from a device
 *                           table (ampc_dptr<const void> g = t.grad).  Index
 *                           it, take &p[i]
 *   ampc_dcast<T>(p)        (T *)p, for a device pointer: ampc_dcast<const
 *                           uint4>(x + 4 * i) is a 16-byte vector (16-byte
 *                           aligned, or the emulator fails the launch).  A
 *                           function, since a statement that starts with a
 *                           functional cast, ampc_dptr<T>(p)[i] = v, declares
 *                           an array
 *   AMPC_FIELD(p, m)        &p->m, a device pointer to a struct's field
 *   AMPC_SHARED(T, s, n)    __shared__ T s[n] (48 KiB of static shared
 *                           memory a block, poisoned: read what you wrote)
 *   AMPC_SHARED2(T, s, r, c)  __shared__ T s[r][c]
 *   AMPC_SHARED_DYNAMIC(T, s) extern __shared__: the launch's dynamic size
 *   __syncthreads(), __syncwarp(mask), __shfl_sync, __shfl_up_sync,
 *   __shfl_down_sync, __shfl_xor_sync, __ballot_sync, __any_sync,
 *   __all_sync              as on sm_70+: every lane of the mask at the same
 *                           call site; no lockstep (shuffles and votes do not
 *                           order memory: __syncwarp does)
 *   atomicAdd/Sub/Exch/Min/Max/And/Or/Xor/CAS/Inc/Dec(&p[i], v)
 *   AMPC_NONDETERMINISTIC() in a kernel that does not promise the same bits
 *                           whatever the order of its float atomicAdds
 *   AMPC_LAUNCH(k, grid, block, stream, args...)       k<<<grid, block, 0, stream>>>
 *   AMPC_LAUNCH_SMEM(k, grid, block, bytes, stream, args...)  with dynamic shared memory
 *   AMPC_LAUNCH_ERROR()     cudaGetLastError() after a launch (0: none)
 *   AMPC_API                extern "C": the launchers ampc_cuda.h declares
 *
 * What the emulation cannot express fails to compile there: a raw pointer
 * parameter, p->m on a device pointer, __shared__ written out, the
 * pre-Volta __shfl/__any/__all/__ballot.
 */
#ifndef AMPC_CUDA_KERNEL_API_CUH
#define AMPC_CUDA_KERNEL_API_CUH

#ifdef __CUDACC__

#include <cuda_runtime.h>

template <class T> using ampc_dptr = T *;
template <class T> __host__ __device__ inline T *ampc_dcast(const void *p) { return (T *)p; }
#define AMPC_FIELD(p, m) (&(p)->m)
#define AMPC_SHARED(T, name, n) __shared__ T name[n]
#define AMPC_SHARED2(T, name, rows, cols) __shared__ T name[rows][cols]
#define AMPC_SHARED_DYNAMIC(T, name)                                                               \
    extern __shared__ __align__(16) unsigned char name##_ampc_raw[];                               \
    T *name = (T *)name##_ampc_raw
#define AMPC_NONDETERMINISTIC() ((void)0)
#define AMPC_LAUNCH(k, grid, block, stream, ...) k<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#define AMPC_LAUNCH_SMEM(k, grid, block, bytes, stream, ...)                                       \
    k<<<(grid), (block), (bytes), (stream)>>>(__VA_ARGS__)
#define AMPC_LAUNCH_ERROR() ((int)cudaGetLastError())

#else /* the emulation build */

#include "emu/emu_cuda.h"

#define AMPC_FIELD(p, m)                                                                           \
    (ampc_dptr<typename std::remove_reference<decltype(((p).ampc_raw()->m))>::type>(               \
        &(p).ampc_raw()->m))
#define AMPC_SHARED(T, name, n) AMPC_EMU_SHARED(T, name, sizeof(T) * (n))
#define AMPC_SHARED2(T, name, rows, cols)                                                          \
    AMPC_EMU_SHARED(T[cols], name, sizeof(T) * (rows) * (cols))
#define AMPC_SHARED_DYNAMIC(T, name) ampc_dptr<T> name((T *)ampc_emu_shared_dynamic(#name))
#define AMPC_NONDETERMINISTIC() ampc_emu_nondeterministic()
#define AMPC_LAUNCH(k, grid, block, stream, ...)                                                   \
    ampc_emu::launch(#k, k, (grid), (block), 0, (stream), __VA_ARGS__)
#define AMPC_LAUNCH_SMEM(k, grid, block, bytes, stream, ...)                                       \
    ampc_emu::launch(#k, k, (grid), (block), (bytes), (stream), __VA_ARGS__)
#define AMPC_LAUNCH_ERROR() ampc_emu_launch_status()

#endif

#define AMPC_API extern "C"

#endif /* AMPC_CUDA_KERNEL_API_CUH */
