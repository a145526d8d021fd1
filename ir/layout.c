/* layout.c - the layout rules of each op (docs/codegen.md, "Layouts"): one
 * table, read by the pass that chooses layouts (passes/layout.c) and by the
 * checks a graph after it is held to (layout_check, from ir/verify.c).
 *
 * Each op is one of:
 *   canonical  reads and writes NCHW: everything that indexes a value by its
 *              logical shape (Flatten, Reshape, FullyConnected, Concat,
 *              broadcasts, reductions, softmax, the loss head), graph leaves
 *              that are inputs, and Dropout, whose mask is drawn per element
 *              in the canonical order (in NHWC it would drop other elements
 *              than the CPU program does)
 *   follow     computes per element or per channel, so it runs in whatever
 *              layout its data arrives in: the slots `slots` names and its
 *              value share one layout (elementwise ops, activations, casts,
 *              scalar ops, clip, the fused add+relu, BatchNorm on axis 1
 *              (and fused with relu, or with the residual add and relu),
 *              Pooling over 2 spatial dims, and their backwards)
 *   anchor     follows as above, and is where NHWC starts: a 2-D
 *              convolution (and its backward) on 16-bit data, whose weight
 *              is then KRSC
 *   view       names another value's bytes: part (a result of its node),
 *              grad_of (a parameter's gradient, in the parameter's layout),
 *              param_master (the fp32 master, in its parameter's layout)
 *   convert    _layout, made by the pass
 * A parameter (a leaf) takes the layout its readers agree on (the pass). */
#include "ir.h"

#include <string.h>

const char *layout_name(Layout l) { return l == LAYOUT_NHWC ? "nhwc" : "nchw"; }

#define S(k) (1u << (k))
#define FOLLOW(slots)                                                                              \
    {                                                                                              \
        LC_FOLLOW, slots                                                                           \
    }
static const LayoutRule rules[OP_COUNT] = {
    [OP_Convolution] = {LC_ANCHOR, S(0) | S(1)},                  /* data, weight */
    [OP__backward_Convolution] = {LC_ANCHOR, S(0) | S(1) | S(2)}, /* dy, x, weight */
    [OP_BatchNorm] = FOLLOW(S(0)),
    [OP__fused_BatchNorm_relu] = FOLLOW(S(0)),
    [OP__backward_BatchNorm] = FOLLOW(S(0) | S(1)),                   /* dy, x */
    [OP__backward_fused_BatchNorm_relu] = FOLLOW(S(0) | S(1) | S(2)), /* dy, y, x */
    [OP__fused_BatchNorm_add_relu] = FOLLOW(S(0) | S(5)),             /* x, the shortcut */
    [OP__backward_fused_BatchNorm_add_relu] = FOLLOW(S(0) | S(1) | S(2)),
    /* conv_bn_stats: the statistics (rank 2) are canonical */
    [OP__fused_Convolution_stats] = {LC_ANCHOR, S(0) | S(1)},
    [OP__fused_BatchNorm_stats] = FOLLOW(S(0)),
    [OP__fused_BatchNorm_relu_stats] = FOLLOW(S(0)),
    [OP__fused_BatchNorm_add_relu_stats] = FOLLOW(S(0) | S(5)),
    [OP_Pooling] = FOLLOW(S(0)),
    [OP__backward_Pooling] = FOLLOW(S(0) | S(1)),
    [OP_Activation] = FOLLOW(S(0)),
    [OP__backward_Activation] = FOLLOW(S(0) | S(1) | S(2)),
    [OP_LeakyReLU] = FOLLOW(S(0)), /* prelu's gamma is 1-D */
    [OP__backward_LeakyReLU] = FOLLOW(S(0) | S(1)),
    [OP_elemwise_add] = FOLLOW(S(0) | S(1)),
    [OP_elemwise_sub] = FOLLOW(S(0) | S(1)),
    [OP_elemwise_mul] = FOLLOW(S(0) | S(1)),
    [OP__fused_add_relu] = FOLLOW(S(0) | S(1)),
    [OP__backward_fused_add_relu] = FOLLOW(S(0) | S(1)),
    [OP__plus_scalar] = FOLLOW(S(0)),
    [OP__minus_scalar] = FOLLOW(S(0)),
    [OP__rminus_scalar] = FOLLOW(S(0)),
    [OP__mul_scalar] = FOLLOW(S(0)),
    [OP__div_scalar] = FOLLOW(S(0)),
    [OP__rdiv_scalar] = FOLLOW(S(0)),
    [OP__backward_rdiv_scalar] = FOLLOW(S(0) | S(1)),
    [OP_exp] = FOLLOW(S(0)),
    [OP_log] = FOLLOW(S(0)),
    [OP_sqrt] = FOLLOW(S(0)),
    [OP__backward_log] = FOLLOW(S(0) | S(1)),
    [OP__backward_sqrt] = FOLLOW(S(0) | S(1)),
    [OP_clip] = FOLLOW(S(0)),
    [OP__backward_clip] = FOLLOW(S(0) | S(1)),
    [OP_Cast] = FOLLOW(S(0)),
    [OP_amp_cast] = FOLLOW(S(0)),
    [OP_part] = {LC_VIEW, 0},
    [OP_grad_of] = {LC_VIEW, S(0)}, /* the gradient; slot 1 only names the parameter */
    [OP_param_master] = {LC_VIEW, 0},
    [OP__layout] = {LC_CONVERT, 0},
    [OP_Param] = {LC_LEAF, 0},
};
#undef FOLLOW
#undef S

const LayoutRule *layout_rule(OpKind k) { return &rules[k]; }

