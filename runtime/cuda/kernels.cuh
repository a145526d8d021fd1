/*
 * kernels.cuh - the custom CUDA kernels and their launchers (the functions
 * of ampc_cuda.h), in one CUDA C++17 source that nvcc compiles for the GPU
 * (runtime/cuda/kernels.cu, into libampccuda.a) and the host's C++
 * compiler compiles for the emulator (the same kernels.cu, into
 * libampcemu.a; cuda/emu_cuda.h), so the code the GPU runs is the code
 * checked against the CPU twins in `make check` (tests/runtime/
 * test_cuda_emu.c), under the emulator's scheduler and memory checks.
 *
 * Kernels use cuda/kernel_api.cuh's spelling: device memory only through
 * ampc_dptr<T>.  None of these uses shared memory, a barrier or a warp
 * primitive; no thread reads what another thread of its launch writes
 * (the emulator would report the race).  The one store several threads
 * may make to the same word is the flag's 1 (the same value whoever wins,
 * as PyTorch's found_inf): a write-write race the emulator reports too,
 * so the flag is set with atomicOr.
 *
 * The per-element math is runtime/kernels/ (half.h, act.h, optim.h,
 * lossscale.h), in the CPU kernels' order of operations; nvcc builds this
 * with -fmad=false and without fast math or flush-to-zero, so each
 * operation rounds as on the host (the PTX check,
 * tests/runtime/cuda_ptx_check.sh).
 */
#ifndef AMPC_CUDA_KERNELS_CUH
#define AMPC_CUDA_KERNELS_CUH

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cuda/kernel_api.cuh"

#include "cuda/ampc_cuda.h"
#include "kernels/act.h"
#include "kernels/half.h"
#include "kernels/lossscale.h"
#include "kernels/optim.h"

#define AMPC_CU_API AMPC_API

/* Threads per block and the most blocks of the grid-stride (element-wise)
 * kernels; the tests make the cap small to exercise the stride. */
#define AMPC_CU_THREADS 256
#ifndef AMPC_CU_GRID_CAP
#ifdef __CUDACC__
#define AMPC_CU_GRID_CAP 4096
#else
#define AMPC_CU_GRID_CAP ampc_emu_grid_cap() /* small, so the tests' loops wrap */
#endif
#endif

/* ---- element access ---------------------------------------------------------- */

static inline __device__ float ampc_cu_load(ampc_dptr<const void> p, size_t i, int dt)
{
    if (dt == AMPC_DT_F32)
        return ampc_dcast<const float>(p)[i];
    if (dt == AMPC_DT_F16)
        return ampc_half_to_float(ampc_dcast<const ampc_half>(p)[i]);
    return ampc_bf16_to_float(ampc_dcast<const ampc_bf16>(p)[i]);
}

static inline __device__ void ampc_cu_store(ampc_dptr<void> p, size_t i, int dt, float v)
{
    if (dt == AMPC_DT_F32)
        ampc_dcast<float>(p)[i] = v;
    else if (dt == AMPC_DT_F16)
        ampc_dcast<ampc_half>(p)[i] = ampc_float_to_half(v);
    else
        ampc_dcast<ampc_bf16>(p)[i] = ampc_float_to_bf16(v);
}

/* rt__commit's rule: dst = (acc ? dst : 0) + v in fp32, rounded once */
static inline __device__ void ampc_cu_store_acc(ampc_dptr<void> p, size_t i, int dt, float v,
                                                int acc)
{
    if (acc)
        v = ampc_cu_load(p, i, dt) + v;
    ampc_cu_store(p, i, dt, v);
}

/* inf or NaN, on the stored bits (a 16-bit value is not widened) */
static inline __device__ int ampc_cu_nonfinite(ampc_dptr<const void> p, size_t i, int dt)
{
    if (dt == AMPC_DT_F32)
        return !ampc_isfinite(ampc_dcast<const float>(p)[i]);
    if (dt == AMPC_DT_F16)
        return !ampc_half_isfinite(ampc_dcast<const ampc_half>(p)[i]);
    return !ampc_bf16_isfinite(ampc_dcast<const ampc_bf16>(p)[i]);
}

/* grid-stride loops: the first element of this thread, and the stride */
static inline __device__ size_t ampc_cu_first(void)
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
static inline __device__ size_t ampc_cu_stride(void) { return (size_t)gridDim.x * blockDim.x; }

static inline unsigned ampc_cu_grid(size_t n)
{
    size_t b = (n + AMPC_CU_THREADS - 1) / AMPC_CU_THREADS;
    return b < AMPC_CU_GRID_CAP ? (unsigned)b : (unsigned)AMPC_CU_GRID_CAP;
}

