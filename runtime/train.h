/* train.h - the training driver of an emitted program: the command line,
 * buffers, parameter initialisation, data, the optimizer, loss scaling,
 * checkpoints and the logs.
 *
 * An emitted program defines `const RtModel ampc_model` (program.h); main.c
 * calls rt_train_main(argc, argv, &ampc_model).  Everything below takes the
 * model as an argument, so tests drive it with hand-written models.
 * docs/training.md describes the program a user sees.
 *
 * Sections follow the source files: lossscale.c, train.c (with options.c,
 * trainer.c and lr.c), init.c, optim.c, checkpoint.c, data/synthetic.c,
 * data/digits.c, state.c.  The interfaces between train.c and the files split
 * from it by job are in train_internal.h.
 */
#ifndef AMPC_TRAIN_H
#define AMPC_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "device.h"
#include "kernels/lossscale.h"
#include "program.h"
#include "settings.h" /* the settings' types and parsers */

/* ---- lossscale.c: the loss scaler (its settings: settings.h) -------------- */


/* The loss scaler of a run: PyTorch's update rule (kernels/lossscale.h), the
 * new scale used from the next step. */
typedef struct {
    RtLossScaleMode mode;  /* RT_LS_OFF, RT_LS_STATIC or RT_LS_DYNAMIC */
    AmpcLossScale s;       /* the scale and the count of finite steps since the last change */
    AmpcLossScaleRule rule;
    int64_t skipped;       /* dynamic: overflow steps skipped, in all */
    int64_t nonfinite;     /* off/static: steps whose gradients held inf/NaN (applied: no skip) */
    /* dynamic, a fresh run before its first finite step: its overflows
     * calibrate the initial scale, said in one line, not one per step */
    bool calibrating;
} RtLossScaler;

void rt_loss_scaler_init(RtLossScaler *ls, const RtLossScaleConfig *c, const char *amp);
/* After a step's finite check (dynamic: before any update).  Dynamic: counts
 * a skip on overflow, applies the rule, logs MXNet's "AMP: decreasing loss
 * scale to %f" / "AMP: increasing loss scale to %f" to log when the scale
 * changes, and a warning to warn when it falls below 1.  Returns true when the
 * step must be skipped (dynamic and !finite).  Off/static: counts non-finite
 * steps and returns false (the update has been applied already). */
bool rt_loss_scaler_update(RtLossScaler *ls, bool finite, FILE *log, FILE *warn);
/* Dynamic: true once the scale has underflowed below FLT_MIN (every step
 * overflows at every scale: the forward pass holds inf or NaN). */
bool rt_loss_scaler_exhausted(const RtLossScaler *ls);

/* ---- train.c (the loop), options.c (the command line), trainer.c (buffers),
 * lr.c (the learning rate); the options themselves: settings.h ------------ */

/* What a run ends with (for tests). */
typedef struct {
    int64_t steps;          /* steps (batches) taken in all, skipped ones included */
    int64_t num_update;     /* optimizer updates (skipped steps excluded) */
    int64_t skipped;        /* overflow steps skipped */
    float loss_scale;       /* the scale the next step would use */
    float lr;               /* the lr of the last update */
    int epochs;             /* epochs started */
    double train_accuracy;  /* of the last epoch */
    double val_accuracy, val_cross_entropy, val_top_k; /* the last validation */
} RtTrainResult;

/* Parses the command line (getopt_long; resets optind).  Returns -1 to go on,
 * 0 after --help (usage printed to out), 2 on a bad flag (message to err). */
int rt_train_parse_args(RtTrainOptions *o, int argc, char **argv, FILE *out, FILE *err);

/* Buffers, masters and optimizer state of one model at one batch size, in
 * the memory of one device (device.h): every pointer below except the host
 * staging buffers is a device pointer, read and written only through it. */
