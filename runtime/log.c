/* log.c - what a run writes about itself: the clock; the MXNet-style text
 * log's lines a run starts with, MXNet's Speedometer line and the metric
 * lines (the Speedometer's inline form and the per-epoch Train-/Validation-
 * lines); and --json-log, one JSON object per event per line, with its
 * escaping and its write-error check.  Apart from the loop so that the log
 * formats, which tests compare byte for byte, are defined in one place.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "train_internal.h"

double rt_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "accuracy=..\tcross-entropy=..[\ttop_k_accuracy_5=..]" with a prefix per
 * name ("" for the Speedometer, "Train-"/"Validation-" per line). */
void rt_metric_print_inline(FILE *out, const RtModel *m, const Metric *mt)
{
    fprintf(out, "accuracy=%f\tcross-entropy=%f", rt_metric_acc(mt), rt_metric_ce(mt));
    if (m->classes > TOP_K)
        fprintf(out, "\ttop_k_accuracy_%d=%f", TOP_K, rt_metric_topk(mt));
}

void rt_metric_print_lines(FILE *out, const RtModel *m, const Metric *mt, const char *pre)
{
    fprintf(out, "%saccuracy=%f\n", pre, rt_metric_acc(mt));
    fprintf(out, "%scross-entropy=%f\n", pre, rt_metric_ce(mt));
    if (m->classes > TOP_K)
        fprintf(out, "%stop_k_accuracy_%d=%f\n", pre, TOP_K, rt_metric_topk(mt));
}

/* ---- --json-log: one JSON object per event, per line (JSON Lines) ------------ */

static void jl_raw_str(FILE *f, const char *s)
{
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
            p++;
        } else if (c < 0x20 || c == 0x7f) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\t': fputs("\\t", f); break;
            case '\r': fputs("\\r", f); break;
            default: fprintf(f, "\\u%04x", c);
            }
            p++;
        } else if (c < 0x80) {
            fputc(c, f);
            p++;
        } else {
            /* UTF-8 passes through when well formed; any other byte is U+FFFD */
            int n = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
            bool good = n > 0;
            for (int k = 1; good && k < n; k++)
                good = (p[k] & 0xc0) == 0x80;
            if (good && n == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0)))
                good = false; /* overlong or a surrogate */
            if (good && n == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90)))
                good = false;
            if (good) {
                fwrite(p, 1, (size_t)n, f);
                p += n;
            } else {
                fputs("\\ufffd", f);
                p++;
            }
        }
    }
    fputc('"', f);
}

void rt_jl_key(JLog *j, const char *key)
{
    if (j->comma)
        fputc(',', j->f);
    jl_raw_str(j->f, key);
    fputc(':', j->f);
    j->comma = true;
}

void rt_jl_begin(JLog *j, const char *event)
{
    if (!j->f)
        return;
    fputc('{', j->f);
    j->comma = false;
    rt_jl_key(j, "event");
    jl_raw_str(j->f, event);
    rt_jl_key(j, "time");
    fprintf(j->f, "%.6f", rt_now_s() - j->t0);
}

void rt_jl_str(JLog *j, const char *key, const char *v)
{
    if (!j->f)
        return;
    rt_jl_key(j, key);
    if (v)
        jl_raw_str(j->f, v);
    else
        fputs("null", j->f);
}

/* The shortest decimal that reads back as v: as a double, or (single) as
 * the float it is, so an fp32 learning rate of 0.1 is 0.1, not the double
 * 0.10000000149011612 it widens to. */
static void jl_shortest(FILE *f, double v, bool single)
{
    char buf[32];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (single ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
            break;
    }
    fputs(buf, f);
}

/* a finite number, else null (JSON has no inf or NaN) */
static void jl_number(JLog *j, const char *key, double v, bool single)
{
    if (!j->f)
        return;
    rt_jl_key(j, key);
    if (isfinite(v))
        jl_shortest(j->f, v, single);
    else
        fputs("null", j->f);
}

void rt_jl_num(JLog *j, const char *key, double v) { jl_number(j, key, v, false); }
void rt_jl_f32(JLog *j, const char *key, float v) { jl_number(j, key, v, true); }

