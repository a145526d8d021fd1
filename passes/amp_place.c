/* amp_place.c - the exact cast placement of the AMP rewrite (docs/amp.md,
 * "Cast placement").
 *
 * amp.c fixes the dtype of every op whose class decides it; the follow and
 * widest ops left ("free" ops) may run in fp32 or in the target dtype.  This
 * file chooses those dtypes so that the bytes converted per sample are the
 * fewest possible and, among placements that convert as few, the bytes free
 * ops move in 32 bits are the fewest.  With two dtypes per op this is a
 * minimum s-t cut (source side: fp32, sink side: 16 bits), provided each value
 * is charged once per dtype however many readers want it: every value u gets
 * a node a_u "a 32-bit copy of u exists" and a node b_u "a 16-bit copy
 * exists"; a reader wanting u in fp32 forces a_u, one wanting it in 16 bits
 * forces b_u (infinite arcs), and the arc between a_u (b_u) and u's own dtype
 * costs the conversion.  A widest op is never narrower than its operands as
 * produced (infinite arcs operand -> op).
 *
 * The one term a cut cannot express: a user's Cast(f, e) of a free op f is
 * a no-op (and removed) when f runs in e, and a separate value otherwise, so
 * a free reader of that Cast wanting the other dtype shares f's copy or not
 * depending on f.  Such f are enumerated (both dtypes, at most
 * AMP_PLACE_MAX_BRANCH per connected group; beyond that, or past a work
 * bound, f runs in e, which makes the Cast a no-op) and the cheapest branch
 * kept.  A Cast of a free op whose readers all want fixed dtypes costs a
 * unary term, which a cut expresses.
 *
 * Each connected group of free ops is solved on its own: two max-flows
 * (Dinic, iterative), the second on the residual graph of the first with the
 * 32-bit traffic as capacities, so it chooses among the minimum cuts only.
 * The source side taken is the set reachable in the final residual graph:
 * the unique smallest minimum cut, so the result does not depend on the order
 * nodes are stored in. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

enum { S = 0, T = 1, THIRD = -2 };
#define BYTES_MAX ((int64_t)1 << 32) /* per-sample tensor bytes are clamped here */
#define MAX_BRANCH 8
#define BRANCH_WORK ((int64_t)1 << 22) /* network nodes times branches per group */
#define LABEL DT_COUNT                  /* a demand for the reader's own dtype */

/* ---- max-flow ---------------------------------------------------------------- */

typedef struct {
    int n, m, ncap, mcap, scap; /* scap: entries in level/it/queue/stack */
    int *head, *next, *to;
    int64_t *res, *sec; /* residual capacity; secondary capacity (phase 2) */
    int *level, *it, *queue, *stack;
    int64_t const1, const2; /* costs paid whatever the cut */
    bool infeasible;        /* an infinite arc from s to t */
} Net;

static void *grow_array(void *p, int cap, size_t size)
{
    p = realloc(p, (size_t)cap * size);
    if (!p)
        DIE("out of memory");
    return p;
}

static void net_reset(Net *N)
{
    N->n = 2;
    N->m = 0;
    N->const1 = N->const2 = 0;
    N->infeasible = false;
    if (N->ncap < 2) {
        N->ncap = 64;
        N->head = grow_array(N->head, N->ncap, sizeof(int));
    }
    N->head[S] = N->head[T] = -1;
}

static int net_node(Net *N)
{
    if (N->n == N->ncap) {
        N->ncap *= 2;
        N->head = grow_array(N->head, N->ncap, sizeof(int));
    }
    N->head[N->n] = -1;
    return N->n++;
}

static void net_push(Net *N, int u, int v, int64_t cap, int64_t sec)
{
    if (N->m == N->mcap) {
        N->mcap = N->mcap ? N->mcap * 2 : 256;
        N->next = grow_array(N->next, N->mcap, sizeof(int));
        N->to = grow_array(N->to, N->mcap, sizeof(int));
        N->res = grow_array(N->res, N->mcap, sizeof(int64_t));
        N->sec = grow_array(N->sec, N->mcap, sizeof(int64_t));
    }
    int e = N->m++;
    N->to[e] = v;
    N->res[e] = cap;
    N->sec[e] = sec;
    N->next[e] = N->head[u];
    N->head[u] = e;
}

/* An arc u -> v, cut (and paid) when u is on the source side and v on the
 * sink side; cap < 0 is infinite, sec the phase-2 (32-bit traffic) cost. */
static void net_arc(Net *N, int u, int v, int64_t cap, int64_t sec)
{
    if (u == v || u == T || v == S || (cap == 0 && sec == 0))
        return;
    if (u == S && v == T) {
        if (cap < 0)
            N->infeasible = true;
        else
            N->const1 += cap, N->const2 += sec;
        return;
    }
    net_push(N, u, v, cap, sec);
    net_push(N, v, u, 0, 0);
}

