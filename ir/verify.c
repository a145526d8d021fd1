/* verify.c - IR invariants, checked between passes in test builds (and
 * always with --verify), and the shape and type rules checked on a graph
 * that says it has been through them (a dump read back with --from-ir).
 *
 * ir_verify's failures are compiler bugs, never user errors, so they go to
 * stderr with the pass that broke it.  ir_check_rules reports through the
 * graph's Diag at each node, so a disagreement in a dump names its file and
 * line; ir_verify runs it too, so --verify catches what the reader catches. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

static bool bad(const char *pass, const Node *n, const char *what)
{
    fprintf(stderr, "ampc: internal error: IR invalid after %s: node %d (%s): %s\n",
            pass ? pass : "?", n ? n->id : -1, n && n->name ? n->name : "-", what);
    return false;
}

int ir_stage(const char *pass)
{
    static const char *const order[] = {"elaborate", "infer-shapes", "infer-types", "amp",
                                        "cast-elide", "autodiff", "train-cast-elide", "fuse",
                                        "schedule", NULL};
    for (int i = 0; pass && order[i]; i++)
        if (strcmp(order[i], pass) == 0)
            return i;
    return -1;
}

bool op_made_by_autodiff(OpKind k)
{
    return k == OP_part || k == OP_grad_of || k == OP_bn_moving_update || k == OP__slice_axis ||
           strncmp(op_info(k)->name, "_backward_", 10) == 0;
}

bool op_made_by_fuse(OpKind k)
{
    const char *s = op_info(k)->name;
    return strncmp(s, "_fused_", 7) == 0 || strncmp(s, "_backward_fused_", 16) == 0;
}

bool op_made_by_schedule(OpKind k) { return k == OP__layout; }

bool op_is_loss_head(OpKind k) { return k == OP_SoftmaxOutput || k == OP__fused_cast_SoftmaxOutput; }

/* ---- the rules, checked ------------------------------------------------------ */

