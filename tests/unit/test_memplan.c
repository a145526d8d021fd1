/* test_memplan.c - the memory planner (passes/memplan.c) and its verifier
 * (ir/plan.c): every example in fp32, fp16 and bf16, in its order and in
 * shuffled topological orders, random DAGs, and hand-made plans the verifier
 * must refuse. */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fixture.h"
#include "../ir/plan.h"
#include "../codegen/codegen.h"
#include "../runtime/rt.h" /* RT_VEC_ALIGN: the kernels' side of the promise */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static Graph *compile(Fx *fx, const char *path, const char *text, size_t len, const char *amp)
{
    PassOptions po = {.amp = amp};
    fx->off = strlen(diag_text(fx));
    Graph *g = frontend_compile(&fx->d, path, text, len, &po);
    if (!g)
        fail_msg("%s: %s", path, last_diag(fx));
    return g;
}

/* Plans g (with and without in-place writes), verifies each plan against
 * g, and checks what the report says. */
static void plan_and_check_one(const Graph *g, const char *what, bool inplace, bool tight)
{
    BufferPlan p;
    memplan(g, inplace, &p);
    char *msg = NULL;
    size_t mlen = 0;
    FILE *err = open_memstream(&msg, &mlen);
    bool ok = memplan_verify(g, &p, err);
    fclose(err);
    if (!ok)
        fail_msg("%s: the verifier refused the plan:\n%s", what, msg);
    free(msg);
    assert_int_equal(p.nsteps, g->nnodes);
    assert_true(p.n > 10);
    if (getenv("MEMPLAN_TEST_VERBOSE"))
        fprintf(stderr, "%s: %d values, arena %lld+%lldN, lower bound %lld+%lldN\n", what, p.n,
                (long long)p.arena.fixed, (long long)p.arena.per_sample,
                (long long)p.lower.fixed, (long long)p.lower.per_sample);
    assert_true(p.arena.per_sample >= p.lower.per_sample);
    assert_true(p.arena.fixed >= p.lower.fixed);
    assert_true(p.unplanned.per_sample >= p.lower.per_sample);
    /* the aim for the training step: within 1.15x of the liveness lower
     * bound (alignment aside); the inference step shares the training
     * step's larger arena, so its own plan is only proved */
    assert_true(!tight || (double)p.arena.per_sample <= 1.15 * (double)p.lower.per_sample + 64.0 * p.n);
    for (int i = 0; i < p.n; i++)
        assert_true(inplace || !p.v[i].in_place);
    plan_free(&p);
}

static void plan_and_check(const Graph *g, const char *what)
{
    plan_and_check_one(g, what, true, true);
    plan_and_check_one(g, what, false, true);
    if (g->infer)
        plan_and_check_one(g->infer, what, true, false);
}

