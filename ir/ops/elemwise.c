/* elemwise.c - binary elementwise ops (shapes must match), broadcasting ops
 * (numpy rules) and tensor-scalar ops. */
#include "ops_impl.h"

const AttrSpec scalar_attrs[] = {
    {"scalar", AT_FLOAT, true, NULL, -1e300, 1e300, NULL},
    ATTR_END,
};

static const char *elemwise_symbol(OpKind k)
{
    switch (k) {
    case OP_elemwise_add: return "+";
    case OP_elemwise_sub: return "-";
    case OP_elemwise_mul: return "*";
    default: return op_info(k)->name;
    }
}

bool elemwise_shape(Graph *g, Node *n)
{
    Node *a = in_node(g, n, 0), *b = in_node(g, n, 1);
    if (!require_rank(g, n, a, 0, AMPC_MAX_RANK) || !require_rank(g, n, b, 0, AMPC_MAX_RANK))
        return false;
    if (!shape_equal(&a->shape, &b->shape)) {
        char x[128], y[128];
        node_error(g, n, "shape mismatch in '%s': %s vs %s (use broadcast_%s to broadcast)",
                   elemwise_symbol(n->op), shape_str(&a->shape, x, sizeof x),
                   shape_str(&b->shape, y, sizeof y), n->op == OP_elemwise_mul ? "mul" : "add");
        return false;
    }
    n->shape = a->shape;
    return true;
}

bool broadcast_shape(Graph *g, Node *n)
{
    Node *a = in_node(g, n, 0), *b = in_node(g, n, 1);
    if (!require_rank(g, n, a, 0, AMPC_MAX_RANK) || !require_rank(g, n, b, 0, AMPC_MAX_RANK))
        return false;
    int r = a->shape.rank > b->shape.rank ? a->shape.rank : b->shape.rank;
    Shape out = {.rank = r};
    for (int i = 0; i < r; i++) {
        int ia = a->shape.rank - r + i, ib = b->shape.rank - r + i;
        Dim x = ia >= 0 ? a->shape.d[ia] : 1, y = ib >= 0 ? b->shape.d[ib] : 1;
        if (x != y && x != 1 && y != 1) {
            char s1[128], s2[128];
            node_error(g, n, "%s: shapes %s and %s do not broadcast (axis %d: %s vs %s)",
                       op_info(n->op)->name, shape_str(&a->shape, s1, sizeof s1),
                       shape_str(&b->shape, s2, sizeof s2), i, x < 0 ? "N" : "const",
                       y < 0 ? "N" : "const");
            return false;
        }
        out.d[i] = x == 1 ? y : x;
    }
    n->shape = out;
    return true;
}
