/* cast.c - Cast (written by the user) and amp_cast (inserted by AMP).
 *
 * They share a schema but not a meaning: AMP never rewrites a user's Cast
 * unless it became a no-op, while its own amp_casts are freely merged.
 * param_master (no schema) is the fp32 master copy of a parameter whose
 * forward graph reads a 16-bit shadow; it computes nothing. */
#include "ops_impl.h"

const AttrSpec cast_attrs[] = {
    {"dtype", AT_DTYPE, true, NULL, 0, 0, NULL},
    ATTR_END,
};

bool cast_check(Graph *g, Node *n)
{
    DType t = (DType)n->attrs[CAST_DTYPE].e;
    if (!dtype_is_float(t)) {
        node_error(g, n, "%s: dtype must be a floating-point type (float16, bfloat16, float32, "
                         "float64), not %s", op_info(n->op)->name, dtype_long(t));
        return false;
    }
    return true;
}

/* The gradient of a cast is a cast back (grad_add casts to the input's
 * dtype); so is a master read's. */
bool cast_grad(GradCtx *c, const Node *n, int dy)
{
    grad_add(c, n->in[0], dy);
    return true;
}

bool master_grad(GradCtx *c, const Node *n, int dy) { return cast_grad(c, n, dy); }
