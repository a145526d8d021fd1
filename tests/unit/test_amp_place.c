/* test_amp_place.c - the cast placement is exact and never worse than greedy.
 *
 * Random graphs of up to 16 follow and widest ops, mixed with fp16-class and
 * fp32-class ops, the user's Casts (to float16, float32 and bfloat16) and
 * fp16 inputs, are rewritten (amp, then cast-elide) once for every dtype of
 * every follow and widest op.  Each rewritten graph is priced by what is
 * left in it: the bytes its casts read and write, then the bytes its follow
 * and widest ops read and write in fp32; never by the optimiser's own cost.
 * No feasible labelling may be cheaper than the optimal placement, which
 * must satisfy every constraint and cost what amp says it costs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "fixture.h"

/* The AMP target of the graphs being checked. */
static DType target = DT_F16;

typedef struct {
    int64_t conv, wide; /* bytes converted; bytes moved in fp32 by follow/widest ops */
} Price;

static bool cheaper(Price a, Price b) { return a.conv < b.conv || (a.conv == b.conv && a.wide < b.wide); }

static int64_t numel(const Node *n)
{
    int64_t e;
    assert_true(shape_numel_per_sample(&n->shape, &e));
    return e;
}

static bool movable(const Node *n)
{
    AmpClass c = op_info(n->op)->amp;
    return c == AMP_FOLLOW || c == AMP_WIDEST;
}

/* What the rewritten graph costs, from its nodes. */
static Price price(const Graph *g)
{
    Price p = {0, 0};
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op == OP_Cast || n->op == OP_amp_cast)
            p.conv += numel(n) * (dtype_size(g->nodes[n->in[0]]->dtype) + dtype_size(n->dtype));
        if (!movable(n) || n->dtype != DT_F32)
            continue;
        int64_t e = numel(n);
        const OpInfo *oi = op_info(n->op);
        for (int j = 0; j < n->nin; j++) {
            const Node *u = g->nodes[n->in[j]];
            if (u->op != OP_Param && dtype_is_float(u->dtype) &&
                !(oi->nslots && oi->slots[j].keep_fp32))
                e += numel(u);
        }
        p.wide += 4 * e;
    }
    return p;
}

/* The graph before amp, typed as the driver types it with AMP on. */
static Graph *typed(Fx *fx, const char *src)
{
    Graph *g = frontend_elaborate(&fx->d, "t.sym", src, strlen(src), NULL);
    if (g)
        g->info.amp = target;
    if (!g || !infer_shapes(g) || !infer_types(g))
        fail_msg("compiling\n%s\nfailed:\n%s", src, diag_text(fx));
    return g;
}

static Graph *rewrite(const Graph *t, AmpPlacement mode, const DType *labels)
{
    Graph *g = graph_copy(t);
    AmpOptions o = {.target = target, .placement = mode, .labels = labels};
    assert_true(amp(&g, &o));
    assert_true(cast_elide(&g));
    return g;
}

/* The dtype the node named like t's node n has after the rewrite: a user
 * Cast that became a no-op, or repeated another, is gone, and had its dtype. */
static DType final_dtype(const Graph *g, const Node *n)
{
    const Node *f = graph_find(g, n->name);
    if (f)
        return f->dtype;
    assert_true(n->op == OP_Cast);
    return (DType)n->attrs[CAST_DTYPE].e;
}

/* A widest op is never narrower than its operands as produced. */
static bool feasible(const Graph *t, const Graph *g)
{
    for (int i = 0; i < t->nnodes; i++) {
        const Node *n = t->nodes[i];
        if (op_info(n->op)->amp != AMP_WIDEST)
            continue;
        DType w = final_dtype(g, n);
        for (int j = 0; j < n->nin; j++) {
            DType d = final_dtype(g, t->nodes[n->in[j]]);
            if (d != w && dtype_size(w) <= dtype_size(d))
                return false;
        }
    }
    return true;
}

/* What t's value v is after cast-elide: v, or for a user Cast that became a
 * no-op its input, or for one that repeats an earlier equal Cast that one. */
