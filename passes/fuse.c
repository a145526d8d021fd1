/* fuse.c - the fuse pass: rewrites patterns of the training graph (and of
 * its inference graph) into the fused ops of ops.def, by the rules of one
 * table.  It runs after autodiff and train-cast-elide, before schedule and
 * code generation.
 *
 * Every rule is a pair: a node p and a node r that reads p as its first
 * input, of the rule's two kinds, become one node.  A rule applies where
 *   - the pair passes the rule's condition (pair_ok: dtypes, the relu's
 *     act_type, the cast's direction);
 *   - p is not a graph output, r reads p once, and nothing but r reads p,
 *     except the nodes the rule rewrites with it: p's parts (BatchNorm's
 *     saved statistics) and the readers other_ok accepts (the relu's
 *     backward nodes _backward_Activation(dy, p, r), which the rule fuses
 *     or rewrites to read r alone).
 * So after a fusion no node reads p's value: it is never stored.
 *
 * Three kinds of pair:
 *   - relu rules (bn_relu, add_relu) and a cast folded into the op whose
 *     value it reads (softmax_output_bwd_cast): the fused node takes p's
 *     place in storage order (its inputs are p's) and r's name and dtype;
 *   - a cast folded into its reader (cast_softmax_output): the fused node
 *     takes r's place and name, and reads the cast's input where r read
 *     the cast (r may read values stored after p, like the label);
 *   - a BatchNorm merged into the _fused_add_relu that reads it as its
 *     first input (bn_add_relu, a second round after add_relu): the fused
 *     node takes r's place and name and reads p's five inputs and r's
 *     shortcut; p's parts (stored after r) become its parts.  In the
 *     backward, the relu's gradient q and the BatchNorm backward b reading
 *     it become one node at q's place: its value is q's (the shortcut's
 *     gradient), its parts 1 and 2 are b's, and b itself becomes its part
 *     3 (BatchNorm's data gradient), keeping its name and readers.
 * And one rule off unless asked (--fuse=conv_bn_stats, a CUDA program's:
 * fuse_stats below): a convolution whose value a training BatchNorm (plain,
 * or fused with the relu or the add and relu) reads becomes a
 * _fused_Convolution_stats that also writes the value's statistics as its
 * part 1, and the BatchNorm its _stats form reading them; both keep their
 * names, and the backward is not touched.
 * The fused node's `absorbed` attribute names the other node, so that
 * fuse_check can expand a dump back into the unfused graph, derive it again
 * with autodiff, and fuse it again.
 *
 * The kernels round where the unfused ops store, and convert where the
 * casts did (docs/codegen.md, "Fusions"): a fusion never changes a bit of
 * the result. */
#include "passes.h"

#include "../ir/plan.h"

#include <stdlib.h>
#include <string.h>

/* readers of each value, as a CSR table */
typedef struct {
    int *start, *user;
} Readers;

/* --explain: where the lines go (NULL: nowhere), the one node asked
 * about (or NULL), and which graph */
typedef struct {
    FILE *out;
    const char *only, *graph;
} Explain;

/* where the fused node stands (above) */
typedef enum { FUSE_AT_FIRST, FUSE_AT_SECOND, FUSE_MERGE } FusePlace;

typedef struct FuseRule FuseRule;
struct FuseRule {
    const char *name;     /* --no-fuse=NAME */
    OpKind first, second; /* p, and r reading p as its input 0 */
    OpKind fused;         /* the pair */
    OpKind fused_bwd;     /* their backward nodes (OP_COUNT: the rule rewrites none) */
    FusePlace place;
    int round;   /* 0, or 1: matched after round 0's fusions (on their nodes); 2: fuse_stats */
    bool opt_in; /* off unless --fuse names it */
    /* the attributes the fused ops keep of the node whose place they take
     * (then, with cast_dtype, r's target dtype; then `absorbed`) */
    int kept_attrs;
    bool cast_dtype;
    bool parts; /* p's parts (its other results) go with it */
    bool (*pair_ok)(const Graph *g, const Node *p, const Node *r);
    /* whether q, another reader of p, can go with the fusion (NULL: none can) */
    bool (*other_ok)(const Graph *g, const Readers *rd, const Node *p, const Node *q,
                     const Node *r);
    /* rewrites such a q (and what it feeds) into fused_bwd reading r, which
     * the caller redirects to the fused node afterwards */
    void (*bwd_rewrite)(Graph *g, const Readers *rd, const FuseRule *rule, Node *q, int r,
                        const Explain *ex);
};

static bool relu_pair_ok(const Graph *g, const Node *p, const Node *r);
static bool add_relu_pair_ok(const Graph *g, const Node *p, const Node *r);
static bool widening_cast_ok(const Graph *g, const Node *p, const Node *r);
static bool narrowing_cast_ok(const Graph *g, const Node *p, const Node *r);
static bool bn_other_ok(const Graph *g, const Readers *rd, const Node *p, const Node *q,
                        const Node *r);
static bool relu_bwd_ok(const Graph *g, const Readers *rd, const Node *p, const Node *q,
                        const Node *r);
static void bn_bwd_rewrite(Graph *g, const Readers *rd, const FuseRule *rule, Node *q, int r,
                           const Explain *ex);
static void add_bwd_rewrite(Graph *g, const Readers *rd, const FuseRule *rule, Node *q, int r,
                            const Explain *ex);
static bool bn_add_pair_ok(const Graph *g, const Node *p, const Node *r);

