/* autodiff.c - the autodiff pass: appends the backward graph to the forward
 * graph, and builds the inference graph used for validation.
 *
 * Reverse-mode, as tinygrad and micrograd do it: the forward nodes are
 * walked in reverse topological order and each op's gradient rule (a column
 * of the op table; the rules live in ir/ops/<family>.c) turns the gradient
 * of its output into gradients of its inputs, summed where a value is read
 * twice.  Only values on a path from a trainable parameter are
 * differentiated.  Loss heads seed the walk as MXNet's do: SoftmaxOutput
 * ignores any head gradient and yields p - onehot (smoothed, scaled,
 * normalised by its attributes); the runtime multiplies in the loss scale.
 *
 * Training BatchNorm keeps its batch statistics as parts 1 and 2 of its node
 * and updates the moving statistics through an explicit bn_moving_update
 * node, so a later pass can schedule it (or skip it on an overflow step).
 * Each parameter's gradient is marked by grad_of(g, p); gradients have the
 * dtype of their value, so an fp16 shadow gets an fp16 gradient and the
 * gradient of a cast is a cast back. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

static bool trainable(const Node *n)
{
    if (n->op != OP_Param)
        return false;
    int k = node_param_kind(n);
    return k != PK_MOVING_MEAN && k != PK_MOVING_VAR;
}

/* wants[v]: v is a trainable parameter or depends on one through data or
 * parameter inputs (labels and statistics carry no gradient). */
static bool *compute_wants(const Graph *g)
{
    bool *w = calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof(bool));
    if (!w)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        const OpInfo *oi = op_info(n->op);
        w[i] = trainable(n);
        for (int j = 0; j < n->nin && !w[i]; j++) {
            SlotKind k = oi->nslots ? oi->slots[j].kind : SLOT_DATA;
            if (k != SLOT_LABEL && k != SLOT_AUX)
                w[i] = w[n->in[j]];
        }
    }
    return w;
}

/* The inference graph: BatchNorm on its moving statistics, Dropout off. */
static Graph *inference_graph(const Graph *g)
{
    Graph *c = graph_copy(g);
    int *repl = malloc(sizeof(int) * (size_t)(c->nnodes ? c->nnodes : 1));
    if (!repl)
        DIE("out of memory");
    for (int i = 0; i < c->nnodes; i++) {
        Node *n = c->nodes[i];
        repl[i] = i;
        for (int j = 0; j < n->nin; j++)
            n->in[j] = repl[n->in[j]];
        if (n->op == OP_BatchNorm)
            n->attrs[BN_USE_GLOBAL_STATS].b = true;
        if (n->op == OP_Dropout)
            repl[i] = n->in[0];
    }
    for (int i = 0; i < c->noutputs; i++)
        c->outputs[i] = repl[c->outputs[i]];
    free(repl);
    return graph_compact(c);
}

static int add_moving_updates(GradCtx *c, Graph *g, const int *order, int nfwd, Vec *outs)
{
    for (int k = 0; k < nfwd; k++) {
        int i = order[k];
        const Node *n = g->nodes[i];
        if (n->op != OP_BatchNorm || node_bool(n, BN_USE_GLOBAL_STATS))
            continue;
        int in[4] = {grad_part(c, i, 1), grad_part(c, i, 2), n->in[3], n->in[4]};
        int u = grad_emit(c, OP_bn_moving_update, in, 4, n);
        if (u < 0)
            return -1;
        *(int *)vec_push(outs, sizeof(int)) = u;
    }
    return 0;
}

static bool seed_loss_heads(GradCtx *c, Graph *g)
{
    bool any = false;
    for (int i = 0; i < g->noutputs; i++) {
        const Node *o = g->nodes[g->outputs[i]];
        if (o->op != OP_SoftmaxOutput)
            continue;
        any = true;
        int in[2] = {o->id, o->in[1]};
        int b = grad_emit(c, OP__backward_SoftmaxOutput, in, 2, o);
        if (b < 0)
            return false;
        grad_add(c, o->in[0], b);
    }
    if (!any) {
        diag_error(g->diag, g->noutputs ? g->nodes[g->outputs[0]]->loc : loc_none(),
                   "autodiff: model '%s' has no loss head (SoftmaxOutput) to train", g->model);
        return false;
    }
    return true;
}