/* A cost that depends on one label: cost_h when x is fp32, cost_l otherwise. */
static void net_unary(Net *N, int x, int64_t cost_h, int64_t cost_l)
{
    int64_t m = cost_h < cost_l ? cost_h : cost_l;
    if (x == S || x == T) {
        N->const1 += x == S ? cost_h : cost_l;
        return;
    }
    N->const1 += m;
    net_arc(N, x, T, cost_h - m, 0);
    net_arc(N, S, x, cost_l - m, 0);
}

static void net_scratch(Net *N)
{
    if (N->n <= N->scap)
        return;
    N->scap = N->ncap;
    N->level = grow_array(N->level, N->scap, sizeof(int));
    N->it = grow_array(N->it, N->scap, sizeof(int));
    N->queue = grow_array(N->queue, N->scap, sizeof(int));
    N->stack = grow_array(N->stack, N->scap, sizeof(int));
}

/* Breadth-first levels over arcs with residual capacity (only infinite ones
 * when inf_only); true when t is reached. */
static bool net_bfs(Net *N, bool inf_only, int64_t inf)
{
    for (int i = 0; i < N->n; i++)
        N->level[i] = -1;
    int qh = 0, qt = 0;
    N->level[S] = 0;
    N->queue[qt++] = S;
    while (qh < qt) {
        int v = N->queue[qh++];
        for (int e = N->head[v]; e >= 0; e = N->next[e])
            if ((inf_only ? N->res[e] >= inf : N->res[e] > 0) && N->level[N->to[e]] < 0) {
                N->level[N->to[e]] = N->level[v] + 1;
                N->queue[qt++] = N->to[e];
            }
    }
    return N->level[T] >= 0;
}

/* Blocking flow along the levels, with an explicit stack of arcs. */
static int64_t net_blocking(Net *N)
{
    int64_t total = 0;
    int top = 0, v = S;
    for (int i = 0; i < N->n; i++)
        N->it[i] = N->head[i];
    for (;;) {
        if (v == T) {
            int64_t f = N->res[N->stack[0]];
            int cut = 0;
            for (int i = 1; i < top; i++)
                if (N->res[N->stack[i]] < f)
                    f = N->res[N->stack[i]], cut = i;
            for (int i = 0; i < top; i++)
                N->res[N->stack[i]] -= f, N->res[N->stack[i] ^ 1] += f;
            total += f;
            top = cut;
            v = top ? N->to[N->stack[top - 1]] : S;
            continue;
        }
        int e = N->it[v];
        while (e >= 0 && !(N->res[e] > 0 && N->level[N->to[e]] == N->level[v] + 1))
            e = N->next[e];
        N->it[v] = e;
        if (e >= 0) {
            N->stack[top++] = e;
            v = N->to[e];
            continue;
        }
        N->level[v] = -1; /* a dead end for the rest of this phase */
        if (top == 0)
            return total;
        top--;
        v = top ? N->to[N->stack[top - 1]] : S;
    }
}

static int64_t net_maxflow(Net *N)
{
    int64_t flow = 0;
    while (net_bfs(N, false, 0))
        flow += net_blocking(N);
    return flow;
}

/* Both phases.  Returns false when no cut is finite (a constraint cannot
 * hold); else the costs, and N->level[v] >= 0 for the fp32 side. */
static bool net_solve(Net *N, int64_t *primary, int64_t *secondary)
{
    if (N->infeasible)
        return false;
    net_scratch(N);
    int64_t inf1 = 1, inf2 = 1;
    for (int e = 0; e < N->m; e += 2) {
        if (N->res[e] >= 0)
            inf1 += N->res[e];
        inf2 += N->sec[e];
    }
    for (int e = 0; e < N->m; e += 2)
        if (N->res[e] < 0)
            N->res[e] = inf1;
    if (net_bfs(N, true, inf1))
        return false;
    *primary = N->const1 + net_maxflow(N);
    /* phase 2: the minimum cuts of phase 1 are the closed sets of its
     * residual graph; among them, the least 32-bit traffic */
    for (int e = 0; e < N->m; e++)
        N->res[e] = (N->res[e] > 0 ? inf2 : 0) + N->sec[e];
    *secondary = N->const2 + net_maxflow(N);
    net_bfs(N, false, 0); /* level >= 0: reachable, the fp32 side */
    return true;
}

static void net_free(Net *N)
{
    free(N->head), free(N->next), free(N->to), free(N->res), free(N->sec);
    free(N->level), free(N->it), free(N->queue), free(N->stack);
}

