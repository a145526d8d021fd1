/* train.c - the training loop (docs/training.md).  Per step: fill the batch,
 * train_step (forward and backward) with ctx.loss_scale, the finite check
 * over every gradient, then, unless a dynamic loss scale skips the step,
 * moving_update (BatchNorm statistics) and the optimizer over every
 * parameter (optim.c); the loss scaler's rule (lossscale.c); the metrics
 * (metrics.c); a Speedometer line every --log-interval batches and, per
 * epoch, the training metrics, the time, a checkpoint (checkpoint.c) and a
 * validation pass through infer_step.  The other jobs of a run are in their
 * own files (train_internal.h): the command line (options.c), buffers
 * (trainer.c), learning-rate schedules (lr.c), the data source (datasrc.c),
 * the logs (log.c) and the per-node hooks (hooks.c).  main() lives in
 * main.c, so tests link the runtime with their own models.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_ext.h"
#include "fileio.h"
#include "settings.h"
#include "train_internal.h"

void openblas_set_num_threads(int num_threads);

/* The validation set through infer_step, batch by batch; the last partial
 * batch is padded by repeating its first sample and only its real rows
 * count.  False when --check-numerics found inf/NaN (reported to err). */
static bool validate(const RtModel *m, RtTrainer *t, const RtDataset *ds, int64_t *idx,
                     Numerics *nm, Prof *pf, Metric *res, FILE *err, const char *prog,
                     const char *when)
{
    Metric mt = {0};
    int64_t b = t->batch;
    float *x = t->ctx.buf[m->data], *y = t->ctx.buf[m->label];
    for (int64_t at = 0; at < ds->nval; at += b) {
        int64_t n = ds->nval - at < b ? ds->nval - at : b;
        for (int64_t j = 0; j < b; j++)
            idx[j] = at + (j < n ? j : 0);
        ds->fill(ds, RT_SPLIT_VAL, idx, b, x, y);
        t->ctx.batch = b;
        nm->train = false;
        nm->found = false;
        if (pf)
            rt_prof_infer(pf, true);
        m->infer_step(&t->ctx);
        if (pf)
            rt_prof_infer(pf, false);
        if (nm->found) {
            char where[160];
            snprintf(where, sizeof where, "validation %s, samples %lld-%lld (inference step)",
                     when, (long long)at, (long long)(at + n - 1));
            rt_numerics_report(err, prog, m, nm, where);
            return false;
        }
        rt_metric_add(&mt, m, &t->ctx, m->prob_infer, n);
    }
    *res = mt;
    return true;
}

/* ---- the run ------------------------------------------------------------------- */

/* Everything a run holds, so that one cleanup frees it on every path. */
typedef struct {
    RtDataset ds;
    RtTrainer t;
    bool have_t;
    RtCheckpoint ck;
    bool have_ck;
    int64_t *perm, *idx;
    char *path;
    float *scratch; /* --augment: one sample */
    Prof *prof;     /* --profile: its node arrays */
    FILE *json;     /* --json-log */
} Run;

static void run_free(Run *r)
{
    if (r->have_t)
        rt_trainer_free(&r->t);
    if (r->have_ck)
        rt_checkpoint_free(&r->ck);
    rt_data_free(&r->ds);
    free(r->perm);
    free(r->idx);
    free(r->path);
    free(r->scratch);
    if (r->prof) {
        free(r->prof->node[0]);
        free(r->prof->node[1]);
    }
    if (r->json)
        fclose(r->json);
}

static bool has_node(const RtModel *m, const char *name)
{
    for (int i = 0; i < m->nbuffers; i++)
        if (m->buffers[i].name && strcmp(m->buffers[i].name, name) == 0)
            return true;
    return false;
}

/* mkdir -p */
static bool ensure_dir(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return true;
        snprintf(err, errlen, "--save-dir %s: not a directory", dir);
        return false;
    }
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(err, errlen, "--save-dir: the path is too long");
        return false;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != 0)
            continue;
        char c = *p;
        *p = 0;
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "--save-dir: cannot create %.400s: %.200s", path,
                     strerror(errno));
            return false;
        }
        *p = c;
        if (c == 0)
            break;
    }
    return true;
}

