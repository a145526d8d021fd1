/* elemwise.c - binary elementwise ops (shapes must match), broadcasting ops
 * (numpy rules) and tensor-scalar ops. */
#include "ops_impl.h"
#include "../../runtime/kernels/unary.h"

#include <string.h>

const AttrSpec scalar_attrs[] = {
    {"scalar", AT_FLOAT, true, NULL, -1e300, 1e300, NULL},
    ATTR_END,
};
/* clip's bounds: MXNet requires both (a float each). */
const AttrSpec clip_attrs[] = {
    {"a_min", AT_FLOAT, true, NULL, -1e30, 1e30, NULL},
    {"a_max", AT_FLOAT, true, NULL, -1e30, 1e30, NULL},
    ATTR_END,
};

bool clip_check(Graph *g, Node *n)
{
    if (node_float(n, CLIP_A_MIN) > node_float(n, CLIP_A_MAX)) {
        node_error(g, n, "clip: a_min=%g is above a_max=%g", node_float(n, CLIP_A_MIN),
                   node_float(n, CLIP_A_MAX));
        return false;
    }
    return true;
}

/* dy where a_min <= x <= a_max, else 0 (MXNet's clip backward). */
bool clip_grad(GradCtx *c, const Node *n, int dy)
{
    int in[2] = {dy, n->in[0]};
    int g = grad_emit(c, OP__backward_clip, in, 2, n);
    grad_add(c, n->in[0], g);
    return g >= 0;
}

static const char *elemwise_symbol(OpKind k)
{
    switch (k) {
    case OP_elemwise_add: return "+";
    case OP_elemwise_sub: return "-";
    case OP_elemwise_mul: return "*";
    default: return op_info(k)->name;
    }
}

/* Whether two shapes broadcast (NumPy's rule, as broadcast_shape). */
static bool broadcasts(const Shape *a, const Shape *b)
{
    int r = a->rank > b->rank ? a->rank : b->rank;
    for (int i = 0; i < r; i++) {
        int ia = a->rank - r + i, ib = b->rank - r + i;
        Dim x = ia >= 0 ? a->d[ia] : 1, y = ib >= 0 ? b->d[ib] : 1;
        if (x != y && x != 1 && y != 1)
            return false;
    }
    return true;
}

/* What to do about two shapes '+' or '*' cannot take: broadcast when they
 * broadcast; a residual add of feature maps whose channels or size differ
 * needs a projection of the shortcut (a 1x1 convolution, strided when the
 * size halves), which broadcasting would never give. */
static const char *mismatch_hint(const Node *n, const Shape *a, const Shape *b, char *buf,
                                 size_t cap)
{
    /* there is no broadcast_sub: only + and * have a broadcasting twin */
    if (n->op != OP_elemwise_add && n->op != OP_elemwise_mul)
        return "";
    if (broadcasts(a, b)) {
        snprintf(buf, cap, " (use %s to broadcast)",
                 n->op == OP_elemwise_add ? "broadcast_add" : "broadcast_mul");
        return buf;
    }
    /* the smaller feature map is the block's output (a strided block
     * halves it), the other the shortcut to project onto it */
    bool maps = a->rank == 4 && b->rank == 4 && a->d[0] == b->d[0];
    const Shape *out = maps && a->d[2] <= b->d[2] ? a : b, *sc = out == a ? b : a;
    if (n->op == OP_elemwise_add && maps && out->d[2] > 0 && out->d[3] > 0 &&
        sc->d[2] % out->d[2] == 0 && sc->d[3] % out->d[3] == 0) {
        snprintf(buf, cap,
                 " (a residual shortcut of another shape needs a projection to %lld "
                 "channels: Convolution(x, num_filter=%lld, kernel=(1,1), "
                 "stride=(%lld,%lld)) on the shortcut)",
                 (long long)out->d[1], (long long)out->d[1], (long long)(sc->d[2] / out->d[2]),
                 (long long)(sc->d[3] / out->d[3]));
        return buf;
    }
    return " (they do not broadcast either: one side needs a projection to the other's shape)";
}

