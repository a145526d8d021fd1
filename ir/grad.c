/* grad.c - the builder gradient rules use: it appends backward nodes to the
 * training graph and sums the gradients of a value as they arrive.  The
 * autodiff pass (passes/autodiff.c) owns the walk; the rules live with their
 * ops in ir/ops/<family>.c. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

struct GradCtx {
    Graph *g;
    const bool *wants;
    int nwants;   /* values that existed when the context was made */
    int *grads;   /* value -> its summed gradient, -1 */
    int cap;
    StrMap parts; /* "node:index" -> part node, so each result exists once */
};

GradCtx *grad_ctx_new(Graph *g, const bool *wants)
{
    GradCtx *c = calloc(1, sizeof *c);
    if (!c)
        DIE("out of memory");
    c->g = g;
    c->wants = wants;
    c->nwants = g->nnodes;
    c->cap = g->nnodes ? g->nnodes : 1;
    c->grads = malloc(sizeof(int) * (size_t)c->cap);
    if (!c->grads)
        DIE("out of memory");
    for (int i = 0; i < c->cap; i++)
        c->grads[i] = -1;
    return c;
}

void grad_ctx_free(GradCtx *c)
{
    if (c) {
        free(c->grads);
        strmap_free(&c->parts);
    }
    free(c);
}

Graph *grad_graph(GradCtx *c) { return c->g; }

bool grad_wants(const GradCtx *c, int v) { return v >= 0 && v < c->nwants && c->wants[v]; }

int grad_get(const GradCtx *c, int v) { return v < c->nwants ? c->grads[v] : -1; }

/* Gradient nodes are named after the value and what they compute, so dumps
 * read "stage1_conv1_bwd" or "stage1_conv1_weight_grad". */
static void name_new(GradCtx *c, Node *n, const char *base, const char *suffix)
{
    Graph *g = c->g;
    const char *name = arena_printf(&g->arena, "%s_%s", base, suffix);
    for (int k = 2; !graph_set_name(g, n, name); k++)
        name = arena_printf(&g->arena, "%s_%s%d", base, suffix, k);
}

int grad_emit_attrs(GradCtx *c, OpKind op, const int *in, int nin, const AttrVal *attrs,
                    const Node *where)
{
    Graph *g = c->g;
    for (int j = 0; j < nin; j++)
        if (in[j] < 0)
            return -1; /* an earlier step failed and said why */
    const Node *first = g->nodes[in[0]];
    if (!where)
        where = first;
    Node *n = graph_add(g, op, in, nin, where->loc, where->frame);
    if (attrs)
        memcpy(n->attrs, attrs, sizeof(AttrVal) * (size_t)op_info(op)->nattrs);
    name_new(c, n, where->name, op_info(op)->prefix);
    if (!op_info(op)->check(g, n) || !op_info(op)->shape(g, n))
        return -1;
    if (n->dtype == DT_UNKNOWN)
        n->dtype = first->dtype; /* forward ops reused for gradients: the dtype of their data */
    return n->id;
}

int grad_emit(GradCtx *c, OpKind op, const int *in, int nin, const Node *like)
{
    bool same = like && op_info(like->op)->attrs == op_info(op)->attrs;
    return grad_emit_attrs(c, op, in, nin, same ? like->attrs : NULL, like);
}

int grad_part(GradCtx *c, int node, int index)
{
    if (node < 0)
        return -1;
    char key[32];
    snprintf(key, sizeof key, "%d:%d", node, index);
    int *have = strmap_get(&c->parts, key);
    if (have)
        return *have;
    AttrVal a = {.type = AT_INT, .i = index};
    const Node *p = c->g->nodes[node];
    Node *n = graph_add(c->g, OP_part, &node, 1, p->loc, p->frame);
    n->attrs[PART_INDEX] = a;
    name_new(c, n, p->name, arena_printf(&c->g->arena, "part%d", index));
    if (!part_shape_of(c->g, n))
        return -1;
    strmap_put(&c->parts, arena_strdup(&c->g->arena, key), n->id);
    return n->id;
}

int grad_scalar(GradCtx *c, OpKind op, int x, double s)
{
    AttrVal a = {.type = AT_FLOAT, .f = s};
    return grad_emit_attrs(c, op, &x, 1, &a, NULL);
}

int grad_cast(GradCtx *c, int v, DType t)
{
    if (v < 0 || c->g->nodes[v]->dtype == t)
        return v;
    AttrVal a = {.type = AT_DTYPE, .e = t};
    int id = grad_emit_attrs(c, OP_amp_cast, &v, 1, &a, NULL);
    if (id >= 0)
        c->g->nodes[id]->dtype = t;
    return id;
}

void grad_add(GradCtx *c, int v, int g)
{
    if (g < 0 || !grad_wants(c, v))
        return;
    g = grad_cast(c, g, c->g->nodes[v]->dtype);
    int old = c->grads[v];
    if (old < 0) {
        c->grads[v] = g;
        return;
    }
    int in[2] = {old, g};
    c->grads[v] = grad_emit(c, OP_elemwise_add, in, 2, NULL);
}
