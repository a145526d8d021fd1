/* settings.h - the training settings: one table of every train-block key and
 * every flag of the training program, with one parser per setting.
 *
 * The same parsers read the train block at compile time (ampc checks every
 * entry and its --optimizer/--loss-scale flags here, so a value the program
 * would refuse is refused with its location in the model file), the
 * program's train_defaults at start-up and its command line, into one typed
 * RtTrainOptions.  settings.c is a leaf: it calls nothing
 * else of the runtime, so the compiler links it without linking the runtime.
 * docs/training.md, "Settings", lists the keys and flags; a unit test holds
 * the table, the train block and that list to one another.
 */
#ifndef AMPC_SETTINGS_H
#define AMPC_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decimal.h"

/* ---- loss scale ------------------------------------------------------------ */

typedef enum {
    RT_LS_DEFAULT, /* not set: dynamic when the model's amp is float16, else off */
    RT_LS_OFF,     /* scale 1 */
    RT_LS_STATIC,  /* a fixed scale */
    RT_LS_DYNAMIC, /* grows after `interval` finite steps, backs off and skips on overflow */
} RtLossScaleMode;

/* loss_scale = dynamic(init=65536, growth=2, backoff=0.5, interval=2000, min=0, max=2^24)
 * | <number> | off.  min 0: no floor. */
typedef struct {
    RtLossScaleMode mode;
    float init;           /* dynamic: the first scale; static: the scale */
    float growth, backoff;
    int32_t interval;
    float min_scale, max_scale;
} RtLossScaleConfig;

/* mode RT_LS_DEFAULT with the dynamic defaults above (MXNet's, with its 2^24 cap). */
void rt_loss_scale_default(RtLossScaleConfig *c);
/* The mode in effect: RT_LS_DEFAULT resolved by the model's amp ("float16":
 * dynamic, else off).  The one rule the program's scaler and ampc's kvstore
 * cost model share. */
RtLossScaleMode rt_loss_scale_mode(const RtLossScaleConfig *c, const char *amp);
const char *rt_loss_scale_mode_name(RtLossScaleMode mode); /* "off", "static", "dynamic" */
/* Parses "off", "none", "dynamic", "dynamic(init=, growth=, backoff=, interval=, min=,
 * max=)" (PyTorch's init_scale, growth_factor, backoff_factor, growth_interval and
 * min_scale/max_scale too) or a positive number (a static scale).  dynamic(...)
 * starts from c's numbers when c is already dynamic (or unset), so a flag can
 * override one number of the train block's; from the defaults otherwise.
 * False with a message on a malformed or out-of-range value (c unchanged). */
bool rt_loss_scale_parse(const char *s, RtLossScaleConfig *c, char *err, size_t errlen);

/* ---- "name(key=value, ...)" calls and initialisers -------------------------- */

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
/* ---- the run's settings ---------------------------------------------------- */

/* sgd: momentum optional; adam: MXNet's Adam (mean and var state) */
typedef enum { RT_OPT_SGD, RT_OPT_NAG, RT_OPT_ADAM } RtOptKind;

/* constant; cosine (CosineScheduler); step (FactorScheduler with one period,
 * MultiFactorScheduler with a list); poly (PolyScheduler) */
typedef enum { RT_LR_CONSTANT, RT_LR_COSINE, RT_LR_STEP, RT_LR_POLY } RtLrKind;
#define RT_LR_MAX_STEPS 16
typedef enum { RT_WARMUP_LINEAR, RT_WARMUP_CONSTANT } RtWarmupMode;

/* The learning-rate schedule (FACTS.md E 4.2; docs/training.md).  base is
 * --lr.  The warmup fields apply to cosine, step and poly alike (MXNet's
 * LRScheduler base class). */
typedef struct {
    RtLrKind kind;
    float final_lr;       /* cosine, poly: the lr at the end */
    float warmup_epochs;  /* warmup length in epochs (when warmup_steps is 0) */
    int64_t warmup_steps; /* warmup length in updates; 0: from warmup_epochs */
    float warmup_begin;   /* the lr at t = 0 of the warmup */
    RtWarmupMode warmup_mode;
    int64_t max_update;   /* cosine, poly: final is reached at this update; <= 0: epochs x steps per epoch */
    float power;          /* poly: MXNet's pwr (2) */
    float factor;         /* step: the multiplier per step (MXNet's default 1) */
    float stop_lr;        /* step with a period: MXNet's stop_factor_lr (1e-8), the floor */
    int64_t period;       /* step: FactorScheduler's step (every `period` updates); 0: a list */
    int nsteps;           /* step: MultiFactorScheduler's list of updates (or epochs) */
    int64_t steps[RT_LR_MAX_STEPS];
    bool steps_in_epochs; /* step: the list is in epochs (x steps per epoch) */
} RtLrSchedule;

/* Run-time settings: built-in defaults, then the model's train_defaults,
 * then the command line. */
