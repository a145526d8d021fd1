/* train.h - the training driver of an emitted program: the command line,
 * buffers, parameter initialisation, data, the optimizer and the logs.
 *
 * An emitted program defines `const RtModel ampc_model` (program.h); main.c
 * calls rt_train_main(argc, argv, &ampc_model).  Everything below takes the
 * model as an argument, so tests drive it with hand-written models.
 * docs/training.md describes the program a user sees.
 *
 * Sections follow the source files: train.c, init.c, optim.c, data/synthetic.c, data/digits.c.
 */
#ifndef AMPC_TRAIN_H
#define AMPC_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "program.h"

/* ---- train.c: options, buffers, the loop ---------------------------------- */

typedef enum { RT_OPT_SGD, RT_OPT_NAG } RtOptKind; /* sgd: momentum optional */

typedef enum { RT_LR_CONSTANT, RT_LR_COSINE } RtLrKind;

/* The learning-rate schedule (FACTS.md E 4.2).  base is --lr. */
typedef struct {
    RtLrKind kind;
    float final_lr;       /* cosine: the lr at the end */
    float warmup_epochs;  /* cosine: linear warmup length, in epochs */
    float warmup_begin;   /* cosine: the lr at t = 0 of the warmup */
} RtLrSchedule;

/* Run-time settings: built-in defaults, then the model's train_defaults,
 * then the command line. */
typedef struct {
    int64_t max_steps;    /* stop after this many steps in all; < 0: no limit */
    int epochs;
    int64_t batch_size;
    float lr, momentum, wd;
    float clip_gradient;  /* < 0: off */
    RtOptKind optimizer;
    RtLrSchedule sched;
    uint64_t seed;
    const char *data;     /* "synthetic" or "digits" */
    const char *data_dir; /* where digits.csv.gz is */
    const char *init;     /* the rule for weights whose init is "default" */
    int log_interval;     /* batches between Speedometer lines; 0: none */
    int threads;          /* OpenBLAS threads; 0: OpenBLAS's default */
    float loss_scale;     /* static loss scale: multiplies the loss-head gradient (1) */
    const char *dump_state; /* testing: after the first step's backward, write the
                               state (rt_dump_state) here and stop */
    const char *prog;     /* for messages: argv[0]'s base name */
} RtTrainOptions;

/* What a run ends with (for tests). */
typedef struct {
    int64_t steps;          /* optimizer steps taken */
    int epochs;             /* epochs started */
    double train_accuracy;  /* of the last epoch */
    double val_accuracy, val_cross_entropy; /* the last validation */
} RtTrainResult;

/* Built-in defaults: epochs 1, batch 32, lr 0.01, momentum 0.9, wd 1e-4,
 * seed 42, data synthetic, data_dir $AMPC_DATA_DIR, AMPC_DEFAULT_DATA_DIR or
 * "./data", init xavier, log_interval 50. */
void rt_train_options_default(RtTrainOptions *o);
/* Applies "key=value" defaults (a NULL-ended list, may be NULL).  Unknown keys
 * (compile-time settings such as amp) are ignored; a malformed value of a
 * known key is an error: returns false with a message in err. */
bool rt_train_apply_defaults(RtTrainOptions *o, const char *const *kv, char *err, size_t errlen);
/* Parses the command line (getopt_long; resets optind).  Returns -1 to go on,
 * 0 after --help (usage printed to out), 2 on a bad flag (message to err). */
int rt_train_parse_args(RtTrainOptions *o, int argc, char **argv, FILE *out, FILE *err);

/* Buffers, masters and optimizer state of one model at one batch size. */
typedef struct {
    const RtModel *m;
    int64_t batch;       /* the N buffers are sized for */
    RtCtx ctx;           /* ctx.buf, ctx.master point into the arrays below */
    float **state;       /* per parameter: momentum (fp32, numel), or NULL */
} RtTrainer;

/* Allocates every buffer (fixed + per_sample*batch elements, 64-byte
 * aligned, zeroed), the fp32 masters of parameters with has_master and, when
 * with_state, a zeroed fp32 momentum per trainable parameter.  False with a
 * message on a bad table or out of memory. */
bool rt_trainer_init(RtTrainer *t, const RtModel *m, int64_t batch, bool with_state, char *err,
                     size_t errlen);
void rt_trainer_free(RtTrainer *t);
/* Initialises every parameter in fp32 (rt_init_param) and writes the 16-bit
 * shadow of those with a master. */
