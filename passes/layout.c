/* layout.c - the layouts a target's kernels want (docs/codegen.md,
 * "Layouts"), chosen by the schedule pass after it orders the nodes.
 *
 * For TARGET_CUDA, a 2-D convolution (and its backward) on 16-bit data runs
 * in NHWC (cuDNN's tensor-op kernels want channels last), its weight and
 * weight gradient in KRSC.  NHWC then spreads forward, in storage order
 * (a topological order), through the ops that compute per element or per
 * channel (ir/layout.c's table: "follow"), to 4-D 16-bit values whose data
 * input is NHWC; everything else stays canonical.  A parameter is KRSC when
 * every reader is an NHWC convolution's weight slot or its grad_of, in the
 * training graph and in the inference graph alike (the two steps share its
 * buffer); a value that leaves the step (a graph output other than a
 * gradient) stays canonical.  Where a value meets a reader that wants the
 * other layout, a _layout node converts it, once per value and layout,
 * placed just before its first such reader; none where both layouts put the
 * elements at the same offsets (one channel, or 1x1 spatially: the input of
 * a one-channel image, a global pooling's result).  Shapes never change: they
 * stay logical (NCHW) and only the bytes move.
 *
 * TARGET_CPU: nothing changes (the CPU kernels run NCHW, and the C emitted
 * for it is what it was before layouts existed). */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

static bool is_16bit(DType t) { return t == DT_F16 || t == DT_BF16; }

/* the convolution's forward, plain or writing its statistics (conv_bn_stats) */
static bool is_conv_forward(OpKind k)
{
    return k == OP_Convolution || k == OP__fused_Convolution_stats;
}

/* A convolution (or its backward) cuDNN runs in NHWC: 2 spatial dims,
 * 16-bit data. */
static bool anchor_ok(const Graph *g, const Node *n)
{
    const Node *x = g->nodes[n->in[is_conv_forward(n->op) ? 0 : 1]];
    return layout_op_allows(g, n) && x->shape.rank == 4 && is_16bit(n->dtype);
}

/* The weight slot of a convolution or its backward, -1 for other ops. */
static int weight_slot(OpKind k)
{
    return is_conv_forward(k) ? 1 : k == OP__backward_Convolution ? 2 : -1;
}

/* The layouts of g's nodes, into lay: nodes with `canon` set stay NCHW;
 * parameters whose names are in `no_krsc` stay canonical. */
static void decide(const Graph *g, const char *canon, const StrMap *no_krsc, Layout *lay)
{
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        const LayoutRule *r = layout_rule(n->op);
        lay[i] = LAYOUT_NCHW;
        if (canon[i])
            continue;
        if (r->cls == LC_ANCHOR && anchor_ok(g, n)) {
            lay[i] = LAYOUT_NHWC;
        } else if (r->cls == LC_FOLLOW && is_16bit(n->dtype) && layout_op_allows(g, n)) {
            for (int j = 0; j < n->nin; j++)
                if ((r->slots >> j & 1) && lay[n->in[j]] == LAYOUT_NHWC)
                    lay[i] = LAYOUT_NHWC;
        } else if (n->op == OP_part && n->shape.rank == 4) {
            lay[i] = lay[n->in[0]]; /* a convolution backward's weight gradient */
        }
    }
    /* parameters: KRSC when every reader agrees */
    int *nhwc_readers = calloc((size_t)g->nnodes + 1, sizeof(int));
    char *other = calloc((size_t)g->nnodes + 1, 1);
    if (!nhwc_readers || !other)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        for (int j = 0; j < n->nin; j++) {
            int p = n->in[j];
            if (g->nodes[p]->op != OP_Param)
                continue;
            if (j == weight_slot(n->op) && lay[i] == LAYOUT_NHWC)
                nhwc_readers[p]++;
            else if (!(n->op == OP_grad_of && j == 1))
                other[p] = 1;
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op == OP_Param && nhwc_readers[i] && !other[i] && !canon[i] && n->shape.rank == 4 &&
            !strmap_get(no_krsc, n->name))
            lay[i] = LAYOUT_NHWC;
    }
    free(nhwc_readers);
    free(other);
    /* the views of a parameter: its gradient and its master */
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op == OP_grad_of)
            lay[i] = lay[n->in[1]];
        else if (n->op == OP_param_master)
            lay[i] = lay[n->in[0]];
    }
}