/* A second translation unit that needs only the helpers above (math.cu,
 * for ops_math.cuh) defines AMPC_CU_HELPERS_ONLY: the kernels and their
 * launchers below are kernels.cu's alone. */
#ifndef AMPC_CU_HELPERS_ONLY

/* ---- kernels: flag, casts, element-wise --------------------------------------- */

__global__ void ampc_k_set_flag(ampc_dptr<int32_t> flag, int32_t value)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *flag = value;
}

/* from == to without acc is a copy of the bits (rt_copy: a NaN's payload
 * and a signalling NaN survive); anything else goes through fp32. */
__global__ void ampc_k_cast(size_t n, int from, ampc_dptr<const void> x, int to,
                            ampc_dptr<void> y, int acc)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        if (from == to && !acc) {
            if (to == AMPC_DT_F32)
                ampc_dcast<uint32_t>(y)[i] = ampc_dcast<const uint32_t>(x)[i];
            else
                ampc_dcast<uint16_t>(y)[i] = ampc_dcast<const uint16_t>(x)[i];
        } else {
            ampc_cu_store_acc(y, i, to, ampc_cu_load(x, i, from), acc);
        }
    }
}

__global__ void ampc_k_binary(int op, size_t n, int dt, ampc_dptr<const void> a,
                              ampc_dptr<const void> b, ampc_dptr<void> y)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float va = ampc_cu_load(a, i, dt), vb = ampc_cu_load(b, i, dt);
        float r = op == AMPC_BIN_ADD ? va + vb : op == AMPC_BIN_SUB ? va - vb : va * vb;
        ampc_cu_store(y, i, dt, r);
    }
}

/* dA = dy (add, sub) or dy*b (mul); dB = dy, -dy or dy*a; dA stored before
 * dB, so da == db accumulates as the CPU's two passes do */
__global__ void ampc_k_binary_backward(int op, size_t n, int dt, ampc_dptr<const void> dy,
                                       ampc_dptr<const void> a, ampc_dptr<const void> b,
                                       ampc_dptr<void> da, ampc_dptr<void> db, int acc_a,
                                       int acc_b)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float g = ampc_cu_load(dy, i, dt);
        if (da)
            ampc_cu_store_acc(da, i, dt, op == AMPC_BIN_MUL ? g * ampc_cu_load(b, i, dt) : g,
                              acc_a);
        if (db) {
            float r = op == AMPC_BIN_ADD ? g : op == AMPC_BIN_SUB ? -g : g * ampc_cu_load(a, i, dt);
            ampc_cu_store_acc(db, i, dt, r, acc_b);
        }
    }
}

static inline AMPC_HD float ampc_cu_scalar_op(int op, float v, float s)
{
    switch (op) {
    case AMPC_SCALAR_PLUS: return v + s;
    case AMPC_SCALAR_MINUS: return v - s;
    case AMPC_SCALAR_RMINUS: return s - v;
    case AMPC_SCALAR_MUL: return v * s;
    case AMPC_SCALAR_DIV: return v / s;
    default: return s / v;
    }
}

__global__ void ampc_k_scalar(int op, size_t n, int dt, ampc_dptr<const void> x, float s,
                              ampc_dptr<void> y)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride())
        ampc_cu_store(y, i, dt, ampc_cu_scalar_op(op, ampc_cu_load(x, i, dt), s));
}

/* rt_scalar_backward's expressions: rdiv is -dy*s / (x*x) */
__global__ void ampc_k_scalar_backward(int op, size_t n, int dt, ampc_dptr<const void> x, float s,
                                       ampc_dptr<const void> dy, ampc_dptr<void> dx, int acc)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float g = ampc_cu_load(dy, i, dt), r;
        if (op == AMPC_SCALAR_PLUS || op == AMPC_SCALAR_MINUS) {
            r = g;
        } else if (op == AMPC_SCALAR_RMINUS) {
            r = -g;
        } else if (op == AMPC_SCALAR_MUL) {
            r = g * s;
        } else if (op == AMPC_SCALAR_DIV) {
            r = g / s;
        } else {
            float v = ampc_cu_load(x, i, dt);
            r = -g * s / (v * v);
        }
        ampc_cu_store_acc(dx, i, dt, r, acc);
    }
}

/* relu(a + b) with the sum rounded to dt first, where the unfused add
 * stores it (rt_add_relu_forward) */
