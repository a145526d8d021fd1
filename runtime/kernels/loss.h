/*
 * loss.h - per-element math of the loss heads, shared by gcc and nvcc.
 *
 * SoftmaxOutput (MXNet 1.x src/operator/softmax_output-inl.h, mshadow
 * SmoothSoftmaxGrad): the backward ignores the head gradient and writes,
 * for probabilities p of a row with K classes and label k,
 *     grad[k]    = p[k] - 1 + alpha
 *     grad[j!=k] = p[j] - alpha/(K-1)
 * times scale = grad_scale / valid_cnt (valid_cnt: 1 for normalization
 * 'null', the batch for 'batch', the non-ignored labels for 'valid').
 * Rows whose label is ignore_label (with use_ignore) get 0; the kernel
 * handles that, not this function.  alpha = 0 gives p - onehot.
 */
#ifndef AMPC_KERNELS_LOSS_H
#define AMPC_KERNELS_LOSS_H

#include <math.h>

#include "kernels/half.h"

/* alpha/(K-1): what every non-label class of a row loses (0 when K < 2) */
static inline AMPC_HD float ampc_smooth_off(float smooth_alpha, int num_classes)
{
    return num_classes > 1 ? smooth_alpha / (float)(num_classes - 1) : 0.0f;
}

/* d loss / d logit of one element: p is its softmax probability, is_label
 * says whether it is the row's true class, off = ampc_smooth_off(alpha, K). */
static inline AMPC_HD float ampc_softmax_ce_grad(float p, int is_label, float smooth_alpha,
                                                 float off, float scale)
{
    float g = is_label ? p - 1.0f + smooth_alpha : p - off;
    return g * scale;
}

/* -log(p + 1e-12) of the label's probability, as MXNet's CrossEntropy
 * metric (python/mxnet/metric.py, eps=1e-12), so p = 0 stays finite. */
static inline AMPC_HD float ampc_ce_loss(float p_label)
{
    return -logf(p_label + 1e-12f);
}

#endif /* AMPC_KERNELS_LOSS_H */
