/*
 * optim.cuh - the twin of runtime/cpu/optim.c: the fused multi-tensor
 * optimizer (SGD, SGD with momentum, NAG, Adam, multi-precision), every
 * tensor in one launch, and its block tables.  Built by kernels.cu.
 */
#ifndef AMPC_CUDA_OPTIM_CUH
#define AMPC_CUDA_OPTIM_CUH

#ifndef AMPC_CUDA_KERNELS_CUH
#error "include cuda/kernels.cuh before cuda/optim.cuh"
#endif

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

#endif /* AMPC_CUDA_OPTIM_CUH */
