/* graph.c - building and querying the dataflow graph. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

Graph *graph_new(Diag *d, const char *model)
{
    Graph *g = calloc(1, sizeof *g);
    if (!g)
        DIE("out of memory");
    arena_init(&g->arena);
    g->diag = d;
    g->model = arena_strdup(&g->arena, model ? model : "");
    return g;
}

void graph_free(Graph *g)
{
    if (!g)
        return;
    graph_free(g->infer);
    free(g->nodes);
    free(g->outputs);
    strmap_free(&g->names);
    arena_free(&g->arena);
    free(g);
}

Node *graph_add(Graph *g, OpKind op, const int *in, int nin, Loc loc, int frame)
{
    if (g->nnodes == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 256;
        Node **p = realloc(g->nodes, (size_t)g->cap * sizeof *p);
        if (!p)
            DIE("out of memory");
        g->nodes = p;
    }
    const OpInfo *oi = op_info(op);
    Node *n = arena_alloc(&g->arena, sizeof *n);
    n->id = g->nnodes;
    n->op = op;
    n->nin = nin;
    n->in = arena_alloc(&g->arena, sizeof(int) * (size_t)(nin ? nin : 1));
    if (nin)
        memcpy(n->in, in, sizeof(int) * (size_t)nin);
    n->attrs = arena_alloc(&g->arena, sizeof(AttrVal) * (size_t)(oi->nattrs ? oi->nattrs : 1));
    for (int i = 0; i < oi->nattrs; i++)
        op_attr_default(op, i, &n->attrs[i]);
    n->shape = shape_unknown();
    n->dtype = DT_UNKNOWN;
    n->loc = loc;
    n->frame = frame;
    g->nodes[g->nnodes++] = n;
    return n;
}

bool graph_set_name(Graph *g, Node *n, const char *name)
{
    const char *copy = arena_strdup(&g->arena, name);
    if (!strmap_put(&g->names, copy, n->id))
        return false;
    n->name = copy;
    return true;
}

Node *graph_find(const Graph *g, const char *name)
{
    int *id = strmap_get(&g->names, name);
    return id ? g->nodes[*id] : NULL;
}

void graph_add_output(Graph *g, int id)
{
    int *p = realloc(g->outputs, sizeof(int) * (size_t)(g->noutputs + 1));
    if (!p)
        DIE("out of memory");
    g->outputs = p;
    g->outputs[g->noutputs++] = id;
    g->nodes[id]->flags |= NF_OUTPUT;
}

ConfigVal *config_copy(Arena *a, const ConfigVal *v)
{
    ConfigVal *c = arena_alloc(a, sizeof *c);
    *c = *v;
    if (v->s)
        c->s = arena_strdup(a, v->s);
    if (v->nargs) {
        c->args = arena_alloc(a, sizeof(ConfigVal *) * (size_t)v->nargs);
        c->argnames = arena_alloc(a, sizeof(char *) * (size_t)v->nargs);
        for (int i = 0; i < v->nargs; i++) {
            c->args[i] = config_copy(a, v->args[i]);
            c->argnames[i] = v->argnames[i] ? arena_strdup(a, v->argnames[i]) : NULL;
        }
    }
    return c;
}

void graph_set_train(Graph *g, const ConfigEntry *e, int n)
{
    g->train = arena_alloc(&g->arena, sizeof(ConfigEntry) * (size_t)(n ? n : 1));
    g->ntrain = n;
    for (int i = 0; i < n; i++) {
        g->train[i].key = arena_strdup(&g->arena, e[i].key);
        g->train[i].val = config_copy(&g->arena, e[i].val);
        g->train[i].loc = e[i].loc;
    }
}

int *graph_use_counts(const Graph *g)
{
    int *uses = calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof(int));
    if (!uses)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++)
            uses[g->nodes[i]->in[j]]++;
    return uses;
}

static const AttrVal *attr_checked(const Node *n, int attr, AttrType t)
{
    if (attr < 0 || attr >= op_info(n->op)->nattrs || n->attrs[attr].type != t)
        DIE("attribute %d of %s read with the wrong type", attr, op_info(n->op)->name);
    return &n->attrs[attr];
}

int64_t node_int(const Node *n, int attr) { return attr_checked(n, attr, AT_INT)->i; }
double node_float(const Node *n, int attr) { return attr_checked(n, attr, AT_FLOAT)->f; }
bool node_bool(const Node *n, int attr) { return attr_checked(n, attr, AT_BOOL)->b; }
int node_enum(const Node *n, int attr) { return attr_checked(n, attr, AT_ENUM)->e; }
const AttrVal *node_tuple(const Node *n, int attr) { return attr_checked(n, attr, AT_TUPLE); }
DType node_dtype_attr(const Node *n, int attr) { return (DType)attr_checked(n, attr, AT_DTYPE)->e; }

void node_error(const Graph *g, const Node *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_verror_in(g->diag, n->loc, n->frame, fmt, ap);
    va_end(ap);
}

bool node_is_param(const Node *n) { return n->op == OP_Param; }

int node_param_kind(const Node *n) { return node_enum(n, PARAM_KIND); }

/* A new graph holding the nodes of `order` (a topological order of a set
 * closed under inputs) in that order. */
