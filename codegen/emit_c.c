/* emit_c.c - the C backend: prints the lowered program (codegen/lower.c) as a
 * C file for runtime/program.h.
 *
 * It plans nothing: which values exist, where each lives (a buffer of the
 * program, an offset into the shared arena by the memory plan), and the
 * order of the calls are the program's.  What it adds is the C spelling of
 * each call: the kernel binding table (ir/kernels.def) names the function,
 * its workspace sizer and its mode constant, and one printer per kernel
 * family writes the arguments from the node's attributes and shapes.  Each
 * call is printed with the node's number, op, dtype and shape in a comment;
 * BatchNorm's moving-statistics updates go to a separate function the
 * runtime calls only on steps it does not skip; the inference step runs on
 * the same parameter buffers.  Dimensions that depend on the batch are
 * written in terms of N, bound when the program starts.
 *
 * Names come from the model file and are untrusted: they reach the C file
 * only as escaped string literals (c_string), never in comments or code, and
 * cg_check refuses, before anything is written, a graph the backend cannot
 * run (a dtype it has no kernels for, a tensor whose size overflows). */
#include "codegen.h"

#include <stdlib.h>
#include <string.h>


/* What follows the build id's 16 hex digits in RtModel's initializer. */
#define BUILD_ID_MARK "/* the build id: a hash of this file and ampc's version */"

typedef struct {
    FILE *f;
    const Graph *train;
    Arena a;
    const Program *prog; /* what this file prints (codegen/lower.c) */
    int *ready;          /* parameter -> the train call completing its gradient */
    /* per graph being emitted */
    const Graph *g;
    const char **val;    /* node -> C expression of its data */
    const char **parts;  /* node * 4 + index -> C expression of that part, or NULL */
    int *buf;            /* node -> buffer, -1 */
    int *uses;
    bool ws_only;        /* emitting the workspace function: sizes, no calls */
    Target kernels;      /* whose functions the calls name (CgPlans.kernels) */
    int data;            /* the data input's buffer, -1 */
    int form[STEP_COUNT][2]; /* per step: the input chain's calls and last buffer (input_chain) */
    bool ok;
} Cg;

static const char *rt_dtype(DType t)
{
    switch (t) {
    case DT_F32: return "RT_F32";
    case DT_F16: return "RT_F16";
    case DT_BF16: return "RT_BF16";
    default: return NULL;
    }
}

/* The product of the dims [lo, hi) of s, N counting as 1.  cg_check has
 * refused every shape whose element count overflows, so this cannot. */
static int64_t checked_numel(const Shape *s, int lo, int hi)
{
    int64_t k = 1;
    for (int i = lo; i < hi; i++)
        if (__builtin_mul_overflow(k, s->d[i] < 0 ? -s->d[i] : s->d[i], &k))
            DIE("codegen: an element count overflows after cg_check");
    return k;
}

/* ---- dimension expressions ---------------------------------------------- */

static const char *dimx(Cg *c, Dim d)
{
    if (d == DIM_N)
        return "N";
    if (d < 0)
        return arena_printf(&c->a, "%lld * N", (long long)-d);
    return arena_printf(&c->a, "%lld", (long long)d);
}

/* The product of dims [lo, hi) of s, as an expression (N is an int64_t). */
static const char *prodx(Cg *c, const Shape *s, int lo, int hi)
{
    int64_t k = checked_numel(s, lo, hi);
    bool sym = false;
    for (int i = lo; i < hi; i++)
        sym |= dim_is_sym(s->d[i]);
    if (sym)
        return k == 1 ? "N" : arena_printf(&c->a, "%lld * N", (long long)k);
    return arena_printf(&c->a, "%lld", (long long)k);
}

static const char *numelx(Cg *c, const Node *n) { return prodx(c, &n->shape, 0, n->shape.rank); }

static const char *tuplex(Cg *c, const AttrVal *t, int n, int fill)
{
    char *s = arena_printf(&c->a, "{");
    for (int i = 0; i < n; i++)
        s = arena_printf(&c->a, "%s%s%lld", s, i ? ", " : "", (long long)(i < t->t.n ? t->t.v[i] : fill));
    return arena_printf(&c->a, "%s}", s);
}

static const char *spatialx(Cg *c, const Shape *s, int from)
{
    char *r = arena_printf(&c->a, "{");
    for (int i = from; i < s->rank; i++)
        r = arena_printf(&c->a, "%s%s%s", r, i > from ? ", " : "", dimx(c, s->d[i]));
    return arena_printf(&c->a, "%s}", r);
}

static const char *shape_arrayx(Cg *c, const Shape *s)
{
    char *r = arena_printf(&c->a, "{");
    for (int i = 0; i < s->rank; i++)
        r = arena_printf(&c->a, "%s%s%s", r, i ? ", " : "", dimx(c, s->d[i]));
    if (s->rank == 0)
        r = arena_printf(&c->a, "{1");
    return arena_printf(&c->a, "%s}", r);
}

/* ---- per-op emission ------------------------------------------------------ */

#define IN(i) (c->val[n->in[i]])
#define INODE(i) (c->g->nodes[n->in[i]])
#define OUT (c->val[n->id])
#define DT (rt_dtype(n->dtype))
/* A call's first arguments: a CUDA program's kernels (and their sizers) take
 * the device's context of the CUDA libraries, RtCtx.cuda; the CPU's none. */
#define CX (c->kernels == TARGET_CUDA ? "ctx->cuda, " : "")

/* The part node reading n with that index, or NULL when none survives. */
static const char *part_of(Cg *c, const Node *n, int index)
{
    return index < 4 ? c->parts[n->id * 4 + index] : NULL;
}

static const char *or_null(const char *s) { return s ? s : "NULL"; }

/* The dims' layout field: nothing for the canonical layout (zero), so the
 * C of a CPU plan is what it was before layouts existed. */
static const char *layout_field(const Node *n)
{
    return n->layout == LAYOUT_NHWC ? ", .layout = RT_LAYOUT_NHWC" : "";
}

static void c_string(FILE *f, const char *s);

static void conv_dims(Cg *c, const Node *conv_like, const Node *x, const char *indent)
{
    FILE *f = c->f;
    const Node *n = conv_like;
    int k = n->attrs[CONV_KERNEL].t.n;
    fprintf(f, "%sRtConvDims d = {.n = (int)(%s), .c = %lld, .k = %lld, .groups = %lld, .nsp = %d,\n",
            indent, dimx(c, x->shape.d[0]), (long long)x->shape.d[1],
            (long long)node_int(n, CONV_NUM_FILTER), (long long)node_int(n, CONV_NUM_GROUP), k);
    fprintf(f, "%s                  .in = %s, .kernel = %s, .stride = %s,\n", indent,
            spatialx(c, &x->shape, 2), tuplex(c, &n->attrs[CONV_KERNEL], k, 1),
            tuplex(c, &n->attrs[CONV_STRIDE], k, 1));
    fprintf(f, "%s                  .pad = %s, .dilate = %s%s,\n", indent,
            tuplex(c, &n->attrs[CONV_PAD], k, 0), tuplex(c, &n->attrs[CONV_DILATE], k, 1),
            layout_field(n));
    fprintf(f, "%s                  .node = ", indent);
    c_string(f, n->name);
    fputs("};\n", f);
    fprintf(f, "%srt_conv_dims_init(&d);\n", indent);
}

static void fc_dims(Cg *c, const Node *fc_like, const Node *x, const char *indent)
{
    bool flatten = node_bool(fc_like, FC_FLATTEN);
    int r = x->shape.rank;
    fprintf(c->f, "%sRtFcDims d = {.n = (int)(%s), .in = (int)(%s), .hidden = %lld, .node = ",
            indent, prodx(c, &x->shape, 0, flatten ? 1 : r - 1),
            prodx(c, &x->shape, flatten ? 1 : r - 1, r), (long long)node_int(fc_like, FC_NUM_HIDDEN));
    c_string(c->f, fc_like->name);
    fputs("};\n", c->f);
}