bool rt_trainer_init_params(RtTrainer *t, const char *weight_init, uint64_t seed, char *err,
                            size_t errlen);

/* The learning rate of update t (1 on the first update). */
float rt_lr_at(const RtLrSchedule *s, float base_lr, int64_t t, int64_t steps_per_epoch,
               int64_t total_steps);

/* The whole run with parsed options; logs to out, errors to err.  Returns the
 * exit status (0, 1 for a data or run-time error, 2 for bad settings). */
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

/* "name(key=value, key=\"str\", ...)" or a bare "name". */
#define RT_CALL_MAX_ARGS 8
typedef struct {
    char name[32];
    int nargs;
    char key[RT_CALL_MAX_ARGS][32];
    char val[RT_CALL_MAX_ARGS][64]; /* quotes removed */
} RtCall;
bool rt_call_parse(const char *s, RtCall *c, char *err, size_t errlen);
/* The value of key as a number; false when absent.  *bad is set when present
 * but not a finite number. */
bool rt_call_num(const RtCall *c, const char *key, double *v, bool *bad);
const char *rt_call_str(const RtCall *c, const char *key); /* NULL when absent */

typedef enum {
    RT_INIT_CONSTANT, /* zero, one, constant(value=) */
    RT_INIT_UNIFORM,  /* U(-scale, scale): uniform(scale=0.07) */
    RT_INIT_NORMAL,   /* N(0, sigma): normal(sigma=0.01) */
    RT_INIT_XAVIER,   /* xavier(rnd_type, factor_type, magnitude), msra_prelu(factor_type, slope) */
} RtInitKind;

typedef enum { RT_FAN_AVG, RT_FAN_IN, RT_FAN_OUT } RtFanType;

typedef struct {
    RtInitKind kind;
    float value;       /* constant */
    float scale;       /* uniform: the bound; normal: sigma */
    bool gaussian;     /* xavier: rnd_type="gaussian" */
    RtFanType factor;  /* xavier */
    float magnitude;   /* xavier: 3 by default; msra_prelu: 2/(1+slope^2) */
} RtInit;

/* Parses an initialiser: zero, one, constant(value=), uniform(scale=),
 * normal(sigma=), xavier(rnd_type=, factor_type=, magnitude=),
 * msra_prelu(factor_type=, slope=) (MXNet's defaults for missing arguments). */
bool rt_init_parse(const char *s, RtInit *ini, char *err, size_t errlen);
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
/* Initialises parameter p into w[p->numel] (fp32); stream = rt_hash_name(name). */
bool rt_init_param(const RtParam *p, const char *weight_init, uint64_t seed, float *w, char *err,
                   size_t errlen);

/* ---- optim.c: the fused optimizer over all parameters ------------------- */

typedef struct {
    RtOptKind kind;
    float lr, momentum, wd;
    float rescale_grad;  /* 1/batch (x 1/loss_scale when unscaling is folded in) */
    float clip_gradient; /* < 0: off */
} RtOptConfig;

/* MXNet's Module rule: wd_mult is 0 for names not ending in _weight or
 * _gamma, else p->wd_mult. */
float rt_optim_wd_mult(const RtParam *p);
/* Whether the optimizer keeps a momentum buffer (momentum != 0). */
bool rt_optim_has_state(const RtOptConfig *c);
/* One update of every parameter with a gradient (grad >= 0), in one pass per
 * tensor: the gradient read once, the fp32 master (or fp32 weight) and the
 * momentum state[i] updated, the 16-bit shadow written (optim.h's ampc_mp_*).
 * lr and wd are multiplied by each parameter's lr_mult and rt_optim_wd_mult. */
void rt_optim_step(const RtModel *m, RtCtx *ctx, float *const *state, const RtOptConfig *c);
/* Bytes moved per parameter element by one update (docs/training.md). */
int rt_optim_bytes_per_param(const RtParam *p, RtDType grad_dt, const RtOptConfig *c);

/* ---- data/synthetic.c, data/digits.c: data sets -------------------------- */

typedef enum { RT_SPLIT_TRAIN, RT_SPLIT_VAL } RtSplit;

typedef struct RtDataset {
    const char *name;
    int64_t sample_size;   /* floats per sample */
    int64_t classes;
    int64_t ntrain, nval;
    float *x, *y;          /* digits: every row [ntrain + nval, sample_size], labels; file order */
    uint64_t seed;         /* synthetic */
    /* Copies samples idx[0..n) of a split into x [n, sample_size] and y [n]. */
    void (*fill)(const struct RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                 float *x, float *y);
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
