/* ops_impl.h - what the op family files share: the declarations ops.def
 * refers to, and helpers for shape rules.  Private to ir/. */
#ifndef AMPC_OPS_IMPL_H
#define AMPC_OPS_IMPL_H

#include "../ir.h"

#define OP(id, name, prefix, amp, nslots, slots, nattrs, attrs, check, shape, flops, grad) \
    extern const SlotSpec slots[];                                                         \
    extern const AttrSpec attrs[];                                                         \
    bool check(Graph *g, Node *n);                                                         \
    bool shape(Graph *g, Node *n);                                                         \
    double flops(const Graph *g, const Node *n);                                           \
    bool grad(GradCtx *c, const Node *n, int dy);
#include "../ops.def"
#undef OP

#define SLOT_END {NULL, SLOT_DATA, NULL, false}
#define ATTR_END {NULL, AT_INT, false, NULL, 0, 0, NULL}
#define INT_MAX_ATTR 2147483647.0

/* BatchNorm's attributes, in the order of ir.h's BN_*: also the first ones
 * of the fused ops that run a BatchNorm (ops/fused.c). */
#define BN_ATTR_SPECS                                                             \
    {"eps", AT_FLOAT, false, "1e-5", 1e-30, 1e30, NULL},                          \
    {"momentum", AT_FLOAT, false, "0.9", 0, 1, NULL},                             \
    {"fix_gamma", AT_BOOL, false, "false", 0, 0, NULL},                           \
    {"use_global_stats", AT_BOOL, false, "false", 0, 0, NULL},                    \
    {"axis", AT_INT, false, "1", -AMPC_MAX_RANK, AMPC_MAX_RANK - 1, NULL}

/* BatchNorm's input slots: also the first ones of the fused ops that run it */
#define BN_SLOT_SPECS                                                                              \
    {"data", SLOT_DATA, NULL, false}, {"gamma", SLOT_PARAM, "gamma", true},                        \
        {"beta", SLOT_PARAM, "beta", true}, {"moving_mean", SLOT_AUX, "moving_mean", true},        \
    {                                                                                              \
        "moving_var", SLOT_AUX, "moving_var", true                                                 \
    }

/* SoftmaxOutput's attributes, in the order of ir.h's SMO_*: also the first
 * ones of the fused ops that run it or its backward (ops/fused.c). */
extern const char *const smo_norms[];
#define SMO_ATTR_SPECS                                                            \
    {"grad_scale", AT_FLOAT, false, "1", -1e30, 1e30, NULL},                      \
    {"ignore_label", AT_FLOAT, false, "-1", -1e30, 1e30, NULL},                   \
    {"use_ignore", AT_BOOL, false, "false", 0, 0, NULL},                          \
    {"normalization", AT_ENUM, false, "null", 0, 0, smo_norms},                   \
    {"smooth_alpha", AT_FLOAT, false, "0", 0, 1, NULL}

static inline Node *in_node(const Graph *g, const Node *n, int i) { return g->nodes[n->in[i]]; }

/* The input in a slot (by index), or NULL when absent (no_bias). */
Node *slot_input(const Graph *g, const Node *n, int slot);

/* For a parameter or aux input: set its shape if unknown, or check it
 * against what the op expects.  Reports "<what> shape [..] does not match
 * the expected [..]" at n. */
bool expect_input_shape(Graph *g, Node *n, int slot, const Shape *want, const char *why);

/* Requires a data input with a known shape and a rank in [lo, hi]. */
bool require_rank(Graph *g, Node *n, const Node *data, int lo, int hi);

/* Normalises an empty tuple attribute to `rank` copies of fill, and checks
 * that a given one has that rank. */
bool tuple_fill(Graph *g, Node *n, int attr, int rank, int64_t fill);

/* Checked dimension arithmetic (N-multiples are kept symbolic). */
bool dim_mul(Dim a, Dim b, Dim *out);

#endif