static const FuseRule rules[] = {
    {.name = "bn_relu", .first = OP_BatchNorm, .second = OP_Activation,
     .fused = OP__fused_BatchNorm_relu, .fused_bwd = OP__backward_fused_BatchNorm_relu,
     .place = FUSE_AT_FIRST, .kept_attrs = BN_NATTRS, .parts = true, .pair_ok = relu_pair_ok,
     .other_ok = bn_other_ok, .bwd_rewrite = bn_bwd_rewrite},
    {.name = "add_relu", .first = OP_elemwise_add, .second = OP_Activation,
     .fused = OP__fused_add_relu, .fused_bwd = OP__backward_fused_add_relu,
     .place = FUSE_AT_FIRST, .pair_ok = add_relu_pair_ok, .other_ok = relu_bwd_ok,
     .bwd_rewrite = add_bwd_rewrite},
    /* a residual block's last BatchNorm, its add and relu: on add_relu's node */
    {.name = "bn_add_relu", .first = OP_BatchNorm, .second = OP__fused_add_relu,
     .fused = OP__fused_BatchNorm_add_relu, .fused_bwd = OP__backward_fused_BatchNorm_add_relu,
     .place = FUSE_MERGE, .round = 1, .kept_attrs = BN_NATTRS, .parts = true,
     .pair_ok = bn_add_pair_ok},
    /* the logits widened to fp32 for the loss head: its kernel widens on reading */
    {.name = "cast_softmax_output", .first = OP_amp_cast, .second = OP_SoftmaxOutput,
     .fused = OP__fused_cast_SoftmaxOutput, .fused_bwd = OP_COUNT, .place = FUSE_AT_SECOND,
     .kept_attrs = SMO_NATTRS, .pair_ok = widening_cast_ok},
    /* the loss gradient narrowed to 16-bit: its kernel rounds on writing */
    {.name = "softmax_output_bwd_cast", .first = OP__backward_SoftmaxOutput,
     .second = OP_amp_cast, .fused = OP__backward_fused_SoftmaxOutput_cast,
     .fused_bwd = OP_COUNT, .place = FUSE_AT_FIRST, .kept_attrs = SMO_NATTRS,
     .cast_dtype = true, .pair_ok = narrowing_cast_ok},
    /* a convolution writing the statistics of its value, which the
     * BatchNorm reading it (as any of the three forms above) then reads
     * instead of summing x again: after the rounds, on the training graph,
     * for --target=cuda, off unless asked (fuse_stats) */
    {.name = "conv_bn_stats", .first = OP_Convolution, .second = OP_BatchNorm,
     .fused = OP__fused_Convolution_stats, .fused_bwd = OP_COUNT, .round = 2, .opt_in = true},
};
enum { NRULES = sizeof rules / sizeof rules[0] };
_Static_assert(NRULES <= 32, "--no-fuse keeps one bit per rule");

/* ---- the graph's readers ---------------------------------------------------- */

static Readers readers_of(const Graph *g)
{
    int n = g->nnodes;
    Readers rd = {calloc((size_t)n + 2, sizeof(int)), NULL};
    if (!rd.start)
        DIE("out of memory");
    int edges = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++)
            rd.start[g->nodes[i]->in[j] + 1]++, edges++;
    for (int i = 0; i < n; i++)
        rd.start[i + 1] += rd.start[i];
    rd.user = malloc(sizeof(int) * (size_t)(edges ? edges : 1));
    int *fill = calloc((size_t)n + 1, sizeof(int));
    if (!rd.user || !fill)
        DIE("out of memory");
    /* a node that reads a value twice is listed twice */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++) {
            int v = g->nodes[i]->in[j];
            rd.user[rd.start[v] + fill[v]++] = i;
        }
    free(fill);
    return rd;
}

static int reader_count(const Readers *rd, int v) { return rd->start[v + 1] - rd->start[v]; }

static bool is_relu(const Node *n)
{
    return n->op == OP_Activation && node_enum(n, ACT_TYPE) == ACT_RELU;
}

static bool is_16bit(DType t) { return t == DT_F16 || t == DT_BF16; }

/* the relu's backward node: _backward_Activation(dy, p, r), relu */
static bool is_relu_bwd_of(const Node *q, int p, int r)
{
    return q->op == OP__backward_Activation && node_enum(q, ACT_TYPE) == ACT_RELU &&
           q->nin == 3 && q->in[1] == p && q->in[2] == r;
}

static bool is_part(const Graph *g, int v, int of, int64_t index)
{
    const Node *n = g->nodes[v];
    return n->op == OP_part && n->in[0] == of && node_int(n, PART_INDEX) == index;
}

/* ---- the rules' conditions ------------------------------------------------------ */

/* a relu of p in p's dtype */
static bool relu_pair_ok(const Graph *g, const Node *p, const Node *r)
{
    (void)g;
    return is_relu(r) && p->dtype == r->dtype;
}

/* and both of the add's inputs in it too (a cast between them keeps them apart) */
static bool add_relu_pair_ok(const Graph *g, const Node *p, const Node *r)
{
    for (int j = 0; j < p->nin; j++)
        if (g->nodes[p->in[j]]->dtype != p->dtype)
            return false;
    return relu_pair_ok(g, p, r);
}

/* r adds BatchNorm's value (its first input) to a shortcut of the same dtype */
static bool bn_add_pair_ok(const Graph *g, const Node *p, const Node *r)
{
    return r->nin == 2 && r->dtype == p->dtype && g->nodes[r->in[1]]->dtype == p->dtype;
}

/* p widens 16-bit logits to the fp32 that r (SoftmaxOutput) computes in:
 * exact, so the kernel can do it on reading */
static bool widening_cast_ok(const Graph *g, const Node *p, const Node *r)
{
    return is_16bit(g->nodes[p->in[0]]->dtype) && p->dtype == DT_F32 && r->dtype == DT_F32;
}

/* r narrows p's fp32 gradient to 16-bit: the kernel rounds on writing, once
 * per element, as the cast does */
static bool narrowing_cast_ok(const Graph *g, const Node *p, const Node *r)
{
    (void)g;
    return p->dtype == DT_F32 && is_16bit(r->dtype);
}

static bool relu_bwd_ok(const Graph *g, const Readers *rd, const Node *p, const Node *q,
                        const Node *r)
{
    (void)g, (void)rd;
    return is_relu_bwd_of(q, p->id, r->id);
}

/* ---- rewriting ---------------------------------------------------------------- */

/* n becomes op with nin inputs and attributes: the first `keep` of its own,
 * then (when not NULL) `absorbed` as the op's last. */