void rt_jl_int(JLog *j, const char *key, long long v)
{
    if (!j->f)
        return;
    rt_jl_key(j, key);
    fprintf(j->f, "%lld", v);
}

void rt_jl_bool(JLog *j, const char *key, bool v)
{
    if (!j->f)
        return;
    rt_jl_key(j, key);
    fputs(v ? "true" : "false", j->f);
}

void rt_jl_obj(JLog *j, const char *key)
{
    if (!j->f)
        return;
    rt_jl_key(j, key);
    fputc('{', j->f);
    j->comma = false;
}

void rt_jl_close(JLog *j, char c)
{
    if (!j->f)
        return;
    fputc(c, j->f);
    j->comma = true;
}

void rt_jl_end(JLog *j)
{
    if (!j->f)
        return;
    fputs("}\n", j->f);
    if ((fflush(j->f) != 0 || ferror(j->f)) && !j->werr)
        j->werr = errno ? errno : EIO;
}

/* A failed write of the JSON log is an error: a log cut mid-object must
 * not end in exit status 0.  Says so once; true when it failed. */
bool rt_jl_failed(const JLog *j, const RtTrainOptions *o, FILE *err)
{
    if (!j->werr)
        return false;
    fprintf(err, "%s: --json-log %s: write error: %s\n", o->prog, o->json_log,
            strerror(j->werr));
    return true;
}

/* "key": {"accuracy": .., "cross_entropy": .., "top_k_accuracy_5": ..} */
void rt_jl_metrics(JLog *j, const char *key, const RtModel *m, const Metric *mt)
{
    if (!j->f)
        return;
    rt_jl_obj(j, key);
    /* no samples (no validation set): null, not 0 */
    rt_jl_num(j, "accuracy", mt->samples ? rt_metric_acc(mt) : NAN);
    rt_jl_num(j, "cross_entropy", mt->samples ? rt_metric_ce(mt) : NAN);
    if (m->classes > TOP_K)
        rt_jl_num(j, "top_k_accuracy_5", mt->samples ? rt_metric_topk(mt) : NAN);
    rt_jl_int(j, "samples", (long long)mt->samples);
    rt_jl_close(j, '}');
}

/* The lines a run starts with: the model and its data, the loss scale, the
 * augmentation, where a resumed run starts; then the JSON "start" (and
 * "resume") events. */