/* In NHWC the channels are the last dimension: outer N*H*W, inner 1. */
static void bn_dims(Cg *c, const Node *bn_like, const Node *x, const char *indent)
{
    int64_t axis = node_int(bn_like, BN_AXIS);
    if (axis < 0)
        axis += x->shape.rank;
    if (bn_like->layout == LAYOUT_NHWC) {
        fprintf(c->f, "%sRtBnDims d = {.outer = %s, .c = %s, .inner = 1};\n", indent,
                arena_printf(&c->a, "%s * %s", dimx(c, x->shape.d[0]), prodx(c, &x->shape, 2, 4)),
                prodx(c, &x->shape, 1, 2));
        return;
    }
    fprintf(c->f, "%sRtBnDims d = {.outer = %s, .c = %s, .inner = %s};\n", indent,
            prodx(c, &x->shape, 0, (int)axis), prodx(c, &x->shape, (int)axis, (int)axis + 1),
            prodx(c, &x->shape, (int)axis + 1, x->shape.rank));
}

static void pool_dims(Cg *c, const Node *n, const Node *x, const char *indent)
{
    int nsp = x->shape.rank - 2;
    bool global = node_bool(n, POOL_GLOBAL_POOL);
    const char *kernel = global ? spatialx(c, &x->shape, 2) : tuplex(c, &n->attrs[POOL_KERNEL], nsp, 1);
    fprintf(c->f, "%sRtPoolDims d = {.n = (int)(%s), .c = %lld, .nsp = %d, .in = %s,\n", indent,
            dimx(c, x->shape.d[0]), (long long)x->shape.d[1], nsp, spatialx(c, &x->shape, 2));
    fprintf(c->f, "%s                  .kernel = %s, .stride = %s, .pad = %s,\n", indent, kernel,
            tuplex(c, &n->attrs[POOL_STRIDE], nsp, 1), tuplex(c, &n->attrs[POOL_PAD], nsp, 0));
    fprintf(c->f, "%s                  .type = %d, .full_convention = %s, .count_include_pad = %s, "
                  ".global = %s%s};\n",
            indent, node_enum(n, POOL_POOL_TYPE),
            node_enum(n, POOL_CONVENTION) == POOL_FULL ? "true" : "false",
            node_bool(n, POOL_COUNT_INCLUDE_PAD) ? "true" : "false", global ? "true" : "false",
            layout_field(n));
    fprintf(c->f, "%srt_pool_dims_init(&d);\n", indent);
}

/* outer, len, inner of x around axis a */
static void axis_split(Cg *c, const Shape *s, int a, const char **outer, const char **len,
                       const char **inner)
{
    *outer = prodx(c, s, 0, a);
    *len = prodx(c, s, a, a + 1);
    *inner = prodx(c, s, a + 1, s->rank);
}

static void reduce_dims(Cg *c, const Node *n, const Node *x, const char *indent)
{
    const AttrVal *ax = node_tuple(n, REDUCE_AXIS);
    bool red[AMPC_MAX_RANK] = {0};
    for (int i = 0; i < ax->t.n; i++)
        red[ax->t.v[i] < 0 ? ax->t.v[i] + x->shape.rank : ax->t.v[i]] = true;
    char *flags = arena_printf(&c->a, "{");
    for (int i = 0; i < x->shape.rank; i++)
        flags = arena_printf(&c->a, "%s%s%s", flags, i ? ", " : "",
                             (ax->t.n == 0 || red[i]) ? "true" : "false");
    fprintf(c->f, "%sRtReduceDims d = {.rank = %d, .in = %s, .reduce = %s}};\n", indent,
            x->shape.rank, shape_arrayx(c, &x->shape), flags);
}

static const char *act_enum(int k)
{
    static const char *const e[] = {"RT_ACT_RELU", "RT_ACT_SIGMOID", "RT_ACT_TANH",
                                    "RT_ACT_SOFTRELU", "RT_ACT_SOFTSIGN"};
    return e[k];
}

static const char *lrelu_enum(int k)
{
    static const char *const e[] = {"RT_LRELU_LEAKY", "RT_LRELU_ELU", "RT_LRELU_SELU",
                                    "RT_LRELU_PRELU"};
    return e[k];
}

static void lrelu_split(Cg *c, const Node *x, const char **outer, const char **ch,
                        const char **inner)
{
    if (x->layout == LAYOUT_NHWC) { /* channels last: prelu's gamma per innermost element */
        *outer = arena_printf(&c->a, "%s * %s", dimx(c, x->shape.d[0]), prodx(c, &x->shape, 2, 4));
        *ch = prodx(c, &x->shape, 1, 2), *inner = "1";
        return;
    }
    if (x->shape.rank >= 2)
        axis_split(c, &x->shape, 1, outer, ch, inner);
    else
        *outer = numelx(c, x), *ch = "1", *inner = "1";
}

static void emit_bcast_dims(Cg *c, const Node *a, const Node *b, const char *indent)
{
    fprintf(c->f, "%sconst int64_t sa[] = %s, sb[] = %s;\n", indent, shape_arrayx(c, &a->shape),
            shape_arrayx(c, &b->shape));
    fprintf(c->f, "%sRtBcastDims d;\n%srt_broadcast_dims_init(&d, %d, sa, %d, sb);\n", indent, indent,
            a->shape.rank ? a->shape.rank : 1, b->shape.rank ? b->shape.rank : 1);
}

/* A Dropout node's RNG stream: a hash of its name (FNV-1a), so the mask of
 * a node is the same in any program or test that names it. */
static uint32_t rng_stream(const char *name)
{
    uint32_t h = 2166136261u;
    for (; *name; name++)
        h = (h ^ (unsigned char)*name) * 16777619u;
    return h;
}

/* The workspace function (emit_workspace) sizes what a call asks of
 * rt_ctx_ws instead of making the call: true when it did. */
static bool ws_line(Cg *c, const char *wsx)
{
    if (!c->ws_only)
        return false;
    fprintf(c->f, "        {\n            size_t b = %s;\n            ws = b > ws ? b : ws;\n        }\n", wsx);
    return true;
}

/* ---- one printer per kernel family (ir/kernels.def) --------------------------
 *
 * Each prints the calls of one family's nodes, taking the function, its
 * workspace sizer and its mode constant from the op's row k; none decides
 * where a value lives (the program's buffers, in c->val) or what runs when
 * (the program's calls). */

typedef void EmitFn(Cg *c, const Node *n, const KernelRow *k);

#define I "        " /* a call's indent in its block */

/* "<ws>(&d, <dtype>, <pass>)" */
static const char *wsx(Cg *c, const Node *n, const KernelRow *k, const char *pass)
{
    return arena_printf(&c->a, "%s(%s&d, %s, %s)", k->ws, CX, DT, pass);
}

/* Convolution and FullyConnected share their call shapes: the forward, and
 * a backward node that calls <stem>_data when its own value is read and
 * <stem>_weight for the weight and bias parts.  The dims struct d is
 * already declared. */
static void dense_forward(Cg *c, const Node *n, const KernelRow *k)
{
    const char *ws = wsx(c, n, k, "RT_PASS_FORWARD");
    if (!ws_line(c, ws))
        fprintf(c->f, "%s%s(%s&d, %s, %s, %s, %s, %s, rt_ctx_ws(ctx, %s));\n", I, k->cpu, CX, DT,
                IN(0), IN(1), n->nin > 2 ? IN(2) : "NULL", OUT, ws);
}

static void dense_backward(Cg *c, const Node *n, const KernelRow *k)
{
    const char *dw = part_of(c, n, 1), *db = part_of(c, n, 2);
    const char *wsd = wsx(c, n, k, "RT_PASS_BACKWARD");
    const char *wsw = wsx(c, n, k, "RT_PASS_BACKWARD_WEIGHT");
    if (c->uses[n->id] && !ws_line(c, wsd))
        fprintf(c->f, "%s%s_data(%s&d, %s, %s, %s, %s, false, rt_ctx_ws(ctx, %s));\n", I, k->cpu,
                CX, DT, IN(2), IN(0), OUT, wsd);
    if (dw && !ws_line(c, wsw))
        fprintf(c->f, "%s%s_weight(%s&d, %s, %s, %s, %s, %s, false, rt_ctx_ws(ctx, %s));\n", I,
                k->cpu, CX, DT, IN(1), IN(0), dw, or_null(db), wsw);
}

