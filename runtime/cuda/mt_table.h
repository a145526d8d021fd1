/*
 * mt_table.h - the multi-tensor tables of the CUDA finite check and fused
 * optimizer, made from the model as the CPU makes its loops
 * (runtime/cpu/optim.c), so that both update the same tensors the same way.
 * Host code, C and C++ (runtime/cuda/device.cu and the emulation test).
 */
#ifndef AMPC_CUDA_MT_TABLE_H
#define AMPC_CUDA_MT_TABLE_H

#include <string.h>

#include "cuda/ampc_cuda.h"
#include "kernels/optim.h"
#include "device.h" /* RtOptConfig */

/* Every parameter with a gradient, as rt_optim_grads_finite checks them;
 * t has room for m->nparams entries; returns the count. */
static inline int ampc_mt_grads_from_model(const RtModel *m, void *const *buf, AmpcMtTensor *t)
{
    int k = 0;
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (p->grad < 0)
            continue;
        memset(&t[k], 0, sizeof t[k]);
        t[k].grad = buf[p->grad];
        t[k].n = p->numel;
        t[k].gdt = (int32_t)m->buffers[p->grad].dtype;
        t[k].wdt = (int32_t)p->dtype;
        k++;
    }
    return k;
}

/* The tensors rt_optim_step2 updates with these states and this optimizer,
 * in its order, with the same choices: momentum state only when the
 * optimizer keeps one (rt_optim_has_state), Adam only where both states
 * exist, no empty tensors.  t has room for m->nparams entries; returns
 * the count. */
static inline int ampc_mt_optim_from_model(const RtModel *m, void *const *buf,
                                           float *const *master, float *const *state,
                                           float *const *state2, const RtOptConfig *c,
                                           AmpcMtTensor *t)
{
    int with_mom = c->kind == RT_OPT_ADAM || c->momentum != 0.0f;
    int k = 0;
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (p->grad < 0)
            continue;
        float *mom = with_mom && state ? state[i] : NULL;
        float *var = c->kind == RT_OPT_ADAM && state2 ? state2[i] : NULL;
        if (c->kind == RT_OPT_ADAM && (!mom || !var))
            continue;
        if (p->numel <= 0)
            continue;
        t[k].grad = buf[p->grad];
        t[k].weight = buf[p->buffer];
        t[k].master = p->has_master && master ? master[i] : NULL;
        t[k].mom = mom;
        t[k].var = var;
        t[k].n = p->numel;
        t[k].lr_mult = p->lr_mult;
        t[k].wd_mult = p->wd_mult;
        t[k].gdt = (int32_t)m->buffers[p->grad].dtype;
        t[k].wdt = (int32_t)p->dtype;
        k++;
    }
    return k;
}

/* The step's scalars, as rt_optim_step2 derives them from the config. */
static inline AmpcMtStep ampc_mt_step_from_config(const RtOptConfig *c)
{
    AmpcMtStep s;
    memset(&s, 0, sizeof s);
    s.kind = (int32_t)c->kind;
    s.lr = c->lr;
    s.wd = c->wd;
    s.momentum = c->momentum;
    s.clip_gradient = c->clip_gradient;
    s.rescale_grad = c->rescale_grad;
    s.beta1 = c->beta1;
    s.beta2 = c->beta2;
    s.epsilon = c->epsilon;
    if (c->kind == RT_OPT_ADAM)
        s.adam_corr = ampc_adam_corr(c->beta1, c->beta2, (long)(c->t > 0 ? c->t : 1));
    return s;
}

#endif /* AMPC_CUDA_MT_TABLE_H */
