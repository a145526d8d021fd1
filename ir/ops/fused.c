/* fused.c - the ops the fuse pass makes (passes/fuse.c): each runs two ops
 * of the unfused graph as one kernel, rounding where the two would (docs/
 * codegen.md, "Fusions"); a cast absorbed is a conversion on reading or
 * writing.  Their shape rules are the unfused ops' ones (in
 * ops.def); the backward ones, as every backward op, give the dtype too. */
#include "ops_impl.h"

/* `absorbed`: the name of the node the fused one took in (the fused node
 * keeps the name of the node whose value it gives), so that a dump can be
 * expanded back into the unfused graph and checked (fuse_check). */
#define ABSORBED_SPEC {"absorbed", AT_STR, true, NULL, 0, 0, NULL}

const AttrSpec fused_bn_attrs[] = {
    BN_ATTR_SPECS,
    ABSORBED_SPEC,
    ATTR_END,
};
const AttrSpec fused_add_attrs[] = {
    ABSORBED_SPEC,
    ATTR_END,
};
/* BatchNorm + add + relu, named after the relu: the add's name (which the
 * _fused_add_relu it grew from absorbed), then the BatchNorm's */
const AttrSpec fused_bnadd_attrs[] = {
    BN_ATTR_SPECS,
    {"absorbed_add", AT_STR, true, NULL, 0, 0, NULL},
    ABSORBED_SPEC,
    ATTR_END,
};
/* BatchNorm's five, then the residual add's other input */
const SlotSpec bnadd_slots[] = {
    BN_SLOT_SPECS,
    {"shortcut", SLOT_DATA, NULL, false},
    SLOT_END,
};

/* SoftmaxOutput reading 16-bit logits: the widening cast's name absorbed */
const AttrSpec fused_smo_attrs[] = {
    SMO_ATTR_SPECS,
    ABSORBED_SPEC,
    ATTR_END,
};
/* SoftmaxOutput's backward writing its gradient in `dtype` (the narrowing
 * cast's); the backward's own name absorbed */
const AttrSpec fused_smo_bwd_attrs[] = {
    SMO_ATTR_SPECS,
    {"dtype", AT_DTYPE, true, NULL, 0, 0, NULL},
    ABSORBED_SPEC,
    ATTR_END,
};

/* relu(BatchNorm) backward: the relu's incoming gradient and output, then
 * what _backward_BatchNorm reads */
const SlotSpec fbnbwd_slots[] = {
    {"dy", SLOT_DATA, NULL, false},        {"y", SLOT_DATA, NULL, false},
    {"x", SLOT_DATA, NULL, false},         {"gamma", SLOT_DATA, NULL, false},
    {"save_mean", SLOT_DATA, NULL, false}, {"save_invstd", SLOT_DATA, NULL, false},
    SLOT_END};
/* relu backward from the output alone (the add's result is not kept) */
const SlotSpec frelubwd_slots[] = {
    {"dy", SLOT_DATA, NULL, false}, {"y", SLOT_DATA, NULL, false}, SLOT_END};

_Static_assert(FUSED_BN_ABSORBED == 5 && FUSED_BN_NATTRS == 6, "fused_bn_attrs and ir.h agree");
_Static_assert(FUSED_BNADD_ADD == 5 && FUSED_BNADD_ABSORBED == 6 && FUSED_BNADD_NATTRS == 7,
               "fused_bnadd_attrs and ir.h agree");
_Static_assert(FUSED_SMO_ABSORBED == 5 && FUSED_SMO_NATTRS == 6 && FUSED_SMO_BWD_DTYPE == 5 &&
                   FUSED_SMO_BWD_NATTRS == 7,
               "fused_smo_attrs, fused_smo_bwd_attrs and ir.h agree");

static bool is_16bit(DType t) { return t == DT_F16 || t == DT_BF16; }

/* SoftmaxOutput's shape; fp32 from 16-bit logits, which its kernel widens
 * on reading (exactly, as the cast it absorbed did).  Fp32 logits mean
 * there was no cast to fold: a dump that says so is refused. */
bool fused_smo_shape(Graph *g, Node *n)
{
    const Node *x = in_node(g, n, 0);
    if (!is_16bit(x->dtype)) {
        node_error(g, n, "'%s': %s reads 16-bit logits (the cast to float32 folded in), but "
                         "'%s' is %s",
                   n->name, op_info(n->op)->name, x->name, dtype_long(x->dtype));
        return false;
    }
    n->dtype = DT_F32;
    return smo_shape(g, n);
}

/* The gradient of fp32 probabilities, like them, in the 16-bit `dtype` it
 * is rounded to once (the narrowing cast it absorbed). */
