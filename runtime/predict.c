/* predict.c - the training program's MXNet side (docs/mxnet.md, "Weights and
 * prediction"): --load-params (an MXNet .params file over the initial
 * parameters), --save-params (the parameters as one, at the end of a run)
 * and --predict INPUT.npy --output OUT.npy (the inference step over a
 * float32 array, no training).
 *
 * Names are the model's parameter names, which ampc keeps as MXNet's: a
 * file's key is NAME, or arg:NAME for a trainable parameter and aux:NAME
 * for a BatchNorm moving statistic (Module.save_checkpoint's prefixes).
 * Every name and shape is checked before anything is loaded, so a refused
 * file leaves the parameters as they were.  Like the loop, this file
 * reaches the buffers only through the device interface (trainer.c).
 */
#include <stdlib.h>
#include <string.h>

#include "mxparams.h"
#include "npy.h"
#include "paramlayout.h"
#include "train_internal.h"

static bool is_aux(const RtParam *p)
{
    return p->kind == RT_PK_MOVING_MEAN || p->kind == RT_PK_MOVING_VAR;
}

static void shape_text(char *dst, size_t cap, int rank, const int64_t *shape)
{
    size_t at = (size_t)snprintf(dst, cap, "(");
    for (int d = 0; d < rank && at < cap; d++)
        at += (size_t)snprintf(dst + at, cap - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < cap)
        snprintf(dst + at, cap - at, "%s)", rank == 1 ? "," : "");
}

/* A key from the file for a message: printable ASCII, the rest \xNN, cut. */
static void show(char *dst, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 5 < cap && o < 120; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 32 && c < 127 && c != '\\' && c != '\'')
            dst[o++] = (char)c;
        else
            o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
    }
    dst[o] = 0;
}

/* The model's parameter a file key names (prefix stripped), or -1 with a
 * message. */
static int match_key(const RtModel *m, const RtMxArray *a, const char *path, char *err,
                     size_t errlen)
{
    const char *key = a->name, *name = key;
    int prefix = 0; /* 1 arg:, 2 aux: */
    if (strncmp(key, "arg:", 4) == 0)
        prefix = 1, name += 4;
    else if (strncmp(key, "aux:", 4) == 0)
        prefix = 2, name += 4;
    char shown[512];
    show(shown, sizeof shown, key);
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (strcmp(p->name, name) != 0)
            continue;
        if (prefix && (prefix == 2) != is_aux(p)) {
            snprintf(err, errlen, "%s: '%s' names %s of model %s, which is %s (%s:%s)", path,
                     shown, p->name, m->name,
                     is_aux(p) ? "an auxiliary state" : "an argument, not an auxiliary state",
                     is_aux(p) ? "aux" : "arg", p->name);
            return -1;
        }
        return i;
    }
    snprintf(err, errlen, "%s: '%s' matches no parameter of model %s (a key is NAME, arg:NAME "
             "or aux:NAME with NAME a parameter of the model; ampc keeps MXNet's names)", path,
             shown, m->name);
    return -1;
}

/* Every key matched once, every shape equal, every parameter present:
 * which array goes to each parameter into from[nparams]. */