static int value_root(const Graph *t, const Graph *g, int v)
{
    const Node *n = t->nodes[v];
    if (n->op != OP_Cast)
        return v;
    int src = value_root(t, g, n->in[0]);
    if (final_dtype(g, t->nodes[src]) == final_dtype(g, n))
        return src;
    for (int i = 0; i < v; i++) {
        const Node *c = t->nodes[i];
        if (c->op == OP_Cast && c->attrs[CAST_DTYPE].e == n->attrs[CAST_DTYPE].e &&
            value_root(t, g, i) == i && value_root(t, g, c->in[0]) == src)
            return i;
    }
    return v;
}

/* Every constraint of docs/amp.md, "Cast placement", on the rewritten g. */
static void check_constraints(const Graph *t, const Graph *g, const char *src)
{
    if (!feasible(t, g))
        fail_msg("a widest op is narrower than an operand in\n%s", src);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        AmpClass c = op_info(n->op)->amp;
        bool softrelu = n->op == OP_Activation && node_enum(n, ACT_TYPE) == ACT_SOFTRELU;
        if ((c == AMP_F16 && !softrelu && n->dtype != target) ||
            ((c == AMP_F32 || softrelu) && n->dtype != DT_F32))
            fail_msg("%s runs in %s in\n%s", n->name, dtype_long(n->dtype), src);
        const OpInfo *oi = op_info(n->op);
        for (int j = 0; j < n->nin && oi->nslots; j++)
            if (oi->slots[j].keep_fp32 && g->nodes[n->in[j]]->dtype != DT_F32)
                fail_msg("%s reads its %s in %s", n->name, oi->slots[j].name,
                         dtype_long(g->nodes[n->in[j]]->dtype));
    }
    assert_int_equal(g->noutputs, t->noutputs);
    for (int i = 0; i < t->noutputs; i++) {
        /* the declared dtype; a loss head (it has a label slot) stays fp32 */
        const Node *o = t->nodes[t->outputs[i]];
        DType want = o->dtype;
        for (int j = 0; j < op_info(o->op)->nslots; j++)
            if (op_info(o->op)->slots[j].kind == SLOT_LABEL)
                want = DT_F32;
        if (g->nodes[g->outputs[i]]->dtype != want)
            fail_msg("output %d is %s, declared %s, in\n%s", i,
                     dtype_long(g->nodes[g->outputs[i]]->dtype), dtype_long(want), src);
    }
    /* the user's Casts are kept as written, or were no-ops */
    for (int i = 0; i < t->nnodes; i++) {
        const Node *n = t->nodes[i];
        if (n->op != OP_Cast)
            continue;
        const Node *f = graph_find(g, n->name);
        DType e = (DType)n->attrs[CAST_DTYPE].e;
        if (f ? f->op != OP_Cast || f->dtype != e : value_root(t, g, i) == i)
            fail_msg("the user's %s is not kept in\n%s", n->name, src);
    }
}

/* What amp reports (--report) is what the two rewritten graphs cost. */
static void check_reported(const Graph *opt, const Graph *gr, const char *src)
{
    Price po = price(opt), pg = price(gr);
    const int64_t *ro = opt->info.place_optimal, *rg = gr->info.place_greedy;
    if (ro[0] != po.conv || ro[1] != po.wide || rg[0] != pg.conv || rg[1] != pg.wide)
        fail_msg("amp reports %lld + %lld (greedy %lld + %lld), the graphs cost %lld + %lld "
                 "(greedy %lld + %lld), in\n%s", (long long)ro[0], (long long)ro[1],
                 (long long)rg[0], (long long)rg[1], (long long)po.conv, (long long)po.wide,
                 (long long)pg.conv, (long long)pg.wide, src);
}