static void test_examples(void **state)
{
    Fx *fx = *state;
    static const char *const ex[] = {"examples/mlp.sym", "examples/digits_cnn.sym",
                                     "examples/fashion_cnn.sym", "examples/resnet20_cifar.sym",
                                     "examples/resnext_mini.sym", "examples/resnet50_v1d.sym",
                                     "examples/resnet50_v1d_manual_fp16.sym"};
    static const char *const amps[] = {"off", "float16", "bfloat16"};
    for (size_t e = 0; e < sizeof ex / sizeof *ex; e++) {
        size_t len;
        char *text = read_file(ex[e], &len);
        for (int a = 0; a < 3; a++) {
            Graph *g = compile(fx, ex[e], text, len, amps[a]);
            char what[128];
            snprintf(what, sizeof what, "%s --amp=%s", ex[e], amps[a]);
            plan_and_check(g, what);
            /* other execution orders: 5 shuffled topological orders */
            for (uint64_t seed = 1; seed <= 5 && e < 5; seed++) {
                Graph *c = graph_shuffle(graph_copy(g), seed);
                snprintf(what, sizeof what, "%s --amp=%s, shuffled (seed %d)", ex[e], amps[a], (int)seed);
                plan_and_check(c, what);
                graph_free(c);
            }
            graph_free(g);
        }
        free(text);
    }
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Random DAGs of dense layers, activations, scaled copies and adds of values
 * made long before (read late and by many). */
static void test_random_dags(void **state)
{
    Fx *fx = *state;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        uint64_t s = seed * 0x9e3779b97f4a7c15ull;
        int nv = 3 + (int)(rng(&s) % 40);
        int *w = malloc(sizeof(int) * (size_t)nv);
        char *src = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&src, &len);
        fprintf(f, "model r(data: float32[N,16], softmax_label: float32[N]) {\n    v0 = data\n");
        w[0] = 16;
        for (int i = 1; i < nv; i++) {
            int j = (int)(rng(&s) % (uint64_t)i), k = (int)(rng(&s) % (uint64_t)i);
            switch (rng(&s) % 4) {
            case 0:
                w[i] = 8 << (rng(&s) % 4);
                fprintf(f, "    v%d = FullyConnected(v%d, num_hidden=%d)\n", i, j, w[i]);
                break;
            case 1:
                w[i] = w[j];
                fprintf(f, "    v%d = Activation(v%d, act_type=\"relu\")\n", i, j);
                break;
            case 2:
                w[i] = w[j];
                fprintf(f, "    v%d = v%d * 0.5\n", i, j);
                break;
            default:
                w[i] = w[j];
                if (w[k] == w[j])
                    fprintf(f, "    v%d = v%d + v%d\n", i, j, k);
                else
                    fprintf(f, "    v%d = v%d + FullyConnected(v%d, num_hidden=%d)\n", i, j, k, w[j]);
            }
        }
        /* every value reaches the loss */
        fprintf(f, "    h = FullyConnected(v0, num_hidden=10)\n");
        for (int i = 1; i < nv; i++)
            fprintf(f, "    h = h + FullyConnected(v%d, num_hidden=10)\n", i);
        fprintf(f, "    return SoftmaxOutput(h, softmax_label)\n}\n");
        fclose(f);
        for (int a = 0; a < 2; a++) {
            Graph *g = compile(fx, "random.sym", src, len, a ? "float16" : "off");
            plan_and_check(g, src);
            graph_free(g);
        }
        free(src);
        free(w);
    }
}

/* ---- hand-made plans ---------------------------------------------------- */

static PlanValue pv(int node, int first, int last, int64_t o0, int64_t o1, int64_t s0, int64_t s1)
{
    return (PlanValue){.node = node, .kind = PV_ARENA, .first = first, .last = last,
                       .offset = {o0, o1}, .size = {s0, s1}};
}

static bool verify2(PlanValue a, PlanValue b, LinExpr arena)
{
    PlanValue v[2] = {a, b};
    BufferPlan p = {.v = v, .n = 2, .nsteps = 10, .arena = arena};
    return memplan_verify(NULL, &p, NULL);
}