static void node_become(Graph *g, Node *n, OpKind op, const int *in, int nin, int keep,
                        const char *absorbed)
{
    const OpInfo *oi = op_info(op);
    int *nin_arr = arena_alloc(&g->arena, sizeof(int) * (size_t)nin);
    memcpy(nin_arr, in, sizeof(int) * (size_t)nin);
    AttrVal *attrs = arena_alloc(&g->arena, sizeof(AttrVal) * (size_t)(oi->nattrs + 1));
    for (int a = 0; a < keep; a++)
        attrs[a] = n->attrs[a];
    if (absorbed && oi->nattrs > 0)
        attrs[oi->nattrs - 1] = (AttrVal){.type = AT_STR, .s = arena_strdup(&g->arena, absorbed)};
    n->op = op;
    n->in = nin_arr;
    n->nin = nin;
    n->attrs = attrs;
}

/* n becomes op reading in, with from's first `keep` attributes, then the
 * op's others from `extra` (nextra of them; its last is `absorbed`) */
static void node_become_like(Graph *g, Node *n, OpKind op, const int *in, int nin, const Node *from,
                             int keep, const char *const *extra, int nextra)
{
    const AttrVal *src = from->attrs;
    node_become(g, n, op, in, nin, 0, NULL);
    for (int a = 0; a < keep; a++)
        n->attrs[a] = src[a];
    for (int k = 0; k < nextra; k++)
        n->attrs[keep + k] = (AttrVal){.type = AT_STR, .s = arena_strdup(&g->arena, extra[k])};
}

/* "fuse bn_relu: bn1 + relu1 -> _fused_BatchNorm_relu relu1", with
 * " (inference graph)" there */
static void explain_line(const Explain *ex, const FuseRule *rule, const char *a, const char *b,
                         const Node *made)
{
    const char *only = ex->only;
    if (!ex->out || (only && strcmp(only, a) != 0 && (!b || strcmp(only, b) != 0) &&
                     strcmp(only, made->name) != 0))
        return;
    fprintf(ex->out, "fuse %s: %s%s%s -> %s %s%s\n", rule->name, a, b ? " + " : "", b ? b : "",
            op_info(made->op)->name, made->name, ex->graph);
}

/* bn_relu: the relu's backward feeds only BatchNorm's backward of p (its
 * dy), which then masks dy by r > 0 itself. */
static const Node *bn_bwd_of(const Graph *g, const Readers *rd, const Node *p, const Node *q)
{
    if ((q->flags & NF_OUTPUT) || reader_count(rd, q->id) != 1)
        return NULL;
    const Node *b = g->nodes[rd->user[rd->start[q->id]]];
    if (b->op != OP__backward_BatchNorm || b->nin != 5 || b->in[0] != q->id ||
        b->in[1] != p->in[0] || b->in[2] != p->in[1] || !is_part(g, b->in[3], p->id, 1) ||
        !is_part(g, b->in[4], p->id, 2) || b->dtype != q->dtype)
        return NULL;
    return b; /* the fused node keeps b's attributes, so they need not be p's */
}

static bool bn_other_ok(const Graph *g, const Readers *rd, const Node *p, const Node *q,
                        const Node *r)
{
    return is_relu_bwd_of(q, p->id, r->id) && bn_bwd_of(g, rd, p, q) != NULL;
}

/* q is read by nothing after this: graph_compact drops it */
static void bn_bwd_rewrite(Graph *g, const Readers *rd, const FuseRule *rule, Node *q, int r,
                           const Explain *ex)
{
    Node *b = g->nodes[rd->user[rd->start[q->id]]];
    int in[6] = {q->in[0], r, b->in[1], b->in[2], b->in[3], b->in[4]};
    node_become(g, b, rule->fused_bwd, in, 6, rule->kept_attrs, q->name);
    explain_line(ex, rule, q->name, b->name, b);
}

/* add_relu: the add's gradient is the relu's, passed on as it is, so the
 * relu's backward only changes to read r alone (its kernel reads only r). */
static void add_bwd_rewrite(Graph *g, const Readers *rd, const FuseRule *rule, Node *q, int r,
                            const Explain *ex)
{
    (void)rd;
    int in[2] = {q->in[0], r};
    node_become(g, q, rule->fused_bwd, in, 2, 0, NULL);
    explain_line(ex, rule, q->name, NULL, q);
}

/* bn_add_relu: b, BatchNorm p's backward reading the relu's gradient q as
 * its dy (x, gamma and p's saved statistics its other inputs), or NULL.  q
 * and b become one node at q's place, so everything it reads must be
 * stored before q. */
static const Node *bn_add_bwd_of(const Graph *g, const Readers *rd, const Node *q, const Node *p)
{
    if ((q->flags & NF_OUTPUT) || q->nin != 2)
        return NULL;
    for (int k = rd->start[q->id]; k < rd->start[q->id + 1]; k++) {
        const Node *b = g->nodes[rd->user[k]];
        if (b->op != OP__backward_BatchNorm || b->nin != 5 || b->in[0] != q->id ||
            (b->flags & NF_OUTPUT) || b->in[1] != p->in[0] || b->in[2] != p->in[1] ||
            !is_part(g, b->in[3], p->id, 1) || !is_part(g, b->in[4], p->id, 2) ||
            b->dtype != q->dtype)
            continue;
        bool before = q->in[0] < q->id;
        for (int j = 1; j < 5; j++)
            before = before && b->in[j] < q->id;
        if (before)
            return b;
    }
    return NULL;
}

/* q (the relu's gradient, reading r) and BatchNorm p's backward b become
 * one node at q's place; b becomes its part 3 and b's parts its parts 1
 * and 2. */
