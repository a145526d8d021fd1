/* state.c - writes the state of one training step (train.h, rt_dump_state)
 * so tests can check a compiled program's gradients from outside it; every
 * tensor is copied from the device first. */
#include "paramlayout.h"
#include "train.h"

#include <errno.h>

#include "fileio.h"
#include <stdlib.h>
#include <string.h>

static bool put(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n; }

/* n values at device pointer src (any dtype) as fp32, times scale */
static bool put_f32(FILE *f, const RtTrainer *t, const void *src, int64_t n, RtDType dt,
                    float scale)
{
    float tmp[1024];
    for (int64_t i = 0; i < n; i += 1024) {
        int64_t k = n - i < 1024 ? n - i : 1024;
        rt_trainer_read_f32(t, tmp, (const char *)src + (size_t)i * rt_dtype_size(dt), (size_t)k,
                            dt);
        for (int64_t j = 0; j < k; j++)
            tmp[j] *= scale;
        if (!put(f, tmp, sizeof(float) * (size_t)k))
            return false;
    }
    return true;
}

/* n fp32 values at device pointer src, bit for bit */
static bool put_raw(FILE *f, const RtTrainer *t, const float *src, int64_t n)
{
    float tmp[1024];
    for (int64_t i = 0; i < n; i += 1024) {
        int64_t k = n - i < 1024 ? n - i : 1024;
        rt_trainer_read_f32(t, tmp, src + i, (size_t)k, RT_F32);
        if (!put(f, tmp, sizeof(float) * (size_t)k))
            return false;
    }
    return true;
}

/* A parameter's values (raw: the fp32 bits; else dt widened, times scale)
 * in the canonical layout: a parameter stored in another layout on the
 * device (paramlayout.h) is read whole and permuted back. */
static bool put_param(FILE *f, const RtTrainer *t, const RtParam *p, const void *src,
                      RtDType dt, float scale, bool raw)
{
    if (!rt_param_permuted(p))
        return raw ? put_raw(f, t, src, p->numel) : put_f32(f, t, src, p->numel, dt, scale);
    size_t n = (size_t)p->numel;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    bool ok = a && b;
    if (ok) {
        rt_trainer_read_f32(t, a, src, n, dt);
        for (size_t i = 0; !raw && i < n; i++)
            a[i] *= scale;
        rt_param_convert(p, RT_F32, a, b, RT_LAYOUT_NCHW);
        ok = put(f, b, n * sizeof *b);
    }
    free(a);
    free(b);
    return ok;
}

bool rt_dump_state(const RtModel *m, const RtTrainer *t, const char *path, char *err,
                   size_t errlen)
{
    const RtCtx *ctx = &t->ctx;
    /* beside it and renamed (a device is written directly); never one of
     * the run's inputs (fileio.h) */
    RtOutFile out;
    if (!rt_out_open(&out, path, "--dump-state", err, errlen))
        return false;
    FILE *f = out.f;
    int64_t batch = ctx->batch, sample = 1, classes = m->classes, count = 0;
    for (int i = 0; i < m->data_rank; i++)
        sample *= m->data_shape[i];
    int64_t data_values = sample * batch;
    float *label = malloc((size_t)batch * sizeof *label);
    if (!label) {
        snprintf(err, errlen, "--dump-state: out of memory");
        rt_out_abort(&out);
        return false;
    }
    rt_trainer_read_f32(t, label, ctx->buf[m->label], (size_t)batch, RT_F32);
    double loss = rt_cross_entropy_sum(batch, classes, RT_F32,
                                       rt_trainer_read_rows(t, m->prob_train, batch), label,
                                       &count);
    free(label);
    uint32_t version = 1, np = (uint32_t)m->nparams;
    bool ok = put(f, "AMPCSTAT", 8) && put(f, &version, 4) && put(f, &np, 4) &&
              put(f, &batch, 8) && put(f, &data_values, 8) && put(f, &ctx->seed, 8) &&
              put(f, &ctx->step, 8) && put(f, &loss, 8);
    /* the scale the step's loss head multiplied by (the device's step state) */
    float unscale = 1.0f / rt_trainer_step_scale(t);
    for (int i = 0; ok && i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        uint32_t len = (uint32_t)strlen(p->name);
        ok = put(f, &len, 4) && put(f, p->name, len) && put(f, &p->numel, 8);
        if (ok && ctx->master && ctx->master[i])
            ok = put_param(f, t, p, ctx->master[i], RT_F32, 1.0f, true);
        else if (ok)
            ok = put_param(f, t, p, ctx->buf[p->buffer], p->dtype, 1.0f, false);
        if (ok && p->grad >= 0) {
            ok = put_param(f, t, p, ctx->buf[p->grad], m->buffers[p->grad].dtype, unscale, false);
        } else if (ok) {
            float zero = 0;
            for (int64_t k = 0; ok && k < p->numel; k++)
                ok = put(f, &zero, sizeof zero);
        }
    }
    ok = ok && put_raw(f, t, ctx->buf[m->data], data_values) &&
         put_raw(f, t, ctx->buf[m->label], batch);
    if (!ok) {
        snprintf(err, errlen, "--dump-state: cannot write '%s': %s", path, strerror(errno));
        rt_out_abort(&out);
        return false;
    }
    return rt_out_commit(&out, "--dump-state", err, errlen);
}
