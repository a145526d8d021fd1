/* driver.h - the compiler layer: the front end as one call (for the driver,
 * the tests and the fuzzer) and the --report printer. */
#ifndef AMPC_DRIVER_H
#define AMPC_DRIVER_H

#include "../codegen/codegen.h"
#include "../passes/gpucost.h"
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
    unsigned fuse;            /* --fuse: the fusions off by default turned on (bit k: rule k) */
    Target target;            /* --target: what the schedule pass plans for */
} PassOptions;

/* The pass pipeline, as a straight list (DESIGN.md 4): the graph passes
 * (pass_pipeline[0 .. pass_count-1], elaborate to schedule, each rewriting
 * the graph), then the stages that plan and lower the scheduled training
 * graph (pass_pipeline[pass_count .. stage_count-1]: memplan, program,
 * kvstore; stages.c), each making an artifact of a Compilation.  --dump
 * takes every name; --dump=all and --dump-dir cover them all. */
typedef struct Compilation Compilation;
typedef struct {
    const char *name;                               /* what --dump takes */
    bool (*run)(Graph **g, const PassOptions *o);   /* a graph pass; NULL for elaborate */
    bool (*stage)(Compilation *c);                  /* a stage; NULL for a graph pass */
} PassDesc;
extern const PassDesc pass_pipeline[];
extern const int pass_count;      /* the graph passes */
extern const int stage_count;     /* every entry: the graph passes, then the stages */
int pass_index(const char *name); /* any entry; -1 if unknown */

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
 * train block (runtime/cpu/optim.c: 2 for Adam, 1 for SGD or NAG with momentum,
 * else 0). */
int train_optimizer_nstate(const Graph *g);
/* Whether a run of g scales the loss dynamically: the train block's
 * loss_scale (after --loss-scale) resolved by g's amp with the program's own
 * rule (rt_loss_scale_mode: unset under float16 is dynamic). */
bool train_loss_scale_dynamic(const Graph *g);
/* The train block's kvstore placement (a quoted or bare name), or NULL. */
const char *train_kvstore(const Graph *g);
/* What the GPU cost model needs of g's train block (passes/gpucost.h): the
 * optimizer and its state tensors, whether the loss scale is dynamic (the
 * default under float16 AMP), the log interval; batch and autotune are the
 * caller's. */
void train_gpu_options(const Graph *g, GcOptions *o);
/* calibrate.c: --calibrate's profile: the train step's measured calls, from
 * the last profile record of a run's --json-log (JSON Lines, other lines
 * skipped), and the batch of its last start event (0 when none).  False
 * after an error through d (file:line: what is wrong). */
typedef struct {
    GcMeasured *calls; /* names malloc'ed */
    int ncalls;
    int64_t batch;
    GcPhases phases; /* its phases_ms (< 0: absent) */
} Profile;
bool profile_read(Diag *d, const char *path, Profile *p);
void profile_free(Profile *p);
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

/* cli.c: the user-facing parts of ampc's command line (main.c has the
 * option table).  cli_print_version: "ampc 0.1.0 (git REV)".
 * cli_bad_option: the error for getopt_long's ':' or '?' (c), naming the
 * argument at fault, an ambiguous abbreviation's candidates, or the option
 * meant (cli_unknown_dump: the same for --dump's pass).  cli_cc_flag:
 * -O0..-O3 and -g appended to flags (for the program's C compiler); -W and
 * a bad -O are refused, reported.
 * cli_command_line: argv without absolute paths (malloc'ed), for a
 * program's --version.  cli_summary: -v's one line. */
struct option;
void cli_print_version(FILE *f);
void cli_bad_option(Diag *d, int c, int argc, char **argv, const struct option *longs);
void cli_unknown_dump(Diag *d, const char *name); /* --dump=NAME, NAME no pass */
bool cli_cc_flag(Diag *d, int c, const char *arg, char *flags, size_t cap);
char *cli_command_line(int argc, char **argv);
void cli_summary(FILE *f, const char *input, const Graph *g, bool trains, const char *output);

/* opref.c: the op reference from the op table (docs/ops.md).  --list-ops:
 * the ops a model calls, one line each; --describe-op=NAME: NAME's section,
 * or with "all" the whole of docs/ops.md (false, reported, for an unknown
 * NAME). */
void opref_list(FILE *f);
bool opref_describe(Diag *d, FILE *f, const char *name);

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

/* Whether s may be a name or string value in MXNet symbol JSON that ampc
 * reads or writes (and so in the ampc source an import makes): valid UTF-8
 * without control characters (U+0000 to U+001F, U+007F to U+009F).  If
 * not, why (cap bytes) says which and where: "control character U+000A at
 * byte 2".  docs/mxnet.md, "Strings". */
bool mx_text_ok(const char *s, char *why, size_t cap);