static void bn_add_bwd_rewrite(Graph *g, const Readers *rd, const FuseRule *rule, Node *q,
                               const Node *p, int r, const Explain *ex)
{
    Node *b = (Node *)bn_add_bwd_of(g, rd, q, p);
    if (q->op != OP__backward_fused_add_relu || q->in[1] != r || !b)
        return; /* the relu's gradient and BatchNorm's backward stay apart */
    const char *bname = b->name;
    int in[6] = {q->in[0], r, b->in[1], b->in[2], b->in[3], b->in[4]};
    node_become_like(g, q, rule->fused_bwd, in, 6, b, BN_NATTRS, &bname, 1);
    for (int k = rd->start[b->id]; k < rd->start[b->id + 1]; k++) {
        Node *u = g->nodes[rd->user[k]];
        if (u->op == OP_part && u->in[0] == b->id)
            u->in[0] = q->id;
    }
    node_become(g, b, OP_part, &q->id, 1, 0, NULL);
    b->attrs[PART_INDEX] = (AttrVal){.type = AT_INT, .i = 3};
    explain_line(ex, rule, q->name, bname, q);
}

/* Whether the rule applies to r reading p (the conditions above). */
static bool applies(const Graph *g, const Readers *rd, const FuseRule *rule, const Node *p,
                    const Node *r)
{
    if (p->op != rule->first || (p->flags & NF_OUTPUT) || !rule->pair_ok(g, p, r))
        return false;
    for (int j = 1; j < r->nin; j++)
        if (r->in[j] == p->id)
            return false;
    for (int k = rd->start[p->id]; k < rd->start[p->id + 1]; k++) {
        const Node *q = g->nodes[rd->user[k]];
        /* merged at r's place, p's parts must be stored after r */
        if (q == r ||
            (q->op == OP_part && rule->parts && (rule->place != FUSE_MERGE || q->id > r->id)))
            continue;
        if (!rule->other_ok || !rule->other_ok(g, rd, p, q, r))
            return false;
    }
    return true;
}

/* bn_add_relu: r (a _fused_add_relu reading BatchNorm p first) becomes the
 * fused node, reading p's inputs and r's shortcut; p's parts read it; the
 * relu's gradient and BatchNorm's backward fuse (bn_add_bwd_rewrite). */
static void apply_merge(Graph *g, const Readers *rd, const FuseRule *rule, Node *p, Node *r,
                        int *repl, const Explain *ex)
{
    const char *names[2] = {r->attrs[FUSED_ADD_ABSORBED].s, p->name};
    int in[6] = {p->in[0], p->in[1], p->in[2], p->in[3], p->in[4], r->in[1]};
    node_become_like(g, r, rule->fused, in, 6, p, rule->kept_attrs, names, 2);
    repl[p->id] = r->id;
    explain_line(ex, rule, p->name, r->name, r);
    for (int k = rd->start[r->id]; k < rd->start[r->id + 1]; k++) {
        Node *q = g->nodes[rd->user[k]];
        if (q->op == OP__backward_fused_add_relu)
            bn_add_bwd_rewrite(g, rd, rule, q, p, r->id, ex);
    }
}

static void apply(Graph *g, const Readers *rd, const FuseRule *rule, Node *p, Node *r, int *repl,
                  const Explain *ex)
{
    if (rule->place == FUSE_MERGE) {
        apply_merge(g, rd, rule, p, r, repl, ex);
        return;
    }
    if (rule->place == FUSE_AT_SECOND) {
        /* r reads p's input where it read p; nothing reads p after this */
        node_become(g, r, rule->fused, r->in, r->nin, rule->kept_attrs, p->name);
        r->in[0] = p->in[0];
        explain_line(ex, rule, p->name, r->name, r);
        return;
    }
    const char *pname = p->name;
    node_become(g, p, rule->fused, p->in, p->nin, rule->kept_attrs, pname);
    if (rule->cast_dtype)
        p->attrs[rule->kept_attrs] = r->attrs[CAST_DTYPE];
    p->name = r->name;
    p->dtype = r->dtype;
    p->flags = (p->flags & ~(uint32_t)NF_EXPLICIT_NAME) | (r->flags & NF_EXPLICIT_NAME);
    repl[r->id] = p->id;
    explain_line(ex, rule, pname, r->name, p);
    /* the backward nodes read p's id (as a value no longer) only as the
     * relu's x, which they drop */
    for (int k = rd->start[p->id]; k < rd->start[p->id + 1]; k++) {
        Node *q = g->nodes[rd->user[k]];
        if (q != r && q->op != OP_part && rule->bwd_rewrite)
            rule->bwd_rewrite(g, rd, rule, q, r->id, ex);
    }
}

/* The enabled rule that fuses r with the node it reads first, or NULL. */
static const FuseRule *rule_for(const Graph *g, const Readers *rd, const Node *r, unsigned disabled,
                                int round)
{
    if (r->nin < 1)
        return NULL;
    const Node *p = g->nodes[r->in[0]];
    for (int k = 0; k < NRULES; k++)
        if (rules[k].round == round && rules[k].second == r->op && rules[k].first == p->op &&
            !(disabled & (1u << k)) && applies(g, rd, &rules[k], p, r))
            return &rules[k];
    return NULL;
}

/* One round over one graph: matches on the graph as it came (a node in two
 * matches stays in the first only), rewrites, redirects r's readers to the
 * fused node, drops the dead. */
static Graph *fuse_round(Graph *g, unsigned disabled, const Explain *ex, int round)
{
    Readers rd = readers_of(g);
    int n = g->nnodes;
    int *repl = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *match = malloc(sizeof(int) * (size_t)(n ? n : 1));
    const FuseRule **mrule = malloc(sizeof *mrule * (size_t)(n ? n : 1));
    char *taken = calloc((size_t)(n ? n : 1), 1);
    if (!repl || !match || !mrule || !taken)
        DIE("out of memory");
    for (int i = 0; i < n; i++)
        repl[i] = i;
    /* canonical order: --explain lists the same lines however g is stored */
    int *order = graph_canonical_order(g);
    int nmatch = 0;
    for (int k = 0; k < n; k++) {
        const Node *r = g->nodes[order[k]];
        const FuseRule *rule = rule_for(g, &rd, r, disabled, round);
        if (rule && !taken[r->id] && !taken[r->in[0]]) {
            taken[r->id] = taken[r->in[0]] = 1;
            mrule[nmatch] = rule;
            match[nmatch++] = r->id;
        }
    }
    for (int k = 0; k < nmatch; k++) {
        Node *r = g->nodes[match[k]], *p = g->nodes[r->in[0]];
        apply(g, &rd, mrule[k], p, r, repl, ex);
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++)
            g->nodes[i]->in[j] = repl[g->nodes[i]->in[j]];
    for (int i = 0; i < g->noutputs; i++) {
        g->nodes[g->outputs[i]]->flags &= ~(uint32_t)NF_OUTPUT;
        g->outputs[i] = repl[g->outputs[i]];
    }
    for (int i = 0; i < g->noutputs; i++)
        g->nodes[g->outputs[i]]->flags |= NF_OUTPUT;
    free(order);
    free(taken);
    free(mrule);
    free(match);
    free(repl);
    free(rd.start);
    free(rd.user);
    return nmatch ? graph_compact(g) : g;
}

