/* schedule.c - the execution order of each step (docs/codegen.md,
 * "Schedule").
 *
 * The program runs a graph's nodes in storage order, and the memory plan
 * (passes/memplan.c) places values by the same order, so choosing the
 * order is choosing the peak.  This pass stores the training graph and its
 * inference graph in a topological order picked greedily for low live
 * bytes, when that order's liveness lower bound (the largest sum of live
 * bytes at any step, memplan's measure, here computed from the order without
 * building the graph) beats the order the graph came in; otherwise it keeps
 * that order, and the graph is not rebuilt.  Either
 * way the result is deterministic: it depends on the graph, not on the
 * machine or a seed.
 *
 * The greedy list scheduler: nodes that own no arena bytes (parameters,
 * inputs, parts, grad_of, param_master, bn_moving_update) run as soon as
 * they are ready; among the other ready nodes it runs the one that adds the
 * fewest live bytes (its results' bytes, minus the bytes of inputs it reads
 * last), ties to the lower id, which keeps the order it came in where no
 * choice saves memory.  Bytes are weighed at a batch of 32 (per-sample bytes
 * dominate every graph that matters).  When more than WINDOW nodes are
 * ready, only the WINDOW with the lowest ids are weighed, so a hostile graph
 * with millions of parallel branches costs O(n log n), not O(n^2).
 * Reordering changes no result: every kernel is deterministic, sums of
 * gradients are explicit nodes, and Dropout's masks are keyed by node name.
 */
#include "passes.h"

#include "../ir/plan.h"

#include <stdlib.h>
#include <string.h>

#define WINDOW 64
#define WEIGH_BATCH 32

typedef struct {
    const Graph *g;
    int n;
    int64_t *bytes;    /* arena bytes a node's step writes (its value and parts) */
    int *readers;      /* remaining readers of each value (plan_reads, parts excluded) */
    bool *held;        /* read after the step: never freed by a node */
    int *users_start, *users; /* CSR: the nodes reading each node */
    int *pending;      /* inputs not yet scheduled */
    int *heap;         /* ready nodes with bytes, a min-heap by id */
    int nheap;
    int *order, count;
} Sched;

static bool owns_arena_bytes(const Node *n)
{
    return plan_has_buffer(n) && n->op != OP_Param && n->op != OP_Input && n->op != OP_part;
}

static int64_t weigh(const Node *n)
{
    LinExpr b;
    if (!plan_value_bytes(n, &b))
        return 0;
    int64_t w;
    if (__builtin_mul_overflow(b.per_sample, (int64_t)WEIGH_BATCH, &w) ||
        __builtin_add_overflow(w, b.fixed, &w))
        return INT64_MAX / 4;
    return w;
}

static void heap_push(Sched *s, int v)
{
    int i = s->nheap++;
    s->heap[i] = v;
    while (i > 0 && s->heap[(i - 1) / 2] > s->heap[i]) {
        int p = (i - 1) / 2, t = s->heap[p];
        s->heap[p] = s->heap[i], s->heap[i] = t;
        i = p;
    }
}

static int heap_pop(Sched *s)
{
    int top = s->heap[0];
    s->heap[0] = s->heap[--s->nheap];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->nheap && s->heap[l] < s->heap[m])
            m = l;
        if (r < s->nheap && s->heap[r] < s->heap[m])
            m = r;
        if (m == i)
            break;
        int t = s->heap[m];
        s->heap[m] = s->heap[i], s->heap[i] = t;
        i = m;
    }
    return top;
}

/* Whether slot j of n is a read that counts: the kernel reads it, and no
 * earlier slot of n reads the same value (a node reading a value twice is
 * one reader).  Parts are not readers: their node writes them. */
static bool counted_read(const Node *n, int j)
{
    if (n->op == OP_part || !plan_reads(n, j))
        return false;
    for (int k = 0; k < j; k++)
        if (n->in[k] == n->in[j] && plan_reads(n, k))
            return false;
    return true;
}