/* mxnet_export.c: --emit-mxnet-json.  Writes g, a forward graph (after
 * cast-elide, so with --amp the rewritten one), to path as MXNet symbol JSON
 * (atomically, never over an input).  False after an error through d. */
bool mxnet_export(Diag *d, const Graph *g, const char *path);

/* ---- json.c: the JSON writer (deterministic: the caller's key order,
 * shortest round-trip numbers, no locale) ------------------------------- */
#define JW_MAX_DEPTH 32
typedef struct {
    FILE *f;
    int depth;
    int inline_from;          /* > 0: containers from this depth print on one line */
    bool first[JW_MAX_DEPTH]; /* per depth: no element written yet */
} JsonW;
void jw_init(JsonW *w, FILE *f);
/* k is the member's key inside an object, NULL inside an array or at the top. */
void jw_object(JsonW *w, const char *k);
void jw_object_inline(JsonW *w, const char *k);
void jw_end_object(JsonW *w);
void jw_array(JsonW *w, const char *k);
void jw_array_inline(JsonW *w, const char *k);
void jw_end_array(JsonW *w);
void jw_str(JsonW *w, const char *k, const char *s); /* NULL: null */
void jw_int(JsonW *w, const char *k, int64_t v);
void jw_num(JsonW *w, const char *k, double v); /* non-finite: "inf", "-inf", "nan" */
void jw_bool(JsonW *w, const char *k, bool v);
void jw_null(JsonW *w, const char *k);
/* A string literal with JSON's escapes (control bytes as \u00XX; bytes that
 * are not UTF-8 as the code point of their value). */
void jw_string_raw(FILE *f, const char *s);
/* The shortest text that reads back to v ("0.1", "1e-05", "25576264"). */
void json_number_text(double v, char *buf, size_t cap);
/* {"fixed": F, "per_sample": P}: bytes (or elements) linear in the batch N. */
void jw_lin(JsonW *w, const char *k, LinExpr e);
/* Text made in memory (open_memstream), for the printers that take a FILE. */
typedef struct {
    FILE *f;
    char *text; /* mem_close's result: malloc'ed, NUL-terminated, len bytes */
    size_t len;
} MemFile;
FILE *mem_open(MemFile *m);
char *mem_close(MemFile *m);

/* ---- provenance.c: how a document was made (docs/ci.md) --------------- */
#define PROV_MAX_FLAGS 64
#define PROV_FLAG_LEN 256
typedef struct {
    const char *input_kind; /* "model", "ir", "mxnet-json", "program" */
    char sha256[65];        /* of the input files' bytes, in the order read ("" before) */
    int nfiles;
    char flag_text[PROV_MAX_FLAGS][PROV_FLAG_LEN]; /* "--amp=float16", in the order given */
    int nflags;
    Target target, kernels; /* as the flags resolved them */
} Provenance;
/* Records --flag[=arg] when it changes what is compiled (never a path). */
void provenance_note(Provenance *p, const char *flag, const char *arg);
/* The SHA-256 of the first nfiles files of d (the input and its imports). */
void provenance_hash(Provenance *p, const Diag *d, int nfiles);
/* "provenance": {...} as a member of the open object. */
void provenance_json(JsonW *w, const Provenance *p);
/* "# provenance: {...}\n", the line text dumps carry after their banner. */
void provenance_line(FILE *f, const Provenance *p);

/* The JSON documents' schema versions (docs/schema/, one file per kind): a change
 * to a document's fields, or to the naming rule of docs/ir.md (names are
 * the documents' keys), bumps its version; ampc diff reads the previous one. */
#define GRAPH_SCHEMA "ampc-graph/1"
#define MEMPLAN_SCHEMA "ampc-memplan/1"
#define PROGRAM_SCHEMA "ampc-program/1"
#define KVSTORE_SCHEMA "ampc-kvstore/1"
#define GPUCOST_SCHEMA "ampc-gpu-cost/1"
#define REPORT_SCHEMA "ampc-report/1"
#define DIFF_SCHEMA "ampc-diff/1"

/* ---- dump.c: --dump, as text, Graphviz or JSON, to stdout or --dump-dir */
typedef enum { DF_TEXT, DF_DOT, DF_JSON } DumpFormat;
#define DUMP_MAX 32
typedef struct {
    const char *names[DUMP_MAX]; /* --dump=NAME, repeatable ("all": every entry) */
    int nnames;
    const char *dir;   /* --dump-dir: DIR/NN.NAME.{ir,txt,dot,json} */
    DumpFormat format; /* --dump-format */
    bool ids_names;    /* --dump-ids=names */
    const Provenance *prov;
    Diag *d;
} DumpOptions;
bool dump_wanted(const DumpOptions *o, const char *name);
/* NAME given by name (--dump=NAME, not through --dump=all) */
bool dump_named(const DumpOptions *o, const char *name);
/* DIR/NN.NAME.EXT, the file --dump-dir gives entry NAME; false when it does
 * not fit in cap. */