/* ---- conv_bn_stats ------------------------------------------------------------ */

enum { STATS_RULE = NRULES - 1 }; /* the table's last row */

/* The _stats form of a BatchNorm family's training forward, or OP_COUNT. */
static OpKind stats_form(OpKind k)
{
    switch (k) {
    case OP_BatchNorm: return OP__fused_BatchNorm_stats;
    case OP__fused_BatchNorm_relu: return OP__fused_BatchNorm_relu_stats;
    case OP__fused_BatchNorm_add_relu: return OP__fused_BatchNorm_add_relu_stats;
    default: return OP_COUNT;
    }
}

/* The op a conv_bn_stats op was made from (k itself for the others). */
static OpKind unstats(OpKind k)
{
    switch (k) {
    case OP__fused_Convolution_stats: return OP_Convolution;
    case OP__fused_BatchNorm_stats: return OP_BatchNorm;
    case OP__fused_BatchNorm_relu_stats: return OP__fused_BatchNorm_relu;
    case OP__fused_BatchNorm_add_relu_stats: return OP__fused_BatchNorm_add_relu;
    default: return k;
    }
}

static bool is_bn_backward(OpKind k)
{
    return k == OP__backward_BatchNorm || k == OP__backward_fused_BatchNorm_relu ||
           k == OP__backward_fused_BatchNorm_add_relu;
}

/* Why conv p and the BatchNorm r reading it cannot become the pair (NULL:
 * they can): what rt_cuda_conv_forward_stats computes (a 2-D convolution
 * without groups or bias, in 16-bit, so NHWC in the CUDA plan: the shapes
 * the offline check builds the graph for and NVIDIA's ResNet-50 runs), the
 * sums BatchNorm over axis 1 takes in training, and no reader of y but the
 * BatchNorm and its backward (which reads y as its x). */
static const char *stats_refusal(Graph *g, const Readers *rd, const Node *p, const Node *r)
{
    if (node_bool(r, BN_USE_GLOBAL_STATS))
        return "the BatchNorm uses the moving statistics (use_global_stats), not the batch's";
    if (node_int(r, BN_AXIS) != 1 && node_int(r, BN_AXIS) != -3)
        return "the BatchNorm's axis is not 1";
    if (p->nin > 2)
        return "the convolution has a bias";
    if (p->shape.rank != 4 || node_int(p, CONV_NUM_GROUP) != 1)
        return "the convolution is not 2-D without groups";
    if (!is_16bit(p->dtype) || r->dtype != p->dtype)
        return "the convolution is not float16 or bfloat16 (cuDNN's statistics graph runs on "
               "the NHWC layout of the 16-bit convolutions)";
    if (p->flags & NF_OUTPUT)
        return "the convolution's value is an output of the graph";
    for (int k = rd->start[p->id]; k < rd->start[p->id + 1]; k++) {
        const Node *q = g->nodes[rd->user[k]];
        if (q != r && !is_bn_backward(q->op))
            return arena_printf(&g->arena, "'%s' reads the convolution's value too", q->name);
        for (int j = 1; q == r && j < r->nin; j++)
            if (r->in[j] == p->id)
                return "the BatchNorm reads the convolution's value twice";
    }
    return NULL;
}

/* A name for the statistics of conv: "<conv>_stats", else numbered. */
static void name_stats(Graph *g, Node *part, const char *conv)
{
    const char *name = arena_printf(&g->arena, "%s_stats", conv);
    for (int k = 2; !graph_set_name(g, part, name); k++)
        name = arena_printf(&g->arena, "%s_stats%d", conv, k);
}

/* conv p and BatchNorm r become the pair; the part stands at *stats. */
static void apply_stats(Graph *g, Node *p, Node *r, const Explain *ex, int *stats)
{
    node_become(g, p, OP__fused_Convolution_stats, p->in, p->nin, CONV_NATTRS, NULL);
    Node *part = graph_add(g, OP_part, &p->id, 1, p->loc, p->frame);
    part->attrs[PART_INDEX] = (AttrVal){.type = AT_INT, .i = 1};
    part->shape = (Shape){.rank = 2, .d = {2, node_int(p, CONV_NUM_FILTER)}};
    part->dtype = DT_F32;
    name_stats(g, part, p->name);
    *stats = part->id;
    int in[7];
    memcpy(in, r->in, sizeof(int) * (size_t)r->nin);
    in[r->nin] = part->id;
    OpKind base = r->op;
    node_become(g, r, stats_form(base), in, r->nin + 1, op_info(base)->nattrs, NULL);
    const char *only = ex->only;
    if (ex->out && (!only || !strcmp(only, p->name) || !strcmp(only, r->name)))
        fprintf(ex->out, "fuse conv_bn_stats: %s + %s -> %s %s + %s %s%s\n", p->name, r->name,
                op_info(p->op)->name, p->name, op_info(r->op)->name, r->name, ex->graph);
}

/* The conv_bn_stats rule over the training graph: each BatchNorm family's
 * forward reading a convolution, paired or (warn) refused with a warning
 * at the BatchNorm saying why.  The statistics' part node is stored right
 * after its convolution. */