bool elemwise_shape(Graph *g, Node *n)
{
    Node *a = in_node(g, n, 0), *b = in_node(g, n, 1);
    if (!require_rank(g, n, a, 0, AMPC_MAX_RANK) || !require_rank(g, n, b, 0, AMPC_MAX_RANK))
        return false;
    if (!shape_equal(&a->shape, &b->shape)) {
        char x[128], y[128], hint[256];
        node_error(g, n, "shape mismatch in '%s': %s vs %s%s", elemwise_symbol(n->op),
                   shape_str(&a->shape, x, sizeof x), shape_str(&b->shape, y, sizeof y),
                   mismatch_hint(n, &a->shape, &b->shape, hint, sizeof hint));
        return false;
    }
    n->shape = a->shape;
    return true;
}

/* One dimension as shape_str writes it: 7, N or 2N. */
static const char *dim_text(Dim d, char *buf, size_t cap)
{
    if (d == DIM_N)
        snprintf(buf, cap, "N");
    else if (dim_is_sym(d))
        snprintf(buf, cap, "%lldN", (long long)-d);
    else
        snprintf(buf, cap, "%lld", (long long)d);
    return buf;
}

bool broadcast_shape(Graph *g, Node *n)
{
    Node *a = in_node(g, n, 0), *b = in_node(g, n, 1);
    if (!require_rank(g, n, a, 0, AMPC_MAX_RANK) || !require_rank(g, n, b, 0, AMPC_MAX_RANK))
        return false;
    int r = a->shape.rank > b->shape.rank ? a->shape.rank : b->shape.rank;
    Shape out = {.rank = r};
    for (int i = 0; i < r; i++) {
        int ia = a->shape.rank - r + i, ib = b->shape.rank - r + i;
        Dim x = ia >= 0 ? a->shape.d[ia] : 1, y = ib >= 0 ? b->shape.d[ib] : 1;
        if (x != y && x != 1 && y != 1) {
            char s1[128], s2[128], t1[32], t2[32];
            node_error(g, n, "%s: shapes %s and %s do not broadcast (axis %d: %s vs %s)",
                       op_info(n->op)->name, shape_str(&a->shape, s1, sizeof s1),
                       shape_str(&b->shape, s2, sizeof s2), i, dim_text(x, t1, sizeof t1),
                       dim_text(y, t2, sizeof t2));
            return false;
        }
        out.d[i] = x == 1 ? y : x;
    }
    n->shape = out;
    return true;
}

bool elemwise_grad(GradCtx *c, const Node *n, int dy)
{
    int a = n->in[0], b = n->in[1];
    switch (n->op) {
    case OP_elemwise_add:
        grad_add(c, a, dy);
        grad_add(c, b, dy);
        return true;
    case OP_elemwise_sub:
        grad_add(c, a, dy);
        if (grad_wants(c, b))
            grad_add(c, b, grad_scalar(c, OP__mul_scalar, dy, -1.0));
        return true;
    default: { /* mul */
        int da[2] = {dy, b}, db[2] = {dy, a};
        if (grad_wants(c, a))
            grad_add(c, a, grad_emit(c, OP_elemwise_mul, da, 2, NULL));
        if (grad_wants(c, b))
            grad_add(c, b, grad_emit(c, OP_elemwise_mul, db, 2, NULL));
        return true;
    }
    }
}

/* broadcast_add/mul: one backward node reduces dy over the broadcast axes,
 * giving the first input's gradient and the second's as part 1. */