typedef struct {
    const RtModel *m;
    int64_t batch;       /* the N buffers are sized for */
    RtDevice *dev;       /* the device the buffers live on (the CPU's) */
    RtCtx ctx;           /* ctx.buf, ctx.master point into the arrays below */
    void *arena;         /* the planned buffers (program.h), or NULL */
    int64_t arena_bytes;
    int64_t own_bytes;   /* the buffers outside the arena (parameters, inputs, unplanned values) */
    int64_t state_bytes; /* fp32 masters and optimizer state */
    size_t ws_start;     /* the workspace sized at start-up (workspace_bytes) */
    float **state;       /* per parameter: momentum or Adam's mean (fp32, numel), or NULL */
    float **state2;      /* per parameter: Adam's var (fp32, numel), or NULL */
    RtDevTensor *grads;  /* every trainable parameter's gradient: the all-reduce bucket */
    int ngrads;
    /* host staging: the data loader fills x_host [batch, sample] and y_host
     * [batch], rt_trainer_load_batch copies them to the data and label
     * buffers; prob_host receives the loss head's output for the metrics */
    float *x_host, *y_host;
    void *prob_host;
    RtDevEvent batch_copied; /* the staging buffers may be refilled once it is done */
    void *hook;          /* the driver's after_node state (--check-numerics, --inject-nan) */
} RtTrainer;

/* Allocates every buffer (fixed + per_sample*batch elements, 64-byte
 * aligned, zeroed; those in_arena at their planned offsets in one arena,
 * bounds checked), the fp32 masters of parameters with has_master and
 * nstate zeroed fp32 state tensors per trainable parameter (0: none; 1:
 * momentum, in state; 2: Adam's mean and var, in state and state2; a bool
 * true means 1).  False with a message on a bad table or out of memory. */
bool rt_trainer_init(RtTrainer *t, const RtModel *m, int64_t batch, int nstate, char *err,
                     size_t errlen);
void rt_trainer_free(RtTrainer *t);
/* Initialises every parameter in fp32 (rt_init_param) and writes the 16-bit
 * shadow of those with a master. */
bool rt_trainer_init_params(RtTrainer *t, const char *weight_init, uint64_t seed, char *err,
                            size_t errlen);
/* Elements of buffer b at the trainer's batch size. */
int64_t rt_buffer_elems(const RtModel *m, int b, int64_t batch);
/* The device's setup step (rt_dev_setup over the trainer's buffers), once
 * before the first step; false with a message. */
bool rt_trainer_setup(RtTrainer *t, char *err, size_t errlen);
/* The host staging buffers may be written (the previous batch's copy to the
 * device has finished). */
void rt_trainer_staging_ready(RtTrainer *t);
/* The staged batch (x_host, y_host) to the data and label buffers. */
void rt_trainer_load_batch(RtTrainer *t);
/* The first n rows of the loss head's output in buffer prob, copied to
 * prob_host. */
const void *rt_trainer_read_rows(const RtTrainer *t, int prob, int64_t n);
/* The bytes of a batch's rows of buffer prob, and those rows queued into
 * dst (host_alloc memory) without waiting: dst holds them once the host
 * has waited for the device (device.h, to_host_async). */
size_t rt_trainer_rows_bytes(const RtTrainer *t, int prob);
void rt_trainer_queue_rows(RtTrainer *t, int prob, void *dst);
/* n elements of dtype dt at device pointer src into host dst as fp32 (a
 * 16-bit one widened). */
void rt_trainer_read_f32(const RtTrainer *t, float *dst, const void *src, size_t n, RtDType dt);
/* The loss scale the last step's loss head multiplied by: the device's (read
 * back, a wait) where its loss head reads it there (CUDA), else ctx's. */
float rt_trainer_step_scale(const RtTrainer *t);
/* The gradients summed over the run's devices (the identity on one). */
bool rt_trainer_reduce_grads(RtTrainer *t, char *err, size_t errlen);
/* Every device takes rank 0's parameters, masters and optimizer state. */
bool rt_trainer_broadcast_params(RtTrainer *t, char *err, size_t errlen);

/* The learning rate of update t (1 on the first update; MXNet's num_update). */
float rt_lr_at(const RtLrSchedule *s, float base_lr, int64_t t, int64_t steps_per_epoch,
               int64_t total_steps);

/* The whole run with parsed options; logs to out, errors to err.  Returns the
 * exit status (0, 1 for a data, checkpoint or run-time error, 2 for bad
 * settings). */
