/* amp.c - the AMP rewrite: which dtype each op runs in, and the casts that
 * follow from it.
 *
 * Classes come from the op table (facts from Apache MXNet's AMP lists; see
 * docs/amp.md): fp16 ops run in the target dtype, fp32 ops in fp32, follow
 * ops in the dtype that arrives, widest ops in the widest float dtype among
 * their inputs; a few ops are fp32 only for some attribute values.
 *
 * Two phases make the result independent of visiting order:
 *   1. decide: each node's output dtype, from its inputs' decisions only,
 *      and which dtypes each parameter is read in;
 *   2. build: a new graph, asking for each input "this value in dtype d".
 *      The answer is the value itself, the original of an amp_cast (so a
 *      cast is never cast again), or one amp_cast per (value, dtype), shared
 *      by every consumer (a cast cache, as in MXNet's and TVM's passes).
 * Parameters read in 16 bits become 16-bit shadows with an fp32 master the
 * optimizer keeps (Param master=float32): the forward graph has no weight
 * casts.  A consumer that wants fp32 reads the master (param_master). */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const Graph *old;
    Graph *ng;
    const AmpOptions *opt;
    DType *run;          /* old id -> output dtype in the new graph */
    const char **why;    /* old id -> reason (--explain) */
    uint8_t *reads;      /* old Param id -> bit set of dtypes it is read in */
    int *map;            /* old id -> new id */
    int *master;         /* old Param id -> new param_master id, or -1 */
    int *cache;          /* new id * DT_COUNT + dtype -> amp_cast id, or -1 */
    int *cast_src;       /* new id -> the value an amp_cast made here casts, or -1 */
    int cap;             /* entries in cache/cast_src (by new id) */
    bool force16[OP_COUNT], force32[OP_COUNT];
    StrMap exclude;
    int inserted;
} Amp;

static const char *dname(DType t)
{
    switch (t) {
    case DT_F16: return "fp16";
    case DT_BF16: return "bf16";
    case DT_F32: return "fp32";
    case DT_F64: return "fp64";
    default: return dtype_short(t);
    }
}

static bool is_low(DType t) { return t == DT_F16 || t == DT_BF16; }

/* Ops that are fp32 only for some attribute values (MXNet's
 * CONDITIONAL_FP32_FUNCS). */
static const struct {
    OpKind op;
    int attr, value;
    const char *text;
} cond_fp32[] = {
    {OP_Activation, ACT_TYPE, ACT_SOFTRELU, "Activation act_type=softrelu"},
    {OP_LeakyReLU, LRELU_TYPE, LRELU_ELU, "LeakyReLU act_type=elu"},
    {OP_LeakyReLU, LRELU_TYPE, LRELU_SELU, "LeakyReLU act_type=selu"},
};

/* ---- options ---------------------------------------------------------------- */

/* Calls fn on each comma-separated item of list; false stops. */
static bool each_item(const char *list, bool (*fn)(Amp *, const char *, const char *),
                      Amp *a, const char *flag)
{
    if (!list)
        return true;
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char item[128];
        if (n && n < sizeof item) {
            memcpy(item, p, n);
            item[n] = 0;
            if (!fn(a, item, flag))
                return false;
        } else if (n) {
            diag_plain_error(a->old->diag, "%s: name too long", flag);
            return false;
        }
        p += n + (end != NULL);
    }
    return true;
}

static bool force_op(Amp *a, const char *name, const char *flag)
{
    OpKind k = op_lookup(name);
    if (k == OP_COUNT || op_table[k].amp == AMP_NONE) {
        diag_plain_error(a->old->diag, "%s: '%s' is not an op that AMP assigns a dtype", flag, name);
        return false;
    }
    if (op_table[k].amp == AMP_WIDEST) {
        diag_plain_error(a->old->diag,
                         "%s: %s is a widest-type op: it runs in the widest dtype among its "
                         "inputs and cannot be forced to a class", flag, name);
        return false;
    }
    bool to16 = strcmp(flag, "--amp-fp16") == 0;
    if ((to16 && a->force32[k]) || (!to16 && a->force16[k])) {
        diag_plain_error(a->old->diag, "%s is in both --amp-fp16 and --amp-fp32", name);
        return false;
    }
    (to16 ? a->force16 : a->force32)[k] = true;
    return true;
}