static void emit_conv_forward(Cg *c, const Node *n, const KernelRow *k)
{
    conv_dims(c, n, INODE(0), I);
    dense_forward(c, n, k);
}

static void emit_conv_backward(Cg *c, const Node *n, const KernelRow *k)
{
    conv_dims(c, n, INODE(1), I);
    dense_backward(c, n, k);
}

static void emit_fc_forward(Cg *c, const Node *n, const KernelRow *k)
{
    fc_dims(c, n, INODE(0), I);
    dense_forward(c, n, k);
}

static void emit_fc_backward(Cg *c, const Node *n, const KernelRow *k)
{
    fc_dims(c, n, INODE(1), I);
    dense_backward(c, n, k);
}

/* BatchNorm's forward, plain or with its relu fused, or with the residual
 * add of a shortcut (sc: its input 5) and the relu: on the moving statistics
 * (<stem>_forward_inference), or on the batch's (<stem>_forward_train),
 * saving them in the node's parts. */
static void bn_forward_call(Cg *c, const Node *n, const KernelRow *k, bool sc)
{
    FILE *f = c->f;
    bn_dims(c, n, INODE(0), I);
    const char *m = part_of(c, n, 1), *s = part_of(c, n, 2);
    const char *x = sc ? arena_printf(&c->a, "%s, %s", IN(0), IN(5)) : IN(0);
    bool fix = node_bool(n, BN_FIX_GAMMA);
    if (node_bool(n, BN_USE_GLOBAL_STATS))
        fprintf(
            f,
            "%s%s_forward_inference(%s&d, %s, %s, %s, %s, %s, %s, (float)%.9g, %s, %s, %s, %s);\n",
            I, k->cpu, CX, DT, x, IN(1), IN(2), IN(3), IN(4), node_float(n, BN_EPS),
            fix ? "true" : "false", OUT, or_null(m), or_null(s));
    else
        fprintf(f, "%s%s_forward_train(%s&d, %s, %s, %s, %s, (float)%.9g, %s, %s, %s, %s);\n", I,
                k->cpu, CX, DT, x, IN(1), IN(2), node_float(n, BN_EPS), fix ? "true" : "false", OUT,
                or_null(m), or_null(s));
}

static void emit_bn_forward(Cg *c, const Node *n, const KernelRow *k)
{
    bn_forward_call(c, n, k, false);
}

static void emit_bn_add_forward(Cg *c, const Node *n, const KernelRow *k)
{
    bn_forward_call(c, n, k, true);
}

/* conv_bn_stats: the convolution writing y and its statistics (part 1);
 * its sizer takes no pass (the forward's).  A CUDA program's sizer also
 * asks the device's cuDNN for an engine at set-up, and stops the program
 * there, naming the node, where it has none (rt_cuda_conv_stats_probe). */
static void emit_conv_stats_forward(Cg *c, const Node *n, const KernelRow *k)
{
    conv_dims(c, n, INODE(0), I);
    const char *ws = arena_printf(&c->a, "%s(%s&d, %s)", k->ws, CX, DT);
    if (!ws_line(c, ws))
        fprintf(c->f, "%s%s(%s&d, %s, %s, %s, %s, (float *)%s, rt_ctx_ws(ctx, %s));\n", I, k->cpu,
                CX, DT, IN(0), IN(1), OUT, or_null(part_of(c, n, 1)), ws);
}

/* The BatchNorm family's training forward from the statistics of x (its
 * last input): plain, with the relu, or with the shortcut (input 5) and the
 * relu, saving the batch's statistics in the node's parts. */
static void emit_bn_sums_forward(Cg *c, const Node *n, const KernelRow *k)
{
    bn_dims(c, n, INODE(0), I);
    bool add = n->op == OP__fused_BatchNorm_add_relu_stats;
    bool relu = add || n->op == OP__fused_BatchNorm_relu_stats;
    fprintf(c->f,
            "%s%s(%s&d, %s, %s, %s, %s, (const float *)%s, %s, %s, (float)%.9g, %s, %s, %s, "
            "%s);\n",
            I, k->cpu, CX, DT, IN(0), add ? IN(5) : "NULL", relu ? "true" : "false", IN(n->nin - 1),
            IN(1), IN(2), node_float(n, BN_EPS), node_bool(n, BN_FIX_GAMMA) ? "true" : "false", OUT,
            or_null(part_of(c, n, 1)), or_null(part_of(c, n, 2)));
}

/* nothing written on a step the device skips: the kernel reads the step's state */
static void emit_bn_moving(Cg *c, const Node *n, const KernelRow *k)
{
    const Node *bn = c->g->nodes[INODE(0)->in[0]];
    bn_dims(c, bn, c->g->nodes[bn->in[0]], I);
    fprintf(c->f,
            "%s%s(%sd.c, d.outer * d.inner, %s, %s, (float)%.9g, (float)%.9g, %s, %s, "
            "ctx->step_state);\n",
            I, k->cpu, CX, IN(0), IN(1), node_float(n, BN_EPS), node_float(n, BN_MOMENTUM), IN(2),
            IN(3));
}

static const char *bools(const Node *n, int a, int b, const char **second)
{
    *second = node_bool(n, b) ? "true" : "false";
    return node_bool(n, a) ? "true" : "false";
}

/* dy, x, gamma, save_mean, save_invstd */
static void emit_bn_backward(Cg *c, const Node *n, const KernelRow *k)
{
    const char *global, *fix = bools(n, BN_FIX_GAMMA, BN_USE_GLOBAL_STATS, &global);
    bn_dims(c, n, INODE(1), I);
    fprintf(c->f, "%s%s(%s&d, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, false, false);\n", I,
            k->cpu, CX, DT, IN(1), IN(0), IN(2), IN(3), IN(4), fix, global,
            c->uses[n->id] ? OUT : "NULL", or_null(part_of(c, n, 1)), or_null(part_of(c, n, 2)));
}

/* dy, y, x, gamma, save_mean, save_invstd */
static void emit_bn_relu_backward(Cg *c, const Node *n, const KernelRow *k)
{
    const char *global, *fix = bools(n, BN_FIX_GAMMA, BN_USE_GLOBAL_STATS, &global);
    bn_dims(c, n, INODE(2), I);
    fprintf(c->f, "%s%s(%s&d, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, false, false);\n", I,
            k->cpu, CX, DT, IN(2), IN(1), IN(0), IN(3), IN(4), IN(5), fix, global,
            c->uses[n->id] ? OUT : "NULL", or_null(part_of(c, n, 1)), or_null(part_of(c, n, 2)));
}

/* dy, y, x, gamma, save_mean, save_invstd: the relu's gradient (the node's
 * value, the shortcut's), BatchNorm's dx (part 3), dgamma and dbeta */
static void emit_bn_add_relu_backward(Cg *c, const Node *n, const KernelRow *k)
{
    const char *global, *fix = bools(n, BN_FIX_GAMMA, BN_USE_GLOBAL_STATS, &global);
    bn_dims(c, n, INODE(2), I);
    fprintf(c->f, "%s%s(%s&d, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, false, false);\n",
            I, k->cpu, CX, DT, IN(2), IN(1), IN(0), IN(3), IN(4), IN(5), fix, global,
            c->uses[n->id] ? OUT : "NULL", or_null(part_of(c, n, 3)), or_null(part_of(c, n, 1)),
            or_null(part_of(c, n, 2)));
}

static void emit_act_forward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, %s);\n", I, k->cpu, CX, act_enum(node_enum(n, ACT_TYPE)),
            numelx(c, n), DT, IN(0), OUT);
}