/* ---- the model ---------------------------------------------------------------- */

typedef struct {
    int r, u;   /* reader (-1: a graph output), value read */
    DType want; /* the dtype wanted, or LABEL: the reader's own */
} Demand;

typedef struct {
    AmpPlace *p;
    const Graph *g;
    int n;
    DType lo;
    uint8_t *isfree, *ldc, *dual;
    int *alias;      /* label-independent: a no-op or duplicate cast -> what it repeats */
    /* A Cast of a ldc Cast (ldc: a Cast of a free node f to fp32 or the
     * target) is dyn: whether it is a no-op, or repeats another Cast of f,
     * depends on f's dtype, so it is resolved in each network, with f (its
     * base) fixed. */
    uint8_t *dyn;
    int *base;
    int64_t *skey, *dkey; /* Casts by (value, kind, dtype): label-independent; per network */
    int *sval, *dval, hcap;
    int *dslots, ndslots; /* dkey slots used in this network */
    int *memo, *memo_list, nmemo, *chain; /* dyn -> what it is in this network */
    AmpCost fixed_cost; /* of the groups without free ops, once priced */
    bool fixed_done;
    int64_t *bytes;  /* per node: elements per sample (clamped) */
    int64_t *wide;   /* per free node: bytes it moves in 32 bits */
    DType *fix;      /* per node: a free node's dtype fixed for this solve, or DT_UNKNOWN */
    int *xid, *aid, *bid;
    uint16_t *third, *seen; /* per value: third-dtype copies charged; per Cast: wants seen */
    Demand *dem;
    int ndem;
    int *parent;     /* union-find */
    Net net;
} Place;

static bool in_domain(const Place *P, DType t) { return t == DT_F32 || t == P->lo; }

static int find(int *parent, int v)
{
    while (parent[v] != v)
        v = parent[v] = parent[parent[v]];
    return v;
}

static void unite(int *parent, int a, int b)
{
    a = find(parent, a), b = find(parent, b);
    if (a != b)
        parent[a < b ? b : a] = a < b ? a : b;
}

static int64_t numel(const Node *n)
{
    int64_t e;
    if (n->shape.rank < 0 || !shape_numel_per_sample(&n->shape, &e) || e > BYTES_MAX)
        return BYTES_MAX;
    return e;
}

static bool is_cast(const Node *n) { return n->op == OP_Cast || n->op == OP_amp_cast; }

static bool param_slot(const Node *r, int j)
{
    const OpInfo *oi = op_info(r->op);
    return oi->nslots && j < oi->nslots && oi->slots[j].kind != SLOT_DATA &&
           oi->slots[j].kind != SLOT_LABEL;
}

/* The dtype input j of r is read in: LABEL when it is r's own and r is
 * free, DT_UNKNOWN when it costs nothing (labels, parameters read through
 * their shadow or master, duplicate or no-op casts). */
static DType read_want(const Place *P, const Node *r, int j)
{
    const Node *u = P->g->nodes[r->in[j]];
    if (u->op == OP_Param && (P->dual[u->id] || param_slot(r, j)))
        return DT_UNKNOWN;
    if (is_cast(r))
        return P->alias[r->id] == r->id ? (DType)r->attrs[CAST_DTYPE].e : DT_UNKNOWN;
    DType w32 = P->p->read_dtype(P->g, r, j, DT_F32), wlo = P->p->read_dtype(P->g, r, j, P->lo);
    if (P->isfree[r->id] && w32 == DT_F32 && wlo == P->lo)
        return LABEL;
    return P->p->read_dtype(P->g, r, j, P->p->run[r->id]);
}

static int64_t cast_key(int src, const Node *c, DType e)
{
    return ((int64_t)src * 2 + (c->op == OP_Cast)) * 16 + e;
}

/* The slot of key k in an open-addressing table of cap (a power of 2). */
static int slot(const int64_t *key, int cap, int64_t k)
{
    uint64_t h = (uint64_t)k * 0x9E3779B97F4A7C15u;
    int i = (int)(h >> 40) & (cap - 1);
    while (key[i] >= 0 && key[i] != k)
        i = (i + 1) & (cap - 1);
    return i;
}

/* Which nodes are free, which parameters have both an fp32 master and a
 * 16-bit shadow, and which casts repeat another. */