static void test_verifier_refuses(void **state)
{
    (void)state;
    LinExpr big = {4096, 4096};
    /* disjoint lifetimes may share bytes */
    assert_true(verify2(pv(0, 0, 2, 0, 0, 128, 0), pv(1, 3, 5, 0, 0, 128, 0), big));
    /* live together, disjoint for every N */
    assert_true(verify2(pv(0, 0, 4, 0, 0, 128, 0), pv(1, 3, 5, 128, 0, 0, 64), big));
    assert_true(verify2(pv(0, 0, 4, 0, 0, 0, 64), pv(1, 3, 5, 0, 64, 64, 0), big));
    /* overlap at N = 1 */
    assert_false(verify2(pv(0, 0, 4, 0, 0, 128, 0), pv(1, 3, 5, 64, 0, 128, 0), big));
    /* one step in common is enough */
    assert_false(verify2(pv(0, 0, 3, 0, 0, 128, 0), pv(1, 3, 5, 0, 0, 128, 0), big));
    /* disjoint at N = 1 and 2, overlapping from N = 3: 64N against [128, 192) */
    assert_false(verify2(pv(0, 0, 4, 0, 0, 0, 64), pv(1, 3, 5, 128, 0, 64, 0), big));
    /* disjoint at N = 1 (a below b) and at N = 4 (b below a), overlapping at N = 3 */
    assert_false(verify2(pv(0, 0, 4, 0, 64, 64, 0), pv(1, 3, 5, 200, 0, 64, 0), big));
    /* alignment of either part */
    assert_false(verify2(pv(0, 0, 2, 32, 0, 64, 0), pv(1, 3, 5, 0, 0, 64, 0), big));
    assert_false(verify2(pv(0, 0, 2, 0, 32, 64, 0), pv(1, 3, 5, 0, 0, 64, 0), big));
    /* outside the arena for large N only */
    assert_false(verify2(pv(0, 0, 2, 0, 0, 0, 64), pv(1, 3, 5, 0, 0, 64, 0), (LinExpr){4096, 0}));
    /* a bad interval */
    assert_false(verify2(pv(0, 3, 2, 0, 0, 64, 0), pv(1, 3, 5, 0, 0, 64, 0), big));
    /* a chain of three where only non-neighbours in time overlap */
    PlanValue v[3] = {pv(0, 0, 9, 0, 0, 64, 0), pv(1, 1, 2, 64, 0, 64, 0), pv(2, 3, 9, 32 * 2, 0, 64, 0)};
    BufferPlan p = {.v = v, .n = 3, .nsteps = 10, .arena = big};
    assert_true(memplan_verify(NULL, &p, NULL));
    v[2].offset.fixed = 0;
    assert_false(memplan_verify(NULL, &p, NULL));
}

/* A real plan, spoiled: two values live together moved onto each other. */
static void test_verifier_refuses_spoiled_plan(void **state)
{
    Fx *fx = *state;
    size_t len;
    char *text = read_file("examples/digits_cnn.sym", &len);
    Graph *g = compile(fx, "examples/digits_cnn.sym", text, len, "float16");
    free(text);
    BufferPlan p;
    memplan(g, true, &p);
    assert_true(memplan_verify(g, &p, NULL));
    int a = -1, b = -1;
    for (int i = 0; i < p.n && b < 0; i++)
        for (int j = i + 1; j < p.n && b < 0; j++)
            if (p.v[i].kind == PV_ARENA && p.v[j].kind == PV_ARENA && p.v[i].size.per_sample &&
                p.v[j].size.per_sample && p.v[i].last >= p.v[j].first)
                a = i, b = j;
    assert_true(b >= 0);
    LinExpr keep = p.v[b].offset;
    p.v[b].offset = p.v[a].offset;
    assert_false(memplan_verify(g, &p, NULL));
    p.v[b].offset = keep;
    /* a lifetime shorter than the graph's reads */
    assert_true(p.v[a].last > p.v[a].first);
    p.v[a].last = p.v[a].first;
    assert_false(memplan_verify(g, &p, NULL));
    plan_free(&p);
    graph_free(g);
}

/* In place: activations, adds and scalar ops write over an input that dies
 * at them (relu's and sigmoid's backward read only y), which saves bytes; a
 * claim the verifier cannot justify is refused. */
static const char inplace_model[] =
    "model m(data: float32[N,3,8,8], softmax_label: float32[N]) {\n"
    "    c1 = Activation(Convolution(data, num_filter=4, kernel=(3,3), pad=(1,1)), act_type=\"relu\")\n"
    "    c2 = Convolution(c1, num_filter=4, kernel=(3,3), pad=(1,1))\n"
    "    t = (c2 + c1) * 0.5\n"
    "    r = Activation(t, act_type=\"sigmoid\")\n"
    "    return SoftmaxOutput(FullyConnected(r, num_hidden=10), softmax_label)\n"
    "}\n";

static int count_in_place(const Graph *g, const BufferPlan *p, OpKind k)
{
    int c = 0;
    for (int i = 0; i < p->n; i++)
        c += p->v[i].in_place && g->nodes[p->v[i].node]->op == k;
    return c;
}

