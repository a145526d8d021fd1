/* optim.c - the optimizer over all parameters, MXNet 1.x semantics.
 *
 * One call updates every parameter, and each element is touched once: the
 * gradient is read once (16-bit or fp32) and checked for inf/NaN in the same
 * pass, the fp32 master (or the fp32 weight itself) and the fp32 momentum
 * are updated, and the 16-bit shadow that the steps read is written from the
 * new master, through the shared per-element updates of
 * runtime/kernels/optim.h (ampc_mp_* return the shadow), so the CPU and CUDA
 * optimizers cannot drift.  The CUDA backend runs the same loop over all
 * tensors as one multi-tensor launch (MXNet's multi_mp_sgd_mom_update).
 *
 * Per parameter (FACTS.md E 4.3): lr = lr x lr_mult, wd = wd x wd_mult, both
 * from the table as the compiler emits them (the compiler applies MXNet
 * Module's rule: wd_mult 0 for names not ending in _weight or _gamma);
 * rescale_grad = 1/(batch x loss_scale) (SoftmaxOutput's normalization
 * 'null'; the loss scale's unscaling folded in, as MXNet's trainer does).
 * sgd with momentum 0 is sgd_update (no state); nag with momentum 0 is sgd
 * too (MXNet's Python layer).  Parameters without a master and with 16-bit
 * storage update in fp32 and round the weight once (momentum stays fp32).
 *
 * Adam (mx@v1.x AdamUpdateKernel via kernels/optim.h's ampc_adam_update):
 * the same one pass, with two fp32 state tensors (mean in state[i], var in
 * state2[i]) and the bias correction folded into the lr as MXNet's Python
 * Adam.update does: lr_t = lr x lr_mult x sqrt(1 - beta2^t) / (1 - beta1^t),
 * t the update count (1 on the first).  Multi-precision Adam reads the
 * 16-bit gradient (2 B), the master, mean and var (12 B) and writes them
 * back with the 16-bit shadow (14 B): 28 B per parameter in one pass, where
 * MXNet 1.x's Optimizer.update_multi_precision takes three kernels and 40 B
 * (FACTS.md G 2.1).
 *
 * The finite check: with dynamic loss scaling the step may be skipped, so
 * the check (rt_optim_grads_finite, rt_multi_all_finite over all gradients)
 * must finish before anything changes, and it costs one more read of the
 * gradients (MXNet's multi_all_finite does the same).  With a static scale
 * or none the step is never skipped, so the check is fused into the update
 * pass (rt_optim_step's return value) and costs no extra memory traffic.
 *
 * Speed: the multi-precision loops (fp16 or bf16 gradient and shadow, fp32
 * master) and the fp32 loop (fp32 gradient and weight, no master) hand the
 * first n - n % 8 elements of each piece to optim_simd.c's AVX2 (+ F16C)
 * body where the CPU has both (CPUID, checked once; AMPC_NO_SIMD=1 in the
 * environment keeps the per-element loops), bit-identical to them, and do
 * the rest themselves.  ~21 GB/s on one core against ~4.4 GB/s for the
 * per-element loops (docs/performance.md, "Fused optimizer bandwidth"); the
 * bytes are the same 20 (SGD momentum, NAG) or 28 (Adam) per parameter.
 * The mixed cases (widening a 16-bit weight without a master, or an fp32
 * weight with a 16-bit gradient) stay per-element.  The pieces are blocks
 * of each tensor that the runtime's threads share (see "threads" below).
 */
#include <stdint.h>
#include <string.h>

#include "cpu/cpu.h" /* the declarations of this file and of optim_simd.c */
#include "kernels/optim.h"

float rt_optim_wd_mult(const RtParam *p) { return p->wd_mult; }

