/*
 * optim.h - per-element optimizer updates with MXNet 1.x semantics, shared
 * by the CPU loops and the fused (multi-tensor) CUDA kernels.
 *
 * Source: mx@v1.x src/operator/optimizer_op-inl.h (SGDKernel, SGDMomKernel,
 * MP_SGDKernel, MP_SGDMomKernel, NAGMomKernel, MP_NAGMomKernel,
 * AdamUpdateKernel); the expressions keep MXNet's order of operations, so a
 * CPU build (no FP contraction under -std=c11) rounds as MXNet's CPU kernels.
 *
 *   g    = clip(rescale_grad * grad)      clip only when clip_gradient >= 0
 *   sgd:     w = (1 - lr*wd)*w - lr*g
 *   sgd_mom: m = momentum*m - lr*wd*w - lr*g;   w = w + m
 *   nag:     G = g + wd*w;  m = momentum*m - lr*G;  w = w + momentum*m - lr*G
 *   adam:    G = clip(rescale_grad*grad + wd*w)   (wd INSIDE the clip here)
 *            mean = beta1*mean + (1-beta1)*G;  var = beta2*var + (1-beta2)*G*G
 *            w = w - lr_t * mean / (sqrt(var) + epsilon)
 *            with lr_t = ampc_adam_lr(lr, beta1, beta2, t) (bias correction,
 *            done by MXNet's Python Adam.update, not by the kernel)
 * The lr sits inside the momentum buffer (MXNet, unlike PyTorch).  NAG with
 * momentum 0 is sgd in MXNet's Python layer; the caller picks ampc_sgd_update.
 *
 * ampc_mp_*: the multi-precision variants read a 16-bit gradient, update the
 * fp32 master weight and fp32 state, and return the 16-bit shadow weight
 * (= ampc_float_to_half(master)); MXNet's MP_* kernels never read the old
 * fp16 weight, and neither do these.  Bytes per parameter: docs/numerics.md.
 */
#ifndef AMPC_KERNELS_OPTIM_H
#define AMPC_KERNELS_OPTIM_H

#include <math.h>

#include "kernels/half.h"

typedef struct AmpcOptParam {
    float lr;            /* this step's learning rate (schedule x lr_mult; Adam: ampc_adam_lr) */
    float wd;            /* weight decay (x wd_mult) */
    float momentum;      /* sgd_mom / nag momentum */
    float rescale_grad;  /* e.g. 1/batch, times 1/loss_scale when unscaling is folded in */
    float clip_gradient; /* clip to [-c, c] after rescaling; < 0 = off (MXNet default -1) */
    float beta1;         /* Adam, default 0.9 */
    float beta2;         /* Adam, default 0.999 */
    float epsilon;       /* Adam, default 1e-8 */
} AmpcOptParam;

/* mshadow_op::clip: NaN passes through (a skipped step must still see it) */
static inline AMPC_HD float ampc_clip(float x, float bound)
{
    return x > bound ? bound : (x < -bound ? -bound : x);
}

/* ---- fp32 ------------------------------------------------------------------ */

/* sgd_update */
static inline AMPC_HD void ampc_sgd_update(float *w, float grad, AmpcOptParam p)
{
    if (p.clip_gradient >= 0.0f)
        *w = (1.f - p.lr * p.wd) * *w - p.lr * ampc_clip(p.rescale_grad * grad, p.clip_gradient);
    else
        *w = (1.f - p.lr * p.wd) * *w - (p.lr * p.rescale_grad) * grad;
}

/* sgd_mom_update */
static inline AMPC_HD void ampc_sgd_mom_update(float *w, float *mom, float grad, AmpcOptParam p)
{
    float m = *mom;
    if (p.clip_gradient >= 0.0f)
        m = p.momentum * m - p.lr * p.wd * *w
            - p.lr * ampc_clip(p.rescale_grad * grad, p.clip_gradient);
    else
        m = p.momentum * m - p.lr * p.wd * *w - p.lr * p.rescale_grad * grad;
    *mom = m;
    *w = *w + m;
}

/* nag_mom_update (FACTS.md 4.3: m is updated first, then used) */
static inline AMPC_HD void ampc_nag_mom_update(float *w, float *mom, float grad, AmpcOptParam p)
{
    float g = p.rescale_grad * grad;
    if (p.clip_gradient >= 0.0f)
        g = ampc_clip(g, p.clip_gradient);
    g = g + p.wd * *w;
    float m = p.momentum * *mom - p.lr * g;
    *mom = m;
    *w = *w + p.momentum * m - p.lr * g;
}