static void test_inplace(void **state)
{
    Fx *fx = *state;
    Graph *g = compile(fx, "inplace.sym", inplace_model, sizeof inplace_model - 1, "off");
    BufferPlan p, q;
    memplan(g, true, &p);
    memplan(g, false, &q);
    assert_true(memplan_verify(g, &p, NULL));
    assert_int_equal(count_in_place(g, &p, OP_Activation), 2);
    assert_true(count_in_place(g, &p, OP_elemwise_add) >= 1); /* and the gradient sum of c1 */
    assert_true(count_in_place(g, &p, OP__mul_scalar) >= 1); /* and its backward, dy * 0.5 */
    assert_true(count_in_place(g, &p, OP__backward_Activation) >= 1);
    assert_true(p.lower.per_sample < q.lower.per_sample);
    assert_true(p.arena.per_sample < q.arena.per_sample);
    /* spoil claims: the input read after the write; another offset; an op
     * whose kernel may not write in place */
    int w = -1, x = -1, conv = -1;
    for (int i = 0; i < p.n; i++) {
        if (w < 0 && p.v[i].in_place && g->nodes[p.v[i].node]->op == OP_Activation)
            w = i;
        if (conv < 0 && g->nodes[p.v[i].node]->op == OP_Convolution)
            conv = i;
    }
    assert_true(w >= 0 && conv >= 0);
    for (int i = 0; i < p.n; i++)
        if (p.v[i].node == p.v[w].overwrites)
            x = i;
    assert_true(x >= 0);
    p.v[x].last++;
    assert_false(memplan_verify(g, &p, NULL));
    p.v[x].last--;
    p.v[w].offset.fixed += 64;
    assert_false(memplan_verify(g, &p, NULL));
    p.v[w].offset.fixed -= 64;
    assert_true(memplan_verify(g, &p, NULL));
    p.v[conv].in_place = true;
    p.v[conv].overwrites = g->nodes[p.v[conv].node]->in[0];
    assert_false(memplan_verify(g, &p, NULL));
    plan_free(&p);
    plan_free(&q);
    graph_free(g);
    /* ResNet-50 v1d: in-place writes never cost bytes */
    size_t len;
    char *text = read_file("examples/resnet50_v1d.sym", &len);
    g = compile(fx, "examples/resnet50_v1d.sym", text, len, "off");
    free(text);
    memplan(g, true, &p);
    memplan(g, false, &q);
    assert_true(p.arena.per_sample <= q.arena.per_sample);
    plan_free(&p);
    plan_free(&q);
    graph_free(g);
}

/* The lowered program of every example, planned and unplanned: it proves
 * itself (program_verify), and its text reads back to the same text. */
static void test_program_round_trip(void **state)
{
    Fx *fx = *state;
    static const char *const ex[] = {"examples/mlp.sym", "examples/digits_cnn.sym",
                                     "examples/resnet20_cifar.sym", "examples/resnext_mini.sym",
                                     "examples/resnet50_v1d.sym"};
    for (size_t e = 0; e < sizeof ex / sizeof *ex; e++) {
        size_t len;
        char *text = read_file(ex[e], &len);
        Graph *g = compile(fx, ex[e], text, len, "float16");
        free(text);
        for (int planned = 0; planned < 2; planned++) {
            BufferPlan tp, ip;
            memplan(g, true, &tp);
            memplan(g->infer, true, &ip);
            CgPlans plans = {&tp, &ip, NULL, TARGET_CPU};
            Program p;
            lower(g, planned ? &plans : NULL, &p);
            assert_true(program_verify(&p, stderr));
            char *a = NULL, *b = NULL;
            size_t alen = 0, blen = 0;
            FILE *f = open_memstream(&a, &alen);
            program_print(f, &p);
            fclose(f);
            int file = diag_add_buffer(&fx->d, "round.prog", a, alen);
            Program q;
            assert_true(program_read(&fx->d, file, &q));
            assert_true(program_verify(&q, stderr));
            f = open_memstream(&b, &blen);
            program_print(f, &q);
            fclose(f);
            assert_int_equal(alen, blen);
            assert_memory_equal(a, b, alen);
            /* a planned program shares bytes: some two buffers have one offset */
            int shared = 0;
            for (int i = 0; planned && !shared && i < q.nbuf; i++)
                for (int j = i + 1; q.buf[i].in_arena && j < q.nbuf; j++)
                    shared += q.buf[j].in_arena && q.buf[i].offset.fixed == q.buf[j].offset.fixed &&
                              q.buf[i].offset.per_sample == q.buf[j].offset.per_sample;
            assert_true(!planned || shared > 0);
            free(a);
            free(b);
            program_free(&p);
            program_free(&q);
            plan_free(&tp);
            plan_free(&ip);
        }
        graph_free(g);
    }
}