bool autodiff(Graph **gp)
{
    Graph *g = *gp;
    Graph *infer = inference_graph(g);
    int nfwd = g->nnodes;
    bool *wants = compute_wants(g);
    GradCtx *c = grad_ctx_new(g, wants);
    Vec outs = {0};
    /* The walk and the new outputs follow the canonical order of the forward
     * graph (reversed for the walk), so gradients are summed in the same
     * order and the result prints the same however the graph was stored. */
    int *order = graph_canonical_order(g);
    bool ok = add_moving_updates(c, g, order, nfwd, &outs) == 0 && seed_loss_heads(c, g);
    for (int k = nfwd - 1; ok && k >= 0; k--) {
        int i = order[k];
        const Node *n = g->nodes[i];
        int dy = grad_get(c, i);
        if (dy < 0 || !wants[i] || n->op == OP_Param || n->op == OP_Input)
            continue;
        ok = op_info(n->op)->grad(c, n, dy);
    }
    int ngrads = 0;
    for (int k = 0; ok && k < nfwd; k++) {
        int i = order[k];
        if (!trainable(g->nodes[i]) || grad_get(c, i) < 0)
            continue;
        int in[2] = {grad_get(c, i), i};
        int gi = grad_emit(c, OP_grad_of, in, 2, g->nodes[i]);
        ok = gi >= 0;
        if (ok)
            *(int *)vec_push(&outs, sizeof(int)) = gi, ngrads++;
    }
    if (ok && ngrads == 0) {
        diag_error(g->diag, g->nodes[g->outputs[0]]->loc,
                   "autodiff: no trainable parameter of model '%s' reaches a loss head", g->model);
        ok = false;
    }
    for (int i = 0; ok && i < outs.len; i++)
        graph_add_output(g, VEC_AT(outs, int, i));
    vec_free(&outs);
    free(order);
    grad_ctx_free(c);
    free(wants);
    if (!ok) {
        graph_free(infer);
        return false;
    }
    g = graph_compact(g);
    graph_free(g->infer);
    g->infer = infer;
    *gp = g;
    return true;
}

bool autodiff_predict(Graph **gp)
{
    Graph *g = *gp;
    if (g->noutputs != 1) {
        diag_error(g->diag, g->noutputs ? g->nodes[g->outputs[1]]->loc : loc_none(),
                   "model '%s' has no loss head and %d outputs: a program that only predicts "
                   "writes one",
                   g->model, g->noutputs);
        return false;
    }
    Graph *infer = inference_graph(g);
    const Node *y = infer->nodes[infer->outputs[0]];
    if (y->dtype != DT_F32) {
        int src = y->id;
        Node *c = graph_add(infer, OP_amp_cast, &src, 1, y->loc, y->frame);
        c->attrs[CAST_DTYPE].e = DT_F32;
        c->shape = y->shape;
        c->dtype = DT_F32;
        const char *name = arena_printf(&infer->arena, "%s_amp_f32", y->name);
        for (int k = 2; !graph_set_name(infer, c, name); k++)
            name = arena_printf(&infer->arena, "%s_amp_f32_%d", y->name, k);
        infer->nodes[src]->flags &= ~(uint32_t)NF_OUTPUT;
        infer->outputs[0] = c->id;
        c->flags |= NF_OUTPUT;
    }
    graph_free(g->infer);
    g->infer = infer;
    g->info.predict_only = true;
    return true;
}

/* ---- the backward graph of a dump, derived again --------------------------- */


/* The forward part of a training graph: what its outputs other than
 * gradients and moving-statistics updates depend on.  NULL (reported) when
 * there is none, or when it holds an op that only autodiff makes. */
