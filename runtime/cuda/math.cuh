/*
 * math.cuh - the rt.h twins whose per-element math calls libm (expf, logf,
 * tanhf, log1pf, expm1f, double log), of four families, one section each:
 * Activation and LeakyReLU (act.c: relu goes to act.cuh's ampc_cu_relu;
 * elu, selu), exp/log/sqrt (elemwise.c), softmax and log_softmax (reduce.c),
 * SoftmaxOutput's forward (loss.c).  The other family headers' rules and
 * order of operations; one file, built by math.cu apart from kernels.cu, because CUDA's libm
 * is itself written with fma and ex2.approx (its documented ulp error
 * bounds), which kernels.cu's PTX check forbids: these are bit for bit the
 * CPU in the emulation (the same glibc), and within a stated tolerance on
 * the GPU (docs/backend-cuda.md, "The other kernels").  Their own fp32
 * arithmetic is still built with -fmad=false.
 */
#ifndef AMPC_CUDA_MATH_CUH
#define AMPC_CUDA_MATH_CUH

#ifndef AMPC_CUDA_KERNELS_CUH
#error "include cuda/kernels.cuh before cuda/math.cuh"
#endif

#include <math.h>

#include "cuda/rt_cuda.h"

/* ---- the activations (act.c) ------------------------------------------------------ */

__global__ void ampc_k_act_fwd(int act, size_t n, int dt, ampc_dptr<const void> x, ampc_dptr<void> y)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float v = ampc_cu_load(x, i, dt), r;
        switch (act) {
        case RT_ACT_RELU: r = ampc_relu(v); break;
        case RT_ACT_SIGMOID: r = ampc_sigmoid(v); break;
        case RT_ACT_TANH: r = ampc_tanh(v); break;
        case RT_ACT_SOFTRELU: r = ampc_softrelu(v); break;
        default: r = ampc_softsign(v); break;
        }
        ampc_cu_store(y, i, dt, r);
    }
}

/* through y, softsign through x (MXNet) */
__global__ void ampc_k_act_bwd(int act, size_t n, int dt, ampc_dptr<const void> x,
                               ampc_dptr<const void> y, ampc_dptr<const void> dy,
                               ampc_dptr<void> dx, int acc)
{
    ampc_dptr<const void> src = act == RT_ACT_SOFTSIGN ? x : y;
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float v = ampc_cu_load(src, i, dt), g = ampc_cu_load(dy, i, dt), d;
        switch (act) {
        case RT_ACT_RELU: d = ampc_relu_grad_y(v); break;
        case RT_ACT_SIGMOID: d = ampc_sigmoid_grad_y(v); break;
        case RT_ACT_TANH: d = ampc_tanh_grad_y(v); break;
        case RT_ACT_SOFTRELU: d = ampc_softrelu_grad_y(v); break;
        default: d = ampc_softsign_grad(v); break;
        }
        ampc_cu_store_acc(dx, i, dt, g * d, acc);
    }
}

/* ---- LeakyReLU (act.c) -------------------------------------------------------------- */

static inline __device__ float ampc_cu_lrelu(int t, float x, float a, int grad)
{
    switch (t) {
    case RT_LRELU_LEAKY: return grad ? ampc_leaky_grad(x, a) : ampc_leaky(x, a);
    case RT_LRELU_ELU: return grad ? ampc_elu_grad(x, a) : ampc_elu(x, a);
    case RT_LRELU_SELU: return grad ? ampc_selu_grad(x) : ampc_selu(x);
    default: return grad ? ampc_prelu_grad(x, a) : ampc_prelu(x, a);
    }
}

/* grad 0: y = lrelu(x); grad 1: dx (+)= dy * lrelu'(x); x viewed as [outer, c, inner] */
__global__ void ampc_k_lrelu(int t, int grad, size_t n, size_t c, size_t inner, int dt,
                             ampc_dptr<const void> x, ampc_dptr<const void> gamma, float slope,
                             ampc_dptr<const void> dy, ampc_dptr<void> out, int acc)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float a = t == RT_LRELU_PRELU ? ampc_cu_load(gamma, i / inner % c, dt) : slope;
        float v = ampc_cu_lrelu(t, ampc_cu_load(x, i, dt), a, grad);
        if (grad)
            ampc_cu_store_acc(out, i, dt, ampc_cu_load(dy, i, dt) * v, acc);
        else
            ampc_cu_store(out, i, dt, v);
    }
}