/* decide() until no output but a gradient is NHWC (each round keeps one
 * more node canonical, so it ends). */
static Layout *decide_graph(const Graph *g, const StrMap *no_krsc)
{
    Layout *lay = calloc((size_t)g->nnodes + 1, sizeof(Layout));
    char *canon = calloc((size_t)g->nnodes + 1, 1);
    if (!lay || !canon)
        DIE("out of memory");
    for (bool again = true; again;) {
        decide(g, canon, no_krsc, lay);
        again = false;
        for (int i = 0; i < g->noutputs; i++) {
            int o = g->outputs[i];
            if (lay[o] != LAYOUT_NCHW && g->nodes[o]->op != OP_grad_of && !canon[o])
                canon[o] = 1, again = true;
        }
    }
    free(canon);
    return lay;
}

/* Adds to no_krsc the parameters KRSC in one graph's layouts but not in the
 * other's; true if it added any. */
static bool disagree(const Graph *a, const Layout *la, const Graph *b, const Layout *lb,
                     StrMap *no_krsc)
{
    bool added = false;
    for (int i = 0; i < a->nnodes; i++) {
        const Node *p = a->nodes[i];
        if (p->op != OP_Param || la[i] != LAYOUT_NHWC)
            continue;
        const Node *q = graph_find(b, p->name);
        if (q && q->op == OP_Param && lb[q->id] != LAYOUT_NHWC)
            added |= strmap_put(no_krsc, p->name, 0);
    }
    return added;
}

/* ---- rewriting: the conversions ---------------------------------------- */

typedef struct {
    Graph *g, *ng;
    const Layout *lay;
    int *map;  /* old node -> new node */
    int *conv; /* old node * 2 + layout -> its conversion in ng, -1 */
} Rw;

static const char *fresh_name(Graph *ng, const char *base, Layout to)
{
    const char *name = arena_printf(&ng->arena, "%s_to_%s", base, layout_name(to));
    for (int k = 2; graph_find(ng, name); k++)
        name = arena_printf(&ng->arena, "%s_to_%s%d", base, layout_name(to), k);
    return name;
}

static Node *copy_node(Rw *w, const Node *o, const int *in)
{
    Node *c = graph_add(w->ng, o->op, in, o->nin, o->loc, o->frame);
    for (int a = 0; a < op_info(o->op)->nattrs; a++) {
        c->attrs[a] = o->attrs[a];
        if (o->attrs[a].type == AT_STR)
            c->attrs[a].s = arena_strdup(&w->ng->arena, o->attrs[a].s);
    }
    c->shape = o->shape;
    c->dtype = o->dtype;
    c->layout = w->lay[o->id];
    c->flags = o->flags & ~(uint32_t)NF_OUTPUT;
    if (o->name && !graph_set_name(w->ng, c, o->name))
        DIE("layout: duplicate name %s while rewriting", o->name);
    return c;
}

/* Old value v in layout `to`, in the new graph: v itself or its conversion. */
static int value_in(Rw *w, int v, Layout to)
{
    if (to == LAYOUT_COUNT || w->lay[v] == to || layout_same_bytes(&w->g->nodes[v]->shape))
        return w->map[v];
    int *slot = &w->conv[v * 2 + to];
    if (*slot < 0) {
        const Node *o = w->g->nodes[v];
        int in = w->map[v];
        Node *c = graph_add(w->ng, OP__layout, &in, 1, o->loc, o->frame);
        c->attrs[LAYOUT_TO] = (AttrVal){.type = AT_ENUM, .e = to};
        c->shape = o->shape;
        c->dtype = o->dtype;
        c->layout = to;
        graph_set_name(w->ng, c, fresh_name(w->ng, o->name, to));
        *slot = c->id;
    }
    return *slot;
}

/* The layout n reads slot j in, from the decided layouts. */
static Layout wants(const Rw *w, const Node *n, int j)
{
    const LayoutRule *r = layout_rule(n->op);
    switch (r->cls) {
    case LC_FOLLOW:
    case LC_ANCHOR: return (r->slots >> j & 1) ? w->lay[n->id] : LAYOUT_NCHW;
    case LC_VIEW: return n->op == OP_grad_of && j == 0 ? w->lay[n->id] : LAYOUT_COUNT;
    default: return LAYOUT_NCHW;
    }
}