static bool exclude_name(Amp *a, const char *name, const char *flag)
{
    const Node *n = graph_find(a->old, name);
    if (!n) {
        diag_plain_error(a->old->diag, "%s: no node named '%s' (see --dump=infer-types for names)",
                         flag, name);
        return false;
    }
    strmap_put(&a->exclude, n->name, n->id);
    return true;
}

/* ---- phase 1: decide ------------------------------------------------------ */

static AmpClass effective_class(Amp *a, const Node *n, const char **why)
{
    const OpInfo *oi = op_info(n->op);
    if (strmap_get(&a->exclude, n->name)) {
        *why = "excluded by --amp-exclude";
        return AMP_F32;
    }
    for (size_t i = 0; i < sizeof cond_fp32 / sizeof cond_fp32[0]; i++)
        if (cond_fp32[i].op == n->op && n->attrs[cond_fp32[i].attr].e == cond_fp32[i].value) {
            *why = arena_printf(&a->ng->arena, "%s is conditional fp32", cond_fp32[i].text);
            return AMP_F32;
        }
    if (a->force16[n->op]) {
        *why = arena_printf(&a->ng->arena, "%s moved to the %s class by --amp-fp16", oi->name,
                            dname(a->opt->target));
        return AMP_F16;
    }
    if (a->force32[n->op]) {
        *why = arena_printf(&a->ng->arena, "%s moved to the fp32 class by --amp-fp32", oi->name);
        return AMP_F32;
    }
    if (oi->amp == AMP_F16)
        *why = arena_printf(&a->ng->arena, "%s is in the %s class", oi->name, dname(a->opt->target));
    else if (oi->amp == AMP_F32)
        *why = arena_printf(&a->ng->arena, "%s is in the fp32 class", oi->name);
    return oi->amp;
}

/* Whether input j of n is data AMP may cast (not a label, parameter or
 * statistic: those are never cast). */
static bool castable_input(const Graph *g, const Node *n, int j)
{
    const OpInfo *oi = op_info(n->op);
    if (!dtype_is_float(g->nodes[n->in[j]]->dtype))
        return false;
    if (oi->nslots == 0)
        return true;
    SlotKind k = oi->slots[j].kind;
    if (k == SLOT_LABEL)
        return false;
    if (k == SLOT_DATA)
        return true;
    /* a tensor passed where a parameter goes is cast like data */
    return g->nodes[n->in[j]]->op != OP_Param;
}

static DType widest(Amp *a, const Node *n, char *list, size_t cap)
{
    DType w = DT_UNKNOWN;
    size_t k = 0;
    list[0] = 0;
    for (int j = 0; j < n->nin; j++) {
        if (!castable_input(a->old, n, j))
            continue;
        DType t = a->run[n->in[j]];
        k += (size_t)snprintf(list + k, k < cap ? cap - k : 0, "%s%s", k ? ", " : "", dtype_short(t));
        if (w == DT_UNKNOWN || t == w)
            w = t;
        else if (t == DT_F64 || w == DT_F64)
            w = DT_F64;
        else
            w = DT_F32; /* f32 with anything narrower, or f16 with bf16 */
    }
    return w;
}

static void decide(Amp *a, const Node *n)
{
    const Graph *g = a->old;
    const char *why = NULL;
    DType out = n->dtype;
    switch (n->op) {
    case OP_Input: why = "a model input keeps its declared dtype"; break;
    case OP_Param: break; /* decided from its readers, below */
    case OP_Cast: why = "the user's Cast"; break;
    case OP_amp_cast:
    case OP_param_master: break;
    default: {
        const Node *data = g->nodes[n->in[0]];
        if (!dtype_is_float(data->dtype) || a->opt->target == DT_UNKNOWN)
            break;
        AmpClass c = effective_class(a, n, &why);
        if (c == AMP_F16) {
            out = a->opt->target;
        } else if (c == AMP_F32) {
            out = DT_F32;
        } else if (c == AMP_FOLLOW) {
            out = a->run[data->id];
            why = arena_printf(&a->ng->arena, "follows %s", data->name);
        } else if (c == AMP_WIDEST) {
            char list[128];
            out = widest(a, n, list, sizeof list);
            why = arena_printf(&a->ng->arena, "widest of (%s)", list);
        }
    }
    }
    a->run[n->id] = out;
    a->why[n->id] = why;
    /* the dtypes parameters are read in */
    const OpInfo *oi = op_info(n->op);
    for (int j = 0; j < n->nin && j < oi->nslots; j++) {
        const Node *p = g->nodes[n->in[j]];
        if (p->op != OP_Param || oi->slots[j].kind == SLOT_DATA || oi->slots[j].kind == SLOT_LABEL)
            continue;
        a->reads[p->id] |= (uint8_t)(1u << (oi->slots[j].keep_fp32 ? DT_F32 : out));
    }
}