__global__ void ampc_k_add_relu(size_t n, int dt, ampc_dptr<const void> a,
                                ampc_dptr<const void> b, ampc_dptr<void> y)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float s = ampc_cu_load(a, i, dt) + ampc_cu_load(b, i, dt);
        if (dt == AMPC_DT_F16)
            s = ampc_half_to_float(ampc_float_to_half(s));
        else if (dt == AMPC_DT_BF16)
            s = ampc_bf16_to_float(ampc_float_to_bf16(s));
        ampc_cu_store(y, i, dt, ampc_relu(s));
    }
}

__global__ void ampc_k_relu(size_t n, int dt, ampc_dptr<const void> x, ampc_dptr<void> y)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride())
        ampc_cu_store(y, i, dt, ampc_relu(ampc_cu_load(x, i, dt)));
}

/* dx = dy * relu'(y) (MXNet differentiates relu through its output) */
__global__ void ampc_k_relu_backward(size_t n, int dt, ampc_dptr<const void> y,
                                     ampc_dptr<const void> dy, ampc_dptr<void> dx, int acc)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float g = ampc_cu_load(dy, i, dt) * ampc_relu_grad_y(ampc_cu_load(y, i, dt));
        ampc_cu_store_acc(dx, i, dt, g, acc);
    }
}

/* bits: the value rounded to the dtype once, on the host */
__global__ void ampc_k_fill(ampc_dptr<void> dst, int dt, size_t n, uint32_t bits)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        if (dt == AMPC_DT_F32)
            ampc_dcast<uint32_t>(dst)[i] = bits;
        else
            ampc_dcast<uint16_t>(dst)[i] = (uint16_t)bits;
    }
}

/* ---- the finite checks ----------------------------------------------------------- */

/* the flag's 1: atomic, since several threads may store it (the same value) */
static inline __device__ void ampc_cu_raise(ampc_dptr<int32_t> flag)
{
    atomicOr(ampc_dcast<int>(flag), 1);
}

__global__ void ampc_k_finite(ampc_dptr<const void> p, size_t n, int dt, ampc_dptr<int32_t> found)
{
    int bad = 0;
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride())
        bad |= ampc_cu_nonfinite(p, i, dt);
    if (bad)
        ampc_cu_raise(found);
}

/* The range of block blockIdx.x in a multi-tensor launch: [*lo, *hi) of
 * the tensor returned (its table entry, read once). */
static inline __device__ AmpcMtTensor ampc_cu_mt_range(ampc_dptr<const AmpcMtTensor> tensors,
                                                       ampc_dptr<const AmpcMtBlock> blocks,
                                                       int64_t chunk, size_t *lo, size_t *hi)
{
    AmpcMtBlock b = blocks[blockIdx.x];
    AmpcMtTensor t = tensors[b.tensor];
    size_t first = (size_t)b.chunk * (size_t)chunk;
    size_t n = (size_t)t.n;
    *lo = first;
    *hi = n - first < (size_t)chunk ? n : first + (size_t)chunk;
    return t;
}

__global__ void ampc_k_mt_finite(ampc_dptr<const AmpcMtTensor> tensors,
                                 ampc_dptr<const AmpcMtBlock> blocks, int64_t chunk,
                                 ampc_dptr<int32_t> found)
{
    size_t lo, hi;
    AmpcMtTensor t = ampc_cu_mt_range(tensors, blocks, chunk, &lo, &hi);
    ampc_dptr<const void> g = t.grad;
    int dt = t.gdt, bad = 0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
        bad |= ampc_cu_nonfinite(g, i, dt);
    if (bad)
        ampc_cu_raise(found);
}

/* ---- the fused multi-tensor optimizer ------------------------------------------ */

/* optim.c's update_f32: which update an element gets (with_mom: the tensor
 * has a momentum or mean state; the pointers are the thread's registers) */
static inline AMPC_HD void ampc_cu_update(float *w, float *mom, float *var, int with_mom, float g,
                                          AmpcOptParam q, int kind)
{
    if (kind == AMPC_OPT_ADAM)
        ampc_adam_update(w, mom, var, g, q);
    else if (!with_mom)
        ampc_sgd_update(w, g, q);
    else if (kind == AMPC_OPT_NAG)
        ampc_nag_mom_update(w, mom, g, q);
    else
        ampc_sgd_mom_update(w, mom, g, q);
}

/* rt_optim_step2's per-tensor parameters (lr x lr_mult, wd x wd_mult, Adam's
 * lr_t in double) from the step and the table */