bool fused_smo_bwd_shape(Graph *g, Node *n)
{
    const Node *prob = in_node(g, n, 0);
    DType to = node_dtype_attr(n, FUSED_SMO_BWD_DTYPE);
    if (prob->dtype != DT_F32 || !is_16bit(to)) {
        node_error(g, n, "'%s': %s narrows the gradient of float32 probabilities to float16 "
                         "or bfloat16, but '%s' is %s and dtype=%s",
                   n->name, op_info(n->op)->name, prob->name, dtype_long(prob->dtype),
                   dtype_long(to));
        return false;
    }
    n->shape = prob->shape;
    n->dtype = to;
    return true;
}

/* BatchNorm's shape; the shortcut has it and the dtype too (the add's rule,
 * which refuses broadcasting) */
bool fused_bnadd_shape(Graph *g, Node *n)
{
    if (!bn_shape(g, n))
        return false;
    const Node *x = in_node(g, n, 0), *sc = in_node(g, n, 5);
    if (!shape_equal(&sc->shape, &x->shape) || sc->dtype != x->dtype) {
        node_error(g, n,
                   "'%s': %s adds '%s' to BatchNorm's value of '%s', which has another "
                   "shape or dtype",
                   n->name, op_info(n->op)->name, sc->name, x->name);
        return false;
    }
    return true;
}

bool like_in2_shape(Graph *g, Node *n)
{
    const Node *x = in_node(g, n, 2);
    n->shape = x->shape;
    n->dtype = x->dtype;
    return true;
}

/* BatchNorm's four per element and the relu's one */
double fused_bn_flops(const Graph *g, const Node *n) { return bn_flops(g, n) + act_flops(g, n); }

double fused_add_flops(const Graph *g, const Node *n) { return 2 * elem_flops(g, n); }

/* BatchNorm's four per element, the add's and the relu's one each */
double fused_bnadd_flops(const Graph *g, const Node *n)
{
    return bn_flops(g, n) + elem_flops(g, n) + act_flops(g, n);
}

/* ---- conv_bn_stats: the convolution that writes its value's statistics ---- */

/* a convolution's data and weight: no bias, as a BatchNorm follows */
const SlotSpec convst_slots[] = {
    {"data", SLOT_DATA, NULL, false},
    {"weight", SLOT_PARAM, "weight", false},
    SLOT_END,
};
/* BatchNorm's five, then the statistics of its x (the convolution's part 1) */
const SlotSpec bnst_slots[] = {
    BN_SLOT_SPECS,
    {"stats", SLOT_DATA, NULL, true}, /* fp32 whatever x is */
    SLOT_END,
};
/* BatchNorm's five, the residual add's shortcut, then the statistics */
const SlotSpec bnaddst_slots[] = {
    BN_SLOT_SPECS,
    {"shortcut", SLOT_DATA, NULL, false},
    {"stats", SLOT_DATA, NULL, true}, /* fp32 whatever x is */
    SLOT_END,
};

/* The convolution's shape; its part 1 (part_shape) is fp32 [2, num_filter]. */
bool conv_stats_shape(Graph *g, Node *n)
{
    if (n->nin != 2 || !node_bool(n, CONV_NO_BIAS)) {
        node_error(g, n,
                   "'%s': %s has no bias (a BatchNorm follows it): no_bias=true and two "
                   "inputs",
                   n->name, op_info(n->op)->name);
        return false;
    }
    return conv_shape(g, n);
}

/* The statistics the BatchNorm family's node n reads (its last input) are
 * part 1 of the _fused_Convolution_stats whose value is its x (directly,
 * or through a layout conversion), so they are the sums of x. */
static bool stats_of_x(Graph *g, Node *n)
{
    const Node *st = in_node(g, n, n->nin - 1), *x = in_node(g, n, 0);
    const Node *conv = st->op == OP_part ? in_node(g, st, 0) : NULL;
    if (x->op == OP__layout)
        x = in_node(g, x, 0);
    if (!conv || conv->op != OP__fused_Convolution_stats || node_int(st, PART_INDEX) != 1 ||
        x != conv) {
        node_error(g, n,
                   "'%s': %s reads '%s' as the statistics of '%s', but they are not part "
                   "1 of the _fused_Convolution_stats that writes it",
                   n->name, op_info(n->op)->name, st->name, in_node(g, n, 0)->name);
        return false;
    }
    return true;
}

bool bn_stats_shape(Graph *g, Node *n) { return stats_of_x(g, n) && bn_shape(g, n); }

bool bnadd_stats_shape(Graph *g, Node *n) { return stats_of_x(g, n) && fused_bnadd_shape(g, n); }