static Graph *fuse_stats(Graph *g, const Explain *ex, bool warn)
{
    Readers rd = readers_of(g);
    int n = g->nnodes;
    int *stats = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *order = graph_canonical_order(g);
    if (!stats)
        DIE("out of memory");
    int made = 0;
    for (int i = 0; i < n; i++)
        stats[i] = -1;
    for (int k = 0; k < n; k++) {
        Node *r = g->nodes[order[k]];
        if (stats_form(r->op) == OP_COUNT || r->nin < 1 ||
            g->nodes[r->in[0]]->op != OP_Convolution || stats[r->in[0]] >= 0)
            continue;
        Node *p = g->nodes[r->in[0]];
        const char *why = stats_refusal(g, &rd, p, r);
        if (why && warn)
            diag_warning(g->diag, r->loc,
                         "--fuse=conv_bn_stats: '%s' and the convolution '%s' "
                         "it reads stay apart: %s",
                         r->name, p->name, why);
        if (!why)
            apply_stats(g, p, r, ex, &stats[p->id]), made++;
    }
    free(order);
    free(rd.start);
    free(rd.user);
    if (made) {
        int *to = malloc(sizeof(int) * (size_t)g->nnodes), m = 0;
        if (!to)
            DIE("out of memory");
        for (int i = 0; i < n; i++) {
            to[m++] = i;
            if (stats[i] >= 0)
                to[m++] = stats[i];
        }
        g = graph_reorder(g, to);
        free(to);
    }
    free(stats);
    return g;
}

/* The rounds: the pairs, then the merges into their fused nodes, then (on
 * the training graph, when asked) the statistics. */
static Graph *fuse_graph(Graph *g, unsigned disabled, const Explain *ex, bool train, bool warn)
{
    g = fuse_round(fuse_round(g, disabled, ex, 0), disabled, ex, 1);
    return train && !(disabled & (1u << STATS_RULE)) ? fuse_stats(g, ex, warn) : g;
}

/* The rules target has no kernels for: for TARGET_CUDA, those whose fused
 * op or fused backward has no function in ir/kernels.def's cuda column
 * (the CPU column is complete). */
static unsigned rules_without_kernels(Target target)
{
    unsigned off = 0;
    for (int k = 0; target == TARGET_CUDA && k < NRULES; k++)
        if (!kernel_row(rules[k].fused)->cuda ||
            (rules[k].fused_bwd != OP_COUNT && !kernel_row(rules[k].fused_bwd)->cuda))
            off |= 1u << k;
    return off;
}

bool fuse(Graph **gp, const FuseOptions *o)
{
    static const FuseOptions none = {0};
    if (!o)
        o = &none;
    FILE *out = o->explain ? (o->out ? o->out : stdout) : NULL;
    Explain train = {out, o->explain_name, ""}, inf = {out, o->explain_name, " (inference graph)"};
    Graph *g = *gp, *infer = g->infer;
    g->infer = NULL;
    unsigned disabled = o->disabled | rules_without_kernels(o->target);
    for (int k = 0; k < NRULES; k++)
        if (rules[k].opt_in && !(o->enabled & (1u << k)))
            disabled |= 1u << k;
    /* the CPU program sums BatchNorm's statistics itself: nothing to gain */
    if (!(disabled & (1u << STATS_RULE)) && o->target != TARGET_CUDA) {
        if (o->warn)
            diag_warning(g->diag, loc_none(),
                         "--fuse=conv_bn_stats applies to --target=cuda "
                         "only: not applied for --target=%s",
                         target_name(o->target));
        disabled |= 1u << STATS_RULE;
    }
    g = fuse_graph(g, disabled, &train, true, o->warn);
    g->infer = infer ? fuse_graph(infer, disabled, &inf, false, false) : NULL;
    *gp = g;
    return true;
}

bool fuse_disable(Diag *d, const char *list, unsigned *disabled)
{
    char valid[256] = "";
    for (int k = 0; k < NRULES; k++)
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s, ", rules[k].name);
    for (const char *s = list;;) {
        size_t len = strcspn(s, ",");
        int k = 0;
        while (k < NRULES && !(strlen(rules[k].name) == len && !strncmp(rules[k].name, s, len)))
            k++;
        if (len == 3 && !strncmp(s, "all", 3)) {
            *disabled = ~0u;
        } else if (k < NRULES) {
            *disabled |= 1u << k;
        } else {
            diag_plain_error(d, "--no-fuse: unknown fusion '%.*s' (the fusions are %sor all)",
                             (int)len, s, valid);
            return false;
        }
        if (!s[len])
            return true;
        s += len + 1;
    }
}

bool fuse_enable(Diag *d, const char *list, unsigned *enabled)
{
    char valid[128] = "";
    for (int k = 0; k < NRULES; k++)
        if (rules[k].opt_in)
            snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%s",
                     valid[0] ? ", " : "", rules[k].name);
    for (const char *s = list;;) {
        size_t len = strcspn(s, ",");
        int k = 0;
        while (k < NRULES && !(strlen(rules[k].name) == len && !strncmp(rules[k].name, s, len)))
            k++;
        if (k < NRULES && rules[k].opt_in) {
            *enabled |= 1u << k;
        } else {
            diag_plain_error(d, "--fuse: %s '%.*s' (the fusions --fuse turns on are %s)",
                             k < NRULES ? "the fusion is on unless --no-fuse turns it off:"
                                        : "unknown fusion",
                             (int)len, s, valid);
            return false;
        }
        if (!s[len])
            return true;
        s += len + 1;
    }
}

int fuse_rule_count(void) { return NRULES; }
const char *fuse_rule_name(int k) { return k >= 0 && k < NRULES ? rules[k].name : NULL; }

/* ---- a dump after fuse, checked --------------------------------------------- */

/* Expansion: per old node, its value in the unfused graph and, for a fused
 * node, the node whose parts are its parts (-1 for the others), and the
 * residual add a relu fusion holds (-1: none). */
typedef struct {
    const Graph *g;
    Graph *u;
    int *val, *first, *add;
    bool ok;
} Expand;

