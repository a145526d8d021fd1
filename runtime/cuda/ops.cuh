/*
 * ops.cuh - the CUDA twins of the rest of rt.h: every kernel the emitter
 * calls that is not a convolution, FullyConnected, pooling or BatchNorm
 * (those are conv.c, fc.c, pool.c, batchnorm.c).  Each rt_cuda_<name> has
 * rt_<name>'s signature (rt_cuda.h declares them), takes device pointers and
 * runs on the stream given to rt_cuda_init.
 *
 * One CUDA C++17 source for nvcc (kernels.cu builds it after kernels.cuh,
 * whose element access it uses) and for the emulator (the same kernels.cu
 * in libampcemu.a; tests/runtime/test_cuda_ops_emu.c), with kernels.cuh's
 * rules: device memory through ampc_dptr (cuda/kernel_api.cuh), no shared
 * memory, no barriers, no warp intrinsics, no thread reads what another
 * thread of its launch writes.  Each kernel computes with runtime/kernels/ in the CPU
 * twin's order of operations (runtime/cpu/act.c, elemwise.c, reduce.c,
 * loss.c, batchnorm.c), so the emulation gives the CPU's bits, and so does
 * the GPU: no libm here, and kernels.cu's PTX check (no fma, .ftz, .approx)
 * covers these kernels.  The twins that call libm (activations but relu,
 * elu/selu, exp/log, softmax) are ops_math.cuh's, built by math.cu.
 *
 * Reductions (the broadcast backward, sum/mean, the loss head's valid
 * count; ops_math.cuh's prelu dgamma and softmax) run one thread per output in the
 * CPU's order of summation: bit for bit, not fast.
 *
 * Every rt_cuda_<name> takes the device's context first (rt_cuda.h), whose
 * stream it launches on.  The step's state (rt.h's RtStepState, a device
 * pointer) is an argument of rt_cuda_softmax_output_backward and
 * rt_cuda_batchnorm_update_moving, which read it on the device.
 */
#ifndef AMPC_CUDA_OPS_CUH
#define AMPC_CUDA_OPS_CUH

#ifndef AMPC_CUDA_KERNELS_CUH
#error "include cuda/kernels.cuh before cuda/ops.cuh"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/rt_cuda.h"
#include "kernels/loss.h"
#include "kernels/philox.h"

/* ---- Dropout (act.c): the same Philox counter and key (kernels/philox.h) ------------ */

/* one thread per four elements (one Philox call): out = in * (kept ? 1/(1-p) : 0) */
__global__ void ampc_k_dropout(size_t n, int dt, ampc_dptr<const void> in, float p, uint64_t seed,
                               uint64_t step, uint32_t stream, ampc_dptr<void> out, int acc)
{
    float scale = 1.0f / (1.0f - p);
    size_t nq = n / 4 + (n % 4 != 0);
    for (size_t q = ampc_cu_first(); q < nq; q += ampc_cu_stride()) {
        uint32_t u[4];
        ampc_dropout_block(seed, step, stream, q, u);
        for (size_t k = 0; k < 4 && 4 * q + k < n; k++) {
            size_t i = 4 * q + k;
            float r = ampc_u24(u[k]) >= p ? ampc_cu_load(in, i, dt) * scale : 0.0f;
            ampc_cu_store_acc(out, i, dt, r, acc);
        }
    }
}

/* ---- clip (elemwise.c) --------------------------------------------- */

/* grad 0: y = clip(x) (a NaN passes); grad 1: dx (+)= lo <= x <= hi ? dy : 0 */
__global__ void ampc_k_clip(int grad, size_t n, int dt, ampc_dptr<const void> x, float lo,
                            float hi, ampc_dptr<const void> dy, ampc_dptr<void> out, int acc)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float v = ampc_cu_load(x, i, dt);
        if (grad)
            ampc_cu_store_acc(out, i, dt, v > hi || v < lo ? 0.0f : ampc_cu_load(dy, i, dt), acc);
        else
            ampc_cu_store(out, i, dt, v < lo ? lo : v > hi ? hi : v);
    }
}

/* ---- Concat and slice, the layout conversion: bit copies ------------------------------ */