int rt_train_run(const RtModel *m, const RtTrainOptions *o, FILE *out, FILE *err,
                 RtTrainResult *res)
{
    RtTrainResult r = {0};
    Run run;
    memset(&run, 0, sizeof run);
    char msg[1024];
    int rc = 0;
    rt_inputs_reset(); /* the files this run reads: no output may be one of them */
    if (!m->train_step || !m->infer_step) {
        fprintf(err, "%s: model %s has no %s step (a model needs a loss head to train)\n",
                o->prog, m->name, m->train_step ? "inference" : "train");
        return 2;
    }
    if (o->threads > 0)
        openblas_set_num_threads(o->threads);
    RtInit ini;
    if (!rt_init_parse(o->init, &ini, msg, sizeof msg)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 2;
    }
    /* the settings together and against the model (ampc checked them too) */
    const char *key =
        rt_settings_check(o, m->name, m->data_rank, m->data_shape, m->classes, msg, sizeof msg);
    if (key) {
        fprintf(err, "%s: --%s: %s\n", o->prog, rt_setting_by_key(key)->flag, msg);
        return 2;
    }
    bool augment = o->augment_pad > 0 || o->augment_mirror;
    if (o->inject_nan_node[0] && !has_node(m, o->inject_nan_node)) {
        fprintf(err, "%s: --inject-nan: model %s has no node named '%s'\n", o->prog, m->name,
                o->inject_nan_node);
        return 2;
    }
    if (o->save_dir && !ensure_dir(o->save_dir, msg, sizeof msg)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 2;
    }
    if (o->save_dir) /* what a run killed while saving left (docs/training.md, Writing) */
        rt_checkpoint_clean_stale(o->save_dir, m->name, err, o->prog);
    /* a checkpoint first: its seed decides the data */
    uint64_t seed = o->seed;
    if (o->resume) {
        if (!rt_checkpoint_read(o->resume, &run.ck, msg, sizeof msg)) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            return 1;
        }
        run.have_ck = true;
        seed = run.ck.run.seed;
    }
    int64_t sample = 1;
    for (int i = 0; i < m->data_rank; i++)
        sample *= m->data_shape[i];
    if ((rc = rt_open_data(m, o, seed, sample, &run.ds, err)) != 0 ||
        (rc = rt_check_image_shape(m, &run.ds, o, err)) != 0) {
        run_free(&run);
        return rc;
    }
    RtDataset *ds = &run.ds;
    int64_t b = o->batch_size;
    int64_t steps_per_epoch = ds->ntrain / b;
    if (steps_per_epoch == 0) {
        fprintf(err, "%s: the batch size %lld exceeds the %lld training samples of %s\n", o->prog,
                (long long)b, (long long)ds->ntrain, ds->name);
        run_free(&run);
        return 2;
    }
    RtOptConfig oc = {.kind = o->optimizer, .lr = o->lr, .momentum = o->momentum, .wd = o->wd,
                      .rescale_grad = 1.0f / (float)b, .clip_gradient = o->clip_gradient,
                      .beta1 = o->beta1, .beta2 = o->beta2, .epsilon = o->epsilon};
    run.perm = malloc((size_t)ds->ntrain * sizeof *run.perm);
    run.idx = malloc((size_t)b * sizeof *run.idx);
    if (augment)
        run.scratch = malloc((size_t)sample * sizeof *run.scratch);
    if (!run.perm || !run.idx || (augment && !run.scratch)) {
        fprintf(err, "%s: out of memory\n", o->prog);
        run_free(&run);
        return 1;
    }
    RtTrainer *t = &run.t;
    bool ok = rt_trainer_init(t, m, b, rt_optim_nstate(&oc), msg, sizeof msg);
    run.have_t = ok;
    if (ok) {
        t->ctx.seed = seed;
        ok = rt_trainer_init_params(t, o->init, seed, msg, sizeof msg);
    }
    if (!ok) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        run_free(&run);
        return 1;
    }
    Numerics nm = {.check = o->check_numerics,
                   .nan_node = o->inject_nan_node[0] ? o->inject_nan_node : NULL,
                   .nan_step = o->inject_nan_step};
    Prof prof;
    memset(&prof, 0, sizeof prof);
    Prof *pf = o->profile ? &prof : NULL;
    run.prof = pf;
    Hooks hooks = {.nm = nm.check || nm.nan_node ? &nm : NULL, .pf = pf};
    if (hooks.nm || hooks.pf) {
        t->hook = &hooks;
        t->ctx.after_node = rt_after_node;
        t->ctx.check_node = 1;
    }
    JLog jl = {.t0 = rt_now_s()};
    const char *clash = o->json_log && rt_is_input(o->json_log) ? "--json-log"
                        : o->dump_state && rt_is_input(o->dump_state) ? "--dump-state"
                                                                      : NULL;
    if (clash) {
        fprintf(err, "%s: %s %s: this file is one of the run's inputs; refusing to overwrite "
                "it\n", o->prog, clash, clash[2] == 'j' ? o->json_log : o->dump_state);
        run_free(&run);
        return 2;
    }
    if (o->json_log) {
        /* written as the run goes (a log of a killed run is still read), so
         * not through a temporary file; a device or FIFO works as well */
        jl.f = fopen(o->json_log, "w");
        if (!jl.f) {
            fprintf(err, "%s: --json-log: cannot open %s: %s\n", o->prog, o->json_log,
                    strerror(errno));
            run_free(&run);
            return 1;
        }
        run.json = jl.f;
    }

    /* where the run starts */
    RtLossScaler ls;
    rt_loss_scaler_init(&ls, &o->loss_scale, m->amp);
    int64_t epoch0 = 0, nb0 = 0, step = 0, num_update = 0;
    if (run.have_ck) {
        const RtRunState *rs = &run.ck.run;
        if (!rt_checkpoint_apply(&run.ck, t, o->resume, err, msg, sizeof msg)) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            run_free(&run);
            return 1;
        }
        if (seed != o->seed)
            fprintf(err, "%s: note: resuming with the checkpoint's seed %llu (not %llu)\n",
                    o->prog, (unsigned long long)seed, (unsigned long long)o->seed);
        if (rs->optimizer != (uint32_t)o->optimizer) { /* in range: checkpoint.c checked it */
            static const char *const names[] = {"sgd", "nag", "adam"};
            fprintf(err, "%s: note: the checkpoint was written with optimizer %s; this run uses "
                    "%s\n", o->prog, names[rs->optimizer], names[o->optimizer]);
        }
        epoch0 = rs->epoch;
        nb0 = rs->batch_in_epoch;
        step = rs->step;
        num_update = rs->num_update;
        if (rs->batch_size != b && nb0 > 0) {
            fprintf(err, "%s: warning: the checkpoint was written at batch size %lld, this run "
                    "uses %lld: it starts at the next epoch\n", o->prog,
                    (long long)rs->batch_size, (long long)b);
            epoch0++;
            nb0 = 0;
        }
        if (nb0 >= steps_per_epoch) {
            epoch0++;
            nb0 = 0;
        }
        ls.skipped = rs->ls.skipped;
        ls.nonfinite = rs->ls.nonfinite;
        if (rs->ls.mode == ls.mode && ls.mode == RT_LS_DYNAMIC) {
            ls.s = rs->ls.s;
            if (ls.s.tracker >= ls.rule.interval) { /* a shorter interval than the saved run's */
                fprintf(err, "%s: note: the checkpoint's count of clean steps (%d) reaches this "
                        "run's growth interval (%d): the scale grows after the next clean "
                        "step\n", o->prog, (int)ls.s.tracker, (int)ls.rule.interval);
                ls.s.tracker = ls.rule.interval - 1;
            }
        } else if (rs->ls.mode != ls.mode)
            fprintf(err, "%s: note: the checkpoint's loss scale is %s, this run's %s: the "
                    "scale starts at %g\n", o->prog, rt_loss_scale_mode_name(rs->ls.mode),
                    rt_loss_scale_mode_name(ls.mode), (double)ls.s.scale);
    }
    int64_t nvalues = 0;
    for (int i = 0; i < m->nparams; i++)
        nvalues += m->params[i].grad >= 0 ? m->params[i].numel : 0;
    bool amp_on = (m->amp && strcmp(m->amp, "off") != 0) || ls.mode != RT_LS_OFF;
    RtLogStart start = {.batch = b, .steps_per_epoch = steps_per_epoch, .nvalues = nvalues,
                        .seed = seed, .amp_on = amp_on, .resumed = run.have_ck,
                        .epoch = epoch0, .batch_in_epoch = nb0, .step = step,
                        .num_update = num_update};
    rt_log_start(out, &jl, m, o, ds, &ls, &start);
    if (rt_jl_failed(&jl, o, err)) {
        fflush(out);
        run_free(&run);
        return 1;
    }
    int64_t run_steps = 0; /* steps of this run (the profile skips the first) */

    float *x = t->ctx.buf[m->data], *y = t->ctx.buf[m->label];
    int64_t total = steps_per_epoch * o->epochs;
    bool validated = false;
    Metric val = {0};
    if (o->eval_only)
        goto final;
    for (int64_t epoch = epoch0; epoch < o->epochs; epoch++) {
        if (o->max_steps >= 0 && step >= o->max_steps)
            break;
        r.epochs = (int)epoch + 1;
        rt_shuffle(run.perm, ds->ntrain, seed, epoch);
        Metric global = {0}, local = {0};
        double t0 = rt_now_s(), tic = t0;
        int64_t skipped0 = ls.skipped, nonfinite0 = ls.nonfinite;
        int64_t nbatch = epoch == epoch0 ? nb0 : 0;
        bool first = true;
        for (; nbatch < steps_per_epoch; nbatch++) {
            if (o->max_steps >= 0 && step >= o->max_steps)
                break;
            double ph0 = pf ? rt_now_s() : 0, ph1 = 0;
            if (pf) {
                pf->on = run_steps > 0;
                pf->past_head = false;
            }
            ds->fill(ds, RT_SPLIT_TRAIN, run.perm + nbatch * b, b, x, y);
            if (augment)
                for (int64_t j = 0; j < b; j++)
                    rt_augment(x + j * sample, (int)m->data_shape[0], (int)m->data_shape[1],
                               (int)m->data_shape[2], o->augment_pad, o->augment_mirror, seed,
                               (uint64_t)epoch, run.perm[nbatch * b + j], run.scratch);
            t->ctx.batch = b;
            t->ctx.step = (uint64_t)step;
            t->ctx.loss_scale = step == o->inject_inf_step ? INFINITY : ls.s.scale;
            nm.train = true;
            nm.past_head = false;
            nm.found = false;
            if (pf) {
                ph1 = rt_now_s();
                pf->last = ph1;
            }
            m->train_step(&t->ctx);
            if (pf && pf->on) {
                /* the nodes have added their times to forward and backward;
                 * what follows the last node goes to its pass */
                double now = rt_now_s();
                pf->phase[PH_DATA] += ph1 - ph0;
                pf->phase[pf->past_head ? PH_BACKWARD : PH_FORWARD] += now - pf->last;
                ph1 = now;
            }
            if (o->dump_state) {
                ok = rt_dump_state(m, t, o->dump_state, msg, sizeof msg);
                if (!ok)
                    fprintf(err, "%s: %s\n", o->prog, msg);
                run_free(&run);
                return ok ? 0 : 1;
            }
            if (nm.found && (!nm.backward || ls.mode != RT_LS_DYNAMIC)) {
                char where[160];
                snprintf(where, sizeof where, "step %lld (epoch %lld, batch %lld), %s pass of "
                         "the train step", (long long)step, (long long)epoch, (long long)nbatch,
                         nm.backward ? "backward" : "forward");
                rt_numerics_report(err, o->prog, m, &nm, where);
                rc = 1;
                goto done;
            }
            if (nm.found)
                fprintf(out, "Epoch[%lld] Batch [%lld]\tNumerics: gradient overflow at step %lld, "
                        "first in the output of node '%s' (loss scale %g)\n", (long long)epoch,
                        (long long)nbatch, (long long)step, nm.name, (double)t->ctx.loss_scale);
            rt_metric_add(&global, m, &t->ctx, m->prob_train, b);
            rt_metric_add(&local, m, &t->ctx, m->prob_train, b);
            /* dynamic: every gradient checked before anything changes; else
             * the check is fused into the update (which cannot be skipped) */
            bool finite = true;
            double ph2 = pf ? rt_now_s() : 0;
            if (pf && pf->on)
                pf->phase[PH_OTHER] += ph2 - ph1; /* the metrics */
            if (ls.mode == RT_LS_DYNAMIC)
                finite = rt_optim_grads_finite(m, &t->ctx);
            if (pf && pf->on) {
                double now = rt_now_s();
                pf->phase[PH_CHECK] += now - ph2;
                ph2 = now;
            }
            if (finite || ls.mode != RT_LS_DYNAMIC) {
                if (m->moving_update)
                    m->moving_update(&t->ctx);
                if (pf && pf->on) {
                    double now = rt_now_s();
                    pf->phase[PH_MOVING] += now - ph2;
                    ph2 = now;
                }
                oc.lr = rt_lr_at(&o->sched, o->lr, num_update + 1, steps_per_epoch, total);
                oc.rescale_grad = (float)(1.0 / ((double)b * (double)t->ctx.loss_scale));
                oc.t = num_update + 1;
                bool f = rt_optim_step2(m, &t->ctx, t->state, t->state2, &oc);
                if (pf && pf->on) {
                    double now = rt_now_s();
                    pf->phase[PH_OPTIM] += now - ph2;
                    ph2 = now;
                }
                if (ls.mode != RT_LS_DYNAMIC)
                    finite = f;
                num_update++;
                r.lr = oc.lr;
            }
            if (!finite) {
                int pi = o->check_numerics && !nm.found ? rt_optim_first_nonfinite(m, &t->ctx) : -1;
                if (pi >= 0)
                    fprintf(out, "Epoch[%lld] Batch [%lld]\tNumerics: the gradient of parameter "
                            "'%s' holds inf or NaN\n", (long long)epoch, (long long)nbatch,
                            m->params[pi].name);
                if (ls.mode == RT_LS_DYNAMIC)
                    fprintf(out, "Epoch[%lld] Batch [%lld]\tAMP: gradient overflow at step %lld: "
                            "step skipped (%lld skipped in all)\n", (long long)epoch,
                            (long long)nbatch, (long long)step, (long long)ls.skipped + 1);
                else if (ls.nonfinite < 10)
                    fprintf(err, "%s: warning: step %lld (epoch %lld, batch %lld): the gradients "
                            "hold inf or NaN and the update was applied (loss scale %s %g: "
                            "only dynamic loss scaling skips steps)%s\n", o->prog,
                            (long long)step, (long long)epoch, (long long)nbatch,
                            rt_loss_scale_mode_name(ls.mode), (double)ls.s.scale,
                            ls.nonfinite == 9 ? "; further such steps are counted, not reported"
                                              : "");
                rt_jl_begin(&jl, ls.mode == RT_LS_DYNAMIC ? "skipped_step" : "nonfinite_step");
                rt_jl_int(&jl, "epoch", (long long)epoch);
                rt_jl_int(&jl, "batch", (long long)nbatch);
                rt_jl_int(&jl, "step", (long long)step);
                rt_jl_num(&jl, "loss_scale", t->ctx.loss_scale);
                rt_jl_int(&jl, ls.mode == RT_LS_DYNAMIC ? "skipped_total" : "nonfinite_total",
                       (long long)(ls.mode == RT_LS_DYNAMIC ? ls.skipped : ls.nonfinite) + 1);
                rt_jl_str(&jl, "first_nonfinite_node", nm.found ? nm.name : NULL);
                rt_jl_str(&jl, "first_nonfinite_param", pi >= 0 ? m->params[pi].name : NULL);
                rt_jl_end(&jl);
            }
            float scale_before = ls.s.scale;
            rt_loss_scaler_update(&ls, finite, out, err);
            if (ls.s.scale != scale_before) {
                rt_jl_begin(&jl, "loss_scale");
                rt_jl_int(&jl, "epoch", (long long)epoch);
                rt_jl_int(&jl, "batch", (long long)nbatch);
                rt_jl_int(&jl, "step", (long long)step);
                rt_jl_num(&jl, "old", scale_before);
                rt_jl_num(&jl, "new", ls.s.scale);
                rt_jl_str(&jl, "change", ls.s.scale < scale_before ? "decrease" : "increase");
                rt_jl_end(&jl);
            }
            if (rt_loss_scaler_exhausted(&ls)) {
                fprintf(err, "%s: error: step %lld: the loss scale underflowed to %g (the "
                        "gradients overflow at every scale): the forward pass or the data hold "
                        "inf or NaN (find the node with --check-numerics)\n", o->prog,
                        (long long)step, (double)ls.s.scale);
                rc = 1;
                goto done;
            }
            step++;
            run_steps++;
            /* MXNet's Speedometer: the first batch starts the clock; every
             * log_interval batches a line, then the local metric resets */
            if (first) {
                first = false;
                tic = rt_now_s();
            } else if (o->log_interval > 0 && nbatch % o->log_interval == 0) {
                double now = rt_now_s();
                double dt = now - tic > 0 ? now - tic : 1e-9;
                double speed = (double)o->log_interval * (double)b / dt;
                rt_log_speedometer(out, &jl, m, epoch, nbatch, o->log_interval, step, speed,
                                   &local, r.lr, ls.s.scale);
                local = (Metric){0};
                tic = now;
            }
            if (pf && pf->on) {
                double now = rt_now_s();
                pf->phase[PH_OTHER] += now - ph2;
                pf->step_sec += now - ph0;
                pf->steps++;
            }
            if (rt_jl_failed(&jl, o, err)) {
                rc = 1;
                goto done;
            }
        }
        double cost = rt_now_s() - t0;
        r.train_accuracy = rt_metric_acc(&global);
        char pre[64];
        snprintf(pre, sizeof pre, "Epoch[%lld] Train-", (long long)epoch);
        rt_metric_print_lines(out, m, &global, pre);
        if (amp_on)
            fprintf(out, "Epoch[%lld] Loss-scale=%.9g Skipped-steps=%lld\n", (long long)epoch,
                    (double)ls.s.scale, (long long)(ls.skipped - skipped0));
        if (ls.nonfinite > nonfinite0)
            fprintf(out, "Epoch[%lld] Nonfinite-steps=%lld\n", (long long)epoch,
                    (long long)(ls.nonfinite - nonfinite0));
        fprintf(out, "Epoch[%lld] Time cost=%.3f\n", (long long)epoch, cost);
        fflush(out);
        if (o->save_dir) {
            RtRunState rs = {.seed = seed, .batch_size = b, .epoch = epoch,
                             .batch_in_epoch = nbatch, .step = step, .num_update = num_update,
                             .optimizer = (uint32_t)o->optimizer, .momentum = o->momentum,
                             .ls = ls};
            if (nbatch >= steps_per_epoch) {
                rs.epoch = epoch + 1;
                rs.batch_in_epoch = 0;
            }
            size_t cap = strlen(o->save_dir) + strlen(m->name) + 40;
            free(run.path);
            run.path = malloc(cap);
            if (!run.path) {
                fprintf(err, "%s: out of memory\n", o->prog);
                rc = 1;
                goto done;
            }
            snprintf(run.path, cap, "%s/%s-%04lld.params", o->save_dir, m->name,
                     (long long)epoch + 1);
            if (!rt_checkpoint_save(run.path, t, &rs, msg, sizeof msg)) {
                fprintf(err, "%s: %s\n", o->prog, msg);
                rc = 1;
                goto done;
            }
            fprintf(out, "Saved checkpoint to \"%s\"\n", run.path);
            rt_jl_begin(&jl, "checkpoint");
            rt_jl_int(&jl, "epoch", (long long)epoch);
            rt_jl_str(&jl, "file", run.path);
            rt_jl_int(&jl, "step", (long long)step);
            rt_jl_int(&jl, "num_update", (long long)num_update);
            rt_jl_end(&jl);
        }
        char when[64];
        snprintf(when, sizeof when, "after epoch %lld", (long long)epoch);
        if (!validate(m, t, ds, run.idx, &nm, pf, &val, err, o->prog, when)) {
            rc = 1;
            goto done;
        }
        validated = true;
        snprintf(pre, sizeof pre, "Epoch[%lld] Validation-", (long long)epoch);
        rt_metric_print_lines(out, m, &val, pre);
        fflush(out);
        rt_jl_begin(&jl, "epoch");
        rt_jl_int(&jl, "epoch", (long long)epoch);
        rt_jl_int(&jl, "batches", (long long)(nbatch - (epoch == epoch0 ? nb0 : 0)));
        rt_jl_int(&jl, "step", (long long)step);
        rt_jl_int(&jl, "num_update", (long long)num_update);
        rt_jl_metrics(&jl, "train", m, &global);
        rt_jl_num(&jl, "time_cost", cost);
        rt_jl_num(&jl, "samples_per_sec", cost > 0 ? (double)global.samples / cost : NAN);
        rt_jl_num(&jl, "lr", r.lr);
        rt_jl_num(&jl, "loss_scale", ls.s.scale);
        rt_jl_int(&jl, "skipped_steps", (long long)(ls.skipped - skipped0));
        rt_jl_int(&jl, "nonfinite_steps", (long long)(ls.nonfinite - nonfinite0));
        rt_jl_str(&jl, "checkpoint", o->save_dir ? run.path : NULL);
        rt_jl_metrics(&jl, "validation", m, &val);
        rt_jl_end(&jl);
        if (rt_jl_failed(&jl, o, err)) {
            rc = 1;
            goto done;
        }
    }