/* c gets o's first `keep` attributes, shape, dtype and `name` */
static Node *finish_copy(Expand *e, const Node *o, Node *c, const char *name, int keep)
{
    for (int a = 0; a < keep; a++) {
        c->attrs[a] = o->attrs[a];
        if (o->attrs[a].type == AT_STR)
            c->attrs[a].s = arena_strdup(&e->u->arena, o->attrs[a].s);
    }
    c->shape = o->shape;
    c->dtype = o->dtype;
    if (!graph_set_name(e->u, c, name)) {
        node_error(e->g, o, "'%s': the name '%s' is given to two nodes once the fused ones are "
                            "expanded",
                   o->name, name);
        e->ok = false;
    }
    return c;
}

static Node *add_copy(Expand *e, const Node *o, OpKind op, const int *in, int nin,
                      const char *name, int keep)
{
    return finish_copy(e, o, graph_add(e->u, op, in, nin, o->loc, o->frame), name, keep);
}

static Node *add_relu_node(Expand *e, const Node *o, OpKind op, const int *in, int nin,
                           const char *name)
{
    Node *c = add_copy(e, o, op, in, nin, name, 0);
    c->attrs[ACT_TYPE] = (AttrVal){.type = AT_ENUM, .e = ACT_RELU};
    return c;
}

/* y of a fused backward node: the fused forward node `want` it pairs with */
static bool pairs_with(Expand *e, const Node *o, OpKind want)
{
    const Node *y = e->g->nodes[o->in[1]];
    if (unstats(y->op) == want)
        return true;
    node_error(e->g, o, "'%s': %s reads '%s' as y, which is not a %s", o->name,
               op_info(o->op)->name, y->name, op_info(want)->name);
    return e->ok = false;
}

/* The unfused nodes of fused node o (false when o is none). */
static bool expand_fused(Expand *e, const Node *o)
{
    int in[6];
    for (int j = 0; j < o->nin && j < 6; j++)
        in[j] = e->val[o->in[j]];
    const char *absorbed = op_info(o->op)->nattrs ? o->attrs[op_info(o->op)->nattrs - 1].s : "";
    const Node *same =
        op_made_by_fuse(o->op) && op_info(o->op)->nattrs ? graph_find(e->g, absorbed) : NULL;
    /* the BatchNorm backward a bn_add_relu backward absorbed lives on as its part 3 */
    if (same &&
        !(o->op == OP__backward_fused_BatchNorm_add_relu && is_part(e->g, same->id, o->id, 3))) {
        node_error(e->g, o, "'%s': the node it absorbed, '%s', has the name of another node",
                   o->name, absorbed);
        return !(e->ok = false);
    }
    Node *a, *b;
    switch (o->op) {
    case OP__fused_BatchNorm_relu:
    case OP__fused_add_relu:
        a = add_copy(e, o, o->op == OP__fused_add_relu ? OP_elemwise_add : OP_BatchNorm, in,
                     o->nin, absorbed, o->op == OP__fused_add_relu ? 0 : BN_NATTRS);
        b = add_relu_node(e, o, OP_Activation, &a->id, 1, o->name);
        b->flags = o->flags & ~(uint32_t)NF_OUTPUT;
        e->first[o->id] = a->id;
        e->add[o->id] = o->op == OP__fused_add_relu ? a->id : -1;
        e->val[o->id] = b->id;
        return true;
    case OP__fused_BatchNorm_add_relu: /* BatchNorm, the add of its shortcut, relu */
        a = add_copy(e, o, OP_BatchNorm, in, 5, absorbed, BN_NATTRS);
        int sum[2] = {a->id, in[5]};
        b = add_copy(e, o, OP_elemwise_add, sum, 2, o->attrs[FUSED_BNADD_ADD].s, 0);
        e->add[o->id] = b->id;
        b = add_relu_node(e, o, OP_Activation, &b->id, 1, o->name);
        b->flags = o->flags & ~(uint32_t)NF_OUTPUT;
        e->first[o->id] = a->id;
        e->val[o->id] = b->id;
        return true;
    case OP__backward_fused_BatchNorm_add_relu: /* the relu's gradient, BatchNorm's backward */
        if (pairs_with(e, o, OP__fused_BatchNorm_add_relu)) {
            int act[3] = {in[0], e->add[o->in[1]], in[1]};
            a = add_relu_node(e, o, OP__backward_Activation, act, 3, o->name);
            in[1] = a->id;
            b = add_copy(e, o, OP__backward_BatchNorm, in + 1, 5, absorbed, BN_NATTRS);
            b->shape = e->u->nodes[in[2]]->shape;
            e->first[o->id] = b->id;
            e->val[o->id] = a->id;
        }
        return true;
    case OP__backward_fused_BatchNorm_relu:
        if (pairs_with(e, o, OP__fused_BatchNorm_relu)) {
            int act[3] = {in[0], e->first[o->in[1]], in[1]};
            a = add_relu_node(e, o, OP__backward_Activation, act, 3, absorbed);
            in[1] = a->id;
            e->val[o->id] = add_copy(e, o, OP__backward_BatchNorm, in + 1, 5, o->name,
                                     BN_NATTRS)->id;
        }
        return true;
    case OP__backward_fused_add_relu:
        if (pairs_with(e, o, OP__fused_add_relu)) {
            in[2] = e->val[o->in[1]];
            in[1] = e->add[o->in[1]];
            e->val[o->id] = add_relu_node(e, o, OP__backward_Activation, in, 3, o->name)->id;
        }
        return true;
    case OP__fused_cast_SoftmaxOutput: /* amp_cast to fp32, then SoftmaxOutput */
        a = add_copy(e, o, OP_amp_cast, in, 1, absorbed, 0);
        a->attrs[CAST_DTYPE] = (AttrVal){.type = AT_DTYPE, .e = DT_F32};
        in[0] = a->id;
        b = add_copy(e, o, OP_SoftmaxOutput, in, 2, o->name, SMO_NATTRS);
        b->flags = o->flags & ~(uint32_t)NF_OUTPUT;
        e->val[o->id] = b->id;
        return true;
    case OP__backward_fused_SoftmaxOutput_cast: /* the fp32 backward, then amp_cast */
        a = add_copy(e, o, OP__backward_SoftmaxOutput, in, 2, absorbed, SMO_NATTRS);
        a->dtype = e->u->nodes[in[0]]->dtype;
        b = add_copy(e, o, OP_amp_cast, &a->id, 1, o->name, 0);
        b->attrs[CAST_DTYPE] = o->attrs[FUSED_SMO_BWD_DTYPE];
        b->flags = o->flags & ~(uint32_t)NF_OUTPUT;
        e->val[o->id] = b->id;
        return true;
    default: return false;
    }
}

