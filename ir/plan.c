/* plan.c - the buffer plan: liveness, the verifier, the dump and the report
 * lines (plan.h).  passes/memplan.c makes the plan. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

/* ---- kernel facts: the binding table (kernels.def) ---------------------------- */

static const KernelRow kernel_rows[OP_COUNT] = {
#define KERNEL(id, family, cpu, ws, mode, cuda, overwrites, unread, vectorized) \
    [OP_##id] = {true, cpu, ws, mode, cuda, overwrites, unread, vectorized},
#include "kernels.def"
#undef KERNEL
};

const KernelRow *kernel_row(OpKind k)
{
    static const KernelRow none = {0};
    return k >= 0 && k < OP_COUNT && kernel_rows[k].has ? &kernel_rows[k] : &none;
}

bool plan_may_overwrite(const Node *n, int slot)
{
    return slot >= 0 && slot < 8 && slot < n->nin && (kernel_row(n->op)->overwrites >> slot & 1) &&
           plan_reads(n, slot);
}

bool plan_value_may_overwrite(const Graph *g, const Node *v, int slot, const Node **writer)
{
    if (v->op != OP_part) {
        *writer = v;
        return plan_may_overwrite(v, slot);
    }
    const Node *n = *writer = g->nodes[v->in[0]];
    return node_int(v, PART_INDEX) == 3 && slot >= 0 && slot < 8 && slot < n->nin &&
           (kernel_row(n->op)->overwrites >> (8 + slot) & 1) && plan_reads(n, slot);
}

bool plan_reads(const Node *n, int slot)
{
    /* dx = dy * f'(y) for every activation but softsign, whose derivative
     * needs x (runtime/kernels/act.h) */
    if (n->op == OP__backward_Activation && slot == 1)
        return node_enum(n, ACT_TYPE) == ACT_SOFTSIGN;
    return !(slot >= 0 && slot < 8 && (kernel_row(n->op)->unread >> slot & 1));
}

bool plan_has_buffer(const Node *n)
{
    return n->op != OP_grad_of && n->op != OP_param_master && n->op != OP_bn_moving_update;
}

bool plan_value_bytes(const Node *n, LinExpr *out)
{
    out->fixed = out->per_sample = 0;
    if (n->shape.rank < 0 || n->dtype == DT_UNKNOWN)
        return false;
    int64_t e = dtype_size(n->dtype);
    int nsym = 0;
    for (int i = 0; i < n->shape.rank; i++) {
        Dim d = n->shape.d[i];
        int64_t k = dim_is_sym(d) ? -d : d;
        nsym += dim_is_sym(d);
        if (__builtin_mul_overflow(e, k, &e) || e > ((int64_t)1 << 62))
            return false;
    }
    if (nsym > 1)
        return false;
    if (nsym)
        out->per_sample = e;
    else
        out->fixed = e;
    return true;
}

void plan_liveness(const Graph *g, int *first, int *last)
{
    int n = g->nnodes;
    for (int i = 0; i < n; i++) {
        const Node *x = g->nodes[i];
        /* a part is written by the node it is a result of */
        first[i] = x->op == OP_part ? first[x->in[0]] : i;
        last[i] = first[i];
    }
    for (int i = 0; i < n; i++) {
        const Node *x = g->nodes[i];
        /* grad_of hands its gradient to the optimizer, bn_moving_update runs
         * after the step: both read after it */
        int at = x->op == OP_grad_of || x->op == OP_bn_moving_update ? n : first[i];
        for (int j = 0; j < x->nin; j++)
            if (plan_reads(x, j) && last[x->in[j]] < at)
                last[x->in[j]] = at;
    }
    for (int i = 0; i < g->noutputs; i++)
        last[g->outputs[i]] = n;
}

void plan_free(BufferPlan *p)
{
    free(p->v);
    memset(p, 0, sizeof *p);
}

static int64_t at1(LinExpr e) { return e.fixed + e.per_sample; }

static const char *lin(char *buf, size_t cap, LinExpr e)
{
    snprintf(buf, cap, "%lld+%lldN", (long long)e.fixed, (long long)e.per_sample);
    return buf;
}

void plan_print(FILE *f, const Graph *g, const BufferPlan *p) { plan_print_with(f, g, p, NULL); }

void plan_print_with(FILE *f, const Graph *g, const BufferPlan *p, const char *header)
{
    char a[64], b[64];
    fprintf(f, "# ampc memplan: model %s, %d steps, alignment %d\n", g->model, p->nsteps, PLAN_ALIGN);
    if (header)
        fputs(header, f);
    for (int i = 0; i < p->n; i++) {
        const PlanValue *v = &p->v[i];
        const Node *n = g->nodes[v->node];
        fprintf(f, "%%%d %s ", v->node, op_info(n->op)->name);
        for (const unsigned char *c = (const unsigned char *)n->name; *c; c++)
            fputc(*c > 0x20 && *c < 0x7f ? *c : '?', f); /* one token, one line */
        fprintf(f, " live=[%d,%d] size=%s ", v->first, v->last, lin(a, sizeof a, v->size));
        if (v->kind == PV_ARENA && v->in_place)
            fprintf(f, "offset=%s over=%%%d\n", lin(b, sizeof b, v->offset), v->overwrites);
        else if (v->kind == PV_ARENA)
            fprintf(f, "offset=%s\n", lin(b, sizeof b, v->offset));
        else
            fputs("external\n", f);
    }
    plan_report(f, p, g->info.bind_batch);
}

/* A name as a Graphviz string's inside: quotes and backslashes escaped,
 * control bytes as '?'. */
static void dot_escaped(FILE *f, const char *s)
{
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else
            fputc(*c < 0x20 || *c == 0x7f ? '?' : *c, f);
}

void plan_print_dot(FILE *f, const Graph *g, const BufferPlan *p)
{
    /* values sharing bytes share a colour: the slot's offset picks it */
    static const char *const palette[] = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3",
                                          "#fdb462", "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd",
                                          "#ccebc5", "#ffed6f"};
    int *at = malloc(sizeof(int) * (size_t)(g->nnodes + 1));
    if (!at)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes; i++)
        at[i] = -1;
    for (int i = 0; i < p->n; i++)
        at[p->v[i].node] = i;
    fputs("// ampc memplan\ndigraph \"", f);
    dot_escaped(f, g->model);
    fputs("\" {\n  node [fontname=\"Helvetica\", shape=box];\n", f);
    char a[64], b[64];
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op == OP_Param || at[i] < 0)
            continue;
        const PlanValue *v = &p->v[at[i]];
        fprintf(f, "  n%d [label=\"%%%d ", i, i);
        dot_escaped(f, n->name);
        fprintf(f, "\\n%s live=[%d,%d]\\n", op_info(n->op)->name, v->first, v->last);
        if (v->kind == PV_ARENA) {
            uint64_t h = (uint64_t)v->offset.fixed * 0x9E3779B97F4A7C15ull ^
                         (uint64_t)v->offset.per_sample * 0xC2B2AE3D27D4EB4Full;
            fprintf(f, "@%s size %s%s\", style=filled, fillcolor=\"%s\"];\n",
                    lin(a, sizeof a, v->offset), lin(b, sizeof b, v->size),
                    v->in_place ? " (in place)" : "", palette[(h >> 32) % 12]);
        } else {
            fprintf(f, "external\", shape=oval];\n");
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        for (int j = 0; j < n->nin; j++)
            if (at[n->in[j]] >= 0 && at[i] >= 0 && g->nodes[n->in[j]]->op != OP_Param)
                fprintf(f, "  n%d -> n%d;\n", n->in[j], i);
    }
    fputs("}\n", f);
    free(at);
}

