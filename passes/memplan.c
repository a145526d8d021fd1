/* memplan.c - the memory plan of the training step (docs/codegen.md,
 * "Memory plan"), which codegen/lower.c places the program's buffers by.
 *
 * Values are the nodes that own a buffer in codegen/emit_c.c, in its execution
 * order (storage order: step = node id).  Liveness (plan_liveness): a value
 * lives from the step that writes it to its last read; graph outputs, the
 * gradients the optimizer reads (grad_of) and bn_moving_update's inputs live
 * to the end of the step.  Parameters and graph inputs keep their own
 * buffers (external), as does a value whose size is not linear in N.
 *
 * Sharing: the arena has two regions, so that every offset stays linear in N
 * and valid for all N >= 1:
 *   - fixed: values whose size does not depend on N, at fixed offsets;
 *   - per-sample: values with a per-sample part, at offset F + q*N, where F
 *     is the fixed region's size and q is planned in per-sample units with
 *     the slot size round64(fixed) + round64(per_sample) (for N >= 1,
 *     fixed + per_sample*N <= (fixed + per_sample)*N).
 * Each region is planned by walking the steps in order with a best-fit
 * allocator over a free list kept sorted by offset, coalescing neighbours
 * (allocate what a step writes, then free what it read last).  Slots are
 * multiples of 64 bytes, so both parts of every offset are aligned.  The
 * free list stays short on these graphs (a forward pass allocates, the
 * backward pass frees in reverse), so the cost is near linear in the
 * number of values. */
#include "passes.h"

#include "../ir/plan.h"

#include <stdlib.h>
#include <string.h>

