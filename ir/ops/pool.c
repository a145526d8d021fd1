/* pool.c - Pooling: max, avg and sum windows, or a global pool.
 *
 * MXNet's conventions: "valid" floors the output size, "full" takes the
 * ceiling; global_pool ignores kernel, stride and pad and gives 1x1. */
#include "ops_impl.h"

static const char *const pool_types[] = {"max", "avg", "sum", NULL};
static const char *const pool_conventions[] = {"valid", "full", NULL};
const AttrSpec pool_attrs[] = {
    {"kernel", AT_TUPLE, false, "()", 1, 1 << 20, NULL},
    {"pool_type", AT_ENUM, false, "max", 0, 0, pool_types},
    {"global_pool", AT_BOOL, false, "false", 0, 0, NULL},
    {"stride", AT_TUPLE, false, "()", 1, 1 << 20, NULL},
    {"pad", AT_TUPLE, false, "()", 0, 1 << 20, NULL},
    {"pooling_convention", AT_ENUM, false, "valid", 0, 0, pool_conventions},
    {"count_include_pad", AT_BOOL, false, "true", 0, 0, NULL},
    ATTR_END,
};

bool pool_check(Graph *g, Node *n)
{
    int k = n->attrs[POOL_KERNEL].t.n;
    if (node_bool(n, POOL_GLOBAL_POOL))
        return tuple_fill(g, n, POOL_STRIDE, k, 1) && tuple_fill(g, n, POOL_PAD, k, 0);
    if (k < 1 || k > 3) {
        node_error(g, n, "Pooling: kernel must have 1 to 3 dimensions (or set global_pool=true)");
        return false;
    }
    return tuple_fill(g, n, POOL_STRIDE, k, 1) && tuple_fill(g, n, POOL_PAD, k, 0);
}

bool pool_shape(Graph *g, Node *n)
{
    Node *data = in_node(g, n, 0);
    bool global = node_bool(n, POOL_GLOBAL_POOL);
    int k = n->attrs[POOL_KERNEL].t.n;
    if (!require_rank(g, n, data, global ? 3 : k + 2, global ? 5 : k + 2))
        return false;
    Shape out = data->shape;
    int spatial = out.rank - 2;
    for (int i = 0; i < spatial; i++) {
        int64_t x = data->shape.d[2 + i];
        if (dim_is_sym(x)) {
            node_error(g, n, "Pooling: spatial dimensions must be constants");
            return false;
        }
        if (global) {
            out.d[2 + i] = 1;
            continue;
        }
        int64_t kk = n->attrs[POOL_KERNEL].t.v[i], s = n->attrs[POOL_STRIDE].t.v[i],
                p = n->attrs[POOL_PAD].t.v[i];
        if (p >= kk) {
            node_error(g, n, "Pooling: pad %lld must be smaller than the kernel %lld",
                       (long long)p, (long long)kk);
            return false;
        }
        if (x + 2 * p < kk) {
            char b[128];
            node_error(g, n,
                       "Pooling: the output would be smaller than one pixel (input %s, kernel "
                       "%lld on axis %d)",
                       shape_str(&data->shape, b, sizeof b), (long long)kk, 2 + i);
            return false;
        }
        int64_t span = x + 2 * p - kk;
        out.d[2 + i] = (node_enum(n, POOL_CONVENTION) == POOL_FULL ? (span + s - 1) / s : span / s) + 1;
    }
    n->shape = out;
    return true;
}

double pool_flops(const Graph *g, const Node *n)
{
    int64_t e;
    if (!shape_numel_per_sample(&n->shape, &e))
        return 0;
    if (node_bool(n, POOL_GLOBAL_POOL)) {
        int64_t in;
        return shape_numel_per_sample(&in_node(g, n, 0)->shape, &in) ? (double)in : 0;
    }
    double win = 1;
    for (int i = 0; i < n->attrs[POOL_KERNEL].t.n; i++)
        win *= (double)n->attrs[POOL_KERNEL].t.v[i];
    return (double)e * win;
}

bool pool_grad(GradCtx *c, const Node *n, int dy)
{
    int in[2] = {dy, n->in[0]};
    int b = grad_emit(c, OP__backward_Pooling, in, 2, n);
    grad_add(c, n->in[0], b);
    return b >= 0;
}