/* The live bytes node v adds when it runs now. */
static int64_t delta(const Sched *s, int v)
{
    const Node *n = s->g->nodes[v];
    int64_t d = s->bytes[v];
    for (int j = 0; j < n->nin; j++) {
        int x = n->in[j];
        if (counted_read(n, j) && !s->held[x] && s->readers[x] == 1)
            d -= s->bytes[x];
    }
    return d;
}

static void run_node(Sched *s, int v);

static void make_ready(Sched *s, int v)
{
    if (s->bytes[v] == 0 && !owns_arena_bytes(s->g->nodes[v]))
        run_node(s, v); /* costs nothing: run it now */
    else
        heap_push(s, v);
}

static void run_node(Sched *s, int v)
{
    const Node *n = s->g->nodes[v];
    s->order[s->count++] = v;
    for (int j = 0; j < n->nin; j++)
        if (counted_read(n, j))
            s->readers[n->in[j]]--;
    for (int u = s->users_start[v]; u < s->users_start[v + 1]; u++)
        if (--s->pending[s->users[u]] == 0)
            make_ready(s, s->users[u]);
}

/* Picks the ready node to run: the least delta among the WINDOW lowest ids. */
static int pick(Sched *s)
{
    int cand[WINDOW], nc = 0;
    while (nc < WINDOW && s->nheap > 0)
        cand[nc++] = heap_pop(s);
    int best = 0;
    int64_t bd = delta(s, cand[0]);
    for (int i = 1; i < nc; i++) {
        int64_t d = delta(s, cand[i]);
        if (d < bd)
            best = i, bd = d;
    }
    for (int i = 0; i < nc; i++)
        if (i != best)
            heap_push(s, cand[i]);
    return cand[best];
}

static void sched_init(Sched *s, const Graph *g)
{
    int n = g->nnodes;
    size_t cap = (size_t)n + 1;
    *s = (Sched){.g = g, .n = n};
    s->bytes = calloc(cap, sizeof(int64_t));
    s->readers = calloc(cap, sizeof(int));
    s->held = calloc(cap, sizeof(bool));
    s->users_start = calloc(cap + 1, sizeof(int));
    s->pending = calloc(cap, sizeof(int));
    s->heap = malloc(cap * sizeof(int));
    s->order = malloc(cap * sizeof(int));
    if (!s->bytes || !s->readers || !s->held || !s->users_start || !s->pending || !s->heap ||
        !s->order)
        DIE("out of memory");
    int edges = 0;
    for (int i = 0; i < n; i++) {
        const Node *x = g->nodes[i];
        if (owns_arena_bytes(x))
            s->bytes[i] = weigh(x);
        if (x->op == OP_part && owns_arena_bytes(x)) /* written by its node */
            s->bytes[x->in[0]] += weigh(x);
        for (int j = 0; j < x->nin; j++) {
            s->users_start[x->in[j] + 1]++, edges++;
            if (x->op == OP_grad_of || x->op == OP_bn_moving_update)
                s->held[x->in[j]] = true;
            else if (counted_read(x, j))
                s->readers[x->in[j]]++;
        }
    }
    for (int i = 0; i < g->noutputs; i++)
        s->held[g->outputs[i]] = true;
    /* a part's bytes were counted at its node; its own step writes none */
    for (int i = 0; i < n; i++)
        if (g->nodes[i]->op == OP_part)
            s->bytes[i] = 0;
    s->users = malloc(sizeof(int) * (size_t)(edges + 1));
    int *fill = calloc(cap, sizeof(int));
    if (!s->users || !fill)
        DIE("out of memory");
    for (int i = 0; i < n; i++)
        s->users_start[i + 1] += s->users_start[i];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++) {
            int p = g->nodes[i]->in[j];
            s->users[s->users_start[p] + fill[p]++] = i;
        }
    free(fill);
}