static int64_t round64(int64_t x) { return (x + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN; }

typedef struct {
    int64_t off, size;
} Block;

typedef struct {
    Vec free;     /* Block, sorted by offset, coalesced, all below top */
    int64_t top;  /* end of the highest block in use */
    int64_t peak; /* the region's size */
} Alloc;

static int64_t alloc_take(Alloc *a, int64_t need)
{
    Block *b = a->free.data;
    int n = a->free.len, best = -1;
    for (int i = 0; i < n; i++)
        if (b[i].size >= need && (best < 0 || b[i].size < b[best].size))
            best = i;
    int64_t off;
    if (best >= 0) {
        off = b[best].off;
        b[best].off += need, b[best].size -= need;
        if (b[best].size == 0) {
            memmove(&b[best], &b[best + 1], sizeof(Block) * (size_t)(n - best - 1));
            a->free.len--;
        }
    } else if (n > 0 && b[n - 1].off + b[n - 1].size == a->top) {
        off = b[n - 1].off; /* grow the last free block at the top */
        a->free.len--;
        a->top = off + need;
    } else {
        off = a->top;
        a->top += need;
    }
    if (a->top > a->peak)
        a->peak = a->top;
    return off;
}

static void alloc_give(Alloc *a, int64_t off, int64_t size)
{
    if (size == 0)
        return;
    vec_push(&a->free, sizeof(Block));
    Block *b = a->free.data;
    int n = a->free.len - 1;
    int lo = 0, hi = n; /* first block above off */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (b[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&b[lo + 1], &b[lo], sizeof(Block) * (size_t)(n - lo));
    b[lo] = (Block){off, size};
    n++;
    if (lo + 1 < n && b[lo].off + b[lo].size == b[lo + 1].off) {
        b[lo].size += b[lo + 1].size;
        memmove(&b[lo + 1], &b[lo + 2], sizeof(Block) * (size_t)(n - lo - 2));
        n--;
    }
    if (lo > 0 && b[lo - 1].off + b[lo - 1].size == b[lo].off) {
        b[lo - 1].size += b[lo].size;
        memmove(&b[lo], &b[lo + 1], sizeof(Block) * (size_t)(n - lo - 1));
        n--, lo--;
    }
    if (b[n - 1].off + b[n - 1].size == a->top) { /* the top comes down */
        a->top = b[n - 1].off;
        n--;
    }
    a->free.len = n;
}

/* The input of value v's node whose bytes v may take over (arena value
 * index), or -1: an input slot the kernel may overwrite, an arena value of
 * the same dtype and size that dies at v's step and is not handed on
 * already. */
static int inplace_source(const Graph *g, const BufferPlan *p, const int *vi, const bool *handed,
                          const PlanValue *v)
{
    const Node *n = g->nodes[v->node], *by = n;
    for (int k = 0; k < 8; k++) {
        if (!plan_value_may_overwrite(g, n, k, &by) || k >= by->nin)
            continue;
        int x = vi[by->in[k]];
        if (x < 0 || handed[x])
            continue;
        const PlanValue *xv = &p->v[x];
        if (xv->kind == PV_ARENA && xv->last == v->first && xv->size.fixed == v->size.fixed &&
            xv->size.per_sample == v->size.per_sample && g->nodes[xv->node]->dtype == n->dtype)
            return x;
    }
    return -1;
}

void memplan(const Graph *g, bool inplace, BufferPlan *out)
{
    memset(out, 0, sizeof *out);
    int nn = g->nnodes;
    out->nsteps = nn;
    int *first = malloc(sizeof(int) * (size_t)(nn + 1)), *last = malloc(sizeof(int) * (size_t)(nn + 1));
    out->v = malloc(sizeof(PlanValue) * (size_t)(nn + 1));
    if (!first || !last || !out->v)
        DIE("out of memory");
    plan_liveness(g, first, last);
    bool *grad = calloc((size_t)nn + 1, sizeof(bool)); /* read by grad_of */
    if (!grad)
        DIE("out of memory");
    for (int i = 0; i < nn; i++)
        if (g->nodes[i]->op == OP_grad_of)
            grad[g->nodes[i]->in[0]] = true;
    for (int i = 0; i < nn; i++) {
        const Node *n = g->nodes[i];
        if (!plan_has_buffer(n))
            continue;
        PlanValue *v = &out->v[out->n++];
        *v = (PlanValue){.node = i, .first = first[i], .last = last[i]};
        bool linear = plan_value_bytes(n, &v->size);
        v->kind = !linear || n->op == OP_Param || n->op == OP_Input ? PV_EXTERNAL : PV_ARENA;
        if (v->kind == PV_EXTERNAL) {
            out->external.fixed += v->size.fixed, out->external.per_sample += v->size.per_sample;
            continue;
        }
        out->unplanned.fixed += v->size.fixed, out->unplanned.per_sample += v->size.per_sample;
        if (grad[i])
            out->grads.fixed += v->size.fixed, out->grads.per_sample += v->size.per_sample;
    }
    free(grad);
    /* arena values by first step and by last step (counting sort) */
    int S = nn + 2, m = 0;
    int *hs = calloc((size_t)S + 1, sizeof(int)), *he = calloc((size_t)S + 1, sizeof(int));
    int *bys = malloc(sizeof(int) * (size_t)(out->n + 1)), *bye = malloc(sizeof(int) * (size_t)(out->n + 1));
    if (!hs || !he || !bys || !bye)
        DIE("out of memory");
    for (int i = 0; i < out->n; i++)
        if (out->v[i].kind == PV_ARENA)
            hs[out->v[i].first + 1]++, he[out->v[i].last + 1]++, m++;
    for (int s = 0; s < S; s++)
        hs[s + 1] += hs[s], he[s + 1] += he[s];
    for (int i = 0; i < out->n; i++)
        if (out->v[i].kind == PV_ARENA)
            bys[hs[out->v[i].first]++] = i, bye[he[out->v[i].last]++] = i;
    Alloc fx = {0}, ps = {0};
    int64_t live_f = 0, live_p = 0;
    int64_t *slot = malloc(sizeof(int64_t) * (size_t)(out->n + 1));
    int *vi = malloc(sizeof(int) * (size_t)(nn + 1));
    bool *handed = calloc((size_t)out->n + 1, sizeof(bool));
    if (!slot || !vi || !handed)
        DIE("out of memory");
    for (int i = 0; i < nn; i++)
        vi[i] = -1;
    for (int i = 0; i < out->n; i++)
        vi[out->v[i].node] = i;
    for (int s = 0; s <= nn; s++) {
        for (int k = s > 0 ? hs[s - 1] : 0; k < hs[s]; k++) {
            PlanValue *v = &out->v[bys[k]];
            live_f += v->size.fixed, live_p += v->size.per_sample;
            int x = inplace ? inplace_source(g, out, vi, handed, v) : -1;
            if (x >= 0) { /* v takes over x's slot, which is not freed at this step */
                handed[x] = true;
                slot[bys[k]] = slot[x];
                v->offset = out->v[x].offset;
                v->in_place = true;
                v->overwrites = out->v[x].node;
                live_f -= v->size.fixed, live_p -= v->size.per_sample; /* the same bytes */
            } else if (v->size.per_sample == 0) {
                slot[bys[k]] = round64(v->size.fixed);
                v->offset.fixed = alloc_take(&fx, slot[bys[k]]);
            } else {
                slot[bys[k]] = round64(v->size.fixed) + round64(v->size.per_sample);
                v->offset.per_sample = alloc_take(&ps, slot[bys[k]]);
            }
        }
        if (live_f > out->lower.fixed)
            out->lower.fixed = live_f;
        if (live_p > out->lower.per_sample)
            out->lower.per_sample = live_p;
        for (int k = s > 0 ? he[s - 1] : 0; k < he[s]; k++) {
            PlanValue *v = &out->v[bye[k]];
            if (handed[bye[k]])
                continue;
            live_f -= v->size.fixed, live_p -= v->size.per_sample;
            if (v->size.per_sample == 0)
                alloc_give(&fx, v->offset.fixed, slot[bye[k]]);
            else
                alloc_give(&ps, v->offset.per_sample, slot[bye[k]]);
        }
    }
    /* the per-sample region lies above the fixed one */
    for (int i = 0; i < out->n; i++)
        if (out->v[i].kind == PV_ARENA && out->v[i].size.per_sample > 0)
            out->v[i].offset.fixed = fx.peak;
    out->arena = (LinExpr){fx.peak, ps.peak};
    (void)m;
    vec_free(&fx.free);
    vec_free(&ps.free);
    free(slot);
    free(vi);
    free(handed);
    free(hs);
    free(he);
    free(bys);
    free(bye);
    free(first);
    free(last);
}
