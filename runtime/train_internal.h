/* train_internal.h - the interfaces between the files of the training driver
 * (runtime/train.c and the files split from it by job), not part of the
 * runtime's API (train.h): emitted programs never include it.  One section
 * per file; every function here is named rt_* so that none clashes with a
 * symbol of a program that links the runtime.
 */
#ifndef AMPC_RT_TRAIN_INTERNAL_H
#define AMPC_RT_TRAIN_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "checkpoint.h"
#include "data/data_ext.h"
#include "hooks.h"
#include "init.h"
#include "lossscale.h"
#include "lr.h"
#include "settings.h"
#include "train.h"

/* ---- options.c: the command line (--help, flags), rt_train_main ------------- */
/* (its entry points, rt_train_parse_args and rt_train_main, are in train.h) */

/* ---- trainer.c: buffers, masters, optimizer state, the workspace ----------- */
/* (rt_trainer_init, rt_trainer_free, rt_trainer_init_params, rt_buffer_elems:
 * train.h; rt_ctx_ws: program.h) */

/* ---- lr.c: the learning-rate schedules: lr.h --------------------------------- */
/* ---- hooks.c: --check-numerics, --inject-nan, --profile: hooks.h -------------- */

/* ---- metrics.c: accuracy, top-k accuracy, cross-entropy --------------------- */

#define TOP_K 5

typedef struct {
    int64_t correct, topk, ce_count, samples;
    double ce_sum;
} Metric;
/* The first n rows of buffer prob (the loss head's output of the step just
 * run) against the staged labels (t->y_host). */
void rt_metric_add(Metric *mt, RtTrainer *t, int prob, int64_t n);
/* The same over n rows already on the host (p in dt, the labels). */
void rt_metric_add_rows(Metric *mt, const RtModel *m, RtDType dt, const void *p,
                        const float *label, int64_t n);
double rt_metric_acc(const Metric *mt);
double rt_metric_topk(const Metric *mt);
double rt_metric_ce(const Metric *mt);

/* ---- datasrc.c: the data source of --data, checked against the model -------- */

/* Fisher-Yates from (seed, epoch): a pure function of both. */
void rt_shuffle(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch);
/* The data set of o->data (docs/training.md, Data).  Returns 0, 1 (a data
 * error) or 2 (a source the model cannot take). */
int rt_open_data(const RtModel *m, const RtTrainOptions *o, uint64_t seed, int64_t sample,
                 RtDataset *ds, FILE *err);
/* An image source's [C, H, W] against the model's input.  Returns 0, or 2
 * with a message. */
int rt_check_image_shape(const RtModel *m, const RtDataset *ds, const RtTrainOptions *o,
                         FILE *err);

/* ---- log.c: the MXNet-style text log (Speedometer) and --json-log ------------ */

/* The monotonic clock, in seconds (the logs, the Speedometer, --profile). */
double rt_now_s(void);
/* "accuracy=..\tcross-entropy=..[\ttop_k_accuracy_5=..]" with a prefix per
 * name ("" for the Speedometer, "Train-"/"Validation-" per line). */
void rt_metric_print_inline(FILE *out, const RtModel *m, const Metric *mt);
void rt_metric_print_lines(FILE *out, const RtModel *m, const Metric *mt, const char *pre);

/* --json-log: one JSON object per event, per line (JSON Lines); with f NULL
 * every call does nothing. */
typedef struct JLog {
    FILE *f;
    double t0;
    bool comma; /* a member precedes: the next needs a comma */
    int werr;   /* errno of the first failed write (a full disk): the run stops; 0: none */
} JLog;
void rt_jl_key(JLog *j, const char *key);
void rt_jl_begin(JLog *j, const char *event);
void rt_jl_str(JLog *j, const char *key, const char *v);
void rt_jl_num(JLog *j, const char *key, double v); /* a finite number, else null */
void rt_jl_f32(JLog *j, const char *key, float v);  /* the same, shortest as a float */
void rt_jl_int(JLog *j, const char *key, long long v);
void rt_jl_bool(JLog *j, const char *key, bool v);
void rt_jl_obj(JLog *j, const char *key);
void rt_jl_close(JLog *j, char c);
void rt_jl_end(JLog *j);
/* A failed write of the JSON log: says so once; true when it failed. */
bool rt_jl_failed(const JLog *j, const RtTrainOptions *o, FILE *err);
/* "key": {"accuracy": .., "cross_entropy": .., "top_k_accuracy_5": ..} */
void rt_jl_metrics(JLog *j, const char *key, const RtModel *m, const Metric *mt);

