/* grad.c - the ops autodiff makes: backward ops, part (the extra results of
 * an op with several), grad_of (marks a parameter's gradient),
 * bn_moving_update (BatchNorm's moving statistics as an explicit effect) and
 * _slice_axis.  Their shape rules also set the dtype: a gradient has the
 * dtype of the value it is the gradient of. */
#include "ops_impl.h"

const SlotSpec bwd2_slots[] = {
    {"dy", SLOT_DATA, NULL, false}, {"x", SLOT_DATA, NULL, false}, SLOT_END};
const SlotSpec bwd3_slots[] = {
    {"dy", SLOT_DATA, NULL, false}, {"x", SLOT_DATA, NULL, false},
    {"w", SLOT_DATA, NULL, false}, SLOT_END};
const SlotSpec bnbwd_slots[] = {
    {"dy", SLOT_DATA, NULL, false}, {"x", SLOT_DATA, NULL, false},
    {"gamma", SLOT_DATA, NULL, false}, {"save_mean", SLOT_DATA, NULL, false},
    {"save_invstd", SLOT_DATA, NULL, false}, SLOT_END};
const SlotSpec smobwd_slots[] = {
    {"prob", SLOT_DATA, NULL, false}, {"label", SLOT_LABEL, NULL, false}, SLOT_END};
const SlotSpec gradof_slots[] = {
    {"grad", SLOT_DATA, NULL, false}, {"param", SLOT_DATA, NULL, false}, SLOT_END};
const SlotSpec bnmu_slots[] = {
    {"save_mean", SLOT_DATA, NULL, false}, {"save_invstd", SLOT_DATA, NULL, false},
    {"moving_mean", SLOT_AUX, NULL, true}, {"moving_var", SLOT_AUX, NULL, true}, SLOT_END};

const AttrSpec part_attrs[] = {
    {"index", AT_INT, true, NULL, 1, 8, NULL},
    ATTR_END,
};
const AttrSpec slice_attrs[] = {
    {"axis", AT_INT, true, NULL, 0, AMPC_MAX_RANK - 1, NULL},
    {"begin", AT_INT, true, NULL, 0, INT_MAX_ATTR, NULL},
    {"end", AT_INT, true, NULL, 1, INT_MAX_ATTR, NULL},
    ATTR_END,
};
static const char *const bcast_ops[] = {"add", "mul", NULL};
const AttrSpec bcast_attrs[] = {
    {"op", AT_ENUM, true, NULL, 0, 0, bcast_ops},
    ATTR_END,
};

bool no_grad(GradCtx *c, const Node *n, int dy)
{
    (void)dy;
    node_error(grad_graph(c), n, "autodiff: %s has no gradient rule", op_info(n->op)->name);
    return false;
}

static bool like_input(Graph *g, Node *n, int i)
{
    const Node *x = in_node(g, n, i);
    n->shape = x->shape;
    n->dtype = x->dtype;
    return true;
}

bool like_in0_shape(Graph *g, Node *n) { return like_input(g, n, 0); }
bool like_in1_shape(Graph *g, Node *n) { return like_input(g, n, 1); }

bool effect_shape(Graph *g, Node *n)
{
    (void)g;
    n->shape = (Shape){.rank = 0};
    n->dtype = DT_F32;
    return true;
}

bool slice_shape(Graph *g, Node *n)
{
    const Node *x = in_node(g, n, 0);
    int64_t axis = node_int(n, SLICE_AXIS), b = node_int(n, SLICE_BEGIN), e = node_int(n, SLICE_END);
    if (axis >= x->shape.rank || dim_is_sym(x->shape.d[axis]) || e > x->shape.d[axis] || b >= e) {
        node_error(g, n, "_slice_axis: [%lld, %lld) is not a range of axis %lld",
                   (long long)b, (long long)e, (long long)axis);
        return false;
    }
    n->shape = x->shape;
    n->shape.d[axis] = e - b;
    n->dtype = x->dtype;
    return true;
}

bool part_shape(Graph *g, Node *n)
{
    const Node *p = in_node(g, n, 0);
    int64_t k = node_int(n, PART_INDEX);
    const Node *like = NULL;
    switch (p->op) {
    case OP_BatchNorm: /* save_mean, save_invstd: fp32 [C] */
    case OP__fused_BatchNorm_relu:
    case OP__fused_BatchNorm_add_relu:
    case OP__fused_BatchNorm_stats:
    case OP__fused_BatchNorm_relu_stats:
    case OP__fused_BatchNorm_add_relu_stats:
        if (k <= 2) {
            n->shape = in_node(g, p, 1)->shape;
            n->dtype = DT_F32;
            return true;
        }
        break;
    case OP__fused_Convolution_stats: /* its value's sums, then sums of squares: fp32 [2, K] */
        if (k == 1) {
            n->shape = (Shape){.rank = 2, .d = {2, node_int(p, CONV_NUM_FILTER)}};
            n->dtype = DT_F32;
            return true;
        }
        break;
    case OP__backward_BatchNorm: /* dgamma, dbeta */
    case OP__backward_fused_BatchNorm_relu:
        if (k <= 2) {
            n->shape = in_node(g, p, p->op == OP__backward_BatchNorm ? 2 : 3)->shape;
            n->dtype = DT_F32;
            return true;
        }
        break;
    case OP__backward_fused_BatchNorm_add_relu: /* dgamma, dbeta; BatchNorm's dx */
        if (k <= 3) {
            like = in_node(g, p, k <= 2 ? 3 : 2);
            n->shape = like->shape;
            n->dtype = k <= 2 ? DT_F32 : like->dtype;
            return true;
        }
        break;
    case OP__backward_Convolution:
    case OP__backward_FullyConnected: /* dweight, dbias [num_filter] */
        like = in_node(g, p, 2);
        if (k == 1) {
            n->shape = like->shape;
        } else if (k == 2) {
            n->shape = (Shape){.rank = 1, .d = {like->shape.d[0]}};
        } else {
            break;
        }
        n->dtype = like->dtype;
        return true;
    case OP__backward_LeakyReLU: /* dgamma (prelu: only with gamma, its third input) */
    case OP__backward_broadcast: /* the gradient of the second input */
        if (k == 1 && p->nin > 2)
            return like_input(g, n, 0) && (n->shape = in_node(g, p, 2)->shape, true) &&
                   (n->dtype = in_node(g, p, 2)->dtype, true);
        break;
    default: break;
    }
    node_error(g, n, "part: %s has no result %lld", op_info(p->op)->name, (long long)k);
    return false;
}

bool part_shape_of(Graph *g, Node *n) { return part_shape(g, n); }
