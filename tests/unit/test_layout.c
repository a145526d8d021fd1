/* test_layout.c - the target's layouts (passes/layout.c, ir/layout.c) and
 * fusions (passes/fuse.c's target gate), on a small residual CNN compiled
 * through every pass for TARGET_CPU and TARGET_CUDA. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "fixture.h"
#include "passes.h"
#include "plan.h"

static const char *const cnn =
    "model m(data: float32[N,3,8,8], softmax_label: float32[N]) {\n"
    "    c = Convolution(data, kernel=(3,3), pad=(1,1), num_filter=8, no_bias=true, name=\"c1\")\n"
    "    x = Activation(BatchNorm(c, name=\"bn1\"), act_type=\"relu\", name=\"r1\")\n"
    "    y = Convolution(x, kernel=(3,3), pad=(1,1), num_filter=8, no_bias=true, name=\"c2\")\n"
    "    y = BatchNorm(y, name=\"bn2\")\n"
    "    z = Activation(elemwise_add(x, y, name=\"add\"), act_type=\"relu\", name=\"r2\")\n"
    "    p = Pooling(z, kernel=(2,2), stride=(2,2), pool_type=\"max\", name=\"pool\")\n"
    "    f = FullyConnected(Flatten(p), num_hidden=10, name=\"fc\")\n"
    "    return SoftmaxOutput(f, softmax_label, name=\"softmax\")\n"
    "}\n";

static Graph *build(Fx *fx, Target t, const char *amp)
{
    graph_free(fx->g);
    fx->off = strlen(diag_text(fx));
    PassOptions o = {.amp = amp, .target = t};
    fx->g = frontend_compile(&fx->d, "t.sym", cnn, strlen(cnn), &o);
    if (!fx->g)
        fail_msg("compiling failed:\n%s", last_diag(fx));
    if (!ir_verify(fx->g, "schedule"))
        fail_msg("the graph does not verify:\n%s", last_diag(fx));
    return fx->g;
}

static Layout layout_of(const Graph *g, const char *name)
{
    const Node *n = graph_find(g, name);
    if (!n)
        fail_msg("no node named '%s'", name);
    return n->layout;
}

static int count_op(const Graph *g, OpKind k)
{
    int c = 0;
    for (int i = 0; g && i < g->nnodes; i++)
        c += g->nodes[i]->op == k;
    return c;
}

static int count_nhwc(const Graph *g)
{
    int c = 0;
    for (int i = 0; g && i < g->nnodes; i++)
        c += g->nodes[i]->layout != LAYOUT_NCHW;
    return c;
}

/* 16-bit CUDA: the convolutions, the ops between them and the pooling in
 * NHWC, the weights and their gradients KRSC; conversions only at the
 * input, before Flatten, and back for the data gradient from Flatten. */
static void test_cuda_fp16_regions(void **state)
{
    Fx *fx = *state;
    Graph *g = build(fx, TARGET_CUDA, "float16");
    const char *nhwc[] = {"c1", "c2", "r1", "r2", "pool", "c1_weight", "c2_weight"};
    for (size_t i = 0; i < sizeof nhwc / sizeof nhwc[0]; i++)
        if (layout_of(g, nhwc[i]) != LAYOUT_NHWC)
            fail_msg("'%s' is not nhwc", nhwc[i]);
    assert_int_equal(layout_of(g, "fc"), LAYOUT_NCHW);
    assert_int_equal(layout_of(g, "data"), LAYOUT_NCHW);
    assert_int_equal(layout_of(g, "bn1_gamma"), LAYOUT_NCHW);
    /* data -> nhwc, pool -> nchw (for Flatten), its gradient -> nhwc */
    assert_int_equal(count_op(g, OP__layout), 3);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op == OP_grad_of && g->nodes[n->in[1]]->shape.rank == 4)
            assert_int_equal(n->layout, LAYOUT_NHWC);
    }
    /* the inference graph: the same parameters in the same layouts */
    assert_non_null(g->infer);
    assert_int_equal(layout_of(g->infer, "c1_weight"), LAYOUT_NHWC);
    assert_int_equal(layout_of(g->infer, "c2"), LAYOUT_NHWC);
    assert_int_equal(count_op(g->infer, OP__layout), 2);
}

