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
    int cap;             /* entries in cache/cast_src/origin (by new id) */
    /* cast placement (amp_place.c) */
    uint8_t *cls;        /* old id -> its effective AmpClass */
    DType *label;        /* old id -> the dtype placement chose for a free op, or DT_UNKNOWN */
    int *ucast;          /* old id * DT_COUNT + dtype -> the user's Cast that is that copy, or -1 */
    int *canon;          /* old id -> the value it is (through no-op and repeated user Casts) */
    int *origin;         /* new id -> the old node it copies, or -1 */
    uint8_t *built;      /* old id -> built (user Casts may be built early, when reused) */
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

int amp_conditional_fp32(OpKind op, const char **texts, int max)
{
    int n = 0;
    for (size_t i = 0; i < sizeof cond_fp32 / sizeof cond_fp32[0]; i++)
        if (cond_fp32[i].op == op && n < max)
            texts[n++] = cond_fp32[i].text;
    return n;
}

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

/* An op with a label slot computes a loss: autodiff seeds the gradients at
 * its output and the program logs it, both in fp32. */
static bool is_loss_head(OpKind k)
{
    const OpInfo *oi = op_info(k);
    for (int j = 0; j < oi->nslots; j++)
        if (oi->slots[j].kind == SLOT_LABEL)
            return true;
    return false;
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
    if (to16 && is_loss_head(k)) {
        diag_plain_error(a->old->diag,
                         "%s: %s is a loss head: training reads the loss and seeds the "
                         "gradients at its output, in fp32, so it cannot run in 16 bits",
                         flag, name);
        return false;
    }
    /* MXNet's convert_symbol refuses an op in both its target and its
     * conditional lists ("Ops cannot be in two or more lists"): moved to
     * fp16, softrelu, elu and selu would either leave the class silently or
     * run in 16 bits against the list's intent */
    char which[160] = "";
    for (size_t i = 0; to16 && i < sizeof cond_fp32 / sizeof cond_fp32[0]; i++)
        if (cond_fp32[i].op == k)
            snprintf(which + strlen(which), sizeof which - strlen(which), "%s%s",
                     which[0] ? ", " : "", cond_fp32[i].text);
    if (which[0]) {
        diag_plain_error(a->old->diag,
                         "%s: %s is conditional fp32 (%s: fp32, MXNet's CONDITIONAL_FP32_FUNCS), "
                         "so it cannot also be moved to the %s class (MXNet refuses the same); "
                         "its other act_types already follow their input",
                         flag, name, which, dname(a->opt->target));
        return false;
    }
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
    /* only an op AMP assigns a dtype can be kept in fp32: anything else
     * would be silently ignored */
    const char *what = n->op == OP_Param   ? "a parameter, whose dtype follows the ops that read it"
                       : n->op == OP_Input ? "a model input, which keeps its declared dtype"
                       : n->op == OP_Cast  ? "the user's Cast, which keeps the dtype written"
                       : op_info(n->op)->amp == AMP_NONE ? "not an op AMP assigns a dtype"
                                                         : NULL;
    if (what) {
        diag_plain_error(a->old->diag, "%s: '%s' is %s: exclude the ops that read it instead",
                         flag, name, what);
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

static bool is_cast_op(OpKind k)
{
    return k == OP_Cast || k == OP_amp_cast || k == OP_param_master;
}

/* The dtype input j of n is read in, given the dtype n runs in: `run` for
 * data, parameters and anything else in an ordinary slot; fp32 for a
 * keep_fp32 slot (BatchNorm's gamma, beta and statistics), whatever produces
 * the value; DT_UNKNOWN (as it arrives) for labels, integers and the inputs
 * of casts, which give their own dtype. */
static DType input_dtype(const Graph *g, const Node *n, int j, DType run)
{
    const OpInfo *oi = op_info(n->op);
    if (!dtype_is_float(g->nodes[n->in[j]]->dtype) || is_cast_op(n->op))
        return DT_UNKNOWN;
    if (oi->nslots && oi->slots[j].kind == SLOT_LABEL)
        return DT_UNKNOWN;
    if (oi->nslots && oi->slots[j].keep_fp32)
        return DT_F32;
    return dtype_is_float(run) ? run : DT_UNKNOWN;
}

/* Whether input j of n is data whose dtype takes part in n's own (a widest
 * op's operands): not a label, an integer, a keep_fp32 slot or a parameter
 * in a parameter slot. */
static bool castable_input(const Graph *g, const Node *n, int j)
{
    const OpInfo *oi = op_info(n->op);
    if (input_dtype(g, n, j, DT_F32) != DT_F32 || (oi->nslots && oi->slots[j].keep_fp32))
        return false;
    /* a tensor passed where a parameter goes is cast like data */
    return !oi->nslots || oi->slots[j].kind == SLOT_DATA || g->nodes[n->in[j]]->op != OP_Param;
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
        a->cls[n->id] = (uint8_t)c;
        if (a->label && a->label[n->id] != DT_UNKNOWN && a->label[n->id] != out) {
            why = arena_printf(&a->ng->arena, "the fewest bytes converted (greedy gives %s: %s)",
                               dname(out), why);
            out = a->label[n->id];
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
    /* a master the input graph gives (a dump read back) is kept: its
     * param_master readers need it */
    *master = node_dtype_attr(p, PARAM_MASTER);
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

/* ---- cast placement -------------------------------------------------------- */

/* Which user Cast is the copy of which value in which dtype, so that AMP
 * reads it instead of casting again.  As cast-elide will, a no-op Cast is
 * its input and a second equal Cast is the first. */
static void user_casts(Amp *a)
{
    const Graph *g = a->old;
    size_t n = (size_t)(g->nnodes ? g->nnodes : 1);
    a->ucast = malloc(sizeof(int) * n * DT_COUNT);
    a->canon = malloc(sizeof(int) * n);
    if (!a->ucast || !a->canon)
        DIE("out of memory");
    for (size_t i = 0; i < n * DT_COUNT; i++)
        a->ucast[i] = -1;
    for (int c = 0; c < g->nnodes; c++) {
        const Node *cn = g->nodes[c];
        a->canon[c] = c;
        if (cn->op != OP_Cast || g->nodes[cn->in[0]]->op == OP_Param)
            continue;
        int u = a->canon[cn->in[0]], *slot = &a->ucast[u * DT_COUNT + a->run[c]];
        if (a->run[u] == a->run[c])
            a->canon[c] = u;
        else if (*slot >= 0)
            a->canon[c] = *slot;
        else
            *slot = c;
    }
}

/* Chooses the dtype of every free follow and widest op (amp_place.c) and
 * decides again with those dtypes; greedy's decisions are what decide gave. */
static void place(Amp *a)
{
    const Graph *g = a->old;
    size_t n = (size_t)(g->nnodes ? g->nnodes : 1);
    a->label = malloc(sizeof(DType) * n);
    if (!a->label)
        DIE("out of memory");
    AmpPlace p = {.g = g, .target = a->opt->target, .run = a->run, .cls = a->cls,
                  .read_dtype = input_dtype, .operand = castable_input,
                  .mode = a->opt->placement, .given = a->opt->labels, .label = a->label};
    amp_place(&p);
    GraphInfo *info = &a->ng->info;
    info->place_optimal[0] = p.optimal.converted, info->place_optimal[1] = p.optimal.wide32;
    info->place_greedy[0] = p.greedy.converted, info->place_greedy[1] = p.greedy.wide32;
    info->place_mode = 1 + (int)p.mode;
    bool changed = false;
    for (int i = 0; i < g->nnodes && !changed; i++)
        changed = a->label[i] != DT_UNKNOWN && a->label[i] != a->run[i];
    if (changed) {
        memset(a->reads, 0, n);
        for (int i = 0; i < g->nnodes; i++)
            decide(a, g->nodes[i]);
    }
    user_casts(a);
}

/* ---- phase 2: build -------------------------------------------------------- */

static void grow(Amp *a, int need)
{
    if (need <= a->cap)
        return;
    int cap = a->cap * 2 > need ? a->cap * 2 : need;
    a->cache = realloc(a->cache, sizeof(int) * (size_t)cap * DT_COUNT);
    a->cast_src = realloc(a->cast_src, sizeof(int) * (size_t)cap);
    a->origin = realloc(a->origin, sizeof(int) * (size_t)cap);
    if (!a->cache || !a->cast_src || !a->origin)
        DIE("out of memory");
    for (int i = a->cap * DT_COUNT; i < cap * DT_COUNT; i++)
        a->cache[i] = -1;
    for (int i = a->cap; i < cap; i++)
        a->cast_src[i] = a->origin[i] = -1;
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

static void build(Amp *a, const Node *o);

static void build_once(Amp *a, const Node *o)
{
    if (a->built[o->id])
        return;
    build(a, o);
    a->built[o->id] = 1;
    a->origin[a->map[o->id]] = o->id;
}

/* The user's Cast that is new value v's copy in dtype d, built now if the
 * storage order has not reached it (with the unbuilt no-op Casts it reads,
 * innermost first; no recursion), or -1. */
static int user_copy(Amp *a, int v, DType d)
{
    int o = a->origin[v];
    int c = o >= 0 && a->ucast ? a->ucast[a->canon[o] * DT_COUNT + d] : -1;
    if (c < 0)
        return -1;
    while (!a->built[c]) {
        int x = c;
        while (!a->built[a->old->nodes[x]->in[0]])
            x = a->old->nodes[x]->in[0];
        build_once(a, a->old->nodes[x]);
    }
    return a->map[c];
}

/* Value v in dtype d: itself, the original of an amp_cast, the user's Cast
 * of it to d, or a shared cast.  A user's Cast that changes nothing (its
 * input has its dtype) is looked through: cast-elide removes it. */
static int as_dtype(Amp *a, int v, DType d)
{
    Graph *g = a->ng;
    if (g->nodes[v]->dtype == d)
        return v;
    int src = a->cast_src[v] >= 0 ? a->cast_src[v] : v;
    while (g->nodes[src]->op == OP_Cast && g->nodes[g->nodes[src]->in[0]]->dtype == g->nodes[src]->dtype)
        src = g->nodes[src]->in[0];
    if (g->nodes[src]->dtype == d)
        return src;
    if (a->cache[src * DT_COUNT + d] < 0) {
        int u = user_copy(a, src, d);
        if (u >= 0)
            a->cache[src * DT_COUNT + d] = u;
    }
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

/* Old node p's value in dtype d (DT_UNKNOWN: as built).  A parameter stored
 * as a 16-bit shadow is read in any other dtype from its fp32 master, never
 * from the rounded shadow: data reads, BatchNorm's slots and graph outputs
 * see the master (docs/amp.md). */
static int read_as(Amp *a, const Node *p, DType d)
{
    int v = a->map[p->id];
    if (d == DT_UNKNOWN || a->ng->nodes[v]->dtype == d)
        return v;
    if (p->op == OP_Param && node_dtype_attr(a->ng->nodes[v], PARAM_MASTER) != DT_UNKNOWN)
        v = master_of(a, p);
    return as_dtype(a, v, d);
}

/* A cast's input as it arrives, except that a shadowed parameter cast to a
 * dtype other than its shadow's is cast from the master (one rounding). */
static int cast_input(Amp *a, const Node *p, DType to)
{
    int v = a->map[p->id];
    const Node *nv = a->ng->nodes[v];
    if (p->op != OP_Param || nv->dtype == to || node_dtype_attr(nv, PARAM_MASTER) == DT_UNKNOWN)
        return v;
    return master_of(a, p);
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
    for (int j = 0; j < o->nin; j++)
        in[j] = read_as(a, g->nodes[o->in[j]], input_dtype(g, o, j, run));
    if (o->op == OP_Cast || o->op == OP_amp_cast)
        in[0] = cast_input(a, g->nodes[o->in[0]], (DType)o->attrs[CAST_DTYPE].e);
    Node *c = copy_node(a, o, in, o->nin);
    free(in);
    c->dtype = run;
    a->map[o->id] = c->id;
}

DType amp_output_dtype(const Node *o, DType target)
{
    if (!dtype_is_float(o->dtype))
        return DT_UNKNOWN;
    return target != DT_UNKNOWN && is_loss_head(o->op) ? DT_F32 : o->dtype;
}

static void finish_outputs(Amp *a)
{
    for (int i = 0; i < a->old->noutputs; i++) {
        const Node *o = a->old->nodes[a->old->outputs[i]];
        /* the declared dtype; a shadowed parameter from its master */
        graph_add_output(a->ng, read_as(a, o, amp_output_dtype(o, a->opt->target)));
    }
}

/* ---- --explain ------------------------------------------------------------ */

/* Why a node AMP copied from the old graph has its dtype, where decide()
 * recorded no reason.  What a value is read from and by is printed with the
 * final graph (compiler/frontend.c), since cast-elide still changes it. */
static const char *explain_copied(Amp *a, const Node *o, const Node *c, const uint8_t *keep32)
{
    if (o->op == OP_Param) {
        if (node_dtype_attr(c, PARAM_MASTER) != DT_UNKNOWN)
            return arena_printf(&a->ng->arena, "stored as the %s shadow of the %s master the "
                                "optimizer updates", dname(c->dtype),
                                dname(node_dtype_attr(c, PARAM_MASTER)));
    }
    if (a->opt->target == DT_UNKNOWN)
        return "amp is off";
    if (o->op == OP_Param && keep32[o->id])
        return "BatchNorm's gamma, beta and statistics stay fp32";
    if (o->op == OP_Param)
        return "a parameter no op reads in 16 bits";
    if (o->op == OP_amp_cast)
        return "an amp_cast of the input graph keeps its dtype";
    if (o->op == OP_param_master)
        return "a param_master of the input graph reads the master copy";
    return arena_printf(&a->ng->arena, "its data is %s: AMP changes only floating-point ops",
                        dtype_long(a->old->nodes[o->in[0]]->dtype));
}

/* Graph.why for every node of the new graph: the reason decide() gave, or
 * one for what build() added. */
static void explain(Amp *a)
{
    Graph *ng = a->ng;
    /* new id -> old id + 1, 0 for what build() added */
    int *old_of = calloc((size_t)ng->nnodes + 1, sizeof(int));
    if (!old_of)
        DIE("out of memory");
    for (int i = 0; i < a->old->nnodes; i++)
        old_of[a->map[i]] = i + 1;
    /* old id -> read through a keep_fp32 slot (BatchNorm's four) */
    uint8_t *keep32 = calloc((size_t)a->old->nnodes + 1, 1);
    if (!keep32)
        DIE("out of memory");
    for (int i = 0; i < a->old->nnodes; i++) {
        const Node *n = a->old->nodes[i];
        const OpInfo *oi = op_info(n->op);
        for (int j = 0; j < n->nin && j < oi->nslots; j++)
            keep32[n->in[j]] |= oi->slots[j].keep_fp32;
    }
    ng->why = arena_alloc(&ng->arena, sizeof(char *) * (size_t)(ng->nnodes + 1));
    for (int i = 0; i < ng->nnodes; i++) {
        const Node *c = ng->nodes[i];
        int o = old_of[i] - 1;
        const char *w = o < 0 && c->op == OP_param_master ? "the master of a 16-bit parameter"
                        : o < 0       ? "AMP's cast"
                        : a->why[o]   ? a->why[o]
                                      : explain_copied(a, a->old->nodes[o], c, keep32);
        ng->why[i] = arena_printf(&ng->arena, "%s: %s", dname(c->dtype), w);
    }
    free(old_of);
    free(keep32);
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
    free(a->cls);
    free(a->label);
    free(a->ucast);
    free(a->canon);
    free(a->origin);
    free(a->built);
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
    a.cls = calloc((size_t)n, 1);
    a.built = calloc((size_t)n, 1);
    if (!a.run || !a.why || !a.reads || !a.map || !a.master || !a.cls || !a.built)
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
    if (opt->target != DT_UNKNOWN)
        place(&a);
    for (int i = 0; i < g->nnodes; i++)
        build_once(&a, g->nodes[i]);
    finish_outputs(&a);
    a.ng->info.casts_inserted += a.inserted;
    if (opt->explain)
        explain(&a);
    amp_free(&a);
    graph_free(*gp);
    *gp = a.ng;
    return true;
}