static void classify(Place *P)
{
    const Graph *g = P->g;
    const DType *run = P->p->run;
    for (int v = 0; v < P->n; v++) {
        const Node *n = g->nodes[v];
        AmpClass c = (AmpClass)P->p->cls[v];
        bool ok = (c == AMP_FOLLOW || c == AMP_WIDEST) && in_domain(P, run[v]) && n->nin > 0;
        if (ok && c == AMP_FOLLOW)
            ok = in_domain(P, run[n->in[0]]);
        for (int j = 0; ok && c == AMP_WIDEST && j < n->nin; j++)
            if (P->p->operand(g, n, j) && !in_domain(P, run[n->in[j]]))
                ok = false; /* downstream of a third dtype: keeps what greedy gives */
        P->isfree[v] = ok;
        if (n->op == OP_Param && (run[v] == DT_F16 || run[v] == DT_BF16))
            P->dual[v] = 1;
        for (int j = 0; j < n->nin; j++) {
            const Node *u = g->nodes[n->in[j]];
            if (u->op == OP_Param && param_slot(n, j) && (run[v] == DT_F16 || run[v] == DT_BF16) &&
                !op_info(n->op)->slots[j].keep_fp32)
                P->dual[u->id] = 1;
        }
    }
    /* casts: no-ops (alias their input) and duplicates (alias the first) */
    int ncast = 0;
    for (int v = 0; v < P->n; v++)
        ncast += is_cast(g->nodes[v]);
    P->hcap = 16;
    while (P->hcap < 2 * ncast)
        P->hcap *= 2;
    P->skey = malloc(sizeof(int64_t) * (size_t)P->hcap);
    P->dkey = malloc(sizeof(int64_t) * (size_t)P->hcap);
    P->sval = malloc(sizeof(int) * (size_t)P->hcap);
    P->dval = malloc(sizeof(int) * (size_t)P->hcap);
    P->dslots = malloc(sizeof(int) * (size_t)P->hcap);
    if (!P->skey || !P->dkey || !P->sval || !P->dval || !P->dslots)
        DIE("out of memory");
    for (int i = 0; i < P->hcap; i++)
        P->skey[i] = P->dkey[i] = -1;
    for (int v = 0; v < P->n; v++) {
        const Node *c = g->nodes[v];
        P->alias[v] = v;
        if (!is_cast(c) || g->nodes[c->in[0]]->op == OP_Param)
            continue;
        int u = c->in[0], ur = P->alias[u];
        DType e = (DType)c->attrs[CAST_DTYPE].e;
        if (P->isfree[u] && in_domain(P, e)) {
            P->ldc[v] = 1, P->base[v] = u;
        } else if ((P->ldc[ur] || P->dyn[ur]) && run[ur] != e) {
            P->dyn[v] = 1, P->base[v] = P->base[ur];
            continue;
        } else if (!P->isfree[u] && run[u] == e) {
            P->alias[v] = P->alias[u];
            continue;
        }
        int64_t k = cast_key(ur, c, e);
        int i = slot(P->skey, P->hcap, k);
        if (P->skey[i] == k) {
            P->alias[v] = P->alias[P->sval[i]];
            P->ldc[v] = 0;
        } else {
            P->skey[i] = k, P->sval[i] = v;
        }
    }
}

static void add_demand(Place *P, int r, int u, DType want, int *cap)
{
    if (want == DT_UNKNOWN || !dtype_is_float(P->g->nodes[u]->dtype))
        return;
    if (P->ndem == *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        P->dem = grow_array(P->dem, *cap, sizeof(Demand));
    }
    P->dem[P->ndem++] = (Demand){r, P->alias[u], want};
}

static void collect(Place *P)
{
    const Graph *g = P->g;
    int cap = 0;
    for (int r = 0; r < P->n; r++) {
        const Node *n = g->nodes[r];
        AmpClass c = op_info(n->op)->amp;
        int64_t w = numel(n);
        for (int j = 0; j < n->nin; j++) {
            add_demand(P, r, n->in[j], read_want(P, n, j), &cap);
            const Node *u = g->nodes[n->in[j]];
            if ((c == AMP_FOLLOW || c == AMP_WIDEST) && u->op != OP_Param &&
                P->p->read_dtype(g, n, j, DT_F32) == DT_F32 &&
                P->p->read_dtype(g, n, j, P->lo) == P->lo)
                w += numel(u);
        }
        P->wide[r] = 4 * w; /* read and written in 32 bits */
        P->bytes[r] = numel(n);
    }
    for (int i = 0; i < g->noutputs; i++) {
        const Node *o = g->nodes[g->outputs[i]];
        if (!(o->op == OP_Param && P->dual[o->id]))
            add_demand(P, -1, o->id, amp_output_dtype(o, P->p->target), &cap);
    }
    /* connected groups: free readers with what they read, widest ops with
     * their operands, casts with what they repeat or cast */
    for (int v = 0; v < P->n; v++) {
        P->parent[v] = v;
        if (P->alias[v] != v)
            unite(P->parent, v, P->alias[v]);
        /* a dyn Cast may turn out to be any Cast of its base */
        if (P->ldc[v] || P->dyn[v] || (is_cast(g->nodes[v]) && P->isfree[g->nodes[v]->in[0]]))
            unite(P->parent, v, g->nodes[v]->in[0]);
    }
    for (int i = 0; i < P->ndem; i++)
        if (P->dem[i].want == LABEL)
            unite(P->parent, P->dem[i].r, P->dem[i].u);
}