/* The memory plan's promise (docs/codegen.md, "Memory plan"), for every
 * buffer of every example, in fp32, fp16 and bf16, for the CPU and the CUDA
 * target (its NHWC layouts and fusions): the program says `align 64`, every
 * arena buffer's offset is a multiple of 16 bytes for every batch (both
 * parts of it), and the rest are the runtime's own allocations (params,
 * inputs, masters: 64-aligned, RT_DEV_ALIGN, which the trainer checks at
 * set-up).  A program text that breaks it is refused. */
static void test_buffers_aligned(void **state)
{
    Fx *fx = *state;
    static const char *const ex[] = {"examples/mlp.sym",
                                     "examples/digits_cnn.sym",
                                     "examples/digits_bf16_adam.sym",
                                     "examples/fashion_cnn.sym",
                                     "examples/resnet20_cifar.sym",
                                     "examples/resnext_mini.sym",
                                     "examples/resnet50_v1d.sym",
                                     "examples/resnet50_v1d_manual_fp16.sym"};
    static const char *const amps[] = {"off", "float16", "bfloat16"};
    int arena_bufs = 0;
    for (size_t e = 0; e < sizeof ex / sizeof *ex; e++) {
        size_t len;
        char *text = read_file(ex[e], &len);
        for (int a = 0; a < 3; a++)
            for (int t = 0; t < 2; t++) {
                PassOptions po = {.amp = amps[a], .target = t ? TARGET_CUDA : TARGET_CPU};
                fx->off = strlen(diag_text(fx));
                Graph *g = frontend_compile(&fx->d, ex[e], text, len, &po);
                if (!g)
                    fail_msg("%s: %s", ex[e], last_diag(fx));
                BufferPlan tp, ip;
                memplan(g, true, &tp);
                memplan(g->infer, true, &ip);
                CgPlans plans = {&tp, &ip, NULL, po.target};
                Program p;
                lower(g, &plans, &p);
                assert_int_equal(p.align, PLAN_ALIGN);
                assert_true(PLAN_ALIGN % PLAN_VEC_ALIGN == 0 && PLAN_VEC_ALIGN == RT_VEC_ALIGN);
                for (int i = 0; i < p.nbuf; i++) {
                    const ProgBuffer *b = &p.buf[i];
                    if (!b->in_arena)
                        continue;
                    arena_bufs++;
                    if (b->offset.fixed % PLAN_VEC_ALIGN || b->offset.per_sample % PLAN_VEC_ALIGN)
                        fail_msg("%s --amp=%s (%s): buffer %d (%s) at %lld+%lldN", ex[e], amps[a],
                                 t ? "cuda" : "cpu", i, b->name, (long long)b->offset.fixed,
                                 (long long)b->offset.per_sample);
                }
                assert_true(program_verify(&p, stderr));
                program_free(&p);
                plan_free(&tp);
                plan_free(&ip);
                graph_free(g);
            }
        free(text);
    }
    assert_true(arena_bufs > 1000);
    /* a program whose arena buffer breaks the promise, and one that claims less */
    static const char *const bad[] = {"# ampc program 1\nmodel \"m\"\narena 128+0N align 64\n"
                                      "buffer 0 value f32 8+0N @8+0N \"v\"\nend\n",
                                      "# ampc program 1\nmodel \"m\"\narena 128+0N align 8\n"
                                      "buffer 0 value f32 8+0N @0+0N \"v\"\nend\n"};
    for (int k = 0; k < 2; k++) {
        int file = diag_add_buffer(&fx->d, "bad.prog", bad[k], strlen(bad[k]));
        Program q;
        char *msg = NULL;
        size_t mlen = 0;
        FILE *err = open_memstream(&msg, &mlen);
        bool read = program_read(&fx->d, file, &q), ok = read && program_verify(&q, err);
        fclose(err);
        assert_false(ok);
        assert_true(!read || strstr(msg, k ? "align 8" : "does not start at a multiple of 64"));
        free(msg);
        program_free(&q);
    }
}