static bool plan_load(const RtModel *m, const RtMxList *l, const char *path, int *from,
                      char *err, size_t errlen)
{
    if (l->n > 0 && !l->named) {
        snprintf(err, errlen, "%s: its %d arrays have no names (saved from a list, not a dict): "
                 "the parameters cannot be matched", path, l->n);
        return false;
    }
    for (int i = 0; i < m->nparams; i++)
        from[i] = -1;
    for (int k = 0; k < l->n; k++) {
        const RtMxArray *a = &l->a[k];
        int i = match_key(m, a, path, err, errlen);
        if (i < 0)
            return false;
        const RtParam *p = &m->params[i];
        char shown[512], sa[160], sp[160];
        show(shown, sizeof shown, a->name);
        if (from[i] >= 0) {
            char other[512];
            show(other, sizeof other, l->a[from[i]].name);
            snprintf(err, errlen, "%s: '%s' and '%s' both name parameter %s", path, other,
                     shown, p->name);
            return false;
        }
        bool same = !a->none && a->rank == p->rank;
        for (int d = 0; same && d < p->rank; d++)
            same = a->shape[d] == p->shape[d];
        if (!same) {
            if (a->none)
                snprintf(sa, sizeof sa, "none (an empty NDArray)");
            else
                shape_text(sa, sizeof sa, a->rank, a->shape);
            shape_text(sp, sizeof sp, p->rank, p->shape);
            snprintf(err, errlen, "%s: shape mismatch for parameter %s: the file's '%s' is %s, "
                     "the model's is %s", path, p->name, shown, sa, sp);
            return false;
        }
        from[i] = k;
    }
    for (int i = 0; i < m->nparams; i++)
        if (from[i] < 0) {
            const RtParam *p = &m->params[i];
            char sp[160];
            int missing = 0;
            for (int j = 0; j < m->nparams; j++)
                missing += from[j] < 0;
            shape_text(sp, sizeof sp, p->rank, p->shape);
            snprintf(err, errlen, "%s: parameter %s %s of model %s is missing (%s:%s; %d of the "
                     "model's %d parameters are missing)", path, p->name, sp, m->name,
                     is_aux(p) ? "aux" : "arg", p->name, missing, m->nparams);
            return false;
        }
    return true;
}

bool rt_params_load(RtTrainer *t, const char *path, char *err, size_t errlen)
{
    const RtModel *m = t->m;
    RtMxList l;
    if (!rt_mx_read(path, &l, err, errlen))
        return false;
    int *from = malloc(((size_t)m->nparams + 1) * sizeof *from);
    int64_t maxn = 1;
    for (int i = 0; i < m->nparams; i++)
        maxn = m->params[i].numel > maxn ? m->params[i].numel : maxn;
    /* w32 in the file's (canonical) order, perm in the device's */
    float *w32 = malloc((size_t)maxn * sizeof *w32), *perm = malloc((size_t)maxn * sizeof *perm);
    uint16_t *w16 = malloc((size_t)maxn * sizeof *w16);
    bool ok = from && w32 && w16 && perm;
    if (!ok)
        snprintf(err, errlen, "%s: out of memory", path);
    ok = ok && plan_load(m, &l, path, from, err, errlen);
    for (int i = 0; ok && i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        const RtMxArray *a = &l.a[from[i]];
        size_t n = (size_t)p->numel;
        for (size_t e = 0; e < n; e++)
            perm[e] = rt_mx_get(a, (int64_t)e);
        rt_param_convert(p, RT_F32, perm, w32, RT_LAYOUT_NHWC);
        if (p->has_master && t->ctx.master[i])
            rt_dev_to_device(t->dev, t->ctx.master[i], w32, n * sizeof(float));
        if (p->dtype == RT_F32) {
            rt_dev_to_device(t->dev, t->ctx.buf[p->buffer], w32, n * sizeof(float));
        } else {
            rt_from_f32(w16, w32, n, p->dtype); /* one rounding, as the optimizer's shadows */
            rt_dev_to_device(t->dev, t->ctx.buf[p->buffer], w16, n * sizeof(uint16_t));
        }
    }
    free(from);
    free(w32);
    free(perm);
    free(w16);
    rt_mx_free(&l);
    return ok;
}