/* prelu's dgamma: one thread per channel, the double sum in act.c's order */
__global__ void ampc_k_prelu_dgamma(size_t outer, size_t c, size_t inner, int dt,
                                    ampc_dptr<const void> x, ampc_dptr<const void> dy,
                                    ampc_dptr<void> dgamma, int acc)
{
    for (size_t ch = ampc_cu_first(); ch < c; ch += ampc_cu_stride()) {
        double sg = 0.0;
        for (size_t o = 0; o < outer; o++)
            for (size_t j = 0, at = (o * c + ch) * inner; j < inner; j++)
                sg += (double)(ampc_cu_load(dy, at + j, dt) *
                               ampc_prelu_grad_gamma(ampc_cu_load(x, at + j, dt)));
        ampc_cu_store_acc(dgamma, ch, dt, (float)sg, acc);
    }
}

/* ---- exp, log, sqrt and the other unary math (elemwise.c, kernels/unary.h) ------------ */

__global__ void ampc_k_unary(int op, size_t n, int dt, ampc_dptr<const void> x, ampc_dptr<void> y)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride())
        ampc_cu_store(y, i, dt, ampc_unary(op, ampc_cu_load(x, i, dt)));
}

/* exp, sqrt through y; log and the others through x */
__global__ void ampc_k_unary_bwd(int op, size_t n, int dt, ampc_dptr<const void> x,
                                 ampc_dptr<const void> y, ampc_dptr<const void> dy,
                                 ampc_dptr<void> dx, int acc)
{
    bool by_y = op == RT_UNARY_EXP || op == RT_UNARY_SQRT;
    ampc_dptr<const void> src = by_y ? y : x;
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float v = ampc_cu_load(src, i, dt), g = ampc_cu_load(dy, i, dt);
        float r = op == RT_UNARY_EXP    ? g * v
                  : op == RT_UNARY_LOG  ? g / v
                  : op == RT_UNARY_SQRT ? g * 0.5f / v
                                        : g * ampc_unary_grad(op, v);
        ampc_cu_store_acc(dx, i, dt, r, acc);
    }
}

/* ---- softmax, log_softmax (reduce.c) -------------------------------------------------- */

/* one thread per lane of x viewed as [outer, len, inner]: max, the double
 * sum of exponentials, then the outputs; x in xdt, y in dt */
__global__ void ampc_k_softmax(size_t outer, size_t len, size_t inner, int xdt,
                               ampc_dptr<const void> x, int dt, ampc_dptr<void> y, int lg)
{
    size_t lanes = outer * inner;
    for (size_t ln = ampc_cu_first(); ln < lanes; ln += ampc_cu_stride()) {
        size_t base = ln / inner * len * inner + ln % inner;
        float mx = -INFINITY;
        for (size_t l = 0; l < len; l++) {
            float v = ampc_cu_load(x, base + l * inner, xdt);
            mx = v > mx ? v : mx;
        }
        double s = 0.0;
        for (size_t l = 0; l < len; l++)
            s += (double)expf(ampc_cu_load(x, base + l * inner, xdt) - mx);
        float fac = lg ? (float)log(s) : (float)(1.0 / s);
        for (size_t l = 0; l < len; l++) {
            float v = ampc_cu_load(x, base + l * inner, xdt);
            ampc_cu_store(y, base + l * inner, dt, lg ? v - mx - fac : expf(v - mx) * fac);
        }
    }
}

/* SoftmaxOutput's forward where a row has AMPC_CU_ROW_MIN classes or more:
 * a block a row (before: a thread a row, 3 x len dependent loads).  The
 * maximum (exact in any order: the first of equal values may differ only
 * between -0 and +0, whose expf is the same) and the double sum of the
 * exponentials: thread t its classes t, t + 256, ... in order, then the
 * block's tree (ampc_cu_block_reduce), an order of the sizes alone; then
 * ampc_k_softmax's outputs.  test_cuda_ops_emu's twin follows it bit for
 * bit; the CPU's sum differs only in the double's last bits. */
