/* layout.c - Flatten, Reshape and Concat: ops that move no arithmetic. */
#include "ops_impl.h"

const AttrSpec reshape_attrs[] = {
    /* MXNet's special values 0 (copy the input dimension) and -1 (infer) */
    {"shape", AT_TUPLE, true, NULL, -1, INT_MAX_ATTR, NULL},
    ATTR_END,
};
const AttrSpec concat_attrs[] = {
    {"dim", AT_INT, false, "1", -AMPC_MAX_RANK, AMPC_MAX_RANK - 1, NULL},
    ATTR_END,
};

bool flatten_shape(Graph *g, Node *n)
{
    Node *data = in_node(g, n, 0);
    if (!require_rank(g, n, data, 1, AMPC_MAX_RANK))
        return false;
    Dim rest = 1;
    for (int i = 1; i < data->shape.rank; i++)
        if (!dim_mul(rest, data->shape.d[i], &rest)) {
            node_error(g, n, "Flatten: the flattened size cannot be expressed");
            return false;
        }
    n->shape = (Shape){.rank = 2, .d = {data->shape.d[0], rest}};
    return true;
}

bool reshape_shape(Graph *g, Node *n)
{
    Node *data = in_node(g, n, 0);
    if (!require_rank(g, n, data, 0, AMPC_MAX_RANK))
        return false;
    const AttrVal *t = node_tuple(n, RESHAPE_SHAPE);
    const Shape *in = &data->shape;
    /* total = tk * N^ts, known = kk * N^ks over the target's fixed dims */
    int64_t tk = 1, kk = 1;
    int ts = 0, ks = 0, infer = -1;
    char b[128];
    for (int i = 0; i < in->rank; i++) {
        ts += dim_is_sym(in->d[i]);
        if (__builtin_mul_overflow(tk, in->d[i] < 0 ? -in->d[i] : in->d[i], &tk))
            goto too_big;
    }
    Shape out = {.rank = t->t.n};
    for (int i = 0; i < t->t.n; i++) {
        int64_t v = t->t.v[i];
        if (v == -1) {
            if (infer >= 0) {
                node_error(g, n, "Reshape: at most one -1 may appear in shape");
                return false;
            }
            infer = i;
            continue;
        }
        if (v == 0) {
            if (i >= in->rank) {
                node_error(g, n, "Reshape: 0 at position %d copies a dimension the input %s "
                                 "does not have", i, shape_str(in, b, sizeof b));
                return false;
            }
            v = in->d[i];
        }
        out.d[i] = v;
        ks += dim_is_sym(v);
        if (__builtin_mul_overflow(kk, v < 0 ? -v : v, &kk))
            goto too_big;
    }
    if (ts > 1 || ks > ts) {
        node_error(g, n, "Reshape: only one dimension may depend on the batch size N");
        return false;
    }
    if (infer >= 0) {
        if (kk == 0 || tk % kk) {
            node_error(g, n, "Reshape: cannot infer -1: %s does not divide into the fixed dims",
                       shape_str(in, b, sizeof b));
            return false;
        }
        out.d[infer] = (ts > ks) ? -(tk / kk) : tk / kk;
    } else if (kk != tk || ks != ts) {
        node_error(g, n, "Reshape: cannot reshape %s into a shape of a different size",
                   shape_str(in, b, sizeof b));
        return false;
    }
    n->shape = out;
    return true;
too_big:
    node_error(g, n, "Reshape: size overflows");
    return false;
}

bool concat_shape(Graph *g, Node *n)
{
    if (n->nin < 1) {
        node_error(g, n, "Concat needs at least one input");
        return false;
    }
    Node *first = in_node(g, n, 0);
    if (!require_rank(g, n, first, 1, AMPC_MAX_RANK))
        return false;
    int rank = first->shape.rank;
    int64_t dim = node_int(n, CONCAT_DIM);
    if (dim < 0)
        dim += rank;
    if (dim < 0 || dim >= rank) {
        node_error(g, n, "Concat: dim %lld is out of range for rank %d",
                   (long long)node_int(n, CONCAT_DIM), rank);
        return false;
    }
    Shape out = first->shape;
    for (int i = 1; i < n->nin; i++) {
        const Node *x = in_node(g, n, i);
        char a[128], b[128];
        if (!require_rank(g, n, x, rank, rank))
            return false;
        for (int j = 0; j < rank; j++)
            if (j != dim && x->shape.d[j] != out.d[j]) {
                node_error(g, n, "Concat: input %d has shape %s, which does not match %s except "
                                 "on dim %lld", i + 1, shape_str(&x->shape, a, sizeof a),
                           shape_str(&first->shape, b, sizeof b), (long long)dim);
                return false;
            }
        Dim a0 = out.d[dim], b0 = x->shape.d[dim];
        if (dim_is_sym(a0) != dim_is_sym(b0)) {
            node_error(g, n, "Concat: cannot join a batch-sized and a fixed dimension");
            return false;
        }
        out.d[dim] = a0 + b0;
    }
    n->shape = out;
    return true;
}

/* Flatten and Reshape: reshape the gradient back (-1 where x has N). */
bool reshape_grad(GradCtx *c, const Node *n, int dy)
{
    const Node *x = grad_graph(c)->nodes[n->in[0]];
    AttrVal a = {.type = AT_TUPLE};
    a.t.n = x->shape.rank;
    for (int i = 0; i < x->shape.rank; i++)
        a.t.v[i] = dim_is_sym(x->shape.d[i]) ? -1 : x->shape.d[i];
    int b = grad_emit_attrs(c, OP_Reshape, &dy, 1, &a, n);
    grad_add(c, n->in[0], b);
    return b >= 0;
}

/* Concat: each input's gradient is its slice of dy. */
bool concat_grad(GradCtx *c, const Node *n, int dy)
{
    const Graph *g = grad_graph(c);
    int64_t dim = node_int(n, CONCAT_DIM);
    if (dim < 0)
        dim += n->shape.rank;
    int64_t off = 0;
    for (int i = 0; i < n->nin; i++) {
        Dim len = g->nodes[n->in[i]]->shape.d[dim];
        if (dim_is_sym(len)) {
            node_error(g, n, "autodiff: cannot slice a gradient along the batch dimension");
            return false;
        }
        if (grad_wants(c, n->in[i])) {
            AttrVal a[3] = {{.type = AT_INT, .i = dim}, {.type = AT_INT, .i = off},
                            {.type = AT_INT, .i = off + len}};
            int s = grad_emit_attrs(c, OP__slice_axis, &dy, 1, a, n);
            if (s < 0)
                return false;
            grad_add(c, n->in[i], s);
        }
        off += len;
    }
    return true;
}

/* _layout (passes/layout.c): the layout its value is converted to; the
 * choices are ir.h's Layout, in its order */
static const char *const layout_names[] = {"NCHW", "NHWC", NULL};
const AttrSpec layout_attrs[] = {
    {"to", AT_ENUM, false, "NCHW", 0, 0, layout_names},
    ATTR_END,
};