/* dy, x (NULL where unread), y */
static void emit_act_backward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, %s, %s, %s, false);\n", I, k->cpu, CX,
            act_enum(node_enum(n, ACT_TYPE)), numelx(c, n), DT, plan_reads(n, 1) ? IN(1) : "NULL",
            IN(2), IN(0), OUT);
}

/* dy, y: an activation backward from its output alone, of the row's mode */
static void emit_relu_backward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, NULL, %s, %s, %s, false);\n", I, k->cpu, CX, k->mode,
            numelx(c, n), DT, IN(1), IN(0), OUT);
}

static void emit_lrelu_forward(Cg *c, const Node *n, const KernelRow *k)
{
    const char *o, *ch, *in;
    lrelu_split(c, INODE(0), &o, &ch, &in);
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, %s, %s, %s, (float)%.9g, %s);\n", I, k->cpu, CX,
            lrelu_enum(node_enum(n, LRELU_TYPE)), o, ch, in, DT, IN(0), n->nin > 1 ? IN(1) : "NULL",
            node_float(n, LRELU_SLOPE), OUT);
}

static void emit_lrelu_backward(Cg *c, const Node *n, const KernelRow *k)
{
    const char *o, *ch, *in;
    lrelu_split(c, INODE(1), &o, &ch, &in);
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, %s, %s, %s, (float)%.9g, %s, %s, %s, false, false);\n", I,
            k->cpu, CX, lrelu_enum(node_enum(n, LRELU_TYPE)), o, ch, in, DT, IN(1),
            n->nin > 2 ? IN(2) : "NULL", node_float(n, LRELU_SLOPE), IN(0),
            c->uses[n->id] ? OUT : "NULL", or_null(part_of(c, n, 1)));
}

/* The step's number from the device's step state (rt.h's RtStepState.step),
 * never the host's by value: a CUDA kernel reads it on the device, so a
 * captured CUDA graph of the step (--cuda-graph) draws each step's mask. */
#define DROPOUT_STEP (c->kernels == TARGET_CUDA ? "&ctx->step_state->step" : "rt_ctx_step(ctx)")

static void emit_dropout_forward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, (float)%.9g, ctx->seed, %s, %uu, %s);\n", I, k->cpu, CX,
            numelx(c, n), DT, IN(0), node_float(n, DROPOUT_P), DROPOUT_STEP, rng_stream(n->name),
            OUT);
}

/* the mask's stream is the forward node's (input 1), never read as data */
static void emit_dropout_backward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, (float)%.9g, ctx->seed, %s, %uu, %s, false);\n", I,
            k->cpu, CX, numelx(c, n), DT, IN(0), node_float(n, DROPOUT_P), DROPOUT_STEP,
            rng_stream(INODE(1)->name), OUT);
}

static void emit_pool_forward(Cg *c, const Node *n, const KernelRow *k)
{
    pool_dims(c, n, INODE(0), I);
    const char *ws = wsx(c, n, k, "RT_PASS_FORWARD");
    if (!ws_line(c, ws))
        fprintf(c->f, "%s%s(%s&d, %s, %s, %s, rt_ctx_ws(ctx, %s));\n", I, k->cpu, CX, DT, IN(0),
                OUT, ws);
}

static void emit_pool_backward(Cg *c, const Node *n, const KernelRow *k)
{
    pool_dims(c, n, INODE(1), I);
    const char *ws = wsx(c, n, k, "RT_PASS_BACKWARD");
    if (!ws_line(c, ws))
        fprintf(c->f, "%s%s(%s&d, %s, %s, %s, %s, false, rt_ctx_ws(ctx, %s));\n", I, k->cpu, CX, DT,
                IN(1), IN(0), OUT, ws);
}

static void emit_copy(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s);\n", I, k->cpu, CX, numelx(c, n), DT, IN(0), OUT);
}

static void emit_concat(Cg *c, const Node *n, const KernelRow *k)
{
    FILE *f = c->f;
    int64_t dim = node_int(n, CONCAT_DIM);
    if (dim < 0)
        dim += n->shape.rank;
    fprintf(f, "%sconst void *xs[] = {", I);
    for (int j = 0; j < n->nin; j++)
        fprintf(f, "%s%s", j ? ", " : "", IN(j));
    fprintf(f, "};\n%sconst int64_t len[] = {", I);
    for (int j = 0; j < n->nin; j++)
        fprintf(f, "%s%s", j ? ", " : "", prodx(c, &INODE(j)->shape, (int)dim, (int)dim + 1));
    fprintf(f, "};\n%s%s(%s%d, xs, len, %s, %s, %s, %s);\n", I, k->cpu, CX, n->nin,
            prodx(c, &n->shape, 0, (int)dim), prodx(c, &n->shape, (int)dim + 1, n->shape.rank), DT,
            OUT);
}

/* a slice is the middle part of a three-way split along the axis */
static void emit_slice(Cg *c, const Node *n, const KernelRow *k)
{
    const Node *x = INODE(0);
    int axis = (int)node_int(n, SLICE_AXIS);
    int64_t b = node_int(n, SLICE_BEGIN), e = node_int(n, SLICE_END), total = x->shape.d[axis];
    fprintf(c->f, "%sconst int64_t len[] = {%lld, %lld, %lld};\n", I, (long long)b, (long long)(e - b),
            (long long)(total - e));
    fprintf(c->f, "%svoid *const parts[] = {NULL, %s, NULL};\n", I, OUT);
    fprintf(c->f, "%s%s(%s3, %s, len, %s, %s, %s, parts, NULL);\n", I, k->cpu, CX, IN(0),
            prodx(c, &x->shape, 0, axis), prodx(c, &x->shape, axis + 1, x->shape.rank), DT);
}

/* same-shape binary: [mode,] n, dtype, a, b, y */
static void emit_binary(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s%s%s, %s, %s, %s, %s);\n", I, k->cpu, CX, k->mode ? k->mode : "",
            k->mode ? ", " : "", numelx(c, n), DT, IN(0), IN(1), OUT);
}

static void emit_bcast_forward(Cg *c, const Node *n, const KernelRow *k)
{
    emit_bcast_dims(c, INODE(0), INODE(1), I);
    fprintf(c->f, "%s%s(%s%s, &d, %s, %s, %s, %s);\n", I, k->cpu, CX, k->mode, DT, IN(0), IN(1),
            OUT);
}

/* dy, a, b; the op is the forward's (an attribute) */
static void emit_bcast_backward(Cg *c, const Node *n, const KernelRow *k)
{
    emit_bcast_dims(c, INODE(1), INODE(2), I);
    const char *ws = wsx(c, n, k, "RT_PASS_BACKWARD");
    if (ws_line(c, ws))
        return;
    fprintf(c->f, "%s%s(%s%s, &d, %s, %s, %s, %s, %s, %s, false, false, rt_ctx_ws(ctx, %s));\n", I,
            k->cpu, CX, node_enum(n, BCAST_OP) == BCAST_ADD ? "RT_BIN_ADD" : "RT_BIN_MUL", DT,
            IN(0), IN(1), IN(2), c->uses[n->id] ? OUT : "NULL", or_null(part_of(c, n, 1)), ws);
}

static void emit_scalar_forward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, (float)%.9g, %s);\n", I, k->cpu, CX, k->mode,
            numelx(c, n), DT, IN(0), node_float(n, SCALAR_SCALAR), OUT);
}

/* dy, x */
static void emit_scalar_backward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, (float)%.9g, %s, %s, false);\n", I, k->cpu, CX, k->mode,
            numelx(c, n), DT, IN(1), node_float(n, SCALAR_SCALAR), IN(0), OUT);
}

static void emit_unary_forward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, %s);\n", I, k->cpu, CX, k->mode, numelx(c, n), DT, IN(0),
            OUT);
}

/* dy, x: the derivative from the input (log) */
static void emit_unary_backward_x(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, NULL, %s, %s, false);\n", I, k->cpu, CX, k->mode,
            numelx(c, n), DT, IN(1), IN(0), OUT);
}

