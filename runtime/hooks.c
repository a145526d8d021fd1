/* hooks.c - the optional per-node hooks of a run: --check-numerics (the
 * first node whose output holds inf or NaN), --inject-nan (a NaN written
 * into one node's output, for tests) and --profile (time per node, node
 * kind and phase, and its report); rt_after_node is what the emitted steps
 * call after each node when either is on.  (--dump-state is rt_dump_state
 * in state.c.)  Apart from the loop because none of it runs in a plain run.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

/* ---- --check-numerics and --inject-nan: the after_node hook ------------------- */

bool rt_has_node(const RtModel *m, const char *name)
{
    for (int i = 0; i < m->nbuffers; i++)
        if (m->buffers[i].name && strcmp(m->buffers[i].name, name) == 0)
            return true;
    return false;
}

/* Both on the node's output through the device: the NaN is a fill of its
 * first element (NAN rounds to the quiet NaNs 0x7e00 in fp16 and 0x7fc0 in
 * bf16), the check a finite-flag check read back at once. */
static void numerics_node(RtCtx *ctx, RtDevice *d, Numerics *nm, const RtModel *m,
                          const char *name, int buffer)
{
    if (!nm || !name || buffer < 0 || buffer >= m->nbuffers)
        return;
    RtDType dt = m->buffers[buffer].dtype;
    if (nm->train && nm->nan_node && (int64_t)ctx->step == nm->nan_step &&
        strcmp(name, nm->nan_node) == 0)
        rt_dev_fill(d, ctx->buf[buffer], dt, 1, NAN);
    if (nm->check && !nm->found) {
        int64_t n = rt_buffer_elems(m, buffer, ctx->batch);
        if (n > 0)
            rt_dev_check_finite(d, ctx->buf[buffer], (size_t)n, dt);
        if (n > 0 && !rt_dev_read_flag(d)) {
            nm->found = true;
            nm->backward = nm->train && nm->past_head;
            nm->buffer = buffer;
            snprintf(nm->name, sizeof nm->name, "%s", name);
        }
    }
    if (nm->train && buffer == m->prob_train)
        nm->past_head = true;
}

void rt_numerics_report(FILE *err, const char *prog, const RtModel *m, const Numerics *nm,
                        const char *where)
{
    fprintf(err, "%s: --check-numerics: %s: the output of node '%s' (buffer %d, %s) holds inf "
            "or NaN\n", prog, where, nm->name, nm->buffer,
            rt_dtype_name(m->buffers[nm->buffer].dtype));
}

/* ---- --profile: time per node (the after_node hook) and per phase ----------- */

static const char *const phase_names[PH_N] = {
    "data (fill, or wait for prefetch)", "forward", "backward", "loss-scale check (all finite)",
    "BatchNorm moving statistics", "optimizer (fused update)", "metrics and logs"};
static const char *const phase_keys[PH_N] = {"data", "forward", "backward", "loss_scale_check",
                                             "moving_update", "optimizer", "other"};

void rt_prof_infer(Prof *pf, bool begin)
{
    double now = rt_now_s();
    if (begin) {
        pf->was_on = pf->on;
        pf->on = true;
        pf->step_fn = 1;
        pf->last = pf->infer_t0 = now;
    } else {
        pf->infer_sec += now - pf->infer_t0;
        pf->infer_steps++;
        pf->step_fn = 0;
        pf->on = pf->was_on;
    }
}

/* sec more for a node of step function f (0 train, 1 inference) */
static void prof_node(Prof *pf, const RtModel *m, int f, int node, const char *name,
                      const char *op, int buffer, bool backward, double sec)
{
    if (node < 0 || node > 1000000)
        return;
    if (node >= pf->cap[f]) {
        int cap = node + 64;
        ProfNode *nn = realloc(pf->node[f], (size_t)cap * sizeof *nn);
        if (!nn)
            return;
        memset(nn + pf->cap[f], 0, (size_t)(cap - pf->cap[f]) * sizeof *nn);
        pf->node[f] = nn;
        pf->cap[f] = cap;
    }
    ProfNode *pn = &pf->node[f][node];
    if (!pn->order)
        pn->order = ++pf->norder[f];
    pn->name = name;
    pn->op = op;
    pn->dtype = buffer >= 0 && buffer < m->nbuffers ? (int)m->buffers[buffer].dtype : -1;
    pn->sec += sec;
    pn->calls++;
    pn->backward = backward;
    if (f == 0)
        pf->phase[backward ? PH_BACKWARD : PH_FORWARD] += sec;
}

