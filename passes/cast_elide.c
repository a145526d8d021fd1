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
 * then dropped.  The count of casts removed goes to info.casts_elided.
 * With --explain (Graph.why set), the reasons of the nodes that stay carry
 * over and each removed node gets one (Graph.elided). */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_cast(const Node *n) { return n->op == OP_Cast || n->op == OP_amp_cast; }

/* --explain: per old node, its name, its reason and why it was removed
 * (malloc'ed: the old graph's arena goes with it). */
typedef struct {
    char **name, **why, **gone;
    int n;
} Notes;

static char *note_printf(const char *fmt, const char *a, const char *b)
{
    char *s;
    if (asprintf(&s, fmt, a, b) < 0)
        DIE("out of memory");
    return s;
}

static char *note_dup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        DIE("out of memory");
    return d;
}

static void notes_save(Notes *t, const Graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        t->name[i] = note_dup(g->nodes[i]->name);
        t->why[i] = g->why[i] ? note_dup(g->why[i]) : NULL;
    }
}

/* The reasons of what stayed, under their names in ng, and the removed. */
static void notes_apply(Notes *t, Graph *ng)
{
    ng->why = arena_alloc(&ng->arena, sizeof(char *) * (size_t)(ng->nnodes + 1));
    ng->elided = arena_alloc(&ng->arena, sizeof *ng->elided * (size_t)(t->n + 1));
    for (int i = 0; i < t->n; i++) {
        const Node *k = graph_find(ng, t->name[i]);
        if (k && t->why[i]) {
            ng->why[k->id] = arena_strdup(&ng->arena, t->why[i]);
        } else if (!k) {
            ng->elided[ng->nelided].name = arena_strdup(&ng->arena, t->name[i]);
            ng->elided[ng->nelided++].why =
                arena_printf(&ng->arena, "removed by cast-elide: %s",
                             t->gone[i] ? t->gone[i] : "nothing reads it any more");
        }
        free(t->name[i]);
        free(t->why[i]);
        free(t->gone[i]);
    }
    free(t->name);
    free(t->why);
    free(t->gone);
}

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
    Notes notes = {0};
    if (g->why) {
        notes.n = g->nnodes;
        notes.name = calloc((size_t)n, sizeof(char *));
        notes.why = calloc((size_t)n, sizeof(char *));
        notes.gone = calloc((size_t)n, sizeof(char *));
        if (!notes.name || !notes.why || !notes.gone)
            DIE("out of memory");
    }
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
            if (notes.gone)
                notes.gone[i] = note_printf("a no-op: its input %s already has dtype %s", src->name,
                                            dtype_long(d));
            continue;
        }
        int *slot = &first[(src->id * 2 + (x->op == OP_Cast)) * DT_COUNT + d];
        if (*slot >= 0) {
            repl[i] = *slot;
            if (notes.gone)
                notes.gone[i] = note_printf("the same cast of %s as %s", src->name,
                                            g->nodes[*slot]->name);
        } else {
            *slot = i;
        }
    }
    if (notes.name)
        notes_save(&notes, g);
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
    if (notes.name)
        notes_apply(&notes, ng);
    *gp = ng;
    return true;
}