/* ---- one group --------------------------------------------------------------- */

typedef struct {
    int *free, nfree;  /* free nodes */
    int *dem, ndem;    /* demands on its values */
    int *ldc, nldc;    /* casts of free nodes to fp32 or the target */
} Group;

/* The network node of v's own dtype: S (fp32), T (target), a variable, or
 * THIRD (any other dtype). */
static int term(const Place *P, int v)
{
    if (P->isfree[v] && P->fix[v] == DT_UNKNOWN)
        return P->xid[v];
    DType t = P->isfree[v] ? P->fix[v] : P->p->run[v];
    return t == DT_F32 ? S : t == P->lo ? T : THIRD;
}

static DType value_dtype(const Place *P, int v)
{
    if (P->ldc[v])
        return (DType)P->g->nodes[v]->attrs[CAST_DTYPE].e;
    return P->isfree[v] && P->fix[v] != DT_UNKNOWN ? P->fix[v] : P->p->run[v];
}

static DType cast_dtype(const Place *P, int c) { return (DType)P->g->nodes[c]->attrs[CAST_DTYPE].e; }

/* What value v is, given the fixed dtypes: a ldc Cast is its free input f
 * when f runs in its dtype; a dyn Cast is what cast-elide will make of it:
 * its input (a no-op) or the first equal Cast of what its input is. */
static int resolve(Place *P, int v)
{
    v = P->alias[v];
    if (P->ldc[v]) {
        int f = P->g->nodes[v]->in[0];
        return P->fix[f] == cast_dtype(P, v) ? f : v;
    }
    if (!P->dyn[v])
        return v;
    int n = 0, x = v; /* the chain of dyn Casts down to a ldc one, innermost last */
    while (P->dyn[x] && P->memo[x] < 0) {
        P->chain[n++] = x;
        x = P->alias[P->g->nodes[x]->in[0]];
    }
    ASSERT(P->dyn[x] || P->fix[P->base[x]] != DT_UNKNOWN);
    int src = P->dyn[x] ? P->memo[x] : resolve(P, x);
    while (n > 0) {
        int c = P->chain[--n];
        DType e = cast_dtype(P, c);
        if (value_dtype(P, src) != e) {
            int64_t k = cast_key(src, P->g->nodes[c], e);
            int i = slot(P->skey, P->hcap, k), j;
            if (P->skey[i] == k) {
                src = P->alias[P->sval[i]];
            } else if (P->dkey[j = slot(P->dkey, P->hcap, k)] == k) {
                src = P->dval[j];
            } else {
                P->dkey[j] = k, P->dval[j] = c, P->dslots[P->ndslots++] = j;
                src = c;
            }
        }
        P->memo[c] = src;
        P->memo_list[P->nmemo++] = c;
    }
    return src;
}

/* Remembers that u's per-value state must be cleared after this network. */
static void touch(Place *P, int u, int *touched, int *nt)
{
    if (P->aid[u] < 0 && P->bid[u] < 0 && !P->third[u] && !P->seen[u])
        touched[(*nt)++] = u;
}

static int copy_node(Place *P, int u, bool wide, int *touched, int *nt)
{
    int *id = wide ? &P->aid[u] : &P->bid[u];
    if (*id >= 0)
        return *id;
    touch(P, u, touched, nt);
    *id = net_node(&P->net);
    int x = term(P, u);
    int64_t b = P->bytes[u];
    /* the arc is cut when u is 16-bit (a) or fp32 (b) */
    int64_t sz = x == THIRD ? dtype_size(value_dtype(P, u)) : wide ? 2 : 4;
    if (wide)
        net_arc(&P->net, *id, x == THIRD ? T : x, b * (sz + 4), 0);
    else
        net_arc(&P->net, x == THIRD ? S : x, *id, b * (sz + 2), 0);
    return *id;
}

/* Reader term want_t wants value u in fp32 (S) or 16 bits (T). */
static void want_copy(Place *P, int u, int want_t, int *touched, int *nt)
{
    int x = term(P, u);
    if (want_t != T && x != S) /* the reader may run in fp32 and u may not be fp32 */
        net_arc(&P->net, want_t, copy_node(P, u, true, touched, nt), -1, 0);
    if (want_t != S && x != T)
        net_arc(&P->net, copy_node(P, u, false, touched, nt), want_t, -1, 0);
}