/* whether a node of the train step is in its backward pass: after the loss
 * head, or named so (a gradient sum before the head's own backward) */
static bool prof_backward(Prof *pf, const RtModel *m, const char *name, int buffer)
{
    bool bwd = pf->step_fn == 0 && (pf->past_head || strstr(name, "_bwd") != NULL);
    if (pf->step_fn == 0 && buffer == m->prob_train)
        pf->past_head = true;
    return bwd;
}

void rt_prof_step_begin(Prof *pf, RtDevice *d)
{
    pf->timed = false;
    pf->nmark = 0;
    if (!pf->on || pf->step_fn != 0 || !rt_dev_has_timing(d))
        return;
    d->ops->time_reset(d);
    pf->timed = d->ops->time_mark(d, &pf->start);
    pf->any_timed = pf->any_timed || pf->timed;
}

bool rt_prof_step_nodes(Prof *pf, RtDevice *d, const RtModel *m)
{
    if (!pf->timed)
        return false;
    RtDevTime prev = pf->start;
    bool waited = false;
    for (int i = 0; i < pf->nmark; i++) {
        const ProfMark *k = &pf->mark[i];
        if (!k->marked)
            continue; /* its time goes to the next marked node */
        rt_dev_uncapturable(d, "time_elapsed");
        double sec = d->ops->time_elapsed(d, &prev, &k->t);
        waited = true;
        prof_node(pf, m, 0, k->node, k->name, k->op, k->buffer, k->backward, sec);
        prev = k->t;
    }
    pf->own_syncs += waited;
    pf->timed = false;
    return true;
}

static void prof_mark(Prof *pf, RtDevice *d, int node, const char *name, const char *op,
                      int buffer, bool backward)
{
    if (pf->nmark == pf->capmark) {
        int cap = pf->capmark ? 2 * pf->capmark : 256;
        ProfMark *grown = realloc(pf->mark, (size_t)cap * sizeof *grown);
        if (!grown)
            return;
        pf->mark = grown;
        pf->capmark = cap;
    }
    ProfMark *k = &pf->mark[pf->nmark++];
    *k = (ProfMark){.node = node, .buffer = buffer, .name = name, .op = op,
                    .backward = backward};
    k->marked = d->ops->time_mark(d, &k->t);
}

/* The node kind from its name: the backward suffix ("_bwd" and what
 * follows) dropped, the scope prefixes (tokens up to one ending in a digit,
 * "basic1_") dropped, trailing digits dropped: "basic2_conv3_bwd" -> conv,
 * "softmax_output1" -> softmax_output; casts ("_amp_") -> amp_cast; a
 * backward node's suffix names a gradient sum ("conv3_bwd_plus" -> plus). */