/* dy, y: the derivative from the output (sqrt) */
static void emit_unary_backward_y(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, NULL, %s, %s, %s, false);\n", I, k->cpu, CX, k->mode,
            numelx(c, n), DT, IN(1), IN(0), OUT);
}

/* dy, x, with the function named by the op attribute (_backward_unary) */
static void emit_unary_backward_op(Cg *c, const Node *n, const KernelRow *k)
{
    const AttrSpec *as = &op_info(n->op)->attrs[BWD_UNARY_OP];
    char mode[48] = "RT_UNARY_";
    size_t at = strlen(mode);
    for (const char *p = as->choices[node_enum(n, BWD_UNARY_OP)]; *p && at + 1 < sizeof mode; p++)
        mode[at++] = (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    mode[at] = 0;
    fprintf(c->f, "%s%s(%s, %s, %s, %s, NULL, %s, %s, false);\n", I, k->cpu, mode, numelx(c, n), DT,
            IN(1), IN(0), OUT);
}

/* x, a_min, a_max (clip) */
static void emit_clip_forward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, (float)%.9g, (float)%.9g, %s);\n", I, k->cpu, CX,
            numelx(c, n), DT, IN(0), node_float(n, CLIP_A_MIN), node_float(n, CLIP_A_MAX), OUT);
}

/* dy, x */
static void emit_clip_backward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, (float)%.9g, (float)%.9g, %s, %s, false);\n", I, k->cpu, CX,
            numelx(c, n), DT, IN(1), node_float(n, CLIP_A_MIN), node_float(n, CLIP_A_MAX), IN(0),
            OUT);
}

static void emit_cast(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, %s);\n", I, k->cpu, CX, numelx(c, n),
            rt_dtype(INODE(0)->dtype), IN(0), DT, OUT);
}

/* _layout: a 4-D value's bytes permuted between NCHW and NHWC (its shape is
 * the logical [N, C, H, W] either way) */
static void emit_layout(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, %s, %s, %s);\n", I, k->cpu, CX, dimx(c, n->shape.d[0]),
            prodx(c, &n->shape, 1, 2), prodx(c, &n->shape, 2, 4), DT, IN(0), OUT,
            node_enum(n, LAYOUT_TO) == LAYOUT_NHWC ? "RT_LAYOUT_NHWC" : "RT_LAYOUT_NCHW");
}

/* outer, len, inner around the softmax axis of x */
static void softmax_split(Cg *c, const Node *n, const Node *x, const char **o, const char **l,
                          const char **in)
{
    int64_t axis = node_int(n, SOFTMAX_AXIS);
    if (axis < 0)
        axis += x->shape.rank;
    axis_split(c, &x->shape, (int)axis, o, l, in);
}

static void emit_softmax_forward(Cg *c, const Node *n, const KernelRow *k)
{
    const char *o, *l, *in;
    softmax_split(c, n, INODE(0), &o, &l, &in);
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, %s, %s);\n", I, k->cpu, CX, o, l, in, DT, IN(0), OUT);
}

/* dy, y */
static void emit_softmax_backward(Cg *c, const Node *n, const KernelRow *k)
{
    const char *o, *l, *in;
    softmax_split(c, n, INODE(1), &o, &l, &in);
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, %s, %s, %s, false);\n", I, k->cpu, CX, o, l, in, DT,
            IN(1), IN(0), OUT);
}

static void emit_reduce_forward(Cg *c, const Node *n, const KernelRow *k)
{
    reduce_dims(c, n, INODE(0), I);
    const char *ws = wsx(c, n, k, "RT_PASS_FORWARD");
    if (!ws_line(c, ws))
        fprintf(c->f, "%s%s(%s&d, %s, %s, %s, rt_ctx_ws(ctx, %s));\n", I, k->cpu, CX, DT, IN(0),
                OUT, ws);
}

/* dy, x (for its shape only) */
static void emit_reduce_backward(Cg *c, const Node *n, const KernelRow *k)
{
    reduce_dims(c, n, INODE(1), I);
    fprintf(c->f, "%s%s(%s&d, %s, %s, %s, false);\n", I, k->cpu, CX, DT, IN(0), OUT);
}

/* data in its dtype (16-bit where the fuse pass folded its cast in), prob */
static void emit_smo_forward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%s%s(%s%s, %s, %s, %s, %s, %s);\n", I, k->cpu, CX, dimx(c, n->shape.d[0]),
            dimx(c, n->shape.d[1]), rt_dtype(INODE(0)->dtype), IN(0), DT, OUT);
}

/* prob, label; the loss scale is the step state's (the device's); dx in the node's dtype
 * (16-bit where the fuse pass folded the cast of the gradient in) */
static void emit_smo_backward(Cg *c, const Node *n, const KernelRow *k)
{
    fprintf(c->f, "%sconst RtSmoParams p = {.grad_scale = (float)%.9g, .smooth_alpha = (float)%.9g, .use_ignore = %s, "
                  ".ignore_label = (float)%.9g, .normalization = %d};\n",
            I, node_float(n, SMO_GRAD_SCALE), node_float(n, SMO_SMOOTH_ALPHA),
            node_bool(n, SMO_USE_IGNORE) ? "true" : "false", node_float(n, SMO_IGNORE_LABEL),
            node_enum(n, SMO_NORMALIZATION));
    fprintf(c->f,
            "%s%s(%s%s, %s, %s, %s, (const float *)%s, &p, ctx->step_state, %s, %s, false);\n", I,
            k->cpu, CX, dimx(c, n->shape.d[0]), dimx(c, n->shape.d[1]), rt_dtype(INODE(0)->dtype),
            IN(0), IN(1), DT, OUT);
}

#undef I

static EmitFn *const emitters[OP_COUNT] = {
#define KERNEL(id, family, cpu, ws, mode, cuda, overwrites, unread, vectorized) \
    [OP_##id] = emit_##family,
#include "kernels.def"
#undef KERNEL
};

/* The name of CPU workspace sizer ws in the CUDA runtime: rt_ -> rt_cuda_
 * (rt_conv_workspace_bytes -> rt_cuda_conv_workspace_bytes). */
static const char *cuda_sizer(Cg *c, const char *ws)
{
    if (strncmp(ws, "rt_", 3) != 0)
        DIE("codegen: the workspace sizer %s is not an rt_ function", ws);
    return arena_printf(&c->a, "rt_cuda_%s", ws + 3);
}

/* n's calls, by its row of the kernel table.  A CUDA program's printers get
 * the row with the cuda column's function (and the sizer's CUDA twin) in
 * place of the CPU's: the twins take the same arguments (rt_cuda.h), so the
 * printers never ask which target they print for. */
static void emit_op(Cg *c, const Node *n)
{
    const KernelRow *k = kernel_row(n->op);
    KernelRow cu;
    if (c->kernels == TARGET_CUDA && k->has) {
        cu = *k;
        cu.cpu = k->cuda;
        cu.ws = k->ws ? cuda_sizer(c, k->ws) : NULL;
        k = &cu;
    }
    if (!k->has || !emitters[n->op] || !k->cpu) {
        node_error(c->g, n, "the C backend has no kernel for %s", op_info(n->op)->name);
        c->ok = false;
        return;
    }
    emitters[n->op](c, n, k);
}

/* ---- values and tables ---------------------------------------------------- */

/* The C expression of each node's data in graph g (which: 0 the training
 * graph, 1 the inference graph), from the program's buffers. */
static void assign_values(Cg *c, const Graph *g, int which)
{
    c->g = g;
    c->val = arena_alloc(&c->a, sizeof(char *) * (size_t)(g->nnodes + 1));
    c->buf = c->prog->node_buf[which];
    for (int i = 0; i < g->nnodes; i++) {
        int b = c->buf[i];
        c->val[i] = b >= 0 ? arena_printf(&c->a, "B(%d)", b)
                  : b <= -2 ? arena_printf(&c->a, "ctx->master[%d]", -2 - b) : NULL;
    }
    c->parts = arena_alloc(&c->a, sizeof(char *) * (size_t)(g->nnodes + 1) * 4);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op == OP_part && node_int(n, PART_INDEX) < 4)
            c->parts[n->in[0] * 4 + node_int(n, PART_INDEX)] = c->val[i];
    }
    /* a result's readers: part nodes read the other results of a node with
     * several, not its own value (so conv1's unused data gradient is skipped) */
    free(c->uses);
    c->uses = graph_use_counts(g);
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_part)
            c->uses[g->nodes[i]->in[0]]--;
}