final:
    if (!validated) {
        if (!validate(m, t, ds, run.idx, &nm, pf, &val, err, o->prog, "of the parameters")) {
            rc = 1;
            goto done;
        }
        rt_metric_print_lines(out, m, &val, "Validation-");
    }
    fprintf(out, "Final validation-accuracy=%f\n", rt_metric_acc(&val));
    fflush(out);
    rt_jl_begin(&jl, "end");
    rt_jl_int(&jl, "steps", (long long)step);
    rt_jl_int(&jl, "num_update", (long long)num_update);
    rt_jl_int(&jl, "skipped_steps", (long long)ls.skipped);
    rt_jl_num(&jl, "loss_scale", ls.s.scale);
    rt_jl_metrics(&jl, "validation", m, &val);
    rt_jl_end(&jl);
    if (pf)
        rt_prof_report(pf, out, &jl);
    if (rt_jl_failed(&jl, o, err))
        rc = 1;
done:
    r.steps = step;
    r.num_update = num_update;
    r.skipped = ls.skipped;
    r.loss_scale = ls.s.scale;
    r.val_accuracy = rt_metric_acc(&val);
    r.val_cross_entropy = rt_metric_ce(&val);
    r.val_top_k = rt_metric_topk(&val);
    if (res)
        *res = r;
    /* the text log is checked too: a run whose log was lost is not a success */
    errno = 0;
    if ((fflush(out) != 0 || ferror(out)) && rc == 0) {
        fprintf(err, "%s: cannot write the log to standard output%s%s\n", o->prog,
                errno ? ": " : "", errno ? strerror(errno) : "");
        rc = 1;
    }
    run_free(&run);
    return rc;
}