static bool rule_error(const Graph *g, const Node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool rule_error(const Graph *g, const Node *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_verror_in(g->diag, n->loc, n->frame, fmt, ap);
    va_end(ap);
    return false;
}

/* The op's shape rule run on n's declared inputs must give n's declared
 * shape (and, for the ops autodiff makes, whose rules also give the dtype,
 * its declared dtype).  n is left as it was. */
static bool check_shape(Graph *g, Node *n, bool types)
{
    Shape declared = n->shape;
    DType dt = n->dtype;
    n->dtype = DT_UNKNOWN;
    bool ok = op_info(n->op)->shape(g, n);
    Shape got = n->shape;
    DType gdt = n->dtype;
    n->shape = declared;
    n->dtype = dt;
    if (!ok)
        return false;
    char a[160], b[160];
    if (!shape_equal(&got, &declared))
        return rule_error(g, n, "'%s' is declared %s, but %s gives %s here", n->name,
                          shape_str(&declared, a, sizeof a), op_info(n->op)->name,
                          shape_str(&got, b, sizeof b));
    if (types && gdt != DT_UNKNOWN && gdt != dt)
        return rule_error(g, n, "'%s' is declared %s, but %s gives %s here", n->name,
                          dtype_long(dt), op_info(n->op)->name, dtype_long(gdt));
    /* as infer-shapes refuses it: every size later computed must fit int64 */
    if (!shape_size_ok(&declared))
        return rule_error(g, n, "'%s' is too large: its shape %s has more than 2^60 elements "
                                "per sample",
                          n->name, shape_str(&declared, a, sizeof a));
    return true;
}

/* Two float dtypes meeting in a widest op: the wider, fp32 for fp16 and
 * bf16 (as infer-types decides under AMP). */
static DType widest_of(DType a, DType b)
{
    if (a == b)
        return a;
    return a == DT_F64 || b == DT_F64 ? DT_F64 : DT_F32;
}

/* What infer-types requires of an op's inputs and gives as its dtype.  With
 * amp_pending (a graph before the amp pass, AMP on) it leaves disagreeing
 * float dtypes to the amp pass, as infer-types does then. */
static bool check_op_types(const Graph *g, const Node *n, bool amp_pending)
{
    const OpInfo *oi = op_info(n->op);
    const Node *data = g->nodes[n->in[0]];
    if (!dtype_is_float(data->dtype))
        return rule_error(g, n, "%s needs floating-point data, got %s", oi->name,
                          dtype_long(data->dtype));
    DType dt = data->dtype;
    if (oi->nslots == 0 || oi->amp == AMP_WIDEST)
        for (int j = 1; j < n->nin; j++) {
            DType x = g->nodes[n->in[j]]->dtype;
            if (x != dt && amp_pending && dtype_is_float(x))
                dt = widest_of(dt, x);
            else if (x != dt)
                return rule_error(g, n, "dtype mismatch in %s: %s vs %s (insert a Cast, or "
                                        "compile with --amp)",
                                  oi->name, dtype_long(dt), dtype_long(x));
        }
    for (int s = 1; s < n->nin && s < oi->nslots; s++) {
        const SlotSpec *ss = &oi->slots[s];
        const Node *p = g->nodes[n->in[s]];
        DType want = ss->keep_fp32 ? DT_F32 : dt;
        if (ss->kind == SLOT_LABEL || (ss->kind == SLOT_DATA && oi->amp == AMP_WIDEST) ||
            p->dtype == want || (amp_pending && dtype_is_float(p->dtype)))
            continue;
        return rule_error(g, n, "%s: input '%s' ('%s') is %s but must be %s here", oi->name,
                          ss->name, p->name, dtype_long(p->dtype), dtype_long(want));
    }
    if (n->dtype != dt)
        return rule_error(g, n, "'%s' is declared %s, but %s computes in %s here", n->name,
                          dtype_long(n->dtype), oi->name, dtype_long(dt));
    return true;
}

/* The type rules of infer-types (and of the nodes the amp pass adds), on
 * n's declared inputs. */
static bool check_types(const Graph *g, const Node *n, bool amp_pending)
{
    const Node *in0 = n->nin ? g->nodes[n->in[0]] : NULL;
    switch (n->op) {
    case OP_Input: return true;
    case OP_Param: {
        DType m = node_dtype_attr(n, PARAM_MASTER);
        if (m != DT_UNKNOWN && m != DT_F32)
            return rule_error(g, n, "'%s': a master copy is float32, not %s", n->name,
                              dtype_long(m));
        if (m != DT_UNKNOWN && n->dtype != DT_F16 && n->dtype != DT_BF16)
            return rule_error(g, n, "'%s' is %s, but only a 16-bit parameter has an fp32 master "
                                    "(master=float32)",
                              n->name, dtype_long(n->dtype));
        return true;
    }
    case OP_Cast:
    case OP_amp_cast:
        if (n->dtype != node_dtype_attr(n, CAST_DTYPE))
            return rule_error(g, n, "'%s' is declared %s, but casts to %s", n->name,
                              dtype_long(n->dtype), dtype_long(node_dtype_attr(n, CAST_DTYPE)));
        return true;
    case OP__fused_cast_SoftmaxOutput:
        return true; /* fp32 from 16-bit logits: its shape rule gives its dtype (ops/fused.c) */
    case OP_param_master:
        if (in0->op != OP_Param || node_dtype_attr(in0, PARAM_MASTER) == DT_UNKNOWN)
            return rule_error(g, n, "param_master reads '%s', which is not a parameter with a "
                                    "master copy (master=float32)",
                              in0->name);
        if (n->dtype != node_dtype_attr(in0, PARAM_MASTER))
            return rule_error(g, n, "'%s' is declared %s, but the master of '%s' is %s", n->name,
                              dtype_long(n->dtype), in0->name,
                              dtype_long(node_dtype_attr(in0, PARAM_MASTER)));
        return true;
    case OP_grad_of: {
        const Node *p = g->nodes[n->in[1]];
        int k = p->op == OP_Param ? node_param_kind(p) : -1;
        char a[160], b[160];
        if (k < 0 || k == PK_MOVING_MEAN || k == PK_MOVING_VAR)
            return rule_error(g, n, "grad_of marks the gradient of '%s', which is not a trainable "
                                    "parameter", p->name);
        if (!shape_equal(&in0->shape, &p->shape) || in0->dtype != p->dtype)
            return rule_error(g, n, "the gradient of '%s' (%s%s) is %s%s", p->name,
                              dtype_short(p->dtype), shape_str(&p->shape, a, sizeof a),
                              dtype_short(in0->dtype), shape_str(&in0->shape, b, sizeof b));
        return true;
    }
    default: break;
    }
    /* the other ops autodiff makes: their shape rules give their dtypes */
    return op_made_by_autodiff(n->op) || check_op_types(g, n, amp_pending);
}

/* Every shape and dtype a graph after `pass` must know. */
static bool check_known(const Graph *g, const char *pass, bool shapes, bool types)
{
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        const char *what = shapes && n->shape.rank < 0     ? "shape"
                           : types && n->dtype == DT_UNKNOWN ? "dtype"
                                                             : NULL;
        if (what)
            return rule_error(g, n, "'%s' has no %s, but the file says it is a dump after %s "
                                    "(without that first line, ampc infers shapes and dtypes)",
                              n->name, what, pass);
    }
    return true;
}