/* s as a C string literal.  s comes from the model file: every byte outside
 * printable ASCII becomes a three-digit octal escape (so a following digit
 * cannot join it), and ", \\ and ? are escaped (so that no trigraph, two
 * question marks and a character, can form under -std=c11).  Whatever s
 * holds, the literal ends where this function says. */
static void c_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\' || *p == '?')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p > 0x7e)
            fprintf(f, "\\%03o", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* After train call i: the parameters whose gradients it completes, by
 * gradient buffer (the kvstore pass's order), for the MPI engine to start
 * their buckets' all-reduce while backward goes on.  One test of a NULL
 * pointer when no hook is set. */
static void emit_grad_ready(Cg *c, int i)
{
    const Program *p = c->prog;
    int n = 0, prev = -1;
    for (;;) { /* the next larger gradient buffer completed here */
        int k = -1;
        for (int q = 0; q < p->nparams; q++)
            if (c->ready[q] == i && p->param_grad[q] > prev &&
                (k < 0 || p->param_grad[q] < p->param_grad[k]))
                k = q;
        if (k < 0)
            break;
        fprintf(c->f, "%s            ctx->grad_ready(ctx, %d);\n",
                n++ ? "" : "        if (ctx->grad_ready) {\n", k);
        prev = p->param_grad[k];
    }
    if (n)
        fputs("        }\n", c->f);
}

/* The kvstore pass's buckets (a dist_sync or nccl placement) as parameter
 * indices, for the MPI and NCCL engines (RtModel.kv_*); nothing for any other placement, so a
 * program for one process is the same C with or without the pass. */
static bool emit_kv_buckets(Cg *c, const KvPlan *kv)
{
    const Program *p = c->prog;
    if (!kv || !kv->set || (kv->place != KV_DIST_SYNC && kv->place != KV_NCCL))
        return false;
    fputs("static const int kv_bucket_start[] = {0", c->f);
    for (int b = 0, at = 0; b < kv->nbuckets; b++)
        fprintf(c->f, ", %d", at += kv->buckets[b].nbufs);
    fputs("};\nstatic const int kv_bucket_params[] = {", c->f);
    for (int b = 0, n = 0; b < kv->nbuckets; b++)
        for (int j = 0; j < kv->buckets[b].nbufs; j++) {
            int k = 0;
            while (k < p->nparams && p->param_grad[k] != kv->buckets[b].bufs[j])
                k++;
            if (k == p->nparams) /* the pass placed a program lowered the same way */
                DIE("codegen: kvbucket %d names buffer %d, no parameter's gradient", b,
                    kv->buckets[b].bufs[j]);
            fprintf(c->f, "%s%d", n++ ? ", " : "", k);
        }
    fputs("};\n\n", c->f);
    return true;
}

/* ---- the first layer's form of the data input ----------------------------- */

/* The data input's chain at the start of step k (ir/program.c's
 * program_input_chain; runtime/program.h's RtInputForm): its calls and
 * last buffer into c->form[k].  A device that writes the batch there in
 * that form lets the step skip them. */
static void input_chain(Cg *c, StepKind k)
{
    c->form[k][0] = program_input_chain(c->prog, k, c->data, &c->form[k][1]);
}

/* RtModel.input_form's initializer, when a step has a chain (else nothing:
 * the C of a program without one is what it was) */
static void emit_input_form(Cg *c, FILE *out)
{
    static const StepKind steps[2] = {STEP_TRAIN, STEP_INFER};
    if (!c->form[STEP_TRAIN][0] && !c->form[STEP_INFER][0])
        return;
    fputs("    .input_form = {", out);
    for (int i = 0; i < 2; i++) {
        const int *f = c->form[steps[i]];
        const ProgBuffer *b = f[0] ? &c->prog->buf[f[1]] : NULL;
        if (b)
            fprintf(out, "%s{true, %d, %d, %s, %s}", i ? ", " : "", f[1], f[0], rt_dtype(b->dtype),
                    b->layout == LAYOUT_NHWC ? "true" : "false");
        else
            fputs(i ? ", {false, -1, 0, RT_F32, false}" : "{false, -1, 0, RT_F32, false}", out);
    }
    fputs("}, /* the batch's first-layer form (RtCtx.input_formed) */\n", out);
}

static void emit_function(Cg *c, const char *name, StepKind k)
{
    FILE *f = c->f;
    const ProgStep *st = &c->prog->step[k];
    if (k != STEP_MOVING)
        input_chain(c, k);
    fprintf(f, "static void %s(RtCtx *ctx)\n{\n    const int64_t N = ctx->batch;\n    (void)N;\n", name);
    for (int i = 0; i < st->ncalls; i++) {
        const ProgCall *call = &st->calls[i];
        const Node *n = c->g->nodes[call->node];
        char sb[160];
        /* the node's number, never its name: a name may hold a comment's end */
        fprintf(f, "    /* node %d: %s %s%s */\n%s    {\n", n->id, op_info(n->op)->name,
                dtype_short(n->dtype), shape_str(&n->shape, sb, sizeof sb),
                k != STEP_MOVING && i < c->form[k][0] ? "    if (!ctx->input_formed)\n" : "");
        emit_op(c, n);
        if (call->nout > 0 && call->out[0] >= 0 && k != STEP_MOVING) {
            fprintf(f, "        if (ctx->after_node)\n            ctx->after_node(ctx, %d, ", n->id);
            c_string(f, n->name);
            fputs(", ", f);
            c_string(f, op_info(n->op)->name);
            fprintf(f, ", %d);\n", call->out[0]);
        }
        if (k == STEP_TRAIN)
            emit_grad_ready(c, i);
        fputs("    }\n", f);
    }
    fputs("}\n\n", f);
}

/* name(ctx, N): the largest workspace a call of the graph being emitted asks
 * for at batch N, so that the runtime allocates it once, at start-up; a CUDA
 * program's sizers ask the libraries of ctx->cuda. */
static void emit_workspace(Cg *c, const char *name, StepKind k)
{
    FILE *f = c->f;
    fprintf(f,
            "static size_t %s(const RtCtx *ctx, int64_t N)\n{\n    size_t ws = 0;\n    "
            "(void)ctx;\n    (void)N;\n",
            name);
    c->ws_only = true;
    const ProgStep *st = &c->prog->step[k];
    for (int i = 0; i < st->ncalls; i++) {
        const Node *n = c->g->nodes[st->calls[i].node];
        if (!st->calls[i].workspace)
            continue;
        fprintf(f, "    /* node %d */\n    {\n", n->id);
        emit_op(c, n);
        fputs("    }\n", f);
    }
    c->ws_only = false;
    fputs("    return ws;\n}\n\n", f);
}

static const char *kind_enum(int k)
{
    static const char *const e[] = {"RT_PK_WEIGHT", "RT_PK_BIAS", "RT_PK_GAMMA", "RT_PK_BETA",
                                    "RT_PK_MOVING_MEAN", "RT_PK_MOVING_VAR", "RT_PK_OTHER"};
    return e[k];
}

static void emit_tables(Cg *c, const Graph *t)
{
    FILE *f = c->f;
    const Program *pr = c->prog;
    fputs("static const RtParam params[] = {\n", f);
    for (int i = 0; i < pr->nparams; i++) {
        const Node *p = graph_find(t, pr->buf[pr->param_buf[i]].name);
        if (!p || p->op != OP_Param)
            DIE("codegen: parameter %d is not a parameter of the training graph", i);
        fputs("    {", f);
        c_string(f, p->name);
        fprintf(f, ", %s, %s, %s, %d, {", kind_enum(node_param_kind(p)),
                rt_dtype(p->dtype), node_dtype_attr(p, PARAM_MASTER) == DT_F32 ? "true" : "false",
                p->shape.rank);
        for (int k = 0; k < p->shape.rank; k++)
            fprintf(f, "%s%lld", k ? ", " : "", (long long)p->shape.d[k]);
        fprintf(f, "}, %lld, ", (long long)checked_numel(&p->shape, 0, p->shape.rank));
        c_string(f, p->attrs[PARAM_INIT].s);
        /* the layout last: RtParam's trailing field (the schedule pass's) */
        fprintf(f, ", (float)%.9g, (float)%.9g, %d, %d, %s},\n",
                node_float(p, PARAM_WD_MULT), node_float(p, PARAM_LR_MULT), pr->param_buf[i],
                pr->param_grad[i], p->layout == LAYOUT_NHWC ? "RT_LAYOUT_NHWC" : "RT_LAYOUT_NCHW");
    }
    fputs("};\n\nstatic const RtBuffer buffers[] = {\n", f);
    for (int i = 0; i < pr->nbuf; i++) {
        const ProgBuffer *b = &pr->buf[i];
        fputs("    {", f);
        c_string(f, b->name);
        fprintf(f, ", %s, %lld, %lld, %s, %lld, %lld}, /* %d */\n", rt_dtype(b->dtype),
                (long long)b->elems.fixed, (long long)b->elems.per_sample,
                b->in_arena ? "true" : "false", (long long)b->offset.fixed,
                (long long)b->offset.per_sample, i);
    }
    fputs("};\n\n", f);
}

static int loss_head(const Graph *g)
{
    for (int i = 0; i < g->noutputs; i++)
        if (op_is_loss_head(g->nodes[g->outputs[i]]->op))
            return g->outputs[i];
    return -1;
}

/* The program's --version: the release of the ampc that wrote it (never a
 * git revision: the emitted C stays the same across commits), the model's
 * hash (cg_emit_set_model_hash), and ampc's command line, which only
 * ampc -o knows: it defines AMPC_BUILT_WITH when it compiles the C
 * (codegen/build.c), so the C is the same whatever the flags. */
static const char *info_hash;

void cg_emit_set_model_hash(const char *model_hash) { info_hash = model_hash; }

/* ampc -o defines it; a C file compiled by hand says so */
static const char built_with_default[] =
    "/* ampc -o defines AMPC_BUILT_WITH: its command line, for the program's --version */\n"
    "#ifndef AMPC_BUILT_WITH\n"
    "#define AMPC_BUILT_WITH \"(compiled by hand from ampc -S)\"\n"
    "#endif\n";

static void emit_build_info(FILE *out)
{
    fprintf(out, "    .ampc_version = \"%s\",\n", AMPC_VERSION);
    if (info_hash && *info_hash) {
        fputs("    .model_hash = ", out);
        c_string(out, info_hash);
        fputs(",\n", out);
    }
    fputs("    .built_with = AMPC_BUILT_WITH,\n", out);
}

static void emit_train_defaults(FILE *f, const Graph *g)
{
    fputs("static const char *const train_defaults[] = {\n", f);
    for (int i = 0; i < g->ntrain; i++) {
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        fprintf(m, "%s=", g->train[i].key);
        config_print(m, g->train[i].val);
        fclose(m);
        fputs("    ", f);
        c_string(f, text);
        fputs(",\n", f);
        free(text);
    }
    fputs("    NULL,\n};\n\n", f);
}

/* The first node of g the backend cannot run: a dtype it has no kernels
 * for (float64, the integer types), or a tensor whose element or byte count
 * per sample overflows int64 (a dump read with --from-ir is not re-inferred). */
static bool check_nodes(const Graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op == OP_bn_moving_update)
            continue; /* no value of its own */
        if (!rt_dtype(n->dtype)) {
            node_error(g, n, "the C backend supports float32, float16 and bfloat16 tensors; "
                             "'%s' is %s",
                       n->name, dtype_long(n->dtype));
            return false;
        }
        int64_t e;
        if (n->shape.rank >= 0 && (!shape_numel_per_sample(&n->shape, &e) ||
                                   __builtin_mul_overflow(e, (int64_t)dtype_size(n->dtype), &e))) {
            char b[160];
            node_error(g, n, "'%s' is too large: %s %s%s holds more than %lld bytes per sample",
                       n->name, op_info(n->op)->name, dtype_short(n->dtype),
                       shape_str(&n->shape, b, sizeof b), (long long)INT64_MAX);
            return false;
        }
    }
    return true;
}