int rt_optim_bytes_per_param(const RtParam *p, RtDType grad_dt, const RtOptConfig *c,
                             bool separate_check)
{
    int g = (int)rt_dtype_size(grad_dt);
    int w = p->has_master ? 4 : (int)rt_dtype_size(p->dtype);
    int shadow = p->has_master ? (int)rt_dtype_size(p->dtype) : 0;
    int mom = 4 * rt_optim_nstate(c); /* momentum, or Adam's mean and var */
    return (separate_check ? g : 0)   /* the finite check's read */
           + g + w + mom              /* read */
           + w + mom + shadow;        /* write */
}

enum { CHUNK = 64 };

bool rt_optim_grads_finite(const RtModel *m, const RtCtx *ctx)
{
    RtTensorRef refs[CHUNK];
    int n = 0;
    bool ok = true;
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (p->grad < 0)
            continue;
        refs[n++] = (RtTensorRef){ctx->buf[p->grad], (size_t)p->numel, m->buffers[p->grad].dtype};
        if (n == CHUNK) {
            ok &= rt_multi_all_finite(refs, n);
            n = 0;
        }
    }
    if (n)
        ok &= rt_multi_all_finite(refs, n);
    return ok;
}

int rt_optim_first_nonfinite(const RtModel *m, const RtCtx *ctx)
{
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (p->grad >= 0 &&
            !rt_all_finite(ctx->buf[p->grad], (size_t)p->numel, m->buffers[p->grad].dtype))
            return i;
    }
    return -1;
}

/* Element update of one fp32 weight; state may be NULL (no momentum); var
 * is Adam's second state. */
static inline void update_f32(float *w, float *mom, float *var, float g, const AmpcOptParam *q,
                              RtOptKind k)
{
    if (k == RT_OPT_ADAM)
        ampc_adam_update(w, mom, var, g, *q);
    else if (!mom)
        ampc_sgd_update(w, g, *q);
    else if (k == RT_OPT_NAG)
        ampc_nag_mom_update(w, mom, g, *q);
    else
        ampc_sgd_mom_update(w, mom, g, *q);
}

static int simd_op(RtOptKind k, const float *mom)
{
    return k == RT_OPT_ADAM ? RT_SIMD_ADAM
         : !mom             ? RT_SIMD_SGD
         : k == RT_OPT_NAG  ? RT_SIMD_NAG
                            : RT_SIMD_SGD_MOM;
}

/* n elements of one tensor (wdt its storage dtype; the pointers at the
 * first of them); returns nonzero when a gradient element is inf or NaN
 * (the check reads the bits the update reads anyway). */
