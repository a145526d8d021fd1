/* reduce.c - softmax, log_softmax, sum and mean. */
#include "ops_impl.h"

const AttrSpec softmax_attrs[] = {
    {"axis", AT_INT, false, "-1", -AMPC_MAX_RANK, AMPC_MAX_RANK - 1, NULL},
    ATTR_END,
};
const AttrSpec reduce_attrs[] = {
    /* () reduces over every axis, as in MXNet */
    {"axis", AT_TUPLE, false, "()", -AMPC_MAX_RANK, AMPC_MAX_RANK - 1, NULL},
    {"keepdims", AT_BOOL, false, "false", 0, 0, NULL},
    ATTR_END,
};

bool softmax_shape(Graph *g, Node *n)
{
    Node *data = in_node(g, n, 0);
    if (!require_rank(g, n, data, 1, AMPC_MAX_RANK))
        return false;
    int64_t axis = node_int(n, SOFTMAX_AXIS);
    if (axis < -data->shape.rank || axis >= data->shape.rank) {
        node_error(g, n, "%s: axis %lld is out of range for rank %d", op_info(n->op)->name,
                   (long long)axis, data->shape.rank);
        return false;
    }
    n->shape = data->shape;
    return true;
}

double softmax_flops(const Graph *g, const Node *n)
{
    (void)g;
    int64_t e;
    /* max, subtract, exp, sum, divide */
    return shape_numel_per_sample(&n->shape, &e) ? 5.0 * (double)e : 0;
}

bool reduce_shape(Graph *g, Node *n)
{
    Node *data = in_node(g, n, 0);
    if (!require_rank(g, n, data, 0, AMPC_MAX_RANK))
        return false;
    const AttrVal *ax = node_tuple(n, REDUCE_AXIS);
    int rank = data->shape.rank;
    bool reduce[AMPC_MAX_RANK] = {0};
    for (int i = 0; i < ax->t.n; i++) {
        int64_t a = ax->t.v[i] < 0 ? ax->t.v[i] + rank : ax->t.v[i];
        if (a < 0 || a >= rank || reduce[a]) {
            node_error(g, n, "%s: axis %lld is out of range or repeated for rank %d",
                       op_info(n->op)->name, (long long)ax->t.v[i], rank);
            return false;
        }
        reduce[a] = true;
    }
    if (ax->t.n == 0)
        for (int i = 0; i < rank; i++)
            reduce[i] = true;
    bool keep = node_bool(n, REDUCE_KEEPDIMS);
    Shape out = {.rank = 0};
    for (int i = 0; i < rank; i++) {
        if (!reduce[i])
            out.d[out.rank++] = data->shape.d[i];
        else if (keep)
            out.d[out.rank++] = 1;
    }
    n->shape = out;
    return true;
}

bool softmax_grad(GradCtx *c, const Node *n, int dy)
{
    int in[2] = {dy, n->id};
    int b = grad_emit(c, n->op == OP_softmax ? OP__backward_softmax : OP__backward_log_softmax, in,
                      2, n);
    grad_add(c, n->in[0], b);
    return b >= 0;
}

bool reduce_grad(GradCtx *c, const Node *n, int dy)
{
    int in[2] = {dy, n->in[0]}; /* x for its shape */
    int b = grad_emit(c, n->op == OP_sum ? OP__backward_sum : OP__backward_mean, in, 2, n);
    grad_add(c, n->in[0], b);
    return b >= 0;
}