/* A program that only predicts (autodiff_predict): a data input, and the
 * inference graph's one output in float32 (what --predict writes). */
/* A program reads its data and labels as float32 (the data sources, the
 * --predict .npy, runtime/trainer.c): an input of another dtype is refused
 * here, at its declaration, not when the program starts (issue 21). */
static bool check_inputs(const Graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op != OP_Input || n->dtype == DT_F32)
            continue;
        bool label = node_enum(n, INPUT_ROLE) == INPUT_LABEL;
        diag_error(g->diag, n->loc,
                   "%s input '%s' is %s: a program reads its data and labels as float32 (the "
                   "data sources, --predict's .npy); declare it float32%s",
                   label ? "the label" : "the data", n->name, dtype_long(n->dtype),
                   label ? ""
                         : " and cast it in the model (Cast(x, dtype=float16)), or give "
                           "--amp");
        return false;
    }
    return true;
}

static bool check_predict(const Graph *train)
{
    const Graph *infer = train->infer;
    bool data = false;
    for (int i = 0; i < infer->nnodes; i++)
        data |= infer->nodes[i]->op == OP_Input && node_enum(infer->nodes[i], INPUT_ROLE) != INPUT_LABEL;
    if (!data) {
        diag_plain_error(train->diag, "code generation needs a data input");
        return false;
    }
    if (infer->noutputs != 1 || infer->nodes[infer->outputs[0]]->dtype != DT_F32)
        DIE("codegen: a predicting model's inference graph has one float32 output (autodiff_predict)");
    return check_inputs(infer) && check_nodes(infer);
}

bool cg_check(const Graph *train)
{
    const Graph *infer = train->infer;
    if (train->info.predict_only && infer)
        return check_predict(train);
    if (loss_head(train) < 0 || !infer || loss_head(infer) < 0) {
        diag_plain_error(train->diag, "code generation needs a trained model with a loss head "
                                      "(SoftmaxOutput)");
        return false;
    }
    bool data = false, label = false;
    for (int i = 0; i < train->nnodes; i++) {
        const Node *n = train->nodes[i];
        if (n->op == OP_Input && node_enum(n, INPUT_ROLE) == INPUT_LABEL)
            label = true;
        else if (n->op == OP_Input)
            data = true;
    }
    if (!data || !label) {
        diag_plain_error(train->diag, "code generation needs a data input and a label input");
        return false;
    }
    return check_inputs(train) && check_nodes(train) && check_nodes(infer);
}

/* Whether every call of prog has a function in the target's column of the
 * kernel table; else an error at the first node of each op that has none
 * (the CPU column is complete: a CUDA plan may run on it, --kernels=cpu). */
static bool check_target(const Program *prog, const Graph *train, Target t)
{
    if (t != TARGET_CUDA)
        return true;
    bool said[OP_COUNT] = {0}, ok = true;
    for (int k = 0; k < STEP_COUNT; k++) {
        const Graph *g = k == STEP_INFER ? train->infer : train;
        for (int i = 0; i < prog->step[k].ncalls; i++) {
            const Node *n = g->nodes[prog->step[k].calls[i].node];
            const KernelRow *r = kernel_row(n->op);
            if (!r->has || r->cuda || said[n->op])
                continue;
            said[n->op] = true;
            ok = false;
            node_error(g, n, "--target=%s: no CUDA kernel for %s (ir/kernels.def's cuda column); "
                             "compile for the CPU (--target=cpu)",
                       target_name(t), op_info(n->op)->name);
        }
    }
    return ok;
}