static inline __device__ void ampc_ops_copy(ampc_dptr<void> dst, size_t j, ampc_dptr<const void> src,
                                            size_t i, int dt)
{
    if (dt == AMPC_DT_F32)
        ampc_dcast<uint32_t>(dst)[j] = ampc_dcast<const uint32_t>(src)[i];
    else
        ampc_dcast<uint16_t>(dst)[j] = ampc_dcast<const uint16_t>(src)[i];
}

/* part [outer, seg] <-> its columns [start, start+seg) of whole [outer, row]: to_whole 1
 * copies the part in (Concat), 0 out (slice: the copy, or the fp32 sum when acc) */
__global__ void ampc_k_concat(int to_whole, size_t outer, size_t seg, size_t row, size_t start,
                              int dt, ampc_dptr<const void> src, ampc_dptr<void> dst, int acc)
{
    size_t n = outer * seg;
    for (size_t e = ampc_cu_first(); e < n; e += ampc_cu_stride()) {
        size_t w = e / seg * row + start + e % seg;
        if (to_whole)
            ampc_ops_copy(dst, w, src, e, dt);
        else if (acc)
            ampc_cu_store_acc(dst, e, dt, ampc_cu_load(src, w, dt), 1);
        else
            ampc_ops_copy(dst, e, src, w, dt);
    }
}

/* to NHWC: dst [n][hw][c] from src [n][c][hw]; to NCHW the inverse (rt_layout_convert) */
__global__ void ampc_k_layout(size_t n, size_t c, size_t hw, int dt, ampc_dptr<const void> src,
                              ampc_dptr<void> dst, int to_nhwc)
{
    size_t total = n * c * hw;
    for (size_t e = ampc_cu_first(); e < total; e += ampc_cu_stride()) {
        size_t img = e / (c * hw), r = e % (c * hw);
        size_t ch = r / hw, p = r % hw; /* e is [img][ch][p] in NCHW */
        size_t t = (img * hw + p) * c + ch;
        if (to_nhwc)
            ampc_ops_copy(dst, t, src, e, dt);
        else
            ampc_ops_copy(dst, e, src, t, dt);
    }
}

/* ---- broadcasting, sum and mean (elemwise.c, reduce.c) ---------------------------------- */

/* RtBcastDims with cpu.h's strides (0 along a size-1 axis) */
typedef struct {
    int rank;
    int64_t out[RT_MAX_RANK], a[RT_MAX_RANK], b[RT_MAX_RANK], sa[RT_MAX_RANK], sb[RT_MAX_RANK];
} AmpcBcast;

static inline AMPC_HD void ampc_ops_strides(const int64_t *shape, int r, int64_t *st)
{
    int64_t s = 1;
    for (int i = r - 1; i >= 0; i--) {
        st[i] = shape[i] == 1 ? 0 : s;
        s *= shape[i];
    }
}

static inline AMPC_HD size_t ampc_ops_numel(const int64_t *shape, int r)
{
    size_t n = 1;
    for (int i = 0; i < r; i++)
        n *= (size_t)shape[i];
    return n;
}

/* element e of out: its offsets in a and b */
static inline __device__ void ampc_ops_offsets(const AmpcBcast *g, size_t e, size_t *oa,
                                               size_t *ob)
{
    size_t a = 0, b = 0;
    for (int i = g->rank - 1; i >= 0; i--) {
        size_t k = e % (size_t)g->out[i];
        e /= (size_t)g->out[i];
        a += k * (size_t)g->sa[i];
        b += k * (size_t)g->sb[i];
    }
    *oa = a;
    *ob = b;
}

/* y = a op b */
__global__ void ampc_k_bcast_fwd(int op, AmpcBcast g, int dt, ampc_dptr<const void> a,
                                 ampc_dptr<const void> b, ampc_dptr<void> y)
{
    size_t n = ampc_ops_numel(g.out, g.rank);
    for (size_t e = ampc_cu_first(); e < n; e += ampc_cu_stride()) {
        size_t oa, ob;
        ampc_ops_offsets(&g, e, &oa, &ob);
        float va = ampc_cu_load(a, oa, dt), vb = ampc_cu_load(b, ob, dt);
        ampc_cu_store(y, e, dt, op == RT_BIN_ADD ? va + vb : op == RT_BIN_SUB ? va - vb : va * vb);
    }
}