static double mib(LinExpr e, int64_t batch)
{
    return ((double)e.fixed + (double)e.per_sample * (double)batch) / (1024.0 * 1024.0);
}

void plan_report(FILE *f, const BufferPlan *p, int64_t batch)
{
    char a[64];
    fprintf(f, "memplan: training step arena: %s bytes (fixed + per sample)\n", lin(a, sizeof a, p->arena));
    fprintf(f, "memplan: unplanned (one buffer per value): %s bytes\n", lin(a, sizeof a, p->unplanned));
    fprintf(f, "memplan: liveness lower bound: %s bytes\n", lin(a, sizeof a, p->lower));
    fprintf(f, "memplan: outside the arena (parameters, inputs): %s bytes\n",
            lin(a, sizeof a, p->external));
    fprintf(f, "memplan: in the arena, gradients for the optimizer (all live at the step's end): "
               "%s bytes; the rest is activations and temporaries\n", lin(a, sizeof a, p->grads));
    fprintf(f, "memplan: workspace: one buffer, the largest kernel's, sized when the program "
               "starts\n");
    if (p->lower.per_sample > 0)
        fprintf(f, "memplan: per sample: planned %.3fx the lower bound, unplanned %.3fx\n",
                (double)p->arena.per_sample / (double)p->lower.per_sample,
                (double)p->unplanned.per_sample / (double)p->lower.per_sample);
    if (batch > 0)
        fprintf(f, "memplan: at batch %lld: arena %.1f MiB, unplanned %.1f MiB, lower bound %.1f MiB\n",
                (long long)batch, mib(p->arena, batch), mib(p->unplanned, batch), mib(p->lower, batch));
}