/* Brute force: every dtype of every follow and widest op. */
static void check_exact(Fx *fx, const char *src)
{
    Graph *t = typed(fx, src);
    int cand[24], k = 0;
    for (int i = 0; i < t->nnodes; i++)
        if (movable(t->nodes[i]) && k < 24)
            cand[k++] = i;
    assert_true(k <= 16);
    DType *labels = calloc((size_t)t->nnodes, sizeof(DType));
    assert_non_null(labels);
    Price best = {-1, -1};
    for (int mask = 0; mask < (1 << k); mask++) {
        for (int i = 0; i < k; i++)
            labels[cand[i]] = mask >> i & 1 ? target : DT_F32;
        Graph *g = rewrite(t, AMP_PLACE_GIVEN, labels);
        if (feasible(t, g)) {
            Price p = price(g);
            if (best.conv < 0 || cheaper(p, best))
                best = p;
        }
        graph_free(g);
    }
    Graph *opt = rewrite(t, AMP_PLACE_OPTIMAL, NULL), *gr = rewrite(t, AMP_PLACE_GREEDY, NULL);
    Price po = price(opt), pg = price(gr);
    check_constraints(t, opt, src);
    if (po.conv != best.conv || po.wide != best.wide)
        fail_msg("optimal placement costs %lld + %lld, a labelling %lld + %lld, in\n%s",
                 (long long)po.conv, (long long)po.wide, (long long)best.conv,
                 (long long)best.wide, src);
    if (cheaper(pg, po))
        fail_msg("greedy is cheaper in\n%s", src);
    check_reported(opt, gr, src);
    graph_free(opt);
    graph_free(gr);
    graph_free(t);
    free(labels);
}

/* ---- random graphs -------------------------------------------------------- */

typedef struct {
    uint64_t s;
} Rng;

static int rnd(Rng *r, int n)
{
    r->s ^= r->s << 13, r->s ^= r->s >> 7, r->s ^= r->s << 17;
    return (int)(r->s % (uint64_t)n);
}

typedef struct {
    char src[8192];
    size_t len;
    int width[64]; /* per value v<i>: channels */
    bool read[64]; /* v<i> is read by a later op */
    int n;         /* values */
    int movable;   /* follow and widest ops written */
} Gen;