/* name (a function, or the stem of those a family derives) is declared in
 * the header text h */
static bool declared_in(const char *h, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(h, name); p; p = strstr(p + 1, name))
        if ((p == h || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) &&
            (p[n] == '(' || p[n] == '_'))
            return true;
    return false;
}

/* The cuda column: rt_cuda_ + the cpu name without rt_, declared in
 * runtime/cuda/rt_cuda.h, and so is the CUDA twin of the workspace sizer. */
static void check_cuda_names(const KernelRow *r, const char *op, const char *h)
{
    char want[160];
    if (!r->cuda)
        return;
    snprintf(want, sizeof want, "rt_cuda_%s", r->cpu + 3);
    if (strcmp(r->cuda, want) != 0)
        fail_msg("op %s: cuda function %s, not %s", op, r->cuda, want);
    if (!declared_in(h, r->cuda))
        fail_msg("op %s: %s is not declared in runtime/cuda/rt_cuda.h", op, r->cuda);
    if (r->ws) {
        snprintf(want, sizeof want, "rt_cuda_%s", r->ws + 3);
        if (!declared_in(h, want))
            fail_msg("op %s: %s is not declared in runtime/cuda/rt_cuda.h", op, want);
    }
}

/* The kernel binding table (ir/kernels.def): every op but the five that make
 * no call has a row; every function a row names (or the stem of the
 * functions its family derives) is declared in runtime/rt.h, its CUDA twin
 * in runtime/cuda/rt_cuda.h; a mode is an RT_ constant; in place only where
 * the kernel reads what it overwrites. */
static void test_kernel_table(void **state)
{
    (void)state;
    size_t len;
    char *rt = read_file("runtime/rt.h", &len);
    char *rtc = read_file("runtime/cuda/rt_cuda.h", &len);
    int ncuda = 0;
    for (int k = 0; k < OP_COUNT; k++) {
        const KernelRow *r = kernel_row((OpKind)k);
        bool silent = k == OP_Input || k == OP_Param || k == OP_part || k == OP_grad_of ||
                      k == OP_param_master;
        if (r->has == silent)
            fail_msg("op %s: %s", op_info((OpKind)k)->name,
                     silent ? "makes no call but has a kernel row" : "has no kernel row");
        if (silent)
            continue;
        const char *names[2] = {r->cpu, r->ws};
        for (int j = 0; j < 2; j++) {
            if (!names[j])
                continue;
            bool declared = false;
            size_t n = strlen(names[j]);
            for (const char *p = strstr(rt, names[j]); p && !declared; p = strstr(p + 1, names[j]))
                declared = (p == rt || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) &&
                           (p[n] == '(' || p[n] == '_');
            if (!declared)
                fail_msg("op %s: %s is not declared in runtime/rt.h", op_info((OpKind)k)->name,
                         names[j]);
        }
        assert_non_null(r->cpu);
        check_cuda_names(r, op_info((OpKind)k)->name, rtc);
        ncuda += r->cuda != NULL;
        if (r->mode && (strncmp(r->mode, "RT_", 3) != 0 || !strstr(rt, r->mode)))
            fail_msg("op %s: mode %s is not an RT_ constant of runtime/rt.h", op_info((OpKind)k)->name,
                     r->mode);
        assert_true((r->overwrites & r->unread) == 0);
    }
    /* every row has its CUDA twin (issue 11): --target=cuda compiles every op */
    assert_int_equal(ncuda, OP_COUNT - 5);
    free(rt);
    free(rtc);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_verifier_refuses), T(test_verifier_refuses_spoiled_plan),
        T(test_inplace),          T(test_program_round_trip),
        T(test_random_dags),      T(test_examples),
        T(test_buffers_aligned),  T(test_kernel_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
