/* conv.c - Convolution and FullyConnected: the ops AMP runs in fp16.
 *
 * Convolution follows MXNet: data [N,C,spatial...], weight
 * [num_filter, C/num_group, kernel...], bias [num_filter]; output spatial
 * size floor((x + 2*pad - dilate*(k-1) - 1) / stride) + 1. */
#include "ops_impl.h"

const SlotSpec conv_slots[] = {
    {"data", SLOT_DATA, NULL, false},
    {"weight", SLOT_PARAM, "weight", false},
    {"bias", SLOT_PARAM, "bias", false},
    SLOT_END,
};
const AttrSpec conv_attrs[] = {
    {"kernel", AT_TUPLE, true, NULL, 1, 1 << 20, NULL},
    {"stride", AT_TUPLE, false, "()", 1, 1 << 20, NULL},
    {"pad", AT_TUPLE, false, "()", 0, 1 << 20, NULL},
    {"dilate", AT_TUPLE, false, "()", 1, 1 << 20, NULL},
    {"num_filter", AT_INT, true, NULL, 1, INT_MAX_ATTR, NULL},
    {"num_group", AT_INT, false, "1", 1, INT_MAX_ATTR, NULL},
    {"no_bias", AT_BOOL, false, "false", 0, 0, NULL},
    ATTR_END,
};
const SlotSpec fc_slots[] = {
    {"data", SLOT_DATA, NULL, false},
    {"weight", SLOT_PARAM, "weight", false},
    {"bias", SLOT_PARAM, "bias", false},
    SLOT_END,
};
const AttrSpec fc_attrs[] = {
    {"num_hidden", AT_INT, true, NULL, 1, INT_MAX_ATTR, NULL},
    {"no_bias", AT_BOOL, false, "false", 0, 0, NULL},
    {"flatten", AT_BOOL, false, "true", 0, 0, NULL},
    ATTR_END,
};

bool conv_check(Graph *g, Node *n)
{
    int k = n->attrs[CONV_KERNEL].t.n;
    if (k < 1 || k > 3) {
        node_error(g, n, "Convolution: kernel must have 1 to 3 dimensions, got %d", k);
        return false;
    }
    if (!tuple_fill(g, n, CONV_STRIDE, k, 1) || !tuple_fill(g, n, CONV_PAD, k, 0) ||
        !tuple_fill(g, n, CONV_DILATE, k, 1))
        return false;
    int64_t nf = node_int(n, CONV_NUM_FILTER), ng = node_int(n, CONV_NUM_GROUP);
    if (nf % ng) {
        node_error(g, n, "Convolution: num_filter=%lld is not divisible by num_group=%lld",
                   (long long)nf, (long long)ng);
        return false;
    }
    return true;
}

/* Output extent of one spatial axis, or -1 when the window does not fit. */
static int64_t conv_out_dim(int64_t x, int64_t k, int64_t s, int64_t p, int64_t d)
{
    int64_t span = d * (k - 1) + 1;
    if (x + 2 * p < span)
        return -1;
    return (x + 2 * p - span) / s + 1;
}

bool conv_shape(Graph *g, Node *n)
{
    Node *data = in_node(g, n, 0);
    int k = n->attrs[CONV_KERNEL].t.n;
    if (!require_rank(g, n, data, k + 2, k + 2))
        return false;
    const Shape *ds = &data->shape;
    int64_t c = ds->d[1], nf = node_int(n, CONV_NUM_FILTER), ng = node_int(n, CONV_NUM_GROUP);
    if (dim_is_sym(c)) {
        node_error(g, n, "Convolution: the channel dimension must be a constant");
        return false;
    }
    if (c % ng) {
        node_error(g, n, "Convolution: %lld input channels are not divisible by num_group=%lld",
                   (long long)c, (long long)ng);
        return false;
    }
    Shape w = {.rank = k + 2};
    w.d[0] = nf;
    w.d[1] = c / ng;
    Shape out = {.rank = k + 2};
    out.d[0] = ds->d[0];
    out.d[1] = nf;
    for (int i = 0; i < k; i++) {
        int64_t kk = n->attrs[CONV_KERNEL].t.v[i];
        int64_t x = ds->d[2 + i];
        if (dim_is_sym(x)) {
            node_error(g, n, "Convolution: spatial dimensions must be constants");
            return false;
        }
        w.d[2 + i] = kk;
        int64_t o = conv_out_dim(x, kk, n->attrs[CONV_STRIDE].t.v[i], n->attrs[CONV_PAD].t.v[i],
                                 n->attrs[CONV_DILATE].t.v[i]);
        if (o < 1) {
            char b[128];
            node_error(g, n,
                       "Convolution: the output would be smaller than one pixel (input %s, "
                       "kernel %lld on axis %d)",
                       shape_str(ds, b, sizeof b), (long long)kk, 2 + i);
            return false;
        }
        out.d[2 + i] = o;
    }
    char why[64];
    snprintf(why, sizeof why, "(input has %lld channels)", (long long)c);
    if (!expect_input_shape(g, n, 1, &w, why))
        return false;
    Shape b = {.rank = 1, .d = {nf}};
    if (!expect_input_shape(g, n, 2, &b, NULL))
        return false;
    n->shape = out;
    return true;
}