int rt_train_run(const RtModel *m, const RtTrainOptions *o, FILE *out, FILE *err,
                 RtTrainResult *res);
/* main(): defaults, train_defaults, flags, then rt_train_run. */
int rt_train_main(int argc, char **argv, const RtModel *m);

/* ---- init.c: counter-based random numbers and initialisers ---------------- */

/* splitmix64's finaliser; rt_rand_u64 is a pure function of its arguments. */
uint64_t rt_mix64(uint64_t z);
uint64_t rt_rand_u64(uint64_t seed, uint64_t stream, uint64_t i);
double rt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t i); /* [0, 1), 53 bits */
/* N(0, 1) by Box-Muller (the cosine branch) from counters 2i and 2i+1. */
double rt_rand_normal(uint64_t seed, uint64_t stream, uint64_t i);
uint64_t rt_hash_name(const char *s); /* FNV-1a 64: the stream of a named tensor */

/* MXNet's Xavier fans: hw = prod(shape[2:]), fan_in = shape[1]*hw,
 * fan_out = shape[0]*hw.  False for rank < 2. */
bool rt_init_fans(int rank, const int64_t *shape, double *fan_in, double *fan_out);
/* Fills w[numel] from (seed, stream); false (err) for xavier on rank < 2. */
bool rt_init_fill(const RtInit *ini, int rank, const int64_t *shape, int64_t numel, float *w,
                  uint64_t seed, uint64_t stream, char *err, size_t errlen);
/* The initialiser text of a parameter: its init when not "default", else by
 * kind (MXNet's name rules for RT_PK_OTHER): weight -> weight_init, bias, beta,
 * moving_mean -> "zero", gamma, moving_var -> "one". */
const char *rt_init_rule(const RtParam *p, const char *weight_init);
/* Initialises parameter p into w[p->numel] (fp32); stream = rt_hash_name(name).
 * The values are made in the canonical order and then put in p's device
 * layout (paramlayout.h), so a KRSC weight starts from the OIHW one's values. */
bool rt_init_param(const RtParam *p, const char *weight_init, uint64_t seed, float *w, char *err,
                   size_t errlen);

/* ---- optim.c: the fused optimizer over all parameters ------------------- */

typedef struct RtOptConfig {
    RtOptKind kind;
    float lr, momentum, wd;
    float rescale_grad;  /* 1/(batch x loss_scale): unscaling folded in */
    float clip_gradient; /* < 0: off */
    float beta1, beta2, epsilon; /* adam */
    int64_t t;           /* adam: this update's count, 1 on the first (bias correction) */
} RtOptConfig;

/* The parameter's wd_mult as the table gives it (the compiler emits the
 * effective value: MXNet's 0 for names not ending in _weight or _gamma). */
float rt_optim_wd_mult(const RtParam *p);
/* Whether the optimizer keeps a state buffer (momentum != 0, or adam). */
bool rt_optim_has_state(const RtOptConfig *c);
/* State tensors per trainable parameter: 0, 1 (momentum) or 2 (Adam's mean, var). */
int rt_optim_nstate(const RtOptConfig *c);
/* rt_multi_all_finite over every parameter gradient: one read of each. */
bool rt_optim_grads_finite(const RtModel *m, const RtCtx *ctx);
/* The first parameter whose gradient holds inf/NaN, or -1. */
int rt_optim_first_nonfinite(const RtModel *m, const RtCtx *ctx);
/* One update of every parameter with a gradient (grad >= 0), in one pass
 * over each tensor: the gradient read once (and checked for inf/NaN in the
 * same pass), the fp32 master (or fp32 weight) and the momentum state[i]
 * updated, the 16-bit shadow written (optim.h's ampc_mp_*).  lr and wd are
 * multiplied by each parameter's lr_mult and wd_mult.  Returns whether every
 * gradient was finite (the update is applied either way). */
bool rt_optim_step(const RtModel *m, RtCtx *ctx, float *const *state, const RtOptConfig *c);
/* The same with the second state (Adam's var, state2[i]); rt_optim_step is
 * this with state2 NULL (sgd and nag).  Adam skips parameters without both
 * states. */