/* A parameter read in 16 bits (or already 16-bit) is stored as a 16-bit
 * shadow of an fp32 master. */
static DType param_dtype(Amp *a, const Node *p, DType *master)
{
    *master = DT_UNKNOWN;
    DType low = DT_UNKNOWN;
    if (is_low(p->dtype))
        low = p->dtype;
    for (int t = 0; t < DT_COUNT; t++)
        if ((a->reads[p->id] >> t & 1) && is_low((DType)t))
            low = (low == DT_UNKNOWN || t == (int)a->opt->target) ? (DType)t : low;
    if (low == DT_UNKNOWN)
        return p->dtype;
    if (a->opt->target != DT_UNKNOWN || a->opt->multi_precision)
        *master = DT_F32;
    return low;
}

/* ---- phase 2: build -------------------------------------------------------- */

static void grow(Amp *a, int need)
{
    if (need <= a->cap)
        return;
    int cap = a->cap * 2 > need ? a->cap * 2 : need;
    a->cache = realloc(a->cache, sizeof(int) * (size_t)cap * DT_COUNT);
    a->cast_src = realloc(a->cast_src, sizeof(int) * (size_t)cap);
    if (!a->cache || !a->cast_src)
        DIE("out of memory");
    for (int i = a->cap * DT_COUNT; i < cap * DT_COUNT; i++)
        a->cache[i] = -1;
    for (int i = a->cap; i < cap; i++)
        a->cast_src[i] = -1;
    a->cap = cap;
}

static Node *copy_node(Amp *a, const Node *o, const int *in, int nin)
{
    Node *c = graph_add(a->ng, o->op, in, nin, o->loc, o->frame);
    for (int k = 0; k < op_info(o->op)->nattrs; k++) {
        c->attrs[k] = o->attrs[k];
        if (o->attrs[k].type == AT_STR)
            c->attrs[k].s = arena_strdup(&a->ng->arena, o->attrs[k].s);
    }
    c->shape = o->shape;
    c->flags = o->flags & ~(uint32_t)NF_OUTPUT;
    if (!graph_set_name(a->ng, c, o->name))
        DIE("amp: duplicate name %s", o->name);
    grow(a, a->ng->nnodes);
    return c;
}

/* Value v in dtype d: itself, the original of an amp_cast, or a shared cast. */
static int as_dtype(Amp *a, int v, DType d)
{
    Graph *g = a->ng;
    if (g->nodes[v]->dtype == d)
        return v;
    int src = a->cast_src[v] >= 0 ? a->cast_src[v] : v;
    if (g->nodes[src]->dtype == d)
        return src;
    int *slot = &a->cache[src * DT_COUNT + d];
    if (*slot >= 0)
        return *slot;
    const Node *s = g->nodes[src];
    Node *c = graph_add(g, OP_amp_cast, &src, 1, s->loc, s->frame);
    c->attrs[CAST_DTYPE].e = d;
    c->shape = s->shape;
    c->dtype = d;
    const char *name = arena_printf(&g->arena, "%s_amp_%s", s->name, dtype_short(d));
    for (int k = 2; !graph_set_name(g, c, name); k++)
        name = arena_printf(&g->arena, "%s_amp_%s_%d", s->name, dtype_short(d), k);
    grow(a, g->nnodes);
    a->cache[src * DT_COUNT + d] = c->id;
    a->cast_src[c->id] = src;
    a->inserted++;
    return c->id;
}

static int master_of(Amp *a, const Node *p)
{
    if (a->master[p->id] >= 0)
        return a->master[p->id];
    int np = a->map[p->id];
    Node *m = graph_add(a->ng, OP_param_master, &np, 1, p->loc, p->frame);
    m->shape = p->shape;
    m->dtype = DT_F32;
    if (!graph_set_name(a->ng, m, arena_printf(&a->ng->arena, "%s_master", p->name)))
        DIE("amp: master name taken");
    grow(a, a->ng->nnodes);
    a->master[p->id] = m->id;
    return m->id;
}

