/* lower.c - the training graph and its plans as a lowered program (plan.h):
 * what the one C emitter (emit_c.c) prints, for the CPU and the CUDA target
 * alike.  This file decides the buffers and the calls; the function a call
 * names is the emitter's choice, from the kernel table's column for the
 * target (CgPlans.kernels), and the gradients' buckets are the kvstore
 * pass's (KvPlan, passes/kvstore.c).
 *
 * Buffers: every value a step writes gets one (placed where its step's plan
 * says, or its own memory without a plan), except that parameters and
 * inputs are shared by name between the steps, grad_of is its gradient's
 * buffer and param_master the runtime's fp32 master (argument mK, no
 * buffer).  Buffers are numbered in node order, the training graph first.
 * Calls: every node but the leaves and views (Input, Param, part, grad_of,
 * param_master), in storage order (the schedule's), bn_moving_update in
 * the moving-update step.  A call's inputs are its node's, `-` where the
 * kernel does not read the slot (plan_reads); its outputs are its value
 * (`-` when the kernel skips it: a backward node whose first result nothing
 * reads) and the parts it writes, by index. */
#include "codegen.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    Program *p;
    Vec bufs;          /* ProgBuffer */
    StrMap shared;     /* Param and Input names -> buffer */
    StrMap param_index;
    Vec params;        /* int: parameter buffers */
    bool predict;      /* the model only predicts: no train step (info.predict_only) */
} Lw;

/* the ops that make no call (and have no row in ir/kernels.def); any other
 * op without a row is refused by the emitter, never skipped */
static bool silent(const Node *n)
{
    return n->op == OP_Input || n->op == OP_Param || n->op == OP_part || n->op == OP_grad_of ||
           n->op == OP_param_master;
}

/* the kernel table's workspace sizer (ir/kernels.def) */
bool lower_takes_workspace(OpKind k) { return kernel_row(k)->ws != NULL; }

/* Whether n's call writes n's own value: a backward node with several
 * results (its value and parts) skips the first when nothing reads it
 * (codegen/emit_c.c passes NULL or leaves out the call). */
static bool writes_value(const Node *n, int readers, bool has_parts)
{
    return readers > 0 || !has_parts || strncmp(op_info(n->op)->name, "_backward", 9) != 0;
}

static int new_buffer(Lw *w, const Node *n, ProgBufKind kind, const BufferPlan *plan,
                      const PlanValue *const *placed)
{
    ProgBuffer *b = vec_push(&w->bufs, sizeof(ProgBuffer));
    memset(b, 0, sizeof *b);
    b->name = arena_strdup(&w->p->a, n->name);
    b->kind = kind;
    b->dtype = n->dtype;
    b->layout = n->layout;
    int64_t e = 1;
    for (int i = 0; i < n->shape.rank; i++)
        if (__builtin_mul_overflow(e, n->shape.d[i] < 0 ? -n->shape.d[i] : n->shape.d[i], &e))
            DIE("lower: an element count overflows after cg_check");
    if (shape_has_sym(&n->shape))
        b->elems.per_sample = e;
    else
        b->elems.fixed = e;
    const PlanValue *v = plan ? placed[n->id] : NULL;
    if (v && v->kind == PV_ARENA && kind == PB_VALUE) {
        b->in_arena = true;
        b->offset = v->offset;
    }
    return w->bufs.len - 1;
}