static bool check_graph(Graph *g, const char *pass, int stage)
{
    bool shapes = stage >= ir_stage("infer-shapes"), types = stage >= ir_stage("infer-types");
    bool amp_pending = stage < ir_stage("amp") && g->info.amp != DT_UNKNOWN;
    if (!check_known(g, pass, shapes, types))
        return false;
    /* Each node is checked against its inputs as declared, and one that
     * disagrees is reported once; what reads it, directly or not, is not
     * checked, so one wrong line gives one error, not one per reader. */
    char *poisoned = calloc((size_t)(g->nnodes ? g->nnodes : 1), 1);
    if (!poisoned)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        for (int j = 0; j < n->nin && !poisoned[i]; j++)
            poisoned[i] = poisoned[n->in[j]];
        if (poisoned[i])
            continue;
        if (stage < ir_stage("fuse") && op_made_by_fuse(n->op))
            poisoned[i] = !rule_error(g, n, "'%s': %s is made by the fuse pass, but this is a "
                                            "graph after %s",
                                      n->name, op_info(n->op)->name, pass);
        else if (stage < ir_stage("autodiff") && op_made_by_autodiff(n->op))
            poisoned[i] = !rule_error(g, n, "'%s': %s is made by autodiff, but this is a graph "
                                            "after %s",
                                      n->name, op_info(n->op)->name, pass);
        else if (shapes && !check_shape(g, n, types))
            poisoned[i] = 1;
        else if (types && !check_types(g, n, amp_pending))
            poisoned[i] = 1;
        else if (!layout_check(g, n, stage >= ir_stage("schedule")))
            poisoned[i] = 1;
    }
    /* what is read after the step is canonical, except a parameter's
     * gradient, which the optimizer reads in the parameter's layout */
    for (int i = 0; i < g->noutputs && !memchr(poisoned, 1, (size_t)g->nnodes); i++) {
        const Node *o = g->nodes[g->outputs[i]];
        if (o->layout != LAYOUT_NCHW && o->op != OP_grad_of)
            poisoned[o->id] = !rule_error(g, o, "'%s' is an output of the graph but %s (an output "
                                                "is read in the canonical layout, nchw)",
                                          o->name, layout_name(o->layout));
    }
    bool ok = !memchr(poisoned, 1, (size_t)g->nnodes);
    free(poisoned);
    return ok;
}

bool ir_check_rules(Graph *g, const char *pass)
{
    int stage = ir_stage(pass);
    if (stage < 0)
        return true;
    bool ok = check_graph(g, pass, stage);
    ok = (!g->infer || check_graph(g->infer, pass, stage)) && ok;
    /* the two steps share the parameters' buffers, so their layouts */
    for (int i = 0; ok && g->infer && i < g->infer->nnodes; i++) {
        const Node *p = g->infer->nodes[i], *q = p->op == OP_Param ? graph_find(g, p->name) : NULL;
        if (q && q->op == OP_Param && q->layout != p->layout)
            ok = rule_error(g->infer, p, "parameter '%s' is %s here but %s in the training graph "
                                         "(both steps use its one buffer)",
                            p->name, layout_name(p->layout), layout_name(q->layout));
    }
    return ok;
}

/* ---- invariants ------------------------------------------------------------- */

static bool verify_structure(const Graph *g, const char *pass)
{
    int stage = ir_stage(pass);
    bool shapes = stage >= ir_stage("infer-shapes"), types = stage >= ir_stage("infer-types");
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        const OpInfo *oi = op_info(n->op);
        if (n->id != i)
            return bad(pass, n, "id differs from its position");
        if (!n->name || !*n->name)
            return bad(pass, n, "no name");
        /* names are unique in every graph: dumps, --dump-ids=names, ampc
         * diff, checkpoints and --amp-exclude key on them (docs/ir.md) */
        const Node *owner = graph_find(g, n->name);
        if (owner && owner != n) {
            char why[96];
            snprintf(why, sizeof why, "its name is also node %d's (names are unique in a graph)",
                     owner->id);
            return bad(pass, n, why);
        }
        if (!owner)
            return bad(pass, n, "its name is not registered in the graph's name table");
        if (oi->nslots && n->nin > oi->nslots)
            return bad(pass, n, "more inputs than slots");
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] < 0 || n->in[j] >= i)
                return bad(pass, n, "an input is not defined before its use");
        for (int a = 0; a < oi->nattrs; a++)
            if (n->attrs[a].type != oi->attrs[a].type)
                return bad(pass, n, "attribute with the wrong type");
        if (shapes && n->shape.rank < 0)
            return bad(pass, n, "shape unknown after shape inference");
        if (types && n->dtype == DT_UNKNOWN)
            return bad(pass, n, "dtype unknown after type inference");
    }
    if (g->noutputs < 1)
        return bad(pass, NULL, "no outputs");
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] < 0 || g->outputs[i] >= g->nnodes)
            return bad(pass, NULL, "output out of range");
    return true;
}

bool ir_verify(const Graph *g, const char *pass)
{
    if (!verify_structure(g, pass) || (g->infer && !verify_structure(g->infer, pass)))
        return false;
    /* The rules write only the node they check, and restore it; their
     * reports go to the graph's Diag, above the line that says which pass
     * broke them. */
    if (!ir_check_rules((Graph *)g, pass))
        return bad(pass, NULL, "a node disagrees with the shape and type rules (reported above)");
    return true;
}