void plan_report_params(FILE *f, const Graph *g, int nstate)
{
    PlanParamBytes b;
    plan_param_bytes(g, nstate, &b);
    fprintf(f,
            "memplan: parameters %lld bytes, fp32 masters %lld bytes, optimizer state %lld "
            "bytes (%d fp32 tensor%s per trainable parameter)\n",
            (long long)b.values, (long long)b.masters, (long long)b.state, nstate,
            nstate == 1 ? "" : "s");
}

void plan_param_bytes(const Graph *g, int nstate, PlanParamBytes *out)
{
    int64_t values = 0, masters = 0, state = 0;
    bool *trained = calloc((size_t)g->nnodes + 1, sizeof(bool));
    if (!trained)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_grad_of)
            trained[g->nodes[i]->in[1]] = true;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        LinExpr b;
        if (n->op != OP_Param || !plan_value_bytes(n, &b) || b.per_sample)
            continue;
        int64_t numel = b.fixed / dtype_size(n->dtype);
        values += b.fixed;
        if (node_dtype_attr(n, PARAM_MASTER) == DT_F32)
            masters += numel * 4;
        if (trained[i])
            state += (int64_t)nstate * numel * 4;
    }
    free(trained);
    *out = (PlanParamBytes){values, masters, state};
}

/* ---- the verifier ----------------------------------------------------------
 *
 * Two arena values a and b of positive sizes occupy [o_a(N), o_a(N) + s_a(N))
 * and [o_b(N), ...), linear in N.  a lies below b for every real N >= 1 iff
 * the gap g(N) = o_b(N) - o_a(N) - s_a(N), a linear function, is >= 0 at N = 1
 * and its slope is >= 0 (a line non-negative at 1 and not falling stays so).
 * If neither lies below the other for every N, they overlap at some real
 * N >= 1: the two gaps sum to -(s_a + s_b) < 0, so both are negative
 * wherever one changes sign.  "Below" is transitive (sizes are >= 0), and
 * if a lies below b then o_a < o_b in the order at infinity (per_sample,
 * then fixed), so a set of pairwise disjoint values is a chain in that
 * order.  The sweep keeps the live values ranked in that order (a Fenwick
 * tree over ranks) and checks each new value against its neighbours only:
 * if it lies above its predecessor and below its successor the chain stays
 * one, else two values overlap.  O(n log n). */

static const BufferPlan *sort_plan;
static int by_start(const void *x, const void *y)
{
    const PlanValue *a = &sort_plan->v[*(const int *)x], *b = &sort_plan->v[*(const int *)y];
    if (a->offset.per_sample != b->offset.per_sample)
        return a->offset.per_sample < b->offset.per_sample ? -1 : 1;
    if (a->offset.fixed != b->offset.fixed)
        return a->offset.fixed < b->offset.fixed ? -1 : 1;
    return *(const int *)x - *(const int *)y;
}

static bool below(const PlanValue *a, const PlanValue *b)
{
    int64_t g0 = b->offset.fixed - a->offset.fixed - a->size.fixed;
    int64_t g1 = b->offset.per_sample - a->offset.per_sample - a->size.per_sample;
    return g1 >= 0 && g0 + g1 >= 0;
}

static void fw_add(int *t, int n, int i, int d)
{
    for (i++; i <= n; i += i & -i)
        t[i] += d;
}
static int fw_prefix(const int *t, int i) /* count of ranks < i */
{
    int s = 0;
    for (; i > 0; i -= i & -i)
        s += t[i];
    return s;
}
static int fw_kth(const int *t, int n, int k) /* rank of the k-th (1-based) */
{
    int pos = 0, step = 1;
    while (step * 2 <= n)
        step *= 2;
    for (; step; step /= 2)
        if (pos + step <= n && t[pos + step] < k)
            pos += step, k -= t[pos];
    return pos; /* 0-based rank */
}

#define ERR(...) (*okp = false, err ? (void)fprintf(err, __VA_ARGS__) : (void)0)