void rt_log_start(FILE *out, JLog *jl, const RtModel *m, const RtTrainOptions *o,
                  const RtDataset *ds, const RtLossScaler *ls, const RtLogStart *s)
{
    fprintf(out, "Model %s: %lld trainable values, amp %s; data %s: %lld training and %lld "
            "validation samples; batch %lld, %lld steps per epoch\n", m->name,
            (long long)s->nvalues, m->amp ? m->amp : "off", ds->name, (long long)ds->ntrain,
            (long long)ds->nval, (long long)s->batch, (long long)s->steps_per_epoch);
    if (ds->summary)
        fprintf(out, "Data: %s\n", ds->summary);
    fprintf(out, "Memory: arena %.1f MiB (the planned values of both steps), other buffers %.1f "
            "MiB, fp32 masters and optimizer state %.1f MiB, workspace %.1f MiB\n",
            (double)s->arena / 1048576.0, (double)s->own / 1048576.0,
            (double)s->state / 1048576.0, (double)s->workspace / 1048576.0);
    fprintf(out, "Set-up: %.3f s, of which the device and its workspace (a GPU program's cuDNN "
            "plans) %.3f s\n", s->setup_s, s->device_s);
    if (ls->mode == RT_LS_DYNAMIC)
        fprintf(out, "Loss scale: dynamic, init %.9g, growth %g, backoff %g, interval %d, min %g, "
                "max %.9g\n", (double)o->loss_scale.init, (double)ls->rule.growth,
                (double)ls->rule.backoff, ls->rule.interval, (double)ls->rule.min_scale,
                (double)ls->rule.max_scale);
    else if (s->amp_on)
        fprintf(out, "Loss scale: %s %g\n", rt_loss_scale_mode_name(ls->mode),
                (double)ls->s.scale);
    if (o->augment_pad > 0 || o->augment_mirror) {
        fprintf(out, "Augment: training images");
        if (o->augment_pad)
            fprintf(out, ", zero padding by %d then a random crop", o->augment_pad);
        if (o->augment_mirror)
            fprintf(out, ", a random horizontal mirror");
        fprintf(out, " (validation images unchanged)\n");
    }
    if (s->resumed)
        fprintf(out, "Resumed from \"%s\": epoch %lld, batch %lld, step %lld, update %lld, loss "
                "scale %g\n", o->resume, (long long)s->epoch, (long long)s->batch_in_epoch,
                (long long)s->step, (long long)s->num_update, (double)ls->s.scale);
    fflush(out);
    static const char *const opt_names[] = {"sgd", "nag", "adam"};
    rt_jl_begin(jl, "start");
    rt_jl_str(jl, "model", m->name);
    rt_jl_str(jl, "amp", m->amp ? m->amp : "off");
    rt_jl_str(jl, "data", ds->name);
    rt_jl_int(jl, "train_samples", (long long)ds->ntrain);
    rt_jl_int(jl, "validation_samples", (long long)ds->nval);
    rt_jl_int(jl, "batch_size", (long long)s->batch);
    rt_jl_int(jl, "steps_per_epoch", (long long)s->steps_per_epoch);
    rt_jl_int(jl, "epochs", o->epochs);
    if (o->max_steps >= 0)
        rt_jl_int(jl, "max_steps", (long long)o->max_steps);
    else
        rt_jl_str(jl, "max_steps", NULL);
    rt_jl_int(jl, "trainable_values", (long long)s->nvalues);
    rt_jl_str(jl, "optimizer", opt_names[o->optimizer]);
    rt_jl_f32(jl, "lr", o->lr);
    rt_jl_str(jl, "loss_scale_mode", rt_loss_scale_mode_name(ls->mode));
    rt_jl_f32(jl, "loss_scale", ls->s.scale);
    rt_jl_int(jl, "seed", (long long)s->seed);
    rt_jl_int(jl, "augment_crop", o->augment_pad);
    rt_jl_bool(jl, "augment_mirror", o->augment_mirror);
    rt_jl_num(jl, "setup_ms", s->setup_s * 1e3);
    rt_jl_num(jl, "device_setup_ms", s->device_s * 1e3);
    rt_jl_end(jl);
    if (s->resumed) {
        rt_jl_begin(jl, "resume");
        rt_jl_str(jl, "file", o->resume);
        rt_jl_int(jl, "epoch", (long long)s->epoch);
        rt_jl_int(jl, "batch", (long long)s->batch_in_epoch);
        rt_jl_int(jl, "step", (long long)s->step);
        rt_jl_int(jl, "num_update", (long long)s->num_update);
        rt_jl_f32(jl, "loss_scale", ls->s.scale);
        rt_jl_end(jl);
    }
}

/* MXNet's Speedometer: the line of the batches (nbatch - interval, nbatch]
 * at speed samples per second with the metrics since the last line, and its
 * JSON event. */
void rt_log_speedometer(FILE *out, JLog *jl, const RtModel *m, int64_t epoch, int64_t nbatch,
                        int interval, int64_t step, double speed, const Metric *local, float lr,
                        float loss_scale)
{
    fprintf(out, "Epoch[%lld] Batch [%lld-%lld]\tSpeed: %.2f samples/sec\t",
            (long long)epoch, (long long)(nbatch - interval), (long long)nbatch, speed);
    rt_metric_print_inline(out, m, local);
    fputc('\n', out);
    fflush(out);
    rt_jl_begin(jl, "speedometer");
    rt_jl_int(jl, "epoch", (long long)epoch);
    rt_jl_int(jl, "batch_begin", (long long)(nbatch - interval));
    rt_jl_int(jl, "batch_end", (long long)nbatch);
    rt_jl_int(jl, "step", (long long)step);
    rt_jl_num(jl, "samples_per_sec", speed);
    rt_jl_metrics(jl, "metrics", m, local);
    rt_jl_f32(jl, "lr", lr);
    rt_jl_f32(jl, "loss_scale", loss_scale);
    rt_jl_end(jl);
}

/* ---- the events of the loop ----------------------------------------------------- */