/* u wanted in a dtype outside fp32 and the target: one conversion per
 * (value, dtype), priced by u's own dtype. */
static void want_third(Place *P, int u, DType w, int *touched, int *nt)
{
    if (P->third[u] >> w & 1)
        return;
    touch(P, u, touched, nt);
    P->third[u] |= (uint16_t)(1u << w);
    int x = term(P, u);
    int64_t b = P->bytes[u], sw = dtype_size(w);
    if (x == THIRD) {
        DType d = value_dtype(P, u);
        if (d != w)
            P->net.const1 += b * (dtype_size(d) + sw);
    } else {
        net_unary(&P->net, x, b * (4 + sw), b * (2 + sw));
    }
}

/* A cast c = Cast(f, e) of a variable free node f whose readers all want
 * fixed dtypes: when f runs in e, c is f; otherwise c is its own value. */
static void cast_unary(Place *P, int c, DType w, int *touched, int *nt)
{
    const Node *cn = P->g->nodes[c];
    int f = cn->in[0], x = P->xid[f];
    DType e = (DType)cn->attrs[CAST_DTYPE].e;
    if (w == e || (P->seen[c] >> w & 1))
        return;
    touch(P, c, touched, nt);
    P->seen[c] |= (uint16_t)(1u << w);
    int64_t own = P->bytes[c] * (dtype_size(e) + dtype_size(w));
    if (in_domain(P, w)) {
        /* f in e: f's w copy (shared); f in w: a cast of c */
        want_copy(P, f, w == DT_F32 ? S : T, touched, nt);
        net_unary(&P->net, x, w == DT_F32 ? own : 0, w == DT_F32 ? 0 : own);
    } else {
        bool shared = P->third[f] >> w & 1; /* f's own demands for w come first */
        int64_t in_e = shared ? 0 : own;
        net_unary(&P->net, x, e == DT_F32 ? in_e : own, e == DT_F32 ? own : in_e);
    }
}

/* Builds the network of group G under the fixed dtypes in P->fix. */
static void build_group(Place *P, const Group *G, bool constrain, int *touched, int *nt)
{
    Net *N = &P->net;
    net_reset(N);
    *nt = 0;
    for (int i = 0; i < G->nfree; i++) {
        int v = G->free[i];
        P->xid[v] = P->fix[v] == DT_UNKNOWN ? net_node(N) : -1;
    }
    /* f's own third-dtype copies first, so a cast of f can share them */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < G->ndem; i++) {
            const Demand *d = &P->dem[G->dem[i]];
            int u = resolve(P, d->u);
            bool deferred = P->ldc[u] && P->fix[P->g->nodes[u]->in[0]] == DT_UNKNOWN;
            if (d->want == LABEL) {
                if (pass == 1)
                    continue;
                ASSERT(!deferred);
                want_copy(P, u, term(P, d->r), touched, nt);
            } else if (deferred) {
                if (pass == 1)
                    cast_unary(P, u, d->want, touched, nt);
            } else if (pass == 0) {
                if (in_domain(P, d->want))
                    want_copy(P, u, d->want == DT_F32 ? S : T, touched, nt);
                else
                    want_third(P, u, d->want, touched, nt);
            }
        }
    for (int i = 0; i < G->nfree; i++) {
        int v = G->free[i], x = term(P, v);
        const Node *n = P->g->nodes[v];
        net_arc(N, x, T, 0, P->wide[v]);
        if (!constrain || P->p->cls[v] != AMP_WIDEST)
            continue; /* a labelling being priced is priced as it is */
        for (int j = 0; j < n->nin; j++)
            if (P->p->operand(P->g, n, j)) {
                int y = term(P, n->in[j]);
                if (y != THIRD)
                    net_arc(N, y, x, -1, 0);
            }
    }
}

static void unbuild(Place *P, const Group *G, const int *touched, int nt)
{
    for (int i = 0; i < nt; i++) {
        int u = touched[i];
        P->aid[u] = P->bid[u] = -1;
        P->third[u] = P->seen[u] = 0;
    }
    for (int i = 0; i < G->nfree; i++)
        P->xid[G->free[i]] = -1;
    for (int i = 0; i < P->nmemo; i++)
        P->memo[P->memo_list[i]] = -1;
    for (int i = 0; i < P->ndslots; i++)
        P->dkey[P->dslots[i]] = -1;
    P->nmemo = P->ndslots = 0;
}

static int by_name(const void *a, const void *b, void *g)
{
    const Graph *gr = g;
    return strcmp(gr->nodes[*(const int *)a]->name, gr->nodes[*(const int *)b]->name);
}