#define AMPC_CU_ROW_MIN 512
__global__ void ampc_k_softmax_row(size_t rows, size_t len, int xdt, ampc_dptr<const void> x,
                                   int dt, ampc_dptr<void> y)
{
    AMPC_SHARED(float, pm, AMPC_CU_WARPS);
    AMPC_SHARED(double, ps, AMPC_CU_WARPS);
    for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
        size_t base = r * len;
        float mx = -INFINITY;
        for (size_t l = threadIdx.x; l < len; l += blockDim.x) {
            float v = ampc_cu_load(x, base + l, xdt);
            mx = v > mx ? v : mx;
        }
        mx = ampc_cu_block_reduce<float>(mx, pm, AmpcCuMax());
        double s = 0.0;
        for (size_t l = threadIdx.x; l < len; l += blockDim.x)
            s += (double)expf(ampc_cu_load(x, base + l, xdt) - mx);
        s = ampc_cu_block_sum<double>(s, ps);
        float fac = (float)(1.0 / s);
        for (size_t l = threadIdx.x; l < len; l += blockDim.x)
            ampc_cu_store(y, base + l, dt, expf(ampc_cu_load(x, base + l, xdt) - mx) * fac);
    }
}

/* softmax: dx = y * (dy - sum(dy*y)); log_softmax: dx = dy - exp(y) * sum(dy) */
__global__ void ampc_k_softmax_bwd(size_t outer, size_t len, size_t inner, int dt,
                                   ampc_dptr<const void> y, ampc_dptr<const void> dy,
                                   ampc_dptr<void> dx, int lg, int acc)
{
    size_t lanes = outer * inner;
    for (size_t ln = ampc_cu_first(); ln < lanes; ln += ampc_cu_stride()) {
        size_t base = ln / inner * len * inner + ln % inner;
        double s = 0.0;
        for (size_t l = 0; l < len; l++) {
            float gv = ampc_cu_load(dy, base + l * inner, dt);
            if (lg)
                s += gv;
            else
                s += (double)(gv * ampc_cu_load(y, base + l * inner, dt));
        }
        float sf = (float)s;
        for (size_t l = 0; l < len; l++) {
            size_t i = base + l * inner;
            float gv = ampc_cu_load(dy, i, dt), v = ampc_cu_load(y, i, dt);
            ampc_cu_store_acc(dx, i, dt, lg ? gv - expf(v) * sf : v * (gv - sf), acc);
        }
    }
}

/* ---- the rt_cuda_* functions ---------------------------------------------------------- */

/* relu: act.cuh's (no libm, in the fma-checked PTX) */
AMPC_CU_API void rt_cuda_activation_forward(RtCudaCtx *cx, RtAct act, size_t n, RtDType dt, const void *x,
                                            void *y)
{
    if (act == RT_ACT_RELU) {
        AMPC_CU_RUN(ampc_cu_relu(cx->stream, n, (int)dt, x, y));
        return;
    }
    AMPC_CU_GO(ampc_k_act_fwd, n, (int)act, n, (int)dt, x, y);
}

AMPC_CU_API void rt_cuda_activation_backward(RtCudaCtx *cx, RtAct act, size_t n, RtDType dt, const void *x,
                                             const void *y, const void *dy, void *dx,
                                             bool accumulate)
{
    if (act == RT_ACT_RELU) {
        AMPC_CU_RUN(ampc_cu_relu_backward(cx->stream, n, (int)dt, y, dy, dx, accumulate));
        return;
    }
    AMPC_CU_GO(ampc_k_act_bwd, n, (int)act, n, (int)dt, x, y, dy, dx, (int)accumulate);
}

AMPC_CU_API void rt_cuda_leaky_relu_forward(RtCudaCtx *cx, RtLeaky t, int64_t outer, int64_t c, int64_t inner,
                                            RtDType dt, const void *x, const void *gamma,
                                            float slope, void *y)
{
    size_t n = (size_t)outer * (size_t)c * (size_t)inner;
    AMPC_CU_GO(ampc_k_lrelu, n, (int)t, 0, n, (size_t)c, (size_t)inner, (int)dt, x, gamma, slope,
                (const void *)NULL, y, 0);
}