typedef struct {
    int64_t max_steps;    /* stop after this many steps (batches) in all; < 0: no limit */
    int epochs;
    int64_t batch_size;
    float lr, momentum, wd;
    float clip_gradient;  /* <= 0: off (MXNet's Python layer passes it only when truthy) */
    RtOptKind optimizer;
    float beta1, beta2, epsilon; /* adam: 0.9, 0.999, 1e-8 (MXNet's) */
    RtLrSchedule sched;
    uint64_t seed;
    const char *data;     /* "synthetic", "digits", "fashion_mnist", "idx(...)", "cifar10(...)" */
    const char *data_dir; /* where digits.csv.gz (and fashion-mnist/, cifar10/) are */
    int augment_pad;      /* training batches: random crop after zero padding by this; 0: off */
    bool augment_mirror;  /* training batches: random horizontal flip */
    const char *json_log; /* JSON Lines log of every event; NULL: none */
    bool profile;         /* time per node and per phase, printed at the end */
    const char *init;     /* the rule for weights whose init is "default" */
    int log_interval;     /* batches between Speedometer lines; 0: none */
    int threads;          /* OpenBLAS threads; 0: OpenBLAS's default */
    int data_threads;     /* recordio's decoding threads; 0: what the machine has beyond threads */
    int64_t data_decode_mb; /* the memory recordio's decoding threads share, MiB; 0: a quarter
                             * of physical memory, at most 4096 */
    RtLossScaleConfig loss_scale;
    const char *save_dir; /* a checkpoint per epoch: <save_dir>/<model>-<epoch+1 %04d>.ckpt
                           * (a run stopped mid-epoch: <model>-step<step %06d>.ckpt) */
    bool overwrite;       /* --save-dir may hold another run's checkpoints */
    const char *resume;   /* a checkpoint to continue from */
    bool eval_only;       /* validate the resumed (or initial) parameters and stop */
    bool check_numerics;  /* name the first node whose output holds inf/NaN */
    int64_t inject_inf_step;  /* testing: step K's loss scale is inf (its gradients overflow); < 0: none */
    char inject_nan_node[128]; /* testing: a NaN written into this node's output ... */
    int64_t inject_nan_step;   /* ... at this step; < 0: none */
    /* several processes under mpirun (a program built with ampc --mpi; docs/kvstore.md,
     * "Running on several processes") */
    float mpi_timeout;        /* seconds a collective may wait for a rank before MPI_Abort */
    float mpi_bucket_mb;      /* MiB of fp32 gradients per MPI_Iallreduce; 0: one bucket */
    int inject_rank;          /* testing: --inject-* act on this rank only; < 0: every rank */
    bool inject_stop_at_start; /* testing: stop (SIGSTOP) just before the ranks' start-up check */
    bool save_all_ranks;      /* testing: ranks > 0 write checkpoints too, into SAVE_DIR/rankR */
    int sim_ranks;            /* testing: one process computes K ranks' micro-batches in turn */
    bool independent_runs;    /* a program without MPI under a launcher of several processes
                               * runs as independent copies (each its own save dir and log) */
    /* a CUDA program's device (ampc --target=cuda, docs/backend-cuda.md); < 0: not given */
    int cudnn_autotune;           /* 1: time cuDNN's candidate plans per shape, 0: heuristic */
    int64_t cudnn_workspace_mb;   /* the most workspace one convolution or GEMM may use */
    int cudnn_fp32;               /* what fp32 convolutions may trade for speed: 0 exact,
                                   * 1 tf32, 2 fast (plan.h's AmpcFp32Mode) */
    int cudnn_nondeterministic;   /* 1: cuDNN engines that are not run-to-run deterministic */
    int cudnn_autotune_max;       /* candidates autotune times per convolution at most */
    int cudnn_runtime_compiled;   /* 1: runtime-compiled cuDNN engines may be chosen */
    const char *cudnn_plan_cache; /* the plan cache file (runtime/cuda/tune.h), or NULL */
    bool cudnn_check;             /* check every convolution and GEMM against cuDNN and
                                   * cuBLASLt's descriptors without a GPU, then exit */
    bool device_lag;        /* testing, no flag: the CPU device's lagging mode (device.h) */
    bool device_capture;    /* testing, no flag: the device's capture mode (device.h) */
    int cuda_graph;         /* 1: the steady step captured once and replayed (device.h's
                             * graph_begin; the CPU device emulates it) */
    const char *dump_state; /* testing: after the first step's backward, write the
                               state (rt_dump_state) here and stop */
    /* MXNet interoperability (runtime/predict.c, docs/mxnet.md) */
    const char *load_params;  /* an MXNet .params file loaded over the initial parameters */
    const char *save_params;  /* the parameters written as an MXNet .params file at the end */
    bool save_params_16bit;   /* ... each in the dtype the steps read (16-bit shadows), not fp32 */
    const char *predict;      /* a float32 .npy of inputs: run the inference step, no training */
    const char *output;       /* where --predict writes the outputs (.npy) */
    const char *prog;     /* for messages: argv[0]'s base name */
} RtTrainOptions;

