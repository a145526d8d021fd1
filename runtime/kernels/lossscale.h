/*
 * lossscale.h - the dynamic loss-scale rule and gradient unscaling, as pure
 * per-element / per-step functions that run on the host or in a 1-thread
 * device kernel (no host synchronisation needed).
 *
 * The rule is PyTorch's _amp_update_scale_ (aten/src/ATen/native/cuda/
 * AmpKernels.cu, torch/amp/grad_scaler.py), plus two optional bounds:
 *   found_inf:  scale *= backoff (not below min_scale if set); tracker = 0
 *   else:       tracker + 1 == interval ? scale *= growth (capped at
 *               max_scale if set; kept only if the result is finite),
 *               tracker = 0  :  tracker += 1
 * The products are formed in double and rounded to fp32, as PyTorch does
 * (its factors are doubles).  The new scale is used from the next step.
 * MXNet's LossScaler is the same rule with growth 2, backoff 0.5, interval
 * 2000, max_scale 2^24 (it applies the new scale a step later; ampc does not).
 */
#ifndef AMPC_KERNELS_LOSSSCALE_H
#define AMPC_KERNELS_LOSSSCALE_H

#include <stdint.h>

#include "kernels/half.h"

typedef struct AmpcLossScale {
    float scale;     /* the loss multiplier S */
    int32_t tracker; /* finite steps since the last growth or backoff */
} AmpcLossScale;

typedef struct AmpcLossScaleRule {
    float growth;     /* > 1; default 2 */
    float backoff;    /* in (0, 1); default 0.5 */
    int32_t interval; /* finite steps between growths; default 2000 */
    float max_scale;  /* cap on growth; <= 0: none (PyTorch), MXNet 2^24 */
    float min_scale;  /* floor on backoff; <= 0: none */
} AmpcLossScaleRule;

/* PyTorch GradScaler's defaults (init_scale 2^16 is the caller's) */
static inline AMPC_HD AmpcLossScaleRule ampc_loss_scale_rule_default(void)
{
    AmpcLossScaleRule r;
    r.growth = 2.0f;
    r.backoff = 0.5f;
    r.interval = 2000;
    r.max_scale = 0.0f;
    r.min_scale = 0.0f;
    return r;
}

static inline AMPC_HD AmpcLossScale ampc_loss_scale_update(AmpcLossScale s, int found_inf,
                                                           AmpcLossScaleRule r)
{
    AmpcLossScale n = s;
    if (found_inf) {
        float v = (float)((double)s.scale * (double)r.backoff);
        if (r.min_scale > 0.0f && v < r.min_scale)
            v = r.min_scale;
        n.scale = v;
        n.tracker = 0;
    } else {
        int32_t k = s.tracker + 1;
        if (k >= r.interval) {
            float v = (float)((double)s.scale * (double)r.growth);
            if (r.max_scale > 0.0f && v > r.max_scale)
                v = r.max_scale;
            if (ampc_isfinite(v))
                n.scale = v;
            n.tracker = 0;
        } else {
            n.tracker = k;
        }
    }
    return n;
}

/* One step as a device records it in its ring (device.h's ls_read): what the
 * device decided, from which the host formats its log lines and
 * checkpoints without applying the rule itself. */
typedef struct AmpcLossScaleStep {
    AmpcLossScale s;    /* after the step's rule: the scale the next step uses */
    int64_t num_update; /* updates applied once the step is done */
    int32_t finite;     /* 1: every gradient was finite */
    int32_t unused;     /* (padding, zero) */
} AmpcLossScaleStep;

/* 1/scale as PyTorch's unscale_ forms it: float(1 / double(scale)) */
static inline AMPC_HD float ampc_inv_scale(float scale) { return (float)(1.0 / (double)scale); }

/* one gradient element, unscaled; the caller ORs !ampc_isfinite(g) into found_inf */
static inline AMPC_HD float ampc_unscale(float g, float inv_scale) { return g * inv_scale; }

#endif /* AMPC_KERNELS_LOSSSCALE_H */
