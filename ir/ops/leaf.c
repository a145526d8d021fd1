/* leaf.c - graph inputs and parameters.
 *
 * Inputs carry the shape and dtype the model declares.  A parameter's shape
 * is given by param(shape=...) or set by the op that consumes it (MXNet's
 * backward shape inference); its dtype is given by infer-types. */
#include "ops_impl.h"

static const char *const input_roles[] = {"data", "label", NULL};
const AttrSpec input_attrs[] = {
    {"role", AT_ENUM, false, "data", 0, 0, input_roles},
    ATTR_END,
};

static const char *const param_kinds[] = {"weight", "bias", "gamma", "beta",
                                          "moving_mean", "moving_var", "other", NULL};
const AttrSpec param_attrs[] = {
    {"kind", AT_ENUM, false, "other", 0, 0, param_kinds},
    /* "default" = MXNet's rule by name suffix; else an initialiser call */
    {"init", AT_STR, false, "default", 0, 0, NULL},
    {"wd_mult", AT_FLOAT, false, "1", 0, 1e30, NULL},
    {"lr_mult", AT_FLOAT, false, "1", 0, 1e30, NULL},
    /* the optimizer's fp32 copy when the forward graph reads a 16-bit
     * shadow (AMP, or multi_precision); unknown = none */
    {"master", AT_DTYPE, false, "unknown", 0, 0, NULL},
    ATTR_END,
};

bool leaf_shape(Graph *g, Node *n)
{
    (void)g, (void)n; /* inputs are declared; parameters are set by consumers */
    return true;
}
