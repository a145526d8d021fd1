/* optim.c - the optimizer over all parameters, MXNet 1.x semantics.
 *
 * One pass per parameter tensor, each element touched once: the gradient is
 * read once (16-bit or fp32), the fp32 master (or the fp32 weight itself)
 * and the fp32 momentum are updated, and the 16-bit shadow that the steps
 * read is written from the new master, through the shared per-element
 * updates of runtime/kernels/optim.h (ampc_mp_* return the shadow), so the
 * CPU and CUDA optimizers cannot drift.  The CUDA backend fuses the same
 * loop over all tensors into few launches.
 *
 * Per parameter (FACTS.md E 4.3): lr = lr x lr_mult, wd = wd x wd_mult with
 * MXNet Module's default wd_mult of 0 for names not ending in _weight or
 * _gamma; rescale_grad = 1/batch (SoftmaxOutput's normalization 'null').
 * sgd with momentum 0 is sgd_update (no state); nag with momentum 0 is sgd
 * too (MXNet's Python layer).  Parameters without a master and with 16-bit
 * storage update in fp32 and round the weight once (momentum stays fp32).
 */
#include <string.h>

#include "kernels/optim.h"
#include "train.h"

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

float rt_optim_wd_mult(const RtParam *p)
{
    const char *n = p->name ? p->name : "";
    return ends_with(n, "_weight") || ends_with(n, "_gamma") ? p->wd_mult : 0.0f;
}

bool rt_optim_has_state(const RtOptConfig *c) { return c->momentum != 0.0f; }

int rt_optim_bytes_per_param(const RtParam *p, RtDType grad_dt, const RtOptConfig *c)
{
    int g = (int)rt_dtype_size(grad_dt);
    int w = p->has_master ? 4 : (int)rt_dtype_size(p->dtype);
    int shadow = p->has_master ? (int)rt_dtype_size(p->dtype) : 0;
    int mom = rt_optim_has_state(c) ? 4 : 0;
    return g + w + mom                 /* read */
           + w + mom + shadow;         /* write */
}

/* Element update of one fp32 weight; state may be NULL (no momentum). */
static inline void update_f32(float *w, float *mom, float g, const AmpcOptParam *q, RtOptKind k)
{
    if (!mom)
        ampc_sgd_update(w, g, *q);
    else if (k == RT_OPT_NAG)
        ampc_nag_mom_update(w, mom, g, *q);
    else
        ampc_sgd_mom_update(w, mom, g, *q);
}

static void update_tensor(const RtParam *p, RtDType gdt, const void *grad, void *wbuf,
                          float *master, float *mom, const AmpcOptParam *q, RtOptKind kind)
{
    size_t n = (size_t)p->numel;
    if (master && p->dtype == RT_F16 && gdt == RT_F16) {
        /* the multi-precision kernels: fp16 gradient -> fp32 master -> fp16 shadow */
        const ampc_half *g = grad;
        ampc_half *w16 = wbuf;
        if (!mom)
            for (size_t i = 0; i < n; i++)
                w16[i] = ampc_mp_sgd_update(&master[i], g[i], *q);
        else if (kind == RT_OPT_NAG)
            for (size_t i = 0; i < n; i++)
                w16[i] = ampc_mp_nag_mom_update(&master[i], &mom[i], g[i], *q);
        else
            for (size_t i = 0; i < n; i++)
                w16[i] = ampc_mp_sgd_mom_update(&master[i], &mom[i], g[i], *q);
        return;
    }
    if (master && p->dtype == RT_BF16 && gdt == RT_BF16) {
        const ampc_bf16 *g = grad;
        ampc_bf16 *w16 = wbuf;
        if (!mom)
            for (size_t i = 0; i < n; i++)
                w16[i] = ampc_mp_sgd_update_bf16(&master[i], g[i], *q);
        else if (kind == RT_OPT_NAG)
            for (size_t i = 0; i < n; i++)
                w16[i] = ampc_mp_nag_mom_update_bf16(&master[i], &mom[i], g[i], *q);
        else
            for (size_t i = 0; i < n; i++)
                w16[i] = ampc_mp_sgd_mom_update_bf16(&master[i], &mom[i], g[i], *q);
        return;
    }
    if (!master && p->dtype == RT_F32 && gdt == RT_F32) {
        /* fp32: the buffer is the weight */
        const float *g = grad;
        float *w = wbuf;
        for (size_t i = 0; i < n; i++)
            update_f32(&w[i], mom ? &mom[i] : NULL, g[i], q, kind);
        return;
    }
    /* Mixed cases (an fp32 gradient of a 16-bit parameter, or a 16-bit
     * parameter without a master): widen each element, update in fp32,
     * round once. */
    for (size_t i = 0; i < n; i++) {
        float g = gdt == RT_F32 ? ((const float *)grad)[i]
                : gdt == RT_F16 ? ampc_half_to_float(((const ampc_half *)grad)[i])
                                : ampc_bf16_to_float(((const ampc_bf16 *)grad)[i]);
        float wv, *w = master ? &master[i] : &wv;
        if (!master)
            wv = p->dtype == RT_F32 ? ((float *)wbuf)[i]
               : p->dtype == RT_F16 ? ampc_half_to_float(((ampc_half *)wbuf)[i])
                                    : ampc_bf16_to_float(((ampc_bf16 *)wbuf)[i]);
        update_f32(w, mom ? &mom[i] : NULL, g, q, kind);
        if (p->dtype == RT_F32)
            ((float *)wbuf)[i] = *w;
        else if (p->dtype == RT_F16)
            ((ampc_half *)wbuf)[i] = ampc_float_to_half(*w);
        else
            ((ampc_bf16 *)wbuf)[i] = ampc_float_to_bf16(*w);
    }
}

void rt_optim_step(const RtModel *m, RtCtx *ctx, float *const *state, const RtOptConfig *c)
{
    bool with_mom = rt_optim_has_state(c);
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (p->grad < 0)
            continue;
        AmpcOptParam q;
        memset(&q, 0, sizeof q);
        q.lr = c->lr * p->lr_mult;
        q.wd = c->wd * rt_optim_wd_mult(p);
        q.momentum = c->momentum;
        q.rescale_grad = c->rescale_grad;
        q.clip_gradient = c->clip_gradient;
        float *master = p->has_master && ctx->master ? ctx->master[i] : NULL;
        float *mom = with_mom && state ? state[i] : NULL;
        update_tensor(p, m->buffers[p->grad].dtype, ctx->buf[p->grad], ctx->buf[p->buffer],
                      master, mom, &q, c->kind);
    }
}