/* dgamma first: dx may be written over dy */
AMPC_CU_API void rt_cuda_leaky_relu_backward(RtCudaCtx *cx, RtLeaky t, int64_t outer, int64_t c, int64_t inner,
                                             RtDType dt, const void *x, const void *gamma,
                                             float slope, const void *dy, void *dx, void *dgamma,
                                             bool acc_dx, bool acc_dgamma)
{
    size_t n = (size_t)outer * (size_t)c * (size_t)inner;
    if (t == RT_LRELU_PRELU && dgamma)
        AMPC_CU_GO(ampc_k_prelu_dgamma, (size_t)c, (size_t)outer, (size_t)c, (size_t)inner,
                    (int)dt, x, dy, dgamma, (int)acc_dgamma);
    if (dx)
        AMPC_CU_GO(ampc_k_lrelu, n, (int)t, 1, n, (size_t)c, (size_t)inner, (int)dt, x, gamma,
                    slope, dy, dx, (int)acc_dx);
}

AMPC_CU_API void rt_cuda_unary_forward(RtCudaCtx *cx, RtUnaryOp op, size_t n, RtDType dt, const void *x,
                                       void *y)
{
    AMPC_CU_GO(ampc_k_unary, n, (int)op, n, (int)dt, x, y);
}

AMPC_CU_API void rt_cuda_unary_backward(RtCudaCtx *cx, RtUnaryOp op, size_t n, RtDType dt, const void *x,
                                        const void *y, const void *dy, void *dx, bool accumulate)
{
    AMPC_CU_GO(ampc_k_unary_bwd, n, (int)op, n, (int)dt, x, y, dy, dx, (int)accumulate);
}

AMPC_CU_API void rt_cuda_softmax_forward(RtCudaCtx *cx, int64_t outer, int64_t len, int64_t inner, RtDType dt,
                                         const void *x, void *y)
{
    AMPC_CU_GO(ampc_k_softmax, (size_t)outer * (size_t)inner, (size_t)outer, (size_t)len,
                (size_t)inner, (int)dt, x, (int)dt, y, 0);
}

AMPC_CU_API void rt_cuda_log_softmax_forward(RtCudaCtx *cx, int64_t outer, int64_t len, int64_t inner,
                                             RtDType dt, const void *x, void *y)
{
    AMPC_CU_GO(ampc_k_softmax, (size_t)outer * (size_t)inner, (size_t)outer, (size_t)len,
                (size_t)inner, (int)dt, x, (int)dt, y, 1);
}

AMPC_CU_API void rt_cuda_softmax_backward(RtCudaCtx *cx, int64_t outer, int64_t len, int64_t inner, RtDType dt,
                                          const void *y, const void *dy, void *dx,
                                          bool accumulate)
{
    AMPC_CU_GO(ampc_k_softmax_bwd, (size_t)outer * (size_t)inner, (size_t)outer, (size_t)len,
                (size_t)inner, (int)dt, y, dy, dx, 0, (int)accumulate);
}

AMPC_CU_API void rt_cuda_log_softmax_backward(RtCudaCtx *cx, int64_t outer, int64_t len, int64_t inner,
                                              RtDType dt, const void *y, const void *dy,
                                              void *dx, bool accumulate)
{
    AMPC_CU_GO(ampc_k_softmax_bwd, (size_t)outer * (size_t)inner, (size_t)outer, (size_t)len,
                (size_t)inner, (int)dt, y, dy, dx, 1, (int)accumulate);
}

AMPC_CU_API void rt_cuda_softmax_output_forward(RtCudaCtx *cx, int64_t n, int64_t k, RtDType xdt, const void *x,
                                                RtDType dt, void *prob)
{
    if ((size_t)k < AMPC_CU_ROW_MIN) {
        AMPC_CU_GO(ampc_k_softmax, (size_t)n, (size_t)n, (size_t)k, (size_t)1, (int)xdt, x, (int)dt,
                   prob, 0);
    } else if (n > 0) {
        unsigned grid = (size_t)n < AMPC_CU_GRID_CAP ? (unsigned)n : (unsigned)AMPC_CU_GRID_CAP;
        AMPC_LAUNCH(ampc_k_softmax_row, grid, AMPC_CU_THREADS, cx->stream, (size_t)n, (size_t)k,
                    (int)xdt, x, (int)dt, prob);
        AMPC_CHECK(AMPC_API_CUDA, AMPC_LAUNCH_ERROR());
    }
}

#endif /* AMPC_CUDA_MATH_CUH */