static Graph *rewrite(Graph *g, const Layout *lay, int *nconv)
{
    bool any = false;
    for (int i = 0; i < g->nnodes && !any; i++)
        any = lay[i] != LAYOUT_NCHW;
    if (!any)
        return g;
    Rw w = {.g = g, .lay = lay};
    w.ng = graph_new(g->diag, g->model);
    graph_set_train(w.ng, g->train, g->ntrain);
    w.ng->info = g->info;
    w.map = malloc(sizeof(int) * ((size_t)g->nnodes + 1));
    w.conv = malloc(sizeof(int) * ((size_t)g->nnodes * 2 + 2));
    int *in = NULL;
    size_t incap = 0;
    if (!w.map || !w.conv)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes * 2; i++)
        w.conv[i] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *o = g->nodes[i];
        if ((size_t)o->nin > incap) {
            incap = (size_t)o->nin * 2;
            in = realloc(in, sizeof(int) * incap);
            if (!in)
                DIE("out of memory");
        }
        for (int j = 0; j < o->nin; j++)
            in[j] = value_in(&w, o->in[j], wants(&w, o, j));
        w.map[i] = copy_node(&w, o, in)->id;
    }
    for (int i = 0; i < g->nnodes * 2; i++)
        *nconv += w.conv[i] >= 0;
    for (int i = 0; i < g->noutputs; i++)
        graph_add_output(w.ng, w.map[g->outputs[i]]);
    w.ng->infer = g->infer;
    g->infer = NULL;
    free(in);
    free(w.map);
    free(w.conv);
    graph_free(g);
    return w.ng;
}

/* g without its layouts: every _layout's readers read its input, every
 * value canonical. */
static Graph *strip_one(const Graph *g)
{
    Layout *lay = calloc((size_t)g->nnodes + 1, sizeof(Layout));
    Rw w = {.g = (Graph *)g, .lay = lay};
    w.ng = graph_new(g->diag, g->model);
    graph_set_train(w.ng, g->train, g->ntrain);
    w.ng->info = g->info;
    w.map = malloc(sizeof(int) * ((size_t)g->nnodes + 1));
    if (!lay || !w.map)
        DIE("out of memory");
    int *in = NULL;
    size_t incap = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *o = g->nodes[i];
        if (o->op == OP__layout) {
            w.map[i] = w.map[o->in[0]];
            continue;
        }
        if ((size_t)o->nin > incap) {
            incap = (size_t)o->nin * 2;
            in = realloc(in, sizeof(int) * incap);
            if (!in)
                DIE("out of memory");
        }
        for (int j = 0; j < o->nin; j++)
            in[j] = w.map[o->in[j]];
        w.map[i] = copy_node(&w, o, in)->id;
    }
    for (int i = 0; i < g->noutputs; i++)
        graph_add_output(w.ng, w.map[g->outputs[i]]);
    free(in);
    free(w.map);
    free(lay);
    return w.ng;
}

Graph *layout_strip(const Graph *g)
{
    Graph *s = strip_one(g);
    s->infer = g->infer ? strip_one(g->infer) : NULL;
    return s;
}

bool layout_assign(Graph **gp, Target target)
{
    Graph *g = *gp, *inf = g->infer;
    if (target != TARGET_CUDA)
        return true;
    StrMap no_krsc = {0};
    Layout *lt, *li;
    for (;;) {
        lt = decide_graph(g, &no_krsc);
        li = inf ? decide_graph(inf, &no_krsc) : NULL;
        /* both directions, each adding what it finds */
        bool a = inf && disagree(g, lt, inf, li, &no_krsc);
        bool b = inf && disagree(inf, li, g, lt, &no_krsc);
        if (!a && !b)
            break;
        free(lt);
        free(li);
    }
    int nconv = 0;
    g->infer = NULL;
    g = rewrite(g, lt, &nconv);
    g->infer = inf ? rewrite(inf, li, &nconv) : NULL;
    free(lt);
    free(li);
    strmap_free(&no_krsc);
    *gp = g;
    return true;
}
