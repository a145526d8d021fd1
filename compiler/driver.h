/* driver.h - the compiler layer: the front end as one call (for the driver,
 * the tests and the fuzzer) and the --report printer. */
#ifndef AMPC_DRIVER_H
#define AMPC_DRIVER_H

#include "../passes/kvstore.h"
#include "../passes/passes.h"

/* frontend.c: parse `path` (or the buffer text/len named path) with its
 * imports and elaborate it.  NULL on error (reported through d). */
Graph *frontend_elaborate(Diag *d, const char *path, const char *text, size_t len,
                          const ElabOptions *opt);

/* What the passes after elaborate may be told by flags. */
typedef struct {
    const char *amp;          /* --amp=off|float16|bfloat16, or NULL: the train block's */
    const char *amp_fp16, *amp_fp32, *amp_exclude;
    const char *amp_placement; /* --amp-placement=optimal|greedy, or NULL: optimal */
    bool explain;             /* --explain[=NAME] */
    const char *explain_name;
    bool explain_training;    /* the training passes run too: NAME may be a node they make */
    bool predict;             /* no loss head, a program wanted: autodiff_predict */
    bool no_schedule;         /* --no-schedule: keep the order the passes left */
    FILE *out;                /* where --explain prints */
    unsigned no_fuse;         /* --no-fuse: the fusions turned off (bit k: rule k) */
    Target target;            /* --target: what the schedule pass plans for */
} PassOptions;

/* The pass pipeline after elaborate, as a straight list (DESIGN.md 4). */
typedef struct {
    const char *name;                               /* what --dump takes */
    bool (*run)(Graph **g, const PassOptions *o);   /* NULL for elaborate */
} PassDesc;
extern const PassDesc pass_pipeline[];
extern const int pass_count;
int pass_index(const char *name); /* -1 if unknown */

/* Runs elaborate and every pass after it on a buffer, with default options
 * (o may be NULL): the fuzzer's and unit tests' entry point. */
Graph *frontend_compile(Diag *d, const char *path, const char *text, size_t len,
                        const PassOptions *o);

/* The train block's values, checked with the training program's own parsers
 * (runtime/settings.c), in order, as the program applies them: an unknown or
 * repeated key, or a value the program would refuse, is reported at its
 * entry.  frontend_elaborate runs it; main.c again after --from-ir. */
bool train_settings_ok(const Graph *g);
/* The same for the entry of one key (true when there is none). */
bool train_setting_ok(const Graph *g, const char *key);
/* The fp32 optimizer tensors a run keeps per trainable parameter under g's
 * train block (runtime/optim.c: 2 for Adam, 1 for SGD or NAG with momentum,
 * else 0). */
int train_optimizer_nstate(const Graph *g);
/* Whether a run of g scales the loss dynamically: the train block's
 * loss_scale (after --loss-scale) resolved by g's amp with the program's own
 * rule (rt_loss_scale_mode: unset under float16 is dynamic). */
bool train_loss_scale_dynamic(const Graph *g);
/* The train block's kvstore placement (a quoted or bare name), or NULL. */
const char *train_kvstore(const Graph *g);
/* The same for v, given for key by an ampc flag (the message names flag). */
bool train_flag_ok(const Graph *g, const char *key, const ConfigVal *v, const char *flag);
/* The settings together against the model, as the program will check them
 * before it starts (rt_settings_check: a schedule's warmup, augmentation of a
 * non-image input, a named data source the input cannot take), reported at
 * the entry to blame.  main.c runs it before it writes a program. */
bool train_settings_fit(const Graph *g);

/* The pass a dump came after, from its banner "# ampc-ir 1: after PASS"
 * (an index into pass_pipeline), or -1 for a file without one. */
int frontend_dump_after(const SrcFile *f);
/* What `ampc --from-ir` holds a dump after pass `after` to (docs/ir.md):
 * the shape and type rules on every node (ir_check_rules), with AMP
 * resolved from o and the train block before the amp pass, and for a
 * training graph the derivation of its backward graph (autodiff_check).
 * Reports at the nodes; false on any disagreement. */
bool frontend_check_dump(Graph *g, int after, const PassOptions *o);
/* A training graph after pass `after` (autodiff or later) against what the
 * passes derive from its forward part: autodiff_check, or fuse_check after
 * fuse.  Reports at the nodes. */
bool training_graph_check(const Graph *g, int after);

/* Resolves the AMP settings: flags first, then the train block. */
bool amp_options_resolve(const Graph *g, const PassOptions *po, AmpOptions *out);

/* mxnet_json.c: ampc --from-mxnet.  Reads the MXNet symbol JSON file at
 * path (loaded into d's file table), or the buffer text/len named path
 * (fuzzing, tests), and returns the model as ampc source
 * (malloc'ed, *len bytes), which frontend_elaborate then builds; NULL after
 * an error reported through d (malformed JSON, an op or attribute ampc does
 * not have, an input without a shape).  docs/mxnet.md. */
typedef struct {
    const char *const *shapes; /* --input-shape NAME=D0,D1,... (D0: the batch, N) */
    int nshapes;
    const char *loss;          /* --loss=softmax, or NULL */
} MxImportOptions;
char *mxnet_import(Diag *d, const char *path, const char *text, size_t textlen,
                   const MxImportOptions *o, size_t *len);

/* mxnet_export.c: --emit-mxnet-json.  Writes g, a forward graph (after
 * cast-elide, so with --amp the rewritten one), to path as MXNet symbol JSON
 * (atomically, never over an input).  False after an error through d. */
bool mxnet_export(Diag *d, const Graph *g, const char *path);

/* report.c: --report. batch > 0 also gives per-batch totals. */
void report_print(FILE *f, const Graph *g, int64_t batch);
/* report.c: --report's kvstore line (passes/kvstore.h: the plan and what
 * the pass predicted, on the machine named). */
void report_kvstore(FILE *f, const KvPlan *kv, const KvResult *r, const char *machine);

typedef struct {
    int64_t trainable, trainable_tensors; /* parameters the optimizer updates */
    int64_t shadow, shadow_tensors;       /* of which stored fp32 master + 16-bit shadow */
    int casts, user_casts;                /* Cast / amp_cast nodes now in the graph */
    int64_t cast_bytes;                   /* bytes read + written by casts, per sample */
    double low_flops;                     /* forward FLOPs run in fp16/bf16, per sample */
    int64_t aux, aux_tensors;             /* BatchNorm moving statistics */
    int64_t param_bytes;                  /* in their dtypes */
    double flops;                         /* forward, per sample */
    int64_t act_bytes;                    /* outputs of every op, per sample */
    int op_count[OP_COUNT];
} GraphStats;
void graph_stats(const Graph *g, GraphStats *s);

#endif