/* An element of one side's gradient before reduction: sign*dy, or dy*other (mul). */
static inline __device__ float ampc_ops_bgrad(ampc_dptr<const void> dy, size_t e,
                                              ampc_dptr<const void> other, size_t oo, int dt,
                                              float sign)
{
    float gv = ampc_cu_load(dy, e, dt);
    return other ? gv * ampc_cu_load(other, oo, dt) : sign * gv;
}

/* The side of the broadcast backward with out's size: written per element. */
__global__ void ampc_k_bcast_bwd_full(AmpcBcast g, int side, int dt, ampc_dptr<const void> dy,
                                      ampc_dptr<const void> other, float sign, ampc_dptr<void> dst,
                                      int acc)
{
    size_t n = ampc_ops_numel(g.out, g.rank);
    for (size_t e = ampc_cu_first(); e < n; e += ampc_cu_stride()) {
        size_t oa, ob;
        ampc_ops_offsets(&g, e, &oa, &ob);
        ampc_cu_store_acc(dst, e, dt, ampc_ops_bgrad(dy, e, other, side ? oa : ob, dt, sign),
                          acc);
    }
}

/* A reduced side (a when side is 0, b when 1): one thread per element of
 * it, summing in double in the CPU's order: rows of out (all axes but the
 * last) in order, and within a row the element itself when the side runs
 * along the row, else the row's chunks of 512 each summed first
 * (elemwise.c's rt_broadcast_backward; reduce.c's sum with b all 1s).
 * The thread walks only its rows: an odometer over the axes where the side
 * has size 1, its own coordinates fixed on the others.  dst = the sum times
 * scale (1, or mean's count ratio), rounded once; acc adds. */
#define AMPC_OPS_CHUNK 512
__global__ void ampc_k_bcast_reduce(AmpcBcast g, int side, int dt, ampc_dptr<const void> dy,
                                    ampc_dptr<const void> other, float sign, double scale,
                                    ampc_dptr<void> dst, int acc)
{
    const int64_t *xs = side ? g.b : g.a, *sx = side ? g.sb : g.sa, *so = side ? g.sa : g.sb;
    int r = g.rank;
    size_t nx = ampc_ops_numel(xs, r), len = (size_t)g.out[r - 1];
    for (size_t idx = ampc_cu_first(); idx < nx; idx += ampc_cu_stride()) {
        int64_t k[RT_MAX_RANK];
        size_t rem = idx;
        for (int i = r - 1; i >= 0; i--) {
            k[i] = (int64_t)(rem % (size_t)xs[i]);
            rem /= (size_t)xs[i];
        }
        for (int i = 0; i < r - 1; i++)
            if (!sx[i])
                k[i] = 0;
        double s = 0.0;
        int done = len == 0;
        for (int i = 0; i < r - 1; i++)
            done |= g.out[i] == 0;
        while (!done) {
            size_t row = 0, oo = 0;
            for (int i = 0; i < r - 1; i++) {
                row = row * (size_t)g.out[i] + (size_t)k[i];
                oo += (size_t)k[i] * (size_t)so[i];
            }
            if (sx[r - 1]) {
                size_t col = (size_t)k[r - 1];
                s += (double)ampc_ops_bgrad(dy, row * len + col, other,
                                            oo + col * (size_t)so[r - 1], dt, sign);
            } else {
                for (size_t j = 0; j < len; j += AMPC_OPS_CHUNK) {
                    size_t m = len - j < AMPC_OPS_CHUNK ? len - j : AMPC_OPS_CHUNK;
                    double cs = 0.0;
                    for (size_t i = 0; i < m; i++)
                        cs += (double)ampc_ops_bgrad(dy, row * len + j + i, other,
                                                     oo + (j + i) * (size_t)so[r - 1], dt, sign);
                    s += cs;
                }
            }
            /* the next row of this element: the last free axis first */
            int i = r - 2;
            for (; i >= 0; i--) {
                if (sx[i])
                    continue;
                if (++k[i] < g.out[i])
                    break;
                k[i] = 0;
            }
            done = i < 0;
        }
        ampc_cu_store_acc(dst, idx, dt, (float)(s * scale), acc);
    }
}