bool dump_path(const DumpOptions *o, const char *name, char *buf, size_t cap);
/* The dump after graph pass `pass` (an index into pass_pipeline), when wanted. */
bool dump_graph(const DumpOptions *o, const Graph *g, int pass);
/* The stages' dumps, when wanted: the training step's memory plan; the
 * lowered program (g: the training graph, whose names the JSON calls carry);
 * the placement (text: the table kvstore_place printed). */
bool dump_memplan(const DumpOptions *o, const Graph *g, const BufferPlan *p);
bool dump_program(const DumpOptions *o, const Program *p, const Graph *g);
bool dump_kvstore(const DumpOptions *o, const Graph *g, const Program *p, const KvResult *r,
                  const char *text);
/* the GPU cost model's calls (text; JSON: ampc-gpu-cost, docs/gpucost.md) */
bool dump_gpucost(const DumpOptions *o, const Graph *g, const GcResult *r);
/* g as an ampc-graph document (docs/schema/graph.schema.json). */
void graph_json(FILE *f, const Graph *g, const char *after, const Provenance *prov);

/* ---- stages.c: the stages after the graph passes ------------------------ */
struct Compilation {
    Graph *g; /* the scheduled training graph, its inference graph in g->infer */
    const DumpOptions *dump;
    bool no_memplan, no_inplace; /* --no-memplan (the program's lowering), --no-inplace */
    Target kernels;              /* whose kernels the program calls */
    const char *machine;         /* --machine, or NULL */
    KvOptions kv;                /* the kvstore flags and --batch-size */
    bool kv_bucket_set;          /* --kv-bucket-mb given (else the pass sizes buckets) */
    bool want_program;           /* lower the program */
    bool want_kv;                /* place the gradients */
    bool want_gpu;               /* price the program on one GPU (the placement does too) */
    const char *gpu_named;       /* "--dump=gpu-cost" or "--calibrate" when named: a
                                  * machine without devices is then an error */
    bool kv_quiet;               /* only --report asks: skip a model the backend cannot lower */
    FILE *kv_explain;            /* --explain=kvstore, or NULL */
    /* what the stages made */
    BufferPlan plan[2]; /* the training step's and the inference step's */
    bool planned, lowered, placed;
    Program prog;
    KvResult kvr;
    KvMachine gpu_machine; /* what the GPU cost model priced on (gpu.m points here) */
    GcResult gpu;
    bool priced;
};
bool stage_memplan(Compilation *c);
bool stage_program(Compilation *c);
bool stage_gpucost(Compilation *c);
bool stage_kvstore(Compilation *c);
/* Runs the stages c asks for, in table order. */
bool stages_run(Compilation *c);
/* The plans to lower with (NULL under --no-memplan or before memplan). */
const CgPlans *compilation_plans(const Compilation *c, CgPlans *out);
void compilation_free(Compilation *c);

/* report.c: --report (text) and --report=json (docs/report.md): the facts
 * of one graph, kept apart from the memory plan of the training step, the
 * placement, the cost model's predictions and the host's part. */
typedef struct {
    const Graph *graph;     /* the graph the graph facts describe */
    const char *after;      /* the pass it comes after */
    int64_t batch;          /* --batch-size (> 0 adds per-batch totals), or 0 */
    const Graph *train;     /* the scheduled training graph (fusions), or NULL */
    const BufferPlan *plan; /* its step's memory plan, or NULL */
    int nstate;             /* fp32 optimizer tensors per trainable parameter */
    const KvPlan *kv;       /* the gradient placement and its predictions, or NULL */
    const KvResult *kvr;
    const GcResult *gpu;     /* the GPU cost model's prediction (text only), or NULL */
    const char *gpu_none;    /* a GPU program on a machine without devices: its name */
    const char *machine_arg; /* --machine as given (the text line), or NULL */
    Target target, kernels;
    const char *target_why; /* why --target=auto chose the CPU (words), or "" */
    const Provenance *prov;
} Report;
void report_text(FILE *f, const Report *r);
void report_json(FILE *f, const Report *r);

/* expect.c: --expect FILE: its assertions on r's report fields and on the
 * dtypes of g's nodes, each failure an error at its line; with update
 * (--expect-update), its exact values rewritten from r and g instead. */
bool expect_run(Diag *d, const char *path, const Report *r, const Graph *g, bool update);

/* diff.c: ampc diff A B [options] (argv[0] is "diff"): the exit status, 0
 * when A and B agree, 1 when they differ, 2 on an error (as diff(1)). */
int diff_main(int argc, char **argv, const char *argv0);

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