static void build(Amp *a, const Node *o)
{
    const Graph *g = a->old;
    if (o->op == OP_Param) {
        DType master;
        Node *c = copy_node(a, o, NULL, 0);
        c->dtype = param_dtype(a, o, &master);
        c->attrs[PARAM_MASTER].e = master;
        a->map[o->id] = c->id;
        return;
    }
    /* on the heap: a Concat may have millions of inputs */
    int *in = malloc(sizeof(int) * (size_t)(o->nin ? o->nin : 1));
    if (!in)
        DIE("out of memory");
    DType run = a->run[o->id];
    bool is_cast = o->op == OP_Cast || o->op == OP_amp_cast || o->op == OP_param_master;
    for (int j = 0; j < o->nin; j++) {
        const Node *p = g->nodes[o->in[j]];
        int v = a->map[p->id];
        if (!is_cast && castable_input(g, o, j)) {
            v = as_dtype(a, v, run);
        } else if (!is_cast && p->op == OP_Param && op_info(o->op)->nslots &&
                   !op_info(o->op)->slots[j].keep_fp32 && a->ng->nodes[v]->dtype != run &&
                   dtype_is_float(run)) {
            /* a 16-bit shadow read by an fp32 op: read the master instead */
            v = (run == DT_F32 && node_dtype_attr(a->ng->nodes[v], PARAM_MASTER) == DT_F32)
                    ? master_of(a, p)
                    : as_dtype(a, v, run);
        }
        in[j] = v;
    }
    Node *c = copy_node(a, o, in, o->nin);
    free(in);
    c->dtype = run;
    a->map[o->id] = c->id;
}

static void finish_outputs(Amp *a)
{
    for (int i = 0; i < a->old->noutputs; i++) {
        const Node *o = a->old->nodes[a->old->outputs[i]];
        int v = a->map[o->id];
        if (dtype_is_float(o->dtype))
            v = as_dtype(a, v, o->dtype);
        graph_add_output(a->ng, v);
    }
}

static void amp_free(Amp *a)
{
    free(a->run);
    free(a->why);
    free(a->reads);
    free(a->map);
    free(a->master);
    free(a->cache);
    free(a->cast_src);
    strmap_free(&a->exclude);
}

bool amp(Graph **gp, const AmpOptions *opt)
{
    const Graph *g = *gp;
    int n = g->nnodes ? g->nnodes : 1;
    Amp a = {.old = g, .opt = opt};
    a.run = calloc((size_t)n, sizeof *a.run);
    a.why = calloc((size_t)n, sizeof *a.why);
    a.reads = calloc((size_t)n, 1);
    a.map = calloc((size_t)n, sizeof *a.map);
    a.master = malloc(sizeof(int) * (size_t)n);
    if (!a.run || !a.why || !a.reads || !a.map || !a.master)
        DIE("out of memory");
    for (int i = 0; i < n; i++)
        a.master[i] = -1;
    a.ng = graph_new(g->diag, g->model);
    if (!each_item(opt->fp16_ops, force_op, &a, "--amp-fp16") ||
        !each_item(opt->fp32_ops, force_op, &a, "--amp-fp32") ||
        !each_item(opt->exclude, exclude_name, &a, "--amp-exclude")) {
        graph_free(a.ng);
        amp_free(&a);
        return false;
    }
    graph_set_train(a.ng, g->train, g->ntrain);
    a.ng->info = g->info;
    a.ng->info.amp = opt->target;
    for (int i = 0; i < g->nnodes; i++)
        decide(&a, g->nodes[i]);
    for (int i = 0; i < g->nnodes; i++)
        build(&a, g->nodes[i]);
    finish_outputs(&a);
    a.ng->info.casts_inserted += a.inserted;
    if (opt->explain) {
        a.ng->why = arena_alloc(&a.ng->arena, sizeof(char *) * (size_t)(a.ng->nnodes + 1));
        for (int i = 0; i < g->nnodes; i++) {
            const char *w = a.why[i];
            DType t = a.ng->nodes[a.map[i]]->dtype;
            if (g->nodes[i]->op != OP_Param)
                a.ng->why[a.map[i]] = arena_printf(&a.ng->arena, "%s: %s", dname(t),
                                                   w ? w : "amp is off");
        }
    }
    amp_free(&a);
    graph_free(*gp);
    *gp = a.ng;
    return true;
}