static inline __device__ AmpcOptParam ampc_cu_opt_param(const AmpcMtStep *s, const AmpcMtTensor *t,
                                                        ampc_dptr<const float> scale)
{
    AmpcOptParam q;
    q.lr = s->lr * t->lr_mult;
    q.wd = s->wd * t->wd_mult;
    q.momentum = s->momentum;
    q.rescale_grad = scale ? (float)(1.0 / (s->batch * (double)*scale))
                           : s->rescale_grad;
    q.clip_gradient = s->clip_gradient;
    q.beta1 = 0.0f;
    q.beta2 = 0.0f;
    q.epsilon = 0.0f;
    if (s->kind == AMPC_OPT_ADAM) {
        q.beta1 = s->beta1;
        q.beta2 = s->beta2;
        q.epsilon = s->epsilon;
        q.lr = (float)(((double)s->lr * (double)t->lr_mult) * s->adam_corr);
    }
    return q;
}

/* Each element is read and written once: gradient, master (or weight) and
 * state in, master, state and weight (the 16-bit shadow) out; bytes per
 * parameter as optim.c's (docs/backend-cuda.md). */
__global__ void ampc_k_mt_optim(ampc_dptr<const AmpcMtTensor> tensors,
                                ampc_dptr<const AmpcMtBlock> blocks, int64_t chunk,
                                AmpcMtStep step, ampc_dptr<const AmpcMtStep> step_dev,
                                ampc_dptr<const int32_t> skip, ampc_dptr<int32_t> found,
                                ampc_dptr<const float> scale)
{
    if (skip && *skip)
        return;
    if (step_dev)
        step = *step_dev;
    size_t lo, hi;
    AmpcMtTensor t = ampc_cu_mt_range(tensors, blocks, chunk, &lo, &hi);
    AmpcOptParam q = ampc_cu_opt_param(&step, &t, scale);
    ampc_dptr<const void> grad = t.grad;
    ampc_dptr<void> weight = t.weight;
    ampc_dptr<float> master = t.master, mom = t.mom, var = t.var;
    int gdt = t.gdt, wdt = t.wdt, kind = step.kind, bad = 0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float g = ampc_cu_load(grad, i, gdt);
        bad |= !ampc_isfinite(g);
        float w = master ? (float)master[i] : ampc_cu_load(weight, i, wdt);
        /* the states in registers (no pointer that may be NULL, so none goes
         * to local memory): each element read and written once */
        float m = mom ? (float)mom[i] : 0.0f, v = var ? (float)var[i] : 0.0f;
        ampc_cu_update(&w, &m, &v, mom ? 1 : 0, g, q, kind);
        if (mom)
            mom[i] = m;
        if (var)
            var[i] = v;
        if (master)
            master[i] = w;
        ampc_cu_store(weight, i, wdt, w);
    }
    if (bad && found)
        ampc_cu_raise(found);
}

/* ---- the loss scale ---------------------------------------------------------------- */

/* One thread: the rule of kernels/lossscale.h on the device flag, so the
 * scale the next step uses never passes through the host. */
__global__ void ampc_k_loss_scale(ampc_dptr<AmpcLossScale> state, ampc_dptr<const int32_t> found,
                                  AmpcLossScaleRule rule, ampc_dptr<AmpcLossScaleStats> stats)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    AmpcLossScale old = *state;
    int inf = *found != 0;
    AmpcLossScale now = ampc_loss_scale_update(old, inf, rule);
    *state = now;
    if (stats) {
        AmpcLossScaleStats c = *stats;
        c.steps++;
        c.skipped += inf;
        c.grown += now.scale > old.scale;
        c.backed_off += now.scale < old.scale;
        *stats = c;
    }
}

/* ---- launchers (ampc_cuda.h) ------------------------------------------------------- */

AMPC_CU_API int64_t ampc_mt_count_blocks(const AmpcMtTensor *t, int nt, int64_t chunk)
{
    if (chunk <= 0 || nt < 0)
        return -1;
    int64_t total = 0;
    for (int i = 0; i < nt; i++) {
        if (t[i].n < 0)
            return -1;
        int64_t c = t[i].n / chunk + (t[i].n % chunk != 0);
        if (c > INT32_MAX || total > INT32_MAX - c)
            return -1;
        total += c;
    }
    return total;
}

AMPC_CU_API int64_t ampc_mt_fill_blocks(const AmpcMtTensor *t, int nt, int64_t chunk,
                                        AmpcMtBlock *out)
{
    int64_t total = ampc_mt_count_blocks(t, nt, chunk);
    if (total < 0)
        return -1;
    int64_t k = 0;
    for (int i = 0; i < nt; i++)
        for (int64_t c = 0; c * chunk < t[i].n; c++) {
            out[k].tensor = i;
            out[k].chunk = (int32_t)c;
            k++;
        }
    return k;
}