static Graph *forward_part(const Graph *g)
{
    Graph *f = graph_copy(g);
    int k = 0;
    for (int i = 0; i < f->noutputs; i++) {
        Node *o = f->nodes[f->outputs[i]];
        o->flags &= ~(uint32_t)NF_OUTPUT;
        if (o->op != OP_grad_of && o->op != OP_bn_moving_update)
            f->outputs[k++] = o->id;
    }
    f->noutputs = k;
    for (int i = 0; i < k; i++)
        f->nodes[f->outputs[i]]->flags |= NF_OUTPUT;
    if (k == 0) {
        diag_error(g->diag, g->noutputs ? g->nodes[g->outputs[0]]->loc : loc_none(),
                   "the training graph of '%s' has no forward output (only gradients)", g->model);
        graph_free(f);
        return NULL;
    }
    f = graph_compact(f);
    for (int i = 0; i < f->nnodes; i++)
        if (op_made_by_autodiff(f->nodes[i]->op)) {
            /* locations are the dump's own: report on g's node */
            const Node *n = graph_find(g, f->nodes[i]->name);
            diag_error(g->diag, n->loc, "'%s': %s is made by autodiff, but the forward part of "
                                        "the graph (what its outputs depend on) reads it",
                       n->name, op_info(n->op)->name);
            graph_free(f);
            return NULL;
        }
    return f;
}

/* The `return` line after `from` in the dump g was read from (the reader
 * keeps no location for it), or `from` when it cannot be found. */
static Loc return_line(const Graph *g, Loc from)
{
    const SrcFile *f = diag_file(g->diag, from.file);
    if (!f)
        return from;
    const char *p = f->text;
    int line = 1;
    for (; *p && line < from.line; p++)
        line += *p == '\n';
    for (; *p; line++) {
        if (strncmp(p, "return", 6) == 0)
            return (Loc){from.file, line, 1};
        p += strcspn(p, "\n");
        p += *p == '\n';
    }
    return from;
}

/* Reports the first line where the dump's graph `have` and the derived one
 * `want` differ, at the node of `have` that line lists. */
static bool compare(const Graph *have, const Graph *want, const char *what)
{
    char *a = ir_print_string(have), *b = ir_print_string(want);
    bool same = strcmp(a, b) == 0;
    if (!same) {
        int line = 0;
        size_t i = 0;
        for (; a[i] && a[i] == b[i]; i++)
            line += a[i] == '\n';
        size_t start = i;
        while (start > 0 && b[start - 1] != '\n')
            start--;
        size_t len = strcspn(b + start, "\n");
        /* the lines: a banner, `model`, the train lines, the nodes in
         * canonical order (as the dump lists them), `return` */
        int *order = graph_canonical_order(have);
        int k = line - 2 - have->ntrain;
        const Node *n = have->nodes[k >= 0 && k < have->nnodes ? order[k] : have->outputs[0]];
        free(order);
        Loc at = k < have->nnodes ? n->loc : return_line(have, n->loc);
        if (k >= 0 && k < have->nnodes)
            diag_error(have->diag, at,
                       "%s: '%s' is not what autodiff derives from the forward part", what,
                       n->name);
        else
            diag_error(have->diag, at, "%s: its %s differ from what autodiff derives from the "
                                       "forward part",
                       what, k < 0 ? "header lines" : "outputs");
        if (len)
            diag_note(have->diag, at, "autodiff gives: %.*s", (int)len, b + start);
        else
            diag_note(have->diag, at, "autodiff gives no line here");
    }
    free(a);
    free(b);
    return same;
}

bool autodiff_check(const Graph *g, bool elided)
{
    Graph *f = forward_part(g);
    if (!f)
        return false;
    bool ok = autodiff(&f);
    if (ok && elided) {
        Graph *infer = f->infer;
        f->infer = NULL;
        ok = cast_elide(&f) && cast_elide(&infer);
        f->infer = infer;
    }
    if (ok && !g->infer) {
        diag_error(g->diag, g->nodes[g->outputs[0]]->loc,
                   "the training graph of '%s' comes without its inference graph (a second "
                   "'model' section)", g->model);
        ok = false;
    }
    ok = ok && compare(g, f, "the training graph") &&
         compare(g->infer, f->infer, "the inference graph");
    graph_free(f);
    return ok;
}