/* Built-in defaults: epochs 1, batch 32, lr 0.01, momentum 0.9, wd 1e-4,
 * seed 42, data synthetic, data_dir $AMPC_DATA_DIR or rt_default_data_dir(),
 * init xavier, log_interval 50, loss scale by the model's amp. */
void rt_train_options_default(RtTrainOptions *o);

/* build_info.c: what the build compiled in: the data directory (the build
 * tree's build/data, an installed runtime's PREFIX/share/ampc/data, else
 * "./data"), the release version ("0.1.0") and the git revision of the
 * checkout it was built from ("" when none). */
const char *rt_default_data_dir(void);
const char *rt_release_version(void);
const char *rt_git_revision(void);
/* Applies "key=value" defaults (a NULL-ended list, may be NULL) in order,
 * each with its setting's parser.  Compile-time keys (amp, kvstore) are
 * checked and change nothing; an unknown key or a bad value is an error:
 * returns false with a message naming the entry in err. */
bool rt_train_apply_defaults(RtTrainOptions *o, const char *const *kv, char *err, size_t errlen);

/* ---- the table ----------------------------------------------------------------- */

/* Where a setting may be given. */
enum {
    RT_SET_KEY = 1,      /* a train-block key (a "key=value" train default) */
    RT_SET_FLAG = 2,     /* a flag of the training program (--key-name) */
    RT_SET_COMPILER = 4, /* ampc reads it too (amp and kvstore: only ampc) */
};

typedef enum { RT_FROM_TRAIN, RT_FROM_FLAG } RtSettingFrom;

typedef struct {
    const char *key;  /* the train-block key; NULL for a flag only */
    const char *flag; /* the program's long flag; NULL for a key only */
    unsigned where;
    bool has_arg;     /* the flag takes a value */
    const char *want; /* what a value must be, for the generic message "'V' is not WANT" */
    /* Parses v into o.  False on a bad value, with a message in err or err
     * left empty (then the caller says "'v' is not want").  The train-block
     * form of a string may be quoted.  Pointers into v may be kept in o. */
    bool (*parse)(RtTrainOptions *o, const char *v, RtSettingFrom from, char *err, size_t errlen);
} RtSetting;

extern const RtSetting rt_settings[];
extern const int rt_nsettings;

const RtSetting *rt_setting_by_key(const char *key);   /* NULL when not a train-block key */
const RtSetting *rt_setting_by_flag(const char *flag); /* NULL when not a program flag */

/* Applies one value of setting s to o.  False with the whole message in err
 * ("'0' is not an integer >= 1", or the parser's own). */
bool rt_setting_apply(RtTrainOptions *o, const RtSetting *s, const char *v, RtSettingFrom from,
                      char *err, size_t errlen);

/* A data source: "synthetic", "digits", "fashion_mnist", "idx(...)",
 * "cifar10(...)", "recordio(...)" (docs/training.md, Data). */
enum { RT_DS_SYNTHETIC, RT_DS_DIGITS, RT_DS_FASHION, RT_DS_IDX, RT_DS_CIFAR10, RT_DS_RECORDIO };
#define RT_DS_MAX_ARGS 5
#define RT_DS_MAX_OPTS 32
typedef struct {
    int kind;
    int nargs;
    char arg[RT_DS_MAX_ARGS][1024]; /* positional order; keyed ones put in their place */
    bool given[RT_DS_MAX_ARGS];
    /* recordio(TRAIN, VAL, KEY=VALUE, ...): the options after train= and val=,
     * in order (data/recordio.h checks their names and values) */
    int nopts;
    char opt_key[RT_DS_MAX_OPTS][32], opt_val[RT_DS_MAX_OPTS][64];
} RtDataSpec;
bool rt_data_spec_parse(const char *s, RtDataSpec *d, char *err, size_t errlen);

/* The settings together, against the model's data input (one sample:
 * rank dimensions in shape) and its classes: what the program refuses before
 * it starts, once every layer is applied.  NULL when they fit; else the key
 * to blame ("lr", "augment", "data"), with a message in err (without the
 * key, which callers name: the program its flag, ampc the entry): a schedule's
 * warmup_begin above the lr, augmentation of a non-image input or of digits,
 * a named source (digits, fashion_mnist, cifar10) whose images or classes the
 * model cannot take.  ampc runs it before it writes a program. */
const char *rt_settings_check(const RtTrainOptions *o, const char *model, int rank,
                              const int64_t *shape, int64_t classes, char *err, size_t errlen);

/* The number grammar (decimal.h: rt_decimal_len) as whole strings. */
/* A decimal integer in [lo, hi] (the whole string). */
bool rt_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v);
/* A decimal number in [lo, hi] (the whole string; finite). */
bool rt_parse_f64(const char *s, double lo, double hi, double *v);

#endif /* AMPC_SETTINGS_H */