double conv_flops(const Graph *g, const Node *n)
{
    const Node *w = in_node(g, n, 1);
    int64_t out;
    double per_out = 1; /* in double: a FLOP count may exceed int64 */
    if (!shape_numel_per_sample(&n->shape, &out) || w->shape.rank < 2)
        return 0;
    for (int i = 1; i < w->shape.rank; i++)
        per_out *= (double)w->shape.d[i];
    return 2.0 * (double)out * per_out + (n->nin > 2 ? (double)out : 0);
}

bool fc_shape(Graph *g, Node *n)
{
    Node *data = in_node(g, n, 0);
    bool flatten = node_bool(n, FC_FLATTEN);
    if (!require_rank(g, n, data, flatten ? 2 : 1, AMPC_MAX_RANK))
        return false;
    const Shape *ds = &data->shape;
    int64_t nh = node_int(n, FC_NUM_HIDDEN), in = 1;
    int first = flatten ? 1 : ds->rank - 1;
    for (int i = first; i < ds->rank; i++) {
        if (dim_is_sym(ds->d[i])) {
            node_error(g, n, "FullyConnected: input dimension %d must be a constant", i);
            return false;
        }
        if (__builtin_mul_overflow(in, ds->d[i], &in)) {
            node_error(g, n, "FullyConnected: input too large");
            return false;
        }
    }
    Shape w = {.rank = 2, .d = {nh, in}};
    if (!expect_input_shape(g, n, 1, &w, NULL))
        return false;
    Shape b = {.rank = 1, .d = {nh}};
    if (!expect_input_shape(g, n, 2, &b, NULL))
        return false;
    Shape out = {.rank = flatten ? 2 : ds->rank};
    for (int i = 0; i < out.rank - 1; i++)
        out.d[i] = ds->d[i];
    out.d[out.rank - 1] = nh;
    n->shape = out;
    return true;
}

double fc_flops(const Graph *g, const Node *n)
{
    const Node *w = in_node(g, n, 1);
    int64_t out;
    if (!shape_numel_per_sample(&n->shape, &out) || w->shape.rank != 2)
        return 0;
    return 2.0 * (double)out * (double)w->shape.d[1] + (n->nin > 2 ? (double)out : 0);
}

/* Convolution and FullyConnected: one backward node computes the data
 * gradient (its own value) and the weight and bias gradients (parts 1, 2);
 * the code generator skips the data gradient when nothing reads it. */
static bool dense_grad(GradCtx *c, const Node *n, int dy, OpKind bwd)
{
    int in[3] = {dy, n->in[0], n->in[1]};
    int b = grad_emit(c, bwd, in, 3, n);
    if (b < 0)
        return false;
    grad_add(c, n->in[0], b);
    if (grad_wants(c, n->in[1]))
        grad_add(c, n->in[1], grad_part(c, b, 1));
    if (n->nin > 2 && grad_wants(c, n->in[2]))
        grad_add(c, n->in[2], grad_part(c, b, 2));
    return true;
}

bool conv_grad(GradCtx *c, const Node *n, int dy) { return dense_grad(c, n, dy, OP__backward_Convolution); }
bool fc_grad(GradCtx *c, const Node *n, int dy) { return dense_grad(c, n, dy, OP__backward_FullyConnected); }
