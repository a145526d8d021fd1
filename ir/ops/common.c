/* common.c - slot lists, rules and helpers shared by several op families. */
#include "ops_impl.h"

#include <string.h>

const SlotSpec no_slots[] = {SLOT_END};
const SlotSpec data_slot[] = {{"data", SLOT_DATA, NULL, false}, SLOT_END};
const SlotSpec binary_slots[] = {{"lhs", SLOT_DATA, NULL, false}, {"rhs", SLOT_DATA, NULL, false},
                                 SLOT_END};
const AttrSpec no_attrs[] = {ATTR_END};

bool no_check(Graph *g, Node *n) { (void)g, (void)n; return true; }

bool same_shape(Graph *g, Node *n)
{
    if (!require_rank(g, n, in_node(g, n, 0), 0, AMPC_MAX_RANK))
        return false;
    n->shape = in_node(g, n, 0)->shape;
    return true;
}

double zero_flops(const Graph *g, const Node *n) { (void)g, (void)n; return 0; }

double elem_flops(const Graph *g, const Node *n)
{
    (void)g;
    int64_t e;
    return shape_numel_per_sample(&n->shape, &e) ? (double)e : 0;
}

Node *slot_input(const Graph *g, const Node *n, int slot)
{
    return slot < n->nin ? in_node(g, n, slot) : NULL;
}

bool require_rank(Graph *g, Node *n, const Node *data, int lo, int hi)
{
    if (data->shape.rank < 0 && data->op == OP_Param) {
        node_error(g, n, "%s: cannot infer the shape of parameter '%s': give param(shape=...)",
                   op_info(n->op)->name, data->name);
        return false;
    }
    if (data->shape.rank < 0) {
        node_error(g, n, "%s: the shape of its input '%s' is not known", op_info(n->op)->name,
                   data->name);
        return false;
    }
    if (data->shape.rank < lo || data->shape.rank > hi) {
        char b[128];
        if (lo == hi)
            node_error(g, n, "%s needs input of rank %d, got %s (rank %d)",
                       op_info(n->op)->name, lo, shape_str(&data->shape, b, sizeof b),
                       data->shape.rank);
        else
            node_error(g, n, "%s needs input of rank %d to %d, got %s (rank %d)",
                       op_info(n->op)->name, lo, hi, shape_str(&data->shape, b, sizeof b),
                       data->shape.rank);
        return false;
    }
    return true;
}

bool expect_input_shape(Graph *g, Node *n, int slot, const Shape *want, const char *why)
{
    Node *p = slot_input(g, n, slot);
    if (!p)
        return true;
    if (p->shape.rank < 0 && (p->op == OP_Param)) {
        p->shape = *want;
        return true;
    }
    if (!shape_equal(&p->shape, want)) {
        char a[128], b[128];
        node_error(g, n, "%s: %s shape %s does not match the expected %s%s%s",
                   op_info(n->op)->name, op_info(n->op)->slots[slot].name,
                   shape_str(&p->shape, a, sizeof a), shape_str(want, b, sizeof b),
                   why ? " " : "", why ? why : "");
        return false;
    }
    return true;
}

bool tuple_fill(Graph *g, Node *n, int attr, int rank, int64_t fill)
{
    AttrVal *v = &n->attrs[attr];
    if (v->t.n == 0) {
        v->t.n = rank;
        for (int i = 0; i < rank; i++)
            v->t.v[i] = fill;
        return true;
    }
    if (v->t.n != rank) {
        node_error(g, n, "%s: %s has %d values but the kernel has %d dimensions",
                   op_info(n->op)->name, op_info(n->op)->attrs[attr].name, v->t.n, rank);
        return false;
    }
    return true;
}

bool dim_mul(Dim a, Dim b, Dim *out)
{
    if (dim_is_sym(a) && dim_is_sym(b))
        return false; /* N*N is not a shape ampc can express */
    int64_t r;
    if (__builtin_mul_overflow(a < 0 ? -a : a, b < 0 ? -b : b, &r))
        return false;
    *out = (a < 0 || b < 0) ? -r : r;
    return true;
}