static void emit(Gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(Gen *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g->len += (size_t)vsnprintf(g->src + g->len, sizeof g->src - g->len, fmt, ap);
    va_end(ap);
    assert_true(g->len < sizeof g->src);
}

/* A value to read: mostly a recent one, so chains form. */
static int pick(Rng *r, const Gen *g)
{
    return rnd(r, 3) ? g->n - 1 - rnd(r, g->n < 4 ? g->n : 4) : rnd(r, g->n);
}

static int pick_width(Rng *r, const Gen *g, int w)
{
    int c[64], k = 0;
    for (int i = 0; i < g->n; i++)
        if (g->width[i] == w)
            c[k++] = i;
    return c[rnd(r, k)];
}

static void random_graph(Rng *r, Gen *g, int nmov)
{
    memset(g, 0, sizeof *g);
    bool half = rnd(r, 3) == 0;
    emit(g, "model m(x: float32[N,8], y: float32[N,8]%s) {\n    v0 = x\n    v1 = y\n",
         half ? ", z: float16[N,8]" : "");
    g->width[0] = g->width[1] = 8;
    g->n = 2;
    if (half)
        emit(g, "    v2 = z\n"), g->width[g->n++] = 8;
    static const char *follow[] = {"Activation(v%d, act_type=\"relu\")", "v%d * 2.0",
                                   "LeakyReLU(v%d, act_type=\"leaky\")", "Dropout(v%d, p=0.5)",
                                   "sqrt(v%d)", "BatchNorm(v%d)"};
    static const char *casts[] = {"float16", "float32", "float16", "float32", "bfloat16"};
    while (g->movable < nmov && g->n < 60) {
        int a = pick(r, g), w = g->width[a], kind = rnd(r, 20);
        emit(g, "    v%d = ", g->n);
        if (kind < 6) {
            emit(g, follow[rnd(r, 6)], a);
            g->movable++;
        } else if (kind < 11) {
            int b = pick_width(r, g, w), op = rnd(r, 3);
            if (op == 2 && w + g->width[b] <= 32)
                emit(g, "Concat(v%d, v%d, dim=1)", a, b), w += g->width[b];
            else
                emit(g, "v%d %s v%d", a, op ? "*" : "+", b);
            g->movable++;
        } else if (kind < 13) {
            emit(g, "FullyConnected(v%d, num_hidden=8, no_bias=true)", a), w = 8;
        } else if (kind < 15) {
            emit(g, rnd(r, 2) ? "exp(v%d)" : "softmax(v%d)", a);
        } else if (kind < 19) {
            emit(g, "Cast(v%d, %s)", a, casts[rnd(r, 5)]);
        } else {
            emit(g, "Activation(v%d, act_type=\"softrelu\")", a);
            g->movable++; /* a follow op, of a fixed dtype */
        }
        emit(g, "\n");
        for (const char *p = strrchr(g->src, '='); (p = strchr(p, 'v')) != NULL; p++)
            g->read[atoi(p + 1)] = true;
        g->width[g->n++] = w;
    }
    /* every value nothing reads, so that every op written stays */
    emit(g, "    return (v%d", g->n - 1);
    for (int i = 0; i < g->n - 1; i++)
        if (!g->read[i] || rnd(r, 8) == 0)
            emit(g, ", v%d", i);
    emit(g, ")\n}\n");
}

static void test_random_graphs_exact(void **state)
{
    Fx *fx = *state;
    /* AMP_PLACE_GRAPHS=n AMP_PLACE_SEED=s: a longer run */
    const char *ng = getenv("AMP_PLACE_GRAPHS"), *seed = getenv("AMP_PLACE_SEED");
    Rng r = {seed ? strtoull(seed, NULL, 10) | 1 : 0x9E3779B97F4A7C15u};
    for (int i = 0; i < (ng ? atoi(ng) : 300); i++) {
        Gen g;
        random_graph(&r, &g, 1 + rnd(&r, 10));
        check_exact(fx, g.src);
    }
}

/* In a bfloat16 build the user's float16 Casts and fp16 inputs are a third
 * dtype: what follows them is not free. */
static void test_random_graphs_bf16(void **state)
{
    Fx *fx = *state;
    const char *ng = getenv("AMP_PLACE_GRAPHS"), *seed = getenv("AMP_PLACE_SEED");
    Rng r = {seed ? strtoull(seed, NULL, 10) * 3 + 1 : 0xB16B00B5u};
    target = DT_BF16;
    for (int i = 0; i < (ng ? atoi(ng) / 2 : 150); i++) {
        Gen g;
        random_graph(&r, &g, 1 + rnd(&r, 10));
        check_exact(fx, g.src);
    }
    target = DT_F16;
}

static void test_random_graphs_sixteen(void **state)
{
    Fx *fx = *state;
    Rng r = {12345};
    for (int i = 0; i < 3; i++) {
        Gen g;
        random_graph(&r, &g, 16);
        check_exact(fx, g.src);
    }
}

/* The cases of the issue, each smaller than what greedy gives. */
static void test_known_cases(void **state)
{
    Fx *fx = *state;
    static const char *cases[] = {
        /* a follow op on an fp32 value whose 16-bit copy exists */
        "model m(x: float32[N,8,4,4]) {\n"
        "    c = Convolution(x, kernel=(1,1), num_filter=8, no_bias=true)\n"
        "    p = Pooling(x, pool_type=\"max\", kernel=(2,2), stride=(2,2))\n"
        "    return (c, Convolution(p, kernel=(1,1), num_filter=8, no_bias=true))\n"
        "}\n",
        /* Concat of three branches */
        "model m(x: float32[N,8,4,4]) {\n"
        "    y = Concat(Activation(x, act_type=\"relu\"), Convolution(x, kernel=(1,1), num_filter=8),\n"
        "               Pooling(x, pool_type=\"max\", kernel=(3,3), pad=(1,1)), dim=1)\n"
        "    return FullyConnected(y, num_hidden=10)\n"
        "}\n",
        /* a free op whose output the user casts, read by free ops (enumerated) */
        "model m(x: float32[N,8]) {\n"
        "    a = Activation(FullyConnected(x, num_hidden=8), act_type=\"relu\")\n"
        "    c = Cast(a, float32)\n"
        "    return (exp(a), c * 2.0, FullyConnected(a + c, num_hidden=8))\n"
        "}\n",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_exact(fx, cases[i]);
        Graph *t = typed(fx, cases[i]);
        Graph *opt = rewrite(t, AMP_PLACE_OPTIMAL, NULL), *gr = rewrite(t, AMP_PLACE_GREEDY, NULL);
        if (i < 2 && !cheaper(price(opt), price(gr)))
            fail_msg("case %zu: the optimal placement is not cheaper than greedy", i);
        graph_free(opt), graph_free(gr), graph_free(t);
    }
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = NULL;
    *len = 0;
    size_t cap = 0, n;
    do {
        if (*len + 4096 > cap)
            buf = realloc(buf, cap = cap * 2 + 8192);
        assert_non_null(buf);
        n = fread(buf + *len, 1, 4096, f);
        *len += n;
    } while (n > 0);
    fclose(f);
    return buf;
}

/* Every example: the optimal placement never costs more than greedy, each
 * costs what amp reports, and ResNet-50 keeps its 2 casts. */
static void test_examples(void **state)
{
    Fx *fx = *state;
    static const char *files[] = {"examples/digits_cnn.sym",    "examples/fashion_cnn.sym",
                                  "examples/mlp.sym",           "examples/resnet20_cifar.sym",
                                  "examples/resnet50_v1d.sym",  "examples/resnet50_v1d_manual_fp16.sym",
                                  "examples/resnext_mini.sym"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        size_t len;
        char *text = read_file(files[i], &len);
        Graph *t = frontend_elaborate(&fx->d, files[i], text, len, NULL);
        free(text);
        if (!t)
            fail_msg("%s: %s", files[i], diag_text(fx));
        t->info.amp = DT_F16;
        assert_true(infer_shapes(t) && infer_types(t));
        Graph *opt = rewrite(t, AMP_PLACE_OPTIMAL, NULL), *gr = rewrite(t, AMP_PLACE_GREEDY, NULL);
        Price po = price(opt), pg = price(gr);
        if (cheaper(pg, po))
            fail_msg("%s: greedy is cheaper", files[i]);
        check_reported(opt, gr, files[i]);
        check_constraints(t, opt, files[i]);
        if (strstr(files[i], "resnet50_v1d.sym")) {
            int casts = 0;
            for (int j = 0; j < opt->nnodes; j++)
                casts += opt->nodes[j]->op == OP_amp_cast || opt->nodes[j]->op == OP_Cast;
            assert_true(casts <= 2);
        }
        graph_free(opt), graph_free(gr), graph_free(t);
    }
}

/* The result does not depend on the order nodes are stored in. */
static void test_order_independent(void **state)
{
    Fx *fx = *state;
    Rng r = {777};
    for (int i = 0; i < 60; i++) {
        Gen g;
        random_graph(&r, &g, 2 + rnd(&r, 12));
        Graph *t = typed(fx, g.src);
        Graph *a = rewrite(t, AMP_PLACE_OPTIMAL, NULL);
        Graph *s = graph_shuffle(graph_copy(t), 1 + (uint64_t)i);
        Graph *b = rewrite(s, AMP_PLACE_OPTIMAL, NULL);
        for (int j = 0; j < t->nnodes; j++) {
            const Node *n = t->nodes[j];
            const Node *na = graph_find(a, n->name), *nb = graph_find(b, n->name);
            if (n->op == OP_Cast)
                continue; /* of two equal Casts, cast-elide keeps the first stored */
            assert_true(na && nb);
            if (na && na->dtype != nb->dtype)
                fail_msg("%s runs in %s or %s by storage order in\n%s", n->name,
                         dtype_long(na->dtype), dtype_long(nb->dtype), g.src);
        }
        Price pa = price(a), pb = price(b);
        assert_true(pa.conv == pb.conv && pa.wide == pb.wide);
        graph_free(a), graph_free(b), graph_free(s), graph_free(t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_known_cases, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_graphs_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_graphs_bf16, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_graphs_sixteen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_examples, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_independent, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