bool rt_optim_step2(const RtModel *m, const RtCtx *ctx, float *const *state,
                    float *const *state2, const RtOptConfig *c);
/* Bytes moved per parameter element by one update; separate_check adds the
 * read of the gradient by a finite check before the update (dynamic loss
 * scaling; docs/training.md). */
int rt_optim_bytes_per_param(const RtParam *p, RtDType grad_dt, const RtOptConfig *c,
                             bool separate_check);

/* ---- checkpoint.c: checkpoints ----------------------------------------------- */

/* Where a run stands (what a checkpoint holds besides the tensors). */
typedef struct {
    uint64_t seed;
    int64_t batch_size;
    int64_t epoch;          /* the epoch of the next step */
    int64_t batch_in_epoch; /* batches of that epoch already done */
    int64_t step;           /* batches done in all (ctx.step of the next one) */
    int64_t num_update;     /* optimizer updates done (skipped steps excluded) */
    uint32_t optimizer;     /* RtOptKind */
    float momentum;
    RtLossScaler ls;        /* mode, scale, tracker, skipped, nonfinite (the rule is a setting) */
} RtRunState;

typedef struct {
    char *name;
    RtDType dtype;          /* the storage dtype of the model that wrote it */
    bool has_master, trainable;
    int rank;
    int64_t shape[RT_MAX_RANK];
    int64_t numel;
    float *values;          /* fp32: the master, the fp32 parameter or the widened 16-bit one */
    float *state;           /* the momentum or Adam's mean, or NULL */
    float *state2;          /* Adam's var, or NULL */
} RtCkptParam;

typedef struct {
    char *model, *amp;
    RtRunState run;
    int nparams;
    RtCkptParam *params;
} RtCheckpoint;

#define RT_CKPT_MAGIC "AMPCCKPT"
/* Checkpoints are ampc's own format, not MXNet's .params: DIR/MODEL-NNNN.ckpt
 * (the old name, MODEL-NNNN.params, is still read and recognised) */
#define RT_CKPT_EXT ".ckpt"
#define RT_CKPT_VERSION 2 /* 2 adds Adam (optimizer 2, flag 8: var); 1 is still read */
#define RT_CKPT_HEADER_BYTES 32

/* Writes the trainer's tensors and rs to path: a temporary file in the same
 * directory, fsynced, renamed over path, the directory fsynced. */
bool rt_checkpoint_save(const char *path, const RtTrainer *t, const RtRunState *rs, char *err,
                        size_t errlen);
/* --save-dir: made (mkdir -p), then cleared of the temporary files a run
 * killed while saving left (notes to note).  False with a message. */
bool rt_save_dir_prepare(const char *dir, const char *model, FILE *note, const char *prog,
                         char *err, size_t errlen);
/* Where a run resumed from a checkpoint's run state rs starts (at: epoch,
 * batch_in_epoch, step, num_update; the next epoch when rs's batch size
 * differs mid-epoch or its epoch was whole) and its loss scaler's state;
 * notes and warnings to err. */
/* --save-dir: false, with a message, when dir already holds checkpoints
 * (of another run of model, or of another model), which this run's would
 * mix with or overwrite; the caller skips it under --resume or --overwrite. */
bool rt_save_dir_check(const char *dir, const char *model, char *err, size_t errlen);
void rt_checkpoint_resume(const RtRunState *rs, const RtTrainOptions *o, int64_t steps_per_epoch,
                          RtLossScaler *ls, RtRunState *at, FILE *err);
/* The checkpoint at the end of epoch rs.epoch, after rs.batch_in_epoch
 * batches: DIR/MODEL-NNNN.ckpt (NNNN = epoch + 1) after a whole epoch,
 * DIR/MODEL-stepSSSSSS.ckpt (the step) when the run stopped mid-epoch; its
 * path left in *path (the previous one freed). */
bool rt_checkpoint_save_epoch(const char *dir, const RtTrainer *t, RtRunState rs,
                              int64_t steps_per_epoch, char **path, char *err, size_t errlen);
/* Parses a checkpoint from memory (name is the file for messages); every
 * check of the format: magic, version, sizes, both checksums, the payload
 * parsed to its exact end.  rt_checkpoint_free releases it. */
