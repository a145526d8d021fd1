/* ref_loop.h - a reference training loop for the device interface's tests:
 * the loop train.c ran before it went through device.h, written against the
 * CPU kernels and host pointers directly (on the CPU device a device pointer
 * is a host pointer, which only a test may rely on).  Same data order, same
 * finite check, moving_update, fused optimizer and loss-scale rule; no logs,
 * no validation (neither changes a parameter).
 *
 * ref_loop_run trains `steps` steps from o's settings and compares the
 * result, bit for bit, with the checkpoint the real loop wrote: every
 * parameter's fp32 values (master, fp32 buffer or widened 16-bit buffer)
 * and optimizer state.  Returns 0 when identical, else 1 with the first
 * difference in msg.  Used by tests/runtime/test_device.c (the hand-written
 * models) and tests/e2e/loopref.c (the compiled examples).
 */
#ifndef AMPC_TEST_REF_LOOP_H
#define AMPC_TEST_REF_LOOP_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h" /* the optimizer, on host pointers */
#include "train.h"
#include "train_internal.h"

static int ref_loop_run(const RtModel *m, const RtTrainOptions *o, int64_t steps,
                        const char *ckpt_path, char *msg, size_t msglen)
{
    RtTrainer t;
    RtDataset ds;
    RtCheckpoint ck;
    memset(&ds, 0, sizeof ds);
    memset(&ck, 0, sizeof ck);
    int64_t b = o->batch_size, sample = 1;
    for (int i = 0; i < m->data_rank; i++)
        sample *= m->data_shape[i];
    RtOptConfig oc = {.kind = o->optimizer, .lr = o->lr, .momentum = o->momentum, .wd = o->wd,
                      .rescale_grad = 1.0f / (float)b, .clip_gradient = o->clip_gradient,
                      .beta1 = o->beta1, .beta2 = o->beta2, .epsilon = o->epsilon};
    if (rt_open_data(m, o, o->seed, sample, &ds, stderr) != 0) {
        snprintf(msg, msglen, "cannot open the data");
        return 1;
    }
    if (!rt_trainer_init(&t, m, b, rt_optim_nstate(&oc), NULL, msg, msglen)) {
        rt_data_free(&ds);
        return 1;
    }
    t.ctx.seed = o->seed;
    int64_t *perm = malloc((size_t)ds.ntrain * sizeof *perm);
    FILE *sink = tmpfile();
    int rc = 1;
    if (!perm || !sink || !rt_trainer_init_params(&t, o->init, o->seed, msg, msglen))
        goto out;
    RtLossScaler ls;
    rt_loss_scaler_init(&ls, &o->loss_scale, m->amp);
    RtStepState st = {.scale = 1}; /* the reference's own, on the host */
    t.ctx.step_state = &st;
    int64_t spe = ds.ntrain / b, total = spe * o->epochs, nu = 0;
    rt_shuffle(perm, ds.ntrain, o->seed, 0);
    for (int64_t step = 0; step < steps && step < spe; step++) {
        ds.fill(&ds, RT_SPLIT_TRAIN, perm + step * b, b, t.ctx.buf[m->data], t.ctx.buf[m->label]);
        t.ctx.batch = b;
        t.ctx.step = (uint64_t)step;
        st.step = (uint64_t)step; /* what the kernels read (Dropout) */
        st.scale = step == o->inject_inf_step ? INFINITY : ls.s.scale;
        m->train_step(&t.ctx);
        bool finite = ls.mode != RT_LS_DYNAMIC || rt_optim_grads_finite(m, &t.ctx);
        if (finite || ls.mode != RT_LS_DYNAMIC) {
            if (m->moving_update)
                m->moving_update(&t.ctx);
            oc.lr = rt_lr_at(&o->sched, o->lr, nu + 1, spe, total);
            oc.rescale_grad = (float)(1.0 / ((double)b * (double)st.scale));
            oc.t = nu + 1;
            bool f = rt_optim_step2(m, &t.ctx, t.state, t.state2, &oc);
            if (ls.mode != RT_LS_DYNAMIC)
                finite = f;
            nu++;
        }
        rt_loss_scaler_update(&ls, finite, sink, sink);
    }
    if (!rt_checkpoint_read(ckpt_path, &ck, msg, msglen))
        goto out;
    if (ck.nparams != m->nparams) {
        snprintf(msg, msglen, "%s: %d parameters, the model has %d", ckpt_path, ck.nparams,
                 m->nparams);
        goto out;
    }
    rc = 0;
    for (int i = 0; rc == 0 && i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        size_t n = (size_t)p->numel, bytes = n * sizeof(float);
        float *w = malloc(bytes ? bytes : 1);
        if (!w) {
            snprintf(msg, msglen, "out of memory");
            rc = 1;
            break;
        }
        if (p->has_master)
            memcpy(w, t.ctx.master[i], bytes);
        else
            rt_to_f32(w, t.ctx.buf[p->buffer], n, p->dtype);
        const char *what = memcmp(w, ck.params[i].values, bytes) ? "values" : NULL;
        if (!what && (t.state[i] != NULL) != (ck.params[i].state != NULL))
            what = "momentum (present on one side)";
        else if (!what && t.state[i] && memcmp(t.state[i], ck.params[i].state, bytes))
            what = "momentum or Adam mean";
        else if (!what && t.state2 && t.state2[i] && ck.params[i].state2 &&
                 memcmp(t.state2[i], ck.params[i].state2, bytes))
            what = "Adam var";
        if (what) {
            snprintf(msg, msglen, "parameter %s: the %s differ from the reference loop's",
                     p->name, what);
            rc = 1;
        }
        free(w);
    }
    if (rc == 0 && (ck.run.num_update != nu || ck.run.ls.s.scale != ls.s.scale ||
                    ck.run.ls.skipped != ls.skipped)) {
        snprintf(msg, msglen, "run state: %lld updates, scale %g, %lld skipped; reference %lld, "
                 "%g, %lld", (long long)ck.run.num_update, (double)ck.run.ls.s.scale,
                 (long long)ck.run.ls.skipped, (long long)nu, (double)ls.s.scale,
                 (long long)ls.skipped);
        rc = 1;
    }
out:
    if (sink)
        fclose(sink);
    free(perm);
    rt_checkpoint_free(&ck);
    rt_trainer_free(&t);
    rt_data_free(&ds);
    return rc;
}

#endif
