/* loss.c - SoftmaxOutput, MXNet's fused softmax and cross-entropy head.
 *
 * Forward is a softmax over the last axis; the gradient (a later issue)
 * ignores the head gradient and yields p - onehot, smoothed by smooth_alpha,
 * times grad_scale, normalised as `normalization` says. */
#include "ops_impl.h"

const SlotSpec smo_slots[] = {
    {"data", SLOT_DATA, NULL, false},
    {"label", SLOT_LABEL, NULL, false},
    SLOT_END,
};
const char *const smo_norms[] = {"null", "batch", "valid", NULL};
const AttrSpec smo_attrs[] = {
    SMO_ATTR_SPECS,
    ATTR_END,
};

bool smo_shape(Graph *g, Node *n)
{
    Node *data = in_node(g, n, 0), *label = in_node(g, n, 1);
    if (!require_rank(g, n, data, 2, 2))
        return false;
    if (label->shape.rank != 1) {
        char a[128];
        node_error(g, n, "SoftmaxOutput: the label must be [N] (one class index per row), got %s",
                   label->shape.rank < 0 ? "an unknown shape"
                                         : shape_str(&label->shape, a, sizeof a));
        return false;
    }
    if (label->shape.d[0] != data->shape.d[0]) {
        char a[128], b[128];
        node_error(g, n, "SoftmaxOutput: label shape %s does not match data %s (one label per row)",
                   shape_str(&label->shape, a, sizeof a), shape_str(&data->shape, b, sizeof b));
        return false;
    }
    n->shape = data->shape;
    return true;
}