/* sum/mean backward: dx (+)= dy at the kept position * scale */
__global__ void ampc_k_reduce_bwd(AmpcBcast g, int dt, ampc_dptr<const void> dy, float scale,
                                  ampc_dptr<void> dx, int acc)
{
    size_t n = ampc_ops_numel(g.out, g.rank);
    for (size_t e = ampc_cu_first(); e < n; e += ampc_cu_stride()) {
        size_t oa, ob;
        ampc_ops_offsets(&g, e, &oa, &ob);
        ampc_cu_store_acc(dx, e, dt, ampc_cu_load(dy, oa, dt) * scale, acc);
    }
}

/* ---- softmax, log_softmax (reduce.c), the loss head (loss.c) ------------------------- */

/* SoftmaxOutput's backward, one thread per row: the scale from the valid
 * count (each thread counts the labels: no barrier) and the device's loss
 * scale (*scale_dev; 1 when NULL), then loss.c's per-element gradient */
__global__ void ampc_k_smo_bwd(size_t n, size_t k, int dt, ampc_dptr<const void> prob,
                               ampc_dptr<const float> label, RtSmoParams p,
                               ampc_dptr<const float> scale_dev, int dxdt, ampc_dptr<void> dx,
                               int acc)
{
    for (size_t row = ampc_cu_first(); row < n; row += ampc_cu_stride()) {
        double valid = 1.0;
        if (p.normalization == RT_SMO_NORM_BATCH) {
            valid = (double)n;
        } else if (p.normalization == RT_SMO_NORM_VALID) {
            int64_t cnt = 0;
            int ign = (int)p.ignore_label;
            for (size_t i = 0; i < n; i++)
                cnt += (int)label[i] != ign;
            valid = cnt > 0 ? (double)cnt : 1.0;
        }
        float ls = scale_dev ? (float)*scale_dev : 1.0f;
        float scale = (float)((double)p.grad_scale / valid * (double)ls);
        float off = ampc_smooth_off(p.smooth_alpha, (int)k);
        int lab = (int)label[row];
        int ignored = p.use_ignore && lab == (int)p.ignore_label;
        for (size_t c = 0; c < k; c++) {
            size_t i = row * k + c;
            float r = ignored ? 0.0f
                              : ampc_softmax_ce_grad(ampc_cu_load(prob, i, dt), (int64_t)c == lab,
                                                     p.smooth_alpha, off, scale);
            ampc_cu_store_acc(dx, i, dxdt, r, acc);
        }
    }
}

/* ---- BatchNorm's moving statistics (batchnorm.c), skipped on the device ------------ */

__global__ void ampc_k_bn_moving(size_t c, int64_t count, ampc_dptr<const float> save_mean,
                                 ampc_dptr<const float> save_invstd, float eps, float momentum,
                                 ampc_dptr<float> moving_mean, ampc_dptr<float> moving_var,
                                 ampc_dptr<const RtStepState> step)
{
    /* a step a dynamic loss scale skips (its flag set) changes nothing */
    if (step && *AMPC_FIELD(step, dynamic) && *AMPC_FIELD(step, flag))
        return;
    for (size_t i = ampc_cu_first(); i < c; i += ampc_cu_stride()) {
        double is = save_invstd[i];
        double var = 1.0 / (is * is) - (double)eps;
        if (var < 0.0)
            var = 0.0;
        if (count > 1)
            var *= (double)count / (double)(count - 1);
        moving_mean[i] = moving_mean[i] * momentum + save_mean[i] * (1.0f - momentum);
        moving_var[i] = moving_var[i] * momentum + (float)var * (1.0f - momentum);
    }
}

/* ---- the rt_cuda_* functions ---------------------------------------------------------- */


#ifndef AMPC_OPS_GO
#define AMPC_OPS_GO(k, n, ...)                                                                \
    do {                                                                                      \
        if ((n) > 0) {                                                                        \
            AMPC_LAUNCH(k, ampc_cu_grid(n), AMPC_CU_THREADS, cx->stream, __VA_ARGS__);        \
            AMPC_CHECK(AMPC_API_CUDA, AMPC_LAUNCH_ERROR());                                   \
        }                                                                                     \
    } while (0)
#define AMPC_OPS_RUN(call) AMPC_CHECK(AMPC_API_CUDA, (call))
#endif

AMPC_CU_API void rt_cuda_copy(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, void *y)
{
    AMPC_OPS_RUN(ampc_cu_cast(cx->stream, n, (int)dt, x, (int)dt, y, 0));
}