static void sched_free(Sched *s)
{
    free(s->bytes);
    free(s->readers);
    free(s->held);
    free(s->users_start);
    free(s->users);
    free(s->pending);
    free(s->heap);
    free(s->order);
}

/* The largest sum of live bytes (weighed as above) over the steps of g run
 * in `order` (NULL: storage order): each value lives from its writer's step
 * to its last reader's, to the end when read after the step.  The measure
 * memplan's lower bound takes, without building the reordered graph. */
static int64_t order_peak(const Sched *s, const int *order)
{
    const Graph *g = s->g;
    int n = g->nnodes;
    int *pos = malloc(sizeof(int) * (size_t)(n + 1));
    int *end = malloc(sizeof(int) * (size_t)(n + 1));
    int64_t *delta_at = calloc((size_t)n + 2, sizeof(int64_t));
    if (!pos || !end || !delta_at)
        DIE("out of memory");
    for (int k = 0; k < n; k++)
        pos[order ? order[k] : k] = k;
    for (int i = 0; i < n; i++)
        end[i] = s->held[i] ? n : pos[i];
    for (int i = 0; i < n; i++) {
        const Node *x = g->nodes[i];
        for (int j = 0; j < x->nin; j++)
            if (counted_read(x, j) && end[x->in[j]] < pos[i])
                end[x->in[j]] = pos[i];
    }
    for (int i = 0; i < n; i++)
        if (s->bytes[i]) { /* a node's bytes include its parts', live as long as the longest */
            int e = end[i];
            for (int u = s->users_start[i]; u < s->users_start[i + 1]; u++)
                if (g->nodes[s->users[u]]->op == OP_part && end[s->users[u]] > e)
                    e = end[s->users[u]];
            delta_at[pos[i]] += s->bytes[i];
            delta_at[e + 1] -= s->bytes[i];
        }
    int64_t live = 0, peak = 0;
    for (int k = 0; k <= n; k++) {
        live += delta_at[k];
        if (live > peak)
            peak = live;
    }
    free(pos);
    free(end);
    free(delta_at);
    return peak;
}

/* g in the greedy order when that lowers its peak; g itself otherwise. */
static Graph *schedule_one(Graph *g)
{
    if (g->nnodes == 0)
        return g;
    Sched s;
    sched_init(&s, g);
    for (int i = 0; i < s.n; i++)
        s.pending[i] = g->nodes[i]->nin;
    for (int i = 0; i < s.n; i++) /* the leaves (a leaf's run readies others) */
        if (g->nodes[i]->nin == 0)
            make_ready(&s, i);
    while (s.nheap > 0)
        run_node(&s, pick(&s));
    ASSERT(s.count == s.n);
    bool same = true;
    for (int i = 0; i < g->nnodes && same; i++)
        same = s.order[i] == i;
    /* the readers' counts were spent by the run: count again for the measure */
    bool better = false;
    if (!same) {
        memset(s.readers, 0, sizeof(int) * (size_t)s.n);
        for (int i = 0; i < s.n; i++)
            for (int j = 0; j < g->nodes[i]->nin; j++)
                if (counted_read(g->nodes[i], j))
                    s.readers[g->nodes[i]->in[j]]++;
        better = order_peak(&s, s.order) < order_peak(&s, NULL);
    }
    if (better)
        g = graph_reorder(g, s.order);
    sched_free(&s);
    return g;
}

bool schedule(Graph **g, Target target, bool reorder)
{
    if (reorder) {
        *g = schedule_one(*g);
        if ((*g)->infer)
            (*g)->infer = schedule_one((*g)->infer);
    }
    (*g)->info.target = target;
    if ((*g)->infer)
        (*g)->infer->info.target = target;
    /* the target's layouts, on the order chosen (conversions go just
     * before their first reader) */
    return layout_assign(g, target);
}