void rt_log_nonfinite(FILE *out, FILE *err, JLog *jl, const RtTrainOptions *o,
                      const RtLossScaler *ls, const RtStepAt *at, float loss_scale,
                      const char *node, const char *param)
{
    long long epoch = (long long)at->epoch, nbatch = (long long)at->batch,
              step = (long long)at->step;
    bool dynamic = ls->mode == RT_LS_DYNAMIC;
    if (param)
        fprintf(out, "Epoch[%lld] Batch [%lld]\tNumerics: the gradient of parameter '%s' holds "
                "inf or NaN\n", epoch, nbatch, param);
    /* a fresh run's first overflows calibrate the initial scale: one line
     * says so (and the scaler one when it is done), not a line per step */
    if (dynamic && ls->calibrating) {
        if (ls->skipped == 0)
            fprintf(out,
                    "Epoch[%lld] Batch [%lld]\tAMP: calibrating the loss scale: the scaled "
                    "gradients overflow at %.9g, so steps are skipped and the scale halves "
                    "until they fit (expected at the start of a run)\n",
                    epoch, nbatch, (double)loss_scale);
    } else if (dynamic)
        fprintf(out, "Epoch[%lld] Batch [%lld]\tAMP: gradient overflow at step %lld: step "
                "skipped (%lld skipped in all)\n", epoch, nbatch, step,
                (long long)ls->skipped + 1);
    else if (ls->nonfinite < 10)
        fprintf(err, "%s: warning: step %lld (epoch %lld, batch %lld): the gradients hold inf "
                "or NaN and the update was applied (loss scale %s %g: only dynamic loss "
                "scaling skips steps)%s\n", o->prog, step, epoch, nbatch,
                rt_loss_scale_mode_name(ls->mode), (double)ls->s.scale,
                ls->nonfinite == 9 ? "; further such steps are counted, not reported" : "");
    rt_jl_begin(jl, dynamic ? "skipped_step" : "nonfinite_step");
    rt_jl_int(jl, "epoch", epoch);
    rt_jl_int(jl, "batch", nbatch);
    rt_jl_int(jl, "step", step);
    rt_jl_f32(jl, "loss_scale", loss_scale);
    rt_jl_int(jl, dynamic ? "skipped_total" : "nonfinite_total",
              (long long)(dynamic ? ls->skipped : ls->nonfinite) + 1);
    rt_jl_str(jl, "first_nonfinite_node", node);
    rt_jl_str(jl, "first_nonfinite_param", param);
    rt_jl_end(jl);
}

void rt_log_scale_change(JLog *jl, const RtStepAt *at, float before, float after)
{
    if (after == before)
        return;
    rt_jl_begin(jl, "loss_scale");
    rt_jl_int(jl, "epoch", (long long)at->epoch);
    rt_jl_int(jl, "batch", (long long)at->batch);
    rt_jl_int(jl, "step", (long long)at->step);
    rt_jl_f32(jl, "old", before);
    rt_jl_f32(jl, "new", after);
    rt_jl_str(jl, "change", after < before ? "decrease" : "increase");
    rt_jl_end(jl);
}

void rt_log_epoch_train(FILE *out, const RtModel *m, const RtEpochLog *e)
{
    char pre[64];
    snprintf(pre, sizeof pre, "Epoch[%lld] Train-", (long long)e->epoch);
    rt_metric_print_lines(out, m, e->train, pre);
    if (e->amp_on)
        fprintf(out, "Epoch[%lld] Loss-scale=%.9g Skipped-steps=%lld\n", (long long)e->epoch,
                (double)e->loss_scale, (long long)e->skipped);
    if (e->nonfinite > 0)
        fprintf(out, "Epoch[%lld] Nonfinite-steps=%lld\n", (long long)e->epoch,
                (long long)e->nonfinite);
    fprintf(out, "Epoch[%lld] Time cost=%.3f\n", (long long)e->epoch, e->cost);
    fflush(out);
}

void rt_log_checkpoint(FILE *out, JLog *jl, const RtEpochLog *e)
{
    fprintf(out, "Saved checkpoint to \"%s\"\n", e->checkpoint);
    rt_jl_begin(jl, "checkpoint");
    rt_jl_int(jl, "epoch", (long long)e->epoch);
    rt_jl_str(jl, "file", e->checkpoint);
    rt_jl_int(jl, "step", (long long)e->step);
    rt_jl_int(jl, "num_update", (long long)e->num_update);
    rt_jl_end(jl);
}