AMPC_CU_API void rt_cuda_reshape_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, void *y)
{
    AMPC_OPS_RUN(ampc_cu_cast(cx->stream, n, (int)dt, x, (int)dt, y, 0));
}

AMPC_CU_API void rt_cuda_reshape_backward(RtCudaCtx *cx, size_t n, RtDType dt, const void *dy, void *dx,
                                          bool accumulate)
{
    AMPC_OPS_RUN(ampc_cu_cast(cx->stream, n, (int)dt, dy, (int)dt, dx, accumulate));
}

AMPC_CU_API void rt_cuda_cast_forward(RtCudaCtx *cx, size_t n, RtDType from, const void *x, RtDType to, void *y)
{
    AMPC_OPS_RUN(ampc_cu_cast(cx->stream, n, (int)from, x, (int)to, y, 0));
}

AMPC_CU_API void rt_cuda_cast_backward(RtCudaCtx *cx, size_t n, RtDType ydt, const void *dy, RtDType xdt,
                                       void *dx, bool accumulate)
{
    AMPC_OPS_RUN(ampc_cu_cast(cx->stream, n, (int)ydt, dy, (int)xdt, dx, accumulate));
}

AMPC_CU_API void rt_cuda_layout_convert(RtCudaCtx *cx, int64_t n, int64_t c, int64_t hw, RtDType dt,
                                        const void *src, void *dst, RtLayout to)
{
    if (n < 0 || c < 0 || hw < 0) {
        fprintf(stderr, "ampc: rt_cuda_layout_convert: negative dims (%lld, %lld, %lld)\n",
                (long long)n, (long long)c, (long long)hw);
        exit(1);
    }
    size_t total = (size_t)n * (size_t)c * (size_t)hw;
    AMPC_OPS_GO(ampc_k_layout, total, (size_t)n, (size_t)c, (size_t)hw, (int)dt, src, dst,
                to == RT_LAYOUT_NHWC);
}

AMPC_CU_API void rt_cuda_dropout_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, float p,
                                         uint64_t seed, uint64_t step, uint32_t stream, void *y)
{
    AMPC_OPS_GO(ampc_k_dropout, n / 4 + (n % 4 != 0), n, (int)dt, x, p, seed, step, stream, y, 0);
}

AMPC_CU_API void rt_cuda_dropout_backward(RtCudaCtx *cx, size_t n, RtDType dt, const void *dy, float p,
                                          uint64_t seed, uint64_t step, uint32_t stream,
                                          void *dx, bool accumulate)
{
    AMPC_OPS_GO(ampc_k_dropout, n / 4 + (n % 4 != 0), n, (int)dt, dy, p, seed, step, stream, dx,
                (int)accumulate);
}

AMPC_CU_API void rt_cuda_elemwise_forward(RtCudaCtx *cx, RtBinOp op, size_t n, RtDType dt, const void *a,
                                          const void *b, void *y)
{
    AMPC_OPS_RUN(ampc_cu_binary(cx->stream, (int)op, n, (int)dt, a, b, y));
}

AMPC_CU_API void rt_cuda_add_relu_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *a, const void *b,
                                          void *y)
{
    AMPC_OPS_RUN(ampc_cu_add_relu(cx->stream, n, (int)dt, a, b, y));
}

AMPC_CU_API void rt_cuda_elemwise_backward(RtCudaCtx *cx, RtBinOp op, size_t n, RtDType dt, const void *dy,
                                           const void *a, const void *b, void *da, void *db,
                                           bool acc_a, bool acc_b)
{
    AMPC_OPS_RUN(ampc_cu_binary_backward(cx->stream, (int)op, n, (int)dt, dy, a, b, da, db,
                                         acc_a, acc_b));
}

static AmpcBcast ampc_ops_bcast(const RtBcastDims *d)
{
    AmpcBcast g;
    memset(&g, 0, sizeof g);
    g.rank = d->rank;
    for (int i = 0; i < d->rank; i++) {
        g.out[i] = d->out[i];
        g.a[i] = d->a[i];
        g.b[i] = d->b[i];
    }
    ampc_ops_strides(g.a, g.rank, g.sa);
    ampc_ops_strides(g.b, g.rank, g.sb);
    return g;
}

/* no scratch: each reduced element is summed by its own thread */
AMPC_CU_API size_t rt_cuda_broadcast_workspace_bytes(RtCudaCtx *cx, const RtBcastDims *d, RtDType dt,
                                                     RtPass pass)
{
    (void)cx, (void)d, (void)dt, (void)pass;
    return 0;
}