/* node -> buffer for graph g (which = 0 training, 1 inference) */
static void assign(Lw *w, const Graph *g, int which, const BufferPlan *plan)
{
    const PlanValue **placed = calloc((size_t)g->nnodes + 1, sizeof *placed);
    int *nb = arena_alloc(&w->p->a, sizeof(int) * (size_t)(g->nnodes + 1));
    if (!placed)
        DIE("out of memory");
    for (int i = 0; plan && i < plan->n; i++)
        if (plan->v[i].node >= 0 && plan->v[i].node < g->nnodes)
            placed[plan->v[i].node] = &plan->v[i];
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op == OP_bn_moving_update) {
            nb[i] = -1;
        } else if (n->op == OP_Param || n->op == OP_Input) {
            int *have = strmap_get(&w->shared, n->name);
            nb[i] = have ? *have
                         : new_buffer(w, n, n->op == OP_Param ? PB_PARAM : PB_INPUT, plan, placed);
            if (!have)
                strmap_put(&w->shared, n->name, nb[i]);
            if (n->op == OP_Param && (which == 0 || w->predict) &&
                !strmap_get(&w->param_index, n->name)) {
                strmap_put(&w->param_index, n->name, w->params.len);
                *(int *)vec_push(&w->params, sizeof(int)) = nb[i];
            }
        } else if (n->op == OP_grad_of) {
            nb[i] = nb[n->in[0]];
        } else if (n->op == OP_param_master) {
            int *k = strmap_get(&w->param_index, g->nodes[n->in[0]]->name);
            nb[i] = -2 - (k ? *k : 0);
        } else {
            nb[i] = new_buffer(w, n, PB_VALUE, plan, placed);
        }
    }
    w->p->node_buf[which] = nb;
    free(placed);
}

static int *copy_ints(Program *p, const Vec *v)
{
    int *r = arena_alloc(&p->a, sizeof(int) * (size_t)(v->len + 1));
    if (v->len)
        memcpy(r, v->data, sizeof(int) * (size_t)v->len);
    return r;
}

static void add_call(Lw *w, Vec *calls, const Graph *g, const int *nb, const int *readers,
                     int **parts, const Node *n)
{
    Program *p = w->p;
    ProgCall *c = vec_push(calls, sizeof(ProgCall));
    memset(c, 0, sizeof *c);
    c->node = n->id;
    c->op = n->op;
    c->place = PLACE_CPU;
    c->workspace = lower_takes_workspace(n->op);
    c->nin = n->nin;
    c->in = arena_alloc(&p->a, sizeof(int) * (size_t)(n->nin + 1));
    for (int j = 0; j < n->nin; j++)
        c->in[j] = plan_reads(n, j) ? nb[n->in[j]] : -1;
    int nparts = 0;
    for (int k = 1; k < 4; k++)
        if (parts[n->id * 4 + k])
            nparts = k;
    c->nout = 1 + nparts;
    c->out = arena_alloc(&p->a, sizeof(int) * (size_t)(c->nout + 1));
    c->out[0] = writes_value(n, readers[n->id], nparts > 0) ? nb[n->id] : -1;
    if (n->op == OP_bn_moving_update) { /* it writes the moving statistics */
        c->nout = 2;
        c->out[0] = nb[n->in[2]];
        c->out[1] = nb[n->in[3]];
    }
    for (int k = 1; k <= nparts; k++)
        c->out[k] = parts[n->id * 4 + k] ? nb[parts[n->id * 4 + k][0]] : -1;
    (void)g;
}