void rt_log_epoch_end(FILE *out, JLog *jl, const RtModel *m, const RtEpochLog *e)
{
    char pre[64];
    snprintf(pre, sizeof pre, "Epoch[%lld] Validation-", (long long)e->epoch);
    if (e->val->samples) /* no validation set (recordio() without VAL.rec): no line */
        rt_metric_print_lines(out, m, e->val, pre);
    fflush(out);
    rt_jl_begin(jl, "epoch");
    rt_jl_int(jl, "epoch", (long long)e->epoch);
    rt_jl_int(jl, "batches", (long long)e->batches);
    rt_jl_int(jl, "step", (long long)e->step);
    rt_jl_int(jl, "num_update", (long long)e->num_update);
    rt_jl_metrics(jl, "train", m, e->train);
    rt_jl_num(jl, "time_cost", e->cost);
    rt_jl_num(jl, "samples_per_sec", e->cost > 0 ? (double)e->train->samples / e->cost : NAN);
    rt_jl_f32(jl, "lr", e->lr);
    rt_jl_f32(jl, "loss_scale", e->loss_scale);
    rt_jl_int(jl, "skipped_steps", (long long)e->skipped);
    rt_jl_int(jl, "nonfinite_steps", (long long)e->nonfinite);
    rt_jl_str(jl, "checkpoint", e->checkpoint);
    rt_jl_metrics(jl, "validation", m, e->val);
    rt_jl_end(jl);
}

void rt_log_end(FILE *out, JLog *jl, const RtModel *m, const RtLossScaler *ls, int64_t step,
                int64_t num_update, const Metric *val)
{
    if (val->samples)
        fprintf(out, "Final validation-accuracy=%f\n", rt_metric_acc(val));
    else /* not an accuracy of 0 */
        fprintf(out, "Final validation: none (the data source has no validation set)\n");
    fflush(out);
    rt_jl_begin(jl, "end");
    rt_jl_int(jl, "steps", (long long)step);
    rt_jl_int(jl, "num_update", (long long)num_update);
    rt_jl_int(jl, "skipped_steps", (long long)ls->skipped);
    rt_jl_f32(jl, "loss_scale", ls->s.scale);
    rt_jl_metrics(jl, "validation", m, val);
    rt_jl_end(jl);
}

int rt_jl_open(JLog *jl, const RtTrainOptions *o, FILE *err)
{
    const char *clash = o->json_log && rt_is_input(o->json_log) ? "--json-log"
                        : o->dump_state && rt_is_input(o->dump_state) ? "--dump-state"
                                                                      : NULL;
    if (clash) {
        fprintf(err, "%s: %s %s: this file is one of the run's inputs; refusing to overwrite "
                "it\n", o->prog, clash, clash[2] == 'j' ? o->json_log : o->dump_state);
        return 2;
    }
    if (!o->json_log)
        return 0;
    /* written as the run goes (a log of a killed run is still read), so not
     * through a temporary file; a device or FIFO works as well (a FIFO
     * nobody reads is refused, not waited for).  Emptied only once it is
     * this run's: under --independent-runs another copy may hold it. */
    int fd = open(o->json_log, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0666);
    int fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    if (fd < 0 || fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        fprintf(err, "%s: --json-log: cannot open %s: %s\n", o->prog, o->json_log,
                errno == ENXIO ? "a FIFO with no reader" : strerror(errno));
        if (fd >= 0)
            close(fd);
        return 1;
    }
    char msg[1024];
    struct stat st;
    if (o->independent_runs &&
        !rt_own_exclusively(o->json_log, "--json-log", &fd, msg, sizeof msg)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        close(fd);
        return 2;
    }
    if ((fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0) ||
        !(jl->f = fdopen(fd, "w"))) {
        fprintf(err, "%s: --json-log: cannot write %s: %s\n", o->prog, o->json_log,
                strerror(errno));
        close(fd);
        return 1;
    }
    return 0;
}