/* Where a run starts and what it runs: the first lines of the logs. */
typedef struct {
    int64_t batch, steps_per_epoch, nvalues; /* nvalues: trainable values */
    uint64_t seed;
    bool amp_on;  /* a 16-bit model or a loss scale: the Loss-scale lines */
    bool resumed; /* from o->resume: the "Resumed from" line and event */
    int64_t epoch, batch_in_epoch, step, num_update;
    int64_t arena, own, state, workspace; /* bytes the run holds (the Memory line) */
    double setup_s;  /* from the run's start to its first step (options, data, device, init) */
    double device_s; /* of which opening the device and sizing its workspace: a GPU
                      * program's cuDNN plans are chosen (and autotuned) there */
} RtLogStart;
/* The lines a run starts with: the model and its data, the loss scale, the
 * augmentation, where a resumed run starts; then the JSON "start" (and
 * "resume") events. */
void rt_log_start(FILE *out, JLog *jl, const RtModel *m, const RtTrainOptions *o,
                  const RtDataset *ds, const RtLossScaler *ls, const RtLogStart *s);
/* MXNet's Speedometer line of the batches (nbatch - interval, nbatch] and its
 * JSON event. */
void rt_log_speedometer(FILE *out, JLog *jl, const RtModel *m, int64_t epoch, int64_t nbatch,
                        int interval, int64_t step, double speed, const Metric *local, float lr,
                        float loss_scale);

/* Where a step is: its epoch, batch within the epoch and step count. */
typedef struct {
    int64_t epoch, batch, step;
} RtStepAt;
/* A step whose gradients held inf/NaN: the text lines (the parameter with
 * --check-numerics, the skip or the warning) and the JSON event; node and
 * param name the first non-finite node output and gradient, or NULL. */
void rt_log_nonfinite(FILE *out, FILE *err, JLog *jl, const RtTrainOptions *o,
                      const RtLossScaler *ls, const RtStepAt *at, float loss_scale,
                      const char *node, const char *param);
/* The JSON "loss_scale" event when the scale changed. */
void rt_log_scale_change(JLog *jl, const RtStepAt *at, float before, float after);

/* What an epoch logs at its end. */
typedef struct {
    int64_t epoch, batches, step, num_update;
    const Metric *train, *val;
    double cost;            /* seconds */
    float lr, loss_scale;
    bool amp_on;
    int64_t skipped, nonfinite; /* in this epoch */
    const char *checkpoint; /* the file saved, or NULL */
} RtEpochLog;
/* The Train- lines, the loss scale, non-finite steps and the time. */
void rt_log_epoch_train(FILE *out, const RtModel *m, const RtEpochLog *e);
/* "Saved checkpoint to ..." and its JSON event. */
void rt_log_checkpoint(FILE *out, JLog *jl, const RtEpochLog *e);
/* The Validation- lines and the JSON "epoch" event. */
void rt_log_epoch_end(FILE *out, JLog *jl, const RtModel *m, const RtEpochLog *e);
/* The final line and the JSON "end" event. */
void rt_log_end(FILE *out, JLog *jl, const RtModel *m, const RtLossScaler *ls, int64_t step,
                int64_t num_update, const Metric *val);
/* Refuses a --json-log or --dump-state that names one of the run's inputs
 * (2), then opens the JSON log when there is one (1 when it cannot).  0: go
 * on. */
int rt_jl_open(JLog *jl, const RtTrainOptions *o, FILE *err);
/* train.c, --independent-runs: an exclusive flock(2) of path (a save
 * directory; or *fd, already open) for the run, which another copy of the
 * program cannot take.  False with a message naming flag when one holds it. */
bool rt_own_exclusively(const char *path, const char *flag, int *fd, char *err, size_t errlen);

/* ---- predict.c: --load-params, --save-params, --predict (docs/mxnet.md) -------- */

/* The options together: 0, or 2 with a message (--predict without --output,
 * --load-params with --resume, ...). */
int rt_predict_check_options(const RtTrainOptions *o, FILE *err);
/* An MXNet .params file (mxparams.h) into the trainer's parameters: every
 * key matched to a parameter (NAME, arg:NAME, aux:NAME for a moving
 * statistic), every shape equal, no parameter missing, all checked before
 * anything is written; then the fp32 masters and the steps' values (16-bit
 * ones rounded once).  False with a message naming the file. */
bool rt_params_load(RtTrainer *t, const char *path, char *err, size_t errlen);
/* The parameters as an MXNet .params file (V2 arrays, arg:/aux: keys):
 * fp32 (the masters), or with sixteen each in the dtype the steps read.
 * Atomic, never over one of the run's inputs. */
bool rt_params_save(const RtTrainer *t, const char *path, bool sixteen, char *err, size_t errlen);
/* --predict: the inference step over the .npy's rows (after --resume or
 * --load-params), the outputs [rows, classes] to --output; no data set, no
 * training.  Returns the exit status (0, 1). */
int rt_predict_run(const RtModel *m, const RtTrainOptions *o, const RtDeviceConfig *dc, FILE *out,
                   FILE *err);

#endif