/* Each in-place claim (w overwrites x): x is an arena value of the plan,
 * handed on once, dying at the step that writes w, at w's offset with w's
 * size; with g, w's kernel may overwrite that input (plan_may_overwrite)
 * and both have one dtype.  x's time then ends half a step early. */
static void check_inplace(const Graph *g, const BufferPlan *p, int *t1, bool *okp, FILE *err)
{
    int *vi = malloc(sizeof(int) * (size_t)(p->nsteps + 1));
    bool *handed = calloc((size_t)p->n + 1, sizeof(bool));
    if (!vi || !handed)
        DIE("out of memory");
    for (int i = 0; i < p->nsteps; i++)
        vi[i] = -1;
    for (int i = 0; i < p->n; i++) {
        int nd = p->v[i].node;
        if (nd < 0 || nd >= p->nsteps || vi[nd] >= 0)
            ERR("memplan: value %d is not one node of the %d steps\n", nd, p->nsteps);
        else
            vi[nd] = i;
    }
    for (int i = 0; *okp && i < p->n; i++) {
        const PlanValue *w = &p->v[i];
        if (!w->in_place)
            continue;
        int x = w->overwrites >= 0 && w->overwrites < p->nsteps ? vi[w->overwrites] : -1;
        const PlanValue *xv = x >= 0 ? &p->v[x] : NULL;
        bool slot_ok = !g;
        const Node *wn = g ? g->nodes[w->node] : NULL, *by = wn;
        for (int k = 0; g && xv && k < 8; k++)
            slot_ok |=
                plan_value_may_overwrite(g, wn, k, &by) && k < by->nin && by->in[k] == xv->node;
        if (!xv || xv->kind != PV_ARENA || w->kind != PV_ARENA || handed[x] ||
            xv->first >= xv->last || xv->last != w->first || xv->offset.fixed != w->offset.fixed ||
            xv->offset.per_sample != w->offset.per_sample || xv->size.fixed != w->size.fixed ||
            xv->size.per_sample != w->size.per_sample || !slot_ok ||
            (g && g->nodes[xv->node]->dtype != g->nodes[w->node]->dtype)) {
            ERR("memplan: %%%d cannot overwrite %%%d in place\n", w->node, w->overwrites);
            continue;
        }
        handed[x] = true;
        t1[x] = 2 * xv->last - 1;
    }
    free(vi);
    free(handed);
}

#undef ERR
#define ERR(...) (ok = false, err ? (void)fprintf(err, __VA_ARGS__) : (void)0)