static Graph *graph_rebuild_copy(const Graph *g, const int *order, int count)
{
    int *map = malloc(sizeof(int) * (size_t)(g->nnodes ? g->nnodes : 1));
    if (!map)
        DIE("out of memory");
    Graph *ng = graph_new(g->diag, g->model);
    graph_set_train(ng, g->train, g->ntrain);
    ng->info = g->info;
    for (int k = 0; k < count; k++) {
        const Node *o = g->nodes[order[k]];
        /* inputs are renumbered in place: a buffer on the stack sized by
         * the node's input count (a Concat may have millions) could
         * overflow it */
        Node *c = graph_add(ng, o->op, o->in, o->nin, o->loc, o->frame);
        for (int j = 0; j < c->nin; j++)
            c->in[j] = map[c->in[j]];
        for (int a = 0; a < op_info(o->op)->nattrs; a++) {
            c->attrs[a] = o->attrs[a];
            if (o->attrs[a].type == AT_STR)
                c->attrs[a].s = arena_strdup(&ng->arena, o->attrs[a].s);
        }
        c->shape = o->shape;
        c->dtype = o->dtype;
        c->layout = o->layout;
        c->flags = o->flags & ~(uint32_t)NF_OUTPUT;
        if (o->name && !graph_set_name(ng, c, o->name))
            DIE("duplicate name %s while rebuilding", o->name);
        map[order[k]] = c->id;
    }
    for (int i = 0; i < g->noutputs; i++)
        graph_add_output(ng, map[g->outputs[i]]);
    free(map);
    return ng;
}

/* The same, freeing g and moving its inference graph over. */
static Graph *graph_rebuild(Graph *g, const int *order, int count)
{
    Graph *ng = graph_rebuild_copy(g, order, count);
    ng->infer = g->infer;
    g->infer = NULL;
    graph_free(g);
    return ng;
}

Graph *graph_copy(const Graph *g)
{
    int *order = malloc(sizeof(int) * (size_t)(g->nnodes ? g->nnodes : 1));
    if (!order)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes; i++)
        order[i] = i;
    Graph *c = graph_rebuild_copy(g, order, g->nnodes);
    free(order);
    return c;
}

Graph *graph_compact(Graph *g)
{
    int n = g->nnodes;
    char *live = calloc((size_t)(n ? n : 1), 1);
    int *order = malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!live || !order)
        DIE("out of memory");
    for (int i = 0; i < g->noutputs; i++)
        live[g->outputs[i]] = 1;
    /* inputs have smaller ids: one backward sweep marks everything needed */
    for (int i = n - 1; i >= 0; i--)
        if (live[i])
            for (int j = 0; j < g->nodes[i]->nin; j++)
                live[g->nodes[i]->in[j]] = 1;
    int count = 0;
    for (int i = 0; i < n; i++)
        if (live[i])
            order[count++] = i;
    Graph *ng = graph_rebuild(g, order, count);
    free(live);
    free(order);
    return ng;
}

Graph *graph_reorder(Graph *g, const int *order)
{
    return graph_rebuild(g, order, g->nnodes);
}

Graph *graph_shuffle(Graph *g, uint64_t seed)
{
    int n = g->nnodes;
    int *pending = calloc((size_t)(n ? n : 1), sizeof(int)); /* inputs not yet placed */
    int *ready = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *order = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *users_start = calloc((size_t)n + 1, sizeof(int));
    if (!pending || !ready || !order || !users_start)
        DIE("out of memory");
    /* users as a CSR table, so Kahn's algorithm is linear */
    int edges = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++)
            users_start[g->nodes[i]->in[j] + 1]++, edges++;
    int *users = malloc(sizeof(int) * (size_t)(edges ? edges : 1));
    if (!users)
        DIE("out of memory");
    for (int i = 0; i < n; i++)
        users_start[i + 1] += users_start[i];
    int *fill = calloc((size_t)(n ? n : 1), sizeof(int));
    if (!fill)
        DIE("out of memory");
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++) {
            int p = g->nodes[i]->in[j];
            users[users_start[p] + fill[p]++] = i;
        }
    int nready = 0, count = 0;
    for (int i = 0; i < n; i++) {
        pending[i] = g->nodes[i]->nin;
        if (!pending[i])
            ready[nready++] = i;
    }
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    while (nready) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
        int k = (int)(x % (uint64_t)nready);
        int id = ready[k];
        ready[k] = ready[--nready];
        order[count++] = id;
        for (int u = users_start[id]; u < users_start[id + 1]; u++)
            if (--pending[users[u]] == 0)
                ready[nready++] = users[u];
    }
    ASSERT(count == n);
    Graph *ng = graph_rebuild(g, order, count);
    free(pending);
    free(ready);
    free(order);
    free(users_start);
    free(users);
    free(fill);
    return ng;
}

void graph_set_train_entry(Graph *g, const char *key, ConfigVal *v)
{
    for (int i = 0; i < g->ntrain; i++)
        if (strcmp(g->train[i].key, key) == 0) {
            g->train[i].val = v;
            g->train[i].loc = loc_none(); /* no longer what the file says */
            return;
        }
    ConfigEntry *t = arena_alloc(&g->arena, sizeof(ConfigEntry) * (size_t)(g->ntrain + 1));
    memcpy(t, g->train, sizeof(ConfigEntry) * (size_t)g->ntrain);
    t[g->ntrain] = (ConfigEntry){.key = arena_strdup(&g->arena, key), .val = v, .loc = loc_none()};
    g->train = t;
    g->ntrain++;
}
