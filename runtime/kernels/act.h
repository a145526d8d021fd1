/*
 * act.h - per-element activation math, shared by the CPU kernels (gcc) and
 * the CUDA kernels (nvcc).
 *
 * For each activation: the forward value ampc_<act>(x), the derivative
 * dy/dx at the input, ampc_<act>_grad(x), and, where the derivative is a
 * function of the output alone, ampc_<act>_grad_y(y), which is what MXNet's
 * backward uses (src/operator/mshadow_op.h: relu_grad, sigmoid_grad,
 * tanh_grad, softrelu_grad, elu_grad, selu_grad take the output), so a
 * backward kernel can keep only y.  A backward kernel computes dx = dy *
 * grad.  The kink of relu/leaky/prelu/elu/selu goes to the left branch
 * (x > 0 is the right one), as in MXNet.
 *
 * Activation(act_type=relu|sigmoid|tanh|softrelu|softsign) and
 * LeakyReLU(act_type=leaky|prelu|elu|selu, slope) of MXNet 1.x.
 */
#ifndef AMPC_KERNELS_ACT_H
#define AMPC_KERNELS_ACT_H

#include <math.h>

#include "kernels/half.h"

/* MXNet's SELU constants (src/operator/leaky_relu-inl.h), rounded to fp32 */
#define AMPC_SELU_ALPHA 1.6732632423543772848170429916717f
#define AMPC_SELU_LAMBDA 1.0507009873554804934193349852946f

/* ---- relu: max(x, 0) ---------------------------------------------------- */
static inline AMPC_HD float ampc_relu(float x) { return x > 0.0f ? x : 0.0f; }
static inline AMPC_HD float ampc_relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }
static inline AMPC_HD float ampc_relu_grad_y(float y) { return y > 0.0f ? 1.0f : 0.0f; }

/* ---- sigmoid: 1 / (1 + e^-x) ---------------------------------------------- */
static inline AMPC_HD float ampc_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* y(1-y), MXNet's form; loses relative accuracy as y -> 1 */
static inline AMPC_HD float ampc_sigmoid_grad_y(float y) { return y * (1.0f - y); }
/* e/(1+e)^2 with e = e^-|x|: accurate on both tails */
static inline AMPC_HD float ampc_sigmoid_grad(float x)
{
    float e = expf(-fabsf(x));
    float d = 1.0f + e;
    return e / (d * d);
}

/* ---- tanh ------------------------------------------------------------------ */
static inline AMPC_HD float ampc_tanh(float x) { return tanhf(x); }
/* 1 - y^2, MXNet's form; loses relative accuracy as |y| -> 1 */
static inline AMPC_HD float ampc_tanh_grad_y(float y) { return 1.0f - y * y; }
/* sech^2 x = 4e/(1+e)^2 with e = e^-2|x|: accurate on both tails */
static inline AMPC_HD float ampc_tanh_grad(float x)
{
    float e = expf(-2.0f * fabsf(x));
    float d = 1.0f + e;
    return 4.0f * e / (d * d);
}

/* ---- softrelu (softplus): log(1 + e^x), as max(x,0) + log1p(e^-|x|) so it
 * neither overflows for large x nor loses the tail for very negative x ---- */
static inline AMPC_HD float ampc_softrelu(float x)
{
    return (x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x)));
}
static inline AMPC_HD float ampc_softrelu_grad(float x) { return ampc_sigmoid(x); }
/* 1 - e^-y = sigmoid(x) for y = softrelu(x) (MXNet's softrelu_grad) */
static inline AMPC_HD float ampc_softrelu_grad_y(float y) { return -expm1f(-y); }

/* ---- softsign: x / (1 + |x|) ---------------------------------------------- */
static inline AMPC_HD float ampc_softsign(float x) { return x / (1.0f + fabsf(x)); }
static inline AMPC_HD float ampc_softsign_grad(float x)
{
    float d = 1.0f + fabsf(x);
    return 1.0f / (d * d);
}

/* ---- leaky: x > 0 ? x : slope*x (LeakyReLU default slope 0.25) --------- */
static inline AMPC_HD float ampc_leaky(float x, float slope) { return x > 0.0f ? x : slope * x; }
static inline AMPC_HD float ampc_leaky_grad(float x, float slope) { return x > 0.0f ? 1.0f : slope; }

/* ---- prelu: leaky with a learned slope gamma (per channel) -------------- */
static inline AMPC_HD float ampc_prelu(float x, float gamma) { return x > 0.0f ? x : gamma * x; }
static inline AMPC_HD float ampc_prelu_grad(float x, float gamma) { return x > 0.0f ? 1.0f : gamma; }
/* d y / d gamma; the kernel sums dy * this over the elements of a channel */
static inline AMPC_HD float ampc_prelu_grad_gamma(float x) { return x > 0.0f ? 0.0f : x; }

/* ---- elu: x > 0 ? x : slope*(e^x - 1) ------------------------------------- */
static inline AMPC_HD float ampc_elu(float x, float slope) { return x > 0.0f ? x : slope * expm1f(x); }
static inline AMPC_HD float ampc_elu_grad(float x, float slope)
{
    return x > 0.0f ? 1.0f : slope * expf(x);
}
static inline AMPC_HD float ampc_elu_grad_y(float y, float slope) { return y > 0.0f ? 1.0f : y + slope; }

/* ---- selu: lambda * (x > 0 ? x : alpha*(e^x - 1)) --------------------------- */
static inline AMPC_HD float ampc_selu(float x)
{
    return AMPC_SELU_LAMBDA * (x > 0.0f ? x : AMPC_SELU_ALPHA * expm1f(x));
}
static inline AMPC_HD float ampc_selu_grad(float x)
{
    return x > 0.0f ? AMPC_SELU_LAMBDA : AMPC_SELU_LAMBDA * AMPC_SELU_ALPHA * expf(x);
}
static inline AMPC_HD float ampc_selu_grad_y(float y)
{
    return y > 0.0f ? AMPC_SELU_LAMBDA : y + AMPC_SELU_LAMBDA * AMPC_SELU_ALPHA;
}

#endif /* AMPC_KERNELS_ACT_H */