AMPC_CU_API void rt_cuda_broadcast_forward(RtCudaCtx *cx, RtBinOp op, const RtBcastDims *d, RtDType dt,
                                           const void *a, const void *b, void *y)
{
    AmpcBcast g = ampc_ops_bcast(d);
    size_t n = ampc_ops_numel(g.out, g.rank);
    AMPC_OPS_GO(ampc_k_bcast_fwd, n, (int)op, g, (int)dt, a, b, y);
}

AMPC_CU_API void rt_cuda_broadcast_backward(RtCudaCtx *cx, RtBinOp op, const RtBcastDims *d, RtDType dt,
                                            const void *dy, const void *a, const void *b,
                                            void *da, void *db, bool acc_a, bool acc_b, void *ws)
{
    AmpcBcast g = ampc_ops_bcast(d);
    size_t no = ampc_ops_numel(g.out, g.rank);
    (void)ws;
    for (int side = 0; side < 2; side++) {
        void *dst = side ? db : da;
        if (!dst)
            continue;
        const void *other = op == RT_BIN_MUL ? (side ? a : b) : NULL;
        float sign = side && op == RT_BIN_SUB ? -1.0f : 1.0f;
        int acc = side ? acc_b : acc_a;
        size_t nx = ampc_ops_numel(side ? g.b : g.a, g.rank);
        if (nx == no)
            AMPC_OPS_GO(ampc_k_bcast_bwd_full, no, g, side, (int)dt, dy, other, sign, dst, acc);
        else
            AMPC_OPS_GO(ampc_k_bcast_reduce, nx, g, side, (int)dt, dy, other, sign, 1.0, dst, acc);
    }
}

AMPC_CU_API void rt_cuda_scalar_forward(RtCudaCtx *cx, RtScalarOp op, size_t n, RtDType dt, const void *x,
                                        float s, void *y)
{
    AMPC_OPS_RUN(ampc_cu_scalar(cx->stream, (int)op, n, (int)dt, x, s, y));
}

AMPC_CU_API void rt_cuda_scalar_backward(RtCudaCtx *cx, RtScalarOp op, size_t n, RtDType dt, const void *x,
                                         float s, const void *dy, void *dx, bool accumulate)
{
    AMPC_OPS_RUN(ampc_cu_scalar_backward(cx->stream, (int)op, n, (int)dt, x, s, dy, dx,
                                         accumulate));
}

AMPC_CU_API void rt_cuda_clip_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, float lo, float hi,
                                      void *y)
{
    AMPC_OPS_GO(ampc_k_clip, n, 0, n, (int)dt, x, lo, hi, (const void *)NULL, y, 0);
}

AMPC_CU_API void rt_cuda_clip_backward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, float lo, float hi,
                                       const void *dy, void *dx, bool accumulate)
{
    AMPC_OPS_GO(ampc_k_clip, n, 1, n, (int)dt, x, lo, hi, dy, dx, (int)accumulate);
}

/* one launch per input: x is a host array of device pointers */
AMPC_CU_API void rt_cuda_concat_forward(RtCudaCtx *cx, int nin, const void *const *x, const int64_t *len,
                                        int64_t outer, int64_t inner, RtDType dt, void *y)
{
    size_t row = 0, start = 0;
    for (int i = 0; i < nin; i++)
        row += (size_t)len[i] * (size_t)inner;
    for (int i = 0; i < nin; i++) {
        size_t seg = (size_t)len[i] * (size_t)inner;
        AMPC_OPS_GO(ampc_k_concat, (size_t)outer * seg, 1, (size_t)outer, seg, row, start,
                    (int)dt, x[i], y, 0);
        start += seg;
    }
}

AMPC_CU_API void rt_cuda_concat_backward(RtCudaCtx *cx, int nin, const void *dy, const int64_t *len,
                                         int64_t outer, int64_t inner, RtDType dt,
                                         void *const *dx, const bool *accumulate)
{
    size_t row = 0, start = 0;
    for (int i = 0; i < nin; i++)
        row += (size_t)len[i] * (size_t)inner;
    for (int i = 0; i < nin; i++) {
        size_t seg = (size_t)len[i] * (size_t)inner;
        if (dx[i])
            AMPC_OPS_GO(ampc_k_concat, (size_t)outer * seg, 0, (size_t)outer, seg, row, start,
                        (int)dt, dy, dx[i], accumulate && accumulate[i]);
        start += seg;
    }
}