bool rt_params_save(const RtTrainer *t, const char *path, bool sixteen, char *err, size_t errlen)
{
    const RtModel *m = t->m;
    RtMxList l = {.n = m->nparams, .named = true};
    l.a = calloc((size_t)m->nparams + 1, sizeof *l.a);
    bool ok = l.a != NULL;
    for (int i = 0; ok && i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        RtMxArray *a = &l.a[i];
        size_t n = (size_t)p->numel, k = strlen(p->name) + 5;
        bool raw16 = sixteen && p->dtype != RT_F32;
        void *data = malloc((n ? n : 1) * (raw16 ? 2 : 4));
        a->name = malloc(k);
        if (!data || !a->name) {
            free(data);
            ok = false;
            break;
        }
        snprintf(a->name, k, "%s:%s", is_aux(p) ? "aux" : "arg", p->name);
        a->rank = p->rank;
        memcpy(a->shape, p->shape, sizeof a->shape);
        a->numel = p->numel;
        a->data = data;
        if (raw16) { /* the bits the steps read */
            a->type_flag = p->dtype == RT_F16 ? RT_MX_FLOAT16 : RT_MX_BFLOAT16;
            rt_dev_to_host(t->dev, data, t->ctx.buf[p->buffer], n * 2);
        } else { /* the fp32 master, the fp32 parameter, or the 16-bit one widened */
            a->type_flag = RT_MX_FLOAT32;
            if (p->has_master && t->ctx.master[i])
                rt_trainer_read_f32(t, data, t->ctx.master[i], n, RT_F32);
            else
                rt_trainer_read_f32(t, data, t->ctx.buf[p->buffer], n, p->dtype);
        }
        /* the file is canonical whatever the device's layout */
        if (!(ok = rt_param_convert_inplace(p, raw16 ? p->dtype : RT_F32, data,
                                            RT_LAYOUT_NCHW)))
            break;
    }
    if (!ok)
        snprintf(err, errlen, "--save-params %s: out of memory", path);
    ok = ok && rt_mx_write(path, "--save-params", &l, RT_MX_V2, err, errlen);
    for (int i = 0; l.a && i < m->nparams; i++)
        free((void *)l.a[i].data);
    l.owned = NULL;
    rt_mx_free(&l);
    return ok;
}

int rt_predict_check_options(const RtTrainOptions *o, FILE *err)
{
    const char *bad = NULL;
    if (o->predict && !o->output)
        bad = "--predict needs --output FILE.npy";
    else if (o->output && !o->predict)
        bad = "--output is where --predict writes: give --predict INPUT.npy too";
    else if (o->load_params && o->resume)
        bad = "--load-params and --resume both set the parameters: give one";
    else if (o->save_params_16bit && !o->save_params)
        bad = "--save-params-16bit needs --save-params FILE";
    else if (o->predict && (o->eval_only || o->dump_state))
        bad = o->eval_only ? "--predict and --eval-only: give one"
                           : "--predict and --dump-state: give one";
    if (!bad)
        return 0;
    fprintf(err, "%s: %s\n", o->prog, bad);
    return 2;
}

/* The input's shape against the model's: [B, data_shape...] with B >= 1. */
static bool check_input(const RtModel *m, const RtNpyHeader *h, const char *path, char *err,
                        size_t errlen)
{
    bool ok = h->rank == m->data_rank + 1 && h->shape[0] >= 1;
    for (int d = 0; ok && d < m->data_rank; d++)
        ok = h->shape[d + 1] == m->data_shape[d];
    if (ok)
        return true;
    char sh[200], want[200];
    shape_text(sh, sizeof sh, h->rank, h->shape);
    size_t at = (size_t)snprintf(want, sizeof want, "(N");
    for (int d = 0; d < m->data_rank && at < sizeof want; d++)
        at += (size_t)snprintf(want + at, sizeof want - at, ", %lld", (long long)m->data_shape[d]);
    snprintf(err, errlen, "%s: shape %s does not match model %s's input %s) with any N >= 1",
             path, sh, m->name, want);
    return false;
}

/* The inference step over every row of x[rows, sample] in batches of t->batch
 * (the last one padded with its first row), the outputs into y[rows, classes]. */
