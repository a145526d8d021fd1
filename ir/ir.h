/* ir.h - the IR layer: arenas, source files and diagnostics, the op table,
 * and the dataflow graph every pass works on.
 *
 * Everything else in the compiler depends on this header and nothing here
 * depends on the rest.  Sections follow the source files that implement them.
 */
#ifndef AMPC_IR_H
#define AMPC_IR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define AMPC_VERSION "0.1.0"
#define AMPC_MAX_RANK 8

/* ---- arena.c: bump allocation, freed all at once ---------------------- */

typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
    ArenaBlock *head;
    size_t total; /* bytes handed out, for reports */
} Arena;

void arena_init(Arena *a);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t size);            /* zeroed, 16-aligned */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A point to return to: arena_release frees everything allocated after
 * arena_mark (nothing allocated since may be used again). */
typedef struct {
    ArenaBlock *head, *next;
    size_t used, total;
} ArenaMark;
ArenaMark arena_mark(const Arena *a);
void arena_release(Arena *a, ArenaMark m);

/* A growable array whose storage is malloc'ed (it may move), for builders
 * that do not know their final size.  vec_push returns the new element. */
typedef struct {
    void *data;
    int len, cap;
} Vec;
void *vec_push(Vec *v, size_t elem_size);
void vec_free(Vec *v);
#define VEC_AT(v, T, i) (((T *)(v).data)[i])

/* A string -> int map (open addressing), for names and interning. Keys are
 * not copied: they must outlive the map (arena strings).  probes, when set,
 * counts the slots every get and put looks at (elaborate's linearity test). */
typedef struct {
    const char **keys;
    int *vals;
    int cap, len;
    int64_t *probes;
} StrMap;
void strmap_free(StrMap *m);
int *strmap_get(const StrMap *m, const char *key);   /* NULL if absent */
bool strmap_put(StrMap *m, const char *key, int val); /* false if it was there (not replaced) */

/* ---- diag.c: source files, locations, diagnostics ----------------------- */

/* A location in a source file; line and col are 1-based, col counts bytes
 * with tabs expanded to 8-column stops when printed. file indexes Diag.files. */
typedef struct {
    int file;
    int line, col;
} Loc;

typedef struct {
    char *path;   /* as the user named it, or resolved relative to an importer */
    char *text;   /* NUL-terminated contents */
    size_t len;
} SrcFile;

/* The chain of DSL function calls that produced a node: each frame says
 * which function was called and where from.  Frames live in Diag so that any
 * layer can print them. */
typedef struct {
    const char *fn;  /* called function */
    Loc call;        /* where the call was written */
    int parent;      /* enclosing frame, -1 at the top (the model body) */
} CallFrame;

typedef struct Diag {
    FILE *out;     /* stderr, or a memstream in tests */
    int nerr, nwarn;
    int max_errors; /* stop reporting after this many (0 = no limit) */
    Vec files;     /* SrcFile */
    Vec frames;    /* CallFrame */
    Arena arena;   /* frame function names, paths */
    char load_error[128]; /* why the last diag_load_file failed */
} Diag;

void diag_init(Diag *d, FILE *out);
void diag_free(Diag *d);
/* Reads a file into the table; returns its index, or -1 (no diagnostic)
 * with the reason in diag_load_error.  Only a regular file of at most
 * AMPC_MAX_SOURCE_BYTES is read: a device (/dev/zero), a FIFO or a
 * directory is refused without blocking and without reading it. */
#define AMPC_MAX_SOURCE_BYTES ((size_t)256 << 20)
int diag_load_file(Diag *d, const char *path);
/* "No such file or directory", "not a regular file (a FIFO)", ... */
const char *diag_load_error(const Diag *d);
/* Adds an in-memory buffer (fuzzing, tests); the text is copied. */
int diag_add_buffer(Diag *d, const char *path, const char *text, size_t len);
const SrcFile *diag_file(const Diag *d, int file);
int diag_push_frame(Diag *d, const char *fn, Loc call, int parent);

/* file:line:col: error: message, the source line, a caret, then the call
 * chain of `frame` (or nothing if frame < 0). */