/* Builds and solves group G under P->fix; false when infeasible. */
static bool try_group(Place *P, const Group *G, bool evaluate, int *touched, int64_t *c1,
                      int64_t *c2, bool labels)
{
    int nt;
    build_group(P, G, !evaluate, touched, &nt);
    bool ok = net_solve(&P->net, c1, c2);
    for (int i = 0; ok && labels && i < G->nfree; i++) {
        int v = G->free[i];
        P->p->label[v] = P->fix[v] != DT_UNKNOWN     ? P->fix[v]
                         : P->net.level[P->xid[v]] >= 0 ? DT_F32
                                                        : P->lo;
    }
    unbuild(P, G, touched, nt);
    return ok;
}

/* Solves group G (or, when evaluate, prices the dtypes in fixed[]): fills
 * label[] of its free nodes and adds its costs. */
static void solve_group(Place *P, const Group *G, bool evaluate, const DType *fixed,
                        AmpCost *cost, int *touched, int *branch)
{
    int k = 0;
    for (int i = 0; i < G->nfree; i++)
        P->fix[G->free[i]] = evaluate ? fixed[G->free[i]] : DT_UNKNOWN;
    if (!evaluate) {
        /* free nodes with a Cast that free ops read: the one term a cut
         * cannot express; enumerated, in the order of their names */
        for (int i = 0; i < G->ndem; i++) {
            const Demand *d = &P->dem[G->dem[i]];
            int c = d->want == LABEL && P->ldc[d->u]      ? d->u
                    : P->dyn[d->u]                         ? d->u
                    : d->r >= 0 && P->dyn[d->r]            ? d->r
                                                           : -1;
            if (c >= 0 && P->fix[P->base[c]] == DT_UNKNOWN) {
                /* first the dtype that makes the innermost Cast a no-op */
                int x = c;
                while (P->dyn[x])
                    x = P->alias[P->g->nodes[x]->in[0]];
                P->fix[P->base[c]] = cast_dtype(P, x);
                branch[k++] = P->base[c];
            }
        }
        qsort_r(branch, (size_t)k, sizeof(int), by_name, (void *)P->g);
        int64_t size = G->nfree + G->ndem + 2;
        int keep = 0;
        while (keep < k && keep < MAX_BRANCH && (size << (keep + 1)) <= BRANCH_WORK)
            keep++;
        k = keep; /* the rest run in the dtype that makes their Cast a no-op */
    }
    int64_t best1 = 0, best2 = 0, c1, c2;
    int best = -1;
    for (int mask = 0; mask < (1 << k); mask++) {
        for (int i = 0; i < k; i++)
            P->fix[branch[i]] = mask >> i & 1 ? P->lo : DT_F32;
        if (try_group(P, G, evaluate, touched, &c1, &c2, !evaluate && k == 0) &&
            (best < 0 || c1 < best1 || (c1 == best1 && c2 < best2)))
            best = mask, best1 = c1, best2 = c2;
    }
    if (best < 0) /* a bug: greedy's placement always satisfies the constraints */
        DIE("amp: no feasible cast placement for a group of %d free ops", G->nfree);
    if (k > 0) {
        for (int i = 0; i < k; i++)
            P->fix[branch[i]] = best >> i & 1 ? P->lo : DT_F32;
        try_group(P, G, evaluate, touched, &c1, &c2, true);
    }
    for (int i = 0; i < G->nfree; i++)
        P->fix[G->free[i]] = DT_UNKNOWN;
    cost->converted += best1;
    cost->wide32 += best2;
}

/* Groups demands and free nodes by connected group (counting sort), then
 * solves each group. */