static unsigned update_tensor(RtDType wdt, size_t n, RtDType gdt, const void *grad, void *wbuf,
                              float *master, float *mom, float *var, const AmpcOptParam *q,
                              RtOptKind kind)
{
    unsigned bad = 0;
    if (kind == RT_OPT_ADAM && (!mom || !var))
        return 0; /* no state: rt_optim_step refuses this before */
    if (master && wdt == RT_F16 && gdt == RT_F16) {
        /* the multi-precision kernels: fp16 gradient -> fp32 master -> fp16 shadow */
        const ampc_half *g = grad;
        ampc_half *w16 = wbuf;
        size_t i0 = rt_optim_simd_mp(simd_op(kind, mom), false, g, master, mom, var, w16, n, q,
                                     &bad);
        if (kind == RT_OPT_ADAM)
            for (size_t i = i0; i < n; i++) {
                bad |= (g[i] & 0x7c00u) == 0x7c00u;
                w16[i] = ampc_mp_adam_update(&master[i], &mom[i], &var[i], g[i], *q);
            }
        else if (!mom)
            for (size_t i = i0; i < n; i++) {
                bad |= (g[i] & 0x7c00u) == 0x7c00u;
                w16[i] = ampc_mp_sgd_update(&master[i], g[i], *q);
            }
        else if (kind == RT_OPT_NAG)
            for (size_t i = i0; i < n; i++) {
                bad |= (g[i] & 0x7c00u) == 0x7c00u;
                w16[i] = ampc_mp_nag_mom_update(&master[i], &mom[i], g[i], *q);
            }
        else
            for (size_t i = i0; i < n; i++) {
                bad |= (g[i] & 0x7c00u) == 0x7c00u;
                w16[i] = ampc_mp_sgd_mom_update(&master[i], &mom[i], g[i], *q);
            }
        return bad;
    }
    if (master && wdt == RT_BF16 && gdt == RT_BF16) {
        const ampc_bf16 *g = grad;
        ampc_bf16 *w16 = wbuf;
        size_t i0 = rt_optim_simd_mp(simd_op(kind, mom), true, g, master, mom, var, w16, n, q,
                                     &bad);
        if (kind == RT_OPT_ADAM)
            for (size_t i = i0; i < n; i++) {
                bad |= (g[i] & 0x7f80u) == 0x7f80u;
                w16[i] = ampc_mp_adam_update_bf16(&master[i], &mom[i], &var[i], g[i], *q);
            }
        else if (!mom)
            for (size_t i = i0; i < n; i++) {
                bad |= (g[i] & 0x7f80u) == 0x7f80u;
                w16[i] = ampc_mp_sgd_update_bf16(&master[i], g[i], *q);
            }
        else if (kind == RT_OPT_NAG)
            for (size_t i = i0; i < n; i++) {
                bad |= (g[i] & 0x7f80u) == 0x7f80u;
                w16[i] = ampc_mp_nag_mom_update_bf16(&master[i], &mom[i], g[i], *q);
            }
        else
            for (size_t i = i0; i < n; i++) {
                bad |= (g[i] & 0x7f80u) == 0x7f80u;
                w16[i] = ampc_mp_sgd_mom_update_bf16(&master[i], &mom[i], g[i], *q);
            }
        return bad;
    }
    if (!master && wdt == RT_F32 && gdt == RT_F32) {
        /* fp32: the buffer is the weight */
        const float *g = grad;
        float *w = wbuf;
        size_t i0 = rt_optim_simd_f32(simd_op(kind, mom), g, w, mom, var, n, q, &bad);
        for (size_t i = i0; i < n; i++) {
            bad |= !ampc_isfinite(g[i]);
            update_f32(&w[i], mom ? &mom[i] : NULL, var ? &var[i] : NULL, g[i], q, kind);
        }
        return bad;
    }
    /* Mixed cases (an fp32 gradient of a 16-bit parameter or of an fp32
     * parameter with a master, or a 16-bit parameter without a master):
     * widen each element, update in fp32, round once. */
    for (size_t i = 0; i < n; i++) {
        float g = gdt == RT_F32 ? ((const float *)grad)[i]
                : gdt == RT_F16 ? ampc_half_to_float(((const ampc_half *)grad)[i])
                                : ampc_bf16_to_float(((const ampc_bf16 *)grad)[i]);
        bad |= !ampc_isfinite(g);
        float wv, *w = master ? &master[i] : &wv;
        if (!master)
            wv = wdt == RT_F32 ? ((float *)wbuf)[i]
               : wdt == RT_F16 ? ampc_half_to_float(((ampc_half *)wbuf)[i])
                               : ampc_bf16_to_float(((ampc_bf16 *)wbuf)[i]);
        update_f32(w, mom ? &mom[i] : NULL, var ? &var[i] : NULL, g, q, kind);
        if (wdt == RT_F32)
            ((float *)wbuf)[i] = *w;
        else if (wdt == RT_F16)
            ((ampc_half *)wbuf)[i] = ampc_float_to_half(*w);
        else
            ((ampc_bf16 *)wbuf)[i] = ampc_float_to_bf16(*w);
    }
    return bad;
}

bool rt_optim_step(const RtModel *m, RtCtx *ctx, float *const *state, const RtOptConfig *c)
{
    return rt_optim_step2(m, ctx, state, NULL, c);
}

/* ---- threads ----
 * Every element's update is independent of every other's, so the tensors
 * are cut into blocks of OPT_BLOCK elements (the last of each tensor
 * shorter) that the threads take as they come free; OPT_BLOCK is a multiple
 * of 8, so each element takes the same path (AVX2 body or per-element tail)
 * as in one pass over its tensor, and the bits do not depend on the thread
 * count.  The finite flag is an OR.  Tensors go to the threads OPT_GROUP at
 * a time (the job's table lives on the stack). */
