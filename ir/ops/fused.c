/* fused.c - the ops the fuse pass makes (passes/fuse.c): each runs two ops
 * of the unfused graph as one kernel, rounding where the two would (docs/
 * codegen.md, "Fusions").  Their shape rules are the unfused ops' ones (in
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