static void lower_graph(Lw *w, const Graph *g, int which)
{
    Program *p = w->p;
    const int *nb = p->node_buf[which];
    int *readers = graph_use_counts(g);
    int **parts = calloc((size_t)g->nnodes * 4 + 4, sizeof(int *));
    int *part_ids = calloc((size_t)g->nnodes + 1, sizeof(int));
    if (!parts || !part_ids)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op != OP_part)
            continue;
        readers[n->in[0]]--; /* a part is a result, not a reader */
        int64_t k = node_int(n, PART_INDEX);
        if (k >= 1 && k < 4) {
            part_ids[i] = i;
            parts[n->in[0] * 4 + k] = &part_ids[i];
        }
    }
    Vec calls[2] = {{0}, {0}}, res = {0};
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (silent(n))
            continue;
        add_call(w, &calls[n->op == OP_bn_moving_update], g, nb, readers, parts, n);
    }
    /* read after the step: outputs and gradients (grad_of's inputs) */
    for (int i = 0; i < g->noutputs; i++)
        if (nb[g->outputs[i]] >= 0 && g->nodes[g->outputs[i]]->op != OP_grad_of)
            *(int *)vec_push(&res, sizeof(int)) = nb[g->outputs[i]];
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_grad_of)
            *(int *)vec_push(&res, sizeof(int)) = nb[i];
    StepKind main = which == 0 ? STEP_TRAIN : STEP_INFER;
    p->step[main] = (ProgStep){.calls = NULL, .ncalls = calls[0].len, .nresults = res.len};
    p->step[main].calls = arena_alloc(&p->a, sizeof(ProgCall) * (size_t)(calls[0].len + 1));
    if (calls[0].len)
        memcpy(p->step[main].calls, calls[0].data, sizeof(ProgCall) * (size_t)calls[0].len);
    p->step[main].results = copy_ints(p, &res);
    if (which == 0) {
        ProgStep *m = &p->step[STEP_MOVING];
        m->ncalls = calls[1].len;
        m->calls = arena_alloc(&p->a, sizeof(ProgCall) * (size_t)(calls[1].len + 1));
        if (calls[1].len)
            memcpy(m->calls, calls[1].data, sizeof(ProgCall) * (size_t)calls[1].len);
        m->results = arena_alloc(&p->a, sizeof(int));
    }
    vec_free(&calls[0]);
    vec_free(&calls[1]);
    vec_free(&res);
    free(readers);
    free(parts);
    free(part_ids);
}

/* the train and moving_update steps of a model that only predicts: no calls */
static void empty_steps(Program *p)
{
    for (int k = STEP_TRAIN; k <= STEP_MOVING; k++) {
        p->step[k].calls = arena_alloc(&p->a, sizeof(ProgCall));
        p->step[k].results = arena_alloc(&p->a, sizeof(int));
    }
}

void lower(const Graph *train, const CgPlans *plans, Program *out)
{
    memset(out, 0, sizeof *out);
    out->align = PLAN_ALIGN;
    arena_init(&out->a);
    out->model = arena_strdup(&out->a, train->model);
    Lw w = {.p = out, .predict = train->info.predict_only};
    /* a model that only predicts: its forward graph is not a step */
    if (!w.predict)
        assign(&w, train, 0, plans ? plans->train : NULL);
    if (train->infer)
        assign(&w, train->infer, 1, plans ? plans->infer : NULL);
    out->nbuf = w.bufs.len;
    out->buf = arena_alloc(&out->a, sizeof(ProgBuffer) * (size_t)(w.bufs.len + 1));
    if (w.bufs.len)
        memcpy(out->buf, w.bufs.data, sizeof(ProgBuffer) * (size_t)w.bufs.len);
    out->nparams = w.params.len;
    out->param_buf = copy_ints(out, &w.params);
    out->param_grad = arena_alloc(&out->a, sizeof(int) * (size_t)(w.params.len + 1));
    for (int k = 0; k < w.params.len; k++)
        out->param_grad[k] = -1;
    for (int i = 0; !w.predict && i < train->nnodes; i++) {
        const Node *n = train->nodes[i];
        int *k = n->op == OP_grad_of ? strmap_get(&w.param_index, train->nodes[n->in[1]]->name) : NULL;
        if (k)
            out->param_grad[*k] = out->node_buf[0][i];
    }
    if (w.predict)
        empty_steps(out);
    else
        lower_graph(&w, train, 0);
    if (train->infer)
        lower_graph(&w, train->infer, 1);
    for (int s = w.predict; s < 2; s++) {
        const BufferPlan *bp = plans ? (s ? plans->infer : plans->train) : NULL;
        if (bp && bp->arena.fixed > out->arena.fixed)
            out->arena.fixed = bp->arena.fixed;
        if (bp && bp->arena.per_sample > out->arena.per_sample)
            out->arena.per_sample = bp->arena.per_sample;
    }
    vec_free(&w.bufs);
    vec_free(&w.params);
    strmap_free(&w.shared);
    strmap_free(&w.param_index);
}
