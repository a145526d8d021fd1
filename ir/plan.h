/* plan.h - the lowered program's buffer plan (issue 10, items 3 and 6).
 *
 * A BufferPlan places every value of the training step that owns a buffer
 * (plan_has_buffer: every node except grad_of, param_master and
 * bn_moving_update, as codegen/lower.c gives them buffers) in one arena.  Sizes and offsets are linear in the
 * symbolic batch N: `fixed + per_sample * N`.  passes/memplan.c makes a plan;
 * memplan_verify proves it; codegen/lower.c places the program's buffers by it. */
#ifndef AMPC_PLAN_H
#define AMPC_PLAN_H

#include "ir.h"

#define PLAN_ALIGN 64 /* bytes: both parts of every offset are multiples of it */
/* The promise the vectorized kernels rely on (docs/codegen.md, "Memory
 * plan"): every buffer of a program starts at a multiple of 16 bytes, the
 * arena's by their offsets, the others because the runtime allocates each
 * at a multiple of RT_DEV_ALIGN (64); the program text says so (`align`). */
#define PLAN_VEC_ALIGN 16
_Static_assert(PLAN_ALIGN % PLAN_VEC_ALIGN == 0, "arena offsets keep the 16-byte promise");

typedef struct {
    int64_t fixed, per_sample; /* fixed + per_sample * N */
} LinExpr;

typedef enum {
    PV_ARENA,    /* placed in the shared arena */
    PV_EXTERNAL, /* its own buffer outside the arena: parameters, graph inputs
                  * (filled by the data loader), a size not linear in N */
} PlanKind;

typedef struct {
    int node;       /* the value (node id) */
    PlanKind kind;
    LinExpr size;   /* bytes */
    LinExpr offset; /* in the arena (PV_ARENA) */
    int first, last;/* live interval in steps, both inclusive; step = node id
                     * (execution order), nsteps = after the step (read by the
                     * program or the optimizer) */
    bool in_place;  /* its kernel writes it over the bytes of an input that
                     * dies at `first`: node id `overwrites` */
    int overwrites;
} PlanValue;

typedef struct {
    PlanValue *v;      /* malloc'ed */
    int n;
    int nsteps;        /* nodes of the graph */
    LinExpr arena;     /* the arena's bytes */
    LinExpr unplanned; /* the arena's values each in its own buffer */
    LinExpr lower;     /* liveness lower bound: the largest sum of live fixed
                        * bytes, and of live per-sample bytes, at any step */
    LinExpr external;  /* PV_EXTERNAL values */
    LinExpr grads;     /* arena values the optimizer reads after the step
                        * (the parameters' gradients), a part of `lower` */
} BufferPlan;

/* The kernel binding of an op (kernels.def, one row per op that has kernels;
 * see there for each column): the function each target calls, its
 * workspace sizer, its mode constant, and the slots it may overwrite or
 * never reads.  Ops without a row (no call) get a row with has = false. */
typedef struct {
    bool has;
    const char *cpu, *ws, *mode, *cuda;
    unsigned short overwrites;        /* bit k: input slot k; bit 8 + k: the node's part 3 */
    unsigned char unread;             /* bit k: input slot k */
    const char *vectorized;           /* the CUDA kernels held to 16-byte loads, or NULL */
} KernelRow;
const KernelRow *kernel_row(OpKind k);

/* Kernel facts the planner needs, from the rows: whether a node's kernel
 * may write its own value over the bytes of input slot `slot`, and whether
 * the kernel reads input slot `slot` at all.  An input a kernel does not
 * read is passed as NULL and not kept alive for it. */
bool plan_may_overwrite(const Node *n, int slot);
bool plan_reads(const Node *n, int slot);
/* The same for a value that may be a part: part 3 of a node (the
 * BatchNorm + add backward's data gradient) by its node's row (bits 8 + k),
 * any other part never; *writer gets the node whose call writes v. */
bool plan_value_may_overwrite(const Graph *g, const Node *v, int slot, const Node **writer);

/* Whether node n owns a buffer in the training step (codegen/lower.c gives
 * these, and only these, a buffer of their own). */
bool plan_has_buffer(const Node *n);
/* n's bytes as fixed + per_sample * N; false when not linear in N (two
 * dimensions with N) or unknown. */
bool plan_value_bytes(const Node *n, LinExpr *out);
/* Liveness over the execution order (node ids): first[i], the step that
 * writes i (a part's producer's); last[i], its last read, nsteps for what is
 * read after the step (graph outputs, the gradients grad_of hands to the
 * optimizer, bn_moving_update's inputs), first[i] when never read.  Arrays
 * of g->nnodes, filled for every node. */