bool memplan_verify(const Graph *g, const BufferPlan *p, FILE *err)
{
    bool ok = true;
    const int64_t lim = (int64_t)1 << 62;
    if (p->arena.fixed < 0 || p->arena.per_sample < 0)
        ERR("memplan: the arena's size is negative\n");
    int *first = NULL, *last = NULL;
    if (g) {
        if (p->nsteps != g->nnodes)
            ERR("memplan: %d steps for a graph of %d nodes\n", p->nsteps, g->nnodes);
        first = malloc(sizeof(int) * (size_t)(g->nnodes + 1));
        last = malloc(sizeof(int) * (size_t)(g->nnodes + 1));
        if (!first || !last)
            DIE("out of memory");
        plan_liveness(g, first, last);
    }
    int m = 0;
    int *idx = malloc(sizeof(int) * (size_t)(p->n + 1));
    if (!idx)
        DIE("out of memory");
    for (int i = 0; i < p->n; i++) {
        const PlanValue *v = &p->v[i];
        if (v->first < 0 || v->first > v->last || v->last > p->nsteps) {
            ERR("memplan: %%%d: bad live interval [%d,%d]\n", v->node, v->first, v->last);
            continue;
        }
        if (v->size.fixed < 0 || v->size.per_sample < 0 || v->size.fixed > lim ||
            v->size.per_sample > lim) {
            ERR("memplan: %%%d: bad size\n", v->node);
            continue;
        }
        if (g) {
            LinExpr b;
            if (v->node < 0 || v->node >= g->nnodes) {
                ERR("memplan: value %d is not a node\n", v->node);
                continue;
            }
            if (v->first > first[v->node] || v->last < last[v->node])
                ERR("memplan: %%%d: live [%d,%d] misses [%d,%d]\n", v->node, v->first, v->last,
                    first[v->node], last[v->node]);
            if (v->kind == PV_ARENA &&
                (!plan_value_bytes(g->nodes[v->node], &b) || v->size.per_sample < b.per_sample ||
                 at1(v->size) < at1(b)))
                ERR("memplan: %%%d: its size does not hold its bytes\n", v->node);
        }
        if (v->kind != PV_ARENA)
            continue;
        if (v->offset.fixed < 0 || v->offset.per_sample < 0 || v->offset.fixed > lim ||
            v->offset.per_sample > lim) {
            ERR("memplan: %%%d: negative offset\n", v->node);
            continue;
        }
        if (v->offset.fixed % PLAN_ALIGN || v->offset.per_sample % PLAN_ALIGN)
            ERR("memplan: %%%d: offset not aligned to %d\n", v->node, PLAN_ALIGN);
        /* the arena's end lies at or above the value's end for every N >= 1 */
        int64_t e0 = p->arena.fixed - v->offset.fixed - v->size.fixed;
        int64_t e1 = p->arena.per_sample - v->offset.per_sample - v->size.per_sample;
        if (e1 < 0 || e0 + e1 < 0)
            ERR("memplan: %%%d: ends outside the arena for some N\n", v->node);
        if (v->size.fixed || v->size.per_sample)
            idx[m++] = i;
    }
    free(first);
    free(last);
    /* in place: time 2s is step s; a value handed on at step s ends at 2s - 1,
     * before the value written over it starts */
    int *t0 = malloc(sizeof(int) * (size_t)(p->n + 1)), *t1 = malloc(sizeof(int) * (size_t)(p->n + 1));
    if (!t0 || !t1)
        DIE("out of memory");
    for (int i = 0; i < p->n; i++)
        t0[i] = 2 * p->v[i].first, t1[i] = 2 * p->v[i].last;
    if (ok)
        check_inplace(g, p, t1, &ok, err);
    if (ok) {
        sort_plan = p;
        qsort(idx, (size_t)m, sizeof(int), by_start);
        int *rank = malloc(sizeof(int) * (size_t)(p->n + 1));
        int *tree = calloc((size_t)m + 1, sizeof(int));
        /* values by first step and by last step (counting sort) */
        int S = 2 * p->nsteps + 2;
        int *hs = calloc((size_t)S + 1, sizeof(int)), *he = calloc((size_t)S + 1, sizeof(int));
        int *bys = malloc(sizeof(int) * (size_t)(m + 1)), *bye = malloc(sizeof(int) * (size_t)(m + 1));
        if (!rank || !tree || !hs || !he || !bys || !bye)
            DIE("out of memory");
        for (int r = 0; r < m; r++) {
            rank[idx[r]] = r;
            hs[t0[idx[r]] + 1]++;
            he[t1[idx[r]] + 1]++;
        }
        for (int s = 0; s < S; s++)
            hs[s + 1] += hs[s], he[s + 1] += he[s];
        for (int r = 0; r < m; r++) {
            bys[hs[t0[idx[r]]]++] = idx[r];
            bye[he[t1[idx[r]]]++] = idx[r];
        }
        /* hs[s] is now the end of time s's list; its start is hs[s-1] */
        int live = 0;
        for (int s = 0; s < S - 1 && ok; s++) {
            if (s > 0) /* values whose last step was s-1 */
                for (int k = s - 1 > 0 ? he[s - 2] : 0; k < he[s - 1]; k++)
                    fw_add(tree, m, rank[bye[k]], -1), live--;
            for (int k = s > 0 ? hs[s - 1] : 0; k < hs[s]; k++) {
                int i = bys[k], r = rank[i];
                int before = fw_prefix(tree, r);
                if (before > 0) {
                    const PlanValue *q = &p->v[idx[fw_kth(tree, m, before)]];
                    if (!below(q, &p->v[i]))
                        ERR("memplan: %%%d and %%%d are live together at step %d and overlap "
                            "for some N >= 1\n", q->node, p->v[i].node, s / 2);
                }
                if (before < live) {
                    const PlanValue *q = &p->v[idx[fw_kth(tree, m, before + 1)]];
                    if (!below(&p->v[i], q))
                        ERR("memplan: %%%d and %%%d are live together at step %d and overlap "
                            "for some N >= 1\n", p->v[i].node, q->node, s / 2);
                }
                fw_add(tree, m, r, 1), live++;
            }
        }
        free(rank);
        free(tree);
        free(hs);
        free(he);
        free(bys);
        free(bye);
    }
    free(idx);
    free(t0);
    free(t1);
    return ok;
}