/* reduce.c's reduce_view: the reduction as a broadcast of the kept shape */
static AmpcBcast ampc_ops_reduce_view(const RtReduceDims *d, size_t *nx, size_t *ny)
{
    RtBcastDims b;
    memset(&b, 0, sizeof b);
    b.rank = d->rank > 0 ? d->rank : 1;
    *nx = *ny = 1;
    for (int i = 0; i < b.rank; i++) {
        int64_t s = d->rank > 0 ? d->in[i] : 1;
        b.out[i] = s;
        b.a[i] = d->rank > 0 && d->reduce[i] ? 1 : s;
        b.b[i] = 1;
        *nx *= (size_t)s;
        *ny *= (size_t)b.a[i];
    }
    return ampc_ops_bcast(&b);
}

AMPC_CU_API size_t rt_cuda_reduce_workspace_bytes(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, RtPass pass)
{
    (void)cx, (void)d, (void)dt, (void)pass;
    return 0;
}

static void ampc_ops_reduce_fwd(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *x, void *y,
                                int mean)
{
    size_t nx, ny;
    AmpcBcast g = ampc_ops_reduce_view(d, &nx, &ny);
    double scale = mean && ny ? (double)ny / (double)nx : 1.0;
    AMPC_OPS_GO(ampc_k_bcast_reduce, ny, g, 0, (int)dt, x, (const void *)NULL, 1.0f, scale, y, 0);
}

static void ampc_ops_reduce_bwd(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *dy, void *dx,
                                bool acc, int mean)
{
    size_t nx, ny;
    AmpcBcast g = ampc_ops_reduce_view(d, &nx, &ny);
    float scale = mean && nx ? (float)((double)ny / (double)nx) : 1.0f;
    AMPC_OPS_GO(ampc_k_reduce_bwd, nx, g, (int)dt, dy, scale, dx, (int)acc);
}

AMPC_CU_API void rt_cuda_sum_forward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *x, void *y,
                                     void *ws)
{
    (void)ws;
    ampc_ops_reduce_fwd(cx, d, dt, x, y, 0);
}

AMPC_CU_API void rt_cuda_mean_forward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *x, void *y,
                                      void *ws)
{
    (void)ws;
    ampc_ops_reduce_fwd(cx, d, dt, x, y, 1);
}

AMPC_CU_API void rt_cuda_sum_backward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *dy,
                                      void *dx, bool accumulate)
{
    ampc_ops_reduce_bwd(cx, d, dt, dy, dx, accumulate, 0);
}

AMPC_CU_API void rt_cuda_mean_backward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *dy,
                                       void *dx, bool accumulate)
{
    ampc_ops_reduce_bwd(cx, d, dt, dy, dx, accumulate, 1);
}

/* the kernel reads the step's scale on the device (step: a device pointer;
 * the address of its scale is formed here, nothing is read) */
AMPC_CU_API void rt_cuda_softmax_output_backward(RtCudaCtx *cx, int64_t n, int64_t k, RtDType dt,
                                                 const void *prob, const float *label,
                                                 const RtSmoParams *p, const RtStepState *step,
                                                 RtDType dxdt, void *dx, bool accumulate)
{
    const float *scale = step ? &step->scale : (const float *)NULL;
    AMPC_OPS_GO(ampc_k_smo_bwd, (size_t)n, (size_t)n, (size_t)k, (int)dt, prob, label, *p, scale,
                (int)dxdt, dx, (int)accumulate);
}

/* nothing on a step the step's state skips (read on the device) */
AMPC_CU_API void rt_cuda_batchnorm_update_moving(RtCudaCtx *cx, int64_t c, int64_t count,
                                                 const float *save_mean, const float *save_invstd,
                                                 float eps, float momentum, float *moving_mean,
                                                 float *moving_var, const RtStepState *step)
{
    AMPC_OPS_GO(ampc_k_bn_moving, (size_t)c, (size_t)c, count, save_mean, save_invstd, eps,
                momentum, moving_mean, moving_var, step);
}

#endif /* AMPC_CUDA_OPS_CUH */