/* g with its fused nodes expanded into the nodes they replaced, or NULL
 * (reported at g's node) when that cannot be done. */
static Graph *unfuse_graph(const Graph *g)
{
    int n = g->nnodes ? g->nnodes : 1;
    Expand e = {g, graph_new(g->diag, g->model), malloc(sizeof(int) * (size_t)n),
                malloc(sizeof(int) * (size_t)n), malloc(sizeof(int) * (size_t)n), true};
    if (!e.val || !e.first || !e.add)
        DIE("out of memory");
    graph_set_train(e.u, g->train, g->ntrain);
    e.u->info = g->info;
    for (int i = 0; i < g->nnodes && e.ok; i++) {
        const Node *o = g->nodes[i];
        e.first[i] = e.add[i] = -1;
        /* conv_bn_stats: the ops it was made from, without the statistics */
        Node plain;
        if (unstats(o->op) != o->op) {
            plain = *o;
            plain.op = unstats(o->op);
            plain.nin = o->nin - (o->op != OP__fused_Convolution_stats);
            o = &plain;
        } else if (o->op == OP_part && g->nodes[o->in[0]]->op == OP__fused_Convolution_stats) {
            e.val[i] = -1; /* the statistics: read by the BatchNorm that reads them no more */
            continue;
        }
        if (expand_fused(&e, o))
            continue;
        /* a bn_add_relu backward's part 3 is the BatchNorm backward's value */
        if (o->op == OP_part && g->nodes[o->in[0]]->op == OP__backward_fused_BatchNorm_add_relu &&
            node_int(o, PART_INDEX) == 3 && e.first[o->in[0]] >= 0) {
            e.val[i] = e.first[o->in[0]];
            continue;
        }
        /* inputs renumbered in place (a Concat may have millions); a part of
         * a fused BatchNorm is a part of the BatchNorm it absorbed */
        Node *c = graph_add(e.u, o->op, o->in, o->nin, o->loc, o->frame);
        for (int j = 0; j < c->nin; j++)
            c->in[j] = o->op == OP_part && e.first[o->in[j]] >= 0 ? e.first[o->in[j]]
                                                                   : e.val[o->in[j]];
        finish_copy(&e, o, c, o->name, op_info(o->op)->nattrs);
        c->flags = o->flags & ~(uint32_t)NF_OUTPUT;
        e.val[i] = c->id;
    }
    for (int i = 0; i < g->noutputs && e.ok; i++)
        graph_add_output(e.u, e.val[g->outputs[i]]);
    free(e.val);
    free(e.first);
    free(e.add);
    if (!e.ok) {
        graph_free(e.u);
        return NULL;
    }
    return e.u;
}


/* Reports the first node of `have` whose line differs from `want`'s. */
static bool same_as(const Graph *have, const Graph *want, const char *what)
{
    char *a = ir_print_string(have), *b = ir_print_string(want);
    size_t i = 0;
    int line = 0;
    for (; a[i] && a[i] == b[i]; i++)
        line += a[i] == '\n';
    bool same = !a[i] && !b[i];
    if (!same) {
        size_t start = i;
        while (start > 0 && b[start - 1] != '\n')
            start--;
        int *order = graph_canonical_order(have);
        /* a banner, `model`, the train lines, then the nodes in canonical order */
        int k = line - 2 - have->ntrain;
        const Node *n = have->nodes[k >= 0 && k < have->nnodes ? order[k] : have->outputs[0]];
        free(order);
        diag_error(have->diag, n->loc, "%s: '%s' is not what the fuse pass makes of the unfused "
                                       "graph",
                   what, n->name);
        diag_note(have->diag, n->loc, "the fuse pass gives: %.*s", (int)strcspn(b + start, "\n"),
                  b + start);
    }
    free(a);
    free(b);
    return same;
}

/* The rules a graph shows: those of the fused ops it holds, and those a
 * second round's rule fuses on (bn_add_relu's add_relu). */
static unsigned rules_absent(const Graph *g, unsigned absent)
{
    for (int i = 0; g && i < g->nnodes; i++)
        for (int k = 0; k < NRULES; k++) {
            OpKind op = g->nodes[i]->op, base = unstats(op); /* conv_bn_stats' forms */
            if (op == rules[k].fused || base == rules[k].fused || op == rules[k].fused_bwd) {
                absent &= ~(1u << k);
                for (int j = 0; rules[k].round > 0 && j < NRULES; j++)
                    if (rules[j].fused == rules[k].second)
                        absent &= ~(1u << j);
            }
        }
    return absent;
}

bool fuse_check(const Graph *g)
{
    Graph *u = unfuse_graph(g);
    Graph *ui = u && g->infer ? unfuse_graph(g->infer) : NULL;
    if (!u || (g->infer && !ui)) {
        graph_free(u);
        graph_free(ui);
        return false;
    }
    u->infer = ui;
    bool ok = autodiff_check(u, true);
    if (ok) {
        /* fused again with the rules the dump shows, it must be the dump */
        unsigned disabled = rules_absent(g->infer, rules_absent(g, (1u << NRULES) - 1));
        bool stats = !(disabled & (1u << STATS_RULE)); /* a CUDA program's */
        FuseOptions fo = {
            .disabled = disabled, .enabled = ~disabled, .target = stats ? TARGET_CUDA : TARGET_CPU};
        ok = fuse(&u, &fo) && same_as(g, u, "the training graph") &&
             (!g->infer || same_as(g->infer, u->infer, "the inference graph"));
    }
    graph_free(u);
    return ok;
}