bool layout_same_bytes(const Shape *s)
{
    return s->rank == 4 && (s->d[1] == 1 || (s->d[2] == 1 && s->d[3] == 1));
}

/* Whether n's op may compute in NHWC with these attributes and shapes: a
 * 4-D value, BatchNorm over axis 1, a convolution over 2 spatial dims. */
bool layout_op_allows(const Graph *g, const Node *n)
{
    const LayoutRule *r = layout_rule(n->op);
    if (r->cls != LC_FOLLOW && r->cls != LC_ANCHOR)
        return false;
    if (n->shape.rank != 4)
        return false;
    for (int j = 0; j < n->nin; j++)
        if ((r->slots >> j & 1) && g->nodes[n->in[j]]->shape.rank != 4)
            return false;
    switch (n->op) {
    case OP_BatchNorm:
    case OP__fused_BatchNorm_relu:
    case OP__backward_BatchNorm:
    case OP__backward_fused_BatchNorm_relu:
    case OP__fused_BatchNorm_add_relu:
    case OP__backward_fused_BatchNorm_add_relu:
    case OP__fused_BatchNorm_stats:
    case OP__fused_BatchNorm_relu_stats:
    case OP__fused_BatchNorm_add_relu_stats:
        return node_int(n, BN_AXIS) == 1 || node_int(n, BN_AXIS) == -3;
    default: return true;
    }
}

/* The layout n reads input slot j in, given the layouts of n and its
 * inputs; LAYOUT_COUNT where the slot has none (a view's source). */
Layout layout_slot_wants(const Graph *g, const Node *n, int j)
{
    const LayoutRule *r = layout_rule(n->op);
    switch (r->cls) {
    case LC_FOLLOW:
    case LC_ANCHOR: return (r->slots >> j & 1) ? n->layout : LAYOUT_NCHW;
    case LC_VIEW:
        if (n->op == OP_grad_of)
            return j == 0 ? g->nodes[n->in[1]]->layout : LAYOUT_COUNT;
        return LAYOUT_COUNT;
    case LC_CONVERT: return LAYOUT_COUNT;
    default: return LAYOUT_NCHW;
    }
}

static bool lay_error(const Graph *g, const Node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool lay_error(const Graph *g, const Node *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_verror_in(g->diag, n->loc, n->frame, fmt, ap);
    va_end(ap);
    return false;
}

/* n's layout against the table, its inputs' and the stage: reported at n
 * through g's Diag. */
bool layout_check(const Graph *g, const Node *n, bool scheduled)
{
    const char *op = op_info(n->op)->name;
    if (!scheduled && (n->layout != LAYOUT_NCHW || n->op == OP__layout))
        return lay_error(g, n,
                         "'%s': layouts are chosen by the schedule pass, but this is a "
                         "graph before it",
                         n->name);
    if (n->layout != LAYOUT_NCHW && n->shape.rank != 4)
        return lay_error(g, n,
                         "'%s' is nhwc but has %d dimensions (only a 4-D value has an "
                         "NHWC layout)",
                         n->name, n->shape.rank);
    const LayoutRule *r = layout_rule(n->op);
    if (n->layout != LAYOUT_NCHW) {
        bool may = r->cls == LC_VIEW || r->cls == LC_CONVERT || r->cls == LC_LEAF ||
                   layout_op_allows(g, n);
        if (!may || n->op == OP_Input)
            return lay_error(g, n, "'%s' is nhwc, but %s %s", n->name, op,
                             r->cls == LC_FOLLOW || r->cls == LC_ANCHOR
                                 ? "with these attributes computes in NCHW only"
                                 : "reads and writes the canonical layout (NCHW) only");
    }
    if (n->op == OP__layout) {
        const Node *x = g->nodes[n->in[0]];
        Layout to = (Layout)node_enum(n, LAYOUT_TO);
        if (n->layout != to)
            return lay_error(g, n, "'%s' converts to %s but is declared %s", n->name,
                             layout_name(to), layout_name(n->layout));
        if (x->layout == to)
            return lay_error(g, n, "'%s' converts '%s' to %s, the layout it already has", n->name,
                             x->name, layout_name(to));
        return true;
    }
    if (n->op == OP_part || n->op == OP_param_master) {
        const Node *src = g->nodes[n->in[0]];
        if (n->layout != LAYOUT_NCHW && src->layout != n->layout)
            return lay_error(g, n, "'%s' is nhwc, but '%s', whose %s it is, is %s", n->name,
                             src->name, n->op == OP_part ? "result" : "master",
                             layout_name(src->layout));
        if (n->op == OP_param_master && src->layout != n->layout)
            return lay_error(g, n, "'%s' is %s, but the master of '%s' is kept in its layout, %s",
                             n->name, layout_name(n->layout), src->name, layout_name(src->layout));
        return true;
    }
    if (n->op == OP_grad_of && n->layout != g->nodes[n->in[1]]->layout)
        return lay_error(g, n, "'%s' is %s, but the parameter '%s' is %s", n->name,
                         layout_name(n->layout), g->nodes[n->in[1]]->name,
                         layout_name(g->nodes[n->in[1]]->layout));
    for (int j = 0; j < n->nin; j++) {
        Layout want = layout_slot_wants(g, n, j);
        const Node *x = g->nodes[n->in[j]];
        if (want != LAYOUT_COUNT && x->layout != want && !layout_same_bytes(&x->shape))
            return lay_error(g, n,
                             "%s '%s' reads '%s' (input %d) as %s, but it is %s (a _layout "
                             "conversion belongs between them)",
                             op, n->name, x->name, j, layout_name(want), layout_name(x->layout));
    }
    return true;
}