bool cg_emit_c(FILE *out, const Graph *train, const CgPlans *plans)
{
    if (!cg_check(train))
        return false;
    Program prog;
    lower(train, plans, &prog);
    /* the program proved from itself, as a dump read back would be */
    if (!program_verify(&prog, stderr))
        DIE("the lowered program does not verify");
    Target kernels = plans ? plans->kernels : TARGET_CPU;
    if (!check_target(&prog, train, kernels)) {
        program_free(&prog);
        return false;
    }
    Cg c = {.f = out, .train = train, .prog = &prog, .kernels = kernels, .ok = true};
    arena_init(&c.a);
    c.ready = arena_alloc(&c.a, sizeof(int) * ((size_t)prog.nparams + 1));
    program_grad_ready(&prog, c.ready);
    const Graph *infer = train->infer;
    bool predict = train->info.predict_only;
    /* a program that only predicts has no train step: its inputs and
     * output are the inference graph's */
    const Graph *io = predict ? infer : train;
    int head = predict ? -1 : loss_head(train);
    int ihead = predict ? infer->outputs[0] : loss_head(infer);
    assign_values(&c, io, predict ? 1 : 0);
    int *tbuf = c.buf;
    int data = -1, label = -1;
    const Node *data_node = NULL;
    for (int i = 0; i < io->nnodes; i++) {
        const Node *n = io->nodes[i];
        if (n->op != OP_Input)
            continue;
        if (node_enum(n, INPUT_ROLE) == INPUT_LABEL)
            label = tbuf[i];
        else if (data < 0)
            data = tbuf[i], data_node = n;
    }
    c.data = data;
    if (kernels == TARGET_CUDA) /* the kernels: rt_cuda.h; the device: program_cuda.h */
        fprintf(out,
                "/* Generated by ampc %s: a %s program for an NVIDIA GPU (model: see\n"
                " * ampc_model.name below).\n"
                " * Do not edit; regenerate with ampc -S.  The runtime (runtime/program.h)\n"
                " * provides main(), data, the optimizer and logging; the CUDA runtime\n"
                " * (runtime/cuda/) the kernels and the device. */\n"
                "#include \"program.h\"\n#include \"cuda/rt_cuda.h\"\n"
                "#include \"cuda/program_cuda.h\"\n\n#define B(i) (ctx->buf[i])\n%s\n",
                AMPC_VERSION, predict ? "predicting (no loss head: no train step)" : "training",
                built_with_default);
    else
        fprintf(out,
                "/* Generated by ampc %s: a %s program for the CPU (model: see\n"
                " * ampc_model.name below).\n"
                " * Do not edit; regenerate with ampc -S.  The runtime (runtime/program.h)\n"
                " * provides main(), data, the optimizer and logging. */\n"
                "#include \"program.h\"\n\n#define B(i) (ctx->buf[i])\n%s\n",
                AMPC_VERSION, predict ? "predicting (no loss head: no train step)" : "training",
                built_with_default);
    int prob_train = -1;
    if (!predict) {
        emit_function(&c, "train_step", STEP_TRAIN);
        emit_function(&c, "moving_update", STEP_MOVING);
        emit_workspace(&c, "train_workspace", STEP_TRAIN);
        prob_train = tbuf[head];
        assign_values(&c, infer, 1);
    }
    emit_function(&c, "infer_step", STEP_INFER);
    emit_workspace(&c, "infer_workspace", STEP_INFER);
    if (predict)
        fputs("static size_t workspace_bytes(const RtCtx *ctx, int64_t N) { return "
              "infer_workspace(ctx, N); }\n\n",
              out);
    else
        fputs("static size_t workspace_bytes(const RtCtx *ctx, int64_t N)\n{\n"
              "    size_t t = train_workspace(ctx, N), i = infer_workspace(ctx, N);\n"
              "    return t > i ? t : i;\n}\n\n",
              out);
    int prob_infer = c.buf[ihead];
    /* the loss head's classes, or the per-sample size of the output */
    const Node *y = predict ? infer->nodes[ihead] : train->nodes[head];
    int64_t classes = predict ? checked_numel(&y->shape, 1, y->shape.rank) : y->shape.d[1];
    emit_tables(&c, train);
    emit_train_defaults(out, train);
    bool kv = !predict && emit_kv_buckets(&c, plans ? plans->kv : NULL);
    fputs("const RtModel ampc_model = {\n    .name = ", out);
    c_string(out, train->model);
    fputs(",\n", out);
    fprintf(out, "    .nparams = %d,\n    .params = params,\n    .nbuffers = %d,\n    .buffers = buffers,\n",
            prog.nparams, prog.nbuf);
    fprintf(out, "    .arena_fixed = %lld,\n    .arena_per_sample = %lld,\n", (long long)prog.arena.fixed,
            (long long)prog.arena.per_sample);
    fprintf(out, "    .data = %d,\n    .label = %d,\n    .prob_train = %d,\n    .prob_infer = %d,\n", data,
            label, prob_train, prob_infer);
    fprintf(out, "    .data_rank = %d,\n    .data_shape = {", data_node ? data_node->shape.rank - 1 : 0);
    for (int k = 1; data_node && k < data_node->shape.rank; k++)
        fprintf(out, "%s%lld", k > 1 ? ", " : "", (long long)data_node->shape.d[k]);
    fprintf(out, "},\n    .classes = %lld,\n    .amp = \"%s\",\n", (long long)classes,
            train->info.amp ? dtype_long(train->info.amp) : "off");
    fprintf(out, "    .train_defaults = train_defaults,\n    .workspace_bytes = workspace_bytes,\n"
                 "    .train_step = %s,\n    .moving_update = %s,\n    .infer_step = infer_step,\n",
            predict ? "NULL" : "train_step", predict ? "NULL" : "moving_update");
    if (kv)
        fprintf(out, "    .kv_nbuckets = %d,\n    .kv_bucket_start = kv_bucket_start,\n"
                     "    .kv_bucket_params = kv_bucket_params,\n", plans->kv->nbuckets);
    /* the placement where the device opens for it (a GPU program) or the
     * ranks compare it (across processes); a placement in one process
     * leaves the C as it is without the pass */
    const KvPlan *kvp = plans && plans->kv && plans->kv->set ? plans->kv : NULL;
    bool across = kvp && (kvp->place == KV_DIST_SYNC || kvp->place == KV_NCCL);
    if (kvp && (kernels == TARGET_CUDA || across))
        fprintf(out, "    .kv_place = %d, /* %s */\n", (int)kvp->place + 1,
                kv_place_name(kvp->place));
    if (kernels == TARGET_CUDA)
        fputs("    .open_device = rt_cuda_open_device,\n"
              "    .check_device = rt_cuda_check_model,\n", out);
    if (across)
        fprintf(out, "    .kv_wire = \"%s\",\n", dtype_long(kvp->wire));
    /* zeros until cg_stamp_build_id writes the hash of this text there */
    fprintf(out, "    .build_id = 0x%016llxull, %s\n", 0ull, BUILD_ID_MARK);
    emit_build_info(out);
    emit_input_form(&c, out);
    fputs("};\n", out);
    bool ok = c.ok;
    free(c.uses);
    arena_free(&c.a);
    program_free(&prog);
    return ok;
}

void cg_stamp_build_id(char *text, size_t len)
{
    static const char mark[] = BUILD_ID_MARK;
    char *at = NULL;
    for (char *p = text; (p = memmem(p, len - (size_t)(p - text), mark, sizeof mark - 1));
         p += sizeof mark - 1)
        at = p; /* the last: RtModel's initializer ends the file */
    if (!at || at - text < 23 || memcmp(at - 23, "0x0000000000000000ull, ", 23) != 0)
        DIE("codegen: no build id to stamp in the emitted C");
    /* FNV-1a 64 of the text (the zeros in place), then of the version */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)text[i]) * 0x100000001b3ull;
    for (const char *v = AMPC_VERSION; *v; v++)
        h = (h ^ (unsigned char)*v) * 0x100000001b3ull;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    memcpy(at - 21, hex, 16);
}