/* adam_update (AdamUpdateKernel); p.lr is the bias-corrected lr_t */
static inline AMPC_HD void ampc_adam_update(float *w, float *mean, float *var, float grad,
                                            AmpcOptParam p)
{
    float g = grad * p.rescale_grad + *w * p.wd;
    if (p.clip_gradient >= 0.0f)
        g = ampc_clip(g, p.clip_gradient);
    float m = p.beta1 * *mean + (1.f - p.beta1) * g;
    float v = p.beta2 * *var + (1.f - p.beta2) * g * g;
    *mean = m;
    *var = v;
    *w = *w - p.lr * m / (sqrtf(v) + p.epsilon);
}

/* MXNet's Python Adam.update: lr * sqrt(1 - beta2^t) / (1 - beta1^t), in
 * double, t = the update count (1 on the first update).  The factor is a
 * function of the step alone: the CUDA optimizer takes it from the host
 * (pow differs between libms) and forms the product per tensor on the
 * device, the same double multiply as here. */
static inline AMPC_HD double ampc_adam_corr(double beta1, double beta2, long t)
{
    double coef1 = 1.0 - pow(beta1, (double)t);
    double coef2 = 1.0 - pow(beta2, (double)t);
    return sqrt(coef2) / coef1;
}

static inline AMPC_HD float ampc_adam_lr(double lr, double beta1, double beta2, long t)
{
    return (float)(lr * ampc_adam_corr(beta1, beta2, t));
}

/* ---- multi-precision: fp16 gradient -> fp32 master + state -> fp16 shadow ---- */

static inline AMPC_HD ampc_half ampc_mp_sgd_update(float *w32, ampc_half grad, AmpcOptParam p)
{
    ampc_sgd_update(w32, ampc_half_to_float(grad), p);
    return ampc_float_to_half(*w32);
}

static inline AMPC_HD ampc_half ampc_mp_sgd_mom_update(float *w32, float *mom, ampc_half grad,
                                                       AmpcOptParam p)
{
    ampc_sgd_mom_update(w32, mom, ampc_half_to_float(grad), p);
    return ampc_float_to_half(*w32);
}

static inline AMPC_HD ampc_half ampc_mp_nag_mom_update(float *w32, float *mom, ampc_half grad,
                                                       AmpcOptParam p)
{
    ampc_nag_mom_update(w32, mom, ampc_half_to_float(grad), p);
    return ampc_float_to_half(*w32);
}

static inline AMPC_HD ampc_half ampc_mp_adam_update(float *w32, float *mean, float *var,
                                                    ampc_half grad, AmpcOptParam p)
{
    ampc_adam_update(w32, mean, var, ampc_half_to_float(grad), p);
    return ampc_float_to_half(*w32);
}

/* the same with bfloat16 gradient and shadow */
static inline AMPC_HD ampc_bf16 ampc_mp_sgd_update_bf16(float *w32, ampc_bf16 grad, AmpcOptParam p)
{
    ampc_sgd_update(w32, ampc_bf16_to_float(grad), p);
    return ampc_float_to_bf16(*w32);
}

static inline AMPC_HD ampc_bf16 ampc_mp_sgd_mom_update_bf16(float *w32, float *mom, ampc_bf16 grad,
                                                            AmpcOptParam p)
{
    ampc_sgd_mom_update(w32, mom, ampc_bf16_to_float(grad), p);
    return ampc_float_to_bf16(*w32);
}

static inline AMPC_HD ampc_bf16 ampc_mp_nag_mom_update_bf16(float *w32, float *mom, ampc_bf16 grad,
                                                            AmpcOptParam p)
{
    ampc_nag_mom_update(w32, mom, ampc_bf16_to_float(grad), p);
    return ampc_float_to_bf16(*w32);
}

static inline AMPC_HD ampc_bf16 ampc_mp_adam_update_bf16(float *w32, float *mean, float *var,
                                                         ampc_bf16 grad, AmpcOptParam p)
{
    ampc_adam_update(w32, mean, var, ampc_bf16_to_float(grad), p);
    return ampc_float_to_bf16(*w32);
}

#endif /* AMPC_KERNELS_OPTIM_H */