void diag_error(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_error_in(Diag *d, Loc loc, int frame, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void diag_verror_in(Diag *d, Loc loc, int frame, const char *fmt, va_list ap);
void diag_warning(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_note(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* ampc: error: message (no location: bad flags, missing files). */
void diag_plain_error(Diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline Loc loc_none(void) { return (Loc){-1, 0, 0}; }

/* Did you mean: the candidate closest to `want` by edit distance, offered
 * one by one to suggest_try, if it is close enough (about a third of the
 * word may differ) to be a likely misspelling; best is NULL otherwise. */
typedef struct {
    const char *best;
    int dist;
} Suggest;
void suggest_try(Suggest *s, const char *want, const char *cand); /* runtime/suggest.c */

/* Internal compiler bugs, as opposed to user errors: print and abort. */
_Noreturn void ampc_die(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define DIE(...) ampc_die(__FILE__, __LINE__, __VA_ARGS__)
#define ASSERT(c) ((c) ? (void)0 : DIE("assertion failed: %s", #c))

/* ---- dtypes and shapes (types.c) ---------------------------------------- */

#define DTYPE_LIST(X)                                   \
    X(DT_UNKNOWN, "?", "unknown", 0, false)              \
    X(DT_F16, "f16", "float16", 2, true)                 \
    X(DT_BF16, "bf16", "bfloat16", 2, true)              \
    X(DT_F32, "f32", "float32", 4, true)                 \
    X(DT_F64, "f64", "float64", 8, true)                 \
    X(DT_I8, "i8", "int8", 1, false)                     \
    X(DT_U8, "u8", "uint8", 1, false)                    \
    X(DT_I32, "i32", "int32", 4, false)                  \
    X(DT_I64, "i64", "int64", 8, false)

typedef enum {
#define X(id, s, l, sz, f) id,
    DTYPE_LIST(X)
#undef X
        DT_COUNT
} DType;

const char *dtype_short(DType t);  /* "f16" */
const char *dtype_long(DType t);   /* "float16" */
int dtype_size(DType t);           /* bytes */
bool dtype_is_float(DType t);
DType dtype_parse(const char *s);  /* either spelling; DT_UNKNOWN if none */
/* "float16, bfloat16, float32, ..." (or "f16, bf16, ..."): for messages */
const char *dtype_names(bool short_names);

/* A dimension is a constant >= 0, or a multiple k >= 1 of the symbolic batch
 * size N, stored as -k.  DIM_N is N itself. */
typedef int64_t Dim;
#define DIM_N ((Dim)-1)
static inline bool dim_is_sym(Dim d) { return d < 0; }

typedef struct {
    int rank;  /* -1: not known yet */
    Dim d[AMPC_MAX_RANK];
} Shape;

static inline Shape shape_unknown(void) { Shape s = {.rank = -1}; return s; }
bool shape_equal(const Shape *a, const Shape *b);
/* Elements per sample: the product with N taken as 1 (a multiple kN counts
 * k). Returns false on overflow. */
bool shape_numel_per_sample(const Shape *s, int64_t *out);
/* The most elements per sample a tensor may have: 2^60, so that its bytes
 * in any dtype (8 at most) fit int64.  Shape inference refuses more. */
#define AMPC_MAX_NUMEL ((int64_t)1 << 60)
/* Whether s (known) has at most AMPC_MAX_NUMEL elements per sample. */
bool shape_size_ok(const Shape *s);
/* Elements with N bound to batch (batch >= 1). */
int64_t shape_numel(const Shape *s, int64_t batch);
/* "[N,3,224,224]", "[]", or "" for unknown; returns buf. */
char *shape_str(const Shape *s, char *buf, size_t cap);
bool shape_has_sym(const Shape *s);

/* ---- ops.def + ops/FAMILY.c: the op table ------------------------------------ */

/* Attribute types.  Tuples hold up to AMPC_MAX_RANK ints. */
typedef enum { AT_INT, AT_FLOAT, AT_BOOL, AT_ENUM, AT_TUPLE, AT_DTYPE, AT_STR } AttrType;

typedef struct {
    AttrType type;
    union {
        int64_t i;    /* AT_INT */
        double f;     /* AT_FLOAT */
        bool b;       /* AT_BOOL */
        int e;        /* AT_ENUM: index into the spec's choices; AT_DTYPE: DType */
        const char *s;/* AT_STR (arena) */
        struct {
            int n;
            int64_t v[AMPC_MAX_RANK];
        } t;          /* AT_TUPLE */
    };
} AttrVal;

/* One attribute of an op: name, type, default, range and meaning. */
typedef struct {
    const char *name;
    AttrType type;
    bool required;
    const char *def;       /* default as DSL text ("1", "(1,1)", "false", "\"relu\""), or NULL */
    double min, max;       /* range for AT_INT/AT_FLOAT/AT_TUPLE elements (inclusive) */
    const char *const *choices; /* AT_ENUM: NULL-terminated */
} AttrSpec;

/* One input slot.  Parameter slots are created implicitly when the caller
 * does not pass them, and named <node>_<suffix>. */
typedef enum {
    SLOT_DATA,   /* an activation */
    SLOT_PARAM,  /* a trainable parameter (weight, bias, gamma, beta) */
    SLOT_AUX,    /* state that is not trained (BatchNorm moving statistics) */
    SLOT_LABEL,  /* a label: never cast, no gradient */
} SlotKind;

typedef struct {
    const char *name;   /* "data", "weight", "gamma", ... (also the named-argument key) */
    SlotKind kind;
    const char *suffix; /* parameter name suffix, or NULL */
    bool keep_fp32;     /* always fp32 whatever the data dtype (BatchNorm's four) */
} SlotSpec;

/* How AMP treats an op (issue: the AMP rewrite; facts from MXNet's lists). */
typedef enum {
    AMP_NONE,    /* not a compute op (inputs, parameters, casts) */
    AMP_F16,     /* run in the target low precision */
    AMP_F32,     /* always fp32 */
    AMP_FOLLOW,  /* run in the dtype that arrives */
    AMP_WIDEST,  /* cast narrower float inputs up to the widest */
} AmpClass;

typedef struct Graph Graph;
typedef struct Node Node;

/* Family hooks.  Shape rules report their own errors through the graph's
 * Diag and return false on error. */
typedef bool (*ShapeFn)(Graph *g, Node *n);
/* Cross-attribute checks and normalisation (stride=() becomes (1,1) for a
 * 2-D kernel), run when a node is created; errors are reported at the node. */
typedef bool (*CheckFn)(Graph *g, Node *n);
/* Forward FLOPs per sample (multiply-adds count 2). */
typedef double (*FlopsFn)(const Graph *g, const Node *n);
/* A gradient rule (grad.c has the builder it uses). */
typedef struct GradCtx GradCtx;
typedef bool (*GradFn)(GradCtx *c, const Node *n, int dy);

typedef enum {
#define OP(id, name, prefix, amp, nslots, slots, nattrs, attrs, check, shape, flops, grad) OP_##id,
#include "ops.def"
#undef OP
    OP_COUNT
} OpKind;

typedef struct {
    const char *name;         /* DSL and dump spelling */
    const char *prefix;       /* generated node names: conv, bn, fc, ... */
    AmpClass amp;
    const SlotSpec *slots;    /* fixed input slots; variadic ops have nslots 0 */
    int nslots;
    const AttrSpec *attrs;
    int nattrs;
    CheckFn check;
    ShapeFn shape;
    FlopsFn flops;
    GradFn grad;
} OpInfo;

extern const OpInfo op_table[OP_COUNT];
OpKind op_lookup(const char *name); /* OP_COUNT if unknown */
/* Whether a model may call op k: not the leaves, AMP's own ops, nor what
 * autodiff and the later passes make (docs/ops.md). */
bool op_user_callable(OpKind k);
/* Whether autodiff has a gradient rule for op k (ops.def's grad column). */
bool op_has_grad(OpKind k);
/* For a name that is not an op but a common spelling of a call of one
 * ("relu", "conv2d", "dense", "maxpool"): that call, e.g.
 * `Activation(x, act_type="relu")`, into buf; false for any other name. */
bool op_call_hint(const char *name, char *buf, size_t cap);
static inline const OpInfo *op_info(OpKind k) { return &op_table[k]; }
int op_attr_index(OpKind k, const char *name); /* -1 if not an attribute of k */
/* "kernel, stride, ..., no_bias" (the attributes of k, in order; "none"),
 * for messages; with inputs, "inputs data, weight, bias and attributes ...". */
const char *op_names_text(Arena *a, OpKind k, bool inputs);
int op_slot_index(OpKind k, const char *name); /* -1 if not a slot of k */
/* Whether a node of op k with these attributes has an input in slot s: not
 * the bias under no_bias=true, nor LeakyReLU's gamma unless act_type=prelu. */
bool op_slot_present(OpKind k, int slot, const AttrVal *attrs);
/* Parses an attribute default into v; used when filling in defaults. */
void op_attr_default(OpKind k, int attr, AttrVal *v);
/* Checks that ops.def and the family schemas agree (unit tests, debug). */
bool op_table_check(void);

/* Attribute indices, in the order of each op's AttrSpec array.  The family
 * files static-assert that their arrays agree. */
enum { CONV_KERNEL, CONV_STRIDE, CONV_PAD, CONV_DILATE, CONV_NUM_FILTER, CONV_NUM_GROUP,
       CONV_NO_BIAS, CONV_NATTRS };
enum { BN_EPS, BN_MOMENTUM, BN_FIX_GAMMA, BN_USE_GLOBAL_STATS, BN_AXIS, BN_NATTRS };
/* the fused ops (ops/fused.c): BatchNorm's attributes, then the name of
 * the node the fused one absorbed */
enum { FUSED_BN_ABSORBED = BN_NATTRS, FUSED_BN_NATTRS };
enum { FUSED_ADD_ABSORBED, FUSED_ADD_NATTRS };
/* BatchNorm + residual add + relu: BatchNorm's attributes, the add's name,
 * then the BatchNorm's (the fused node is named after the relu) */
enum { FUSED_BNADD_ADD = BN_NATTRS, FUSED_BNADD_ABSORBED, FUSED_BNADD_NATTRS };
enum { ACT_TYPE, ACT_NATTRS };
enum { ACT_RELU, ACT_SIGMOID, ACT_TANH, ACT_SOFTRELU, ACT_SOFTSIGN };
enum { LRELU_TYPE, LRELU_SLOPE, LRELU_NATTRS };
enum { LRELU_LEAKY, LRELU_ELU, LRELU_SELU, LRELU_PRELU };
enum { POOL_KERNEL, POOL_POOL_TYPE, POOL_GLOBAL_POOL, POOL_STRIDE, POOL_PAD, POOL_CONVENTION,
       POOL_COUNT_INCLUDE_PAD, POOL_NATTRS };
enum { POOL_MAX, POOL_AVG, POOL_SUM };
enum { POOL_VALID, POOL_FULL };
enum { FC_NUM_HIDDEN, FC_NO_BIAS, FC_FLATTEN, FC_NATTRS };
enum { RESHAPE_SHAPE, RESHAPE_NATTRS };
enum { SCALAR_SCALAR, SCALAR_NATTRS };
enum { CLIP_A_MIN, CLIP_A_MAX, CLIP_NATTRS };
enum { CONCAT_DIM, CONCAT_NATTRS };
enum { DROPOUT_P, DROPOUT_NATTRS };
enum { CAST_DTYPE, CAST_NATTRS };
enum { SMO_GRAD_SCALE, SMO_IGNORE_LABEL, SMO_USE_IGNORE, SMO_NORMALIZATION, SMO_SMOOTH_ALPHA,
       SMO_NATTRS };
enum { SMO_NORM_NULL, SMO_NORM_BATCH, SMO_NORM_VALID };
/* the fused cast ops (ops/fused.c): SoftmaxOutput's attributes, then (the
 * backward one) the dtype its gradient is narrowed to, then the name of the
 * node the fused one absorbed */
enum { FUSED_SMO_ABSORBED = SMO_NATTRS, FUSED_SMO_NATTRS };
enum { FUSED_SMO_BWD_DTYPE = SMO_NATTRS, FUSED_SMO_BWD_ABSORBED, FUSED_SMO_BWD_NATTRS };
enum { SOFTMAX_AXIS, SOFTMAX_NATTRS };
enum { REDUCE_AXIS, REDUCE_KEEPDIMS, REDUCE_NATTRS };
enum { INPUT_ROLE, INPUT_NATTRS };
enum { INPUT_DATA, INPUT_LABEL };
enum { PARAM_KIND, PARAM_INIT, PARAM_WD_MULT, PARAM_LR_MULT, PARAM_MASTER, PARAM_NATTRS };
enum { PK_WEIGHT, PK_BIAS, PK_GAMMA, PK_BETA, PK_MOVING_MEAN, PK_MOVING_VAR, PK_OTHER };
enum { PART_INDEX, PART_NATTRS };
enum { SLICE_AXIS, SLICE_BEGIN, SLICE_END, SLICE_NATTRS };
enum { BCAST_OP, BCAST_NATTRS };
enum { BCAST_ADD, BCAST_MUL };
/* _backward_unary: the unary op differentiated, by its name (ops/elemwise.c) */
enum { BWD_UNARY_OP, BWD_UNARY_NATTRS };
/* _layout (ops/layout.c): the layout it converts to */
enum { LAYOUT_TO, LAYOUT_NATTRS };

/* ---- graph.c: the dataflow graph ---------------------------------------- */

/* Node flags. */
enum {
    NF_EXPLICIT_NAME = 1 << 0, /* name came from name="..." */
    NF_OUTPUT = 1 << 1,        /* a graph output */
    NF_EXPLICIT_WD = 1 << 2,   /* a Param whose wd_mult the user gave */
};

/* How a value's bytes are arranged (docs/codegen.md, "Layouts").  Shapes
 * stay logical (canonical, NCHW) whatever the layout: shape inference,
 * autodiff and the memory plan never look at it.  NHWC applies to 4-D
 * values: data [N,H,W,C], and a convolution's weight and its gradient
 * [K,R,S,C] (KRSC).  Chosen by the schedule pass per target
 * (passes/layout.c); LAYOUT_NCHW (zero) everywhere else. */
typedef enum { LAYOUT_NCHW, LAYOUT_NHWC, LAYOUT_COUNT } Layout;
const char *layout_name(Layout l); /* "nchw", "nhwc" */

/* A node produces exactly one value, so a value id is a node id.  Inputs
 * always have smaller ids than the node (the graph is stored in a
 * topological order; ir_verify checks it). */
struct Node {
    int id;
    OpKind op;
    int nin;
    int *in;          /* value ids */
    AttrVal *attrs;   /* op_info(op)->nattrs of them, defaults filled in */
    const char *name; /* unique in the graph */
    Shape shape;
    DType dtype;
    uint32_t flags;
    Loc loc;          /* where the op was written */
    int frame;        /* call chain (Diag frames), -1 at model level */
    Layout layout;    /* of its value (the schedule pass's; NCHW before it) */
};

/* A train-block entry, kept as written for later issues: a value is a number,
 * string, bool, symbol (bare identifier) or a call with arguments. */
typedef enum { CV_INT, CV_FLOAT, CV_BOOL, CV_STR, CV_SYM, CV_CALL } ConfigKind;
typedef struct ConfigVal ConfigVal;
struct ConfigVal {
    ConfigKind kind;
    int64_t i;
    double f;
    bool b;
    const char *s;     /* CV_STR, CV_SYM, CV_CALL (callee) */
    int nargs;
    const char **argnames; /* NULL entries for positional arguments */
    ConfigVal **args;
};
typedef struct {
    const char *key;
    ConfigVal *val;
    Loc loc;
} ConfigEntry;

/* The machine a program is planned for (ampc --target): its layouts and
 * fusions (the schedule pass) and the kernels it calls (codegen). */
typedef enum { TARGET_CPU, TARGET_CUDA, TARGET_COUNT } Target;
const char *target_name(Target t); /* "cpu", "cuda" */

/* Facts about a graph that passes pass on to later ones and to --report. */
typedef struct {
    int64_t bind_batch;   /* > 0: dumps print N as this number (--batch-size) */
    DType amp;            /* the AMP target (DT_F16, DT_BF16), DT_UNKNOWN when off */
    int casts_inserted;   /* by amp */
    int casts_elided;     /* by cast-elide and train-cast-elide */
    /* by amp (amp_place.c), per sample: [0] bytes converted, [1] bytes follow
     * and widest ops move in fp32, for the optimal and the greedy placement */
    int64_t place_optimal[2], place_greedy[2];
    int place_mode;       /* 0: no placement ran; else 1 + the AmpPlacement used */
    bool predict_only;    /* no loss head: no training step, only g->infer (autodiff_predict) */
    Target target;        /* what the schedule pass planned for (TARGET_CPU before it) */
} GraphInfo;

struct Graph {
    Arena arena;       /* nodes, names, attributes */
    Diag *diag;        /* not owned */
    const char *model; /* model name */
    Node **nodes;      /* by id */
    int nnodes, cap;
    int *outputs;
    int noutputs;
    ConfigEntry *train; /* train block, in source order */
    int ntrain;
    StrMap names;      /* name -> node id */
    GraphInfo info;    /* carried through rewrites (graph_compact) */
    Graph *infer;      /* the inference graph autodiff builds (owned), or NULL */
    const char **why;  /* --explain: per node id, set by the amp pass (arena) */
    /* --explain: the nodes cast-elide removed, and why (arena) */
    struct { const char *name, *why; } *elided;
    int nelided;
};

Graph *graph_new(Diag *d, const char *model);
void graph_free(Graph *g);
/* Appends a node with defaults for every attribute; inputs are copied. */
Node *graph_add(Graph *g, OpKind op, const int *in, int nin, Loc loc, int frame);
/* Registers n's name; returns false (no diagnostic) if taken. */
bool graph_set_name(Graph *g, Node *n, const char *name);
Node *graph_find(const Graph *g, const char *name);
void graph_add_output(Graph *g, int id);
void graph_set_train(Graph *g, const ConfigEntry *e, int n); /* deep-copies into the arena */
ConfigVal *config_copy(Arena *a, const ConfigVal *v);
/* Drops the nodes no output depends on and renumbers the rest in storage
 * order: returns a new graph and frees g. */
Graph *graph_compact(Graph *g);
/* A deep copy (without the inference graph). */
Graph *graph_copy(const Graph *g);
/* The same graph stored in a random topological order (tests of order
 * independence): returns a new graph and frees g. */
Graph *graph_shuffle(Graph *g, uint64_t seed);
/* g's nodes stored in `order` (a topological order of all of them): frees g,
 * returns the new graph, which takes over g's inference graph. */
Graph *graph_reorder(Graph *g, const int *order);
/* Count of users per node (malloc'ed, caller frees). */
int *graph_use_counts(const Graph *g);
/* A node's attribute, checked against the expected type (DIE on a mismatch: a bug). */
int64_t node_int(const Node *n, int attr);
double node_float(const Node *n, int attr);
bool node_bool(const Node *n, int attr);
int node_enum(const Node *n, int attr);
const AttrVal *node_tuple(const Node *n, int attr);
DType node_dtype_attr(const Node *n, int attr);
/* Error at a node: its location and call chain. */
void node_error(const Graph *g, const Node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool node_is_param(const Node *n);   /* OP_Param */
int node_param_kind(const Node *n);  /* PK_* for an OP_Param node */

/* ---- layout.c: the layout rules of each op (docs/codegen.md, "Layouts") ---- */

typedef enum {
    LC_CANONICAL, /* reads and writes NCHW (the default) */
    LC_FOLLOW,    /* the slots `slots` names and its value share one layout */
    LC_ANCHOR,    /* follows, and starts NHWC: a 2-D convolution, its backward */
    LC_VIEW,      /* part, grad_of, param_master: another value's bytes */
    LC_CONVERT,   /* _layout */
    LC_LEAF,      /* Param: the layout its readers agree on */
} LayoutClass;
typedef struct {
    LayoutClass cls;
    unsigned slots; /* bit k: input slot k is read in the node's layout */
} LayoutRule;
const LayoutRule *layout_rule(OpKind k);
/* Whether NCHW and NHWC put s's elements at the same offsets: one channel,
 * or one spatial element (a global pooling's [N,C,1,1], a 1x1 filter's
 * [K,C,1,1]).  Such a value is read in either layout without a conversion. */
bool layout_same_bytes(const Shape *s);
/* Whether n (follow or anchor) may compute in NHWC: a 4-D value and data,
 * BatchNorm over axis 1. */
bool layout_op_allows(const Graph *g, const Node *n);
/* The layout n reads input slot j in, from the layouts n and its inputs
 * have; LAYOUT_COUNT where it reads none (a view's source). */
Layout layout_slot_wants(const Graph *g, const Node *n, int j);
/* n's layout against the rules (before the schedule pass, scheduled =
 * false, every layout is NCHW): reported at n through g's Diag. */
bool layout_check(const Graph *g, const Node *n, bool scheduled);

/* ---- grad.c: what gradient rules build with (the autodiff pass owns it) ---- */

/* wants[v]: whether value v (a node of g when the context was made) needs a
 * gradient.  Gradients of a value are summed as they arrive. */
GradCtx *grad_ctx_new(Graph *g, const bool *wants);
void grad_ctx_free(GradCtx *c);
Graph *grad_graph(GradCtx *c);
bool grad_wants(const GradCtx *c, int value);
/* The summed gradient of value so far, or -1. */
int grad_get(const GradCtx *c, int value);
/* Adds gradient g to value's (cast to value's dtype when it differs). */
void grad_add(GradCtx *c, int value, int g);
/* Appends an op; its attributes are copied from `like` (same schema) when
 * given; its shape rule runs.  Returns the node id, or -1 on error. */
int grad_emit(GradCtx *c, OpKind op, const int *in, int nin, const Node *like);
/* The same with explicit attributes (op's schema), located at `where`. */
int grad_emit_attrs(GradCtx *c, OpKind op, const int *in, int nin, const AttrVal *attrs,
                    const Node *where);
/* Result `index` of a node with several (part(%node) {index}). */
int grad_part(GradCtx *c, int node, int index);
/* The shape rule of part (ops/grad.c), for the builder. */
bool part_shape_of(Graph *g, Node *n);
/* x op scalar, e.g. _mul_scalar(dy, -1). */
int grad_scalar(GradCtx *c, OpKind op, int x, double s);
/* A cast of value v to dtype t (amp_cast), or v itself. */
int grad_cast(GradCtx *c, int v, DType t);

/* ---- print.c, read.c, dot.c, verify.c ----------------------------------- */

/* Canonical order: depth-first from the outputs, inputs in argument order,
 * then any node no output reaches, in id order.  The result does not depend
 * on the order nodes were stored in.  Returns a malloc'ed array of ids. */
int *graph_canonical_order(const Graph *g);
/* The text dump; `pass` names the banner ("after infer-shapes"). */
void ir_print(FILE *f, const Graph *g, const char *pass);
/* The same with options: names (--dump-ids=names) refers to values by name
 * (%stage1_conv1, %"odd name") instead of by position (%12), so an inserted
 * node changes only its own lines; header is printed after the banner (the
 * `# provenance:` line).  The reader takes both forms, mixed too. */
typedef struct {
    bool names;
    const char *header;
} IrPrintOptions;
void ir_print_with(FILE *f, const Graph *g, const char *pass, const IrPrintOptions *o);
/* ir_print of g (no banner) into a malloc'ed string: for comparing graphs. */
char *ir_print_string(const Graph *g);
void ir_print_dot(FILE *f, const Graph *g, const char *pass);
void config_print(FILE *f, const ConfigVal *v);
/* An attribute's value as the dump writes it: 3, 1e-05, true, relu,
 * float16, "text", (3,3). */
void attr_print(FILE *f, const AttrSpec *as, const AttrVal *v);
/* Parses one train-block value (as a dump writes it: 1e-4, "dir", dynamic,
 * nag(momentum=0.9)) given on the command line as `what`; NULL after an
 * error at its column. */
ConfigVal *config_parse(Graph *g, const char *what, const char *text);
/* Sets (or adds) a train-block entry. */
void graph_set_train_entry(Graph *g, const char *key, ConfigVal *v);
/* Reads a dump back; file indexes d's source table. Returns NULL on error. */
Graph *ir_read(Diag *d, int file);
/* Checks invariants, the shape and type rules included (ir_check_rules),
 * on g and its inference graph; prints what is wrong and returns false.  A
 * failure is a compiler bug, never a user error. */
bool ir_verify(const Graph *g, const char *after_pass);
/* A pass's position in the pipeline (elaborate 0 ... fuse 7, schedule 8), or
 * -1 for a name that is none. */
int ir_stage(const char *pass);
/* part, grad_of, bn_moving_update, _slice_axis and the _backward_ ops. */
bool op_made_by_autodiff(OpKind k);
/* The ops the fuse pass makes (_fused_*, _backward_fused_*). */
bool op_made_by_fuse(OpKind k);
/* The op the schedule pass makes (_layout, a layout conversion). */
bool op_made_by_schedule(OpKind k);
/* A loss head: SoftmaxOutput, or the fused op that reads its logits
 * through a folded cast (the training loop reports its output). */
bool op_is_loss_head(OpKind k);
/* Re-runs the shape rules (from infer-shapes on) and the type rules of
 * infer-types and of what amp adds (from infer-types on) on every node of g
 * and its inference graph, against each node's inputs as declared, and
 * reports each disagreement at its node through g's Diag: what --from-ir
 * holds a dump after `after_pass` to.  Before the amp pass, g->info.amp set
 * (AMP on) lets float dtypes disagree, as infer-types does then.  The ops
 * autodiff makes are refused before autodiff.  Nodes are left as they were. */
bool ir_check_rules(Graph *g, const char *after_pass);

#endif