AMPC_CU_API int ampc_cu_set_flag(AmpcStream s, int32_t *flag, int32_t value)
{
    AMPC_LAUNCH(ampc_k_set_flag, 1, 1, s, flag, value);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_cast(AmpcStream s, size_t n, int from, const void *x, int to, void *y,
                             int acc)
{
    if (n == 0 || (from == to && !acc && x == y))
        return 0;
    AMPC_LAUNCH(ampc_k_cast, ampc_cu_grid(n), AMPC_CU_THREADS, s, n, from, x, to, y, acc);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_binary(AmpcStream s, int op, size_t n, int dt, const void *a,
                               const void *b, void *y)
{
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_binary, ampc_cu_grid(n), AMPC_CU_THREADS, s, op, n, dt, a, b, y);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_binary_backward(AmpcStream s, int op, size_t n, int dt, const void *dy,
                                        const void *a, const void *b, void *da, void *db,
                                        int acc_a, int acc_b)
{
    if (n == 0 || (!da && !db))
        return 0;
    AMPC_LAUNCH(ampc_k_binary_backward, ampc_cu_grid(n), AMPC_CU_THREADS, s, op, n, dt, dy, a, b,
                da, db, acc_a, acc_b);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_scalar(AmpcStream s, int op, size_t n, int dt, const void *x,
                               float scalar, void *y)
{
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_scalar, ampc_cu_grid(n), AMPC_CU_THREADS, s, op, n, dt, x, scalar, y);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_scalar_backward(AmpcStream s, int op, size_t n, int dt, const void *x,
                                        float scalar, const void *dy, void *dx, int acc)
{
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_scalar_backward, ampc_cu_grid(n), AMPC_CU_THREADS, s, op, n, dt, x, scalar,
                dy, dx, acc);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_add_relu(AmpcStream s, size_t n, int dt, const void *a, const void *b,
                                 void *y)
{
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_add_relu, ampc_cu_grid(n), AMPC_CU_THREADS, s, n, dt, a, b, y);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_relu(AmpcStream s, size_t n, int dt, const void *x, void *y)
{
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_relu, ampc_cu_grid(n), AMPC_CU_THREADS, s, n, dt, x, y);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_relu_backward(AmpcStream s, size_t n, int dt, const void *y,
                                      const void *dy, void *dx, int acc)
{
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_relu_backward, ampc_cu_grid(n), AMPC_CU_THREADS, s, n, dt, y, dy, dx,
                acc);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_fill(AmpcStream s, void *dst, int dt, size_t n, float value)
{
    if (n == 0)
        return 0;
    uint32_t bits = dt == AMPC_DT_F32 ? ampc_f32_bits(value)
                  : dt == AMPC_DT_F16 ? ampc_float_to_half(value)
                                      : ampc_float_to_bf16(value);
    AMPC_LAUNCH(ampc_k_fill, ampc_cu_grid(n), AMPC_CU_THREADS, s, dst, dt, n, bits);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_finite(AmpcStream s, const void *p, size_t n, int dt, int32_t *found)
{
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_finite, ampc_cu_grid(n), AMPC_CU_THREADS, s, p, n, dt, found);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_mt_finite(AmpcStream s, const AmpcMtTensor *tensors,
                                  const AmpcMtBlock *blocks, int64_t nblocks, int64_t chunk,
                                  int32_t *found)
{
    if (nblocks <= 0)
        return 0;
    AMPC_LAUNCH(ampc_k_mt_finite, nblocks, AMPC_MT_THREADS, s, tensors, blocks, chunk, found);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_mt_optim(AmpcStream s, const AmpcMtTensor *tensors,
                                 const AmpcMtBlock *blocks, int64_t nblocks, int64_t chunk,
                                 const AmpcMtStep *step, const AmpcMtStep *step_dev,
                                 const int32_t *skip, int32_t *found, const float *scale)
{
    AmpcMtStep none;
    if (nblocks <= 0)
        return 0;
    if (!step) {
        memset(&none, 0, sizeof none);
        step = &none; /* step_dev gives the step */
    }
    AMPC_LAUNCH(ampc_k_mt_optim, nblocks, AMPC_MT_THREADS, s, tensors, blocks, chunk, *step,
                step_dev, skip, found, scale);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_loss_scale(AmpcStream s, AmpcLossScale *state, const int32_t *found,
                                   AmpcLossScaleRule rule, AmpcLossScaleStats *stats)
{
    AMPC_LAUNCH(ampc_k_loss_scale, 1, 1, s, state, found, rule, stats);
    return AMPC_LAUNCH_ERROR();
}

#endif /* AMPC_CU_HELPERS_ONLY */

#endif /* AMPC_CUDA_KERNELS_CUH */