static void node_kind(const char *name, char *kind, size_t cap)
{
    if (strstr(name, "_amp_") || strncmp(name, "amp_", 4) == 0) {
        snprintf(kind, cap, "amp_cast");
        return;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", name);
    char *bwd = strstr(buf, "_bwd");
    if (bwd) {
        char *suffix = bwd + 4;
        if (*suffix == '_' && suffix[1]) {
            snprintf(kind, cap, "%s", suffix + 1);
            return;
        }
        *bwd = 0;
    }
    /* the last token preceded by one that ends in a digit */
    size_t n = strlen(buf);
    size_t start = 0;
    for (size_t i = 1; i + 1 < n; i++)
        if (buf[i] == '_' && buf[i - 1] >= '0' && buf[i - 1] <= '9')
            start = i + 1;
    char *k = buf + start;
    size_t kl = strlen(k);
    while (kl > 1 && k[kl - 1] >= '0' && k[kl - 1] <= '9')
        k[--kl] = 0;
    if (kl > 0 && k[kl - 1] == '_')
        k[--kl] = 0;
    snprintf(kind, cap, "%s", kl ? k : name);
}

typedef struct {
    char kind[64];
    double fwd, bwd;
} ProfKind;

static int cmp_node(const void *a, const void *b)
{
    const ProfNode *x = *(const ProfNode *const *)a, *y = *(const ProfNode *const *)b;
    return x->sec < y->sec ? 1 : x->sec > y->sec ? -1 : strcmp(x->name, y->name);
}

static int cmp_kind(const void *a, const void *b)
{
    const ProfKind *x = a, *y = b;
    double sx = x->fwd + x->bwd, sy = y->fwd + y->bwd;
    return sx < sy ? 1 : sx > sy ? -1 : strcmp(x->kind, y->kind);
}

#define PROF_TOP 15

static int cmp_order(const void *a, const void *b)
{
    const ProfNode *x = *(const ProfNode *const *)a, *y = *(const ProfNode *const *)b;
    return (x->order > y->order) - (x->order < y->order);
}

/* every node of the train step in the order it ran: name, op, pass, dtype
 * and ms per step (the cost model's calibration reads these) */
static void prof_calls_json(const Prof *pf, JLog *jl, double steps)
{
    int nn = pf->cap[0], no = 0;
    const ProfNode **order = calloc((size_t)nn + 1, sizeof *order);
    if (!order)
        return;
    for (int i = 0; i < nn; i++)
        if (pf->node[0][i].name && pf->node[0][i].calls)
            order[no++] = &pf->node[0][i];
    qsort(order, (size_t)no, sizeof *order, cmp_order);
    rt_jl_str(jl, "call_timing", pf->any_timed ? "device marks" : "host clock after each node's wait");
    rt_jl_key(jl, "calls");
    fputc('[', jl->f);
    for (int i = 0; i < no; i++) {
        fputs(i ? ",{" : "{", jl->f);
        jl->comma = false;
        rt_jl_str(jl, "name", order[i]->name);
        rt_jl_str(jl, "op", order[i]->op ? order[i]->op : "");
        rt_jl_str(jl, "pass", order[i]->backward ? "backward" : "forward");
        rt_jl_str(jl, "dtype", order[i]->dtype >= 0 ? rt_dtype_name((RtDType)order[i]->dtype) : "");
        rt_jl_num(jl, "ms", order[i]->sec / steps * 1e3);
        rt_jl_close(jl, '}');
    }
    rt_jl_close(jl, ']');
    free(order);
}

void rt_prof_report(const Prof *pf, const RtModel *m, FILE *out, JLog *jl)
{
    (void)m;
    if (pf->steps == 0) {
        fprintf(out, "Profile: no train step was timed (the first step of a run is not "
                "counted)\n");
        return;
    }
    double n = (double)pf->steps, step = pf->step_sec / n;
    double ms = 1e3;
    fprintf(out, "Profile: %lld train steps timed (the first step of the run excluded), %.3f ms "
            "per step\n", (long long)pf->steps, step * ms);
    fprintf(out, "  %-32s %10s %7s\n", "phase", "ms/step", "share");
    for (int k = 0; k < PH_N; k++)
        fprintf(out, "  %-32s %10.3f %6.1f%%\n", phase_names[k], pf->phase[k] / n * ms,
                step > 0 ? 100.0 * pf->phase[k] / pf->step_sec : 0.0);
    /* kinds */
    int nn = pf->cap[0];
    ProfKind *kinds = calloc((size_t)nn + 1, sizeof *kinds);
    const ProfNode **order = calloc((size_t)nn + 1, sizeof *order);
    int nk = 0, no = 0;
    for (int i = 0; kinds && order && i < nn; i++) {
        const ProfNode *pn = &pf->node[0][i];
        if (!pn->name || pn->calls == 0)
            continue;
        order[no++] = pn;
        char kind[64];
        node_kind(pn->name, kind, sizeof kind);
        int k = 0;
        while (k < nk && strcmp(kinds[k].kind, kind) != 0)
            k++;
        if (k == nk)
            snprintf(kinds[nk++].kind, sizeof kinds[0].kind, "%s", kind);
        if (pn->backward)
            kinds[k].bwd += pn->sec;
        else
            kinds[k].fwd += pn->sec;
    }
    if (kinds && order) {
        qsort(kinds, (size_t)nk, sizeof *kinds, cmp_kind);
        qsort(order, (size_t)no, sizeof *order, cmp_node);
        fprintf(out, "  per node kind (train step)          forward   backward      total   share\n");
        for (int k = 0; k < nk; k++)
            fprintf(out, "  %-32s %10.3f %10.3f %10.3f %6.1f%%\n", kinds[k].kind,
                    kinds[k].fwd / n * ms, kinds[k].bwd / n * ms,
                    (kinds[k].fwd + kinds[k].bwd) / n * ms,
                    100.0 * (kinds[k].fwd + kinds[k].bwd) / pf->step_sec);
        fprintf(out, "  top nodes (train step)           pass       ms/step   share\n");
        for (int i = 0; i < no && i < PROF_TOP; i++)
            fprintf(out, "  %-32s %-8s %10.3f %6.1f%%\n", order[i]->name,
                    order[i]->backward ? "backward" : "forward", order[i]->sec / n * ms,
                    100.0 * order[i]->sec / pf->step_sec);
    }
    if (pf->infer_steps > 0)
        fprintf(out, "  inference step (validation): %lld batches, %.3f ms per batch\n",
                (long long)pf->infer_steps, pf->infer_sec / (double)pf->infer_steps * ms);
    fprintf(out, "  per-node times: %s\n", pf->any_timed
            ? "the device's timing marks between calls (CUDA events; the CPU's clock), no wait "
              "per node" : "the host clock after a wait for each node");
    fprintf(out, "  device->host syncs per step: %.2f; in the %lld steps that did not log: %.2f "
            "(the profile's own timing waits not counted)\n", (double)pf->syncs / n,
            (long long)pf->quiet_steps,
            pf->quiet_steps ? (double)pf->quiet_syncs / (double)pf->quiet_steps : 0.0);
    fflush(out);
    if (jl->f) {
        rt_jl_begin(jl, "profile");
        rt_jl_int(jl, "steps", (long long)pf->steps);
        rt_jl_num(jl, "step_ms", step * ms);
        rt_jl_obj(jl, "phases_ms");
        for (int k = 0; k < PH_N; k++)
            rt_jl_num(jl, phase_keys[k], pf->phase[k] / n * ms);
        rt_jl_close(jl, '}');
        if (kinds && order) {
            rt_jl_obj(jl, "kinds_ms");
            for (int k = 0; k < nk; k++)
                rt_jl_num(jl, kinds[k].kind, (kinds[k].fwd + kinds[k].bwd) / n * ms);
            rt_jl_close(jl, '}');
            rt_jl_key(jl, "top_nodes");
            fputc('[', jl->f);
            for (int i = 0; i < no && i < PROF_TOP; i++) {
                fputs(i ? ",{" : "{", jl->f);
                jl->comma = false;
                rt_jl_str(jl, "name", order[i]->name);
                rt_jl_str(jl, "pass", order[i]->backward ? "backward" : "forward");
                rt_jl_num(jl, "ms", order[i]->sec / n * ms);
                rt_jl_close(jl, '}');
            }
            rt_jl_close(jl, ']');
        }
        prof_calls_json(pf, jl, n);
        if (pf->infer_steps > 0)
            rt_jl_num(jl, "infer_batch_ms", pf->infer_sec / (double)pf->infer_steps * ms);
        rt_jl_num(jl, "syncs_per_step", (double)pf->syncs / n);
        rt_jl_int(jl, "quiet_steps", (long long)pf->quiet_steps);
        rt_jl_num(jl, "syncs_per_quiet_step",
                  pf->quiet_steps ? (double)pf->quiet_syncs / (double)pf->quiet_steps : 0.0);
        rt_jl_end(jl);
    }
    free(kinds);
    free(order);
}

/* ---- the after_node hook: --check-numerics, --inject-nan, --profile ------- */

void rt_after_node(RtCtx *ctx, int node, const char *name, const char *op, int buffer)
{
    RtTrainer *t = (RtTrainer *)(void *)((char *)ctx - offsetof(RtTrainer, ctx));
    Hooks *h = t->hook;
    if (!h || !name)
        return;
    Prof *pf = h->pf && h->pf->on ? h->pf : NULL;
    bool marks = pf && pf->timed && !h->nm; /* a numerics check reads back: time it apart */
    if (pf && marks) { /* a mark after the node's work, read when the step's nodes end */
        prof_mark(pf, t->dev, node, name, op, buffer, prof_backward(pf, t->m, name, buffer));
    } else if (pf) { /* the node's work done before it is timed (a no-op on the CPU) */
        pf->timed = false;
        rt_dev_synchronize(t->dev);
        pf->own_syncs++;
    }
    double now = pf && !marks ? rt_now_s() : 0;
    if (pf && !marks)
        prof_node(pf, t->m, pf->step_fn, node, name, op, buffer,
                  prof_backward(pf, t->m, name, buffer), now - pf->last);
    if (h->nm) {
        numerics_node(ctx, t->dev, h->nm, t->m, name, buffer);
        if (pf)
            now = rt_now_s(); /* the check's own time is not the next node's */
    }
    if (pf && !marks)
        pf->last = now;
}
