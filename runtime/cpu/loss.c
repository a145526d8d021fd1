/* loss.c - SoftmaxOutput (MXNet's fused softmax + cross-entropy head) and the
 * metrics the training loop logs.
 *
 * The forward is a softmax over the last axis.  The backward ignores the
 * head gradient: per element ampc_softmax_ce_grad (runtime/kernels/loss.h,
 * shared with CUDA) gives p - target with label smoothing, scaled by
 * grad_scale / valid_cnt and by the dynamic loss scale; rows whose label is
 * ignore_label (with use_ignore) are zeroed.  valid_cnt is 1 ('null'), the
 * batch ('batch') or the number of labels != ignore_label, at least 1
 * ('valid'), as in MXNet's softmax_output-inl.h.
 */
#include <math.h>

#include "cpu.h"
#include "kernels/loss.h"

/* x in xdt: a 16-bit x is widened on reading (exactly), which is what a
 * cast to fp32 before it would store. */
void rt_softmax_output_forward(int64_t n, int64_t k, RtDType xdt, const void *x, RtDType dt,
                               void *prob)
{
    rt__softmax_rows(n, k, xdt, x, dt, prob);
}

/* dx in dxdt: each element is computed in fp32 as for an fp32 dx and
 * rounded once on the store (rt__commit), by the conversion a cast from
 * fp32 uses (rt_cast_forward). */
void rt_softmax_output_backward(int64_t n, int64_t k, RtDType dt, const void *prob,
                                const float *label, const RtSmoParams *p, const RtStepState *step,
                                RtDType dxdt, void *dx, bool accumulate)
{
    float loss_scale = step ? step->scale : 1.0f;
    double valid = 1.0;
    if (p->normalization == RT_SMO_NORM_BATCH) {
        valid = (double)n;
    } else if (p->normalization == RT_SMO_NORM_VALID) {
        int64_t cnt = 0;
        int ign = (int)p->ignore_label;
        for (int64_t i = 0; i < n; i++)
            cnt += (int)label[i] != ign;
        valid = cnt > 0 ? (double)cnt : 1.0;
    }
    float scale = (float)((double)p->grad_scale / valid * (double)loss_scale);
    float off = ampc_smooth_off(p->smooth_alpha, (int)k);
    float pb[RT_CHUNK], ob[RT_CHUNK];
    for (int64_t i = 0; i < n; i++) {
        int lab = (int)label[i];
        bool ignored = p->use_ignore && lab == (int)p->ignore_label;
        size_t row = (size_t)i * (size_t)k;
        for (size_t j = 0; j < (size_t)k; j += RT_CHUNK) {
            size_t m = (size_t)k - j < RT_CHUNK ? (size_t)k - j : RT_CHUNK;
            const float *v = rt__view(prob, row + j, m, dt, pb);
            float *r = rt__out(dx, row + j, dxdt, accumulate, ob);
            if (ignored)
                memset(r, 0, m * sizeof *r);
            else
                for (size_t c = 0; c < m; c++)
                    r[c] = ampc_softmax_ce_grad(v[c], (int64_t)(j + c) == lab, p->smooth_alpha,
                                                off, scale);
            rt__commit(dx, row + j, r, m, dxdt, accumulate);
        }
    }
}

double rt_cross_entropy_sum(int64_t n, int64_t k, RtDType dt, const void *prob,
                            const float *label, int64_t *count)
{
    double s = 0.0;
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t lab = (int64_t)label[i];
        if (lab < 0 || lab >= k)
            continue;
        s += ampc_ce_loss(rt__get(prob, (size_t)(i * k + lab), dt));
        c++;
    }
    if (count)
        *count = c;
    return s;
}

int64_t rt_accuracy_count(int64_t n, int64_t k, RtDType dt, const void *prob,
                          const float *label)
{
    int64_t hits = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t best = 0;
        float bv = rt__get(prob, (size_t)(i * k), dt);
        for (int64_t j = 1; j < k; j++) {
            float v = rt__get(prob, (size_t)(i * k + j), dt);
            if (v > bv) {
                bv = v;
                best = j;
            }
        }
        hits += best == (int64_t)label[i];
    }
    return hits;
}