bool rt_checkpoint_parse(const void *buf, size_t len, const char *name, RtCheckpoint *ck,
                         char *err, size_t errlen);
bool rt_checkpoint_read(const char *path, RtCheckpoint *ck, char *err, size_t errlen);
void rt_checkpoint_free(RtCheckpoint *ck);
/* Checks that ck's parameter table matches the trainer's model (count, names,
 * shapes) and loads it: masters and shadows, fp32 parameters, BatchNorm
 * moving statistics, momentum.  Notes (a momentum missing on one side) go to
 * warn.  False with a message naming name otherwise. */
bool rt_checkpoint_apply(const RtCheckpoint *ck, RtTrainer *t, const char *name, FILE *warn,
                         char *err, size_t errlen);

/* ---- data/synthetic.c, data/digits.c: data sets -------------------------- */

typedef enum { RT_SPLIT_TRAIN, RT_SPLIT_VAL } RtSplit;

typedef struct RtDataset {
    const char *name;
    int64_t sample_size;   /* floats per sample */
    int64_t classes;
    int64_t ntrain, nval;
    float *x, *y;          /* digits: every row [ntrain + nval, sample_size], labels; file order
                              (idx, cifar10: x is a byte block, data_ext.h) */
    uint64_t seed;         /* synthetic */
    int64_t image[3];      /* [C, H, W] of an image source (digits [1, 8, 8]); all 0: none */
    /* Copies samples idx[0..n) of a split into x [n, sample_size] and y [n]. */
    void (*fill)(const struct RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                 float *x, float *y);
    /* Optional (NULL: none), for a source that decodes ahead (recordio):
     * src its state; plan gets the training samples of an epoch in the
     * order its batches will be asked for (before the first); error says
     * why a fill failed (NULL: it did not); release frees src. */
    void *src;
    void (*plan)(const struct RtDataset *ds, int64_t epoch, const int64_t *order, int64_t n);
    const char *(*error)(const struct RtDataset *ds);
    void (*release)(struct RtDataset *ds);
    const char *summary; /* a line the run starts with (recordio: records, parts, threads) */
} RtDataset;

void rt_data_free(RtDataset *ds);

/* data/synthetic.c: virtual samples, element e of sample k of a split is
 * U(-1, 1) from (seed, split, k, e), its label uniform in [0, classes).
 * Nothing is stored. */
#define RT_SYNTHETIC_TRAIN 10240
#define RT_SYNTHETIC_VAL 1024
void rt_data_synthetic(RtDataset *ds, int64_t sample_size, int64_t classes, uint64_t seed,
                       int64_t ntrain, int64_t nval);

/* data/digits.c: scikit-learn's digits.csv.gz (1,797 rows of 64 pixels 0..16
 * and a label 0..9; an optional header line).  Pixels are scaled by 1/16.
 * Validation: every sixth data row (0-based rows 5, 11, ...: 299 of 1,797),
 * training: the other rows (1,498), both in file order.  False with a
 * message naming the file (and line) on error. */
#define RT_DIGITS_ROWS 1797
#define RT_DIGITS_VAL_EVERY 6
#define RT_DIGITS_PIXELS 64
#define RT_DIGITS_CLASSES 10
bool rt_data_digits(RtDataset *ds, const char *path, char *err, size_t errlen);

/* ---- state.c: the state of one step, for gradient tests ---------------- */

/* Writes, after a train step and before any update: the model's parameters
 * (fp32: the master where there is one), their gradients (fp32, divided by
 * ctx.loss_scale), the batch and its labels, and the summed cross-entropy.
 * Format (little endian): "AMPCSTAT", u32 version 1, u32 nparams, i64 batch,
 * i64 data values, u64 seed, u64 step, f64 loss; per parameter u32 name
 * length, the name, i64 numel, f32 values[numel], f32 grads[numel]; then
 * f32 data, f32 labels.  tests/e2e/refcheck.c reads it. */
bool rt_dump_state(const RtModel *m, const RtTrainer *t, const char *path, char *err,
                   size_t errlen);

#endif /* AMPC_TRAIN_H */
