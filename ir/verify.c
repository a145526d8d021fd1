/* verify.c - IR invariants, checked between passes in test builds (and
 * always with --verify).  A failure is a compiler bug, never a user error,
 * so it goes to stderr with the pass that broke it. */
#include "ir.h"

#include <string.h>

static bool bad(const char *pass, const Node *n, const char *what)
{
    fprintf(stderr, "ampc: internal error: IR invalid after %s: node %d (%s): %s\n",
            pass ? pass : "?", n ? n->id : -1, n && n->name ? n->name : "-", what);
    return false;
}

static bool stage_at_least(const char *pass, const char *stage)
{
    static const char *const order[] = {"elaborate", "infer-shapes", "infer-types", "amp",
                                        "cast-elide", "autodiff", "train-cast-elide", NULL};
    int p = -1, s = -1;
    for (int i = 0; order[i]; i++) {
        if (pass && strcmp(order[i], pass) == 0)
            p = i;
        if (strcmp(order[i], stage) == 0)
            s = i;
    }
    return p >= s && s >= 0;
}

bool ir_verify(const Graph *g, const char *pass)
{
    bool shapes = stage_at_least(pass, "infer-shapes"), types = stage_at_least(pass, "infer-types");
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        const OpInfo *oi = op_info(n->op);
        if (n->id != i)
            return bad(pass, n, "id differs from its position");
        if (!n->name || graph_find(g, n->name) != n)
            return bad(pass, n, "missing or unregistered name");
        if (oi->nslots && n->nin > oi->nslots)
            return bad(pass, n, "more inputs than slots");
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] < 0 || n->in[j] >= i)
                return bad(pass, n, "an input is not defined before its use");
        for (int a = 0; a < oi->nattrs; a++)
            if (n->attrs[a].type != oi->attrs[a].type)
                return bad(pass, n, "attribute with the wrong type");
        if (shapes && n->shape.rank < 0)
            return bad(pass, n, "shape unknown after shape inference");
        if (types && n->dtype == DT_UNKNOWN)
            return bad(pass, n, "dtype unknown after type inference");
    }
    if (g->noutputs < 1)
        return bad(pass, NULL, "no outputs");
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] < 0 || g->outputs[i] >= g->nnodes)
            return bad(pass, NULL, "output out of range");
    return true;
}