enum { OPT_BLOCK = 16384, OPT_GROUP = 64 };

typedef struct {
    RtDType wdt, gdt;
    size_t n, first; /* elements; index of the tensor's first block in the job */
    const void *grad;
    void *wbuf;
    float *master, *mom, *var;
    AmpcOptParam q;
} OptTensor;

typedef struct {
    OptTensor t[OPT_GROUP];
    int ntensors;
    size_t nblocks;
    RtOptKind kind;
    unsigned bad;
} OptJob;

static void opt_blocks(void *ctx, size_t lo, size_t hi)
{
    OptJob *j = ctx;
    int a = 0, b = j->ntensors - 1; /* the tensor holding block lo: the last with first <= lo */
    while (a < b) {
        int mid = (a + b + 1) / 2;
        if (j->t[mid].first <= lo)
            a = mid;
        else
            b = mid - 1;
    }
    unsigned bad = 0;
    for (size_t k = lo; k < hi; k++) {
        while (a + 1 < j->ntensors && j->t[a + 1].first <= k)
            a++;
        const OptTensor *t = &j->t[a];
        size_t off = (k - t->first) * OPT_BLOCK;
        size_t n = t->n - off < OPT_BLOCK ? t->n - off : OPT_BLOCK;
        size_t we = rt_dtype_size(t->wdt), ge = rt_dtype_size(t->gdt);
        bad |= update_tensor(t->wdt, n, t->gdt, (const char *)t->grad + off * ge,
                             (char *)t->wbuf + off * we, t->master ? t->master + off : NULL,
                             t->mom ? t->mom + off : NULL, t->var ? t->var + off : NULL, &t->q,
                             j->kind);
    }
    if (bad)
        __atomic_fetch_or(&j->bad, 1u, __ATOMIC_RELAXED);
}

static void opt_run(OptJob *j)
{
    if (j->nblocks == 0)
        return;
    size_t elems = 0;
    for (int i = 0; i < j->ntensors; i++)
        elems += j->t[i].n;
    rt__parallel_items(j->nblocks, elems / j->nblocks, opt_blocks, j);
    j->ntensors = 0;
    j->nblocks = 0;
}

bool rt_optim_step2(const RtModel *m, const RtCtx *ctx, float *const *state,
                    float *const *state2, const RtOptConfig *c)
{
    bool with_mom = rt_optim_has_state(c);
    OptJob j;
    j.ntensors = 0;
    j.nblocks = 0;
    j.kind = c->kind;
    j.bad = 0;
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
        float *var = c->kind == RT_OPT_ADAM && state2 ? state2[i] : NULL;
        if (c->kind == RT_OPT_ADAM) {
            /* MXNet's Python Adam.update: the bias correction in the lr, in
             * double; lr x lr_mult first (the scheduler's lr is fp32 here) */
            q.beta1 = c->beta1;
            q.beta2 = c->beta2;
            q.epsilon = c->epsilon;
            q.lr = ampc_adam_lr((double)c->lr * (double)p->lr_mult, c->beta1, c->beta2,
                                (long)(c->t > 0 ? c->t : 1));
            if (!mom || !var)
                continue; /* Adam needs both states (rt_trainer_init with nstate 2) */
        }
        if (p->numel <= 0)
            continue; /* nothing to update (and no block of its own) */
        j.t[j.ntensors++] =
            (OptTensor){p->dtype, m->buffers[p->grad].dtype, (size_t)p->numel, j.nblocks,
                        ctx->buf[p->grad], ctx->buf[p->buffer], master, mom, var, q};
        j.nblocks += ((size_t)p->numel + OPT_BLOCK - 1) / OPT_BLOCK;
        if (j.ntensors == OPT_GROUP)
            opt_run(&j);
    }
    opt_run(&j);
    return !j.bad;
}
