/* act.c - Activation, LeakyReLU and Dropout: elementwise, shape-preserving. */
#include "ops_impl.h"

static const char *const act_types[] = {"relu", "sigmoid", "tanh", "softrelu", "softsign", NULL};
const AttrSpec act_attrs[] = {
    {"act_type", AT_ENUM, true, NULL, 0, 0, act_types},
    ATTR_END,
};

static const char *const lrelu_types[] = {"leaky", "elu", "selu", "prelu", NULL};
const SlotSpec lrelu_slots[] = {
    {"data", SLOT_DATA, NULL, false},
    {"gamma", SLOT_PARAM, "gamma", false}, /* prelu only: one slope per channel */
    SLOT_END,
};
const AttrSpec lrelu_attrs[] = {
    {"act_type", AT_ENUM, false, "leaky", 0, 0, lrelu_types},
    {"slope", AT_FLOAT, false, "0.25", -1e30, 1e30, NULL},
    ATTR_END,
};

const AttrSpec dropout_attrs[] = {
    {"p", AT_FLOAT, false, "0.5", 0, 0.999999, NULL},
    ATTR_END,
};

bool lrelu_shape(Graph *g, Node *n)
{
    Node *data = in_node(g, n, 0);
    bool prelu = node_enum(n, LRELU_TYPE) == LRELU_PRELU;
    if (!require_rank(g, n, data, prelu ? 2 : 0, AMPC_MAX_RANK))
        return false;
    if (prelu != (n->nin == 2)) {
        node_error(g, n, "LeakyReLU: %s", prelu ? "prelu needs a gamma input"
                                                 : "only act_type=\"prelu\" takes a gamma input");
        return false;
    }
    if (prelu) {
        Shape p = {.rank = 1, .d = {data->shape.d[1]}};
        if (!expect_input_shape(g, n, 1, &p, NULL))
            return false;
    }
    n->shape = data->shape;
    return true;
}

double act_flops(const Graph *g, const Node *n)
{
    (void)g;
    int64_t e;
    return shape_numel_per_sample(&n->shape, &e) ? (double)e : 0;
}

bool act_grad(GradCtx *c, const Node *n, int dy)
{
    int in[3] = {dy, n->in[0], n->id}; /* x and y: the kernel uses what it needs */
    int b = grad_emit(c, OP__backward_Activation, in, 3, n);
    grad_add(c, n->in[0], b);
    return b >= 0;
}

bool lrelu_grad(GradCtx *c, const Node *n, int dy)
{
    int in[3] = {dy, n->in[0], n->nin > 1 ? n->in[1] : -1};
    int b = grad_emit(c, OP__backward_LeakyReLU, in, n->nin > 1 ? 3 : 2, n);
    grad_add(c, n->in[0], b);
    if (b >= 0 && n->nin > 1 && grad_wants(c, n->in[1]))
        grad_add(c, n->in[1], grad_part(c, b, 1));
    return b >= 0;
}

/* The mask is regenerated from the forward node's RNG stream (its output is
 * an input only to tie the two together). */
bool dropout_grad(GradCtx *c, const Node *n, int dy)
{
    int in[2] = {dy, n->id};
    int b = grad_emit(c, OP__backward_Dropout, in, 2, n);
    grad_add(c, n->in[0], b);
    return b >= 0;
}