bool broadcast_grad(GradCtx *c, const Node *n, int dy)
{
    AttrVal op = {.type = AT_ENUM, .e = n->op == OP_broadcast_add ? BCAST_ADD : BCAST_MUL};
    int in[3] = {dy, n->in[0], n->in[1]};
    int b = grad_emit_attrs(c, OP__backward_broadcast, in, 3, &op, n);
    if (b < 0)
        return false;
    grad_add(c, n->in[0], b);
    if (grad_wants(c, n->in[1]))
        grad_add(c, n->in[1], grad_part(c, b, 1));
    return true;
}

bool scalar_grad(GradCtx *c, const Node *n, int dy)
{
    double s = node_float(n, SCALAR_SCALAR);
    int x = n->in[0], g;
    switch (n->op) {
    case OP__plus_scalar:
    case OP__minus_scalar: g = dy; break;
    case OP__rminus_scalar: g = grad_scalar(c, OP__mul_scalar, dy, -1.0); break;
    case OP__mul_scalar: g = grad_scalar(c, OP__mul_scalar, dy, s); break;
    case OP__div_scalar: g = grad_scalar(c, OP__div_scalar, dy, s); break;
    default: { /* rdiv: d(s/x) = -s/x^2 */
        int in[2] = {dy, x};
        g = grad_emit(c, OP__backward_rdiv_scalar, in, 2, n);
    }
    }
    grad_add(c, x, g);
    return g >= 0;
}

/* The unary ops' names in runtime/kernels/unary.h's order (RtUnaryOp):
 * _backward_unary's op attribute, which the emitter prints as
 * RT_UNARY_<NAME>.  The ops' own rows are ops.def's. */
#define UNARY_NAME(N, n) #n,
static const char *const unary_names[] = {AMPC_UNARY_LIST(UNARY_NAME) NULL};
#undef UNARY_NAME
const AttrSpec bwd_unary_attrs[] = {
    {"op", AT_ENUM, true, NULL, 0, 0, unary_names},
    ATTR_END,
};
_Static_assert(BWD_UNARY_OP == 0 && BWD_UNARY_NATTRS == 1, "bwd_unary_attrs and ir.h agree");

/* exp, log and sqrt have their own backward (dy * y, _backward_log through
 * x, _backward_sqrt through y): the runtime's unary backward reads y for exp
 * and sqrt, which _backward_unary does not pass */
bool bwd_unary_check(Graph *g, Node *n)
{
    int k = node_enum(n, BWD_UNARY_OP);
    if (k == AMPC_UNARY_EXP || k == AMPC_UNARY_LOG || k == AMPC_UNARY_SQRT) {
        node_error(g, n, "_backward_unary: op=%s has its own backward (%s)", unary_names[k],
                   k == AMPC_UNARY_EXP   ? "elemwise_mul of dy and y"
                   : k == AMPC_UNARY_LOG ? "_backward_log"
                                         : "_backward_sqrt");
        return false;
    }
    return true;
}

bool unary_grad(GradCtx *c, const Node *n, int dy)
{
    int g;
    if (n->op == OP_exp) { /* dy * exp(x) = dy * y */
        int in[2] = {dy, n->id};
        g = grad_emit(c, OP_elemwise_mul, in, 2, NULL);
    } else if (n->op == OP_log) {
        int in[2] = {dy, n->in[0]};
        g = grad_emit(c, OP__backward_log, in, 2, n);
    } else if (n->op == OP_sqrt) { /* dy / (2 y) */
        int in[2] = {dy, n->id};
        g = grad_emit(c, OP__backward_sqrt, in, 2, n);
    } else { /* dy * f'(x), f the op's function */
        int k = 0;
        while (unary_names[k] && strcmp(unary_names[k], op_info(n->op)->name) != 0)
            k++;
        if (!unary_names[k])
            DIE("unary_grad: %s is not in runtime/kernels/unary.h's list", op_info(n->op)->name);
        AttrVal op = {.type = AT_ENUM, .e = k};
        int in[2] = {dy, n->in[0]};
        g = grad_emit_attrs(c, OP__backward_unary, in, 2, &op, n);
    }
    grad_add(c, n->in[0], g);
    return g >= 0;
}
