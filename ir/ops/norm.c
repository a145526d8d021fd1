/* norm.c - BatchNorm.
 *
 * Defaults are Gluon's (fix_gamma=false, eps=1e-5, momentum=0.9), not MXNet
 * symbol's (fix_gamma=true, eps=1e-3): see docs/language.md.  gamma, beta and
 * the moving statistics are [C] for C = data.shape[axis], and always fp32. */
#include "ops_impl.h"

const SlotSpec bn_slots[] = {
    BN_SLOT_SPECS,
    SLOT_END,
};
const AttrSpec bn_attrs[] = {
    BN_ATTR_SPECS,
    ATTR_END,
};

bool bn_shape(Graph *g, Node *n)
{
    Node *data = in_node(g, n, 0);
    if (!require_rank(g, n, data, 2, AMPC_MAX_RANK))
        return false;
    int64_t axis = node_int(n, BN_AXIS);
    if (axis < 0)
        axis += data->shape.rank;
    if (axis < 0 || axis >= data->shape.rank) {
        node_error(g, n, "BatchNorm: axis %lld is out of range for rank %d",
                   (long long)node_int(n, BN_AXIS), data->shape.rank);
        return false;
    }
    Dim c = data->shape.d[axis];
    if (dim_is_sym(c)) {
        node_error(g, n, "BatchNorm: the channel axis must not be the batch dimension");
        return false;
    }
    Shape p = {.rank = 1, .d = {c}};
    char why[64];
    snprintf(why, sizeof why, "(input has %lld channels)", (long long)c);
    for (int s = 1; s < 5; s++)
        if (!expect_input_shape(g, n, s, &p, why))
            return false;
    n->shape = data->shape;
    return true;
}

double bn_flops(const Graph *g, const Node *n)
{
    (void)g;
    int64_t e;
    /* normalise and scale: a subtract, a multiply and an add per element */
    return shape_numel_per_sample(&n->shape, &e) ? 4.0 * (double)e : 0;
}

/* Training BatchNorm saves the batch mean and 1/std as parts 1 and 2 of its
 * node; the backward node gives dx, and dgamma, dbeta as its parts. */
bool bn_grad(GradCtx *c, const Node *n, int dy)
{
    int in[5] = {dy, n->in[0], n->in[1], grad_part(c, n->id, 1), grad_part(c, n->id, 2)};
    int b = grad_emit(c, OP__backward_BatchNorm, in, 5, n);
    if (b < 0)
        return false;
    grad_add(c, n->in[0], b);
    if (grad_wants(c, n->in[1]))
        grad_add(c, n->in[1], grad_part(c, b, 1));
    if (grad_wants(c, n->in[2]))
        grad_add(c, n->in[2], grad_part(c, b, 2));
    return true;
}
