/* infer_shapes.c - the infer-shapes pass.
 *
 * Visits nodes in storage (topological) order and runs each op's shape rule
 * from the op table.  Rules also give implicit parameters their shapes (a
 * convolution's weight is [num_filter, C/num_group, kh, kw]), so a parameter
 * is known once its first consumer has been visited.  The batch dimension N
 * stays symbolic. */
#include "passes.h"

/* Every size ampc computes later (buffers, bytes, reports) is a product of
 * these dims: refuse, at the node, a tensor too large to address. */
static bool size_ok(Graph *g, Node *n)
{
    if (shape_size_ok(&n->shape))
        return true;
    char b[160];
    node_error(g, n, "'%s' is too large: its shape %s has more than 2^60 elements per sample",
               n->name, shape_str(&n->shape, b, sizeof b));
    return false;
}

bool infer_shapes(Graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (!op_info(n->op)->shape(g, n) || !size_ok(g, n))
            return false;
    }
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (n->op == OP_Param && n->shape.rank < 0) {
            node_error(g, n, "cannot infer the shape of parameter '%s': give param(shape=...)",
                       n->name);
            return false;
        }
        if (n->op == OP_Param && !size_ok(g, n)) /* shaped by a consumer's rule */
            return false;
    }
    return true;
}