void plan_liveness(const Graph *g, int *first, int *last);

void plan_free(BufferPlan *p);
/* --dump=memplan: one line per value (%node id in storage order, op, name
 * with odd bytes as '?', interval, size, offset or `external`), then the
 * report lines. */
void plan_print(FILE *f, const Graph *g, const BufferPlan *p);
/* The same with a header after the first line (the `# provenance:` line). */
void plan_print_with(FILE *f, const Graph *g, const BufferPlan *p, const char *header);
/* --dump=memplan --dump-format=dot: the step's values coloured by the
 * bytes they occupy (values sharing a slot share a colour), with their
 * lifetimes and offsets. */
void plan_print_dot(FILE *f, const Graph *g, const BufferPlan *p);
/* --report lines (per sample and fixed, bytes; batch > 0 adds the totals). */
void plan_report(FILE *f, const BufferPlan *p, int64_t batch);
/* --report: the bytes outside the arena that a run keeps for g's
 * parameters: the values the steps read, the fp32 masters of 16-bit ones,
 * and nstate fp32 optimizer tensors per trainable parameter. */
void plan_report_params(FILE *f, const Graph *g, int nstate);
/* Its figures, bytes: the parameters' values, their fp32 masters, the
 * optimizer state. */
typedef struct {
    int64_t values, masters, state;
} PlanParamBytes;
void plan_param_bytes(const Graph *g, int nstate, PlanParamBytes *out);

/* Proves that no two arena values with overlapping live intervals share a
 * byte for any batch N >= 1, that both parts of every offset and size are
 * non-negative and aligned, and that every value lies inside the arena.
 * With g, also that each value's size holds its node's bytes and its
 * interval covers its definition and every read (as memplan computes them).
 * Prints each violation to err (when not NULL); false if any.
 * O(n log n): a sweep over steps with the live values ordered by offset. */
bool memplan_verify(const Graph *g, const BufferPlan *p, FILE *err);

/* passes/memplan.c: the plan of g's step (the training graph, or an
 * inference graph: docs/codegen.md, "Memory plan"); *out is owned by the
 * caller (plan_free).  With inplace, a value may take over the bytes of an
 * input that dies at its node (plan_may_overwrite). */
void memplan(const Graph *g, bool inplace, BufferPlan *out);

/* ---- the lowered program ------------------------------------------------------
 *
 * What a backend prints (codegen/lower.c makes it, codegen/emit_c.c prints it):
 * the buffers (every value the steps read or write, with its bytes and where
 * it lives), and three steps, each an ordered list of kernel calls with
 * their argument buffers and a placement.  Its text form (program_print,
 * --dump=program) reads back (program_read) and is checked from the text
 * alone (program_verify): the liveness its calls imply, proved against its
 * buffer offsets for every N >= 1 by memplan_verify. */

typedef enum { PB_VALUE, PB_PARAM, PB_INPUT, PB_MASTER } ProgBufKind;
/* A call's placement: one value.  Every call of a program runs on the one
 * device its target gives it; the target decides which function a call
 * names (the kernel table's cpu or cuda column, codegen.h's
 * CgPlans.kernels), not the call, and where the gradients travel is the
 * kvstore pass's KvPlan (kv below).  The text form prints it ("cpu"). */
typedef enum { PLACE_CPU } Placement;
typedef enum { STEP_TRAIN, STEP_MOVING, STEP_INFER, STEP_COUNT } StepKind;

typedef struct {
    const char *name;  /* the value's node name (a parameter's for masters) */
    ProgBufKind kind;
    DType dtype;
    LinExpr elems;     /* elements: fixed + per_sample * N */
    bool in_arena;
    LinExpr offset;    /* bytes into the arena, when in_arena */
    Layout layout;     /* how its bytes are arranged (its value's, the schedule pass's) */
} ProgBuffer;

#define PROG_MAX_ARGS 8 /* inputs or outputs of one call; wider calls (Concat) list the rest in `more` */

typedef struct {
    int node;          /* the node of its step's graph */
    OpKind op;         /* the kernel family */
    Placement place;
    bool workspace;    /* asks for the workspace */
    int nin, nout;
    int *in, *out;     /* buffer numbers; -1: an argument the kernel does not read or write */
} ProgCall;