static AmpCost solve_all(Place *P, bool evaluate, const DType *fixed)
{
    int n = P->n;
    int *start = calloc((size_t)n + 1, sizeof(int));
    int *fstart = calloc((size_t)n + 1, sizeof(int));
    int *order = malloc(sizeof(int) * (size_t)(P->ndem ? P->ndem : 1));
    int *forder = malloc(sizeof(int) * (size_t)n);
    int *touched = malloc(sizeof(int) * (size_t)(n ? n : 1) * 2);
    int *branch = malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!start || !fstart || !order || !forder || !touched || !branch)
        DIE("out of memory");
    for (int i = 0; i < P->ndem; i++)
        start[find(P->parent, P->dem[i].u) + 1]++;
    for (int v = 0; v < n; v++)
        if (P->isfree[v])
            fstart[find(P->parent, v) + 1]++;
    for (int v = 0; v < n; v++)
        start[v + 1] += start[v], fstart[v + 1] += fstart[v];
    int *pos = malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!pos)
        DIE("out of memory");
    memcpy(pos, start, sizeof(int) * (size_t)n);
    for (int i = 0; i < P->ndem; i++)
        order[pos[find(P->parent, P->dem[i].u)]++] = i;
    memcpy(pos, fstart, sizeof(int) * (size_t)n);
    for (int v = 0; v < n; v++)
        if (P->isfree[v])
            forder[pos[find(P->parent, v)]++] = v;
    free(pos);
    AmpCost cost = {0, 0};
    for (int root = 0; root < n; root++) {
        Group G = {forder + fstart[root], fstart[root + 1] - fstart[root], order + start[root],
                   start[root + 1] - start[root], NULL, 0};
        if (G.nfree)
            solve_group(P, &G, evaluate, fixed, &cost, touched, branch);
        else if (G.ndem && !P->fixed_done) /* the same in every call */
            solve_group(P, &G, true, fixed, &P->fixed_cost, touched, branch);
    }
    P->fixed_done = true;
    cost.converted += P->fixed_cost.converted;
    cost.wide32 += P->fixed_cost.wide32;
    /* 32-bit traffic of follow and widest ops whose dtype is not free */
    for (int v = 0; v < n; v++) {
        AmpClass c = op_info(P->g->nodes[v]->op)->amp;
        if (!P->isfree[v] && (c == AMP_FOLLOW || c == AMP_WIDEST) && P->p->run[v] == DT_F32)
            cost.wide32 += P->wide[v];
    }
    free(start), free(fstart), free(order), free(forder), free(touched), free(branch);
    return cost;
}

void amp_place(AmpPlace *p)
{
    const Graph *g = p->g;
    Place P = {.p = p, .g = g, .n = g->nnodes, .lo = p->target};
    size_t n = (size_t)(g->nnodes ? g->nnodes : 1);
    P.isfree = calloc(n, 1);
    P.ldc = calloc(n, 1);
    P.dyn = calloc(n, 1);
    P.base = malloc(sizeof(int) * n);
    P.memo = malloc(sizeof(int) * n);
    P.memo_list = malloc(sizeof(int) * n);
    P.chain = malloc(sizeof(int) * n);
    P.dual = calloc(n, 1);
    P.alias = malloc(sizeof(int) * n);
    P.bytes = malloc(sizeof(int64_t) * n);
    P.wide = malloc(sizeof(int64_t) * n);
    P.fix = calloc(n, sizeof(DType));
    P.xid = malloc(sizeof(int) * n);
    P.aid = malloc(sizeof(int) * n);
    P.bid = malloc(sizeof(int) * n);
    P.third = calloc(n, sizeof(uint16_t));
    P.seen = calloc(n, sizeof(uint16_t));
    P.parent = malloc(sizeof(int) * n);
    if (!P.dyn || !P.base || !P.memo || !P.memo_list || !P.chain)
        DIE("out of memory");
    if (!P.isfree || !P.ldc || !P.dual || !P.alias || !P.bytes || !P.wide || !P.fix || !P.xid ||
        !P.aid || !P.bid || !P.third || !P.seen || !P.parent)
        DIE("out of memory");
    for (size_t i = 0; i < n; i++)
        P.xid[i] = P.aid[i] = P.bid[i] = P.memo[i] = -1;
    classify(&P);
    collect(&P);
    /* greedy's dtypes, and the given ones (tests), as fixed labellings */
    DType *fixed = malloc(sizeof(DType) * n);
    if (!fixed)
        DIE("out of memory");
    for (int v = 0; v < P.n; v++) {
        p->label[v] = DT_UNKNOWN;
        fixed[v] = P.isfree[v] ? p->run[v] : DT_UNKNOWN;
    }
    p->greedy = solve_all(&P, true, fixed);
    p->optimal = solve_all(&P, false, NULL); /* fills label[] */
    if (p->mode != AMP_PLACE_OPTIMAL) {
        for (int v = 0; v < P.n; v++)
            if (P.isfree[v])
                fixed[v] = p->mode == AMP_PLACE_GIVEN && p->given && in_domain(&P, p->given[v])
                               ? p->given[v]
                               : p->run[v];
        p->used = solve_all(&P, true, fixed);
        for (int v = 0; v < P.n; v++)
            p->label[v] = P.isfree[v] ? fixed[v] : DT_UNKNOWN;
    } else {
        p->used = p->optimal;
    }
    free(fixed);
    net_free(&P.net);
    free(P.isfree), free(P.ldc), free(P.dual), free(P.alias), free(P.bytes), free(P.wide);
    free(P.fix), free(P.xid), free(P.aid), free(P.bid), free(P.third), free(P.seen);
    free(P.parent), free(P.dem);
    free(P.dyn), free(P.base), free(P.memo), free(P.memo_list), free(P.chain);
    free(P.skey), free(P.dkey), free(P.sval), free(P.dval), free(P.dslots);
}