static void predict_rows(RtTrainer *t, const float *x, int64_t rows, int64_t sample, float *y)
{
    const RtModel *m = t->m;
    int64_t b = t->batch;
    for (int64_t at = 0; at < rows; at += b) {
        int64_t n = rows - at < b ? rows - at : b;
        rt_trainer_staging_ready(t);
        for (int64_t j = 0; j < b; j++)
            memcpy(t->x_host + j * sample, x + (at + (j < n ? j : 0)) * sample,
                   (size_t)sample * sizeof(float));
        memset(t->y_host, 0, (size_t)b * sizeof(float));
        rt_trainer_load_batch(t);
        t->ctx.batch = b;
        m->infer_step(&t->ctx);
        const float *prob = rt_trainer_read_rows(t, m->prob_infer, n);
        memcpy(y + at * m->classes, prob, (size_t)(n * m->classes) * sizeof(float));
    }
}

int rt_predict_run(const RtModel *m, const RtTrainOptions *o, const RtDeviceConfig *dc, FILE *out,
                   FILE *err)
{
    char msg[1024];
    RtNpyHeader h;
    float *x = NULL, *y = NULL;
    RtTrainer t;
    memset(&t, 0, sizeof t);
    RtCheckpoint ck;
    memset(&ck, 0, sizeof ck);
    bool have_ck = false;
    int rc = 1;
    if (!rt_npy_read(o->predict, &h, &x, msg, sizeof msg) ||
        !check_input(m, &h, o->predict, msg, sizeof msg))
        goto fail;
    int64_t rows = h.shape[0], sample = h.numel / rows;
    int64_t b = rows < o->batch_size ? rows : o->batch_size;
    int64_t nout;
    if (__builtin_mul_overflow(rows, m->classes, &nout) || (uint64_t)nout > SIZE_MAX / 4 ||
        !(y = malloc((size_t)nout * sizeof *y))) {
        snprintf(msg, sizeof msg, "out of memory for the outputs");
        goto fail;
    }
    if (!o->resume && !o->load_params) {
        snprintf(msg, sizeof msg,
                 "--predict needs the trained weights: --resume CKPT (a "
                 "checkpoint of --save-dir) or --load-params FILE (an MXNet .params file); "
                 "without them it would predict from the random initial weights");
        goto fail;
    }
    if (o->resume && !(have_ck = rt_checkpoint_read(o->resume, &ck, msg, sizeof msg)))
        goto fail;
    uint64_t seed = have_ck ? ck.run.seed : o->seed;
    RtDeviceOpen how = {.config = dc};
    if (!rt_trainer_init(&t, m, b, 0, &how, msg, sizeof msg)) {
        memset(&t, 0, sizeof t);
        goto fail;
    }
    t.ctx.seed = seed;
    if (!rt_trainer_init_params(&t, o->init, seed, msg, sizeof msg) ||
        /* no warning about optimizer state: predicting uses none */
        (have_ck && !rt_checkpoint_apply(&ck, &t, o->prog, o->resume, NULL, msg, sizeof msg)) ||
        (o->load_params && !rt_params_load(&t, o->load_params, msg, sizeof msg)) ||
        !rt_trainer_setup(&t, msg, sizeof msg))
        goto fail;
    predict_rows(&t, x, rows, sample, y);
    int64_t oshape[2] = {rows, m->classes};
    if (!rt_npy_write(o->output, "--output", 2, oshape, y, msg, sizeof msg))
        goto fail;
    fprintf(out, "Predicted %lld samples of %s: outputs (%lld, %lld) written to %s\n",
            (long long)rows, o->predict, (long long)rows, (long long)m->classes, o->output);
    if (o->save_params) {
        if (!rt_params_save(&t, o->save_params, o->save_params_16bit, msg, sizeof msg))
            goto fail;
        fprintf(out, "Saved parameters to %s\n", o->save_params);
    }
    rc = 0;
fail:
    if (rc)
        fprintf(err, "%s: %s\n", o->prog, msg);
    if (t.m)
        rt_trainer_free(&t);
    if (have_ck)
        rt_checkpoint_free(&ck);
    free(x);
    free(y);
    if (fflush(out) != 0 && rc == 0) {
        fprintf(err, "%s: cannot write the log to standard output\n", o->prog);
        rc = 1;
    }
    return rc;
}
