/* infer_types.c - the infer-types pass, with MXNet's rules.
 *
 * An op computes in the dtype of its data input; its parameters follow that
 * dtype (a model cast to fp16 by hand gets fp16 weights), except the slots
 * marked keep_fp32 in the op table (BatchNorm's gamma, beta and moving
 * statistics), which stay fp32.  Inputs and labels keep the dtype they were
 * declared with; Cast gives the dtype it names; param_master the dtype of its
 * parameter's master.  Mixed float dtypes meeting in one op are an error
 * when AMP is off (g->info.amp unset): inserting casts is the AMP pass's job.
 * When AMP is on they are not, since the AMP pass decides every op's dtype
 * and casts what disagrees: a widest op then takes the widest of its
 * inputs' dtypes (MXNet's amp_multicast) and a parameter keeps the dtype its
 * first reader gave it. */
#include "passes.h"

static bool set_param_dtype(Graph *g, Node *n, int slot, DType want)
{
    Node *p = g->nodes[n->in[slot]];
    if (p->dtype == DT_UNKNOWN && p->op == OP_Param) {
        p->dtype = want;
        return true;
    }
    if (p->dtype != want && !(g->info.amp != DT_UNKNOWN && dtype_is_float(p->dtype))) {
        node_error(g, n, "%s: input '%s' ('%s') is %s but must be %s here",
                   op_info(n->op)->name, op_info(n->op)->slots[slot].name, p->name,
                   dtype_long(p->dtype), dtype_long(want));
        return false;
    }
    return true;
}

/* A parameter read as data rather than through a parameter slot
 * (broadcast_add(x, param(...)), exp(p), Concat) takes the dtype of the op's
 * other data, or float32, MXNet's default, when nothing else gives one. */
static void type_data_params(Graph *g, const Node *n)
{
    const OpInfo *oi = op_info(n->op);
    DType known = DT_UNKNOWN;
    for (int j = 0; j < n->nin && known == DT_UNKNOWN; j++)
        if (j >= oi->nslots || oi->slots[j].kind == SLOT_DATA)
            known = g->nodes[n->in[j]]->dtype;
    for (int j = 0; j < n->nin; j++) {
        Node *x = g->nodes[n->in[j]];
        if ((j >= oi->nslots || oi->slots[j].kind == SLOT_DATA) && x->op == OP_Param &&
            x->dtype == DT_UNKNOWN)
            x->dtype = known != DT_UNKNOWN ? known : DT_F32;
    }
}

/* What param_master(p) reads: p's master copy (fp32 unless the parameter
 * says otherwise), or p itself when it has none. */
static DType master_dtype(const Node *p)
{
    if (p->op != OP_Param)
        return p->dtype;
    DType m = node_dtype_attr(p, PARAM_MASTER);
    return m != DT_UNKNOWN ? m : p->dtype;
}

/* Two float dtypes meeting in a widest op: the wider one, and fp32 for fp16
 * with bf16 (neither holds the other). */
static DType dtype_widest(DType a, DType b)
{
    if (a == b)
        return a;
    if (a == DT_F64 || b == DT_F64)
        return DT_F64;
    return DT_F32;
}

static bool type_node(Graph *g, Node *n)
{
    const OpInfo *oi = op_info(n->op);
    if (n->op == OP_Input || n->op == OP_Param)
        return true;
    type_data_params(g, n);
    const Node *data = g->nodes[n->in[0]];
    if (!dtype_is_float(data->dtype)) {
        if (n->op == OP_Cast || n->op == OP_amp_cast) {
            n->dtype = (DType)n->attrs[CAST_DTYPE].e;
            return true;
        }
        node_error(g, n, "%s needs floating-point data, got %s", oi->name,
                   dtype_long(data->dtype));
        return false;
    }
    if (n->op == OP_Cast || n->op == OP_amp_cast) {
        n->dtype = (DType)n->attrs[CAST_DTYPE].e;
        return true;
    }
    if (n->op == OP_param_master) {
        n->dtype = master_dtype(data);
        return true;
    }
    DType dt = data->dtype;
    if (oi->nslots == 0 || oi->amp == AMP_WIDEST) {
        /* every input is data: they must agree, or with AMP on the widest */
        for (int j = 1; j < n->nin; j++) {
            const Node *x = g->nodes[n->in[j]];
            if (x->dtype != dt && g->info.amp != DT_UNKNOWN && dtype_is_float(x->dtype)) {
                dt = dtype_widest(dt, x->dtype);
            } else if (x->dtype != dt) {
                node_error(g, n, "dtype mismatch in %s: %s vs %s (insert a Cast, or compile "
                                 "with --amp)", oi->name, dtype_long(dt), dtype_long(x->dtype));
                return false;
            }
        }
    }
    for (int s = 1; s < n->nin && s < oi->nslots; s++) {
        const SlotSpec *ss = &oi->slots[s];
        if (ss->kind == SLOT_LABEL)
            continue;
        if (ss->kind == SLOT_DATA && oi->amp == AMP_WIDEST)
            continue;
        if (!set_param_dtype(g, n, s, ss->keep_fp32 ? DT_F32 : dt))
            return false;
    }
    n->dtype = dt;
    return true;
}

bool infer_types(Graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (!type_node(g, g->nodes[i]))
            return false;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->dtype == DT_UNKNOWN)
            g->nodes[i]->dtype = DT_F32; /* a parameter only a label slot reads */
    return true;
}