/* fp32, and the CPU target: nothing changes. */
static void test_canonical_elsewhere(void **state)
{
    Fx *fx = *state;
    assert_int_equal(count_nhwc(build(fx, TARGET_CUDA, "off")), 0);
    assert_int_equal(count_op(fx->g, OP__layout), 0);
    assert_int_equal(count_nhwc(build(fx, TARGET_CPU, "float16")), 0);
    assert_int_equal(count_nhwc(fx->g->infer), 0);
    assert_int_equal(count_op(fx->g, OP__layout), 0);
}

/* layout_strip gives back the graph the layouts were chosen on: the same
 * text as --no-schedule's layouts removed, i.e. a CUDA compile without
 * conversions prints like one whose layouts were stripped. */
static void test_strip(void **state)
{
    Fx *fx = *state;
    Graph *g = build(fx, TARGET_CUDA, "float16");
    Graph *s = layout_strip(g);
    assert_int_equal(count_op(s, OP__layout), 0);
    assert_int_equal(count_nhwc(s), 0);
    assert_int_equal(s->nnodes, g->nnodes - count_op(g, OP__layout));
    /* assigned again, the same graph */
    assert_true(layout_assign(&s, TARGET_CUDA));
    char *a = ir_print_string(g), *b = ir_print_string(s);
    assert_string_equal(a, b);
    free(a);
    free(b);
    graph_free(s);
}

/* A fusion is made for CUDA only when the fused ops have CUDA kernels
 * (ir/kernels.def's cuda column); the CPU column is complete. */
static void test_fuse_gate(void **state)
{
    Fx *fx = *state;
    Graph *g = build(fx, TARGET_CPU, "float16");
    assert_true(count_op(g, OP__fused_add_relu) > 0);
    assert_true(count_op(g, OP__fused_cast_SoftmaxOutput) > 0);
    g = build(fx, TARGET_CUDA, "float16");
    static const OpKind fused[] = {
        OP__fused_BatchNorm_relu,     OP__backward_fused_BatchNorm_relu,
        OP__fused_add_relu,           OP__backward_fused_add_relu,
        OP__fused_cast_SoftmaxOutput, OP__backward_fused_SoftmaxOutput_cast};
    for (size_t i = 0; i < sizeof fused / sizeof fused[0]; i++)
        if (count_op(g, fused[i]) && !kernel_row(fused[i])->cuda)
            fail_msg("%s made for CUDA, which has no kernel for it", op_info(fused[i])->name);
    bool add_relu =
        kernel_row(OP__fused_add_relu)->cuda && kernel_row(OP__backward_fused_add_relu)->cuda;
    assert_int_equal(count_op(g, OP__fused_add_relu) > 0, add_relu);
}

/* The checks a dump after schedule is held to. */
static void test_check_refuses(void **state)
{
    Fx *fx = *state;
    Graph *g = build(fx, TARGET_CUDA, "float16");
    Node *pool = graph_find(g, "pool");
    pool->layout = LAYOUT_NCHW; /* reads z, which is nhwc */
    fx->off = strlen(diag_text(fx));
    assert_false(ir_check_rules(g, "schedule"));
    assert_contains(last_diag(fx), "Pooling 'pool' reads 'r2' (input 0) as nchw, but it is nhwc");
    pool->layout = LAYOUT_NHWC;
    Node *fc = graph_find(g, "fc");
    fc->layout = LAYOUT_NHWC;
    fx->off = strlen(diag_text(fx));
    assert_false(ir_check_rules(g, "schedule"));
    assert_contains(last_diag(fx), "'fc' is nhwc but has 2 dimensions");
    fc->layout = LAYOUT_NCHW;
    assert_true(ir_check_rules(g, "schedule"));
    /* before the schedule pass there are no layouts */
    fx->off = strlen(diag_text(fx));
    assert_false(ir_check_rules(g, "fuse"));
    assert_contains(last_diag(fx), "layouts are chosen by the schedule pass");
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_cuda_fp16_regions), T(test_canonical_elsewhere), T(test_strip),
        T(test_fuse_gate),         T(test_check_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
