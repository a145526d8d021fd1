/* cast_elide.c - removes casts that do nothing or repeat another.
 *
 * In one pass over the graph, with every input first redirected to what
 * replaced it:
 *   - a cast (the user's Cast or an amp_cast) whose input already has its
 *     dtype is replaced by that input;
 *   - an amp_cast of an amp_cast casts the original instead (or is the
 *     original, when that has the wanted dtype): chains AMP made collapse;
 *   - a second cast of one value to one dtype, by the same kind of cast, is
 *     replaced by the first.
 * A user's Cast is never folded into a chain: fp32 -> fp16 -> fp32 written by
 * hand rounds on purpose (NVIDIA/Fuser#342).  Casts left without users are
 * then dropped.  The count of casts removed goes to info.casts_elided. */
#include "passes.h"

#include <stdlib.h>

static bool is_cast(const Node *n) { return n->op == OP_Cast || n->op == OP_amp_cast; }

static int count_casts(const Graph *g)
{
    int c = 0;
    for (int i = 0; i < g->nnodes; i++)
        c += is_cast(g->nodes[i]);
    return c;
}

bool cast_elide(Graph **gp)
{
    Graph *g = *gp;
    int n = g->nnodes ? g->nnodes : 1;
    int *repl = malloc(sizeof(int) * (size_t)n);
    int *first = malloc(sizeof(int) * (size_t)n * DT_COUNT * 2); /* (src, user?, dtype) */
    if (!repl || !first)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes * DT_COUNT * 2; i++)
        first[i] = -1;
    int before = count_casts(g);
    for (int i = 0; i < g->nnodes; i++) {
        Node *x = g->nodes[i];
        repl[i] = i;
        for (int j = 0; j < x->nin; j++)
            x->in[j] = repl[x->in[j]];
        if (!is_cast(x))
            continue;
        DType d = (DType)x->attrs[CAST_DTYPE].e;
        const Node *src = g->nodes[x->in[0]];
        if (x->op == OP_amp_cast && src->op == OP_amp_cast) {
            x->in[0] = src->in[0];
            src = g->nodes[src->in[0]];
        }
        if (src->dtype == d) {
            repl[i] = src->id;
            continue;
        }
        int *slot = &first[(src->id * 2 + (x->op == OP_Cast)) * DT_COUNT + d];
        if (*slot >= 0)
            repl[i] = *slot;
        else
            *slot = i;
    }
    for (int i = 0; i < g->noutputs; i++) {
        int o = repl[g->outputs[i]];
        g->nodes[g->outputs[i]]->flags &= ~(uint32_t)NF_OUTPUT;
        g->outputs[i] = o;
    }
    for (int i = 0; i < g->noutputs; i++)
        g->nodes[g->outputs[i]]->flags |= NF_OUTPUT;
    free(repl);
    free(first);
    Graph *ng = graph_compact(g);
    ng->info.casts_elided += before - count_casts(ng);
    *gp = ng;
    return true;
}