typedef struct {
    ProgCall *calls;
    int ncalls;
    int *results;      /* buffers read after the step (the loss head's output,
                        * the gradients, moving_update's inputs) */
    int nresults;
} ProgStep;

/* The gradient placement (passes/kvstore.c, docs/kvstore.md): where the
 * gradients are summed across devices and the optimizer runs, in MXNet's
 * kvstore names, the buckets the gradients are reduced in (train-step
 * gradient buffers, in the order backward completes them), the dtype on
 * the wire, and the predicted step time of every placement.  Set only when
 * the kvstore pass ran; printed after the steps, before `end`. */
typedef enum { KV_LOCAL, KV_DEVICE, KV_NCCL, KV_DIST_SYNC, KV_COUNT } KvPlace;
typedef struct {
    int *bufs;         /* gradient buffers */
    int nbufs;
    int64_t bytes;     /* on the wire */
} KvBucket;
typedef struct {
    bool set;
    KvPlace place;
    DType wire;
    int devices, machines; /* devices (or CPU processes) per machine, machines */
    int64_t bucket_cap;    /* bytes; a bucket closes once it holds this many */
    KvBucket *buckets;
    int nbuckets;
    int64_t step_us[KV_COUNT]; /* predicted step time; -1: not available here */
} KvPlan;

typedef struct {
    const char *model;
    Arena a;           /* every array and string above */
    int nparams;       /* the parameter table, in the order of the training graph */
    int *param_buf;    /* parameter k's buffer */
    int *param_grad;   /* its gradient's buffer in the train step, -1 for none */
    int *node_buf[2];  /* lowering only (not printed): node -> buffer of the
                        * training graph [0] and the inference graph [1];
                        * -1 none, <= -2 the master of parameter -2 - k */
    ProgBuffer *buf;
    int nbuf;
    ProgStep step[STEP_COUNT];
    LinExpr arena;     /* bytes */
    int align;         /* bytes every buffer starts at a multiple of (PLAN_ALIGN) */
    KvPlan kv;         /* the gradient placement, when kv.set */
} Program;

const char *step_name(StepKind k); /* "train", "moving_update", "infer" */
const char *kv_place_name(KvPlace k); /* "local", "device", "nccl", "dist_sync" */
const char *placement_name(Placement p); /* "cpu" */
void program_free(Program *p);
/* The text form: a header, one line per buffer, then each step's calls and
 * results.  Names are printed as C-escaped string literals. */
void program_print(FILE *f, const Program *p);
/* The same with a header after the first line (the `# provenance:` line,
 * which program_read skips). */
void program_print_with(FILE *f, const Program *p, const char *header);
/* s as program_print prints a name: a C string literal, bytes outside
 * printable ASCII as three-digit octal escapes (the GPU cost dump's too). */
void program_put_name(FILE *f, const char *s);
/* Parses program_print's text, file `file` of d; false after reporting the
 * first problem as path:line:col: error.  *out is the caller's to
 * program_free either way. */
bool program_read(Diag *d, int file, Program *out);
/* Where each parameter's gradient is final: ready[k] = the index of the
 * train-step call that writes parameter k's gradient buffer last (a fused
 * BatchNorm backward completes dgamma and dbeta as extra outputs), -1 for a
 * parameter without a gradient or one no call writes.  A fact of the calls,
 * so a program read back has the same; the emitted step tells the runtime
 * there (codegen/emit_c.c: RtCtx.grad_ready).  ready has p->nparams entries. */
void program_grad_ready(const Program *p, int *ready);
/* The data input's chain at the start of step k (runtime/program.h's
 * RtInputForm): the data input's amp_cast, then that value's _layout if one
 * follows, as the step's first calls, the data buffer (`data`) read by the
 * cast alone and the cast's value by the layout alone.  Returns its calls
 * (0: none, *form = data), *form the chain's last buffer, where a device
 * that writes the batch in that buffer's dtype and layout lets the step
 * skip them (the emitted RtModel.input_form; the cost model's batch made
 * on the device). */
int program_input_chain(const Program *p, StepKind k, int data, int *form);
/* Checks p from itself: buffer numbers, sizes and offsets in range and
 * aligned, each step's calls writing an arena buffer before reading it, and
 * no two arena buffers live at once in a step sharing a byte for any
 * N >= 1 (memplan_verify on the liveness the calls imply, an output at an
 * input's offset counting as an in-place write).  Prints each problem to
 * err (when not NULL); false if any. */
bool program_verify(const Program *p, FILE *err);

#endif
